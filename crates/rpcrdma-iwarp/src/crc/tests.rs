//! The CRC-32C implementations against a bit-at-a-time reference, on the
//! catalogue and RFC 3720 vectors, every length near each path's
//! boundaries, FPDU-sized inputs, arbitrary data and split points, for
//! every implementation (each forced explicitly, whatever [`super::ENV`]
//! says).

use proptest::prelude::*;

use super::*;

#[test]
fn check_value() {
    // The CRC catalogue check value of CRC-32/ISCSI (= CRC-32C).
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn lab_vector_32_zero_octets() {
    // /work/shared/lab/baseline/README.md: CRC-32C of 32 zero bytes ->
    // wire bytes `aa 36 91 8a` (RFC 3720 B.4 lists the same value).
    let v = crc32c(&[0u8; 32]);
    assert_eq!(v, 0x8a91_36aa);
    assert_eq!(to_wire(v), [0xaa, 0x36, 0x91, 0x8a]);
    assert_eq!(from_wire([0xaa, 0x36, 0x91, 0x8a]), v);
}

#[test]
fn rfc3720_vectors() {
    // RFC 3720 appendix B.4: 32 octets of 0xff, incrementing and
    // decrementing (values as listed there, in wire byte order).
    assert_eq!(to_wire(crc32c(&[0xffu8; 32])), [0x43, 0xab, 0xa8, 0x62]);
    let inc: Vec<u8> = (0u8..32).collect();
    assert_eq!(to_wire(crc32c(&inc)), [0x4e, 0x79, 0xdd, 0x46]);
    let dec: Vec<u8> = (0u8..32).rev().collect();
    assert_eq!(to_wire(crc32c(&dec)), [0x5c, 0xdb, 0x3f, 0x11]);
}

/// Bit-at-a-time reflected CRC-32C: the textbook definition, an oracle
/// independent of every implementation behind [`crc32c`].
fn reference(data: &[u8]) -> u32 {
    reference_append(0, data)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

#[test]
fn every_length_matches_the_reference() {
    // Every length through the small, SSE and vector paths (and their
    // boundaries at 64 and 256 octets), at every alignment mod 8.
    let data = pattern(2100);
    for start in 0..8 {
        for len in (0..=600).chain([1023, 1024, 1025, 2047, 2048, 2049, 2092]) {
            let d = &data[start..start + len];
            assert_eq!(crc32c(d), reference(d), "start {start} len {len}");
        }
    }
}

#[test]
fn fpdu_sized_inputs_match_the_reference() {
    let data = pattern(65_536 + 17);
    for len in [4096, 64_768 + 2 + 2, 65_512 + 2 + 2, 65_536, 65_536 + 17] {
        assert_eq!(crc32c(&data[..len]), reference(&data[..len]), "len {len}");
    }
}

#[test]
fn split_anywhere_equals_one_shot() {
    let data = pattern(70_000);
    let whole = reference(&data);
    for split in [
        0, 1, 2, 7, 63, 64, 65, 255, 256, 257, 4099, 65_535, 69_999, 70_000,
    ] {
        let (a, b) = data.split_at(split);
        assert_eq!(Crc32c::new().update(a).update(b).value(), whole, "{split}");
    }
    // A header, many small and large pieces, as the FPDU paths feed it.
    let mut c = Crc32c::new();
    let mut rest = &data[..];
    let mut step = 1;
    while !rest.is_empty() {
        let n = step.min(rest.len());
        c = c.update(&rest[..n]);
        rest = &rest[n..];
        step = step * 3 + 1;
    }
    assert_eq!(c.value(), whole);
}

#[test]
fn single_bit_flips_change_the_crc() {
    // CRC-32C detects every single-bit error; checked at positions in
    // each code path's territory of a 64 KiB buffer.
    let data = pattern(65_536);
    let good = crc32c(&data);
    for pos in [0, 1, 63, 64, 255, 256, 4095, 32_768, 65_534, 65_535] {
        for bit in 0..8 {
            let mut bad = data.clone();
            bad[pos] ^= 1 << bit;
            assert_ne!(crc32c(&bad), good, "pos {pos} bit {bit}");
            let (a, b) = bad.split_at(pos / 2 + 1);
            assert_ne!(Crc32c::new().update(a).update(b).value(), good);
        }
    }
}

#[test]
fn incremental_equals_one_shot() {
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
    for split in [0, 1, 2, 3, 500, 999, 1000] {
        let (a, b) = data.split_at(split);
        assert_eq!(Crc32c::new().update(a).update(b).value(), crc32c(&data));
    }
}

#[test]
fn every_implementation_matches_the_reference_at_every_boundary() {
    // Lengths through each path's boundaries (the `crc32` instruction's
    // 8-octet words and 3-lane blocks, `crc-fast`'s 256-octet switch and
    // its 64- / 128- / 256-octet folding blocks), at every alignment.
    let data = pattern(70_000);
    let lens = (0..=520).chain([
        1023, 1024, 1025, 1460, 4095, 4096, 4097, 8192, 65_516, 69_990,
    ]);
    for imp in Impl::ALL {
        for start in 0..8 {
            for len in lens.clone() {
                let d = &data[start..start + len];
                assert_eq!(
                    imp.append(0, d),
                    reference(d),
                    "{imp:?} start {start} len {len}"
                );
            }
        }
    }
}

#[test]
fn names_parse_back() {
    for imp in Impl::ALL {
        assert_eq!(Impl::parse(imp.name()), Some(imp));
        assert!(imp.describe().starts_with(imp.name()), "{}", imp.describe());
    }
    assert_eq!(Impl::parse("pclmul"), None);
    assert_eq!(Impl::parse(""), None);
}

/// The reference continued from a standard CRC value over `b`.
fn reference_append(crc: u32, b: &[u8]) -> u32 {
    let mut c = !crc;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    !c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every implementation equals the reference on arbitrary data, one
    /// shot and split anywhere, starting from an arbitrary CRC value.
    #[test]
    fn every_implementation_equals_the_reference(
        data in prop::collection::vec(any::<u8>(), 0..5000),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        seed in any::<u32>(),
    ) {
        let want = reference_append(seed, &data);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(data.len() + 1)).collect();
        points.sort_unstable();
        for imp in Impl::ALL {
            prop_assert_eq!(imp.append(seed, &data), want, "{:?} one shot", imp);
            let mut c = seed;
            let mut at = 0;
            for &p in points.iter().chain([data.len()].iter()) {
                c = imp.append(c, &data[at..p]);
                at = p;
            }
            prop_assert_eq!(c, want, "{:?} split at {:?}", imp, points);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Large inputs (up to two FPDUs) cut into FPDU-like pieces: header,
    /// payload pieces as reads deliver them, PAD.
    #[test]
    fn every_implementation_equals_the_reference_on_large_inputs(
        len in 0usize..140_000,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let data = pattern(len);
        let want = reference(&data);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(len + 1)).collect();
        points.sort_unstable();
        for imp in Impl::ALL {
            let mut c = 0;
            let mut at = 0;
            for &p in points.iter().chain([len].iter()) {
                c = imp.append(c, &data[at..p]);
                at = p;
            }
            prop_assert_eq!(c, want, "{:?} len {} split at {:?}", imp, len, points);
        }
    }
}
