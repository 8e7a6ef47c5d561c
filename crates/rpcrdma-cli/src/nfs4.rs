//! `rpcrdma nfs4 probe-backchannel SERVER:/path --port N [--wait SECONDS]
//! [--json]`: the NFSv4.1 backchannel probe of
//! `rpcrdma_nfs::client4::probe_backchannel` from the command line.
//!
//! It creates a session with a backchannel on one RPC-over-RDMA connection
//! (link options as `rpcrdma call`: `--crc`, `--inline-send`, …), opens
//! PATH (from the server's root) for reading with a read delegation,
//! prints `rpcrdma nfs4: delegation held` on standard error once it has
//! it (a script triggers the conflicting access then), waits up to
//! `--wait` seconds (default 30) for the server's CB_RECALL, returns the
//! delegation and cleans up. With `--json` exactly one object on standard
//! output: `{"ok","session_created","cb_null_received",
//! "cb_recall_received","delegreturn_ok","error"}`. `ok` is true when the
//! session was created, the recall came and the delegation went back
//! without error; `cb_null_received` is reported but not required (Linux's
//! knfsd never sends CB_NULL to a v4.1 client: docs/interop-linux.md).
//! Exit status 0 when `ok`, 1 otherwise, 2 for bad arguments.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use rpcrdma::Auth;
use rpcrdma_nfs::client::parse_target;
use rpcrdma_nfs::client4::{probe_backchannel, Nfs4Options, ProbeOptions, ProbeReport};
use serde_json::json;

use crate::rdma_cmd::{runtime, LinkArgs};
use rpcrdma_cli::cli_error::CliError;

/// `rpcrdma nfs4`.
#[derive(Args, Debug)]
pub struct Nfs4Args {
    #[command(subcommand)]
    pub command: Nfs4Command,
}

/// The `nfs4` subcommands.
#[derive(Subcommand, Debug)]
pub enum Nfs4Command {
    /// NFSv4.1 session with a backchannel: CB_NULL, a read delegation and
    /// its CB_RECALL over our own connection (RFC 8167).
    ProbeBackchannel(ProbeArgs),
}

/// `nfs4 probe-backchannel`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// SERVER:/path of an existing file (from the server's NFSv4 root).
    pub target: String,
    /// NFS over RPC-over-RDMA port.
    #[arg(long, default_value_t = 20049)]
    pub port: u16,
    /// Seconds to wait for CB_RECALL once the delegation is held.
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// Seconds OPEN retries while the server is in its grace period.
    #[arg(long, default_value_t = 100.0)]
    pub grace_wait: f64,
    /// Per-call reply timeout in seconds.
    #[arg(long, default_value_t = 15.0)]
    pub timeout: f64,
    /// AUTH_SYS uid of the calls (default: this process's).
    #[arg(long, value_parser = rpcrdma_cli::num_args::num_u32)]
    pub uid: Option<u32>,
    /// AUTH_SYS gid of the calls (default: this process's).
    #[arg(long, value_parser = rpcrdma_cli::num_args::num_u32)]
    pub gid: Option<u32>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub link: LinkArgs,
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, 86_400.0))
}

/// Runs `rpcrdma nfs4 …`.
pub fn run(args: Nfs4Args) -> ExitCode {
    match args.command {
        Nfs4Command::ProbeBackchannel(a) => probe(a),
    }
}

fn probe(a: ProbeArgs) -> ExitCode {
    let target = match parse_target(&a.target) {
        Ok(t) => t,
        Err(e) => {
            return CliError::bad_input("bad-target", "parse-arguments", e.to_string())
                .report("nfs4 probe-backchannel", a.json)
        }
    };
    let mut nfs4 = Nfs4Options {
        timeout: secs(a.timeout),
        grace_wait: secs(a.grace_wait),
        ..Nfs4Options::default()
    };
    if let Auth::Sys(p) = &mut nfs4.auth {
        p.uid = a.uid.unwrap_or(p.uid);
        if let Some(g) = a.gid {
            p.gid = g;
            p.gids.clear();
        }
    }
    let rdma = a.link.client_config(secs(a.timeout), 0);
    let rep = runtime().block_on(async {
        let addr = match tokio::net::lookup_host((target.host.as_str(), a.port)).await {
            Ok(mut it) => it.next(),
            Err(_) => None,
        };
        let Some(addr) = addr else {
            return ProbeReport {
                error: Some(format!("cannot resolve {}:{}", target.host, a.port)),
                ..ProbeReport::default()
            };
        };
        probe_backchannel(ProbeOptions {
            addr,
            path: target.path.clone(),
            wait: secs(a.wait),
            cb_null_wait: Duration::from_secs(1),
            rdma,
            nfs4,
            on_delegation: Some(Arc::new(|| {
                eprintln!("rpcrdma nfs4: delegation held");
                let _ = std::io::stderr().flush();
            })),
        })
        .await
    });
    if a.json {
        println!(
            "{}",
            json!({
                "ok": rep.ok,
                "session_created": rep.session_created,
                "cb_null_received": rep.cb_null_received,
                "cb_recall_received": rep.cb_recall_received,
                "delegreturn_ok": rep.delegreturn_ok,
                "error": rep.error.as_ref().map(|e| {
                    CliError::failed("nfs4", "probe-backchannel", e.clone()).error_json()
                }),
            })
        );
    } else {
        println!(
            "session {} | CB_NULL {} | delegation {} | CB_RECALL {} | DELEGRETURN {}",
            yes(rep.session_created),
            yes(rep.cb_null_received),
            rep.delegation.as_deref().unwrap_or("none"),
            yes(rep.cb_recall_received),
            yes(rep.delegreturn_ok),
        );
        if let Some(e) = &rep.error {
            eprintln!("rpcrdma nfs4 probe-backchannel: {e}");
        }
    }
    if rep.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
