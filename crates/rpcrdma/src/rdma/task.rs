//! The task shell: a connection's [`Core`] driven by a tokio task, and by
//! the callers of its client when that is cheaper (the direct call path).
//!
//! The core and everything that waits on its behalf (the socket's
//! `AsyncFd`, the command channel, the one timer) sit behind a lock
//! ([`TaskDrive`]). Whoever holds it makes rounds ([`Driven::work`]): each
//! round reads the clock once, takes the socket's readiness edge, drains
//! the command channel when a command was flagged, and lets the core step
//! provider and engine; rounds go on while anything moves (a busy holder
//! hands over every [`BUSY_SPINS`] rounds). When a round moved nothing the
//! core arms the provider's waker and says what to wait for; the holder
//! registers for the socket's next readiness edge and sets the timer to the
//! core's deadline, if there is one. Every one of these registrations is
//! made with the connection's one waker ([`TaskWake`]), never with the
//! holder's own, so they stand whoever made them and whoever holds the lock
//! next: a wake-up while a holder is active sets a flag the holder looks at
//! before it lets go; otherwise it wakes the driver task. Nothing else
//! wakes the driver: no fallback tick (see [`super::core`] for why no
//! wake-up can be lost).
//!
//! Two kinds of holder:
//!
//! * the **driver task** (blocking on the lock, which no holder keeps
//!   across an await): on every wake-up of the connection, unless a holder
//!   took the flag since (then that holder's round saw the work);
//! * a **caller** of the client ([`TaskDrive::try_call`], never blocking on
//!   the lock): when the connection has no other call outstanding (and the
//!   caller runs on the connection's runtime, where a handler its rounds
//!   dispatch may be spawned), it starts its call and makes the rounds
//!   itself (the Send goes out from the caller's poll, with no hand-off to
//!   the driver task); otherwise it only posts its call in the engine and
//!   leaves the transmission to the driver task's next round, which sends
//!   every call posted meanwhile in one pass (one wake-up per batch). A
//!   caller that finds the lock taken, the link down or commands queued
//!   before it queues its call on the command channel instead, as every
//!   other command goes.
//!
//! The reply of every call is delivered by whichever holder makes the
//! round that receives it: into the [`crate::slot`] the async client's
//! caller waits on (a `oneshot` channel for other callers). A caller whose
//! call is the connection's only one takes the driver task's place while
//! it waits ([`TaskDrive::wait_by_driving`]): the connection's wake-ups
//! wake the caller, whose poll makes the round that receives its reply
//! (one task wake-up per reply instead of the driver task's and then the
//! caller's). A call started on the caller's thread as the connection's
//! only one hands its waiter the wake-ups at once, under the lock its start
//! holds ([`TaskDrive::try_call`]): the waiter's first poll does not look
//! at the connection. That delegation ends when the wait ends or its future is
//! dropped, and when another call or any command comes (which also hands
//! a wake-up the waiter took and did not handle to the driver task), so a
//! waiter that is never polled again holds up nothing but its own call's
//! reply: the calls and commands of others go to the driver task. (A
//! connection with a backchannel to serve is never delegated.) The
//! connection counts its waiting callers without a lock, from before their
//! calls start: while more than one waits, none looks at the connection
//! (no lock per poll, no rounds made for one reply at a time, which cost a
//! third of the calls/s at depth 32), and only a lone one takes the lock
//! to see whether its call is the connection's only one.
//!
//! After a connection loss the driver task reconnects
//! ([`crate::reconnect`]'s policy, the connector run in `spawn_blocking`),
//! and the core carries the calls over; callers queue their calls
//! meanwhile.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc;

use super::core::{Core, Next};
use super::handle::Cmd;
use super::wake::TaskWake;
use super::ProviderConnector;
use crate::alarm::{self, Alarm};
use crate::metrics::Metrics;
use crate::reconnect::{self, ReconnectPolicy};
use crate::slot::WaitDrive;

/// Reconnection: how to make a new connection and how often to try.
pub(crate) struct Reconnect {
    pub(crate) connector: ProviderConnector,
    pub(crate) policy: ReconnectPolicy,
}

/// Busy rounds before a holder hands over (the driver task yields to the
/// runtime; a caller leaves the rest to the driver task).
const BUSY_SPINS: u32 = 16;

