//! Fault campaign over real sockets: mixed calls of the test program from
//! several clients through a cutting TCP proxy (`tests/fault/`) to one
//! `RdmaServer` in this process. The proxy follows the MPA/DDP/RDMAP
//! stream of every connection and cuts it (FIN or RST) at points drawn
//! from a seed: inside the MPA Request or Reply, right after the RTR,
//! inside an FPDU, between an RDMA Read Request and its Read Response,
//! between RDMA Write segments, right after a call, after a reply's first
//! octets (`tests/fault/plan.rs`). The clients reconnect and re-send the
//! interrupted calls with their XIDs; the server's duplicate-reply cache
//! keeps WRITE (the non-idempotent procedure) executed once. Calls with
//! an odd XID take the server's asynchronous handler path.
//!
//! Asserted:
//! * every call completes exactly once, successfully, with the right data
//!   (ECHO and READ data compared, WRITE length and CRC32C compared);
//! * WRITE executed exactly once per call (by XID: the handler counts);
//!   NULL, ECHO and READ (uncached, idempotent) executed again no more
//!   often in all than calls were re-sent;
//! * every shape of call was made (Read, Write and Reply chunks, Long
//!   Calls and Replies) and the proxy cut connections of every kind (at
//!   least one cut per 100 calls), so the campaign is not vacuous;
//! * after the warm-up and after each round of the campaign, at rest: the
//!   server has exactly one live connection per client, every connection
//!   (server and client) holds nothing but its receives and pooled buffers
//!   (`Resources::at_rest`) and exactly that many registrations, and the
//!   shared Read-sink budget is back to 0; once the clients are gone, the
//!   server has no connection and the budget is 0;
//! * VmRSS after the campaign is within the tolerance of its value after
//!   the warm-up ([`rss_tolerance_kib`]).
//!
//! Bounded retransmission counts only transmissions that ended in the
//! call's own timeout, as Linux (`xprt_adjust_timeout`): quick connection
//! losses never fail a call. (When every loss counted, a call here failed
//! with `NoReply` about once in 130 runs, and often when setup cuts
//! followed each other: `FAULT_SEED=302`, `FAULT_SEED=600
//! FAULT_CALLS=50000 FAULT_CLIENTS=8`.)
//!
//! `#[ignore]`d (a minute of two cores): run it with
//! `scripts/fault-campaign` or
//! `cargo test --release -p rpcrdma --test fault_campaign -- --ignored --nocapture`.
//! Settings from the environment: `FAULT_SEED` (printed; the calls and
//! every connection's cut plan follow from it, the interleaving is the
//! scheduler's), `FAULT_CALLS` (10000), `FAULT_WARMUP` (2000),
//! `FAULT_ROUNDS` (5: the campaign's calls in rounds, each ending at rest
//! with a VmRSS sample), `FAULT_CLIENTS` (6), `FAULT_DEPTH` (4 calls in
//! flight per client), `FAULT_BLOCKING` (0; 1: the server in blocking
//! mode, a thread per connection), `FAULT_READ_BUDGET` (1.25 MiB: the
//! server's shared Read-sink budget, just above the largest call's sinks
//! (1 MiB and a header), so that calls wait for it while connections are
//! cut).

mod fault;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fault::plan::{CutKind, CutMode, Plan};
use fault::proxy::{Proxy, ProxyStats};
use rpcrdma::rdma::{
    connect_client, RdmaClientConfig, RdmaClientTransport, RdmaServer, RdmaServerConfig, RdmaStatus,
};
use rpcrdma::testprog::{self, PROC_ECHO, PROC_NULL, PROC_READ, PROC_WRITE, TEST_PROG, TEST_VERS};
use rpcrdma::{
    CallContext, Client, ClientConfig, Handler, HandlerError, HandlerFuture, Message, Metrics,
    Server,
};
use rpcrdma_proto::provider::fault::SplitMix64;

