//! `rpcrdma serve`, `rpcrdma call`, `rpcrdma probe`: the RPC runtime over
//! RPC-over-RDMA v1 over software iWARP.
//!
//! * `serve --listen ADDR` serves the test program (0x20005244 v1:
//!   NULL/ECHO/READ/WRITE, see `rpcrdma::testprog`), printing
//!   `listening on ADDR` first; `--duration S` stops it after S seconds and
//!   prints the transport's counters.
//! * `call ADDR --proc null|echo|read|write --size N [--count K]`: the data
//!   is the test program's pattern (`--seed`, default 1): ECHO and WRITE
//!   send `pattern(seed, N)`, READ asks for it (the server produces it).
//!   `--prog P --vers V --procnum N [--args-hex HEX]` instead calls any
//!   program's procedure with the XDR arguments given in hex (void by
//!   default) and prints its results in hex. With `--json` one object per
//!   call: `{"ok", "prog", "vers", "proc", "proc_name", "xid", "bytes",
//!   "crc32c", "elapsed_us", "error", "rpc_status", "rpcrdma_version",
//!   "result_hex"}` (README, "Scripting"): `proc` the procedure number,
//!   `proc_name` the test program's name or null, `bytes` the payload
//!   octets moved (ECHO: the octets echoed, READ: read, WRITE: written; a
//!   raw call: its results), `crc32c` the CRC-32C (Castagnoli) of those
//!   octets (READ: exactly what the server produced; WRITE: what was sent;
//!   NULL: of nothing = 0), `error` null or the error object `{"kind",
//!   "op", "message", ...}`, `rpc_status` the RPC accept status name
//!   (`"SUCCESS"`, `"PROG_UNAVAIL"`, `"PROG_MISMATCH"`, `"PROC_UNAVAIL"`,
//!   `"GARBAGE_ARGS"`, `"SYSTEM_ERR"`, or `"RPC_MISMATCH"` /
//!   `"AUTH_ERROR"` for a denied call) or null when no RPC reply arrived.
//!   `ok` also requires the data check (ECHO equal, READ equal to the
//!   pattern, WRITE's returned count and CRC equal). `elapsed_us` is the
//!   time of the RPC call alone (not generating or checking the data).
//!   Exit status 0 when every call is ok, 1 otherwise, 2 for bad usage
//!   (a payload over `--max-message` is refused before connecting).
//! * `probe ADDR`: connects, makes one NULL call (default the test program;
//!   a PROG_UNAVAIL answer still carries the credit grant) and prints what
//!   was negotiated (exit status 1 when the NULL got an RPC error); `--json`:
//!   `{"ok", "error", "prog", "vers", "rpc_status", "version", "mpa_rev", "crc", "markers",
//!   "ird", "ord", "local_private_data", "peer_private_data",
//!   "inline_send", "inline_recv", "remote_invalidate",
//!   "credits_granted"}`, the private data as the object of
//!   `rpcrdma decode --what private-data --json` (MPA private data field,
//!   RFC 6581 IRD/ORD header included).
//!
//! # Timeouts (call, probe)
//!
//! As Linux xprtrdma: a call without a reply within the major timeout
//! (`call --timeout`, default 10 s; probe: 10 s) ends the connection; the
//! client reconnects and sends the call again with the same XID (the
//! server's duplicate-reply cache answers a call it already executed).
//! After `--retrans` + 1 timed-out transmissions (default 2, Linux's NFS
//! default; a connection lost for another reason does not count) the call
//! fails with "the peer never answered: no reply after N transmission(s),
//! one per connection, M of them timed out".

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use rpcrdma::prometheus::{Exporter, MetricsServer};
use rpcrdma::rdma::provider::{IwarpCm, IwarpConfig, ProviderConfig, VerbsCm};
use rpcrdma::rdma::{
    connect_client, RdmaClientConfig, RdmaClientTransport, RdmaServer, RdmaServerConfig, RdmaStatus,
};
use rpcrdma::rpcbind;
use rpcrdma::testprog::{self, TEST_MAX_DATA, TEST_PROG, TEST_VERS};
use rpcrdma::{
    CallOptions, Client, ClientConfig, Message, ReconnectPolicy, ReplyError, RpcError, Server,
};
use rpcrdma_proto::engine::{Config as EngineConfig, RpcRdmaVersion};
use rpcrdma_proto::wire::v2::{PropSet, PropVal};
use serde_json::{json, Value};

use crate::accept_args::AcceptArgs;
use rpcrdma_cli::cli_error::CliError;
use rpcrdma_cli::num_args::{num_u32, size_u32, size_u64};

/// Which RDMA provider carries the connections.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProviderKind {
    /// rpcrdma's software iWARP over TCP (talks to Linux siw).
    #[default]
    Iwarp,
    /// rdma-core verbs (RDMA NICs, the kernel's siw and rxe), loaded at run
    /// time.
    Verbs,
}

impl ProviderKind {
    /// Its name in output (`probe --json` "provider").
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Iwarp => "iwarp",
            ProviderKind::Verbs => "verbs",
        }
    }
}

/// The verbs provider on `device` (`None`: the one the RDMA CM picks).
pub fn verbs_provider(device: Option<String>) -> ProviderConfig {
    let mut cm = VerbsCm::default();
    cm.config.device = device;
    ProviderConfig::Verbs(cm)
}

