//! Two software iWARP providers over 127.0.0.1 pass the provider
//! conformance suite of `rpcrdma-proto`, for MPA revision 1 and 2, CRC on
//! and off, and with Markers.

mod tcp_common;

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_proto::provider::{conformance, ConnectionEvent, Provider};
use tcp_common::connected_pair;

fn run(rev: u8, crc: bool, markers: bool) {
    let cfg = IwarpConfig {
        rev,
        crc,
        markers,
        ird: 4,
        ord: 4,
        private_data: b"conformance".to_vec(),
        ..Default::default()
    };
    let mut factory = || connected_pair(&cfg, &cfg);
    match conformance::run_all(&mut factory, 20_000) {
        Ok(n) => assert_eq!(n, conformance::CHECK_COUNT),
        Err(f) => panic!("rev {rev} crc {crc} markers {markers}: {f}"),
    }
}

/// The connection-manager checks (connect, accept and reject with private
/// data) over TCP and MPA, revision 2 and 1.
#[test]
fn cm_conformance() {
    use rpcrdma_iwarp::manager::IwarpCm;
    use std::time::Duration;
    for rev in [2, 1] {
        let cm = IwarpCm {
            config: IwarpConfig {
                rev,
                ..Default::default()
            },
            ..Default::default()
        };
        let at = "127.0.0.1:0".parse().unwrap();
        match conformance::cm::run_all(&cm, at, Duration::from_secs(30)) {
            Ok(n) => assert_eq!(n, conformance::cm::CHECK_COUNT),
            Err(f) => panic!("rev {rev}: {f}"),
        }
    }
}

#[test]
fn conformance_rev2_crc_off() {
    run(2, false, false);
}

#[test]
fn conformance_rev2_crc_on() {
    run(2, true, false);
}

#[test]
fn conformance_rev1_crc_off() {
    run(1, false, false);
}

#[test]
fn conformance_rev1_crc_on() {
    run(1, true, false);
}

#[test]
fn conformance_rev2_crc_markers() {
    run(2, true, true);
}

#[test]
fn private_data_and_ird_ord_reach_both_sides() {
    let ini = IwarpConfig {
        ird: 8,
        ord: 2,
        private_data: vec![0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3],
        ..Default::default()
    };
    let resp = IwarpConfig {
        ird: 2,
        ord: 16,
        private_data: vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3],
        ..Default::default()
    };
    let (a, b) = connected_pair(&ini, &resp);
    let ia = a.connection_info().unwrap();
    let ib = b.connection_info().unwrap();
    assert_eq!(ia.peer_private_data, resp.private_data);
    assert_eq!(ib.peer_private_data, ini.private_data);
    assert_eq!((ia.ird, ia.ord), (8, 2));
    assert_eq!((ib.ird, ib.ord), (2, 8));
    // The raw frames keep the IRD/ORD header.
    assert_eq!(
        &a.peer_frame().unwrap().private_data[..4],
        &[0x80, 2, 0x80, 8]
    );
    assert_eq!(
        &b.peer_frame().unwrap().private_data[..4],
        &[0x80, 8, 0x40, 2]
    );
}

#[test]
fn reject_is_reported_with_private_data() {
    use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
    use rpcrdma_proto::provider::{ConnectionState, DisconnectReason};
    use std::time::Duration;
    let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let mut a = IwarpProvider::connect(l.local_addr().unwrap(), IwarpConfig::default()).unwrap();
    let pending = l.accept(Duration::from_secs(5)).unwrap();
    pending.reject(b"go away", Duration::from_secs(5)).unwrap();
    let mut ev = None;
    for _ in 0..1000 {
        if let Some(e) = a.poll_event() {
            ev = Some(e);
            break;
        }
        a.wait(Some(Duration::from_millis(10))).unwrap();
    }
    let want = DisconnectReason::Rejected {
        private_data: b"go away".to_vec(),
    };
    assert_eq!(ev, Some(ConnectionEvent::Disconnected(want.clone())));
    assert_eq!(a.connection_state(), ConnectionState::Disconnected(want));
}

