//! `rpcrdma bench`: a closed-loop load generator for the built-in test
//! program (`rpcrdma::testprog`), with in-tool raw TCP baselines so that
//! every figure can be compared with a baseline measured in the same run.
//!
//! * `rpcrdma bench ADDR --proc read --size 1M --depth 4 --duration 5`:
//!   `--conns` connections, `--depth` calls in flight on each (one tokio
//!   task per call slot, each calling again as soon as its reply arrives);
//!   an `ADDR` with port 0 starts a server in this process first.
//!   Connections are opened `--ramp` at a time (default 32) and the setup
//!   time is reported; `--report-server-rss PID` reports the server's
//!   memory per idle connection (see `scripts/bench-conns`).
//! * `rpcrdma bench --serve ADDR`: the server side alone, to be pinned as a
//!   separate process.
//! * `rpcrdma bench --raw-tcp --proc echo|read`: plain TCP ping-pong or
//!   stream on loopback (see [`raw`]).
//! * `--sweep 1K,4K,64K,1M --chart sweep.svg`: one point per size and an SVG
//!   chart of throughput and p50 latency by size.
//!
//! Transports are opened by [`connect`] and served by [`serve`]: the RDMA
//! transport plugs in there.

use std::io::{IsTerminal, Write as _};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::rdma_cmd::LinkArgs;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use rpcrdma::rdma::{
    connect_client, RdmaBlockingClient, RdmaClientConfig, RdmaServer, RdmaServerConfig, RdmaStatus,
};
use rpcrdma::stats::now_ns;
use rpcrdma::testprog::blocking::BlockingCall;
use rpcrdma::testprog::{
    self, PROC_ECHO, PROC_NULL, PROC_READ, PROC_WRITE, TEST_MAX_DATA, TEST_PROG, TEST_VERS,
};
use rpcrdma::{
    CallContext, CallOptions, Client, ClientConfig, Handler, HandlerError, HandlerFuture, Message,
    MetricsSnapshot, ProcStats, Reply, RpcError, Server, ServerConfig, Side, TcpBlockingClient,
    TcpConfig, TcpServer, TransportError,
};
use rpcrdma_cli::cli_error::CliError;
use serde_json::{json, Map, Value};

#[path = "bench_raw.rs"]
pub mod raw;
#[path = "bench_report.rs"]
pub mod report;
#[path = "bench_svg.rs"]
pub mod svg;

use raw::RawKind;
use report::{fmt_size, parse_size, parse_size_list, CpuTimes, Latency, Report};
use svg::{render_chart, Series, SweepPoint};

/// The transports `bench` can drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// RPC-over-RDMA (RFC 8166) over the software iWARP provider.
    Rdma,
    /// ONC RPC over TCP with RFC 5531 record marking.
    Tcp,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Rdma => "rdma",
            Transport::Tcp => "tcp",
        }
    }
}

/// The default `--transport`: RPC-over-RDMA over software iWARP.
pub const DEFAULT_TRANSPORT: Transport = Transport::Rdma;

/// The test program procedure to call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchProc {
    /// TEST_NULL: no arguments, no results.
    Null,
    /// TEST_ECHO: `size` octets each way, inline.
    Echo,
    /// TEST_READ: `size` octets of DDP-eligible results (Write chunk over RDMA).
    Read,
    /// TEST_WRITE: `size` octets of DDP-eligible arguments (Read chunk over RDMA).
    Write,
}

impl BenchProc {
    fn name(self) -> &'static str {
        match self {
            BenchProc::Null => "null",
            BenchProc::Echo => "echo",
            BenchProc::Read => "read",
            BenchProc::Write => "write",
        }
    }

    fn number(self) -> u32 {
        match self {
            BenchProc::Null => PROC_NULL,
            BenchProc::Echo => PROC_ECHO,
            BenchProc::Read => PROC_READ,
            BenchProc::Write => PROC_WRITE,
        }
    }
}

/// `rpcrdma bench` arguments.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Server address (host:port). Port 0: start a server in this process.
    /// With --serve: the address to listen on.
    #[arg(default_value = "127.0.0.1:0")]
    pub addr: String,
    /// Procedure of the test program to call.
    #[arg(long, value_enum, default_value = "null")]
    pub proc: BenchProc,
    /// Payload octets per call (suffixes K, M: binary).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub size: u64,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub depth: u32,
    /// Connections.
    #[arg(long, default_value_t = 1)]
    pub conns: u32,
    /// Seconds to measure (default 5 unless --count).
    #[arg(long, conflicts_with = "count")]
    pub duration: Option<f64>,
    /// Number of calls to measure (instead of --duration).
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds of unrecorded calls before measuring (default 0.2 with
    /// --duration, 0 with --count).
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Transport.
    #[arg(long, value_enum, default_value_t = DEFAULT_TRANSPORT)]
    pub transport: Transport,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run one point per size (comma-separated, e.g. 1K,4K,64K,1M).
    #[arg(long, value_parser = |s: &str| parse_size_list(s).map(SizeList))]
    pub sweep: Option<SizeList>,
    /// With --sweep: write an SVG chart (throughput and p50 by size) here.
    #[arg(long, requires = "sweep")]
    pub chart: Option<String>,
    /// Run the server only, on ADDR, until killed (or --serve-seconds).
    #[arg(long, conflicts_with_all = ["raw_tcp", "sweep"])]
    pub serve: bool,
    /// With --serve: stop after this many seconds.
    #[arg(long, requires = "serve")]
    pub serve_seconds: Option<f64>,
    /// Server: duplicate-reply cache entries (0 disables it).
    #[arg(long)]
    pub drc_entries: Option<usize>,
    /// Raw TCP baseline on loopback (ping-pong; `--proc read`: stream).
    #[arg(long)]
    pub raw_tcp: bool,
    /// Runtime worker threads (1: single-threaded runtime).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Connections being set up at once (bounded ramp; each RDMA setup is a
    /// TCP handshake plus an MPA exchange).
    #[arg(long, default_value_t = 32)]
    pub ramp: u32,
    /// Read VmRSS of this (server) process from /proc before connecting and
    /// again once every connection has made one NULL call and then sat idle
    /// for a second; report (RSS_N - RSS_0) / N as memory per idle connection.
    #[arg(long)]
    pub report_server_rss: Option<u32>,
    /// Blocking mode (`rpcrdma::rdma::RdmaBlockingClient`,
    /// `rpcrdma::TcpBlockingClient`): each connection is driven by the
    /// thread that calls on it, one call in flight (needs --depth 1;
    /// --conns threads). With --serve, or with an in-process server: the
    /// server drives each connection on a thread of its own
    /// (`RdmaServerConfig::blocking`, `TcpConfig::blocking`).
    #[arg(long)]
    pub blocking: bool,
    /// Print one progress line per second on standard error, also when it
    /// is not a terminal (on a terminal: always, on one line).
    #[arg(long)]
    pub progress: bool,
    /// RDMA link and engine options (`--crc`, `--credits`, `--inline-send`,
    /// `--inline-recv`, `--mpa-rev`, `--rpcrdma-version`,
    /// `--max-message`...), for the client and for a server this command
    /// starts, as `rpcrdma serve` / `call` take them.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// VmRSS of process `pid` in KiB, from `/proc/PID/status`.
pub fn vm_rss_kib(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no VmRSS line"))
}

/// Pages of kernel memory in TCP socket buffers, for the whole host (the
/// `mem` field of the `TCP:` line of `/proc/net/sockstat`): memory no
/// process's VmRSS counts.
pub fn tcp_kernel_pages() -> Result<u64, String> {
    let path = "/proc/net/sockstat";
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    parse_tcp_mem(&text).ok_or_else(|| format!("{path}: no TCP mem field"))
}

/// KiB of kernel slab memory, for the whole host (`Slab:` of
/// `/proc/meminfo`): where each socket's own structures live (`TCP`,
/// `sock_inode_cache`, `dentry`, `file`, epoll items).
pub fn kernel_slab_kib() -> Result<u64, String> {
    let path = "/proc/meminfo";
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Slab:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("{path}: no Slab line"))
}

