//! ONC RPC over TCP with RFC 5531 §11 record marking.
//!
//! Each connection has a reader task (record decoding with
//! [`RecordLimits`], XID matching on the client, dispatch on the server) and
//! a record writer (record marking, fragments of at most
//! [`TcpConfig::max_fragment`] octets, DDP pieces inline with their XDR
//! pad): a record of one fragment is written by the task that sends it when
//! nothing is queued, anything else by the connection's writer task
//! (`tcp_write`). A client connection also has a timer task that gives up
//! each call at its deadline ([`ClientTransport::send_call_until`]: no
//! timer per call). A framing violation or an I/O error closes the
//! connection and fails every outstanding call with the same
//! [`TransportError`].
//!
//! There is no backchannel over TCP in this project:
//! [`ClientTransport::set_backchannel`] and
//! [`ServerConnection::backchannel`] return
//! [`TransportError::Unsupported`], and calls received on a client
//! connection are dropped and counted.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{oneshot, watch, Notify};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::message::Message;
use crate::metrics::Metrics;
use crate::record::{RecordDecoder, RecordError, RecordLimits};
use crate::slot::{ReplyWait, SlotSender};
use crate::tcp_write::RecordWriter;
use crate::transport::{
    CallCount, CallDispatcher, CallGuard, ClientIdentity, ClientTransport, IncomingCall,
    OutgoingCall, ReplyReceiver, ReplyRoom, ServerConnection, TransportError,
};

/// How a server names the client of a TCP connection for the duplicate-reply
/// cache.
pub type IdentifyFn = Arc<dyn Fn(SocketAddr) -> ClientIdentity + Send + Sync>;

/// Settings of the TCP transport.
#[derive(Clone)]
pub struct TcpConfig {
    /// Limits on received records.
    pub record_limits: RecordLimits,
    /// Largest fragment sent (records larger than this are sent in several
    /// fragments). Default 1 MiB.
    pub max_fragment: u32,
    /// Server: most calls of one connection being executed at once; the
    /// connection stops reading while this many are outstanding. Default 128.
    pub max_in_flight: usize,
    /// Server: how long a graceful shutdown waits for calls in flight.
    /// Default 5 s.
    pub shutdown_grace: Duration,
    /// Server: most connections served at once; a connection accepted
    /// beyond this is closed at once. Default 4096.
    pub max_connections: usize,
    /// Set `TCP_NODELAY`. Default true.
    pub nodelay: bool,
    /// Server: the client identity of a connection. Default: the peer's IP
    /// address without the port.
    pub identify: IdentifyFn,
    /// Client: counters to share between connections (e.g. across
    /// reconnections); default a fresh set per connection. A server uses
    /// its own.
    pub metrics: Option<Arc<Metrics>>,
    /// Server: blocking mode — each connection on a thread of its own that
    /// sleeps in `recv(2)` instead of a task of the runtime (module
    /// `tcp_blocking_server`; the client side is
    /// [`crate::TcpBlockingClient`]). Lower latency and CPU per call for a
    /// few busy connections; a thread per connection, bounded by
    /// `blocking_max_threads` and `blocking_idle_timeout`. Default false.
    pub blocking: bool,
    /// Server, blocking mode: most connections (threads) at once; one
    /// accepted beyond it is closed at once. Default 256.
    pub blocking_max_threads: usize,
    /// Server, blocking mode: a connection that completes no record (or
    /// takes none of its replies) for this long is closed, so that an
    /// idle or trickling peer does not hold a thread. Default 60 s.
    pub blocking_idle_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            record_limits: RecordLimits::default(),
            max_fragment: 1 << 20,
            max_in_flight: 128,
            shutdown_grace: Duration::from_secs(5),
            max_connections: 4096,
            nodelay: true,
            identify: Arc::new(|a: SocketAddr| ClientIdentity(Bytes::from(a.ip().to_string()))),
            metrics: None,
            blocking: false,
            blocking_max_threads: 256,
            blocking_idle_timeout: Duration::from_secs(60),
        }
    }
}

