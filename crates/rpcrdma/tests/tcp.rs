//! End-to-end tests over TCP loopback (127.0.0.1 only, bounded in time).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::record::{RecordDecoder, RecordLimits};
use rpcrdma::testprog::{self, pattern, TEST_PROG, TEST_VERS};
use rpcrdma::{
    Auth, Blame, CallContext, CallOptions, Client, ClientConfig, HandlerError, Message, ReplyError,
    RpcError, Server, ServerConfig, TcpConfig, TcpServer, TransportError,
};
use rpcrdma_proto::wire::rpc::AuthSysParms;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const T: Duration = Duration::from_secs(30);

/// A program for the error paths: versions 2 and 4.
const ERR_PROG: u32 = 0x2000_6000;
const P_OK: u32 = 0;
const P_GARBAGE: u32 = 1;
const P_SYSERR: u32 = 2;
const P_PANIC: u32 = 3;
const P_COUNT: u32 = 4; // counts executions, sleeps `arg` ms, returns the count
const P_UID: u32 = 5; // returns the AUTH_SYS uid or 0xffffffff
const P_BACKCHANNEL: u32 = 6; // tries the backchannel, returns 1 if Unsupported
const P_DROP: u32 = 7; // never answers

struct Fixture {
    server: Server,
    tcp: TcpServer,
    addr: SocketAddr,
    count: Arc<AtomicU32>,
}

async fn start_with(tcp_cfg: TcpConfig) -> Fixture {
    let server = Server::new(ServerConfig::default());
    testprog::register(&server);
    let count = Arc::new(AtomicU32::new(0));
    let c2 = count.clone();
    let h = move |ctx: CallContext| {
        let count = c2.clone();
        async move {
            let mut r = ctx.reader();
            match ctx.proc {
                P_OK => Ok(Message::new()),
                P_GARBAGE => Err(HandlerError::GarbageArgs("test".into())),
                P_SYSERR => Err(HandlerError::SystemErr("test".into())),
                P_PANIC => panic!("handler panics on purpose"),
                P_COUNT => {
                    let ms = r.u32("ms")?;
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(ms as u64)).await;
                    let mut b = Message::builder();
                    b.put_u32(n);
                    Ok(b.finish())
                }
                P_UID => {
                    let uid = ctx.cred.auth_sys().map(|p| p.uid).unwrap_or(u32::MAX);
                    let mut b = Message::builder();
                    b.put_u32(uid);
                    Ok(b.finish())
                }
                P_BACKCHANNEL => {
                    let unsupported = matches!(
                        ctx.backchannel(ClientConfig::default()),
                        Err(RpcError::Transport(TransportError::Unsupported(_)))
                    );
                    let mut b = Message::builder();
                    b.put_u32(unsupported as u32);
                    Ok(b.finish())
                }
                P_DROP => Err(HandlerError::Drop),
                _ => Err(HandlerError::ProcUnavail),
            }
        }
    };
    let h = Arc::new(h);
    let h2 = h.clone();
    server.register(ERR_PROG, 2, move |ctx| h(ctx));
    server.register(ERR_PROG, 4, move |ctx| h2(ctx));
    let tcp = server.serve_tcp("127.0.0.1:0", tcp_cfg).await.unwrap();
    let addr = tcp.local_addr();
    Fixture {
        server,
        tcp,
        addr,
        count,
    }
}

async fn start() -> Fixture {
    start_with(TcpConfig::default()).await
}

async fn client(addr: SocketAddr) -> Client {
    client_with(addr, ClientConfig::default(), TcpConfig::default()).await
}

async fn client_with(addr: SocketAddr, cfg: ClientConfig, tcp: TcpConfig) -> Client {
    Client::connect_tcp(addr, cfg, tcp).await.unwrap()
}

fn u32_args(v: u32) -> Message {
    let mut b = Message::builder();
    b.put_u32(v);
    b.finish()
}

