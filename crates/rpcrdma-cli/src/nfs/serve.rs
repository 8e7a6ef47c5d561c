//! `rpcrdma nfs serve DIR --listen ADDR --mount-listen ADDR`: exports DIR
//! over NFSv3 on RPC-over-RDMA at `--listen` and MOUNT v3 over TCP (record
//! marking) at `--mount-listen`; clients mount `/` or DIR's absolute path.
//! The RPC-over-RDMA options are those of `rpcrdma serve` (`--crc`,
//! `--credits`, `--inline-send`, `--inline-recv`, the limits and timers).
//!
//! Prints `listening on ADDR` (RDMA) and `mount listening on ADDR` (TCP)
//! first; `--duration S`, SIGINT or SIGTERM stops it, and it prints the
//! counters: calls per procedure, GARBAGE_ARGS, the credentials calls came
//! with (AUTH_SYS uid/gid are reported, not enforced: every operation runs
//! with this process's permissions), and the RPC-over-RDMA chunk counts.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rpcrdma::rdma::RdmaServer;
use rpcrdma::{Server, TcpConfig};
use rpcrdma_nfs::nfs3::proc_name;
use rpcrdma_nfs::server::{NfsService, NfsServiceConfig};

use crate::rdma_cmd::{run_for, runtime_with, RdmaServeOpts, Signals};

/// `rpcrdma nfs serve`.
#[derive(Args, Debug)]
pub struct NfsServeArgs {
    /// The directory to export.
    pub dir: PathBuf,
    /// Address of the NFSv3 RPC-over-RDMA listener (port 0: ephemeral,
    /// printed).
    #[arg(long, default_value = "127.0.0.1:20049")]
    pub listen: String,
    /// Address of the MOUNT v3 listener (ONC RPC over TCP; port 0:
    /// ephemeral, printed).
    #[arg(long, default_value = "127.0.0.1:20048")]
    pub mount_listen: String,
    /// Stop after this many seconds (default: until SIGINT / SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Runtime worker threads (1: tokio's current-thread runtime, as
    /// `rpcrdma bench --serve`). File I/O runs on the blocking pool
    /// whatever this is.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The most file operations running at once on the blocking pool (the
    /// other calls wait for one to finish without holding a thread).
    #[arg(long, default_value_t = NfsServiceConfig::default().max_blocking)]
    pub max_blocking: usize,
    /// Queue file operations for the export's blocking threads, which
    /// run them one after the other; a queued operation waits about this
    /// many milliseconds at most before another thread starts (5 is a
    /// sensible bound). 0 (the default): one hand-off to the blocking
    /// pool per operation.
    #[arg(long, default_value_t = 0.0)]
    pub io_queue_wait_ms: f64,
    #[command(flatten)]
    pub opts: RdmaServeOpts,
}

/// Runs `rpcrdma nfs serve`.
pub fn run(args: NfsServeArgs) -> ExitCode {
    let config = NfsServiceConfig {
        max_blocking: args.max_blocking.max(1),
        io_queue_wait: (args.io_queue_wait_ms > 0.0).then(|| {
            std::time::Duration::from_secs_f64(args.io_queue_wait_ms.min(60_000.0) / 1000.0)
        }),
        ..NfsServiceConfig::default()
    };
    let nfs = match NfsService::new(&args.dir, config) {
        Ok(n) => n,
        Err(e) => {
            eprintln!(
                "rpcrdma nfs serve: cannot export {}: {e}",
                args.dir.display()
            );
            return ExitCode::from(2);
        }
    };
    runtime_with(args.threads).block_on(async move {
        let (rdma_rpc, tcp_rpc) = (Server::default(), Server::default());
        nfs.register_nfs(&rdma_rpc);
        nfs.register_mount(&tcp_rpc);
        let config = args.opts.server_config();
        let rdma = match RdmaServer::serve(&rdma_rpc, args.listen.as_str(), config).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("rpcrdma nfs serve: cannot listen on {}: {e}", args.listen);
                return ExitCode::FAILURE;
            }
        };
        let mount = match tcp_rpc
            .serve_tcp(args.mount_listen.as_str(), TcpConfig::default())
            .await
        {
            Ok(m) => m,
            Err(e) => {
                eprintln!(
                    "rpcrdma nfs serve: cannot listen on {}: {e}",
                    args.mount_listen
                );
                rdma.shutdown().await;
                return ExitCode::FAILURE;
            }
        };
        let mut signals = Signals::install();
        let sweeper = nfs.spawn_sweeper();
        println!("exporting {}", nfs.export().path().display());
        println!("listening on {}", rdma.local_addr());
        println!("mount listening on {}", mount.local_addr());
        let _ = std::io::stdout().flush();
        run_for(args.duration, &mut signals).await;
        sweeper.abort();
        report(&nfs, &rdma_rpc, &rdma);
        mount.shutdown().await;
        rdma.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// The counters, one line each.
fn report(nfs: &NfsService, rpc: &Server, rdma: &RdmaServer) {
    let s = nfs.stats();
    let m = rdma.metrics().snapshot();
    let r = rpc.metrics();
    println!(
        "served {} calls, {} replies, {} connections, {} DRC hits, {} GARBAGE_ARGS, {} refused arguments",
        r.calls_received, m.replies_sent, m.connections, r.drc_hits, s.garbage_args, s.arg_status
    );
    let procs: Vec<String> = s
        .procs
        .iter()
        .map(|&(p, n)| format!("{}={n}", proc_name(p).map_or(p.to_string(), short)))
        .collect();
    println!("procedures: {}", procs.join(" "));
    for (c, n) in &s.credentials {
        println!("credential: {c}: {n} calls");
    }
    if s.other_credentials > 0 {
        println!("credential: (others): {} calls", s.other_credentials);
    }
    for e in nfs.mounts() {
        println!("mounted: {} {}", e.client, e.path);
    }
    for st in rdma.connections() {
        println!("{}", st.mountstats());
    }
}

/// `NFSPROC3_READ` → `READ`.
fn short(name: &str) -> String {
    name.trim_start_matches("NFSPROC3_").to_string()
}
