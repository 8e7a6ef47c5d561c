//! Blocking reads (`IwarpProvider::set_blocking_reads` /
//! `read_blocking`): the receiver sleeps in `recv(2)` itself; every other
//! read and write stays non-blocking (`MSG_DONTWAIT`), messages of every
//! size arrive intact, and the timeout bounds the sleep.

#[path = "tcp_common/mod.rs"]
mod tcp_common;

use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::provider::{Access, Completion, Provider, RecvWr, SendOp, SendWr, Status};
use tcp_common::connected_pair;

const BUF: usize = 256 * 1024;

/// Waits on `p` with blocking reads until `n` completions arrived.
fn take(p: &mut IwarpProvider, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        assert!(Instant::now() < end, "timed out with {got:?}");
        p.poll_completions(&mut got);
        if got.len() < n {
            p.read_blocking(Duration::from_millis(20)).unwrap();
        }
    }
    got
}

#[test]
fn blocking_reads_deliver_every_size_and_time_out() {
    let cfg = IwarpConfig::default();
    let (mut a, mut b) = connected_pair(&cfg, &cfg);
    a.set_blocking_reads(true).unwrap();
    b.set_blocking_reads(true).unwrap();
    let src = a
        .register(vec![0u8; BUF].into_boxed_slice(), Access::NONE)
        .unwrap();
    let dst = b
        .register(vec![0u8; BUF].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    // Nothing sent: the sleep ends with the timeout, nothing pending.
    let t0 = Instant::now();
    assert!(!b.read_blocking(Duration::from_millis(30)).unwrap());
    let slept = t0.elapsed();
    assert!(slept >= Duration::from_millis(25), "{slept:?}");
    assert!(slept < Duration::from_secs(5), "{slept:?}");
    for (i, len) in [1usize, 72, 4096, 70_000, BUF].into_iter().enumerate() {
        let pattern: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
        a.region_mut(&src).unwrap()[..len].copy_from_slice(&pattern);
        b.post_recv(RecvWr {
            wr_id: i as u64,
            sge: dst.sge(0, BUF as u32),
        })
        .unwrap();
        a.post_send(SendWr {
            wr_id: 100 + i as u64,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, len as u32)].into(),
        })
        .unwrap();
        // The sender's pass writes without blocking even though its socket
        // is in blocking mode; its completion needs no peer action.
        let ca = take(&mut a, 1);
        assert_eq!(
            (ca[0].wr_id, ca[0].status),
            (100 + i as u64, Status::Success)
        );
        let cb = take(&mut b, 1);
        assert_eq!(cb[0].wr_id, i as u64);
        assert_eq!(cb[0].byte_len as usize, len);
        assert_eq!(&b.region(&dst).unwrap()[..len], &pattern[..]);
    }
    // Work already pending: no sleep at all.
    b.post_recv(RecvWr {
        wr_id: 9,
        sge: dst.sge(0, 64),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 109,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    take(&mut a, 1);
    assert!(b.read_blocking(Duration::from_secs(10)).unwrap());
    let t0 = Instant::now();
    assert!(b.read_blocking(Duration::from_secs(10)).unwrap());
    assert!(t0.elapsed() < Duration::from_secs(5));
    let cb = take(&mut b, 1);
    assert_eq!(cb[0].wr_id, 9);
    // The peer going away ends a sleep too.
    drop(a);
    let t0 = Instant::now();
    let mut lost = false;
    for _ in 0..100 {
        b.read_blocking(Duration::from_millis(50)).unwrap();
        let mut c = Vec::new();
        b.poll_completions(&mut c);
        if matches!(
            b.connection_state(),
            rpcrdma_proto::provider::ConnectionState::Disconnected(_)
        ) {
            lost = true;
            break;
        }
    }
    assert!(lost, "peer loss not seen");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn blocking_reads_only_after_the_mpa_exchange() {
    let l = rpcrdma_iwarp::tcp::Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let mut a = IwarpProvider::connect(l.local_addr().unwrap(), IwarpConfig::default()).unwrap();
    let e = a.set_blocking_reads(true).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
}

/// A waker that counts its wake-ups.
struct Count(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn unconfirmed_sends_neither_cut_a_sleep_short_nor_spin_a_waker() {
    use rpcrdma_proto::provider::Notify;
    use std::sync::atomic::Ordering::SeqCst;
    let cfg = IwarpConfig::default();
    // `b` (the passive side) sends: the active side holds its first FPDU
    // back for a settle time, which is not what this test is about.
    let (mut b, mut a) = connected_pair(&cfg, &cfg);
    a.set_blocking_reads(true).unwrap();
    let src = a
        .register(vec![5u8; 64].into_boxed_slice(), Access::NONE)
        .unwrap();
    let dst = b
        .register(vec![0u8; 64].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    for i in 0..2u64 {
        b.post_recv(RecvWr {
            wr_id: i,
            sge: dst.sge(0, 64),
        })
        .unwrap();
    }
    // The pass that follows the switch to blocking reads (it confirms
    // whatever was handed to TCP before).
    a.poll_completions(&mut Vec::new());
    let send = |a: &mut IwarpProvider, id: u64| {
        a.post_send(SendWr {
            wr_id: id,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, 16)].into(),
        })
        .unwrap(); // a lone small Send: handed to TCP at once
        let mut c = Vec::new();
        a.poll_completions(&mut c);
        c
    };
    assert!(send(&mut a, 1).is_empty());
    // Handed to TCP, not yet confirmed: a blocking read still sleeps its
    // whole timeout (the peer says nothing) ...
    let t0 = Instant::now();
    assert!(!a.read_blocking(Duration::from_millis(40)).unwrap());
    assert!(
        t0.elapsed() >= Duration::from_millis(30),
        "{:?}",
        t0.elapsed()
    );
    // ... and the pass after it confirms.
    let mut c = Vec::new();
    a.poll_completions(&mut c);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, Status::Success));
    // An owner sleeping on the waker instead is woken once for an
    // unconfirmed Send, the next pass confirms it, and then the waker
    // stays quiet (no busy loop).
    assert!(send(&mut a, 2).is_empty());
    let n = std::sync::Arc::new(Count(Default::default()));
    let w = std::task::Waker::from(n.clone());
    a.arm(&w, Notify::Any);
    assert_eq!(n.0.load(SeqCst), 1);
    let mut c = Vec::new();
    a.poll_completions(&mut c);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].wr_id, 2);
    a.arm(&w, Notify::Any);
    assert_eq!(n.0.load(SeqCst), 1, "woken with nothing to do");
    take(&mut b, 2);
}

