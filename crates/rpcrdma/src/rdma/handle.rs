//! What the runtime holds of a connection: the commands it sends its
//! driver ([`Cmd`]), the state they share ([`Shared`]), and the handle
//! received calls carry ([`ConnHandle`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use rpcrdma_proto::engine::OutgoingCall as ECall;
use tokio::sync::{mpsc, oneshot};

use super::wake::{TaskWake, ThreadWake};
use super::RdmaStatus;
use crate::message::Message;
use crate::metrics::Metrics;
use crate::transport::AttemptRef;
use crate::transport::{
    CallDispatcher, CallGuard, ClientTransport, OutgoingCall, ReplyReceiver, ServerConnection,
    TransportError,
};

/// Commands from the runtime to a driver.
pub(crate) enum Cmd {
    Call {
        call: ECall,
        xid: u32,
        tx: ReplySink,
        span: tracing::Span,
        /// When the driver ends the call if it is still waiting (its
        /// reply sink dropped; see `Core::expire_calls`).
        deadline: Option<Instant>,
    },
    Cancel(u32),
    Reply {
        xid: u32,
        reply: Message,
    },
    SetBackchannel(Arc<dyn CallDispatcher>),
    Close,
}

/// Where the driver delivers a call's reply (or failure).
pub(crate) enum ReplySink {
    /// A caller on another task or thread waits on the receiver.
    Channel(oneshot::Sender<Result<Message, TransportError>>),
    /// The async client's caller over RDMA, waiting on its slot
    /// ([`crate::slot::ReplyWait`]).
    Slot(crate::slot::SlotSender),
    /// The blocking client driving this driver on its own thread: the
    /// driver keeps the outcome until the client takes it
    /// ([`super::core::Core::take_reply`]); no channel to allocate and
    /// synchronise.
    Driver,
}

/// Replies sent while the driver dispatches a call (see
/// [`Shared::begin_dispatch`]).
#[derive(Default)]
struct Dispatching {
    /// True while the driver runs a handler inline.
    on: bool,
    replies: Vec<(u32, Message)>,
}

/// State shared between a driver and the handles of its connection.
pub(crate) struct Shared {
    pub(crate) tx: mpsc::UnboundedSender<Cmd>,
    /// Set (after `state.closed`) when the connection is closed for good:
    /// the per-call check without the lock.
    pub(crate) is_closed: AtomicBool,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) peer: String,
    pub(crate) state: Mutex<SharedState>,
    /// True for the forward requester (client) side.
    pub(crate) client: bool,
    /// Set when the driver runs on a thread of its own (the thread shell):
    /// how other threads wake it after queueing a command.
    pub(crate) wake: Option<Arc<ThreadWake>>,
    /// Set before and after each command is queued: a pass looks at the
    /// channel only when it is set (an empty `try_recv` or `poll_recv`
    /// costs as much as the rest of a small call's pass). The set after
    /// the send is the thread shell's (a pass that clears the flag sees
    /// the command); the set before is the task shell's (a command sent
    /// after a poll that found the flag clear wakes the waker that poll
    /// left registered with the channel; see `task::Driven::work`).
    pub(crate) queued: AtomicBool,
    /// Replies sent while the driver runs a handler inline.
    dispatching: Mutex<Dispatching>,
    /// The drive of a task shell, whose state is published when it is read
    /// ([`Shared::status`]) rather than by its rounds.
    pub(crate) drive: std::sync::OnceLock<std::sync::Weak<super::task::TaskDrive>>,
    /// A task shell's wake-up: a command takes the connection's wake-ups
    /// back from a caller waiting on it ([`TaskWake::revoke_any`]).
    pub(crate) task_wake: std::sync::OnceLock<Arc<TaskWake>>,
    /// The connection's span (at info level: a server's connection events
    /// carry it). A thread shell runs in it; a task shell enters it only
    /// where it is worth its cost (see `task::spawn`), and the core's own
    /// info-level events name it as their parent.
    pub(crate) span: tracing::Span,
}

