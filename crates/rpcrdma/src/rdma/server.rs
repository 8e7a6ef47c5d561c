//! The server side: [`RdmaServer`] (iWARP listener) and
//! [`serve_provider`] (one connection over any provider).

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma_iwarp::tcp::Listener;
use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::blocking::ThreadWake;
use super::driver::{self, Cmd, Shared};
use super::{iwarp_config_for, Connected, LinkInfo, RdmaServerConfig, RdmaStatus};
use crate::metrics::Metrics;
use crate::server::Server;
use crate::transport::{CallDispatcher, ClientIdentity};

type Conns = Arc<Mutex<Vec<(Arc<Shared>, JoinHandle<()>)>>>;

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
        self.shared.lock().status.clone()
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

/// An RPC-over-RDMA server over software iWARP: accept threads (TCP
/// accept and MPA exchange, receives posted before the MPA Reply;
/// [`RdmaServerConfig::accept_threads`] of them share the listener, so a
/// peer that connects and never sends its MPA Request holds up one of them
/// for at most [`RdmaServerConfig::accept_timeout`]) and one driver task
/// per connection.
pub struct RdmaServer {
    local: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    conns: Conns,
    metrics: Arc<Metrics>,
    accept_task: Mutex<Option<JoinHandle<()>>>,
    n_threads: usize,
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
        let icfg = iwarp_config_for(&config.iwarp, &config.engine);
        let listener = Listener::bind(addr, icfg.clone())?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = config.metrics.clone().unwrap_or_default();
        let conns: Conns = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut rx) = mpsc::unbounded_channel::<(Connected, Connection, SocketAddr)>();

        let listener = Arc::new(listener);
        let mut threads = Vec::new();
        for i in 0..config.accept_threads.max(1) {
            let (l, st, ecfg, icfg) = (
                listener.clone(),
                stop.clone(),
                config.engine.clone(),
                icfg.clone(),
            );
            let (timeout, max) = (config.accept_timeout, config.max_connections);
            let (conns2, m2, tx) = (conns.clone(), metrics.clone(), tx.clone());
            let t = std::thread::Builder::new()
                .name(format!("rpcrdma-accept-{i}"))
                .spawn(move || accept_thread(&l, icfg, ecfg, timeout, max, st, conns2, m2, tx))?;
            threads.push(t);
        }
        drop(tx);

        let conns3 = conns.clone();
        let m3 = metrics.clone();
        let ecfg = config.engine.clone();
        let identify = config.identify.clone();
        let blocking = config.blocking;
        let accept_task = tokio::spawn(async move {
            while let Some((connected, conn, peer)) = rx.recv().await {
                Metrics::inc(&m3.connections);
                let identity = identify(peer);
                tracing::debug!(%peer, client = %identity, blocking, "rpc/rdma connection accepted");
                let wake = if blocking {
                    match ThreadWake::new() {
                        Ok(w) => Some(w),
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "no wake-up socket for a blocking connection; dropped");
                            continue;
                        }
                    }
                } else {
                    None
                };
                let (shared, task) = driver::spawn(driver::build(
                    connected,
                    conn,
                    ecfg.clone(),
                    m3.clone(),
                    false,
                    Some(dispatcher.clone()),
                    identity,
                    None,
                    wake,
                ));
                let mut c = conns3.lock().unwrap_or_else(|p| p.into_inner());
                c.retain(|(_, h)| !h.is_finished());
                c.push((shared, task));
            }
        });
        Ok(RdmaServer {
            local,
            stop,
            threads: Mutex::new(threads),
            n_threads: config.accept_threads.max(1),
            conns,
            metrics,
            accept_task: Mutex::new(Some(accept_task)),
            read_budget: config.engine.read_budget.clone(),
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
        let c = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .filter(|(_, h)| !h.is_finished())
            .map(|(s, _)| s.lock().status.clone())
            .collect()
    }

    fn signal_stop(&self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            // Wake the accept threads with connections of our own (each
            // takes one, sees EOF instead of an MPA Request, and stops).
            let mut a = self.local;
            if a.ip().is_unspecified() {
                a.set_ip(match a {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            for _ in 0..self.n_threads {
                let _ = TcpStream::connect_timeout(&a, Duration::from_millis(200));
            }
        }
        let c = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        for (s, _) in c.iter() {
            let _ = s.push(Cmd::Close);
        }
    }

    /// Stops accepting, closes every connection (their calls in progress
    /// are abandoned) and waits for the tasks.
    pub async fn shutdown(&self) {
        // A loopback connect: does not block for long.
        self.signal_stop();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        // A thread waiting for a silent peer's MPA Request stops within
        // the accept timeout; do not wait that long here.
        let join = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(2), join).await;
        let conns: Vec<_> =
            std::mem::take(&mut *self.conns.lock().unwrap_or_else(|p| p.into_inner()));
        for (s, h) in conns {
            let _ = s.push(Cmd::Close);
            let _ = tokio::time::timeout(Duration::from_secs(2), h).await;
        }
        let a = self
            .accept_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(a) = a {
            a.abort();
        }
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        self.signal_stop();
        if let Some(a) = self
            .accept_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            a.abort();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn accept_thread(
    listener: &Listener,
    icfg: rpcrdma_iwarp::cm::IwarpConfig,
    ecfg: EngineConfig,
    timeout: Duration,
    max: usize,
    stop: Arc<AtomicBool>,
    conns: Conns,
    metrics: Arc<Metrics>,
    tx: mpsc::UnboundedSender<(Connected, Connection, SocketAddr)>,
) {
    // The listener's accept deadline covers the wait for a TCP connection
    // and for its MPA Request together (so a connection that arrives late
    // in a period gets less time for its Request; its client retries).
    let period = timeout;
    while !stop.load(Ordering::SeqCst) {
        match listener.accept(period) {
            Ok(mut pending) => {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let live = {
                    let c = conns.lock().unwrap_or_else(|p| p.into_inner());
                    c.iter().filter(|(_, h)| !h.is_finished()).count()
                };
                if live >= max {
                    Metrics::inc(&metrics.connections_refused);
                    tracing::warn!(peer = %pending.peer_addr(), max, "too many connections, rejecting");
                    let _ = pending.reject(&[], Duration::from_secs(1));
                    continue;
                }
                let peer = pending.peer_addr();
                let mut conn = Connection::new(ecfg.clone());
                // Receives before the MPA Reply (as Linux svcrdma).
                conn.prepare_receives(pending.provider_mut());
                match pending.accept(icfg.clone(), timeout) {
                    Ok(p) => {
                        let info = LinkInfo::of_iwarp(&p, peer.to_string());
                        let c = Connected {
                            provider: Box::new(p),
                            info,
                        };
                        if tx.send((c, conn, peer)).is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "MPA accept failed"),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
            Err(e) => {
                tracing::debug!(error = %e, "iWARP accept failed");
                if !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
