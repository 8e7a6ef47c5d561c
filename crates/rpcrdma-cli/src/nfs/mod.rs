//! TEMPORARY wiring (replaced by wt-nfssrv's nfs/mod.rs on merge).

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub mod client;
mod client_ops;

/// `rpcrdma nfs`.
#[derive(Args, Debug)]
pub struct NfsArgs {
    #[command(subcommand)]
    pub command: NfsCommand,
}

/// The `nfs` subcommands.
#[derive(Subcommand, Debug)]
pub enum NfsCommand {
    /// List a directory (READDIRPLUS over RPC-over-RDMA).
    Ls(client::LsArgs),
    /// Read a file into a local file.
    Get(client::GetArgs),
    /// Write a local file.
    Put(client::PutArgs),
    /// Print a file's attributes.
    Stat(client::StatArgs),
}

/// Runs `rpcrdma nfs …`.
pub fn run(args: NfsArgs) -> ExitCode {
    match args.command {
        NfsCommand::Ls(a) => client::ls(a),
        NfsCommand::Get(a) => client::get(a),
        NfsCommand::Put(a) => client::put(a),
        NfsCommand::Stat(a) => client::stat(a),
    }
}
