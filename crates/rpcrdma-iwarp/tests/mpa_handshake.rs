//! MPA connection setup: hand-checked vectors from the Linux lab, every
//! split point, malformed frames.

use proptest::prelude::*;
use rpcrdma_iwarp::mpa::{
    linux_responder_verdict, FrameDecode, FrameKind, HandshakeProgress, HandshakeReader, IrdOrd,
    LinuxVerdict, MpaFlags, MpaFrame, MpaFrameError, Negotiated, LINUX_MAX_PRIVATE_DATA,
    MAX_PRIVATE_DATA,
};
use rpcrdma_iwarp::TerminateCode;

fn h(s: &str) -> Vec<u8> {
    hex::decode(s.replace([' ', '\n'], "")).unwrap()
}

/// What the Linux NFS client (xprtrdma over siw) sends, from the lab README.
const LINUX_REQUEST: &str =
    "4d504120494420526571204672616d65 10 02 000c 0080 0000 f6ab0e18 01 01 03 03";
/// What the Linux NFS server (svcrdma over siw) answers.
const LINUX_REPLY: &str =
    "4d504120494420526570204672616d65 10 02 000c 0000 0080 f6ab0e18 01 00 03 03";

fn decode_whole(bytes: &[u8], kind: FrameKind) -> MpaFrame {
    match MpaFrame::decode_prefix(bytes, kind, MAX_PRIVATE_DATA).unwrap() {
        FrameDecode::Frame { frame, consumed } => {
            assert_eq!(consumed, bytes.len());
            frame
        }
        other => panic!("incomplete: {other:?}"),
    }
}

#[test]
fn linux_request_vector() {
    let bytes = h(LINUX_REQUEST);
    let f = decode_whole(&bytes, FrameKind::Request);
    assert_eq!(f.kind, FrameKind::Request);
    assert_eq!(f.flags, MpaFlags(0x10));
    assert!(!f.flags.markers() && !f.flags.crc() && !f.flags.reject() && f.flags.enhanced());
    assert_eq!(f.revision, 2);
    assert!(f.is_enhanced());
    assert_eq!(f.ird_ord(), Some(IrdOrd::new(128, 0)));
    assert_eq!(f.ulp_private_data(), &h("f6ab0e1801010303")[..]);
    assert_eq!(f.to_vec().unwrap(), bytes);
    // Built from its parts, it is the same octets.
    let built = MpaFrame::enhanced(
        FrameKind::Request,
        false,
        IrdOrd::new(128, 0),
        &h("f6ab0e1801010303"),
    )
    .unwrap();
    assert_eq!(built.to_vec().unwrap(), bytes);
    assert_eq!(built.encoded_len(), 32);
}

#[test]
fn linux_reply_vector() {
    let bytes = h(LINUX_REPLY);
    let f = decode_whole(&bytes, FrameKind::Reply);
    assert_eq!(f.ird_ord(), Some(IrdOrd::new(0, 128)));
    assert_eq!(f.ulp_private_data(), &h("f6ab0e1801000303")[..]);
    let built = MpaFrame::enhanced(
        FrameKind::Reply,
        false,
        IrdOrd::new(0, 128),
        &h("f6ab0e1801000303"),
    )
    .unwrap();
    assert_eq!(built.to_vec().unwrap(), bytes);
    // Negotiation seen from both ends: no CRC, no markers, IRD/ORD swapped.
    let req = decode_whole(&h(LINUX_REQUEST), FrameKind::Request);
    let n = Negotiated::from_frames(&req, &f);
    assert!(!n.crc && !n.send_markers && !n.recv_markers);
    assert_eq!(n.local_ird_ord, Some(IrdOrd::new(128, 0)));
    assert_eq!(n.peer_ird_ord, Some(IrdOrd::new(0, 128)));
}

