//! The TCP client's slot path ([`TcpClientTransport::start_call_waiting`]:
//! each reply into a reused slot instead of a `oneshot`) pinned to the
//! general path (the same transport behind a wrapper that hides it, so the
//! client takes the `oneshot` path): same outcomes, alone and concurrent,
//! with timeouts, dropped futures and a lost connection.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::*;
use crate::testprog;
use crate::{CallContext, Client, ClientConfig, HandlerError, Server};

/// The slow procedure: waits its argument in milliseconds, then echoes it.
const SLOW_PROG: u32 = 0x2000_5303;

/// The same connection, without `as_tcp`: the client's general path.
struct General(Arc<TcpClientTransport>);

impl ClientTransport for General {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        self.0.send_call(call)
    }
    fn send_call_until(
        &self,
        call: OutgoingCall,
        deadline: Instant,
    ) -> Result<(ReplyReceiver, bool), TransportError> {
        self.0.send_call_until(call, deadline)
    }
    fn cancel(&self, xid: u32) {
        self.0.cancel(xid)
    }
    fn set_backchannel(&self, d: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        self.0.set_backchannel(d)
    }
    fn close(&self) {
        self.0.close()
    }
    fn closed_reason(&self) -> Option<TransportError> {
        self.0.closed_reason()
    }
    fn metrics(&self) -> Arc<Metrics> {
        self.0.metrics()
    }
    fn name(&self) -> &'static str {
        "tcp"
    }
}

