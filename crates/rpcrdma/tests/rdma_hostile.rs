//! A forged-frame peer ([`hostile`]) against the real RPC-over-RDMA server
//! over loopback iWARP: what the server answers to frames no well-behaved
//! client sends.

mod hostile;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hostile::{rpc, Answer, Event, MpaRequest, Peer, Tagged, Untagged};
use rpcrdma::rdma::{RdmaServer, RdmaServerConfig};
use rpcrdma::testprog::{self, PROC_ECHO, PROC_WRITE, TEST_PROG, TEST_VERS};
use rpcrdma::{CallContext, Server};
use rpcrdma_iwarp::rdmap::{ReadRequest, TerminateMessage};
use rpcrdma_iwarp::TerminateCode;
use rpcrdma_proto::wire::chunk::{ReadSegment, Segment as RdmaSegment};
use rpcrdma_proto::wire::rpc::RpcMsg;
use rpcrdma_proto::XdrEncode;

const LIMIT: Duration = Duration::from_secs(60);

async fn start(server: &Server, cfg: RdmaServerConfig) -> RdmaServer {
    RdmaServer::serve(server, "127.0.0.1:0", cfg)
        .await
        .expect("bind")
}

/// A server of the test program with `cfg`.
async fn start_testprog(cfg: RdmaServerConfig) -> RdmaServer {
    let server = Server::default();
    testprog::register(&server);
    start(&server, cfg).await
}

/// Runs the blocking peer script `f` off the runtime, bounded in time.
async fn peer_script<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(LIMIT, tokio::task::spawn_blocking(f))
        .await
        .expect("test timed out")
        .expect("peer script panicked")
}

/// An ECHO call of `data` as one RDMA_MSG.
fn echo_call(xid: u32, data: &[u8]) -> Vec<u8> {
    rpc::call(
        xid,
        32,
        (TEST_PROG, TEST_VERS, PROC_ECHO),
        &rpc::opaque(data),
        &[],
    )
}

/// Connects with the default (Linux-shaped) MPA Request; must be accepted.
fn connect_ok(addr: SocketAddr) -> Peer {
    let p = Peer::connect(addr, &MpaRequest::default()).unwrap();
    assert!(
        matches!(p.answer(), Answer::Accepted(_)),
        "not accepted: {:?}",
        p.answer()
    );
    p
}

/// One ECHO round trip; returns the reply.
fn echo(p: &mut Peer, xid: u32, data: &[u8]) -> rpc::Reply {
    p.send_message(&echo_call(xid, data)).unwrap();
    let r = rpc::reply(&p.recv_send().unwrap()).expect("an RDMA_MSG reply");
    assert_eq!(r.rpc.xid, xid);
    assert!(r.is_success());
    assert_eq!(r.results, rpc::opaque(data));
    r
}

/// The next thing the server sends must be a Terminate, and then it must
/// close the connection: returns the Terminate. A reply (or anything
/// else) first fails the test, naming it.
fn expect_terminate(p: &mut Peer) -> TerminateMessage {
    let t = match p.recv().unwrap() {
        Event::Terminate(t) => t,
        Event::Send { data, .. } => panic!(
            "the server answered instead: {:?}",
            rpc::reply(&data).map(|r| (r.rpc.xid, r.results))
        ),
        other => panic!("no Terminate: {other:?}"),
    };
    assert_eq!(p.recv_until_closed().unwrap(), []);
    t
}

/// The peer itself: an ECHO round trip through forged frames, then a
/// segment on queue 3 answered with the DDP "invalid QN" Terminate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peer_round_trip_and_terminate() {
    let rdma = start_testprog(RdmaServerConfig::default()).await;
    let addr = rdma.local_addr();
    peer_script(move || {
        let mut p = Peer::connect(addr, &MpaRequest::default()).unwrap();
        let Answer::Accepted(reply) = p.answer().clone() else {
            panic!("not accepted: {:?}", p.answer());
        };
        assert!(reply.is_enhanced());
        p.send_message(&echo_call(0x1234, b"forged")).unwrap();
        let r = rpc::reply(&p.recv_send().unwrap()).expect("an RDMA_MSG reply");
        assert_eq!(r.rpc.xid, 0x1234);
        assert!(r.is_success());
        assert_eq!(r.results, rpc::opaque(b"forged"));
        let mut bad = Untagged::send(p.next_msn, b"x");
        bad.qn = 3;
        p.send_untagged(&bad).unwrap();
        let t = expect_terminate(&mut p);
        assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_INVALID_QN);
        let d = t.ddp.expect("offending header copied");
        assert_eq!(d.header.to_vec(), bad.ulpdu()[..18]);
    })
    .await;
    rdma.shutdown().await;
}