#[derive(Default)]
pub(crate) struct SharedState {
    pub(crate) closed: Option<TransportError>,
    pub(crate) status: RdmaStatus,
}

impl Shared {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<Cmd>,
        metrics: Arc<Metrics>,
        peer: String,
        client: bool,
        wake: Option<Arc<ThreadWake>>,
    ) -> Shared {
        let span =
            tracing::info_span!("rpc.rdma.conn", peer = %peer, client, blocking = wake.is_some());
        Shared {
            span,
            tx,
            is_closed: AtomicBool::new(false),
            metrics,
            peer,
            state: Mutex::new(SharedState::default()),
            client,
            wake,
            queued: AtomicBool::new(false),
            dispatching: Mutex::new(Dispatching::default()),
            drive: std::sync::OnceLock::new(),
            task_wake: std::sync::OnceLock::new(),
        }
    }

    /// The connection's state: a task shell's is published now (see
    /// [`super::task::TaskDrive::publish`]); a thread shell's is what its
    /// driver published last (before it slept, or when asked).
    pub(crate) fn status(&self) -> RdmaStatus {
        if let Some(d) = self.drive.get().and_then(std::sync::Weak::upgrade) {
            d.publish();
        }
        self.lock().status.clone()
    }

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
    pub(crate) fn closed_error(&self) -> Option<TransportError> {
        if self.is_closed.load(Ordering::Acquire) {
            self.closed()
        } else {
            None
        }
    }

    /// Marks the connection closed for good with `err`.
    pub(crate) fn set_closed(&self, err: TransportError) {
        self.lock().closed = Some(err);
        self.is_closed.store(true, Ordering::Release);
    }

    /// Queues `cmd` for the driver (without the closed check) and wakes a
    /// thread shell.
    pub(crate) fn push(&self, cmd: Cmd) -> Result<(), TransportError> {
        // A task shell's caller waiting on the connection gives its
        // wake-ups back to the driver task, which runs commands (before
        // the send, and again after it for a waiter delegated meanwhile:
        // the send's wake-up, if a waiter took it, goes to the driver task
        // then).
        let tw = self.task_wake.get();
        if let Some(w) = tw {
            w.revoke_any();
        }
        // Before the send: a task shell's poll that finds it clear left
        // its waker with the channel, which this send wakes.
        self.queued.store(true, Ordering::SeqCst);
        let r = self.tx.send(cmd).map_err(|_| TransportError::Closed);
        // After the send: a pass that clears the flag sees the command.
        self.queued.store(true, Ordering::SeqCst);
        if let Some(w) = &self.wake {
            w.wake();
        }
        if let Some(w) = tw {
            w.revoke_any();
        }
        r
    }

    /// Queues a call (forward at a client, backchannel at a server).
    pub(crate) fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        self.send_call_until(call, None)
    }

    /// Queues a call that the driver ends at `deadline`, if given (see
    /// [`crate::ClientTransport::send_call_until`]).
    pub(crate) fn send_call_until(
        &self,
        call: OutgoingCall,
        deadline: Option<Instant>,
    ) -> Result<ReplyReceiver, TransportError> {
        let (tx, rx) = oneshot::channel();
        let (call, xid, len) = engine_call(call.as_ref());
        let span = call_span(xid);
        self.send(Cmd::Call {
            call,
            xid,
            tx: ReplySink::Channel(tx),
            span,
            deadline,
        })?;
        self.count_sent(len);
        Ok(rx)
    }

    /// Counts a call of `len` XDR octets handed to the driver.
    pub(crate) fn count_sent(&self, len: usize) {
        Metrics::inc(&self.metrics.calls_sent);
        Metrics::add(&self.metrics.bytes_sent, len as u64);
    }

    fn dispatch_state(&self) -> MutexGuard<'_, Dispatching> {
        self.dispatching.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver runs a handler inline from now on: replies sent meanwhile
    /// (by that handler, or by another thread's) are kept for the driver
    /// ([`Shared::end_dispatch`]) instead of going through the command
    /// channel: the driver is awake and takes them when the handler returns.
    /// `buf` is the (empty) buffer to keep them in.
    pub(crate) fn begin_dispatch(&self, buf: Vec<(u32, Message)>) {
        let mut d = self.dispatch_state();
        d.on = true;
        d.replies = buf;
    }

    /// The handler returned: the replies kept since
    /// [`Shared::begin_dispatch`].
    pub(crate) fn end_dispatch(&self) -> Vec<(u32, Message)> {
        let mut d = self.dispatch_state();
        d.on = false;
        std::mem::take(&mut d.replies)
    }

    /// Keeps `reply` for the driver while it dispatches; gives it back
    /// otherwise.
    fn keep_if_dispatching(&self, xid: u32, reply: Message) -> Result<(), Message> {
        let mut d = self.dispatch_state();
        if d.on {
            d.replies.push((xid, reply));
            Ok(())
        } else {
            Err(reply)
        }
    }
}

