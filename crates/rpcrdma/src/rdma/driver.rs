//! The per-connection driver task: one engine, one provider.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rpcrdma_proto::engine::ids::IdMap;
use rpcrdma_proto::engine::{
    CallError, CallFailure, CallHandle, CallId, Config as EngineConfig, Connection, Event,
    OutgoingCall as ECall, OutgoingReply,
};
use rpcrdma_proto::provider::{Completion, ConnectionEvent, Notify, Provider};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, oneshot};

use super::blocking::ThreadWake;
use super::convert;
use super::{BoxProvider, Connected, ProviderConnector, RdmaStatus};
use crate::client::AttemptRef;
use crate::message::Message;
use crate::metrics::Metrics;
use crate::reconnect::ReconnectPolicy;
use crate::transport::{
    CallDispatcher, CallGuard, ClientIdentity, ClientTransport, IncomingCall, OutgoingCall,
    ReplyReceiver, ServerConnection, TransportError,
};

/// A closure run on the concrete provider inside the driver.
pub(crate) type ProviderFn = Box<dyn FnOnce(&mut dyn Any) + Send>;

/// Commands from the runtime to a driver.
pub(crate) enum Cmd {
    Call {
        call: ECall,
        xid: u32,
        tx: ReplySink,
        span: tracing::Span,
    },
    Cancel(u32),
    Reply {
        xid: u32,
        reply: Message,
    },
    SetBackchannel(Arc<dyn CallDispatcher>),
    Close,
    WithProvider(ProviderFn),
}

/// Where the driver delivers a call's reply (or failure).
pub(crate) enum ReplySink {
    /// A caller on another task or thread waits on the receiver.
    Channel(oneshot::Sender<Result<Message, TransportError>>),
    /// The blocking client driving this driver on its own thread: the
    /// driver keeps the outcome until the client takes it
    /// ([`Driver::take_reply`]); no channel to allocate and synchronise.
    Driver,
}

/// State shared between a driver and the handles of its connection.
pub(crate) struct Shared {
    pub(crate) tx: mpsc::UnboundedSender<Cmd>,
    /// Set (after `state.closed`) when the connection is closed for good:
    /// the per-call check without the lock.
    pub(crate) is_closed: std::sync::atomic::AtomicBool,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) peer: String,
    pub(crate) state: Mutex<SharedState>,
    /// True for the forward requester (client) side.
    pub(crate) client: bool,
    /// Set when the driver runs on a thread of its own (blocking mode):
    /// how other threads wake it after queueing a command.
    pub(crate) wake: Option<Arc<super::blocking::ThreadWake>>,
    /// Set after each command is queued: a blocking driver's pass looks at
    /// the channel only when it is set (an empty `try_recv` costs as much
    /// as the rest of a small call's pass).
    pub(crate) queued: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
pub(crate) struct SharedState {
    pub(crate) closed: Option<TransportError>,
    pub(crate) status: RdmaStatus,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn closed(&self) -> Option<TransportError> {
        self.lock().closed.clone()
    }

    pub(crate) fn send(&self, cmd: Cmd) -> Result<(), TransportError> {
        if let Some(e) = self.closed_error() {
            return Err(e);
        }
        self.push(cmd)
    }

    /// Why commands are refused, once the connection is closed for good
    /// (one atomic load while it is open).
    fn closed_error(&self) -> Option<TransportError> {
        if self.is_closed.load(std::sync::atomic::Ordering::Acquire) {
            self.closed()
        } else {
            None
        }
    }

    /// Queues `cmd` for the driver (without the closed check) and wakes a
    /// blocking driver.
    pub(crate) fn push(&self, cmd: Cmd) -> Result<(), TransportError> {
        let r = self.tx.send(cmd).map_err(|_| TransportError::Closed);
        // After the send: a pass that clears the flag sees the command.
        self.queued
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(w) = &self.wake {
            w.wake();
        }
        r
    }

    /// Queues a call (forward at a client, backchannel at a server).
    pub(crate) fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        let (tx, rx) = oneshot::channel();
        let (cmd, len) = self.make_call(call.as_ref(), ReplySink::Channel(tx));
        self.send(cmd)?;
        self.count_sent(len);
        Ok(rx)
    }

    /// Counts a call of `len` XDR octets handed to the driver.
    pub(crate) fn count_sent(&self, len: usize) {
        Metrics::inc(&self.metrics.calls_sent);
        Metrics::add(&self.metrics.bytes_sent, len as u64);
    }

    /// The driver command for `call` (the message copied into engine
    /// pieces), its reply going to `tx`, and its length in XDR octets.
    pub(crate) fn make_call(&self, call: AttemptRef<'_>, tx: ReplySink) -> (Cmd, usize) {
        let (call, xid, len) = engine_call(call);
        let span = tracing::debug_span!("rpc.rdma.call", xid, wire_xid = tracing::field::Empty);
        let cmd = Cmd::Call {
            call,
            xid,
            tx,
            span,
        };
        (cmd, len)
    }
}

/// The replies handlers sent while their driver dispatched a call on this
/// thread (see [`Driver::dispatch`]): `conn` is the address of the
/// connection's [`Shared`], which only the handles of that connection match.
struct InlineReplies {
    conn: usize,
    replies: Vec<(u32, Message)>,
}

thread_local! {
    /// Set only while a driver's [`Driver::dispatch`] runs on this thread.
    static INLINE_REPLIES: RefCell<Option<InlineReplies>> = const { RefCell::new(None) };
}

/// Keeps a reply for the driver dispatching a call of `shared`'s connection
/// on this thread right now, if there is one; gives it back otherwise.
fn capture_inline(shared: &Arc<Shared>, xid: u32, reply: Message) -> Result<(), Message> {
    let conn = Arc::as_ptr(shared) as usize;
    let mut reply = Some(reply);
    let _ = INLINE_REPLIES.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if let Some(cap) = c.as_mut().filter(|cap| cap.conn == conn) {
                cap.replies.extend(reply.take().map(|r| (xid, r)));
            }
        }
    });
    reply.map_or(Ok(()), Err)
}