fn parse_tcp_mem(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find_map(|l| l.strip_prefix("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mem" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// A parsed `--sweep` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeList(pub Vec<u64>);

/// Options of [`connect`].
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Largest reply expected (an RDMA transport sizes its Reply chunk from it).
    pub reply_max: u32,
    /// A blocking client ([`RdmaBlockingClient`], [`TcpBlockingClient`]).
    pub blocking: bool,
    /// RDMA only: link and engine options (`--crc` on TCP is refused).
    pub link: LinkArgs,
    /// The per-procedure statistics every connection counts into (`None`:
    /// each its own).
    pub stats: Option<Arc<ProcStats>>,
}

/// An established client and what is known of its transport parameters.
pub struct Connected {
    /// The RPC client.
    pub client: BenchClient,
    /// Negotiated (RDMA: inline sizes, credits, version...) or configured
    /// (TCP: fragment size...) parameters, reported with the results.
    pub params: Map<String, Value>,
}

/// A client the load runs on.
#[derive(Clone)]
pub enum BenchClient {
    /// [`Client`]: calls are tasks (`--depth` of them per connection).
    Async(Arc<Client>),
    /// A blocking client: one thread per connection, one call in flight.
    Blocking(Arc<Mutex<AnyBlocking>>),
}

/// A blocking client of either transport (one per connection, behind its
/// `Arc<Mutex<_>>`: the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
pub enum AnyBlocking {
    /// RPC-over-RDMA.
    Rdma(RdmaBlockingClient),
    /// ONC RPC over TCP.
    Tcp(TcpBlockingClient),
}

impl BlockingCall for AnyBlocking {
    fn call_with(
        &mut self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        match self {
            AnyBlocking::Rdma(c) => c.call_with(prog, vers, proc, args, opts),
            AnyBlocking::Tcp(c) => c.call_with(prog, vers, proc, args, opts),
        }
    }
}

impl AnyBlocking {
    fn metrics(&self) -> MetricsSnapshot {
        match self {
            AnyBlocking::Rdma(c) => c.metrics(),
            AnyBlocking::Tcp(c) => c.metrics(),
        }
    }

    fn stats(&self) -> &Arc<ProcStats> {
        match self {
            AnyBlocking::Rdma(c) => c.stats(),
            AnyBlocking::Tcp(c) => c.stats(),
        }
    }

    fn closed_reason(&self) -> Option<TransportError> {
        match self {
            AnyBlocking::Rdma(c) => c.closed_reason(),
            AnyBlocking::Tcp(c) => c.closed_reason(),
        }
    }

    fn disconnect(&mut self) {
        match self {
            AnyBlocking::Rdma(c) => c.disconnect(),
            AnyBlocking::Tcp(c) => c.disconnect(),
        }
    }
}

impl From<Client> for BenchClient {
    fn from(c: Client) -> Self {
        BenchClient::Async(Arc::new(c))
    }
}

impl BenchClient {
    /// The client's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        match self {
            BenchClient::Async(c) => c.metrics(),
            BenchClient::Blocking(c) => lock(c).metrics(),
        }
    }

    /// The client's per-procedure statistics.
    pub fn stats(&self) -> Arc<ProcStats> {
        match self {
            BenchClient::Async(c) => c.stats().clone(),
            BenchClient::Blocking(c) => lock(c).stats().clone(),
        }
    }

    /// The async client, if this is one.
    #[cfg(test)]
    pub fn as_async(&self) -> Option<&Arc<Client>> {
        match self {
            BenchClient::Async(c) => Some(c),
            BenchClient::Blocking(_) => None,
        }
    }

    /// One NULL call.
    pub async fn null(&self) -> Result<(), RpcError> {
        match self {
            BenchClient::Async(c) => testprog::null(c).await,
            BenchClient::Blocking(c) => {
                let c = c.clone();
                tokio::task::spawn_blocking(move || testprog::blocking::null(&mut *lock(&c)))
                    .await
                    .unwrap_or_else(|e| {
                        Err(RpcError::Transport(rpcrdma::TransportError::Lost(
                            e.to_string(),
                        )))
                    })
            }
        }
    }

    /// Closes the connection.
    pub fn close(&self) {
        match self {
            BenchClient::Async(c) => c.close(),
            BenchClient::Blocking(c) => {
                // Dropping the last reference closes it; close it now
                // if the client is not in use.
                if let Ok(mut g) = c.try_lock() {
                    g.disconnect();
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// TCP settings: `--max-message` bounds a record.
fn tcp_config(link: &LinkArgs) -> TcpConfig {
    let mut t = TcpConfig::default();
    t.record_limits.max_record_size = link.max_message as usize;
    t
}

fn tcp_params(tcp: &TcpConfig) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("record_marking".into(), json!("RFC 5531 section 11"));
    p.insert("max_fragment".into(), json!(tcp.max_fragment));
    p.insert("nodelay".into(), json!(tcp.nodelay));
    p
}

/// Opens one client connection over `transport`. The RDMA transport plugs
/// in here (and in [`serve`]): connect, then `Client::new(transport, config)`
/// and fill `params` with what was negotiated.
pub async fn connect(
    transport: Transport,
    addr: SocketAddr,
    opts: &ConnectOptions,
) -> Result<Connected, String> {
    let config = ClientConfig {
        reply_max: opts.reply_max,
        stats: opts.stats.clone(),
        ..ClientConfig::default()
    };
    match transport {
        Transport::Tcp => {
            if opts.link.crc_choice().is_some() {
                return Err("--crc applies to --transport rdma (MPA CRC32C) only".into());
            }
            let tcp = tcp_config(&opts.link);
            let params = tcp_params(&tcp);
            if opts.blocking {
                let c = tokio::task::spawn_blocking(move || {
                    let mut c = TcpBlockingClient::connect(addr, config, tcp)
                        .map_err(|e| format!("connect tcp {addr}: {e}"))?;
                    testprog::blocking::null(&mut c)
                        .map_err(|e| format!("first NULL call over tcp {addr}: {e}"))?;
                    Ok::<_, String>(c)
                })
                .await
                .map_err(|e| e.to_string())??;
                let mut params = params;
                params.insert("blocking_client".into(), json!(true));
                return Ok(Connected {
                    client: BenchClient::Blocking(Arc::new(Mutex::new(AnyBlocking::Tcp(c)))),
                    params,
                });
            }
            let client = Client::connect_tcp(addr, config, tcp)
                .await
                .map_err(|e| format!("connect tcp {addr}: {e}"))?;
            Ok(Connected {
                client: BenchClient::Async(Arc::new(client)),
                params,
            })
        }
        Transport::Rdma => {
            let rdma = opts.link.apply_client(RdmaClientConfig::default());
            if opts.blocking {
                let mut c = tokio::task::spawn_blocking(move || {
                    let mut c = RdmaBlockingClient::connect(addr, config, rdma)
                        .map_err(|e| format!("connect rdma {addr}: {e}"))?;
                    testprog::blocking::null(&mut c)
                        .map_err(|e| format!("first NULL call over rdma {addr}: {e}"))?;
                    Ok::<_, String>(c)
                })
                .await
                .map_err(|e| e.to_string())??;
                let mut params = rdma_params(&c.status());
                params.insert("blocking_client".into(), json!(true));
                let _ = &mut c;
                return Ok(Connected {
                    client: BenchClient::Blocking(Arc::new(Mutex::new(AnyBlocking::Rdma(c)))),
                    params,
                });
            }
            let (client, t) = connect_client(addr, config, rdma)
                .await
                .map_err(|e| format!("connect rdma {addr}: {e}"))?;
            // One NULL call: its reply carries the grant, and the status
            // then shows everything that was negotiated.
            client
                .call(TEST_PROG, TEST_VERS, 0, Message::default(), &[])
                .await
                .map_err(|e| format!("first NULL call over rdma {addr}: {e}"))?;
            Ok(Connected {
                client: BenchClient::Async(Arc::new(client)),
                params: rdma_params(&t.status()),
            })
        }
    }
}

/// What an RPC-over-RDMA connection negotiated, for the report.
fn rdma_params(st: &RdmaStatus) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("mpa_rev".into(), json!(st.link.mpa_rev));
    p.insert("crc".into(), json!(st.link.crc));
    p.insert(
        "crc32c_impl".into(),
        json!(rpcrdma_iwarp::crc::selected().describe()),
    );
    p.insert("markers".into(), json!(st.link.markers));
    p.insert("ird".into(), json!(st.link.ird));
    p.insert("ord".into(), json!(st.link.ord));
    if let Some(n) = st.negotiated {
        p.insert("inline_send".into(), json!(n.send_threshold));
        p.insert("inline_recv".into(), json!(n.recv_threshold));
        p.insert("remote_invalidate".into(), json!(n.remote_invalidation));
    }
    p.insert("credits_granted".into(), json!(st.credits));
    p.insert("rpcrdma_version".into(), json!(st.version.version));
    p
}

/// A running benchmark server.
pub enum Serving {
    /// ONC RPC over TCP.
    Tcp(TcpServer),
    /// RPC-over-RDMA v1 over software iWARP.
    Rdma(RdmaServer),
}

impl Serving {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Serving::Tcp(t) => t.local_addr(),
            Serving::Rdma(r) => r.local_addr(),
        }
    }

    /// Graceful shutdown.
    pub async fn shutdown(self) {
        match self {
            Serving::Tcp(t) => t.shutdown().await,
            Serving::Rdma(r) => r.shutdown().await,
        }
    }
}

/// The last READ pattern generated: (seed, count, data).
type PatternCache = Arc<Mutex<Option<(u32, u32, Bytes)>>>;

/// The test program's handler with READ results served from a cache of the
/// last pattern generated (same bytes as `testprog::test_handler`, but a
/// benchmark measures the transport, not the xorshift generator), and WRITE
/// data counted, not checksummed ([`bench_write_ready`]). Every other
/// procedure goes to `testprog::test_handler` as it is (no cache reference
/// taken per call).
struct BenchHandler {
    cache: PatternCache,
}

impl Handler for BenchHandler {
    fn call(&self, ctx: CallContext) -> HandlerFuture {
        match ctx.proc {
            PROC_READ => Box::pin(bench_read(ctx, self.cache.clone())),
            PROC_WRITE => Box::pin(async move { bench_write_ready(&ctx) }),
            _ => Box::pin(testprog::test_handler(ctx)),
        }
    }

    /// Every procedure is answered at once: no boxed future per call.
    fn call_ready(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
        Some(match ctx.proc {
            PROC_READ => bench_read_ready(ctx, &self.cache),
            PROC_WRITE => bench_write_ready(ctx),
            _ => testprog::test_handler_ready(ctx),
        })
    }
}

/// WRITE as the libtirpc peer's: the data is decoded (over RDMA it is the
/// Read sink itself, no copy) and counted; its CRC32C is not computed (the
/// result's `crc32c` is 0), since a benchmark measures the transport, not a
/// checksum of the payload (`rpcrdma bench` does not check it). The
/// arguments get the same checks as `testprog::test_handler`'s.
fn bench_write_ready(ctx: &CallContext) -> Result<Message, HandlerError> {
    let mut r = ctx.reader();
    let data = r.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "write.data")?;
    r.finish("write args")?;
    let mut b = Message::builder();
    b.put_u32(data.len() as u32).put_u32(0);
    Ok(b.finish())
}

