//! The direct call path ([`TaskDrive::try_call`]) pinned to the general
//! one (every call through the command channel to the driver task): the
//! same calls, alone and concurrent, over the in-memory provider, give the
//! same outcomes (errors included) and the same engine counters on both
//! sides, and the direct path is really taken.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use rpcrdma_proto::engine::{Config, Connection};
use rpcrdma_proto::provider::mem::{self, MemConfig};
use rpcrdma_proto::provider::{ConnectionEvent, Provider};

use crate::rdma::{
    serve_provider, Connected, EngineMetrics, LinkInfo, RdmaClientTransport, RdmaServerConnection,
};
use crate::{
    testprog, CallContext, CallOptions, Client, ClientConfig, ClientIdentity, HandlerError,
    Message, Metrics, Server,
};

/// The slow procedure: waits its argument in milliseconds, then echoes it.
const SLOW_PROG: u32 = 0x2000_5302;

fn link(peer: &str) -> LinkInfo {
    LinkInfo {
        peer: peer.into(),
        ..LinkInfo::default()
    }
}

/// A test-program server and a client transport over an in-memory pair,
/// with fixed first XIDs (so that both runs of a comparison put the same
/// XIDs on the wire).
fn pair() -> (RdmaServerConnection, Arc<RdmaClientTransport>) {
    let mut ccfg = Config::client();
    ccfg.first_xid = 0x5eed_0001;
    let scfg = Config::server();
    let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
    a.connect(ccfg.connect_params()).unwrap();
    assert!(matches!(
        b.poll_event(),
        Some(ConnectionEvent::ConnectRequest { .. })
    ));
    let mut sconn = Connection::new(scfg.clone());
    sconn.prepare_receives(&mut b);
    b.accept(scfg.connect_params()).unwrap();
    let server = Server::default();
    testprog::register(&server);
    server.register(SLOW_PROG, 1, |ctx: CallContext| async move {
        let ms = ctx.args.reader().u32("ms")?;
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
        }
        let mut b = Message::builder();
        b.put_u32(ms);
        Ok::<_, HandlerError>(b.finish())
    });
    let srv = serve_provider(
        Connected {
            provider: Box::new(b),
            info: link("mem-client"),
        },
        sconn,
        scfg,
        server.dispatcher(),
        ClientIdentity(Bytes::from_static(b"mem-client")),
        Arc::new(Metrics::default()),
    );
    let t = RdmaClientTransport::from_connected(
        Connected {
            provider: Box::new(a),
            info: link("mem-server"),
        },
        ccfg,
        None,
        None,
    );
    (srv, t)
}

fn client(t: &Arc<RdmaClientTransport>, timeout: Duration) -> Arc<Client> {
    Arc::new(Client::new(
        t.clone(),
        ClientConfig {
            first_xid: Some(0x0100_0000),
            timeout,
            ..ClientConfig::default()
        },
    ))
}

/// One call of a comparison.
#[derive(Clone, Debug)]
enum Op {
    Null,
    /// Inline, or a Long Call / Reply chunk past 4 KiB.
    Echo(usize),
    /// A Write chunk.
    Read(u32),
    /// A Read chunk.
    Write(usize),
    /// PROC_UNAVAIL from the server.
    NoSuchProc,
    /// Refused by the engine (a reply larger than any message).
    TooLarge,
    /// Refused by the engine (inline arguments not whole XDR items).
    Unaligned,
    /// A handler that waits before it answers (the reply comes from a
    /// spawned handler, through the command channel at the server).
    Slow(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Null),
        2 => (0usize..10_000).prop_map(Op::Echo),
        1 => (0u32..200_000).prop_map(Op::Read),
        1 => (0usize..200_000).prop_map(Op::Write),
        1 => Just(Op::NoSuchProc),
        1 => Just(Op::TooLarge),
        1 => Just(Op::Unaligned),
        1 => (0u32..3).prop_map(Op::Slow),
    ]
}