impl std::fmt::Debug for TcpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpConfig")
            .field("record_limits", &self.record_limits)
            .field("max_fragment", &self.max_fragment)
            .field("max_in_flight", &self.max_in_flight)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("max_connections", &self.max_connections)
            .field("nodelay", &self.nodelay)
            .field("blocking", &self.blocking)
            .field("blocking_max_threads", &self.blocking_max_threads)
            .field("blocking_idle_timeout", &self.blocking_idle_timeout)
            .finish()
    }
}

/// Octets of room a record read asks for when it needs more.
const READ_CHUNK: usize = 64 << 10;

/// Below this much room left in the read buffer, a read first makes
/// [`READ_CHUNK`] octets of room (reclaiming the buffer when nothing else
/// holds it).
const READ_ROOM_MIN: usize = 32 << 10;

/// Reads the next record. `Ok(None)` at a clean end of stream.
async fn read_record(
    rd: &mut OwnedReadHalf,
    dec: &mut RecordDecoder,
    buf: &mut BytesMut,
    metrics: &Metrics,
) -> Result<Option<Bytes>, TransportError> {
    loop {
        if let Some(r) = dec.decode(buf).map_err(TransportError::Framing)? {
            return Ok(Some(r));
        }
        // Room for the next read. Made only when little is left: a record
        // handed out without a copy (`RecordDecoder::decode` splits it off)
        // shares the buffer, so making room means a new buffer; asking for
        // a full READ_CHUNK after every small record allocated (and later
        // freed) 64 KiB per record, and pinned them while records lived.
        if buf.capacity() - buf.len() < READ_ROOM_MIN {
            buf.reserve(READ_CHUNK);
        }
        let n = rd
            .read_buf(buf)
            .await
            .map_err(|e| TransportError::Lost(e.to_string()))?;
        if n == 0 {
            dec.finish(buf).map_err(TransportError::Framing)?;
            return Ok(None);
        }
        Metrics::add(&metrics.bytes_received, n as u64);
    }
}

/// `(xid, msg_type)` of a record, if it has 8 octets.
pub(crate) fn peek(rec: &[u8]) -> Option<(u32, u32)> {
    let xid = u32::from_be_bytes(rec.get(0..4)?.try_into().ok()?);
    let mt = u32::from_be_bytes(rec.get(4..8)?.try_into().ok()?);
    Some((xid, mt))
}

// ---------------------------------------------------------------- client

/// Hashes the XIDs of the client's own calls: keys the client chose (a peer
/// only looks them up), so no keyed SipHash per call. One multiplication
/// (Fibonacci hashing): sequential XIDs spread over the table.
#[derive(Default)]
struct XidHasher(u64);

impl Hasher for XidHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Where an outstanding call's reply goes.
enum ReplyTx {
    /// A caller of [`ClientTransport::send_call`].
    Channel(oneshot::Sender<Result<Message, TransportError>>),
    /// The async client's caller, waiting on its slot
    /// ([`TcpClientTransport::start_call_waiting`]).
    Slot(SlotSender),
}

impl ReplyTx {
    fn send(self, r: Result<Message, TransportError>) {
        match self {
            ReplyTx::Channel(tx) => {
                let _ = tx.send(r);
            }
            ReplyTx::Slot(s) => s.send(r),
        }
    }
}

/// An outstanding call: where its reply goes, and when the connection
/// gives it up (see [`ClientTransport::send_call_until`]).
struct Waiter {
    tx: ReplyTx,
    deadline: Option<Instant>,
}

/// Outstanding calls by XID.
type Pending = HashMap<u32, Waiter, BuildHasherDefault<XidHasher>>;

struct ClientState {
    pending: Pending,
    closed: Option<TransportError>,
    /// When the connection's timer task wakes next (see [`call_timer`]):
    /// at or before the earliest deadline of a call in `pending`, `None`
    /// while it waits for `ClientShared::rearm`.
    timer_at: Option<Instant>,
}

