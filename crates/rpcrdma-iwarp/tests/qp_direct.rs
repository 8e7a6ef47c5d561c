//! The zero-copy receive path of the TCP adapter,
//! [`QueuePair::read_direct`] (the rest of a payload read straight into its
//! target, and what follows it — PAD, CRC, the next header — in the same
//! read), pinned to the general path ([`QueuePair::handle_input`] over the
//! same octets in arbitrary pieces): for a stream of Writes, Sends and Read
//! Responses at random MULPDUs, read sizes and CRC settings, with or
//! without one flipped bit, both receivers end in the same state —
//! completions, memory, Terminate, close reason.

use proptest::prelude::*;
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_proto::provider::{
    Access, Caps, Completion, DisconnectReason, MemoryRegion, RecvWr, SendOp, SendWr,
};

const CAPS: Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
const TARGET: usize = 64 << 10;
const RECV: usize = 20_000;
const RECVS: u64 = 8;

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn reg(q: &mut QueuePair, data: Vec<u8>, access: Access) -> MemoryRegion {
    q.register(data.into_boxed_slice(), access).unwrap()
}

/// One message of the stream: (kind, octets): 0 an RDMA Write into the
/// receiver's target, 1 a Send, 2 an RDMA Read by the receiver (its Read
/// Response is what the stream carries).
type Msg = (u8, usize);

/// The receiving end: its target, Read sink and receive buffers, receives
/// posted, and the Reads of `msgs` posted (their Read Requests sent).
struct Rx {
    q: QueuePair,
    regions: Vec<MemoryRegion>,
    read_requests: Vec<u8>,
}

fn receiver(p: StreamParams, msgs: &[Msg]) -> Rx {
    let mut q = QueuePair::new(CAPS, 0x80);
    q.establish(p);
    let target = reg(&mut q, vec![0x11; TARGET], RW);
    let sink = reg(&mut q, vec![0x22; RECV * 6], RW);
    let rbufs = reg(
        &mut q,
        vec![0x33; RECV * RECVS as usize],
        Access::LOCAL_WRITE,
    );
    for i in 0..RECVS {
        q.post_recv(RecvWr {
            wr_id: 100 + i,
            sge: rbufs.sge(i * RECV as u64, RECV as u32),
        })
        .unwrap();
    }
    let mut sink_off = 0u64;
    for (i, &(kind, len)) in msgs.iter().enumerate() {
        if kind == 2 {
            q.post_send(SendWr {
                wr_id: i as u64,
                op: SendOp::Read {
                    remote: rpcrdma_proto::provider::RemoteAddr {
                        stag: rpcrdma_proto::provider::Stag(SRC_STAG.with(|s| s.get())),
                        offset: 0,
                    },
                },
                sges: vec![sink.sge(sink_off, len as u32)].into(),
            })
            .unwrap();
            sink_off += len as u64;
        }
    }
    let mut out = vec![0u8; 1 << 16];
    let n = q.poll_transmit(&mut out);
    out.truncate(n);
    Rx {
        q,
        regions: vec![target, sink, rbufs],
        read_requests: out,
    }
}

