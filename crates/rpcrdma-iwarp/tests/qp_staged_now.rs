//! `QueuePair::send_staged_now` (a staged Send framed and handed to the
//! writer in one step when no output is queued) pinned to the two calls it
//! stands for, `post_send_staged` then `transmit_lone`: over random
//! sequences of staged Sends (small and too large to stage, plain,
//! Solicited and with Invalidate), registered Sends and RDMA Writes that
//! leave output queued, transmits and confirmations, with writers that take
//! everything, part, nothing (`WouldBlock`), are interrupted or fail, both
//! give the same answer for every Send, the same octets on the wire, the
//! same output state after every step and the same completions.

use std::io::{self, IoSlice};

use proptest::prelude::*;
use rpcrdma_iwarp::qp::{QueuePair, StagedSend, StreamParams};
use rpcrdma_proto::provider::{Access, Caps, Completion, SendOp, SendWr, Stag};

const CAPS: Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;

/// How a writer behaves: takes at most `n` octets (0: `WouldBlock`), or
/// fails with `Interrupted` or another error.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Take(usize),
    Interrupted,
    Broken,
}

#[derive(Clone, Debug)]
enum Step {
    /// A Send of `len` octets, staged if the queue pair takes it, written
    /// at once by `w`.
    Staged {
        len: usize,
        kind: u8,
        seed: u8,
        w: Writer,
    },
    /// A registered Send or RDMA Write of `len` octets (queued output).
    Registered { len: usize, write: bool },
    /// One `transmit` by a writer taking at most `n` octets.
    Transmit(usize),
    /// `confirm_transmitted`.
    Confirm,
}

fn writer() -> impl Strategy<Value = Writer> {
    prop_oneof![
        6 => Just(Writer::Take(usize::MAX)),
        2 => (0usize..60).prop_map(Writer::Take),
        1 => Just(Writer::Interrupted),
        1 => Just(Writer::Broken),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop_oneof![0usize..200, 200usize..4200, 4090usize..4200], 0u8..4, any::<u8>(), writer())
            .prop_map(|(len, kind, seed, w)| Step::Staged { len, kind, seed, w }),
        1 => (1usize..3000, any::<bool>()).prop_map(|(len, write)| Step::Registered { len, write }),
        2 => prop_oneof![0usize..40, 40usize..300, Just(usize::MAX)].prop_map(Step::Transmit),
        1 => Just(Step::Confirm),
    ]
}

