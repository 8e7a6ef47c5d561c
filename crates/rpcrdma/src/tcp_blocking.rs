//! Blocking mode for ONC RPC over TCP: [`TcpBlockingClient`], a client
//! driven by the calling thread (the server side is
//! [`TcpConfig::blocking`], `tcp_blocking_server.rs`).
//!
//! The async [`crate::Client`] over TCP costs, per call and side, a
//! `writev`, a `recvfrom` and an `epoll_wait`, and the runtime's park
//! (~800–1,600 user-space instructions). A caller that waits for each
//! reply anyway (one call in flight, like a synchronous libtirpc client)
//! needs none of it: the calling thread writes the record-marked call with
//! one `writev` and sleeps in `recv(2)` for the reply (`SO_RCVTIMEO` bounds
//! the sleep by the call's timeout), and a receive buffer of
//! [`READ_BUF`](crate::tcp_sync::READ_BUF) octets normally takes the
//! record mark and the whole reply in that one `recv`. Two system calls per
//! call. The call path is [`crate::Client`]'s: the same
//! [`Attempts`] (encoding, retransmissions with the same XID, timeouts,
//! reply decoding, statistics, blame-split errors); this module only
//! transmits and waits, as [`crate::rdma::RdmaBlockingClient`] does.
//!
//! What the peer sends is checked as the async client's reader checks it:
//! a record over [`RecordLimits`](crate::record::RecordLimits) or a bad
//! mark closes the connection with [`TransportError::Framing`], an end of
//! stream inside a record too, a peer close between records is
//! [`TransportError::Lost`]; a reply to another XID (a late reply to a
//! transmission that timed out) is dropped and counted
//! (`replies_unmatched`), a call from the server (`backchannel_unsupported`)
//! and an undecodable record (`garbage_messages`) too, and the wait goes on
//! until the call's deadline. Memory is the receive buffer plus at most one
//! record within the limits.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{
    clock_xid, Attempts, CallOptions, ClientConfig, Reply, RpcError, Transmission,
};
use crate::message::Message;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::reconnect::ReconnectPolicy;
use crate::stats::{ProcKey, ProcStats};
use crate::tcp::{peek, TcpConfig};
use crate::tcp_sync::{write_record, ReadError, RecordReader, READ_BUF};
use crate::transport::{AttemptRef, TransportError};

/// A blocking ONC RPC over TCP client: one connection, one call at a time,
/// driven by the calling thread (see the module docs).
///
/// ```
/// use rpcrdma::tcp_blocking::TcpBlockingClient;
/// use rpcrdma::{testprog, ClientConfig, Server, TcpConfig};
///
/// # let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
/// let server = Server::default();
/// testprog::register(&server);
/// // A blocking server: one thread per connection.
/// let tcp = rt.block_on(server.serve_tcp("127.0.0.1:0", TcpConfig { blocking: true, ..TcpConfig::default() }))?;
///
/// let mut client =
///     TcpBlockingClient::connect(tcp.local_addr(), ClientConfig::default(), TcpConfig::default())?;
/// testprog::blocking::null(&mut client)?;
/// assert_eq!(&testprog::blocking::echo(&mut client, b"hi")?[..], b"hi");
/// client.close();
/// rt.block_on(tcp.shutdown());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// Made by [`TcpBlockingClient::connect`], the client has no
/// reconnection: after a connection loss every call fails with the loss
/// ([`RpcError::Transport`]). Made by [`TcpBlockingClient::reconnecting`],
/// it connects on the first call and after each loss
/// ([`ReconnectPolicy`]'s schedule, slept by the calling thread) and sends
/// a call that was on the lost connection again with the same XID, as
/// [`crate::ReconnectingTransport`] does, until the call's timeout. There
/// is no backchannel over TCP.
pub struct TcpBlockingClient {
    link: Link,
    config: ClientConfig,
    /// The counters (the link's, shared).
    metrics: Arc<Metrics>,
    stats: Arc<ProcStats>,
    next_xid: u32,
}

/// The client's connection and how to replace it.
struct Link {
    conn: Option<Conn>,
    /// Why calls fail (no reconnection): the loss, or a local close.
    closed: Option<TransportError>,
    reconnect: Option<ReconnectPolicy>,
    peer: SocketAddr,
    tcp: TcpConfig,
    metrics: Arc<Metrics>,
    /// The client's timeout: connection attempts, `SO_SNDTIMEO`, the
    /// initial `SO_RCVTIMEO`.
    timeout: Duration,
}