/// The provider's socket, registered with tokio (never closed by us).
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// How a holder's rounds ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// The engine closed: the driver task ends the connection (or
    /// reconnects).
    Closed,
    /// Nothing to do until a wake-up of the connection.
    Sleep,
    /// Still busy after [`BUSY_SPINS`] rounds: the driver task goes on
    /// (woken, the flag set).
    Busy,
}

/// What the lock of a [`TaskDrive`] guards.
struct Driven {
    // The AsyncFd must go before the core, whose provider owns the socket.
    afd: Option<AsyncFd<Fd>>,
    /// The connection's waker is registered for the socket's next read
    /// edge: the last `poll_read_ready` returned `Pending` (an edge since
    /// then woke that waker, which sets the flag the holder looks at).
    read_registered: bool,
    core: Core,
    rx: mpsc::UnboundedReceiver<Cmd>,
    rx_done: bool,
    /// The connection's waker is registered with the channel (a
    /// `poll_recv` returned `Pending` since the last look that found the
    /// channel flagged; see [`Driven::work`]).
    rx_registered: bool,
    /// The connection's deadline alarm ([`crate::alarm`]: no timer in the
    /// runtime's wheel, which every park scans), set by the driver task
    /// when it starts, moved only when the core's deadline moves earlier
    /// or the instant it was set to has passed.
    alarm: Option<Alarm>,
    /// Without an alarm thread: one timer for the connection's life (made
    /// by the driver task, in the runtime), reset only when the core's
    /// deadline moves earlier (a new `Sleep` per wait cost a timer-wheel
    /// insert and removal per call).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The instant the alarm or the timer is set to, while it is.
    armed: Option<Instant>,
    /// The timer holds the connection's waker (polled since its last reset).
    timer_registered: bool,
    /// Callers may drive: the driver task has started, the link is up and
    /// the connection has not ended.
    live: bool,
    /// Outcomes the last holder handed out (to callers woken by them).
    batch: u64,
    /// The runtime the driver task runs on: a caller drives only from a
    /// task of the same runtime (a handler its rounds dispatch may be
    /// spawned, onto the runtime the connection's handlers run on).
    runtime: Option<tokio::runtime::Id>,
}

/// A connection's core behind its lock, and the waker of the connection
/// (see the module docs).
pub(crate) struct TaskDrive {
    driven: Mutex<Driven>,
    wake: Arc<TaskWake>,
    waker: Waker,
    /// [`TaskWake::provider_waker`].
    prov_waker: Waker,
    /// Callers waiting on replies of this connection ([`crate::slot::ReplyWait`]s,
    /// from before their calls start until done or dropped): a waiter
    /// looks at the connection (its lock) only while it is the only one.
    waiters: AtomicUsize,
    /// Tests: the direct path on (default) or off, and how often each of
    /// its two ways was taken.
    #[cfg(test)]
    pub(crate) test: TestHooks,
}

#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestHooks {
    pub(crate) channel_only: std::sync::atomic::AtomicBool,
    pub(crate) driven: std::sync::atomic::AtomicU64,
    pub(crate) posted: std::sync::atomic::AtomicU64,
    /// Calls given back for the command channel.
    pub(crate) queued: std::sync::atomic::AtomicU64,
    /// Rounds made by a waiting caller woken in the driver task's place.
    pub(crate) waited: std::sync::atomic::AtomicU64,
    /// Rounds made by the driver task.
    pub(crate) driver_rounds: std::sync::atomic::AtomicU64,
    /// Waiters' polls that looked at the connection (took its lock, or
    /// tried to).
    pub(crate) waiter_looks: std::sync::atomic::AtomicU64,
    /// Waiters' polls that took the connection's wake-ups.
    pub(crate) delegations: std::sync::atomic::AtomicU64,
}

/// See the module docs: the driver task's part.
pub(crate) struct TaskShell {
    drive: Arc<TaskDrive>,
    reconnect: Option<Reconnect>,
}

/// Registers the core's socket with tokio; with it watched, the provider
/// reads only after readiness edges.
fn register_fd(core: &mut Core) -> Option<AsyncFd<Fd>> {
    let a = core.wait_fd().map(|fd| fd.as_raw_fd()).and_then(|fd| {
        // `with_interest` is the safe (deprecated) registration; the
        // I/O-safety invariant it cannot check holds here: the provider
        // keeps the socket open and unchanged for as long as the `AsyncFd`
        // exists, because the shell drops the `AsyncFd` (field order, and
        // explicitly before a provider is replaced) before the provider.
        #[allow(deprecated)]
        let r = AsyncFd::with_interest(Fd(fd), Interest::READABLE | Interest::WRITABLE);
        r.map_err(
            |e| tracing::debug!(error = %e, "provider fd not registrable; using its waker only"),
        )
        .ok()
    });
    core.set_read_gate(a.is_some());
    a
}

