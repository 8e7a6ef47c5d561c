//! DDP and RDMAP: hand-written header vectors, segmentation, placement
//! checks and the Terminate each failure maps to.

use proptest::prelude::*;
use rpcrdma_iwarp::ddp::{
    check_tagged, check_untagged, max_payload, segments, Access, DdpHeader, MsnCounter, RegionInfo,
    SegmentPlan, TaggedCheck, TaggedHeader, UntaggedHeader, UntaggedPlacement, INITIAL_MSN,
    TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use rpcrdma_iwarp::rdmap::{
    self, encode_read_request, encode_terminate, Opcode, RdmapControl, ReadRequest, Segment,
    TerminateMessage, TerminatedDdp,
};
use rpcrdma_iwarp::TerminateCode;

fn h(s: &str) -> Vec<u8> {
    hex::decode(s.replace([' ', '\n'], "")).unwrap()
}

#[test]
fn header_vectors() {
    // mpa_probe.py untagged(3, qn 0, msn 1, mo 0): DDP 0x41, RDMAP 0x43.
    let send = rdmap::send_header(Opcode::SEND, 1, 0, true, 0xdead_beef).unwrap();
    assert_eq!(
        send.to_vec(),
        h("41 43 00000000 00000000 00000001 00000000")
    );
    let inv = rdmap::send_header(Opcode::SEND_INVALIDATE, 2, 0, true, 0x1234_5678).unwrap();
    assert_eq!(inv.to_vec(), h("41 44 12345678 00000000 00000002 00000000"));
    let seinv = rdmap::send_header(Opcode::SEND_SE_INVALIDATE, 7, 100, false, 0xa).unwrap();
    assert_eq!(
        seinv.to_vec(),
        h("01 46 0000000a 00000000 00000007 00000064")
    );
    let se = rdmap::send_header(Opcode::SEND_SE, 3, 0, true, 0xa).unwrap();
    assert_eq!(se.to_vec(), h("41 45 00000000 00000000 00000003 00000000"));
    assert!(rdmap::send_header(Opcode::WRITE, 1, 0, true, 0).is_err());
    let w = rdmap::write_header(0xaabb_ccdd, 0x0102_0304_0506_0708, true);
    assert_eq!(w.to_vec(), h("c1 40 aabbccdd 0102030405060708"));
    let rr = rdmap::read_response_header(0x5151, 0x1000, false);
    assert_eq!(rr.to_vec(), h("81 42 00005151 0000000000001000"));
    let req = ReadRequest {
        sink_stag: 0x1111_1111,
        sink_to: 0x1000,
        size: 0x0001_0000,
        src_stag: 0x2222_2222,
        src_to: 0x7f00_0000_2000,
    };
    assert_eq!(
        encode_read_request(1, &req).to_vec(),
        h("41 41 00000000 00000001 00000001 00000000
           11111111 0000000000001000 00010000 22222222 00007f0000002000")
    );
    assert_eq!(
        rdmap::terminate_header(1).to_vec(),
        h("41 47 00000000 00000002 00000001 00000000")
    );
    assert_eq!(rdmap::header_len(Opcode::READ_REQUEST), 46);
    assert_eq!(rdmap::header_len(Opcode::WRITE), 14);
    assert_eq!(rdmap::header_len(Opcode::SEND_INVALIDATE), 18);
}

#[test]
fn segment_parse_accepts_each_opcode() {
    let payload = [9u8; 10];
    let mut cases: Vec<(Vec<u8>, Opcode)> = Vec::new();
    for op in [
        Opcode::SEND,
        Opcode::SEND_INVALIDATE,
        Opcode::SEND_SE,
        Opcode::SEND_SE_INVALIDATE,
    ] {
        let mut v = rdmap::send_header(op, 1, 0, true, 0x77).unwrap().to_vec();
        v.extend_from_slice(&payload);
        cases.push((v, op));
    }
    let mut w = rdmap::write_header(1, 2, true).to_vec();
    w.extend_from_slice(&payload);
    cases.push((w, Opcode::WRITE));
    let mut r = rdmap::read_response_header(1, 2, true).to_vec();
    r.extend_from_slice(&payload);
    cases.push((r, Opcode::READ_RESPONSE));
    cases.push((
        encode_read_request(1, &ReadRequest::default()).to_vec(),
        Opcode::READ_REQUEST,
    ));
    cases.push((
        encode_terminate(1, &TerminateMessage::new(TerminateCode::MPA_CRC)),
        Opcode::TERMINATE,
    ));
    for (bytes, op) in cases {
        let s = Segment::parse(&bytes).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(s.control.opcode, op);
        match op {
            Opcode::READ_REQUEST => {
                assert_eq!(s.read_request, Some(ReadRequest::default()));
                assert!(s.payload.is_empty());
            }
            Opcode::TERMINATE => {
                assert_eq!(
                    s.terminate(&bytes).unwrap(),
                    TerminateMessage::new(TerminateCode::MPA_CRC)
                );
            }
            _ => assert_eq!(&bytes[s.payload.clone()], &payload),
        }
        assert_eq!(
            s.invalidate_stag(),
            if op.carries_invalidate_stag() {
                Some(0x77)
            } else {
                None
            }
        );
    }
}

/// Each malformed segment -> the Terminate code the module docs promise.
#[test]
fn segment_parse_errors_map_to_terminate_codes() {
    let send = h("41 43 00000000 00000000 00000001 00000000");
    let write = h("c1 40 aabbccdd 0102030405060708");
    let set = |mut v: Vec<u8>, i: usize, b: u8| {
        v[i] = b;
        v
    };
    let cases: Vec<(&str, Vec<u8>, TerminateCode)> = vec![
        (
            "tagged DV=0",
            set(write.clone(), 0, 0xc0),
            TerminateCode::DDP_TAGGED_INVALID_VERSION,
        ),
        (
            "tagged DV=2",
            set(write.clone(), 0, 0xc2),
            TerminateCode::DDP_TAGGED_INVALID_VERSION,
        ),
        (
            "untagged DV=3",
            set(send.clone(), 0, 0x43),
            TerminateCode::DDP_UNTAGGED_INVALID_VERSION,
        ),
        (
            "QN 3",
            set(send.clone(), 9, 3),
            TerminateCode::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            "QN 2^24",
            set(send.clone(), 6, 1),
            TerminateCode::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            "RV 0",
            set(send.clone(), 1, 0x03),
            TerminateCode::RDMAP_INVALID_VERSION,
        ),
        (
            "RV 2",
            set(send.clone(), 1, 0x83),
            TerminateCode::RDMAP_INVALID_VERSION,
        ),
        (
            "RV 0 tagged",
            set(write.clone(), 1, 0x00),
            TerminateCode::RDMAP_INVALID_VERSION,
        ),
        (
            "opcode 8",
            set(send.clone(), 1, 0x48),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "opcode 15 tagged",
            set(write.clone(), 1, 0x4f),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Send tagged",
            set(write.clone(), 1, 0x43),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Write untagged",
            set(send.clone(), 1, 0x40),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Send on QN 1",
            set(send.clone(), 9, 1),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Terminate on QN 0",
            set(send.clone(), 1, 0x47),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "truncated untagged",
            send[..17].to_vec(),
            TerminateCode::MPA_MARKER,
        ),
        (
            "truncated tagged",
            write[..13].to_vec(),
            TerminateCode::MPA_MARKER,
        ),
        ("empty", vec![], TerminateCode::MPA_MARKER),
    ];
    for (name, bytes, code) in cases {
        assert_eq!(Segment::parse(&bytes), Err(code), "{name}");
        assert!(code.describe().is_some(), "{name}");
    }
    // Read Request: not L, MO != 0, short, long.
    let rr = encode_read_request(1, &ReadRequest::default()).to_vec();
    let mut not_last = rr.clone();
    not_last[0] = 0x01;
    let mut mo = rr.clone();
    mo[17] = 4;
    let mut long = rr.clone();
    long.push(0);
    for (name, b) in [
        ("not last", not_last),
        ("mo", mo),
        ("short", rr[..45].to_vec()),
        ("long", long),
    ] {
        assert_eq!(
            Segment::parse(&b),
            Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED),
            "read request {name}"
        );
    }
    // Terminate with a truncated / overlong Terminate header.
    let mut t = encode_terminate(1, &TerminateMessage::new(TerminateCode::MPA_CRC));
    t.push(0);
    assert_eq!(
        Segment::parse(&t),
        Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED)
    );
    let t = encode_terminate(1, &TerminateMessage::new(TerminateCode::MPA_CRC));
    assert_eq!(
        Segment::parse(&t[..20]),
        Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED)
    );
    // Reserved bits and the RsvdULP word of a plain Send are ignored.
    let mut odd = send.clone();
    odd[0] = 0x41 | 0x3c;
    odd[1] = 0x43 | 0x30;
    odd[2] = 0xff;
    assert!(Segment::parse(&odd).is_ok());
}