/// The engine's call for `call` (the message copied into engine pieces,
/// the header's buffer kept when it is handed over), its XID, and its
/// length in XDR octets.
#[inline]
fn engine_call(call: AttemptRef<'_>) -> (ECall, u32, usize) {
    let AttemptRef {
        xid,
        header,
        args,
        reply_max,
        ddp_results,
    } = call;
    let ddp_total: u64 = ddp_results.iter().map(|&l| u64::from(l)).sum();
    let reply_max = u32::try_from(u64::from(reply_max) + ddp_total).unwrap_or(u32::MAX);
    let len = header.len() + args.xdr_len();
    let message = match header {
        std::borrow::Cow::Borrowed([]) => convert::to_engine_after(Vec::new(), args),
        std::borrow::Cow::Borrowed(h) => {
            let mut v = Vec::with_capacity(h.len() + args.inline_len());
            v.extend_from_slice(h);
            convert::to_engine_after(v, args)
        }
        std::borrow::Cow::Owned(h) => convert::to_engine_after(h, args),
    };
    let ecall = ECall {
        message,
        reply_max,
        ddp_results: ddp_results.to_vec(),
    };
    (ecall, xid, len)
}

/// A handle that speaks for one connection: [`ServerConnection`] for calls
/// received on it, [`ClientTransport`] for calls the server makes on the
/// backchannel.
pub(crate) struct ConnHandle(pub(crate) Arc<Shared>);

impl ServerConnection for ConnHandle {
    /// A reply sent while the driver dispatches the call inline (the
    /// handler did not wait) goes straight back to the driver on this
    /// thread; any other goes through the command channel.
    fn send_reply(&self, xid: u32, reply: Message, guard: CallGuard) -> Result<(), TransportError> {
        Metrics::add(&self.0.metrics.bytes_sent, reply.xdr_len() as u64);
        let r = match self.0.closed_error() {
            Some(e) => Err(e),
            None => match capture_inline(&self.0, xid, reply) {
                Ok(()) => Ok(()),
                Err(reply) => self.0.push(Cmd::Reply { xid, reply }),
            },
        };
        if r.is_ok() {
            Metrics::inc(&self.0.metrics.replies_sent);
        }
        drop(guard);
        r
    }

    fn backchannel(&self) -> Result<Arc<dyn ClientTransport>, TransportError> {
        if self.0.client {
            return Err(TransportError::Unsupported(
                "calls from a backchannel handler to the server (use the forward channel)",
            ));
        }
        Ok(Arc::new(ConnHandle(self.0.clone())))
    }

    fn peer(&self) -> String {
        self.0.peer.clone()
    }

    fn name(&self) -> &'static str {
        "rdma"
    }
}

impl ClientTransport for ConnHandle {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        self.0.send_call(call)
    }
    fn cancel(&self, xid: u32) {
        let _ = self.0.send(Cmd::Cancel(xid));
    }
    fn set_backchannel(&self, _d: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        Err(TransportError::Unsupported(
            "a backchannel of the backchannel",
        ))
    }
    fn close(&self) {}
    fn closed_reason(&self) -> Option<TransportError> {
        self.0.closed()
    }
    fn metrics(&self) -> Arc<Metrics> {
        self.0.metrics.clone()
    }
    fn name(&self) -> &'static str {
        "rdma-backchannel"
    }
}

/// The driver's timer state (see [`Driver::run`]).
struct Clock {
    /// The instant the timer is set to, if it is in use.
    armed: Option<tokio::time::Instant>,
    /// The next fallback tick.
    fallback_at: tokio::time::Instant,
    /// The last fallback tick found work that no wake-up had announced; the
    /// next one (see [`FALLBACK_CONFIRM`]) decides whether it was lost.
    suspect: bool,
}

/// What a fallback tick found (see [`Driver::fallback_tick`]).
enum Tick {
    /// Nothing waits, or a wake-up announced what does.
    Quiet,
    /// Work waits that nothing announced yet: look again shortly.
    Suspect,
    /// Work still waits, announced by nothing: a lost wake-up.
    Lost,
}

/// The provider's socket, registered with tokio (never closed by us).
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

struct Pending {
    xid: u32,
    tx: ReplySink,
    span: tracing::Span,
}

/// The calls waiting for their replies, by engine id and by XID (the
/// runtime's, assigned by this end). The first one sits in a slot of its
/// own: with one call at a time (a blocking client, a synchronous caller)
/// no hash map is touched.
#[derive(Default)]
struct Outstanding {
    one: Option<(CallId, Pending)>,
    /// Every other call.
    by_id: IdMap<CallId, Pending>,
    /// The XIDs of the calls in `by_id`.
    by_xid: IdMap<u32, CallId>,
}

impl Outstanding {
    fn contains_xid(&self, xid: u32) -> bool {
        self.one.as_ref().is_some_and(|(_, p)| p.xid == xid) || self.by_xid.contains_key(&xid)
    }

    /// Adds a call (whose XID is not [`Outstanding::contains_xid`]).
    fn insert(&mut self, id: CallId, p: Pending) {
        if self.one.is_none() {
            self.one = Some((id, p));
        } else {
            self.by_xid.insert(p.xid, id);
            self.by_id.insert(id, p);
        }
    }

    fn get(&self, id: CallId) -> Option<&Pending> {
        match &self.one {
            Some((i, p)) if *i == id => Some(p),
            _ => self.by_id.get(&id),
        }
    }

    fn remove(&mut self, id: CallId) -> Option<Pending> {
        if matches!(&self.one, Some((i, _)) if *i == id) {
            return self.one.take().map(|(_, p)| p);
        }
        let p = self.by_id.remove(&id)?;
        self.by_xid.remove(&p.xid);
        Some(p)
    }

    fn remove_xid(&mut self, xid: u32) -> Option<Pending> {
        if matches!(&self.one, Some((_, p)) if p.xid == xid) {
            return self.one.take().map(|(_, p)| p);
        }
        let id = self.by_xid.remove(&xid)?;
        self.by_id.remove(&id)
    }

    fn is_empty(&self) -> bool {
        self.one.is_none() && self.by_id.is_empty()
    }

    /// Every call, in no particular order.
    fn into_all(self) -> impl Iterator<Item = Pending> {
        self.one
            .into_iter()
            .map(|(_, p)| p)
            .chain(self.by_id.into_values())
    }
}

/// Reconnection: how to make a new connection and how often to try.
pub(crate) struct Reconnect {
    pub(crate) connector: ProviderConnector,
    pub(crate) policy: ReconnectPolicy,
}

