//! The RPC server: program registry, dispatch, RPC error replies, the
//! duplicate-reply cache.
//!
//! Handlers are registered per `(prog, vers)` and dispatch on the procedure
//! number themselves (the [`CallContext`] has it). A handler returns the
//! results as a [`Message`] (DDP-eligible results built with
//! [`crate::MessageBuilder::put_ddp_opaque`]) or a [`HandlerError`]. A
//! handler that never waits may also implement [`Handler::call_ready`],
//! which answers without a boxed future (one allocation less per call);
//! closures and handlers without it are called through [`Handler::call`]:
//!
//! | situation | reply |
//! |---|---|
//! | `rpcvers` ≠ 2 | MSG_DENIED / RPC_MISMATCH (2, 2) |
//! | credential flavor other than AUTH_NONE / AUTH_SYS, or malformed | MSG_DENIED / AUTH_ERROR (AUTH_BADCRED) |
//! | program not registered | PROG_UNAVAIL |
//! | program registered, version not | PROG_MISMATCH (lowest, highest registered) |
//! | [`HandlerError::ProcUnavail`] | PROC_UNAVAIL |
//! | [`HandlerError::GarbageArgs`] (or a [`DecodeError`] via `?`) | GARBAGE_ARGS |
//! | [`HandlerError::SystemErr`], or the handler panicked | SYSTEM_ERR |
//! | [`HandlerError::AuthError`] | MSG_DENIED / AUTH_ERROR |
//! | [`HandlerError::Drop`] | no reply |

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use rpcrdma_proto::wire::rpc::{AuthFlavor, AuthStat, MsgBody, OpaqueAuth, RpcMsg, RPC_VERSION};
use rpcrdma_proto::{DecodeError, Limits, XdrEncode};
use tokio::net::ToSocketAddrs;
use tracing::Instrument;

use crate::client::{inline_prefix, Client, ClientConfig, RpcError};
use crate::drc::{call_checksum, DrcKey, DrcLookup, DuplicateReplyCache, HashedDrcKey};
use crate::message::{Message, MessageReader, Piece};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::stats::{ErrorKind, Octets, ProcKey, ProcStats, Side};
use crate::tcp::{TcpConfig, TcpServer};
use crate::transport::{
    CallDispatcher, CallGuard, ClientIdentity, IncomingCall, ReplyRoom, ServerConnection,
};

/// Why a handler produced no results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerError {
    /// The procedure does not exist: PROC_UNAVAIL.
    ProcUnavail,
    /// The arguments do not decode: GARBAGE_ARGS.
    GarbageArgs(String),
    /// The handler failed: SYSTEM_ERR.
    SystemErr(String),
    /// Refuse the caller: MSG_DENIED / AUTH_ERROR.
    AuthError(AuthStat),
    /// Send no reply at all.
    Drop,
}

impl From<DecodeError> for HandlerError {
    fn from(e: DecodeError) -> Self {
        HandlerError::GarbageArgs(e.to_string())
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::ProcUnavail => write!(f, "PROC_UNAVAIL"),
            HandlerError::GarbageArgs(s) => write!(f, "GARBAGE_ARGS: {s}"),
            HandlerError::SystemErr(s) => write!(f, "SYSTEM_ERR: {s}"),
            HandlerError::AuthError(s) => write!(f, "AUTH_ERROR {s}"),
            HandlerError::Drop => write!(f, "dropped"),
        }
    }
}

/// Everything a handler knows about a call.
pub struct CallContext {
    /// XID.
    pub xid: u32,
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure.
    pub proc: u32,
    /// The caller's credential (AUTH_NONE or a parsed AUTH_SYS).
    pub cred: OpaqueAuth,
    /// The client identity the transport supplied.
    pub client: ClientIdentity,
    /// The arguments: inline XDR and DDP pieces (DDP-eligible argument data
    /// received by direct placement arrives as separate DDP pieces; over TCP
    /// it is inline).
    pub args: Message,
    /// How large a reply the caller can take (RPC-over-RDMA: the inline
    /// threshold and the Reply chunk offered).
    pub room: ReplyRoom,
    conn: Arc<dyn ServerConnection>,
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("xid", &self.xid)
            .field("prog", &self.prog)
            .field("vers", &self.vers)
            .field("proc", &self.proc)
            .field("client", &self.client)
            .finish()
    }
}

