//! # rpcrdma-proto
//!
//! The sans-IO core of rpcrdma, an implementation of RPC-over-RDMA
//! (RFC 8166 version 1, RFC 8167 bidirectional operation, RFC 8797 RDMA-CM
//! private data, and version 2 as in draft-cel-nfsv4-rpcrdma-version-two-09).
//!
//! This crate performs no I/O, reads no clock and contains no `unsafe`. It is
//! layered like this:
//!
//! * [`xdr`]: a bounded, panic-free XDR (RFC 4506) reader and writer;
//! * [`limits`]: the named limits on everything a peer controls;
//! * [`wire`]: codecs for the wire formats: the v1 and v2 transport headers,
//!   chunk lists, RFC 8797 private data, ONC RPC (RFC 5531) message headers,
//!   and direction detection for bidirectional operation. Each codec has
//!   decode, exact-length encode, and a `Display` pretty-printer that the
//!   `rpcrdma decode` tool, the tests and the fuzz targets share.
//!
//! Spec citations sit at the checks they justify, as
//! `//= rfcNNNN#section-X` followed by `//#` quoted text.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod engine;
pub mod limits;
pub mod provider;
pub mod wire;
pub mod xdr;

pub mod fuzzing;

pub use limits::Limits;
pub use xdr::{DecodeError, DecodeErrorKind, EncodeError, XdrEncode};
