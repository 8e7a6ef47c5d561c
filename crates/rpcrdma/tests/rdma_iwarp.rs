//! The runtime over RPC-over-RDMA over real loopback software iWARP
//! (127.0.0.1 only): the test program, the backchannel, RPC errors,
//! reconnection with the duplicate-reply cache.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::rdma::provider::IwarpCm;
use rpcrdma::rdma::{
    connect_client, Connected, ProviderConnector, RdmaClientConfig, RdmaClientTransport,
    RdmaServer, RdmaServerConfig,
};
use rpcrdma::testprog::{self, TEST_PROG, TEST_VERS};
use rpcrdma::ClientTransport;
use rpcrdma::{
    CallContext, Client, ClientConfig, HandlerError, Message, ReconnectPolicy, ReplyError,
    RpcError, Server,
};
use rpcrdma_proto::provider::{ConnectionManager, Provider};

const LIMIT: Duration = Duration::from_secs(60);

async fn start() -> (Server, RdmaServer) {
    let server = Server::default();
    testprog::register(&server);
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default())
        .await
        .expect("bind");
    (server, rdma)
}

async fn client_to(addr: SocketAddr) -> (Client, Arc<RdmaClientTransport>) {
    connect_client(addr, ClientConfig::default(), RdmaClientConfig::default())
        .await
        .expect("connect")
}