impl CallContext {
    /// A reader over the arguments.
    pub fn reader(&self) -> MessageReader {
        self.args.reader()
    }

    /// The peer's address (for logs).
    pub fn peer(&self) -> String {
        self.conn.peer()
    }

    /// A client for calls to the caller over the connection's backchannel
    /// (fails with `Unsupported` over TCP).
    pub fn backchannel(&self, config: ClientConfig) -> Result<Client, RpcError> {
        let t = self.conn.backchannel().map_err(RpcError::Transport)?;
        Ok(Client::new(t, config))
    }
}

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Message, HandlerError>> + Send>>;

/// A program version's procedures.
pub trait Handler: Send + Sync + 'static {
    /// Executes `ctx.proc`.
    fn call(&self, ctx: CallContext) -> HandlerFuture;

    /// Executes `ctx.proc` at once when it needs no waiting: its result,
    /// without a future (and so without the `Box` of a [`HandlerFuture`]).
    /// `None` (the default) sends the call to [`Handler::call`]. A handler
    /// that implements this must give the same result as `call` would for
    /// the same context (a panic here is caught like one in `call`: a
    /// `SYSTEM_ERR` reply). The server asks `call_ready` first, then `call`
    /// only when it answered `None`.
    fn call_ready(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
        let _ = ctx;
        None
    }
}

impl<F, Fut> Handler for F
where
    F: Fn(CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Message, HandlerError>> + Send + 'static,
{
    fn call(&self, ctx: CallContext) -> HandlerFuture {
        Box::pin(self(ctx))
    }
}

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Limits for decoding call headers.
    pub limits: Limits,
    /// Most entries of the duplicate-reply cache (0 disables it). Default
    /// 1024.
    pub drc_entries: usize,
    /// Most octets of replies the duplicate-reply cache keeps. Default
    /// 64 MiB.
    pub drc_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::DEFAULT,
            drc_entries: 1024,
            drc_bytes: 64 << 20,
        }
    }
}

/// One registered program version (shared: a call takes one reference).
struct Registered {
    handler: Arc<dyn Handler>,
    /// Procedures whose replies the duplicate-reply cache does not keep.
    uncached: Box<[u32]>,
}

/// Programs, then versions. Ordered maps: no hashing per call (a peer
/// picks the numbers looked up), and versions in order for PROG_MISMATCH.
type Registry = BTreeMap<u32, BTreeMap<u32, Arc<Registered>>>;

struct Inner {
    programs: RwLock<Registry>,
    drc: Mutex<DuplicateReplyCache>,
    metrics: Arc<Metrics>,
    stats: Arc<ProcStats>,
    config: ServerConfig,
}

/// An RPC server. Clones share the registry, the cache and the counters;
/// it serves any number of transports at once.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Default for Server {
    fn default() -> Self {
        Server::new(ServerConfig::default())
    }
}

impl Server {
    /// A server with no programs.
    pub fn new(config: ServerConfig) -> Self {
        Server {
            inner: Arc::new(Inner {
                programs: RwLock::new(BTreeMap::new()),
                drc: Mutex::new(DuplicateReplyCache::new(
                    config.drc_entries,
                    config.drc_bytes,
                )),
                metrics: Arc::new(Metrics::default()),
                stats: Arc::new(ProcStats::new(Side::Server)),
                config,
            }),
        }
    }

    /// Registers (or replaces) the handler of `prog` version `vers`.
    pub fn register(&self, prog: u32, vers: u32, handler: impl Handler) {
        self.register_arc(prog, vers, Arc::new(handler));
    }

    /// [`Server::register`] with a shared handler.
    pub fn register_arc(&self, prog: u32, vers: u32, handler: Arc<dyn Handler>) {
        self.inner
            .programs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(prog)
            .or_default()
            .insert(
                vers,
                Arc::new(Registered {
                    handler,
                    uncached: Box::new([]),
                }),
            );
    }