/// The span of one call in the driver.
pub(crate) fn call_span(xid: u32) -> tracing::Span {
    tracing::debug_span!("rpc.rdma.call", xid, wire_xid = tracing::field::Empty)
}

/// The engine's call for `call` (the arguments' pieces shared, the
/// header's buffer kept when it is handed over), its XID, and its length in
/// XDR octets.
#[inline]
pub(crate) fn engine_call(call: AttemptRef<'_>) -> (ECall, u32, usize) {
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
    // The engine takes the message as it is: the arguments' pieces shared,
    // not copied; only a borrowed header is copied (it is needed again).
    let header = match header {
        std::borrow::Cow::Borrowed([]) => Bytes::new(),
        std::borrow::Cow::Borrowed(h) => Bytes::copy_from_slice(h),
        std::borrow::Cow::Owned(h) => Bytes::from(h),
    };
    let mut message = Message::inline(header);
    for p in args.pieces() {
        message.push(p.clone());
    }
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
    /// A reply sent while the driver dispatches a call inline (the handler
    /// did not wait) goes straight to the driver; any other goes through
    /// the command channel.
    fn send_reply(&self, xid: u32, reply: Message, guard: CallGuard) -> Result<(), TransportError> {
        Metrics::add(&self.0.metrics.bytes_sent, reply.xdr_len() as u64);
        let r = match self.0.closed_error() {
            Some(e) => Err(e),
            None => match self.0.keep_if_dispatching(xid, reply) {
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
    fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        self.0.metrics.clone()
    }
    fn name(&self) -> &'static str {
        "rdma-backchannel"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Arc<Shared> {
        let (tx, _rx) = mpsc::unbounded_channel();
        Arc::new(Shared::new(tx, Arc::default(), String::new(), false, None))
    }

    #[test]
    fn replies_are_kept_only_for_the_connection_dispatching_right_now() {
        let (a, b) = (shared(), shared());
        let m = |v: u8| Message::inline(vec![v; 4]);
        // Nothing dispatching: every reply is given back, unchanged.
        assert_eq!(a.keep_if_dispatching(1, m(1)), Err(m(1)));
        a.begin_dispatch(Vec::new());
        assert_eq!(b.keep_if_dispatching(2, m(2)), Err(m(2)));
        assert_eq!(a.keep_if_dispatching(3, m(3)), Ok(()));
        // Another thread's reply to the dispatching connection is kept too
        // (the driver is awake and takes it when the handler returns).
        let a2 = a.clone();
        let other = std::thread::spawn(move || a2.keep_if_dispatching(4, m(4)).is_ok());
        assert!(other.join().unwrap());
        assert_eq!(a.end_dispatch(), vec![(3, m(3)), (4, m(4))]);
        // Over: given back again.
        assert_eq!(a.keep_if_dispatching(5, m(5)), Err(m(5)));
    }
}