/// Under blocking reads, and for an edge-triggered owner (read gate on: a
/// task driving the provider on readiness), a lone small Send goes to the
/// socket when it is posted (its owner need not make a pass for it): the
/// peer receives it while the sender makes none, and the sender's output
/// is empty at once (`settled`). A Send behind another WR or an unconfirmed
/// Send, or too large for the staging buffer, waits for the next pass as
/// before.
#[test]
fn a_lone_small_send_is_handed_to_tcp_when_posted() {
    lone_small_send(true);
    lone_small_send(false);
}

fn lone_small_send(blocking_reads: bool) {
    let cfg = IwarpConfig::default();
    let (mut b, mut a) = connected_pair(&cfg, &cfg);
    if blocking_reads {
        a.set_blocking_reads(true).unwrap();
    } else {
        a.set_read_gate(true);
    }
    b.set_blocking_reads(true).unwrap();
    a.poll_completions(&mut Vec::new());
    let src = a
        .register(vec![7u8; 8192].into_boxed_slice(), Access::NONE)
        .unwrap();
    let dst = b
        .register(vec![0u8; 8192].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    for i in 0..3u64 {
        b.post_recv(RecvWr {
            wr_id: i,
            sge: dst.sge(0, 8192),
        })
        .unwrap();
    }
    let post = |a: &mut IwarpProvider, id: u64, len: u32| {
        a.post_send(SendWr {
            wr_id: id,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, len)].into(),
        })
        .unwrap();
    };
    post(&mut a, 1, 100);
    assert!(a.settled(), "the lone small Send is still queued");
    let got = take(&mut b, 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (0, 100));
    // Too large to be staged (over 4 KiB): it waits for a pass.
    post(&mut a, 2, 5000);
    assert!(!a.settled());
    // (A gated owner's passes confirm what earlier ones handed to TCP: the
    // first Send's completion comes with this one.)
    let mut c = Vec::new();
    a.poll_completions(&mut c);
    assert!(a.settled());
    assert_eq!(c.len(), usize::from(!blocking_reads), "{c:?}");
    let got = take(&mut b, 1);
    assert_eq!((got[0].wr_id, got[0].byte_len), (1, 5000));
    // Every Send is confirmed by the passes after a read (a gated owner's:
    // by every pass).
    let rest = 2 - c.len();
    c.extend(take(&mut a, rest));
    c.sort_by_key(|c| c.wr_id);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, Status::Success), (2, Status::Success)]
    );
    // Two small Sends back to back: the first goes at once, the second
    // (posted while the first is unconfirmed: more may follow) waits for
    // the pass, which sends it with whatever else was posted.
    b.post_recv(RecvWr {
        wr_id: 3,
        sge: dst.sge(0, 4096),
    })
    .unwrap();
    post(&mut a, 3, 60);
    assert!(a.settled());
    post(&mut a, 4, 70);
    assert!(!a.settled(), "a Send behind an unconfirmed one went alone");
    a.poll_completions(&mut Vec::new());
    assert!(a.settled());
    let got = take(&mut b, 2);
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.byte_len))
            .collect::<Vec<_>>(),
        [(2, 60), (3, 70)]
    );
    if blocking_reads {
        return;
    }
    // An edge-triggered owner whose last pass received several messages
    // (a batch of calls to answer): its answers wait for the pass, which
    // sends them together.
    let inbox = a
        .register(vec![0u8; 4096].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    let from_b = b
        .register(vec![5u8; 64].into_boxed_slice(), Access::NONE)
        .unwrap();
    for i in 0..2u64 {
        a.post_recv(RecvWr {
            wr_id: 10 + i,
            sge: inbox.sge(i * 64, 64),
        })
        .unwrap();
        b.post_send(SendWr {
            wr_id: 20 + i,
            op: SendOp::Send { solicited: false },
            sges: vec![from_b.sge(0, 64)].into(),
        })
        .unwrap();
    }
    b.poll_completions(&mut Vec::new());
    // Both arrive before `a` reads: one pass takes them together.
    std::thread::sleep(Duration::from_millis(50));
    let mut c = Vec::new();
    a.note_readable();
    a.poll_completions(&mut c);
    assert_eq!(
        c.iter().filter(|c| c.wr_id >= 10).count(),
        2,
        "one pass received both: {c:?}"
    );
    post(&mut a, 5, 40);
    assert!(!a.settled(), "an answer to a batch went alone");
    a.poll_completions(&mut Vec::new());
    assert!(a.settled());
    for i in 0..2u64 {
        b.post_recv(RecvWr {
            wr_id: 30 + i,
            sge: dst.sge(0, 4096),
        })
        .unwrap();
    }
    let got = take(&mut b, 1);
    assert_eq!((got[0].byte_len), 40);
}
