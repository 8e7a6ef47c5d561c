//! The client side: [`RdmaClientTransport`].

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use rpcrdma_proto::engine::{Config as EngineConfig, Connection};

use super::driver::{self, Cmd, Driver, Reconnect, Shared};
use super::handle::{call_span, engine_call, ReplySink};
use super::task::TaskDrive;
use super::{Connected, ProviderConnector, RdmaClientConfig, RdmaStatus};
use crate::client::{Client, ClientConfig};
use crate::metrics::Metrics;
use crate::reconnect::ReconnectPolicy;
use crate::slot::ReplyWait;
use crate::transport::{
    AttemptRef, CallDispatcher, ClientIdentity, ClientTransport, OutgoingCall, ReplyReceiver,
    TransportError,
};

/// An RPC-over-RDMA client connection (with reconnection), driven by its
/// own task. Dropping it closes the connection.
pub struct RdmaClientTransport {
    shared: Arc<Shared>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The driver's core, for calls started by their callers (see
    /// [`super::task`]); gone once the driver task has ended.
    drive: Weak<TaskDrive>,
}

impl std::fmt::Debug for RdmaClientTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClientTransport")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

impl RdmaClientTransport {
    /// Connects to `addr` over the provider of `config.provider` (by
    /// default iWARP: MPA/DDP/RDMAP over TCP), with the engine's RFC 8797
    /// private data and IRD/ORD; reconnects to the same address after a
    /// loss when `config.reconnect` is set.
    ///
    /// An `Auto` client starts in version 1 when this process already
    /// learned that `addr` speaks no version 2 ([`super::versions`]).
    pub async fn connect(addr: SocketAddr, mut config: RdmaClientConfig) -> io::Result<Arc<Self>> {
        config.engine = super::versions::for_peer(config.engine, &addr.to_string());
        let (prov, eng, to) = (
            config.provider.clone(),
            config.engine.clone(),
            config.connect_timeout,
        );
        let connector: ProviderConnector = Arc::new(move || prov.connect(addr, &eng, to));
        Self::with_connector(connector, config.engine, config.reconnect, config.metrics).await
    }

    /// Connects with `connector` (run in `spawn_blocking`), which is used
    /// again to reconnect when `reconnect` is set.
    pub async fn with_connector(
        connector: ProviderConnector,
        engine: EngineConfig,
        reconnect: Option<ReconnectPolicy>,
        metrics: Option<Arc<Metrics>>,
    ) -> io::Result<Arc<Self>> {
        let c = connector.clone();
        let connected = tokio::task::spawn_blocking(move || c())
            .await
            .map_err(io::Error::other)??;
        Ok(Self::from_connected(
            connected,
            engine,
            reconnect.map(|policy| (connector, policy)),
            metrics,
        ))
    }

    /// Drives an existing connection (e.g. one end of an in-memory
    /// provider pair). With `reconnect`, the connector makes the next one.
    ///
    /// The engine assigns the wire XIDs. When `engine.first_xid` is the
    /// engine's default, it is replaced by a clock-derived value, so that
    /// two clients at one address (one DRC identity) do not send the same
    /// XIDs (Linux also starts every transport at a random XID).
    pub fn from_connected(
        connected: Connected,
        mut engine: EngineConfig,
        reconnect: Option<(ProviderConnector, ReconnectPolicy)>,
        metrics: Option<Arc<Metrics>>,
    ) -> Arc<Self> {
        if engine.first_xid == EngineConfig::client().first_xid {
            engine.first_xid = clock_xid();
        }
        let metrics = metrics.unwrap_or_default();
        Metrics::inc(&metrics.connections);
        let conn = Connection::new(engine.clone());
        let identity = ClientIdentity(Bytes::from(connected.info.peer.clone()));
        let built = driver::build(
            connected,
            conn,
            engine,
            metrics,
            true,
            None,
            identity,
            reconnect.map(|(connector, policy)| Reconnect { connector, policy }),
            None,
        );
        let drive = match &built.1 {
            Driver::Task(t) => Arc::downgrade(t.drive()),
            Driver::Thread(_) => Weak::new(),
        };
        let (shared, task) = driver::spawn(built);
        Arc::new(RdmaClientTransport {
            shared,
            task: std::sync::Mutex::new(Some(task)),
            drive,
        })
    }

    /// The connection's state: negotiated sizes, credits, engine counters.
    pub fn status(&self) -> RdmaStatus {
        self.shared.status()
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// Closes and waits for the driver task to finish.
    pub async fn shutdown(&self) {
        self.close();
        let h = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.await;
        }
    }
}

impl RdmaClientTransport {
    /// The driver's core (tests).
    #[cfg(test)]
    pub(crate) fn drive(&self) -> Option<Arc<TaskDrive>> {
        self.drive.upgrade()
    }

