//! RPC-over-RDMA version 1 (RFC 8166, RFC 8167, RFC 8797) as a transport of
//! the runtime.
//!
//! # Shape
//!
//! Each connection has one **driver**: a synchronous core (`core.rs`) that
//! owns one engine [`Connection`](rpcrdma_proto::engine::Connection) and one
//! provider ([`BoxProvider`]) and makes rounds: commands from the runtime
//! (calls, replies, backchannel, close) → engine; provider events and
//! completions → engine; engine events → reply receivers and the
//! [`CallDispatcher`](crate::CallDispatcher). When a round moves nothing
//! the core arms the provider's waker and says what to wait for: the
//! socket's readiness and one deadline (the engine's, or the provider's
//! own). Two thin shells do the waiting:
//!
//! * the **task shell** (`task.rs`, the default): a tokio task; readiness
//!   through an `AsyncFd` on the provider's
//!   [`wait_fd`](rpcrdma_proto::provider::Provider::wait_fd), one tokio
//!   timer, the command channel; blocking connection setup (the provider's
//!   connection manager: for iWARP, TCP connect and MPA handshake) in
//!   `spawn_blocking`; it reconnects after a loss. The core sits behind a
//!   lock that a caller of the client tries too: a call started while the
//!   connection is idle is sent from the caller's own poll, with no
//!   hand-off to the driver task;
//! * the **thread shell** (`thread.rs`, blocking mode): a thread that
//!   sleeps in the socket's `recv(2)` or in `poll(2)` on the socket and a
//!   wake-up socket pair (`wake.rs`).
//!
//! Nothing else wakes a driver: there is no fallback tick (the core's
//! docs go through every wake source). A server's one acceptor thread
//! runs the provider's listener (for iWARP: every pending MPA exchange at
//! once, `poll(2)`). A server handler is
//! polled once inline by the driver and only spawned if it has to wait,
//! so a reply that is ready at once goes out in the same round. The
//! layering and a call's path are drawn in `docs/design/rpcrdma.md`.
//!
//! # Providers
//!
//! The runtime speaks only the provider contract of `rpcrdma-proto`
//! ([`Provider`]: data path and readiness; its connection-manager part:
//! connect, listen, accept or reject with private data). Which provider
//! carries the connections is configuration: [`ProviderConfig`] (the
//! [`provider`] module, the one place that names a provider; see
//! `docs/design/providers.md`). Software iWARP is the default, behind the
//! default-on cargo feature `iwarp`; the in-memory provider serves tests
//! (and is the default without `iwarp`).
//!
//! * Client: [`RdmaClientTransport`] implements [`ClientTransport`](crate::ClientTransport). DDP
//!   pieces of a call map to engine DDP pieces (Read chunks when the call
//!   does not fit inline), the call's `ddp_results` to Write chunks. After a
//!   connection loss the task shell reconnects with the runtime's one
//!   reconnection schedule ([`ReconnectPolicy`]) and the engine
//!   ([`Connection::reconnect`](rpcrdma_proto::engine::Connection::reconnect))
//!   re-sends the interrupted calls **with their original XIDs, on the new
//!   connection only**.
//! * Server: [`RdmaServer`] accepts any number of connections (receives
//!   posted before accepting), applies RFC 8797 through the engine and hands
//!   every call to a [`CallDispatcher`](crate::CallDispatcher) (a [`crate::Server`]) with a
//!   [`ClientIdentity`] from [`RdmaServerConfig::identify`] (by default the
//!   peer's IP address: never the source port, so the duplicate-reply cache
//!   recognises a retransmission after a reconnect).
//! * Blocking mode ([`RdmaBlockingClient`], [`RdmaServerConfig::blocking`]):
//!   the same core in the thread shell, without the task hand-offs. A blocking client's
//!   calling thread drives its connection and sleeps in the socket's
//!   `recv(2)`; a blocking server drives each connection on a thread of its
//!   own (recv(2) while no handler runs elsewhere, else `poll(2)` on the
//!   socket and a wake-up socket pair). Two system calls per message per
//!   side instead of three, and no runtime wake-ups: for synchronous
//!   callers and a few busy connections (see `BENCHMARKS.md`).
//! * Backchannel (RFC 8167): a server reaches the client through
//!   [`ServerConnection::backchannel`](crate::ServerConnection::backchannel); a client serves it after
//!   [`ClientTransport::set_backchannel`](crate::ClientTransport::set_backchannel) (which enables the engine's
//!   backchannel receives).
//!
//! ```
//! use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
//! use rpcrdma::{testprog, ClientConfig, Server};
//!
//! # tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(async {
//! let server = Server::default();
//! testprog::register(&server);
//! let rdma = RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default()).await?;
//!
//! let (client, transport) =
//!     connect_client(rdma.local_addr(), ClientConfig::default(), RdmaClientConfig::default())
//!         .await?;
//! testprog::null(&client).await?;
//! let data = testprog::read(&client, 100_000, 7).await?; // through a Write chunk
//! assert_eq!(&data[..], &testprog::pattern(7, 100_000)[..]);
//! let st = transport.status();
//! assert_eq!(st.credits, 64); // the server's grant
//! assert_eq!(st.engine.write_chunks, 1);
//! println!("{}", st.mountstats());
//!
//! transport.shutdown().await;
//! rdma.shutdown().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # XIDs
//!
//! The engine assigns the XID of every call it sends (it keeps them across
//! reconnects). The runtime's XID (the first word of the call the runtime
//! built) is restored in the reply before it is delivered, so the
//! [`crate::Client`] sees its own XID; logs carry both (`xid` and `wire_xid`).
//!
//! # DDP results in replies
//!
//! The engine delivers a reply as a [`Message`](crate::Message): its
//! inline XDR stream (the length words of DDP-eligible items stay in place,
//! their data and pad do not) and, as the message's out-of-band results, the
//! data written into each Write chunk, in Write-list order. The transport
//! passes it on unchanged (only the runtime's XID put back); the upper
//! layer's decoder places the results: each DDP-eligible item, read with
//! [`MessageReader::ddp_opaque`](crate::MessageReader::ddp_opaque), takes the
//! next result (RFC 8166 section 4.3.2: Write chunks are consumed in order),
//! and an unused (empty) chunk means the item came inline. See
//! `crates/rpcrdma/README.md`.
//!
//! # Metrics
//!
//! The runtime [`Metrics`] (shared with the [`crate::Client`] or per server)
//! and the engine's [`EngineMetrics`] (a snapshot published after every
//! step) are both available; [`RdmaStatus::mountstats`] renders a
//! mountstats-like line.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma_proto::engine::Config as EngineConfig;
pub use rpcrdma_proto::engine::Metrics as EngineMetrics;
pub use rpcrdma_proto::engine::{ReadSinkBudget, Resources, VersionInfo};
pub use rpcrdma_proto::provider::LinkInfo;
use rpcrdma_proto::provider::Provider;
use rpcrdma_proto::wire::private_data::Negotiated;

