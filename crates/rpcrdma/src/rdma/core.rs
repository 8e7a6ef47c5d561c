//! The driver's synchronous core: one engine, one provider, and the calls
//! and replies of the runtime in between. No runtime, no waiting: a shell
//! ([`super::task`] or [`super::thread`]) hands it commands and readiness,
//! asks it to make a round ([`Core::round`]), and, when a round moved
//! nothing, asks what to wait for ([`Core::before_sleep`]): a wake-up of
//! the waker it arms, the socket's readiness, and at most one deadline.
//!
//! Every wake source of a connection, and how the core makes sure none is
//! lost when its shell sleeps (the argument the old fallback tick stood in
//! for):
//!
//! * commands: the shell registers with its channel before it sleeps
//!   (`poll_recv` / the thread's wake-up flag, set after each send);
//!   deferred commands are run at the start of every round;
//! * the provider: [`Core::before_sleep`] arms its waker and then makes one
//!   more step, so work that appeared between the last step and the arm
//!   is either found by that step or wakes the waker (`arm` wakes at once
//!   when a pass would find work, including input left in the socket by a
//!   pass that stopped at its read budget);
//! * the socket: readiness is edge-triggered and cleared *before* the
//!   provider reads ([`Core::note_readable`]), so input arriving after the
//!   provider's drain is a new edge the shell sees before it sleeps;
//!   writability likewise while the provider [wants to write](Core::wants_write);
//! * timers: the engine's next deadline, the provider's own (a Read
//!   RTR's next nudge) and the earliest deadline of a call (the async
//!   client's timeouts, [`super::deadlines`]) are all in [`Wait::deadline`];
//! * the shared Read-sink budget: the engine holds the shell's waker
//!   ([`Core::set_waker`]) and wakes it when another connection returns
//!   budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use rpcrdma_proto::engine::ids::IdMap;
use rpcrdma_proto::engine::{
    CallError, CallFailure, CallHandle, CallId, Config as EngineConfig, Connection, Event,
    OutgoingCall as ECall, OutgoingReply,
};
use rpcrdma_proto::provider::{Completion, ConnectionEvent, ConnectionState, Notify, Provider};

use super::deadlines::Deadlines;
use super::handle::{call_span, engine_call, Cmd, ConnHandle, ReplySink, Shared};
use super::{BoxProvider, Connected};
use crate::message::Message;
use crate::metrics::Metrics;
use crate::transport::AttemptRef;
use crate::transport::{
    CallDispatcher, CallGuard, ClientIdentity, IncomingCall, ReplyRoom, ServerConnection,
    TransportError,
};

/// What a shell waits for when a round moved nothing (besides the waker it
/// armed and the command channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    /// The earliest deadline of the engine, the provider and the calls.
    pub(crate) deadline: Option<Instant>,
    /// Wait for the socket to become writable too.
    pub(crate) writable: bool,
}

/// What [`Core::before_sleep`] found.
pub(crate) enum Next {
    /// Work appeared: make another round.
    Round,
    /// The engine closed: the connection is over.
    Closed,
    /// Nothing to do until a wake-up, readiness or the deadline.
    Sleep(Wait),
}

/// When the core publishes its state for [`super::RdmaStatus`] readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// Marked stale; the shell publishes before it sleeps, and the core
    /// before it delivers a call's outcome (whose caller may look at the
    /// status at once): one lock and copy per call instead of one per
    /// round (the thread shell).
    BeforeSleep,
    /// Only when asked: a blocking client (the only reader of its state),
    /// and a task shell, whose readers publish through its lock
    /// (`TaskDrive::publish`).
    OnDemand,
}

/// How often at most a thread shell publishes its state before it sleeps:
/// a blocking server sleeps once per call at depth 1, and a publication
/// (the shared lock and a copy of the engine's counters, ~200 user-space
/// instructions) each time was 3 % of a NULL call. A state held back is
/// published before the next sleep after this interval (see
/// [`publish_due`]; the shell wakes for it when it sleeps in poll(2); in a
/// socket receive call, whose timeout is not changed for it — that would
/// be a system call — at the latest when that call's tick ends).
pub(crate) const PUBLISH_INTERVAL: Duration = Duration::from_millis(1);

/// What a thread shell about to sleep does with its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PublishDue {
    /// Nothing changed since the last publication.
    Nothing,
    /// Publish now.
    Now,
    /// Changed, published too recently: publish at this instant.
    Later(Instant),
}