/// Link and engine options shared by the RDMA commands.
#[derive(Args, Debug, Clone)]
pub struct LinkArgs {
    /// RDMA provider: iwarp (software iWARP over TCP) or verbs (rdma-core;
    /// the device is the one the RDMA CM picks for the address). The MPA
    /// options apply to iwarp only.
    #[arg(long, value_enum, default_value_t = ProviderKind::Iwarp)]
    pub provider: ProviderKind,
    /// With `--provider verbs`: the RDMA device to use (e.g. siw0); a
    /// connection on another device is refused. Default: the device the
    /// RDMA CM picks for the address.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Credits: granted (serve) or requested (call, probe). Defaults: 64 /
    /// 128, as Linux.
    #[arg(long, value_parser = num_u32)]
    pub credits: Option<u32>,
    /// Our RFC 8797 Send Size (largest message we send inline; K/M
    /// suffixes).
    #[arg(long, default_value = "4K", value_parser = size_u32)]
    pub inline_send: u32,
    /// Our RFC 8797 Receive Size (receive buffer size; K/M suffixes).
    #[arg(long, default_value = "4K", value_parser = size_u32)]
    pub inline_recv: u32,
    /// Set the R flag (remote invalidation). Default: set by a client,
    /// clear by a server (as Linux).
    #[arg(long, overrides_with = "no_remote_invalidate")]
    pub remote_invalidate: bool,
    /// Clear the R flag.
    #[arg(long, overrides_with = "remote_invalidate")]
    pub no_remote_invalidate: bool,
    /// Use (client: ask for; server: require) the MPA CRC32C.
    #[arg(long, overrides_with = "no_crc")]
    pub crc: bool,
    /// Do not use the MPA CRC (the default).
    #[arg(long, overrides_with = "crc")]
    pub no_crc: bool,
    /// Largest RPC message (call or reply, headers included) this side
    /// sends or accepts, over any chunk; K/M/G suffixes. The server's own
    /// limit applies too: raise it on both sides.
    #[arg(long, value_name = "SIZE", value_parser = size_u32, default_value = "4M")]
    pub max_message: u32,
    /// MPA revision: 1 (RFC 5044) or 2 (RFC 6581 enhanced, with IRD/ORD).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub mpa_rev: u8,
    /// RPC-over-RDMA version: 1 (RFC 8166), 2 (draft-cel-nfsv4-rpcrdma-
    /// version-two-09) or auto. A client in auto sends version 2 first and
    /// goes on in version 1 on the same connection when the server refuses
    /// it (and remembers the address); with 2 it fails instead. A server in
    /// auto answers each client in the version of its first message; with
    /// 1 it refuses version 2 (ERR_VERS, as Linux), with 2 version 1.
    #[arg(long, value_name = "1|2|auto", default_value = "auto")]
    pub rpcrdma_version: RpcRdmaVersion,
}

impl Default for LinkArgs {
    /// The options' defaults (no option given).
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            l: LinkArgs,
        }
        <P as clap::Parser>::try_parse_from(["rpcrdma"])
            .map(|p| p.l)
            .expect("the defaults of LinkArgs parse")
    }
}

impl LinkArgs {
    fn engine(&self, mut e: EngineConfig, server: bool) -> EngineConfig {
        if let Some(c) = self.credits {
            if server {
                e.credits_granted = c;
            } else {
                e.credits_requested = c;
            }
        }
        e.inline_send = self.inline_send;
        e.inline_recv = self.inline_recv;
        if self.remote_invalidate {
            e.remote_invalidation = true;
        }
        if self.no_remote_invalidate {
            e.remote_invalidation = false;
        }
        e.rpcrdma_version = self.rpcrdma_version;
        e.limits.max_message_len = self.max_message;
        // The Read sinks of one connection hold at least one whole message.
        e.limits.max_read_sink_bytes = e
            .limits
            .max_read_sink_bytes
            .max(u64::from(self.max_message));
        e
    }

    /// The MPA CRC the options ask for: `Some(true)` with `--crc`,
    /// `Some(false)` with `--no-crc`, `None` (the default: off) without.
    pub fn crc_choice(&self) -> Option<bool> {
        match (self.crc, self.no_crc) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        }
    }

    /// `config` with these options' engine and provider settings (timers,
    /// reconnection and the rest kept).
    pub fn apply_client(&self, mut config: RdmaClientConfig) -> RdmaClientConfig {
        config.engine = self.engine(config.engine, false);
        self.set_provider(&mut config.provider);
        config
    }

    /// `config` with these options' engine and provider settings (connection
    /// limits and the accept path kept).
    pub fn apply_server(&self, mut config: RdmaServerConfig) -> RdmaServerConfig {
        config.engine = self.engine(config.engine, true);
        self.set_provider(&mut config.provider);
        config
    }

    fn provider(&self) -> ProviderConfig {
        let mut p = ProviderConfig::Iwarp(IwarpCm::default());
        self.set_provider(&mut p);
        p
    }

    /// These options' provider on `p`: the verbs provider (on `--device`)
    /// with `--provider verbs`, else the MPA settings of an iWARP one.
    fn set_provider(&self, p: &mut ProviderConfig) {
        if self.provider == ProviderKind::Verbs {
            *p = verbs_provider(self.device.clone());
            return;
        }
        if let Some(cm) = p.iwarp_mut() {
            cm.config = IwarpConfig {
                rev: self.mpa_rev,
                crc: self.crc_choice().unwrap_or(cm.config.crc),
                ..cm.config.clone()
            };
        }
    }

    /// Server settings from these options.
    pub fn server_config(&self) -> RdmaServerConfig {
        RdmaServerConfig {
            engine: self.engine(EngineConfig::server(), true),
            provider: self.provider(),
            ..RdmaServerConfig::default()
        }
    }

    /// Client settings from these options: a call without a reply after
    /// `major` ends the connection and goes out again on a new one, with
    /// the same XID, at most `retrans` times (see the module docs).
    pub fn client_config(&self, major: Duration, retrans: u32) -> RdmaClientConfig {
        let mut engine = self.engine(EngineConfig::client(), false);
        engine.call_timeout = Some(major);
        engine.max_transmissions = Some(retrans.saturating_add(1));
        RdmaClientConfig {
            engine,
            provider: self.provider(),
            reconnect: Some(ReconnectPolicy {
                max_attempts: 3,
                ..ReconnectPolicy::default()
            }),
            ..RdmaClientConfig::default()
        }
    }
}