#[test]
fn terminate_vectors() {
    // DDP tagged base/bounds on the Write above, 32-octet segment:
    // 11 01 | M,D = c0 00 | 0020 | copied header.
    let write = h("c1 40 aabbccdd 0102030405060708");
    let mut seg = write.clone();
    seg.extend_from_slice(&[0u8; 18]);
    let t = TerminateMessage::for_segment(TerminateCode::DDP_TAGGED_BASE_BOUNDS, Some(&seg));
    assert_eq!(
        t.to_vec(),
        h("11 01 c0 00 0020 c140aabbccdd0102030405060708")
    );
    assert_eq!(t.encoded_len(), 20);
    assert_eq!(TerminateMessage::decode(&t.to_vec()), Ok(t));
    // The whole Terminate ULPDU (DDP header QN 2, MSN 1).
    assert_eq!(
        encode_terminate(1, &t),
        h("41 47 00000000 00000002 00000001 00000000 11 01 c0 00 0020 c140aabbccdd0102030405060708")
    );
    // RDMAP invalid STag for a Read Request: D, M and R, with the 28-octet
    // Read Request header copied.
    let req = ReadRequest {
        sink_stag: 1,
        sink_to: 2,
        size: 3,
        src_stag: 4,
        src_to: 5,
    };
    let rr = encode_read_request(9, &req);
    let t = TerminateMessage::for_segment(TerminateCode::RDMAP_INVALID_STAG, Some(&rr));
    let mut want = h("01 00 e0 00 002e 41 41 00000000 00000001 00000009 00000000");
    want.extend_from_slice(&req.to_bytes());
    assert_eq!(t.to_vec(), want);
    assert_eq!(TerminateMessage::decode(&want), Ok(t));
    // Local catastrophic: nothing copied.
    let t = TerminateMessage::for_segment(TerminateCode::RDMAP_LOCAL_CATASTROPHIC, Some(&rr));
    assert_eq!(t.to_vec(), h("00 00 00 00"));
    // CRC error on an unparsable segment: nothing to copy.
    let t = TerminateMessage::for_segment(TerminateCode::MPA_CRC, Some(&[0x41, 0x43]));
    assert_eq!(t.to_vec(), h("20 02 00 00"));
    //= rfc5040#section-4.8
    //# LLP      | See LLP Spec| No         | No         | Any
    // An MPA-layer error copies nothing, even when the segment decodes.
    let t = TerminateMessage::for_segment(TerminateCode::MPA_CRC, Some(&rr));
    assert_eq!(t.to_vec(), h("20 02 00 00"));
    assert!(t.ddp.is_none() && t.rdmap.is_none());
    //= rfc5040#section-4.8
    //# DDP      | See DDP Spec| Yes        | No         | Any
    // A DDP-layer error on a Read Request copies the DDP header only.
    let t = TerminateMessage::for_segment(TerminateCode::DDP_TAGGED_BASE_BOUNDS, Some(&rr));
    assert!(t.ddp.is_some());
    assert!(t.rdmap.is_none(), "DDP errors never carry the RDMA header");
    // An RDMAP remote operation error on a Read Request (section 7.1 item 3)
    // copies both.
    let t = TerminateMessage::for_segment(TerminateCode::RDMAP_INVALID_VERSION, Some(&rr));
    assert!(t.ddp.is_some() && t.rdmap.is_some());
    // Decode errors.
    assert!(TerminateMessage::decode(&h("11 01 40 00 0020 c140")).is_err());
    assert!(TerminateMessage::decode(&h("01 00 20 00")).is_err());
    assert!(TerminateMessage::decode(&h("01 00 00 00 00")).is_err());
    assert!(TerminateMessage::decode(&h("01 00 00")).is_err());
    // Reserved bits survive.
    let odd = h("2f ff 1f ff");
    let t = TerminateMessage::decode(&odd).unwrap();
    assert_eq!(t.reserved, 0x1fff);
    assert_eq!(
        t.code,
        TerminateCode {
            layer: 2,
            etype: 15,
            code: 0xff
        }
    );
    assert_eq!(t.to_vec(), odd);
}