/// A writer with behaviour `w` that appends what it takes to `wire`.
fn write_to(wire: &mut Vec<u8>, w: Writer) -> impl FnMut(&[IoSlice<'_>]) -> io::Result<usize> + '_ {
    let mut left = match w {
        Writer::Take(n) => n,
        _ => 0,
    };
    move |slices: &[IoSlice<'_>]| {
        match w {
            Writer::Interrupted => return Err(io::ErrorKind::Interrupted.into()),
            Writer::Broken => return Err(io::ErrorKind::ConnectionReset.into()),
            Writer::Take(_) => {}
        }
        let mut k = 0;
        for s in slices {
            let c = s.len().min(left);
            wire.extend_from_slice(&s[..c]);
            k += c;
            left -= c;
        }
        if k == 0 {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(k)
        }
    }
}

/// An answer compared between the two runs (an error by its kind).
type Answer = Result<Option<Result<usize, io::ErrorKind>>, bool>;

fn answer(s: StagedSend) -> Answer {
    match s {
        StagedSend::NotTaken => Err(false),
        StagedSend::Queued => Ok(None),
        StagedSend::Written(r) => Ok(Some(r.map_err(|e| e.kind()))),
    }
}

/// The output state after a step.
type State = (bool, usize, bool, bool, [u64; 8]);

fn state(q: &QueuePair) -> State {
    (
        q.has_output(),
        q.staged_outstanding(),
        q.sent_since_confirm(),
        q.has_unconfirmed(),
        q.stats().tx_fpdus,
    )
}

/// Runs `steps`, each staged Send through `send_staged_now` (`now`) or
/// through `post_send_staged` and `transmit_lone`.
fn run(
    p: StreamParams,
    steps: &[Step],
    now: bool,
) -> (Vec<(Answer, State)>, Vec<u8>, Vec<Completion>) {
    let mut q = QueuePair::new(CAPS, 0);
    q.establish(p);
    let mut wire = Vec::new();
    let mut seen = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let a = match *s {
            Step::Staged { len, kind, seed, w } => {
                let data: Vec<u8> = (0..len).map(|j| (j as u8) ^ seed).collect();
                let mut fill = |d: &mut [u8]| d.copy_from_slice(&data);
                let op = match kind {
                    0 => SendOp::Send { solicited: false },
                    1 => SendOp::Send { solicited: true },
                    _ => SendOp::SendWithInvalidate {
                        invalidate: Stag(0x0102_0300 | u32::from(seed)),
                        solicited: kind == 3,
                    },
                };
                let write = write_to(&mut wire, w);
                if now {
                    answer(q.send_staged_now(op, len, &mut fill, write).unwrap())
                } else if q.post_send_staged(op, len, &mut fill).unwrap() {
                    match q.transmit_lone(write) {
                        Some(r) => Ok(Some(r.map_err(|e| e.kind()))),
                        None => Ok(None),
                    }
                } else {
                    Err(false)
                }
            }
            Step::Registered { len, write } => {
                let mr = q
                    .register(vec![0x33u8; len].into_boxed_slice(), Access::NONE)
                    .unwrap();
                let op = if write {
                    SendOp::Write {
                        remote: rpcrdma_proto::provider::RemoteAddr {
                            stag: Stag(0x0500_0001),
                            offset: 0,
                        },
                    }
                } else {
                    SendOp::Send { solicited: false }
                };
                q.post_send(SendWr {
                    wr_id: i as u64,
                    op,
                    sges: vec![mr.sge(0, len as u32)].into(),
                })
                .unwrap();
                Err(true)
            }
            Step::Transmit(n) => {
                // Without output, `transmit` writes nothing and returns 0
                // (the TCP adapter skips it then).
                let (had, before) = (q.has_output(), wire.len());
                let r = q.transmit(write_to(&mut wire, Writer::Take(n)));
                if !had {
                    assert_eq!((r.ok(), wire.len()), (Some(0), before));
                }
                Err(true)
            }
            Step::Confirm => {
                q.confirm_transmitted();
                Err(true)
            }
        };
        seen.push((a, state(&q)));
    }
    for _ in 0..10_000 {
        let before = wire.len();
        let _ = q.transmit(write_to(&mut wire, Writer::Take(usize::MAX)));
        if wire.len() == before {
            break;
        }
    }
    q.confirm_transmitted();
    let mut c = Vec::new();
    q.poll_completions(&mut c);
    (seen, wire, c)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn send_staged_now_equals_post_then_transmit_lone(
        steps in proptest::collection::vec(step(), 1..24),
        crc in any::<bool>(),
    ) {
        let p = StreamParams { crc, ..StreamParams::DEFAULT };
        prop_assert_eq!(run(p, &steps, true), run(p, &steps, false));
    }
}

/// The fast path is taken in the usual case (nothing queued, the whole
/// FPDU written): the Send goes out at once and leaves no output queued.
#[test]
fn a_lone_staged_send_is_written_at_once() {
    let mut q = QueuePair::new(CAPS, 0);
    q.establish(StreamParams::DEFAULT);
    let mut wire = Vec::new();
    let mut fill = |d: &mut [u8]| d.fill(7);
    let r = q
        .send_staged_now(
            SendOp::Send { solicited: false },
            40,
            &mut fill,
            write_to(&mut wire, Writer::Take(usize::MAX)),
        )
        .unwrap();
    assert!(matches!(r, StagedSend::Written(Ok(64))), "{r:?}");
    assert_eq!(wire.len(), 64);
    assert!(!q.has_output());
    assert_eq!(q.staged_outstanding(), 0);
    assert!(q.sent_since_confirm());
}
