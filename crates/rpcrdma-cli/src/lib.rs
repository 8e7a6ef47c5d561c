//! The library half of the `rpcrdma` tool: the decoders behind `rpcrdma
//! decode` (transport headers, private data, RPC messages, and the pcap /
//! pcapng dissector of `--pcap`), so that the fuzz targets
//! (`fuzz/fuzz_targets/pcap.rs`) and the corpus replay
//! (`tests/corpus_replay.rs`) reach the same code as the binary.
//! Argument parsing and the other subcommands stay in the binary.

use rpcrdma_proto::DecodeError;

pub mod decode_pcap;
pub mod fuzzing;
pub mod json_header;
pub mod json_misc;
pub mod pcap;
pub mod tcp_reassembly;

/// A decode that went wrong, with the `"error"` kind printed under `--json`.
pub struct Failure {
    /// Stable machine name of the error.
    pub kind: String,
    /// Octet offset of the fault.
    pub offset: usize,
    /// Human readable explanation.
    pub detail: String,
}

impl From<DecodeError> for Failure {
    fn from(e: DecodeError) -> Self {
        Failure {
            kind: e.kind.name().to_string(),
            offset: e.offset,
            detail: e.to_string(),
        }
    }
}
