//! Entry points of the iWARP fuzz targets in `fuzz/` (`mpa_stream`,
//! `qp_segments`) and of their corpus replay in the normal test suite
//! (`tests/corpus_replay.rs`). Each function takes the fuzzer's octets,
//! builds its input from them with [`arbitrary::Unstructured`] and panics
//! only on a real bug (a failed assertion, documented per target).
//!
//! * [`fuzz_mpa_stream`] ([`mpa_stream`]): the MPA FPDU receiver and the
//!   queue pair's receive path on arbitrary octets, split anywhere, with
//!   CRC and Markers on or off: no panic, and the same verdict however the
//!   stream is split (octet-wise path, whole-FPDU fast path, direct
//!   placement), in agreement with [`crate::mpa::fpdu::FpduReceiver`].
//! * [`fuzz_qp_segments`] ([`qp_segments`]): structure-aware DDP/RDMAP
//!   segments at a queue pair with registered memory: memory protection,
//!   Read Request sources, Terminate codes, receive and Read completions.
//! * [`fuzz_dissect`] ([`dissect`]): the connection dissector of
//!   [`crate::dissect`] on two arbitrary streams (MPA frames, FPDUs, raw
//!   octets) fed in pieces: no panic, bounded holding, the same items
//!   however the streams are split.
//! * `fuzz_pcap` (`pcap`, with the `capture` feature): the capture
//!   dissector of `rpcrdma decode --pcap` on arbitrary files: no panic,
//!   held octets never above the TCP payload read, events in capture
//!   order.

pub mod dissect;
pub mod env;
pub mod feed;
pub mod gen;
pub mod mpa_stream;
#[cfg(feature = "capture")]
pub mod pcap;
pub mod qp_segments;

pub use dissect::fuzz_dissect;
pub use mpa_stream::fuzz_mpa_stream;
#[cfg(feature = "capture")]
pub use pcap::{fuzz_pcap, replay_captures};
pub use qp_segments::fuzz_qp_segments;

pub use rpcrdma_proto::fuzzing::{skipped, KNOWN_DEFECTS};

/// A fuzz entry point.
pub type FuzzFn = fn(&[u8]);

/// Every iWARP fuzz target, by name, for the corpus replay.
pub const TARGETS: &[(&str, FuzzFn)] = &[
    ("mpa_stream", fuzz_mpa_stream),
    ("qp_segments", fuzz_qp_segments),
    ("dissect", fuzz_dissect),
    #[cfg(feature = "capture")]
    ("pcap", fuzz_pcap),
];
