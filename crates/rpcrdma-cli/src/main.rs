//! The `rpcrdma` command line tool.
//!
//! `rpcrdma decode` decodes RPC-over-RDMA transport headers (v1 and v2),
//! RFC 8797 private data and ONC RPC message headers from hex or raw bytes.

mod bench;
mod decode;
mod decode_pcap;
mod input;
mod json_header;
mod json_misc;
mod pcap;
mod tcp_reassembly;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// rpcrdma: RPC-over-RDMA (RFC 8166 / 8167 / 8797, v2 draft) in Rust.
#[derive(Parser, Debug)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode a transport header, RFC 8797 private data or an RPC message.
    Decode(decode::DecodeArgs),
    /// Load generator: calls/s, MB/s, latency percentiles, CPU time.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(args),
        Command::Bench(args) => bench::run(args),
    }
}