impl TaskShell {
    pub(crate) fn new(
        mut core: Core,
        rx: mpsc::UnboundedReceiver<Cmd>,
        reconnect: Option<Reconnect>,
    ) -> TaskShell {
        let wake = TaskWake::new();
        let waker = wake.waker();
        let shared = core.shared().clone();
        // Woken (from any thread) when the shared Read-sink budget frees up
        // for a call of this connection.
        core.set_waker(&waker);
        let afd = register_fd(&mut core);
        let driven = Driven {
            afd,
            read_registered: false,
            core,
            rx,
            rx_done: false,
            rx_registered: false,
            alarm: None,
            timer: None,
            armed: None,
            timer_registered: false,
            live: false,
            batch: 0,
            runtime: None,
        };
        let drive = Arc::new(TaskDrive {
            driven: Mutex::new(driven),
            prov_waker: wake.provider_waker(),
            waiters: AtomicUsize::new(0),
            wake,
            waker,
            #[cfg(test)]
            test: TestHooks::default(),
        });
        let _ = shared.drive.set(Arc::downgrade(&drive));
        let _ = shared.task_wake.set(drive.wake.clone());
        TaskShell { drive, reconnect }
    }

    /// The connection's drive, for its callers' direct path.
    pub(crate) fn drive(&self) -> &Arc<TaskDrive> {
        &self.drive
    }

    pub(crate) async fn run(mut self) {
        {
            let mut d = self.drive.lock();
            if alarm::available() {
                d.alarm = Some(Alarm::default());
            } else {
                d.timer = Some(Box::pin(tokio::time::sleep(Duration::ZERO)));
            }
            d.runtime = Some(tokio::runtime::Handle::current().id());
            d.live = true;
        }
        loop {
            std::future::poll_fn(|cx| self.drive.poll_driver(cx)).await;
            // The engine closed.
            let closing = self.drive.lock().core.is_closing();
            if !closing && self.reconnect.is_some() && self.reconnect_loop().await {
                continue;
            }
            break;
        }
        self.finish().await;
    }

    /// Reconnects per the policy; true when a new connection is up.
    async fn reconnect_loop(&mut self) -> bool {
        let Some(rc) = self.reconnect.as_ref() else {
            return false;
        };
        let connector = rc.connector.clone();
        let policy = rc.policy;
        let drive = &self.drive;
        {
            let mut d = drive.lock();
            // Callers queue their calls until the new connection is up.
            d.live = false;
            // The old socket goes away: deregister it first.
            d.afd = None;
            d.core.drop_link();
        }
        let outcome = {
            // Between attempts: a close ends the outage, other commands wait
            // for the new connection.
            let stop = || {
                let mut g = drive.lock();
                let d = &mut *g;
                if d.core.is_closing() {
                    return true;
                }
                while let Ok(cmd) = d.rx.try_recv() {
                    match cmd {
                        Cmd::Close => {
                            d.core.set_closing();
                            return true;
                        }
                        other => d.core.defer(other),
                    }
                }
                false
            };
            let connect = || {
                let c = connector.clone();
                async move {
                    tokio::task::spawn_blocking(move || c())
                        .await
                        .map_err(io::Error::other)?
                }
            };
            let attempts = reconnect::with_backoff(&policy, true, stop, connect);
            tokio::pin!(attempts);
            // The calls waiting for the new connection still end at their
            // deadlines (their callers keep no timers): commands are taken
            // as they come (not only between attempts) and the earliest
            // deadline is watched.
            let mut rx_open = true;
            loop {
                let next = drive.lock().core.expire_at(Instant::now());
                let at = tokio::time::Instant::from_std(next.unwrap_or_else(Instant::now));
                let cmd = std::future::poll_fn(|cx| drive.lock().rx.poll_recv(cx));
                tokio::select! {
                    r = attempts.as_mut() => break r,
                    () = tokio::time::sleep_until(at), if next.is_some() => {}
                    c = cmd, if rx_open => match c {
                        // Ends the outage at the next check (`stop`).
                        Some(Cmd::Close) => drive.lock().core.set_closing(),
                        Some(other) => drive.lock().core.defer(other),
                        None => rx_open = false,
                    },
                }
            }
        };
        let mut d = drive.lock();
        // The channel and the timer were polled by this task meanwhile:
        // the next round registers the connection's waker again.
        d.rx_registered = false;
        d.armed = None;
        d.timer_registered = false;
        match outcome {
            Ok(connected) => {
                tracing::info!(peer = %d.core.shared().peer, "rpc/rdma reconnected");
                Metrics::inc(&d.core.shared().metrics.connections);
                d.core.relink(connected);
                d.afd = register_fd(&mut d.core);
                d.read_registered = false;
                d.live = true;
                drop(d);
                // The first poll on the new connection makes a round.
                drive.wake.hand_over();
                true
            }
            Err(_) => false,
        }
    }

