//! # rpcrdma
//!
//! The ONC RPC (RFC 5531) client/server runtime of rpcrdma over two
//! transports behind the same traits: RPC-over-RDMA (the sans-IO engine of
//! `rpcrdma-proto` driven over an RDMA provider: software iWARP, or the
//! in-memory pair; rdma-core verbs later) and ONC RPC over TCP with
//! RFC 5531 §11 record marking. Layering, top down: [`client`] /
//! [`server`] (calls, handlers, blame) → [`transport`] (the traits) →
//! [`rdma`] (driver core and shells, provider selection) or [`tcp`] /
//! [`record`] → the provider and the engine. `docs/design/rpcrdma.md` draws
//! a call's path from [`Client::call`] to the socket and back.
//!
//! * [`message`] (`rpcrdma_proto::message`, re-exported): [`Message`] =
//!   list of [`Piece`]s (inline XDR and DDP-eligible data), builder and
//!   reader, flatten to contiguous XDR; the same type the RPC-over-RDMA
//!   engine takes and gives out, so no layer converts messages;
//! * [`transport`]: the [`ClientTransport`] / [`ServerConnection`] /
//!   [`CallDispatcher`] traits (driver tasks + channels) and what the
//!   transports and the client share; it depends on no module above it;
//! * [`record`]: RFC 5531 record marking codec (sans-IO);
//! * [`tcp`]: the TCP transport;
//! * [`rdma`]: RPC-over-RDMA v1 over the engine and any provider of the
//!   `rpcrdma-proto` contract, chosen by configuration
//!   ([`rdma::ProviderConfig`]: software iWARP, cargo feature `iwarp`, on
//!   by default; the in-memory provider) (one driver per connection: a
//!   synchronous core in a task or a thread shell;
//!   [`rdma::RdmaClientTransport`], [`rdma::RdmaBlockingClient`],
//!   [`rdma::RdmaServer`]);
//! * [`reconnect`]: the one reconnection schedule; reconnection with
//!   same-XID re-sends over any transport;
//! * [`client`]: [`Client::call`], credentials, timeouts, errors by blame;
//! * [`server`]: [`Server`], handler registry, RPC error replies;
//! * [`program`]: typed programs — a [`program::Procedure`] declared once
//!   (numbers, argument and result types with their XDR, DDP-eligibility
//!   on the type: [`program::DdpOpaque`]), called with
//!   [`Client::call_typed`] and served by a [`program::Program`];
//! * [`drc`]: the duplicate-reply cache;
//! * [`metrics`]: counters; every call also runs in a `tracing` span
//!   (`rpc.call` on the client, `rpc.serve` on the server);
//! * [`testprog`]: the built-in test program (number, XDR and pattern
//!   generator documented there and in the crate README).
//!
//! This is the only crate of the project that uses an async runtime (tokio).
//!
//! ```
//! use rpcrdma::{testprog, Client, ClientConfig, Server, TcpConfig};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = Server::default();
//! testprog::register(&server);
//! let tcp = server.serve_tcp("127.0.0.1:0", TcpConfig::default()).await?;
//!
//! let client =
//!     Client::connect_tcp(tcp.local_addr(), ClientConfig::default(), TcpConfig::default()).await?;
//! testprog::null(&client).await?;
//! assert_eq!(&testprog::echo(&client, b"hi").await?[..], b"hi");
//! let data = testprog::read(&client, 100, 7).await?; // DDP-eligible result
//! assert_eq!(&data[..], &testprog::pattern(7, 100)[..]);
//!
//! tcp.shutdown().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod client;
pub mod drc;
pub use rpcrdma_proto::message;
mod alarm;
pub mod metrics;
pub mod program;
#[cfg(feature = "prometheus")]
pub mod prometheus;
pub mod rdma;
pub mod reconnect;
pub mod record;
pub mod rpcbind;
pub mod server;
mod slot;
pub mod stats;
pub mod tcp;
pub mod tcp_blocking;
mod tcp_blocking_server;
mod tcp_sync;
mod tcp_write;
pub mod testprog;
pub mod transport;
pub mod units;

pub use client::{
    Auth, Blame, CallOptions, CallerError, Client, ClientConfig, Reply, ReplyError, RpcError,
};
pub use message::{Message, MessageBuilder, MessageReader, Piece};
pub use metrics::{Metrics, MetricsSnapshot};
pub use reconnect::{Connector, ReconnectPolicy, ReconnectingTransport};
pub use server::{CallContext, Handler, HandlerError, HandlerFuture, Server, ServerConfig};
pub use stats::{ProcStats, Side};
pub use tcp::{TcpClientTransport, TcpConfig, TcpServer};
pub use tcp_blocking::TcpBlockingClient;
pub use transport::{
    CallCount, CallDispatcher, CallGuard, ClientIdentity, ClientTransport, IncomingCall,
    OutgoingCall, ReplyReceiver, ReplyRoom, ServerConnection, TransportError,
};