struct ClientShared {
    state: Mutex<ClientState>,
    writer: Arc<RecordWriter>,
    metrics: Arc<Metrics>,
    max_record: usize,
    peer: SocketAddr,
    /// Wakes the timer task for a deadline earlier than `timer_at` (or
    /// the connection's end).
    rearm: Notify,
}

impl ClientShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection unusable and fails every outstanding call.
    fn fail_all(&self, err: TransportError) {
        let pending = {
            let mut st = self.lock();
            if st.closed.is_none() {
                st.closed = Some(err.clone());
            }
            self.writer.close();
            std::mem::take(&mut st.pending)
        };
        // The timer task ends.
        self.rearm.notify_one();
        if !matches!(err, TransportError::Closed) {
            Metrics::inc(&self.metrics.transport_errors);
            tracing::warn!(peer = %self.peer, error = %err, "rpc/tcp client connection closed");
        }
        for (_, w) in pending {
            w.tx.send(Err(err.clone()));
        }
    }

    /// Registers the call `xid` (before it is written: the reply may come
    /// back at once), to be given up at `deadline`.
    fn register(
        &self,
        xid: u32,
        deadline: Option<Instant>,
        tx: ReplyTx,
    ) -> Result<(), TransportError> {
        let mut st = self.lock();
        if let Some(e) = &st.closed {
            return Err(e.clone());
        }
        match st.pending.entry(xid) {
            Entry::Occupied(_) => return Err(TransportError::XidInUse(xid)),
            Entry::Vacant(v) => {
                v.insert(Waiter { tx, deadline });
            }
        }
        // The timer wakes at or before every deadline: told only when this
        // one is earlier than its next wake-up (with one timeout for every
        // call, about once per timeout period, not per call).
        if let Some(d) = deadline {
            if st.timer_at.is_none_or(|t| d < t) {
                st.timer_at = Some(d);
                drop(st);
                self.rearm.notify_one();
            }
        }
        Ok(())
    }

    /// Gives up the calls whose deadline is `now` or earlier (their reply
    /// senders are dropped; a late reply is counted as unmatched); returns
    /// the earliest deadline left, which becomes the timer's next wake-up.
    fn expire(&self, now: Instant) -> Option<Instant> {
        let mut st = self.lock();
        let mut next: Option<Instant> = None;
        st.pending.retain(|_, w| match w.deadline {
            Some(d) if d <= now => false,
            Some(d) => {
                next = Some(next.map_or(d, |n| n.min(d)));
                true
            }
            None => true,
        });
        st.timer_at = next;
        next
    }
}

/// The connection's call timer: ends each call at its deadline (see
/// [`ClientTransport::send_call_until`]), so that a caller needs no timer
/// of its own per call. One task per connection; it sleeps until
/// `timer_at` and then scans the outstanding calls once (with one timeout
/// for every call, once per timeout period), and ends with the
/// connection. It sleeps on [`crate::alarm`], not on tokio's timer: a
/// timer in the runtime's wheel costs every park a clock read and a scan.
async fn call_timer(s: Arc<ClientShared>) {
    loop {
        let at = {
            let st = s.lock();
            if st.closed.is_some() {
                return;
            }
            st.timer_at
        };
        let notified = s.rearm.notified();
        match at {
            Some(t) => {
                tokio::select! {
                    _ = crate::alarm::sleep_until(t) => {
                        s.expire(Instant::now());
                    }
                    _ = notified => {}
                }
            }
            None => notified.await,
        }
    }
}

/// The client side of one ONC RPC over TCP connection.
pub struct TcpClientTransport {
    shared: Arc<ClientShared>,
}

impl TcpClientTransport {
    /// Connects to `addr`.
    pub async fn connect(addr: impl ToSocketAddrs, config: TcpConfig) -> io::Result<Arc<Self>> {
        let stream = TcpStream::connect(addr).await?;
        Self::from_stream(stream, config)
    }

