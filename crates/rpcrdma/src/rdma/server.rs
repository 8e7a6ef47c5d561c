//! The server side: [`RdmaServer`] (a listener of the configured
//! provider) and [`serve_provider`] (one connection over any provider).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use tokio::task::JoinHandle;

use super::accept::{self, AcceptCtx, Conns};
use super::driver::{self, Cmd, Shared};
use super::{Connected, RdmaServerConfig, RdmaStatus};
use crate::metrics::Metrics;
use crate::server::Server;
use crate::transport::{CallDispatcher, ClientIdentity};

/// One server-side connection driven by its own task (from
/// [`serve_provider`]).
pub struct RdmaServerConnection {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RdmaServerConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaServerConnection")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

impl RdmaServerConnection {
    /// The connection's state.
    pub fn status(&self) -> RdmaStatus {
        self.shared.status()
    }

    /// Closes the connection and waits for its driver.
    pub async fn shutdown(&self) {
        let _ = self.shared.push(Cmd::Close);
        let h = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.await;
        }
    }
}

/// Serves RPC-over-RDMA on one connection whose provider is already
/// connected or accepted (the caller ran
/// [`Connection::prepare_receives`] on `conn` before accepting, as a server
/// must). Calls go to `dispatcher` with `identity`.
pub fn serve_provider(
    connected: Connected,
    conn: Connection,
    engine: EngineConfig,
    dispatcher: Arc<dyn CallDispatcher>,
    identity: ClientIdentity,
    metrics: Arc<Metrics>,
) -> RdmaServerConnection {
    Metrics::inc(&metrics.connections);
    let (shared, task) = driver::spawn(driver::build(
        connected,
        conn,
        engine,
        metrics,
        false,
        Some(dispatcher),
        identity,
        None,
        None,
    ));
    RdmaServerConnection {
        shared,
        task: Mutex::new(Some(task)),
    }
}

/// An RPC-over-RDMA server over the provider of
/// [`RdmaServerConfig::provider`]: one acceptor thread running the
/// provider's listener (for iWARP: TCP accept and every pending MPA
/// exchange at once, under its admission deadline and caps), receives
/// posted before the accept, [`RdmaServerConfig::max_connections`] and
/// [`RdmaServerConfig::max_connections_per_source`] enforced with a
/// reject, and one driver task per connection.
pub struct RdmaServer {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Waker,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    conns: Conns,
    metrics: Arc<Metrics>,
    read_budget: Option<Arc<super::ReadSinkBudget>>,
}

impl std::fmt::Debug for RdmaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaServer")
            .field("local", &self.local)
            .finish()
    }
}

impl RdmaServer {
    /// Serves `server`'s programs on `addr`.
    pub async fn serve(
        server: &Server,
        addr: impl ToSocketAddrs,
        config: RdmaServerConfig,
    ) -> io::Result<RdmaServer> {
        Self::bind(addr, config, server.dispatcher()).await
    }

    /// Listens on `addr` and hands every call to `dispatcher`.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: RdmaServerConfig,
        dispatcher: Arc<dyn CallDispatcher>,
    ) -> io::Result<RdmaServer> {
        let mut config = config;
        // One Read-sink budget for all the connections.
        config.engine = config.engine_with_budget();
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = config.metrics.clone().unwrap_or_default();
        let conns: Conns = Arc::default();
        let read_budget = config.engine.read_budget.clone();
        let accept::Started {
            local,
            waker,
            thread,
        } = config.provider.listen(
            addr,
            AcceptCtx {
                engine: config.engine,
                max_connections: config.max_connections,
                max_per_source: config.max_connections_per_source,
                identify: config.identify,
                blocking: config.blocking,
                dispatcher,
                metrics: metrics.clone(),
                conns: conns.clone(),
                stop: stop.clone(),
                runtime: tokio::runtime::Handle::current(),
            },
        )?;
        Ok(RdmaServer {
            local,
            stop,
            waker,
            thread: Mutex::new(Some(thread)),
            conns,
            metrics,
            read_budget,
        })
    }

    /// The Read-sink budget shared by the server's connections, if any
    /// ([`RdmaServerConfig::read_sink_budget`]).
    pub fn read_budget(&self) -> Option<Arc<super::ReadSinkBudget>> {
        self.read_budget.clone()
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The transport's counters.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The state of every live connection.
    pub fn connections(&self) -> Vec<RdmaStatus> {
        live_statuses(&self.conns)
    }

    /// A reader of the server's gauges (live connections, credits in use,
    /// Read-sink octets, registrations) that outlives this handle: for a
    /// metrics endpoint to call on each scrape.
    pub fn gauges(&self) -> impl Fn() -> RdmaGauges + Send + Sync + 'static {
        let conns = self.conns.clone();
        move || RdmaGauges::of(&live_statuses(&conns))
    }

    fn signal_stop(&self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            self.waker.wake_by_ref();
        }
        for l in accept::lock(&self.conns).iter() {
            let _ = l.shared.push(Cmd::Close);
        }
    }

    /// Stops accepting (closing the listener and every connection still
    /// owing its connection request), closes every connection (their calls in
    /// progress are abandoned) and waits for the tasks.
    pub async fn shutdown(&self) {
        self.signal_stop();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            // The acceptor thread wakes at once; joining it first means no
            // connection is added after the ones taken below.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        let conns = std::mem::take(&mut *accept::lock(&self.conns));
        for l in conns {
            let _ = l.shared.push(Cmd::Close);
            let _ = tokio::time::timeout(Duration::from_secs(2), l.task).await;
        }
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

fn live_statuses(conns: &Conns) -> Vec<RdmaStatus> {
    accept::lock(conns)
        .iter()
        .filter(|l| !l.task.is_finished())
        .map(|l| l.shared.status())
        .collect()
}

/// What an RPC-over-RDMA server holds now, summed over its live
/// connections ([`RdmaServer::gauges`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RdmaGauges {
    /// Live connections.
    pub connections: u64,
    /// Credits granted to the peers (the grants last sent).
    pub credits_granted: u64,
    /// Credits in use: received calls not finished (reading chunks,
    /// executing or replying).
    pub credits_in_use: u64,
    /// Octets of RDMA Read sinks registered.
    pub read_sink_bytes: u64,
    /// Octets of unregistered chunk-sink buffers pooled.
    pub pooled_sink_bytes: u64,
    /// Provider memory registrations live (where the provider counts
    /// them; else the engine's registrations at rest).
    pub registrations: u64,
}

impl RdmaGauges {
    /// The sums over `conns`.
    pub fn of(conns: &[RdmaStatus]) -> Self {
        let mut g = RdmaGauges::default();
        for c in conns {
            let r = &c.resources;
            g.connections += 1;
            g.credits_granted += u64::from(c.grant);
            g.credits_in_use += r.calls_received as u64;
            g.read_sink_bytes += r.read_sink_bytes;
            g.pooled_sink_bytes += r.pooled_sink_bytes as u64;
            g.registrations += c
                .registered_regions
                .map_or(r.regions_at_rest() as u64, u64::from);
        }
        g
    }
}
