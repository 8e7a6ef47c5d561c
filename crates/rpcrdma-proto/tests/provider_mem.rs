//! The in-memory provider pair: every completion path, exact statuses and
//! blame, connection setup, and the shared conformance suite.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use rpcrdma_proto::provider::conformance::{self, register_filled, send_wr, BadRemote, Harness};
use rpcrdma_proto::provider::mem::{self, MemConfig, MemProvider};
use rpcrdma_proto::provider::{
    Access, Blame, Completion, ConnectParams, ConnectionEvent, ConnectionState, DisconnectReason,
    Notify, Opcode, Provider, ProviderError, RecvWr, SendOp, SendWr, Stag, Status,
    MAX_PRIVATE_DATA,
};

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn params() -> ConnectParams {
    ConnectParams {
        private_data: Vec::new(),
        ird: 4,
        ord: 4,
    }
}

fn new_pair() -> (MemProvider, MemProvider) {
    mem::connected_pair(MemConfig::DEFAULT, params(), params()).expect("pair")
}

fn harness() -> Harness<MemProvider> {
    Harness::new(new_pair(), 50)
}

fn events(p: &mut impl Provider) -> Vec<ConnectionEvent> {
    std::iter::from_fn(|| p.poll_event()).collect()
}

#[test]
fn conformance_suite_passes_on_mem() {
    let mut f = new_pair;
    assert_eq!(
        conformance::run_all(&mut f, 50),
        Ok(conformance::CHECK_COUNT)
    );
}

#[test]
fn conformance_suite_passes_through_dyn_provider() {
    // Object safety: the same checks over `Box<dyn Provider>`.
    let mut f = || {
        let (a, b) = new_pair();
        (
            Box::new(a) as Box<dyn Provider>,
            Box::new(b) as Box<dyn Provider>,
        )
    };
    assert_eq!(
        conformance::run_all(&mut f, 50),
        Ok(conformance::CHECK_COUNT)
    );
}

#[test]
fn send_recv_moves_bytes_only_when_polled() {
    let (mut a, mut b) = new_pair();
    let src = a
        .register(b"abcdef".to_vec().into_boxed_slice(), Access::NONE)
        .unwrap();
    let dst = register_filled(&mut b, 8, 0, Access::LOCAL_WRITE).unwrap();
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: dst.sge(0, 8),
    })
    .unwrap();
    a.post_send(send_wr(2, &src, 1, 4)).unwrap();
    let mut out = Vec::new();
    // b first: nothing transmitted yet.
    assert_eq!(b.poll_completions(&mut out), 0);
    assert_eq!(b.pending_work(), 0);
    assert_eq!(a.pending_work(), 1, "a's send is still queued at a");
    // a transmits; its Send completes only after b processed it.
    assert_eq!(a.poll_completions(&mut out), 0);
    assert_eq!(b.poll_completions(&mut out), 1);
    assert_eq!(
        out,
        [Completion {
            wr_id: 1,
            opcode: Opcode::Recv,
            byte_len: 4,
            status: Status::Success
        }]
    );
    assert_eq!(b.region(&dst).unwrap(), b"bcde\0\0\0\0");
    out.clear();
    assert_eq!(a.poll_completions(&mut out), 1);
    assert_eq!(
        out,
        [Completion {
            wr_id: 2,
            opcode: Opcode::Send,
            byte_len: 4,
            status: Status::Success
        }]
    );
    assert_eq!(a.pending_work(), 0);
}

#[test]
fn receives_are_consumed_in_post_order_and_gather_concatenates() {
    let mut h = harness();
    let src =
        h.a.register(b"0123456789".to_vec().into_boxed_slice(), Access::NONE)
            .unwrap();
    let dst = register_filled(&mut h.b, 32, b'.', Access::LOCAL_WRITE).unwrap();
    for i in 0..3u64 {
        h.b.post_recv(RecvWr {
            wr_id: 10 + i,
            sge: dst.sge(i * 10, 10),
        })
        .unwrap();
    }
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(8, 2), src.sge(0, 3)].into(),
    })
    .unwrap();
    h.a.post_send(send_wr(2, &src, 5, 1)).unwrap();
    assert!(h.wait(2, 2));
    assert_eq!(
        h.cb.iter()
            .map(|c| (c.wr_id, c.byte_len))
            .collect::<Vec<_>>(),
        [(10, 5), (11, 1)]
    );
    // The third receive is still posted: the region may not be read yet.
    assert_eq!(h.b.region(&dst), Err(ProviderError::Busy));
    h.b.disconnect();
    h.round();
    assert_eq!(h.cb[2].wr_id, 12);
    assert_eq!(h.cb[2].status, Status::Flushed);
    let d = h.b.region(&dst).unwrap();
    assert_eq!(&d[..12], b"89012.....5.");
}

