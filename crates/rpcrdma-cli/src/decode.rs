//! `rpcrdma decode`.
//!
//! Exit status: 0 decoded, 2 missing or malformed input (with the failure
//! object `{"ok": false, "error": {...}}` under `--json`). Never a panic.

use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::input::{read_input, InputError};
use rpcrdma_cli::cli_error::CliError;
use rpcrdma_cli::failure::Failure;

/// What to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// An RPC-over-RDMA transport header (v1 or v2, by the rdma_vers word)
    /// and the RPC message header behind it, if any.
    Header,
    /// RDMA-CM / MPA private data (RFC 8797).
    PrivateData,
    /// An ONC RPC message (RFC 5531).
    Rpc,
}

/// Arguments of `rpcrdma decode`.
#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// Input file, or `-` for standard input.
    #[arg(default_value = "-")]
    pub file: String,
    /// The input is raw octets, not hex text.
    #[arg(long)]
    pub raw: bool,
    /// What the input holds.
    #[arg(long, value_enum, default_value_t = What::Header)]
    pub what: What,
    /// Print exactly one JSON object instead of a readable tree (with
    /// `--pcap`: one JSON object per line).
    #[arg(long)]
    pub json: bool,
    /// Decode the RPC-over-RDMA traffic over iWARP (MPA/DDP/RDMAP over TCP)
    /// in a capture file, pcap or pcapng (`-` for standard input).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["file", "raw", "what"])]
    pub pcap: Option<String>,
}

/// Runs the subcommand.
pub fn run(args: DecodeArgs) -> ExitCode {
    if let Some(path) = &args.pcap {
        return crate::decode_pcap::run(path, args.json);
    }
    let bytes = match read_input(&args.file, args.raw) {
        Ok(b) => b,
        Err(InputError::Io(e)) => {
            return CliError::bad_input(
                "io",
                "read-file",
                format!("cannot read {}: {e}", args.file),
            )
            .with("path", args.file.as_str())
            .report("decode", args.json);
        }
        Err(InputError::BadHex { offset, detail }) => {
            return fail(
                &args,
                Failure {
                    kind: "bad-hex".into(),
                    offset,
                    detail,
                },
            )
        }
    };
    let out = match args.what {
        What::Header => crate::json_header::decode_header(&bytes, args.json),
        What::PrivateData => crate::json_misc::decode_private_data(&bytes, args.json),
        What::Rpc => crate::json_misc::decode_rpc(&bytes, args.json),
    };
    match out {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(f) => fail(&args, f),
    }
}

fn fail(args: &DecodeArgs, f: Failure) -> ExitCode {
    let mut e = f.to_cli_error();
    e.message = format!("malformed input: {}", f.detail);
    e.report("decode", args.json)
}
