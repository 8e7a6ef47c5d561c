//! `rpcrdma nfs ls|get|put|stat SERVER:/export/path [LOCAL]`: the NFSv3
//! client of `rpcrdma_nfs::client` from the command line.
//!
//! MOUNT v3 over TCP at `--mount-port` (no rpcbind: Linux's mountd is
//! usually pinned, e.g. 20048) gives the root handle of the export holding
//! the path (the longest path of the EXPORT list containing it), then
//! NFSv3 over RPC-over-RDMA (software iWARP) at `--port` (20049), with the
//! link options of `rpcrdma call` (`--crc`, `--credits`,
//! `--inline-send/--inline-recv`, `--mpa-rev`, …) and AUTH_SYS of the
//! caller (`--uid`/`--gid` override).
//!
//! * `ls PATH`: READDIRPLUS until end of directory (`.` and `..` left
//!   out, as `ls` does); a file lists itself.
//! * `get PATH [LOCAL]`: READ of the whole file, `--rsize` per call,
//!   `--window` calls in flight, into LOCAL (default: the file's name in
//!   the current directory; `-`: standard output).
//! * `put PATH LOCAL`: CREATE (truncating, the local file's mode) and
//!   UNSTABLE WRITEs of `--wsize`, `--window` in flight, then COMMIT (data
//!   sent again if the server's write verifier changed). When PATH is a
//!   directory, the file is PATH/LOCAL's name.
//! * `stat PATH`: the attributes (LOOKUP, GETATTR when LOOKUP has none).
//!
//! With `--json` exactly one object on standard output:
//! `{"ok","op","path","bytes","sha256","entries","elapsed_us","error"}`:
//! `bytes` the octets read or written (`stat`: the size; `ls`: null),
//! `sha256` of the data read or written (hex; null for `ls`, `stat`,
//! failures and `--no-sha256`), `entries` for `ls` the entries (`{"name","fileid","type",
//! "mode","size"}`, null otherwise), `elapsed_us` the time of the
//! operation on the mounted export (LOOKUPs, transfer, COMMIT; not the
//! MOUNT and connection setup), `error` null or the tool's error object
//! `{"kind", "op", "message", "blame"}` (`blame`: `status`, `server`,
//! `transport` or `caller`); `stat` adds `attributes`. `--stats` prints the RPC-over-RDMA
//! counters (a mountstats-like line) on standard error. Exit status 0 on
//! success, 1 on failure, 2 for bad arguments.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use rpcrdma::Auth;
use rpcrdma_cli::cli_error::CliError;
use rpcrdma_cli::num_args::{num_u32, size_u32};
use rpcrdma_nfs::client::{
    caller_auth_sys, connect, parse_target, ConnectOptions, NfsClientOptions, NfsError,
};
use serde_json::{json, Value};

use super::client_ops::{self, Done};
use crate::rdma_cmd::{runtime_with, LinkArgs};

/// The options every client command takes.
#[derive(Args, Debug, Clone)]
pub struct NfsClientArgs {
    /// SERVER:/export/path (an IPv6 server as [ADDR]:/path).
    pub target: String,
    /// NFS over RPC-over-RDMA port.
    #[arg(long, default_value_t = 20049)]
    pub port: u16,
    /// MOUNT v3 over TCP port (no rpcbind look-up).
    #[arg(long, default_value_t = 20048)]
    pub mount_port: u16,
    /// Print one JSON object: {"ok","op","path","bytes","sha256","entries","elapsed_us","error"}.
    #[arg(long)]
    pub json: bool,
    /// Major timeout in seconds: a call without a reply this long ends the
    /// connection and is sent again on a new one (same XID), as Linux's
    /// xprtrdma.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Transmissions after the first before a call fails.
    #[arg(long, default_value_t = 2)]
    pub retrans: u32,
    /// READ or WRITE calls in flight.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub window: u32,
    /// Largest READ (clamped to the server's rtmax).
    #[arg(long, default_value = "1M", value_parser = size_u32)]
    pub rsize: u32,
    /// Largest WRITE (clamped to the server's wtmax).
    #[arg(long, default_value = "1M", value_parser = size_u32)]
    pub wsize: u32,
    /// READDIRPLUS maxcount (dircount is an eighth).
    #[arg(long, default_value = "64K", value_parser = size_u32)]
    pub dir_maxcount: u32,
    /// Send WRITE data as part of the call's XDR stream (inline, or a Long
    /// Call when too large), not DDP-eligible in a Read chunk.
    #[arg(long)]
    pub no_ddp_writes: bool,
    /// AUTH_SYS uid (default: this process's effective uid).
    #[arg(long, value_parser = num_u32)]
    pub uid: Option<u32>,
    /// AUTH_SYS gid (default: this process's effective gid).
    #[arg(long, value_parser = num_u32)]
    pub gid: Option<u32>,
    /// Print the RPC-over-RDMA counters on standard error at the end.
    #[arg(long)]
    pub stats: bool,
    /// Skip the sha256 of the data (benchmarks: "sha256" is null).
    #[arg(long)]
    pub no_sha256: bool,
    /// Runtime worker threads (1: tokio's current-thread runtime, as
    /// `rpcrdma bench`; the client's calls are all driven by one task).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[command(flatten)]
    pub link: LinkArgs,
}

/// `rpcrdma nfs ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    #[command(flatten)]
    pub common: NfsClientArgs,
}

