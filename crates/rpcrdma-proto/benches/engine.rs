//! Engine cost of one small RPC-over-RDMA v1 round trip (criterion).
//!
//! A client [`Connection`] and a server [`Connection`] over the in-memory
//! provider pair ([`rpcrdma_proto::provider::mem`]), established with their
//! RFC 8797 private data, then one NULL round trip per iteration:
//!
//! client `start_call` (a 40-octet RPC call) → client `poll_completions`
//! (the in-memory provider transmits when its poster is polled) → server
//! `poll_completions` / `handle_completion` → `Event::CallReceived` →
//! server `send_reply` (a 24-octet accepted reply) → server
//! `poll_completions` (transmits; the call's Ack) → client `poll_completions` /
//! `handle_completion` (the Send's completion and the reply's Receive) →
//! `Event::ReplyReceived` → server `poll_completions` (its reply Send
//! completes).
//!
//! * `null_inline`: `reply_max` 256, so no chunk at all (RDMA_MSG both
//!   ways, three empty chunk lists);
//! * `null_reply_chunk`: `reply_max` 1 MiB + 4 KiB as the `rpcrdma` client
//!   sends by default, so every call also offers a Reply chunk (registered
//!   from the sink pool), which the server echoes unused and the client
//!   invalidates locally before delivering the reply;
//! * `null_reply_chunk_swi`: the same with the server's RFC 8797 R flag set
//!   (both ends set it), so the reply comes by Send With Invalidate and the
//!   client posts no Local Invalidate.
//!
//! What is measured is the engine plus the in-memory provider (which copies
//! each message into a `Vec` on its "wire" and keeps its own queues), never
//! a socket or a clock. Before timing, the bench runs 10,000 round trips
//! of each kind under a counting global allocator and prints the heap
//! allocations per round trip (client and server together; 4 of them are
//! the bench building the call and reply messages, as an upper layer
//! would: two `Vec<Piece>` and two `Vec<u8>`).
//!
//! Run: `CARGO_BUILD_JOBS=1 taskset -c 1 cargo bench -p rpcrdma-proto
//! --bench engine -- --warm-up-time 1 --measurement-time 3`. Compare old
//! and new in the same session: `--save-baseline old` on the old commit,
//! then `--baseline old` on the new one, and again in the other order.
//! On a loaded machine, `ENGINE_BENCH_BATCHES=200` (see [`batches`]) on the
//! two binaries alternately is steadier than criterion's mean.
//!
//! Figures of 2026-11-21 (2 cores shared with 3 other workers compiling;
//! fastest of 300 batches, old/new alternately, three rounds each), ns per
//! round trip, client and server together:
//!
//! | kind | cadc562 (first bench) | 783d763 | allocations |
//! |---|---|---|---|
//! | `null_inline` | 1401..1469 | 1166..1189 (-17 %) | 8 -> 8 |
//! | `null_reply_chunk` | 1691..1749 | 1404..1430 (-17 %) | 11 -> 8 |
//! | `null_reply_chunk_swi` | - | 1286..1365 | 8 |
//!
//! Of the 8 allocations, 4 are this bench building the messages, 2 the
//! in-memory provider's copies on its wire, 2 the received messages handed
//! over as `Vec<u8>` (`IncomingCall::message`, `Reply::message`). A
//! profile (`perf record -e cpu-clock --call-graph dwarf`, samples under
//! `Rig::round_trip`) puts the in-memory provider at about 43 % of a round
//! trip, the engine (codecs included) at 48 %, the bench itself at 7 %.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rpcrdma_proto::engine::{Config, Connection, Event, OutgoingCall, OutgoingReply, Piece};
use rpcrdma_proto::provider::mem::{self, MemConfig, MemProvider};
use rpcrdma_proto::provider::{Completion, ConnectionEvent, Provider};

/// Counts every allocation (and reallocation) made by the process.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Set while one traced round trip runs (`ENGINE_BENCH_TRACE_ALLOCS=1`):
/// every allocation prints where it comes from.
static TRACE: AtomicBool = AtomicBool::new(false);

thread_local! {
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
}