/// READ from the pattern cache.
async fn bench_read(ctx: CallContext, cache: PatternCache) -> Result<Message, HandlerError> {
    bench_read_ready(&ctx, &cache)
}

/// [`bench_read`] run at once (it never waits).
fn bench_read_ready(ctx: &CallContext, cache: &PatternCache) -> Result<Message, HandlerError> {
    let (count, seed) = testprog::read_args(ctx)?;
    let data = {
        let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
        match &*c {
            Some((s, n, d)) if *s == seed && *n == count => d.clone(),
            _ => {
                let d = Bytes::from(testprog::pattern(seed, count as usize));
                *c = Some((seed, count, d.clone()));
                d
            }
        }
    };
    let mut b = Message::builder();
    b.put_ddp_opaque(data)
        .map_err(|e| HandlerError::SystemErr(e.to_string()))?;
    Ok(b.finish())
}

fn bench_server(config: ServerConfig) -> Server {
    let server = Server::new(config);
    server.register(
        TEST_PROG,
        TEST_VERS,
        BenchHandler {
            cache: Arc::new(Mutex::new(None)),
        },
    );
    // As `testprog::register`: NULL, ECHO and READ are idempotent.
    server.set_uncached(TEST_PROG, TEST_VERS, &[PROC_NULL, PROC_ECHO, PROC_READ]);
    server
}

