//! The fault-injecting decorator: transparency, each fault kind, and
//! determinism for a given seed.

use rpcrdma_proto::provider::conformance::{self, register_filled, send_wr, Harness};
use rpcrdma_proto::provider::fault::{FaultConfig, FaultInjector, FaultStats};
use rpcrdma_proto::provider::mem::{self, MemConfig, MemProvider};
use rpcrdma_proto::provider::{
    Access, Blame, Completion, ConnectParams, ConnectionState, DisconnectReason, Opcode, Provider,
    RecvWr, SendOp, SendWr, Status,
};

type Faulty = FaultInjector<MemProvider>;

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn params() -> ConnectParams {
    ConnectParams {
        private_data: Vec::new(),
        ird: 4,
        ord: 4,
    }
}

fn faulty_pair(fa: FaultConfig, fb: FaultConfig) -> Harness<Faulty> {
    let (a, b) = mem::connected_pair(MemConfig::DEFAULT, params(), params()).unwrap();
    Harness::new((FaultInjector::new(a, fa), FaultInjector::new(b, fb)), 50)
}

#[test]
fn without_faults_the_injector_is_transparent() {
    let mut f = || {
        let (a, b) = mem::connected_pair(MemConfig::DEFAULT, params(), params()).unwrap();
        (
            FaultInjector::new(a, FaultConfig::default()),
            FaultInjector::new(b, FaultConfig::default()),
        )
    };
    assert_eq!(
        conformance::run_all(&mut f, 50),
        Ok(conformance::CHECK_COUNT)
    );
}

/// A request/response workload: per round, b posts a receive, a writes a
/// chunk at b and sends; b posts a receive at a's side too. Returns both
/// completion streams, final states and stats.
type Outcome = (
    Vec<Completion>,
    Vec<Completion>,
    ConnectionState,
    ConnectionState,
    FaultStats,
    FaultStats,
);

fn workload(fa: FaultConfig, fb: FaultConfig, rounds: u64) -> Outcome {
    let mut h = faulty_pair(fa, fb);
    let src = register_filled(&mut h.a, 64, 0x42, Access::NONE).unwrap();
    let chunk = register_filled(&mut h.b, 64 * rounds as usize, 0, RW).unwrap();
    let rb = register_filled(&mut h.b, 64 * rounds as usize, 0, Access::LOCAL_WRITE).unwrap();
    for i in 0..rounds {
        if conformance::is_down(&h.a) || conformance::is_down(&h.b) {
            break;
        }
        let _ = h.b.post_recv(RecvWr {
            wr_id: 1000 + i,
            sge: rb.sge(i * 64, 64),
        });
        let _ = h.a.post_send(SendWr {
            wr_id: 2 * i,
            op: SendOp::Write {
                remote: chunk.remote(i * 64),
            },
            sges: vec![src.sge(0, 64)].into(),
        });
        let _ = h.a.post_send(send_wr(2 * i + 1, &src, 0, 16));
        h.round();
        h.round();
    }
    h.wait_down();
    h.round();
    (
        h.ca,
        h.cb,
        h.a.connection_state(),
        h.b.connection_state(),
        h.a.stats(),
        h.b.stats(),
    )
}

fn noisy(seed: u64) -> (FaultConfig, FaultConfig) {
    (
        FaultConfig {
            seed,
            remote_access_error_chance: 0.1,
            ..FaultConfig::default()
        },
        FaultConfig {
            seed: seed ^ 0xffff,
            drop_recv_chance: 0.1,
            ..FaultConfig::default()
        },
    )
}

#[test]
fn same_seed_same_completions() {
    for seed in [1, 7, 42, 0xdead_beef] {
        let (fa, fb) = noisy(seed);
        let first = workload(fa, fb, 40);
        let second = workload(fa, fb, 40);
        assert_eq!(first, second, "seed {seed}");
        // Every WR completed exactly once.
        let (ca, cb, ..) = &first;
        let mut ids: Vec<u64> = ca.iter().map(|c| c.wr_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), ca.len());
        assert!(cb.iter().all(|c| c.wr_id >= 1000));
    }
}