#[test]
fn terminate_code_table_is_consistent() {
    let table = TerminateCode::TABLE;
    for (i, (a, _)) in table.iter().enumerate() {
        for (b, _) in &table[i + 1..] {
            assert_ne!(a, b);
        }
        assert!(a.layer <= 2 && a.etype <= 2);
    }
    // Spot checks against RFC 5040 / 5041 / 5044 numbering.
    assert_eq!(
        (
            TerminateCode::MPA_CRC.layer,
            TerminateCode::MPA_CRC.etype,
            TerminateCode::MPA_CRC.code
        ),
        (2, 0, 2)
    );
    let c = TerminateCode::DDP_UNTAGGED_NO_BUFFER;
    assert_eq!((c.layer, c.etype, c.code), (1, 2, 2));
    let c = TerminateCode::RDMAP_ACCESS_RIGHTS;
    assert_eq!((c.layer, c.etype, c.code), (0, 1, 2));
    let c = TerminateCode::RDMAP_UNEXPECTED_OPCODE;
    assert_eq!((c.layer, c.etype, c.code), (0, 2, 6));
    assert!(TerminateCode::MPA_CRC.to_string().contains("CRC"));
    assert_eq!(
        TerminateCode {
            layer: 9,
            etype: 9,
            code: 9
        }
        .describe(),
        None
    );
}