    async fn finish(self) {
        let drive = self.drive;
        {
            let mut g = drive.lock();
            let d = &mut *g;
            d.live = false;
            d.rx.close();
            let rx = &mut d.rx;
            d.core
                .finish_begin(std::iter::from_fn(|| rx.try_recv().ok()));
        }
        for _ in 0..25 {
            if drive.lock().core.flush_close() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut d = drive.lock();
        d.core.publish_now();
        d.afd = None;
        d.alarm = None;
        d.timer = None;
    }
}

thread_local! {
    /// This thread holds a drive's lock and makes rounds (it may be running
    /// a handler dispatched inline): it never waits for another drive's
    /// lock (see [`TaskDrive::publish`]).
    static IN_ROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl TaskDrive {
    /// Publishes the core's state for a reader ([`super::handle::Shared::status`]):
    /// a task shell's core publishes only when asked (no lock and copy per
    /// round or per call), so what a reader sees is the state as of now,
    /// waiting for a holder's round to end if need be. A reader on a thread
    /// that makes rounds itself (a handler dispatched inline) does not
    /// wait: if the lock is taken (by its own round, or another's) it sees
    /// what was published last. (So no thread that holds a drive waits for
    /// another, and no two can wait for each other.)
    pub(crate) fn publish(&self) {
        let d = if IN_ROUND.get() {
            self.try_lock()
        } else {
            Some(self.lock())
        };
        if let Some(d) = d {
            d.core.publish_now();
        }
    }

    /// The lock, waiting for a holder to let go (the driver task only;
    /// holders never keep it across an await or a wait of any kind).
    fn lock(&self) -> MutexGuard<'_, Driven> {
        self.driven.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock if nobody holds it.
    fn try_lock(&self) -> Option<MutexGuard<'_, Driven>> {
        match self.driven.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The driver task's poll: rounds if the connection was woken since a
    /// holder last took the flag; `Ready` once the engine closed.
    fn poll_driver(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.wake.set_driver(cx.waker());
        let mut d = self.lock();
        if !self.wake.is_fired() {
            // A caller made the round this wake-up was for.
            return Poll::Pending;
        }
        #[cfg(test)]
        self.test.driver_rounds.fetch_add(1, Ordering::Relaxed);
        match self.drive_locked(&mut d, None) {
            Work::Closed => Poll::Ready(()),
            Work::Sleep => Poll::Pending,
            // The flag is set and this task woken: the runtime's other
            // tasks run first.
            Work::Busy => Poll::Pending,
        }
    }

    /// Rounds by the holder of the lock (see [`Driven::work`]), between
    /// [`TaskWake::begin`] and [`TaskWake::end`]: a wake-up that came after
    /// the last round's take means another round. The first round's clock
    /// is `now` if given (a caller's, read for its call).
    fn drive_locked(&self, d: &mut Driven, now: Option<Instant>) -> Work {
        let outer = IN_ROUND.replace(true);
        let before = d.core.delivered();
        let r = self.rounds(d, now);
        d.batch = d.core.delivered() - before;
        IN_ROUND.set(outer);
        r
    }

    fn rounds(&self, d: &mut Driven, mut now: Option<Instant>) -> Work {
        let mut cx = Context::from_waker(&self.waker);
        self.wake.begin();
        loop {
            let r = d.work(&self.wake, &self.prov_waker, &mut cx, now.take());
            if r != Work::Sleep {
                // Whatever came meanwhile: the driver task makes the next
                // round (after a close, it ends the connection).
                let _ = self.wake.end();
                if r == Work::Busy {
                    self.wake.hand_over();
                }
                return r;
            }
            if self.wake.end() {
                self.wake.begin();
                continue;
            }
            return Work::Sleep;
        }
    }

    /// The direct call path: starts `cmd` (a call) from the caller's
    /// thread if the connection is free (see the module docs); gives it
    /// back otherwise (`.0`), for the command channel. `now`: the caller's
    /// clock, read for the call (its deadline), used for the call's start
    /// and the first round (no clock read of their own).
    ///
    /// `waiter`: the token and task waker of the caller's
    /// [`crate::slot::ReplyWait`] (counted among the waiters already). When
    /// the call starts here as the connection's only one, the waiter takes
    /// the connection's wake-ups under the same lock, before the caller's
    /// first poll (`.1`): that poll need not look at the connection
    /// (no second lock, no second delegation per call).
    pub(crate) fn try_call(
        &self,
        cmd: Cmd,
        now: Instant,
        waiter: Option<(usize, &Waker)>,
    ) -> (Option<Cmd>, bool) {
        #[cfg(test)]
        if self.test.channel_only.load(Ordering::Relaxed) {
            return (Some(cmd), false);
        }
        let Some(mut d) = self.try_lock() else {
            #[cfg(test)]
            self.test.queued.fetch_add(1, Ordering::Relaxed);
            return (Some(cmd), false);
        };
        let core = &d.core;
        if !d.live
            || core.is_closing()
            || core.is_closed()
            || core.has_deferred()
            || core.shared().queued.load(Ordering::Acquire)
        {
            // Commands go first in the order they came; the driver task
            // drives while the link is down.
            #[cfg(test)]
            self.test.queued.fetch_add(1, Ordering::Relaxed);
            return (Some(cmd), false);
        }
        // Another call: the driver task serves the connection's wake-ups
        // again (a waiter of this call may take them back, alone). Under
        // the lock, which a waiter delegates under: it sees the waiter.
        // (A call given back for the channel: `Shared::push` revokes.)
        self.wake.revoke_any();
        // Other calls outstanding, the last holder handed out several
        // replies (their callers, about to start their next calls, follow
        // this one), or a caller outside the connection's runtime: posted
        // now, and sent by the driver task's next round with whatever else
        // is posted meanwhile (one write and one wake-up per batch).
        let runtime = || tokio::runtime::Handle::try_current().map(|h| h.id()).ok();
        if d.core.calls_waiting() > 0 || d.batch > 1 || runtime() != d.runtime {
            d.core.command_at(now, cmd);
            drop(d);
            self.wake.wake();
            #[cfg(test)]
            self.test.posted.fetch_add(1, Ordering::Relaxed);
            return (None, false);
        }
        // Nothing queued or deferred before it (see above): it starts now.
        let outer = IN_ROUND.replace(true);
        // Active already: the provider's wake-up for the post is the
        // holder's own.
        self.wake.begin();
        d.core.command_at(now, cmd);
        IN_ROUND.set(outer);
        // The rounds confirm it and register for what comes next.
        let r = self.caller_rounds(&mut d, Some(now));
        #[cfg(test)]
        self.test.driven.fetch_add(1, Ordering::Relaxed);
        let delegated = r == Work::Sleep
            && waiter.is_some_and(|(token, waker)| self.delegate_lone(&d, token, waker));
        self.let_go(d, r);
        (None, delegated)
    }

    /// A lone waiter (`token`, its task's `waker`) takes the connection's
    /// wake-ups ([`TaskWake::delegate`]) if its call is the connection's
    /// only one, under the lock (`d`): false (and nothing delegated)
    /// otherwise.
    fn delegate_lone(&self, d: &Driven, token: usize, waker: &Waker) -> bool {
        if self.waiters.load(Ordering::SeqCst) > 1 || !Self::lone_call(d) {
            self.wake.revoke(token);
            return false;
        }
        self.wake.delegate(token, waker);
        #[cfg(test)]
        self.test.delegations.fetch_add(1, Ordering::Relaxed);
        // A command pushed meanwhile (its `push` revokes before it flags
        // the channel, and again after: one of the two sees this waiter,
        // or this look sees the flag).
        if d.core.shared().queued.load(Ordering::SeqCst) {
            self.wake.revoke(token);
            return false;
        }
        true
    }

    /// A caller lets go of the lock after its rounds (`r`): what they left
    /// undone (the engine closed) goes to the driver task.
    fn let_go(&self, d: MutexGuard<'_, Driven>, r: Work) {
        drop(d);
        if r == Work::Closed {
            // The driver task ends the connection (or reconnects).
            self.wake.hand_over();
        }
    }

    /// Rounds made by a caller holding the lock (`d`), outside the
    /// caller's cooperative budget: a source that returned `Pending` for
    /// want of budget would wake the connection at once and leave itself
    /// unregistered for the round. What the rounds leave undone when busy
    /// goes to the driver task (after a close, [`TaskDrive::let_go`]).
    fn caller_rounds(&self, d: &mut Driven, now: Option<Instant>) -> Work {
        let mut f = tokio::task::unconstrained(std::future::poll_fn(|_| {
            Poll::Ready(self.drive_locked(d, now))
        }));
        let mut cx = Context::from_waker(Waker::noop());
        let r = match Pin::new(&mut f).poll(&mut cx) {
            Poll::Ready(r) => r,
            // (A `poll_fn` that is always ready.)
            Poll::Pending => {
                self.wake.hand_over();
                Work::Busy
            }
        };
        drop(f);
        r
    }

    /// True while a waiter takes the connection's wake-ups (tests).
    #[cfg(test)]
    pub(crate) fn is_delegated(&self) -> bool {
        self.wake.is_delegated()
    }

    /// Callers counted as waiting on this connection (tests).
    #[cfg(test)]
    pub(crate) fn waiter_count(&self) -> usize {
        self.waiters.load(Ordering::SeqCst)
    }
}

impl WaitDrive for TaskDrive {
    fn enter_waiter(&self) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
    }

    /// A waiting caller's poll ([`crate::slot::ReplyWait`]): while its
    /// call is the connection's only one (the only waiter, nothing else
    /// outstanding, queued or deferred, no backchannel to serve, the lock
    /// free), the connection's wake-ups come to this waiter instead of the
    /// driver task ([`TaskWake::delegate`]), and if one came, the waiter
    /// makes the rounds now (which deliver its reply to its slot).
    /// Otherwise any delegation is given back and the driver task (or the
    /// holder of the lock) serves the connection: with other waiters,
    /// without a look at the connection (a lock per poll, and rounds made
    /// for one reply at a time, cost a third of the calls/s at depth 32).
    fn wait_by_driving(&self, token: usize, waker: &Waker) {
        #[cfg(test)]
        if self.test.channel_only.load(Ordering::Relaxed) {
            return;
        }
        if self.waiters.load(Ordering::SeqCst) > 1 {
            self.wake.revoke(token);
            return;
        }
        #[cfg(test)]
        self.test.waiter_looks.fetch_add(1, Ordering::Relaxed);
        let Some(mut d) = self.try_lock() else {
            // The holder's rounds deliver (and wake through the slot).
            self.wake.revoke(token);
            return;
        };
        if !self.delegate_lone(&d, token, waker) || !self.wake.is_fired() {
            // Not alone; or nothing came since the last round: the next
            // wake-up comes here.
            return;
        }
        #[cfg(test)]
        self.test.waited.fetch_add(1, Ordering::Relaxed);
        let r = self.caller_rounds(&mut d, None);
        self.let_go(d, r);
        if r != Work::Sleep {
            // Busy or closed: the driver task goes on.
            self.wake.revoke(token);
        }
    }

    fn release_waiter(&self, token: usize) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        self.wake.revoke(token);
    }