/// A safety net: with work in flight and nothing moving, the driver asks
/// the provider this often whether work waits that no wake-up announced
/// (see [`Driver::fallback_tick`]). A correct driver and provider never
/// leave any: the tick then costs one wake-up and finds nothing.
const FALLBACK_TICK: Duration = Duration::from_millis(20);

/// How soon a tick that found unannounced work looks again. The runtime
/// fires timers only after a turn of its I/O driver, so by then every
/// readiness event already queued for that work has been dispatched.
const FALLBACK_CONFIRM: Duration = Duration::from_millis(1);

/// Fallback rescues of every driver of this process (see
/// [`super::fallback_rescues_total`]).
pub(crate) static FALLBACK_RESCUES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Blocking mode: the longest sleep in a socket receive call (bounds how
/// long a command from another thread, e.g. a close, waits).
const RECV_TICK: Duration = Duration::from_millis(50);

/// Busy passes over the engine before the driver yields to the runtime.
const BUSY_SPINS: u32 = 16;

pub(crate) struct Driver {
    // The AsyncFd must go before the provider that owns the socket.
    afd: Option<AsyncFd<Fd>>,
    prov: BoxProvider,
    conn: Connection,
    config: EngineConfig,
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Cmd>,
    pending: Outstanding,
    /// Keyed by the peer's XIDs: SipHash (a peer chooses the keys). Calls
    /// answered while they are dispatched never enter it (see
    /// [`Driver::dispatch`]).
    incoming: HashMap<u32, CallHandle>,
    /// The buffer of [`InlineReplies`], kept between calls.
    inline_replies: Vec<(u32, Message)>,
    dispatcher: Option<Arc<dyn CallDispatcher>>,
    identity: ClientIdentity,
    reconnect: Option<Reconnect>,
    rx_done: bool,
    /// The time of the current pass (see `poll_work`).
    now: Instant,
    fallback_rescues: u64,
    closing: bool,
    comps: Vec<Completion>,
    deferred: Vec<Cmd>,
    /// Blocking mode: the provider sleeps in its socket's receive call
    /// (see `wait_blocking`).
    blocking_reads: bool,
    /// Blocking mode at a server: a backchannel call came from another
    /// thread, so the driver must stay wakeable (poll(2) from now on).
    cross_thread_calls: bool,
    /// Blocking mode: state changed since the last publication.
    stale: bool,
    /// Publish only when asked (see [`Driver::publish_on_demand`]).
    on_demand: bool,
    /// The handle every received call carries (one allocation per
    /// connection, not per call).
    conn_handle: Arc<dyn ServerConnection>,
    /// The outcome of the driving thread's own call ([`ReplySink::Driver`])
    /// with its XID, until [`Driver::take_reply`].
    reply: Option<(u32, Result<Message, TransportError>)>,
    /// The engine's `retransmits` already added to the runtime's.
    retransmits_seen: u64,
}

fn register_fd(p: &mut BoxProvider) -> Option<AsyncFd<Fd>> {
    let a = register_fd_inner(p);
    // With the fd watched, the provider reads only after readiness edges
    // (see `Driver::poll_work`).
    p.set_read_gate(a.is_some());
    a
}

fn register_fd_inner(p: &BoxProvider) -> Option<AsyncFd<Fd>> {
    let fd = p.raw_fd()?;
    // `with_interest` is the safe (deprecated) registration; the I/O-safety
    // invariant it cannot check holds here: the provider keeps the socket
    // open and unchanged for as long as the `AsyncFd` exists, because the
    // driver drops the `AsyncFd` (field order, and explicitly before a
    // provider is replaced) before the provider.
    #[allow(deprecated)]
    let r = AsyncFd::with_interest(Fd(fd), Interest::READABLE | Interest::WRITABLE);
    match r {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::debug!(error = %e, "provider fd not registrable; using its waker only");
            None
        }
    }
}