#[test]
fn opcode_and_control_open_values() {
    for b in 0..=255u8 {
        let c = RdmapControl::from_byte(b);
        assert_eq!(c.to_byte(), b);
    }
    for v in 0..16u8 {
        let op = Opcode(v);
        assert_eq!(op.name().is_some(), v < 8);
        assert_eq!(op.is_tagged(), v == 0 || v == 2);
        assert_eq!(op.queue().is_some(), matches!(v, 1 | 3..=7));
    }
    assert_eq!(Opcode::TERMINATE.queue(), Some(2));
    assert_eq!(Opcode::READ_REQUEST.queue(), Some(1));
    assert_eq!(Opcode(9).to_string(), "opcode 9");
}

#[test]
fn ddp_decode_truncation_every_length() {
    let t = h("c1 40 aabbccdd 0102030405060708");
    let u = h("41 43 00000000 00000000 00000001 00000000");
    for n in 0..t.len() {
        assert!(DdpHeader::decode(&t[..n]).is_err());
    }
    for n in 0..u.len() {
        assert!(DdpHeader::decode(&u[..n]).is_err());
    }
    assert_eq!(DdpHeader::decode(&t).unwrap().to_vec(), t);
    assert_eq!(DdpHeader::decode(&u).unwrap().to_vec(), u);
}

