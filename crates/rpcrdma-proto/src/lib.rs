//! # rpcrdma-proto
//!
//! The sans-IO core of rpcrdma, an implementation of RPC-over-RDMA
//! (RFC 8166 version 1, RFC 8167 bidirectional operation, RFC 8797 RDMA-CM
//! private data, and version 2 as in draft-cel-nfsv4-rpcrdma-version-two-09).
//!
//! This crate performs no I/O, reads no clock and contains no `unsafe`. It is
//! layered like this (each layer uses only the ones above it):
//!
//! * [`xdr`]: a bounded, panic-free XDR (RFC 4506) reader and writer;
//! * [`limits`]: the named limits on everything a peer controls;
//! * [`message`]: an RPC message as [`message::Piece`]s (inline XDR and
//!   DDP-eligible data, on `bytes::Bytes`) with the out-of-band data of a
//!   reply's Write chunks, its builder, and its reader on the bounded
//!   [`xdr::Reader`]: the one message type the engine takes and gives out
//!   and the runtime (`rpcrdma`) uses as it is;
//! * [`wire`]: codecs for the wire formats: the v1 and v2 transport headers,
//!   chunk lists, RFC 8797 private data, ONC RPC (RFC 5531) message headers,
//!   and direction detection for bidirectional operation. Each codec has
//!   decode, exact-length encode, and a `Display` pretty-printer that the
//!   `rpcrdma decode` tool, the tests and the fuzz targets share;
//! * [`provider`]: the RDMA provider contract (one queue pair: memory
//!   registration, Send / Receive / RDMA Read / RDMA Write work requests,
//!   completions, connection events), shaped like verbs and object-safe;
//!   with the in-memory provider [`provider::mem`], the fault injector
//!   [`provider::fault`] and the [`provider::conformance`] checks every
//!   backend (software iWARP, rdma-core verbs) must pass;
//! * [`engine`]: the RPC-over-RDMA transport engine, one
//!   [`engine::Connection`] per RDMA connection, requester and responder in
//!   both directions (RFC 8167): inputs are `handle_*` calls (completions,
//!   connection events, timeouts with `now` passed in) and commands, outputs
//!   are work requests posted to a provider passed in, and `poll_*` events
//!   and deadlines. It decides inline / chunked / Long forms, credits, the
//!   Read-sink budget, retransmission and the wire errors (ERR_VERS,
//!   ERR_CHUNK) it answers with;
//! * [`fuzzing`]: the fuzz entry points (shared by `cargo fuzz` and the
//!   corpus-replay tests).
//!
//! The runtime (`rpcrdma`) drives an engine over a provider; the software
//! iWARP provider lives in `rpcrdma-iwarp`. `docs/design/rpcrdma-proto.md`
//! and `docs/design/engine.md` describe the crate and the engine in more
//! detail.
//!
//! Spec citations sit at the checks they justify, as
//! `//= rfcNNNN#section-X` followed by `//#` quoted text.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod engine;
pub mod limits;
pub mod message;
pub mod provider;
pub mod wire;
pub mod xdr;

pub mod fuzzing;

pub use limits::Limits;
pub use xdr::{DecodeError, DecodeErrorKind, EncodeError, XdrEncode};
