//! FPDU framing: hand vectors (CRC computed by the lab's independent Python
//! peer `mpa_probe.py`), markers, every split point, corruption.

use proptest::prelude::*;
use rpcrdma_iwarp::mpa::fpdu::{
    fpdu_len_without_markers, mulpdu, mulpdu_for_emss, mulpdu_without_markers, pad_len,
    FpduReceiver, FpduSender, FramingConfig, FramingError, Received, MULPDU_MAX, MULPDU_MIN,
};
use rpcrdma_iwarp::TerminateCode;

fn h(s: &str) -> Vec<u8> {
    hex::decode(s.replace([' ', '\n'], "")).unwrap()
}

const PLAIN: FramingConfig = FramingConfig {
    crc: false,
    markers: false,
};
const CRC: FramingConfig = FramingConfig {
    crc: true,
    markers: false,
};
const MARK: FramingConfig = FramingConfig {
    crc: false,
    markers: true,
};
const BOTH: FramingConfig = FramingConfig {
    crc: true,
    markers: true,
};

/// The RPC NULL Send that `mpa_probe.py` sends (ULPDU), and its FPDUs as
/// printed by `mpa_probe.fpdu(u, True/False)`.
const PROBE_ULPDU: &str = "4143000000000000000000000001000000001a2b3c4d0000000000000002000186a3000000030000000000000000000000000000000000000000";
const PROBE_FPDU_CRC: &str = "003a4143000000000000000000000001000000001a2b3c4d0000000000000002000186a3000000030000000000000000000000000000000000000000a2197e88";

fn one(cfg: FramingConfig, buf: &[u8]) -> Result<Received, FramingError> {
    FpduReceiver::new(cfg).poll(buf)
}

fn ulpdu_of(r: &Received, buf: &[u8]) -> Vec<u8> {
    match r {
        Received::Fpdu(f) => {
            let mut v = Vec::new();
            f.extend_ulpdu(buf, &mut v);
            v
        }
        Received::NeedMore(_) => panic!("need more"),
    }
}

#[test]
fn hand_vectors_crc_on_and_off() {
    let u = h(PROBE_ULPDU);
    let mut s = FpduSender::new(CRC);
    assert_eq!(s.fpdu_to_vec(&[&u]).unwrap(), h(PROBE_FPDU_CRC));
    let mut s = FpduSender::new(PLAIN);
    let mut off = h(PROBE_FPDU_CRC);
    let n = off.len();
    off[n - 4..].copy_from_slice(&[0; 4]);
    // CRC not negotiated: the field is present and zero.
    assert_eq!(s.fpdu_to_vec(&[&u]).unwrap(), off);
    // Small ones (mpa_probe.fpdu): pad 2, pad 0 / empty, pad 1.
    let mut s = FpduSender::new(CRC);
    assert_eq!(
        s.fpdu_to_vec(&[&h("deadbeef")]).unwrap(),
        h("0004deadbeef00004ad5c925")
    );
    assert_eq!(s.fpdu_to_vec(&[]).unwrap(), h("00000000c74b6748"));
    assert_eq!(s.fpdu_to_vec(&[&[1]]).unwrap(), h("00010100ce4184fe"));
    // Receive them.
    let buf = h(PROBE_FPDU_CRC);
    let r = one(CRC, &buf).unwrap();
    assert_eq!(ulpdu_of(&r, &buf), u);
    match r {
        Received::Fpdu(f) => {
            assert_eq!(f.consumed, buf.len());
            assert_eq!(f.ulpdu_len, 58);
            assert_eq!(f.ulpdu_contiguous(), Some(2..60));
        }
        _ => unreachable!(),
    }
    // CRC field of a non-CRC stream is not checked.
    assert!(matches!(one(PLAIN, &buf), Ok(Received::Fpdu(_))));
}

