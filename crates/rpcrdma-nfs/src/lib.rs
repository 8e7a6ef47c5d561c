//! # rpcrdma-nfs
//!
//! The NFS upper layer of rpcrdma: NFSv3 (RFC 1813) and MOUNT v3 over the
//! `rpcrdma` runtime, with the NFS upper-layer binding for RPC-over-RDMA
//! (RFC 8267 §4: which items are DDP-eligible).
//!
//! Work in progress (issue 14): the XDR of the NFSv3 and MOUNT procedures,
//! the RFC 8267 binding, a server exporting a directory, a client.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod fs;
