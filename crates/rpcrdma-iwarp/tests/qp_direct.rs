//! The zero-copy receive path of the TCP adapter,
//! [`QueuePair::read_direct`] (the rest of a payload read straight into its
//! target, and what follows it — PAD, CRC, the next header — in the same
//! read), pinned to the general path ([`QueuePair::handle_input`] over the
//! same octets in arbitrary pieces): for a stream of Writes, Sends and Read
//! Responses at random MULPDUs, read sizes and CRC settings, with or
//! without one flipped bit, both receivers end in the same state —
//! completions, memory, Terminate, close reason. Inside a Read Response
//! the direct path places the segments that follow ahead of their headers
//! (`qp/direct.rs`): the second proptest feeds it Read Responses cut at
//! irregular lengths, Sends between their segments, a response cut short
//! or shifted, bit flips. The one difference allowed: the part of a Read's
//! sink that a Read which did not succeed had not received (undefined, as
//! in verbs) is left out of the comparison.

use std::io::IoSliceMut;

use proptest::prelude::*;
use rpcrdma_iwarp::ddp;
use rpcrdma_iwarp::mpa::fpdu::{FpduSender, FramingConfig};
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_iwarp::rdmap::{self, Opcode};
use rpcrdma_proto::provider::{
    Access, Caps, Completion, DisconnectReason, MemoryRegion, RecvWr, RemoteAddr, SendOp, SendWr,
    Stag, Status,
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

/// A socket read of at most `cap` octets of `rest` into `iov`, in order.
fn scatter(iov: &mut [IoSliceMut<'_>], rest: &[u8], cap: usize) -> usize {
    let mut n = 0;
    for b in iov.iter_mut() {
        let k = b.len().min(rest.len() - n).min(cap - n);
        b[..k].copy_from_slice(&rest[n..n + k]);
        n += k;
        if k < b.len() {
            break;
        }
    }
    n
}

/// Zeroes, in `mem`, the sink range (`wr_id`, offset, length) of every
/// Read that did not complete successfully: its contents are undefined.
/// (A sink still held by a Read is not readable: `mem` is empty then.)
fn mask_failed_reads(mem: &mut [u8], reads: &[(u64, usize, usize)], done: &[Completion]) {
    for &(id, off, len) in reads {
        let ok = done
            .iter()
            .any(|c| c.wr_id == id && c.status == Status::Success);
        if let Some(m) = mem.get_mut(off..off + len).filter(|_| !ok) {
            m.fill(0);
        }
    }
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

/// Registers the receive buffers and posts [`RECVS`] receives into them.
fn post_receives(q: &mut QueuePair) -> MemoryRegion {
    let rbufs = reg(q, vec![0x33; RECV * RECVS as usize], Access::LOCAL_WRITE);
    for i in 0..RECVS {
        q.post_recv(RecvWr {
            wr_id: 100 + i,
            sge: rbufs.sge(i * RECV as u64, RECV as u32),
        })
        .unwrap();
    }
    rbufs
}

fn receiver(p: StreamParams, msgs: &[Msg]) -> Rx {
    let mut q = QueuePair::new(CAPS, 0x80);
    q.establish(p);
    let target = reg(&mut q, vec![0x11; TARGET], RW);
    let sink = reg(&mut q, vec![0x22; RECV * 6], RW);
    let rbufs = post_receives(&mut q);
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

fn outcome(rx: Rx, msgs: &[Msg]) -> Outcome {
    let mut reads = Vec::new();
    let mut off = 0;
    for (i, &(kind, len)) in msgs.iter().enumerate() {
        if kind == 2 {
            reads.push((i as u64, off, len));
            off += len;
        }
    }
    outcome_with_sink(rx, 1, &reads)
}

/// What a receiver ended with — completions, the contents of its regions,
/// close reason, Terminate sent, mid-FPDU, payload octets placed — with
/// the unreceived part of the `reads` into region `sink` that did not
/// succeed left out (see the module docs).
fn outcome_with_sink(mut rx: Rx, sink: usize, reads: &[(u64, usize, usize)]) -> Outcome {
    rx.q.confirm_transmitted();
    let mut out = vec![0u8; 1 << 16];
    let _ = rx.q.poll_transmit(&mut out);
    let mut c = Vec::new();
    rx.q.poll_completions(&mut c);
    let mut mem: Vec<Vec<u8>> = rx
        .regions
        .iter()
        .map(|r| rx.q.region(r).map(<[u8]>::to_vec).unwrap_or_default())
        .collect();
    mask_failed_reads(&mut mem[sink], reads, &c);
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
        // The general path: the octets in pieces of `piece`.
        let mut general = receiver(p, &msgs);
        for c in wire.chunks(piece) {
            general.q.handle_input(c);
        }
        let general = outcome(general, &msgs);

        // The adapter's path: a direct read whenever one is offered (each
        // read returning at most the next of `reads` octets, as a short
        // socket read does), else a read-ahead of the suggested length.
        let mut direct = receiver(p, &msgs);
        drive_direct(&mut direct.q, &wire, &reads)?;
        let direct_outcome = outcome(direct, &msgs);
        prop_assert_eq!(direct_outcome, general);
    }
}

/// The receiver's Read sink in the Read Response tests.
const SINK: usize = 1 << 21;
/// The peer's Read source (only named in the Read Requests).
const PEER_SRC: u32 = 0x0102_0304;

/// A receiver with one RDMA Read posted per entry of `lens`, into
/// consecutive ranges of one sink (their Read Requests sent), and
/// [`RECVS`] receives for Sends. Returns it, its regions (sink first) and
/// the Reads: (wr_id, sink offset, length).
fn read_receiver(p: StreamParams, lens: &[usize]) -> (Rx, Vec<(u64, usize, usize)>) {
    let mut q = QueuePair::new(CAPS, 0x80);
    q.establish(p);
    let sink = reg(&mut q, vec![0x22; SINK], RW);
    let rbufs = post_receives(&mut q);
    let mut reads = Vec::new();
    let mut off = 0;
    for (i, &len) in lens.iter().enumerate() {
        q.post_send(SendWr {
            wr_id: i as u64,
            op: SendOp::Read {
                remote: RemoteAddr {
                    stag: Stag(PEER_SRC),
                    offset: 0,
                },
            },
            sges: vec![sink.sge(off as u64, len as u32)].into(),
        })
        .unwrap();
        reads.push((i as u64, off, len));
        off += len;
    }
    let mut out = vec![0u8; 1 << 16];
    let n = q.poll_transmit(&mut out);
    out.truncate(n);
    let rx = Rx {
        q,
        regions: vec![sink, rbufs],
        read_requests: out,
    };
    (rx, reads)
}

/// How a peer cuts its Read Responses: segment `k` has
/// `cuts[k % cuts.len()]` payload octets (0: `base`), a Send follows it
/// when `sends[k % sends.len()]` (at most [`RECVS`] of them), segment
/// `early_last` carries L before its Read's end (a short response),
/// segment `shift` a TO one octet on.
#[derive(Clone, Debug)]
struct Cut {
    base: usize,
    cuts: Vec<usize>,
    sends: Vec<bool>,
    early_last: Option<usize>,
    shift: Option<usize>,
}

/// The Read Responses (and Sends) of `cut` for `reads`, framed.
fn responses(crc: bool, sink_stag: u32, reads: &[(u64, usize, usize)], cut: &Cut) -> Vec<u8> {
    let mut f = FpduSender::new(FramingConfig {
        crc,
        markers: false,
    });
    let mut wire = Vec::new();
    let mut fpdu = |hdr: &[u8], payload: &[u8]| {
        let mut b = vec![0u8; f.fpdu_wire_len(hdr.len() + payload.len())];
        let n = f.write_fpdu(&[hdr, payload], &mut b).unwrap();
        wire.extend_from_slice(&b[..n]);
    };
    let (mut k, mut msn, mut sends) = (0usize, ddp::INITIAL_MSN, 0);
    for &(_, off, len) in reads {
        let data = pattern(len, off as u32 + 5);
        let mut done = 0;
        loop {
            let c = cut.cuts[k % cut.cuts.len()];
            let seg = if c == 0 { cut.base } else { c }.min(len - done);
            let last = done + seg == len || cut.early_last == Some(k);
            let to = (off + done) as u64 + u64::from(cut.shift == Some(k));
            let hdr = rdmap::read_response_header(sink_stag, to, last).to_vec();
            fpdu(&hdr, &data[done..done + seg]);
            if cut.sends[k % cut.sends.len()] && sends < RECVS {
                let hdr = rdmap::send_header(Opcode::SEND, msn, 0, true, 0)
                    .unwrap()
                    .to_vec();
                fpdu(&hdr, &pattern(1 + k * 37 % 300, k as u32));
                msn += 1;
                sends += 1;
            }
            done += seg;
            k += 1;
            if done == len {
                break;
            }
        }
    }
    wire
}

/// The adapter's loop over `wire` (as `direct_reads_equal_the_general_path`):
/// a direct read whenever one is offered, each socket read returning at
/// most the next of `reads` octets. Returns the reads made.
fn drive_direct(q: &mut QueuePair, wire: &[u8], reads: &[usize]) -> Result<usize, TestCaseError> {
    let mut rest = wire;
    let mut seen = Vec::new();
    let mut i = 0usize;
    while !rest.is_empty() {
        let cap = reads[i % reads.len()];
        i += 1;
        match q.read_direct(
            usize::MAX,
            |iov| Ok(scatter(iov, rest, cap)),
            |s| seen.extend_from_slice(s),
        ) {
            Some((Ok(n), asked)) => {
                prop_assert!(n <= asked);
                rest = &rest[n..];
            }
            Some((Err(e), _)) => prop_assert!(false, "{e}"),
            None => {
                let n = q.suggested_read_len().min(rest.len()).min(cap);
                seen.extend_from_slice(&rest[..n]);
                q.handle_input(&rest[..n]);
                rest = &rest[n..];
            }
        }
    }
    prop_assert_eq!(&seen[..], wire, "the octets seen are the stream");
    Ok(i)
}

fn cut_strategy() -> impl Strategy<Value = Cut> {
    (
        1usize..6000,
        proptest::collection::vec(prop_oneof![3 => Just(0usize), 1 => 1usize..7000], 1..6),
        proptest::collection::vec(prop_oneof![4 => Just(false), 1 => Just(true)], 1..5),
        proptest::option::weighted(0.2, 0usize..40),
        proptest::option::weighted(0.2, 0usize..40),
    )
        .prop_map(|(base, cuts, sends, early_last, shift)| Cut {
            base,
            cuts,
            sends,
            early_last,
            shift,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Read Responses placed ahead of their headers end as the general
    /// path ends: irregular segments, Sends between them, short or shifted
    /// responses, a flipped bit, any socket read sizes.
    #[test]
    fn read_responses_placed_ahead_equal_the_general_path(
        lens in proptest::collection::vec(0usize..60_000, 1..4),
        cut in cut_strategy(),
        crc in any::<bool>(),
        reads in proptest::collection::vec(1usize..200_000, 1..16),
        piece in 1usize..5000,
        flip in proptest::option::weighted(0.3, (any::<prop::sample::Index>(), 0u8..8)),
    ) {
        let p = StreamParams { crc, ..StreamParams::DEFAULT };
        let (general, reads_posted) = read_receiver(p, &lens);
        let sink_stag = general.regions[0].stag().0;
        let mut wire = responses(crc, sink_stag, &reads_posted, &cut);
        if let Some((at, bit)) = flip {
            if !wire.is_empty() {
                let i = at.index(wire.len());
                wire[i] ^= 1 << bit;
            }
        }
        let mut general = general;
        for c in wire.chunks(piece) {
            general.q.handle_input(c);
        }
        let general = outcome_with_sink(general, 0, &reads_posted);
        let (mut direct, _) = read_receiver(p, &lens);
        drive_direct(&mut direct.q, &wire, &reads)?;
        prop_assert_eq!(outcome_with_sink(direct, 0, &reads_posted), general);
    }
}

/// A Read Response of 64 KiB or 1 MiB at the default MULPDU (2 or 17
/// FPDUs) takes two reads once the socket holds all of it: one of 128
/// octets (its first header and a little payload) and one scatter read of
/// the rest (a 1 MiB one took a read-ahead of 72 KiB copied to the sink
/// and one read per FPDU; a 64 KiB one the read-ahead, all of it copied).
/// The Read completes, the sink holds the data, at most 128 octets of it
/// copied. (Before it, a small Send, as a server receives the call whose
/// Read chunk it reads.)
#[test]
fn a_read_response_takes_two_reads() {
    for (len, crc) in [(64 << 10, false), (1 << 20, false), (1 << 20, true)] {
        let p = StreamParams {
            crc,
            ..StreamParams::DEFAULT
        };
        let (mut rx, reads) = read_receiver(p, &[len]);
        let cut = Cut {
            base: usize::from(p.mulpdu) - 14,
            cuts: vec![0],
            sends: vec![false],
            early_last: None,
            shift: None,
        };
        // As on a server: the call (a small Send) came first.
        let mut f = FpduSender::new(FramingConfig {
            crc,
            markers: false,
        });
        let hdr = rdmap::send_header(Opcode::SEND, ddp::INITIAL_MSN, 0, true, 0)
            .unwrap()
            .to_vec();
        let mut call = vec![0u8; f.fpdu_wire_len(hdr.len() + 120)];
        let k = f.write_fpdu(&[&hdr, &[7; 120]], &mut call).unwrap();
        assert_eq!(rx.q.handle_input(&call[..k]), k);
        let copied = rx.q.stats().rx_copied_bytes;
        let wire = responses(crc, rx.regions[0].stag().0, &reads, &cut);
        let n = drive_direct(&mut rx.q, &wire, &[usize::MAX]).unwrap();
        assert_eq!(n, 2, "reads for a Read Response of {len} (crc {crc})");
        let s = rx.q.stats();
        assert!(s.rx_copied_bytes - copied <= 128, "{s:?}");
        let mut c = Vec::new();
        rx.q.poll_completions(&mut c);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!((c[0].wr_id, c[0].status), (100, Status::Success));
        assert_eq!((c[1].wr_id, c[1].status), (0, Status::Success));
        assert_eq!(c[1].byte_len as usize, len);
        let sink = rx.q.region(&rx.regions[0]).unwrap();
        assert!(sink[..len] == pattern(len, 5)[..], "sink contents");
    }
}