/// The decision of [`Core::publish_stale`]: a stale state is published
/// when `due` (the last publication plus [`PUBLISH_INTERVAL`]) has come by
/// `now`, else when it will.
pub(crate) fn publish_due(stale: bool, due: Instant, now: Instant) -> PublishDue {
    if !stale {
        PublishDue::Nothing
    } else if now >= due {
        PublishDue::Now
    } else {
        PublishDue::Later(due)
    }
}

struct Pending {
    xid: u32,
    tx: ReplySink,
    span: tracing::Span,
    /// When the driver ends the call (see [`Core::expire_calls`]).
    deadline: Option<Instant>,
}

/// The calls waiting for their replies, by engine id (the engine's events
/// name them so). The first one sits in a slot of its own: with one call
/// at a time (a blocking client, a synchronous caller) no hash map is
/// touched. The runtime's XID of a call (assigned by the caller; the engine
/// assigns the wire XIDs) is only carried along: a cancel, after a
/// timeout, looks it up by a scan.
#[derive(Default)]
struct Outstanding {
    one: Option<(CallId, Pending)>,
    /// Every other call.
    by_id: IdMap<CallId, Pending>,
}

impl Outstanding {
    fn insert(&mut self, id: CallId, p: Pending) {
        if self.one.is_none() {
            self.one = Some((id, p));
        } else {
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
        self.by_id.remove(&id)
    }

    /// Forgets the calls of the runtime's XID `xid` (their replies, if any
    /// come, are dropped).
    fn forget_xid(&mut self, xid: u32) {
        if matches!(&self.one, Some((_, p)) if p.xid == xid) {
            self.one = None;
        }
        self.by_id.retain(|_, p| p.xid != xid);
    }

    /// True if the call `id` waits with the deadline `at`.
    fn has_deadline(&self, id: CallId, at: Instant) -> bool {
        self.get(id).is_some_and(|p| p.deadline == Some(at))
    }

    fn len(&self) -> usize {
        usize::from(self.one.is_some()) + self.by_id.len()
    }

    /// Every call, in no particular order.
    fn into_all(self) -> impl Iterator<Item = Pending> {
        self.one
            .into_iter()
            .map(|(_, p)| p)
            .chain(self.by_id.into_values())
    }
}

/// A link property for the log: its value, or `unknown` where the provider
/// cannot tell (a verbs device does not report the MPA exchange it made).
struct OrUnknown<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrUnknown<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("unknown"),
        }
    }
}

fn call_error(e: CallError) -> TransportError {
    match e {
        CallError::TooLarge { len, max } => TransportError::TooLarge { len, max },
        CallError::Closed(e) => TransportError::Lost(e.to_string()),
        CallError::BadMessage(why) => TransportError::BadMessage(why),
        other => TransportError::Lost(other.to_string()),
    }
}