#[test]
fn different_seeds_inject_differently() {
    let outcomes: Vec<Outcome> = (0..8)
        .map(|seed| {
            let (fa, fb) = noisy(seed);
            workload(fa, fb, 40)
        })
        .collect();
    let distinct = outcomes
        .iter()
        .enumerate()
        .filter(|(i, o)| outcomes[..*i].iter().all(|p| p != *o))
        .count();
    assert!(distinct > 1, "all 8 seeds gave the same run");
    // Some seed must actually have injected something.
    assert!(outcomes
        .iter()
        .any(|o| o.4.bad_stags + o.5.dropped_recvs > 0));
}

#[test]
fn no_faults_configured_means_a_clean_run() {
    let (ca, cb, sa, sb, fa, fb) = workload(FaultConfig::default(), FaultConfig::default(), 5);
    assert!(ca.iter().all(|c| c.status == Status::Success));
    assert_eq!(ca.len(), 10);
    assert_eq!(cb.len(), 5);
    assert!(cb.iter().all(|c| c.status == Status::Success));
    assert_eq!(sa, ConnectionState::Established);
    assert_eq!(sb, ConnectionState::Established);
    assert_eq!((fa, fb), (FaultStats::default(), FaultStats::default()));
}

#[test]
fn remote_access_error_with_certainty() {
    let fa = FaultConfig {
        seed: 3,
        remote_access_error_chance: 1.0,
        ..FaultConfig::default()
    };
    let (ca, cb, sa, sb, stats, _) = workload(fa, FaultConfig::default(), 3);
    assert_eq!(stats.bad_stags, 1);
    assert_eq!(ca[0].wr_id, 0);
    assert_eq!(ca[0].opcode, Opcode::Write);
    assert_eq!(ca[0].status, Status::RemoteAccess);
    assert!(ca[1..].iter().all(|c| c.status == Status::Flushed));
    assert_eq!(cb.len(), 1);
    assert_eq!(cb[0].status, Status::Flushed);
    assert_eq!(
        sa,
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::RemoteAccess,
            blame: Blame::Remote
        })
    );
    assert!(matches!(sb, ConnectionState::Disconnected(_)));
}

#[test]
fn remote_access_error_leaves_the_target_untouched() {
    let mut h = faulty_pair(
        FaultConfig {
            remote_access_error_chance: 1.0,
            ..FaultConfig::default()
        },
        FaultConfig::default(),
    );
    let src = register_filled(&mut h.a, 8, 1, Access::NONE).unwrap();
    let sink = register_filled(&mut h.a, 8, 2, RW).unwrap();
    let t = register_filled(&mut h.b, 8, 3, RW | Access::REMOTE_READ).unwrap();
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote: t.remote(0),
        },
        sges: vec![sink.sge(0, 8)].into(),
    })
    .unwrap();
    assert!(h.wait_down());
    assert_eq!(h.ca[0].status, Status::RemoteAccess);
    assert_eq!(h.a.region(&sink).unwrap(), [2; 8]);
    assert_eq!(h.b.region(&t).unwrap(), [3; 8]);
    let _ = src;
}

#[test]
fn dropped_receive_turns_a_send_into_rnr() {
    let fb = FaultConfig {
        seed: 9,
        drop_recv_chance: 1.0,
        ..FaultConfig::default()
    };
    let mut h = faulty_pair(FaultConfig::default(), fb);
    let src = register_filled(&mut h.a, 8, 1, Access::NONE).unwrap();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 77,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    assert_eq!(h.b.stats().dropped_recvs, 1);
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    assert!(h.wait_down());
    assert_eq!(h.ca.len(), 1);
    assert_eq!(h.ca[0].status, Status::ReceiverNotReady);
    // The swallowed receive still completes exactly once, flushed.
    assert_eq!(h.cb.len(), 1);
    assert_eq!((h.cb[0].wr_id, h.cb[0].status), (77, Status::Flushed));
    assert_eq!(
        h.b.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::ReceiverNotReady,
            blame: Blame::Local
        })
    );
    assert_eq!(h.b.region(&rb).unwrap(), [0; 8]);
}