async fn server() -> (Server, TcpServer) {
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
    let tcp = server
        .serve_tcp("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    (server, tcp)
}

/// A client on `addr`, on the general path or not, with its transport.
async fn client(
    addr: SocketAddr,
    general: bool,
    timeout: Duration,
) -> (Arc<Client>, Arc<TcpClientTransport>) {
    let t = TcpClientTransport::connect(addr, TcpConfig::default())
        .await
        .unwrap();
    let transport: Arc<dyn ClientTransport> = if general {
        Arc::new(General(t.clone()))
    } else {
        t.clone()
    };
    let config = ClientConfig {
        first_xid: Some(0x0200_0000),
        timeout,
        ..ClientConfig::default()
    };
    (Arc::new(Client::new(transport, config)), t)
}

/// One call, as a comparable string.
async fn op(c: &Client, kind: u32, n: usize) -> String {
    let r: Result<String, crate::RpcError> = async {
        Ok(match kind % 5 {
            0 => testprog::null(c).await.map(|()| "null".to_string())?,
            1 => {
                let d = testprog::pattern(n as u32, n);
                format!("echo {}", testprog::echo(c, &d).await? == d)
            }
            2 => {
                let got = testprog::read(c, n as u32, 5).await?;
                format!("read {}", got[..] == testprog::pattern(5, n)[..])
            }
            3 => {
                let r = c
                    .call(testprog::TEST_PROG, 1, 99, Message::new(), &[])
                    .await?;
                format!("{:?}", r.xid)
            }
            _ => {
                let mut b = Message::builder();
                b.put_u32(n as u32);
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Calls one after another (large replies over several reads too): the
/// outcomes and counters are the general path's.
#[test]
fn tcp_calls_on_the_slot_path_come_to_what_the_general_path_gives() {
    runtime().block_on(async {
        let calls = [
            (0, 0),
            (1, 100),
            (1, 300_000),
            (2, 70_000),
            (3, 0),
            (4, 2),
            (1, 0),
        ];
        let mut seen = Vec::new();
        for general in [false, true] {
            // A server per run: the second run's XIDs are the first's (its
            // duplicate-reply cache would answer them).
            let (_s, srv) = server().await;
            let (c, t) = client(srv.local_addr(), general, Duration::from_secs(30)).await;
            let mut out = Vec::new();
            for _ in 0..3 {
                for &(k, n) in &calls {
                    out.push(op(&c, k, n).await);
                }
            }
            seen.push((out, c.metrics().replies_received));
            t.close();
            srv.shutdown().await;
        }
        assert_eq!(seen[0], seen[1]);
        assert!(seen[0].0.iter().all(|s| !s.starts_with("error (Transport")));
    });
}

/// Many callers on two workers, each calling in a loop (alone now and
/// then), their slots reused across calls and threads: every call gets
/// its own reply, on both paths.
#[test]
fn tcp_callers_on_two_workers_each_get_their_own_reply() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_s, srv) = server().await;
        for general in [false, true] {
            let (c, t) = client(srv.local_addr(), general, Duration::from_secs(30)).await;
            let mut set = tokio::task::JoinSet::new();
            for w in 0..6u32 {
                let c = c.clone();
                set.spawn(async move {
                    for i in 0..40u32 {
                        let n = ((w * 4099 + i * 977) % 20_000) as usize;
                        let d = testprog::pattern(w * 1000 + i, n);
                        let got = testprog::echo(&c, &d).await.map_err(|e| e.to_string())?;
                        if got != d {
                            return Err(format!("worker {w} call {i}: another reply"));
                        }
                        if i % 8 == 0 {
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
            assert_eq!(c.metrics().replies_unmatched, 0);
            t.close();
        }
        srv.shutdown().await;
    });
}

/// A timeout: the call ends at its deadline (its slot closed) as on the
/// general path, the late reply is dropped (not matched to the next call),
/// and the next calls get their own replies.
#[test]
fn a_tcp_slot_call_times_out_as_the_general_path_does() {
    runtime().block_on(async {
        let mut seen = Vec::new();
        for general in [false, true] {
            let (_s, srv) = server().await;
            let (c, t) = client(srv.local_addr(), general, Duration::from_millis(40)).await;
            let slow = op(&c, 4, 300).await;
            let next = op(&c, 0, 0).await;
            tokio::time::sleep(Duration::from_millis(400)).await;
            let after = op(&c, 1, 10).await;
            let m = c.metrics();
            seen.push((slow, next, after, m.timeouts, m.replies_unmatched));
            t.close();
            srv.shutdown().await;
        }
        assert!(seen[0].0.contains("no reply to xid"), "{:?}", seen[0]);
        assert_eq!((&seen[0].1[..], &seen[0].2[..]), ("null", "echo true"));
        assert_eq!((seen[0].3, seen[0].4), (1, 1));
        assert_eq!(seen[0], seen[1]);
    });
}

/// A call future dropped after its call went out (its slot's outcome
/// comes to nobody, and the slot is not reused while the connection holds
/// it), and one polled once and then left alone: neither holds up other
/// callers or a close.
#[test]
fn a_dropped_or_forgotten_tcp_call_holds_up_nobody() {
    runtime().block_on(async {
        let (_s, srv) = server().await;
        let (c, t) = client(srv.local_addr(), false, Duration::from_secs(30)).await;
        assert_eq!(op(&c, 0, 0).await, "null");
        {
            let mut f = Box::pin(op(&c, 4, 30));
            let pending =
                std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_pending())).await;
            assert!(pending);
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(op(&c, 1, 5000).await, "echo true");
        // Forgotten: polled once, then neither polled nor dropped while
        // its reply comes and others call.
        let mut first = Box::pin(op(&c, 4, 20));
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let mut set = tokio::task::JoinSet::new();
        for i in 0..10u32 {
            let c = c.clone();
            set.spawn(async move { op(&c, 1, 100 * i as usize).await });
        }
        let all = tokio::time::timeout(Duration::from_secs(10), set.join_all())
            .await
            .expect("others were served");
        assert!(all.iter().all(|s| s == "echo true"), "{all:?}");
        assert_eq!(first.await, "slow 20");
        // Forgotten again, then the connection is closed: the close is
        // served (the server answers the call in flight, then closes; the
        // reply and the end of stream are read by the reader task).
        let mut last = Box::pin(op(&c, 4, 50));
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(last.as_mut().poll(cx).is_pending())).await;
        assert!(pending);
        t.close();
        tokio::time::timeout(Duration::from_secs(10), async {
            while t.closed_reason().is_none() || t.shared.lock().closed.is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the end of stream was read");
        let got = tokio::time::timeout(Duration::from_secs(10), last)
            .await
            .expect("ends");
        assert_eq!(got, "slow 50");
        srv.shutdown().await;
    });
}

/// The server goes away mid-call (it reads the call and closes): the
/// caller learns of the loss as the general path's caller does.
#[test]
fn a_tcp_connection_lost_mid_call_fails_it_as_the_general_path_does() {
    runtime().block_on(async {
        let mut seen = Vec::new();
        for general in [false, true] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let peer = tokio::spawn(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut b = [0u8; 64];
                let _ = s.read(&mut b).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            });
            let (c, t) = client(addr, general, Duration::from_secs(30)).await;
            let got = tokio::time::timeout(Duration::from_secs(10), op(&c, 0, 0))
                .await
                .expect("bounded");
            peer.await.unwrap();
            drop(t);
            seen.push(got);
        }
        assert!(seen[0].starts_with("error (Transport)"), "{}", seen[0]);
        assert_eq!(seen[0], seen[1]);
    });
}
