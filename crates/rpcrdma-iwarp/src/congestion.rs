//! TCP congestion control for connections whose two ends share a host
//! ([`IwarpConfig::local_congestion`]).
//!
//! A pacing congestion control (BBR, the default of many distributions)
//! spaces each segment by its estimate of the path's bandwidth. Over
//! loopback that estimate measures the sender's own CPU, and it settles per
//! connection: above the kernel's copy speed (pacing never binds), or below
//! it, where every 1 MiB burst leaves in pacing-timer steps (a
//! `tcp_pace_kick` hrtimer, then `tcp_release_cb` or the TSQ tasklet to
//! push the next segments) and costs twice the CPU. With no bottleneck queue
//! to protect, pacing a local connection buys nothing, so local connections
//! get a non-pacing algorithm (Reno by default: every kernel has it and lets
//! any user choose it).
//!
//! The algorithm is chosen **before** the kernel initialises the default
//! one where the peer is known to be local in advance: an initiator that
//! connects to a loopback address sets it on the socket before `connect`,
//! a listener bound to a loopback address sets it on the listening socket
//! (accepted sockets inherit it). Switching an established socket away from
//! BBR leaves the socket's pacing switched on, at the new algorithm's rate
//! (for Reno twice or 1.2 times cwnd per smoothed RTT, far above the copy
//! speed on loopback but not guaranteed to be), so a connection found local
//! only once established (a peer at our own non-loopback address, or a
//! wildcard listener) is switched then, as the next best thing.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::event::PollFlags;
use rustix::net::{AddressFamily, SocketFlags, SocketType};

use crate::cm::IwarpConfig;

/// True when the peer of `sock` is on this host: a loopback address, or
/// the address this end uses.
pub(crate) fn peer_is_local(sock: &TcpStream) -> bool {
    match (sock.peer_addr(), sock.local_addr()) {
        (Ok(peer), Ok(local)) => peer.ip().is_loopback() || peer.ip() == local.ip(),
        _ => false,
    }
}

/// Sets `cc` on `fd`. Best effort: a kernel without the algorithm (or a user
/// not allowed it) keeps the system default, which costs speed only.
fn set(fd: impl AsFd, cc: &str) -> bool {
    rustix::net::sockopt::set_tcp_congestion(fd, cc).is_ok()
}

/// The algorithm `cfg` wants for a socket whose peer (or bound address) is
/// `addr`, if that is a loopback address.
fn for_loopback<'a>(cfg: &'a IwarpConfig, addr: &SocketAddr) -> Option<&'a str> {
    cfg.local_congestion
        .as_deref()
        .filter(|_| addr.ip().is_loopback())
}

/// An established socket (either role): switches it to
/// [`IwarpConfig::local_congestion`] if its peer is on this host and it
/// does not use that algorithm yet (setting the algorithm a socket has is a
/// no-op in the kernel). Returns whether the socket now uses it.
pub(crate) fn on_established(sock: &TcpStream, cfg: &IwarpConfig) -> bool {
    match cfg.local_congestion.as_deref() {
        Some(cc) if peer_is_local(sock) => set(sock, cc),
        _ => false,
    }
}

/// A listening socket about to be bound to `a`: with a loopback address,
/// every peer is local, and the sockets it accepts inherit the algorithm
/// set here (the default one is never initialised on them).
pub(crate) fn before_listen(fd: impl AsFd, a: &SocketAddr, cfg: &IwarpConfig) {
    if let Some(cc) = for_loopback(cfg, a) {
        set(fd, cc);
    }
}

/// A TCP connection to `to` (blocking once connected, as
/// `TcpStream::connect` returns it), within `timeout` if given; to a
/// loopback address with [`IwarpConfig::local_congestion`] chosen before
/// `connect`.
pub(crate) fn connect(
    to: &SocketAddr,
    timeout: Option<Duration>,
    cfg: &IwarpConfig,
) -> io::Result<TcpStream> {
    let Some(cc) = for_loopback(cfg, to) else {
        return match timeout {
            Some(t) => TcpStream::connect_timeout(to, t),
            None => TcpStream::connect(to),
        };
    };
    let family = if to.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    set(&fd, cc);
    match rustix::net::connect(&fd, to) {
        Ok(()) => {}
        Err(rustix::io::Errno::INPROGRESS) => {
            if !crate::tcp::wait_fd(&fd, PollFlags::OUT, timeout)? {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection timed out",
                ));
            }
            if let Err(e) = rustix::net::sockopt::socket_error(&fd)? {
                return Err(e.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    let s = TcpStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn cc_of(s: &TcpStream) -> String {
        rustix::net::sockopt::tcp_congestion(s).unwrap_or_default()
    }

    /// The kernel offers Reno to everyone; the test needs nothing else.
    #[test]
    fn a_loopback_connection_gets_the_local_algorithm_on_both_ends() {
        let cfg = IwarpConfig::default();
        let Some(want) = cfg.local_congestion.clone() else {
            eprintln!("SKIPPED: RPCRDMA_LOCAL_CONGESTION=system in the environment");
            return;
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let c = connect(&to, Some(Duration::from_secs(5)), &cfg).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(cc_of(&c), want, "set before connect");
        assert!(on_established(&s, &cfg));
        assert_eq!(cc_of(&s), want, "set once established");
    }

    #[test]
    fn a_loopback_listener_hands_the_local_algorithm_to_what_it_accepts() {
        let cfg = IwarpConfig::default();
        let Some(want) = cfg.local_congestion.clone() else {
            eprintln!("SKIPPED: RPCRDMA_LOCAL_CONGESTION=system in the environment");
            return;
        };
        let l = crate::tcp::Listener::bind("127.0.0.1:0", cfg).unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (tl, _) = l.parts();
        tl.set_nonblocking(false).unwrap();
        let (s, _) = tl.accept().unwrap();
        assert_eq!(cc_of(&s), want, "inherited from the listener");
    }

    #[test]
    fn system_keeps_the_default() {
        let cfg = IwarpConfig {
            local_congestion: None,
            ..IwarpConfig::default()
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let plain = TcpStream::connect(to).unwrap();
        let c = connect(&to, None, &cfg).unwrap();
        let _ = l.accept().unwrap();
        assert_eq!(cc_of(&c), cc_of(&plain));
        assert!(!on_established(&c, &cfg));
    }

    #[test]
    fn a_refused_connection_is_an_error() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        drop(l);
        let e = connect(&to, Some(Duration::from_secs(5)), &IwarpConfig::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
