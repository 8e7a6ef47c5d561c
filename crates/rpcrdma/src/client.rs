//! The RPC client: credentials, XIDs, timeouts and retransmission, reply
//! decoding, errors split by blame.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcrdma_proto::wire::rpc::{AcceptStat, AuthStat, AuthSysParms, OpaqueAuth, RpcMsg};
use rpcrdma_proto::{DecodeError, EncodeError, Limits};
use tokio::net::ToSocketAddrs;
use tracing::Instrument;

use crate::message::{Message, MessageReader, Piece};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::server::Server;
use crate::stats::{ErrorKind, Octets, ProcCounters, ProcKey, ProcStats, Side};
use crate::tcp::{TcpClientTransport, TcpConfig};
use crate::transport::{AttemptRef, ClientTransport, OutgoingCall, TransportError};

mod decode;

/// Credentials a client sends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    /// AUTH_NONE.
    #[default]
    None,
    /// AUTH_SYS with these parameters.
    Sys(AuthSysParms),
}

impl Auth {
    pub(crate) fn cred(&self) -> OpaqueAuth {
        match self {
            Auth::None => OpaqueAuth::none(),
            Auth::Sys(p) => OpaqueAuth::Sys(p.clone()),
        }
    }

    /// [`Auth::cred`], borrowed where that needs no copy (AUTH_NONE).
    #[inline]
    fn cred_ref(&self) -> std::borrow::Cow<'static, OpaqueAuth> {
        static NONE: OpaqueAuth = OpaqueAuth::none();
        match self {
            Auth::None => std::borrow::Cow::Borrowed(&NONE),
            Auth::Sys(_) => std::borrow::Cow::Owned(self.cred()),
        }
    }
}

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// How long to wait for a reply to one transmission. Default 30 s.
    pub timeout: Duration,
    /// Retransmissions (same XID, same connection) after a timeout before
    /// giving up with [`RpcError::Timeout`]. Default 0: over a reliable
    /// transport a retransmission only helps when the server dropped the
    /// call; the server's duplicate-reply cache makes it safe.
    pub retries: u32,
    /// Credentials. Default AUTH_NONE.
    pub auth: Auth,
    /// Limits for decoding reply headers.
    pub limits: Limits,
    /// Largest reply expected, in XDR octets, the data of DDP-eligible
    /// results excluded (an RDMA transport offers a Reply chunk only when
    /// a reply this large may not fit inline, and sizes it from this).
    /// Default 1 MiB + 4 KiB; callers that know a procedure's largest reply
    /// should say so per call ([`CallOptions::reply_max`]), as the test
    /// program does, to spare small calls a Reply chunk.
    pub reply_max: u32,
    /// First XID; default derived from the clock.
    pub first_xid: Option<u32>,
    /// Per-procedure statistics to count into (shared by the clients given
    /// the same table); default: a table of the client's own
    /// ([`Client::stats`]).
    pub stats: Option<Arc<ProcStats>>,
}

impl ClientConfig {
    /// The statistics table a client of this configuration counts into.
    pub(crate) fn client_stats(&self) -> Arc<ProcStats> {
        self.stats
            .clone()
            .unwrap_or_else(|| Arc::new(ProcStats::new(Side::Client)))
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            timeout: Duration::from_secs(30),
            retries: 0,
            auth: Auth::None,
            limits: Limits::DEFAULT,
            reply_max: (1 << 20) + 4096,
            first_xid: None,
            stats: None,
        }
    }
}

/// Who is to blame for an [`RpcError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The connection (lost, closed, timed out).
    Transport,
    /// The peer: it replied with an RPC error or sent an undecodable reply.
    Peer,
    /// The caller (bad arguments, message too large, ...).
    Caller,
}

