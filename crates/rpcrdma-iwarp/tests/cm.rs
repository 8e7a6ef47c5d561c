//! Sans-IO MPA connection setup: byte-exact frames (hand-written hex from
//! the lab's Linux captures), revision and CRC negotiation, Markers refusal,
//! IRD/ORD exchange, Reject.

use rpcrdma_iwarp::cm::{Handshake, HandshakeError, IwarpConfig, Progress, Rtr};
use rpcrdma_iwarp::mpa::{IrdOrd, MpaFrameError};

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

const RFC8797_CLIENT: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3];

/// Runs both sides; returns (initiator outcome, responder outcome).
fn exchange(
    ini: IwarpConfig,
    resp: IwarpConfig,
) -> (
    Progress,
    Result<rpcrdma_iwarp::cm::Established, HandshakeError>,
) {
    let mut i = Handshake::initiator(ini).unwrap();
    let mut r = Handshake::responder(resp.clone());
    let req = i.output().to_vec();
    i.consume_output(req.len());
    // Feed in 3-octet pieces: any TCP segmentation works.
    let mut got = None;
    for c in req.chunks(3) {
        if let (Progress::Request(p), _) = r.feed(c).unwrap() {
            got = Some(p);
        }
    }
    assert!(got.is_some());
    let acc = r.accept(resp);
    let reply = r.output().to_vec();
    let (p, used) = i.feed(&reply).unwrap();
    assert_eq!(used, reply.len());
    (p, acc)
}

#[test]
fn linux_client_request_bytes() {
    // xprtrdma's Request (lab README): flags 0x10 rev 2 PD_Length 12,
    // IRD 128 ORD 0, RFC 8797 private data.
    let cfg = IwarpConfig {
        ird: 128,
        ord: 0,
        private_data: RFC8797_CLIENT.to_vec(),
        rtr: false,
        ..Default::default()
    };
    let h = Handshake::initiator(cfg).unwrap();
    assert_eq!(
        h.output(),
        &hx("4d504120494420526571204672616d65 10 02 000c 0080 0000 f6ab0e18 01 01 03 03")[..]
    );
}

#[test]
fn crc_request_sets_c_flag() {
    let cfg = IwarpConfig {
        crc: true,
        ird: 1,
        ord: 1,
        rtr: false,
        ..Default::default()
    };
    let h = Handshake::initiator(cfg).unwrap();
    assert_eq!(
        h.output(),
        &hx("4d504120494420526571204672616d65 50 02 0004 0001 0001")[..]
    );
}

#[test]
fn rev2_exchange_agrees_on_ird_ord_and_strips_header() {
    let ini = IwarpConfig {
        ird: 16,
        ord: 8,
        private_data: RFC8797_CLIENT.to_vec(),
        ..Default::default()
    };
    let resp = IwarpConfig {
        ird: 4,
        ord: 32,
        private_data: vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3],
        ..Default::default()
    };
    let (p, acc) = exchange(ini, resp);
    let acc = acc.unwrap();
    assert_eq!(acc.peer_private_data, RFC8797_CLIENT);
    assert_eq!(
        acc.peer_ird_ord,
        Some(IrdOrd {
            peer_to_peer: true,
            rtr_read: true,
            ..IrdOrd::new(16, 8)
        })
    );
    // The responder's ORD is capped at the initiator's IRD.
    assert_eq!((acc.params.ird, acc.params.ord), (4, 16));
    let Progress::Established(e) = p else {
        panic!("{p:?}")
    };
    assert_eq!(e.peer_private_data, [0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3]);
    assert_eq!(
        e.peer_ird_ord,
        Some(IrdOrd {
            peer_to_peer: true,
            rtr_write: true,
            ..IrdOrd::new(4, 16)
        })
    );
    // The raw frame still has the IRD/ORD header.
    assert_eq!(&e.peer_frame.private_data[..4], &[0x80, 4, 0x80, 16]);
    assert_eq!((e.params.ird, e.params.ord), (16, 4));
    assert_eq!(e.revision, 2);
    assert!(!e.params.crc);
}

#[test]
fn crc_is_used_when_either_side_wants_it() {
    for (a, b) in [(true, false), (false, true), (true, true), (false, false)] {
        let (p, acc) = exchange(
            IwarpConfig {
                crc: a,
                ..Default::default()
            },
            IwarpConfig {
                crc: b,
                ..Default::default()
            },
        );
        let Progress::Established(e) = p else {
            panic!()
        };
        assert_eq!(e.params.crc, a || b);
        assert_eq!(acc.unwrap().params.crc, a || b);
    }
}

