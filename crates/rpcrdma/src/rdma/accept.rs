//! The server's acceptor thread: one thread runs the iWARP
//! [`Acceptor`] (every pending MPA exchange at once, under the deadline
//! and caps of [`super::RdmaServerConfig::accept`]), answers each complete
//! MPA Request (Reject when `max_connections` or
//! `max_connections_per_source` is reached; otherwise receives posted,
//! then the MPA Reply) and starts the connection's driver.

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rpcrdma_iwarp::acceptor::{AcceptEvent, Acceptor, CloseReason};
use rpcrdma_iwarp::admission::{source_of, Eviction};
use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::PendingConnection;
use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use tokio::task::JoinHandle;

use super::driver::{self, Cmd, Shared};
use super::wake::ThreadWake;
use super::{Connected, IdentifyFn, LinkInfo};
use crate::metrics::Metrics;
use crate::transport::CallDispatcher;

/// Bound on writing our MPA Reply or Reject: one frame of at most 532
/// octets into a new socket's empty send buffer, which never waits.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

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
    pub(crate) icfg: IwarpConfig,
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

/// Starts the acceptor thread; it ends (closing the listener and every
/// pending connection) once `ctx.stop` is set and the acceptor's waker
/// used.
pub(crate) fn spawn(acc: Acceptor, ctx: AcceptCtx) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rpcrdma-accept".into())
        .spawn(move || ctx.run(acc))
}

impl AcceptCtx {
    fn run(self, mut acc: Acceptor) {
        let _rt = self.runtime.enter();
        let mut events = Vec::new();
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(e) = acc.poll(None, &mut events) {
                tracing::warn!(error = %e, "iWARP acceptor failed");
                std::thread::sleep(Duration::from_millis(10));
            }
            for ev in events.drain(..) {
                match ev {
                    AcceptEvent::Request(p) if !self.stop.load(Ordering::SeqCst) => self.answer(*p),
                    AcceptEvent::Request(_) => {}
                    AcceptEvent::Closed { peer, reason } => {
                        Metrics::inc(self.closed_counter(&reason));
                        tracing::debug!(%peer, ?reason, "closed before its MPA Request");
                    }
                    AcceptEvent::ListenerError(e) => {
                        tracing::warn!(error = %e, "iWARP listener cannot accept; pausing")
                    }
                }
            }
        }
    }

    fn closed_counter(&self, reason: &CloseReason) -> &AtomicU64 {
        let m = &self.metrics;
        match reason {
            CloseReason::TimedOut => &m.handshakes_timed_out,
            CloseReason::Evicted(Eviction::PerSource) => &m.handshakes_evicted_per_source,
            CloseReason::Evicted(Eviction::Overall) => &m.handshakes_evicted_overall,
            CloseReason::Invalid(_) => &m.handshakes_invalid,
            CloseReason::PeerClosed | CloseReason::Failed(_) => &m.handshakes_abandoned,
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

    fn answer(&self, mut pending: PendingConnection) {
        let peer = pending.peer_addr();
        let source = source_of(peer.ip());
        if let Some(counter) = self.refusal(source) {
            Metrics::inc(counter);
            tracing::warn!(%peer, max = self.max_connections, per_source = self.max_per_source,
                "too many connections, rejecting");
            let _ = pending.reject(&[], ANSWER_TIMEOUT);
            return;
        }
        let mut conn = Connection::new(self.engine.clone());
        // Receives before the MPA Reply (as Linux svcrdma).
        conn.prepare_receives(pending.provider_mut());
        let p = match pending.accept(self.icfg.clone(), ANSWER_TIMEOUT) {
            Ok(p) => p,
            Err(e) => {
                Metrics::inc(&self.metrics.handshakes_invalid);
                tracing::debug!(%peer, error = %e, "MPA accept failed");
                return;
            }
        };
        let info = LinkInfo::of_iwarp(&p, peer.to_string());
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