    fn give_back(&self, token: usize) {
        self.wake.revoke(token);
    }
}

impl TaskDrive {
    /// The connection (its lock held) has one call outstanding and nothing
    /// else to serve: a waiter may take its wake-ups. (No dispatcher: the
    /// rounds run no handler, so the waiter's runtime does not matter.)
    fn lone_call(d: &Driven) -> bool {
        let core = &d.core;
        d.live
            && !core.is_closing()
            && !core.is_closed()
            && !core.has_deferred()
            && !core.has_dispatcher()
            && core.calls_waiting() == 1
            && !core.shared().queued.load(Ordering::Acquire)
    }
}

impl Driven {
    /// The next command from the channel, if one is ready (registers the
    /// connection's waker for the next one otherwise); a `Close` once every
    /// handle is gone.
    fn next_cmd(
        rx: &mut mpsc::UnboundedReceiver<Cmd>,
        rx_done: &mut bool,
        registered: &mut bool,
        cx: &mut Context<'_>,
    ) -> Option<Cmd> {
        if *rx_done {
            // Nothing to register with any more.
            *registered = true;
            return None;
        }
        match rx.poll_recv(cx) {
            Poll::Ready(Some(c)) => Some(c),
            // Every handle is gone: nobody can use the connection.
            Poll::Ready(None) => {
                *rx_done = true;
                *registered = true;
                Some(Cmd::Close)
            }
            Poll::Pending => {
                *registered = true;
                None
            }
        }
    }