#[tokio::test]
async fn null_and_echo_sizes() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        testprog::null(&c).await.unwrap();
        for n in [0usize, 1, 3, 4, 5, 1024, 1 << 20] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
            let got = testprog::echo(&c, &data).await.unwrap();
            assert_eq!(got.len(), n);
            assert_eq!(&got[..], &data[..], "echo of {n} octets");
        }
        let m = c.metrics();
        assert_eq!(m.calls_sent, 8);
        assert_eq!(m.replies_received, 8);
        assert!(m.bytes_sent > (1 << 20) && m.bytes_received > (1 << 20));
        let sm = f.server.metrics();
        assert_eq!(sm.calls_received, 8);
        assert_eq!(sm.replies_sent, 8);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn read_pattern_and_write_crc() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        for (count, seed) in [
            (0u32, 1u32),
            (1, 1),
            (3, 5),
            (12, 1),
            (4096, 0),
            ((1 << 20) + 3, 77),
        ] {
            let got = testprog::read(&c, count, seed).await.unwrap();
            assert_eq!(got.len(), count as usize);
            assert_eq!(&got[..], &pattern(seed, count as usize)[..]);
        }
        // Hand-checked start of the seed-1 pattern (see testprog docs).
        let got = testprog::read(&c, 12, 1).await.unwrap();
        assert_eq!(
            &got[..],
            &[0x00, 0x04, 0x20, 0x21, 0x04, 0x08, 0x06, 0x01, 0x9d, 0xcc, 0xa8, 0xc5]
        );
        // CRC32C check value (RFC 3720 B.4): "123456789" -> 0xe3069283.
        assert_eq!(
            testprog::write(&c, b"123456789").await.unwrap(),
            (9, 0xe306_9283)
        );
        // 32 zero octets -> 0x8a9136aa (RFC 3720 B.4).
        assert_eq!(
            testprog::write(&c, &[0u8; 32]).await.unwrap(),
            (32, 0x8a91_36aa)
        );
        for n in [0usize, 1, 2, 3, 4, 65_537, 1 << 20] {
            let data = pattern(n as u32, n);
            let (count, crc) = testprog::write(&c, &data).await.unwrap();
            assert_eq!(count as usize, n);
            assert_eq!(crc, crc32c::crc32c(&data));
        }
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn sixty_four_concurrent_calls_on_one_connection() {
    timeout(T, async {
        let f = start().await;
        let c = Arc::new(client(f.addr).await);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64u32 {
            let c = c.clone();
            set.spawn(async move {
                match i % 3 {
                    0 => {
                        let data = pattern(i + 1, (i as usize) * 97);
                        assert_eq!(&testprog::echo(&c, &data).await.unwrap()[..], &data[..]);
                    }
                    1 => {
                        let got = testprog::read(&c, i * 1000, i).await.unwrap();
                        assert_eq!(&got[..], &pattern(i, (i * 1000) as usize)[..]);
                    }
                    _ => {
                        let data = pattern(i, 5000 + i as usize);
                        let (n, crc) = testprog::write(&c, &data).await.unwrap();
                        assert_eq!((n as usize, crc), (data.len(), crc32c::crc32c(&data)));
                    }
                }
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        let m = c.metrics();
        assert_eq!(m.calls_sent, 64);
        assert_eq!(m.replies_received, 64);
        assert_eq!(m.connections, 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn multi_fragment_records_both_ways() {
    timeout(T, async {
        let f = start_with(TcpConfig {
            max_fragment: 777,
            ..TcpConfig::default()
        })
        .await;
        let c = client_with(
            f.addr,
            ClientConfig::default(),
            TcpConfig {
                max_fragment: 1000,
                ..TcpConfig::default()
            },
        )
        .await;
        let data = pattern(3, 100_001);
        assert_eq!(&testprog::echo(&c, &data).await.unwrap()[..], &data[..]);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn every_accepted_error_reply() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        let call = |prog, vers, proc, args| {
            let c = &c;
            async move { c.call(prog, vers, proc, args, &[]).await.map(|_| ()) }
        };
        let e = call(0x2000_7777, 1, 0, Message::new()).await.unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::ProgUnavail));
        assert_eq!(e.blame(), Blame::Peer);
        let e = call(ERR_PROG, 3, 0, Message::new()).await.unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::ProgMismatch { low: 2, high: 4 })
        );
        let e = call(TEST_PROG, 2, 0, Message::new()).await.unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::ProgMismatch { low: 1, high: 1 })
        );
        let e = call(TEST_PROG, TEST_VERS, 99, Message::new())
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::ProcUnavail));
        // GARBAGE_ARGS: ECHO whose opaque says 100 octets and has none; READ
        // over the limit; NULL with trailing arguments; handler's verdict.
        let e = call(TEST_PROG, TEST_VERS, 1, u32_args(100))
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::GarbageArgs));
        let mut b = Message::builder();
        b.put_u32(testprog::TEST_MAX_DATA + 1).put_u32(0);
        let e = call(TEST_PROG, TEST_VERS, 2, b.finish()).await.unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::GarbageArgs));
        let e = call(TEST_PROG, TEST_VERS, 0, u32_args(1))
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::GarbageArgs));
        let e = call(ERR_PROG, 2, P_GARBAGE, Message::new())
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::GarbageArgs));
        // SYSTEM_ERR: handler's verdict and a panicking handler.
        let e = call(ERR_PROG, 4, P_SYSERR, Message::new())
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::SystemErr));
        let e = call(ERR_PROG, 4, P_PANIC, Message::new())
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::SystemErr));
        // The connection survived all of it.
        call(ERR_PROG, 2, P_OK, Message::new()).await.unwrap();
        let m = c.metrics();
        assert_eq!(m.err_prog_unavail, 1);
        assert_eq!(m.err_prog_mismatch, 2);
        assert_eq!(m.err_proc_unavail, 1);
        assert_eq!(m.err_garbage_args, 4);
        assert_eq!(m.err_system_err, 2);
        let sm = f.server.metrics();
        assert_eq!(sm.err_garbage_args, 4);
        assert_eq!(sm.err_system_err, 2);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