#[test]
fn gather_parts_match_contiguous_frame() {
    for cfg in [PLAIN, CRC] {
        for len in 0..12usize {
            let data: Vec<u8> = (0..len as u8).collect();
            let (a, b) = data.split_at(len / 2);
            let whole = FpduSender::new(cfg).fpdu_to_vec(&[&data]).unwrap();
            let parts = FpduSender::new(cfg).frame_parts(&[a, b]).unwrap();
            let mut v = parts.header.to_vec();
            v.extend_from_slice(&data);
            v.extend_from_slice(&parts.trailer[..parts.trailer_len]);
            assert_eq!(v, whole, "len {len}");
        }
    }
    assert!(FpduSender::new(MARK).frame_parts(&[b"x"]).is_err());
}

#[test]
fn in_place_frame_matches_contiguous_frame() {
    for cfg in [PLAIN, CRC] {
        // Two FPDUs in a row after some earlier staged octets: the stream
        // position advances as with write_fpdu.
        let mut tx = FpduSender::new(cfg);
        let mut reference = FpduSender::new(cfg);
        for len in (0..12usize).chain([200, 1031]) {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let whole = reference.fpdu_to_vec(&[&data]).unwrap();
            let mut v = vec![0xee; 5];
            v.extend_from_slice(&[0, 0]);
            v.extend_from_slice(&data);
            let n = tx.frame_in_place(&mut v, 5).unwrap();
            assert_eq!(n, whole.len(), "len {len}");
            assert_eq!(&v[..5], &[0xee; 5]);
            assert_eq!(&v[5..], &whole[..], "len {len}");
            assert_eq!(tx.stream_position(), reference.stream_position());
        }
    }
    let mut v = vec![0u8; 2];
    assert!(FpduSender::new(MARK).frame_in_place(&mut v, 0).is_err());
    assert!(FpduSender::new(PLAIN).frame_in_place(&mut v, 1).is_err());
    assert_eq!(v, [0, 0]);
    let mut big = vec![0u8; 2 + 65_536];
    assert!(FpduSender::new(PLAIN).frame_in_place(&mut big, 0).is_err());
    assert_eq!(big.len(), 2 + 65_536);
}

#[test]
fn markers_hand_vector() {
    // FPDU 1 at stream position 0: a leading Marker (FPDUPTR 0), then
    // 0004 deadbeef, pad 0000, CRC 00000000 -> 16 octets.
    let mut s = FpduSender::new(MARK);
    let f1 = s.fpdu_to_vec(&[&h("deadbeef")]).unwrap();
    assert_eq!(f1, h("00000000 0004 deadbeef 0000 00000000"));
    // FPDU 2 at position 16 with a 500-octet ULPDU: 2 + 500 + 2 + 4 = 508
    // logical octets, the Marker at stream position 512 (offset 496 in the
    // FPDU) carries FPDUPTR 496 = 0x01f0.
    let payload = vec![0xabu8; 500];
    let f2 = s.fpdu_to_vec(&[&payload]).unwrap();
    assert_eq!(f2.len(), 512);
    assert_eq!(&f2[..2], &h("01f4")[..]);
    assert_eq!(&f2[496..500], &h("000001f0")[..]);
    // 496 - 2 = 494 payload octets before the Marker, 6 after, pad 2, CRC.
    assert_eq!(&f2[500..506], &[0xab; 6]);
    assert_eq!(&f2[506..512], &h("0000 00000000")[..]);
    assert_eq!(s.stream_position(), 16 + 512);
    // Receive both; the second ULPDU comes back in two ranges.
    let mut r = FpduReceiver::new(MARK);
    let mut buf = f1.clone();
    buf.extend_from_slice(&f2);
    let Received::Fpdu(a) = r.poll(&buf).unwrap() else {
        panic!()
    };
    assert_eq!(a.consumed, 16);
    assert_eq!(a.ulpdu_contiguous(), Some(6..10));
    let rest = &buf[16..];
    let Received::Fpdu(b) = r.poll(rest).unwrap() else {
        panic!()
    };
    assert_eq!(b.ulpdu_ranges().collect::<Vec<_>>(), vec![2..496, 500..506]);
    assert_eq!(b.ulpdu_contiguous(), None);
    let mut got = Vec::new();
    b.extend_ulpdu(rest, &mut got);
    assert_eq!(got, payload);
    // A DDP header split by a Marker is gathered by copy_prefix.
    let mut hdr = [0u8; 18];
    assert_eq!(b.copy_prefix(rest, &mut hdr), 18);
    assert_eq!(hdr, [0xab; 18]);
}