/// Room for the RPC and RPC-over-RDMA headers of a test program call or
/// reply around its payload (AUTH_SYS included), in the up-front check of
/// a payload size against `--max-message`.
pub const HEADER_ROOM: u64 = 1024;

/// Checks a payload of `size` octets (given with `option`) against the test
/// program's limit and `--max-message`, before anything is sent: the error
/// names the option to change.
pub fn check_payload(size: u64, option: &str, link: &LinkArgs) -> Result<(), CliError> {
    use rpcrdma::units::fmt_size;
    if size > u64::from(TEST_MAX_DATA) {
        return Err(CliError::usage(
            option,
            format!(
                "{option} {} exceeds the test program's largest payload, {} (TEST_MAX_DATA)",
                fmt_size(size),
                fmt_size(TEST_MAX_DATA.into())
            ),
        ));
    }
    let max = u64::from(link.max_message);
    if size + HEADER_ROOM > max {
        return Err(CliError::bad_input(
            "too-large",
            "check-size",
            format!(
                "{option} {}: with its RPC headers (up to {HEADER_ROOM} octets) the message \
                 exceeds --max-message {} ({max} octets); raise --max-message (to {} or more, \
                 on the server too: `rpcrdma serve --max-message`)",
                fmt_size(size),
                fmt_size(max),
                fmt_size((size + HEADER_ROOM).next_multiple_of(1 << 20)),
            ),
        )
        .with("option", "--max-message")
        .with("max_message", max));
    }
    Ok(())
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    runtime_with(2)
}

/// A runtime of `threads` workers: 1 (or 0) is tokio's current-thread
/// runtime (no hand-offs between workers: what `rpcrdma bench` runs by
/// default), more a multi-thread one. Blocking work still goes to the
/// blocking pool either way.
pub(crate) fn runtime_with(threads: usize) -> tokio::runtime::Runtime {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("tokio runtime")
    }
}

pub(crate) fn resolve(addr: &str) -> Result<SocketAddr, CliError> {
    use std::net::ToSocketAddrs;
    let bad = |m| CliError::bad_input("bad-address", "resolve", m);
    addr.to_socket_addrs()
        .map_err(|e| bad(format!("{addr}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("{addr}: no address")))
}

/// A connection that could not be set up.
pub fn connect_error(addr: SocketAddr, e: &std::io::Error) -> CliError {
    CliError::failed(
        "connect",
        "connect",
        format!("cannot connect to {addr}: {e}"),
    )
    .with("addr", addr.to_string())
}

/// `--args-hex`: XDR arguments, a whole number of 4-octet units.
fn parse_args_hex(text: &str) -> Result<Bytes, CliError> {
    let bad = |m: String| {
        CliError::bad_input("bad-hex", "parse-arguments", m).with("option", "--args-hex")
    };
    let b = crate::input::parse_hex(text.as_bytes()).map_err(|e| match e {
        crate::input::InputError::BadHex { offset, detail } => {
            bad(format!("--args-hex: {detail} at offset {offset}"))
        }
        crate::input::InputError::Io(e) => bad(e.to_string()),
    })?;
    if b.len() % 4 != 0 {
        return Err(bad(format!(
            "--args-hex: {} octets is not a whole number of XDR units (4 octets)",
            b.len()
        )));
    }
    Ok(Bytes::from(b))
}

// ------------------------------------------------------------------ serve

/// `rpcrdma serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0: an ephemeral port, printed).
    #[arg(long, default_value = "127.0.0.1:20049")]
    pub listen: String,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics (text format 0.0.4) over HTTP at
    /// `http://ADDR/metrics`: per-procedure calls, errors, octets and
    /// execution-time histograms, transport counters, and gauges
    /// (connections, credits in use, Read-sink octets, registrations).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Register the test program with the local rpcbind (RFC 1833 SET on
    /// netid `rdma`, `rdma6` for IPv6) and unregister it on exit, so
    /// `rpcinfo` lists it. Without a reachable rpcbind: a warning, and
    /// the server runs unregistered.
    #[arg(long)]
    pub register: bool,
    /// Where rpcbind is: a Unix socket path or HOST:PORT (default
    /// /run/rpcbind.sock, then 127.0.0.1:111).
    #[arg(long, value_name = "ENDPOINT", requires = "register")]
    pub rpcbind: Option<String>,
    #[command(flatten)]
    pub opts: RdmaServeOpts,
}

/// The RPC-over-RDMA server options every serving command takes (`serve`,
/// `nfs serve`): driver mode, Read budget and timers, link and engine
/// options, connection limits.
#[derive(Args, Debug, Clone)]
pub struct RdmaServeOpts {
    /// Drive each connection on a thread of its own (blocking mode, see
    /// `rpcrdma::rdma::RdmaServerConfig::blocking`).
    #[arg(long)]
    pub blocking: bool,
    /// Server-wide RDMA Read-sink budget: the Read sinks all connections
    /// together may have registered at once (on top of 16 MiB per
    /// connection). Calls wait for it in arrival order; one that can never
    /// fit gets ERR_CHUNK. 0: per-connection budgets only.
    // The default is DEFAULT_READ_SINK_BUDGET (a test checks it).
    #[arg(long, value_name = "SIZE", value_parser = size_u64, default_value = "128M")]
    pub read_sink_budget: u64,
    /// RDMA Read deadline in seconds: a received call whose Reads have not
    /// all completed this long after they were issued terminates its
    /// connection (the peer broke the protocol). 0: no deadline.
    #[arg(long, value_name = "SECS", value_parser = parse_secs,
          default_value_t = secs(EngineConfig::server().read_timeout))]
    pub read_timeout: f64,
    /// Idle timeout in seconds: a connection that has not carried a valid
    /// RPC-over-RDMA call this long after it was established is closed.
    /// 0: none.
    #[arg(long, value_name = "SECS", value_parser = parse_secs,
          default_value_t = secs(EngineConfig::server().idle_timeout))]
    pub idle_timeout: f64,
    #[command(flatten)]
    pub link: LinkArgs,
    #[command(flatten)]
    pub accept: AcceptArgs,
}