/// An RPC-level error the server replied with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// PROG_UNAVAIL.
    ProgUnavail,
    /// PROG_MISMATCH with the server's supported versions.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL.
    ProcUnavail,
    /// GARBAGE_ARGS.
    GarbageArgs,
    /// SYSTEM_ERR.
    SystemErr,
    /// Another `accept_stat`.
    OtherAccept(AcceptStat),
    /// MSG_DENIED / RPC_MISMATCH.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::ProgUnavail => write!(f, "PROG_UNAVAIL"),
            ReplyError::ProgMismatch { low, high } => write!(f, "PROG_MISMATCH ({low}..={high})"),
            ReplyError::ProcUnavail => write!(f, "PROC_UNAVAIL"),
            ReplyError::GarbageArgs => write!(f, "GARBAGE_ARGS"),
            ReplyError::SystemErr => write!(f, "SYSTEM_ERR"),
            ReplyError::OtherAccept(s) => write!(f, "accept_stat {s}"),
            ReplyError::RpcMismatch { low, high } => write!(f, "RPC_MISMATCH ({low}..={high})"),
            ReplyError::AuthError(s) => write!(f, "AUTH_ERROR {s}"),
        }
    }
}

/// A caller error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallerError {
    /// Encoding the call failed.
    Encode(EncodeError),
    /// The transport refused the call (too large, XID in use).
    Refused(TransportError),
    /// Invalid arguments to a stub.
    BadArgument(String),
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcError {
    /// The connection failed (lost, closed, framing violation by the peer).
    Transport(TransportError),
    /// No reply within the timeout, after every retransmission.
    Timeout {
        /// The call's XID.
        xid: u32,
        /// Transmissions made.
        attempts: u32,
    },
    /// The server replied with an RPC error.
    Reply(ReplyError),
    /// The reply (header or results) does not decode.
    BadReply(DecodeError),
    /// The caller's fault.
    Caller(CallerError),
}

impl RpcError {
    /// Who is to blame.
    pub fn blame(&self) -> Blame {
        match self {
            RpcError::Transport(e) if e.is_callers() => Blame::Caller,
            RpcError::Transport(_) | RpcError::Timeout { .. } => Blame::Transport,
            RpcError::Reply(_) | RpcError::BadReply(_) => Blame::Peer,
            RpcError::Caller(_) => Blame::Caller,
        }
    }

    /// The reply error, if the server replied with one.
    pub fn reply_error(&self) -> Option<ReplyError> {
        match self {
            RpcError::Reply(r) => Some(*r),
            _ => None,
        }
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Transport(e) => write!(f, "transport: {e}"),
            RpcError::Timeout { xid, attempts } => write!(
                f,
                "no reply to xid 0x{xid:08x} after {attempts} transmission(s)"
            ),
            RpcError::Reply(e) => write!(f, "server replied {e}"),
            RpcError::BadReply(e) => write!(f, "malformed reply: {e}"),
            RpcError::Caller(CallerError::Encode(e)) => write!(f, "cannot encode call: {e}"),
            RpcError::Caller(CallerError::Refused(e)) => write!(f, "call refused: {e}"),
            RpcError::Caller(CallerError::BadArgument(s)) => write!(f, "bad argument: {s}"),
        }
    }
}

impl std::error::Error for RpcError {}

impl From<DecodeError> for RpcError {
    fn from(e: DecodeError) -> Self {
        RpcError::BadReply(e)
    }
}

impl From<EncodeError> for RpcError {
    fn from(e: EncodeError) -> Self {
        RpcError::Caller(CallerError::Encode(e))
    }
}

/// A successful reply.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The XID.
    pub xid: u32,
    /// The server's verifier; `None`: AUTH_NONE with an empty body (boxed
    /// otherwise: a reply, and the `Result` each layer returns it in, stays
    /// small enough to move without a `memcpy` call).
    verf: Option<Box<OpaqueAuth>>,
    results: Message,
}

impl Reply {
    /// The server's verifier.
    pub fn verf(&self) -> &OpaqueAuth {
        static NONE: OpaqueAuth = OpaqueAuth::none();
        self.verf.as_deref().unwrap_or(&NONE)
    }

    /// `verf` as [`Reply`] keeps it.
    fn thin_verf(verf: OpaqueAuth) -> Option<Box<OpaqueAuth>> {
        (verf != OpaqueAuth::none()).then(|| Box::new(verf))
    }