#[test]
fn marker_right_before_crc_is_covered_by_it() {
    // Arrange for the CRC field to start exactly at stream position 512:
    // FPDU 1 (16 octets incl. leading Marker), FPDU 2 with ULPDU 490:
    // 16 + 2 + 490 + 0 pad = 508 ... then pad 0 -> CRC at 508? Use 494:
    // 16 + 2 + 494 = 512, pad 0, so the Marker comes between ULPDU and CRC.
    for cfg in [MARK, BOTH] {
        let mut s = FpduSender::new(cfg);
        let f1 = s.fpdu_to_vec(&[&h("deadbeef")]).unwrap();
        let f2 = s.fpdu_to_vec(&[&vec![7u8; 494]]).unwrap();
        assert_eq!(f2.len(), 2 + 494 + 4 + 4);
        assert_eq!(&f2[496..500], &h("000001f0")[..]);
        let mut r = FpduReceiver::new(cfg);
        assert!(matches!(r.poll(&f1), Ok(Received::Fpdu(_))));
        let Received::Fpdu(b) = r.poll(&f2).unwrap() else {
            panic!()
        };
        assert_eq!(b.ulpdu_contiguous(), Some(2..496));
        // The next FPDU starts at 16 + 504 = 520: no leading Marker.
        let f3 = s.fpdu_to_vec(&[&h("01020304")]).unwrap();
        assert_eq!(f3.len(), 12);
    }
}

#[test]
fn receiver_accepts_pointer_to_length_field_after_leading_marker() {
    // The other reading of FPDUPTR: a leading Marker then an inner Marker
    // pointing at ULPDU_Length (start + 4). Stream: FPDU at position 0 with
    // a 1000-octet ULPDU; inner Marker at 512 would say 508 instead of 512.
    let mut s = FpduSender::new(MARK);
    let mut f = s.fpdu_to_vec(&[&vec![1u8; 1000]]).unwrap();
    assert_eq!(&f[512..516], &h("00000200")[..]);
    f[514..516].copy_from_slice(&508u16.to_be_bytes());
    assert!(matches!(one(MARK, &f), Ok(Received::Fpdu(_))));
    // Anything else is a marker error -> Terminate LLP/MPA/0x03.
    f[514..516].copy_from_slice(&504u16.to_be_bytes());
    let e = one(MARK, &f).unwrap_err();
    assert_eq!(
        e,
        FramingError::BadMarker {
            position: 512,
            fpduptr: 504
        }
    );
    assert_eq!(e.terminate_code(), TerminateCode::MPA_MARKER);
    // A bad leading Marker too.
    let mut g = FpduSender::new(MARK).fpdu_to_vec(&[b"abcd"]).unwrap();
    g[3] = 4;
    assert!(matches!(
        one(MARK, &g),
        Err(FramingError::BadMarker { position: 0, .. })
    ));
}

fn ulpdus() -> Vec<Vec<u8>> {
    [
        0usize, 1, 2, 3, 4, 5, 17, 18, 46, 500, 505, 506, 507, 508, 1000, 1442,
    ]
    .iter()
    .enumerate()
    .map(|(i, &n)| (0..n).map(|j| (i * 31 + j * 7) as u8).collect())
    .collect()
}

fn stream(cfg: FramingConfig, us: &[Vec<u8>]) -> Vec<u8> {
    let mut s = FpduSender::new(cfg);
    let mut v = Vec::new();
    for u in us {
        let f = s.fpdu_to_vec(&[u]).unwrap();
        v.extend_from_slice(&f);
    }
    v
}