#[test]
fn linux_markers_reject_vector() {
    // Request with M set -> siw answers flags=0x30 rev=2 pd_len=4 pd=00000000.
    let mut req = decode_whole(&h(LINUX_REQUEST), FrameKind::Request);
    req.flags = req.flags.with(MpaFlags::MARKERS, true);
    let rej = MpaFrame::linux_style_reject(&req);
    assert_eq!(
        rej.to_vec().unwrap(),
        h("4d504120494420526570204672616d65 30 02 0004 00000000")
    );
    assert!(rej.flags.reject());
    // Rev 1 request -> flags 0x20, pd_len 0.
    let v1 = MpaFrame::new(FrameKind::Request, MpaFlags(0), 1);
    assert_eq!(
        MpaFrame::linux_style_reject(&v1).to_vec().unwrap(),
        h("4d504120494420526570204672616d65 20 01 0000")
    );
}

#[test]
fn crc_and_marker_negotiation() {
    let mut a = MpaFrame::new(FrameKind::Request, MpaFlags(0), 1);
    let mut b = MpaFrame::new(FrameKind::Reply, MpaFlags(0), 1);
    assert!(!Negotiated::from_frames(&a, &b).crc);
    b.flags = MpaFlags(MpaFlags::CRC);
    assert!(Negotiated::from_frames(&a, &b).crc);
    assert!(Negotiated::from_frames(&b, &a).crc);
    a.flags = MpaFlags(MpaFlags::MARKERS);
    let n = Negotiated::from_frames(&a, &b);
    assert!(n.recv_markers && !n.send_markers);
    let n = Negotiated::from_frames(&b, &a);
    assert!(n.send_markers && !n.recv_markers);
    // Not both enhanced: no IRD/ORD.
    assert_eq!(n.peer_ird_ord, None);
}

#[test]
fn ird_ord_bits() {
    // A=1 B=0 IRD=5 | C=1 D=1 ORD=7
    let x = IrdOrd::from_bytes([0x80, 0x05, 0xc0, 0x07]);
    assert_eq!(
        x,
        IrdOrd {
            ird: 5,
            ord: 7,
            peer_to_peer: true,
            rtr_send: false,
            rtr_write: true,
            rtr_read: true
        }
    );
    assert_eq!(x.to_bytes().unwrap(), [0x80, 0x05, 0xc0, 0x07]);
    let y = IrdOrd::from_bytes([0x7f, 0xff, 0x00, 0x00]);
    assert!(y.rtr_send && !y.peer_to_peer);
    assert_eq!(y.ird, 0x3fff);
    assert!(IrdOrd::new(0x4000, 0).to_bytes().is_err());
    assert!(IrdOrd::new(0, 0x4000).to_bytes().is_err());
}

#[test]
fn every_split_point_and_trailing_stream() {
    let mut stream = h(LINUX_REQUEST);
    let frame_len = stream.len();
    stream.extend_from_slice(&h("0012 4143 00000000"));
    let expect = decode_whole(&h(LINUX_REQUEST), FrameKind::Request);
    for split in 0..=stream.len() {
        let mut r = HandshakeReader::new(FrameKind::Request, LINUX_MAX_PRIVATE_DATA);
        let (a, b) = stream.split_at(split);
        let mut got = None;
        let mut used_total = 0;
        for piece in [a, b] {
            match r.feed(piece).unwrap() {
                HandshakeProgress::NeedMore => {
                    assert!(got.is_none());
                    used_total += piece.len();
                }
                HandshakeProgress::Frame { frame, consumed } => {
                    if got.is_none() {
                        used_total += consumed;
                        got = Some(frame);
                    }
                    break;
                }
            }
        }
        assert_eq!(got.as_ref(), Some(&expect), "split {split}");
        assert_eq!(used_total, frame_len, "split {split}");
    }
    // Byte by byte.
    let mut r = HandshakeReader::new(FrameKind::Request, MAX_PRIVATE_DATA);
    for (i, b) in stream.iter().enumerate() {
        match r.feed(std::slice::from_ref(b)).unwrap() {
            HandshakeProgress::NeedMore => assert!(i + 1 < frame_len),
            HandshakeProgress::Frame { frame, consumed } => {
                assert_eq!(i + 1, frame_len);
                assert_eq!(consumed, 1);
                assert_eq!(frame, expect);
                break;
            }
        }
    }
    // Prefix decoder: NeedMore counts are exact.
    for cut in 0..frame_len {
        match MpaFrame::decode_prefix(&stream[..cut], FrameKind::Request, MAX_PRIVATE_DATA) {
            Ok(FrameDecode::NeedMore(n)) => {
                assert!(cut + n <= frame_len, "cut {cut} need {n}");
                assert!(n >= 1);
            }
            other => panic!("cut {cut}: {other:?}"),
        }
    }
}