    /// Declares procedures of `prog` version `vers` (registered before)
    /// idempotent: their replies are not kept in the duplicate-reply cache
    /// and a retransmission simply runs them again (Linux's `RC_NOCACHE`,
    /// used for NULL, GETATTR, READ, ...). Every other procedure's reply is
    /// cached. Returns false when the version is not registered.
    pub fn set_uncached(&self, prog: u32, vers: u32, procs: &[u32]) -> bool {
        let mut reg = self
            .inner
            .programs
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match reg.get_mut(&prog).and_then(|v| v.get_mut(&vers)) {
            Some(r) => {
                *r = Arc::new(Registered {
                    handler: r.handler.clone(),
                    uncached: procs.into(),
                });
                true
            }
            None => false,
        }
    }

    /// The dispatcher to hand to a transport.
    pub fn dispatcher(&self) -> Arc<dyn CallDispatcher> {
        Arc::new(self.clone())
    }

    /// The server's counters (shared with the TCP transports it starts).
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The per-procedure statistics of the calls served (every transport).
    pub fn stats(&self) -> &Arc<ProcStats> {
        &self.inner.stats
    }

    /// Serves ONC RPC over TCP on `addr`.
    pub async fn serve_tcp(
        &self,
        addr: impl ToSocketAddrs,
        config: TcpConfig,
    ) -> std::io::Result<TcpServer> {
        TcpServer::bind(addr, config, self.dispatcher(), self.inner.metrics.clone()).await
    }

    fn lookup(&self, prog: u32, vers: u32) -> Result<Arc<Registered>, Option<(u32, u32)>> {
        let reg = self
            .inner
            .programs
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let Some(versions) = reg.get(&prog) else {
            return Err(None);
        };
        if let Some(h) = versions.get(&vers) {
            return Ok(h.clone());
        }
        let low = versions.keys().next().copied().unwrap_or(0);
        let high = versions.keys().next_back().copied().unwrap_or(0);
        Err(Some((low, high)))
    }

    fn send(&self, conn: &dyn ServerConnection, xid: u32, reply: Message, guard: CallGuard) {
        if let Err(e) = conn.send_reply(xid, reply, guard) {
            tracing::debug!(xid, error = %e, "reply not sent");
        }
    }

    fn send_header(&self, conn: &dyn ServerConnection, msg: RpcMsg, guard: CallGuard) {
        let xid = msg.xid;
        match msg.to_vec() {
            Ok(v) => self.send(conn, xid, Message::inline(v), guard),
            Err(e) => tracing::warn!(xid, error = %e, "cannot encode reply header"),
        }
    }