    /// True when the busy round just made left nothing for another (the
    /// thread shell's `settled`): no command flagged or deferred and the
    /// provider settled. The holder then goes to [`Core::before_sleep`]
    /// at once (which steps once more after arming the provider's waker)
    /// instead of making an empty round first.
    fn settled(&self) -> bool {
        !self.core.shared().queued.load(Ordering::Acquire)
            && !self.core.has_deferred()
            && self.core.provider_settled()
    }

    /// Takes the socket's readiness edges, readable and (if `writable`)
    /// writable, cleared *before* the provider reads or writes, so an
    /// arrival after its drain is a new edge; true if one was ready. The
    /// connection's waker is registered for each one that was not. With
    /// `registered_ok`, the read edge is not looked at again while the
    /// waker is registered for it (a holder about to let go: an edge since
    /// the round's look at the top woke the connection, and the holder
    /// looks at that wake-up's flag before it lets go).
    fn take_edges(&mut self, cx: &mut Context<'_>, writable: bool, registered_ok: bool) -> bool {
        let Some(a) = self.afd.as_ref() else {
            return false;
        };
        let mut any = false;
        if !(registered_ok && self.read_registered) {
            match a.poll_read_ready(cx) {
                Poll::Ready(Ok(mut g)) => {
                    g.clear_ready();
                    self.read_registered = false;
                    self.core.note_readable();
                    any = true;
                }
                Poll::Ready(Err(_)) => self.read_registered = false,
                Poll::Pending => self.read_registered = true,
            }
        }
        if writable {
            if let Poll::Ready(Ok(mut g)) = a.poll_write_ready(cx) {
                g.clear_ready();
                any = true;
            }
        }
        any
    }

