//! Blocking mode: a connection driven by the thread that uses it.
//!
//! The default shape (one tokio task per connection, callers in other
//! tasks) costs two task hand-offs per call: the caller queues a command
//! and parks, the driver wakes, sends, sleeps in the runtime's poller, and
//! wakes the caller with the reply. For a caller that waits for each reply
//! anyway (one call in flight, like a synchronous libtirpc client), that is
//! pure overhead. Blocking mode removes it:
//!
//! * [`RdmaBlockingClient`]: the calling thread runs the connection's
//!   driver itself: it starts the call in the engine, and until the reply
//!   is there it steps the provider and the engine and sleeps in `poll(2)`
//!   on the provider's socket. No runtime, no channel, no other thread.
//!   Same engine, same wire, same RPC client semantics (XIDs, timeouts,
//!   retransmission, blame-split errors) as [`crate::Client`].
//! * Server: with [`RdmaServerConfig::blocking`](super::RdmaServerConfig::blocking)
//!   each connection is driven by a thread of its own (tokio's blocking
//!   pool) that sleeps in `poll(2)` on the socket and on a wake-up socket
//!   pair. Handlers run inline on that thread as far as they go without
//!   waiting ([`crate::Server`] polls them once); one that has to wait is
//!   spawned on the runtime, and its reply wakes the thread. One thread
//!   per connection: for a few busy connections, not for thousands.
//!
//! Both drive the connection's [`Core`](super::core::Core) in the thread
//! shell ([`super::thread`]); only the waiting differs from the task
//! shell. The client's call path is [`crate::Client`]'s: the same
//! [`Attempts`] (encoding, retransmissions, timeouts, the outcome of each
//! transmission, reply decoding); this module only transmits and waits.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcrdma_proto::engine::{Config as EngineConfig, Connection};

use super::driver::{self, Cmd, Driver, Shared};
use super::thread::ThreadShell;
use super::wake::ThreadWake;
use super::{Connected, RdmaClientConfig, RdmaStatus};
use crate::client::{
    clock_xid, Attempts, CallOptions, ClientConfig, Reply, RpcError, Transmission,
};
use crate::message::Message;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::transport::AttemptRef;
use crate::transport::{ClientIdentity, TransportError};

/// A blocking RPC-over-RDMA client: one connection, one call at a time,
/// driven by the calling thread (see "Blocking mode" in the
/// [`rdma`](super) module docs).
///
/// ```
/// use rpcrdma::rdma::{RdmaBlockingClient, RdmaClientConfig, RdmaServer, RdmaServerConfig};
/// use rpcrdma::{testprog, ClientConfig, Server};
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
/// let server = Server::default();
/// testprog::register(&server);
/// let rdma = rt.block_on(RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default()))?;
///
/// let mut client = RdmaBlockingClient::connect(
///     rdma.local_addr(),
///     ClientConfig::default(),
///     RdmaClientConfig::default(),
/// )?;
/// testprog::blocking::null(&mut client)?;
/// let data = testprog::blocking::read(&mut client, 100_000, 7)?; // a Write chunk
/// assert_eq!(&data[..], &testprog::pattern(7, 100_000)[..]);
/// assert_eq!(client.status().engine.write_chunks, 1);
/// client.close();
/// rt.block_on(rdma.shutdown());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// There is no reconnection: after a connection loss every call fails
/// with the loss ([`RpcError::Transport`]); make a new client. Backchannel
/// calls from the server are not served (the engine does not post
/// backchannel receives, as for any client that did not enable them).
pub struct RdmaBlockingClient {
    shell: Option<ThreadShell>,
    shared: Arc<Shared>,
    config: ClientConfig,
    next_xid: u32,
    stats: Arc<crate::stats::ProcStats>,
}

impl std::fmt::Debug for RdmaBlockingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaBlockingClient")
            .field("peer", &self.shared.peer)
            .finish()
    }
}

/// Longest a closing client waits for the provider to flush its close.
const CLOSE_FLUSH: Duration = Duration::from_millis(50);

impl RdmaBlockingClient {
    /// Connects to `addr` over `rdma.provider` (blocking, bounded by
    /// `rdma.connect_timeout`). `rdma.reconnect` is ignored (see the type's
    /// docs).
    pub fn connect(
        addr: SocketAddr,
        client: ClientConfig,
        mut rdma: RdmaClientConfig,
    ) -> io::Result<RdmaBlockingClient> {
        rdma.engine = super::versions::for_peer(rdma.engine, &addr.to_string());
        let connected = rdma
            .provider
            .connect(addr, &rdma.engine, rdma.connect_timeout)?;
        Self::from_connected(connected, rdma.engine, client, rdma.metrics)
    }

    /// Drives an existing connection (e.g. one end of an in-memory provider
    /// pair). As for [`super::RdmaClientTransport::from_connected`], a
    /// default `engine.first_xid` is replaced by a clock-derived one.
    pub fn from_connected(
        connected: Connected,
        mut engine: EngineConfig,
        client: ClientConfig,
        metrics: Option<Arc<Metrics>>,
    ) -> io::Result<RdmaBlockingClient> {
        if engine.first_xid == EngineConfig::client().first_xid {
            engine.first_xid = super::transport::clock_xid();
        }
        let metrics = metrics.unwrap_or_default();
        Metrics::inc(&metrics.connections);
        let wake = ThreadWake::new()?;
        let conn = Connection::new(engine.clone());
        let identity = ClientIdentity(Bytes::from(connected.info.peer.clone()));
        let (shared, d) = driver::build(
            connected,
            conn,
            engine,
            metrics,
            true,
            None,
            identity,
            None,
            Some(wake),
        );
        let Driver::Thread(mut shell) = d else {
            unreachable!("a wake-up makes a thread shell");
        };
        // Let the engine see the connection (its Established event).
        shell.pass();
        shell.core().publish_now();
        shell.core_mut().publish_on_demand();
        let next_xid = client.first_xid.unwrap_or_else(clock_xid);
        let stats = client.client_stats();
        Ok(RdmaBlockingClient {
            shell: Some(shell),
            shared,
            config: client,
            next_xid,
            stats,
        })
    }

