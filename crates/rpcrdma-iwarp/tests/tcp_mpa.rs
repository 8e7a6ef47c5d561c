//! MPA exchanges of the TCP adapter with a scripted peer on a raw socket
//! (127.0.0.1): what goes on the wire when the peer's frame is refused.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FramingConfig, Received};
use rpcrdma_iwarp::mpa::{FrameDecode, FrameKind, IrdOrd, MpaFrame};
use rpcrdma_iwarp::rdmap::Segment;
use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
use rpcrdma_iwarp::TerminateCode;
use rpcrdma_proto::provider::{Blame, ConnectionEvent, DisconnectReason, Provider, Status};

const LIMIT: Duration = Duration::from_secs(10);

/// An MPA frame of `kind` ("Req" / "Rep").
fn frame(kind: &str, flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = format!("MPA ID {kind} Frame").into_bytes();
    v.extend_from_slice(&[flags, rev]);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

/// Everything the other end sends until it closes (bounded in time).
fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let mut v = Vec::new();
    s.read_to_end(&mut v).expect("the other end closes in time");
    v
}

/// Reads the initiator's whole Request from a raw accepted socket.
fn read_request(s: &mut TcpStream) -> MpaFrame {
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let mut v = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b).unwrap();
        v.push(b[0]);
        if let Ok(FrameDecode::Frame { frame, .. }) =
            MpaFrame::decode_prefix(&v, FrameKind::Request, 512)
        {
            return frame;
        }
    }
}

/// Drives `p` until it reports the end of the connection.
fn disconnect_reason(p: &mut IwarpProvider) -> DisconnectReason {
    let deadline = Instant::now() + LIMIT;
    while Instant::now() < deadline {
        match p.poll_event() {
            Some(ConnectionEvent::Disconnected(r)) => return r,
            Some(e) => panic!("unexpected {e:?}"),
            None => {
                p.wait(Some(Duration::from_millis(10))).unwrap();
            }
        }
    }
    panic!("never disconnected");
}

/// An enhanced Request whose private data is too short for the IRD/ORD
/// octets: the listener sends a Reject, closes, and reports the error.
#[test]
fn listener_rejects_enhanced_request_without_ird_ord() {
    let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    c.write_all(&frame("Req", 0x10, 2, &[0, 1])).unwrap();
    let e = l.accept(LIMIT).expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(read_to_end(&mut c), frame("Rep", 0x30, 2, &[0; 4]));
}

/// An accepting enhanced Reply without the IRD/ORD octets: the initiator
/// closes without sending anything more.
#[test]
fn initiator_closes_on_enhanced_reply_without_ird_ord() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut p = IwarpProvider::connect(l.local_addr().unwrap(), IwarpConfig::default()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    read_request(&mut s);
    s.write_all(&frame("Rep", 0x10, 2, &[0, 0, 0])).unwrap();
    assert_eq!(
        disconnect_reason(&mut p),
        DisconnectReason::Error {
            status: Status::RemoteInvalidRequest,
            blame: Blame::Remote
        }
    );
    assert_eq!(read_to_end(&mut s), []);
}

/// A responder ORD above the IRD the initiator can offer (its `max_ird`):
/// the initiator sends a Terminate LLP / 0 / 0x06 (insufficient IRD) and
/// closes.
//= rfc6581#section-9.1
//# If the initiator does not have sufficient
//# resources for the required IRD, it MUST send a TERM message to the
//# responder indicating insufficient resources and terminate the
//# connection due to insufficient resources.
#[test]
fn initiator_terminates_when_responder_ord_exceeds_its_ird() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = IwarpConfig {
        ird: 4,
        ..Default::default()
    };
    let max = cfg.caps.max_ird;
    let mut p = IwarpProvider::connect(l.local_addr().unwrap(), cfg).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let req = read_request(&mut s);
    assert_eq!(req.ird_ord().map(|x| x.ird), Some(4));
    let io = IrdOrd::new(16, u16::from(max) + 1).to_bytes().unwrap();
    s.write_all(&frame("Rep", 0x10, 2, &io)).unwrap();
    assert_eq!(
        disconnect_reason(&mut p),
        DisconnectReason::Error {
            status: Status::RemoteInvalidRequest,
            blame: Blame::Remote
        }
    );
    let wire = read_to_end(&mut s);
    let Ok(Received::Fpdu(f)) = FpduReceiver::new(FramingConfig::default()).poll(&wire) else {
        panic!("no FPDU: {wire:02x?}");
    };
    assert_eq!(f.consumed, wire.len(), "one FPDU, then the close");
    let mut ulpdu = Vec::new();
    f.extend_ulpdu(&wire, &mut ulpdu);
    let t = Segment::parse(&ulpdu)
        .ok()
        .and_then(|seg| seg.terminate(&ulpdu))
        .expect("a Terminate");
    assert_eq!(t.code, TerminateCode::MPA_INSUFFICIENT_IRD);
    assert!(t.ddp.is_none() && t.rdmap.is_none());
}