/// What a call came to, comparable across runs.
async fn run_op(c: &Client, op: &Op) -> String {
    let r: Result<String, crate::RpcError> = async {
        Ok(match op {
            Op::Null => testprog::null(c).await.map(|()| "null".to_string())?,
            Op::Echo(n) => {
                let d = testprog::pattern(*n as u32, *n);
                let got = testprog::echo(c, &d).await?;
                format!("echo {}", got == d)
            }
            Op::Read(n) => {
                let got = testprog::read(c, *n, 3).await?;
                format!("read {}", got[..] == testprog::pattern(3, *n as usize)[..])
            }
            Op::Write(n) => {
                let (count, crc) = testprog::write(c, &testprog::pattern(9, *n)).await?;
                format!("write {count} {crc:08x}")
            }
            Op::NoSuchProc => {
                let r = c
                    .call(testprog::TEST_PROG, 1, 99, Message::new(), &[])
                    .await?;
                format!("{:?}", r.xid)
            }
            Op::TooLarge => {
                let opts = CallOptions {
                    reply_max: Some(u32::MAX),
                    ..CallOptions::default()
                };
                let r = c
                    .call_with(testprog::TEST_PROG, 1, 0, Message::new(), &opts)
                    .await?;
                format!("{:?}", r.xid)
            }
            Op::Unaligned => {
                let args = Message::inline(vec![1u8, 2, 3]);
                let r = c.call(testprog::TEST_PROG, 1, 1, args, &[]).await?;
                format!("{:?}", r.xid)
            }
            Op::Slow(ms) => {
                let mut b = Message::builder();
                b.put_u32(*ms);
                let r = c.call(SLOW_PROG, 1, 1, b.finish(), &[]).await?;
                format!("slow {}", r.reader().u32("ms")?)
            }
        })
    }
    .await;
    match r {
        Ok(s) => s,
        Err(e) => format!("error ({:?}) {e}", e.blame()),
    }
}

/// Everything a run came to: each call's outcome (batch by batch, in
/// call order), the client's and the server's engine counters, and how
/// often the direct path drove and posted.
#[derive(Debug, PartialEq)]
struct Run {
    outcomes: Vec<String>,
    client: EngineMetrics,
    server: EngineMetrics,
}

/// The counters that depend only on what was called, not on when each
/// message was sent: high-water marks depend on how the calls of a batch
/// overlapped at the server (the direct path sends each call at once, the
/// driver task gathers the ones queued meanwhile).
fn comparable(mut m: EngineMetrics) -> EngineMetrics {
    m.max_reads_in_flight = 0;
    m.max_read_sink_bytes = 0;
    m
}

/// Lets the driver tasks (spawned, not yet polled) start: until then
/// callers queue their calls.
async fn started() {
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

/// Runs `batches` (the calls of a batch at once, each in a task of its
/// own; batch after batch) over a fresh pair, with the direct path on or
/// off.
async fn run(batches: &[Vec<Op>], channel_only: bool) -> (Run, u64, u64) {
    let (srv, t) = pair();
    let drive = t.drive().expect("a task shell");
    drive
        .test
        .channel_only
        .store(channel_only, Ordering::Relaxed);
    let c = client(&t, Duration::from_secs(30));
    started().await;
    let mut outcomes = Vec::new();
    for batch in batches {
        let mut set = tokio::task::JoinSet::new();
        for (i, op) in batch.iter().enumerate() {
            let (c, op) = (c.clone(), op.clone());
            set.spawn(async move { (i, run_op(&c, &op).await) });
        }
        let mut got = set.join_all().await;
        got.sort();
        outcomes.extend(got.into_iter().map(|(_, s)| s));
    }
    let run = Run {
        outcomes,
        client: comparable(t.status().engine),
        server: comparable(srv.status().engine),
    };
    let counts = (
        drive.test.driven.load(Ordering::Relaxed),
        drive.test.posted.load(Ordering::Relaxed),
    );
    t.shutdown().await;
    srv.shutdown().await;
    (run, counts.0, counts.1)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_direct_path_gives_what_the_channel_gives(
        batches in prop::collection::vec(prop::collection::vec(op(), 1..6), 1..6)
    ) {
        let rt = runtime();
        let ((direct, driven, posted), (general, g_driven, g_posted)) = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), async {
                (run(&batches, false).await, run(&batches, true).await)
            })
            .await
            .expect("bounded")
        });
        prop_assert_eq!(&direct, &general);
        // The general run never took the direct path; the direct run drove
        // the calls it started while nothing else was outstanding, and
        // posted the others.
        prop_assert_eq!((g_driven, g_posted), (0, 0));
        prop_assert!(driven >= 1, "the direct path was never taken");
        prop_assert!(driven + posted <= batches.iter().map(|b| b.len() as u64).sum::<u64>());
    }
}