fn call_error(e: CallError) -> TransportError {
    match e {
        CallError::TooLarge { len, max } => TransportError::TooLarge { len, max },
        CallError::Closed(e) => TransportError::Lost(e.to_string()),
        other => TransportError::Lost(other.to_string()),
    }
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        connected: Connected,
        conn: Connection,
        config: EngineConfig,
        shared: Arc<Shared>,
        rx: mpsc::UnboundedReceiver<Cmd>,
        dispatcher: Option<Arc<dyn CallDispatcher>>,
        identity: ClientIdentity,
        reconnect: Option<Reconnect>,
    ) -> Driver {
        {
            let mut st = shared.lock();
            st.status.link = connected.info;
            st.status.connects = 1;
        }
        let mut prov = connected.provider;
        let mut conn = conn;
        if let Some(w) = &shared.wake {
            // Woken (from any thread) when the shared Read-sink budget
            // frees up for a call of this connection.
            conn.set_waker(w.waker());
        }
        let conn_handle: Arc<dyn ServerConnection> = Arc::new(ConnHandle(shared.clone()));
        let mut blocking_reads = false;
        let afd = if shared.wake.is_some() {
            // A blocking driver polls the fd itself (see `wait_blocking`)
            // and reads only after it was readable.
            prov.set_read_gate(prov.poll_fd().is_some());
            blocking_reads = prov.set_blocking_reads(true);
            None
        } else {
            register_fd(&mut prov)
        };
        Driver {
            afd,
            prov,
            conn,
            config,
            shared,
            rx,
            pending: Outstanding::default(),
            incoming: HashMap::new(),
            inline_replies: Vec::new(),
            dispatcher,
            identity,
            reconnect,
            rx_done: false,
            now: Instant::now(),
            fallback_rescues: 0,
            closing: false,
            comps: Vec::new(),
            deferred: Vec::new(),
            blocking_reads,
            cross_thread_calls: false,
            stale: false,
            on_demand: false,
            conn_handle,
            reply: None,
            retransmits_seen: 0,
        }
    }

    pub(crate) async fn run(mut self) {
        // One timer for the driver's life: the engine's next deadline or,
        // with work in flight, the fallback tick, whichever comes first. It
        // is reset only when that instant changes (a new `Sleep` per wait
        // cost a timer-wheel insert and removal on every call).
        let timer = tokio::time::sleep(FALLBACK_TICK);
        tokio::pin!(timer);
        let mut clock = Clock {
            armed: None,
            fallback_at: tokio::time::Instant::now() + FALLBACK_TICK,
            suspect: false,
        };
        loop {
            std::future::poll_fn(|cx| self.poll_work(cx, timer.as_mut(), &mut clock)).await;
            // The timer's instant belongs to the old connection: a new one
            // does not start with a tick that elapsed during the reconnect.
            clock.armed = None;
            clock.suspect = false;
            // The engine closed.
            if !self.closing && self.reconnect.is_some() && self.reconnect_loop().await {
                continue;
            }
            break;
        }
        self.finish().await;
    }

    /// Steps the connection until the engine closes (`Ready`) or nothing
    /// can move until a command, a readiness edge, a provider wake-up or
    /// the timer (`Pending`, with every one of them registered with `cx`).
    /// A hand-written poll (rather than a `select!` per pass) registers
    /// each source once and creates no futures per call.
    fn poll_work(
        &mut self,
        cx: &mut Context<'_>,
        mut timer: Pin<&mut tokio::time::Sleep>,
        clock: &mut Clock,
    ) -> Poll<()> {
        let mut spins = 0u32;
        // Anything moved during this poll (pushes the fallback tick back).
        let mut moved = false;
        // The task's waker, for the shared Read-sink budget (a pointer
        // comparison when unchanged).
        self.conn.set_waker(cx.waker());
        // Woken by the fallback tick (nothing moved for a while): before
        // anything consumes a wake source, see whether work waits that none
        // announced (a suspicion lasts only until the next poll).
        let suspect = std::mem::take(&mut clock.suspect);
        if clock.armed == Some(clock.fallback_at) && timer.is_elapsed() {
            clock.armed = None;
            match self.fallback_tick(cx, suspect) {
                Tick::Quiet => {}
                Tick::Suspect => {
                    // Every source is still registered from the last
                    // sleep; the next tick looks again.
                    clock.suspect = true;
                    clock.fallback_at = tokio::time::Instant::now() + FALLBACK_CONFIRM;
                    timer.as_mut().reset(clock.fallback_at);
                    clock.armed = Some(clock.fallback_at);
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    // Due at once (this thread stalled since the reset): a
                    // turn of the I/O driver after the look is not certain,
                    // so the next tick starts over.
                    clock.suspect = false;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Tick::Lost => {
                    self.fallback_rescues += 1;
                    FALLBACK_RESCUES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(
                        peer = %self.shared.peer,
                        rescues = self.fallback_rescues,
                        "rpc/rdma driver: work waited without a wake-up (a lost wake-up)"
                    );
                    self.publish();
                    // The pass below reads the socket even without an edge.
                    self.prov.note_readable();
                }
            }
        }
        loop {
            // One clock read per pass, for every engine input of the pass.
            self.now = Instant::now();
            let mut busy = false;
            // A readiness edge of the socket: cleared *before* the provider
            // reads, so an arrival after its drain is a new edge.
            if let Some(a) = self.afd.as_ref() {
                if let Poll::Ready(Ok(mut g)) = a.poll_read_ready(cx) {
                    g.clear_ready();
                    self.prov.note_readable();
                }
                if self.prov.write_blocked() {
                    if let Poll::Ready(Ok(mut g)) = a.poll_write_ready(cx) {
                        g.clear_ready();
                    }
                }
            }
            for cmd in std::mem::take(&mut self.deferred) {
                busy = true;
                self.command(cmd);
            }
            while !self.rx_done {
                match self.rx.poll_recv(cx) {
                    Poll::Ready(Some(c)) => self.command(c),
                    // Every handle is gone: nobody can use the connection.
                    Poll::Ready(None) => {
                        self.rx_done = true;
                        self.command(Cmd::Close);
                    }
                    Poll::Pending => break,
                }
                busy = true;
            }
            if busy {
                // Commands changed the engine (e.g. a reply went out).
                self.publish();
            }
            busy |= self.step();
            if self.conn.is_closed() {
                return Poll::Ready(());
            }
            moved |= busy;
            if busy {
                // Keep going while there is work, without a trip through
                // the scheduler; now and then let the runtime's other tasks
                // (e.g. callers woken by replies) run.
                spins += 1;
                if spins >= BUSY_SPINS {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                continue;
            }
            self.prov.arm(cx.waker(), Notify::Any);
            if self.step() {
                continue;
            }
            if self.conn.is_closed() {
                return Poll::Ready(());
            }
            // Before sleeping, register for the socket's next readiness
            // edge: the one consumed at the top of this pass took its waker
            // (and a pass that read without producing work never looked
            // again). Likewise for writability when output waits for room
            // (the provider may have become blocked during this pass).
            if let Some(a) = self.afd.as_ref() {
                if let Poll::Ready(Ok(mut g)) = a.poll_read_ready(cx) {
                    g.clear_ready();
                    self.prov.note_readable();
                    continue;
                }
                if self.prov.write_blocked() {
                    if let Poll::Ready(Ok(mut g)) = a.poll_write_ready(cx) {
                        g.clear_ready();
                        continue;
                    }
                }
            }
            // The timer: the engine's deadline, or the fallback tick while
            // work is in flight.
            // The fallback tick fires only after at least half a tick
            // without progress while work is in flight (moved back at most
            // once per half tick, so the timer is not reset on every call).
            let now = tokio::time::Instant::from_std(self.now);
            let fallback = self.conn.inflight_work_requests() > 0 || !self.pending.is_empty();
            if clock.fallback_at <= now || (moved && clock.fallback_at < now + FALLBACK_TICK / 2) {
                clock.fallback_at = now + FALLBACK_TICK;
            }
            let engine = self.conn.poll_timeout().map(tokio::time::Instant::from_std);
            let want = match (engine, fallback) {
                (Some(d), true) => Some(d.min(clock.fallback_at)),
                (Some(d), false) => Some(d),
                (None, true) => Some(clock.fallback_at),
                (None, false) => None,
            };
            let Some(want) = want else {
                clock.armed = None;
                return Poll::Pending;
            };
            if clock.armed != Some(want) {
                timer.as_mut().reset(want);
                clock.armed = Some(want);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The fallback tick fired: the next poll looks at it first
            // (see `fallback_tick`).
            if clock.armed == Some(clock.fallback_at) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // The engine's deadline: step again (the engine handles its
            // timeouts); count it as a busy pass so a deadline that does
            // not move cannot keep this loop from yielding.
            clock.armed = None;
            spins += 1;
            if spins >= BUSY_SPINS {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }

    /// The fallback tick fired (nothing moved for a while with work in
    /// flight), before anything consumed a wake source. A lost wake-up is
    /// work that waits although no source announced it: not a command, a
    /// readiness edge, an engine deadline, a returned Read-sink budget, nor
    /// the provider's waker (see [`RdmaProvider::unannounced_work`]). A
    /// tick that finds a source announced (its wake-up merely arrived in
    /// the same turn, e.g. after the runtime's thread was descheduled
    /// across the tick) finds nothing lost, however late it runs. Socket
    /// input the provider sees but no readiness announced may still have
    /// its event queued in the runtime's I/O driver: only the next tick
    /// (`suspect`), after a turn of that driver, calls it lost.
    ///
    /// [`RdmaProvider::unannounced_work`]: super::RdmaProvider::unannounced_work
    fn fallback_tick(&mut self, cx: &mut Context<'_>, suspect: bool) -> Tick {
        let announced = !self.deferred.is_empty()
            || !self.rx.is_empty()
            || self.afd.as_ref().is_some_and(|a| {
                a.poll_read_ready(cx).is_ready()
                    || (self.prov.write_blocked() && a.poll_write_ready(cx).is_ready())
            })
            || self
                .conn
                .poll_timeout()
                .is_some_and(|t| t <= Instant::now())
            || self.conn.waits_for_read_budget();
        match (announced || !self.prov.unannounced_work(), suspect) {
            (true, _) => Tick::Quiet,
            (false, false) => Tick::Suspect,
            (false, true) => Tick::Lost,
        }
    }

    /// One pass over the provider and the engine; true if anything moved.
    fn step(&mut self) -> bool {
        let now = self.now;
        let mut busy = false;
        while let Some(ev) = self.prov.poll_event() {
            busy = true;
            match ev {
                ConnectionEvent::Established(info) => {
                    self.conn.handle_established(now, &mut self.prov, &info);
                    tracing::debug!(peer = %self.shared.peer, negotiated = ?self.conn.negotiated(), "rpc/rdma connection established");
                }
                ConnectionEvent::Disconnected(r) => {
                    tracing::debug!(peer = %self.shared.peer, reason = ?r, "rpc/rdma disconnected");
                    self.conn.handle_disconnected(&mut self.prov, r);
                }
                ConnectionEvent::ConnectRequest { .. } => {}
            }
        }
        let mut comps = std::mem::take(&mut self.comps);
        self.prov.poll_completions(&mut comps);
        for c in comps.drain(..) {
            busy = true;
            self.conn.handle_completion(now, &mut self.prov, c);
        }
        self.comps = comps;
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now, &mut self.prov);
        }
        // Budget another connection gave back (its waker brought us here).
        if self.conn.waits_for_read_budget() {
            busy |= self.conn.handle_read_budget(now, &mut self.prov);
        }
        while let Some(e) = self.conn.poll_event() {
            busy = true;
            self.event(e);
        }
        self.count_retransmits();
        if busy {
            self.publish();
        }
        busy
    }

    /// Adds the calls the engine sent again since the last look to the
    /// runtime's `retransmits` (the engine's count carries across
    /// reconnects).
    fn count_retransmits(&mut self) {
        let sent_again = self.conn.metrics().retransmits;
        if sent_again > self.retransmits_seen {
            Metrics::add(
                &self.shared.metrics.retransmits,
                sent_again - self.retransmits_seen,
            );
            self.retransmits_seen = sent_again;
        }
    }

    /// Publishes the connection's state for [`RdmaStatus`] readers. A
    /// blocking driver only marks it stale here and publishes once before
    /// it sleeps: one lock and copy per call instead of one per pass. A
    /// blocking client's driver, whose only reader is the client on the
    /// same thread, publishes when asked ([`Driver::publish_on_demand`]).
    fn publish(&mut self) {
        if self.shared.wake.is_some() {
            self.stale = true;
            return;
        }
        self.publish_now();
    }

    /// Publishes now if a blocking driver's state is stale (unless it
    /// publishes on demand).
    pub(crate) fn publish_stale(&mut self) {
        if !self.on_demand && std::mem::take(&mut self.stale) {
            self.publish_now();
        }
    }

    /// From now on the state is published only by [`Driver::publish_now`]
    /// (for a blocking client: its status reader drives it).
    pub(crate) fn publish_on_demand(&mut self) {
        self.on_demand = true;
    }

    /// Publishes the state.
    pub(crate) fn publish_now(&self) {
        let mut st = self.shared.lock();
        st.status.negotiated = self.conn.negotiated();
        st.status.credits = self.conn.credits();
        st.status.grant = self.conn.grant();
        st.status.outstanding = self.conn.outstanding();
        st.status.queued = self.conn.queued();
        st.status.engine = *self.conn.metrics();
        st.status.last_error = self.conn.error().map(|e| e.to_string());
        st.status.fallback_rescues = self.fallback_rescues;
        st.status.resources = self.conn.resources();
        st.status.registered_regions = self.prov.registered_regions();
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Call {
                call,
                xid,
                tx,
                span,
            } => self.start_call(call, xid, tx, span),
            Cmd::Cancel(xid) => {
                self.pending.remove_xid(xid);
            }
            Cmd::Reply { xid, reply } => self.reply(xid, reply),
            Cmd::SetBackchannel(d) => {
                self.dispatcher = Some(d);
                let slots = self.config.backchannel_slots;
                self.conn.enable_backchannel(&mut self.prov, slots);
            }
            Cmd::Close => {
                self.closing = true;
                let p: &mut dyn Provider = &mut self.prov;
                self.conn.close(p);
            }
            Cmd::WithProvider(f) => f(self.prov.as_any_mut()),
        }
    }

    /// Sends the reply to the outstanding call `xid`.
    fn reply(&mut self, xid: u32, reply: Message) {
        let Some(handle) = self.incoming.remove(&xid) else {
            tracing::debug!(xid, "reply to no outstanding call dropped");
            return;
        };
        self.reply_to(handle, xid, reply);
    }

    /// Sends `reply` to the call of `handle`.
    fn reply_to(&mut self, handle: CallHandle, xid: u32, reply: Message) {
        let r = self.conn.send_reply(
            self.now,
            &mut self.prov,
            handle,
            OutgoingReply {
                message: convert::into_engine(reply),
            },
        );
        match r {
            Ok(form) => tracing::debug!(xid, ?form, "reply sent"),
            Err(e) => tracing::debug!(xid, error = %e, "reply not sent"),
        }
    }

    /// Dispatches the received call `xid` (engine handle `handle`). A reply
    /// its handler sends before `dispatch` returns (the common case: the
    /// handler did not wait) is caught on this thread and sent here at
    /// once, without the command channel and without the `incoming` map;
    /// otherwise the handle waits in `incoming` for the reply command, as
    /// before. An older handle of the same XID is replaced either way.
    fn dispatch(
        &mut self,
        d: &dyn CallDispatcher,
        xid: u32,
        handle: CallHandle,
        call: IncomingCall,
    ) {
        let capture = InlineReplies {
            conn: Arc::as_ptr(&self.shared) as usize,
            replies: std::mem::take(&mut self.inline_replies),
        };
        // Nested drivers on one thread (a blocking client's backchannel
        // inside a handler) each see only their own replies.
        let mut replies = INLINE_REPLIES
            .with(|c| {
                let outer = c.replace(Some(capture));
                d.dispatch(call);
                c.replace(outer)
            })
            .map(|c| c.replies)
            .unwrap_or_default();
        let mut handle = Some(handle);
        for (rxid, reply) in replies.drain(..) {
            match handle.take_if(|_| rxid == xid) {
                Some(h) => {
                    if !self.incoming.is_empty() {
                        self.incoming.remove(&xid);
                    }
                    self.reply_to(h, xid, reply);
                }
                None => self.reply(rxid, reply),
            }
        }
        self.inline_replies = replies;
        if let Some(h) = handle {
            self.incoming.insert(xid, h);
        }
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::CallReceived(ic) => {
                // Taken for the dispatch (no reference count per call) and
                // put back: nothing else uses it meanwhile.
                let Some(d) = self.dispatcher.take() else {
                    tracing::debug!(xid = ic.xid, "call without a dispatcher dropped");
                    return;
                };
                Metrics::inc(&self.shared.metrics.calls_received);
                Metrics::add(&self.shared.metrics.bytes_received, ic.message.len() as u64);
                tracing::debug!(
                    xid = ic.xid,
                    backchannel = ic.backchannel,
                    long = ic.long,
                    ddp = ic.ddp.len(),
                    write_chunks = ic.write_chunks.len(),
                    reply_chunk = ?ic.reply_chunk,
                    "rpc/rdma call received"
                );
                let message = convert::incoming(ic.message, &ic.ddp);
                let call = IncomingCall {
                    message,
                    client: self.identity.clone(),
                    conn: self.conn_handle.clone(),
                    guard: CallGuard::none(),
                };
                self.dispatch(&*d, ic.xid, ic.handle, call);
                self.dispatcher = Some(d);
            }
            Event::ReplyReceived(r) => {
                let Some(p) = self.pending.remove(r.id) else {
                    Metrics::inc(&self.shared.metrics.replies_unmatched);
                    return;
                };
                let bytes = r.message.len() + r.results.iter().map(|b| b.len()).sum::<usize>();
                Metrics::inc(&self.shared.metrics.replies_received);
                Metrics::add(&self.shared.metrics.bytes_received, bytes as u64);
                {
                    let _e = p.span.enter();
                    p.span.record("wire_xid", r.xid);
                    tracing::debug!(long = r.long, results = r.results.len(), "rpc/rdma reply");
                }
                let m = convert::reply(r.message, r.results, p.xid);
                // The caller may look at the status as soon as it has the
                // reply: publish first.
                self.publish();
                self.deliver(p.tx, p.xid, Ok(m));
            }
            Event::CallFailed {
                id,
                xid,
                error,
                retransmit,
            } => {
                if retransmit && self.reconnect.is_some() && !self.closing {
                    // Counted when it is sent again (`step`), not here: it
                    // may not have been sent at all yet (waiting for a
                    // credit), and may be interrupted again before.
                    if let Some(p) = self.pending.get(id) {
                        let _e = p.span.enter();
                        tracing::debug!(wire_xid = xid, error = %error, "call interrupted; will be re-sent on the next connection");
                    }
                    return;
                }
                let Some(p) = self.pending.remove(id) else {
                    return;
                };
                let err = match error {
                    CallFailure::Local(e) => call_error(e),
                    CallFailure::ConnectionLost(_) if self.closing => TransportError::Closed,
                    other => TransportError::Lost(other.to_string()),
                };
                let _e = p.span.enter();
                tracing::debug!(wire_xid = xid, error = %err, "rpc/rdma call failed");
                self.publish();
                self.deliver(p.tx, p.xid, Err(err));
            }
            Event::CreditsChanged { credits } => {
                tracing::trace!(credits, "credits changed");
            }
            Event::ConnectionLost(e) => {
                if !self.closing {
                    Metrics::inc(&self.shared.metrics.transport_errors);
                }
                tracing::debug!(peer = %self.shared.peer, error = %e, "rpc/rdma connection lost");
            }
        }
    }

    /// One pass of a blocking driver: commands, then provider and engine;
    /// true if anything moved.
    pub(crate) fn pass_blocking(&mut self) -> bool {
        self.now = Instant::now();
        // This pass looks at everything a wake-up so far could be about
        // (commands, provider); one during the pass sets the flag again.
        // Without this, a reply queued by an inline handler (or a post
        // that woke the provider's waker) cost an extra empty pass.
        if let Some(w) = &self.shared.wake {
            w.take_fired();
        }
        let mut busy = false;
        for cmd in std::mem::take(&mut self.deferred) {
            busy = true;
            self.command(cmd);
        }
        // Only when something was queued since the last look (the flag is
        // set after the send, so clearing it first misses nothing: a
        // command queued after this sets it again, and wakes the driver).
        let queued = self
            .shared
            .queued
            .swap(false, std::sync::atomic::Ordering::AcqRel);
        if queued {
            loop {
                match self.rx.try_recv() {
                    Ok(c) => self.command(c),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        if self.rx_done {
                            break;
                        }
                        self.rx_done = true;
                        self.command(Cmd::Close);
                    }
                }
                busy = true;
            }
        }
        if busy {
            self.publish();
        }
        busy | self.step()
    }

    /// Starts a call in the engine (at `self.now`).
    fn start_call(&mut self, call: ECall, xid: u32, tx: ReplySink, span: tracing::Span) {
        if self.pending.contains_xid(xid) {
            self.deliver(tx, xid, Err(TransportError::XidInUse(xid)));
            return;
        }
        self.cross_thread_calls |= !self.shared.client;
        match self.conn.start_call(self.now, &mut self.prov, call) {
            Ok(id) => self.pending.insert(id, Pending { xid, tx, span }),
            Err(e) => self.deliver(tx, xid, Err(call_error(e))),
        }
    }

    /// Starts `call` now, its reply going to `tx` (a blocking client's own
    /// call, on its thread: no command); returns its length in XDR octets.
    pub(crate) fn call_now(&mut self, call: AttemptRef<'_>, tx: ReplySink) -> usize {
        let (call, xid, len) = engine_call(call);
        let span = tracing::debug_span!("rpc.rdma.call", xid, wire_xid = tracing::field::Empty);
        self.now = Instant::now();
        self.start_call(call, xid, tx, span);
        len
    }

    /// Hands a call's outcome to its caller.
    fn deliver(&mut self, tx: ReplySink, xid: u32, r: Result<Message, TransportError>) {
        match tx {
            ReplySink::Channel(tx) => {
                let _ = tx.send(r);
            }
            ReplySink::Driver => self.reply = Some((xid, r)),
        }
    }

    /// The outcome of the call `xid` made with [`ReplySink::Driver`], once
    /// it is there (an outcome for another XID is dropped).
    pub(crate) fn take_reply(&mut self, xid: u32) -> Option<Result<Message, TransportError>> {
        // Looked at before it is moved out: most looks find nothing.
        match &self.reply {
            None => None,
            Some((x, _)) if *x == xid => self.reply.take().map(|(_, r)| r),
            Some(_) => {
                self.reply = None;
                None
            }
        }
    }

    /// Runs a command now (a blocking client's own calls, on its thread).
    pub(crate) fn command_now(&mut self, cmd: Cmd) {
        self.now = Instant::now();
        self.command(cmd);
    }

    /// The time of the last pass.
    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    /// True once the engine has closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// The blocking driver's wait: returns when the provider's socket is
    /// readable (or writable while output waits for room), another thread
    /// queued a command or woke the provider's waker, the engine's next
    /// deadline passes, or `deadline` passes. Spurious returns are fine:
    /// the caller makes a pass after each.
    pub(crate) fn wait_blocking(&mut self, deadline: Option<Instant>) {
        let Some(wake) = self.shared.wake.clone() else {
            return;
        };
        self.publish_stale();
        // Sleep in the socket's receive call (one system call instead of
        // poll(2) and a read) when nothing but the socket can bring work:
        // always at a blocking client (only its own thread queues
        // commands); at a server while no handler runs elsewhere (its
        // reply would come from another thread) and no backchannel call
        // was made. Other commands (a close) wait at most RECV_TICK. The
        // provider itself says whether it has work first (see
        // `IwarpProvider::read_blocking`), so its waker is not armed.
        // Nor while a call waits for the shared Read-sink budget: another
        // connection's thread wakes us when it frees up, through the
        // wake-up socket that only poll(2) watches.
        let recv = self.blocking_reads
            && self.incoming.is_empty()
            && !self.cross_thread_calls
            && !self.conn.waits_for_read_budget();
        if !recv {
            self.prov.arm(wake.waker(), Notify::Any);
            if wake.take_fired() {
                return;
            }
        }
        let until = match (self.conn.poll_timeout(), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The pass just before read the clock.
        let timeout = until.map(|t| t.saturating_duration_since(self.now));
        if timeout.is_some_and(|t| t.is_zero()) {
            return;
        }
        if recv {
            let t = timeout.map_or(RECV_TICK, |t| t.min(RECV_TICK));
            match self.prov.read_blocking(t) {
                Some(Ok(_)) => return,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "blocking read unavailable; polling");
                    self.blocking_reads = false;
                }
                None => self.blocking_reads = false,
            }
            // Polling from now on: arm the waker as that path does.
            self.prov.arm(wake.waker(), Notify::Any);
            if wake.take_fired() {
                return;
            }
        }
        let write = self.prov.write_blocked();
        let (sock, woken) = match self.prov.poll_fd() {
            Some(fd) => wake.poll_with(Some((fd, write)), timeout),
            None => wake.poll_with(None, timeout),
        };
        if sock {
            self.prov.note_readable();
        }
        if woken {
            wake.drain();
        }
    }

    /// True when the pass just made left nothing for another pass: no
    /// command queued or deferred, no wake-up, and the provider
    /// [settled](RdmaProvider::settled). (The pass handled the engine's
    /// deadlines due by its clock; `wait_blocking` sleeps no longer than
    /// the next one.) A blocking driver
    /// then sleeps at once: after a call was answered inline, the pass
    /// that sent the reply is the last before the sleep, not the one
    /// before an empty pass.
    fn settled(&self) -> bool {
        !self
            .shared
            .queued
            .load(std::sync::atomic::Ordering::Acquire)
            && self.deferred.is_empty()
            && self.shared.wake.as_ref().is_none_or(|w| !w.is_fired())
            && self.prov.settled()
    }

    /// A blocking driver's life on its own thread: passes while anything
    /// moves, [`Driver::wait_blocking`] otherwise, until the engine closes.
    pub(crate) fn run_thread(mut self) {
        let Some(wake) = self.shared.wake.clone() else {
            return;
        };
        let _driving = wake.driving();
        let mut busy_passes = 0u32;
        loop {
            let busy = self.pass_blocking();
            if self.conn.is_closed() {
                break;
            }
            if !busy || self.settled() {
                busy_passes = 0;
                self.wait_blocking(None);
            } else {
                // Under continuous load the thread may not sleep for a
                // long time: publish now and then anyway.
                busy_passes += 1;
                if busy_passes.is_multiple_of(64) {
                    self.publish_stale();
                }
            }
        }
        self.finish_begin();
        for _ in 0..25 {
            if self.flush_close() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.publish_now();
    }

    /// Reconnects with backoff; true when a new connection is up.
    async fn reconnect_loop(&mut self) -> bool {
        let Some(rc) = self.reconnect.as_ref() else {
            return false;
        };
        let connector = rc.connector.clone();
        let policy = rc.policy;
        // The old socket goes away: deregister it first.
        self.afd = None;
        self.prov.set_read_gate(false);
        self.prov.disconnect();
        let mut backoff = policy.initial_backoff;
        for attempt in 0..policy.max_attempts.max(1) {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(policy.max_backoff);
            while let Ok(cmd) = self.rx.try_recv() {
                match cmd {
                    Cmd::Close => {
                        self.closing = true;
                        return false;
                    }
                    other => self.deferred.push(other),
                }
            }
            let c = connector.clone();
            match tokio::task::spawn_blocking(move || c()).await {
                Ok(Ok(connected)) => {
                    tracing::info!(peer = %self.shared.peer, attempt, "rpc/rdma reconnected");
                    Metrics::inc(&self.shared.metrics.connections);
                    let old =
                        std::mem::replace(&mut self.conn, Connection::new(self.config.clone()));
                    self.conn = old.reconnect(self.config.clone());
                    let mut prov = connected.provider;
                    self.afd = register_fd(&mut prov);
                    self.prov = prov;
                    self.incoming.clear();
                    if self.dispatcher.is_some() {
                        let slots = self.config.backchannel_slots;
                        self.conn.enable_backchannel(&mut self.prov, slots);
                    }
                    let mut st = self.shared.lock();
                    st.status.link = connected.info;
                    st.status.connects += 1;
                    return true;
                }
                Ok(Err(e)) => tracing::debug!(attempt, error = %e, "rpc/rdma reconnect failed"),
                Err(e) => tracing::debug!(attempt, error = %e, "rpc/rdma connector panicked"),
            }
        }
        false
    }

    async fn finish(mut self) {
        self.finish_begin();
        for _ in 0..25 {
            if self.flush_close() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.publish();
        self.afd = None;
    }

    /// The connection is over: fails every call still waiting and starts
    /// the provider's close.
    pub(crate) fn finish_begin(&mut self) {
        let err = if self.closing {
            TransportError::Closed
        } else {
            TransportError::Lost(
                self.conn
                    .error()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "connection ended".into()),
            )
        };
        self.shared.lock().closed = Some(err.clone());
        self.shared
            .is_closed
            .store(true, std::sync::atomic::Ordering::Release);
        for p in std::mem::take(&mut self.pending).into_all() {
            self.deliver(p.tx, p.xid, Err(err.clone()));
        }
        for cmd in std::mem::take(&mut self.deferred) {
            if let Cmd::Call { tx, xid, .. } = cmd {
                self.deliver(tx, xid, Err(err.clone()));
            }
        }
        self.rx.close();
        while let Ok(cmd) = self.rx.try_recv() {
            if let Cmd::Call { tx, xid, .. } = cmd {
                self.deliver(tx, xid, Err(err.clone()));
            }
        }
        // Let the provider flush the close (bounded), reading freely.
        self.prov.set_read_gate(false);
        self.prov.disconnect();
    }

    /// One step of flushing the close; true once the provider is
    /// disconnected.
    pub(crate) fn flush_close(&mut self) -> bool {
        let mut c = Vec::new();
        self.prov.poll_completions(&mut c);
        matches!(
            self.prov.connection_state(),
            rpcrdma_proto::provider::ConnectionState::Disconnected(_)
        )
    }
}