/// See the module docs.
pub(crate) struct Core {
    prov: BoxProvider,
    conn: Connection,
    config: EngineConfig,
    shared: Arc<Shared>,
    pending: Outstanding,
    /// The deadlines of the calls in `pending` that have one.
    deadlines: Deadlines,
    /// Keyed by the peer's XIDs: SipHash (a peer chooses the keys). Calls
    /// answered while they are dispatched never enter it (see
    /// [`Core::dispatch`]).
    incoming: HashMap<u32, CallHandle>,
    /// The buffer of replies kept during a dispatch, kept between calls.
    inline_replies: Vec<(u32, Message)>,
    dispatcher: Option<Arc<dyn CallDispatcher>>,
    identity: ClientIdentity,
    /// Calls interrupted by a connection loss wait for the next connection
    /// (the task shell reconnects) instead of failing.
    resend_after_loss: bool,
    /// The time of the current round.
    now: Instant,
    closing: bool,
    comps: Vec<Completion>,
    deferred: Vec<Cmd>,
    publish: Publish,
    /// State changed since the last publication.
    stale: bool,
    /// When a changed state is next published before a sleep (the last
    /// such publication plus [`PUBLISH_INTERVAL`]; see
    /// [`Core::publish_stale`]).
    publish_due: Instant,
    /// The handle every received call carries (one allocation per
    /// connection, not per call).
    conn_handle: Arc<dyn ServerConnection>,
    /// The outcome of the driving thread's own call ([`ReplySink::Driver`])
    /// with its XID, until [`Core::take_reply`].
    reply: Option<(u32, Result<Message, TransportError>)>,
    /// The engine's `retransmits` already added to the runtime's.
    retransmits_seen: u64,
    /// The engine's RDMA_ERROR answers sent (ERR_VERS, ERR_CHUNK, RDMA2
    /// errors) as last looked at: each new one is a peer error logged.
    errors_sent_seen: (u64, u64, u64),
    /// The engine's `calls_received` when this connection started (its
    /// counters carry across reconnects): the calls it served.
    calls_at_connect: u64,
    /// Outcomes handed to callers so far (the task shell tells a batch of
    /// replies from a lone one by it).
    delivered: u64,
    /// The version the connection settled on, as last counted, and
    /// whether its peer was seen to speak no version 2.
    version_seen: (u32, bool),
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        connected: Connected,
        conn: Connection,
        config: EngineConfig,
        shared: Arc<Shared>,
        dispatcher: Option<Arc<dyn CallDispatcher>>,
        identity: ClientIdentity,
        resend_after_loss: bool,
        publish: Publish,
    ) -> Core {
        {
            let mut st = shared.lock();
            st.status.link = connected.info;
            st.status.connects = 1;
        }
        let conn_handle: Arc<dyn ServerConnection> = Arc::new(ConnHandle(shared.clone()));
        Core {
            prov: connected.provider,
            conn,
            config,
            shared,
            pending: Outstanding::default(),
            deadlines: Deadlines::default(),
            incoming: HashMap::new(),
            inline_replies: Vec::new(),
            dispatcher,
            identity,
            resend_after_loss,
            now: Instant::now(),
            closing: false,
            comps: Vec::new(),
            deferred: Vec::new(),
            publish,
            stale: false,
            publish_due: Instant::now(),
            conn_handle,
            reply: None,
            retransmits_seen: 0,
            errors_sent_seen: (0, 0, 0),
            calls_at_connect: 0,
            delivered: 0,
            version_seen: (0, false),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The time of the last round.
    pub(crate) fn now(&self) -> Instant {
        self.now
    }

    /// True once the engine has closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// A close came while the connection was down: nothing to close in
    /// the engine, the calls fail as closed.
    pub(crate) fn set_closing(&mut self) {
        self.closing = true;
    }

    /// True once a close was asked for.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing
    }

    /// Received calls are waiting for replies from other threads.
    pub(crate) fn awaits_replies(&self) -> bool {
        !self.incoming.is_empty()
    }

    /// A call waits for the shared Read-sink budget (another connection
    /// returns it, through the waker given to [`Core::set_waker`]).
    pub(crate) fn waits_for_read_budget(&self) -> bool {
        self.conn.waits_for_read_budget()
    }

    /// The engine wakes `waker` when shared Read-sink budget comes back.
    pub(crate) fn set_waker(&mut self, waker: &Waker) {
        self.conn.set_waker(waker);
    }

    /// Received calls (a backchannel at a client) are dispatched.
    pub(crate) fn has_dispatcher(&self) -> bool {
        self.dispatcher.is_some()
    }

    /// Calls waiting for their replies.
    pub(crate) fn calls_waiting(&self) -> usize {
        self.pending.len()
    }

    /// Outcomes handed to callers so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Runs `cmd` at the next round (a reconnecting shell's commands).
    pub(crate) fn defer(&mut self, cmd: Cmd) {
        self.deferred.push(cmd);
    }

    // ------------------------------------------------------------------
    // The round

    /// One round at `now`: the deferred commands, then every command
    /// `next_cmd` gives, then the provider and the engine (events,
    /// completions, deadlines due, returned budget). True if anything
    /// moved.
    pub(crate) fn round(
        &mut self,
        now: Instant,
        next_cmd: &mut dyn FnMut() -> Option<Cmd>,
    ) -> bool {
        self.now = now;
        let mut busy = false;
        for cmd in std::mem::take(&mut self.deferred) {
            busy = true;
            self.command(cmd);
        }
        while let Some(c) = next_cmd() {
            busy = true;
            self.command(c);
        }
        if busy {
            // Commands changed the engine (e.g. a reply went out).
            self.publish();
        }
        busy | self.step() | self.expire_calls()
    }

    /// A round moved nothing: arms the provider's waker with `waker` and
    /// steps once more (work that came in between is found now or wakes
    /// the waker), then says what to wait for.
    pub(crate) fn before_sleep(&mut self, waker: &Waker) -> Next {
        self.prov.arm(waker, Notify::Any);
        // A settled provider has nothing a step would find (and `arm`
        // wakes at once for what would): the step only when it is not.
        if !self.prov.settled() && self.step() {
            return Next::Round;
        }
        if self.conn.is_closed() {
            return Next::Closed;
        }
        Next::Sleep(self.wait())
    }

    /// What to wait for besides the waker and the commands.
    pub(crate) fn wait(&self) -> Wait {
        let mut deadline = match (self.conn.poll_timeout(), self.provider_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(c) = self.deadlines.peek() {
            deadline = Some(deadline.map_or(c, |d| d.min(c)));
        }
        Wait {
            deadline,
            writable: self.wants_write(),
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
                    self.calls_at_connect = self.conn.metrics().calls_received;
                    tracing::debug!(peer = %self.shared.peer, negotiated = ?self.conn.negotiated(), "rpc/rdma connection established");
                }
                ConnectionEvent::Disconnected(r) => {
                    self.log_end(&r.to_string());
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
            self.count_version();
            self.note_errors_sent();
            self.publish();
        }
        busy
    }

    /// The end of a connection, at info level for a server's (who, why,
    /// how many calls it served).
    fn log_end(&self, reason: &str) {
        let calls = self.conn.metrics().calls_received - self.calls_at_connect;
        if self.shared.client {
            tracing::debug!(peer = %self.shared.peer, reason, calls, "rpc/rdma connection ended");
        } else {
            tracing::info!(parent: &self.shared.span, reason, calls_served = calls, "connection ended");
        }
    }

    /// Logs (warning) each RDMA_ERROR the engine sent since the last look:
    /// a peer that broke the protocol, with the answer it got on the wire.
    fn note_errors_sent(&mut self) {
        let m = self.conn.metrics();
        let now = (m.err_vers_sent, m.err_chunk_sent, m.rdma2_errors_sent);
        if now == self.errors_sent_seen {
            return;
        }
        let (v, c, r) = self.errors_sent_seen;
        let peer = &self.shared.peer;
        if now.0 > v {
            tracing::warn!(%peer, count = now.0 - v, answer = "RDMA_ERROR ERR_VERS",
                "peer error: a message in an RPC-over-RDMA version we do not speak");
        }
        if now.1 > c {
            tracing::warn!(%peer, count = now.1 - c, answer = "RDMA_ERROR ERR_CHUNK",
                "peer error: a call whose chunks cannot be served (too large, bad segments, or over the Read-sink budget)");
        }
        if now.2 > r {
            tracing::warn!(%peer, count = now.2 - r, answer = "RDMA2_ERROR",
                "peer error: a version 2 message refused");
        }
        self.errors_sent_seen = now;
    }

    /// Counts the version the connection settled on (and a fallback), and
    /// remembers a peer that speaks no version 2 for the next connections
    /// of this process ([`super::versions`]).
    fn count_version(&mut self) {
        let now = (self.conn.version(), self.conn.peer_is_v1_only());
        if now == self.version_seen {
            return;
        }
        let m = &self.shared.metrics;
        if now.0 != self.version_seen.0 && now.0 != 0 {
            self.log_ready(now.0);
        }
        if now.0 != self.version_seen.0 {
            match now.0 {
                1 => Metrics::inc(&m.rpcrdma_v1_connections),
                2 => Metrics::inc(&m.rpcrdma_v2_connections),
                _ => {}
            }
            if self.conn.version_info().fallback {
                Metrics::inc(&m.version_fallbacks);
            }
        }
        if now.1 {
            super::versions::remember_v1_only(&self.shared.peer);
        }
        self.version_seen = now;
    }

    /// A connection settled on its version: at info level for a server's,
    /// with what was negotiated.
    fn log_ready(&self, version: u32) {
        let (link, credits) = {
            let st = self.shared.lock();
            (st.status.link.clone(), st.status.credits)
        };
        let granted = self.config.credits_granted;
        let n = self.conn.negotiated();
        let peer = &self.shared.peer;
        let (send, recv) = n.map_or((0, 0), |n| (n.send_threshold, n.recv_threshold));
        let fallback = self.conn.version_info().fallback;
        if self.shared.client {
            tracing::debug!(%peer, version, fallback, mpa_rev = ?link.mpa_rev, crc = ?link.crc,
                inline_send = send, inline_recv = recv, credits, "rpc/rdma connection ready");
        } else {
            let _ = peer; // the connection's span carries it
            tracing::info!(
                parent: &self.shared.span,
                version,
                fallback,
                mpa_rev = %OrUnknown(link.mpa_rev),
                crc = %OrUnknown(link.crc),
                markers = %OrUnknown(link.markers),
                ird = link.ird,
                ord = link.ord,
                inline_send = send,
                inline_recv = recv,
                credits_granted = granted,
                "connection established"
            );
        }
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

    // ------------------------------------------------------------------
    // Publication

    /// Publishes the connection's state (see [`Publish`]).
    fn publish(&mut self) {
        self.stale = true;
    }

    /// Publishes now if the state is stale and the last publication is at
    /// least [`PUBLISH_INTERVAL`] old (the thread shell, before it sleeps);
    /// returns the instant a stale state left unpublished becomes due: the
    /// shell sleeps no longer (see [`publish_due`]).
    pub(crate) fn publish_stale(&mut self) -> Option<Instant> {
        if self.publish == Publish::OnDemand {
            return None;
        }
        match publish_due(self.stale, self.publish_due, self.now) {
            PublishDue::Now => {
                self.stale = false;
                self.publish_due = self.now + PUBLISH_INTERVAL;
                self.publish_now();
                None
            }
            PublishDue::Later(t) => Some(t),
            PublishDue::Nothing => None,
        }
    }

    /// Publishes now, before a call's outcome is delivered (unless the state
    /// is published on demand only).
    fn publish_for_caller(&mut self) {
        if self.publish != Publish::OnDemand {
            self.stale = false;
            self.publish_now();
        }
    }

    /// From now on the state is published only by [`Core::publish_now`].
    pub(crate) fn publish_on_demand(&mut self) {
        self.publish = Publish::OnDemand;
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
        st.status.resources = self.conn.resources();
        st.status.registered_regions = self.prov.registered_regions();
        let v = &st.status.version;
        if (v.version, v.peer_v1_only) != (self.conn.version(), self.conn.peer_is_v1_only()) {
            st.status.version = self.conn.version_info();
        }
    }

    // ------------------------------------------------------------------
    // Commands and calls

    /// Runs a command at the time of the last round.
    pub(crate) fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Call {
                call,
                xid,
                tx,
                span,
                deadline,
            } => self.start_call(call, xid, tx, span, deadline),
            Cmd::Cancel(xid) => self.pending.forget_xid(xid),
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
        }
    }

    /// Runs a command now (a blocking client's own, on its thread).
    pub(crate) fn command_now(&mut self, cmd: Cmd) {
        self.command_at(Instant::now(), cmd);
    }

    /// Runs a command at `now` (a caller's clock, read for its call).
    pub(crate) fn command_at(&mut self, now: Instant, cmd: Cmd) {
        self.now = now;
        self.command(cmd);
    }

    /// Starts a call in the engine (at `self.now`).
    fn start_call(
        &mut self,
        call: ECall,
        xid: u32,
        tx: ReplySink,
        span: tracing::Span,
        deadline: Option<Instant>,
    ) {
        match self.conn.start_call(self.now, &mut self.prov, call) {
            Ok(id) => {
                if let Some(at) = deadline {
                    self.deadlines.push(at, id);
                    let pending = &self.pending;
                    self.deadlines
                        .compact(pending.len(), |id, t| pending.has_deadline(id, t));
                }
                let p = Pending {
                    xid,
                    tx,
                    span,
                    deadline,
                };
                self.pending.insert(id, p);
            }
            Err(e) => self.deliver(tx, xid, Err(call_error(e))),
        }
    }

    /// Ends the calls whose deadline passed by the round's clock, as a
    /// cancel does (a late reply is dropped), and drops their reply
    /// sinks: the caller, who knows the deadline, takes the closed
    /// receiver as its timeout (see [`crate::ClientTransport::send_call_until`]).
    /// Calls deferred during an outage too. True if one ended.
    fn expire_calls(&mut self) -> bool {
        let mut any = false;
        // Most rounds: nothing due, one comparison (entries of calls that
        // ended are dropped when they are due, or by `compact`).
        if self.deadlines.peek().is_some_and(|t| t <= self.now) {
            loop {
                let pending = &self.pending;
                match self.deadlines.next(|id, t| pending.has_deadline(id, t)) {
                    Some(t) if t <= self.now => {}
                    _ => break,
                }
                if let Some(id) = self.deadlines.pop_due(self.now) {
                    any |= self.pending.remove(id).is_some();
                }
            }
        }
        if !self.deferred.is_empty() {
            let now = self.now;
            let n = self.deferred.len();
            self.deferred
                .retain(|c| !matches!(c, Cmd::Call { deadline: Some(d), .. } if *d <= now));
            any |= self.deferred.len() != n;
        }
        any
    }

    /// The earliest deadline of a call, outstanding or deferred (during an
    /// outage, when no round runs), after ending those due `now`.
    pub(crate) fn expire_at(&mut self, now: Instant) -> Option<Instant> {
        self.now = now;
        self.expire_calls();
        let deferred = self.deferred.iter().filter_map(|c| match c {
            Cmd::Call { deadline, .. } => *deadline,
            _ => None,
        });
        deferred.chain(self.deadlines.peek()).min()
    }

    /// Starts `call` now, its reply going to `tx` (a blocking client's own
    /// call, on its thread: no command); returns its length in XDR octets.
    pub(crate) fn call_now(&mut self, call: AttemptRef<'_>, tx: ReplySink) -> usize {
        let (call, xid, len) = engine_call(call);
        self.now = Instant::now();
        self.start_call(call, xid, tx, call_span(xid), None);
        len
    }

    /// Hands a call's outcome to its caller.
    fn deliver(&mut self, tx: ReplySink, xid: u32, r: Result<Message, TransportError>) {
        self.delivered += 1;
        match tx {
            ReplySink::Channel(tx) => {
                let _ = tx.send(r);
            }
            ReplySink::Slot(s) => s.send(r),
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

    // ------------------------------------------------------------------
    // Received calls and their replies

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
            OutgoingReply { message: reply },
        );
        match r {
            Ok(form) => tracing::debug!(xid, ?form, "reply sent"),
            Err(e) => tracing::debug!(xid, error = %e, "reply not sent"),
        }
    }

    /// Dispatches the received call `xid` (engine handle `handle`). A reply
    /// sent before `dispatch` returns (the common case: the handler did not
    /// wait) is kept by the connection's [`Shared`] and sent here at once,
    /// without the command channel and without the `incoming` map;
    /// otherwise the handle waits in `incoming` for the reply command. An
    /// older handle of the same XID is replaced either way.
    ///
    /// The [`IncomingCall`] is built in the dispatcher's argument (a call
    /// is too large to move without a `memcpy` call).
    fn dispatch(
        &mut self,
        d: &dyn CallDispatcher,
        xid: u32,
        handle: CallHandle,
        (message, reply_chunk, file_chunk): (Message, Option<u64>, Option<u64>),
    ) {
        let inline_threshold = self.conn.negotiated().map(|n| n.send_threshold);
        self.shared
            .begin_dispatch(std::mem::take(&mut self.inline_replies));
        d.dispatch(IncomingCall {
            message,
            client: self.identity.clone(),
            conn: self.conn_handle.clone(),
            guard: CallGuard::none(),
            room: ReplyRoom {
                inline_threshold,
                reply_chunk,
                file_chunk,
            },
        });
        let mut replies = self.shared.end_dispatch();
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
                Metrics::add(
                    &self.shared.metrics.bytes_received,
                    ic.message.xdr_len() as u64,
                );
                tracing::debug!(
                    xid = ic.xid,
                    backchannel = ic.backchannel,
                    long = ic.long,
                    ddp = ic.message.ddp_count(),
                    write_chunks = ic.write_chunks.len(),
                    reply_chunk = ?ic.reply_chunk,
                    "rpc/rdma call received"
                );
                // A file piece goes from the file into the first Write
                // chunk when the provider can send files.
                let file_chunk = ic
                    .write_chunks
                    .first()
                    .copied()
                    .filter(|_| self.prov.sends_files());
                self.dispatch(
                    &*d,
                    ic.xid,
                    ic.handle,
                    (ic.message, ic.reply_chunk, file_chunk),
                );
                self.dispatcher = Some(d);
            }
            Event::ReplyReceived(r) => {
                let Some(p) = self.pending.remove(r.id) else {
                    Metrics::inc(&self.shared.metrics.replies_unmatched);
                    return;
                };
                let results = r.message.results();
                let bytes = r.message.inline_len() + results.iter().map(|b| b.len()).sum::<usize>();
                Metrics::inc(&self.shared.metrics.replies_received);
                Metrics::add(&self.shared.metrics.bytes_received, bytes as u64);
                {
                    let _e = p.span.enter();
                    p.span.record("wire_xid", r.xid);
                    tracing::debug!(long = r.long, results = results.len(), "rpc/rdma reply");
                }
                // The runtime's XID back in place of the wire XID; the
                // Write chunk data goes along unplaced, as the message's
                // out-of-band results, each DDP-eligible item taking the
                // next as the upper layer decodes the reply
                // ([`MessageReader::ddp_opaque`](crate::MessageReader::ddp_opaque)).
                //= rfc8166#section-3.4.6
                //# In addition, the XDR position of DDP-eligible data items in the
                //# reply's Payload stream is not predictable when a Requester constructs
                //# an RPC Call message.  Therefore, RDMA segments in a Write chunk do
                //# not have a Position field.
                let mut m = r.message;
                m.set_xid(p.xid);
                // The caller may look at the status as soon as it has the
                // reply: publish first.
                self.publish_for_caller();
                self.deliver(p.tx, p.xid, Ok(m));
            }
            Event::CallFailed {
                id,
                xid,
                error,
                retransmit,
            } => self.call_failed(id, xid, error, retransmit),
            Event::CreditsChanged { credits } => {
                tracing::trace!(credits, "credits changed");
            }
            Event::ConnectionLost(e) => {
                if !self.closing {
                    Metrics::inc(&self.shared.metrics.transport_errors);
                }
                if let rpcrdma_proto::engine::ConnectionError::Peer(_) = &e {
                    // The answer to a protocol violation: the connection
                    // is closed (the provider's Terminate, if any, goes
                    // with it).
                    tracing::warn!(peer = %self.shared.peer, error = %e,
                        answer = "connection closed", "peer error");
                } else {
                    tracing::debug!(peer = %self.shared.peer, error = %e, "rpc/rdma connection lost");
                }
            }
        }
    }

    fn call_failed(&mut self, id: CallId, xid: u32, error: CallFailure, retransmit: bool) {
        if retransmit && self.resend_after_loss && !self.closing {
            // Counted when it is sent again (`step`), not here: it may not
            // have been sent at all yet (waiting for a credit), and may be
            // interrupted again before.
            if let Some(p) = self.pending.get(id) {
                let _e = p.span.enter();
                tracing::debug!(wire_xid = xid, error = %error, "call interrupted; will be re-sent on the next connection");
            }
            return;
        }
        let Some(p) = self.pending.remove(id) else {
            return;
        };
        let lost = matches!(error, CallFailure::ConnectionLost(_));
        let err = match error {
            CallFailure::Local(e) => call_error(e),
            CallFailure::ConnectionLost(_) if self.closing => TransportError::Closed,
            // `TransportError::Lost` says "connection lost" itself.
            CallFailure::ConnectionLost(e) => TransportError::Lost(e.to_string()),
            other => TransportError::Lost(other.to_string()),
        };
        if lost && !self.resend_after_loss {
            // No reconnection follows: the connection is closed for good
            // before its caller hears of it, so a caller that sees its call
            // fail as lost also sees why the transport is closed.
            self.shared.set_closed(self.final_error());
        }
        let _e = p.span.enter();
        tracing::debug!(wire_xid = xid, error = %err, "rpc/rdma call failed");
        self.publish_for_caller();
        self.deliver(p.tx, p.xid, Err(err));
    }

    // ------------------------------------------------------------------
    // Reconnection and the end

    /// The connection was lost: lets the provider go (the shell has
    /// stopped watching its socket).
    pub(crate) fn drop_link(&mut self) {
        self.set_read_gate(false);
        self.prov.disconnect();
    }

    /// A new connection is up (after [`Core::drop_link`]): the engine
    /// carries its calls over (the interrupted ones are re-sent with their
    /// XIDs) onto the new provider.
    pub(crate) fn relink(&mut self, connected: Connected) {
        let old = std::mem::replace(&mut self.conn, Connection::new(self.config.clone()));
        self.conn = old.reconnect(self.config.clone());
        self.version_seen = (0, false);
        self.prov = connected.provider;
        self.incoming.clear();
        if self.dispatcher.is_some() {
            let slots = self.config.backchannel_slots;
            self.conn.enable_backchannel(&mut self.prov, slots);
        }
        let mut st = self.shared.lock();
        st.status.link = connected.info;
        st.status.connects += 1;
    }

    /// Why the connection is over: closed by us, or lost.
    fn final_error(&self) -> TransportError {
        if self.closing {
            TransportError::Closed
        } else {
            TransportError::Lost(
                self.conn
                    .error()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "connection ended".into()),
            )
        }
    }

    /// The connection is over: fails every call still waiting (and every
    /// call among the commands still `queued`; the shell has closed its
    /// channel) and starts the provider's close.
    pub(crate) fn finish_begin(&mut self, queued: impl Iterator<Item = Cmd>) {
        let err = self.final_error();
        self.shared.set_closed(err.clone());
        self.deadlines.clear();
        for p in std::mem::take(&mut self.pending).into_all() {
            self.deliver(p.tx, p.xid, Err(err.clone()));
        }
        let cmds: Vec<Cmd> = std::mem::take(&mut self.deferred)
            .into_iter()
            .chain(queued)
            .collect();
        for cmd in cmds {
            if let Cmd::Call { tx, xid, .. } = cmd {
                self.deliver(tx, xid, Err(err.clone()));
            }
        }
        // Let the provider flush the close (bounded), reading freely.
        self.drop_link();
    }

    /// One step of flushing the close; true once the provider is
    /// disconnected.
    pub(crate) fn flush_close(&mut self) -> bool {
        let mut c = Vec::new();
        self.prov.poll_completions(&mut c);
        matches!(
            self.prov.connection_state(),
            ConnectionState::Disconnected(_)
        )
    }

    // ------------------------------------------------------------------
    // The provider's readiness hooks (the provider contract's readiness
    // part): the one place that calls them (the shells ask the core).

    /// The fd to watch for readiness (a task shell registers it, a thread
    /// shell polls it), if the provider has one.
    pub(crate) fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.prov.wait_fd()
    }

    /// The shell watches the socket's readiness edges (and calls
    /// [`Core::note_readable`] after clearing each), or stops doing so.
    pub(crate) fn set_read_gate(&mut self, on: bool) {
        self.prov.set_read_gate(on);
    }

    /// A readiness edge was cleared: the socket may be readable.
    pub(crate) fn note_readable(&mut self) {
        self.prov.note_readable();
    }

    /// Output waits for room in the socket.
    pub(crate) fn wants_write(&self) -> bool {
        self.prov.write_blocked()
    }

    /// The provider's own next deadline (a Read RTR's next nudge).
    fn provider_deadline(&self) -> Option<Instant> {
        self.prov.next_deadline()
    }

    /// Nothing waits to be polled or transmitted in the provider, nor an
    /// engine event to be taken.
    pub(crate) fn provider_settled(&self) -> bool {
        self.prov.settled() && !self.conn.has_events()
    }

    /// Lets [`Core::read_blocking`] sleep in the socket's receive call.
    pub(crate) fn set_blocking_reads(&mut self, on: bool) -> bool {
        self.prov.set_blocking_reads(on)
    }

    /// Sleeps in the socket's receive call for at most `timeout`.
    pub(crate) fn read_blocking(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<std::io::Result<bool>> {
        self.prov.read_blocking(timeout)
    }

    /// Arms the provider's waker without a step (the thread shell, which
    /// made its step already).
    pub(crate) fn arm(&mut self, waker: &Waker) {
        self.prov.arm(waker, Notify::Any);
    }
}

