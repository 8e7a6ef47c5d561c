//! A cutting TCP proxy for fault campaigns over real sockets
//! (`tests/fault_campaign.rs`, `scripts/fault-campaign`).
//!
//! * [`watch`]: follows each direction of an iWARP connection (MPA frame,
//!   FPDUs, DDP/RDMAP segments) with the crate's own decoders.
//! * [`plan`]: where each connection is cut ([`plan::CutKind`]: inside the
//!   MPA Request or Reply, right after the RTR, inside an FPDU, between an
//!   RDMA Read Request and its Response, between RDMA Write segments, right
//!   after a call, after the first octets of a reply) and how (FIN or
//!   RST), drawn from a seed.
//! * [`proxy`]: the proxy itself, one listener per client.

#![allow(dead_code)]

pub mod plan;
pub mod proxy;
pub mod watch;