/// Campaign settings (from the environment).
#[derive(Clone, Copy, Debug)]
struct Settings {
    seed: u64,
    calls: usize,
    warmup: usize,
    clients: usize,
    depth: usize,
    /// The server in blocking mode (a thread per connection).
    blocking: bool,
    /// The server's Read-sink budget, octets.
    read_budget: u64,
    /// The campaign's calls in this many rounds, each ending at rest.
    rounds: usize,
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}

impl Settings {
    fn from_env() -> Settings {
        let seed = match std::env::var("FAULT_SEED") {
            Ok(v) => {
                let v = v.trim();
                let parsed = match v.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => v.parse(),
                };
                parsed.unwrap_or_else(|_| panic!("FAULT_SEED={v}: not a number"))
            }
            Err(_) => SplitMix64(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64,
            )
            .next_u64(),
        };
        Settings {
            seed,
            calls: env_or("FAULT_CALLS", 10_000),
            warmup: env_or("FAULT_WARMUP", 2_000),
            clients: env_or("FAULT_CLIENTS", 6).clamp(1, 255),
            depth: env_or("FAULT_DEPTH", 4).max(1),
            blocking: env_or("FAULT_BLOCKING", 0) != 0,
            read_budget: env_or("FAULT_READ_BUDGET", 5 << 18) as u64,
            rounds: env_or("FAULT_ROUNDS", 5).max(1),
        }
    }
}

/// One call of the test program.
#[derive(Clone, Copy, Debug)]
enum Call {
    Null,
    Echo { len: u32, seed: u32 },
    Read { len: u32, seed: u32 },
    Write { len: u32, seed: u32 },
}

/// Octets of a call's data: tiny (inline), up to the 4 KiB inline
/// threshold, just above it (Long Calls / Replies, small chunks), and
/// log-uniform from 8 KiB to 1 MiB (large Read, Write and Reply chunks).
fn draw_len(rng: &mut SplitMix64) -> u32 {
    let r = rng.below(100);
    let len = match r {
        0..15 => rng.below(65),
        15..40 => 65 + rng.below(4000 - 65),
        40..55 => 4000 + rng.below(5000),
        _ => {
            let bits = 13 + rng.below(7);
            let lo = 1u64 << bits;
            let hi = if bits == 19 { (1 << 20) + 1 } else { lo * 2 };
            lo + rng.below(hi - lo)
        }
    };
    len as u32
}

/// `n` calls: NULL 10 %, ECHO 25 %, READ 30 %, WRITE 35 %.
fn draw_calls(seed: u64, n: usize) -> Vec<Call> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| {
            let p = rng.below(100);
            let len = draw_len(&mut rng);
            let seed = rng.next_u64() as u32;
            match p {
                0..10 => Call::Null,
                10..35 => Call::Echo { len, seed },
                35..65 => Call::Read { len, seed },
                _ => Call::Write { len, seed },
            }
        })
        .collect()
}

/// Runs one call and checks its result.
async fn run_call(c: &Client, call: Call) -> Result<(), String> {
    let e = |e: rpcrdma::RpcError| e.to_string();
    match call {
        Call::Null => testprog::null(c).await.map_err(e),
        Call::Echo { len, seed } => {
            let data = testprog::pattern(seed, len as usize);
            let got = testprog::echo(c, &data).await.map_err(e)?;
            (got[..] == data[..])
                .then_some(())
                .ok_or(format!("ECHO of {len}: {} octets, other data", got.len()))
        }
        Call::Read { len, seed } => {
            let got = testprog::read(c, len, seed).await.map_err(e)?;
            (got[..] == testprog::pattern(seed, len as usize)[..])
                .then_some(())
                .ok_or(format!("READ of {len}: {} octets, other data", got.len()))
        }
        Call::Write { len, seed } => {
            let data = testprog::pattern(seed, len as usize);
            let got = testprog::write(c, &data).await.map_err(e)?;
            let want = (len, crc32c::crc32c(&data));
            (got == want)
                .then_some(())
                .ok_or(format!("WRITE of {len}: server saw {got:?}, sent {want:?}"))
        }
    }
}

/// Executions of each (procedure, XID) by the server's handler.
type Executions = Arc<Mutex<HashMap<(u32, u32), u32>>>;