fn trace_alloc() {
    if !TRACE.load(Ordering::Relaxed) || IN_TRACE.with(Cell::get) {
        return;
    }
    IN_TRACE.with(|t| t.set(true));
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = bt
        .lines()
        .filter(|l| l.contains("rpcrdma_proto::") || l.contains("engine::Rig"))
        .map(str::trim)
        .take(3)
        .collect();
    eprintln!("  alloc: {}", frames.join(" <- "));
    IN_TRACE.with(|t| t.set(false));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        trace_alloc();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        trace_alloc();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        trace_alloc();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A NULL call: xid, CALL, rpcvers 2, prog 100003, vers 3, proc 0,
/// AUTH_NONE credential and verifier (40 octets).
fn call_msg() -> Vec<u8> {
    let words: [u32; 10] = [0, 0, 2, 100_003, 3, 0, 0, 0, 0, 0];
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// An accepted, successful reply without results: xid, REPLY,
/// MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS (24 octets).
fn reply_msg() -> Vec<u8> {
    let words: [u32; 6] = [0, 1, 0, 0, 0, 0];
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

struct Rig {
    now: Instant,
    c: Connection,
    cp: MemProvider,
    s: Connection,
    sp: MemProvider,
    comps: Vec<Completion>,
    call: Vec<u8>,
    reply: Vec<u8>,
    reply_max: u32,
}

impl Rig {
    fn new(reply_max: u32, server_r: bool) -> Rig {
        let now = Instant::now();
        let ccfg = Config::client();
        let mut scfg = Config::server();
        scfg.remote_invalidation = server_r;
        let mut c = Connection::new(ccfg.clone());
        let mut s = Connection::new(scfg.clone());
        let (mut cp, mut sp) = mem::pair(MemConfig::DEFAULT);
        cp.connect(ccfg.connect_params()).expect("connect");
        assert!(matches!(
            sp.poll_event(),
            Some(ConnectionEvent::ConnectRequest { .. })
        ));
        s.prepare_receives(&mut sp);
        sp.accept(scfg.connect_params()).expect("accept");
        for (conn, prov) in [(&mut c, &mut cp), (&mut s, &mut sp)] {
            while let Some(ev) = prov.poll_event() {
                if let ConnectionEvent::Established(info) = ev {
                    conn.handle_established(now, prov, &info);
                }
            }
        }
        let mut rig = Rig {
            now,
            c,
            cp,
            s,
            sp,
            comps: Vec::with_capacity(16),
            call: call_msg(),
            reply: reply_msg(),
            reply_max,
        };
        // Warm up: credits granted, pools filled.
        for _ in 0..64 {
            rig.round_trip();
        }
        assert!(rig.c.credits() > 1);
        rig
    }

    fn poll(
        conn: &mut Connection,
        prov: &mut MemProvider,
        comps: &mut Vec<Completion>,
        now: Instant,
    ) {
        comps.clear();
        prov.poll_completions(comps);
        for c in comps.drain(..) {
            conn.handle_completion(now, prov, c);
        }
    }

    /// One NULL round trip; panics unless it completes.
    fn round_trip(&mut self) {
        let now = self.now;
        let call = OutgoingCall {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                self.call.clone().into(),
            )]),
            reply_max: self.reply_max,
            ddp_results: Vec::new(),
        };
        self.c
            .start_call(now, &mut self.cp, call)
            .expect("start_call");
        // The in-memory provider transmits when its poster is polled.
        Self::poll(&mut self.c, &mut self.cp, &mut self.comps, now);
        Self::poll(&mut self.s, &mut self.sp, &mut self.comps, now);
        let Some(Event::CallReceived(ic)) = self.s.poll_event() else {
            panic!("no call received");
        };
        black_box(&ic.message);
        let reply = OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                self.reply.clone().into(),
            )]),
        };
        self.s
            .send_reply(now, &mut self.sp, ic.handle, reply)
            .expect("send_reply");
        drop(ic);
        Self::poll(&mut self.s, &mut self.sp, &mut self.comps, now);
        // A Local Invalidate (Reply chunk offered) completes at the next
        // poll: at most two.
        let mut got = false;
        for _ in 0..2 {
            Self::poll(&mut self.c, &mut self.cp, &mut self.comps, now);
            while let Some(ev) = self.c.poll_event() {
                match ev {
                    Event::ReplyReceived(r) => {
                        black_box(&r.message);
                        got = true;
                    }
                    Event::CreditsChanged { .. } => {}
                    other => panic!("expected a reply, got {other:?}"),
                }
            }
            if got {
                break;
            }
        }
        assert!(got, "no reply");
        Self::poll(&mut self.s, &mut self.sp, &mut self.comps, now);
        debug_assert!(self.s.poll_event().is_none());
    }
}

fn count_allocs(name: &str, reply_max: u32, server_r: bool) {
    let mut rig = Rig::new(reply_max, server_r);
    const N: u64 = 10_000;
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..N {
        rig.round_trip();
    }
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    if std::env::var_os("ENGINE_BENCH_TRACE_ALLOCS").is_some() {
        eprintln!("engine/{name}: the allocations of one round trip:");
        TRACE.store(true, Ordering::Relaxed);
        rig.round_trip();
        TRACE.store(false, Ordering::Relaxed);
    }
    eprintln!(
        "engine/{name}: {:.2} heap allocations per round trip (client + server, 4 of them the bench's messages)",
        n as f64 / N as f64
    );
}

/// `ENGINE_BENCH_BATCHES=N`: instead of criterion, N batches of 1,000
/// round trips per kind; prints the fastest batch and the median (ns per
/// round trip). The fastest batch is the least disturbed by other
/// processes on a shared machine: compare old and new binaries by it,
/// run alternately.
fn batches(kinds: &[(&str, u32, bool)]) -> bool {
    let Some(n) = std::env::var("ENGINE_BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return false;
    };
    for &(name, reply_max, server_r) in kinds {
        let mut rig = Rig::new(reply_max, server_r);
        let mut ns: Vec<f64> = (0..n.max(1))
            .map(|_| {
                let t = Instant::now();
                for _ in 0..1000 {
                    rig.round_trip();
                }
                t.elapsed().as_nanos() as f64 / 1000.0
            })
            .collect();
        ns.sort_by(f64::total_cmp);
        println!(
            "engine/{name}: fastest batch {:.0} ns, median {:.0} ns per round trip",
            ns[0],
            ns[ns.len() / 2]
        );
    }
    true
}

fn bench_engine(c: &mut Criterion) {
    let kinds = [
        ("null_inline", 256u32, false),
        ("null_reply_chunk", (1 << 20) + 4096, false),
        ("null_reply_chunk_swi", (1 << 20) + 4096, true),
    ];
    if batches(&kinds) {
        return;
    }
    for (name, reply_max, server_r) in kinds {
        count_allocs(name, reply_max, server_r);
    }
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(1));
    for (name, reply_max, server_r) in kinds {
        let mut rig = Rig::new(reply_max, server_r);
        g.bench_function(name, |b| b.iter(|| rig.round_trip()));
    }
    g.finish();
}

criterion_group!(benches, bench_engine);
criterion_main!(benches);