/// Feeds `input` in the given pieces to a receiver with a growing buffer;
/// returns the ULPDUs.
fn receive_pieces(cfg: FramingConfig, pieces: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut r = FpduReceiver::new(cfg);
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for p in pieces {
        buf.extend_from_slice(p);
        loop {
            match r.poll(&buf).unwrap() {
                Received::Fpdu(f) => {
                    let mut u = Vec::new();
                    f.extend_ulpdu(&buf, &mut u);
                    out.push(u);
                    buf.drain(..f.consumed);
                }
                Received::NeedMore(n) => {
                    assert!(n >= 1);
                    break;
                }
            }
        }
    }
    assert!(buf.is_empty());
    out
}

#[test]
fn every_split_point_all_configs() {
    let us = ulpdus();
    for cfg in [PLAIN, CRC, MARK, BOTH] {
        let s = stream(cfg, &us);
        if cfg.markers {
            // Markers add 4 octets per 512 of stream.
            let plain_len: usize = us.iter().map(|u| fpdu_len_without_markers(u.len())).sum();
            assert_eq!(s.len(), plain_len + 4 * s.len().div_ceil(512));
        }
        // Byte by byte.
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert_eq!(receive_pieces(cfg, &bytes), us, "{cfg:?} byte by byte");
        // Every split into two pieces.
        for split in 0..=s.len() {
            let (a, b) = s.split_at(split);
            assert_eq!(receive_pieces(cfg, &[a, b]), us, "{cfg:?} split {split}");
        }
    }
}

#[test]
fn need_more_is_exact_for_the_last_octet() {
    for cfg in [PLAIN, CRC, MARK, BOTH] {
        let s = stream(cfg, &ulpdus()[..6]);
        let mut r = FpduReceiver::new(cfg);
        let mut at = 0;
        while at < s.len() {
            // Ask with everything but the last octet of the next FPDU.
            let total = match r.clone().poll(&s[at..]).unwrap() {
                Received::Fpdu(f) => f.consumed,
                Received::NeedMore(_) => unreachable!(),
            };
            assert_eq!(
                r.clone().poll(&s[at..at + total - 1]).unwrap(),
                Received::NeedMore(1)
            );
            r.poll(&s[at..at + total]).unwrap();
            at += total;
        }
    }
}

#[test]
fn every_flipped_octet_is_caught_by_the_crc() {
    for cfg in [CRC, BOTH] {
        let u = vec![0x5au8; 600];
        let mut s = FpduSender::new(cfg);
        let good = s.fpdu_to_vec(&[&u]).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            // Extra zero octets so a longer ULPDU_Length still frames.
            bad.extend_from_slice(&[0u8; 64]);
            match one(cfg, &bad) {
                Err(e) => assert!(
                    matches!(
                        e,
                        FramingError::BadCrc { .. } | FramingError::BadMarker { .. }
                    ),
                    "octet {i}: {e:?}"
                ),
                Ok(Received::NeedMore(_)) => {
                    // Only a changed length field can ask for more.
                    assert!(i < 2 || (cfg.markers && i < 6), "octet {i}");
                }
                Ok(Received::Fpdu(_)) => panic!("octet {i} flip accepted"),
            }
        }
        // The CRC error names LLP / MPA / 0x02.
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] ^= 0x80;
        assert_eq!(
            one(cfg, &bad).unwrap_err().terminate_code(),
            TerminateCode::MPA_CRC
        );
    }
}

#[test]
fn marker_reserved_field_ignored_without_crc_but_covered_with_it() {
    let mut f = FpduSender::new(MARK).fpdu_to_vec(&[b"abcd"]).unwrap();
    f[0] = 0xff;
    assert!(matches!(one(MARK, &f), Ok(Received::Fpdu(_))));
    let mut g = FpduSender::new(BOTH).fpdu_to_vec(&[b"abcd"]).unwrap();
    g[0] = 0xff;
    assert!(matches!(one(BOTH, &g), Err(FramingError::BadCrc { .. })));
}