#[test]
fn segmentation_plans() {
    let plans = |len, max| segments(len, max).collect::<Vec<_>>();
    let p = |offset, len, last| SegmentPlan { offset, len, last };
    assert_eq!(plans(0, 100), vec![p(0, 0, true)]);
    assert_eq!(
        plans(250, 100),
        vec![p(0, 100, false), p(100, 100, false), p(200, 50, true)]
    );
    assert_eq!(plans(200, 100), vec![p(0, 100, false), p(100, 100, true)]);
    assert_eq!(plans(1, 100), vec![p(0, 1, true)]);
    // MULPDU 1442 (siw, MTU 1500): 1442 - 14 tagged, 1442 - 18 untagged.
    assert_eq!(max_payload(1442, TAGGED_HEADER_LEN), Some(1428));
    assert_eq!(max_payload(1442, UNTAGGED_HEADER_LEN), Some(1424));
    assert_eq!(max_payload(14, TAGGED_HEADER_LEN), None);
    // TO advances, and wrap is refused.
    let segs: Vec<_> = segments(3000, 1428).collect();
    assert_eq!(segs[1].tagged_offset(0x1000), Some(0x1000 + 1428));
    // The last octet may sit at TO 2^64 - 1, not beyond.
    assert_eq!(
        p(0, 10, true).tagged_offset(u64::MAX - 9),
        Some(u64::MAX - 9)
    );
    assert_eq!(p(0, 10, true).tagged_offset(u64::MAX - 8), None);
    assert_eq!(p(9, 0, true).tagged_offset(u64::MAX - 9), Some(u64::MAX));
    assert_eq!(p(10, 0, true).tagged_offset(u64::MAX - 9), None);
    // Build the headers of a 3000-octet Send and a Write and check the
    // fields move as RFC 5041 requires.
    for (i, s) in segments(3000, 1424).enumerate() {
        let hdr = rdmap::send_header(Opcode::SEND, 5, s.offset, s.last, 0).unwrap();
        let DdpHeader::Untagged(u) = hdr else {
            panic!()
        };
        assert_eq!(u.mo, 1424 * i as u32);
        assert_eq!(u.msn, 5);
        assert_eq!(u.last, i == 2);
    }
}

proptest! {
    #[test]
    fn segmentation_covers_message(len in 0u32..100_000, max in 1u32..5000) {
        let v: Vec<_> = segments(len, max).collect();
        prop_assert_eq!(v.len(), (len.div_ceil(max)).max(1) as usize);
        prop_assert_eq!(segments(len, max).size_hint().0, v.len());
        let mut next = 0;
        for (i, s) in v.iter().enumerate() {
            prop_assert_eq!(s.offset, next);
            prop_assert!(s.len <= max);
            prop_assert_eq!(s.last, i + 1 == v.len());
            if !s.last { prop_assert_eq!(s.len, max); }
            next += s.len;
        }
        prop_assert_eq!(next, len);
    }

    #[test]
    fn ddp_header_round_trip(tagged in any::<bool>(), c in any::<u8>(), ulp in any::<u8>(),
                             a in any::<u32>(), b in any::<u32>(), d in any::<u32>(), e in any::<u32>()) {
        let mut bytes = vec![if tagged { c | 0x80 } else { c & 0x7f }, ulp];
        bytes.extend_from_slice(&a.to_be_bytes());
        bytes.extend_from_slice(&b.to_be_bytes());
        bytes.extend_from_slice(&d.to_be_bytes());
        if !tagged { bytes.extend_from_slice(&e.to_be_bytes()); }
        let hdr = DdpHeader::decode(&bytes).unwrap();
        prop_assert_eq!(hdr.encoded_len(), bytes.len());
        prop_assert_eq!(hdr.to_vec(), bytes);
    }

    #[test]
    fn terminate_round_trip(layer in 0u8..16, etype in 0u8..16, code in any::<u8>(), m in any::<bool>(),
                            rsvd in 0u16..0x2000, seg_len in any::<u16>(), hdr in proptest::option::of(any::<[u8; 18]>()),
                            rr in proptest::option::of(any::<[u8; 28]>())) {
        let t = TerminateMessage {
            code: TerminateCode { layer, etype, code },
            segment_length_valid: m,
            reserved: rsvd,
            ddp: hdr.map(|b| TerminatedDdp { segment_length: seg_len, header: DdpHeader::decode(&b).unwrap() }),
            rdmap: rr,
        };
        let v = t.to_vec();
        prop_assert_eq!(v.len(), t.encoded_len());
        prop_assert_eq!(TerminateMessage::decode(&v), Ok(t));
    }

    #[test]
    fn parsers_total_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = Segment::parse(&bytes);
        let _ = TerminateMessage::decode(&bytes);
        let _ = DdpHeader::decode(&bytes);
        let _ = TerminateMessage::for_segment(TerminateCode::MPA_CRC, Some(&bytes));
    }
}

fn region(valid: bool, owned: bool, base: u64, len: u64, access: Access) -> RegionInfo {
    RegionInfo {
        valid,
        owned_by_stream: owned,
        base_to: base,
        len,
        access,
    }
}