    /// Runs the client side over an established stream.
    pub fn from_stream(stream: TcpStream, config: TcpConfig) -> io::Result<Arc<Self>> {
        stream.set_nodelay(config.nodelay)?;
        let peer = stream.peer_addr()?;
        let (rd, wr) = stream.into_split();
        let metrics = config.metrics.clone().unwrap_or_default();
        Metrics::inc(&metrics.connections);
        let (writer, writer_task) = RecordWriter::new(wr, config.max_fragment, metrics.clone());
        let shared = Arc::new(ClientShared {
            state: Mutex::new(ClientState {
                pending: Pending::default(),
                closed: None,
                timer_at: None,
            }),
            writer,
            metrics: metrics.clone(),
            max_record: config.record_limits.max_record_size,
            peer,
            rearm: Notify::new(),
        });
        tokio::spawn(call_timer(shared.clone()));
        let s2 = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = writer_task.await {
                s2.fail_all(TransportError::Lost(format!("write: {e}")));
            }
        });
        let s3 = shared.clone();
        let limits = config.record_limits;
        tokio::spawn(async move { client_reader(rd, limits, s3).await });
        Ok(Arc::new(TcpClientTransport { shared }))
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.shared.peer
    }
}

async fn client_reader(mut rd: OwnedReadHalf, limits: RecordLimits, shared: Arc<ClientShared>) {
    let mut dec = RecordDecoder::new(limits);
    let mut buf = BytesMut::new();
    let err = loop {
        match read_record(&mut rd, &mut dec, &mut buf, &shared.metrics).await {
            Ok(Some(rec)) => match peek(&rec) {
                Some((xid, 1)) => {
                    let waiter = shared.lock().pending.remove(&xid);
                    match waiter {
                        Some(w) => {
                            Metrics::inc(&shared.metrics.replies_received);
                            w.tx.send(Ok(Message::inline(rec)));
                        }
                        None => {
                            Metrics::inc(&shared.metrics.replies_unmatched);
                            tracing::debug!(xid, "reply for no outstanding call dropped");
                        }
                    }
                }
                Some((xid, 0)) => {
                    Metrics::inc(&shared.metrics.backchannel_unsupported);
                    tracing::debug!(
                        xid,
                        "call on a TCP client connection dropped (no backchannel)"
                    );
                }
                _ => {
                    Metrics::inc(&shared.metrics.garbage_messages);
                    tracing::debug!(len = rec.len(), "undecodable record dropped");
                }
            },
            Ok(None) => {
                let closing = !shared.writer.is_open();
                break if closing {
                    TransportError::Closed
                } else {
                    TransportError::Lost("peer closed the connection".into())
                };
            }
            Err(e) => break e,
        }
    };
    shared.fail_all(err);
}

impl TcpClientTransport {
    /// [`ClientTransport::send_call`], the call given up at `deadline`.
    fn send(
        &self,
        call: OutgoingCall,
        deadline: Option<Instant>,
        tx: ReplyTx,
    ) -> Result<(), TransportError> {
        let len = call.message.xdr_len();
        if len > self.shared.max_record {
            return Err(TransportError::TooLarge {
                len,
                max: self.shared.max_record,
            });
        }
        self.shared.register(call.xid, deadline, tx)?;
        if let Err(e) = self.shared.writer.send(call.message, CallGuard::none()) {
            let mut st = self.shared.lock();
            st.pending.remove(&call.xid);
            return Err(st.closed.clone().unwrap_or(e));
        }
        Metrics::inc(&self.shared.metrics.calls_sent);
        Ok(())
    }

    /// [`ClientTransport::send_call_until`], the outcome waited for in a
    /// slot ([`ReplyWait`]: no `oneshot` per call; the reader task
    /// delivers into it).
    pub(crate) fn start_call_waiting(
        &self,
        call: OutgoingCall,
        deadline: Instant,
    ) -> Result<ReplyWait, TransportError> {
        let (tx, slot) = crate::slot::slot();
        self.send(call, Some(deadline), ReplyTx::Slot(tx))?;
        Ok(ReplyWait::alone(slot))
    }
}