/// Makes the driver of a new connection and its shared state; `wake`
/// makes it a blocking driver (see [`Driver::run_thread`]).
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
    let shared = Arc::new(Shared {
        tx,
        is_closed: std::sync::atomic::AtomicBool::new(false),
        metrics,
        peer,
        state: Mutex::new(SharedState::default()),
        client,
        wake,
        queued: std::sync::atomic::AtomicBool::new(false),
    });
    let d = Driver::new(
        connected,
        conn,
        config,
        shared.clone(),
        rx,
        dispatcher,
        identity,
        reconnect,
    );
    (shared, d)
}

/// Starts a driver made by [`build`]: a tokio task (unconstrained by the
/// cooperative budget: the driver yields by itself, `BUSY_SPINS`, and a
/// budget-forced `Pending` from its fd, channel or timer would leave that
/// source unregistered for the pass), or for a blocking driver a thread of
/// tokio's blocking pool, so that handlers that wait can still be spawned
/// on the runtime ([`Driver::run_thread`]).
pub(crate) fn spawn(
    (shared, d): (Arc<Shared>, Driver),
) -> (Arc<Shared>, tokio::task::JoinHandle<()>) {
    let client = shared.client;
    let blocking = shared.wake.is_some();
    let span = tracing::debug_span!("rpc.rdma.conn", peer = %shared.peer, client, blocking);
    let h = if blocking {
        tokio::task::spawn_blocking(move || {
            let _e = span.enter();
            d.run_thread();
        })
    } else {
        tokio::spawn(tokio::task::unconstrained(tracing::Instrument::instrument(
            d.run(),
            span,
        )))
    };
    (shared, h)
}

