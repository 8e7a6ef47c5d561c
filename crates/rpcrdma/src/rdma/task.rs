//! The task shell: a connection's [`Core`] driven by a tokio task.
//!
//! One hand-written `poll` ([`TaskShell::poll_work`]): each round reads the
//! clock once, takes the socket's readiness edge, drains the command
//! channel, and lets the core step provider and engine; it loops while
//! anything moved (yielding every [`BUSY_SPINS`] rounds). When a round
//! moved nothing the core arms the provider's waker and says what to wait
//! for; the shell registers for the socket's next readiness edge and sets
//! its one timer to the core's deadline, if there is one. Nothing else
//! wakes the task: no fallback tick (see [`super::core`] for why no wake-up
//! can be lost).
//!
//! After a connection loss the shell reconnects ([`crate::reconnect`]'s
//! policy, the connector run in `spawn_blocking`), and the core carries
//! the calls over.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::mpsc;

use super::core::{Core, Next};
use super::handle::Cmd;
use super::ProviderConnector;
use crate::metrics::Metrics;
use crate::reconnect::{self, ReconnectPolicy};

/// Reconnection: how to make a new connection and how often to try.
pub(crate) struct Reconnect {
    pub(crate) connector: ProviderConnector,
    pub(crate) policy: ReconnectPolicy,
}

/// Busy rounds before the task yields to the runtime.
const BUSY_SPINS: u32 = 16;