#[test]
fn receive_too_small_is_fatal_with_exact_statuses() {
    let mut h = harness();
    assert_eq!(conformance::receive_too_small(&mut h), Ok(()));
    assert_eq!(h.ca[0].status, Status::RemoteOperation);
    assert_eq!(h.ca[0].status.blame(), Blame::Remote);
    assert_eq!(
        h.b.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::LocalLength,
            blame: Blame::Local
        })
    );
    assert_eq!(
        h.a.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::RemoteOperation,
            blame: Blame::Remote
        })
    );
}

//= rfc8166#section-3.3
//# If any pre-posted Receive buffer on the connection is not large
//# enough to accept an incoming RDMA Send, or if a pre-posted Receive
//# buffer is not available to accept an incoming RDMA Send, the RDMA
//# connection can be terminated.
//= rfc5041#section-7.1
//# If there is not an associated buffer, DDP implementations MAY choose
//# to disable the stream for the reception and report an error to the
//# ULP at the Data Sink.
#[test]
fn rnr_fails_the_send_and_flushes_both_sides() {
    let mut h = harness();
    let src = register_filled(&mut h.a, 8, 1, Access::NONE).unwrap();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    // a sends twice; b posts nothing, then (too late) a receive of its own
    // is flushed when the Terminate comes.
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    h.a.post_send(send_wr(2, &src, 0, 8)).unwrap();
    h.a.poll_completions(&mut h.ca);
    h.b.poll_completions(&mut h.cb);
    assert!(conformance::is_down(&h.b));
    assert_eq!(
        h.b.post_recv(RecvWr {
            wr_id: 30,
            sge: rb.sge(0, 8)
        }),
        Err(ProviderError::NotConnected)
    );
    assert!(h.wait_down());
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, Status::ReceiverNotReady), (2, Status::Flushed)]
    );
    assert_eq!(
        h.a.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::ReceiverNotReady,
            blame: Blame::Remote
        })
    );
    assert_eq!(
        h.b.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::Error {
            status: Status::ReceiverNotReady,
            blame: Blame::Local
        })
    );
    assert_eq!(conformance::receiver_not_ready(&mut harness()), Ok(()));
}

#[test]
fn every_bad_remote_kind_is_a_remote_access_error() {
    for bad in [
        BadRemote::UnknownStag,
        BadRemote::StaleKey,
        BadRemote::OutOfBounds,
        BadRemote::MissingRight,
        BadRemote::Invalidated,
    ] {
        let mut h = harness();
        assert_eq!(conformance::write_remote_access_error(&mut h, bad), Ok(()));
        assert_eq!(
            h.b.connection_state(),
            ConnectionState::Disconnected(DisconnectReason::Error {
                status: Status::RemoteAccess,
                blame: Blame::Remote
            }),
            "{bad:?}"
        );
    }
}

fn read_failure(mutate: impl FnOnce(&mut MemProvider, &mut rpcrdma_proto::provider::RemoteAddr)) {
    let mut h = harness();
    let src =
        h.b.register(vec![9u8; 16].into_boxed_slice(), Access::REMOTE_READ)
            .unwrap();
    let sink = register_filled(&mut h.a, 16, 0x33, RW).unwrap();
    let mut remote = src.remote(0);
    mutate(&mut h.b, &mut remote);
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Read { remote },
        sges: vec![sink.sge(0, 16)].into(),
    })
    .unwrap();
    assert!(h.wait_down());
    assert_eq!(h.ca.len(), 1);
    assert_eq!(h.ca[0].status, Status::RemoteAccess);
    assert_eq!(h.ca[0].opcode, Opcode::Read);
    assert_eq!(h.ca[0].byte_len, 0);
    assert!(h.a.region(&sink).unwrap().iter().all(|&x| x == 0x33));
}

