//! Blocking mode over real loopback software iWARP (127.0.0.1 only): the
//! blocking client ([`RdmaBlockingClient`]) and the server's
//! thread-per-connection mode ([`RdmaServerConfig::blocking`]), each with
//! the other mode on the other side too: every message class, RPC errors,
//! handlers that wait (their replies come from another thread), timeouts
//! and connection loss.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::rdma::{
    connect_client, RdmaBlockingClient, RdmaClientConfig, RdmaServer, RdmaServerConfig,
};
use rpcrdma::testprog::{self, blocking as tb, TEST_PROG, TEST_VERS};
use rpcrdma::{CallOptions, ClientConfig, Message, ReplyError, RpcError};

const LIMIT: Duration = Duration::from_secs(60);

mod slowprog;
use slowprog::{server, SLOW_PROG};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn serve(rt: &tokio::runtime::Runtime, blocking: bool) -> RdmaServer {
    let s = server();
    rt.block_on(RdmaServer::serve(
        &s,
        "127.0.0.1:0",
        RdmaServerConfig {
            blocking,
            ..RdmaServerConfig::default()
        },
    ))
    .expect("bind")
}

fn blocking_client(rdma: &RdmaServer, config: ClientConfig) -> RdmaBlockingClient {
    RdmaBlockingClient::connect(rdma.local_addr(), config, RdmaClientConfig::default())
        .expect("connect")
}

fn slow(c: &mut RdmaBlockingClient, ms: u32, timeout: Option<Duration>) -> Result<u32, RpcError> {
    let mut b = Message::builder();
    b.put_u32(ms);
    let opts = CallOptions {
        timeout,
        ..CallOptions::default()
    };
    let r = c.call_with(SLOW_PROG, 1, 1, b.finish(), &opts)?;
    let v = r.reader().u32("ms")?;
    Ok(v)
}

/// Runs `f` on a thread and fails the test if it takes longer than LIMIT
/// (a lost wake-up would otherwise hang the test).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT).expect("test timed out")
}

fn every_message_class(c: &mut RdmaBlockingClient) {
    tb::null(c).unwrap();
    // Short inline echo, then a Long Call and a Reply chunk (10 KB > 4 KB
    // inline both ways).
    assert_eq!(&tb::echo(c, b"hello").unwrap()[..], b"hello");
    let big = testprog::pattern(3, 10_000);
    assert_eq!(&tb::echo(c, &big).unwrap()[..], &big[..]);
    // 1 MiB of results through a Write chunk, 1 MiB of arguments through
    // a Read chunk.
    let data = tb::read(c, 1 << 20, 5).unwrap();
    assert_eq!(&data[..], &testprog::pattern(5, 1 << 20)[..]);
    let arg = testprog::pattern(9, 1 << 20);
    let (n, crc) = tb::write(c, &arg).unwrap();
    assert_eq!((n, crc), (1 << 20, crc32c::crc32c(&arg)));
    // RPC errors come back as replies; the connection stays usable.
    let e = c
        .call(TEST_PROG, TEST_VERS, 99, Message::new(), &[])
        .unwrap_err();
    assert_eq!(e.reply_error(), Some(ReplyError::ProcUnavail));
    let e = c.call(0x2000_9999, 1, 0, Message::new(), &[]).unwrap_err();
    assert_eq!(e.reply_error(), Some(ReplyError::ProgUnavail));
    tb::null(c).unwrap();
    let st = c.status();
    assert_eq!(st.engine.write_chunks, 1, "{st:?}");
    assert!(st.engine.read_chunks >= 2, "{st:?}"); // long call + write
                                                   // The echo's, and the two calls without a stated reply size (the
                                                   // client's default reply_max exceeds the inline threshold).
    assert_eq!(st.engine.reply_chunks, 3, "{st:?}");
    assert_eq!(st.engine.long_calls, 1, "{st:?}");
    assert_eq!(st.engine.long_replies, 1, "{st:?}");
    assert_eq!(st.credits, 64);
    let m = c.metrics();
    assert_eq!(m.calls_sent, 8);
    assert_eq!(m.replies_received, 8);
    assert_eq!(m.err_proc_unavail, 1);
}

#[test]
fn blocking_client_against_both_server_modes_every_message_class() {
    let rt = rt();
    for blocking_server in [false, true] {
        let rdma = serve(&rt, blocking_server);
        let addr = rdma.local_addr();
        bounded(move || {
            let mut c =
                RdmaBlockingClient::connect(addr, ClientConfig::default(), Default::default())
                    .unwrap();
            every_message_class(&mut c);
            c.close();
        });
        rt.block_on(rdma.shutdown());
    }
}

#[test]
fn async_client_against_a_blocking_server_with_concurrent_calls() {
    let rt = rt();
    let rdma = serve(&rt, true);
    rt.block_on(async {
        let (c, t) = connect_client(
            rdma.local_addr(),
            ClientConfig::default(),
            RdmaClientConfig::default(),
        )
        .await
        .unwrap();
        let c = Arc::new(c);
        let data = testprog::read(&c, 300_000, 4).await.unwrap();
        assert_eq!(&data[..], &testprog::pattern(4, 300_000)[..]);
        // 32 calls in flight on one connection, answered by one thread.
        let mut set = tokio::task::JoinSet::new();
        for i in 0..32u32 {
            let c = c.clone();
            set.spawn(async move {
                let d = testprog::pattern(i, 100 + i as usize * 50);
                let got = testprog::echo(&c, &d).await.unwrap();
                assert_eq!(&got[..], &d[..]);
            });
        }
        tokio::time::timeout(LIMIT, async {
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
        })
        .await
        .expect("timed out");
        assert!(t.status().engine.write_chunks >= 1);
        t.shutdown().await;
    });
    rt.block_on(rdma.shutdown());
}