impl ClientTransport for TcpClientTransport {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        let (tx, rx) = oneshot::channel();
        self.send(call, None, ReplyTx::Channel(tx))?;
        Ok(rx)
    }

    /// The connection's timer task ends the call at `deadline` (no timer
    /// per call).
    fn send_call_until(
        &self,
        call: OutgoingCall,
        deadline: Instant,
    ) -> Result<(ReplyReceiver, bool), TransportError> {
        let (tx, rx) = oneshot::channel();
        self.send(call, Some(deadline), ReplyTx::Channel(tx))?;
        Ok((rx, true))
    }

    fn as_tcp(&self) -> Option<&TcpClientTransport> {
        Some(self)
    }

    fn cancel(&self, xid: u32) {
        self.shared.lock().pending.remove(&xid);
    }

    fn set_backchannel(&self, _dispatcher: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        Err(TransportError::Unsupported(
            "backchannel over ONC RPC over TCP",
        ))
    }

    fn close(&self) {
        // The writer writes what is queued and shuts down the write half;
        // the reader then sees the server close and fails what is left with
        // `Closed`.
        self.shared.writer.close();
    }

    fn closed_reason(&self) -> Option<TransportError> {
        let st = self.shared.lock();
        match &st.closed {
            Some(e) => Some(e.clone()),
            None if !self.shared.writer.is_open() => Some(TransportError::Closed),
            None => None,
        }
    }

    fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    fn name(&self) -> &'static str {
        "tcp"
    }
}

impl Drop for TcpClientTransport {
    fn drop(&mut self) {
        self.close();
    }
}

// ---------------------------------------------------------------- server

struct TcpServerConn {
    writer: Arc<RecordWriter>,
    peer: SocketAddr,
    metrics: Arc<Metrics>,
}

impl ServerConnection for TcpServerConn {
    fn send_reply(
        &self,
        _xid: u32,
        reply: Message,
        guard: CallGuard,
    ) -> Result<(), TransportError> {
        self.writer.send(reply, guard)?;
        Metrics::inc(&self.metrics.replies_sent);
        Ok(())
    }

    fn backchannel(&self) -> Result<Arc<dyn ClientTransport>, TransportError> {
        Err(TransportError::Unsupported(
            "backchannel over ONC RPC over TCP",
        ))
    }

    fn peer(&self) -> String {
        self.peer.to_string()
    }

    fn name(&self) -> &'static str {
        "tcp"
    }
}

/// A listening ONC RPC over TCP server transport. Dropping it without
/// [`TcpServer::shutdown`] stops accepting but leaves connections to end on
/// their own.
pub struct TcpServer {
    local: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept: Option<tokio::task::JoinHandle<()>>,
    metrics: Arc<Metrics>,
}

