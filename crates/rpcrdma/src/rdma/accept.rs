//! The server's acceptor thread: one thread runs the provider's
//! [`Listener`] (for iWARP: every pending MPA exchange at once, under the
//! deadline and caps of its admission limits), answers each complete
//! connection request (reject when `max_connections` or
//! `max_connections_per_source` is reached; otherwise receives posted,
//! then the accept) and starts the connection's driver.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use rpcrdma_proto::provider::{
    ConnectionManager, DropReason, ListenEvent, Listener, PendingConnection, Provider,
};
use tokio::task::JoinHandle;

use super::driver::{self, Cmd, Shared};
use super::wake::ThreadWake;
use super::Connected;
use super::IdentifyFn;
use crate::metrics::Metrics;
use crate::transport::CallDispatcher;

/// How long the acceptor pauses after its listener failed.
const LISTEN_PAUSE: Duration = Duration::from_millis(10);

/// One live server connection.
pub(crate) struct Live {
    pub(crate) shared: Arc<Shared>,
    pub(crate) task: JoinHandle<()>,
    /// What `max_connections_per_source` counts it against.
    source: IpAddr,
}

/// The server's connections.
pub(crate) type Conns = Arc<Mutex<Vec<Live>>>;

pub(crate) fn lock(conns: &Conns) -> MutexGuard<'_, Vec<Live>> {
    conns.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the acceptor thread needs.
pub(crate) struct AcceptCtx {
    pub(crate) engine: EngineConfig,
    pub(crate) max_connections: usize,
    pub(crate) max_per_source: usize,
    pub(crate) identify: IdentifyFn,
    pub(crate) blocking: bool,
    pub(crate) dispatcher: Arc<dyn CallDispatcher>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) conns: Conns,
    pub(crate) stop: Arc<AtomicBool>,
    /// Where the drivers run.
    pub(crate) runtime: tokio::runtime::Handle,
}

/// A listening server: its address, the waker that stops its acceptor
/// thread (with the stop flag), and the thread.
pub(crate) struct Started {
    pub(crate) local: SocketAddr,
    pub(crate) waker: Waker,
    pub(crate) thread: std::thread::JoinHandle<()>,
}

/// Listens on the first address of `addr` that binds and starts the
/// acceptor thread; it ends (closing the listener and every pending
/// connection) once `ctx.stop` is set and the waker used.
pub(crate) fn start<CM>(cm: &CM, addr: impl ToSocketAddrs, ctx: AcceptCtx) -> io::Result<Started>
where
    CM: ConnectionManager,
    CM::Listener: Send + 'static,
    CM::Provider: Send + 'static,
{
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match cm.listen(a) {
            Ok(l) => {
                let local = l.local_addr();
                let waker = l.waker();
                let thread = std::thread::Builder::new()
                    .name("rpcrdma-accept".into())
                    .spawn(move || ctx.run(l))?;
                return Ok(Started {
                    local,
                    waker,
                    thread,
                });
            }
            Err(e) => last = Some(io::Error::from(e)),
        }
    }
    Err(last
        .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on")))
}

