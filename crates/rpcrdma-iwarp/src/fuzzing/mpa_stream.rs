//! `mpa_stream`: the FPDU receive path on arbitrary octets.
//!
//! The input chooses CRC on/off, Markers on/off, the largest ULPDU
//! accepted, a list of split points, and a stream: either the raw rest of
//! the input, or FPDUs framed (with valid length, PAD, Markers and CRC)
//! around generated DDP/RDMAP segments ([`super::gen`]: headers that name
//! the queue pair's STags, MSNs and Reads, then mutated), raw octets and
//! corrupted octets. It asserts:
//!
//! * no panic, in [`crate::mpa::fpdu::FpduReceiver`] or in the queue pair;
//! * the receiver gives the same FPDUs and the same error fed whole and
//!   fed in pieces (split anywhere);
//! * the queue pair ([`crate::qp::QueuePair::handle_input`]) reaches the
//!   same verdict fed whole (the whole-FPDU fast path), in pieces, one
//!   octet at a time (the octet-wise path) and with payload read through
//!   `direct_target`: the same completions, the same Terminate sent or
//!   received, the same close reason, the same FPDU counters, the same
//!   octets transmitted and the same memory contents;
//! * the queue pair agrees with the receiver: it processes exactly the
//!   FPDUs the receiver frames; at an FPDU whose DDP/RDMAP header
//!   [`crate::rdmap::Segment::parse`] rejects it sends that Terminate; at a
//!   framing error it sends the receiver's Terminate code (a bad Marker may
//!   be seen by the queue pair before the FPDU is complete); it never
//!   terminates on an FPDU the receiver accepts with an LLP (MPA) code, and
//!   it stays up only if every framed segment parses.

use arbitrary::{Result, Unstructured};

use crate::mpa::fpdu::{FpduReceiver, FpduSender, FramingConfig, FramingError, Received};
use crate::qp::StreamParams;
use crate::rdmap::{Opcode, Segment, TerminateMessage, LAYER_LLP};
use crate::TerminateCode;
use rpcrdma_proto::provider::{Completion, DisconnectReason};

use super::env::Env;
use super::feed::{drain, feed, Mode};
use super::gen::{self, GenState};

/// Longest stream built from generated pieces.
const MAX_STREAM: usize = 8192;

/// Everything observable about a queue pair after a stream.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    completions: Vec<Completion>,
    terminate_sent: Option<TerminateMessage>,
    terminate_received: Option<TerminateMessage>,
    close_reason: Option<DisconnectReason>,
    rx_fpdus: [u64; 8],
    tx_fpdus: [u64; 8],
    output: Vec<u8>,
    memory: Vec<Vec<u8>>,
}

fn outcome(params: StreamParams, stream: &[u8], mode: Mode, cuts: &[usize]) -> Outcome {
    let mut env = Env::new(params);
    feed(&mut env.qp, stream, mode, cuts);
    let mut output = Vec::new();
    drain(&mut env.qp, &mut output);
    let mut completions = Vec::new();
    env.qp.poll_completions(&mut completions);
    let close_reason = env.qp.close_reason().cloned();
    let stats = env.qp.stats();
    let o = Outcome {
        completions,
        terminate_sent: env.qp.terminate_sent().copied(),
        terminate_received: env.qp.terminate_received().copied(),
        close_reason,
        rx_fpdus: stats.rx_fpdus,
        tx_fpdus: stats.tx_fpdus,
        output,
        memory: Vec::new(),
    };
    // Flush everything so every region can be read.
    env.qp.disconnect();
    let mut rest = Vec::new();
    env.qp.poll_completions(&mut rest);
    let memory = env
        .regions
        .iter()
        .map(|r| env.qp.region(&r.mr).map(<[u8]>::to_vec).unwrap_or_default())
        .collect();
    Outcome { memory, ..o }
}