    /// The connection's state: negotiated sizes, credits, engine counters.
    pub fn status(&self) -> RdmaStatus {
        // The core publishes only when asked: nobody else reads it.
        if let Some(d) = &self.shell {
            d.core().publish_now();
        }
        self.shared.lock().status.clone()
    }

    /// The client's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
    }

    /// The per-procedure statistics of this client's calls.
    pub fn stats(&self) -> &Arc<crate::stats::ProcStats> {
        &self.stats
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// The client settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Why the connection is over, once it is.
    pub fn closed_reason(&self) -> Option<TransportError> {
        self.shared.closed()
    }

    /// Calls `prog`/`vers`/`proc` with `args` and waits for the reply (see
    /// [`crate::Client::call`]).
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        ddp_results: &[u32],
    ) -> Result<Reply, RpcError> {
        self.call_with(
            prog,
            vers,
            proc,
            args,
            &CallOptions::with_ddp_results(ddp_results),
        )
    }

    /// [`RdmaBlockingClient::call`] with per-call options (timeout,
    /// retransmissions as configured, credentials, reply size).
    pub fn call_with(
        &mut self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let span = tracing::debug_span!("rpc.call", xid, prog, vers, proc, transport = "rdma");
        let _e = span.enter();
        let stats = self.stats.entry(crate::stats::ProcKey {
            prog,
            vers,
            proc,
            transport: "rdma",
        });
        let mut call = Attempts::new(
            xid,
            (prog, vers, proc),
            args,
            opts,
            &self.config,
            (&self.shared.metrics, stats),
        )?;
        let timeout = call.timeout();
        let reply = loop {
            let t = match transmit(&mut self.shell, &self.shared, call.next_ref(), timeout) {
                Ok(t) => t,
                Err(e) => break Err(e),
            };
            match call.settle(t) {
                Ok(Some(m)) => break Ok(m),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        call.finish(reply)
    }

    /// Closes the connection (waits briefly for the close to be flushed).
    pub fn close(mut self) {
        self.disconnect();
    }

    /// Closes the connection now (waits briefly for the close to be
    /// flushed); later calls fail with [`TransportError::Closed`].
    pub fn disconnect(&mut self) {
        let Some(mut d) = self.shell.take() else {
            return;
        };
        if !d.core().is_closed() {
            d.core_mut().command_now(Cmd::Close);
            let end = Instant::now() + CLOSE_FLUSH;
            while !d.core().is_closed() && Instant::now() < end {
                if !d.pass() {
                    d.wait(Some(end));
                }
            }
        }
        d.finish_begin();
        let end = Instant::now() + CLOSE_FLUSH;
        while !d.core_mut().flush_close() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The final state, for `status` after the close.
        d.core().publish_now();
    }
}

/// One transmission of a call on the blocking client's connection: starts
/// it in the core and drives the connection until its outcome or
/// `timeout` (then the call is forgotten). The core keeps the outcome for
/// us (`ReplySink::Driver`).
fn transmit(
    shell: &mut Option<ThreadShell>,
    shared: &Shared,
    call: AttemptRef<'_>,
    timeout: Duration,
) -> Result<Transmission, RpcError> {
    if shared.is_closed.load(Ordering::Acquire) {
        if let Some(e) = shared.closed() {
            return Err(RpcError::Transport(e));
        }
    }
    let Some(d) = shell.as_mut() else {
        return Err(RpcError::Transport(TransportError::Closed));
    };
    let xid = call.xid;
    let len = d
        .core_mut()
        .call_now(call, super::handle::ReplySink::Driver);
    shared.count_sent(len);
    let deadline = d.core().now() + timeout;
    let mut ended = false;
    // Posting the call sent it (a lone small Send goes to the socket at
    // once under blocking reads): when that left nothing for a round, the
    // first thing to do is to wait for the reply.
    let mut wait_first = d.settled();
    loop {
        if let Some(got) = d.core_mut().take_reply(xid) {
            return Ok(match got {
                Ok(m) => Transmission::Reply(m),
                Err(e) => Transmission::Failed(e),
            });
        }
        if ended {
            // The connection ended without an outcome for the call.
            return Ok(Transmission::Dropped(shared.closed()));
        }
        if std::mem::take(&mut wait_first) {
            d.wait(Some(deadline));
        }
        let busy = d.pass();
        if d.core().is_closed() {
            // Fails the call (and any later one) with the loss.
            d.finish_begin();
            ended = true;
            continue;
        }
        if busy {
            continue;
        }
        if d.core().now() >= deadline {
            d.core_mut().command_now(Cmd::Cancel(xid));
            return Ok(Transmission::TimedOut);
        }
        d.wait(Some(deadline));
    }
}

impl Drop for RdmaBlockingClient {
    fn drop(&mut self) {
        self.disconnect();
    }
}