impl AcceptCtx {
    fn run<L>(self, mut l: L)
    where
        L: Listener,
        L::Provider: Send + 'static,
    {
        let _rt = self.runtime.enter();
        let mut events = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(e) = l.poll(None, &mut events) {
                tracing::warn!(error = %e, "RDMA listener failed");
                std::thread::sleep(LISTEN_PAUSE);
            }
            for ev in events.drain(..) {
                match ev {
                    ListenEvent::Request(p) if !self.stop.load(Ordering::SeqCst) => self.answer(p),
                    ListenEvent::Request(_) => {}
                    ListenEvent::Dropped { peer, reason } => {
                        Metrics::inc(self.closed_counter(&reason));
                        log_dropped(peer, &reason);
                    }
                    ListenEvent::Error(e) => {
                        tracing::warn!(error = %e, "RDMA listener cannot accept; pausing")
                    }
                }
            }
        }
    }

    fn closed_counter(&self, reason: &DropReason) -> &AtomicU64 {
        let m = &self.metrics;
        match reason {
            DropReason::TimedOut => &m.handshakes_timed_out,
            DropReason::EvictedPerSource => &m.handshakes_evicted_per_source,
            DropReason::EvictedOverall => &m.handshakes_evicted_overall,
            DropReason::Invalid(_) => &m.handshakes_invalid,
            DropReason::PeerClosed | DropReason::Failed(_) => &m.handshakes_abandoned,
        }
    }

    /// The counter of the cap that refuses one more connection from
    /// `source` now, if any. Only this thread adds connections, so the
    /// answer holds until it adds the next.
    fn refusal(&self, source: IpAddr) -> Option<&AtomicU64> {
        let mut c = lock(&self.conns);
        c.retain(|l| !l.task.is_finished());
        if c.len() >= self.max_connections {
            return Some(&self.metrics.connections_refused);
        }
        let from = c.iter().filter(|l| l.source == source).count();
        (from >= self.max_per_source).then_some(&self.metrics.connections_refused_per_source)
    }

    fn answer<P>(&self, mut pending: P)
    where
        P: PendingConnection,
        P::Provider: Send + 'static,
    {
        let peer = pending.request().peer;
        // An IPv4-mapped IPv6 address counts as the IPv4 one.
        let source = peer.ip().to_canonical();
        if let Some(counter) = self.refusal(source) {
            Metrics::inc(counter);
            tracing::warn!(%peer, max = self.max_connections, per_source = self.max_per_source,
                "too many connections, rejecting");
            let _ = pending.reject(&[]);
            return;
        }
        let mut conn = Connection::new(self.engine.clone());
        // Receives before the accept (as Linux svcrdma).
        conn.prepare_receives(pending.provider_mut());
        let p = match pending.accept(&self.engine.connect_params()) {
            Ok(p) => p,
            Err(e) => {
                Metrics::inc(&self.metrics.handshakes_invalid);
                tracing::warn!(%peer, error = %e, answer = "connection closed", "accept failed");
                return;
            }
        };
        let mut info = p.link_info();
        info.peer = peer.to_string();
        let connected = Connected {
            provider: Box::new(p),
            info,
        };
        Metrics::inc(&self.metrics.connections);
        let identity = (self.identify)(peer);
        let blocking = self.blocking;
        tracing::debug!(%peer, client = %identity, blocking, "rpc/rdma connection accepted");
        let wake = if blocking {
            match ThreadWake::new() {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "no wake-up socket for a blocking connection; dropped");
                    return;
                }
            }
        } else {
            None
        };
        // Listed before its driver starts: a connection serves calls only
        // once `RdmaServer::connections` (and the caps) can see it.
        let mut c = lock(&self.conns);
        let (shared, task) = driver::spawn(driver::build(
            connected,
            conn,
            self.engine.clone(),
            self.metrics.clone(),
            false,
            Some(self.dispatcher.clone()),
            identity,
            None,
            wake,
        ));
        // A stop that came meanwhile has closed the others already.
        if self.stop.load(Ordering::SeqCst) {
            let _ = shared.push(Cmd::Close);
        }
        c.push(Live {
            shared,
            task,
            source,
        });
    }
}

/// A connection closed before its connection request was complete: a
/// peer error (warning, with the answer it got) or a limit (info).
fn log_dropped(peer: std::net::SocketAddr, reason: &DropReason) {
    match reason {
        DropReason::Invalid(why) => tracing::warn!(%peer, error = %why,
            answer = "MPA Reject or close, as RFC 5044 prescribes",
            "peer error: not a valid connection request"),
        DropReason::TimedOut => tracing::info!(%peer, answer = "connection closed",
            "no connection request in time (--mpa-timeout)"),
        DropReason::EvictedPerSource => tracing::info!(%peer, answer = "connection closed",
            "evicted: too many pending connections from its address (--max-pending-per-source)"),
        DropReason::EvictedOverall => tracing::info!(%peer, answer = "connection closed",
            "evicted: too many pending connections (--max-pending)"),
        DropReason::PeerClosed => {
            tracing::debug!(%peer, "closed by the peer before its connection request")
        }
        DropReason::Failed(why) => {
            tracing::warn!(%peer, error = %why, "connection failed before its request")
        }
    }
}