    /// Rounds until the engine closes, the holder has been busy for
    /// [`BUSY_SPINS`] rounds, or nothing can move until a command, a
    /// readiness edge, a provider wake-up or the core's deadline (every
    /// one of them registered with `cx`, the connection's waker). A
    /// hand-written poll (rather than a `select!` per
    /// round) registers each source once and creates no futures per call.
    /// The first round's clock is `first` if given.
    fn work(
        &mut self,
        wake: &TaskWake,
        prov_waker: &Waker,
        cx: &mut Context<'_>,
        mut first: Option<Instant>,
    ) -> Work {
        let mut spins = 0u32;
        loop {
            // Every source is looked at from here on: a wake-up after this
            // sets the flag again.
            let woken = wake.take();
            // One clock read per round, for every engine input of it.
            let now = first.take().unwrap_or_else(Instant::now);
            let writable = self.core.wants_write();
            // The read edge is not looked at when nothing woke the
            // connection since the last take while its waker is registered
            // for that edge (a caller starting its call after the last
            // holder let go): an edge since the registration woke the
            // waker, which set the flag this take found clear.
            self.take_edges(cx, writable, !woken);
            // The channel only when a command was flagged since the last
            // look, or the connection's waker is not registered with it
            // yet: `Shared::push` sets the flag before it sends, so a
            // command that comes after this look wakes the waker the last
            // `Pending` left with the channel (and one that came before it
            // was flagged). A look that finds commands drains the channel
            // to `Pending`, registering again.
            let look =
                self.core.shared().queued.swap(false, Ordering::AcqRel) || !self.rx_registered;
            let (rx, rx_done, reg) = (&mut self.rx, &mut self.rx_done, &mut self.rx_registered);
            if look {
                *reg = false;
            }
            let busy = self.core.round(now, &mut || {
                if look {
                    Self::next_cmd(rx, rx_done, reg, cx)
                } else {
                    None
                }
            });
            if self.core.is_closed() {
                return Work::Closed;
            }
            if busy && !self.settled() {
                // Keep going while there is work; now and then let the
                // runtime's other tasks (e.g. callers woken by replies) run.
                spins += 1;
                if spins >= BUSY_SPINS {
                    return Work::Busy;
                }
                continue;
            }
            wake.arming();
            let wait = match self.core.before_sleep(prov_waker) {
                Next::Round => continue,
                Next::Closed => return Work::Closed,
                Next::Sleep(w) => w,
            };
            // A command flagged, or a wake-up (the provider's `arm` finding
            // work at once) meanwhile: the flag's look is cheaper than the
            // wake-up it would otherwise cost. Counted, so that a source
            // that keeps firing cannot keep the holder from handing over.
            if !self.rx_registered
                || self.core.shared().queued.load(Ordering::Acquire)
                || wake.is_fired()
            {
                spins += 1;
                if spins >= BUSY_SPINS {
                    return Work::Busy;
                }
                continue;
            }
            // Register for the socket's next readiness edge: the one taken
            // at the top of this round took its waker (and a round that
            // read without producing work never looked again); not again
            // when that look registered the waker (one `poll_read_ready`
            // less per sleep). Likewise for writability while output waits
            // for room.
            if self.take_edges(cx, wait.writable, true) {
                continue;
            }
            let Some(want) = wait.deadline else {
                self.armed = None;
                return Work::Sleep;
            };
            if let Some(alarm) = self.alarm.as_mut() {
                if want > now {
                    // Moved only for an earlier deadline, or once the
                    // instant it was set to has passed (it fired, or is
                    // about to, for a deadline that moved later): the
                    // calls' deadlines move later with every call while the
                    // first one's stays set, and the round after a wake-up
                    // for nothing due sets it again.
                    if self.armed.is_none_or(|a| want < a || a <= now) {
                        alarm.set(want, cx.waker());
                        self.armed = Some(want);
                    }
                    return Work::Sleep;
                }
                // Due by this round's clock: round again, counted as busy
                // (as a timer that fired, below).
                self.armed = None;
                spins += 1;
                if spins >= BUSY_SPINS {
                    return Work::Busy;
                }
                continue;
            }
            let Some(timer) = self.timer.as_mut() else {
                // Not started yet (callers do not drive then).
                return Work::Sleep;
            };
            // Reset only for an earlier deadline: one armed earlier than
            // needed fires, the round finds nothing due, and the timer is
            // set again (the calls' deadlines move later with every call
            // while the first one's stays armed; a reset per call cost a
            // timer-wheel removal and insert).
            if self.armed.is_none_or(|a| want < a) {
                timer.as_mut().reset(want.into());
                self.armed = Some(want);
                self.timer_registered = false;
            }
            // Not due by this round's clock, and it holds the connection's
            // waker from an earlier poll: no need to poll it again (a timer
            // never fires before its instant, so the round after its
            // wake-up finds it due and polls it).
            let due = self.armed.is_none_or(|a| a <= now);
            if !due && self.timer_registered {
                return Work::Sleep;
            }
            if timer.as_mut().poll(cx).is_pending() {
                self.timer_registered = true;
                return Work::Sleep;
            }
            // The deadline: round again (the engine or the provider handles
            // it); counted as a busy round so a deadline that does not move
            // cannot keep this loop from handing over.
            self.armed = None;
            self.timer_registered = false;
            spins += 1;
            if spins >= BUSY_SPINS {
                return Work::Busy;
            }
        }
    }
}

