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

/// An MPA frame of `kind` ("Req" / "Rep") with flags, revision and private
/// data as given.
fn frame(kind: &str, flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = format!("MPA ID {kind} Frame").into_bytes();
    v.extend_from_slice(&[flags, rev]);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

/// The 4 IRD/ORD octets (no flags).
fn io(ird: u16, ord: u16) -> [u8; 4] {
    IrdOrd::new(ird, ord).to_bytes().unwrap()
}

/// An enhanced Request (revision 2, S set) whose private data cannot hold
/// the IRD/ORD octets is answered with a Reject (enhanced, IRD = ORD = 0)
/// and the connection is closed, for every PD_Length 0 to 3.
//= rfc6581#section-6
//# However, if the 'S' flag is
//# set, Private Data MUST begin with enhanced RDMA connection
//# establishment data (see Section 9).
#[test]
fn enhanced_request_without_ird_ord_is_rejected() {
    for n in 0..4 {
        let mut r = Handshake::responder(IwarpConfig::default());
        let req = frame("Req", 0x10, 2, &[1, 2, 3][..n]);
        assert_eq!(r.feed(&req), Err(HandshakeError::NoIrdOrd { pd_len: n }));
        assert_eq!(
            r.output(),
            &frame("Rep", 0x30, 2, &[0; 4])[..],
            "PD_Length {n}"
        );
        // Nothing can be accepted after that.
        assert!(r.accept(IwarpConfig::default()).is_err());
    }
    // Four octets are IRD/ORD: a Request.
    let mut r = Handshake::responder(IwarpConfig::default());
    let (p, _) = r.feed(&frame("Req", 0x10, 2, &io(1, 2))).unwrap();
    assert!(matches!(p, Progress::Request(_)));
}

/// The initiator closes on an accepting enhanced Reply without the IRD/ORD
/// octets; a Reject stays a Reject however it is shaped (Linux siw's
/// Reject of such a Request carries S and no private data).
#[test]
fn enhanced_reply_without_ird_ord_closes() {
    for n in 0..4 {
        let mut i = Handshake::initiator(IwarpConfig::default()).unwrap();
        let rep = frame("Rep", 0x10, 2, &[1, 2, 3][..n]);
        assert_eq!(i.feed(&rep), Err(HandshakeError::NoIrdOrd { pd_len: n }));
    }
    let mut i = Handshake::initiator(IwarpConfig::default()).unwrap();
    let (p, _) = i.feed(&frame("Rep", 0x30, 2, &[])).unwrap();
    assert!(matches!(p, Progress::Rejected { .. }), "{p:?}");
}

/// The responder's ORD (used, and sent in the Reply) never exceeds the
/// initiator's IRD, whatever revision it answers with; 0x3FFF (no
/// automatic negotiation) leaves ours unchanged and is echoed; a revision 1
/// Request carries no IRD, so there is nothing to adjust to.
//= rfc6581#section-9.1
//# The
//# responder MUST set its ORD at most to the initiator IRD.
#[test]
fn responder_ord_never_above_initiator_ird() {
    const AUTO: u16 = IrdOrd::MAX;
    // (our revision, initiator IRD, initiator ORD) ->
    // (our IRD, our ORD, the Reply's IRD/ORD octets)
    type Want = (u8, u8, Option<(u16, u16)>);
    let cases: [((u8, u16, u16), Want); 8] = [
        ((2, 0, 4), (8, 0, Some((8, 0)))),
        ((2, 1, 4), (8, 1, Some((8, 1)))),
        ((2, 16, 4), (8, 16, Some((8, 16)))),
        ((2, 300, 4), (8, 32, Some((8, 32)))),
        ((2, AUTO, 4), (8, 32, Some((8, AUTO)))),
        ((2, 4, AUTO), (8, 4, Some((AUTO, 4)))),
        // Answering with revision 1, we still read the initiator's IRD.
        ((1, 2, 4), (8, 2, None)),
        ((1, 0, 0), (8, 0, None)),
    ];
    let resp = IwarpConfig {
        ird: 8,
        ord: 32,
        ..Default::default()
    };
    for ((rev, ird, ord), (want_ird, want_ord, reply_io)) in cases {
        let cfg = IwarpConfig {
            rev,
            ..resp.clone()
        };
        let mut r = Handshake::responder(cfg.clone());
        r.feed(&frame("Req", 0x10, 2, &io(ird, ord))).unwrap();
        let est = r.accept(cfg).unwrap();
        let case = format!("rev {rev}, initiator IRD {ird} ORD {ord}");
        assert_eq!(
            (est.params.ird, est.params.ord),
            (want_ird, want_ord),
            "{case}"
        );
        let sent = r.sent_frame().unwrap();
        assert_eq!(
            sent.ird_ord().map(|p| (p.ird, p.ord)),
            reply_io,
            "{case}: Reply"
        );
    }
    // A revision 1 Request: no IRD/ORD from the initiator.
    let mut r = Handshake::responder(resp.clone());
    r.feed(&frame("Req", 0, 1, b"hi")).unwrap();
    let est = r.accept(resp).unwrap();
    assert_eq!((est.params.ird, est.params.ord), (8, 32));
}

/// The initiator sets its ORD at most to the responder's IRD and its IRD
/// at least to the responder's ORD (up to its `max_ird`; beyond that the
/// exchange fails with `InsufficientIrd`, which the TCP adapter answers
/// with a Terminate LLP / 0 / 0x06); 0x3FFF leaves either unchanged.
//= rfc6581#section-9.1
//# Upon receiving the MPA Accept Frame from the responder, the initiator
//# MUST set its IRD at least to the responder ORD and its ORD at most to
//# the responder IRD.
#[test]
fn initiator_adjusts_to_the_responder_ird_ord() {
    const AUTO: u16 = IrdOrd::MAX;
    let ini = IwarpConfig {
        ird: 4,
        ord: 16,
        ..Default::default()
    };
    assert_eq!(ini.caps.max_ird, 64);
    for ((ird, ord), want) in [
        ((2, 8), (8, 2)),
        ((32, 2), (4, 16)),
        ((AUTO, AUTO), (4, 16)),
        ((16, 64), (64, 16)),
    ] {
        let mut i = Handshake::initiator(ini.clone()).unwrap();
        let (p, _) = i.feed(&frame("Rep", 0x10, 2, &io(ird, ord))).unwrap();
        let Progress::Established(e) = p else {
            panic!("{p:?}")
        };
        assert_eq!((e.params.ird, e.params.ord), want, "responder {ird}/{ord}");
    }
    let mut i = Handshake::initiator(ini).unwrap();
    match i.feed(&frame("Rep", 0x10, 2, &io(16, 65))) {
        Err(HandshakeError::InsufficientIrd {
            responder_ord: 65,
            established,
        }) => assert_eq!(established.params.ord, 16),
        other => panic!("{other:?}"),
    }
}
