//! The MPA CRC on the data paths of the queue pair, with FPDUs as large as
//! the default MULPDU (where the CRC takes its vector code path): the
//! sender's CRC fields checked against an independent bit-at-a-time
//! CRC-32C, the receiver accepting them whatever the read pattern (copy
//! path, direct placement), and any corrupted octet answered with the MPA
//! CRC Terminate.

use rpcrdma_iwarp::crc;
use rpcrdma_iwarp::mpa::fpdu::pad_len;
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_iwarp::rdmap::{self, Opcode};
use rpcrdma_iwarp::TerminateCode;
use rpcrdma_proto::provider::{Access, MemoryRegion, SendOp, SendWr};

const CAPS: rpcrdma_proto::provider::Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
const LEN: usize = 200_003;

/// Bit-at-a-time reflected CRC-32C (polynomial 0x82F63B78 reversed), the
/// textbook definition: an oracle independent of `crc`.
fn reference_crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
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

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn params(crc: bool) -> StreamParams {
    StreamParams {
        crc,
        ..StreamParams::DEFAULT
    }
}

/// A CRC-on RDMA Write of `LEN` octets from `a` to `b`'s target: the wire
/// octets, the data and the target region.
fn write_stream() -> (QueuePair, Vec<u8>, Vec<u8>, MemoryRegion) {
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.establish(params(true));
    b.establish(params(true));
    let data = pattern(LEN, 9);
    let src = a
        .register(data.clone().into_boxed_slice(), Access::NONE)
        .unwrap();
    let target = b.register(vec![0u8; LEN].into_boxed_slice(), RW).unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        // Two gather entries with an odd split.
        sges: vec![src.sge(0, 70_001), src.sge(70_001, (LEN - 70_001) as u32)].into(),
    })
    .unwrap();
    let mut wire = vec![0u8; 2 * LEN];
    let n = a.poll_transmit(&mut wire);
    wire.truncate(n);
    (b, wire, data, target)
}

/// FPDU boundaries of a Marker-free stream: (start, total length).
fn fpdus(wire: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let ul = usize::from(u16::from_be_bytes([wire[at], wire[at + 1]]));
        let total = 2 + ul + pad_len(ul) + 4;
        v.push((at, total));
        at += total;
    }
    assert_eq!(at, wire.len());
    v
}

/// Feeds `wire` like the TCP adapter: straight into memory when the QP
/// offers a target (if `direct`), through `handle_input` in pieces of at
/// most `chunk` octets otherwise.
fn feed(b: &mut QueuePair, wire: &[u8], chunk: usize, direct: bool) {
    let mut s = wire;
    while !s.is_empty() && !b.is_closed() {
        if direct {
            if let Some(t) = b.direct_target() {
                let c = t.len().min(s.len()).min(chunk);
                t[..c].copy_from_slice(&s[..c]);
                b.direct_filled(c);
                s = &s[c..];
                continue;
            }
        }
        let c = chunk.min(s.len());
        let used = b.handle_input(&s[..c]);
        if used < c {
            // A fatal error: the rest is ignored.
            assert!(b.terminate_sent().is_some());
            break;
        }
        s = &s[c..];
    }
}

fn terminate_code(b: &mut QueuePair) -> TerminateCode {
    let mut out = vec![0u8; 4096];
    let n = b.poll_transmit(&mut out);
    let wire = &out[..n];
    assert!(n > 2 + 18, "no Terminate on the wire");
    let ul = usize::from(u16::from_be_bytes([wire[0], wire[1]]));
    // The Terminate FPDU carries a valid CRC too.
    let total = 2 + ul + pad_len(ul) + 4;
    let field = [
        wire[total - 4],
        wire[total - 3],
        wire[total - 2],
        wire[total - 1],
    ];
    assert_eq!(crc::from_wire(field), reference_crc32c(&wire[..total - 4]));
    let seg = rdmap::Segment::parse(&wire[2..2 + ul]).unwrap();
    assert_eq!(seg.control.opcode, Opcode::TERMINATE);
    assert!(b.is_closed());
    seg.terminate(&wire[2..2 + ul]).unwrap().code
}

#[test]
fn sender_crc_fields_match_the_reference() {
    let (_, wire, _, _) = write_stream();
    let f = fpdus(&wire);
    assert!(f.len() >= 4, "{} FPDUs", f.len());
    assert!(f.iter().any(|&(_, t)| t > 60_000), "no large FPDU");
    for (at, total) in f {
        let fpdu = &wire[at..at + total];
        let field = [
            fpdu[total - 4],
            fpdu[total - 3],
            fpdu[total - 2],
            fpdu[total - 1],
        ];
        assert_eq!(
            crc::from_wire(field),
            reference_crc32c(&fpdu[..total - 4]),
            "FPDU at {at}"
        );
        assert_eq!(crc::crc32c(&fpdu[..total - 4]), crc::from_wire(field));
    }
}

#[test]
fn receiver_accepts_any_read_pattern() {
    for (chunk, direct) in [
        (usize::MAX, false),
        (4093, false),
        (7, false),
        (65_536, true),
        (3000, true),
        (1, true),
    ] {
        let (mut b, wire, data, target) = write_stream();
        feed(&mut b, &wire, chunk, direct);
        assert!(!b.is_closed(), "chunk {chunk} direct {direct}");
        assert!(b.terminate_sent().is_none());
        assert_eq!(b.region(&target).unwrap(), &data[..]);
    }
}

#[test]
fn corrupted_octet_anywhere_gets_the_crc_terminate() {
    let (_, wire, _, _) = write_stream();
    let f = fpdus(&wire);
    let (at, total) = f[1];
    // ULPDU_Length is excluded (a changed length reframes the stream).
    let spots = [
        at + 2,                  // DDP header
        at + 20,                 // first payload octets
        at + 20 + 63,            // inside the first vector block
        at + total / 2,          // middle of the payload
        at + total / 2 + 1,      //
        at + total - 4 - 1,      // last octet before the CRC field
        at + total - 4,          // the CRC field itself
        at + total - 1,          //
        f[2].0 + f[2].1 - 4 - 9, // near the end of the next FPDU
    ];
    for &spot in &spots {
        for bit in [0x01u8, 0x80] {
            for (chunk, direct) in [(usize::MAX, false), (1000, true)] {
                let (mut b, mut w, _, _) = write_stream();
                w[spot] ^= bit;
                feed(&mut b, &w, chunk, direct);
                assert_eq!(
                    terminate_code(&mut b),
                    TerminateCode::MPA_CRC,
                    "octet {spot} bit {bit:#x} chunk {chunk} direct {direct}"
                );
            }
        }
    }
}