/// Starts the benchmark server (the test program) on `addr`.
pub async fn serve(
    transport: Transport,
    addr: SocketAddr,
    drc_entries: Option<usize>,
    blocking: bool,
    link: &LinkArgs,
) -> Result<Serving, String> {
    let mut config = ServerConfig::default();
    if let Some(n) = drc_entries {
        config.drc_entries = n;
    }
    let server = bench_server(config);
    match transport {
        Transport::Tcp => server
            .serve_tcp(
                addr,
                TcpConfig {
                    max_connections: BENCH_MAX_CONNECTIONS,
                    blocking,
                    blocking_max_threads: BENCH_MAX_BLOCKING_THREADS,
                    ..tcp_config(link)
                },
            )
            .await
            .map(Serving::Tcp)
            .map_err(|e| format!("serve tcp {addr}: {e}")),
        Transport::Rdma => RdmaServer::serve(&server, addr, bench_rdma_config(blocking, link))
            .await
            .map(Serving::Rdma)
            .map_err(|e| format!("serve rdma {addr}: {e}")),
    }
}

/// Connections the benchmark server accepts (either transport):
/// `scripts/bench-conns` opens 10,000.
const BENCH_MAX_CONNECTIONS: usize = 16_384;

/// Connection threads of the blocking TCP benchmark server (a thread per
/// connection: more than the default for `--conns` sweeps, still bounded).
const BENCH_MAX_BLOCKING_THREADS: usize = 1024;

/// The benchmark server's settings: the defaults without the per-source
/// caps, since a benchmark's whole load comes from one address (e.g.
/// `scripts/bench-conns`: 10,000 connections from 127.0.0.1, set up 32 at
/// once), and room for [`BENCH_MAX_CONNECTIONS`].
fn bench_rdma_config(blocking: bool, link: &LinkArgs) -> RdmaServerConfig {
    let mut d = link.apply_server(RdmaServerConfig::default());
    if let Some(cm) = d.provider.iwarp_mut() {
        cm.accept.max_pending_per_source = cm.accept.max_pending;
    }
    RdmaServerConfig {
        blocking,
        max_connections: BENCH_MAX_CONNECTIONS,
        max_connections_per_source: BENCH_MAX_CONNECTIONS,
        ..d
    }
}

/// When a load phase stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this long.
    Duration(Duration),
    /// After this many calls (successful or not).
    Count(u64),
}

/// One load point.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Procedure.
    pub proc: BenchProc,
    /// Payload octets.
    pub size: u32,
    /// Calls in flight per connection.
    pub depth: u32,
    /// Measured phase length.
    pub stop: Stop,
    /// Unrecorded phase before it.
    pub warmup: Duration,
    /// Print a progress line on stderr.
    pub progress: bool,
}

struct Shared {
    /// When a timed phase ends, on [`now_ns`]'s clock.
    deadline_ns: Option<u64>,
    remaining: AtomicI64,
    done: AtomicU64,
}

struct WorkerResult {
    latency: Latency,
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    /// Errors since the last success.
    consecutive: u64,
}

impl WorkerResult {
    fn new() -> Self {
        WorkerResult {
            latency: Latency::new(),
            ok: 0,
            errors: 0,
            first_error: None,
            consecutive: 0,
        }
    }

    /// Records the outcome of a call that took `elapsed`; false when the
    /// worker should stop (the connection is over, or too many errors in a
    /// row).
    fn note_at(
        &mut self,
        r: Result<(), String>,
        elapsed: Duration,
        shared: &Shared,
        closed: impl FnOnce() -> bool,
    ) -> bool {
        match r {
            Ok(()) => {
                self.latency.record(elapsed);
                self.ok += 1;
                self.consecutive = 0;
                shared.done.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                self.errors += 1;
                self.consecutive += 1;
                self.first_error.get_or_insert(e);
                !closed() && self.consecutive < MAX_WORKER_ERRORS
            }
        }
    }
}

/// `d` nanoseconds of [`now_ns`]'s clock (monotonic: never negative).
fn ns(d: u64) -> Duration {
    Duration::from_nanos(d)
}

/// Consecutive errors after which a worker gives up.
const MAX_WORKER_ERRORS: u64 = 100;

async fn one_call(c: &Client, proc: BenchProc, payload: &Bytes, size: u32) -> Result<(), String> {
    let e = |e: RpcError| e.to_string();
    match proc {
        BenchProc::Null => testprog::null(c).await.map_err(e),
        BenchProc::Echo => {
            let got = testprog::echo(c, payload).await.map_err(e)?;
            check_echo(got.len(), payload.len())
        }
        BenchProc::Read => {
            let got = testprog::read(c, size, 1).await.map_err(e)?;
            check_read(got.len(), size)
        }
        BenchProc::Write => {
            // The payload is shared, not copied (a Read chunk over RDMA).
            let (n, _crc) = testprog::write_shared(c, payload.clone())
                .await
                .map_err(e)?;
            check_write(n, size)
        }
    }
}

async fn worker(
    client: Arc<Client>,
    spec: Arc<LoadSpec>,
    payload: Bytes,
    shared: Arc<Shared>,
) -> WorkerResult {
    let mut res = WorkerResult::new();
    // One clock read per call, as the blocking worker and the libtirpc
    // peer's loop, without `Instant`'s checked arithmetic (two or three
    // `Instant` reads and a difference cost ~150 user-space instructions
    // per call).
    let mut t = now_ns();
    while shared.go_on_at(t) {
        let r = one_call(&client, spec.proc, &payload, spec.size).await;
        let end = now_ns();
        if !res.note_at(r, ns(end.saturating_sub(t)), &shared, || {
            client.transport().closed_reason().is_some()
        }) {
            break;
        }
        t = end;
    }
    res
}

fn one_call_blocking(
    c: &mut AnyBlocking,
    proc: BenchProc,
    payload: &Bytes,
    size: u32,
) -> Result<(), String> {
    use testprog::blocking as t;
    let e = |e: RpcError| e.to_string();
    match proc {
        BenchProc::Null => t::null(c).map_err(e),
        BenchProc::Echo => {
            let got = t::echo(c, payload).map_err(e)?;
            check_echo(got.len(), payload.len())
        }
        BenchProc::Read => {
            let got = t::read(c, size, 1).map_err(e)?;
            check_read(got.len(), size)
        }
        BenchProc::Write => {
            let (n, _crc) = t::write_shared(c, payload.clone()).map_err(e)?;
            check_write(n, size)
        }
    }
}

fn check_echo(got: usize, sent: usize) -> Result<(), String> {
    if got != sent {
        return Err(format!("echo: {got} octets back, sent {sent}"));
    }
    Ok(())
}

