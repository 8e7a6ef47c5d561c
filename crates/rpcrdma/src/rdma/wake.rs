//! How a driver is woken: [`ThreadWake`] for one that runs on a thread of
//! its own (the thread shell, [`super::thread`]), [`TaskWake`] for one
//! driven by a tokio task and by the callers of its client (the task shell,
//! [`super::task`]).
//!
//! **ThreadWake**: a flag plus a socket pair the shell polls along with the
//! provider's socket. An octet goes on the socket pair only when the driver
//! is (about to be) asleep in `poll(2)`: a wake-up while it makes passes
//! only sets the flag, which the shell looks at before it sleeps. The
//! handshake is the usual one of two sequentially consistent flags: the
//! shell announces [`ThreadWake::sleeping`] and then reads the flag; a
//! waker sets the flag and then reads whether the shell sleeps. At least
//! one of the two sees the other, so no wake-up is lost and none costs a
//! system call while the driver is awake.
//!
//! **TaskWake**: the same handshake for a task shell, whose connection is
//! driven by whoever holds its lock (the driver task, or a caller starting
//! a call; see [`super::task`]). Every wake source of the connection (the
//! socket's readiness, the provider, the engine's Read-sink budget, the
//! command channel, the timer) holds one waker, [`TaskWake::waker`]. While
//! a holder is [active](TaskWake::begin) a wake-up only sets the flag,
//! which the holder takes at the start of each round and looks at before
//! it lets go ([`TaskWake::end`]); otherwise it wakes the driver task. So
//! a wake-up the holder causes itself (the provider's `arm` finding a Send
//! to confirm, a post waking the provider's waker) costs a flag, not a
//! task wake-up and a poll, and a wake-up while nobody holds the lock
//! always reaches the driver task, which makes the round unless a holder
//! took the flag meanwhile (then that holder's round saw the work).
//!
//! A **waiter** (the future of a caller whose call is the connection's only
//! one, [`super::slot::ReplyWait`]) may take the driver task's place: while
//! it is [delegated](TaskWake::delegate), a wake-up that would wake the
//! driver task wakes the waiter, which makes the round itself. It is
//! revoked when the waiter is done or dropped, when another call or a
//! command comes ([`TaskWake::revoke_any`]), and a wake-up that it may have
//! taken and not handled (the flag still set) then goes to the driver task.
//! [`TaskWake::hand_over`] always wakes the driver task.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};

/// See the module docs.
pub(crate) struct ThreadWake {
    fired: AtomicBool,
    /// True while the shell is in (or about to enter) `poll(2)`.
    asleep: AtomicBool,
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

impl ThreadWake {
    pub(crate) fn new() -> io::Result<Arc<ThreadWake>> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        let w = Arc::new(ThreadWake {
            fired: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            tx,
            rx,
            waker: std::sync::OnceLock::new(),
        });
        let _ = w
            .waker
            .set(Waker::from(Arc::new(WakeRef(Arc::downgrade(&w)))));
        Ok(w)
    }

    /// A waker for the provider and the engine (wakes this driver).
    pub(crate) fn waker(&self) -> &Waker {
        self.waker.get().unwrap_or(Waker::noop())
    }

