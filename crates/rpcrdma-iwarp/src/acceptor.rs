//! The passive side for servers: one thread drives every pending MPA
//! exchange at once.
//!
//! [`Acceptor::poll`] sleeps in one `poll(2)` over the listener, every
//! connection that still owes its MPA Request, and a wake-up socket
//! ([`AcceptorWaker`]); then it accepts what the listener has, reads what
//! the pending connections sent, and closes those whose deadline passed.
//! Which connections are pending, for how long, and which one is evicted
//! when a cap is reached is the sans-IO [`PendingTable`] (see
//! [`crate::admission`]). No connection holds the thread: a silent peer
//! costs one socket and a small buffer until its deadline or eviction.
//!
//! A connection whose Request is complete leaves the acceptor as a
//! [`PendingConnection`] (its provider created only then), which the
//! caller answers with [`PendingConnection::accept`] or
//! [`PendingConnection::reject`]; both write at most one MPA frame into a
//! fresh socket's empty send buffer, so they do not wait on the peer.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::admission::{AcceptLimits, Eviction, PendingId, PendingTable};
use crate::cm::{Handshake, HandshakeError};
use crate::tcp::{read_request, Listener, PendingConnection, RequestRead};

/// Most connections taken from the listener in one [`Acceptor::poll`]
/// (so a flood of new connections cannot starve the reads of the pending
/// ones).
const ACCEPT_BATCH: usize = 256;
/// How long accepting pauses after the listener failed (e.g. out of file
/// descriptors), so that the loop does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What [`Acceptor::poll`] found.
#[derive(Debug)]
pub enum AcceptEvent {
    /// A connection's MPA Request arrived: answer it.
    Request(Box<PendingConnection>),
    /// A connection was closed before its Request.
    Closed {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: CloseReason,
    },
    /// The listener failed to accept (e.g. no file descriptor left);
    /// accepting pauses briefly.
    ListenerError(io::Error),
}

/// Why a pending connection was closed.
#[derive(Debug)]
pub enum CloseReason {
    /// No complete Request within [`AcceptLimits::request_timeout`].
    TimedOut,
    /// Evicted to make room for a newer connection.
    Evicted(Eviction),
    /// The Request was invalid.
    Invalid(HandshakeError),
    /// The peer closed (or reset) before its Request.
    PeerClosed,
    /// The socket failed.
    Failed(io::Error),
}

/// Wakes an [`Acceptor::poll`] from another thread (e.g. to stop it).
#[derive(Clone, Debug)]
pub struct AcceptorWaker(Arc<UnixStream>);

impl AcceptorWaker {
    /// Makes the current or next `poll` return at once.
    pub fn wake(&self) {
        // Full (WouldBlock): a wake-up is pending anyway.
        let _ = (&*self.0).write(&[1]);
    }
}

#[derive(Debug)]
struct Pending {
    sock: TcpStream,
    peer: SocketAddr,
    hs: Handshake,
}

/// A listener and the connections that owe their MPA Request. See the
/// [module docs](self).
#[derive(Debug)]
pub struct Acceptor {
    listener: Listener,
    table: PendingTable,
    pending: HashMap<PendingId, Pending>,
    wake_rx: UnixStream,
    waker: AcceptorWaker,
    paused_until: Option<Instant>,
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: d.subsec_nanos().into(),
    }
}

impl Acceptor {
    /// Drives `listener`'s new connections under `limits`.
    pub fn new(listener: Listener, limits: AcceptLimits) -> io::Result<Self> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Acceptor {
            listener,
            table: PendingTable::new(limits),
            pending: HashMap::new(),
            wake_rx: rx,
            waker: AcceptorWaker(Arc::new(tx)),
            paused_until: None,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that wakes [`Acceptor::poll`].
    pub fn waker(&self) -> AcceptorWaker {
        self.waker.clone()
    }

    /// Connections that owe their Request.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Waits until something happens (a connection, input from a pending
    /// one, a deadline, the waker) or `timeout` passes (`None`: no limit
    /// but the deadlines), then does what can be done, appending to
    /// `events`. Returns true if the waker was used.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<AcceptEvent>,
    ) -> io::Result<bool> {
        let now = Instant::now();
        self.expire(now, events);
        if self.paused_until.is_some_and(|t| t <= now) {
            self.paused_until = None;
        }
        let wait = [
            timeout,
            self.table
                .next_deadline()
                .map(|d| d.saturating_duration_since(now)),
            self.paused_until.map(|d| d.saturating_duration_since(now)),
        ]
        .into_iter()
        .flatten()
        .min();
        let (woken, listener_ready, readable) = self.wait(wait)?;
        if woken {
            let mut b = [0u8; 64];
            while matches!((&self.wake_rx).read(&mut b), Ok(n) if n > 0) {}
        }
        // Requests that arrived first, then new connections (so a burst of
        // them cannot evict a connection whose Request is already here).
        for id in readable {
            self.read(id, events);
        }
        if listener_ready {
            self.accept_batch(events);
        }
        self.expire(Instant::now(), events);
        Ok(woken)
    }

