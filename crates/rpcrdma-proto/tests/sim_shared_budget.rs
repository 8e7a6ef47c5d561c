//! A Read-sink budget shared by several connections of one server
//! (`Config::read_budget`): calls wait for it first come, first served
//! across connections, are woken through the waker their connection gave
//! (`Connection::set_waker`) when budget is given back, never make the
//! connections together exceed it, and get it back on every path (Reads
//! done, Read failed, connection lost, engine dropped).

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use rpcrdma_proto::engine::{Config, ReadSinkBudget};
use rpcrdma_proto::provider::fault::FaultConfig;
use util::*;

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// One server connection facing a raw requester, with a counting waker.
struct Conn {
    p: RawPair,
    woken: Arc<Count>,
    seen: usize,
}

impl Conn {
    fn new(budget: &Arc<ReadSinkBudget>, faults: FaultConfig) -> Conn {
        let mut cfg = Config::server();
        cfg.read_budget = Some(budget.clone());
        let mut p = RawPair::server_with_faults(cfg, faults);
        p.raw.post_recvs(8);
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        p.side.conn.set_waker(&Waker::from(woken.clone()));
        Conn { p, woken, seen: 0 }
    }

    /// Sends a call whose argument travels in one Read chunk.
    fn send(&mut self, xid: u32, arg: &[u8]) {
        let h = self.p.raw.expose(arg);
        let mut m = words(&[xid, 1, 64, 0, 1, 44, h, arg.len() as u32, 0, 0, 0, 0, 0]);
        m.extend(words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]));
        m.extend(words(&[arg.len() as u32, 0xfeed_f00d]));
        self.p.raw.send(&m);
    }

    /// Takes a wake-up, if one came.
    fn take_wake(&mut self) -> bool {
        let n = self.woken.0.load(Ordering::SeqCst);
        let new = n > self.seen;
        self.seen = n;
        new
    }

    /// One step of the engine (and the budget hand-over when woken), then
    /// one of the raw peer; true if anything moved.
    fn step(&mut self) -> bool {
        let mut busy = false;
        if self.take_wake() {
            busy |= self
                .p
                .side
                .conn
                .handle_read_budget(self.p.now, &mut self.p.side.prov);
        }
        busy |= self.p.side.step(self.p.now);
        busy |= self.p.raw.poll();
        busy | (self.p.raw.prov.pending_work() + self.p.side.prov.inner().pending_work() > 0)
    }

    fn xids(&mut self) -> Vec<u32> {
        take_calls(&mut self.p.side.events)
            .iter()
            .map(|c| c.xid)
            .collect()
    }
}

/// Steps every connection in turn until nothing moves, checking the
/// budget after every step.
fn run(conns: &mut [&mut Conn], budget: &ReadSinkBudget) {
    let mut idle = 0;
    for _ in 0..100_000 {
        let mut busy = false;
        for c in conns.iter_mut() {
            busy |= c.step();
            assert!(budget.in_use() <= budget.limit());
        }
        if busy {
            idle = 0;
        } else {
            idle += 1;
            if idle >= 2 {
                return;
            }
        }
    }
    panic!("does not quiesce");
}

const K: usize = 100_000;

#[test]
fn two_connections_share_one_budget_first_come_first_served() {
    let budget = ReadSinkBudget::new(2 * K as u64);
    let mut a = Conn::new(&budget, FaultConfig::default());
    let mut b = Conn::new(&budget, FaultConfig::default());
    let args: Vec<Vec<u8>> = (0..6).map(|k| data(K + k, k as u8)).collect();
    // A: two calls that fill the budget, then a third; B's call arrives
    // between A's second and third.
    a.send(1, &args[0]);
    a.send(2, &args[1][..K]);
    // The engine takes both: they get their budget and their Reads go out,
    // not answered yet (the raw peer only transmitted its Sends).
    a.p.raw.poll();
    a.p.side.step(a.p.now);
    assert_eq!(budget.in_use(), 2 * K as u64);
    assert_eq!(budget.waiting(), 0);
    b.send(10, &args[2]);
    b.p.raw.poll();
    b.p.side.step(b.p.now);
    // B's call (K + 2) does not fit: it waits, woken later.
    assert_eq!(budget.waiting(), 1);
    assert_eq!(b.p.side.conn.metrics().read_sink_waits, 1);
    assert!(b.p.side.conn.waits_for_read_budget());
    assert!(!b.take_wake());
    // A's third call fits nothing either, and queues behind B.
    a.send(3, &args[3][..10]);
    a.p.raw.poll();
    a.p.side.step(a.p.now);
    assert_eq!(budget.waiting(), 2);
    // Everything completes, B before A's third call, never above the
    // budget.
    let mut order = Vec::new();
    for _ in 0..1000 {
        let busy = a.step() | b.step();
        assert!(budget.in_use() <= budget.limit());
        for x in a.xids().into_iter().chain(b.xids()) {
            order.push(x);
        }
        if !busy && order.len() == 4 {
            break;
        }
    }
    assert_eq!(order.len(), 4, "every call delivered: {order:?}");
    let pos = |x| order.iter().position(|&o| o == x).unwrap();
    assert!(pos(10) < pos(3), "B's call was first in line: {order:?}");
    assert!(b.seen >= 1, "B was woken");
    assert_eq!(budget.in_use(), 0);
    assert_eq!(budget.waiting(), 0);
    assert!(budget.high_water() <= 2 * K as u64);
    assert!(a.p.raw.got.is_empty() && b.p.raw.got.is_empty());
}