    /// Wakes the driver: sets the flag, and writes one octet on the socket
    /// pair if the driver sleeps (unless a wake-up is pending already).
    pub(crate) fn wake(&self) {
        if self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.asleep.load(Ordering::SeqCst) {
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

    /// The shell is about to sleep: from now on wake-ups write an octet.
    /// False (and still awake) if a wake-up came already: no sleep then.
    fn sleeping(&self) -> bool {
        self.asleep.store(true, Ordering::SeqCst);
        if self.fired.load(Ordering::SeqCst) {
            self.asleep.store(false, Ordering::SeqCst);
            return false;
        }
        true
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
    /// `.1`) and on the wake-up socket, for at most `timeout`, unless a
    /// wake-up came already. Returns (socket ready, woken). An error (other
    /// than EINTR) counts as both, so the caller makes a pass (and the
    /// provider sees the error).
    pub(crate) fn poll_with(
        &self,
        sock: Option<(BorrowedFd<'_>, bool)>,
        timeout: Option<Duration>,
    ) -> (bool, bool) {
        if !self.sleeping() {
            return (false, true);
        }
        let r = self.poll_inner(sock, timeout);
        self.asleep.store(false, Ordering::SeqCst);
        r
    }

    fn poll_inner(
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

/// See the module docs.
pub(crate) struct TaskWake {
    /// A wake-up came since the holder's last take.
    fired: AtomicBool,
    /// A holder of the connection's lock makes rounds and looks at `fired`
    /// before it lets go.
    active: AtomicBool,
    /// The holder is arming the provider (or past it) in its last round:
    /// the provider's wake-ups count again (see [`TaskWake::provider_waker`]).
    arming: AtomicBool,
    /// The driver task's waker as its first poll set it: one task drives a
    /// connection for its life, so this is read (and compared) without a
    /// lock on every wake-up and poll of the driver task.
    driver: std::sync::OnceLock<Waker>,
    /// `Wakers::driver` replaced `driver` (a driver polled with another
    /// waker than its first: not seen in practice, kept correct).
    driver_moved: AtomicBool,
    /// The last delegated waiter's waker (and the driver task's, once it
    /// moved).
    wakers: Mutex<Wakers>,
    /// The delegated waiter's token, 0 when none is (the waker kept in
    /// `wakers` counts only while it is not 0).
    delegated: AtomicUsize,
}

#[derive(Default)]
struct Wakers {
    driver: Option<Waker>,
    waiter: Option<Waker>,
}

impl Wake for TaskWake {
    fn wake(self: Arc<Self>) {
        TaskWake::wake(&self);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        TaskWake::wake(self);
    }
}

/// The provider's waker of a [`TaskWake`].
struct ProviderWake(Arc<TaskWake>);

impl Wake for ProviderWake {
    fn wake(self: Arc<Self>) {
        self.0.wake_provider();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake_provider();
    }
}

impl TaskWake {
    /// Fired: the driver task's first poll makes a round.
    pub(crate) fn new() -> Arc<TaskWake> {
        Arc::new(TaskWake {
            fired: AtomicBool::new(true),
            active: AtomicBool::new(false),
            arming: AtomicBool::new(false),
            driver: std::sync::OnceLock::new(),
            driver_moved: AtomicBool::new(false),
            wakers: Mutex::new(Wakers::default()),
            delegated: AtomicUsize::new(0),
        })
    }

    /// The waker every wake source of the connection holds, except the
    /// provider.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }

    /// The waker the provider is armed with: as [`TaskWake::waker`], except
    /// that a wake-up while the holder makes a round and has not yet armed
    /// the provider again is dropped. The provider wakes its waker when
    /// work is posted to it (the holder's own posts, during its rounds) and
    /// when `arm` finds work at once; the round's step looks at the
    /// provider after any such wake-up, and the arm before the holder
    /// lets go looks again (and wakes at once if a pass would find work),
    /// so only a wake-up from that arm on can announce work nobody saw.
    /// Without this, the receive the engine posts again after each
    /// message cost another round.
    pub(crate) fn provider_waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::new(ProviderWake(self.clone())))
    }

    fn wake_provider(&self) {
        if self.active.load(Ordering::SeqCst) && !self.arming.load(Ordering::SeqCst) {
            return;
        }
        self.wake();
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Wakers> {
        self.wakers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The driver task's waker (a comparison without a lock when
    /// unchanged; only the driver task calls this).
    pub(crate) fn set_driver(&self, w: &Waker) {
        if !self.driver_moved.load(Ordering::SeqCst) {
            match self.driver.get() {
                Some(d) if d.will_wake(w) => return,
                Some(_) => {}
                None => {
                    if self.driver.set(w.clone()).is_ok() {
                        return;
                    }
                }
            }
        }
        let mut d = self.wakers();
        if !d.driver.as_ref().is_some_and(|d| d.will_wake(w)) {
            d.driver = Some(w.clone());
        }
        // Before the driver looks at the flag (sequentially consistent,
        // as `wake` sets the flag before it reads this): a wake-up either
        // is seen by that look or wakes the waker kept here.
        self.driver_moved.store(true, Ordering::SeqCst);
    }

    /// The waiter `token` (not 0) takes the driver task's wake-ups (see
    /// the module docs), replacing any other waiter. A no-op while it is
    /// delegated already.
    pub(crate) fn delegate(&self, token: usize, w: &Waker) {
        if self.delegated.load(Ordering::SeqCst) == token {
            return;
        }
        let mut d = self.wakers();
        if !d.waiter.as_ref().is_some_and(|o| o.will_wake(w)) {
            d.waiter = Some(w.clone());
        }
        self.delegated.store(token, Ordering::SeqCst);
    }

    /// The waiter `token` gives the wake-ups back (a no-op if another one
    /// took its place or it was revoked).
    pub(crate) fn revoke(&self, token: usize) {
        if self.delegated.load(Ordering::SeqCst) == token
            && self
                .delegated
                .compare_exchange(token, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.after_revoke();
        }
    }

    /// Any waiter gives the wake-ups back (another call or a command came:
    /// the driver task serves the connection again).
    pub(crate) fn revoke_any(&self) {
        if self.delegated.load(Ordering::SeqCst) != 0
            && self.delegated.swap(0, Ordering::SeqCst) != 0
        {
            self.after_revoke();
        }
    }

    /// A wake-up the waiter may have taken without making its round (the
    /// flag still set, nobody active): the driver task's now. (A wake-up
    /// that found the waiter delegated set the flag before it woke it.)
    fn after_revoke(&self) {
        if self.fired.load(Ordering::SeqCst) && !self.active.load(Ordering::SeqCst) {
            self.wake_driver_task();
        }
    }

    /// True while a waiter is delegated (tests).
    #[cfg(test)]
    pub(crate) fn is_delegated(&self) -> bool {
        self.delegated.load(Ordering::SeqCst) != 0
    }

    /// A wake-up: sets the flag; wakes the driver task unless the flag was
    /// set already (someone will look at it) or a holder is active (it
    /// looks at the flag before it lets go).
    pub(crate) fn wake(&self) {
        if self.fired.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.active.load(Ordering::SeqCst) {
            return;
        }
        self.wake_driver();
    }

    /// Wakes the delegated waiter, else the driver task. (A waiter is
    /// delegated under the lock, its waker kept before its token: one seen
    /// delegated here has its waker in place once the lock is taken. One
    /// revoked meanwhile hands the wake-up to the driver task: this
    /// wake-up set the flag before it looked, and [`TaskWake::revoke`]
    /// looks at the flag after it takes the token back.)
    fn wake_driver(&self) {
        if self.delegated.load(Ordering::SeqCst) == 0 {
            self.wake_driver_task();
            return;
        }
        if let Some(w) = self.wakers().waiter.as_ref() {
            w.wake_by_ref();
        }
    }

    /// Wakes the driver task (never a waiter).
    fn wake_driver_task(&self) {
        if !self.driver_moved.load(Ordering::SeqCst) {
            if let Some(w) = self.driver.get() {
                w.wake_by_ref();
            }
            return;
        }
        let d = self.wakers();
        if let Some(w) = d.driver.as_ref() {
            w.wake_by_ref();
        }
    }

    /// The holder of the lock starts making rounds.
    pub(crate) fn begin(&self) {
        self.arming.store(false, Ordering::SeqCst);
        self.active.store(true, Ordering::SeqCst);
    }

    /// At the start of a round: takes the flag (the round looks at every
    /// source; a wake-up from now on sets it again). True if it was set.
    pub(crate) fn take(&self) -> bool {
        self.arming.store(false, Ordering::SeqCst);
        self.fired.swap(false, Ordering::SeqCst)
    }

    /// The holder is about to arm the provider: its wake-ups count from now
    /// on (until the next [`TaskWake::take`]).
    pub(crate) fn arming(&self) {
        self.arming.store(true, Ordering::SeqCst);
    }

    /// True if a wake-up came since the last take.
    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// The holder stops making rounds (every source registered with
    /// [`TaskWake::waker`]). True if a wake-up came since its last take:
    /// then it must make another round (after [`TaskWake::begin`]), since
    /// that wake-up may have woken nobody.
    #[must_use]
    pub(crate) fn end(&self) -> bool {
        self.active.store(false, Ordering::SeqCst);
        self.fired.load(Ordering::SeqCst)
    }

    /// A holder that stops before its work is done (a busy connection
    /// yielding, a caller leaving the rest to the driver task): the flag
    /// set and the driver task woken.
    pub(crate) fn hand_over(&self) {
        self.fired.store(true, Ordering::SeqCst);
        self.wake_driver_task();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    /// Counts its wake-ups.
    struct Count(AtomicU32);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The task handshake: a wake-up reaches the driver task once while
    /// nobody holds the lock (more wake-ups before a take cost nothing), is
    /// left to an active holder (which must make another round when it lets
    /// go), and the provider's wake-ups are dropped during a round until the
    /// holder arms it again.
    #[test]
    fn task_wake_reaches_the_driver_once_or_the_active_holder() {
        let count = Arc::new(Count(AtomicU32::new(0)));
        let driver = Waker::from(count.clone());
        let woken = || count.0.load(Ordering::SeqCst);
        let w = TaskWake::new();
        let (conn, prov) = (w.waker(), w.provider_waker());
        // Fired from the start, so the first poll makes a round.
        assert!(w.is_fired());
        w.set_driver(&driver);
        assert!(w.take());
        // Idle: the first wake-up wakes the driver task, the next ones only
        // find the flag set.
        conn.wake_by_ref();
        conn.wake_by_ref();
        prov.wake_by_ref();
        assert_eq!(woken(), 1);
        // A holder takes the flag, then wake-ups while it is active cost
        // only the flag, and it must round again when it lets go.
        w.begin();
        assert!(w.take());
        conn.wake_by_ref();
        assert_eq!(woken(), 1);
        assert!(w.end());
        w.begin();
        assert!(w.take());
        // The provider's wake-ups during a round (the holder's own posts)
        // are dropped; from its arm on they count.
        prov.wake_by_ref();
        assert!(!w.is_fired());
        w.arming();
        prov.wake_by_ref();
        assert!(w.is_fired());
        assert!(w.end());
        assert_eq!(woken(), 1);
        // A holder that lets go with nothing fired: the next wake-up goes to
        // the driver task again, the provider's too.
        w.begin();
        w.take();
        assert!(!w.end());
        prov.wake_by_ref();
        assert_eq!(woken(), 2);
        w.take();
        // Handing over: the flag set and the driver task woken.
        w.hand_over();
        assert!(w.is_fired());
        assert_eq!(woken(), 3);
        // The driver's waker is replaced only when it changes.
        let other = Arc::new(Count(AtomicU32::new(0)));
        w.set_driver(&Waker::from(other.clone()));
        w.take();
        conn.wake_by_ref();
        assert_eq!((woken(), other.0.load(Ordering::SeqCst)), (3, 1));
    }

    /// A delegated waiter takes the wake-ups the driver task would get
    /// (only those: a hand-over still goes to the driver task); it gives
    /// them back when revoked by its own token or by anyone, and a
    /// wake-up it took and did not handle then goes to the driver task.
    #[test]
    fn a_delegated_waiter_takes_the_driver_s_wake_ups_until_revoked() {
        let (driver, waiter) = (
            Arc::new(Count(AtomicU32::new(0))),
            Arc::new(Count(AtomicU32::new(0))),
        );
        let n = |c: &Arc<Count>| c.0.load(Ordering::SeqCst);
        let w = TaskWake::new();
        let conn = w.waker();
        w.set_driver(&Waker::from(driver.clone()));
        w.take();
        w.delegate(7, &Waker::from(waiter.clone()));
        assert!(w.is_delegated());
        conn.wake_by_ref();
        assert_eq!((n(&driver), n(&waiter)), (0, 1));
        // Another token cannot revoke it; the waiter handles the wake-up
        // (takes the flag) and is woken for the next one.
        w.revoke(8);
        assert!(w.is_delegated());
        w.begin();
        assert!(w.take());
        assert!(!w.end());
        conn.wake_by_ref();
        assert_eq!((n(&driver), n(&waiter)), (0, 2));
        // A hand-over is the driver task's.
        w.hand_over();
        assert_eq!((n(&driver), n(&waiter)), (1, 2));
        w.take();
        // Revoked with a wake-up taken and not handled: the driver task's.
        conn.wake_by_ref();
        assert_eq!((n(&driver), n(&waiter)), (1, 3));
        w.revoke(7);
        assert!(!w.is_delegated());
        assert_eq!((n(&driver), n(&waiter)), (2, 3));
        w.take();
        // Revoked with nothing pending: nobody woken; later wake-ups go to
        // the driver task.
        w.delegate(9, &Waker::from(waiter.clone()));
        w.revoke_any();
        assert_eq!((n(&driver), n(&waiter)), (2, 3));
        conn.wake_by_ref();
        assert_eq!((n(&driver), n(&waiter)), (3, 3));
    }

    /// The driver task's waker is kept on its first poll and read without
    /// a lock; a driver polled with another waker is woken through that
    /// one from then on (also for a hand-over and a waiter's revoke).
    #[test]
    fn a_driver_polled_with_another_waker_is_woken_through_it() {
        let (a, b) = (
            Arc::new(Count(AtomicU32::new(0))),
            Arc::new(Count(AtomicU32::new(0))),
        );
        let n = |c: &Arc<Count>| c.0.load(Ordering::SeqCst);
        let w = TaskWake::new();
        let conn = w.waker();
        w.set_driver(&Waker::from(a.clone()));
        w.set_driver(&Waker::from(a.clone()));
        w.take();
        conn.wake_by_ref();
        assert_eq!((n(&a), n(&b)), (1, 0));
        w.take();
        w.set_driver(&Waker::from(b.clone()));
        conn.wake_by_ref();
        assert_eq!((n(&a), n(&b)), (1, 1));
        w.hand_over();
        assert_eq!((n(&a), n(&b)), (1, 2));
        w.take();
        w.delegate(3, &Waker::from(a.clone()));
        conn.wake_by_ref();
        assert_eq!((n(&a), n(&b)), (2, 2));
        w.revoke(3);
        assert_eq!((n(&a), n(&b)), (2, 3));
    }

    #[test]
    fn wake_from_another_thread_ends_a_poll_and_awake_wakes_cost_no_octet() {
        let w = ThreadWake::new().unwrap();
        // While the driver is awake a wake-up only sets the flag.
        w.wake();
        assert!(w.take_fired());
        // Nothing was written: a poll now times out.
        let (_, woken) = w.poll_with(None, Some(Duration::from_millis(10)));
        assert!(!woken);
        // A wake-up before the sleep: no sleep at all.
        w.wake();
        let (_, woken) = w.poll_with(None, Some(Duration::from_secs(10)));
        assert!(woken);
        assert!(w.take_fired());
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