use crate::metrics::Metrics;
use crate::reconnect::ReconnectPolicy;
use crate::transport::ClientIdentity;

mod accept;
mod blocking;
mod core;
mod deadlines;
mod driver;
mod handle;
pub mod provider;
mod server;
mod task;
mod thread;
mod transport;
pub mod versions;
mod wake;

pub use blocking::RdmaBlockingClient;
pub use provider::ProviderConfig;
pub use server::{serve_provider, RdmaGauges, RdmaServer, RdmaServerConnection};
pub use transport::{connect_client, RdmaClientTransport};

/// The provider of one connection, owned by its driver: any
/// [`Provider`] that can move to the driver's task or thread.
pub type BoxProvider = Box<dyn Provider + Send>;

/// A new connection, established (or still connecting: the driver applies
/// the provider's `Established` event whenever it comes).
pub struct Connected {
    /// Its provider.
    pub provider: BoxProvider,
    /// What the link negotiated.
    pub info: LinkInfo,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("info", &self.info)
            .finish()
    }
}

/// Makes a new connection (blocking: it runs in `spawn_blocking`).
pub type ProviderConnector = Arc<dyn Fn() -> io::Result<Connected> + Send + Sync>;

/// Maps a peer address to the identity the duplicate-reply cache uses.
pub type IdentifyFn = Arc<dyn Fn(SocketAddr) -> ClientIdentity + Send + Sync>;