    /// Everything before the handler runs: decodes the call header,
    /// answers what can be answered without the handler (errors, the
    /// duplicate-reply cache) and returns the handler's future with what
    /// [`Server::finish`] needs, or `None` when the call is done (a handler
    /// that answered at once, [`Handler::call_ready`], included: finished
    /// here, so its result is not moved through a future).
    fn begin(&self, call: IncomingCall) -> Option<(CatchUnwind, Running)> {
        let IncomingCall {
            message,
            client,
            conn,
            guard,
            room,
        } = call;
        let metrics = &self.inner.metrics;
        Metrics::inc(&metrics.calls_received);
        let prefix = inline_prefix(&message);
        let (mut msg, hdr_len) = match RpcMsg::decode_call(&prefix, &self.inner.config.limits) {
            Ok(x) => x,
            Err(e) => {
                // A bad credential or verifier is answered AUTH_ERROR when
                // the XID and msg_type are readable; anything else is
                // dropped (there is nothing to answer).
                let stat = if e.field.starts_with("cred") || e.field.starts_with("authsys") {
                    Some(AuthStat::AUTH_BADCRED)
                } else if e.field.starts_with("verf") {
                    Some(AuthStat::AUTH_BADVERF)
                } else {
                    None
                };
                let xid = prefix
                    .get(0..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                match (stat, xid) {
                    (Some(stat), Some(xid)) => {
                        Metrics::inc(&metrics.err_auth_error);
                        tracing::debug!(xid, error = %e, "bad credential");
                        self.send_header(&*conn, RpcMsg::auth_error(xid, stat), guard);
                    }
                    _ => {
                        Metrics::inc(&metrics.garbage_messages);
                        tracing::debug!(error = %e, "undecodable call dropped");
                    }
                }
                return None;
            }
        };
        let xid = msg.xid;
        // Looked at in place (the header is large: moving the body out
        // was a `memcpy` call per call); the credential is taken.
        let MsgBody::Call(cb) = &mut msg.body else {
            Metrics::inc(&metrics.garbage_messages);
            return None;
        };
        let span = tracing::debug_span!(
            "rpc.serve",
            xid,
            prog = cb.prog,
            vers = cb.vers,
            proc = cb.procedure,
            client = %client,
            transport = conn.name()
        );
        let _e = span.enter();
        //= rfc5531#section-9
        //# unsigned int rpcvers;       /* must be equal to two (2) */
        if cb.rpcvers != RPC_VERSION {
            Metrics::inc(&metrics.err_rpc_mismatch);
            tracing::debug!(rpcvers = cb.rpcvers, "RPC_MISMATCH");
            self.send_header(&*conn, RpcMsg::rpc_mismatch(xid), guard);
            return None;
        }
        let flavor = cb.cred.flavor();
        if flavor != AuthFlavor::AUTH_NONE && flavor != AuthFlavor::AUTH_SYS {
            Metrics::inc(&metrics.err_auth_error);
            self.send_header(
                &*conn,
                RpcMsg::auth_error(xid, AuthStat::AUTH_BADCRED),
                guard,
            );
            return None;
        }
        let registered = match self.lookup(cb.prog, cb.vers) {
            Ok(h) => h,
            Err(None) => {
                Metrics::inc(&metrics.err_prog_unavail);
                self.send_header(&*conn, RpcMsg::prog_unavail(xid), guard);
                return None;
            }
            Err(Some((low, high))) => {
                Metrics::inc(&metrics.err_prog_mismatch);
                self.send_header(&*conn, RpcMsg::prog_mismatch(xid, low, high), guard);
                return None;
            }
        };
        let mut key = None;
        let lookup = if registered.uncached.contains(&cb.procedure) {
            DrcLookup::New
        } else {
            let (len, crc) = call_checksum(&message);
            let mut drc = self.inner.drc.lock().unwrap_or_else(|p| p.into_inner());
            let k = key.insert(drc.hashed(DrcKey {
                client: client.clone(),
                xid,
                prog: cb.prog,
                vers: cb.vers,
                proc: cb.procedure,
                len,
                crc,
            }));
            drc.begin_hashed(k)
        };
        match lookup {
            DrcLookup::New => {}
            DrcLookup::InProgress => {
                Metrics::inc(&metrics.drc_in_progress);
                tracing::debug!("retransmission of a call in progress dropped");
                return None;
            }
            DrcLookup::Replay(reply) => {
                Metrics::inc(&metrics.drc_hits);
                tracing::debug!("retransmission answered from the duplicate-reply cache");
                self.send(&*conn, xid, reply, guard);
                return None;
            }
        }
        let stats = self.inner.stats.index(ProcKey {
            prog: cb.prog,
            vers: cb.vers,
            proc: cb.procedure,
            transport: conn.name(),
        });
        let received = Octets::of(&message);
        let args = args_after_header(&message, hdr_len);
        let ctx = CallContext {
            xid,
            prog: cb.prog,
            vers: cb.vers,
            proc: cb.procedure,
            cred: std::mem::replace(&mut cb.cred, OpaqueAuth::none()),
            client,
            args,
            room,
            conn: conn.clone(),
        };
        let handler = &registered.handler;
        let started = self.inner.stats.at(stats).start();
        let ready =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.call_ready(&ctx)));
        let result = match ready {
            Ok(None) => {
                let fut = CatchUnwind(handler.call(ctx));
                drop(_e);
                return Some((
                    fut,
                    Running {
                        xid,
                        key,
                        conn,
                        guard,
                        span,
                        stats,
                        started,
                        received,
                    },
                ));
            }
            Ok(Some(r)) => Ok(r),
            Err(panic) => Err(panic),
        };
        // Answered at once: finished here, with no future to poll.
        drop(ctx);
        drop(_e);
        let run = Running {
            xid,
            key,
            conn,
            guard,
            span,
            stats,
            started,
            received,
        };
        self.finish(run, result);
        None
    }

    /// Everything after the handler: the reply (or error reply), the
    /// duplicate-reply cache, sending.
    fn finish(&self, run: Running, result: std::thread::Result<Result<Message, HandlerError>>) {
        let Running {
            xid,
            key,
            conn,
            guard,
            span,
            stats,
            started,
            received,
        } = run;
        let _e = span.enter();
        let metrics = &self.inner.metrics;
        // A panicking handler becomes SYSTEM_ERR instead of killing the
        // connection.
        let result = match result {
            Ok(r) => r,
            Err(_) => Err(HandlerError::SystemErr("handler panicked".into())),
        };
        let mut error = None;
        let reply = match result {
            Ok(results) => {
                // `RpcMsg::success(xid)`, encoded without the general encoder.
                let h = success_header_bytes(xid);
                // A void result (NULL) adds nothing to the header: no append.
                Some(
                    if results.pieces().is_empty() && results.results().is_empty() {
                        Message::inline(h)
                    } else {
                        Message::with_header(h, results)
                    },
                )
            }
            Err(e) => {
                tracing::debug!(error = %e, "handler error");
                error = Some(match &e {
                    HandlerError::ProcUnavail => ErrorKind::ProcUnavail,
                    HandlerError::GarbageArgs(_) => ErrorKind::GarbageArgs,
                    HandlerError::SystemErr(_) => ErrorKind::SystemErr,
                    HandlerError::AuthError(_) => ErrorKind::AuthError,
                    HandlerError::Drop => ErrorKind::Dropped,
                });
                let hdr = match &e {
                    HandlerError::ProcUnavail => {
                        Metrics::inc(&metrics.err_proc_unavail);
                        Some(RpcMsg::proc_unavail(xid))
                    }
                    HandlerError::GarbageArgs(_) => {
                        Metrics::inc(&metrics.err_garbage_args);
                        Some(RpcMsg::garbage_args(xid))
                    }
                    HandlerError::SystemErr(_) => {
                        Metrics::inc(&metrics.err_system_err);
                        Some(RpcMsg::system_err(xid))
                    }
                    HandlerError::AuthError(s) => {
                        Metrics::inc(&metrics.err_auth_error);
                        Some(RpcMsg::auth_error(xid, *s))
                    }
                    HandlerError::Drop => None,
                };
                hdr.and_then(|h| h.to_vec().ok()).map(Message::inline)
            }
        };
        if let Some(key) = &key {
            let mut drc = self.inner.drc.lock().unwrap_or_else(|p| p.into_inner());
            match &reply {
                Some(reply) => drc.complete_hashed(key, reply),
                None => drc.abandon_hashed(key),
            }
        }
        let sent = reply.as_ref().map(Octets::of).unwrap_or_default();
        self.inner
            .stats
            .at(stats)
            .record_since(error, started, sent, received);
        if let Some(reply) = reply {
            self.send(&*conn, xid, reply, guard);
        }
    }
}

