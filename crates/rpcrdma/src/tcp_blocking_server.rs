//! The blocking mode of the ONC RPC over TCP server
//! ([`TcpConfig::blocking`]): each connection on a thread of its own that
//! sleeps in `recv(2)` (no runtime park, no task hand-off: two system
//! calls per call, a `recvfrom` and a `writev`), as the RDMA blocking
//! server drives each connection on a thread.
//!
//! The thread reads records ([`RecordReader`]: the server's
//! [`RecordLimits`](crate::record::RecordLimits), a small call in one
//! read), hands each call to the same [`CallDispatcher`] as the async
//! server (program dispatch, the duplicate-reply cache, the statistics),
//! which runs a handler that needs no waiting inline; the reply is written
//! on this thread with one `writev` before the next read. A handler that
//! has to wait continues on the runtime (the thread has entered it), and
//! its reply is written from tokio's blocking pool (the write may block).
//!
//! **Limits.** A thread per connection is a resource a peer can hold, so:
//!
//! * at most [`TcpConfig::blocking_max_threads`] (and
//!   [`TcpConfig::max_connections`]) connections at once; one accepted
//!   beyond is closed at once and counted (`connections_refused`);
//! * a connection that completes no record for
//!   [`TcpConfig::blocking_idle_timeout`] is closed: an idle peer, and one
//!   trickling a record octet by octet, gives its thread back; a peer that
//!   reads none of its replies for as long is closed too (`SO_SNDTIMEO`);
//! * at most [`TcpConfig::max_in_flight`] calls of a connection execute at
//!   once (the thread stops reading meanwhile), each counted by its
//!   [`CallGuard`] until its reply is written;
//! * the receive buffer is [`READ_BUF`](crate::tcp_sync::READ_BUF) octets
//!   per connection, plus at most one record within the limits.
//!
//! A graceful shutdown stops accepting, shuts the read side of every
//! connection (its thread sees the end of the stream at once), lets the
//! calls in flight finish within [`TcpConfig::shutdown_grace`] and closes.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::message::Message;
use crate::metrics::Metrics;
use crate::tcp::{drop_non_call, peek, TcpConfig};
use crate::tcp_blocking::is_timeout;
use crate::tcp_sync::{write_record, ReadError, RecordReader, READ_BUF};
use crate::transport::{
    CallCount, CallDispatcher, CallGuard, ClientTransport, IncomingCall, ReplyRoom,
    ServerConnection, TransportError,
};