/// A handler that waits is spawned on the runtime; its reply is queued by
/// a runtime worker thread, which must wake the connection's thread (no
/// fallback tick exists in blocking mode: a lost wake-up hangs the call).
#[test]
fn blocking_server_replies_from_handlers_that_wait() {
    let rt = rt();
    let rdma = serve(&rt, true);
    let addr = rdma.local_addr();
    let calls = Arc::new(AtomicU32::new(0));
    let calls2 = calls.clone();
    bounded(move || {
        let mut c =
            RdmaBlockingClient::connect(addr, ClientConfig::default(), Default::default()).unwrap();
        for ms in [1u32, 5, 0, 20, 1, 2, 3] {
            let t0 = Instant::now();
            assert_eq!(slow(&mut c, ms, None).unwrap(), ms);
            assert!(t0.elapsed() >= Duration::from_millis(u64::from(ms)));
            calls2.fetch_add(1, Ordering::Relaxed);
            // Interleaved with calls answered inline.
            tb::null(&mut c).unwrap();
        }
    });
    assert_eq!(calls.load(Ordering::Relaxed), 7);
    // And the same from an async client with several waiting at once.
    rt.block_on(async {
        let (c, t) = connect_client(addr, ClientConfig::default(), RdmaClientConfig::default())
            .await
            .unwrap();
        let c = Arc::new(c);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8u32 {
            let c = c.clone();
            set.spawn(async move {
                let mut b = Message::builder();
                b.put_u32(10 + i);
                let r = c.call(SLOW_PROG, 1, 1, b.finish(), &[]).await.unwrap();
                assert_eq!(r.reader().u32("ms").unwrap(), 10 + i);
            });
        }
        tokio::time::timeout(LIMIT, async {
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
        })
        .await
        .expect("timed out");
        t.shutdown().await;
    });
    rt.block_on(rdma.shutdown());
}

#[test]
fn blocking_client_timeout_retransmission_and_late_reply() {
    let rt = rt();
    let rdma = serve(&rt, false);
    let addr = rdma.local_addr();
    bounded(move || {
        let config = ClientConfig {
            timeout: Duration::from_millis(100),
            ..ClientConfig::default()
        };
        let mut c = RdmaBlockingClient::connect(addr, config, Default::default()).unwrap();
        // Learn the server's grant first: until the first reply a client
        // has one credit (RFC 8166 section 3.3.3), which the slow call
        // would hold.
        tb::null(&mut c).unwrap();
        let t0 = Instant::now();
        let e = slow(&mut c, 400, None).unwrap_err();
        assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(
            t0.elapsed() < Duration::from_millis(390),
            "{:?}",
            t0.elapsed()
        );
        // The late reply arrives while the next calls run: dropped, not
        // mistaken for theirs.
        for _ in 0..50 {
            tb::null(&mut c).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(slow(&mut c, 5, Some(Duration::from_secs(10))).unwrap(), 5);
        let m = c.metrics();
        assert_eq!(m.timeouts, 1);
        assert!(c.closed_reason().is_none());
        // With a retransmission allowed: two transmissions, then the
        // timeout.
        let config = ClientConfig {
            timeout: Duration::from_millis(60),
            retries: 1,
            ..ClientConfig::default()
        };
        let mut c = RdmaBlockingClient::connect(addr, config, Default::default()).unwrap();
        tb::null(&mut c).unwrap();
        let e = slow(&mut c, 400, None).unwrap_err();
        assert!(matches!(e, RpcError::Timeout { attempts: 2, .. }), "{e}");
        assert_eq!(c.metrics().retransmits, 1);
        tb::null(&mut c).unwrap();
    });
    rt.block_on(rdma.shutdown());
}

#[test]
fn blocking_client_sees_the_connection_end() {
    let rt = rt();
    let rdma = serve(&rt, true);
    let mut c = blocking_client(&rdma, ClientConfig::default());
    tb::null(&mut c).unwrap();
    rt.block_on(rdma.shutdown());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut errs = Vec::new();
        // The loss may be seen by the first call or by the next one.
        for _ in 0..3 {
            match tb::null(&mut c) {
                Ok(()) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => errs.push(e),
            }
        }
        let _ = tx.send((errs, t0.elapsed(), c.closed_reason()));
    });
    let (errs, took, reason) = rx.recv_timeout(LIMIT).expect("hung on a lost connection");
    assert!(!errs.is_empty());
    assert!(
        errs.iter().all(|e| matches!(e, RpcError::Transport(_))),
        "{errs:?}"
    );
    assert!(reason.is_some());
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// A blocking server's connection publishes its state at most once per
/// millisecond before it sleeps (not before every sleep): a burst of calls
/// is still all in its status soon after the connection goes idle, and
/// nothing is published before the connection has any state at all.
#[test]
fn a_blocking_servers_status_catches_up_after_a_burst() {
    let rt = rt();
    let rdma = serve(&rt, true);
    let calls = bounded({
        let addr = rdma.local_addr();
        move || {
            let mut c =
                RdmaBlockingClient::connect(addr, ClientConfig::default(), Default::default())
                    .expect("connect");
            for _ in 0..200 {
                tb::null(&mut c).unwrap();
            }
            c
        }
    });
    // Idle now: the held-back state is published within the receive
    // call's tick (50 ms) and the interval; allow a loaded machine 10 s.
    let t0 = Instant::now();
    let served = loop {
        let n: u64 = rdma
            .connections()
            .iter()
            .map(|s| s.engine.calls_received)
            .sum();
        if n == 200 || t0.elapsed() > Duration::from_secs(10) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(served, 200);
    drop(calls);
    rt.block_on(rdma.shutdown());
}