/// The arguments of a call whose header is its first `hdr_len` octets:
/// `message.split_inline_prefix(hdr_len)` (empty if that fails), but a call
/// that is one inline piece holding the header only (NULL and every other
/// call without arguments) gets the empty message at once.
fn args_after_header(message: &Message, hdr_len: usize) -> Message {
    if let [Piece::Inline(b)] = message.pieces() {
        if b.len() == hdr_len && message.results().is_empty() {
            return Message::new();
        }
    }
    message.split_inline_prefix(hdr_len).unwrap_or_default()
}

/// A call whose handler runs: what [`Server::finish`] needs.
struct Running {
    xid: u32,
    key: Option<HashedDrcKey>,
    conn: Arc<dyn ServerConnection>,
    guard: CallGuard,
    span: tracing::Span,
    /// The procedure's statistics (index in the server's table).
    stats: usize,
    /// When the handler was called ([`crate::stats::ProcCounters::start`];
    /// 0: not timed).
    started: u64,
    /// The call's octets.
    received: Octets,
}

/// Polls a handler's future, turning a panic into `Err`.
struct CatchUnwind(HandlerFuture);

impl Future for CatchUnwind {
    type Output = std::thread::Result<Result<Message, HandlerError>>;
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let f = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.as_mut().poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(r)) => std::task::Poll::Ready(Ok(r)),
            Err(e) => std::task::Poll::Ready(Err(e)),
        }
    }
}

