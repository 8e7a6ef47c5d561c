//! Per-message CPU cost of the sans-IO queue pair on the small-Send path
//! (criterion).
//!
//! Two established [`QueuePair`]s joined in memory (no sockets, no MPA
//! exchange): one ping-pong is A posting a 72-octet Send, B receiving it
//! into a posted 4 KiB Receive, polling, reposting the Receive, posting a
//! 40-octet reply Send, and A receiving and polling it — the RPC NULL call
//! pattern (one FPDU each way). `transmit` writes into a reused buffer (the
//! stand-in for `write_vectored`), whose bytes are then fed to the peer's
//! `handle_input` in one piece. Measured with MPA CRC off (the default)
//! and on.
//!
//! Before measuring, the heap allocations of one ping-pong (steady state)
//! are counted with a counting global allocator and printed, and so is the
//! fastest of 200 batches of 1000 ping-pongs (a figure that other load on
//! the CPU disturbs much less than criterion's mean; `--bench none` prints
//! only these lines).
//!
//! Run: `CARGO_BUILD_JOBS=1 cargo bench -p rpcrdma-iwarp --bench qp_small
//! -- --warm-up-time 1 --measurement-time 3`. Old against new: build the
//! bench at both commits (`cargo bench --no-run`), copy each
//! `target/release/deps/qp_small-*` binary aside and run them alternately,
//! pinned (`taskset -c 1 ./qp_small-old --bench ...`, A B A B).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::io::IoSlice;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_proto::provider::{
    Access, Completion, MemoryRegion, Opcode, RecvWr, SendOp, SendWr, Status,
};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to `System`, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CALL_LEN: u32 = 72;
const REPLY_LEN: u32 = 40;
const RECV_LEN: u32 = 4096;

struct Side {
    qp: QueuePair,
    send_mr: MemoryRegion,
    recv_mr: MemoryRegion,
}

impl Side {
    fn new(key: u8, p: StreamParams) -> Side {
        let mut qp = QueuePair::new(rpcrdma_iwarp::cm::DEFAULT_CAPS, key);
        qp.establish(p);
        let send_mr = qp
            .register(vec![0x5a; 4096].into_boxed_slice(), Access::NONE)
            .unwrap();
        let recv_mr = qp
            .register(vec![0; 4096].into_boxed_slice(), Access::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(RecvWr {
            wr_id: 100,
            sge: recv_mr.sge(0, RECV_LEN),
        })
        .unwrap();
        Side {
            qp,
            send_mr,
            recv_mr,
        }
    }

    fn send(&mut self, len: u32) {
        self.qp
            .post_send(SendWr {
                wr_id: 1,
                op: SendOp::Send { solicited: false },
                sges: [self.send_mr.sge(0, len)].into_iter().collect(),
            })
            .unwrap();
    }

    fn transmit(&mut self, wire: &mut Vec<u8>) {
        wire.clear();
        self.qp
            .transmit(|s: &[IoSlice<'_>]| {
                let mut n = 0;
                for x in s {
                    wire.extend_from_slice(x);
                    n += x.len();
                }
                Ok(n)
            })
            .unwrap();
    }

    /// Reads `wire`, confirms, polls; reposts the Receive if one completed.
    /// Returns (receives, sends) completed.
    fn receive(&mut self, wire: &[u8], cq: &mut Vec<Completion>) -> (u32, u32) {
        let n = self.qp.handle_input(wire);
        debug_assert_eq!(n, wire.len());
        self.qp.confirm_transmitted();
        cq.clear();
        self.qp.poll_completions(cq);
        let (mut r, mut s) = (0, 0);
        for c in cq.iter() {
            debug_assert_eq!(c.status, Status::Success);
            if c.opcode == Opcode::Recv {
                r += 1;
            } else {
                s += 1;
            }
        }
        for _ in 0..r {
            self.qp
                .post_recv(RecvWr {
                    wr_id: 100,
                    sge: self.recv_mr.sge(0, RECV_LEN),
                })
                .unwrap();
        }
        (r, s)
    }
}

struct Pair {
    a: Side,
    b: Side,
    wire: Vec<u8>,
    cq: Vec<Completion>,
}

impl Pair {
    fn new(crc: bool) -> Pair {
        let p = StreamParams {
            crc,
            ..StreamParams::DEFAULT
        };
        Pair {
            a: Side::new(0, p),
            b: Side::new(0x80, p),
            wire: Vec::with_capacity(1 << 16),
            cq: Vec::with_capacity(16),
        }
    }

    fn ping_pong(&mut self) {
        self.a.send(CALL_LEN);
        self.a.transmit(&mut self.wire);
        let (r, _) = self.b.receive(&self.wire, &mut self.cq);
        assert_eq!(r, 1);
        self.b.send(REPLY_LEN);
        self.b.transmit(&mut self.wire);
        let (r, _) = self.a.receive(&self.wire, &mut self.cq);
        assert_eq!(r, 1);
    }
}

fn bench(c: &mut Criterion) {
    for crc in [false, true] {
        let mut p = Pair::new(crc);
        for _ in 0..1000 {
            p.ping_pong();
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..1000 {
            p.ping_pong();
        }
        let after = ALLOCS.load(Ordering::Relaxed);
        println!(
            "qp_small crc={crc}: {:.2} heap allocations per ping-pong",
            (after - before) as f64 / 1000.0
        );
        // The fastest of many short batches: robust against the other
        // processes sharing the CPU (criterion's mean is not).
        let mut best = f64::MAX;
        for _ in 0..200 {
            let t = std::time::Instant::now();
            for _ in 0..1000 {
                black_box(&mut p).ping_pong();
            }
            best = best.min(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        println!("qp_small crc={crc}: fastest batch {best:.1} ns per ping-pong");
        let name = if crc { "ping_pong_crc" } else { "ping_pong" };
        c.bench_function(name, |bch| bch.iter(|| black_box(&mut p).ping_pong()));
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