/// A timer's seconds (0 for none).
fn secs(d: Option<Duration>) -> f64 {
    d.map_or(0.0, |d| d.as_secs_f64())
}

/// A timer from seconds (0: none).
fn timer(s: f64) -> Option<Duration> {
    (s > 0.0).then(|| Duration::from_secs_f64(s))
}

fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: seconds from 0 to 1e9 expected")),
    }
}

impl RdmaServeOpts {
    /// The server settings of these options (connection limits included).
    pub fn server_config(&self) -> RdmaServerConfig {
        let mut c = RdmaServerConfig {
            blocking: self.blocking,
            read_sink_budget: (self.read_sink_budget > 0).then_some(self.read_sink_budget),
            ..self.link.server_config()
        };
        c.engine.read_timeout = timer(self.read_timeout);
        c.engine.idle_timeout = timer(self.idle_timeout);
        self.accept.apply(c)
    }
}

/// Waits `duration` seconds (`None`, or not a finite number ≥ 0: forever),
/// or until SIGINT / SIGTERM, whichever comes first. The signal handlers
/// are those of `signals`, installed before (so that a signal sent as soon
/// as the command said it is ready is not fatal).
pub(crate) async fn run_for(duration: Option<f64>, signals: &mut Signals) {
    let wait = async {
        match duration {
            Some(s) if s.is_finite() && s >= 0.0 => {
                tokio::time::sleep(Duration::from_secs_f64(s)).await
            }
            _ => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = wait => {}
        () = signals.recv() => {}
    }
}

/// SIGINT and SIGTERM handlers: installed when created (in a runtime).
pub(crate) struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    /// Installs the handlers (none if they cannot be installed).
    pub(crate) fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Signals(
            match (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) {
                (Ok(i), Ok(t)) => Some((i, t)),
                _ => None,
            },
        )
    }

    /// The next SIGINT or SIGTERM (pending forever without handlers).
    pub(crate) async fn recv(&mut self) {
        match &mut self.0 {
            Some((i, t)) => {
                tokio::select! {
                    _ = i.recv() => {}
                    _ = t.recv() => {}
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

/// Runs `rpcrdma serve`.
pub fn serve(args: ServeArgs) -> ExitCode {
    let rt = runtime();
    rt.block_on(async move {
        let server = Server::default();
        testprog::register(&server);
        let config = args.opts.server_config();
        let rdma = match RdmaServer::serve(&server, args.listen.as_str(), config).await {
            Ok(r) => r,
            Err(e) => {
                return CliError::failed(
                    "listen",
                    "listen",
                    format!("cannot listen on {}: {e}", args.listen),
                )
                .report("serve", false);
            }
        };
        let mut signals = Signals::install();
        println!("listening on {}", rdma.local_addr());
        let _metrics = match &args.metrics {
            Some(addr) => match serve_metrics(addr, &server, &rdma).await {
                Ok(m) => {
                    println!("metrics on http://{}/metrics", m.local_addr());
                    Some(m)
                }
                Err(e) => {
                    eprintln!("rpcrdma serve: cannot serve metrics on {addr}: {e}");
                    rdma.shutdown().await;
                    return ExitCode::from(2);
                }
            },
            None => None,
        };
        let registration = if args.register {
            register(rdma.local_addr(), args.rpcbind.as_deref()).await
        } else {
            None
        };
        use std::io::Write;
        let _ = std::io::stdout().flush();
        run_for(args.duration, &mut signals).await;
        if let Some(r) = registration {
            if let Err(e) = r.unregister().await {
                eprintln!("rpcrdma serve: WARNING: could not unregister from rpcbind: {e}");
            }
        }
        let m = rdma.metrics().snapshot();
        let s = server.metrics();
        println!(
            "served {} calls, {} replies, {} connections, {} DRC hits",
            s.calls_received, m.replies_sent, m.connections, s.drc_hits
        );
        println!(
            "rpcrdma versions: {} connections in version 1, {} in version 2",
            m.rpcrdma_v1_connections, m.rpcrdma_v2_connections
        );
        print!("{}", rpcrdma_cli::proc_stats::to_text(server.stats()));
        rdma.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Registers the test program on `listen` with rpcbind (`endpoint`, or the
/// local one); `None`, after a loud warning, when that fails.
pub(crate) async fn register(
    listen: SocketAddr,
    endpoint: Option<&str>,
) -> Option<rpcbind::Registration> {
    let endpoints = match endpoint {
        Some(e) => match e.parse::<SocketAddr>() {
            Ok(a) => vec![rpcbind::Endpoint::Tcp(a)],
            Err(_) => vec![rpcbind::Endpoint::Unix(e.into())],
        },
        None => rpcbind::Endpoint::local(),
    };
    let owner = rpcbind::owner();
    let entries: Vec<rpcbind::Rpcb> = rpcbind::rdma_netids(listen)
        .into_iter()
        .map(|(netid, a)| rpcbind::Rpcb {
            prog: TEST_PROG,
            vers: TEST_VERS,
            netid: netid.into(),
            addr: rpcbind::uaddr(a),
            owner: owner.clone(),
        })
        .collect();
    match rpcbind::Registration::register(&endpoints, entries).await {
        Ok(r) => {
            for e in r.entries() {
                println!(
                    "registered program {} version {} on {} {} with rpcbind ({}, version {})",
                    e.prog,
                    e.vers,
                    e.netid,
                    e.addr,
                    r.endpoint(),
                    r.version()
                );
            }
            Some(r)
        }
        Err(e) => {
            eprintln!("rpcrdma serve: WARNING: NOT registered with rpcbind: {e}");
            None
        }
    }
}

/// The Prometheus endpoint of a server: its per-procedure statistics, the
/// transport's counters and the RDMA gauges.
pub(crate) async fn serve_metrics(
    addr: &str,
    server: &Server,
    rdma: &RdmaServer,
) -> std::io::Result<MetricsServer> {
    let gauges = rdma.gauges();
    let exporter = Exporter::new()
        .procs(server.stats().clone())
        .transport("rdma", rdma.metrics())
        .gauges(move || {
            let g = gauges();
            vec![
                (
                    "connections",
                    "Live RPC-over-RDMA connections",
                    g.connections,
                ),
                (
                    "credits_granted",
                    "Credits granted to the peers (sum)",
                    g.credits_granted,
                ),
                (
                    "credits_in_use",
                    "Received calls not finished (sum)",
                    g.credits_in_use,
                ),
                (
                    "read_sink_bytes",
                    "Octets of RDMA Read sinks registered",
                    g.read_sink_bytes,
                ),
                (
                    "pooled_sink_bytes",
                    "Octets of chunk-sink buffers pooled",
                    g.pooled_sink_bytes,
                ),
                (
                    "registrations",
                    "Memory registrations live",
                    g.registrations,
                ),
            ]
        });
    MetricsServer::bind(addr, exporter).await
}

// ------------------------------------------------------------------- call

/// Procedures of the test program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProcName {
    /// TEST_NULL.
    Null,
    /// TEST_ECHO (opaque, not DDP-eligible).
    Echo,
    /// TEST_READ (result DDP-eligible: a Write chunk).
    Read,
    /// TEST_WRITE (argument DDP-eligible: a Read chunk).
    Write,
}

impl ProcName {
    fn name(self) -> &'static str {
        match self {
            ProcName::Null => "null",
            ProcName::Echo => "echo",
            ProcName::Read => "read",
            ProcName::Write => "write",
        }
    }

    fn number(self) -> u32 {
        match self {
            ProcName::Null => testprog::PROC_NULL,
            ProcName::Echo => testprog::PROC_ECHO,
            ProcName::Read => testprog::PROC_READ,
            ProcName::Write => testprog::PROC_WRITE,
        }
    }
}

/// `rpcrdma call`.
#[derive(Args, Debug)]
pub struct CallArgs {
    /// Server address (host:port).
    pub addr: String,
    /// Test program procedure.
    #[arg(long, value_enum, default_value_t = ProcName::Null)]
    pub proc: ProcName,
    /// Payload octets (ECHO, READ, WRITE; K/M/G suffixes).
    #[arg(long, default_value = "0", value_parser = size_u32)]
    pub size: u32,
    /// Number of calls (sequential).
    #[arg(long, default_value_t = 1, value_parser = num_u32)]
    pub count: u32,
    /// Pattern seed of the data.
    #[arg(long, default_value_t = 1, value_parser = num_u32)]
    pub seed: u32,
    /// Program number of a raw call (with --vers, --procnum; hex with 0x).
    #[arg(long, requires = "procnum", value_parser = num_u32)]
    pub prog: Option<u32>,
    /// Version of a raw call (default 1).
    #[arg(long, value_parser = num_u32)]
    pub vers: Option<u32>,
    /// Procedure number of a raw call (arguments: --args-hex, else void;
    /// the results are printed in hex).
    #[arg(long, value_parser = num_u32)]
    pub procnum: Option<u32>,
    /// XDR arguments of a raw call, in hex (whitespace, `0x` and `:`
    /// separators allowed; a multiple of 4 octets).
    #[arg(long, value_name = "HEX", requires = "procnum")]
    pub args_hex: Option<String>,
    /// Major timeout in seconds: a call without a reply this long ends the
    /// connection and is sent again, with the same XID, on a new one.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Retransmissions (each on a new connection) before a call fails.
    #[arg(long, default_value_t = 2)]
    pub retrans: u32,
    /// One JSON object per call.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub link: LinkArgs,
}

/// What one call did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Everything checked out.
    pub ok: bool,
    /// Program, version and procedure number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure number.
    pub proc: u32,
    /// Procedure name (the test program's), if known.
    pub proc_name: Option<&'static str>,
    /// The call's XID.
    pub xid: u32,
    /// Payload octets moved.
    pub bytes: u64,
    /// CRC-32C of those octets.
    pub crc32c: u32,
    /// Wall time.
    pub elapsed_us: u64,
    /// What failed.
    pub error: Option<CliError>,
    /// RPC status name, if a reply arrived.
    pub rpc_status: Option<String>,
    /// The results of a raw call (`--args-hex` or `--procnum`), as XDR.
    pub result: Option<Bytes>,
}

impl Outcome {
    fn new(xid: u32, spec: &CallSpec) -> Self {
        let (prog, vers, proc, proc_name) = match spec {
            CallSpec::Raw {
                prog, vers, proc, ..
            } => (*prog, *vers, *proc, None),
            CallSpec::Test { proc, .. } => (TEST_PROG, TEST_VERS, proc.number(), Some(proc.name())),
        };
        Outcome {
            ok: false,
            prog,
            vers,
            proc,
            proc_name,
            xid,
            bytes: 0,
            crc32c: 0,
            elapsed_us: 0,
            error: None,
            rpc_status: None,
            result: None,
        }
    }

    /// The `--json` object.
    pub fn json(&self) -> Value {
        json!({
            "ok": self.ok,
            "prog": self.prog,
            "vers": self.vers,
            "proc": self.proc,
            "proc_name": self.proc_name,
            "xid": self.xid,
            "bytes": self.bytes,
            "crc32c": self.crc32c,
            "elapsed_us": self.elapsed_us,
            "error": self.error.as_ref().map(CliError::error_json),
            "rpc_status": self.rpc_status,
            "result_hex": self.result.as_ref().map(hex::encode),
        })
    }

    /// The text line (and the raw result in hex on the next line).
    pub fn text(&self) -> String {
        let p = match self.proc_name {
            Some(n) => n.to_string(),
            None => format!("{:#x} v{} proc {}", self.prog, self.vers, self.proc),
        };
        let mut s = format!(
            "{p}: {} xid=0x{:08x} status={} bytes={} crc32c=0x{:08x} {}us{}",
            if self.ok { "ok" } else { "FAILED" },
            self.xid,
            self.rpc_status.as_deref().unwrap_or("-"),
            self.bytes,
            self.crc32c,
            self.elapsed_us,
            self.error
                .as_ref()
                .map_or(String::new(), |e| format!(" error: {e}"))
        );
        if let Some(r) = &self.result {
            s.push_str(&format!(
                "\n  result ({} octets): {}",
                r.len(),
                hex::encode(r)
            ));
        }
        s
    }
}

/// The failure of a call, as the tool reports it (`op` the operation).
pub fn rpc_error(e: &RpcError, op: &str) -> CliError {
    use rpcrdma::TransportError;
    let kind = match e {
        RpcError::Transport(TransportError::TooLarge { .. }) => "too-large",
        RpcError::Transport(_) => "transport",
        RpcError::Timeout { .. } => "timeout",
        RpcError::Reply(_) => "rpc",
        RpcError::BadReply(_) => "bad-reply",
        _ => "caller",
    };
    let mut c = CliError::failed(kind, op, e.to_string());
    if let Some(s) = reply_status(e) {
        c = c.with("rpc_status", s);
    }
    if let RpcError::Transport(TransportError::TooLarge { .. }) = e {
        c = c.with("option", "--max-message");
    }
    c
}

fn reply_status(e: &RpcError) -> Option<&'static str> {
    Some(match e.reply_error()? {
        ReplyError::ProgUnavail => "PROG_UNAVAIL",
        ReplyError::ProgMismatch { .. } => "PROG_MISMATCH",
        ReplyError::ProcUnavail => "PROC_UNAVAIL",
        ReplyError::GarbageArgs => "GARBAGE_ARGS",
        ReplyError::SystemErr => "SYSTEM_ERR",
        ReplyError::OtherAccept(_) => "OTHER",
        ReplyError::RpcMismatch { .. } => "RPC_MISMATCH",
        ReplyError::AuthError(_) => "AUTH_ERROR",
    })
}

/// What to call.
#[derive(Clone, Debug)]
pub enum CallSpec {
    /// A test program procedure with `size` octets of `pattern(seed, size)`.
    Test {
        /// Which.
        proc: ProcName,
        /// Payload octets.
        size: u32,
        /// Pattern seed.
        seed: u32,
    },
    /// A call to any program, its arguments given as XDR (void by
    /// default).
    Raw {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
        /// Procedure.
        proc: u32,
        /// The XDR arguments.
        args: Bytes,
    },
}

/// Makes one call; `xid` is the XID the client will use for it.
pub async fn one_call(c: &Client, xid: u32, spec: &CallSpec) -> Outcome {
    let start = Instant::now();
    let mut out = Outcome::new(xid, spec);
    let spec = spec.clone();
    // Reply sizes as Linux computes them: exact bounds, so that small
    // replies come back inline and only what needs one gets a chunk.
    let small = 1024u32;
    let mut call_time: Option<Duration> = None;
    let r: Result<(), RpcError> = async {
        match spec {
            CallSpec::Raw {
                prog,
                vers,
                proc,
                args,
            } => {
                let opts = CallOptions {
                    // Results of any size up to the message limit.
                    reply_max: Some(c.config().limits.max_message_len.max(small)),
                    ..CallOptions::default()
                };
                let t0 = Instant::now();
                let r = c
                    .call_with(prog, vers, proc, Message::inline(args), &opts)
                    .await;
                call_time = Some(t0.elapsed());
                let r = r?;
                out.rpc_status = Some("SUCCESS".into());
                let res = r.results().flatten();
                out.bytes = res.len() as u64;
                out.crc32c = crc32c::crc32c(&res);
                out.result = Some(res);
                out.ok = true;
            }
            CallSpec::Test { proc, size, seed } => {
                let data = match proc {
                    ProcName::Echo | ProcName::Write => testprog::pattern(seed, size as usize),
                    _ => Vec::new(),
                };
                let mut args = Message::builder();
                let (procnum, ddp, reply_max) = match proc {
                    ProcName::Null => (testprog::PROC_NULL, vec![], small),
                    ProcName::Echo => {
                        args.put_opaque(&data)?;
                        (testprog::PROC_ECHO, vec![], small + size)
                    }
                    ProcName::Read => {
                        args.put_u32(size).put_u32(seed);
                        (testprog::PROC_READ, vec![size], small)
                    }
                    ProcName::Write => {
                        args.put_ddp_opaque(Bytes::from(data.clone()))?;
                        (testprog::PROC_WRITE, vec![], small)
                    }
                };
                let opts = CallOptions {
                    ddp_results: ddp,
                    reply_max: Some(reply_max),
                    ..CallOptions::default()
                };
                let args = args.finish();
                let t0 = Instant::now();
                let r = c
                    .call_with(TEST_PROG, TEST_VERS, procnum, args, &opts)
                    .await;
                call_time = Some(t0.elapsed());
                let r = r?;
                out.rpc_status = Some("SUCCESS".into());
                let mut rd = r.reader();
                let check = match proc {
                    ProcName::Null => rd.finish("void").map(|_| None),
                    ProcName::Echo => rd
                        .opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "echo.result")
                        .map(|got| {
                            out.bytes = got.len() as u64;
                            out.crc32c = crc32c::crc32c(&got);
                            (got[..] != data[..]).then(|| "echoed data differs".to_string())
                        }),
                    ProcName::Read => rd.ddp_opaque(size, "read count", "read.result").map(|got| {
                        out.bytes = got.len() as u64;
                        out.crc32c = crc32c::crc32c(&got);
                        (got[..] != testprog::pattern(seed, size as usize)[..])
                            .then(|| "read data is not the pattern".to_string())
                    }),
                    ProcName::Write => {
                        out.bytes = data.len() as u64;
                        out.crc32c = crc32c::crc32c(&data);
                        match (rd.u32("write.count"), rd.u32("write.crc32c")) {
                            (Ok(n), Ok(crc)) => Ok((n as usize != data.len()
                                || crc != out.crc32c)
                                .then(|| {
                                    format!(
                                        "server saw {n} octets with crc32c 0x{crc:08x}, sent {} with 0x{:08x}",
                                        data.len(),
                                        out.crc32c
                                    )
                                })),
                            (Err(e), _) | (_, Err(e)) => Err(e),
                        }
                    }
                };
                match check? {
                    None => out.ok = true,
                    Some(why) => out.error = Some(CliError::failed("data-mismatch", "call", why)),
                }
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = r {
        out.rpc_status = reply_status(&e).map(str::to_string);
        out.error = Some(rpc_error(&e, "call"));
        out.ok = false;
    }
    // The call itself (not building the data or checking it).
    out.elapsed_us = call_time.unwrap_or_else(|| start.elapsed()).as_micros() as u64;
    out
}

fn first_xid() -> u32 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.subsec_nanos().wrapping_mul(0x9e37_79b1) ^ (d.as_secs() as u32)
}

/// Connects a client with `link` options, the major timeout `major` and
/// `retrans` retransmissions (see the module docs).
pub async fn connect(
    addr: SocketAddr,
    link: &LinkArgs,
    major: Duration,
    retrans: u32,
    xid: u32,
) -> std::io::Result<(Client, Arc<RdmaClientTransport>)> {
    let rdma = link.client_config(major, retrans);
    // The client's own timer only backs the engine's up: every
    // transmission with its reconnection must fit.
    let per = major + rdma.connect_timeout + Duration::from_secs(2);
    connect_client(
        addr,
        ClientConfig {
            timeout: per * retrans.saturating_add(1).min(100),
            first_xid: Some(xid),
            ..ClientConfig::default()
        },
        rdma,
    )
    .await
}

/// Runs `rpcrdma call`.
pub fn call(args: CallArgs) -> ExitCode {
    let addr = match resolve(&args.addr) {
        Ok(a) => a,
        Err(e) => return e.report("call", args.json),
    };
    let raw_args = match args.args_hex.as_deref().map(parse_args_hex) {
        Some(Err(e)) => return e.report("call", args.json),
        Some(Ok(b)) => b,
        None => Bytes::new(),
    };
    let spec = match (args.prog, args.procnum) {
        (Some(prog), Some(proc)) => CallSpec::Raw {
            prog,
            vers: args.vers.unwrap_or(1),
            proc,
            args: raw_args,
        },
        (None, Some(proc)) => CallSpec::Raw {
            prog: TEST_PROG,
            vers: args.vers.unwrap_or(TEST_VERS),
            proc,
            args: raw_args,
        },
        _ => CallSpec::Test {
            proc: args.proc,
            size: args.size,
            seed: args.seed,
        },
    };
    if let CallSpec::Test { size, .. } = spec {
        if let Err(e) = check_payload(size.into(), "--size", &args.link) {
            return e.report("call", args.json);
        }
    }
    let timeout = Duration::from_secs_f64(args.timeout.clamp(0.001, 86_400.0));
    let rt = runtime();
    rt.block_on(async move {
        let xid0 = first_xid();
        let (c, t) = match connect(addr, &args.link, timeout, args.retrans, xid0).await {
            Ok(x) => x,
            Err(e) => return connect_error(addr, &e).report("call", args.json),
        };
        let mut all_ok = true;
        for i in 0..args.count {
            let o = one_call(&c, xid0.wrapping_add(i), &spec).await;
            all_ok &= o.ok;
            if args.json {
                let mut j = o.json();
                j["rpcrdma_version"] = t.status().version.version.into();
                // The client's per-procedure statistics so far (the last
                // line has them all).
                j["proc_stats"] = rpcrdma_cli::proc_stats::to_json(c.stats());
                println!("{j}");
            } else {
                println!("{}", o.text());
            }
        }
        if !args.json {
            println!("{}", t.status().mountstats());
            print!("{}", rpcrdma_cli::proc_stats::to_text(c.stats()));
        }
        t.shutdown().await;
        if all_ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}

// ------------------------------------------------------------------ probe

/// `rpcrdma probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Server address (host:port).
    pub addr: String,
    /// Program of the NULL call (default: the test program; hex with 0x).
    #[arg(long, value_parser = num_u32)]
    pub prog: Option<u32>,
    /// Version of the NULL call.
    #[arg(long, value_parser = num_u32)]
    pub vers: Option<u32>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Probe twice, on two connections one after the other (the second
    /// shows what this process learned from the first: an auto client
    /// that fell back starts it in version 1).
    #[arg(long)]
    pub again: bool,
    #[command(flatten)]
    pub link: LinkArgs,
}

fn pd_json(bytes: &[u8]) -> Value {
    crate::json_misc::decode_private_data(bytes, true)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

/// The `probe --json` object of a connection's status.
pub fn probe_json(st: &RdmaStatus) -> Value {
    let n = st.negotiated;
    json!({
        "version": 1,
        "mpa_rev": st.link.mpa_rev,
        "crc": st.link.crc,
        "markers": st.link.markers,
        "ird": st.link.ird,
        "ord": st.link.ord,
        "local_private_data": pd_json(&st.link.local_private_data),
        "peer_private_data": pd_json(&st.link.peer_private_data),
        "inline_send": n.map(|n| n.send_threshold),
        "inline_recv": n.map(|n| n.recv_threshold),
        "remote_invalidate": n.map(|n| n.remote_invalidation),
        "credits_granted": st.engine.credits_granted,
        "rpcrdma_version": st.version.version,
        "version_fallback": st.version.fallback,
        "local_properties": props_json(&st.version.local_properties),
        "peer_properties": props_json(&st.version.peer_properties),
    })
}

/// Transport properties as a list of `{"id","name","value"}` (`value`: the
/// number or enum name a known property carries, the hex of an unknown
/// one's data; `null` for a zero-length value, the default).
pub fn props_json(props: &PropSet) -> Value {
    let items: Vec<Value> = props
        .props
        .iter()
        .map(|p| {
            let value = match p {
                PropVal::Rbsiz(v) => v.map_or(Value::Null, Value::from),
                PropVal::Brs(v) => v.map_or(Value::Null, |b| Value::from(b.name())),
                PropVal::Unknown { data, .. } => Value::from(hex::encode(data)),
            };
            json!({
                "id": p.id().0,
                "name": p.id().short_name().unwrap_or("unknown"),
                "value": value,
            })
        })
        .collect();
    Value::from(items)
}

/// Runs `rpcrdma probe`.
pub fn probe(args: ProbeArgs) -> ExitCode {
    let addr = match resolve(&args.addr) {
        Ok(a) => a,
        Err(e) => return e.report("probe", args.json),
    };
    let rt = runtime();
    rt.block_on(async move {
        // With --again, a second connection follows the first: an auto
        // client that fell back starts it in version 1 (no probe).
        let mut code = ExitCode::SUCCESS;
        for _ in 0..if args.again { 2 } else { 1 } {
            let (st, status, err) = match probe_once(addr, &args).await {
                Ok(x) => x,
                Err(e) => return e.report("probe", args.json),
            };
            if args.json {
                let mut j = probe_json(&st);
                j["ok"] = err.is_none().into();
                j["error"] = err.as_ref().map_or(Value::Null, CliError::error_json);
                j["prog"] = args.prog.unwrap_or(TEST_PROG).into();
                j["vers"] = args.vers.unwrap_or(TEST_VERS).into();
                j["rpc_status"] = status.into();
                j["provider"] = Value::from(args.link.provider.name());
                j["device"] = st.link.device.clone().map_or(Value::Null, Value::from);
                println!("{j}");
            } else {
                probe_text(addr, &args, &st, status);
                if let Some(e) = &err {
                    eprintln!("rpcrdma probe: {e}");
                }
            }
            if let Some(e) = err {
                // The link was negotiated, but the NULL call was refused.
                code = e.exit_code();
            }
        }
        code
    })
}

/// One probe: connects, makes the NULL call, closes; the connection's
/// status, the NULL's RPC status and, when the server answered with an
/// RPC error (PROG_UNAVAIL...), that failure.
async fn probe_once(
    addr: SocketAddr,
    args: &ProbeArgs,
) -> Result<(RdmaStatus, &'static str, Option<CliError>), CliError> {
    let (c, t) = connect(addr, &args.link, Duration::from_secs(10), 2, first_xid())
        .await
        .map_err(|e| connect_error(addr, &e))?;
    let prog = args.prog.unwrap_or(TEST_PROG);
    let vers = args.vers.unwrap_or(TEST_VERS);
    let opts = CallOptions {
        reply_max: Some(1024),
        ..CallOptions::default()
    };
    let r = c.call_with(prog, vers, 0, Message::new(), &opts).await;
    // Any RPC reply (PROG_UNAVAIL included) carried the credit grant.
    let st = t.status();
    t.shutdown().await;
    match &r {
        Ok(_) => Ok((st, "SUCCESS", None)),
        Err(e) => match reply_status(e) {
            Some(s) => Ok((st, s, Some(rpc_error(e, "null-call")))),
            None => Err(rpc_error(e, "null-call")),
        },
    }
}

/// The text report of one probe.
fn probe_text(addr: SocketAddr, args: &ProbeArgs, st: &RdmaStatus, status: &str) {
    let (prog, vers) = (
        args.prog.unwrap_or(TEST_PROG),
        args.vers.unwrap_or(TEST_VERS),
    );
    let yn = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    println!(
        "connected to {addr}: RPC-over-RDMA version {}{} over {}",
        st.version.version,
        if st.version.fallback {
            " (the server refused version 2: fallback)"
        } else {
            ""
        },
        match args.link.provider {
            ProviderKind::Iwarp => "software iWARP",
            ProviderKind::Verbs => "rdma-core verbs",
        }
    );
    for (who, props) in [
        ("local", &st.version.local_properties),
        ("peer", &st.version.peer_properties),
    ] {
        for p in &props.props {
            println!("  {who} property {p}");
        }
    }
    println!(
        "  MPA revision {} CRC {} Markers {} IRD {} ORD {}",
        st.link.mpa_rev.map_or("-".into(), |r| r.to_string()),
        yn(st.link.crc),
        yn(st.link.markers),
        st.link.ird,
        st.link.ord
    );
    for (who, pd) in [
        ("local", &st.link.local_private_data),
        ("peer", &st.link.peer_private_data),
    ] {
        println!("  {who} private data: {}", hex::encode(pd));
        if let Ok(s) = crate::json_misc::decode_private_data(pd, false) {
            for l in s.lines() {
                println!("    {l}");
            }
        }
    }
    if let Some(n) = st.negotiated {
        println!(
            "  inline send {} recv {} remote invalidation {}",
            n.send_threshold,
            n.recv_threshold,
            if n.remote_invalidation { "yes" } else { "no" }
        );
    }
    println!(
        "  NULL ({prog:#x} v{vers}): {status}; credits granted {}",
        st.engine.credits_granted
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        s: ServeArgs,
    }

    use rpcrdma::rdma::DEFAULT_READ_SINK_BUDGET;

    #[test]
    fn read_sink_budget_default_is_the_librarys() {
        let t = T::try_parse_from(["t"]).unwrap();
        assert_eq!(t.s.opts.read_sink_budget, DEFAULT_READ_SINK_BUDGET);
    }
}