/// What [`FpduReceiver`] makes of the stream fed in `cuts`-sized pieces
/// (whole when `cuts` is empty): the ULPDUs, then the error if any.
fn frames(
    cfg: FramingConfig,
    max: u16,
    stream: &[u8],
    cuts: &[usize],
) -> (Vec<Vec<u8>>, Option<FramingError>) {
    let mut rx = FpduReceiver::new(cfg).with_max_ulpdu(max);
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut i = 0usize;
    while at < stream.len() {
        let cut = if cuts.is_empty() {
            stream.len()
        } else {
            cuts[i % cuts.len()].max(1)
        };
        i += 1;
        let n = cut.min(stream.len() - at);
        buf.extend_from_slice(&stream[at..at + n]);
        at += n;
        loop {
            match rx.poll(&buf) {
                Ok(Received::Fpdu(f)) => {
                    assert!(f.consumed <= buf.len(), "FPDU longer than the buffer");
                    let mut u = Vec::new();
                    f.extend_ulpdu(&buf, &mut u);
                    assert_eq!(u.len(), usize::from(f.ulpdu_len), "ULPDU ranges");
                    out.push(u);
                    buf.drain(..f.consumed);
                }
                Ok(Received::NeedMore(k)) => {
                    assert!(k > 0, "NeedMore(0)");
                    break;
                }
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

/// Builds the stream from generated pieces.
pub(super) fn build(
    u: &mut Unstructured<'_>,
    params: StreamParams,
    cfg: FramingConfig,
) -> Result<Vec<u8>> {
    let env = Env::new(params);
    let mut g = GenState::new(&env);
    let mut tx = FpduSender::new(cfg);
    let mut stream = Vec::new();
    while !u.is_empty() && stream.len() < MAX_STREAM {
        match u.int_in_range(0u8..=15)? {
            0..=12 => {
                let ul = gen::ulpdu(u, &mut g)?;
                if let Ok(f) = tx.fpdu_to_vec(&[&ul]) {
                    stream.extend_from_slice(&f);
                }
            }
            13 => {
                let n = usize::from(u.int_in_range(1u8..=16)?);
                stream.extend_from_slice(u.bytes(n)?);
            }
            14 if !stream.is_empty() => {
                let i = u.choose_index(stream.len())?;
                stream[i] ^= u.int_in_range(1u8..=255)?;
            }
            _ => {
                let n = u.choose_index(stream.len() + 1)?;
                stream.truncate(n);
            }
        }
    }
    Ok(stream)
}

fn check_against_receiver(a: &Outcome, frames: &[Vec<u8>], err: Option<FramingError>) {
    let k = a.rx_fpdus.iter().sum::<u64>() as usize;
    assert!(
        k <= frames.len(),
        "the queue pair processed {k} FPDUs, the receiver framed {}",
        frames.len()
    );
    for (j, f) in frames.iter().enumerate().take(k) {
        let seg = Segment::parse(f);
        assert!(
            seg.is_ok(),
            "FPDU {j}: the queue pair accepted a segment that Segment::parse rejects ({seg:?})"
        );
    }
    if let Some(t) = &a.terminate_received {
        let last = k.checked_sub(1).and_then(|j| frames.get(j));
        let ok = last
            .and_then(|f| Segment::parse(f).ok())
            .is_some_and(|s| s.control.opcode == Opcode::TERMINATE);
        assert!(ok, "a Terminate {t:?} was received but FPDU {k} is none");
        return;
    }
    let Some(t) = &a.terminate_sent else {
        assert!(
            a.close_reason.is_none(),
            "closed without a Terminate: {:?}",
            a.close_reason
        );
        assert_eq!(
            k,
            frames.len(),
            "the queue pair is up but processed {k} of {} FPDUs",
            frames.len()
        );
        assert_eq!(err, None, "the queue pair is up after a framing error");
        return;
    };
    assert!(
        TerminateCode::TABLE.iter().any(|(c, _)| *c == t.code),
        "Terminate code {:?} is not in the table",
        t.code
    );
    match frames.get(k) {
        Some(f) => match Segment::parse(f) {
            Err(c) => assert_eq!(t.code, c, "FPDU {k}: Terminate for a rejected header"),
            Ok(_) => assert!(
                t.code.layer != LAYER_LLP,
                "FPDU {k}: framing Terminate {} for an FPDU the receiver accepts",
                t.code
            ),
        },
        None => match err {
            Some(e) => assert_eq!(
                t.code,
                e.terminate_code(),
                "FPDU {k}: the receiver reports {e}"
            ),
            None => assert_eq!(
                t.code,
                TerminateCode::MPA_MARKER,
                "FPDU {k}: Terminate {} on an incomplete FPDU",
                t.code
            ),
        },
    }
}

/// The fuzz target; see the module docs.
pub fn fuzz_mpa_stream(data: &[u8]) {
    let _ = run(data);
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let crc: bool = u.arbitrary()?;
    let markers = u.ratio(1, 3)?;
    let max_rx_ulpdu = *u.choose(&[u16::MAX, 1024, 128])?;
    let ncuts = u.int_in_range(1u8..=8)?;
    let mut cuts = Vec::new();
    for _ in 0..ncuts {
        cuts.push(usize::from(u.int_in_range(1u16..=700)?));
    }
    let params = StreamParams {
        crc,
        send_markers: false,
        recv_markers: markers,
        ird: 2,
        max_rx_ulpdu,
        ..StreamParams::DEFAULT
    };
    let cfg = FramingConfig { crc, markers };
    let stream = if u.ratio(1, 4)? {
        u.take_rest().to_vec()
    } else {
        build(&mut u, params, cfg)?
    };
    let (fr, err) = frames(cfg, max_rx_ulpdu, &stream, &[]);
    let pieces = frames(cfg, max_rx_ulpdu, &stream, &cuts);
    assert_eq!(
        (&fr, err),
        (&pieces.0, pieces.1),
        "receiver: split changed the result"
    );
    let whole = outcome(params, &stream, Mode::Whole, &[]);
    check_against_receiver(&whole, &fr, err);
    let mut strategies = vec![(Mode::Pieces, cuts.clone()), (Mode::Direct, cuts)];
    if stream.len() <= 4096 {
        strategies.push((Mode::Pieces, vec![1]));
    }
    for (mode, c) in strategies {
        let other = outcome(params, &stream, mode, &c);
        assert_eq!(
            whole, other,
            "queue pair: {mode:?} with cuts {c:?} differs from one piece"
        );
    }
    Ok(())
}