thread_local! {
    /// True on a blocking connection's own thread: its replies are written
    /// there, directly.
    static CONN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The live connections of a blocking server: a handle on each one's
/// socket (to shut its read side at shutdown).
#[derive(Default)]
struct Live {
    conns: Mutex<HashMap<u64, TcpStream>>,
    next: Mutex<u64>,
}

impl Live {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn add(&self, sock: TcpStream) -> u64 {
        let id = {
            let mut n = self.next.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        self.lock().insert(id, sock);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// The accept loop of a blocking server (on the runtime; see the module
/// docs).
pub(crate) async fn accept_loop(
    listener: TcpListener,
    config: TcpConfig,
    dispatcher: Arc<dyn CallDispatcher>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let live = Arc::new(Live::default());
    let max = config
        .max_connections
        .min(config.blocking_max_threads)
        .max(1);
    let rt = tokio::runtime::Handle::current();
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) if live.len() >= max => {
                    Metrics::inc(&metrics.connections_refused);
                    tracing::warn!(%peer, max, "too many blocking connections, closing");
                    drop(stream);
                }
                Ok((stream, peer)) => {
                    Metrics::inc(&metrics.connections);
                    if let Err(e) = start(stream, peer, &config, &dispatcher, &metrics, &live, &rt) {
                        tracing::warn!(%peer, error = %e, "blocking connection not started; closed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    for s in live.lock().values() {
        let _ = s.shutdown(Shutdown::Read);
    }
    // The threads drain their calls within the grace, then end.
    let end = tokio::time::Instant::now() + config.shutdown_grace + Duration::from_secs(1);
    while live.len() > 0 && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts the thread of one accepted connection.
fn start(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    config: &TcpConfig,
    dispatcher: &Arc<dyn CallDispatcher>,
    metrics: &Arc<Metrics>,
    live: &Arc<Live>,
    rt: &tokio::runtime::Handle,
) -> io::Result<()> {
    let sock = stream.into_std()?;
    sock.set_nonblocking(false)?;
    let _ = sock.set_nodelay(config.nodelay);
    let idle = config.blocking_idle_timeout.max(Duration::from_millis(1));
    sock.set_read_timeout(Some(idle))?;
    sock.set_write_timeout(Some(idle))?;
    let write_side = sock.try_clone()?;
    let id = live.add(sock.try_clone()?);
    let conn = Arc::new_cyclic(|me| BlockingConn {
        me: me.clone(),
        sock: Mutex::new(Some(write_side)),
        peer,
        metrics: metrics.clone(),
        max_fragment: config.max_fragment,
    });
    let (config, dispatcher, live2, rt) =
        (config.clone(), dispatcher.clone(), live.clone(), rt.clone());
    let spawned = std::thread::Builder::new()
        .name("rpc-tcp-conn".into())
        .spawn(move || {
            let _rt = rt.enter();
            CONN_THREAD.with(|c| c.set(true));
            serve(sock, conn, &config, &*dispatcher, idle);
            live2.remove(id);
        });
    if let Err(e) = spawned {
        live.remove(id);
        return Err(e);
    }
    Ok(())
}

/// The calls of one connection executing (see [`TcpConfig::max_in_flight`]).
/// A release wakes only a thread that waits (`std`'s `Condvar::notify_*`
/// is a `futex` system call every time: one per call, before).
struct InFlight {
    state: Mutex<Calls>,
    room: Condvar,
    max: usize,
}

#[derive(Default)]
struct Calls {
    n: usize,
    /// The connection's thread waits for a release.
    waiting: bool,
}

impl CallCount for InFlight {
    fn release(&self) {
        let mut st = self.lock();
        st.n -= 1;
        let wake = st.waiting;
        drop(st);
        if wake {
            self.room.notify_all();
        }
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits (at most `wait`) while `busy`; the state after.
    fn wait_while(
        &self,
        wait: Duration,
        busy: impl Fn(&Calls) -> bool,
    ) -> std::sync::MutexGuard<'_, Calls> {
        let mut st = self.lock();
        if !busy(&st) {
            return st;
        }
        st.waiting = true;
        let (mut st, _) = self
            .room
            .wait_timeout_while(st, wait, |c| busy(c))
            .unwrap_or_else(|p| p.into_inner());
        st.waiting = false;
        st
    }

    /// Takes one call, waiting while `max` execute; false if that lasted
    /// longer than `wait`.
    fn acquire(&self, wait: Duration) -> bool {
        let mut st = self.wait_while(wait, |c| c.n >= self.max);
        if st.n >= self.max {
            return false;
        }
        st.n += 1;
        true
    }

    /// Waits (at most `wait`) until no call executes.
    fn drain(&self, wait: Duration) {
        drop(self.wait_while(wait, |c| c.n > 0));
    }
}

/// One connection's life on its thread.
fn serve(
    mut sock: TcpStream,
    conn: Arc<BlockingConn>,
    config: &TcpConfig,
    dispatcher: &dyn CallDispatcher,
    idle: Duration,
) {
    let peer = conn.peer;
    let metrics = conn.metrics.clone();
    let client = (config.identify)(peer);
    let in_flight = Arc::new(InFlight {
        state: Mutex::new(Calls::default()),
        room: Condvar::new(),
        max: config.max_in_flight.clamp(1, 1 << 16),
    });
    let count: Arc<dyn CallCount> = in_flight.clone();
    let as_conn: Arc<dyn ServerConnection> = conn.clone();
    let mut reader = RecordReader::new(config.record_limits, READ_BUF);
    // When the record now in progress started arriving (read only when a
    // read leaves a record incomplete: a call that comes whole costs no
    // clock read).
    let mut partial_since: Option<Instant> = None;
    let why = loop {
        let rec = match reader.buffered() {
            Ok(Some(rec)) => rec,
            Ok(None) => {
                if !reader.is_idle() {
                    let now = Instant::now();
                    let since = *partial_since.get_or_insert(now);
                    if now.duration_since(since) > idle {
                        break format!("no complete record for {idle:?}");
                    }
                }
                match reader.fill(&mut sock, &metrics) {
                    Ok(true) => continue,
                    Ok(false) => break String::new(),
                    Err(ReadError::Io(e)) if is_timeout(&e) => {
                        break format!("no complete record for {idle:?}")
                    }
                    Err(ReadError::Io(e)) => break e.to_string(),
                    Err(ReadError::Framing(e)) => break e.to_string(),
                }
            }
            Err(e) => break e.to_string(),
        };
        partial_since = None;
        match peek(&rec) {
            Some((_, 0)) => {
                if !in_flight.acquire(idle) {
                    break format!("no call of {} in flight ended for {idle:?}", in_flight.max);
                }
                dispatcher.dispatch(IncomingCall {
                    message: Message::inline(rec),
                    client: client.clone(),
                    conn: as_conn.clone(),
                    guard: CallGuard::counted(count.clone()),
                    room: ReplyRoom::UNBOUNDED,
                });
            }
            other => drop_non_call(&metrics, other, rec.len()),
        }
    };
    if !why.is_empty() {
        Metrics::inc(&metrics.transport_errors);
        tracing::warn!(%peer, error = %why, "closing rpc/tcp connection");
    }
    // The calls still executing write their replies, within the grace.
    in_flight.drain(config.shutdown_grace);
    conn.close();
}

/// The responder side of a blocking connection.
struct BlockingConn {
    me: Weak<BlockingConn>,
    /// The write side (`None` once closed). Records never interleave.
    sock: Mutex<Option<TcpStream>>,
    peer: SocketAddr,
    metrics: Arc<Metrics>,
    max_fragment: u32,
}

impl BlockingConn {
    fn write(&self, reply: &Message) -> Result<(), TransportError> {
        let mut g = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(sock) = g.as_mut() else {
            return Err(TransportError::Closed);
        };
        match write_record(sock, &[], reply, self.max_fragment) {
            Ok(n) => {
                Metrics::add(&self.metrics.bytes_sent, n as u64);
                Metrics::inc(&self.metrics.replies_sent);
                Ok(())
            }
            Err(e) => {
                // Cut inside a record (or a peer reading nothing): the
                // connection is over; its thread sees it at once.
                let _ = sock.shutdown(Shutdown::Both);
                *g = None;
                Err(TransportError::Lost(format!("write: {e}")))
            }
        }
    }

    fn close(&self) {
        let s = self.sock.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(s) = s {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl ServerConnection for BlockingConn {
    fn send_reply(
        &self,
        _xid: u32,
        reply: Message,
        guard: CallGuard,
    ) -> Result<(), TransportError> {
        if !CONN_THREAD.with(Cell::get) {
            // From a handler's task: the write may block, so not on a
            // runtime worker.
            if let (Ok(rt), Some(me)) = (tokio::runtime::Handle::try_current(), self.me.upgrade()) {
                rt.spawn_blocking(move || {
                    let _ = me.write(&reply);
                    drop(guard);
                });
                return Ok(());
            }
        }
        let r = self.write(&reply);
        drop(guard);
        r
    }

    fn backchannel(&self) -> Result<Arc<dyn ClientTransport>, TransportError> {
        Err(TransportError::Unsupported(
            "backchannel over ONC RPC over TCP",
        ))
    }

    fn peer(&self) -> String {
        self.peer.to_string()
    }

    fn name(&self) -> &'static str {
        "tcp"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At most `max` calls; a waiting acquire is woken by a release (the
    /// release notifies only because it waits), a drain by the last one.
    #[test]
    fn in_flight_is_bounded_and_wakes_its_waiter() {
        let f = Arc::new(InFlight {
            state: Mutex::new(Calls::default()),
            room: Condvar::new(),
            max: 2,
        });
        assert!(f.acquire(Duration::ZERO) && f.acquire(Duration::ZERO));
        let t0 = Instant::now();
        assert!(!f.acquire(Duration::from_millis(50)));
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert!(!f.lock().waiting);
        let f2 = f.clone();
        let waiter = std::thread::spawn(move || f2.acquire(Duration::from_secs(10)));
        while !f.lock().waiting {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        f.release();
        assert!(waiter.join().unwrap());
        assert!(t0.elapsed() < Duration::from_secs(5));
        assert_eq!(f.lock().n, 2);
        let f2 = f.clone();
        let drain = std::thread::spawn(move || f2.drain(Duration::from_secs(10)));
        f.release();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!drain.is_finished());
        f.release();
        drain.join().unwrap();
        assert_eq!(f.lock().n, 0);
    }
}