/// Client settings.
#[derive(Clone)]
pub struct RdmaClientConfig {
    /// Engine settings (credits, inline sizes, R flag, timeouts). Default
    /// [`EngineConfig::client`] (IRD 16 so that Linux servers accept us).
    pub engine: EngineConfig,
    /// The RDMA provider and its settings (for iWARP: MPA revision, CRC,
    /// Markers); private data and IRD/ORD come from `engine`. Default
    /// [`ProviderConfig::default`].
    pub provider: ProviderConfig,
    /// Connection setup timeout (for iWARP: TCP connect and MPA
    /// exchange).
    pub connect_timeout: Duration,
    /// Reconnection after a loss; `None`: the connection loss fails the
    /// outstanding calls.
    pub reconnect: Option<ReconnectPolicy>,
    /// Counters to use (shared with other transports if given).
    pub metrics: Option<Arc<Metrics>>,
}

impl Default for RdmaClientConfig {
    fn default() -> Self {
        RdmaClientConfig {
            engine: EngineConfig::client(),
            provider: ProviderConfig::default(),
            connect_timeout: Duration::from_secs(10),
            reconnect: Some(ReconnectPolicy::default()),
            metrics: None,
        }
    }
}

impl std::fmt::Debug for RdmaClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClientConfig")
            .field("engine", &self.engine)
            .field("provider", &self.provider)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect", &self.reconnect)
            .finish()
    }
}

/// Server settings.
#[derive(Clone)]
pub struct RdmaServerConfig {
    /// Engine settings. Default [`EngineConfig::server`] (grant 64, inline
    /// 4096/4096, R clear, like Linux svcrdma; the RDMA Read deadline
    /// `engine.read_timeout`, 30 s, and the idle timeout
    /// `engine.idle_timeout`, 15 s, apply to every connection).
    pub engine: EngineConfig,
    /// The RDMA provider and its settings; private data and IRD/ORD come
    /// from `engine`. For iWARP this includes the admission of new TCP
    /// connections that owe their MPA Request (deadline, caps per source
    /// and in all: `provider::IwarpCm::accept`), all driven by one
    /// thread.
    pub provider: ProviderConfig,
    /// Most connections at once; more are rejected (a CM reject: MPA
    /// Reject on iWARP). Default 1024.
    pub max_connections: usize,
    /// Most connections at once from one source address (an IPv4-mapped
    /// IPv6 address counts as the IPv4 one); more are rejected (MPA
    /// Reject), so that one address cannot take every slot of
    /// `max_connections`. Default 64: a client rarely needs more than a
    /// few (Linux NFS `nconnect` allows 16 per mount), and a NAT gateway
    /// still fits a few dozen clients behind it. Load generators that
    /// open many connections from one address (`rpcrdma bench`) raise it.
    pub max_connections_per_source: usize,
    /// The duplicate-reply cache identity of a peer. Default: the IP
    /// address without the port.
    pub identify: IdentifyFn,
    /// Counters of the transport (replies sent, connections, ...).
    pub metrics: Option<Arc<Metrics>>,
    /// Blocking mode: drive each connection on a thread of its own that
    /// sleeps in `poll(2)` on the socket, instead of a task of the runtime
    /// (see [`RdmaBlockingClient`] for the trade-off). Lower latency and
    /// CPU per call for a few busy connections; one thread per connection.
    /// Default false.
    pub blocking: bool,
    /// Octets of RDMA Read sinks all the server's connections together may
    /// have registered at once: one [`ReadSinkBudget`] shared by every
    /// connection (unless `engine.read_budget` already names one), on top
    /// of each connection's `engine.limits.max_read_sink_bytes` (16 MiB).
    /// Calls wait for it in arrival order across connections; one that can
    /// never fit gets ERR_CHUNK. Default 128 MiB: 32 calls of the largest
    /// message (4 MiB) in flight at once, far more than a link needs to
    /// stay busy, and what any number of peers can pin together. `None`:
    /// only the per-connection budgets.
    pub read_sink_budget: Option<u64>,
}

/// [`RdmaServerConfig::read_sink_budget`]'s default.
pub const DEFAULT_READ_SINK_BUDGET: u64 = 128 << 20;