#[cfg(test)]
mod inline_reply_tests {
    use super::*;

    fn shared() -> Arc<Shared> {
        let (tx, _rx) = mpsc::unbounded_channel();
        Arc::new(Shared {
            tx,
            is_closed: std::sync::atomic::AtomicBool::new(false),
            metrics: Arc::default(),
            peer: String::new(),
            state: Mutex::default(),
            client: false,
            wake: None,
            queued: std::sync::atomic::AtomicBool::new(false),
        })
    }

    #[test]
    fn replies_are_caught_only_for_the_connection_dispatching_on_this_thread() {
        let (a, b) = (shared(), shared());
        let m = |v: u8| Message::inline(vec![v; 4]);
        // Nothing dispatching: every reply is given back, unchanged.
        assert_eq!(capture_inline(&a, 1, m(1)), Err(m(1)));
        INLINE_REPLIES.with(|c| {
            c.replace(Some(InlineReplies {
                conn: Arc::as_ptr(&a) as usize,
                replies: Vec::new(),
            }))
        });
        assert_eq!(capture_inline(&b, 2, m(2)), Err(m(2)));
        assert_eq!(capture_inline(&a, 3, m(3)), Ok(()));
        // Another thread sees no capture.
        let a2 = a.clone();
        let other = std::thread::spawn(move || capture_inline(&a2, 4, m(4)).is_err());
        assert!(other.join().unwrap());
        let cap = INLINE_REPLIES.with(|c| c.take()).unwrap();
        assert_eq!(cap.replies, vec![(3, m(3))]);
    }
}