/// The provider's socket, registered with tokio (never closed by us).
struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// See the module docs.
pub(crate) struct TaskShell {
    // The AsyncFd must go before the core, whose provider owns the socket.
    afd: Option<AsyncFd<Fd>>,
    core: Core,
    rx: mpsc::UnboundedReceiver<Cmd>,
    rx_done: bool,
    /// The task's waker is registered with the channel (a `poll_recv`
    /// returned `Pending` since the last poll that found the channel
    /// flagged; see [`TaskShell::poll_work`]).
    rx_registered: bool,
    reconnect: Option<Reconnect>,
    /// The waker the armed timer holds (it was polled since its last
    /// reset).
    timer_waker: Option<std::task::Waker>,
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
        let afd = register_fd(&mut core);
        TaskShell {
            afd,
            core,
            rx,
            rx_done: false,
            rx_registered: false,
            reconnect,
            timer_waker: None,
        }
    }

    pub(crate) async fn run(mut self) {
        // One timer for the shell's life, reset only when the core's
        // deadline changes (a new `Sleep` per wait cost a timer-wheel
        // insert and removal on every call).
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        loop {
            let mut armed = None;
            self.rx_registered = false;
            std::future::poll_fn(|cx| self.poll_work(cx, timer.as_mut(), &mut armed)).await;
            // The engine closed.
            if !self.core.is_closing() && self.reconnect.is_some() && self.reconnect_loop().await {
                continue;
            }
            break;
        }
        self.finish().await;
    }

    /// The next command from the channel, if one is ready (registers the
    /// task for the next one otherwise); a `Close` once every handle is
    /// gone.
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
    /// provider settled. The shell then goes to [`Core::before_sleep`]
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
    /// task is registered for each one that was not.
    fn take_edges(&mut self, cx: &mut Context<'_>, writable: bool) -> bool {
        let Some(a) = self.afd.as_ref() else {
            return false;
        };
        let mut any = false;
        if let Poll::Ready(Ok(mut g)) = a.poll_read_ready(cx) {
            g.clear_ready();
            self.core.note_readable();
            any = true;
        }
        if writable {
            if let Poll::Ready(Ok(mut g)) = a.poll_write_ready(cx) {
                g.clear_ready();
                any = true;
            }
        }
        any
    }

    /// Rounds until the engine closes (`Ready`) or nothing can move until
    /// a command, a readiness edge, a provider wake-up or the core's
    /// deadline (`Pending`, with every one of them registered with `cx`).
    /// A hand-written poll (rather than a `select!` per round) registers
    /// each source once and creates no futures per call.
    fn poll_work(
        &mut self,
        cx: &mut Context<'_>,
        mut timer: Pin<&mut tokio::time::Sleep>,
        armed: &mut Option<tokio::time::Instant>,
    ) -> Poll<()> {
        let mut spins = 0u32;
        // The task's waker, for the shared Read-sink budget (a pointer
        // comparison when unchanged).
        self.core.set_waker(cx.waker());
        loop {
            // One clock read per round, for every engine input of it.
            let now = Instant::now();
            let writable = self.core.wants_write();
            self.take_edges(cx, writable);
            // The channel only when a command was flagged since the last
            // look, or the task's waker is not registered with it yet:
            // `Shared::push` sets the flag before it sends, so a command
            // that comes after this look wakes the waker the last
            // `Pending` left with the channel (and one that came before
            // it was flagged). A look that finds commands drains the
            // channel to `Pending`, registering again.
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
                return Poll::Ready(());
            }
            if busy && !self.settled() {
                // Keep going while there is work, without a trip through
                // the scheduler; now and then let the runtime's other tasks
                // (e.g. callers woken by replies) run.
                spins += 1;
                if spins >= BUSY_SPINS {
                    self.core.publish_stale();
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                continue;
            }
            let wait = match self.core.before_sleep(cx.waker()) {
                Next::Round => continue,
                Next::Closed => return Poll::Ready(()),
                Next::Sleep(w) => w,
            };
            // A command flagged meanwhile (the flag's look is cheaper
            // than the wake-up it would otherwise cost).
            if !self.rx_registered || self.core.shared().queued.load(Ordering::Acquire) {
                continue;
            }
            // Readers of the status see this round's state while the task
            // sleeps (a reply's caller saw it already: the core publishes
            // before it delivers).
            self.core.publish_stale();
            // Register for the socket's next readiness edge: the one taken
            // at the top of this round took its waker (and a round that
            // read without producing work never looked again). Likewise for
            // writability while output waits for room.
            if self.take_edges(cx, wait.writable) {
                continue;
            }
            let Some(want) = wait.deadline.map(tokio::time::Instant::from_std) else {
                *armed = None;
                return Poll::Pending;
            };
            // Reset only for an earlier deadline: one armed earlier than
            // needed fires, the round finds nothing due, and the timer is
            // set again (the calls' deadlines move later with every call
            // while the first one's stays armed; a reset per call cost a
            // timer-wheel removal and insert).
            if armed.is_none_or(|a| want < a) {
                timer.as_mut().reset(want);
                *armed = Some(want);
                self.timer_waker = None;
            }
            // Not due by this round's clock, and it holds this waker from
            // an earlier poll: no need to poll it again (a timer never
            // fires before its instant, so the round after its wake-up
            // finds it due and polls it).
            let due = armed.is_none_or(|a| a <= tokio::time::Instant::from_std(now));
            if !due
                && self
                    .timer_waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
            {
                return Poll::Pending;
            }
            if timer.as_mut().poll(cx).is_pending() {
                self.timer_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // The deadline: round again (the engine or the provider handles
            // it); counted as a busy round so a deadline that does not move
            // cannot keep this loop from yielding.
            *armed = None;
            spins += 1;
            if spins >= BUSY_SPINS {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }

    /// Reconnects per the policy; true when a new connection is up.
    async fn reconnect_loop(&mut self) -> bool {
        let Some(rc) = self.reconnect.as_ref() else {
            return false;
        };
        let connector = rc.connector.clone();
        let policy = rc.policy;
        // The old socket goes away: deregister it first.
        self.afd = None;
        self.core.drop_link();
        let outcome = {
            // Borrowed by the attempts (`stop`) and, between their polls, by
            // the calls' deadlines.
            // (A mutex, never contended, rather than a `RefCell`: the task's
            // future must be `Send`.)
            let both = std::sync::Mutex::new((&mut self.rx, &mut self.core));
            let lock = || both.lock().unwrap_or_else(|p| p.into_inner());
            // Between attempts: a close ends the outage, other commands wait
            // for the new connection.
            let stop = || {
                let mut g = lock();
                let (rx, core) = &mut *g;
                if core.is_closing() {
                    return true;
                }
                while let Ok(cmd) = rx.try_recv() {
                    match cmd {
                        Cmd::Close => {
                            core.set_closing();
                            return true;
                        }
                        other => core.defer(other),
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
                let next = lock().1.expire_at(Instant::now());
                let at = tokio::time::Instant::from_std(next.unwrap_or_else(Instant::now));
                let cmd = std::future::poll_fn(|cx| lock().0.poll_recv(cx));
                tokio::select! {
                    r = attempts.as_mut() => break r,
                    () = tokio::time::sleep_until(at), if next.is_some() => {}
                    c = cmd, if rx_open => match c {
                        // Ends the outage at the next check (`stop`).
                        Some(Cmd::Close) => lock().1.set_closing(),
                        Some(other) => lock().1.defer(other),
                        None => rx_open = false,
                    },
                }
            }
        };
        match outcome {
            Ok(connected) => {
                tracing::info!(peer = %self.core.shared().peer, "rpc/rdma reconnected");
                Metrics::inc(&self.core.shared().metrics.connections);
                self.core.relink(connected);
                self.afd = register_fd(&mut self.core);
                true
            }
            Err(_) => false,
        }
    }

    async fn finish(mut self) {
        self.rx.close();
        let rx = &mut self.rx;
        self.core
            .finish_begin(std::iter::from_fn(|| rx.try_recv().ok()));
        for _ in 0..25 {
            if self.core.flush_close() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.core.publish_now();
        self.afd = None;
    }
}

/// Spawns the task (unconstrained by the cooperative budget: the shell
/// yields by itself, [`BUSY_SPINS`], and a budget-forced `Pending` from its
/// fd, channel or timer would leave that source unregistered for the
/// round).
pub(crate) fn spawn(shell: TaskShell, span: tracing::Span) -> tokio::task::JoinHandle<()> {
    tokio::spawn(tokio::task::unconstrained(tracing::Instrument::instrument(
        shell.run(),
        span,
    )))
}