#[test]
fn tagged_checks_each_failure() {
    let rw = Access::REMOTE_WRITE;
    let ok = region(true, true, 0x1000, 0x100, rw);
    let ddp = TaggedCheck::DdpPlacement;
    let src = TaggedCheck::RdmapReadSource;
    assert_eq!(check_tagged(0x1000, 0x100, Some(&ok), rw, ddp), Ok(0));
    assert_eq!(check_tagged(0x10ff, 1, Some(&ok), rw, ddp), Ok(0xff));
    assert_eq!(check_tagged(0x1100, 0, Some(&ok), rw, ddp), Ok(0x100));
    let cases = [
        (
            None,
            0x1000,
            1,
            rw,
            TerminateCode::DDP_TAGGED_INVALID_STAG,
            TerminateCode::RDMAP_INVALID_STAG,
        ),
        (
            Some(region(false, true, 0x1000, 0x100, rw)),
            0x1000,
            1,
            rw,
            TerminateCode::DDP_TAGGED_INVALID_STAG,
            TerminateCode::RDMAP_INVALID_STAG,
        ),
        (
            Some(region(true, false, 0x1000, 0x100, rw)),
            0x1000,
            1,
            rw,
            TerminateCode::DDP_TAGGED_STAG_NOT_ASSOCIATED,
            TerminateCode::RDMAP_STAG_NOT_ASSOCIATED,
        ),
        (
            Some(ok),
            u64::MAX,
            2,
            rw,
            TerminateCode::DDP_TAGGED_TO_WRAP,
            TerminateCode::RDMAP_TO_WRAP,
        ),
        (
            Some(ok),
            0xfff,
            1,
            rw,
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            TerminateCode::RDMAP_BASE_BOUNDS,
        ),
        (
            Some(ok),
            0x1000,
            0x101,
            rw,
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            TerminateCode::RDMAP_BASE_BOUNDS,
        ),
        (
            Some(ok),
            0x1100,
            1,
            rw,
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            TerminateCode::RDMAP_BASE_BOUNDS,
        ),
        (
            Some(ok),
            0x1000,
            1,
            Access::REMOTE_READ,
            TerminateCode::RDMAP_ACCESS_RIGHTS,
            TerminateCode::RDMAP_ACCESS_RIGHTS,
        ),
    ];
    for (i, (r, to, len, need, want_ddp, want_rdmap)) in cases.into_iter().enumerate() {
        assert_eq!(
            check_tagged(to, len, r.as_ref(), need, ddp),
            Err(want_ddp),
            "case {i}"
        );
        assert_eq!(
            check_tagged(to, len, r.as_ref(), need, src),
            Err(want_rdmap),
            "case {i}"
        );
    }
    // A region ending at 2^64 - 1 does not overflow the bounds arithmetic.
    let top = region(true, true, u64::MAX - 15, 16, rw.union(Access::REMOTE_READ));
    assert_eq!(check_tagged(u64::MAX - 15, 16, Some(&top), rw, ddp), Ok(0));
    assert_eq!(
        check_tagged(u64::MAX - 15, 17, Some(&top), rw, ddp),
        Err(TerminateCode::DDP_TAGGED_TO_WRAP)
    );
    assert!(top.access.contains(Access::REMOTE_READ));
}