/// After 70 ECHO calls (more than the server's receive buffers, so they are
/// recycled), a Send made of its last segment only — zero octets at MO =
/// one call's length — once completed as a message built from the old
/// contents of the buffer, and the server answered an old call again. Now:
/// DDP / 2 / 0x04 (invalid MO), no reply, the connection closed; other
/// connections are served as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_last_segment_does_not_deliver_a_stale_buffer() {
    let rdma = start_testprog(RdmaServerConfig::default()).await;
    let addr = rdma.local_addr();
    peer_script(move || {
        let mut p = connect_ok(addr);
        let mut call_len = 0;
        for i in 0..70u32 {
            let data = [i as u8; 16];
            call_len = echo_call(0x5000 + i, &data).len();
            echo(&mut p, 0x5000 + i, &data);
        }
        let lone = Untagged {
            mo: call_len as u32,
            ..Untagged::send(p.next_msn, &[])
        };
        p.send_untagged(&lone).unwrap();
        let t = expect_terminate(&mut p);
        assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_INVALID_MO);
        assert_eq!(t.ddp.map(|d| d.header.to_vec()), Some(lone.ulpdu()));
        let mut q = connect_ok(addr);
        echo(&mut q, 7, b"still serving");
    })
    .await;
    rdma.shutdown().await;
}

/// A TEST_WRITE call whose data (`len` octets) is in a Read chunk at
/// `(stag, to)` of the peer: the server must RDMA Read it.
fn write_call(xid: u32, stag: u32, to: u64, len: u32) -> Vec<u8> {
    let rpc_header = RpcMsg::call_auth_none(xid, TEST_PROG, TEST_VERS, PROC_WRITE)
        .to_vec()
        .unwrap()
        .len();
    // The opaque's length stays inline; its data goes to the Read chunk,
    // at the XDR position right after that length word.
    let position = (rpc_header + 4) as u32;
    rpc::call(
        xid,
        32,
        (TEST_PROG, TEST_VERS, PROC_WRITE),
        &len.to_be_bytes(),
        &[ReadSegment::new(position, RdmaSegment::new(stag, len, to))],
    )
}

/// The server's RDMA Read Request for the chunk at `(stag, to, len)`.
fn expect_read_request(p: &mut Peer, stag: u32, to: u64, len: u32) -> ReadRequest {
    match p.recv().unwrap() {
        Event::ReadRequest { req, .. } => {
            assert_eq!((req.src_stag, req.src_to, req.size), (stag, to, len));
            req
        }
        other => panic!("expected a Read Request, got {other:?}"),
    }
}

/// A 1000-octet Read chunk answered with a Read Response of 500 octets
/// and L set once ran TEST_WRITE on 500 octets and 500 zeros and replied
/// SUCCESS. Now the server Terminates (DDP / 1 / 0x01), its Read fails, the
/// connection ends on the engine's error path, the handler never runs —
/// and the server goes on serving other connections (the same call
/// answered right works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_read_response_fails_the_read() {
    let server = Server::default();
    let writes = Arc::new(AtomicU32::new(0));
    let w = writes.clone();
    server.register(TEST_PROG, TEST_VERS, move |ctx: CallContext| {
        if ctx.proc == PROC_WRITE {
            w.fetch_add(1, Ordering::SeqCst);
        }
        testprog::test_handler(ctx)
    });
    let rdma = start(&server, RdmaServerConfig::default()).await;
    let addr = rdma.local_addr();
    let w = writes.clone();
    peer_script(move || {
        let (stag, to) = (0x0000_ab01, 0x1000);
        // Short, long, out of order: each a Terminate, nothing executed.
        type Segs = &'static [(u64, bool, usize)];
        let bad: [(&str, Segs); 3] = [
            ("short", &[(0, true, 500)]),
            ("long", &[(0, false, 1000), (1000, true, 8)]),
            ("out of order", &[(500, false, 500), (0, true, 500)]),
        ];
        for (name, segs) in bad {
            let mut p = connect_ok(addr);
            p.send_message(&write_call(1, stag, to, 1000)).unwrap();
            let req = expect_read_request(&mut p, stag, to, 1000);
            for &(off, last, n) in segs {
                let seg =
                    Tagged::read_response(req.sink_stag, req.sink_to + off, last, &vec![0x77; n]);
                p.send_tagged(&seg).unwrap();
            }
            let t = expect_terminate(&mut p);
            assert_eq!(t.code, TerminateCode::DDP_TAGGED_BASE_BOUNDS, "{name}");
            assert_eq!(w.load(Ordering::SeqCst), 0, "{name}: the handler ran");
        }
        // The same call answered right, in two segments, on a new connection.
        let mut p = connect_ok(addr);
        p.send_message(&write_call(2, stag, to, 1000)).unwrap();
        let req = expect_read_request(&mut p, stag, to, 1000);
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        p.send_tagged(&Tagged::read_response(
            req.sink_stag,
            req.sink_to,
            false,
            &data[..600],
        ))
        .unwrap();
        p.send_tagged(&Tagged::read_response(
            req.sink_stag,
            req.sink_to + 600,
            true,
            &data[600..],
        ))
        .unwrap();
        let r = rpc::reply(&p.recv_send().unwrap()).expect("an RDMA_MSG reply");
        assert_eq!(r.rpc.xid, 2);
        assert!(r.is_success());
        let mut want = 1000u32.to_be_bytes().to_vec();
        want.extend_from_slice(&crc32c::crc32c(&data).to_be_bytes());
        assert_eq!(r.results, want);
        assert_eq!(w.load(Ordering::SeqCst), 1);
    })
    .await;
    // Each refused Read ended its connection on the error path. The
    // driver counts the loss when it takes the engine's ConnectionLost
    // event, which may be after the Terminate reached the peer (under load,
    // after the script ended): wait for it, bounded.
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while rdma.metrics().snapshot().transport_errors < 3 {
        assert!(std::time::Instant::now() < end, "3 connection losses");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rdma.shutdown().await;
}

