//! # rpcrdma-verbs
//!
//! The rdma-core provider of rpcrdma: the provider contract
//! (`rpcrdma_proto::provider::Provider`) and the connection-manager
//! contract (`rpcrdma_proto::provider::cm`) on libibverbs and librdmacm,
//! for RDMA NICs (InfiniBand, RoCE, iWARP RNICs) and the kernel's soft
//! devices (siw, rxe).
//!
//! rdma-core is loaded at run time ([`libs`], `dlopen` of
//! `libibverbs.so.1` and `librdmacm.so.1`): this crate builds and links on
//! a machine without it, and there every entry point fails with one line
//! that says what is missing ([`Unavailable`]: `librdmacm.so.1 not found:
//! install rdma-core`, `no RDMA device found (libibverbs loaded, 0
//! devices)`). The binding is hand-written ([`sys`]): the few structures
//! and calls needed, with the layout of each one we allocate or index
//! pinned by a test; `docs/verbs.md` says why.
//!
//! This is the only crate of the workspace with `unsafe`; every block
//! says why it is sound (`// SAFETY:`, enforced by clippy's
//! `undocumented_unsafe_blocks`).
//!
//! * [`VerbsCm`]: connect (address and route resolution, private data,
//!   responder resources / initiator depth), listen, accept or reject
//!   with private data.
//! * [`registration_stats`]: how often the device registered memory and
//!   how often the registration cache (receive and Send buffers, PDs
//!   recycled across a device's connections) answered instead.
//! * [`VerbsProvider`]: memory registration ([`mr`]), Send / Send With
//!   Invalidate / RDMA Write / RDMA Read / Local Invalidate, receives,
//!   completions mapped to the contract's status classes ([`status`]),
//!   readiness through one epoll fd over the completion channel and the
//!   connection's CM event channel.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod addr;
mod async_events;
mod cache;
mod cm;
mod conn;
mod device;
mod fd;
pub mod libs;
mod mr;
mod mw;
mod provider;
pub mod status;
pub mod sys;

pub use cache::{idle_pds, registration_stats, RegistrationStats};
pub use cm::{VerbsCm, VerbsConfig, VerbsListener, VerbsPending};
pub use device::{describe, devices, Device, Transport, Unavailable};
pub use provider::VerbsProvider;