impl RdmaServerConfig {
    /// The engine settings of every connection: `engine` with the shared
    /// Read-sink budget made (one per call: call once per server).
    pub(crate) fn engine_with_budget(&self) -> EngineConfig {
        let mut e = self.engine.clone();
        if e.read_budget.is_none() {
            e.read_budget = self.read_sink_budget.map(ReadSinkBudget::new);
        }
        e
    }
}

impl Default for RdmaServerConfig {
    fn default() -> Self {
        RdmaServerConfig {
            engine: EngineConfig::server(),
            provider: ProviderConfig::default(),
            max_connections: 1024,
            max_connections_per_source: 64,
            identify: Arc::new(|a: SocketAddr| ClientIdentity(Bytes::from(a.ip().to_string()))),
            metrics: None,
            blocking: false,
            read_sink_budget: Some(DEFAULT_READ_SINK_BUDGET),
        }
    }
}

impl std::fmt::Debug for RdmaServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaServerConfig")
            .field("engine", &self.engine)
            .field("provider", &self.provider)
            .field("max_connections", &self.max_connections)
            .field(
                "max_connections_per_source",
                &self.max_connections_per_source,
            )
            .field("blocking", &self.blocking)
            .field("read_sink_budget", &self.read_sink_budget)
            .finish()
    }
}

/// A snapshot of one connection's state, published by its driver.
#[derive(Clone, Debug, Default)]
pub struct RdmaStatus {
    /// The link (MPA) parameters of the current connection.
    pub link: LinkInfo,
    /// RFC 8797 outcome, once established.
    pub negotiated: Option<Negotiated>,
    /// Calls we may have outstanding (the peer's grant, clamped).
    pub credits: u32,
    /// The grant we send as responder.
    pub grant: u32,
    /// Our calls sent and not answered.
    pub outstanding: usize,
    /// Our calls waiting for a credit or the connection.
    pub queued: usize,
    /// Connections made (1 + reconnects).
    pub connects: u64,
    /// Engine counters (carried across reconnects).
    pub engine: EngineMetrics,
    /// The engine's last connection error, as text.
    pub last_error: Option<String>,
    /// What the engine holds now (work requests, receives, pooled
    /// buffers, calls in progress, Read sinks and budget).
    pub resources: Resources,
    /// The provider's live memory registrations, if it counts them: at
    /// rest exactly [`Resources::regions_at_rest`].
    pub registered_regions: Option<u32>,
    /// The RPC-over-RDMA version of the connection (version 0 while it is
    /// still open), whether it fell back from version 2, and the
    /// properties exchanged.
    pub version: VersionInfo,
}

impl RdmaStatus {
    /// A one-line summary in the spirit of Linux's `/proc/self/mountstats`
    /// `xprt: rdma` line (names instead of positions).
    pub fn mountstats(&self) -> String {
        let e = &self.engine;
        let (snd, rcv, ri) = match self.negotiated {
            Some(n) => (n.send_threshold, n.recv_threshold, n.remote_invalidation),
            None => (0, 0, false),
        };
        format!(
            "xprt: rdma connects={} credits={} grant={} inline_send={snd} inline_recv={rcv} \
             remote_invalidate={ri} calls_sent={} retransmits={} replies={} bad_xids={} \
             read_chunks={} read_chunk_bytes={} write_chunks={} write_chunk_bytes={} \
             reply_chunks={} reply_chunk_bytes={} long_calls={} long_replies={} \
             calls_received={} replies_sent={} rdma_reads={} rdma_read_bytes={} \
             rdma_writes={} rdma_write_bytes={} err_chunk_sent={} err_vers_sent={} \
             credit_waits={} send_with_invalidate={} remote_invalidations={} \
             local_invalidations={}",
            self.connects,
            self.credits,
            self.grant,
            e.calls_sent,
            e.retransmits,
            e.replies_received,
            e.bad_xids,
            e.read_chunks,
            e.read_chunk_bytes,
            e.write_chunks,
            e.write_chunk_bytes,
            e.reply_chunks,
            e.reply_chunk_bytes,
            e.long_calls,
            e.long_replies,
            e.calls_received,
            e.replies_sent,
            e.rdma_reads,
            e.rdma_read_bytes,
            e.rdma_writes,
            e.rdma_write_bytes,
            e.err_chunk_sent,
            e.err_vers_sent,
            e.credit_waits,
            e.send_with_invalidate,
            e.remote_invalidations,
            e.local_invalidations,
        )
    }
}