    /// The procedure results (after the RPC header): inline XDR and, over
    /// RDMA, the data received by direct placement into each Write chunk
    /// ([`Message::results`]), which [`MessageReader::ddp_opaque`] places.
    pub fn results(&self) -> &Message {
        &self.results
    }

    /// A reader over the results.
    pub fn reader(&self) -> MessageReader {
        self.results.reader()
    }

    /// DDP-received result data, in order: the non-empty Write chunk
    /// results (empty over TCP, where the data arrives inline). Decode a
    /// DDP-eligible result with [`MessageReader::ddp_opaque`], which takes it
    /// from here or from the inline stream as it arrived.
    pub fn ddp_data(&self) -> impl Iterator<Item = &Bytes> {
        self.results.ddp_data()
    }

    /// The results.
    pub fn into_results(self) -> Message {
        self.results
    }
}

/// Per-call options beyond the procedure and arguments.
#[derive(Clone, Debug, Default)]
pub struct CallOptions {
    /// Maximum lengths of the DDP-eligible results, in order (an RDMA
    /// transport offers a Write chunk for each).
    pub ddp_results: Vec<u32>,
    /// Overrides [`ClientConfig::timeout`].
    pub timeout: Option<Duration>,
    /// Overrides [`ClientConfig::auth`].
    pub auth: Option<Auth>,
    /// Overrides [`ClientConfig::reply_max`].
    pub reply_max: Option<u32>,
}

impl CallOptions {
    /// The defaults with these DDP-eligible result lengths (what
    /// `call(.., ddp_results)` uses).
    pub fn with_ddp_results(ddp_results: &[u32]) -> Self {
        CallOptions {
            ddp_results: ddp_results.to_vec(),
            ..CallOptions::default()
        }
    }
}

/// An RPC client on one transport connection. Cheap to share (`&self`
/// methods); any number of calls may be in flight.
pub struct Client {
    transport: Arc<dyn ClientTransport>,
    config: ClientConfig,
    next_xid: AtomicU32,
    stats: Arc<ProcStats>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.transport.name())
            .field("config", &self.config)
            .finish()
    }
}

pub(crate) fn clock_xid() -> u32 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(20)).wrapping_mul(0x9e37_79b1)
}

impl Client {
    /// A client over `transport`.
    pub fn new(transport: Arc<dyn ClientTransport>, config: ClientConfig) -> Self {
        let first = config.first_xid.unwrap_or_else(clock_xid);
        let stats = config.client_stats();
        Client {
            transport,
            config,
            next_xid: AtomicU32::new(first),
            stats,
        }
    }

    /// Connects over ONC RPC over TCP.
    pub async fn connect_tcp(
        addr: impl ToSocketAddrs,
        config: ClientConfig,
        tcp: TcpConfig,
    ) -> std::io::Result<Client> {
        let t = TcpClientTransport::connect(addr, tcp).await?;
        Ok(Client::new(t, config))
    }

    /// ONC RPC over TCP that reconnects after a connection loss and sends
    /// outstanding calls again with the same XIDs (see
    /// [`crate::reconnect`]). Connects lazily, on the first call.
    pub fn tcp_reconnecting(
        addr: SocketAddr,
        config: ClientConfig,
        tcp: TcpConfig,
        policy: crate::reconnect::ReconnectPolicy,
    ) -> Client {
        let t = crate::reconnect::ReconnectingTransport::tcp(addr, tcp, policy);
        Client::new(Arc::new(t), config)
    }

    /// The transport.
    pub fn transport(&self) -> &Arc<dyn ClientTransport> {
        &self.transport
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The connection's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.transport.metrics().snapshot()
    }

    /// The per-procedure statistics of this client's calls.
    pub fn stats(&self) -> &Arc<ProcStats> {
        &self.stats
    }

    /// Closes the connection gracefully.
    pub fn close(&self) {
        self.transport.close()
    }

    /// Serves the peer's backchannel calls with `server`'s programs
    /// ([`TransportError::Unsupported`] over TCP).
    pub fn serve_backchannel(&self, server: &Server) -> Result<(), RpcError> {
        self.transport
            .set_backchannel(server.dispatcher())
            .map_err(RpcError::Transport)
    }