/// The test program's handler, counting executions.
struct Counting(Executions);

impl Counting {
    fn run(&self, ctx: &CallContext) -> Result<Message, HandlerError> {
        *self
            .0
            .lock()
            .unwrap()
            .entry((ctx.proc, ctx.xid))
            .or_default() += 1;
        testprog::test_handler_ready(ctx)
    }
}

/// Calls with an odd XID take the server's asynchronous path (the handler
/// waits once, so its reply comes from a task); the others are answered
/// inline.
impl Handler for Counting {
    fn call(&self, ctx: CallContext) -> HandlerFuture {
        let ex = Counting(self.0.clone());
        Box::pin(async move {
            tokio::task::yield_now().await;
            ex.run(&ctx)
        })
    }
    fn call_ready(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
        ctx.xid.is_multiple_of(2).then(|| self.run(ctx))
    }
}

/// How one call ended.
#[derive(Clone, Debug)]
struct Outcome {
    result: Result<(), String>,
    /// The client that made it.
    client: usize,
    start: Instant,
    elapsed: Duration,
}

/// A failed call, for the report.
struct Failure {
    what: String,
    client: usize,
    start: Instant,
    end: Instant,
}

/// Runs `calls` from every client, `depth` at a time each; one outcome per
/// call (a second one would panic).
async fn run_phase(clients: &[Arc<Client>], depth: usize, calls: Arc<Vec<Call>>) -> Vec<Outcome> {
    let next = Arc::new(AtomicUsize::new(0));
    let out = Arc::new(Mutex::new(vec![None::<Outcome>; calls.len()]));
    let mut tasks = tokio::task::JoinSet::new();
    for (client, c) in clients.iter().enumerate() {
        for _ in 0..depth {
            let (c, calls, next, out) = (c.clone(), calls.clone(), next.clone(), out.clone());
            tasks.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&call) = calls.get(i) else { break };
                    let t0 = Instant::now();
                    let result = run_call(&c, call).await;
                    let o = Outcome {
                        result,
                        client,
                        start: t0,
                        elapsed: t0.elapsed(),
                    };
                    let prev = out.lock().unwrap()[i].replace(o);
                    assert!(prev.is_none(), "call {i} finished twice");
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("a call task panicked");
    }
    let out = std::mem::take(&mut *out.lock().unwrap());
    out.into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| panic!("call {i} never finished")))
        .collect()
}

/// VmRSS of this process, KiB.
fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// What is wrong with one connection at rest (empty: nothing).
fn at_rest_problems(who: &str, st: &RdmaStatus, out: &mut Vec<String>) {
    let r = &st.resources;
    if !r.at_rest() {
        out.push(format!("{who}: not at rest: {r:?}"));
    }
    if st.registered_regions != Some(r.regions_at_rest() as u32) {
        out.push(format!(
            "{who}: {:?} registrations, {} expected at rest ({r:?})",
            st.registered_regions,
            r.regions_at_rest()
        ));
    }
    if st.outstanding != 0 || st.queued != 0 {
        out.push(format!(
            "{who}: {} calls outstanding, {} queued",
            st.outstanding, st.queued
        ));
    }
}

