//! A call without a reply, over real loopback software iWARP: as Linux
//! xprtrdma, the client's major timeout (`EngineConfig::call_timeout`)
//! ends the connection, the driver reconnects and the call goes out again
//! with the same XID, at most `EngineConfig::max_transmissions` times; the
//! server's duplicate-reply cache keeps it executed once; a peer that
//! never answers ends the call with a clear error in bounded time.
//!
//! (A binary of its own: its timer-driven reconnects load the machine, and
//! `rdma_iwarp.rs` counts lost wake-ups, which load can fake.)

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma::rdma::{
    connect_client, RdmaClientConfig, RdmaClientTransport, RdmaServer, RdmaServerConfig,
};
use rpcrdma::{
    CallContext, Client, ClientConfig, HandlerError, Message, ReconnectPolicy, RpcError, Server,
};

const LIMIT: Duration = Duration::from_secs(60);

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

const RECOVERY_PROG: u32 = 0x2000_5250;
/// The major timeout of the recovery tests.
const MAJOR: Duration = Duration::from_millis(300);

/// Serves `server` and connects a client whose major timeout is [`MAJOR`],
/// three transmissions per call, quick reconnects.
async fn serve_and_connect(server: &Server) -> (RdmaServer, Client, Arc<RdmaClientTransport>) {
    let rdma = RdmaServer::serve(server, "127.0.0.1:0", RdmaServerConfig::default())
        .await
        .unwrap();
    let mut cfg = RdmaClientConfig {
        reconnect: Some(ReconnectPolicy {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            max_attempts: 5,
        }),
        ..RdmaClientConfig::default()
    };
    cfg.engine.call_timeout = Some(MAJOR);
    cfg.engine.max_transmissions = Some(3);
    let (c, t) = connect_client(rdma.local_addr(), ClientConfig::default(), cfg)
        .await
        .unwrap();
    (rdma, c, t)
}

/// What the handler saw: (peer of the connection, XID, executed).
type Log = Arc<Mutex<Vec<(String, u32, bool)>>>;

/// A server whose handler silently drops the first call of its first
/// connection (what Linux siw did, now and then, to a client's first
/// message) and executes the others, counting executions.
async fn drop_the_first_call() -> (Server, Log, Arc<AtomicU32>) {
    let server = Server::default();
    let log: Log = Arc::default();
    let executions = Arc::new(AtomicU32::new(0));
    let (l, ex) = (log.clone(), executions.clone());
    server.register(RECOVERY_PROG, 1, move |ctx: CallContext| {
        let (l, ex) = (l.clone(), ex.clone());
        async move {
            let peer = ctx.peer();
            let mut l = l.lock().unwrap();
            let first = l.is_empty();
            l.push((peer, ctx.xid, !first));
            if first {
                return Err(HandlerError::Drop);
            }
            let n = ex.fetch_add(1, Ordering::SeqCst) + 1;
            let mut b = Message::builder();
            b.put_u32(n);
            Ok(b.finish())
        }
    });
    (server, log, executions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_first_call_is_retransmitted_on_a_new_connection() {
    bounded(async {
        let (server, log, executions) = drop_the_first_call().await;
        let (rdma, c, t) = serve_and_connect(&server).await;
        let t0 = Instant::now();
        let r = c
            .call(RECOVERY_PROG, 1, 1, Message::new(), &[])
            .await
            .unwrap();
        assert!(t0.elapsed() >= MAJOR, "only after the major timeout");
        assert_eq!(r.reader().u32("n").unwrap(), 1);
        let log = log.lock().unwrap().clone();
        assert_eq!(log.len(), 2, "{log:?}");
        assert_ne!(log[0].0, log[1].0, "on a new connection: {log:?}");
        assert_eq!(log[0].1, log[1].1, "with the same XID: {log:?}");
        assert_eq!(executions.load(Ordering::SeqCst), 1);
        let st = t.status();
        assert_eq!(st.connects, 2);
        assert_eq!(st.engine.retransmits, 1);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// The first transmission executes but its reply never reaches the client
/// (the handler holds it until the connection it came on is gone): the
/// second transmission finds the call in progress (dropped), the third is
/// answered from the duplicate-reply cache. Executed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_answered_from_the_cache_not_executed_again() {
    bounded(async {
        let server = Server::default();
        let executions = Arc::new(AtomicU32::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let (ex, rel) = (executions.clone(), release.clone());
        server.register(RECOVERY_PROG, 1, move |_ctx: CallContext| {
            let (ex, rel) = (ex.clone(), rel.clone());
            async move {
                let n = ex.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    rel.notified().await;
                }
                let mut b = Message::builder();
                b.put_u32(n);
                Ok(b.finish())
            }
        });
        let (rdma, c, t) = serve_and_connect(&server).await;
        let call =
            tokio::spawn(async move { c.call(RECOVERY_PROG, 1, 1, Message::new(), &[]).await });
        // The retransmission on the second connection met the original
        // still executing.
        while server.metrics().drc_in_progress == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        release.notify_one();
        let r = call.await.unwrap().unwrap();
        assert_eq!(r.reader().u32("n").unwrap(), 1);
        assert_eq!(executions.load(Ordering::SeqCst), 1, "executed once");
        let m = server.metrics();
        assert_eq!((m.drc_in_progress, m.drc_hits), (1, 1));
        assert_eq!(t.status().connects, 3);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// A server that never answers: the call fails after three transmissions
/// (three connections), each a major timeout apart, with an error that
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_fails_the_call_after_the_bounded_retries() {
    bounded(async {
        let server = Server::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        server.register(RECOVERY_PROG, 1, move |ctx: CallContext| {
            s.lock().unwrap().push(ctx.xid);
            async move { Err(HandlerError::Drop) }
        });
        let (rdma, c, t) = serve_and_connect(&server).await;
        let t0 = Instant::now();
        let e = c
            .call(RECOVERY_PROG, 1, 1, Message::new(), &[])
            .await
            .unwrap_err();
        let took = t0.elapsed();
        let msg = e.to_string();
        assert!(matches!(e, RpcError::Transport(_)), "{e:?}");
        assert!(
            msg.contains("never answered") && msg.contains("3 transmission"),
            "{msg}"
        );
        assert!(took >= MAJOR * 3, "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.iter().all(|x| *x == seen[0]), "same XID: {seen:?}");
        // The transport lives on: the next call gets its own connection.
        assert_eq!(t.status().connects, 3);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}
