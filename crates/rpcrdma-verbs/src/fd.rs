//! File-descriptor plumbing: non-blocking mode, bounded waits, the epoll
//! set a connection exposes as its one readiness fd, and the eventfd
//! behind a listener's waker.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use libc::c_int;

fn cvt(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Puts `fd` (a channel fd owned by rdma-core) into non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd number has no memory-safety precondition; a
    // stale fd fails with EBADF.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

/// Milliseconds left until `deadline` for poll(2), rounded up (0 when
/// past).
pub fn millis_until(deadline: Instant) -> c_int {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = left.as_micros().div_ceil(1000);
    c_int::try_from(ms).unwrap_or(c_int::MAX)
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`:
/// forever); returns the readable ones' indexes as a bit set.
pub fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<u32> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = match timeout {
        None => -1,
        Some(t) => millis_until(Instant::now() + t),
    };
    loop {
        // SAFETY: `p` is a valid array of `p.len()` pollfd structures.
        let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break;
    }
    Ok(p.iter()
        .enumerate()
        .filter(|(_, x)| x.revents != 0)
        .fold(0, |m, (i, _)| m | (1 << i)))
}

/// An epoll set over a connection's completion channel and CM event
/// channel: level-triggered, readable while either has something.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A set holding `fds` (readable interest).
    pub fn new(fds: &[RawFd]) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 has no precondition; we own the new fd.
        let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `ep` is a fresh fd nobody else owns.
        let ep = Epoll(unsafe { OwnedFd::from_raw_fd(ep) });
        for &fd in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: `ev` is a valid epoll_event; `fd` is a live channel
            // fd of the connection, which outlives the set.
            cvt(unsafe { libc::epoll_ctl(ep.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        }
        Ok(ep)
    }

    /// The set's fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// An eventfd that wakes a listener's poll from any thread.
#[derive(Debug)]
pub struct WakeFd(OwnedFd);

impl WakeFd {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<Arc<WakeFd>> {
        // SAFETY: eventfd has no precondition; we own the new fd.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is fresh and ours.
        Ok(Arc::new(WakeFd(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Its raw fd, for poll(2).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Clears pending wake-ups.
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 octets into `v` from an eventfd we own;
        // non-blocking, so at worst EAGAIN.
        unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
    }

    /// A [`Waker`] that signals this fd.
    pub fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::clone(self))
    }
}

impl Wake for WakeFd {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let one = 1u64;
        // SAFETY: writes 8 octets from `one` to an eventfd we own; a full
        // counter (EAGAIN) still leaves it readable, which is all we need.
        unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waker_makes_the_fd_readable_once_drained_it_waits() {
        let w = WakeFd::new().expect("eventfd");
        assert_eq!(
            wait_readable(&[w.raw()], Some(Duration::ZERO)).expect("poll"),
            0
        );
        w.waker().wake_by_ref();
        assert_eq!(
            wait_readable(&[w.raw()], Some(Duration::from_secs(5))).expect("poll"),
            1
        );
        w.drain();
        assert_eq!(
            wait_readable(&[w.raw()], Some(Duration::ZERO)).expect("poll"),
            0
        );
        let ep = Epoll::new(&[w.raw()]).expect("epoll");
        w.waker().wake();
        let epfd = ep.fd().as_raw_fd();
        assert_eq!(
            wait_readable(&[epfd], Some(Duration::from_secs(5))).expect("poll"),
            1
        );
    }
}