#[test]
fn rev1_request_gets_rev1_reply() {
    let (p, acc) = exchange(
        IwarpConfig {
            rev: 1,
            private_data: b"hi".to_vec(),
            ..Default::default()
        },
        IwarpConfig::default(),
    );
    let Progress::Established(e) = p else {
        panic!()
    };
    assert_eq!(e.revision, 1);
    assert_eq!(e.peer_frame.revision, 1);
    assert_eq!(e.peer_ird_ord, None);
    assert_eq!(acc.unwrap().peer_private_data, b"hi");
}

#[test]
fn rev1_reply_bytes() {
    let mut r = Handshake::responder(IwarpConfig::default());
    let req = hx("4d504120494420526571204672616d65 00 01 0002 6869");
    assert!(matches!(r.feed(&req).unwrap().0, Progress::Request(_)));
    r.accept(IwarpConfig {
        rev: 2,
        private_data: vec![0xab],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        r.output(),
        &hx("4d504120494420526570204672616d65 00 01 0001 ab")[..]
    );
}

#[test]
fn markers_refused_by_default_with_linux_style_reject() {
    let mut r = Handshake::responder(IwarpConfig::default());
    let req = hx("4d504120494420526571204672616d65 90 02 0004 0001 0001");
    let (p, _) = r.feed(&req).unwrap();
    let Progress::Request(pr) = p else { panic!() };
    assert!(pr.frame.flags.markers());
    assert!(r.accept(IwarpConfig::default()).is_err());
    assert_eq!(
        r.output(),
        &hx("4d504120494420526570204672616d65 30 02 0004 0000 0000")[..]
    );
}

#[test]
fn markers_agreed_when_both_want_them() {
    let cfg = IwarpConfig {
        markers: true,
        ..Default::default()
    };
    let (p, acc) = exchange(cfg.clone(), cfg);
    let Progress::Established(e) = p else {
        panic!()
    };
    assert!(e.params.send_markers && e.params.recv_markers);
    let a = acc.unwrap();
    assert!(a.params.send_markers && a.params.recv_markers);
}

#[test]
fn reject_reaches_the_initiator_with_private_data() {
    let mut i = Handshake::initiator(IwarpConfig::default()).unwrap();
    let mut r = Handshake::responder(IwarpConfig::default());
    r.feed(i.output()).unwrap();
    r.reject(b"no").unwrap();
    assert_eq!(
        r.output(),
        &hx("4d504120494420526570204672616d65 30 02 0006 0000 0000 6e6f")[..]
    );
    let out = r.output().to_vec();
    let (p, _) = i.feed(&out).unwrap();
    assert_eq!(
        p,
        Progress::Rejected {
            private_data: b"no".to_vec(),
            frame: rpcrdma_iwarp::mpa::MpaFrame::decode_prefix(
                &out,
                rpcrdma_iwarp::mpa::FrameKind::Reply,
                512
            )
            .map(|d| match d {
                rpcrdma_iwarp::mpa::FrameDecode::Frame { frame, .. } => frame,
                _ => panic!(),
            })
            .unwrap()
        }
    );
}

#[test]
fn hostile_frames_close() {
    // Wrong key.
    let mut r = Handshake::responder(IwarpConfig::default());
    assert!(matches!(
        r.feed(b"GET / HTTP/1.1\r\n\r\n"),
        Err(HandshakeError::Frame(MpaFrameError::BadKey { .. }))
    ));
    // PD_Length above the configured limit (Linux: 256).
    let mut r = Handshake::responder(IwarpConfig {
        mpa_private_data_max: 256,
        ..Default::default()
    });
    let req = hx("4d504120494420526571204672616d65 10 02 0120");
    assert!(matches!(
        r.feed(&req),
        Err(HandshakeError::Frame(
            MpaFrameError::PrivateDataTooLong { .. }
        ))
    ));
    // Revision 3 closes.
    let mut r = Handshake::responder(IwarpConfig::default());
    let req = hx("4d504120494420526571204672616d65 10 03 0000");
    assert_eq!(r.feed(&req), Err(HandshakeError::BadRevision(3)));
    // A Reply with a higher revision than our Request.
    let mut i = Handshake::initiator(IwarpConfig {
        rev: 1,
        ..Default::default()
    })
    .unwrap();
    let rep = hx("4d504120494420526570204672616d65 10 02 0004 0001 0001");
    assert_eq!(i.feed(&rep), Err(HandshakeError::BadRevision(2)));
}

#[test]
fn leftover_after_reply_is_fpdu_stream() {
    let mut i = Handshake::initiator(IwarpConfig::default()).unwrap();
    let mut r = Handshake::responder(IwarpConfig::default());
    r.feed(i.output()).unwrap();
    r.accept(IwarpConfig::default()).unwrap();
    let mut wire = r.output().to_vec();
    let n = wire.len();
    wire.extend_from_slice(&[0, 18, 0x41]);
    let (p, used) = i.feed(&wire).unwrap();
    assert!(matches!(p, Progress::Established(_)));
    assert_eq!(used, n);
}

// ---------------------------------------------------------------- RTR

/// Our Request by default (RFC 6581 section 9.2): peer-to-peer (A, the top
/// bit of IRD) with the zero-length Read as the only RTR (D, 0x4000 in
/// ORD), and an ORD of at least 1 for that Read.
#[test]
fn default_request_offers_the_read_rtr() {
    let cfg = IwarpConfig {
        ird: 16,
        ord: 0,
        private_data: RFC8797_CLIENT.to_vec(),
        ..Default::default()
    };
    let h = Handshake::initiator(cfg).unwrap();
    assert_eq!(
        h.output(),
        &hx("4d504120494420526571204672616d65 10 02 000c 8010 4001 f6ab0e18 01 01 03 03")[..]
    );
}

/// Feeds `reply` to an initiator with the default (RTR) configuration.
fn initiator_sees(reply: &[u8]) -> Result<Progress, HandshakeError> {
    let mut i = Handshake::initiator(IwarpConfig {
        private_data: RFC8797_CLIENT.to_vec(),
        ..Default::default()
    })
    .unwrap();
    let n = i.output().len();
    i.consume_output(n);
    i.feed(reply).map(|(p, _)| p)
}

/// Linux siw answers a Read-only offer with A and D set (siw_proc_mpareq)
/// and raises its IRD to our ORD: the initiator must send a Read RTR and
/// wait for its response.
#[test]
fn linux_reply_with_read_rtr_means_wait_for_the_read() {
    let linux = hx("4d504120494420526570204672616d65 10 02 000c 8001 4010 f6ab0e18 01 00 03 03");
    let Ok(Progress::Established(e)) = initiator_sees(&linux) else {
        panic!()
    };
    assert_eq!(e.rtr, Rtr::Read);
    assert_eq!(e.params.ord, 1);
    assert_eq!(e.peer_private_data, [0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3]);
}

/// Our responder answers a peer-to-peer Request with A and C (Write RTR):
/// it is ready before its Reply, so the initiator needs no round trip.
#[test]
fn our_responder_names_the_write_rtr() {
    let (p, acc) = exchange(IwarpConfig::default(), IwarpConfig::default());
    let Progress::Established(e) = p else {
        panic!("{p:?}")
    };
    assert_eq!(e.rtr, Rtr::Write);
    assert_eq!(acc.unwrap().rtr, Rtr::Write);
    let io = e.peer_ird_ord.unwrap();
    assert!(io.peer_to_peer && io.rtr_write && !io.rtr_read && !io.rtr_send);
    // Without the offer, the client-server model: no RTR either way.
    let (p, acc) = exchange(
        IwarpConfig {
            rtr: false,
            ..Default::default()
        },
        IwarpConfig::default(),
    );
    let Progress::Established(e) = p else {
        panic!("{p:?}")
    };
    assert_eq!((e.rtr, acc.unwrap().rtr), (Rtr::None, Rtr::None));
    assert!(!e.peer_ird_ord.unwrap().peer_to_peer);
}

/// A Reply without A: client-server, nothing to send first. A Reply with A
/// but only a Send RTR, or a Read RTR with IRD 0: no RTR we can send.
#[test]
fn reply_rtr_choices() {
    let key = "4d504120494420526570204672616d65 10 02 0004";
    let cs = initiator_sees(&hx(&format!("{key} 0010 0010"))).unwrap();
    let Progress::Established(e) = cs else {
        panic!()
    };
    assert_eq!(e.rtr, Rtr::None);
    for io in ["c010 0010", "8000 4010"] {
        assert_eq!(
            initiator_sees(&hx(&format!("{key} {io}"))).unwrap_err(),
            HandshakeError::NoMatchingRtr,
            "{io}"
        );
    }
}