#[cfg(test)]
mod tests {
    use super::{publish_due, OrUnknown, PublishDue, PUBLISH_INTERVAL};
    use std::time::Instant;

    /// A verbs link does not know its MPA revision or CRC: the server's
    /// log says so rather than `mpa_rev=0 crc=false`.
    #[test]
    fn link_properties_a_provider_cannot_tell_are_logged_as_unknown() {
        assert_eq!(OrUnknown(Some(2u8)).to_string(), "2");
        assert_eq!(OrUnknown(Some(true)).to_string(), "true");
        assert_eq!(OrUnknown::<u8>(None).to_string(), "unknown");
        assert_eq!(OrUnknown::<bool>(None).to_string(), "unknown");
    }

    /// A changed state is published before a sleep at most once per
    /// PUBLISH_INTERVAL, and a sleep ends when a held-back one is due.
    #[test]
    fn publication_before_a_sleep_is_rate_limited() {
        let due = Instant::now() + PUBLISH_INTERVAL;
        let soon = due - PUBLISH_INTERVAL / 2;
        assert_eq!(publish_due(false, due, soon), PublishDue::Nothing);
        assert_eq!(publish_due(false, due, due), PublishDue::Nothing);
        assert_eq!(publish_due(true, due, soon), PublishDue::Later(due));
        assert_eq!(publish_due(true, due, due), PublishDue::Now);
        assert_eq!(
            publish_due(true, due, due + 3 * PUBLISH_INTERVAL),
            PublishDue::Now
        );
    }
}