/// Writes one record (single fragment) on a raw stream.
async fn raw_send(s: &mut TcpStream, body: &[u8]) {
    let mut v = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    s.write_all(&v).await.unwrap();
}

/// Reads one record from a raw stream; `None` on EOF.
async fn raw_recv(s: &mut TcpStream) -> Option<Bytes> {
    let mut dec = RecordDecoder::new(RecordLimits::default());
    let mut buf = bytes::BytesMut::new();
    loop {
        if let Some(r) = dec.decode(&mut buf).unwrap() {
            return Some(r);
        }
        let mut tmp = [0u8; 4096];
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// A call header, written out by hand: xid, CALL, rpcvers, prog, vers,
/// proc, AUTH_NONE cred and verf.
fn raw_call(xid: u32, rpcvers: u32, prog: u32, vers: u32, proc: u32, args: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in [xid, 0, rpcvers, prog, vers, proc, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(args);
    v
}

#[tokio::test]
async fn rpc_mismatch_for_rpcvers_other_than_2() {
    timeout(T, async {
        let f = start().await;
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        raw_send(&mut s, &raw_call(0x0102_0304, 3, TEST_PROG, 1, 0, &[])).await;
        let r = raw_recv(&mut s).await.unwrap();
        //= rfc5531#section-9
        //# RPC_MISMATCH = 0, /* RPC version number != 2          */
        #[rustfmt::skip]
        let expect = [
            0x01, 0x02, 0x03, 0x04, // xid
            0, 0, 0, 1, // REPLY
            0, 0, 0, 1, // MSG_DENIED
            0, 0, 0, 0, // RPC_MISMATCH
            0, 0, 0, 2, // low
            0, 0, 0, 2, // high
        ];
        assert_eq!(&r[..], &expect[..]);
        // And the client decodes it as RpcMismatch (via the raw bytes path
        // above, a Client cannot send rpcvers 3). A correct call still works.
        raw_send(&mut s, &raw_call(5, 2, TEST_PROG, 1, 0, &[])).await;
        let r = raw_recv(&mut s).await.unwrap();
        #[rustfmt::skip]
        let expect = [
            0, 0, 0, 5, 0, 0, 0, 1, // xid, REPLY
            0, 0, 0, 0, // MSG_ACCEPTED
            0, 0, 0, 0, 0, 0, 0, 0, // verf AUTH_NONE, empty
            0, 0, 0, 0, // SUCCESS, void results
        ];
        assert_eq!(&r[..], &expect[..]);
        assert_eq!(f.server.metrics().err_rpc_mismatch, 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn uncached_procedures_run_again_on_a_retransmission() {
    timeout(T, async {
        let f = start().await;
        assert!(f.server.set_uncached(ERR_PROG, 2, &[P_COUNT]));
        assert!(
            !f.server.set_uncached(ERR_PROG, 9, &[P_COUNT]),
            "no such version"
        );
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        let call = raw_call(0xdead_0101, 2, ERR_PROG, 2, P_COUNT, &0u32.to_be_bytes());
        raw_send(&mut s, &call).await;
        let r1 = raw_recv(&mut s).await.unwrap();
        raw_send(&mut s, &call).await;
        let r2 = raw_recv(&mut s).await.unwrap();
        // Executed twice: the second reply counts 2, nothing came from the
        // cache.
        assert_eq!(&r1[r1.len() - 4..], &1u32.to_be_bytes());
        assert_eq!(&r2[r2.len() - 4..], &2u32.to_be_bytes());
        assert_eq!(f.count.load(Ordering::SeqCst), 2);
        assert_eq!(f.server.metrics().drc_hits, 0);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn duplicate_reply_cache_executes_a_retransmission_once() {
    timeout(T, async {
        let f = start().await;
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        let call = raw_call(0xdead_0001, 2, ERR_PROG, 2, P_COUNT, &0u32.to_be_bytes());
        raw_send(&mut s, &call).await;
        let r1 = raw_recv(&mut s).await.unwrap();
        raw_send(&mut s, &call).await;
        let r2 = raw_recv(&mut s).await.unwrap();
        assert_eq!(r1, r2);
        assert_eq!(&r1[r1.len() - 4..], &1u32.to_be_bytes());
        assert_eq!(f.count.load(Ordering::SeqCst), 1);
        // From a new connection (another source port) the retransmission is
        // still recognised: the identity is the address, not the port.
        let mut s2 = TcpStream::connect(f.addr).await.unwrap();
        raw_send(&mut s2, &call).await;
        assert_eq!(raw_recv(&mut s2).await.unwrap(), r1);
        assert_eq!(f.count.load(Ordering::SeqCst), 1);
        // Same XID, different arguments (checksum differs): executed.
        let other = raw_call(0xdead_0001, 2, ERR_PROG, 2, P_COUNT, &1u32.to_be_bytes());
        raw_send(&mut s, &other).await;
        let r3 = raw_recv(&mut s).await.unwrap();
        assert_eq!(&r3[r3.len() - 4..], &2u32.to_be_bytes());
        // A retransmission while the original executes is dropped: only one
        // reply comes back, the next reply is for the next call.
        let slow = raw_call(0xdead_0002, 2, ERR_PROG, 2, P_COUNT, &300u32.to_be_bytes());
        raw_send(&mut s, &slow).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        raw_send(&mut s, &slow).await;
        let r4 = raw_recv(&mut s).await.unwrap();
        assert_eq!(&r4[..4], &0xdead_0002u32.to_be_bytes());
        raw_send(&mut s, &raw_call(0xdead_0003, 2, TEST_PROG, 1, 0, &[])).await;
        let r5 = raw_recv(&mut s).await.unwrap();
        assert_eq!(&r5[..4], &0xdead_0003u32.to_be_bytes());
        assert_eq!(f.count.load(Ordering::SeqCst), 3);
        let sm = f.server.metrics();
        assert_eq!(sm.drc_hits, 2);
        assert_eq!(sm.drc_in_progress, 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn client_retransmits_after_timeout_and_server_executes_once() {
    timeout(T, async {
        let f = start().await;
        let c = client_with(
            f.addr,
            ClientConfig {
                timeout: Duration::from_millis(150),
                retries: 10,
                ..ClientConfig::default()
            },
            TcpConfig::default(),
        )
        .await;
        let r = c
            .call(ERR_PROG, 2, P_COUNT, u32_args(500), &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("n").unwrap(), 1);
        assert_eq!(f.count.load(Ordering::SeqCst), 1);
        assert!(c.metrics().retransmits >= 1);
        assert!(f.server.metrics().drc_in_progress >= 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn timeout_is_the_transports_blame() {
    timeout(T, async {
        let f = start().await;
        let c = client_with(
            f.addr,
            ClientConfig {
                timeout: Duration::from_millis(100),
                retries: 1,
                ..ClientConfig::default()
            },
            TcpConfig::default(),
        )
        .await;
        let e = c
            .call(ERR_PROG, 2, P_DROP, Message::new(), &[])
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Timeout { attempts: 2, .. }), "{e}");
        assert_eq!(e.blame(), Blame::Transport);
        assert_eq!(c.metrics().timeouts, 1);
        // The connection still works.
        testprog::null(&c).await.unwrap();
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

/// The connection ends a call at its deadline (its timer task; the caller
/// keeps no timer of its own): the late reply is dropped and counted, the
/// connection keeps working, and the timer, idle after the first timeout,
/// ends a second call at its deadline too.
#[tokio::test]
async fn the_connection_times_out_a_call_and_drops_its_late_reply() {
    timeout(T, async {
        let f = start().await;
        let c = client_with(
            f.addr,
            ClientConfig {
                timeout: Duration::from_millis(100),
                ..ClientConfig::default()
            },
            TcpConfig::default(),
        )
        .await;
        for round in 0..2 {
            let t0 = std::time::Instant::now();
            let e = c
                .call(ERR_PROG, 2, P_COUNT, u32_args(1500), &[])
                .await
                .unwrap_err();
            assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
            let took = t0.elapsed();
            assert!(took >= Duration::from_millis(100), "{took:?}");
            // Ended at the deadline, not by the reply (1.5 s later).
            assert!(took < Duration::from_millis(1400), "{took:?}");
            assert_eq!(c.metrics().timeouts, round + 1);
            // The late reply comes while other calls run: dropped, not
            // mistaken for theirs.
            let end = std::time::Instant::now() + Duration::from_millis(1700);
            while std::time::Instant::now() < end {
                testprog::null(&c).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(c.metrics().replies_unmatched, round + 1);
        }
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

/// A call with a short timeout made after one with a long timeout ends at
/// its own deadline: the timer is brought forward, not left at the first
/// call's.
#[tokio::test]
async fn a_shorter_deadline_behind_a_longer_one_ends_first() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        let long = CallOptions {
            timeout: Some(Duration::from_secs(20)),
            ..CallOptions::default()
        };
        let short = CallOptions {
            timeout: Some(Duration::from_millis(150)),
            ..CallOptions::default()
        };
        let t0 = std::time::Instant::now();
        let slow = c.call_with(ERR_PROG, 2, P_COUNT, u32_args(2500), &long);
        let quick = async {
            // Made after the long one is registered.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let e = c
                .call_with(ERR_PROG, 2, P_COUNT, u32_args(2000), &short)
                .await
                .unwrap_err();
            (e, t0.elapsed())
        };
        let (r, (e, took)) = tokio::join!(slow, quick);
        assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
        assert!(took >= Duration::from_millis(200), "{took:?}");
        assert!(took < Duration::from_millis(1800), "{took:?}");
        // The long call got its reply.
        assert!(r.unwrap().reader().u32("n").unwrap() >= 1);
        assert!(t0.elapsed() >= Duration::from_millis(2500));
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn auth_sys_credentials_reach_the_handler() {
    timeout(T, async {
        let f = start().await;
        let parms = AuthSysParms::new(1, "client.example", 1234, 100, vec![1, 2]).unwrap();
        let c = client_with(
            f.addr,
            ClientConfig {
                auth: Auth::Sys(parms),
                ..ClientConfig::default()
            },
            TcpConfig::default(),
        )
        .await;
        let r = c
            .call(ERR_PROG, 2, P_UID, Message::new(), &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("uid").unwrap(), 1234);
        let none = client(f.addr).await;
        let r = none
            .call(ERR_PROG, 2, P_UID, Message::new(), &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("uid").unwrap(), u32::MAX);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn backchannel_is_unsupported_over_tcp() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        let cb = Server::default();
        testprog::register_cb(&cb);
        let e = c.serve_backchannel(&cb).unwrap_err();
        assert!(matches!(
            e,
            RpcError::Transport(TransportError::Unsupported(_))
        ));
        let r = c
            .call(ERR_PROG, 2, P_BACKCHANNEL, Message::new(), &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("unsupported").unwrap(), 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn hostile_record_marks_close_only_that_connection() {
    timeout(T, async {
        let f = start_with(TcpConfig {
            record_limits: RecordLimits {
                max_record_size: 4096,
                ..RecordLimits::default()
            },
            ..TcpConfig::default()
        })
        .await;
        let good = client(f.addr).await;
        // A last fragment of 2^31-1 octets: refused, connection closed.
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        s.write_all(&[0xff, 0xff, 0xff, 0xff]).await.unwrap();
        assert_eq!(raw_recv(&mut s).await, None);
        // Fragments adding up past the limit.
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        let mut v = vec![0, 0, 0x0f, 0xff];
        v.extend_from_slice(&[0u8; 4095]);
        v.extend_from_slice(&[0x80, 0, 0, 8]);
        s.write_all(&v).await.unwrap();
        assert_eq!(raw_recv(&mut s).await, None);
        // Short garbage records are dropped but the connection stays.
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        raw_send(&mut s, &[1, 2, 3]).await;
        raw_send(&mut s, &[]).await;
        raw_send(&mut s, &[0, 0, 0, 9, 0, 0, 0, 7]).await; // msg_type 7
        raw_send(&mut s, &raw_call(9, 2, TEST_PROG, 1, 0, &[])).await;
        let r = raw_recv(&mut s).await.unwrap();
        assert_eq!(&r[..4], &9u32.to_be_bytes());
        // A credential body that lies about its length: AUTH_ERROR(BADCRED).
        let mut bad = raw_call(10, 2, TEST_PROG, 1, 0, &[]);
        bad[24..28].copy_from_slice(&1u32.to_be_bytes()); // AUTH_SYS
        bad[28..32].copy_from_slice(&4u32.to_be_bytes()); // body of 4: too short
        raw_send(&mut s, &bad[..]).await;
        let r = raw_recv(&mut s).await.unwrap();
        #[rustfmt::skip]
        let expect = [0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1];
        assert_eq!(&r[..], &expect[..], "MSG_DENIED AUTH_ERROR AUTH_BADCRED");
        // A credential flavor the server does not accept (AUTH_DH = 3, empty
        // body): AUTH_ERROR(BADCRED) as well.
        let mut dh = raw_call(11, 2, TEST_PROG, 1, 0, &[]);
        dh[24..28].copy_from_slice(&3u32.to_be_bytes());
        raw_send(&mut s, &dh[..]).await;
        let r = raw_recv(&mut s).await.unwrap();
        #[rustfmt::skip]
        let expect = [0, 0, 0, 11, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1];
        assert_eq!(&r[..], &expect[..], "AUTH_DH refused with AUTH_BADCRED");
        // Others were not affected.
        testprog::null(&good).await.unwrap();
        assert!(f.server.metrics().transport_errors >= 2);
        assert!(f.server.metrics().garbage_messages >= 3);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn caller_errors_and_connection_loss() {
    timeout(T, async {
        let f = start().await;
        let c = client_with(
            f.addr,
            ClientConfig::default(),
            TcpConfig {
                record_limits: RecordLimits {
                    max_record_size: 1000,
                    ..RecordLimits::default()
                },
                ..TcpConfig::default()
            },
        )
        .await;
        let e = testprog::echo(&c, &[0u8; 2000]).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Caller, "{e}");
        // A reply larger than the client's record limit closes the
        // connection: every call fails with a transport error.
        let e = testprog::read(&c, 5000, 1).await.unwrap_err();
        assert!(
            matches!(e, RpcError::Transport(TransportError::Framing(_))),
            "{e}"
        );
        let e = testprog::null(&c).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Transport);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn graceful_shutdown_finishes_calls_in_flight() {
    timeout(T, async {
        let f = start().await;
        let c = Arc::new(client(f.addr).await);
        let c2 = c.clone();
        let slow =
            tokio::spawn(async move { c2.call(ERR_PROG, 2, P_COUNT, u32_args(300), &[]).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.tcp.shutdown().await;
        let r = slow.await.unwrap().unwrap();
        assert_eq!(r.reader().u32("n").unwrap(), 1);
        // The connection is closed afterwards.
        let e = testprog::null(&c).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Transport, "{e}");
        // And nobody listens any more.
        assert!(TcpStream::connect(f.addr).await.is_err());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn client_close_fails_later_calls() {
    timeout(T, async {
        let f = start().await;
        let c = client(f.addr).await;
        testprog::null(&c).await.unwrap();
        c.close();
        let e = testprog::null(&c).await.unwrap_err();
        assert_eq!(e, RpcError::Transport(TransportError::Closed));
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

/// A hostile or unusual server written with raw sockets: for each call it
/// receives it answers with `answer(xid)` (raw record bodies, possibly
/// several, possibly none).
async fn raw_server(
    answer: impl Fn(u32) -> Vec<Vec<u8>> + Send + 'static,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        while let Some(call) = raw_recv(&mut s).await {
            let xid = u32::from_be_bytes([call[0], call[1], call[2], call[3]]);
            for body in answer(xid) {
                if s.write_all(&body).await.is_err() {
                    return;
                }
            }
        }
    });
    (addr, h)
}

fn rec(words: &[u32]) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | (words.len() * 4) as u32)
        .to_be_bytes()
        .to_vec();
    for w in words {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v
}

#[tokio::test]
async fn client_decodes_denied_and_odd_replies() {
    timeout(T, async {
        // Answers by procedure-independent XID order: the n-th call gets the
        // n-th kind of reply.
        let n = Arc::new(AtomicU32::new(0));
        let (addr, _h) = raw_server(move |xid| {
            match n.fetch_add(1, Ordering::SeqCst) {
                // MSG_DENIED RPC_MISMATCH (2, 3)
                0 => vec![rec(&[xid, 1, 1, 0, 2, 3])],
                // MSG_DENIED AUTH_ERROR AUTH_TOOWEAK
                1 => vec![rec(&[xid, 1, 1, 1, 5])],
                // accept_stat 77 (unknown: default void arm)
                2 => vec![rec(&[xid, 1, 0, 0, 0, 77])],
                // reply_stat 9: undecodable reply header
                3 => vec![rec(&[xid, 1, 9])],
                // a reply to another XID first (dropped), a call to the
                // client (no backchannel: dropped), then SUCCESS with a
                // u32 result split over two fragments.
                4 => vec![
                    rec(&[xid ^ 0xffff, 1, 0, 0, 0, 0]),
                    rec(&[77, 0, 2, 1, 1, 0, 0, 0, 0, 0]),
                    {
                        let mut v = vec![0, 0, 0, 8];
                        for w in [xid, 1u32] {
                            v.extend_from_slice(&w.to_be_bytes());
                        }
                        v.extend_from_slice(&[0, 0, 0, 16]);
                        for w in [0u32, 0, 0, 0] {
                            v.extend_from_slice(&w.to_be_bytes());
                        }
                        v.extend_from_slice(&[0x80, 0, 0, 4, 0, 0, 0x30, 0x39]);
                        v
                    },
                ],
                // a fragment header over the client's record limit
                _ => vec![vec![0xff, 0xff, 0xff, 0xff]],
            }
        })
        .await;
        let c = client(addr).await;
        let call = || c.call(1, 1, 1, Message::new(), &[]);
        let e = call().await.unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::RpcMismatch { low: 2, high: 3 })
        );
        assert_eq!(e.blame(), Blame::Peer);
        let e = call().await.unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::AuthError(
                rpcrdma_proto::wire::rpc::AuthStat::AUTH_TOOWEAK
            ))
        );
        let e = call().await.unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::OtherAccept(
                rpcrdma_proto::wire::rpc::AcceptStat(77)
            ))
        );
        let e = call().await.unwrap_err();
        assert!(matches!(e, RpcError::BadReply(_)), "{e}");
        assert_eq!(e.blame(), Blame::Peer);
        let r = call().await.unwrap();
        let mut rd = r.reader();
        assert_eq!(rd.u32("result").unwrap(), 12345);
        rd.finish("end").unwrap();
        let e = call().await.unwrap_err();
        assert!(
            matches!(e, RpcError::Transport(TransportError::Framing(_))),
            "{e}"
        );
        let m = c.metrics();
        assert_eq!(m.replies_unmatched, 1);
        assert_eq!(m.backchannel_unsupported, 1);
        assert_eq!(m.err_rpc_mismatch, 1);
        assert_eq!(m.err_auth_error, 1);
        assert_eq!(m.err_other, 1);
        assert_eq!(m.transport_errors, 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_peer_that_does_not_read_replies_is_not_served_unboundedly() {
    timeout(T, async {
        let f = start_with(TcpConfig {
            max_in_flight: 4,
            ..TcpConfig::default()
        })
        .await;
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        let n = 64u32;
        let mut all = Vec::new();
        for xid in 0..n {
            let mut args = Vec::new();
            args.extend_from_slice(&(1u32 << 20).to_be_bytes());
            args.extend_from_slice(&xid.to_be_bytes());
            let body = raw_call(xid, 2, TEST_PROG, 1, testprog::PROC_READ, &args);
            all.extend_from_slice(&(0x8000_0000u32 | body.len() as u32).to_be_bytes());
            all.extend_from_slice(&body);
        }
        let (mut rd, mut wr) = s.split();
        let writer = async { wr.write_all(&all).await.unwrap() };
        let check = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // Replies are only produced as fast as they are written: the
            // server stopped reading calls (4 in flight plus what the socket
            // buffers hold).
            let served = f.server.metrics().calls_received;
            assert!(
                served < 40,
                "server took {served} calls while replies were not read"
            );
        };
        tokio::join!(writer, check);
        // Now read every reply.
        let mut got = 0;
        let mut dec = RecordDecoder::new(RecordLimits::default());
        let mut buf = bytes::BytesMut::new();
        while got < n {
            if let Some(r) = dec.decode(&mut buf).unwrap() {
                assert_eq!(r.len(), 24 + 4 + (1 << 20));
                got += 1;
                continue;
            }
            let mut tmp = vec![0u8; 1 << 16];
            let k = rd.read(&mut tmp).await.unwrap();
            assert!(k > 0);
            buf.extend_from_slice(&tmp[..k]);
        }
        assert_eq!(f.server.metrics().calls_received, n as u64);
        drop(s);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed() {
    timeout(T, async {
        let f = start_with(TcpConfig {
            max_connections: 1,
            ..TcpConfig::default()
        })
        .await;
        let c = client(f.addr).await;
        testprog::null(&c).await.unwrap();
        let c2 = client(f.addr).await;
        let e = testprog::null(&c2).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Transport, "{e}");
        assert_eq!(f.server.metrics().connections_refused, 1);
        testprog::null(&c).await.unwrap();
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn reconnecting_client_survives_a_server_restart() {
    timeout(T, async {
        let f = start().await;
        let addr = f.addr;
        let c = Client::tcp_reconnecting(
            addr,
            ClientConfig::default(),
            TcpConfig::default(),
            rpcrdma::ReconnectPolicy::default(),
        );
        testprog::null(&c).await.unwrap();
        f.tcp.shutdown().await;
        // A new server on the same port.
        let server = Server::default();
        testprog::register(&server);
        let tcp = server.serve_tcp(addr, TcpConfig::default()).await.unwrap();
        let data = pattern(9, 3000);
        assert_eq!(&testprog::echo(&c, &data).await.unwrap()[..], &data[..]);
        let m = c.metrics();
        assert_eq!(m.connections, 2);
        tcp.shutdown().await;
        // Nobody listens: the call fails after the policy's attempts.
        let c2 = Client::tcp_reconnecting(
            addr,
            ClientConfig::default(),
            TcpConfig::default(),
            rpcrdma::ReconnectPolicy {
                initial_backoff: Duration::from_millis(5),
                max_backoff: Duration::from_millis(10),
                max_attempts: 3,
            },
        );
        let e = testprog::null(&c2).await.unwrap_err();
        assert!(
            matches!(&e, RpcError::Transport(TransportError::Lost(s)) if s.contains("3 attempts")),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn lost_call_is_resent_with_the_same_xid_and_answered_from_the_cache() {
    timeout(T, async {
        let f = start().await;
        let real = f.addr;
        // First connection: a proxy that forwards the call to the real
        // server, swallows the reply and drops the client's connection.
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::<Bytes>::new()));
        let seen2 = seen.clone();
        tokio::spawn(async move {
            let (mut s, _) = proxy.accept().await.unwrap();
            let call = raw_recv(&mut s).await.unwrap();
            seen2.lock().unwrap().push(call.clone());
            let mut up = TcpStream::connect(real).await.unwrap();
            raw_send(&mut up, &call).await;
            let reply = raw_recv(&mut up).await.unwrap();
            seen2.lock().unwrap().push(reply);
            drop(s); // the client never gets the reply
        });
        let attempts = Arc::new(AtomicU32::new(0));
        let a2 = attempts.clone();
        let metrics = Arc::new(rpcrdma::Metrics::default());
        let m2 = metrics.clone();
        let connector: rpcrdma::Connector = Arc::new(move || {
            let n = a2.fetch_add(1, Ordering::SeqCst);
            let addr = if n == 0 { proxy_addr } else { real };
            let cfg = TcpConfig {
                metrics: Some(m2.clone()),
                ..TcpConfig::default()
            };
            Box::pin(async move {
                let t: Arc<dyn rpcrdma::ClientTransport> =
                    rpcrdma::TcpClientTransport::connect(addr, cfg).await?;
                Ok(t)
            })
        });
        let t = rpcrdma::ReconnectingTransport::new(
            connector,
            rpcrdma::ReconnectPolicy::default(),
            metrics,
        );
        let c = Client::new(Arc::new(t), ClientConfig::default());
        let r = c
            .call(ERR_PROG, 2, P_COUNT, u32_args(0), &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("n").unwrap(), 1);
        assert_eq!(f.count.load(Ordering::SeqCst), 1, "executed once");
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        // The re-sent call had the XID of the lost one.
        assert_eq!(u32::from_be_bytes(seen[0][..4].try_into().unwrap()), r.xid);
        assert_eq!(f.server.metrics().drc_hits, 1);
        assert_eq!(c.metrics().retransmits, 1);
        f.tcp.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn shutdown_is_bounded_with_a_peer_that_does_not_read() {
    timeout(T, async {
        let f = start_with(TcpConfig {
            max_in_flight: 4,
            shutdown_grace: Duration::from_millis(200),
            ..TcpConfig::default()
        })
        .await;
        let mut s = TcpStream::connect(f.addr).await.unwrap();
        for xid in 0..32u32 {
            let mut args = (1u32 << 20).to_be_bytes().to_vec();
            args.extend_from_slice(&xid.to_be_bytes());
            raw_send(
                &mut s,
                &raw_call(xid, 2, TEST_PROG, 1, testprog::PROC_READ, &args),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = std::time::Instant::now();
        f.tcp.shutdown().await;
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        // The connection is gone: reading ends (EOF or reset) after at most
        // the replies that were written.
        let mut sink = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await
    .unwrap();
}