#[test]
fn rdma_read_failures_touch_no_memory() {
    read_failure(|_, r| r.offset = 1); // out of bounds
    read_failure(|_, r| r.stag = Stag(r.stag.0 + 1)); // wrong key
    read_failure(|b, r| {
        // no REMOTE_READ right
        let mr = b
            .register(vec![0; 16].into_boxed_slice(), Access::LOCAL_WRITE)
            .unwrap();
        *r = mr.remote(0);
    });
}

#[test]
fn read_sink_rules_and_ord_are_checked_at_post() {
    let (mut a, _b) = new_pair();
    let lw = register_filled(&mut a, 8, 0, Access::LOCAL_WRITE).unwrap();
    let read = |sink: &rpcrdma_proto::provider::MemoryRegion| SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote: rpcrdma_proto::provider::RemoteAddr {
                stag: Stag(0x100),
                offset: 0,
            },
        },
        sges: vec![sink.sge(0, 8)].into(),
    };
    // iWARP: a Read sink must be remotely writable.
    assert_eq!(
        a.post_send(read(&lw)),
        Err(ProviderError::AccessDenied { needed: RW })
    );
    let mut two = read(&lw);
    two.sges.push(lw.sge(0, 1));
    assert_eq!(a.post_send(two), Err(ProviderError::BadSgeCount));
    // ORD 0 (the Linux client's choice) forbids RDMA Read.
    let zero = ConnectParams { ord: 0, ..params() };
    let (mut c, _d) = mem::connected_pair(MemConfig::DEFAULT, zero, params()).unwrap();
    assert_eq!(c.connection_info().unwrap().ord, 0);
    let sink = register_filled(&mut c, 8, 0, RW).unwrap();
    assert!(matches!(
        c.post_send(read(&sink)),
        Err(ProviderError::InvalidArgument(_))
    ));
}

#[test]
fn send_with_invalidate_of_a_foreign_stag_is_fatal() {
    let mut h = harness();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    let src = register_filled(&mut h.a, 8, 0, Access::NONE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 5,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::SendWithInvalidate {
            invalidate: Stag(0xdead_be01),
            solicited: false,
        },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    assert!(h.wait_down());
    assert_eq!(h.cb[0].status, Status::LocalProtection);
    assert_eq!(h.ca[0].status, Status::RemoteOperation);
    assert!(h.b.region(&rb).unwrap().iter().all(|&x| x == 0));
}

#[test]
fn send_with_invalidate_then_reregister_gives_a_fresh_key() {
    let mut h = harness();
    assert_eq!(conformance::send_with_invalidate(&mut harness()), Ok(()));
    // After remote invalidation the region is still usable locally and can
    // be deregistered and registered again with a new key.
    let chunk = register_filled(&mut h.b, 8, 0, RW).unwrap();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    let src = register_filled(&mut h.a, 8, 7, Access::NONE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::SendWithInvalidate {
            invalidate: chunk.stag(),
            solicited: false,
        },
        sges: vec![].into(),
    })
    .unwrap();
    assert!(h.wait(1, 1));
    assert_eq!(
        h.cb[0].opcode,
        Opcode::RecvWithInvalidate { stag: chunk.stag() }
    );
    assert_eq!(h.cb[0].byte_len, 0);
    h.b.region_mut(&chunk).unwrap()[0] = 1;
    let buf = h.b.deregister(&chunk).unwrap();
    assert_eq!(buf[0], 1);
    let again = h.b.register(buf.into_owned(), RW).unwrap();
    assert_eq!(again.stag().index(), chunk.stag().index());
    assert_eq!(again.stag().key(), chunk.stag().key().wrapping_add(1));
    // The new key works.
    h.a.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote: again.remote(2),
        },
        sges: vec![src.sge(0, 2)].into(),
    })
    .unwrap();
    assert!(h.wait(2, 1));
    assert_eq!(h.ca[1].status, Status::Success);
    assert_eq!(h.b.region(&again).unwrap(), [1, 0, 7, 7, 0, 0, 0, 0]);
}