#[test]
fn length_limit() {
    let f = FpduSender::new(PLAIN).fpdu_to_vec(&[&[0u8; 101]]).unwrap();
    let mut r = FpduReceiver::new(PLAIN).with_max_ulpdu(100);
    let e = r.poll(&f).unwrap_err();
    assert_eq!(e, FramingError::BadLength { len: 101, max: 100 });
    assert_eq!(e.terminate_code(), TerminateCode::MPA_MARKER);
    // Decided from the length field alone.
    assert!(FpduReceiver::new(PLAIN)
        .with_max_ulpdu(100)
        .poll(&f[..2])
        .is_err());
    // The sender refuses a ULPDU over 65535.
    assert!(FpduSender::new(PLAIN)
        .fpdu_to_vec(&[&vec![0u8; 65536]])
        .is_err());
}

//= rfc5044#section-3
//# The sending DDP MUST NOT post a ULPDU larger than 64768 octets to
//# MPA.
#[test]
fn the_sender_refuses_a_ulpdu_above_64768_on_every_path() {
    let big = vec![0u8; usize::from(MULPDU_MAX) + 1];
    let ok = vec![0u8; usize::from(MULPDU_MAX)];
    for crc in [false, true] {
        let cfg = FramingConfig {
            crc,
            markers: false,
        };
        let mut s = FpduSender::new(cfg);
        assert!(s.fpdu_to_vec(&[&big]).is_err());
        assert!(s.frame_parts(&[&big[..100], &big[100..]]).is_err());
        let mut v = vec![0u8; 2];
        v.extend_from_slice(&big);
        assert!(s.frame_in_place(&mut v, 0).is_err());
        assert_eq!(s.stream_position(), 0, "nothing framed");
        assert_eq!(s.fpdu_to_vec(&[&ok]).unwrap().len(), 64_776);
        let m = FpduSender::new(FramingConfig { crc, markers: true }).fpdu_to_vec(&[&big]);
        assert!(m.is_err());
    }
}

#[test]
fn mulpdu_for_emss_stays_in_range() {
    assert_eq!(mulpdu_for_emss(1448, false), 1442);
    assert_eq!(mulpdu_for_emss(1448, true), 1448 - (6 + 12));
    assert_eq!(mulpdu_for_emss(9000, false), 8994);
    // Loopback-sized and larger EMSS: the RFC's ceiling.
    assert_eq!(mulpdu_for_emss(65_483, false), MULPDU_MAX);
    assert_eq!(mulpdu_for_emss(u32::MAX, true), MULPDU_MAX);
    // Tiny EMSS: never below 128.
    assert_eq!(mulpdu_for_emss(100, false), MULPDU_MIN);
    assert_eq!(mulpdu_for_emss(0, true), MULPDU_MIN);
}

#[test]
fn pad_lengths() {
    assert_eq!(
        (0..8).map(pad_len).collect::<Vec<_>>(),
        vec![2, 1, 0, 3, 2, 1, 0, 3]
    );
    assert_eq!(fpdu_len_without_markers(0), 8);
    assert_eq!(fpdu_len_without_markers(58), 64);
    assert_eq!(fpdu_len_without_markers(1442), 1448);
}

#[test]
fn mulpdu_values() {
    // RFC 5044: MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) + EMSS mod 4)
    assert_eq!(mulpdu(1448), Some(1448 - (6 + 12)));
    assert_eq!(mulpdu(1460), Some(1442));
    assert_eq!(mulpdu(1461), Some(1461 - (6 + 12 + 1)));
    assert_eq!(mulpdu(512), Some(502));
    assert_eq!(mulpdu(513), Some(513 - (6 + 8 + 1)));
    assert_eq!(mulpdu(9000), Some(9000 - (6 + 72)));
    assert_eq!(mulpdu(10), None);
    assert_eq!(mulpdu(u32::MAX), Some(u16::MAX));
    // Without markers: the siw/MTU-1500 case, 1448-octet segments carry
    // 1442-octet ULPDUs.
    assert_eq!(mulpdu_without_markers(1448), Some(1442));
    assert_eq!(mulpdu_without_markers(1451), Some(1442));
    assert_eq!(mulpdu_without_markers(1452), Some(1446));
    assert_eq!(mulpdu_without_markers(6), None);
    assert_eq!(mulpdu_without_markers(8), Some(2));
}