/// The server's status is published by its own task: wait (bounded) until
/// its first connection satisfies `f`.
async fn server_status(
    rdma: &RdmaServer,
    f: impl Fn(&rpcrdma::rdma::RdmaStatus) -> bool,
) -> rpcrdma::rdma::RdmaStatus {
    for _ in 0..400 {
        if let Some(s) = rdma.connections().into_iter().next() {
            if f(&s) {
                return s;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rdma.connections()
        .into_iter()
        .next()
        .expect("a server connection")
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_and_negotiation() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        testprog::null(&c).await.unwrap();
        let st = t.status();
        let n = st.negotiated.expect("negotiated");
        //= rfc8797#section-4
        //# Receive Size:  This 8-bit field contains an encoded value
        //# corresponding to the maximum number of bytes this peer is prepared
        //# to receive with a single RDMA Receive on this connection.
        // Both sides advertise 4096/4096; the server clears R.
        assert_eq!((n.send_threshold, n.recv_threshold), (4096, 4096));
        assert!(!n.remote_invalidation);
        // Linux-like grant of 64 from the server.
        assert_eq!(st.credits, 64);
        assert_eq!(st.engine.credits_granted, 64);
        assert_eq!(st.link.mpa_rev, Some(2));
        assert_eq!(st.link.ird, 16);
        assert!(st
            .mountstats()
            .starts_with("xprt: rdma connects=1 credits=64"));
        let m = c.metrics();
        assert_eq!((m.calls_sent, m.replies_received), (1, 1));
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_inline_long_call_and_reply_chunk() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        // Small: RDMA_MSG both ways.
        assert_eq!(&testprog::echo(&c, b"hello").await.unwrap()[..], b"hello");
        let before = t.status().engine;
        assert_eq!((before.long_calls, before.long_replies), (0, 0));
        // Larger than the 4096 inline threshold both ways: a Long Call
        // (RDMA_NOMSG + Position-Zero Read chunk; ECHO data is not
        // DDP-eligible) and a Long Reply (RDMA_NOMSG + Reply chunk).
        let big: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(&testprog::echo(&c, &big).await.unwrap()[..], &big[..]);
        let e = t.status().engine;
        assert_eq!(e.long_calls, 1);
        assert_eq!(e.long_replies, 1);
        assert_eq!(e.reply_chunks - before.reply_chunks, 1);
        assert!(e.reply_chunk_bytes >= 20_000);
        // Server side: it read the call by RDMA Read and wrote the reply.
        let srv = &server_status(&rdma, |s| s.engine.long_replies_sent == 1).await;
        assert_eq!(srv.engine.long_calls_received, 1);
        assert_eq!(srv.engine.long_replies_sent, 1);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

// One thread for both ends, as `rpcrdma bench` runs them: the interleaving
// that exposed a lost readiness wake-up (checked below).
#[tokio::test(flavor = "current_thread")]
async fn read_1mib_through_a_write_chunk() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        let n = 1 << 20;
        let data = testprog::read(&c, n, 42).await.unwrap();
        assert_eq!(data.len(), n as usize);
        assert!(data[..] == testprog::pattern(42, n as usize)[..], "pattern");
        let e = t.status().engine;
        assert_eq!(e.write_chunks, 1);
        assert_eq!(e.write_chunk_bytes, u64::from(n));
        //= rfc8797#section-4.1
        //# When either peer on a connection clears this flag, the responder
        //# MUST use only RDMA Send when transmitting RPC Replies.
        // The default server clears R.
        assert_eq!(e.remote_invalidations, 0);
        let srv = &server_status(&rdma, |s| s.engine.rdma_write_bytes >= u64::from(n)).await;
        assert!(srv.engine.rdma_write_bytes >= u64::from(n));
        // An odd length (the XDR pad never travels in the chunk).
        let d = testprog::read(&c, 5001, 3).await.unwrap();
        assert_eq!(&d[..], &testprog::pattern(3, 5001)[..]);
        // Bulk transfers both ways: every socket readiness edge and provider
        // wake-up must be seen (the drivers have no fallback tick: a lost
        // one stalls a transfer for good, and `bounded` fails the test).
        for i in 0..8 {
            let d = testprog::read(&c, n, i).await.unwrap();
            assert_eq!(d.len(), n as usize);
            let w = testprog::pattern(i, n as usize);
            assert_eq!(testprog::write(&c, &w).await.unwrap().0, n);
        }
        let srv = &server_status(&rdma, |s| s.engine.replies_sent >= 18).await;
        assert!(srv.engine.replies_sent >= 18, "server driver");
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

// Both ends on one thread; the server's handler holds that thread (as a
// descheduled thread on a loaded machine would not run) for 9 to 25 ms
// before it replies, so the reply's readiness edge is dispatched late, in
// the same runtime turn as whatever else became due meanwhile. (This once
// checked that the drivers' fallback tick, gone since, did not count such a
// late but delivered wake-up as lost.) Every reply still reaches its call.
#[tokio::test(flavor = "current_thread")]
async fn replies_delivered_late_by_a_held_runtime_thread_reach_their_calls() {
    const HOLD_PROG: u32 = 0x2000_5302;
    bounded(async {
        let server = Server::default();
        server.register(HOLD_PROG, 1, |ctx: CallContext| async move {
            let us = ctx.args.reader().u32("us")?;
            std::thread::sleep(Duration::from_micros(u64::from(us)));
            let mut b = Message::builder();
            b.put_u32(us);
            Ok::<_, HandlerError>(b.finish())
        });
        let rdma = RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .expect("bind");
        let (c, t) = client_to(rdma.local_addr()).await;
        for us in (9_000..25_000).step_by(400) {
            let mut b = Message::builder();
            b.put_u32(us);
            let r = c.call(HOLD_PROG, 1, 1, b.finish(), &[]).await.unwrap();
            assert_eq!(r.reader().u32("us").unwrap(), us);
        }
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

// Both ends on one thread, as above, with the client's provider reading at
// most 16 KiB per progress pass: a pass that stops at that budget leaves
// input in the socket that no new readiness edge announces (the driver
// consumed the edge before the pass). The provider must wake the driver at
// once; otherwise every READ's last octets wait for good (the drivers have
// no fallback tick), and `bounded` fails the test.
#[tokio::test(flavor = "current_thread")]
async fn reads_stopped_by_the_read_budget_lose_no_wake_up() {
    bounded(async {
        let (_s, rdma) = start().await;
        let addr = rdma.local_addr();
        let defaults = RdmaClientConfig::default();
        let engine = defaults.engine.clone();
        let params = engine.connect_params();
        let connector: ProviderConnector = Arc::new(move || {
            let mut p = IwarpCm::default().connect(addr, &params, Duration::from_secs(10))?;
            p.set_read_budget(16 * 1024);
            let mut info = p.link_info();
            info.peer = addr.to_string();
            Ok(Connected {
                provider: Box::new(p),
                info,
            })
        });
        let t = RdmaClientTransport::with_connector(
            connector,
            engine,
            defaults.reconnect,
            defaults.metrics,
        )
        .await
        .expect("connect");
        let c = Client::new(t.clone(), ClientConfig::default());
        let n = 1 << 20;
        for i in 0..8 {
            let d = testprog::read(&c, n, i).await.unwrap();
            assert!(d[..] == testprog::pattern(i, n as usize)[..], "pattern");
        }
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_1mib_through_a_read_chunk() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        let data = testprog::pattern(9, (1 << 20) + 3);
        let (count, crc) = testprog::write(&c, &data).await.unwrap();
        assert_eq!(count as usize, data.len());
        assert_eq!(crc, crc32c::crc32c(&data));
        let e = t.status().engine;
        assert_eq!(e.read_chunks, 1);
        assert_eq!(e.read_chunk_bytes, data.len() as u64);
        assert_eq!(e.long_calls, 0, "a DDP argument goes in a data Read chunk");
        let srv = &server_status(&rdma, |s| s.engine.rdma_read_bytes > 0).await;
        assert_eq!(srv.engine.rdma_read_bytes, data.len() as u64);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_calls_within_credits() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        // The first reply raises the grant from 1 to 64.
        testprog::null(&c).await.unwrap();
        let c = Arc::new(c);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..32u32 {
            let c = c.clone();
            set.spawn(async move {
                match i % 3 {
                    0 => {
                        let d = vec![i as u8; 100 + i as usize];
                        assert_eq!(&testprog::echo(&c, &d).await.unwrap()[..], &d[..]);
                    }
                    1 => {
                        let d = testprog::read(&c, 8192 + i, i).await.unwrap();
                        assert_eq!(&d[..], &testprog::pattern(i, 8192 + i as usize)[..]);
                    }
                    _ => {
                        let d = testprog::pattern(i, 10_000);
                        let (n, crc) = testprog::write(&c, &d).await.unwrap();
                        assert_eq!((n, crc), (10_000, crc32c::crc32c(&d)));
                    }
                }
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        let st = t.status();
        assert_eq!(st.outstanding, 0);
        assert_eq!(st.engine.replies_received, 33);
        assert_eq!(st.engine.bad_xids, 0);
        // More calls at once than the grant of 64: the rest wait for
        // credits (RFC 8166 section 3.3) and all complete.
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..150 {
            let c = c.clone();
            set.spawn(async move { testprog::null(&c).await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        let st = t.status();
        assert_eq!(st.engine.replies_received, 183);
        assert!(st.engine.credit_waits > 0, "{:?}", st.engine);
        assert_eq!((st.outstanding, st.queued), (0, 0));
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// A forward program whose procedure 1 calls CB_ECHO on the client's
/// backchannel and returns what came back; procedure 0 calls CB_NULL.
const TRIGGER_PROG: u32 = 0x2000_5246;

async fn trigger(ctx: CallContext) -> Result<Message, HandlerError> {
    let mut r = ctx.reader();
    let data = r.opaque(4096, "max", "trigger.data")?;
    r.finish("trigger")?;
    let cb = ctx
        .backchannel(ClientConfig {
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        })
        .map_err(|e| HandlerError::SystemErr(e.to_string()))?;
    if ctx.proc == 0 {
        testprog::cb_null(&cb)
            .await
            .map_err(|e| HandlerError::SystemErr(e.to_string()))?;
        return Ok(Message::new());
    }
    let back = testprog::cb_echo(&cb, &data)
        .await
        .map_err(|e| HandlerError::SystemErr(e.to_string()))?;
    let mut b = Message::builder();
    b.put_opaque(&back)
        .map_err(|e| HandlerError::SystemErr(e.to_string()))?;
    Ok(b.finish())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_cb_null_and_cb_echo_server_to_client() {
    bounded(async {
        let (s, rdma) = start().await;
        s.register(TRIGGER_PROG, 1, trigger);
        let (c, t) = client_to(rdma.local_addr()).await;
        let cb_server = Server::default();
        testprog::register_cb(&cb_server);
        c.serve_backchannel(&cb_server).unwrap();
        let mut args = Message::builder();
        args.put_opaque(b"reverse direction").unwrap();
        c.call(TRIGGER_PROG, 1, 0, args.finish(), &[])
            .await
            .unwrap();
        let mut args = Message::builder();
        args.put_opaque(b"reverse direction").unwrap();
        let r = c
            .call(TRIGGER_PROG, 1, 1, args.finish(), &[])
            .await
            .unwrap();
        let mut rd = r.reader();
        assert_eq!(
            &rd.opaque(4096, "max", "echo").unwrap()[..],
            b"reverse direction"
        );
        // Two backchannel calls served by the client.
        assert_eq!(cb_server.metrics().calls_received, 2);
        let st = t.status();
        assert_eq!(st.engine.calls_received, 2);
        assert_eq!(st.engine.replies_sent, 2);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_error_replies_over_rdma() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, _t) = client_to(rdma.local_addr()).await;
        let e = c
            .call(0x2000_9999, 1, 0, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::ProgUnavail));
        let e = c
            .call(TEST_PROG, 7, 0, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(
            e.reply_error(),
            Some(ReplyError::ProgMismatch { low: 1, high: 1 })
        );
        let e = c
            .call(TEST_PROG, TEST_VERS, 99, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::ProcUnavail));
        // GARBAGE_ARGS too: READ without its arguments.
        let e = c
            .call(
                TEST_PROG,
                TEST_VERS,
                testprog::PROC_READ,
                Message::new(),
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::GarbageArgs));
        // The connection is still fine.
        testprog::null(&c).await.unwrap();
        let m = c.metrics();
        assert_eq!(
            (m.err_prog_unavail, m.err_prog_mismatch, m.err_proc_unavail),
            (1, 1, 1)
        );
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_call_client_reconnects_and_call_completes_once() {
    bounded(async {
        let server = Server::default();
        let executions = Arc::new(AtomicU32::new(0));
        let ex = executions.clone();
        // A slow procedure that counts its executions.
        server.register(0x2000_5247, 1, move |ctx: CallContext| {
            let ex = ex.clone();
            async move {
                ctx.reader().finish("void")?;
                let n = ex.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut b = Message::builder();
                b.put_u32(n);
                Ok(b.finish())
            }
        });
        let rdma = RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap();
        let addr = rdma.local_addr();
        let cfg = RdmaClientConfig {
            reconnect: Some(ReconnectPolicy {
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(400),
                max_attempts: 40,
            }),
            ..RdmaClientConfig::default()
        };
        let (c, t) = connect_client(addr, ClientConfig::default(), cfg)
            .await
            .unwrap();
        server.register(TRIGGER_PROG, 1, trigger);
        let cb_server = Server::default();
        testprog::register_cb(&cb_server);
        c.serve_backchannel(&cb_server).unwrap();
        let c = Arc::new(c);
        let c2 = c.clone();
        let call =
            tokio::spawn(async move { c2.call(0x2000_5247, 1, 0, Message::new(), &[]).await });
        // Wait until the server runs the call, then kill the server.
        while executions.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        rdma.shutdown().await;
        drop(rdma);
        // The handler finishes (its reply is cached; the connection is
        // gone), then the server comes back on the same address with the
        // same duplicate-reply cache.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let rdma2 = RdmaServer::serve(&server, addr, RdmaServerConfig::default())
            .await
            .unwrap();
        let r = call
            .await
            .unwrap()
            .expect("the call completes after the reconnect");
        let mut rd = r.reader();
        assert_eq!(rd.u32("n").unwrap(), 1);
        assert_eq!(executions.load(Ordering::SeqCst), 1, "executed once");
        assert!(server.metrics().drc_hits >= 1, "answered from the DRC");
        let st = t.status();
        assert_eq!(st.connects, 2);
        assert!(st.engine.retransmits >= 1);
        // The new connection works for new calls too.
        c.call(0x2000_5247, 1, 0, Message::new(), &[])
            .await
            .unwrap();
        assert_eq!(executions.load(Ordering::SeqCst), 2);
        // The backchannel was enabled again on the new connection.
        let mut args = Message::builder();
        args.put_opaque(b"after reconnect").unwrap();
        let r = c
            .call(TRIGGER_PROG, 1, 1, args.finish(), &[])
            .await
            .unwrap();
        assert_eq!(
            &r.reader().opaque(100, "max", "echo").unwrap()[..],
            b"after reconnect"
        );
        assert_eq!(cb_server.metrics().calls_received, 1);
        t.shutdown().await;
        rdma2.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_to_one_server() {
    bounded(async {
        let (_s, rdma) = start().await;
        let mut set = tokio::task::JoinSet::new();
        for i in 0..6u32 {
            let addr = rdma.local_addr();
            set.spawn(async move {
                let (c, t) = client_to(addr).await;
                for j in 0..5u32 {
                    let d = testprog::read(&c, 3000 + i * 100 + j, i).await.unwrap();
                    assert_eq!(
                        &d[..],
                        &testprog::pattern(i, (3000 + i * 100 + j) as usize)[..]
                    );
                }
                t
            });
        }
        let mut transports = Vec::new();
        while let Some(r) = set.join_next().await {
            transports.push(r.unwrap());
        }
        let conns = rdma.connections();
        assert_eq!(conns.len(), 6);
        assert!(conns.iter().all(|s| s.engine.calls_received == 5));
        assert_eq!(rdma.metrics().snapshot().connections, 6);
        for t in transports {
            t.shutdown().await;
        }
        rdma.shutdown().await;
    })
    .await
}

/// A client whose lone calls were each served by the caller's own rounds
/// (the last one reads its reply and lets go) still watches its socket:
/// the server going away is seen with no call in flight and none made
/// (the connection's waker stays registered for the next read edge; a
/// holder that let go without it would never notice).
#[tokio::test(flavor = "current_thread")]
async fn an_idle_client_sees_the_server_go_without_a_call() {
    bounded(async {
        let (_s, rdma) = start().await;
        let cfg = RdmaClientConfig {
            reconnect: None,
            ..RdmaClientConfig::default()
        };
        let (c, t) = connect_client(rdma.local_addr(), ClientConfig::default(), cfg)
            .await
            .unwrap();
        for _ in 0..50 {
            testprog::null(&c).await.unwrap();
        }
        assert!(t.closed_reason().is_none());
        rdma.shutdown().await;
        let t0 = std::time::Instant::now();
        while t.closed_reason().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the server's close went unnoticed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(matches!(
            t.closed_reason(),
            Some(rpcrdma::TransportError::Lost(_))
        ));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_and_loss_without_reconnect_fail_calls() {
    bounded(async {
        let (s, rdma) = start().await;
        // A procedure that never answers in time.
        s.register(0x2000_5248, 1, |_ctx: CallContext| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Message::new())
        });
        let cfg = RdmaClientConfig {
            reconnect: None,
            ..RdmaClientConfig::default()
        };
        let (c, t) = connect_client(rdma.local_addr(), ClientConfig::default(), cfg)
            .await
            .unwrap();
        testprog::null(&c).await.unwrap();
        assert!(t.status().last_error.is_none());
        let c = Arc::new(c);
        let c2 = c.clone();
        let pending =
            tokio::spawn(async move { c2.call(0x2000_5248, 1, 0, Message::new(), &[]).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        rdma.shutdown().await;
        let e = pending.await.unwrap().unwrap_err();
        assert!(
            matches!(e, RpcError::Transport(rpcrdma::TransportError::Lost(_))),
            "{e:?}"
        );
        assert!(matches!(
            t.closed_reason(),
            Some(rpcrdma::TransportError::Lost(_))
        ));
        // New calls fail at once.
        assert!(testprog::null(&c).await.is_err());

        // A local close: Closed.
        let (_s2, rdma2) = start().await;
        let (c, t) = client_to(rdma2.local_addr()).await;
        testprog::null(&c).await.unwrap();
        t.shutdown().await;
        assert_eq!(t.closed_reason(), Some(rpcrdma::TransportError::Closed));
        let e = testprog::null(&c).await.unwrap_err();
        assert_eq!(e, RpcError::Transport(rpcrdma::TransportError::Closed));
        rdma2.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_invalidation_when_both_sides_set_r_and_mpa_crc() {
    bounded(async {
        let server = Server::default();
        testprog::register(&server);
        let mut scfg = RdmaServerConfig::default();
        scfg.engine.remote_invalidation = true;
        scfg.provider.iwarp_mut().expect("iWARP").config.crc = true;
        let rdma = RdmaServer::serve(&server, "127.0.0.1:0", scfg)
            .await
            .unwrap();
        let mut ccfg = RdmaClientConfig::default();
        ccfg.provider.iwarp_mut().expect("iWARP").config.crc = true;
        let (c, t) = connect_client(rdma.local_addr(), ClientConfig::default(), ccfg)
            .await
            .unwrap();
        // A Write chunk and (for the client's default reply_max) a Reply
        // chunk: two handles, so no Send With Invalidate (Linux
        // svc_rdma_get_inv_rkey: only one handle).
        let mut args = Message::builder();
        args.put_u32(100_000).put_u32(11);
        let opts = rpcrdma::CallOptions {
            ddp_results: vec![100_000],
            ..Default::default()
        };
        let r = c
            .call_with(
                TEST_PROG,
                TEST_VERS,
                testprog::PROC_READ,
                args.finish(),
                &opts,
            )
            .await
            .unwrap();
        let d = r.reader().ddp_opaque(100_000, "max", "data").unwrap();
        assert_eq!(&d[..], &testprog::pattern(11, 100_000)[..]);
        assert_eq!(t.status().engine.reply_chunks, 1);
        assert_eq!(t.status().engine.remote_invalidations, 0);
        // A Write chunk alone: one handle, invalidated by the reply.
        let mut args = Message::builder();
        args.put_u32(100_000).put_u32(12);
        let opts = rpcrdma::CallOptions {
            ddp_results: vec![100_000],
            reply_max: Some(1024),
            ..Default::default()
        };
        let r = c
            .call_with(
                TEST_PROG,
                TEST_VERS,
                testprog::PROC_READ,
                args.finish(),
                &opts,
            )
            .await
            .unwrap();
        let got = r.reader().ddp_opaque(100_000, "max", "data").unwrap();
        assert_eq!(&got[..], &testprog::pattern(12, 100_000)[..]);
        let st = t.status();
        //= rfc8797#section-4.1
        //# When both connection peers have set this
        //# bit flag in their CM Private Data, the responder MAY use RDMA Send
        //# with Invalidate operations when transmitting RPC Replies.
        assert!(st.negotiated.unwrap().remote_invalidation);
        assert_eq!(st.link.crc, Some(true));
        assert_eq!(st.engine.remote_invalidations, 1);
        let srv = server_status(&rdma, |s| s.engine.send_with_invalidate > 0).await;
        assert_eq!(srv.engine.send_with_invalidate, 1);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_garbage_peers_do_not_block_the_listener() {
    bounded(async {
        let (_s, rdma) = start().await;
        let addr = rdma.local_addr();
        // Two peers that connect and never send an MPA Request, one that
        // sends garbage.
        let silent1 = std::net::TcpStream::connect(addr).unwrap();
        let silent2 = std::net::TcpStream::connect(addr).unwrap();
        let mut junk = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut junk, &[0x55; 600]).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A real client is served at once (the silent peers hold no
        // thread, only a pending slot until their MPA deadline).
        let t0 = std::time::Instant::now();
        let (c, t) = client_to(addr).await;
        testprog::null(&c).await.unwrap();
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(rdma.connections().len(), 1);
        drop((silent1, silent2, junk));
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// A call whose inline arguments are not whole XDR items (5 octets) cannot
/// be sent (RFC 8166 §3.4.5: Read chunk positions are multiples of four):
/// that call fails as the caller's fault, and the connection goes on —
/// no reconnection, the next call on it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misaligned_call_fails_alone_and_the_connection_goes_on() {
    bounded(async {
        let (_s, rdma) = start().await;
        let (c, t) = client_to(rdma.local_addr()).await;
        testprog::null(&c).await.unwrap();
        let e = c
            .call(TEST_PROG, TEST_VERS, 0, Message::inline(vec![1u8; 5]), &[])
            .await
            .unwrap_err();
        assert_eq!(e.blame(), rpcrdma::Blame::Caller, "{e}");
        assert!(
            matches!(
                e,
                RpcError::Caller(rpcrdma::CallerError::Refused(
                    rpcrdma::TransportError::BadMessage(_)
                ))
            ),
            "{e:?}"
        );
        testprog::null(&c).await.unwrap();
        assert_eq!(t.status().connects, 1, "the connection was not replaced");
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}