#[test]
fn local_invalidate_is_ordered_with_the_send_queue() {
    let mut h = harness();
    let mine = register_filled(&mut h.a, 8, 0, RW).unwrap();
    let src = register_filled(&mut h.a, 8, 0, Access::NONE).unwrap();
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 9,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    h.a.invalidate(2, mine.stag()).unwrap();
    // Unknown STag: refused at post.
    assert_eq!(
        h.a.invalidate(3, Stag(0x00ab_cd01)),
        Err(ProviderError::InvalidHandle)
    );
    // The invalidate executes at once but completes after the Send.
    h.a.poll_completions(&mut h.ca);
    assert!(h.ca.is_empty());
    assert!(h.wait(2, 1));
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
        [(1, Opcode::Send), (2, Opcode::LocalInvalidate)]
    );
}

#[test]
fn queue_depth_is_enforced_until_completions_are_polled() {
    let mut caps = MemConfig::DEFAULT.caps;
    caps.max_recv_wr = 2;
    caps.max_send_wr = 1;
    let (mut a, mut b) = mem::connected_pair(
        MemConfig {
            caps,
            ..MemConfig::DEFAULT
        },
        params(),
        params(),
    )
    .unwrap();
    let rb = register_filled(&mut b, 8, 0, Access::LOCAL_WRITE).unwrap();
    let src = register_filled(&mut a, 8, 0, Access::NONE).unwrap();
    for i in 0..2 {
        b.post_recv(RecvWr {
            wr_id: i,
            sge: rb.sge(0, 4),
        })
        .unwrap();
    }
    assert_eq!(
        b.post_recv(RecvWr {
            wr_id: 3,
            sge: rb.sge(0, 4)
        }),
        Err(ProviderError::QueueFull)
    );
    a.post_send(send_wr(1, &src, 0, 4)).unwrap();
    assert_eq!(
        a.post_send(send_wr(2, &src, 0, 4)),
        Err(ProviderError::QueueFull)
    );
    let mut h = Harness::new((a, b), 10);
    assert!(h.wait(1, 1));
    h.a.post_send(send_wr(2, &src, 0, 4)).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 3,
        sge: rb.sge(4, 4),
    })
    .unwrap();
}

#[test]
fn registration_limits() {
    let mut caps = MemConfig::DEFAULT.caps;
    caps.max_mr = 1;
    caps.max_mr_size = 16;
    let (mut a, _b) = mem::pair(MemConfig {
        caps,
        ..MemConfig::DEFAULT
    });
    let e = a
        .register(vec![0; 17].into_boxed_slice(), Access::NONE)
        .unwrap_err();
    assert_eq!((e.error, e.buf.len()), (ProviderError::TooLong, 17));
    let m = a
        .register(vec![0; 16].into_boxed_slice(), Access::NONE)
        .unwrap();
    let e = a
        .register(vec![0; 1].into_boxed_slice(), Access::NONE)
        .unwrap_err();
    assert_eq!(e.error, ProviderError::QueueFull);
    a.deregister(&m).unwrap();
    assert!(a.register(e.buf, Access::NONE).is_ok());
}

#[test]
fn disconnect_flushes_queued_and_unacknowledged_work_on_both_sides() {
    let mut h = harness();
    let src = register_filled(&mut h.a, 8, 0, Access::NONE).unwrap();
    let rb = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 20,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    h.b.post_recv(RecvWr {
        wr_id: 21,
        sge: rb.sge(8, 8),
    })
    .unwrap();
    h.a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    h.a.poll_completions(&mut h.ca); // transmitted, not yet acknowledged
    h.a.post_send(send_wr(2, &src, 0, 8)).unwrap(); // still queued
    h.b.disconnect();
    assert!(h.wait_down());
    assert_eq!(
        h.ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, Status::Flushed), (2, Status::Flushed)]
    );
    assert_eq!(
        h.cb.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(20, Status::Flushed), (21, Status::Flushed)]
    );
    assert!(h.b.region(&rb).unwrap().iter().all(|&x| x == 0));
    assert_eq!(
        h.a.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::PeerClose)
    );
    assert_eq!(
        h.b.connection_state(),
        ConnectionState::Disconnected(DisconnectReason::LocalClose)
    );
    assert_eq!(
        h.a.post_send(send_wr(3, &src, 0, 1)),
        Err(ProviderError::NotConnected)
    );
    // disconnect is idempotent
    h.a.disconnect();
    h.b.disconnect();
    assert_eq!(h.round(), 0);
}

