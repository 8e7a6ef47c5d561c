//! Transport header codec throughput (criterion).
//!
//! Two version 1 headers, encoded into a caller buffer with
//! [`XdrEncode::encode`] and decoded with [`header::decode`] — the entry
//! points the engine uses (its receive path calls `header::decode`, its send
//! path encodes a `v1::Header` through the same `XdrEncode` code):
//!
//! * `nfs_read`: the RDMA_MSG a Linux client sends with an NFS READ call —
//!   empty Read list, a Write list of one Write chunk of one segment, no
//!   Reply chunk (52 octets);
//! * `minimal`: RDMA_MSG with three empty lists (28 octets).
//!
//! Both take the short path of `header::decode` (chunk lists of at most one
//! entry each, decoded straight into inline storage; no heap allocation).
//!
//! Target (issue "rpcrdma bench"): at least 20 M encode+decode per second.
//! Run: `CARGO_BUILD_JOBS=1 taskset -c 1 cargo bench -p rpcrdma-proto --bench
//! header -- --warm-up-time 1 --measurement-time 3`; the `encode+decode`
//! lines give the rate in elements/s.
//!
//! Old against new in the same session: build this bench at the parent
//! commit and at the new one (`cargo bench --no-run`, copy each
//! `target/release/deps/header-*` binary aside), then run the two binaries
//! alternately, pinned (`taskset -c 1 ./header-old --bench --warm-up-time 1
//! --measurement-time 3`, then `./header-new ...`, A B A B). Figures of
//! 2026-11-21 (commit 9f1daa7 = old; 2 cores shared with 3 other workers
//! compiling, load 2-4), in M/s:
//!
//! | bench (encode+decode) | old | new | new/old |
//! |---|---|---|---|
//! | `nfs_read`, criterion mean, median of 3 runs (min..max) | 9.3 (8.1..9.4) | 34.0 (29.5..35.1) | 3.7x |
//! | `nfs_read`, fastest sample of 5 runs | 9.7 | 36.2 | 3.7x |
//! | `minimal`, criterion mean, median of 3 runs (min..max) | 16.8 (13.5..17.4) | 43.4 (40.9..44.3) | 2.6x |
//! | `minimal`, fastest sample of 5 runs | 17.9 | 46.1 | 2.6x |
//!
//! Separately (fastest sample): `nfs_read` decode 12.7 -> 69.6, encode
//! 58.1 -> 75.9; `minimal` decode 21.4 -> 79.2, encode 69.8 -> 99.8. Under
//! heavier load the criterion means of single runs dropped to about half of
//! these (15..35 M/s for `nfs_read`): the CPU is shared, so compare runs
//! made together, never absolute figures across sessions.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rpcrdma_proto::wire::chunk::{ChunkLists, Segment, WriteChunk};
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::v1::{Body, Header};
use rpcrdma_proto::{Limits, XdrEncode};

/// The NFS READ call header: xid, vers 1, 128 credits, RDMA_MSG, Read list
/// absent, one Write chunk of one segment (handle 0x1234, 1 MiB at offset
/// 0x7f00_0000_1000), end of Write list, no Reply chunk.
fn nfs_read() -> TransportHeader {
    TransportHeader::V1(Header {
        xid: 0x6b2a_11c0,
        credit: 128,
        body: Body::Msg(ChunkLists {
            reads: Default::default(),
            writes: vec![WriteChunk::new(vec![Segment::new(
                0x1234,
                1 << 20,
                0x7f00_0000_1000,
            )])]
            .into(),
            reply: None,
        }),
    })
}

/// Hand-written XDR of [`nfs_read`] (not produced by the code under test).
const NFS_READ_HEX: &str = concat!(
    "6b2a11c0", "00000001", "00000080", "00000000", // xid, vers, credit, RDMA_MSG
    "00000000", // Read list: absent
    "00000001", "00000001", // Write list: present, one segment
    "00001234", "00100000", "00007f00", "00001000", // handle, length, offset
    "00000000", // end of Write list
    "00000000", // no Reply chunk
);

fn minimal() -> TransportHeader {
    TransportHeader::V1(Header {
        xid: 1,
        credit: 32,
        body: Body::Msg(ChunkLists::empty()),
    })
}

const MINIMAL_HEX: &str = concat!(
    "00000001", "00000001", "00000020", "00000000", // xid, vers, credit, RDMA_MSG
    "00000000", "00000000", "00000000", // three empty lists
);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Checks the codec against the hand-written bytes before timing it.
fn sanity(h: &TransportHeader, hex: &str) {
    let want = unhex(hex);
    let mut buf = [0u8; 256];
    let n = h.encode(&mut buf).expect("encode");
    assert_eq!(
        &buf[..n],
        &want[..],
        "encoding differs from the hand-written bytes"
    );
    let (back, len) = header::decode(&want, &Limits::DEFAULT).expect("decode");
    assert_eq!(len, want.len());
    assert_eq!(&back, h);
}

fn bench_header(c: &mut Criterion, name: &str, h: TransportHeader, hex: &str) {
    sanity(&h, hex);
    let limits = Limits::DEFAULT;
    let wire = unhex(hex);
    let mut g = c.benchmark_group(format!("header/{name}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode+decode", |b| {
        let mut buf = [0u8; 256];
        b.iter(|| {
            let n = black_box(&h).encode(&mut buf).unwrap_or(0);
            let r = header::decode(black_box(&buf[..n]), &limits);
            black_box(r.is_ok())
        })
    });
    g.bench_function("encode", |b| {
        let mut buf = [0u8; 256];
        b.iter(|| {
            let n = black_box(&h).encode(&mut buf).unwrap_or(0);
            black_box(&buf[..n]);
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| black_box(header::decode(black_box(&wire[..]), &limits).is_ok()))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_header(c, "nfs_read", nfs_read(), NFS_READ_HEX);
    bench_header(c, "minimal", minimal(), MINIMAL_HEX);
}

criterion_group!(header_benches, benches);
criterion_main!(header_benches);