/// `rpcrdma nfs get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub common: NfsClientArgs,
    /// Local file to write (`-`: standard output; default: the remote
    /// file's name in the current directory).
    pub local: Option<String>,
}

/// `rpcrdma nfs put`.
#[derive(Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    pub common: NfsClientArgs,
    /// Local file to send.
    pub local: String,
}

/// `rpcrdma nfs stat`.
#[derive(Args, Debug)]
pub struct StatArgs {
    #[command(flatten)]
    pub common: NfsClientArgs,
}

/// Which client command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `ls`.
    Ls,
    /// `get`.
    Get,
    /// `put`.
    Put,
    /// `stat`.
    Stat,
}

impl Op {
    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Ls => "ls",
            Op::Get => "get",
            Op::Put => "put",
            Op::Stat => "stat",
        }
    }
}

/// Runs `rpcrdma nfs ls`.
pub fn ls(a: LsArgs) -> ExitCode {
    run(Op::Ls, a.common, None)
}

/// Runs `rpcrdma nfs get`.
pub fn get(a: GetArgs) -> ExitCode {
    run(Op::Get, a.common, a.local)
}

/// Runs `rpcrdma nfs put`.
pub fn put(a: PutArgs) -> ExitCode {
    run(Op::Put, a.common, Some(a.local))
}

/// Runs `rpcrdma nfs stat`.
pub fn stat(a: StatArgs) -> ExitCode {
    run(Op::Stat, a.common, None)
}

fn options(c: &NfsClientArgs) -> ConnectOptions {
    let major = Duration::from_secs_f64(c.timeout.clamp(0.001, 86_400.0));
    let rdma = c.link.client_config(major, c.retrans);
    // The runtime's own timer only backs the engine's up (as `call`).
    let per = major + rdma.connect_timeout + Duration::from_secs(2);
    let mut auth = caller_auth_sys();
    if let Auth::Sys(p) = &mut auth {
        if let Some(u) = c.uid {
            p.uid = u;
        }
        if let Some(g) = c.gid {
            p.gid = g;
            p.gids.clear();
        }
    }
    ConnectOptions {
        nfs_port: c.port,
        mount_port: c.mount_port,
        rdma,
        timeout: per * c.retrans.saturating_add(1).min(100),
        nfs: NfsClientOptions {
            window: c.window as usize,
            rsize: c.rsize,
            wsize: c.wsize,
            dir_maxcount: c.dir_maxcount,
            ddp_writes: !c.no_ddp_writes,
            auth,
            ..NfsClientOptions::default()
        },
    }
}

fn run(op: Op, c: NfsClientArgs, local: Option<String>) -> ExitCode {
    let cmd = format!("nfs {}", op.name());
    let target = match parse_target(&c.target) {
        Ok(t) => t,
        Err(e) => {
            return CliError::bad_input("bad-target", "parse-arguments", e.to_string())
                .report(&cmd, c.json)
        }
    };
    if c.json && op == Op::Get && local.as_deref() == Some("-") {
        return CliError::usage("--json", "--json and LOCAL '-' both want standard output")
            .report(&cmd, false);
    }
    let o = options(&c);
    let rt = runtime_with(c.threads);
    let (res, elapsed) = rt.block_on(async {
        let session = match connect(&target, &o).await {
            Ok(s) => s,
            Err(e) => return (Err(e), Duration::ZERO),
        };
        let t0 = Instant::now();
        let res = client_ops::run(op, &session, local.as_deref(), !c.no_sha256).await;
        let elapsed = t0.elapsed();
        if c.stats {
            eprintln!("{}", session.transport.status().mountstats());
        }
        session.close().await;
        (res, elapsed)
    });
    report(op, &c, &target.path, res, elapsed)
}

fn report(
    op: Op,
    c: &NfsClientArgs,
    path: &str,
    res: Result<Done, NfsError>,
    elapsed: Duration,
) -> ExitCode {
    let ok = res.is_ok();
    if c.json {
        let mut j = json!({
            "ok": ok,
            "op": op.name(),
            "path": format!("{}:{}", server_of(&c.target), path),
            "bytes": Value::Null,
            "sha256": Value::Null,
            "entries": Value::Null,
            "elapsed_us": elapsed.as_micros() as u64,
            "error": Value::Null,
        });
        match &res {
            Ok(d) => d.fill_json(&mut j),
            Err(e) => j["error"] = nfs_error(op, e).error_json(),
        }
        println!("{j}");
    } else {
        match &res {
            Ok(d) => d.print_summary(op, elapsed),
            Err(e) => eprintln!("rpcrdma nfs {}: {}", op.name(), nfs_error(op, e)),
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// An NFS client failure as the tool's error object: `kind` from who is
/// to blame (`nfs-status`, `server`, `transport`, `caller`), `blame` its
/// name.
fn nfs_error(op: Op, e: &NfsError) -> CliError {
    use rpcrdma_nfs::client::Blame;
    let (kind, blame) = match e.blame() {
        Blame::Status => ("nfs-status", "status"),
        Blame::Server => ("server", "server"),
        Blame::Transport => ("transport", "transport"),
        _ => ("caller", "caller"),
    };
    CliError::failed(kind, op.name(), format!("{e} [blame: {blame}]")).with("blame", blame)
}

fn server_of(target: &str) -> &str {
    target.rsplit_once(":/").map_or(target, |(h, _)| h)
}