/// Waits (up to 30 s) until the server has `conns` live connections, all
/// at rest, the clients' connections too, and the Read-sink budget is 0;
/// otherwise the problems seen last.
async fn settle(
    rdma: &RdmaServer,
    transports: &[Arc<RdmaClientTransport>],
    conns: usize,
) -> Result<Duration, Vec<String>> {
    let t0 = Instant::now();
    loop {
        let mut p = Vec::new();
        let server = rdma.connections();
        if server.len() != conns {
            p.push(format!(
                "server: {} live connections, {conns} expected",
                server.len()
            ));
        }
        for (i, st) in server.iter().enumerate() {
            at_rest_problems(&format!("server connection {i}"), st, &mut p);
        }
        for (i, t) in transports.iter().enumerate() {
            at_rest_problems(&format!("client {i}"), &t.status(), &mut p);
        }
        let budget = rdma.read_budget().expect("the default server has a budget");
        if budget.in_use() != 0 || budget.waiting() != 0 {
            p.push(format!("Read-sink budget: {budget:?}"));
        }
        if p.is_empty() {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(p);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// VmRSS growth allowed from the rest point after the warm-up to the one
/// after the campaign: 25 % plus 32 MiB. Measured (seed 0x65, 60,000 calls,
/// a rest point every 5,000), what differs between rest
/// points is memory the process keeps for reuse, not what the calls left:
/// with `MALLOC_ARENA_MAX=2` (as `scripts/fault-campaign` runs it) the rest
/// points wander between 46 and 69 MiB, up and down, from 40 MiB after a
/// 1,000-call warm-up: each client connection keeps the chunk-sink
/// buffers (up to 32 MiB) and registered Send buffers (up to 1 MiB) its
/// last calls left, and a cut drops them. Without the arena cap glibc
/// gives the proxy's short-lived threads up to 16 arenas, each climbing to
/// its own high water, and the rest points climb for ~20,000 calls (51 to
/// 91 MiB). So this catches a leak of tens of MiB per 10,000 calls (a
/// leaked connection's buffers, a chunk per few cuts); smaller ones show
/// in a longer campaign (`FAULT_CALLS=100000`: the same tolerance against
/// ten times the leak). The exact checks are the registrations and the
/// budget at rest ([`settle`]).
fn rss_tolerance_kib(warm: u64) -> u64 {
    warm / 4 + 32 * 1024
}

fn summarize(name: &str, calls: &[Call], out: &[Outcome]) -> Vec<Failure> {
    let failed: Vec<Failure> = out
        .iter()
        .enumerate()
        .filter_map(|(i, o)| {
            let e = o.result.as_ref().err()?;
            Some(Failure {
                what: format!("{name} call {i} {:?} (client {}): {e}", calls[i], o.client),
                client: o.client,
                start: o.start,
                end: o.start + o.elapsed,
            })
        })
        .collect();
    let slow = out
        .iter()
        .filter(|o| o.elapsed > Duration::from_secs(5))
        .count();
    let max = out.iter().map(|o| o.elapsed).max().unwrap_or_default();
    println!(
        "{name}: {} calls, {} failed, {slow} slower than 5 s, slowest {:.3} s",
        out.len(),
        failed.len(),
        max.as_secs_f64()
    );
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a fault campaign of a minute or more: scripts/fault-campaign"]
async fn fault_campaign_over_real_sockets() {
    let s = Settings::from_env();
    println!("FAULT_SEED={:#x} {s:?}", s.seed);
    let started = Instant::now();

    let server = Server::default();
    let executions: Executions = Arc::default();
    server.register(TEST_PROG, TEST_VERS, Counting(executions.clone()));
    server.set_uncached(TEST_PROG, TEST_VERS, &[PROC_NULL, PROC_ECHO, PROC_READ]);
    let scfg = RdmaServerConfig {
        blocking: s.blocking,
        read_sink_budget: Some(s.read_budget),
        ..RdmaServerConfig::default()
    };
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", scfg)
        .await
        .unwrap();

    let stats = Arc::new(ProxyStats::default());
    let proxies: Vec<Proxy> = (0..s.clients)
        .map(|i| {
            let seed = s.seed;
            let planner = Box::new(move |n| Plan::draw(seed, i, n));
            Proxy::start(rdma.local_addr(), i, planner, stats.clone()).unwrap()
        })
        .collect();
    let metrics = Arc::new(Metrics::default());
    let mut clients = Vec::new();
    let mut transports = Vec::new();
    for (i, p) in proxies.iter().enumerate() {
        let mut cfg = RdmaClientConfig {
            metrics: Some(metrics.clone()),
            ..RdmaClientConfig::default()
        };
        // Disjoint XID ranges (16 M each): the handler counts executions
        // by XID.
        cfg.engine.first_xid = u32::try_from(i + 1).unwrap() << 24;
        // A lost reply is found in 20 s instead of 60 (none is expected).
        cfg.engine.call_timeout = Some(Duration::from_secs(20));
        let ccfg = ClientConfig {
            timeout: Duration::from_secs(120),
            ..ClientConfig::default()
        };
        let (c, t) = connect_client(p.addr(), ccfg, cfg).await.unwrap();
        clients.push(Arc::new(c));
        transports.push(t);
    }

    // Warm-up: the same mix (other calls), cuts included.
    let warm_calls = Arc::new(draw_calls(s.seed ^ 0x5741_524d, s.warmup));
    let warm = run_phase(&clients, s.depth, warm_calls.clone()).await;
    let mut failed = summarize("warm-up", &warm_calls, &warm);
    let rested = settle(&rdma, &transports, s.clients).await;
    let rss_warm = vm_rss_kib();
    println!("after warm-up: at rest {rested:?}, VmRSS {rss_warm} KiB");
    rested.expect("at rest after the warm-up");
    let cuts_warm = stats.cuts().len();

    // The campaign, with VmRSS sampled every 500 ms.
    let calls = Arc::new(draw_calls(s.seed, s.calls));
    let sampling = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            loop {
                sampling.lock().unwrap().push(vm_rss_kib());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // In rounds, each ending at rest with a VmRSS sample: the plateau.
    let t_campaign = Instant::now();
    let mut out = Vec::new();
    let mut rested = Ok(Duration::ZERO);
    let mut plateau = Vec::new();
    let per_round = s.calls.div_ceil(s.rounds).max(1);
    for round in calls.chunks(per_round) {
        out.extend(run_phase(&clients, s.depth, Arc::new(round.to_vec())).await);
        rested = settle(&rdma, &transports, s.clients).await;
        plateau.push(vm_rss_kib());
        if rested.is_err() {
            break;
        }
    }
    let campaign_time = t_campaign.elapsed();
    sampler.abort();
    failed.extend(summarize("campaign", &calls, &out));
    let rss_end = vm_rss_kib();
    let rss_max = sampling.lock().unwrap().iter().copied().max().unwrap_or(0);
    println!(
        "after the campaign ({:.1} s): at rest {rested:?}, VmRSS {rss_end} KiB (after warm-up \
         {rss_warm} KiB, at rest after each round {plateau:?}, max during {rss_max} KiB, \
         tolerance {} KiB)",
        campaign_time.as_secs_f64(),
        rss_tolerance_kib(rss_warm)
    );

    // The numbers.
    let cuts = stats.cuts();
    println!(
        "proxy: {} connections, {} MiB forwarded, {} cuts ({} in the warm-up)",
        stats.connections.load(Ordering::Relaxed),
        stats.octets.load(Ordering::Relaxed) >> 20,
        cuts.len(),
        cuts_warm
    );
    for kind in CutKind::ALL {
        println!(
            "  {kind:?}: {} FIN, {} RST",
            stats.count(kind, CutMode::Fin),
            stats.count(kind, CutMode::Rst)
        );
    }
    let statuses: Vec<RdmaStatus> = transports.iter().map(|t| t.status()).collect();
    let reconnects: u64 = statuses.iter().map(|st| st.connects - 1).sum();
    let calls_sent: u64 = statuses.iter().map(|st| st.engine.calls_sent).sum();
    let retransmits: u64 = statuses.iter().map(|st| st.engine.retransmits).sum();
    let cm = metrics.snapshot();
    let sm = server.metrics();
    println!(
        "clients: {reconnects} reconnects, {calls_sent} calls sent, {retransmits} of them \
         re-sent (runtime count {}), {} unmatched replies, {} connections lost",
        cm.retransmits, cm.replies_unmatched, cm.transport_errors
    );
    let tm = rdma.metrics().snapshot();
    let budget = rdma.read_budget().unwrap();
    println!(
        "server: {} calls received, {} replies sent, {} DRC hits, {} dropped in progress, \
         {} connections, {} lost; Read-sink budget {} KiB: {} waits, high water {} KiB",
        sm.calls_received,
        tm.replies_sent,
        sm.drc_hits,
        sm.drc_in_progress,
        tm.connections,
        tm.transport_errors,
        budget.limit() >> 10,
        budget.waits(),
        budget.high_water() >> 10
    );
    let nonzero: Vec<_> = tm.fields().into_iter().filter(|(_, v)| *v != 0).collect();
    println!("server transport counters: {nonzero:?}");
    let e = |f: fn(&RdmaStatus) -> u64| statuses.iter().map(f).sum::<u64>();
    let shapes = [
        ("Read chunks", e(|s| s.engine.read_chunks)),
        ("Write chunks", e(|s| s.engine.write_chunks)),
        ("Reply chunks", e(|s| s.engine.reply_chunks)),
        ("Long Calls", e(|s| s.engine.long_calls)),
        ("Long Replies", e(|s| s.engine.long_replies)),
    ];
    println!("clients offered: {shapes:?}");
    let ex = executions.lock().unwrap().clone();
    let writes_called = warm_calls
        .iter()
        .chain(calls.iter())
        .filter(|c| matches!(c, Call::Write { .. }))
        .count();
    let writes: Vec<u32> = ex
        .iter()
        .filter(|((p, _), _)| *p == PROC_WRITE)
        .map(|(_, &n)| n)
        .collect();
    let twice: Vec<_> = ex
        .iter()
        .filter(|((p, _), &n)| *p == PROC_WRITE && n > 1)
        .collect();
    let re_executed: u32 = ex
        .iter()
        .filter(|((p, _), _)| *p != PROC_WRITE)
        .map(|(_, &n)| n - 1)
        .sum();
    let most = ex
        .iter()
        .filter(|((p, _), _)| *p != PROC_WRITE)
        .map(|(_, &n)| n)
        .max()
        .unwrap_or(0);
    println!(
        "handler: {} WRITE XIDs executed for {writes_called} WRITE calls ({} more than once); \
         idempotent calls re-executed {re_executed} times, at most {most} executions of one",
        writes.len(),
        twice.len()
    );

    // Every call exactly once, right.
    for f in failed.iter().take(10) {
        println!("FAILED {}", f.what);
        let during = cuts
            .iter()
            .filter(|c| c.client == f.client && c.when >= f.start && c.when <= f.end);
        for c in during {
            println!("  cut meanwhile: {c:?}");
        }
    }
    assert!(
        failed.is_empty(),
        "{} calls failed (seed {:#x})",
        failed.len(),
        s.seed
    );
    assert!(twice.is_empty(), "WRITE executed more than once: {twice:?}");
    assert_eq!(
        writes.len(),
        writes_called,
        "WRITE calls and executed WRITE XIDs"
    );
    assert!(
        u64::from(re_executed) <= retransmits,
        "idempotent calls executed again {re_executed} times, only {retransmits} re-sent (at most {most} executions of one)"
    );
    // Every shape of call was made.
    for (what, n) in shapes {
        assert!(n > 0, "no {what} in the campaign");
    }
    // The campaign really cut.
    let total = s.warmup + s.calls;
    assert!(
        cuts.len() >= total / 100,
        "{} cuts for {total} calls",
        cuts.len()
    );
    if total >= 2000 {
        for kind in CutKind::ALL {
            assert!(
                cuts.iter().any(|c| c.plan.kind == kind),
                "no {kind:?} cut in {total} calls"
            );
        }
    }
    // Nothing leaked.
    if let Err(p) = rested {
        panic!("not at rest after the campaign: {p:#?}");
    }
    assert!(
        rss_end <= rss_warm + rss_tolerance_kib(rss_warm),
        "VmRSS {rss_end} KiB after the campaign, {rss_warm} KiB after the warm-up"
    );

    // Clients gone: so are their server connections and any budget.
    for t in &transports {
        t.shutdown().await;
    }
    drop(proxies);
    let t0 = Instant::now();
    while !rdma.connections().is_empty() && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        rdma.connections().len(),
        0,
        "server connections left after every client closed"
    );
    assert_eq!(rdma.read_budget().unwrap().in_use(), 0);
    rdma.shutdown().await;
    println!(
        "done in {:.1} s (seed {:#x})",
        started.elapsed().as_secs_f64(),
        s.seed
    );
}