proptest! {
    /// The RFC 5044 MULPDU keeps an FPDU within the EMSS wherever Markers
    /// fall; the marker-free bound is tight.
    #[test]
    fn mulpdu_fits_emss(emss in 16u32..20000, pos4 in 0u64..2048) {
        let m = usize::from(mulpdu(emss).unwrap());
        let mut s = FpduSender::new(MARK);
        // Move the sender to stream position 4 * pos4.
        let mut filler = 0u64;
        while s.stream_position() < pos4 * 4 && filler < 10_000 {
            let _ = s.fpdu_to_vec(&[]).unwrap();
            filler += 1;
        }
        prop_assert!(s.fpdu_wire_len(m) <= emss as usize);
        let t = usize::from(mulpdu_without_markers(emss).unwrap());
        prop_assert!(fpdu_len_without_markers(t) <= emss as usize);
        prop_assert!(fpdu_len_without_markers(t + 1) > emss as usize);
    }

    #[test]
    fn round_trip_any_config(
        us in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1200), 1..6),
        crc in any::<bool>(), markers in any::<bool>(), chunk in 1usize..700,
    ) {
        let cfg = FramingConfig { crc, markers };
        let mut s = FpduSender::new(cfg);
        let mut wire = Vec::new();
        for u in &us {
            let before = s.fpdu_wire_len(u.len());
            let f = s.fpdu_to_vec(&[u]).unwrap();
            prop_assert_eq!(f.len(), before);
            wire.extend_from_slice(&f);
        }
        let pieces: Vec<&[u8]> = wire.chunks(chunk).collect();
        prop_assert_eq!(receive_pieces(cfg, &pieces), us);
    }

    #[test]
    fn receiver_total_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..3000),
                                 crc in any::<bool>(), markers in any::<bool>()) {
        let mut r = FpduReceiver::new(FramingConfig { crc, markers });
        let mut at = 0;
        while let Ok(Received::Fpdu(f)) = r.poll(&bytes[at..]) {
            prop_assert!(f.consumed > 0 && at + f.consumed <= bytes.len());
            for rg in f.ulpdu_ranges() {
                prop_assert!(rg.end <= bytes.len() - at);
            }
            at += f.consumed;
        }
    }
}

proptest! {
    /// Zero-copy receive: header gathered across Markers, payload placed
    /// from ranges, equals the contiguous ULPDU.
    #[test]
    fn payload_ranges_after_any_skip(
        sizes in proptest::collection::vec(0usize..1500, 1..5), markers in any::<bool>(), skip in 0usize..1600,
    ) {
        let cfg = FramingConfig { crc: true, markers };
        let us: Vec<Vec<u8>> = sizes.iter().enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 13 + j) as u8).collect()).collect();
        let wire = stream(cfg, &us);
        let mut r = FpduReceiver::new(cfg);
        let mut at = 0;
        for u in &us {
            let Received::Fpdu(f) = r.poll(&wire[at..]).unwrap() else { panic!() };
            let buf = &wire[at..];
            let mut got = Vec::new();
            for rg in f.payload_ranges(skip) {
                got.extend_from_slice(&buf[rg]);
            }
            prop_assert_eq!(&got[..], &u[skip.min(u.len())..]);
            let mut pre = vec![0u8; skip.min(u.len())];
            prop_assert_eq!(f.copy_prefix(buf, &mut pre), pre.len());
            prop_assert_eq!(&pre[..], &u[..pre.len()]);
            at += f.consumed;
        }
    }
}