/// Timeouts pinned too: a call the driver ends at its deadline (its late
/// reply dropped) times out the same way on both paths, and the next call
/// on the connection gets its own reply.
#[test]
fn a_timeout_on_the_direct_path_is_the_channel_s_timeout() {
    let rt = runtime();
    rt.block_on(async {
        let mut seen = Vec::new();
        for channel_only in [false, true] {
            let (srv, t) = pair();
            let drive = t.drive().unwrap();
            drive
                .test
                .channel_only
                .store(channel_only, Ordering::Relaxed);
            let c = client(&t, Duration::from_millis(30));
            started().await;
            // The server's grant comes with the first reply (until then the
            // one credit would be the slow call's).
            assert_eq!(run_op(&c, &Op::Null).await, "null");
            let slow = run_op(&c, &Op::Slow(300)).await;
            let next = run_op(&c, &Op::Null).await;
            // The late reply comes and is dropped (not matched to `next`).
            tokio::time::sleep(Duration::from_millis(400)).await;
            let after = run_op(&c, &Op::Echo(10)).await;
            seen.push((slow, next, after, c.metrics().timeouts));
            if !channel_only {
                assert_eq!(drive.test.driven.load(Ordering::Relaxed), 4);
            }
            t.shutdown().await;
            srv.shutdown().await;
        }
        assert!(seen[0].0.contains("no reply to xid"), "{:?}", seen[0]);
        assert_eq!(seen[0].1, "null");
        assert_eq!(seen[0].2, "echo true");
        assert_eq!(seen[0], seen[1]);
    });
}

/// A caller whose future sent its call directly and is then neither polled
/// nor dropped leaves the connection to the driver task: other callers'
/// calls go on, and the forgotten call's reply waits for it.
#[test]
fn a_caller_never_polled_again_starves_nobody() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let drive = t.drive().unwrap();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        let mut first = Box::pin(testprog::echo(&c, b"left alone"));
        // One poll: the call goes out on this task's poll, and waits.
        let polled =
            std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx).is_pending())).await;
        assert!(polled, "the reply cannot be there at once");
        assert_eq!(drive.test.driven.load(Ordering::Relaxed), 1);
        // Others call meanwhile, from other tasks.
        let mut set = tokio::task::JoinSet::new();
        for i in 0..20u32 {
            let c = c.clone();
            set.spawn(async move { testprog::read(&c, 1000 + i, i).await.map(|d| d.len()) });
        }
        for r in set.join_all().await {
            assert!(r.unwrap() >= 1000);
        }
        // Polled again at last: its reply was kept.
        assert_eq!(&first.await.unwrap()[..], b"left alone");
        t.shutdown().await;
        srv.shutdown().await;
    });
}

/// A call future dropped after its call went out directly: the connection
/// forgets nothing it needs, the late reply goes nowhere, and later calls
/// get their own replies.
#[test]
fn a_dropped_call_future_disturbs_no_later_call() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        {
            let mut f = Box::pin(run_op(&c, &Op::Slow(50)));
            let pending =
                std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_pending())).await;
            assert!(pending);
            assert!(t.drive().unwrap().is_delegated());
        }
        // Dropped: the wake-ups are the driver task's again.
        assert!(!t.drive().unwrap().is_delegated());
        for n in [0usize, 100, 5000] {
            assert_eq!(run_op(&c, &Op::Echo(n)).await, "echo true");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(run_op(&c, &Op::Slow(1)).await, "slow 1");
        let m = c.metrics();
        assert_eq!(m.timeouts, 0);
        t.shutdown().await;
        srv.shutdown().await;
    });
}