    /// Calls `prog`/`vers`/`proc` with `args`. `ddp_results` gives the
    /// maximum length of each DDP-eligible result (see
    /// [`CallOptions::ddp_results`]).
    pub async fn call(
        &self,
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
        .await
    }

    /// [`Client::call`] with per-call options.
    pub async fn call_with(
        &self,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!(
            "rpc.call",
            xid,
            prog,
            vers,
            proc,
            transport = self.transport.name()
        );
        self.call_inner(xid, prog, vers, proc, args, opts)
            .instrument(span)
            .await
    }

    async fn call_inner(
        &self,
        xid: u32,
        prog: u32,
        vers: u32,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        let metrics = self.transport.metrics();
        let stats = self.stats.entry(ProcKey {
            prog,
            vers,
            proc,
            transport: self.transport.name(),
        });
        let mut call = Attempts::new(
            xid,
            (prog, vers, proc),
            args,
            opts,
            &self.config,
            (&metrics, stats),
        )?;
        // Every way the transmissions end, as a value: the call's
        // statistics count it (`Attempts::finish`).
        let reply = 'call: loop {
            let timeout = call.timeout();
            let now = Instant::now();
            let deadline = now.checked_add(timeout);
            if let (Some(rdma), Some(_)) = (self.transport.as_rdma(), deadline) {
                // RPC-over-RDMA: the transmission borrowed (the header handed
                // over with the last one, as the blocking client does), the
                // call ended at its deadline by the transport.
                // Started from within a poll: the slot keeps this task's
                // waker, and a lone call's waiter is woken by the
                // connection from the start (no look at it on its first poll).
                let start = std::future::poll_fn(|cx| {
                    let r = rdma.start_call_waiting(call.next_ref(), deadline, now, cx.waker());
                    std::task::Poll::Ready(r)
                });
                let wait = match start.await {
                    Ok(w) => w,
                    Err(e) => break 'call Err(refused_or_transport(e)),
                };
                let t = self.settled(wait.await, deadline);
                match call.settle(t) {
                    Ok(Some(m)) => break 'call Ok(m),
                    Ok(None) => continue,
                    Err(e) => break 'call Err(e),
                }
            }
            if let (Some(tcp), Some(d)) = (self.transport.as_tcp(), deadline) {
                // ONC RPC over TCP: the reply waited for in a slot, read
                // by the caller itself while its call is the only one, the
                // call ended at its deadline by the transport.
                let wait = match tcp.start_call_waiting(call.next(), d) {
                    Ok(w) => w,
                    Err(e) => break 'call Err(refused_or_transport(e)),
                };
                let t = self.settled(wait.await, deadline);
                match call.settle(t) {
                    Ok(Some(m)) => break 'call Ok(m),
                    Ok(None) => continue,
                    Err(e) => break 'call Err(e),
                }
            }
            let sent = match deadline {
                Some(d) => self.transport.send_call_until(call.next(), d),
                None => self.transport.send_call(call.next()).map(|rx| (rx, false)),
            };
            let (rx, timed) = match sent {
                Ok(x) => x,
                Err(e) => break 'call Err(refused_or_transport(e)),
            };
            let t = if timed {
                self.settled(rx.await.ok(), deadline)
            } else {
                match tokio::time::timeout(timeout, rx).await {
                    Ok(r) => self.received(r.ok()),
                    Err(_) => {
                        self.transport.cancel(xid);
                        Transmission::TimedOut
                    }
                }
            };
            match call.settle(t) {
                Ok(Some(m)) => break 'call Ok(m),
                Ok(None) => {}
                Err(e) => break 'call Err(e),
            }
        };
        call.finish(reply)
    }
}

impl Client {
    /// The outcome `r` of a transmission the transport times out itself
    /// (see [`ClientTransport::send_call_until`]; `None`: the transport
    /// dropped it): dropped at or after the deadline is the timeout (the
    /// transport has forgotten the call already), unless the connection is
    /// closed.
    fn settled(
        &self,
        r: Option<Result<Message, TransportError>>,
        deadline: Option<std::time::Instant>,
    ) -> Transmission {
        if r.is_none()
            && deadline.is_some_and(|d| std::time::Instant::now() >= d)
            && self.transport.closed_reason().is_none()
        {
            return Transmission::TimedOut;
        }
        self.received(r)
    }