#[test]
fn many_calls_on_three_connections_never_exceed_the_budget_and_all_complete() {
    let limit = 250_000u64;
    let budget = ReadSinkBudget::new(limit);
    let mut cs: Vec<Conn> = (0..3)
        .map(|_| Conn::new(&budget, FaultConfig::default()))
        .collect();
    let mut sent = vec![Vec::new(); 3];
    for k in 0..8u32 {
        for (i, c) in cs.iter_mut().enumerate() {
            let arg = data(
                40_000 + 17_000 * ((k as usize + i) % 9),
                (k + i as u32) as u8,
            );
            let xid = 100 * i as u32 + k;
            c.send(xid, &arg);
            sent[i].push((xid, arg));
        }
    }
    let mut refs: Vec<&mut Conn> = cs.iter_mut().collect();
    run(&mut refs, &budget);
    for (i, c) in cs.iter_mut().enumerate() {
        let calls = take_calls(&mut c.p.side.events);
        assert_eq!(calls.len(), 8, "connection {i}");
        for (call, (xid, arg)) in calls.iter().zip(&sent[i]) {
            assert_eq!(call.xid, *xid);
            assert_eq!(&call.message.flatten()[44..44 + arg.len()], &arg[..]);
        }
        assert!(!c.p.side.conn.is_closed());
    }
    assert!(budget.high_water() <= limit);
    assert!(budget.waits() > 0, "the budget was contended");
    assert_eq!((budget.in_use(), budget.waiting()), (0, 0));
}

#[test]
fn a_large_call_is_not_starved_and_a_lost_connection_gives_its_share_back() {
    let budget = ReadSinkBudget::new(100_000);
    // A's Reads of 60 000 octets are never answered.
    let stall = FaultConfig {
        stall_read_len: Some(60_000),
        ..FaultConfig::default()
    };
    let mut a = Conn::new(&budget, stall);
    let mut b = Conn::new(&budget, FaultConfig::default());
    let mut c = Conn::new(&budget, FaultConfig::default());
    a.send(1, &data(60_000, 1));
    run(&mut [&mut a], &budget);
    assert_eq!(budget.in_use(), 60_000);
    // B needs 90 000: waits. C's small calls would fit beside A but wait
    // behind B.
    b.send(2, &data(90_000, 2));
    for k in 0..3 {
        c.send(10 + k, &data(5_000, 3));
    }
    run(&mut [&mut b, &mut c], &budget);
    assert!(b.xids().is_empty());
    assert!(c.xids().is_empty(), "C does not overtake B");
    assert_eq!(budget.waiting(), 2);
    // A's connection ends (here: the peer goes away): its share comes back,
    // B is woken and served, then C.
    a.p.side.conn.close(&mut a.p.side.prov);
    assert_eq!(budget.in_use(), 0);
    assert_eq!(b.woken.0.load(Ordering::SeqCst), 1, "B is woken");
    assert_eq!(c.woken.0.load(Ordering::SeqCst), 0, "C is not (yet)");
    run(&mut [&mut a, &mut b, &mut c], &budget);
    assert_eq!(b.xids(), vec![2]);
    assert_eq!(c.xids(), vec![10, 11, 12]);
    assert_eq!((budget.in_use(), budget.waiting()), (0, 0));
}

#[test]
fn a_failed_read_and_a_dropped_engine_give_their_share_back() {
    let budget = ReadSinkBudget::new(100_000);
    // A: its Read fails (bad STag at the peer): the connection ends.
    let bad = FaultConfig {
        remote_access_error_chance: 1.0,
        ..FaultConfig::default()
    };
    let mut a = Conn::new(&budget, bad);
    a.send(1, &data(80_000, 1));
    run(&mut [&mut a], &budget);
    assert!(a.p.side.conn.is_closed());
    assert_eq!(budget.in_use(), 0);
    // B holds 80 000 (never answered); C waits; B's engine is dropped.
    let stall = FaultConfig {
        stall_read_len: Some(80_000),
        ..FaultConfig::default()
    };
    let mut b = Conn::new(&budget, stall);
    let mut c = Conn::new(&budget, FaultConfig::default());
    b.send(2, &data(80_000, 2));
    run(&mut [&mut b], &budget);
    assert_eq!(budget.in_use(), 80_000);
    c.send(3, &data(50_000, 3));
    run(&mut [&mut c], &budget);
    assert_eq!(budget.waiting(), 1);
    drop(b);
    assert_eq!(budget.in_use(), 0);
    run(&mut [&mut c], &budget);
    assert_eq!(c.xids(), vec![3]);
    // The waiting engine dropped while queued leaves the queue too.
    let mut d = Conn::new(&budget, stall);
    let mut e = Conn::new(&budget, FaultConfig::default());
    d.send(4, &data(80_000, 4));
    run(&mut [&mut d], &budget);
    e.send(5, &data(50_000, 5));
    run(&mut [&mut e], &budget);
    assert_eq!(budget.waiting(), 1);
    drop(e);
    assert_eq!(budget.waiting(), 0);
    drop(d);
    assert_eq!((budget.in_use(), budget.waiting()), (0, 0));
}

#[test]
fn a_call_that_can_never_fit_the_shared_budget_gets_err_chunk() {
    let budget = ReadSinkBudget::new(64 * 1024);
    let mut a = Conn::new(&budget, FaultConfig::default());
    a.send(7, &data(K, 1));
    run(&mut [&mut a], &budget);
    // xid, vers 1, grant 64, RDMA_ERROR, ERR_CHUNK: as for a call larger
    // than the connection's own budget.
    assert_eq!(a.p.raw.got, vec![words(&[7, 1, 64, 4, 2])]);
    assert!(a.xids().is_empty());
    assert!(!a.p.side.conn.is_closed());
    assert_eq!(budget.waiting(), 0);
    a.send(8, &data(1000, 2));
    run(&mut [&mut a], &budget);
    assert_eq!(a.xids(), vec![8]);
}
