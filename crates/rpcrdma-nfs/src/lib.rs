//! # rpcrdma-nfs
//!
//! The NFS upper layer of rpcrdma: NFSv3 (RFC 1813) and MOUNT v3 over the
//! `rpcrdma` runtime, with the NFS upper-layer binding for RPC-over-RDMA
//! (RFC 8267 §4: which items are DDP-eligible).
//!
//! * [`nfs3`]: the XDR of the NFSv3 procedures (arguments and results,
//!   decode and exact-size encode), with [`nfs3::Nfs3Args`] /
//!   [`nfs3::Nfs3Res`] dispatching on the procedure number;
//! * [`mount`]: MOUNT v3 (RFC 1813 Appendix I);
//! * [`limits`]: the named limits on everything a peer controls, and
//!   [`ArgError`]: what a server answers for bad arguments (GARBAGE_ARGS or
//!   an `nfsstat3`);
//! * [`binding`]: RFC 8267 §4 on the runtime's messages: DDP-eligible
//!   items, and the largest reply of each call (the client offers a Reply
//!   chunk from it);
//! * [`fuzzing`]: the `nfs_args` fuzz entry point (also replayed by
//!   `cargo test`);
//! * [`fs`]: the export: confined, openat-based operations behind stable
//!   keyed file handles, blocking I/O on tokio's blocking pool;
//! * [`server`]: the NFSv3 and MOUNT v3 programs as handlers of the
//!   `rpcrdma` runtime over one export;
//! * [`client`]: MOUNT v3 over TCP and a typed NFSv3 client over
//!   RPC-over-RDMA (windowed READ/WRITE, COMMIT with verifier checks,
//!   READDIRPLUS until end of directory, errors by blame);
//! * [`nfs4`]: the XDR of the part of NFSv4.1 (RFC 8881) the backchannel
//!   probe needs, and of the callback program;
//! * [`client4`]: an NFSv4.1 session with a backchannel over
//!   RPC-over-RDMA (RFC 8167), its callback service, and the probe.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod codec;
#[cfg(test)]
pub(crate) mod testgen;

pub mod binding;
pub mod client;
pub mod client4;
pub mod fs;
pub mod fuzzing;
pub mod limits;
pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod server;

#[cfg(test)]
mod tests;

pub use limits::{ArgError, Limits};