/// One connection of the client.
struct Conn {
    sock: TcpStream,
    reader: RecordReader,
    /// The `SO_RCVTIMEO` last set (set only when it changes).
    rcv_timeout: Duration,
}

impl std::fmt::Debug for TcpBlockingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpBlockingClient")
            .field("peer", &self.link.peer)
            .field("connected", &self.link.conn.is_some())
            .finish()
    }
}

/// `SO_RCVTIMEO` / `SO_SNDTIMEO` of zero means "forever": at least a
/// microsecond.
fn sock_timeout(t: Duration) -> Duration {
    t.max(Duration::from_micros(1))
}

impl TcpBlockingClient {
    /// Connects to `addr` (blocking, bounded by `client.timeout`).
    /// `tcp.record_limits` bound the replies, `tcp.max_fragment` the
    /// fragments sent; `tcp.metrics` are shared if given. The server-side
    /// fields of `tcp` are not used.
    pub fn connect(
        addr: SocketAddr,
        client: ClientConfig,
        tcp: TcpConfig,
    ) -> io::Result<TcpBlockingClient> {
        let sock = TcpStream::connect_timeout(&addr, sock_timeout(client.timeout))?;
        Self::from_stream(sock, client, tcp)
    }

    /// Runs the client over an established (blocking) stream.
    pub fn from_stream(
        sock: TcpStream,
        client: ClientConfig,
        tcp: TcpConfig,
    ) -> io::Result<TcpBlockingClient> {
        let peer = sock.peer_addr()?;
        let mut c = Self::unconnected(peer, client, tcp, None);
        c.link.conn = Some(c.link.setup(sock)?);
        Ok(c)
    }

    /// A client of `addr` that connects on its first call and again after
    /// each connection loss (see the type's docs).
    pub fn reconnecting(
        addr: SocketAddr,
        client: ClientConfig,
        tcp: TcpConfig,
        policy: ReconnectPolicy,
    ) -> TcpBlockingClient {
        Self::unconnected(addr, client, tcp, Some(policy))
    }

    fn unconnected(
        peer: SocketAddr,
        config: ClientConfig,
        tcp: TcpConfig,
        reconnect: Option<ReconnectPolicy>,
    ) -> TcpBlockingClient {
        let metrics = tcp.metrics.clone().unwrap_or_default();
        let next_xid = config.first_xid.unwrap_or_else(clock_xid);
        let stats = config.client_stats();
        TcpBlockingClient {
            link: Link {
                conn: None,
                closed: None,
                reconnect,
                peer,
                tcp,
                metrics: metrics.clone(),
                timeout: config.timeout,
            },
            config,
            metrics,
            stats,
            next_xid,
        }
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.link.peer
    }

    /// The client settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The client's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The per-procedure statistics of this client's calls.
    pub fn stats(&self) -> &Arc<ProcStats> {
        &self.stats
    }

