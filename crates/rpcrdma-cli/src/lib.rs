//! The library half of the `rpcrdma` tool: the presenters behind `rpcrdma
//! decode` (transport headers, private data and RPC messages as text or
//! JSON, and the listing of `--pcap`), so that the tests reach the same
//! code as the binary in-process. The decoding itself is in the libraries:
//! `rpcrdma_proto` (transport headers, private data, RPC) and
//! `rpcrdma_iwarp::{dissect, capture}` (captures, MPA / DDP / RDMAP).
//! Argument parsing and the other subcommands stay in the binary.

#![warn(unreachable_pub)]

pub mod cli_error;
pub mod decode_pcap;
mod decode_pcap_rpc;
pub mod failure;
pub mod json_header;
pub mod json_misc;
pub mod num_args;
pub mod proc_stats;