/// A waker that does nothing (for the first, inline poll of a call).
struct NoopWake;

impl std::task::Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

thread_local! {
    static NOOP_WAKER: std::task::Waker = std::task::Waker::from(Arc::new(NoopWake));
}

impl CallDispatcher for Server {
    /// Runs the call on the transport's task as far as it goes without
    /// waiting (most handlers never wait: then no task is spawned, and the
    /// reply is queued before the transport looks for more work); a call
    /// that has to wait continues in a task of its own. The inline poll
    /// uses a no-op waker: the spawned task polls the future again at once,
    /// which re-checks (and re-registers) whatever it waits for.
    fn dispatch(&self, call: IncomingCall) {
        let Some((mut fut, run)) = self.begin(call) else {
            return;
        };
        let polled = NOOP_WAKER.with(|w| {
            let mut cx = std::task::Context::from_waker(w);
            let _e = run.span.enter();
            Pin::new(&mut fut).poll(&mut cx)
        });
        match polled {
            std::task::Poll::Ready(result) => self.finish(run, result),
            std::task::Poll::Pending => {
                let server = self.clone();
                let span = run.span.clone();
                tokio::spawn(
                    async move {
                        let result = fut.await;
                        server.finish(run, result);
                    }
                    .instrument(span),
                );
            }
        }
    }
}

/// Replies whose headers share one allocation of a reply thread's slab.
const HEADER_SLAB_REPLIES: usize = 16;

/// `RpcMsg::success_header(xid)` as [`Bytes`], carved from a per-thread
/// slab: one allocation per 16 replies instead of one per reply (a
/// `malloc` and `free` were ~130 of the ~3,600 user-space instructions of
/// a NULL call at our TCP server; BENCHMARKS.md, seventh pass). A header
/// kept (by the duplicate-reply cache) keeps its slab, 384 octets, alive:
/// bounded by the cache's size.
fn success_header_bytes(xid: u32) -> Bytes {
    use std::cell::RefCell;
    thread_local! {
        static SLAB: RefCell<bytes::BytesMut> = RefCell::new(bytes::BytesMut::new());
    }
    let h = RpcMsg::success_header(xid);
    SLAB.with(|s| {
        let mut s = s.borrow_mut();
        if s.capacity() - s.len() < h.len() {
            *s = bytes::BytesMut::with_capacity(h.len() * HEADER_SLAB_REPLIES);
        }
        s.extend_from_slice(&h);
        s.split().freeze()
    })
}

#[cfg(test)]
mod tests {

    /// The slab-carved reply headers are exactly `success_header`, and one
    /// carved earlier is not touched by those carved after it, across
    /// slab refills and threads.
    #[test]
    fn success_header_bytes_are_the_header_and_stay_put() {
        let check = |base: u32| {
            let hs: Vec<(u32, Bytes)> = (0..100u32)
                .map(|i| base.wrapping_add(i.wrapping_mul(0x9E37_79B9)))
                .map(|x| (x, success_header_bytes(x)))
                .collect();
            for (x, h) in &hs {
                assert_eq!(&h[..], &RpcMsg::success_header(*x)[..]);
            }
        };
        check(0);
        std::thread::spawn(move || check(7)).join().unwrap();
        check(u32::MAX - 40);
    }
    use super::*;
    use proptest::prelude::*;

    fn piece() -> impl Strategy<Value = Piece> {
        (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(ddp, v)| {
            if ddp {
                Piece::Ddp(v.into())
            } else {
                Piece::Inline(v.into())
            }
        })
    }