#[test]
fn connection_setup_exchanges_private_data_both_ways() {
    let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
    assert_eq!(a.connection_state(), ConnectionState::Idle);
    let req = vec![0xa5; MAX_PRIVATE_DATA];
    let rep = vec![0x5a; 7];
    a.connect(ConnectParams {
        private_data: req.clone(),
        ird: 0,
        ord: 8,
    })
    .unwrap();
    assert_eq!(a.connection_state(), ConnectionState::Connecting);
    assert_eq!(
        events(&mut b),
        [ConnectionEvent::ConnectRequest {
            private_data: req.clone(),
            ird: 0,
            ord: 8
        }]
    );
    // The passive side posts receives before accepting (svcrdma order).
    let rb = register_filled(&mut b, 8, 0, Access::LOCAL_WRITE).unwrap();
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    assert_eq!(
        b.post_send(send_wr(1, &rb, 0, 1)),
        Err(ProviderError::NotConnected)
    );
    b.accept(ConnectParams {
        private_data: rep.clone(),
        ird: 16,
        ord: 2,
    })
    .unwrap();
    let ib = b.connection_info().unwrap();
    assert_eq!(ib.peer_private_data, req);
    // b: ord = min(2, a.ird = 0) = 0, ird = min(16, a.ord = 8) = 8.
    assert_eq!((ib.ird, ib.ord), (8, 0));
    let ev = events(&mut a);
    let [ConnectionEvent::Established(ia)] = ev.as_slice() else {
        panic!("{ev:?}")
    };
    assert_eq!(ia.peer_private_data, rep);
    // a: ord = min(8, b.ird = 16) = 8, ird = min(0, b.ord) = 0.
    assert_eq!((ia.ird, ia.ord), (0, 8));
    assert_eq!(a.connection_info().as_ref(), Some(ia));
    assert_eq!(a.connection_state(), ConnectionState::Established);
}

//= rfc5044#section-7.1.1
//# The Private Data field MUST be between 0 and 512 octets in length.  ULPs
//# define how to size, set, and validate this field within these limits.
#[test]
fn private_data_over_512_is_refused() {
    let too_long = ConnectParams {
        private_data: vec![0; MAX_PRIVATE_DATA + 1],
        ..params()
    };
    let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
    assert_eq!(
        a.connect(too_long.clone()),
        Err(ProviderError::PrivateDataTooLong { len: 513, max: 512 })
    );
    assert_eq!(a.connection_state(), ConnectionState::Idle);
    a.connect(params()).unwrap();
    assert!(matches!(
        b.poll_event(),
        Some(ConnectionEvent::ConnectRequest { .. })
    ));
    assert!(matches!(
        b.accept(too_long),
        Err(ProviderError::PrivateDataTooLong { len: 513, .. })
    ));
    assert!(b.reject(vec![0; 513]).is_err());
    // The request is still pending after the refusals.
    b.accept(params()).unwrap();
    assert!(matches!(
        a.poll_event(),
        Some(ConnectionEvent::Established(_))
    ));
    // A backend with a smaller CM limit enforces it.
    let mut caps = MemConfig::DEFAULT.caps;
    caps.max_private_data = 56;
    let (mut c, _d) = mem::pair(MemConfig {
        caps,
        ..MemConfig::DEFAULT
    });
    assert_eq!(
        c.connect(ConnectParams {
            private_data: vec![0; 57],
            ..params()
        }),
        Err(ProviderError::PrivateDataTooLong { len: 57, max: 56 })
    );
}

#[test]
fn reject_reports_private_data_to_the_active_side() {
    let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
    let ra = register_filled(&mut a, 8, 0, Access::LOCAL_WRITE).unwrap();
    a.post_recv(RecvWr {
        wr_id: 4,
        sge: ra.sge(0, 8),
    })
    .unwrap();
    a.connect(params()).unwrap();
    assert!(b.poll_event().is_some());
    b.reject(b"busy".to_vec()).unwrap();
    let reason = DisconnectReason::Rejected {
        private_data: b"busy".to_vec(),
    };
    assert_eq!(
        events(&mut a),
        [ConnectionEvent::Disconnected(reason.clone())]
    );
    assert_eq!(a.connection_state(), ConnectionState::Disconnected(reason));
    let mut out = Vec::new();
    a.poll_completions(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].wr_id, out[0].status), (4, Status::Flushed));
}

