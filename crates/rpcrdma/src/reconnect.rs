//! A client transport that reconnects after a connection loss and sends the
//! outstanding calls again **with the same XIDs** on the new connection (the
//! server's duplicate-reply cache, keyed by client identity and never by
//! source port, then answers a call that was already executed from the
//! cache instead of executing it twice).
//!
//! It wraps any [`ClientTransport`] made by a [`Connector`]; each call gets a
//! small forwarding task that re-sends it when the connection it was sent on
//! is lost (`Lost` or `Framing`), reconnecting with exponential backoff.
//! Caller errors and a local close are not retried.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use crate::metrics::Metrics;
use crate::tcp::{TcpClientTransport, TcpConfig};
use crate::transport::{
    CallDispatcher, ClientTransport, OutgoingCall, ReplyReceiver, TransportError,
};

/// Makes a new connection.
pub type Connector = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = io::Result<Arc<dyn ClientTransport>>> + Send>>
        + Send
        + Sync,
>;

/// When and how often to reconnect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Wait before the second connection attempt of an outage (the first is
    /// immediate over TCP; the RDMA driver waits this long before it too,
    /// see `with_backoff`). Default 50 ms.
    pub initial_backoff: Duration,
    /// The wait doubles up to this. Default 2 s.
    pub max_backoff: Duration,
    /// Connection attempts per outage before the waiting calls fail.
    /// Default 8.
    pub max_attempts: u32,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        ReconnectPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            max_attempts: 8,
        }
    }
}

struct Shared {
    connector: Connector,
    policy: ReconnectPolicy,
    metrics: Arc<Metrics>,
    /// The current connection (None before the first and after a loss).
    current: tokio::sync::Mutex<Option<Arc<dyn ClientTransport>>>,
    /// Forwarding tasks by XID (for cancel).
    tasks: Mutex<HashMap<u32, AbortHandle>>,
    closed: Mutex<bool>,
    backchannel: Mutex<Option<Arc<dyn CallDispatcher>>>,
}

impl Shared {
    fn is_closed(&self) -> bool {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live connection, connecting (with backoff) when there is none.
    async fn transport(&self) -> Result<Arc<dyn ClientTransport>, TransportError> {
        let mut cur = self.current.lock().await;
        if self.is_closed() {
            return Err(TransportError::Closed);
        }
        if let Some(t) = cur.as_ref() {
            if t.closed_reason().is_none() {
                return Ok(t.clone());
            }
        }
        let had_one = cur.take().is_some();
        let stop = || self.is_closed();
        match with_backoff(&self.policy, false, stop, || (self.connector)()).await {
            Ok(t) => {
                if had_one {
                    tracing::info!("reconnected");
                }
                let bc = self
                    .backchannel
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                if let Some(d) = bc {
                    if let Err(e) = t.set_backchannel(d) {
                        tracing::debug!(error = %e, "backchannel not available");
                    }
                }
                *cur = Some(t.clone());
                Ok(t)
            }
            Err(Outage::Stopped) => Err(TransportError::Closed),
            Err(Outage::Failed { attempts, last }) => {
                Metrics::inc(&self.metrics.transport_errors);
                Err(TransportError::Lost(format!(
                    "reconnect failed after {attempts} attempts: {last}"
                )))
            }
        }
    }
}

/// How an outage ended without a new connection.
#[derive(Debug)]
pub(crate) enum Outage {
    /// The owner stopped trying (a local close).
    Stopped,
    /// Every attempt the policy allows failed.
    Failed {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: String,
    },
}

/// The one reconnection schedule of the runtime, for every transport:
/// `max_attempts` attempts, each after a wait that starts at
/// `initial_backoff` and doubles up to `max_backoff`; the first attempt
/// waits too when `wait_first` (the RDMA driver right after it lost its
/// connection: the peer that just dropped it gets `initial_backoff` to
/// recover, and a client that is closing meanwhile makes no connection),
/// else it goes at once ([`ReconnectingTransport`], which connects lazily
/// for the call that needs a connection). `stop` is asked before each
/// attempt (true: give up, [`Outage::Stopped`]). Used by
/// [`ReconnectingTransport`] (a new transport per connection, calls re-sent
/// by this module) and by the RDMA task shell (one engine across
/// connections, calls re-sent by the engine with their wire XIDs).
pub(crate) async fn with_backoff<T, F, Fut>(
    policy: &ReconnectPolicy,
    wait_first: bool,
    mut stop: impl FnMut() -> bool,
    mut connect: F,
) -> Result<T, Outage>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<T>>,
{
    let attempts = policy.max_attempts.max(1);
    let mut backoff = policy.initial_backoff;
    let mut last = String::new();
    for attempt in 0..attempts {
        if attempt > 0 || wait_first {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(policy.max_backoff);
        }
        if stop() {
            return Err(Outage::Stopped);
        }
        match connect().await {
            Ok(t) => return Ok(t),
            Err(e) => {
                tracing::debug!(attempt, error = %e, "connect failed");
                last = e.to_string();
            }
        }
    }
    Err(Outage::Failed { attempts, last })
}

fn retryable(e: &TransportError) -> bool {
    matches!(e, TransportError::Lost(_) | TransportError::Framing(_))
}

/// See the module documentation.
pub struct ReconnectingTransport {
    shared: Arc<Shared>,
}

impl ReconnectingTransport {
    /// A transport that connects with `connector` on first use and after
    /// each loss. `metrics` should be the counters the connector's
    /// transports share (see [`TcpConfig::metrics`]).
    pub fn new(connector: Connector, policy: ReconnectPolicy, metrics: Arc<Metrics>) -> Self {
        ReconnectingTransport {
            shared: Arc::new(Shared {
                connector,
                policy,
                metrics,
                current: tokio::sync::Mutex::new(None),
                tasks: Mutex::new(HashMap::new()),
                closed: Mutex::new(false),
                backchannel: Mutex::new(None),
            }),
        }
    }