fn check_read(got: usize, size: u32) -> Result<(), String> {
    if got != size as usize {
        return Err(format!("read: {got} octets, asked {size}"));
    }
    Ok(())
}

fn check_write(n: u32, size: u32) -> Result<(), String> {
    if n != size {
        return Err(format!("write: server counted {n} octets, sent {size}"));
    }
    Ok(())
}

/// [`worker`] for a blocking client, on a thread of the blocking pool.
fn blocking_worker(
    client: Arc<Mutex<AnyBlocking>>,
    spec: Arc<LoadSpec>,
    payload: Bytes,
    shared: Arc<Shared>,
) -> WorkerResult {
    let mut c = lock(&client);
    let mut res = WorkerResult::new();
    // One clock read per call (as the libtirpc peer's loop): a call starts
    // when the one before ended, and that instant also decides whether to
    // go on. (The latency so includes recording the previous call's,
    // some tens of nanoseconds.)
    let mut t = now_ns();
    while shared.go_on_at(t) {
        let r = one_call_blocking(&mut c, spec.proc, &payload, spec.size);
        let end = now_ns();
        if !res.note_at(r, ns(end.saturating_sub(t)), &shared, || {
            c.closed_reason().is_some()
        }) {
            break;
        }
        t = end;
    }
    res
}

/// Set on SIGINT / SIGTERM: every load phase ends as if its time were up,
/// and what was measured is reported.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Watches for SIGINT / SIGTERM (until the runtime ends); the handlers
/// are installed on return.
fn watch_signals() {
    let mut signals = crate::rdma_cmd::Signals::install();
    tokio::spawn(async move {
        signals.recv().await;
        INTERRUPTED.store(true, Ordering::Relaxed);
        eprintln!("rpcrdma bench: interrupted; reporting what was measured");
    });
}

impl Shared {
    /// Whether a worker should make another call, at `now` (read by the
    /// caller).
    fn go_on_at(&self, now: u64) -> bool {
        if interrupted() {
            return false;
        }
        match self.deadline_ns {
            Some(end) => now < end,
            None => self.remaining.fetch_sub(1, Ordering::Relaxed) > 0,
        }
    }
}

struct PhaseResult {
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    seconds: f64,
    latency: Latency,
    cpu: CpuTimes,
}

async fn phase(
    clients: &[BenchClient],
    spec: &Arc<LoadSpec>,
    stop: Stop,
    progress: bool,
) -> PhaseResult {
    let payload = Bytes::from(match spec.proc {
        BenchProc::Echo | BenchProc::Write => testprog::pattern(7, spec.size as usize),
        _ => Vec::new(),
    });
    let t0 = Instant::now();
    let shared = Arc::new(Shared {
        deadline_ns: match stop {
            Stop::Duration(d) => {
                Some(now_ns().saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
            }
            Stop::Count(_) => None,
        },
        remaining: AtomicI64::new(match stop {
            Stop::Count(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Stop::Duration(_) => 0,
        }),
        done: AtomicU64::new(0),
    });
    let cpu0 = CpuTimes::now();
    let mut set = tokio::task::JoinSet::new();
    for c in clients {
        match c {
            BenchClient::Async(c) => {
                for _ in 0..spec.depth.max(1) {
                    set.spawn(worker(
                        c.clone(),
                        spec.clone(),
                        payload.clone(),
                        shared.clone(),
                    ));
                }
            }
            BenchClient::Blocking(c) => {
                let (c, spec, payload, shared) =
                    (c.clone(), spec.clone(), payload.clone(), shared.clone());
                set.spawn_blocking(move || blocking_worker(c, spec, payload, shared));
            }
        }
    }
    let tty = std::io::stderr().is_terminal();
    let ticker = progress.then(|| {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let secs = t0.elapsed().as_secs_f64();
                let n = shared.done.load(Ordering::Relaxed);
                let mut err = std::io::stderr();
                let line = format!(
                    "  {secs:6.1} s  {n:>10} calls  {:>10.0} calls/s ",
                    n as f64 / secs
                );
                let _ = if tty {
                    write!(err, "\r{line}")
                } else {
                    writeln!(err, "{}", line.trim_end())
                };
                let _ = err.flush();
            }
        })
    });
    let mut out = PhaseResult {
        ok: 0,
        errors: 0,
        first_error: None,
        seconds: 0.0,
        latency: Latency::new(),
        cpu: CpuTimes::default(),
    };
    while let Some(r) = set.join_next().await {
        match r {
            Ok(w) => {
                out.ok += w.ok;
                out.errors += w.errors;
                out.latency.merge(&w.latency);
                if out.first_error.is_none() {
                    out.first_error = w.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("worker task: {e}"));
            }
        }
    }
    out.seconds = t0.elapsed().as_secs_f64();
    out.cpu = CpuTimes::now().since(&cpu0);
    if let Some(t) = ticker {
        t.abort();
        if tty {
            let mut err = std::io::stderr();
            let _ = write!(err, "\r{:60}\r", "");
            let _ = err.flush();
        }
    }
    out
}

/// Runs one load point (warm-up, then the measured phase) over `clients`.
pub async fn run_load(
    clients: &[BenchClient],
    spec: LoadSpec,
    transport: Transport,
    params: &Map<String, Value>,
) -> Report {
    let spec = Arc::new(spec);
    // Every client counts into the same table (`ConnectOptions::stats`).
    let stats = clients.first().map(BenchClient::stats);
    let stats_before = stats.as_ref().map(|s| s.snapshot()).unwrap_or_default();
    if !spec.warmup.is_zero() {
        phase(clients, &spec, Stop::Duration(spec.warmup), false).await;
    }
    let before: u64 = clients.iter().map(|c| c.metrics().bytes_sent).sum();
    let before_rx: u64 = clients.iter().map(|c| c.metrics().bytes_received).sum();
    let r = phase(clients, &spec, spec.stop, spec.progress).await;
    let interrupted = interrupted();
    let sent: u64 = clients.iter().map(|c| c.metrics().bytes_sent).sum::<u64>() - before;
    let rx: u64 = clients
        .iter()
        .map(|c| c.metrics().bytes_received)
        .sum::<u64>()
        - before_rx;
    let mut params = params.clone();
    params.insert("wire_bytes_sent".into(), json!(sent));
    params.insert("wire_bytes_received".into(), json!(rx));
    let proc_stats = stats.map_or(Value::Null, |s| {
        rpcrdma_cli::proc_stats::since_json(&s, &stats_before)
    });
    Report {
        proc: spec.proc.name().into(),
        size: spec.size as u64,
        depth: spec.depth,
        conns: clients.len() as u32,
        transport: transport.name().into(),
        calls: r.ok,
        errors: r.errors,
        first_error: r.first_error,
        seconds: r.seconds,
        latency: r.latency,
        cpu: r.cpu,
        params,
        proc_stats,
        proc_num: Some(spec.proc.number()),
        interrupted,
    }
}

