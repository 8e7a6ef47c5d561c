//! `rpcrdma nfs …`: the NFSv3 upper layer (crate `rpcrdma-nfs`) from the
//! command line. One module per command family, each owning its
//! arguments and output:
//!
//! * [`serve`]: `nfs serve DIR --listen ADDR --mount-listen ADDR` exports a
//!   directory over NFSv3 on RPC-over-RDMA, with MOUNT v3 over TCP.
//!
//! The client commands (`ls`, `get`, `put`, `stat`) join this enum with
//! their own module.

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub mod serve;

/// `rpcrdma nfs`.
#[derive(Args, Debug)]
pub struct NfsArgs {
    #[command(subcommand)]
    pub command: NfsCommand,
}

/// The `nfs` subcommands.
#[derive(Subcommand, Debug)]
pub enum NfsCommand {
    /// Export a directory over NFSv3 on RPC-over-RDMA (software iWARP),
    /// with MOUNT v3 over TCP.
    Serve(serve::NfsServeArgs),
}

/// Runs `rpcrdma nfs …`.
pub fn run(args: NfsArgs) -> ExitCode {
    match args.command {
        NfsCommand::Serve(a) => serve::run(a),
    }
}