#[test]
fn bad_key_fails_as_soon_as_the_octet_arrives() {
    let good = h(LINUX_REQUEST);
    for i in 0..16 {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        let err = MpaFrame::decode_prefix(&bad[..=i], FrameKind::Request, MAX_PRIVATE_DATA);
        assert_eq!(
            err,
            Err(MpaFrameError::BadKey {
                expected: FrameKind::Request
            }),
            "octet {i}"
        );
        assert_eq!(
            err.unwrap_err().terminate_code(),
            TerminateCode::MPA_INVALID_REQ_REP
        );
    }
    // A Reply where a Request is expected (and the reverse).
    let rep = h(LINUX_REPLY);
    assert!(MpaFrame::decode_prefix(&rep, FrameKind::Request, MAX_PRIVATE_DATA).is_err());
    assert!(MpaFrame::decode_prefix(&good, FrameKind::Reply, MAX_PRIVATE_DATA).is_err());
    // Garbage such as socat's "connection refused" text.
    let mut r = HandshakeReader::new(FrameKind::Reply, MAX_PRIVATE_DATA);
    assert!(r.feed(b"2025/01/01 socat[1] E connect").is_err());
}

#[test]
fn private_data_length_limits() {
    let hdr = |len: u16| {
        let mut v = b"MPA ID Rep Frame".to_vec();
        v.extend_from_slice(&[0x10, 2]);
        v.extend_from_slice(&len.to_be_bytes());
        v
    };
    // 513 > 512: protocol error before any private data arrives.
    assert_eq!(
        MpaFrame::decode_prefix(&hdr(513), FrameKind::Reply, MAX_PRIVATE_DATA),
        Err(MpaFrameError::PrivateDataTooLong {
            len: 513,
            limit: 512
        })
    );
    // 0xffff.
    assert!(MpaFrame::decode_prefix(&hdr(0xffff), FrameKind::Reply, usize::MAX).is_err());
    // The lab's bad-pdlen (0x120 > 256) under the Linux limit.
    assert_eq!(
        MpaFrame::decode_prefix(&hdr(0x120), FrameKind::Reply, LINUX_MAX_PRIVATE_DATA),
        Err(MpaFrameError::PrivateDataTooLong {
            len: 0x120,
            limit: 256
        })
    );
    // Exactly 512 is fine.
    assert_eq!(
        MpaFrame::decode_prefix(&hdr(512), FrameKind::Reply, MAX_PRIVATE_DATA),
        Ok(FrameDecode::NeedMore(512))
    );
    // The encoder refuses more than 512.
    let mut f = MpaFrame::new(FrameKind::Reply, MpaFlags(0), 1);
    f.private_data = vec![0; 513];
    assert!(f.to_vec().is_err());
    assert!(MpaFrame::enhanced(FrameKind::Reply, false, IrdOrd::new(1, 1), &[0; 509]).is_err());
    assert!(MpaFrame::enhanced(FrameKind::Reply, false, IrdOrd::new(1, 1), &[0; 508]).is_ok());
}

#[test]
fn enhanced_accessors_on_short_or_plain_frames() {
    // Enhanced bit but no private data (mpa_probe's "reject-nopd").
    let f = MpaFrame::new(FrameKind::Reply, MpaFlags(0x30), 2);
    assert_eq!(f.ird_ord(), None);
    assert_eq!(f.ulp_private_data(), &[] as &[u8]);
    // Rev 1: all private data is ULP private data.
    let mut g = MpaFrame::new(FrameKind::Request, MpaFlags(0x10), 1);
    g.private_data = h("f6ab0e1801010303");
    assert!(!g.is_enhanced());
    assert_eq!(g.ulp_private_data(), &g.private_data[..]);
}

fn arb_frame() -> impl Strategy<Value = MpaFrame> {
    (
        any::<bool>(),
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..=512),
    )
        .prop_map(|(req, flags, revision, private_data)| MpaFrame {
            kind: if req {
                FrameKind::Request
            } else {
                FrameKind::Reply
            },
            flags: MpaFlags(flags),
            revision,
            private_data,
        })
}