/// A caller on another runtime (its own thread) only posts its calls: the
/// driver task sends them and delivers the replies.
#[test]
fn a_caller_on_another_runtime_posts_its_calls() {
    let rt = runtime();
    let (srv, t, c) = rt.block_on(async {
        let (srv, t) = pair();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        (srv, t, c)
    });
    let drive = t.drive().unwrap();
    // The connection's runtime keeps running (its driver tasks) while the
    // other thread calls.
    let stop = Arc::new(tokio::sync::Notify::new());
    let caller = {
        let (c, stop) = (c.clone(), stop.clone());
        std::thread::spawn(move || {
            let r = runtime().block_on(async {
                let mut out = Vec::new();
                for n in [0usize, 10, 3000] {
                    out.push(run_op(&c, &Op::Echo(n)).await);
                }
                out
            });
            stop.notify_one();
            r
        })
    };
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), stop.notified())
            .await
            .expect("bounded");
    });
    assert_eq!(caller.join().unwrap(), vec!["echo true"; 3]);
    // Never driven from there: posted, or queued when the driver task held
    // the connection (it may still be in the round that delivered the
    // previous reply when the caller starts the next call).
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    assert_eq!(load(&drive.test.driven), 0);
    assert_eq!(load(&drive.test.posted) + load(&drive.test.queued), 3);
    rt.block_on(async {
        t.shutdown().await;
        srv.shutdown().await;
    });
}

/// A lone caller's reply: its waiting future, woken in the driver task's
/// place, makes the round that receives it (the driver task does next to
/// nothing), and every outcome is the channel path's.
#[test]
fn a_lone_caller_makes_the_round_of_its_own_reply() {
    let rt = runtime();
    rt.block_on(async {
        let ops = [
            Op::Null,
            Op::Echo(100),
            Op::Echo(6000),
            Op::Read(20_000),
            Op::Write(30_000),
            Op::NoSuchProc,
            Op::Slow(2),
            Op::TooLarge,
            Op::Null,
        ];
        let mut seen = Vec::new();
        for channel_only in [false, true] {
            let (srv, t) = pair();
            let drive = t.drive().unwrap();
            drive
                .test
                .channel_only
                .store(channel_only, Ordering::Relaxed);
            let c = client(&t, Duration::from_secs(30));
            started().await;
            let before = drive.test.driver_rounds.load(Ordering::Relaxed);
            let mut out = Vec::new();
            for _ in 0..3 {
                for op in &ops {
                    out.push(run_op(&c, op).await);
                    // Done: the wake-ups are the driver task's again.
                    assert!(!drive.is_delegated());
                }
            }
            let waited = drive.test.waited.load(Ordering::Relaxed);
            let driver = drive.test.driver_rounds.load(Ordering::Relaxed) - before;
            let calls = 3 * ops.len() as u64;
            if channel_only {
                assert_eq!(waited, 0);
            } else {
                // Every reply but the refused calls' (no reply to wait
                // for) came by the waiter's own rounds; the driver task
                // only served the slow handler's timer and Read-chunk
                // steps the waiter was not woken for.
                assert!(waited >= calls - 3, "waited {waited} of {calls}");
                assert!(driver < calls / 2, "driver task rounds {driver}");
            }
            seen.push((out, comparable(t.status().engine)));
            t.shutdown().await;
            srv.shutdown().await;
        }
        assert_eq!(seen[0], seen[1]);
    });
}

/// Many callers on a runtime of two workers, each making calls in a loop:
/// lone callers take the connection's wake-ups and give them back as
/// others come (on other threads, at any moment); every call gets its own
/// reply, on both paths.
#[test]
fn waiting_callers_on_two_workers_each_get_their_own_reply() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for channel_only in [false, true] {
            let (srv, t) = pair();
            let drive = t.drive().unwrap();
            drive
                .test
                .channel_only
                .store(channel_only, Ordering::Relaxed);
            let c = client(&t, Duration::from_secs(30));
            started().await;
            let mut set = tokio::task::JoinSet::new();
            for w in 0..6u32 {
                let c = c.clone();
                set.spawn(async move {
                    for i in 0..40u32 {
                        let n = ((w * 41 + i * 7) % 300) as usize;
                        let d = testprog::pattern(w * 1000 + i, n);
                        let got = testprog::echo(&c, &d).await.map_err(|e| e.to_string())?;
                        if got != d {
                            return Err(format!("worker {w} call {i}: another reply"));
                        }
                        if i % 8 == 0 {
                            // Alone now and then.
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    Ok::<_, String>(())
                });
            }
            let all = tokio::time::timeout(Duration::from_secs(60), set.join_all())
                .await
                .expect("bounded");
            for r in all {
                r.unwrap();
            }
            assert!(!drive.is_delegated());
            t.shutdown().await;
            srv.shutdown().await;
        }
    });
}

