//! The `rpcrdma` command line tool.
//!
//! `rpcrdma decode` decodes RPC-over-RDMA transport headers (v1 and v2),
//! RFC 8797 private data and ONC RPC message headers from hex or raw bytes;
//! `serve`, `call`, `probe` and `demo` run the RPC runtime over
//! RPC-over-RDMA v1 over software iWARP; `nfs` runs NFSv3 over it.

mod accept_args;
mod bench;
mod decode;
mod demo;
mod demo_v2;
mod input;
mod logging;
mod nfs;
mod nfs4;
mod rdma_cmd;

// The presenters live in the library (`src/lib.rs`), which the tests call
// in-process too.
use rpcrdma_cli::{decode_pcap, json_header, json_misc};

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rpcrdma: RPC-over-RDMA (RFC 8166 / 8167 / 8797, v2 draft) in Rust.
#[derive(Parser, Debug)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    /// More log on standard error: -v info, -vv debug, -vvv trace
    /// (RUST_LOG, when set, decides instead).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Less log: -q errors only, -qq none.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode a transport header, RFC 8797 private data or an RPC message.
    Decode(decode::DecodeArgs),
    /// Serve the test program over RPC-over-RDMA (software iWARP).
    Serve(rdma_cmd::ServeArgs),
    /// Call the test program (or any program's procedure) over RPC-over-RDMA.
    Call(rdma_cmd::CallArgs),
    /// Connect, make one NULL call and print what was negotiated.
    Probe(rdma_cmd::ProbeArgs),
    /// Server and client in one process: one exchange of each RPC-over-RDMA
    /// message class, as it went on the wire.
    Demo(demo::DemoArgs),
    /// Load generator: calls/s, MB/s, latency percentiles, CPU time.
    Bench(bench::BenchArgs),
    /// NFSv3 over RPC-over-RDMA: serve a directory (MOUNT v3 over TCP).
    Nfs(nfs::NfsArgs),
    /// NFSv4.1 over RPC-over-RDMA: the backchannel probe (RFC 8167).
    Nfs4(nfs4::Nfs4Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Serving commands log their connections at info by default.
    let serving = match &cli.command {
        Command::Serve(_) => true,
        Command::Bench(b) => b.serve,
        Command::Nfs(n) => n.is_serve(),
        _ => false,
    };
    logging::init(serving, cli.verbose, cli.quiet);
    match cli.command {
        Command::Decode(args) => decode::run(args),
        Command::Serve(args) => rdma_cmd::serve(args),
        Command::Call(args) => rdma_cmd::call(args),
        Command::Probe(args) => rdma_cmd::probe(args),
        Command::Demo(args) => demo::demo(args),
        Command::Bench(args) => bench::run(args),
        Command::Nfs(args) => nfs::run(args),
        Command::Nfs4(args) => nfs4::run(args),
    }
}