    /// Starts `call`, to be ended by the driver at `deadline` if given: on
    /// the caller's thread when the connection is free (the direct path,
    /// [`TaskDrive::try_call`]), else through the command channel.
    pub(crate) fn start_call(
        &self,
        call: AttemptRef<'_>,
        deadline: Option<std::time::Instant>,
    ) -> Result<ReplyReceiver, TransportError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let drive = self.drive.upgrade();
        let now = std::time::Instant::now();
        let sink = ReplySink::Channel(tx);
        self.start(call, deadline, now, sink, drive.as_ref(), None)?;
        Ok(rx)
    }

    /// [`RdmaClientTransport::start_call`], the outcome waited for in a
    /// slot by a future that drives the connection itself while the call
    /// is its only one ([`ReplyWait`]: no `oneshot`, and no hand-off to the
    /// driver task for the reply). `now`: the caller's clock, read for the
    /// deadline (the call starts at it, without a clock read of its own).
    /// `waker`: the waker of the task that polls the future next (its
    /// slot keeps it; a call started on the caller's thread as the
    /// connection's only one hands it the connection's wake-ups at once,
    /// [`TaskDrive::try_call`]).
    pub(crate) fn start_call_waiting(
        &self,
        call: AttemptRef<'_>,
        deadline: Option<std::time::Instant>,
        now: std::time::Instant,
        waker: &std::task::Waker,
    ) -> Result<ReplyWait, TransportError> {
        let (tx, slot) = crate::slot::slot_for(waker);
        let drive = self.drive.upgrade();
        // Counted among the connection's waiters before the call starts
        // (a lone waiter then leaves the connection to the driver task).
        let mut wait = ReplyWait::new(slot, drive.as_ref());
        let waiter = Some((wait.token(), waker));
        if self.start(
            call,
            deadline,
            now,
            ReplySink::Slot(tx),
            drive.as_ref(),
            waiter,
        )? {
            wait.delegated_at_start();
        }
        Ok(wait)
    }

    /// Starts the call (see [`RdmaClientTransport::start_call`]); true if
    /// `waiter` took the connection's wake-ups as it started.
    fn start(
        &self,
        call: AttemptRef<'_>,
        deadline: Option<std::time::Instant>,
        now: std::time::Instant,
        tx: ReplySink,
        drive: Option<&Arc<TaskDrive>>,
        waiter: Option<(usize, &std::task::Waker)>,
    ) -> Result<bool, TransportError> {
        if let Some(e) = self.shared.closed_error() {
            return Err(e);
        }
        let (call, xid, len) = engine_call(call);
        let cmd = Cmd::Call {
            call,
            xid,
            tx,
            span: call_span(xid),
            deadline,
        };
        let (queued, delegated) = match drive {
            Some(d) => d.try_call(cmd, now, waiter),
            None => (Some(cmd), false),
        };
        if let Some(cmd) = queued {
            self.shared.push(cmd)?;
        }
        self.shared.count_sent(len);
        Ok(delegated)
    }
}

impl ClientTransport for RdmaClientTransport {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        self.start_call(call.as_ref(), None)
    }

    /// The driver ends the call at `deadline` (no timer per call).
    fn send_call_until(
        &self,
        call: OutgoingCall,
        deadline: std::time::Instant,
    ) -> Result<(ReplyReceiver, bool), TransportError> {
        let rx = self.start_call(call.as_ref(), Some(deadline))?;
        Ok((rx, true))
    }

    fn as_rdma(&self) -> Option<&RdmaClientTransport> {
        Some(self)
    }

    fn cancel(&self, xid: u32) {
        let _ = self.shared.send(Cmd::Cancel(xid));
    }

    fn set_backchannel(&self, dispatcher: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        self.shared.send(Cmd::SetBackchannel(dispatcher))
    }

    fn close(&self) {
        let _ = self.shared.send(Cmd::Close);
    }

    fn closed_reason(&self) -> Option<TransportError> {
        self.shared.closed()
    }

    fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    fn name(&self) -> &'static str {
        "rdma"
    }
}

impl Drop for RdmaClientTransport {
    fn drop(&mut self) {
        let _ = self.shared.push(Cmd::Close);
    }
}

pub(crate) fn clock_xid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SALT: AtomicU32 = AtomicU32::new(0);
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let salt = SALT.fetch_add(0x7f4a_7c15, Ordering::Relaxed);
    (d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16) ^ std::process::id().rotate_left(8))
        .wrapping_add(salt)
        .wrapping_mul(0x9e37_79b1)
}

/// Connects an RPC [`Client`] over RDMA to `addr`; also returns the
/// transport (for [`RdmaClientTransport::status`]).
pub async fn connect_client(
    addr: SocketAddr,
    client: ClientConfig,
    rdma: RdmaClientConfig,
) -> io::Result<(Client, Arc<RdmaClientTransport>)> {
    let t = RdmaClientTransport::connect(addr, rdma).await?;
    Ok((Client::new(t.clone(), client), t))
}
