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
//! The driver steps are the ones of the task-driven mode (`pass`,
//! `command`, `step`, `event`); only the waiting differs.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcrdma_proto::engine::{Config as EngineConfig, Connection};
use rustix::event::{PollFd, PollFlags, Timespec};

use super::driver::{self, Cmd, Driver, ReplySink};
use super::{connect_iwarp, Connected, RdmaClientConfig, RdmaStatus};
use crate::client::{
    clock_xid, refused_or_transport, AttemptRef, Attempts, CallOptions, ClientConfig, Reply,
    RpcError,
};
use crate::message::Message;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::transport::{ClientIdentity, TransportError};

thread_local! {
    /// The [`ThreadWake`] of the driver this thread is running, if any (its
    /// address): a wake-up from the driving thread itself needs no
    /// system call.
    static DRIVING: Cell<usize> = const { Cell::new(0) };
}

/// How other threads wake a blocking driver: a flag plus a socket pair the
/// driver polls along with the provider's socket. The driver's own
/// wake-ups (e.g. a reply queued by a handler that ran inline) only set
/// the flag.
pub(crate) struct ThreadWake {
    fired: AtomicBool,
    tx: UnixStream,
    rx: UnixStream,
    waker: std::sync::OnceLock<Waker>,
}

struct WakeRef(std::sync::Weak<ThreadWake>);

impl Wake for WakeRef {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(w) = self.0.upgrade() {
            w.wake();
        }
    }
}

/// Clears [`DRIVING`] when the driving ends.
pub(crate) struct DrivingGuard(usize);

impl Drop for DrivingGuard {
    fn drop(&mut self) {
        DRIVING.with(|d| d.set(self.0));
    }
}

impl ThreadWake {
    pub(crate) fn new() -> io::Result<Arc<ThreadWake>> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        let w = Arc::new(ThreadWake {
            fired: AtomicBool::new(false),
            tx,
            rx,
            waker: std::sync::OnceLock::new(),
        });
        let _ = w
            .waker
            .set(Waker::from(Arc::new(WakeRef(Arc::downgrade(&w)))));
        Ok(w)
    }

    fn id(&self) -> usize {
        self as *const ThreadWake as usize
    }

    /// Marks this thread as the one driving (until the guard drops).
    pub(crate) fn driving(&self) -> DrivingGuard {
        DrivingGuard(DRIVING.with(|d| d.replace(self.id())))
    }

    /// A waker for the provider (wakes this driver).
    pub(crate) fn waker(&self) -> &Waker {
        self.waker.get().unwrap_or(Waker::noop())
    }

    /// Wakes the driver: from its own thread a flag, from any other thread
    /// also one octet on the socket pair (unless one is already pending).
    pub(crate) fn wake(&self) {
        if self.fired.swap(true, Ordering::AcqRel) {
            return;
        }
        if DRIVING.with(|d| d.get()) != self.id() {
            // Full (WouldBlock): a wake-up is pending anyway.
            let _ = (&self.tx).write(&[1]);
        }
    }

    /// True if a wake-up came since the last take (the flag stays).
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Takes the flag: true if a wake-up came since the last take.
    pub(crate) fn take_fired(&self) -> bool {
        self.fired.swap(false, Ordering::AcqRel)
    }

    /// After the socket pair was readable: take the flag first, then the
    /// octets (a wake-up between the two sets the flag again, or leaves an
    /// octet for the next poll).
    pub(crate) fn drain(&self) {
        self.fired.store(false, Ordering::Release);
        let mut b = [0u8; 64];
        while let Ok(n) = (&self.rx).read(&mut b) {
            if n < b.len() {
                break;
            }
        }
    }

    /// `poll(2)` on the provider's socket (readable, and writable if
    /// `.1`) and on the wake-up socket, for at most `timeout`. Returns
    /// (socket ready, woken). An error (other than EINTR) counts as both,
    /// so the caller makes a pass (and the provider sees the error).
    pub(crate) fn poll_with(
        &self,
        sock: Option<(BorrowedFd<'_>, bool)>,
        timeout: Option<Duration>,
    ) -> (bool, bool) {
        let ts = timeout.map(|d| Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: d.subsec_nanos().into(),
        });
        let me = self.rx.as_fd();
        let mut fds = Vec::with_capacity(2);
        fds.push(PollFd::from_borrowed_fd(me, PollFlags::IN));
        if let Some((fd, write)) = sock {
            let mut f = PollFlags::IN;
            if write {
                f |= PollFlags::OUT;
            }
            fds.push(PollFd::from_borrowed_fd(fd, f));
        }
        loop {
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return (true, true),
            }
        }
        let woken = !fds[0].revents().is_empty();
        let ready = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        (ready, woken)
    }
}

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
    driver: Option<Driver>,
    shared: Arc<driver::Shared>,
    wake: Arc<ThreadWake>,
    config: ClientConfig,
    next_xid: u32,
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
    /// Connects over iWARP to `addr` (blocking, bounded by
    /// `rdma.connect_timeout`). `rdma.reconnect` is ignored (see the type's
    /// docs).
    pub fn connect(
        addr: SocketAddr,
        client: ClientConfig,
        rdma: RdmaClientConfig,
    ) -> io::Result<RdmaBlockingClient> {
        let connected = connect_iwarp(addr, &rdma.iwarp, &rdma.engine, rdma.connect_timeout)?;
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
        let (shared, mut d) = driver::build(
            connected,
            conn,
            engine,
            metrics,
            true,
            None,
            identity,
            None,
            Some(wake.clone()),
        );
        // Let the engine see the connection (its Established event).
        {
            let _g = wake.driving();
            d.pass_blocking();
            d.publish_now();
            d.publish_on_demand();
        }
        let next_xid = client.first_xid.unwrap_or_else(clock_xid);
        Ok(RdmaBlockingClient {
            driver: Some(d),
            shared,
            wake,
            config: client,
            next_xid,
        })
    }

    /// The connection's state: negotiated sizes, credits, engine counters.
    pub fn status(&self) -> RdmaStatus {
        // The driver publishes only when asked: nobody else reads it.
        if let Some(d) = &self.driver {
            d.publish_now();
        }
        self.shared.lock().status.clone()
    }

    /// The client's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
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
        let mut call = Attempts::new(
            xid,
            (prog, vers, proc),
            args,
            opts,
            &self.config,
            &self.shared.metrics,
        )?;
        let timeout = call.timeout();
        let reply = loop {
            let next = call.next_ref();
            match exchange(&mut self.driver, &self.shared, &self.wake, next, timeout)? {
                Some(m) => break m,
                None => call.timed_out()?,
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
        let Some(mut d) = self.driver.take() else {
            return;
        };
        let _g = self.wake.driving();
        if !d.is_closed() {
            d.command_now(Cmd::Close);
            let end = Instant::now() + CLOSE_FLUSH;
            while !d.is_closed() && Instant::now() < end {
                if !d.pass_blocking() {
                    d.wait_blocking(Some(end));
                }
            }
        }
        d.finish_begin();
        let end = Instant::now() + CLOSE_FLUSH;
        while !d.flush_close() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The final state, for `status` after the close.
        d.publish_now();
    }
}