proptest! {
    #[test]
    fn frame_round_trip(f in arb_frame(), extra in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut bytes = f.to_vec().unwrap();
        prop_assert_eq!(bytes.len(), f.encoded_len());
        bytes.extend_from_slice(&extra);
        match MpaFrame::decode_prefix(&bytes, f.kind, MAX_PRIVATE_DATA).unwrap() {
            FrameDecode::Frame { frame, consumed } => {
                prop_assert_eq!(consumed, f.encoded_len());
                prop_assert_eq!(frame, f);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn ird_ord_round_trip(b in any::<[u8; 4]>()) {
        prop_assert_eq!(IrdOrd::from_bytes(b).to_bytes().unwrap(), b);
    }

    #[test]
    fn decoder_total_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..600), limit in 0usize..600) {
        let _ = MpaFrame::decode_prefix(&bytes, FrameKind::Request, limit);
        let mut r = HandshakeReader::new(FrameKind::Reply, limit);
        for c in bytes.chunks(7) {
            match r.feed(c) {
                Ok(HandshakeProgress::NeedMore) => {}
                _ => break,
            }
        }
    }
}

#[test]
fn linux_verdicts_match_the_lab_probes() {
    let pd = h("f6ab0e1801010303");
    let ok = decode_whole(&h(LINUX_REQUEST), FrameKind::Request);
    assert_eq!(linux_responder_verdict(&ok), LinuxVerdict::Accept);
    // With CRC: accepted (siw answers C=1).
    let crc = MpaFrame::enhanced(FrameKind::Request, true, IrdOrd::new(16, 0), &pd).unwrap();
    assert_eq!(linux_responder_verdict(&crc), LinuxVerdict::Accept);
    // No ULP private data: accepted.
    let nopd = MpaFrame::enhanced(FrameKind::Request, false, IrdOrd::new(16, 0), &[]).unwrap();
    assert_eq!(linux_responder_verdict(&nopd), LinuxVerdict::Accept);
    let reject = |f: &MpaFrame| matches!(linux_responder_verdict(f), LinuxVerdict::Reject(_));
    let close = |f: &MpaFrame| matches!(linux_responder_verdict(f), LinuxVerdict::Close(_));
    // rev 1, rev 2 without the enhanced bit, IRD 0, markers: Reject.
    let mut v1 = MpaFrame::new(FrameKind::Request, MpaFlags(0), 1);
    v1.private_data = pd.clone();
    assert!(reject(&v1));
    let mut plain2 = v1.clone();
    plain2.revision = 2;
    assert!(reject(&plain2));
    let ird0 = MpaFrame::enhanced(FrameKind::Request, false, IrdOrd::new(0, 0), &pd).unwrap();
    assert!(reject(&ird0));
    let mut m = ok.clone();
    m.flags = m.flags.with(MpaFlags::MARKERS, true);
    assert!(reject(&m));
    // rev 3, private data over 256: closed without a Reply.
    let mut r3 = ok.clone();
    r3.revision = 3;
    assert!(close(&r3));
    let big = MpaFrame::enhanced(FrameKind::Request, false, IrdOrd::new(16, 0), &[0; 253]).unwrap();
    assert!(close(&big));
    let fits =
        MpaFrame::enhanced(FrameKind::Request, false, IrdOrd::new(16, 0), &[0; 252]).unwrap();
    assert_eq!(linux_responder_verdict(&fits), LinuxVerdict::Accept);
}

#[test]
fn reader_returns_the_frame_again_after_completion() {
    let bytes = h(LINUX_REPLY);
    let mut r = HandshakeReader::new(FrameKind::Reply, MAX_PRIVATE_DATA);
    let first = r.feed(&bytes).unwrap();
    let HandshakeProgress::Frame { frame, consumed } = first else {
        panic!()
    };
    assert_eq!(consumed, bytes.len());
    assert_eq!(
        r.feed(b"more").unwrap(),
        HandshakeProgress::Frame { frame, consumed: 0 }
    );
}
