//! Wire formats.
//!
//! | module | what |
//! |---|---|
//! | [`chunk`] | segments, Read list, Write list, Reply chunk (shared by v1 and v2) |
//! | [`v1`] | RPC-over-RDMA version 1 transport header (RFC 8166 §4–5) |
//! | [`v2`] | version 2 transport header (draft-cel-nfsv4-rpcrdma-version-two-09 §3–6) |
//! | [`header`] | version dispatch on the `rdma_vers` word |
//! | [`private_data`] | RFC 8797 RDMA-CM private data |
//! | [`rpc`] | ONC RPC message header (RFC 5531) |
//! | [`direction`] | forward/backward call/reply classification (RFC 8167) |

pub mod chunk;
pub mod direction;
pub mod header;
pub mod private_data;
pub mod rpc;
pub mod v1;
pub mod v2;
