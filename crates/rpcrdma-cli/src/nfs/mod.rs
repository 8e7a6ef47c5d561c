//! `rpcrdma nfs …`: the NFSv3 upper layer (crate `rpcrdma-nfs`) from the
//! command line. One module per command family, each owning its
//! arguments and output:
//!
//! * [`serve`]: `nfs serve DIR --listen ADDR --mount-listen ADDR` exports a
//!   directory over NFSv3 on RPC-over-RDMA, with MOUNT v3 over TCP;
//! * [`client`]: `nfs ls|get|put|stat SERVER:/export/path [LOCAL]`, the
//!   NFSv3 client (MOUNT over TCP, NFSv3 over RPC-over-RDMA), `--json`
//!   prints one object.

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub mod client;
mod client_ops;
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
    /// List a directory (READDIRPLUS until end of directory).
    Ls(client::LsArgs),
    /// Read a file into a local file (READ, 1 MiB per call, a window in
    /// flight).
    Get(client::GetArgs),
    /// Write a local file (CREATE, UNSTABLE WRITEs, COMMIT).
    Put(client::PutArgs),
    /// Print a file's attributes.
    Stat(client::StatArgs),
}

impl NfsArgs {
    /// `nfs serve` (a serving command: it logs its connections).
    pub fn is_serve(&self) -> bool {
        matches!(self.command, NfsCommand::Serve(_))
    }
}

/// Runs `rpcrdma nfs …`.
pub fn run(args: NfsArgs) -> ExitCode {
    match args.command {
        NfsCommand::Serve(a) => serve::run(a),
        NfsCommand::Ls(a) => client::ls(a),
        NfsCommand::Get(a) => client::get(a),
        NfsCommand::Put(a) => client::put(a),
        NfsCommand::Stat(a) => client::stat(a),
    }
}
