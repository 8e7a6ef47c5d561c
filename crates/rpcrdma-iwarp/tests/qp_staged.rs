//! The staged Send (`QueuePair::post_send_staged`: a small Send framed
//! straight into the staging buffer, no registered buffer, no WR, no
//! completion) pinned to the general path: over random sequences of
//! Sends (small and large, plain and Solicited, with Invalidate), RDMA
//! Writes, partial and lone transmits and confirmations, a sender that
//! stages every Send it can (posting the others registered, as the engine
//! does) puts the same octets on the wire as one that posts every Send
//! registered, the receiver sees the same completions and memory, and the
//! sender sees the same completions less those of the staged Sends.

use std::io::{self, IoSlice};

use proptest::prelude::*;
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_proto::provider::{
    Access, Caps, Completion, MemoryRegion, ProviderError, RecvWr, SendOp, SendWr, Stag, Status,
};

const CAPS: Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
const RECV_LEN: usize = 6000;

#[derive(Clone, Debug)]
enum Step {
    /// A Send of `len` octets (seeded `seed`); `inv`: with Invalidate of
    /// the receiver's next spare region.
    Send {
        len: usize,
        solicited: bool,
        inv: bool,
        seed: u8,
    },
    /// An RDMA Write of `len` octets into the receiver's target.
    Write { len: usize },
    /// One `transmit` whose writer takes at most `n` octets, then blocks.
    Transmit(usize),
    /// One `transmit_lone` whose writer takes at most `n` octets.
    Lone(usize),
    /// `confirm_transmitted`.
    Confirm,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (prop_oneof![0usize..200, 200usize..4200, 4090usize..5000], any::<bool>(), prop::bool::weighted(0.15), any::<u8>())
            .prop_map(|(len, solicited, inv, seed)| Step::Send { len, solicited, inv, seed }),
        1 => (1usize..3000).prop_map(|len| Step::Write { len }),
        2 => prop_oneof![1usize..40, 40usize..300, Just(usize::MAX)].prop_map(Step::Transmit),
        2 => prop_oneof![1usize..40, Just(usize::MAX)].prop_map(Step::Lone),
        1 => Just(Step::Confirm),
    ]
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// What one run shows.
#[derive(Debug, PartialEq)]
struct Seen {
    wire: Vec<u8>,
    sender: Vec<Completion>,
    receiver: Vec<Completion>,
    received: Vec<Vec<u8>>,
    target: Vec<u8>,
}

/// One `transmit` (or `transmit_lone`) of `a` whose writer takes at most
/// `n` octets; what it wrote goes to `b` and onto `wire`.
fn deliver(a: &mut QueuePair, b: &mut QueuePair, wire: &mut Vec<u8>, lone: bool, n: usize) {
    let mut out = Vec::new();
    let mut left = n;
    let write = |slices: &[IoSlice<'_>]| -> io::Result<usize> {
        let mut k = 0;
        for s in slices {
            let c = s.len().min(left - k);
            out.extend_from_slice(&s[..c]);
            k += c;
            if k == left {
                break;
            }
        }
        left -= k;
        if k == 0 {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(k)
        }
    };
    if lone {
        let _ = a.transmit_lone(write);
    } else {
        let _ = a.transmit(write);
    }
    b.handle_input(&out);
    wire.extend_from_slice(&out);
}

