//! Property test of the in-memory pair (optionally under the fault
//! injector): random interleavings of posts, polls, invalidations,
//! re-registrations and disconnects never panic, every accepted work request
//! completes exactly once, successful receives never exceed their buffer,
//! and after the connection is torn down every region can be deregistered
//! (no hold leaks). Also: the same operations replayed give the same
//! completions (determinism).

use proptest::prelude::*;
use rpcrdma_proto::provider::fault::{FaultConfig, FaultInjector};
use rpcrdma_proto::provider::mem::{self, MemConfig};
use rpcrdma_proto::provider::{
    Access, Completion, ConnectParams, MemoryRegion, Opcode, Provider, ProviderError, RecvWr,
    SendOp, SendWr, Status,
};
use std::collections::HashMap;

const REGIONS: usize = 3;
const REGION_LEN: u32 = 64;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

#[derive(Clone, Debug)]
enum Op {
    Recv {
        side: bool,
        r: usize,
        off: u32,
        len: u32,
    },
    Send {
        side: bool,
        r: usize,
        len: u32,
        inv: Option<usize>,
        se: bool,
    },
    Write {
        side: bool,
        r: usize,
        target: usize,
        off: u32,
        len: u32,
    },
    Read {
        side: bool,
        r: usize,
        target: usize,
        off: u32,
        len: u32,
    },
    LocalInv {
        side: bool,
        r: usize,
    },
    Rereg {
        side: bool,
        r: usize,
    },
    Poll {
        side: bool,
    },
    Disconnect {
        side: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let side = any::<bool>();
    let r = 0..REGIONS;
    let off = 0..REGION_LEN + 8;
    let len = 0..REGION_LEN + 8;
    prop_oneof![
        4 => (side, r.clone(), off.clone(), len.clone())
            .prop_map(|(side, r, off, len)| Op::Recv { side, r, off, len }),
        4 => (side, r.clone(), len.clone(), proptest::option::of(0..REGIONS), any::<bool>())
            .prop_map(|(side, r, len, inv, se)| Op::Send { side, r, len, inv, se }),
        2 => (side, r.clone(), 0..REGIONS, off.clone(), len.clone())
            .prop_map(|(side, r, target, off, len)| Op::Write { side, r, target, off, len }),
        2 => (side, r.clone(), 0..REGIONS, off, len)
            .prop_map(|(side, r, target, off, len)| Op::Read { side, r, target, off, len }),
        1 => (side, r.clone()).prop_map(|(side, r)| Op::LocalInv { side, r }),
        1 => (side, r).prop_map(|(side, r)| Op::Rereg { side, r }),
        6 => side.prop_map(|side| Op::Poll { side }),
        1 => side.prop_map(|side| Op::Disconnect { side }),
    ]
}

struct End<P> {
    p: P,
    mrs: Vec<MemoryRegion>,
    posted: HashMap<u64, (Opcode, u32)>,
    done: Vec<Completion>,
}

fn end<P: Provider>(mut p: P) -> End<P> {
    let mrs = (0..REGIONS)
        .map(|i| {
            p.register(vec![i as u8; REGION_LEN as usize].into_boxed_slice(), ALL)
                .unwrap()
        })
        .collect();
    End {
        p,
        mrs,
        posted: HashMap::new(),
        done: Vec::new(),
    }
}

/// Runs `ops`; returns the completions of both ends.
fn run<P: Provider>(
    a: P,
    b: P,
    ops: &[Op],
) -> Result<(Vec<Completion>, Vec<Completion>), TestCaseError> {
    let mut ends = [end(a), end(b)];
    for (i, op) in ops.iter().enumerate() {
        let wr_id = i as u64 + 1;
        let (me, peer) = match op {
            Op::Recv { side, .. }
            | Op::Send { side, .. }
            | Op::Write { side, .. }
            | Op::Read { side, .. }
            | Op::LocalInv { side, .. }
            | Op::Rereg { side, .. }
            | Op::Poll { side }
            | Op::Disconnect { side } => (usize::from(*side), 1 - usize::from(*side)),
        };
        let peer_mrs = ends[peer].mrs.clone();
        let e = &mut ends[me];
        let posted = match op.clone() {
            Op::Recv { r, off, len, .. } => {
                e.p.post_recv(RecvWr {
                    wr_id,
                    sge: e.mrs[r].sge(u64::from(off), len),
                })
                .map(|()| (Opcode::Recv, len))
            }
            Op::Send {
                r, len, inv, se, ..
            } => {
                let op = match inv {
                    Some(t) => SendOp::SendWithInvalidate {
                        invalidate: peer_mrs[t].stag(),
                        solicited: se,
                    },
                    None => SendOp::Send { solicited: se },
                };
                e.p.post_send(SendWr {
                    wr_id,
                    op,
                    sges: vec![e.mrs[r].sge(0, len)].into(),
                })
                .map(|()| (Opcode::Send, len))
            }
            Op::Write {
                r,
                target,
                off,
                len,
                ..
            } => {
                e.p.post_send(SendWr {
                    wr_id,
                    op: SendOp::Write {
                        remote: peer_mrs[target].remote(u64::from(off)),
                    },
                    sges: vec![e.mrs[r].sge(0, len)].into(),
                })
                .map(|()| (Opcode::Write, len))
            }
            Op::Read {
                r,
                target,
                off,
                len,
                ..
            } => {
                e.p.post_send(SendWr {
                    wr_id,
                    op: SendOp::Read {
                        remote: peer_mrs[target].remote(u64::from(off)),
                    },
                    sges: vec![e.mrs[r].sge(0, len)].into(),
                })
                .map(|()| (Opcode::Read, len))
            }
            Op::LocalInv { r, .. } => {
                e.p.invalidate(wr_id, e.mrs[r].stag())
                    .map(|()| (Opcode::LocalInvalidate, 0))
            }
            Op::Rereg { r, .. } => {
                match e.p.deregister(&e.mrs[r]) {
                    Ok(buf) => {
                        let old = e.mrs[r].stag();
                        e.mrs[r] = e.p.register(buf.into_owned(), ALL).unwrap();
                        prop_assert_ne!(e.mrs[r].stag(), old);
                    }
                    Err(err) => prop_assert_eq!(err, ProviderError::Busy),
                }
                Err(ProviderError::Unsupported)
            }
            Op::Poll { .. } => {
                e.p.poll_completions(&mut e.done);
                Err(ProviderError::Unsupported)
            }
            Op::Disconnect { .. } => {
                e.p.disconnect();
                Err(ProviderError::Unsupported)
            }
        };
        if let Ok(p) = posted {
            e.posted.insert(wr_id, p);
        }
    }
    // Tear down and drain.
    ends[0].p.disconnect();
    for _ in 0..4 {
        for e in ends.iter_mut() {
            e.p.poll_completions(&mut e.done);
            while e.p.poll_event().is_some() {}
        }
    }
    for e in ends.iter_mut() {
        let mut seen = HashMap::new();
        for c in &e.done {
            prop_assert!(
                seen.insert(c.wr_id, ()).is_none(),
                "wr {} completed twice",
                c.wr_id
            );
            let Some(&(opcode, len)) = e.posted.get(&c.wr_id) else {
                return Err(TestCaseError::fail(format!("unknown wr {}", c.wr_id)));
            };
            match c.opcode {
                Opcode::Recv | Opcode::RecvWithInvalidate { .. } => {
                    prop_assert_eq!(opcode, Opcode::Recv);
                    prop_assert!(c.byte_len <= len);
                }
                other => {
                    prop_assert_eq!(other, opcode);
                    if c.status == Status::Success {
                        prop_assert_eq!(c.byte_len, len);
                    }
                }
            }
            if c.status != Status::Success {
                prop_assert_eq!(c.byte_len, 0);
            }
        }
        prop_assert_eq!(seen.len(), e.posted.len(), "some WRs never completed");
        for mr in e.mrs.clone() {
            prop_assert!(
                e.p.deregister(&mr).is_ok(),
                "region still held after teardown"
            );
        }
    }
    let [a, b] = ends;
    Ok((a.done, b.done))
}

fn plain_pair() -> (mem::MemProvider, mem::MemProvider) {
    let p = ConnectParams {
        private_data: vec![],
        ird: 4,
        ord: 4,
    };
    mem::connected_pair(MemConfig::DEFAULT, p.clone(), p).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_wr_completes_once_and_nothing_leaks(ops in proptest::collection::vec(op(), 0..60)) {
        let (a, b) = plain_pair();
        let first = run(a, b, &ops)?;
        let (a, b) = plain_pair();
        let second = run(a, b, &ops)?;
        prop_assert_eq!(first, second, "not deterministic");
    }

    #[test]
    fn same_under_fault_injection(ops in proptest::collection::vec(op(), 0..60), seed in any::<u64>()) {
        let cfg = FaultConfig {
            seed,
            remote_access_error_chance: 0.2,
            drop_recv_chance: 0.2,
            fail_after_posts: Some(seed % 50 + 1),
            ..FaultConfig::default()
        };
        let (a, b) = plain_pair();
        let first = run(FaultInjector::new(a, cfg), FaultInjector::new(b, cfg), &ops)?;
        let (a, b) = plain_pair();
        let second = run(FaultInjector::new(a, cfg), FaultInjector::new(b, cfg), &ops)?;
        prop_assert_eq!(first, second, "not deterministic");
    }
}
