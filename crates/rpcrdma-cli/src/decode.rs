//! `rpcrdma decode`.
//!
//! Exit status: 0 decoded, 2 missing or malformed input (with the failure
//! object `{"ok": false, "error": {...}}` under `--json`). Never a panic.

use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::decode_pcap::Options;
use crate::input::{read_input, InputError};
use rpcrdma_cli::cli_error::CliError;
use rpcrdma_cli::failure::Failure;
use rpcrdma_iwarp::capture::rpc::{Filter, ProcMatch};

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
    /// What the input holds (default: a transport header; input that is
    /// not one but is RFC 8797 private data or an RPC message is decoded as
    /// that, with a note on standard error).
    #[arg(long, value_enum)]
    pub what: Option<What>,
    /// Print exactly one JSON object instead of a readable tree (with
    /// `--pcap`: one JSON object per line).
    #[arg(long)]
    pub json: bool,
    /// Decode the RPC-over-RDMA traffic over iWARP (MPA/DDP/RDMAP over TCP)
    /// in a capture file, pcap or pcapng (`-` for standard input).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["file", "raw", "what"])]
    pub pcap: Option<String>,
    /// With `--pcap`: print only a summary — service response times per
    /// procedure (like `tshark -z rpc,srt`), the count of each
    /// RPC-over-RDMA message class and chunk type.
    #[arg(long, requires = "pcap")]
    pub summary: bool,
    /// With `--pcap`: only the messages of this XID (decimal or 0x hex).
    #[arg(long, requires = "pcap", value_parser = parse_u32)]
    pub xid: Option<u32>,
    /// With `--pcap`: only the calls of this procedure and their replies,
    /// by name (`READ`, `GETATTR`, `COMPOUND`, `MNT`, `LOCK`, …; any
    /// program that has it) or number (decimal or 0x hex).
    #[arg(long = "proc", requires = "pcap", value_name = "NAME|NUMBER")]
    pub proc_filter: Option<String>,
}

/// A 32-bit number in decimal or `0x` hex.
fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?} is not a 32-bit number (decimal or 0x hex): {e}"))
}

/// The `--proc` filter: a number, else a name.
fn proc_match(s: &str) -> ProcMatch {
    match parse_u32(s) {
        Ok(n) => ProcMatch::Number(n),
        Err(_) => ProcMatch::Name(s.to_string()),
    }
}

/// Runs the subcommand.
pub fn run(args: DecodeArgs) -> ExitCode {
    if let Some(path) = &args.pcap {
        let opts = Options {
            json: args.json,
            summary: args.summary,
            filter: Filter {
                xid: args.xid,
                proc: args.proc_filter.as_deref().map(proc_match),
            },
        };
        return crate::decode_pcap::run(path, opts);
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
        Some(What::Header) => crate::json_header::decode_header(&bytes, args.json),
        Some(What::PrivateData) => crate::json_misc::decode_private_data(&bytes, args.json),
        Some(What::Rpc) => crate::json_misc::decode_rpc(&bytes, args.json),
        None => detect(&bytes, args.json),
    };
    match out {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(f) => fail(&args, f),
    }
}

/// Without `--what`: a transport header when its version word says
/// version 1 or 2; else RFC 8797 private data (its format identifier
/// found), else an RPC message, else the header's result; a failure
/// suggests `--what`.
fn detect(bytes: &[u8], json: bool) -> Result<String, Failure> {
    use rpcrdma_proto::wire::private_data::PeerPrivateData;
    let vers = bytes
        .get(4..8)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    if !matches!(vers, Some(1 | 2)) {
        if PeerPrivateData::find(bytes).offset().is_some() {
            eprintln!("rpcrdma decode: not a transport header: RFC 8797 private data, decoded as --what private-data");
            return crate::json_misc::decode_private_data(bytes, json);
        }
        if let Ok(s) = crate::json_misc::decode_rpc(bytes, json) {
            eprintln!(
                "rpcrdma decode: not a transport header: an RPC message, decoded as --what rpc"
            );
            return Ok(s);
        }
    }
    crate::json_header::decode_header(bytes, json).map_err(|mut f| {
        f.detail = format!(
            "{} (as an RPC-over-RDMA transport header; for private data or an RPC message use \
             --what private-data or --what rpc)",
            f.detail
        );
        f
    })
}

fn fail(args: &DecodeArgs, f: Failure) -> ExitCode {
    let mut e = f.to_cli_error();
    e.message = format!("malformed input: {}", f.detail);
    e.report("decode", args.json)
}