fn resolve(addr: &str) -> Result<SocketAddr, CliError> {
    let bad = |m| CliError::bad_input("bad-address", "resolve", m);
    addr.to_socket_addrs()
        .map_err(|e| bad(format!("bad address {addr:?}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("address {addr:?} resolves to nothing")))
}

/// An operation of the benchmark that failed (exit status 1).
fn failed(kind: &'static str, op: &'static str) -> impl Fn(String) -> CliError {
    move |m| CliError::failed(kind, op, m)
}

/// Runs `rpcrdma bench`.
pub fn run(args: BenchArgs) -> ExitCode {
    let json = args.json;
    let fail = |e: CliError| e.report("bench", json);
    // A misspelt RPCRDMA_CRC32C_IMPL would measure the default silently.
    if let Err(e) = rpcrdma_iwarp::crc::from_env() {
        return fail(CliError::bad_input("usage", "environment", e));
    }
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => return fail(CliError::failed("io", "runtime", format!("runtime: {e}"))),
    };
    match rt.block_on(run_async(args)) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn stop_of(args: &BenchArgs) -> (Stop, Duration) {
    let stop = match (args.count, args.duration) {
        (Some(n), _) => Stop::Count(n),
        (None, d) => Stop::Duration(Duration::from_secs_f64(d.unwrap_or(5.0).max(0.0))),
    };
    let warm = args.warmup.unwrap_or(match stop {
        Stop::Duration(_) => 0.2,
        Stop::Count(_) => 0.0,
    });
    (stop, Duration::from_secs_f64(warm.max(0.0)))
}

async fn run_async(args: BenchArgs) -> Result<ExitCode, CliError> {
    let (stop, warmup) = stop_of(&args);
    if args.transport != Transport::Rdma && args.link.crc_choice().is_some() {
        return Err(CliError::usage(
            "--crc",
            "--crc applies to --transport rdma (MPA CRC32C) only",
        ));
    }
    if args.serve {
        return serve_forever(&args).await;
    }
    if args.blocking && !args.serve && args.depth > 1 {
        return Err(CliError::usage(
            "--depth",
            "--blocking keeps one call in flight per connection: use --depth 1 (and --conns for more)",
        ));
    }
    if args.blocking && args.raw_tcp {
        return Err(CliError::usage(
            "--blocking",
            "--blocking applies to the RPC transports, not --raw-tcp",
        ));
    }
    let sizes = args.sweep.clone().map_or_else(|| vec![args.size], |l| l.0);
    let option = if args.sweep.is_some() {
        "--sweep"
    } else {
        "--size"
    };
    for &size in &sizes {
        crate::rdma_cmd::check_payload(size, option, &args.link)?;
    }
    let progress = args.progress || std::io::stderr().is_terminal();
    watch_signals();
    let placement = report::cpus_allowed();
    let mut reports = Vec::new();
    if args.raw_tcp {
        let kind = if args.proc == BenchProc::Read {
            RawKind::Stream
        } else {
            RawKind::PingPong
        };
        for &size in &sizes {
            let raw_stop = match stop {
                Stop::Duration(d) => raw::Stop::Duration(d),
                Stop::Count(n) => raw::Stop::Count(n),
            };
            let (depth, w) = (args.depth, warmup);
            let r = tokio::task::spawn_blocking(move || raw::run(kind, size, depth, raw_stop, w))
                .await
                .map_err(|e| CliError::failed("io", "raw-tcp", e.to_string()))?
                .map_err(|e| CliError::failed("io", "raw-tcp", format!("raw tcp: {e}")))?;
            reports.push(r);
            if interrupted() {
                break;
            }
        }
    } else {
        let addr = resolve(&args.addr)?;
        let mut local = None;
        let target = if addr.port() == 0 {
            let s = serve(
                args.transport,
                addr,
                args.drc_entries,
                args.blocking,
                &args.link,
            )
            .await
            .map_err(failed("listen", "listen"))?;
            let a = s.local_addr();
            local = Some(s);
            a
        } else {
            addr
        };
        let max = sizes.iter().copied().max().unwrap_or(0);
        let opts = ConnectOptions {
            reply_max: u32::try_from(max + 64 * 1024).unwrap_or(u32::MAX),
            blocking: args.blocking,
            link: args.link.clone(),
            stats: Some(Arc::new(ProcStats::new(Side::Client))),
        };
        let rss0 = match args.report_server_rss {
            Some(pid) => Some((
                vm_rss_kib(pid).map_err(failed("io", "read-rss"))?,
                tcp_kernel_pages().ok(),
                kernel_slab_kib().ok(),
            )),
            None => None,
        };
        let setup_start = Instant::now();
        let (clients, mut params) =
            connect_all(args.transport, target, &opts, args.conns.max(1), args.ramp)
                .await
                .map_err(failed("connect", "connect"))?;
        let setup = setup_start.elapsed();
        params.insert("setup_seconds".into(), json!(setup.as_secs_f64()));
        if progress || args.conns > 1 {
            eprintln!(
                "{} connections set up in {:.3} s (ramp {})",
                clients.len(),
                setup.as_secs_f64(),
                args.ramp.max(1)
            );
        }
        if let (Some(pid), Some((rss0, tcp0, slab0))) = (args.report_server_rss, rss0) {
            // One NULL call on every connection, then idle.
            for c in &clients {
                c.null()
                    .await
                    .map_err(|e| CliError::failed("rpc", "null-before-idle", e.to_string()))?;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let rss_n = vm_rss_kib(pid).map_err(failed("io", "read-rss"))?;
            let n = clients.len() as u64;
            let per = (rss_n as f64 - rss0 as f64) / n as f64;
            eprintln!(
                "server pid {pid} VmRSS: {rss0} KiB with 0 connections, {rss_n} KiB with {n} idle; {per:.1} KiB per idle connection"
            );
            params.insert("server_rss_0_kib".into(), json!(rss0));
            params.insert("server_rss_n_kib".into(), json!(rss_n));
            params.insert("server_rss_per_idle_conn_kib".into(), json!(per));
            // Socket buffers are kernel memory: not in VmRSS. Both ends of
            // every loopback connection, and the rest of the host.
            if let (Some(t0), Ok(tn)) = (tcp0, tcp_kernel_pages()) {
                let kib = (tn as f64 - t0 as f64) * 4.0 / n as f64;
                eprintln!(
                    "kernel TCP buffers (host-wide, both ends): {t0} -> {tn} pages; {kib:.1} KiB per idle connection"
                );
                params.insert("tcp_kernel_kib_per_idle_conn".into(), json!(kib));
            }
            if let (Some(s0), Ok(sn)) = (slab0, kernel_slab_kib()) {
                let kib = (sn as f64 - s0 as f64) / n as f64;
                eprintln!(
                    "kernel slab (host-wide, both ends): {s0} -> {sn} KiB; {kib:.1} KiB per idle connection"
                );
                params.insert("kernel_slab_kib_per_idle_conn".into(), json!(kib));
            }
        }
        params.insert(
            "server".into(),
            json!(if local.is_some() {
                "in-process"
            } else {
                "external"
            }),
        );
        params.insert("cpu_includes_server".into(), json!(local.is_some()));
        params.insert("runtime_threads".into(), json!(args.threads.max(1)));
        for &size in &sizes {
            let spec = LoadSpec {
                proc: args.proc,
                size: size as u32,
                depth: args.depth.max(1),
                stop,
                warmup,
                progress,
            };
            if progress && sizes.len() > 1 {
                eprintln!("size {}", fmt_size(size));
            }
            reports.push(run_load(&clients, spec, args.transport, &params).await);
            if interrupted() {
                break;
            }
        }
        for c in &clients {
            c.close();
        }
        if let Some(s) = local {
            s.shutdown().await;
        }
    }
    for r in &mut reports {
        if let Some(p) = &placement {
            r.params.insert("cpus_allowed".into(), json!(p));
        }
    }
    if let Some(path) = &args.chart {
        let name = format!(
            "{} {} depth {}",
            reports.first().map(|r| r.transport.as_str()).unwrap_or(""),
            reports.first().map(|r| r.proc.as_str()).unwrap_or(""),
            args.depth
        );
        let series = Series {
            name,
            points: reports
                .iter()
                .map(|r| SweepPoint {
                    size: r.size,
                    mb_per_sec: r.mb_per_sec(),
                    p50_us: r.latency.quantile_us(0.5),
                })
                .collect(),
        };
        let svg = render_chart("rpcrdma bench sweep", &[series]);
        std::fs::write(path, svg).map_err(|e| {
            CliError::failed("io", "write-chart", format!("write {path}: {e}"))
                .with("path", path.as_str())
        })?;
    }
    if args.json {
        let v = if args.sweep.is_some() {
            json!({
                "sweep": reports.iter().map(Report::to_json).collect::<Vec<_>>(),
                "chart": args.chart,
            })
        } else {
            reports.first().map(Report::to_json).unwrap_or(Value::Null)
        };
        println!("{v}");
    } else {
        for r in &reports {
            print!("{}", r.to_text());
        }
        if let Some(p) = &args.chart {
            println!("chart written to {p}");
        }
    }
    let bad = reports.iter().any(|r| r.errors > 0 || r.calls == 0);
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Opens `n` connections, at most `ramp` being set up at once; returns the
/// clients (in no particular order) and the parameters of the last one.
async fn connect_all(
    transport: Transport,
    target: SocketAddr,
    opts: &ConnectOptions,
    n: u32,
    ramp: u32,
) -> Result<(Vec<BenchClient>, Map<String, Value>), String> {
    let mut clients = Vec::with_capacity(n as usize);
    let mut params = Map::new();
    let mut set = tokio::task::JoinSet::new();
    let mut started = 0u32;
    let mut first_err = None;
    while started < n || !set.is_empty() {
        while first_err.is_none() && started < n && set.len() < ramp.max(1) as usize {
            let o = opts.clone();
            set.spawn(async move { connect(transport, target, &o).await });
            started += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(c))) => {
                params = c.params;
                clients.push(c.client);
            }
            Some(Ok(Err(e))) => {
                first_err.get_or_insert(e);
            }
            Some(Err(e)) => {
                first_err.get_or_insert(e.to_string());
            }
            None => break,
        }
    }
    if let Some(e) = first_err {
        for c in &clients {
            c.close();
        }
        return Err(format!("{e} (after {} of {n} connections)", clients.len()));
    }
    Ok((clients, params))
}

async fn serve_forever(args: &BenchArgs) -> Result<ExitCode, CliError> {
    let addr = resolve(&args.addr)?;
    let s = serve(
        args.transport,
        addr,
        args.drc_entries,
        args.blocking,
        &args.link,
    )
    .await
    .map_err(failed("listen", "listen"))?;
    println!(
        "listening on {} (transport {})",
        s.local_addr(),
        args.transport.name()
    );
    let _ = std::io::stdout().flush();
    match args.serve_seconds {
        Some(secs) => tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await,
        None => std::future::pending::<()>().await,
    }
    s.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_tcp_memory_is_the_mem_field_of_the_tcp_line() {
        assert_eq!(
            super::parse_tcp_mem(
                "sockets: used 19\nTCP: inuse 2 orphan 0 tw 1 alloc 2 mem 98\nUDP: inuse 0 mem 7\n"
            ),
            Some(98)
        );
        assert_eq!(super::parse_tcp_mem("TCP: inuse 2 mem\n"), None);
        assert_eq!(super::parse_tcp_mem("UDP: inuse 0 mem 7\n"), None);
    }

    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BenchArgs,
    }

    fn crc_link(crc: Option<bool>) -> LinkArgs {
        LinkArgs {
            crc: crc == Some(true),
            no_crc: crc == Some(false),
            ..LinkArgs::default()
        }
    }

    fn parse(a: &[&str]) -> Result<BenchArgs, clap::Error> {
        T::try_parse_from(std::iter::once("t").chain(a.iter().copied())).map(|t| t.b)
    }

    #[test]
    fn argument_parsing() {
        let a = parse(&[
            "10.0.0.1:20049",
            "--proc",
            "read",
            "--size",
            "1M",
            "--depth",
            "32",
        ])
        .unwrap();
        assert_eq!(a.proc, BenchProc::Read);
        assert_eq!(a.size, 1 << 20);
        assert_eq!(a.depth, 32);
        assert_eq!(a.transport, DEFAULT_TRANSPORT);
        let a = parse(&[
            "--sweep",
            "1K,4K",
            "--chart",
            "x.svg",
            "--transport",
            "rdma",
        ])
        .unwrap();
        assert_eq!(a.sweep, Some(SizeList(vec![1024, 4096])));
        assert_eq!(a.transport, Transport::Rdma);
        assert!(
            parse(&["--chart", "x.svg"]).is_err(),
            "--chart needs --sweep"
        );
        assert!(parse(&["--count", "5", "--duration", "1"]).is_err());
        assert!(parse(&["--serve", "--raw-tcp"]).is_err());
        let (stop, warm) = stop_of(&parse(&["--count", "7"]).unwrap());
        assert!(matches!(stop, Stop::Count(7)));
        assert!(warm.is_zero());
        let (stop, warm) = stop_of(&parse(&[]).unwrap());
        assert!(matches!(stop, Stop::Duration(d) if d == Duration::from_secs(5)));
        assert_eq!(warm, Duration::from_millis(200));
    }

    #[tokio::test]
    async fn rdma_connects_and_reports_what_was_negotiated() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let srv = serve(Transport::Rdma, any, None, false, &LinkArgs::default())
            .await
            .unwrap();
        let c = connect(
            Transport::Rdma,
            srv.local_addr(),
            &ConnectOptions {
                reply_max: 1 << 20,
                blocking: false,
                link: crc_link(Some(true)),
                stats: None,
            },
        )
        .await
        .unwrap();
        assert_eq!(c.params["mpa_rev"], 2);
        assert_eq!(c.params["crc"], true);
        assert_eq!(c.params["inline_send"], 4096);
        assert_eq!(c.params["credits_granted"], 64);
        c.client
            .as_async()
            .unwrap()
            .call(TEST_PROG, TEST_VERS, 0, Message::default(), &[])
            .await
            .unwrap();
        srv.shutdown().await;
        // --crc is an RDMA (MPA) setting.
        let opts = ConnectOptions {
            reply_max: 1 << 20,
            blocking: false,
            link: crc_link(Some(false)),
            stats: None,
        };
        let e = connect(Transport::Tcp, any, &opts).await.err().unwrap();
        assert!(e.contains("--crc"), "{e}");
    }

    /// Blocking clients (one thread each) against a blocking server (one
    /// thread per connection): every call of every procedure arrives,
    /// DDP data both ways included, and the parameters say so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_rdma_load_counts_every_call() {
        blocking_load_counts_every_call(Transport::Rdma).await;
    }

    /// The same over ONC RPC over TCP (`TcpBlockingClient` against the
    /// blocking TCP server).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_tcp_load_counts_every_call() {
        blocking_load_counts_every_call(Transport::Tcp).await;
    }

    async fn blocking_load_counts_every_call(transport: Transport) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let srv = serve(transport, any, None, true, &LinkArgs::default())
            .await
            .unwrap();
        let opts = ConnectOptions {
            reply_max: 1 << 20,
            blocking: true,
            link: if transport == Transport::Rdma {
                crc_link(Some(true))
            } else {
                LinkArgs::default()
            },
            stats: None,
        };
        let mut clients = Vec::new();
        let mut params = Map::new();
        for _ in 0..2 {
            let c = connect(transport, srv.local_addr(), &opts).await.unwrap();
            assert!(c.client.as_async().is_none());
            params = c.params;
            clients.push(c.client);
        }
        assert_eq!(params["blocking_client"], true);
        if transport == Transport::Rdma {
            assert_eq!(params["credits_granted"], 64);
        }
        for (proc, size) in [
            (BenchProc::Null, 0),
            (BenchProc::Echo, 3000),
            (BenchProc::Read, 200_000),
            (BenchProc::Write, 200_000),
        ] {
            let spec = LoadSpec {
                proc,
                size,
                depth: 1,
                stop: Stop::Count(60),
                warmup: Duration::ZERO,
                progress: false,
            };
            let r = run_load(&clients, spec, transport, &Map::new()).await;
            assert_eq!(r.calls, 60, "{proc:?}: {:?}", r.first_error);
            assert_eq!(r.errors, 0);
            assert_eq!(r.latency.count(), 60);
            let sent = r.params["wire_bytes_sent"].as_u64().unwrap();
            let rx = r.params["wire_bytes_received"].as_u64().unwrap();
            match proc {
                BenchProc::Write => assert!(sent > 60 * 200_000, "{sent}"),
                BenchProc::Read => assert!(rx > 60 * 200_000, "{rx}"),
                BenchProc::Echo => assert!(sent > 60 * 3000 && rx > 60 * 3000),
                BenchProc::Null => assert!(sent < 60 * 3000 && rx < 60 * 3000),
            }
        }
        assert_eq!(
            clients[0].metrics().calls_sent,
            clients[0].metrics().replies_received
        );
        for c in &clients {
            c.close();
        }
        srv.shutdown().await;
    }

    #[tokio::test]
    async fn load_over_tcp_counts_every_call() {
        let s = serve(
            Transport::Tcp,
            "127.0.0.1:0".parse().unwrap(),
            None,
            false,
            &LinkArgs::default(),
        )
        .await
        .unwrap();
        let opts = ConnectOptions {
            reply_max: 1 << 20,
            blocking: false,
            link: LinkArgs::default(),
            stats: None,
        };
        let mut clients = Vec::new();
        for _ in 0..2 {
            let c = connect(Transport::Tcp, s.local_addr(), &opts)
                .await
                .unwrap();
            clients.push(c.client);
        }
        for proc in [
            BenchProc::Null,
            BenchProc::Echo,
            BenchProc::Read,
            BenchProc::Write,
        ] {
            let spec = LoadSpec {
                proc,
                size: 3000,
                depth: 4,
                stop: Stop::Count(100),
                warmup: Duration::ZERO,
                progress: false,
            };
            let r = run_load(&clients, spec, Transport::Tcp, &Map::new()).await;
            assert_eq!(r.calls, 100, "{proc:?}: {:?}", r.first_error);
            assert_eq!(r.errors, 0);
            assert_eq!(r.latency.count(), 100);
            assert_eq!(r.conns, 2);
            let sent = r.params["wire_bytes_sent"].as_u64().unwrap();
            let rx = r.params["wire_bytes_received"].as_u64().unwrap();
            match proc {
                BenchProc::Echo | BenchProc::Write => assert!(sent > 100 * 3000, "{sent}"),
                _ => assert!(sent < 100 * 3000, "{sent}"),
            }
            match proc {
                BenchProc::Echo | BenchProc::Read => assert!(rx > 100 * 3000, "{rx}"),
                _ => assert!(rx < 100 * 3000, "{rx}"),
            }
        }
        // The READ cache serves the pattern of testprog.
        let c0 = clients[0].as_async().unwrap();
        let got = testprog::read(c0, 100, 9).await.unwrap();
        assert_eq!(&got[..], &testprog::pattern(9, 100)[..]);
        let got = testprog::read(c0, 50, 9).await.unwrap();
        assert_eq!(&got[..], &testprog::pattern(9, 50)[..]);
        s.shutdown().await;
    }

    #[tokio::test]
    async fn errors_are_counted() {
        // A server without the test program: every call is PROG_UNAVAIL.
        let server = Server::default();
        let tcp = server
            .serve_tcp("127.0.0.1:0", TcpConfig::default())
            .await
            .unwrap();
        let c = connect(
            Transport::Tcp,
            tcp.local_addr(),
            &ConnectOptions {
                reply_max: 1 << 20,
                blocking: false,
                link: LinkArgs::default(),
                stats: None,
            },
        )
        .await
        .unwrap();
        let spec = LoadSpec {
            proc: BenchProc::Null,
            size: 0,
            depth: 2,
            stop: Stop::Count(10),
            warmup: Duration::ZERO,
            progress: false,
        };
        let r = run_load(&[c.client], spec, Transport::Tcp, &Map::new()).await;
        assert_eq!(r.calls, 0);
        assert_eq!(r.errors, 10);
        assert!(r.first_error.unwrap().contains("PROG_UNAVAIL"));
        tcp.shutdown().await;
    }
}