    /// A transmission's outcome from its receiver (`None`: dropped).
    fn received(&self, r: Option<Result<Message, TransportError>>) -> Transmission {
        match r {
            Some(Ok(m)) => Transmission::Reply(m),
            Some(Err(e)) => Transmission::Failed(e),
            None => Transmission::Dropped(self.transport.closed_reason()),
        }
    }
}

/// How one transmission of a call ended, as the client that waited for it
/// saw it (see [`Attempts::settle`]).
pub(crate) enum Transmission {
    /// The reply.
    Reply(Message),
    /// The transport failed the call.
    Failed(TransportError),
    /// The transport dropped the call without an outcome; why, if it says.
    Dropped(Option<TransportError>),
    /// No reply within the timeout (the caller has cancelled the call).
    TimedOut,
}

/// A transport's refusal of a call: the caller's fault or the transport's.
fn refused_or_transport(e: TransportError) -> RpcError {
    if e.is_callers() {
        RpcError::Caller(CallerError::Refused(e))
    } else {
        RpcError::Transport(e)
    }
}

/// One call's transmissions, as every client makes them (the one call path
/// of [`Client`] and of the blocking RDMA client, which only transmit and
/// wait): the call message (RPC header and arguments), the
/// [`OutgoingCall`] of each attempt (same XID), the timeout and
/// retransmission accounting, what each transmission's outcome means
/// ([`Attempts::settle`]), and the reply decode.
pub(crate) struct Attempts<'a> {
    xid: u32,
    /// The encoded RPC header, with room for the arguments' inline octets
    /// after it (see [`Attempts::next_ref`]); empty once handed over.
    header: Vec<u8>,
    args: Message,
    opts: &'a CallOptions,
    config: &'a ClientConfig,
    metrics: &'a Metrics,
    /// This procedure's statistics.
    stats: &'a ProcCounters,
    /// When the call was made ([`ProcCounters::start`]: its round-trip
    /// time starts here; 0 when it is not timed).
    started: u64,
    /// The call's octets (header and arguments).
    sent: Octets,
    attempts: u32,
}

impl<'a> Attempts<'a> {
    /// Encodes the call of `prog`/`vers`/`proc` with `args`.
    #[inline]
    pub(crate) fn new(
        xid: u32,
        (prog, vers, proc): (u32, u32, u32),
        args: Message,
        opts: &'a CallOptions,
        config: &'a ClientConfig,
        (metrics, stats): (&'a Metrics, &'a ProcCounters),
    ) -> Result<Self, RpcError> {
        let cred = opts.auth.as_ref().unwrap_or(&config.auth).cred_ref();
        // Exactly the header: the arguments stay pieces of their own (no
        // transport appends them to this buffer), and a buffer with spare
        // room becomes a `Bytes` with an allocation more than an exact one
        // (and ECHO 1 KiB's was a 1.1 KiB one, per call).
        let mut header = Vec::with_capacity(RpcMsg::call_header_len(&cred));
        RpcMsg::append_call_header(&mut header, xid, (prog, vers, proc), &cred)?;
        let mut sent = Octets::of(&args);
        sent.inline += header.len() as u64;
        Ok(Attempts {
            xid,
            header,
            args,
            opts,
            config,
            metrics,
            stats,
            started: stats.start(),
            sent,
            attempts: 0,
        })
    }

    /// How long one transmission waits for its reply.
    pub(crate) fn timeout(&self) -> Duration {
        self.opts.timeout.unwrap_or(self.config.timeout)
    }

