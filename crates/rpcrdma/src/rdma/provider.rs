//! Provider selection: the one place the runtime names an RDMA provider.
//!
//! Everything else in [`crate::rdma`] speaks the provider contract of
//! `rpcrdma-proto` ([`Provider`] for the data path and readiness,
//! [`ConnectionManager`] / [`Listener`](rpcrdma_proto::provider::Listener)
//! / [`PendingConnection`](rpcrdma_proto::provider::PendingConnection) for
//! connection setup). [`ProviderConfig`] says which provider carries a
//! client's or a server's connections:
//!
//! * `ProviderConfig::Iwarp` (cargo feature `iwarp`, on by default): the
//!   software iWARP provider of `rpcrdma-iwarp` (MPA/DDP/RDMAP over TCP,
//!   talks to Linux siw), with its MPA settings and the admission limits
//!   of connections that owe their MPA Request;
//! * [`ProviderConfig::Mem`]: the in-memory provider of `rpcrdma-proto`
//!   over an in-process [`MemNetwork`] (tests; the default without the
//!   `iwarp` feature, on one network per process);
//! * `ProviderConfig::Verbs` (cargo feature `verbs`, on by default): the
//!   rdma-core provider of `rpcrdma-verbs` (RDMA NICs and the kernel's
//!   siw / rxe; `docs/verbs.md`).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::Duration;

#[cfg(feature = "iwarp")]
pub use rpcrdma_iwarp::admission::AcceptLimits;
#[cfg(feature = "iwarp")]
pub use rpcrdma_iwarp::cm::IwarpConfig;
#[cfg(feature = "iwarp")]
pub use rpcrdma_iwarp::manager::IwarpCm;
use rpcrdma_proto::engine::Config as EngineConfig;
use rpcrdma_proto::provider::mem_cm::MemNetwork;
use rpcrdma_proto::provider::{ConnectionManager, Provider};
#[cfg(feature = "verbs")]
pub use rpcrdma_verbs::{VerbsCm, VerbsConfig};

use super::accept::{self, AcceptCtx, Started};
use super::Connected;

/// Which RDMA provider carries the connections, with its settings. The
/// engine's RFC 8797 private data, IRD and ORD are given to the
/// provider's connection manager on every connect and accept.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ProviderConfig {
    /// Software iWARP over TCP.
    #[cfg(feature = "iwarp")]
    Iwarp(IwarpCm),
    /// rdma-core verbs (libibverbs / librdmacm, loaded at run time).
    #[cfg(feature = "verbs")]
    Verbs(VerbsCm),
    /// The in-memory provider on an in-process network.
    Mem(MemNetwork),
}

impl Default for ProviderConfig {
    /// iWARP with its defaults, or without the `iwarp` feature the
    /// in-memory provider on the process's network
    /// ([`ProviderConfig::process_network`]).
    fn default() -> Self {
        #[cfg(feature = "iwarp")]
        {
            ProviderConfig::Iwarp(IwarpCm::default())
        }
        #[cfg(not(feature = "iwarp"))]
        {
            ProviderConfig::Mem(ProviderConfig::process_network())
        }
    }
}

impl ProviderConfig {
    /// The in-memory network shared by everything in this process that
    /// uses it.
    pub fn process_network() -> MemNetwork {
        static NET: OnceLock<MemNetwork> = OnceLock::new();
        NET.get_or_init(MemNetwork::new).clone()
    }

    /// The iWARP settings, if iWARP is selected.
    #[cfg(feature = "iwarp")]
    pub fn iwarp_mut(&mut self) -> Option<&mut IwarpCm> {
        match self {
            ProviderConfig::Iwarp(cm) => Some(cm),
            _ => None,
        }
    }

    /// The provider's name for tools and logs: `iwarp`, `verbs` or `mem`.
    pub fn name(&self) -> &'static str {
        match self {
            #[cfg(feature = "iwarp")]
            ProviderConfig::Iwarp(_) => "iwarp",
            #[cfg(feature = "verbs")]
            ProviderConfig::Verbs(_) => "verbs",
            ProviderConfig::Mem(_) => "mem",
        }
    }

    /// Connects to `addr` with the engine's private data, IRD and ORD and
    /// waits (blocking, at most `timeout`) until the connection is
    /// established; a reject is `ConnectionRefused` (its private data in
    /// the [`CmError`](rpcrdma_proto::provider::CmError) inside).
    pub fn connect(
        &self,
        addr: SocketAddr,
        engine: &EngineConfig,
        timeout: Duration,
    ) -> io::Result<Connected> {
        match self {
            #[cfg(feature = "iwarp")]
            ProviderConfig::Iwarp(cm) => connect_with(cm, addr, engine, timeout),
            #[cfg(feature = "verbs")]
            ProviderConfig::Verbs(cm) => {
                // RFC 8797's R flag invites the peer to Send With
                // Invalidate; set it only where the provider can act on one.
                let mut e = engine.clone();
                e.remote_invalidation &= cm.remote_invalidation();
                connect_with(cm, addr, &e, timeout)
            }
            ProviderConfig::Mem(net) => connect_with(net, addr, engine, timeout),
        }
    }

    /// Listens on the first address of `addr` that binds and starts the
    /// acceptor thread.
    pub(crate) fn listen(&self, addr: impl ToSocketAddrs, ctx: AcceptCtx) -> io::Result<Started> {
        match self {
            #[cfg(feature = "iwarp")]
            ProviderConfig::Iwarp(cm) => accept::start(cm, addr, ctx),
            #[cfg(feature = "verbs")]
            ProviderConfig::Verbs(cm) => {
                let mut ctx = ctx;
                ctx.engine.remote_invalidation &= cm.remote_invalidation();
                accept::start(cm, addr, ctx)
            }
            ProviderConfig::Mem(net) => accept::start(net, addr, ctx),
        }
    }
}

fn connect_with<CM>(
    cm: &CM,
    addr: SocketAddr,
    engine: &EngineConfig,
    timeout: Duration,
) -> io::Result<Connected>
where
    CM: ConnectionManager,
    CM::Provider: Send + 'static,
{
    let p = cm.connect(addr, &engine.connect_params(), timeout)?;
    let mut info = p.link_info();
    info.peer = addr.to_string();
    Ok(Connected {
        provider: Box::new(p),
        info,
    })
}