struct CountWake(AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn arm_wakes_on_arrival_and_respects_solicited_only() {
    let (mut a, mut b) = new_pair();
    let count = Arc::new(CountWake(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&count));
    let woken = || count.0.load(Ordering::SeqCst);
    let src = register_filled(&mut a, 8, 0, Access::NONE).unwrap();
    let rb = register_filled(&mut b, 32, 0, Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        b.post_recv(RecvWr {
            wr_id: i,
            sge: rb.sge(i * 8, 8),
        })
        .unwrap();
    }
    let mut out = Vec::new();
    // Nothing pending at b: arming stores the waker.
    b.arm(&waker, Notify::Solicited);
    assert_eq!(woken(), 0);
    // An unsolicited Send does not wake a solicited-only waiter.
    a.post_send(send_wr(1, &src, 0, 8)).unwrap();
    a.poll_completions(&mut out);
    assert_eq!(woken(), 0);
    // A solicited one does.
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send { solicited: true },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    a.poll_completions(&mut out);
    assert_eq!(woken(), 1);
    // Arming with work pending wakes at once.
    b.arm(&waker, Notify::Any);
    assert_eq!(woken(), 2);
    assert_eq!(b.poll_completions(&mut out), 2);
    // a collects its two Send completions; then, awaiting only an ack, it
    // arms and is woken when the ack arrives.
    assert_eq!(a.poll_completions(&mut out), 2);
    b.post_recv(RecvWr {
        wr_id: 2,
        sge: rb.sge(16, 8),
    })
    .unwrap();
    a.post_send(send_wr(3, &src, 0, 8)).unwrap();
    assert_eq!(a.poll_completions(&mut out), 0);
    a.arm(&waker, Notify::Any);
    assert_eq!(woken(), 2);
    assert_eq!(b.poll_completions(&mut out), 1);
    assert_eq!(woken(), 3, "ack arrival wakes the poster");
    // A disconnect wakes a solicited-only waiter too.
    b.arm(&waker, Notify::Solicited);
    assert_eq!(woken(), 3);
    a.disconnect();
    assert_eq!(woken(), 4);
    assert!(b.wait_fd().is_none());
}

#[test]
fn stags_rotate_per_registration_and_differ_between_ends() {
    let (mut a, mut b) = new_pair();
    let ma = a.register(vec![0; 8].into_boxed_slice(), RW).unwrap();
    let mb = b.register(vec![0; 8].into_boxed_slice(), RW).unwrap();
    // Hand-checked: index 0, first key 0x01 at end a and 0x81 at end b.
    assert_eq!(ma.stag(), Stag(0x0000_0001));
    assert_eq!(mb.stag(), Stag(0x0000_0081));
    let mut stag = ma.stag();
    let mut mr = ma;
    for _ in 0..3 {
        let buf = a.deregister(&mr).unwrap();
        mr = a.register(buf.into_owned(), RW).unwrap();
        assert_eq!(mr.stag(), Stag::new(0, stag.key().wrapping_add(1)));
        stag = mr.stag();
    }
    // A second region takes the next index.
    let m2 = a.register(vec![0; 8].into_boxed_slice(), RW).unwrap();
    assert_eq!(m2.stag(), Stag(0x0000_0101));
    // The old handle is stale locally as well.
    assert_eq!(a.region(&ma), Err(ProviderError::InvalidHandle));
    // Using one's own STag as if it were the peer's is a remote access error.
    let mut h = Harness::new((a, b), 20);
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: mr.remote(0),
        },
        sges: vec![m2.sge(0, 8)].into(),
    })
    .unwrap();
    assert!(h.wait_down());
    assert_eq!(h.ca[0].status, Status::RemoteAccess);
    assert_eq!(h.b.region(&mb).unwrap(), [0; 8]);
}

#[test]
fn providers_can_move_between_threads() {
    fn assert_send<T: Send + 'static>() {}
    assert_send::<MemProvider>();
    assert_send::<rpcrdma_proto::provider::fault::FaultInjector<MemProvider>>();
}