    /// Why calls fail, once they do: the connection's loss (without
    /// reconnection) or a local close.
    pub fn closed_reason(&self) -> Option<TransportError> {
        self.link.closed.clone()
    }
    /// Calls `prog`/`vers`/`proc` with `args` and waits for the reply (see
    /// [`crate::Client::call`]; `ddp_results` only shape the call's
    /// options: over TCP results arrive inline).
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        ddp_results: &[u32],
    ) -> Result<Reply, RpcError> {
        self.call_with(
            prog,
            vers,
            proc,
            args,
            &CallOptions::with_ddp_results(ddp_results),
        )
    }

    /// [`TcpBlockingClient::call`] with per-call options (timeout,
    /// retransmissions as configured, credentials).
    pub fn call_with(
        &mut self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let span = tracing::debug_span!("rpc.call", xid, prog, vers, proc, transport = "tcp");
        let _e = span.enter();
        let stats = self.stats.entry(ProcKey {
            prog,
            vers,
            proc,
            transport: "tcp",
        });
        let mut call = Attempts::new(
            xid,
            (prog, vers, proc),
            args,
            opts,
            &self.config,
            (&self.metrics, stats),
        )?;
        let timeout = call.timeout();
        let reply = loop {
            let t = self.link.transmit(call.next_ref(), timeout);
            match call.settle(t) {
                Ok(Some(m)) => break Ok(m),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        call.finish(reply)
    }

    /// Closes the connection; later calls fail with
    /// [`TransportError::Closed`].
    pub fn close(mut self) {
        self.disconnect();
    }

    /// Closes the connection now; later calls fail with
    /// [`TransportError::Closed`] (a reconnecting client makes no new
    /// connection either).
    pub fn disconnect(&mut self) {
        let l = &mut self.link;
        if let Some(c) = l.conn.take() {
            let _ = c.sock.shutdown(Shutdown::Both);
        }
        l.reconnect = None;
        l.closed.get_or_insert(TransportError::Closed);
    }
}

impl Link {
    /// A connection over `sock`: socket options, receive buffer.
    fn setup(&self, sock: TcpStream) -> io::Result<Conn> {
        sock.set_nodelay(self.tcp.nodelay)?;
        sock.set_nonblocking(false)?;
        let t = sock_timeout(self.timeout);
        sock.set_read_timeout(Some(t))?;
        // A server that reads nothing: the write gives up after the
        // timeout (and the connection, cut inside a record, is closed).
        sock.set_write_timeout(Some(t))?;
        Metrics::inc(&self.metrics.connections);
        Ok(Conn {
            sock,
            reader: RecordReader::new(self.tcp.record_limits, READ_BUF),
            rcv_timeout: t,
        })
    }

    /// One transmission of a call: writes it and waits for its reply until
    /// `timeout` passes; on a reconnecting client, a connection lost on the
    /// way is replaced and the call sent again (same XID) within that time.
    fn transmit(&mut self, call: AttemptRef<'_>, timeout: Duration) -> Transmission {
        let len = call.header.len() + call.args.xdr_len();
        let max = self.tcp.record_limits.max_record_size;
        if len > max {
            return Transmission::Failed(TransportError::TooLarge { len, max });
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut resend = false;
        loop {
            if self.conn.is_none() {
                if let Err(t) = self.reconnect_until(deadline) {
                    return t;
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                return Transmission::Failed(self.closed.clone().unwrap_or(TransportError::Closed));
            };
            if std::mem::take(&mut resend) {
                Metrics::inc(&self.metrics.retransmits);
                tracing::debug!(xid = call.xid, "re-sending on a new connection");
            }
            let lost = match exchange(conn, &call, timeout, deadline, &self.metrics, &self.tcp) {
                Exchange::Reply(m) => return Transmission::Reply(m),
                Exchange::TimedOut => return Transmission::TimedOut,
                Exchange::Lost(e) => e,
            };
            // The connection is done with: shut it (whatever the peer sends
            // later is not read).
            if let Some(c) = self.conn.take() {
                let _ = c.sock.shutdown(Shutdown::Both);
            }
            Metrics::inc(&self.metrics.transport_errors);
            tracing::warn!(peer = %self.peer, error = %lost, "rpc/tcp client connection closed");
            if self.reconnect.is_none() {
                self.closed = Some(lost.clone());
                return Transmission::Failed(lost);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Transmission::TimedOut;
            }
            resend = true;
        }
    }

    /// A new connection for a reconnecting client, under the policy's
    /// schedule (the first attempt at once, then the backoff), stopped by
    /// `deadline`.
    fn reconnect_until(&mut self, deadline: Option<Instant>) -> Result<(), Transmission> {
        let Some(policy) = self.reconnect else {
            return Err(Transmission::Failed(
                self.closed.clone().unwrap_or(TransportError::Closed),
            ));
        };
        let attempts = policy.max_attempts.max(1);
        let mut backoff = policy.initial_backoff;
        let mut last = String::new();
        for attempt in 0..attempts {
            let left = |now: Instant| deadline.map(|d| d.saturating_duration_since(now));
            if attempt > 0 {
                let nap = left(Instant::now()).map_or(backoff, |l| l.min(backoff));
                std::thread::sleep(nap);
                backoff = (backoff * 2).min(policy.max_backoff);
            }
            let wait = match left(Instant::now()) {
                Some(l) if l.is_zero() => return Err(Transmission::TimedOut),
                Some(l) => l,
                None => sock_timeout(self.timeout),
            };
            let made = TcpStream::connect_timeout(&self.peer, sock_timeout(wait))
                .and_then(|s| self.setup(s));
            match made {
                Ok(c) => {
                    if self
                        .metrics
                        .connections
                        .load(std::sync::atomic::Ordering::Relaxed)
                        > 1
                    {
                        tracing::info!(peer = %self.peer, "reconnected");
                    }
                    self.conn = Some(c);
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(attempt, error = %e, "connect failed");
                    last = e.to_string();
                }
            }
        }
        Metrics::inc(&self.metrics.transport_errors);
        Err(Transmission::Failed(TransportError::Lost(format!(
            "reconnect failed after {attempts} attempts: {last}"
        ))))
    }
}

/// How one exchange on a connection ended.
enum Exchange {
    Reply(Message),
    TimedOut,
    /// The connection failed (it is unusable now).
    Lost(TransportError),
}

/// Writes `call` on `conn` and reads records until its reply, `deadline`
/// or the connection's failure. The first wait is the whole `timeout`
/// (`SO_RCVTIMEO`, unchanged from call to call); only a wait resumed after
/// another record reads the clock and sets what is left.
fn exchange(
    conn: &mut Conn,
    call: &AttemptRef<'_>,
    timeout: Duration,
    deadline: Option<Instant>,
    metrics: &Metrics,
    tcp: &TcpConfig,
) -> Exchange {
    match write_record(&mut conn.sock, &call.header, call.args, tcp.max_fragment) {
        Ok(n) => {
            Metrics::add(&metrics.bytes_sent, n as u64);
            Metrics::inc(&metrics.calls_sent);
        }
        Err(e) if is_timeout(&e) => {
            return Exchange::Lost(TransportError::Lost(format!(
                "write: the server took nothing for {:?}",
                sock_timeout(timeout)
            )))
        }
        Err(e) => return Exchange::Lost(TransportError::Lost(format!("write: {e}"))),
    }
    let mut wait = sock_timeout(timeout);
    // The first read needs no clock: `SO_RCVTIMEO` is the call's timeout.
    let mut first = true;
    loop {
        let mut other = false;
        match conn.reader.buffered() {
            Err(e) => return Exchange::Lost(TransportError::Framing(e)),
            Ok(Some(rec)) => {
                match peek(&rec) {
                    Some((xid, 1)) if xid == call.xid => {
                        Metrics::inc(&metrics.replies_received);
                        return Exchange::Reply(Message::inline(rec));
                    }
                    Some((xid, 1)) => {
                        Metrics::inc(&metrics.replies_unmatched);
                        tracing::debug!(xid, "reply for no outstanding call dropped");
                    }
                    Some((xid, 0)) => {
                        Metrics::inc(&metrics.backchannel_unsupported);
                        tracing::debug!(
                            xid,
                            "call on a TCP client connection dropped (no backchannel)"
                        );
                    }
                    _ => {
                        Metrics::inc(&metrics.garbage_messages);
                        tracing::debug!(len = rec.len(), "undecodable record dropped");
                    }
                }
                other = true;
            }
            Ok(None) if std::mem::take(&mut first) => {
                match read(conn, wait, metrics) {
                    Ok(()) => continue,
                    Err(Some(e)) => return Exchange::Lost(e),
                    // The timeout passed: the deadline says so below.
                    Err(None) => {}
                }
            }
            Ok(None) => {}
        }
        // Not the reply yet (another record, a part of one, or the receive
        // timeout passed): what is left? A peer trickling octets or
        // sending other records cannot stretch the call past its deadline.
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Exchange::TimedOut;
            }
            wait = sock_timeout(d - now);
        }
        if other {
            // More may be buffered already.
            continue;
        }
        match read(conn, wait, metrics) {
            Ok(()) | Err(None) => {}
            Err(Some(e)) => return Exchange::Lost(e),
        }
    }
}

/// One read on `conn` waiting at most `wait`: `Err(None)` when it passed,
/// `Err(Some(_))` when the connection failed (the peer closed it, the
/// stream ended inside a record, the socket's error).
fn read(conn: &mut Conn, wait: Duration, metrics: &Metrics) -> Result<(), Option<TransportError>> {
    if wait != conn.rcv_timeout {
        conn.sock
            .set_read_timeout(Some(wait))
            .map_err(|e| Some(TransportError::Lost(format!("SO_RCVTIMEO: {e}"))))?;
        conn.rcv_timeout = wait;
    }
    match conn.reader.fill(&mut conn.sock, metrics) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Some(TransportError::Lost(
            "peer closed the connection".into(),
        ))),
        Err(ReadError::Framing(e)) => Err(Some(TransportError::Framing(e))),
        Err(ReadError::Io(e)) if is_timeout(&e) => Err(None),
        Err(ReadError::Io(e)) => Err(Some(TransportError::Lost(e.to_string()))),
    }
}

/// A receive or send timeout (`SO_RCVTIMEO` / `SO_SNDTIMEO`: `EAGAIN`).
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Drop for TcpBlockingClient {
    fn drop(&mut self) {
        self.disconnect();
    }
}