#[test]
fn untagged_checks_each_failure() {
    let qv = |qn: u32| qn <= 2;
    let bufs = [100u64, 50];
    let blen = |i: u32| bufs.get(i as usize).copied();
    let hdr = |qn, msn, mo| UntaggedHeader::new(0x43, 0, qn, msn, mo, true);
    // expected MSN 10, two buffers posted (MSN 10 and 11).
    assert_eq!(
        check_untagged(&hdr(0, 10, 0), 100, qv, 10, blen),
        Ok(UntaggedPlacement {
            buffer_index: 0,
            offset: 0
        })
    );
    assert_eq!(
        check_untagged(&hdr(0, 11, 40), 10, qv, 10, blen),
        Ok(UntaggedPlacement {
            buffer_index: 1,
            offset: 40
        })
    );
    let e = |h: UntaggedHeader, len: u32| check_untagged(&h, len, qv, 10, blen).unwrap_err();
    assert_eq!(e(hdr(3, 10, 0), 1), TerminateCode::DDP_UNTAGGED_INVALID_QN);
    assert_eq!(e(hdr(0, 12, 0), 1), TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    assert_eq!(e(hdr(0, 9, 0), 1), TerminateCode::DDP_UNTAGGED_MSN_RANGE);
    assert_eq!(
        e(hdr(0, 10 + (1 << 31), 0), 1),
        TerminateCode::DDP_UNTAGGED_MSN_RANGE
    );
    assert_eq!(
        e(hdr(0, 10, 101), 0),
        TerminateCode::DDP_UNTAGGED_INVALID_MO
    );
    assert_eq!(e(hdr(0, 10, 100), 1), TerminateCode::DDP_UNTAGGED_TOO_LONG);
    assert_eq!(e(hdr(0, 11, 0), 51), TerminateCode::DDP_UNTAGGED_TOO_LONG);
    // MSN wrap: expected u32::MAX, next message is 0.
    assert_eq!(
        check_untagged(&hdr(0, 0, 0), 1, qv, u32::MAX, blen).map(|p| p.buffer_index),
        Ok(1)
    );
    // MSN counter starts at 1 and wraps.
    let mut c = MsnCounter::new();
    assert_eq!(c.current(), INITIAL_MSN);
    assert_eq!(c.advance(), 1);
    assert_eq!(c.current(), 2);
    let _ = TaggedHeader::new(0x40, 0, 0, true);
}

proptest! {
    /// parse_prefix on the first MAX_PREFIX octets agrees with parse on the
    /// whole ULPDU, for valid and mangled segments alike.
    #[test]
    fn parse_prefix_agrees_with_parse(kind in 0usize..5, tail in proptest::collection::vec(any::<u8>(), 0..120),
                                      flip in proptest::option::of((0usize..70, any::<u8>()))) {
        let mut u = match kind {
            0 => rdmap::send_header(Opcode::SEND_INVALIDATE, 3, 0, true, 9).unwrap().to_vec(),
            1 => rdmap::write_header(1, 2, false).to_vec(),
            2 => encode_read_request(1, &ReadRequest::default()).to_vec(),
            3 => encode_terminate(1, &TerminateMessage::for_segment(
                     TerminateCode::RDMAP_INVALID_STAG,
                     Some(&encode_read_request(4, &ReadRequest::default())))),
            _ => rdmap::read_response_header(5, 6, true).to_vec(),
        };
        if kind == 0 || kind == 1 || kind == 4 { u.extend_from_slice(&tail); }
        if let Some((i, b)) = flip { if i < u.len() { u[i] ^= b; } }
        let n = u.len().min(Segment::MAX_PREFIX);
        prop_assert_eq!(Segment::parse_prefix(&u[..n], u.len()), Segment::parse(&u));
    }
}

#[test]
fn largest_terminate_fits_the_prefix() {
    let rr = encode_read_request(4, &ReadRequest::default());
    let t = TerminateMessage::for_segment(TerminateCode::RDMAP_INVALID_STAG, Some(&rr));
    let u = encode_terminate(1, &t);
    assert_eq!(u.len(), Segment::MAX_PREFIX);
    assert!(Segment::parse(&u).is_ok());
    // A header prefix shorter than the ULPDU claims is rejected, not read past.
    assert!(Segment::parse_prefix(&u[..40], u.len()).is_err());
    assert_eq!(
        Segment::parse_prefix(&u[..14], 10),
        Err(TerminateCode::MPA_MARKER)
    );
}

proptest! {
    /// The straight-line untagged header encoder gives DdpHeader::write's
    /// octets.
    #[test]
    fn untagged_new_bytes_equals_write(
        ulp in any::<u8>(),
        word in any::<u32>(),
        qn in any::<u32>(),
        msn in any::<u32>(),
        mo in any::<u32>(),
        last in any::<bool>(),
    ) {
        let h = DdpHeader::Untagged(UntaggedHeader::new(ulp, word, qn, msn, mo, last));
        prop_assert_eq!(
            UntaggedHeader::new_bytes(ulp, word, qn, msn, mo, last).to_vec(),
            h.to_vec()
        );
    }
}