thread_local! {
    /// The sender's Read source STag (registered first, so always the same).
    static SRC_STAG: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The octets the sender puts on the wire for `msgs`.
fn stream(p: StreamParams, msgs: &[Msg]) -> Vec<u8> {
    let mut a = QueuePair::new(CAPS, 0);
    a.establish(p);
    let src = reg(&mut a, pattern(TARGET, 7), Access::REMOTE_READ);
    SRC_STAG.with(|s| s.set(src.stag().0));
    let data = reg(&mut a, pattern(TARGET, 9), Access::NONE);
    // The receiver's regions (the same registrations give the same STags).
    let rx = receiver(p, msgs);
    let (target, _, _) = (&rx.regions[0], &rx.regions[1], &rx.regions[2]);
    a.handle_input(&rx.read_requests);
    let mut off = 0u64;
    for (i, &(kind, len)) in msgs.iter().enumerate() {
        let op = match kind {
            0 => SendOp::Write {
                remote: target.remote(off % (TARGET as u64 - len as u64 + 1)),
            },
            1 => SendOp::Send { solicited: false },
            _ => continue,
        };
        off += 4093;
        a.post_send(SendWr {
            wr_id: i as u64,
            op,
            sges: vec![data.sge(0, len as u32)].into(),
        })
        .unwrap();
    }
    let mut wire = vec![0u8; 1 << 20];
    let n = a.poll_transmit(&mut wire);
    wire.truncate(n);
    wire
}

type Outcome = (
    Vec<Completion>,
    Vec<Vec<u8>>,
    Option<DisconnectReason>,
    Option<rpcrdma_iwarp::rdmap::TerminateMessage>,
    bool,
    u64,
);

fn outcome(mut rx: Rx, out: &mut [u8]) -> Outcome {
    rx.q.confirm_transmitted();
    let n = rx.q.poll_transmit(out);
    let _ = n;
    let mut c = Vec::new();
    rx.q.poll_completions(&mut c);
    let mem = rx
        .regions
        .iter()
        .map(|r| rx.q.region(r).map(<[u8]>::to_vec).unwrap_or_default())
        .collect();
    let s = rx.q.stats();
    (
        c,
        mem,
        rx.q.close_reason().cloned(),
        rx.q.terminate_sent().copied(),
        rx.q.rx_mid_fpdu(),
        s.rx_direct_bytes + s.rx_copied_bytes,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn direct_reads_equal_the_general_path(
        msgs in proptest::collection::vec((0u8..3, 0usize..RECV), 1..6),
        mulpdu in 40u16..20_000,
        crc in any::<bool>(),
        reads in proptest::collection::vec(1usize..40_000, 1..32),
        piece in 1usize..3000,
        flip in proptest::option::of((any::<prop::sample::Index>(), 0u8..8)),
    ) {
        let p = StreamParams { crc, mulpdu, ..StreamParams::DEFAULT };
        let mut wire = stream(p, &msgs);
        if let Some((at, bit)) = flip {
            if !wire.is_empty() {
                let i = at.index(wire.len());
                wire[i] ^= 1 << bit;
            }
        }
        let mut out = vec![0u8; 1 << 16];

        // The general path: the octets in pieces of `piece`.
        let mut general = receiver(p, &msgs);
        for c in wire.chunks(piece) {
            general.q.handle_input(c);
        }
        let general = outcome(general, &mut out);

        // The adapter's path: a direct read whenever one is offered (each
        // read returning at most the next of `reads` octets, as a short
        // socket read does), else a read-ahead of the suggested length.
        let mut direct = receiver(p, &msgs);
        let mut rest = &wire[..];
        let mut seen = Vec::new();
        let mut i = 0usize;
        while !rest.is_empty() {
            let cap = reads[i % reads.len()];
            i += 1;
            let r = direct.q.read_direct(
                usize::MAX,
                |a, b| {
                    let n1 = a.len().min(rest.len()).min(cap);
                    a[..n1].copy_from_slice(&rest[..n1]);
                    let n2 = if n1 == a.len() {
                        b.len().min(rest.len() - n1).min(cap - n1)
                    } else {
                        0
                    };
                    b[..n2].copy_from_slice(&rest[n1..n1 + n2]);
                    Ok(n1 + n2)
                },
                |a, b| {
                    seen.extend_from_slice(a);
                    seen.extend_from_slice(b);
                },
            );
            match r {
                Some((Ok(n), asked)) => {
                    prop_assert!(n <= asked);
                    rest = &rest[n..];
                }
                Some((Err(e), _)) => prop_assert!(false, "{e}"),
                None => {
                    let n = direct.q.suggested_read_len().min(rest.len()).min(cap);
                    seen.extend_from_slice(&rest[..n]);
                    direct.q.handle_input(&rest[..n]);
                    rest = &rest[n..];
                }
            }
        }
        prop_assert_eq!(&seen, &wire, "the octets seen are the stream");
        let direct_outcome = outcome(direct, &mut out);
        prop_assert_eq!(direct_outcome, general);
    }
}