/// A lone caller polled once (its wake-ups delegated to it) and then
/// neither polled nor dropped: a command (the close) takes the wake-ups
/// back, so the shutdown completes and the call fails as closed.
#[test]
fn a_waiter_never_polled_again_does_not_hold_up_a_close() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let drive = t.drive().unwrap();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        assert_eq!(run_op(&c, &Op::Null).await, "null");
        let mut first = Box::pin(run_op(&c, &Op::Slow(20)));
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        assert!(drive.is_delegated());
        // The reply comes meanwhile; nobody polls the waiter.
        tokio::time::sleep(Duration::from_millis(60)).await;
        tokio::time::timeout(Duration::from_secs(10), t.shutdown())
            .await
            .expect("the close reached the driver task");
        assert!(!drive.is_delegated());
        // Polled at last: the reply came before the close, or the close
        // failed it; either way it ends.
        let got = tokio::time::timeout(Duration::from_secs(10), first)
            .await
            .expect("ends");
        assert!(
            got == "slow 20" || got.contains("closed"),
            "unexpected outcome {got}"
        );
        srv.shutdown().await;
    });
}

/// The server goes away while a lone caller waits on its delegated
/// wake-ups: the caller learns of the loss as the channel path's caller
/// does.
#[test]
fn a_connection_lost_under_a_waiter_fails_its_call_as_the_channel_does() {
    let rt = runtime();
    rt.block_on(async {
        let mut seen = Vec::new();
        for channel_only in [false, true] {
            let (srv, t) = pair();
            let drive = t.drive().unwrap();
            drive
                .test
                .channel_only
                .store(channel_only, Ordering::Relaxed);
            let c = client(&t, Duration::from_secs(30));
            started().await;
            assert_eq!(run_op(&c, &Op::Null).await, "null");
            let call = {
                let (c, t) = (c.clone(), t.clone());
                tokio::spawn(async move {
                    let got = run_op(&c, &Op::Slow(400)).await;
                    // Looked at the moment the caller hears of the loss.
                    (got, crate::ClientTransport::closed_reason(&*t))
                })
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(drive.is_delegated(), !channel_only);
            srv.shutdown().await;
            let (got, why) = tokio::time::timeout(Duration::from_secs(10), call)
                .await
                .expect("bounded")
                .unwrap();
            assert!(got.starts_with("error (Transport)"), "{got}");
            // No reconnection follows: the transport is already closed,
            // lost, when its caller learns the call was.
            assert!(
                matches!(why, Some(crate::TransportError::Lost(_))),
                "{why:?}"
            );
            seen.push(got);
            t.shutdown().await;
        }
        assert_eq!(seen[0], seen[1]);
    });
}

/// How often waiters looked at the connection, and took its wake-ups.
fn looks_and_delegations(drive: &crate::rdma::task::TaskDrive) -> (u64, u64) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    (
        load(&drive.test.waiter_looks),
        load(&drive.test.delegations),
    )
}

/// `n` NULL calls one after the other, each one's waiter delegated.
async fn lone_calls_are_delegated(c: &Client, drive: &crate::rdma::task::TaskDrive, n: u64) {
    let before = looks_and_delegations(drive);
    for _ in 0..n {
        assert_eq!(run_op(c, &Op::Null).await, "null");
    }
    let after = looks_and_delegations(drive);
    assert!(
        after.1 - before.1 >= n,
        "lone calls delegated: {before:?} -> {after:?}"
    );
}