impl TcpServer {
    /// Binds `addr` and starts accepting connections; received calls go to
    /// `dispatcher`.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        config: TcpConfig,
        dispatcher: Arc<dyn CallDispatcher>,
        metrics: Arc<Metrics>,
    ) -> io::Result<TcpServer> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (stx, srx) = watch::channel(false);
        let m2 = metrics.clone();
        let accept = if config.blocking {
            tokio::spawn(crate::tcp_blocking_server::accept_loop(
                listener, config, dispatcher, m2, srx,
            ))
        } else {
            tokio::spawn(accept_loop(listener, config, dispatcher, m2, srx))
        };
        Ok(TcpServer {
            local,
            shutdown: stx,
            accept: Some(accept),
            metrics,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The server transport's counters (shared with the server it feeds).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Graceful shutdown: stop accepting, stop reading new calls, let calls
    /// in flight finish and their replies be written (up to
    /// [`TcpConfig::shutdown_grace`]), then close every connection.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(h) = self.accept.take() {
            let _ = h.await;
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    config: TcpConfig,
    dispatcher: Arc<dyn CallDispatcher>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    // Each connection's stop, told when the listener shuts down (dead
    // entries pruned whenever the list has doubled).
    let mut stops: Vec<Weak<ConnStop>> = Vec::new();
    let mut prune_at = 64;
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) if conns.len() >= config.max_connections => {
                    Metrics::inc(&metrics.connections_refused);
                    tracing::warn!(%peer, max = config.max_connections, "too many connections, closing");
                    drop(stream);
                }
                Ok((stream, peer)) => {
                    Metrics::inc(&metrics.connections);
                    let stop = Arc::new(ConnStop::default());
                    stops.push(Arc::downgrade(&stop));
                    if stops.len() >= prune_at {
                        stops.retain(|w| w.strong_count() > 0);
                        prune_at = (2 * stops.len()).max(64);
                    }
                    conns.spawn(
                        serve_conn(
                            stream,
                            peer,
                            config.clone(),
                            dispatcher.clone(),
                            metrics.clone(),
                            stop,
                        )
                        .instrument(tracing::debug_span!("rpc.tcp.conn", %peer)),
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    for s in stops.iter().filter_map(Weak::upgrade) {
        s.stop();
    }
    let grace = config.shutdown_grace + Duration::from_secs(1);
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        conns.abort_all();
    }
}

/// The graceful stop of one server connection, told by its listener's
/// shutdown. The connection's reader waits for it beside every read: an
/// atomic load and, when the read has to wait, one uncontended lock to
/// keep the waker (a `watch` channel's `changed` future cost several times
/// that per call).
#[derive(Default)]
struct ConnStop {
    stopped: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl ConnStop {
    fn stop(&self) {
        self.stopped.store(true, AtomicOrdering::Release);
        let w = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = w {
            w.wake();
        }
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(AtomicOrdering::Acquire)
    }

    /// Ready once stopped (and again every time it is polled after). One
    /// waiter at a time (the connection's reader): the future remembers
    /// the waker it left, and takes the lock only to leave another (a
    /// lock per poll, i.e. per call, before).
    fn wait(&self) -> impl Future<Output = ()> + Unpin + '_ {
        let mut left: Option<Waker> = None;
        std::future::poll_fn(move |cx| {
            if self.is_stopped() {
                return Poll::Ready(());
            }
            if !left.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                let w = cx.waker().clone();
                *self.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(w.clone());
                left = Some(w);
                // Stopped while the waker was being stored: `stop` may
                // have found none.
                if self.is_stopped() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
    }
}

/// The calls of one server connection being executed: at most `max`
/// (the connection stops reading while that many are), each counted from
/// its dispatch until its guard is dropped (its reply written, or the call
/// dropped): the call's `CallGuard` holds the count itself
/// ([`CallCount`]), no allocation per call. Only the connection's reader
/// takes permits, so a check and an increment cannot overshoot; a permit
/// given back at the limit wakes the reader, and the last one wakes a
/// drain once one waits. (A semaphore permit took a lock to give back,
/// per call; a boxed permit a `malloc` and a `free`.)
struct InFlight {
    n: AtomicUsize,
    max: usize,
    /// A drain waits (or did): the last permit given back wakes it.
    draining: AtomicBool,
    room: Notify,
}

/// One call of an [`InFlight`] count, until it becomes the call's guard
/// ([`InFlightPermit::into_guard`]) or is dropped.
struct InFlightPermit(Option<Arc<InFlight>>);

impl InFlightPermit {
    /// The call's guard, holding this permit.
    fn into_guard(mut self) -> CallGuard {
        match self.0.take() {
            Some(f) => CallGuard::counted(f),
            None => CallGuard::none(),
        }
    }
}

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f.release();
        }
    }
}

impl CallCount for InFlight {
    fn release(&self) {
        // SeqCst with `drained`: either this sees `draining`, or the drain
        // sees the count this left.
        let was = self.n.fetch_sub(1, AtomicOrdering::SeqCst);
        if was == self.max || (was == 1 && self.draining.load(AtomicOrdering::SeqCst)) {
            self.room.notify_one();
        }
    }
}