    proptest! {
        #[test]
        fn args_after_header_is_split_inline_prefix(
            pieces in proptest::collection::vec(piece(), 0..4),
            results in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 0..2),
            hdr_len in 0usize..80,
        ) {
            let mut m = Message::from_pieces(pieces);
            if !results.is_empty() {
                m = Message::with_results(m.flatten(), results);
            }
            prop_assert_eq!(
                args_after_header(&m, hdr_len),
                m.split_inline_prefix(hdr_len).unwrap_or_default()
            );
        }
    }

    #[test]
    fn args_after_header_of_a_header_only_call() {
        let m = Message::inline(vec![7u8; 40]);
        assert_eq!(args_after_header(&m, 40), Message::new());
        assert_eq!(
            args_after_header(&m, 40),
            m.split_inline_prefix(40).unwrap()
        );
    }

    /// Catches the replies a server sends.
    #[derive(Default)]
    struct Capture(Mutex<Vec<(u32, Message)>>);

    impl ServerConnection for Capture {
        fn send_reply(
            &self,
            xid: u32,
            reply: Message,
            _guard: CallGuard,
        ) -> Result<(), crate::transport::TransportError> {
            self.0.lock().unwrap().push((xid, reply));
            Ok(())
        }
        fn backchannel(
            &self,
        ) -> Result<Arc<dyn crate::transport::ClientTransport>, crate::transport::TransportError>
        {
            Err(crate::transport::TransportError::Unsupported("test"))
        }
        fn peer(&self) -> String {
            "test".into()
        }
        fn name(&self) -> &'static str {
            "test"
        }
    }

    /// The test program with [`Handler::call_ready`].
    struct Ready;

    impl Handler for Ready {
        fn call(&self, ctx: CallContext) -> HandlerFuture {
            Box::pin(crate::testprog::test_handler(ctx))
        }
        fn call_ready(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
            Some(crate::testprog::test_handler_ready(ctx))
        }
    }

    /// Panics in `call_ready` (or, with `.0`, in its future).
    struct Panics(bool);

    impl Handler for Panics {
        fn call(&self, _ctx: CallContext) -> HandlerFuture {
            Box::pin(async { panic!("in the future") })
        }
        fn call_ready(&self, _ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
            if self.0 {
                None
            } else {
                panic!("in call_ready")
            }
        }
    }

    /// The reply `server` sends to a call of `prog`/`proc` with `args`.
    fn answer(server: &Server, prog: u32, proc_: u32, args: &[u8]) -> Option<Bytes> {
        let conn = Arc::new(Capture::default());
        let mut m = Vec::new();
        for w in [7u32, 0, 2, prog, 1, proc_, 0, 0, 0, 0] {
            m.extend_from_slice(&w.to_be_bytes());
        }
        m.extend_from_slice(args);
        server.dispatch(IncomingCall {
            message: Message::inline(m),
            client: ClientIdentity(Bytes::from_static(b"c")),
            conn: conn.clone(),
            guard: CallGuard::none(),
            room: crate::transport::ReplyRoom::UNBOUNDED,
        });
        let mut r = conn.0.lock().unwrap();
        assert!(r.len() <= 1);
        r.pop().map(|(xid, m)| {
            assert_eq!(xid, 7);
            m.flatten()
        })
    }

    proptest! {
        /// A handler's `call_ready` fast path gives the replies its `call`
        /// gives (the test program, any procedure, any arguments, garbage
        /// included).
        #[test]
        fn call_ready_is_call(proc_ in 0u32..6, args in proptest::collection::vec(any::<u8>(), 0..24), words in proptest::collection::vec(0u32..40, 0..4)) {
            let server = Server::new(ServerConfig::default());
            server.register(1, 1, Ready);
            server.register(2, 1, crate::testprog::test_handler);
            server.set_uncached(1, 1, &[0, 1, 2, 3, 4, 5]);
            server.set_uncached(2, 1, &[0, 1, 2, 3, 4, 5]);
            let mut a = Vec::new();
            for w in words {
                a.extend_from_slice(&w.to_be_bytes());
            }
            a.extend_from_slice(&args);
            for a in [&a[..], &args[..], &[]] {
                prop_assert_eq!(answer(&server, 1, proc_, a), answer(&server, 2, proc_, a));
            }
        }
    }

    #[test]
    fn a_panic_in_call_ready_is_system_err_like_one_in_the_future() {
        let server = Server::new(ServerConfig::default());
        server.register(1, 1, Panics(false));
        server.register(2, 1, Panics(true));
        let a = answer(&server, 1, 0, &[]).unwrap();
        assert_eq!(a, answer(&server, 2, 0, &[]).unwrap());
        assert_eq!(a, Bytes::from(RpcMsg::system_err(7).to_vec().unwrap()));
    }
}
