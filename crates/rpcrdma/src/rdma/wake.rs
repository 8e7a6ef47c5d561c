//! How other threads wake a driver that runs on a thread of its own (the
//! thread shell, [`super::thread`]): a flag plus a socket pair the shell
//! polls along with the provider's socket.
//!
//! An octet goes on the socket pair only when the driver is (about to be)
//! asleep in `poll(2)`: a wake-up while it makes passes only sets the flag,
//! which the shell looks at before it sleeps. The handshake is the usual
//! one of two sequentially consistent flags: the shell announces
//! [`ThreadWake::sleeping`] and then reads the flag; a waker sets the flag
//! and then reads whether the shell sleeps. At least one of the two sees
//! the other, so no wake-up is lost and none costs a system call while the
//! driver is awake.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