/// An enhanced MPA Request (revision 2, S set) whose private data is too
/// short to begin with the IRD/ORD octets (PD_Length 0 to 3) was accepted.
/// Now: an MPA Reject, then the close; the server goes on accepting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enhanced_request_without_ird_ord_is_rejected() {
    let rdma = start_testprog(RdmaServerConfig::default()).await;
    let addr = rdma.local_addr();
    peer_script(move || {
        for n in 0..4 {
            let mut f = MpaRequest::default().frame();
            f.private_data.truncate(n);
            let mut p = Peer::connect_raw(addr, &f.to_vec().unwrap()).unwrap();
            let Answer::Rejected(r) = p.answer().clone() else {
                panic!("PD_Length {n}: {:?}", p.answer());
            };
            assert!(r.flags.reject());
            assert_eq!(p.recv().unwrap(), Event::Closed, "PD_Length {n}");
        }
        let mut q = connect_ok(addr);
        echo(&mut q, 9, b"next");
    })
    .await;
    rdma.shutdown().await;
}

/// The server never has more RDMA Reads outstanding than the initiator's
/// IRD — also when it answers with MPA revision 1 (where it used its own
/// ORD of 16): with IRD 1, two calls with Read chunks get one Read Request
/// at a time.
//= rfc6581#section-9.1
//# The
//# responder MUST set its ORD at most to the initiator IRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_ord_never_above_initiator_ird() {
    for rev in [2, 1] {
        let mut cfg = RdmaServerConfig::default();
        cfg.provider.iwarp_mut().expect("iWARP").config.rev = rev;
        let rdma = start_testprog(cfg).await;
        let addr = rdma.local_addr();
        peer_script(move || {
            let req = MpaRequest {
                ird: 1,
                ..MpaRequest::default()
            };
            let mut p = Peer::connect(addr, &req).unwrap();
            let Answer::Accepted(reply) = p.answer().clone() else {
                panic!("rev {rev}: {:?}", p.answer());
            };
            assert_eq!(reply.revision, rev);
            if rev == 2 {
                assert_eq!(reply.ird_ord().map(|io| io.ord), Some(1));
            }
            let chunks = [(0x0000_c101, 0x1000), (0x0000_c201, 0x2000)];
            for (i, &(stag, to)) in chunks.iter().enumerate() {
                p.send_message(&write_call(10 + i as u32, stag, to, 64))
                    .unwrap();
            }
            let data = [0x5a; 64];
            let mut replies = Vec::new();
            for &(stag, to) in &chunks {
                // (The reply to the first call may come before the second
                // Read Request.)
                let rr = loop {
                    match p.recv().unwrap() {
                        Event::Send { data, .. } => replies.push(data),
                        Event::ReadRequest { req, .. } => break req,
                        other => panic!("rev {rev}: {other:?}"),
                    }
                };
                assert_eq!((rr.src_stag, rr.src_to, rr.size), (stag, to, 64));
                // Not a second Read while this one is outstanding.
                p.limit = Duration::from_millis(300);
                match p.recv() {
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Ok(Event::Send { data, .. }) => replies.push(data),
                    other => panic!("rev {rev}: with IRD 1, got {other:?}"),
                }
                p.limit = hostile::DEFAULT_LIMIT;
                let seg = Tagged::read_response(rr.sink_stag, rr.sink_to, true, &data);
                p.send_tagged(&seg).unwrap();
            }
            while replies.len() < 2 {
                replies.push(p.recv_send().unwrap());
            }
            for r in &replies {
                assert!(rpc::reply(r).expect("a reply").is_success(), "rev {rev}");
            }
        })
        .await;
        rdma.shutdown().await;
    }
}