    /// The next transmission (counted as a retransmission after the first).
    /// The last one the retransmission count allows takes the header and
    /// the arguments instead of copies (after it, a timeout ends the call:
    /// [`Attempts::timed_out`]), as [`Attempts::next_ref`] does.
    pub(crate) fn next(&mut self) -> OutgoingCall {
        self.count_attempt();
        let (header, args) = if self.attempts > self.config.retries {
            (
                std::mem::take(&mut self.header),
                std::mem::take(&mut self.args),
            )
        } else {
            (self.header.clone(), self.args.clone())
        };
        OutgoingCall {
            xid: self.xid,
            message: Message::with_header(header, args),
            reply_max: self.reply_max(),
            ddp_results: self.opts.ddp_results.clone(),
        }
    }

    /// [`Attempts::next`], borrowed; the header is handed over with the
    /// last transmission the retransmission count allows (after it, a
    /// timeout ends the call: [`Attempts::timed_out`]).
    pub(crate) fn next_ref(&mut self) -> AttemptRef<'_> {
        self.count_attempt();
        let header = if self.attempts > self.config.retries {
            std::borrow::Cow::Owned(std::mem::take(&mut self.header))
        } else {
            std::borrow::Cow::Borrowed(&self.header[..])
        };
        AttemptRef {
            xid: self.xid,
            header,
            args: &self.args,
            reply_max: self.reply_max(),
            ddp_results: &self.opts.ddp_results,
        }
    }

    fn count_attempt(&mut self) {
        self.attempts += 1;
        if self.attempts > 1 {
            Metrics::inc(&self.metrics.retransmits);
            self.stats.retransmit();
            tracing::debug!(attempts = self.attempts, "retransmitting");
        }
    }

    fn reply_max(&self) -> u32 {
        self.opts.reply_max.unwrap_or(self.config.reply_max)
    }

    /// The last transmission timed out: `Err(Timeout)` once the
    /// retransmissions allowed are used up.
    fn timed_out(&self) -> Result<(), RpcError> {
        if self.attempts > self.config.retries {
            Metrics::inc(&self.metrics.timeouts);
            tracing::debug!(attempts = self.attempts, "timed out");
            return Err(RpcError::Timeout {
                xid: self.xid,
                attempts: self.attempts,
            });
        }
        Ok(())
    }

    /// What a transmission's outcome means for the call: its reply
    /// (`Some`), another transmission (`None`: it timed out and a
    /// retransmission is allowed), or the call's error. A failure the
    /// transport blames on the caller (too large) is the caller's.
    #[inline]
    pub(crate) fn settle(&self, t: Transmission) -> Result<Option<Message>, RpcError> {
        match t {
            Transmission::Reply(m) => Ok(Some(m)),
            Transmission::Failed(e) => Err(refused_or_transport(e)),
            Transmission::Dropped(why) => {
                Err(RpcError::Transport(why.unwrap_or_else(|| {
                    TransportError::Lost("call dropped".into())
                })))
            }
            Transmission::TimedOut => self.timed_out().map(|()| None),
        }
    }

    /// Decodes the reply (when the transmissions gave one) and counts the
    /// call in its procedure's statistics.
    #[inline]
    pub(crate) fn finish(self, reply: Result<Message, RpcError>) -> Result<Reply, RpcError> {
        let mut recv = Octets::default();
        let r = reply.and_then(|reply| {
            recv = Octets::of(&reply);
            decode::decode_reply(self.xid, reply, &self.config.limits, self.metrics)
        });
        self.stats.record_since(
            r.as_ref().err().map(error_kind),
            self.started,
            self.sent,
            recv,
        );
        if let Err(e) = &r {
            tracing::debug!(error = %e, "call failed");
        }
        r
    }
}

/// The inline octets before the first DDP piece (borrowed, without a copy
/// or a reference count, when they are one piece).
#[inline]
pub(crate) fn inline_prefix(m: &Message) -> std::borrow::Cow<'_, [u8]> {
    let pieces = m.pieces();
    if let [Piece::Inline(b)] = pieces {
        return std::borrow::Cow::Borrowed(&b[..]);
    }
    let n = pieces.iter().take_while(|p| !p.is_ddp()).count();
    match pieces.get(..n) {
        Some([Piece::Inline(b)]) => std::borrow::Cow::Borrowed(&b[..]),
        Some(ps) => {
            let mut v = Vec::new();
            for p in ps {
                v.extend_from_slice(p.bytes());
            }
            std::borrow::Cow::Owned(v)
        }
        None => std::borrow::Cow::Borrowed(&[]),
    }
}

