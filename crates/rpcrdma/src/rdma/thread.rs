//! The thread shell: a connection's [`Core`] driven by one thread, which
//! sleeps in the socket's `recv(2)` or in `poll(2)` (blocking mode).
//!
//! The same rounds as the task shell, without the task hand-offs: a
//! blocking server runs each connection on a thread of its own
//! ([`ThreadShell::run`], on tokio's blocking pool so that handlers that
//! wait can still be spawned on the runtime); a blocking client's calling
//! thread drives its connection itself ([`super::RdmaBlockingClient`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::core::Core;
use super::handle::Cmd;
use super::wake::ThreadWake;

/// The longest sleep in a socket receive call: bounds how long a command
/// from another thread (a server's shutdown closing the connection) waits,
/// since only the socket wakes that call.
const RECV_TICK: Duration = Duration::from_millis(50);

/// See the module docs.
pub(crate) struct ThreadShell {
    core: Core,
    rx: mpsc::UnboundedReceiver<Cmd>,
    rx_done: bool,
    wake: Arc<ThreadWake>,
    /// The provider sleeps in its socket's receive call (see
    /// [`ThreadShell::wait`]).
    blocking_reads: bool,
    /// At a server: a backchannel call came from another thread, so the
    /// shell must stay wakeable (poll(2) from now on).
    cross_thread_calls: bool,
}

impl ThreadShell {
    pub(crate) fn new(
        mut core: Core,
        rx: mpsc::UnboundedReceiver<Cmd>,
        wake: Arc<ThreadWake>,
    ) -> ThreadShell {
        // Woken (from any thread) when the shared Read-sink budget frees
        // up for a call of this connection.
        core.set_waker(wake.waker());
        // The shell polls the fd itself and the provider reads only after
        // it was readable.
        let gate = core.wait_fd().is_some();
        core.set_read_gate(gate);
        let blocking_reads = core.set_blocking_reads(true);
        ThreadShell {
            core,
            rx,
            rx_done: false,
            wake,
            blocking_reads,
            cross_thread_calls: false,
        }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    pub(crate) fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    /// One round: commands, then provider and engine; true if anything
    /// moved.
    pub(crate) fn pass(&mut self) -> bool {
        // This round looks at everything a wake-up so far could be about
        // (commands, provider); one during the round sets the flag again.
        // Without this, a reply queued by an inline handler (or a post
        // that woke the provider's waker) cost an extra empty round.
        self.wake.take_fired();
        // The channel only when something was queued since the last look
        // (the flag is set after the send, so clearing it first misses
        // nothing: a command queued after this sets it again, and wakes
        // the shell).
        let queued = self.core.shared().queued.swap(false, Ordering::AcqRel);
        let (rx, rx_done, cross) = (
            &mut self.rx,
            &mut self.rx_done,
            &mut self.cross_thread_calls,
        );
        let client = self.core.shared().client;
        let mut next = || {
            if !queued {
                return None;
            }
            match rx.try_recv() {
                Ok(c) => {
                    // A call from another thread (the backchannel at a
                    // server): its reply must be able to wake us.
                    *cross |= !client && matches!(c, Cmd::Call { .. });
                    Some(c)
                }
                Err(mpsc::error::TryRecvError::Empty) => None,
                Err(mpsc::error::TryRecvError::Disconnected) if !*rx_done => {
                    *rx_done = true;
                    Some(Cmd::Close)
                }
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            }
        };
        self.core.round(Instant::now(), &mut next)
    }

    /// True when the round just made left nothing for another: no command
    /// queued or deferred, no wake-up, and the provider settled. (The round
    /// handled the deadlines due by its clock; [`ThreadShell::wait`] sleeps
    /// no longer than the next one.) The shell then sleeps at once: after a
    /// call was answered inline, the round that sent the reply is the last
    /// before the sleep, not the one before an empty round.
    pub(crate) fn settled(&self) -> bool {
        !self.core.shared().queued.load(Ordering::Acquire)
            && !self.core.has_deferred()
            && !self.wake.is_fired()
            && self.core.provider_settled()
    }

    /// Sleeps until the provider's socket is readable (or writable while
    /// output waits for room), another thread queued a command or woke the
    /// provider's or the engine's waker, the core's deadline passes, or
    /// `deadline` passes. Spurious returns are fine: the caller makes a
    /// round after each.
    pub(crate) fn wait(&mut self, deadline: Option<Instant>) {
        // A state changed but published less than PUBLISH_INTERVAL ago is
        // published when that interval is over: a sleep in poll(2) ends
        // then; a receive call's timeout is left alone (a new one is a
        // system call), so its tick ends it at the latest.
        let publish_at = self.core.publish_stale();
        // Sleep in the socket's receive call (one system call instead of
        // poll(2) and a read) when nothing but the socket can bring work:
        // always at a blocking client (only its own thread queues
        // commands); at a server while no handler runs elsewhere (its
        // reply would come from another thread) and no backchannel call
        // was made. Other commands (a close) wait at most RECV_TICK. The
        // provider itself says whether it has work first (see
        // `Provider::read_blocking`), so its waker is not armed.
        // Nor while a call waits for the shared Read-sink budget: another
        // connection's thread wakes us when it frees up, through the
        // wake-up socket that only poll(2) watches.
        let recv = self.blocking_reads
            && !self.core.awaits_replies()
            && !self.cross_thread_calls
            && !self.core.waits_for_read_budget();
        if !recv {
            self.core.arm(self.wake.waker());
            if self.wake.take_fired() {
                return;
            }
        }
        let w = self.core.wait();
        let until = match (w.deadline, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The round just before read the clock.
        let timeout = until.map(|t| t.saturating_duration_since(self.core.now()));
        if timeout.is_some_and(|t| t.is_zero()) {
            return;
        }
        if recv {
            let t = timeout.map_or(RECV_TICK, |t| t.min(RECV_TICK));
            match self.core.read_blocking(t) {
                Some(Ok(_)) => return,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "blocking read unavailable; polling");
                    self.blocking_reads = false;
                }
                None => self.blocking_reads = false,
            }
            // Polling from now on: arm the waker as that path does.
            self.core.arm(self.wake.waker());
            if self.wake.take_fired() {
                return;
            }
        }
        let until = match (until, publish_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = until.map(|t| t.saturating_duration_since(self.core.now()));
        let write = self.core.wants_write();
        let (sock, woken) = self
            .wake
            .poll_with(self.core.wait_fd().map(|fd| (fd, write)), timeout);
        if sock {
            self.core.note_readable();
        }
        if woken {
            self.wake.drain();
        }
    }

    /// A blocking server connection's life on its own thread: rounds while
    /// anything moves, [`ThreadShell::wait`] otherwise, until the engine
    /// closes.
    pub(crate) fn run(mut self) {
        let mut busy_rounds = 0u32;
        loop {
            let busy = self.pass();
            if self.core.is_closed() {
                break;
            }
            if !busy || self.settled() {
                busy_rounds = 0;
                self.wait(None);
            } else {
                // Under continuous load the thread may not sleep for a
                // long time: publish now and then anyway.
                busy_rounds += 1;
                if busy_rounds.is_multiple_of(64) {
                    let _ = self.core.publish_stale();
                }
            }
        }
        self.finish_begin();
        for _ in 0..25 {
            if self.core.flush_close() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.core.publish_now();
    }

    /// The connection is over: fails every call still waiting or queued
    /// and starts the provider's close.
    pub(crate) fn finish_begin(&mut self) {
        self.rx.close();
        let rx = &mut self.rx;
        self.core
            .finish_begin(std::iter::from_fn(|| rx.try_recv().ok()));
    }
}