/// A waker that counts its wake-ups.
struct Count(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn arm_wakes_on_post_and_on_pending_work() {
    use rpcrdma_proto::provider::{Access, Notify, RecvWr, SendOp, SendWr};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Waker;
    use std::time::Duration;

    let cfg = IwarpConfig::default();
    let (mut a, mut b) = connected_pair(&cfg, &cfg);
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let mut cq = Vec::new();
    // Let the initiator's settle time pass; then nothing is pending.
    std::thread::sleep(Duration::from_millis(10));
    a.poll_completions(&mut cq);
    a.arm(&waker, Notify::Any);
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        0,
        "woke with nothing pending"
    );
    // A post wakes the armed waker.
    let src = a
        .register(vec![1; 8].into_boxed_slice(), Access::NONE)
        .unwrap();
    let rb = b
        .register(vec![0; 8].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send { solicited: true },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 1, "post did not wake");
    // Pending work: arming wakes at once.
    a.arm(&waker, Notify::Any);
    assert_eq!(count.0.load(Ordering::SeqCst), 2, "arm with queued work");
    // b: the solicited receive shows up through the fd + arm(Solicited).
    let mut cb = Vec::new();
    for _ in 0..1000 {
        a.poll_completions(&mut cq);
        b.poll_completions(&mut cb);
        if !cb.is_empty() {
            break;
        }
        let _ = b.wait(Some(Duration::from_millis(5)));
    }
    assert_eq!(cb.len(), 1);
    assert!(b
        .wait_fd()
        .is_some_and(|fd| std::os::fd::AsRawFd::as_raw_fd(&fd) >= 0));
}

/// A gated owner (a driver on edge-triggered readiness) whose pass stopped
/// at the read budget, not at a drained socket: the input left is announced
/// by no new readiness edge (the owner consumed the one it had before the
/// pass), so `arm` must wake at once, pass after pass, until the socket is
/// drained; then it must not.
#[test]
fn arm_wakes_while_a_pass_left_input_at_its_read_budget() {
    use rpcrdma_proto::provider::{Access, Notify, SendOp, SendWr, Status};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Waker;
    use std::time::Duration;

    const LEN: usize = 64 * 1024;
    const BUDGET: usize = 4096;
    let cfg = IwarpConfig::default();
    let (mut a, mut b) = connected_pair(&cfg, &cfg);
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    std::thread::sleep(Duration::from_millis(10));
    a.poll_completions(&mut ca);
    a.set_read_gate(true);
    a.set_read_budget(BUDGET);
    let sink = a
        .register(
            vec![0; LEN].into_boxed_slice(),
            Access::LOCAL_WRITE.union(Access::REMOTE_WRITE),
        )
        .unwrap();
    let data: Vec<u8> = (0..LEN).map(|i| (i * 13 % 251) as u8).collect();
    let src = b
        .register(data.clone().into_boxed_slice(), Access::NONE)
        .unwrap();
    // b writes 64 KiB into a's region (no completion at a: only input).
    b.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: sink.remote(0),
        },
        sges: vec![src.sge(0, LEN as u32)].into(),
    })
    .unwrap();
    for _ in 0..1000 {
        b.poll_completions(&mut cb);
        if !cb.is_empty() {
            break;
        }
        let _ = b.wait(Some(Duration::from_millis(5)));
    }
    assert_eq!(cb.len(), 1);
    assert_eq!(cb[0].status, Status::Success);
    // Loopback delivery: the octets are in a's socket.
    std::thread::sleep(Duration::from_millis(20));
    // One readiness edge, then passes as a driver makes them.
    a.note_readable();
    let mut passes = 0;
    loop {
        a.poll_completions(&mut ca);
        passes += 1;
        let before = count.0.load(Ordering::SeqCst);
        a.arm(&waker, Notify::Any);
        if count.0.load(Ordering::SeqCst) == before {
            break;
        }
        assert!(passes < 10 * LEN / BUDGET, "arm keeps waking");
    }
    assert!(ca.is_empty(), "{ca:?}");
    // Each pass read at most the budget; all of it arrived, without a
    // second readiness edge.
    assert!(passes > LEN / BUDGET, "{passes} passes");
    assert!(a.region(&sink).unwrap() == &data[..], "data not placed");
    // Drained: armed, not woken.
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(count.0.load(Ordering::SeqCst), passes - 1);
}
