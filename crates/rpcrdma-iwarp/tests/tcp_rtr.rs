//! The initiator's RFC 6581 RTR against a responder that behaves like
//! Linux siw (`siw_accept` sends the MPA Reply before it hooks the queue
//! pair to the socket): whatever arrives first after the Reply is not
//! noticed until more data arrives. The first ULP message must not be lost
//! there (it was before the Read RTR), and a responder that never answers
//! the Read RTR must fail the connection in bounded time with a clear
//! error.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::{IwarpConfig, Rtr, DEFAULT_CAPS};
use rpcrdma_iwarp::mpa::{FrameDecode, FrameKind, IrdOrd, MpaFrame, MAX_PRIVATE_DATA};
use rpcrdma_iwarp::qp::{QpStats, QueuePair, StreamParams};
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::provider::{
    Access, Completion, ConnectionEvent, Opcode, Provider, RecvWr, SendOp, SendWr, Status,
};

/// How the fake responder treats the stream after its Reply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wiring {
    /// Like siw: bytes of the first arrival stay unread until a later
    /// arrival (a new `sk_data_ready`).
    MissFirstArrival,
    /// Never reads the stream (a peer that never answers the RTR).
    Never,
}

/// What the fake responder saw.
#[derive(Debug)]
struct Seen {
    /// The Request offered peer-to-peer mode with the Read RTR.
    offered_read_rtr: bool,
    /// FPDUs its queue pair took in, per opcode.
    stats: QpStats,
    /// The message of the first Send, if one arrived.
    first_send: Option<Vec<u8>>,
}

fn read_request(s: &mut TcpStream) -> MpaFrame {
    let mut buf = Vec::new();
    let mut b = [0u8; 600];
    loop {
        if let Ok(FrameDecode::Frame { frame, .. }) =
            MpaFrame::decode_prefix(&buf, FrameKind::Request, MAX_PRIVATE_DATA)
        {
            return frame;
        }
        let n = s.read(&mut b).expect("request");
        assert!(n > 0, "closed before the Request");
        buf.extend_from_slice(&b[..n]);
    }
}

/// One connection: answers the Request as Linux siw does (peer-to-peer
/// and Read RTR if offered, IRD raised to 1), then reads as `wiring` says;
/// echoes the first Send back; stops after `limit`.
fn siw_like(l: TcpListener, wiring: Wiring, limit: Duration) -> Seen {
    let (mut s, _) = l.accept().unwrap();
    let req = read_request(&mut s);
    let theirs = req.ird_ord().unwrap_or_default();
    let p2p = theirs.peer_to_peer;
    let crc = req.flags.crc();
    let io = IrdOrd {
        peer_to_peer: p2p,
        rtr_read: p2p && theirs.rtr_read,
        ..IrdOrd::new(theirs.ord.max(1), 16)
    };
    let reply = MpaFrame::enhanced(FrameKind::Reply, crc, io, &[]).unwrap();
    s.write_all(&reply.to_vec().unwrap()).unwrap();
    let mut qp = QueuePair::new(DEFAULT_CAPS, 0x80);
    qp.establish(StreamParams {
        crc,
        ird: 1,
        ..StreamParams::DEFAULT
    });
    let buf = qp
        .register(vec![0u8; 256].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    qp.post_recv(RecvWr {
        wr_id: 1,
        sge: buf.sge(0, 256),
    })
    .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let end = Instant::now() + limit;
    let mut stuck: Option<Vec<u8>> = None;
    let mut first_send = None;
    let mut b = vec![0u8; 64 * 1024];
    let mut out = vec![0u8; 64 * 1024];
    while Instant::now() < end && first_send.is_none() {
        let n = match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => 0,
        };
        if n > 0 {
            match (wiring, stuck.as_mut()) {
                (Wiring::Never, _) => {}
                // The first arrival finds the connection manager's
                // callback, which leaves the bytes in the socket.
                (Wiring::MissFirstArrival, None) => stuck = Some(b[..n].to_vec()),
                // A later arrival calls the queue pair's callback, which
                // reads everything queued.
                (Wiring::MissFirstArrival, Some(old)) => {
                    qp.handle_input(old);
                    old.clear();
                    qp.handle_input(&b[..n]);
                }
            }
        }
        loop {
            let m = qp.poll_transmit(&mut out);
            if m == 0 {
                break;
            }
            s.write_all(&out[..m]).unwrap();
        }
        qp.confirm_transmitted();
        let mut c: Vec<Completion> = Vec::new();
        qp.poll_completions(&mut c);
        if let Some(r) = c.iter().find(|c| c.opcode == Opcode::Recv) {
            let msg = qp.region(&buf).unwrap()[..r.byte_len as usize].to_vec();
            // Echo it.
            qp.post_send(SendWr {
                wr_id: 2,
                op: SendOp::Send { solicited: false },
                sges: vec![buf.sge(0, r.byte_len)].into(),
            })
            .unwrap();
            let m = qp.poll_transmit(&mut out);
            s.write_all(&out[..m]).unwrap();
            first_send = Some(msg);
        }
    }
    Seen {
        offered_read_rtr: p2p && theirs.rtr_read,
        stats: qp.stats(),
        first_send,
    }
}

