//! A connection's driver: its [`Core`] in one of two shells, a tokio task
//! ([`TaskShell`]) or a thread of its own ([`ThreadShell`], blocking mode).
//! The one place that makes them ([`build`]) and starts them ([`spawn`]).

use std::sync::Arc;

use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use tokio::sync::mpsc;

use super::core::{Core, Publish};
pub(crate) use super::handle::{Cmd, Shared};
pub(crate) use super::task::Reconnect;
use super::task::{self, TaskShell};
use super::thread::ThreadShell;
use super::wake::ThreadWake;
use super::Connected;
use crate::metrics::Metrics;
use crate::transport::{CallDispatcher, ClientIdentity};

/// A connection's core in its shell, not started yet (made once per
/// connection and taken apart at once: the size difference costs nothing).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Driver {
    /// Driven by a tokio task.
    Task(TaskShell),
    /// Driven by a thread of its own.
    Thread(ThreadShell),
}

/// Makes the driver of a new connection and its shared state; `wake`
/// makes it a thread shell (which never reconnects).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    connected: Connected,
    conn: Connection,
    config: EngineConfig,
    metrics: Arc<Metrics>,
    client: bool,
    dispatcher: Option<Arc<dyn CallDispatcher>>,
    identity: ClientIdentity,
    reconnect: Option<Reconnect>,
    wake: Option<Arc<ThreadWake>>,
) -> (Arc<Shared>, Driver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let peer = connected.info.peer.clone();
    let shared = Arc::new(Shared::new(tx, metrics, peer, client, wake.clone()));
    let resend = wake.is_none() && reconnect.is_some();
    let core = Core::new(
        connected,
        conn,
        config,
        shared.clone(),
        dispatcher,
        identity,
        resend,
        match wake {
            Some(_) => Publish::BeforeSleep,
            // Published when read (`Shared::status`).
            None => Publish::OnDemand,
        },
    );
    let d = match wake {
        Some(w) => Driver::Thread(ThreadShell::new(core, rx, w)),
        None => Driver::Task(TaskShell::new(core, rx, reconnect)),
    };
    (shared, d)
}

/// Starts a driver made by [`build`]: a tokio task, or a thread of tokio's
/// blocking pool for a thread shell (so that handlers that wait can still
/// be spawned on the runtime).
pub(crate) fn spawn(
    (shared, d): (Arc<Shared>, Driver),
) -> (Arc<Shared>, tokio::task::JoinHandle<()>) {
    let span = shared.span.clone();
    let h = match d {
        Driver::Thread(t) => tokio::task::spawn_blocking(move || {
            let _e = span.enter();
            t.run();
        }),
        Driver::Task(t) => task::spawn(t, span),
    };
    (shared, h)
}