    /// ONC RPC over TCP to `addr`, reconnecting; all connections share one
    /// set of counters.
    pub fn tcp(addr: std::net::SocketAddr, config: TcpConfig, policy: ReconnectPolicy) -> Self {
        let metrics = config.metrics.clone().unwrap_or_default();
        let config = TcpConfig {
            metrics: Some(metrics.clone()),
            ..config
        };
        let connector: Connector = Arc::new(move || {
            let config = config.clone();
            Box::pin(async move {
                let t: Arc<dyn ClientTransport> = TcpClientTransport::connect(addr, config).await?;
                Ok(t)
            })
        });
        ReconnectingTransport::new(connector, policy, metrics)
    }
}

impl ClientTransport for ReconnectingTransport {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        if self.shared.is_closed() {
            return Err(TransportError::Closed);
        }
        let (otx, orx) = oneshot::channel();
        let xid = call.xid;
        let shared = self.shared.clone();
        let mut tasks = self.shared.tasks.lock().unwrap_or_else(|p| p.into_inner());
        if tasks.contains_key(&xid) {
            return Err(TransportError::XidInUse(xid));
        }
        let task = tokio::spawn(async move {
            let mut sent = 0u32;
            let result = loop {
                let t = match shared.transport().await {
                    Ok(t) => t,
                    Err(e) => break Err(e),
                };
                if sent > 0 {
                    Metrics::inc(&shared.metrics.retransmits);
                    tracing::debug!(xid, "re-sending on a new connection");
                }
                sent += 1;
                let rx = match t.send_call(call.clone()) {
                    Ok(rx) => rx,
                    Err(e) if retryable(&e) => continue,
                    Err(e) => break Err(e),
                };
                match rx.await {
                    Ok(Ok(m)) => break Ok(m),
                    Ok(Err(e)) if retryable(&e) => continue,
                    Ok(Err(e)) => break Err(e),
                    Err(_) => continue,
                }
            };
            shared
                .tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&xid);
            let _ = otx.send(result);
        });
        tasks.insert(xid, task.abort_handle());
        Ok(orx)
    }

    fn cancel(&self, xid: u32) {
        let h = self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&xid);
        if let Some(h) = h {
            h.abort();
        }
        if let Ok(cur) = self.shared.current.try_lock() {
            if let Some(t) = cur.as_ref() {
                t.cancel(xid);
            }
        }
    }

    fn set_backchannel(&self, dispatcher: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        *self
            .shared
            .backchannel
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(dispatcher.clone());
        match self.shared.current.try_lock() {
            Ok(cur) => match cur.as_ref() {
                Some(t) => t.set_backchannel(dispatcher),
                None => Ok(()),
            },
            Err(_) => Ok(()),
        }
    }

    fn close(&self) {
        *self.shared.closed.lock().unwrap_or_else(|p| p.into_inner()) = true;
        if let Ok(cur) = self.shared.current.try_lock() {
            if let Some(t) = cur.as_ref() {
                t.close();
            }
        } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
            // A reconnect is under way: close what it produces.
            let shared = self.shared.clone();
            rt.spawn(async move {
                if let Some(t) = shared.current.lock().await.as_ref() {
                    t.close();
                }
            });
        }
    }

    fn closed_reason(&self) -> Option<TransportError> {
        self.shared.is_closed().then_some(TransportError::Closed)
    }

    fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    fn name(&self) -> &'static str {
        "reconnecting"
    }
}

impl Drop for ReconnectingTransport {
    fn drop(&mut self) {
        self.close();
        for (_, h) in self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
        {
            h.abort();
        }
    }
}