/// Connects to a siw-like responder, sends one message, waits (bounded)
/// for its echo. Returns the echo (None: lost) and the responder's view.
fn first_message(crc: bool) -> (Option<Vec<u8>>, Seen) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || siw_like(l, Wiring::MissFirstArrival, Duration::from_secs(5)));
    let cfg = IwarpConfig {
        crc,
        ..IwarpConfig::default()
    };
    let mut p = IwarpProvider::connect_blocking(addr, cfg, Duration::from_secs(5)).unwrap();
    let mut events = Vec::new();
    while let Some(e) = p.poll_event() {
        events.push(e);
    }
    assert!(
        matches!(events[..], [ConnectionEvent::Established(_)]),
        "{events:?}"
    );
    let rx = p
        .register(vec![7u8; 32].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    let tx = p
        .register(b"hello".to_vec().into_boxed_slice(), Access::NONE)
        .unwrap();
    p.post_recv(RecvWr {
        wr_id: 10,
        sge: rx.sge(0, 32),
    })
    .unwrap();
    p.post_send(SendWr {
        wr_id: 11,
        op: SendOp::Send { solicited: false },
        sges: vec![tx.sge(0, 5)].into(),
    })
    .unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    let mut echo = None;
    let mut comps = Vec::new();
    while Instant::now() < end && echo.is_none() {
        p.poll_completions(&mut comps);
        // Only the ULP's own work requests complete here.
        assert!(
            comps.iter().all(|c| c.wr_id == 10 || c.wr_id == 11),
            "{comps:?}"
        );
        if let Some(c) = comps.iter().find(|c| c.wr_id == 10) {
            assert_eq!(c.status, Status::Success);
            echo = Some(p.region(&rx).unwrap()[..c.byte_len as usize].to_vec());
        } else {
            p.wait(Some(Duration::from_millis(20))).unwrap();
        }
    }
    drop(p);
    (echo, peer.join().unwrap())
}

#[test]
fn first_message_survives_a_responder_that_misses_the_first_arrival() {
    for crc in [false, true] {
        let (echo, seen) = first_message(crc);
        assert!(seen.offered_read_rtr);
        assert_eq!(echo.as_deref(), Some(&b"hello"[..]), "crc {crc}: lost");
        assert_eq!(seen.first_send.as_deref(), Some(&b"hello"[..]));
        // The Read RTR went first and was answered once the nudges (zero-
        // length RDMA Writes, opcode 0) made the responder read.
        assert_eq!(seen.stats.rx_fpdus[1], 1, "{:?}", seen.stats);
        assert!(seen.stats.rx_fpdus[0] >= 1, "{:?}", seen.stats);
        assert_eq!(seen.stats.tx_fpdus[2], 1, "one Read Response");
    }
}

#[test]
fn read_rtr_without_answer_fails_the_connection_in_bounded_time() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let peer = thread::spawn(move || siw_like(l, Wiring::Never, Duration::from_secs(3)));
    let cfg = IwarpConfig {
        rtr_timeout: Duration::from_millis(300),
        ..IwarpConfig::default()
    };
    let t0 = Instant::now();
    let e = IwarpProvider::connect_blocking(addr, cfg, Duration::from_secs(10)).unwrap_err();
    let took = t0.elapsed();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("never answered"), "{e}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let seen = peer.join().unwrap();
    assert!(seen.first_send.is_none());
}

/// Our own responder names the Write RTR: no round trip, and the first
/// message goes at once (the connection is established by the Reply).
#[test]
fn our_responder_costs_no_round_trip() {
    let l = rpcrdma_iwarp::tcp::Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let addr = l.local_addr().unwrap();
    let t = thread::spawn(move || {
        let pc = l.accept(Duration::from_secs(5)).unwrap();
        pc.accept(IwarpConfig::default(), Duration::from_secs(5))
            .unwrap()
    });
    let p = IwarpProvider::connect_blocking(addr, IwarpConfig::default(), Duration::from_secs(5))
        .unwrap();
    let _b = t.join().unwrap();
    assert_eq!(p.established().unwrap().rtr, Rtr::Write);
    // Only the Write RTR went out before the ULP: no Read Request.
    assert_eq!(p.stats().tx_fpdus[0], 1);
    assert_eq!(p.stats().tx_fpdus[1], 0);
}