/// Sends `call` on the blocking client's connection and drives it until
/// the reply (`Some`), a failure, or `timeout` (`None`, the call
/// forgotten). The driver keeps the outcome for us ([`ReplySink::Driver`]).
fn exchange(
    driver: &mut Option<Driver>,
    shared: &driver::Shared,
    wake: &ThreadWake,
    call: AttemptRef<'_>,
    timeout: Duration,
) -> Result<Option<Message>, RpcError> {
    if shared.is_closed.load(Ordering::Acquire) {
        if let Some(e) = shared.closed() {
            return Err(RpcError::Transport(e));
        }
    }
    let Some(d) = driver.as_mut() else {
        return Err(RpcError::Transport(TransportError::Closed));
    };
    let _g = wake.driving();
    let xid = call.xid;
    let len = d.call_now(call, ReplySink::Driver);
    shared.count_sent(len);
    let deadline = d.now() + timeout;
    let mut ended = false;
    loop {
        if let Some(got) = d.take_reply(xid) {
            return match got {
                Ok(m) => Ok(Some(m)),
                Err(e) => Err(refused_or_transport(e)),
            };
        }
        if ended {
            // The connection ended without an outcome for the call.
            return Err(RpcError::Transport(
                shared
                    .closed()
                    .unwrap_or_else(|| TransportError::Lost("call dropped".into())),
            ));
        }
        let busy = d.pass_blocking();
        if d.is_closed() {
            // Fails the call (and any later one) with the loss.
            d.finish_begin();
            ended = true;
            continue;
        }
        if busy {
            continue;
        }
        if d.now() >= deadline {
            d.command_now(Cmd::Cancel(xid));
            return Ok(None);
        }
        d.wait_blocking(Some(deadline));
    }
}

impl Drop for RdmaBlockingClient {
    fn drop(&mut self) {
        self.disconnect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_from_another_thread_ends_a_poll_and_own_wakes_cost_no_octet() {
        let w = ThreadWake::new().unwrap();
        {
            let _g = w.driving();
            w.wake();
            assert!(w.take_fired());
            // Nothing was written: a poll now times out.
            let (_, woken) = w.poll_with(None, Some(Duration::from_millis(10)));
            assert!(!woken);
        }
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w2.wake();
        });
        let t0 = Instant::now();
        let (_, woken) = w.poll_with(None, Some(Duration::from_secs(10)));
        assert!(woken);
        assert!(t0.elapsed() < Duration::from_secs(5));
        w.drain();
        t.join().unwrap();
        // Drained: the next poll times out again.
        let (_, woken) = w.poll_with(None, Some(Duration::from_millis(10)));
        assert!(!woken);
        // The provider waker reaches the same flag.
        w.waker().wake_by_ref();
        assert!(w.take_fired());
    }
}