/// Spawns the task (unconstrained by the cooperative budget: the shell
/// yields by itself, [`BUSY_SPINS`], and a budget-forced `Pending` from its
/// fd, channel or timer would leave that source unregistered for the
/// round).
///
/// The connection's `span` is entered around a poll only while debug
/// events can be enabled ([`debug_on`], one load of the global maximum
/// level): entering and leaving it on every poll cost
/// ~200 user-space instructions per NULL call at the command line's
/// default info level (the subscriber's span stack and reference counts),
/// where the only events under it are the connection's own, which name it
/// as their parent (`Core`); with `-v`/`RUST_LOG=debug` every event of the
/// task is in the span as before. (Rounds made by a client's callers never
/// ran in it.)
pub(crate) fn spawn(shell: TaskShell, span: tracing::Span) -> tokio::task::JoinHandle<()> {
    let run = shell.run();
    tokio::spawn(tokio::task::unconstrained(async move {
        let mut run = std::pin::pin!(run);
        std::future::poll_fn(|cx| {
            if debug_on() {
                let _e = span.enter();
                run.as_mut().poll(cx)
            } else {
                run.as_mut().poll(cx)
            }
        })
        .await
    }))
}

/// True while some subscriber may take debug events.
fn debug_on() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    STATIC_MAX_LEVEL >= LevelFilter::DEBUG && LevelFilter::current() >= LevelFilter::DEBUG
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