impl InFlight {
    fn new(max: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            n: AtomicUsize::new(0),
            max: max.max(1),
            draining: AtomicBool::new(false),
            room: Notify::new(),
        })
    }

    /// A permit if fewer than `max` calls are in flight (the reader only).
    fn try_acquire(self: &Arc<Self>) -> Option<InFlightPermit> {
        if self.n.load(AtomicOrdering::Acquire) >= self.max {
            return None;
        }
        self.n.fetch_add(1, AtomicOrdering::AcqRel);
        Some(InFlightPermit(Some(self.clone())))
    }

    /// Waits for a permit (the reader only).
    async fn acquire(self: &Arc<Self>) -> InFlightPermit {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            // Registered before the check: a permit given back after it
            // wakes this wait.
            notified.as_mut().enable();
            if let Some(p) = self.try_acquire() {
                return p;
            }
            notified.await;
        }
    }

    /// Waits until no call is in flight.
    async fn drained(&self) {
        self.draining.store(true, AtomicOrdering::SeqCst);
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.n.load(AtomicOrdering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

async fn serve_conn(
    stream: TcpStream,
    peer: SocketAddr,
    config: TcpConfig,
    dispatcher: Arc<dyn CallDispatcher>,
    metrics: Arc<Metrics>,
    stop_flag: Arc<ConnStop>,
) {
    let _ = stream.set_nodelay(config.nodelay);
    let client = (config.identify)(peer);
    let (mut rd, wr) = stream.into_split();
    let (w, writer_task) = RecordWriter::new(wr, config.max_fragment, metrics.clone());
    let mut writer = tokio::spawn(writer_task);
    let conn = Arc::new(TcpServerConn {
        writer: w,
        peer,
        metrics: metrics.clone(),
    });
    let in_flight = InFlight::new(config.max_in_flight.clamp(1, 1 << 16));
    let mut dec = RecordDecoder::new(config.record_limits);
    let mut buf = BytesMut::new();
    // The listener's shutdown ends the loop. Reading comes first; a peer
    // that keeps the socket readable cannot starve shutdown: the flag is
    // looked at after every record.
    let mut stop = stop_flag.wait();
    loop {
        let rec = tokio::select! {
            biased;
            r = read_record(&mut rd, &mut dec, &mut buf, &metrics) => r,
            _ = &mut stop => break,
        };
        if stop_flag.is_stopped() {
            break;
        }
        let rec = match rec {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => {
                Metrics::inc(&metrics.transport_errors);
                tracing::warn!(%peer, error = %e, "closing rpc/tcp connection");
                break;
            }
        };
        match peek(&rec) {
            Some((_, 0)) => {
                let permit = match in_flight.try_acquire() {
                    Some(p) => p,
                    // None free: wait for a call to end (or shutdown).
                    None => tokio::select! {
                        biased;
                        p = in_flight.acquire() => p,
                        _ = &mut stop => break,
                    },
                };
                dispatcher.dispatch(IncomingCall {
                    message: Message::inline(rec),
                    client: client.clone(),
                    conn: conn.clone(),
                    guard: permit.into_guard(),
                    room: ReplyRoom::UNBOUNDED,
                });
            }
            other => drop_non_call(&metrics, other, rec.len()),
        }
    }
    drop(rd);
    // Drain: wait until every call in flight released its permit.
    let _ = tokio::time::timeout(config.shutdown_grace, in_flight.drained()).await;
    conn.writer.close();
    match tokio::time::timeout(config.shutdown_grace, &mut writer).await {
        Ok(Ok(Err(e))) => tracing::debug!(%peer, error = %e, "rpc/tcp writer ended"),
        Err(_) => {
            // A peer that does not read its replies: give up on it.
            writer.abort();
            tracing::debug!(%peer, "rpc/tcp writer did not finish in time, aborted");
        }
        _ => {}
    }
}

/// The record-marking error type, re-exported for matching on
/// [`TransportError::Framing`].
pub type FramingError = RecordError;

/// Counts and logs a record a TCP server connection does not dispatch: a
/// reply (`peek` gave message type 1: no backchannel over TCP) or a record
/// that is not an RPC message at all.
pub(crate) fn drop_non_call(metrics: &Metrics, peeked: Option<(u32, u32)>, len: usize) {
    match peeked {
        Some((xid, 1)) => {
            Metrics::inc(&metrics.backchannel_unsupported);
            tracing::debug!(
                xid,
                "reply on a TCP server connection dropped (no backchannel)"
            );
        }
        _ => {
            Metrics::inc(&metrics.garbage_messages);
            tracing::debug!(len, "undecodable record dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `waiter` (waiting on `st`) is still waiting 20 ms on, and wakes once
    /// `st` is stopped.
    async fn stop_wakes(st: &ConnStop, waiter: tokio::task::JoinHandle<()>) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        st.stop();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }

    /// A connection's stop: a waiting reader is woken, a stop told before
    /// the wait is seen at once, and the future stays ready.
    #[tokio::test]
    async fn a_connection_stop_wakes_its_reader() {
        let st = Arc::new(ConnStop::default());
        let waiter = {
            let st = st.clone();
            tokio::spawn(async move {
                let mut w = st.wait();
                (&mut w).await;
                (&mut w).await;
            })
        };
        stop_wakes(&st, waiter).await;
        assert!(st.is_stopped());
        let early = ConnStop::default();
        early.stop();
        early.wait().await;
        // Polled again and again with the same waker (the lock-free path),
        // then waited on: still woken by the stop.
        let st = Arc::new(ConnStop::default());
        let waiter = {
            let st = st.clone();
            tokio::spawn(async move {
                let mut w = st.wait();
                for _ in 0..5 {
                    tokio::select! {
                        biased;
                        _ = &mut w => panic!("ready before the stop"),
                        _ = tokio::task::yield_now() => {}
                    }
                }
                (&mut w).await;
            })
        };
        stop_wakes(&st, waiter).await;
    }

    /// The in-flight count: never more than `max` permits; a waiting
    /// acquire gets one as soon as one is given back; the drain ends
    /// exactly when the last permit is gone.
    #[tokio::test]
    async fn in_flight_permits_are_bounded_and_wake_their_waiter() {
        let f = InFlight::new(3);
        let mut held: Vec<InFlightPermit> = (0..3).map(|_| f.try_acquire().unwrap()).collect();
        assert!(f.try_acquire().is_none());
        // A waiter at the limit is woken by a permit given back.
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.acquire().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        held.pop();
        let p = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        held.push(p);
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 3);
        // The drain waits for every permit, and no longer.
        let drain = {
            let f = f.clone();
            tokio::spawn(async move { f.drained().await })
        };
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(!drain.is_finished());
            held.pop();
        }
        tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .expect("drained")
            .unwrap();
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 0);
        assert!(f.try_acquire().is_some());
    }

    /// A permit made a call's guard stays counted until the guard is
    /// dropped, exactly once; a drain waiting on guards is woken by the
    /// last one, and a reader waiting at the limit by the first.
    #[tokio::test]
    async fn call_guards_hold_their_in_flight_count() {
        let f = InFlight::new(2);
        let g1 = f.try_acquire().unwrap().into_guard();
        let g2 = f.try_acquire().unwrap().into_guard();
        assert!(g1.is_held() && g2.is_held());
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 2);
        assert!(f.try_acquire().is_none());
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.acquire().await.into_guard() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(g1);
        let g3 = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 2);
        let drain = {
            let f = f.clone();
            tokio::spawn(async move { f.drained().await })
        };
        drop(g2);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!drain.is_finished());
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 1);
        drop(g3);
        tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .expect("drained")
            .unwrap();
        assert_eq!(f.n.load(AtomicOrdering::Acquire), 0);
    }
}

#[cfg(test)]
#[path = "tcp_wait_tests.rs"]
mod wait_tests;