    /// One `poll(2)`: (waker used, listener readable, pending ones with
    /// input or an error).
    fn wait(&self, wait: Option<Duration>) -> io::Result<(bool, bool, Vec<PendingId>)> {
        let (l, _) = self.listener.parts();
        let mut fds = Vec::with_capacity(self.pending.len() + 2);
        fds.push(PollFd::new(&self.wake_rx, PollFlags::IN));
        let listening = self.paused_until.is_none();
        if listening {
            fds.push(PollFd::new(l, PollFlags::IN));
        }
        let mut ids = Vec::with_capacity(self.pending.len());
        for (id, p) in &self.pending {
            fds.push(PollFd::new(&p.sock, PollFlags::IN));
            ids.push(*id);
        }
        let ts = wait.map(timespec);
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok((false, false, Vec::new())),
            Err(e) => return Err(e.into()),
        }
        let ready = |f: &PollFd<'_>| !f.revents().is_empty();
        let woken = ready(&fds[0]);
        let skip = if listening { 2 } else { 1 };
        let listener_ready = listening && ready(&fds[1]);
        let readable = ids
            .into_iter()
            .zip(&fds[skip..])
            .filter(|(_, f)| ready(f))
            .map(|(id, _)| id)
            .collect();
        Ok((woken, listener_ready, readable))
    }

    fn close(&mut self, id: PendingId, reason: CloseReason, events: &mut Vec<AcceptEvent>) {
        self.table.remove(id);
        if let Some(p) = self.pending.remove(&id) {
            let _ = p.sock.shutdown(std::net::Shutdown::Both);
            events.push(AcceptEvent::Closed {
                peer: p.peer,
                reason,
            });
        }
    }

    fn expire(&mut self, now: Instant, events: &mut Vec<AcceptEvent>) {
        while let Some(id) = self.table.pop_expired(now) {
            self.close(id, CloseReason::TimedOut, events);
        }
    }

    fn accept_batch(&mut self, events: &mut Vec<AcceptEvent>) {
        for _ in 0..ACCEPT_BATCH {
            let (sock, peer) = match self.listener.parts().0.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    self.paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    events.push(AcceptEvent::ListenerError(e));
                    return;
                }
            };
            if let Err(e) = sock.set_nonblocking(true) {
                events.push(AcceptEvent::Closed {
                    peer,
                    reason: CloseReason::Failed(e),
                });
                continue;
            }
            let a = self.table.admit(peer.ip(), Instant::now());
            if let Some((old, why)) = a.evicted {
                self.close(old, CloseReason::Evicted(why), events);
            }
            let hs = Handshake::responder(self.listener.parts().1.clone());
            self.pending.insert(a.id, Pending { sock, peer, hs });
            // The Request often comes with the connection: read it now.
            self.read(a.id, events);
        }
    }

    /// Reads what `id` sent; a complete Request leaves as an event.
    fn read(&mut self, id: PendingId, events: &mut Vec<AcceptEvent>) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        match read_request(&p.sock, &mut p.hs) {
            RequestRead::WouldBlock => {}
            RequestRead::Request(request, leftover) => {
                self.table.remove(id);
                let Some(p) = self.pending.remove(&id) else {
                    return;
                };
                let (_, cfg) = self.listener.parts();
                let peer = p.peer;
                match PendingConnection::from_request(p.sock, peer, cfg, p.hs, request, leftover) {
                    Ok(c) => events.push(AcceptEvent::Request(Box::new(c))),
                    Err(e) => events.push(AcceptEvent::Closed {
                        peer,
                        reason: CloseReason::Failed(e),
                    }),
                }
            }
            RequestRead::Eof => self.close(id, CloseReason::PeerClosed, events),
            RequestRead::Invalid(e) => self.close(id, CloseReason::Invalid(e), events),
            RequestRead::Failed(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                self.close(id, CloseReason::PeerClosed, events)
            }
            RequestRead::Failed(e) => self.close(id, CloseReason::Failed(e), events),
        }
    }
}