/// Many calls in flight (32 callers on the connection's runtime, each
/// calling in a loop): their waiters leave the connection to the driver
/// task without a look at it (no lock per poll) and never take its
/// wake-ups, but for the few calls at the start and the end of the run
/// that are alone; a lone caller before and after takes them on every
/// call. (Before the waiters were counted every poll took the lock, and
/// depth 32 lost a third of its calls/s.)
#[test]
fn with_many_calls_in_flight_no_waiter_looks_at_the_connection() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let drive = t.drive().unwrap();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        let counts = || looks_and_delegations(&drive);
        lone_calls_are_delegated(&c, &drive, 10).await;
        let before = counts();
        let (callers, each) = (32u32, 30u32);
        let mut set = tokio::task::JoinSet::new();
        for w in 0..callers {
            let c = c.clone();
            set.spawn(async move {
                for i in 0..each {
                    let d = testprog::pattern(w * 1000 + i, 8 + (i % 5) as usize);
                    let got = testprog::echo(&c, &d).await.map_err(|e| e.to_string())?;
                    if got != d {
                        return Err(format!("caller {w} call {i}: another reply"));
                    }
                }
                Ok::<_, String>(())
            });
        }
        let all = tokio::time::timeout(Duration::from_secs(60), set.join_all())
            .await
            .expect("bounded");
        for r in all {
            r.unwrap();
        }
        let (looks, delegations) = (counts().0 - before.0, counts().1 - before.1);
        let calls = u64::from(callers * each);
        assert!(
            looks * 10 <= calls,
            "{looks} looks at the connection by waiters in {calls} calls"
        );
        assert!(
            delegations * 10 <= calls,
            "{delegations} delegations in {calls} calls"
        );
        assert!(!drive.is_delegated());
        assert_eq!(drive.waiter_count(), 0);
        lone_calls_are_delegated(&c, &drive, 10).await;
        t.shutdown().await;
        srv.shutdown().await;
    });
}

/// A lone call's waiter takes the connection's wake-ups as its call
/// starts (under the lock the start holds): its first poll goes straight
/// to its slot, and only the poll its reply wakes looks at the connection
/// (two looks per call before).
#[test]
fn a_lone_call_s_waiter_is_delegated_as_its_call_starts() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let drive = t.drive().unwrap();
        let c = client(&t, Duration::from_secs(30));
        started().await;
        let n = 20;
        let before = looks_and_delegations(&drive);
        lone_calls_are_delegated(&c, &drive, n).await;
        let looks = looks_and_delegations(&drive).0 - before.0;
        assert!(
            looks <= n,
            "{looks} looks at the connection in {n} lone calls"
        );
        assert!(!drive.is_delegated());
        assert_eq!(drive.waiter_count(), 0);
        t.shutdown().await;
        srv.shutdown().await;
    });
}

/// A NULL call of the test program, XID `xid`, AUTH_NONE.
fn null_header(xid: u32) -> Vec<u8> {
    let words = [xid, 0, 2, testprog::TEST_PROG, 1, 0, 0, 0, 0, 0];
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A waiter delegated at its call's start for one waker and polled by
/// another (a task that never polls it is never woken): that poll takes
/// the wake-ups for its own waker, and the reply reaches it.
#[test]
fn a_waiter_polled_by_another_waker_than_its_start_s_gets_its_reply() {
    let rt = runtime();
    rt.block_on(async {
        let (srv, t) = pair();
        let drive = t.drive().unwrap();
        started().await;
        let args = Message::new();
        let call = crate::transport::AttemptRef {
            xid: 0x77,
            header: std::borrow::Cow::Owned(null_header(0x77)),
            args: &args,
            reply_max: 4096,
            ddp_results: &[],
        };
        let now = std::time::Instant::now();
        let deadline = Some(now + Duration::from_secs(30));
        let noop = std::task::Waker::noop();
        let mut wait = t.start_call_waiting(call, deadline, now, noop).unwrap();
        assert!(drive.is_delegated());
        // (A timeout polls its future once more when it fires: the time
        // taken tells whether the reply woke the waiter.)
        let t0 = std::time::Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(10), &mut wait)
            .await
            .expect("bounded");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the reply did not wake the waiter that polls"
        );
        let reply = got.expect("an outcome").expect("a reply");
        assert_eq!(reply.reader().u32("xid").unwrap(), 0x77);
        assert!(!drive.is_delegated());
        drop(wait);
        assert_eq!(drive.waiter_count(), 0);
        t.shutdown().await;
        srv.shutdown().await;
    });
}