#[test]
fn qp_failure_after_n_posts_flushes_everything() {
    let fa = FaultConfig {
        fail_after_posts: Some(3),
        ..FaultConfig::default()
    };
    let mut h = faulty_pair(fa, FaultConfig::default());
    let ra = register_filled(&mut h.a, 32, 0, Access::LOCAL_WRITE).unwrap();
    let rb = register_filled(&mut h.b, 32, 0, Access::LOCAL_WRITE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 50,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    for i in 0..2 {
        h.a.post_recv(RecvWr {
            wr_id: i,
            sge: ra.sge(i * 8, 8),
        })
        .unwrap();
    }
    assert_eq!(h.a.connection_state(), ConnectionState::Established);
    h.a.post_send(send_wr(2, &ra, 16, 8)).unwrap(); // third post: trips
    assert_eq!(h.a.stats().qp_failures, 1);
    let reason = DisconnectReason::Error {
        status: Status::LocalOperation,
        blame: Blame::Local,
    };
    assert_eq!(
        h.a.connection_state(),
        ConnectionState::Disconnected(reason.clone())
    );
    assert!(h.wait_down());
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [
            (2, Status::Flushed),
            (0, Status::Flushed),
            (1, Status::Flushed)
        ]
    );
    assert_eq!(
        h.cb.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(50, Status::Flushed)]
    );
    // b learns only that the peer went away.
    assert_eq!(
        h.b.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::PeerClose)
    );
    let mut events = Vec::new();
    // The event stream carries the rewritten reason as well.
    let mut g = faulty_pair(fa, FaultConfig::default());
    let r = register_filled(&mut g.a, 8, 0, Access::LOCAL_WRITE).unwrap();
    for i in 0..3 {
        g.a.post_recv(RecvWr {
            wr_id: i,
            sge: r.sge(0, 8),
        })
        .unwrap();
    }
    while let Some(e) = g.a.poll_event() {
        events.push(e);
    }
    assert_eq!(
        events,
        [rpcrdma_proto::provider::ConnectionEvent::Disconnected(
            reason
        )]
    );
}

#[test]
fn connection_loss_after_n_posts_reports_connection_lost_first() {
    let fa = FaultConfig {
        lose_connection_after_posts: Some(2),
        ..FaultConfig::default()
    };
    let mut h = faulty_pair(fa, FaultConfig::default());
    let src = register_filled(&mut h.a, 8, 0, Access::NONE).unwrap();
    let rb = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 9,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    h.a.post_send(send_wr(2, &src, 0, 8)).unwrap();
    assert!(h.wait_down());
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, Status::ConnectionLost), (2, Status::Flushed)]
    );
    assert_eq!(h.ca[0].status.blame(), Blame::Transport);
    assert_eq!(
        h.a.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::TransportLost)
    );
    assert_eq!(h.a.stats().connection_losses, 1);
    assert_eq!(
        h.cb,
        [Completion {
            wr_id: 9,
            opcode: Opcode::Recv,
            byte_len: 0,
            status: Status::Flushed
        }]
    );
}

#[test]
fn connection_loss_after_n_completions() {
    let fa = FaultConfig {
        lose_connection_after_completions: Some(2),
        ..FaultConfig::default()
    };
    let (ca, cb, sa, sb, stats, _) = workload(fa, FaultConfig::default(), 6);
    assert_eq!(stats.connection_losses, 1);
    // Round 0 completed (Write, Send at a; the receive at b), then the link
    // was lost with nothing outstanding at a.
    assert_eq!(
        ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(0, Status::Success), (1, Status::Success)]
    );
    assert_eq!(
        cb.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1000, Status::Success)]
    );
    assert_eq!(
        sa,
        ConnectionState::Disconnected(DisconnectReason::TransportLost)
    );
    assert_eq!(
        sb,
        ConnectionState::Disconnected(DisconnectReason::PeerClose)
    );

    // With work outstanding, the first flushed WR reports the loss.
    let mut h = faulty_pair(
        FaultConfig {
            lose_connection_after_completions: Some(1),
            ..FaultConfig::default()
        },
        FaultConfig::default(),
    );
    let src = register_filled(&mut h.a, 8, 0, Access::NONE).unwrap();
    let ra = register_filled(&mut h.a, 16, 0, Access::LOCAL_WRITE).unwrap();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        h.a.post_recv(RecvWr {
            wr_id: 10 + i,
            sge: ra.sge(i * 8, 8),
        })
        .unwrap();
    }
    h.b.post_recv(RecvWr {
        wr_id: 20,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    assert!(h.wait_down());
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [
            (1, Status::Success),
            (10, Status::ConnectionLost),
            (11, Status::Flushed)
        ]
    );
}