/// Runs `steps`; `staged`: every Send that the queue pair takes staged
/// goes that way. Returns what was seen and the `wr_id`s of the Sends
/// that were staged.
fn run(p: StreamParams, steps: &[Step], staged: bool) -> (Seen, Vec<u64>) {
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.establish(p);
    b.establish(p);
    let sends = steps
        .iter()
        .filter(|s| matches!(s, Step::Send { .. }))
        .count();
    let recvs: Vec<MemoryRegion> = (0..sends)
        .map(|i| {
            let mr = b
                .register(vec![0u8; RECV_LEN].into_boxed_slice(), Access::LOCAL_WRITE)
                .unwrap();
            b.post_recv(RecvWr {
                wr_id: 1000 + i as u64,
                sge: mr.sge(0, RECV_LEN as u32),
            })
            .unwrap();
            mr
        })
        .collect();
    let spares: Vec<MemoryRegion> = (0..sends)
        .map(|_| b.register(vec![0u8; 8].into_boxed_slice(), RW).unwrap())
        .collect();
    let target = b.register(vec![0u8; 3000].into_boxed_slice(), RW).unwrap();
    let mut wire = Vec::new();
    let mut staged_ids = Vec::new();
    let mut spare = spares.iter();
    for (i, s) in steps.iter().enumerate() {
        let wr_id = i as u64 + 1;
        match *s {
            Step::Send {
                len,
                solicited,
                inv,
                seed,
            } => {
                let data = payload(len, seed);
                let op = match spare.next() {
                    Some(mr) if inv => SendOp::SendWithInvalidate {
                        invalidate: mr.stag(),
                        solicited,
                    },
                    _ => SendOp::Send { solicited },
                };
                if staged {
                    let mut fill = |d: &mut [u8]| d.copy_from_slice(&data);
                    match a.post_send_staged(op, len, &mut fill) {
                        Ok(true) => {
                            staged_ids.push(wr_id);
                            continue;
                        }
                        Ok(false) => {}
                        Err(e) => panic!("staged Send refused: {e}"),
                    }
                }
                let mr = a.register(data.into_boxed_slice(), Access::NONE).unwrap();
                a.post_send(SendWr {
                    wr_id,
                    op,
                    sges: vec![mr.sge(0, len as u32)].into(),
                })
                .unwrap();
            }
            Step::Write { len } => {
                let mr = a
                    .register(payload(len, 7).into_boxed_slice(), Access::NONE)
                    .unwrap();
                a.post_send(SendWr {
                    wr_id,
                    op: SendOp::Write {
                        remote: target.remote(0),
                    },
                    sges: vec![mr.sge(0, len as u32)].into(),
                })
                .unwrap();
            }
            Step::Transmit(n) => deliver(&mut a, &mut b, &mut wire, false, n),
            Step::Lone(n) => deliver(&mut a, &mut b, &mut wire, true, n),
            Step::Confirm => a.confirm_transmitted(),
        }
    }
    for _ in 0..10_000 {
        let before = wire.len();
        deliver(&mut a, &mut b, &mut wire, false, usize::MAX);
        if wire.len() == before {
            break;
        }
    }
    a.confirm_transmitted();
    assert_eq!(a.staged_outstanding(), 0, "every staged Send handed over");
    let mut sender = Vec::new();
    a.poll_completions(&mut sender);
    let mut receiver = Vec::new();
    b.poll_completions(&mut receiver);
    let received = receiver
        .iter()
        .filter(|c| c.status == Status::Success)
        .filter_map(|c| {
            let mr = recvs.get((c.wr_id - 1000) as usize)?;
            Some(b.region(mr).ok()?.get(..c.byte_len as usize)?.to_vec())
        })
        .collect();
    let target = b.region(&target).map(<[u8]>::to_vec).unwrap_or_default();
    (
        Seen {
            wire,
            sender,
            receiver,
            received,
            target,
        },
        staged_ids,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn staged_sends_equal_registered_sends(
        steps in proptest::collection::vec(step(), 1..40),
        crc in any::<bool>(),
        small_mulpdu in any::<bool>(),
    ) {
        let mut p = StreamParams { crc, ..StreamParams::DEFAULT };
        if small_mulpdu {
            // Sends above it are several FPDUs: never staged.
            p.mulpdu = 700;
        }
        let (general, none) = run(p, &steps, false);
        prop_assert!(none.is_empty());
        let (staged, ids) = run(p, &steps, true);
        prop_assert_eq!(&staged.wire, &general.wire);
        prop_assert_eq!(&staged.receiver, &general.receiver);
        prop_assert_eq!(&staged.received, &general.received);
        prop_assert_eq!(&staged.target, &general.target);
        let expected: Vec<Completion> = general
            .sender
            .iter()
            .filter(|c| !ids.contains(&c.wr_id))
            .copied()
            .collect();
        prop_assert_eq!(&staged.sender, &expected);
    }
}

#[test]
fn a_lone_staged_send_is_staged_and_later_ones_wait_behind_a_write() {
    let p = StreamParams::DEFAULT;
    let steps = [
        Step::Send {
            len: 100,
            solicited: false,
            inv: false,
            seed: 1,
        },
        Step::Write { len: 10 },
        Step::Send {
            len: 100,
            solicited: true,
            inv: false,
            seed: 2,
        },
        Step::Transmit(usize::MAX),
        Step::Send {
            len: 5000,
            solicited: false,
            inv: false,
            seed: 3,
        },
        Step::Send {
            len: 16,
            solicited: false,
            inv: false,
            seed: 4,
        },
    ];
    let (general, _) = run(p, &steps, false);
    let (staged, ids) = run(p, &steps, true);
    // The first is staged; the second waits behind the unframed Write; the
    // fourth is too large; the fifth waits behind it.
    assert_eq!(ids, [1]);
    assert_eq!(staged.wire, general.wire);
    assert_eq!(staged.receiver, general.receiver);
    assert_eq!(general.receiver.len(), 4);
}

#[test]
fn staged_sends_are_refused_as_posted_ones_would_be() {
    let mut q = QueuePair::new(CAPS, 0);
    let mut fill = |_: &mut [u8]| panic!("nothing may be written");
    assert_eq!(
        q.post_send_staged(SendOp::Send { solicited: false }, 8, &mut fill),
        Err(ProviderError::NotConnected)
    );
    q.establish(StreamParams::DEFAULT);
    assert!(matches!(
        q.post_send_staged(SendOp::LocalInvalidate { stag: Stag(0x100) }, 0, &mut fill),
        Err(ProviderError::InvalidArgument(_))
    ));
    assert_eq!(
        q.post_send_staged(
            SendOp::Send { solicited: false },
            CAPS.max_msg_size as usize + 1,
            &mut fill
        ),
        Err(ProviderError::TooLong)
    );
    // Too large to stage: declined, nothing queued.
    assert_eq!(
        q.post_send_staged(SendOp::Send { solicited: false }, 5000, &mut fill),
        Ok(false)
    );
    assert!(!q.has_output());
}