/// The statistics' kind of a call's error.
fn error_kind(e: &RpcError) -> ErrorKind {
    match e {
        RpcError::Reply(r) => match r {
            ReplyError::ProgUnavail => ErrorKind::ProgUnavail,
            ReplyError::ProgMismatch { .. } => ErrorKind::ProgMismatch,
            ReplyError::ProcUnavail => ErrorKind::ProcUnavail,
            ReplyError::GarbageArgs => ErrorKind::GarbageArgs,
            ReplyError::SystemErr => ErrorKind::SystemErr,
            ReplyError::OtherAccept(_) => ErrorKind::OtherAccept,
            ReplyError::RpcMismatch { .. } => ErrorKind::RpcMismatch,
            ReplyError::AuthError(_) => ErrorKind::AuthError,
        },
        RpcError::Timeout { .. } => ErrorKind::Timeout,
        RpcError::Transport(e) if e.is_callers() => ErrorKind::Local,
        RpcError::Transport(_) => ErrorKind::Transport,
        RpcError::BadReply(_) => ErrorKind::BadReply,
        RpcError::Caller(_) => ErrorKind::Local,
    }
}

/// Connects a TCP client to `addr` with default settings (convenience for
/// tools and tests).
pub async fn connect_tcp_default(addr: SocketAddr) -> std::io::Result<Client> {
    Client::connect_tcp(addr, ClientConfig::default(), TcpConfig::default()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::XdrEncode;

    /// Every attempt, borrowed or owned, sends the header the generic
    /// encoder gives, followed by the arguments; only the last one the
    /// retransmission count allows hands the header over.
    #[test]
    fn attempts_send_the_generic_header_and_hand_it_over_last() {
        let sys = AuthSysParms::new(7, "host", 1, 2, vec![3, 4]).unwrap();
        for auth in [Auth::None, Auth::Sys(sys)] {
            let config = ClientConfig {
                retries: 2,
                auth: auth.clone(),
                ..ClientConfig::default()
            };
            let opts = CallOptions::with_ddp_results(&[100]);
            let mut b = Message::builder();
            b.put_u32(5);
            b.put_ddp_opaque(Bytes::from_static(b"data")).unwrap();
            let args = b.finish();
            let metrics = Metrics::default();
            let counters = crate::stats::ProcCounters::default();
            let mut a = Attempts::new(
                9,
                (1, 2, 3),
                args.clone(),
                &opts,
                &config,
                (&metrics, &counters),
            )
            .unwrap();
            let header = RpcMsg::call_with(9, 1, 2, 3, auth.cred()).to_vec().unwrap();
            let whole = Message::with_header(header.clone(), args.clone());
            // The async client's transmissions: the whole message.
            let o = a.next();
            assert_eq!(o.message, whole);
            assert_eq!((o.xid, o.ddp_results), (9, vec![100]));
            // Borrowed while a retransmission may follow, then owned.
            for owned in [false, true] {
                let r = a.next_ref();
                assert_eq!(&r.header[..], &header[..]);
                assert_eq!(matches!(r.header, std::borrow::Cow::Owned(_)), owned);
                if let std::borrow::Cow::Owned(h) = &r.header {
                    // Exactly the header (a `Bytes` without a copy or a
                    // second allocation).
                    assert_eq!(h.capacity(), header.len());
                }
                assert_eq!(r.args, &args);
                assert_eq!(r.ddp_results, &[100]);
            }
            assert!(a.timed_out().is_err());
            // Owned transmissions: the same message every time, the last
            // one (which takes the header and arguments) included.
            let mut a = Attempts::new(
                9,
                (1, 2, 3),
                args.clone(),
                &opts,
                &config,
                (&metrics, &counters),
            )
            .unwrap();
            for _ in 0..=config.retries {
                let o = a.next();
                assert_eq!(o.message, whole);
                assert_eq!((o.xid, o.ddp_results), (9, vec![100]));
            }
            assert!(a.timed_out().is_err());
        }
    }
}
