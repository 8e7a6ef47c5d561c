//! WRITE stability, verifiers, and a 16 MiB round trip.

mod common;

use common::{mode, Scratch};
use rpcrdma_nfs::fs::*;

#[test]
fn each_stable_mode_is_reported_and_the_data_lands() {
    let s = Scratch::new();
    let f = s
        .export
        .create(&s.root(), b"f", CreateHow::Guarded(mode(0o644)))
        .unwrap()
        .handle;
    let modes = [
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ];
    for (i, how) in modes.into_iter().enumerate() {
        let data = [b'a' + i as u8; 100];
        let w = s.export.write(&f, i as u64 * 100, &data, how).unwrap();
        assert_eq!((w.count, w.committed), (100, how));
        assert_eq!(w.verf, s.export.write_verifier());
        assert_eq!(w.wcc.after.unwrap().size, (i as u64 + 1) * 100);
    }
    let c = s.export.commit(&f, 0, 0).unwrap();
    assert_eq!(c.verf, s.export.write_verifier());
    let on_disk = std::fs::read(s.path("f")).unwrap();
    assert_eq!(&on_disk[..100], &[b'a'; 100]);
    assert_eq!(&on_disk[100..200], &[b'b'; 100]);
    assert_eq!(&on_disk[200..], &[b'c'; 100]);
}

#[test]
fn the_write_verifier_changes_when_the_server_restarts() {
    let s = Scratch::new();
    let before = s.export.write_verifier();
    assert_eq!(
        s.export.write_verifier(),
        before,
        "stable within an instance"
    );
    let restarted = Export::new(s.path(""), ExportConfig::default()).unwrap();
    assert_ne!(restarted.write_verifier(), before);
    assert_ne!(restarted.cookie_verifier(), s.export.cookie_verifier());
}

/// A deterministic pseudo-random byte stream (xorshift64*).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn sixteen_mib_in_one_mib_pieces_is_bit_exact() {
    const MIB: usize = 1 << 20;
    let s = Scratch::new();
    let data = pattern(16 * MIB, 0x5eed);
    let f = s
        .export
        .create(&s.root(), b"big", CreateHow::Guarded(mode(0o644)))
        .unwrap()
        .handle;
    for (i, piece) in data.chunks(MIB).enumerate() {
        let w = s
            .export
            .write(&f, (i * MIB) as u64, piece, StableHow::Unstable)
            .unwrap();
        assert_eq!(w.count as usize, MIB);
    }
    s.export.commit(&f, 0, 0).unwrap();
    assert_eq!(s.export.getattr(&f).unwrap().size, data.len() as u64);
    let mut back = Vec::with_capacity(data.len());
    let mut eof = false;
    while !eof {
        let r = s.export.read(&f, back.len() as u64, MAX_IO).unwrap();
        assert!(r.data.len() <= MIB);
        eof = r.eof;
        back.extend_from_slice(&r.data);
    }
    assert_eq!(back.len(), data.len());
    assert!(back == data, "16 MiB read back differs");
    // Asking for more than rtmax gets at most rtmax.
    assert_eq!(s.export.read(&f, 0, 4 * MAX_IO).unwrap().data.len(), MIB);
    // The host file is the same bytes.
    assert!(std::fs::read(s.path("big")).unwrap() == data);
}
