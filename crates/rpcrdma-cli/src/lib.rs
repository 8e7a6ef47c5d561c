//! The library half of the `rpcrdma` tool: the decoders behind `rpcrdma
//! decode` (transport headers, private data, RPC messages, and the pcap /
//! pcapng dissector of `--pcap`), so that the fuzz targets
//! (`fuzz/fuzz_targets/pcap.rs`) and the corpus replay
//! (`tests/corpus_replay.rs`) reach the same code as the binary.
//! Argument parsing and the other subcommands stay in the binary.

pub mod decode_pcap;
pub mod failure;
pub mod fuzzing;
pub mod json_header;
pub mod json_misc;
pub mod pcap;
pub mod tcp_reassembly;
