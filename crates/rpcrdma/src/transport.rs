//! The transport abstraction between the RPC runtime and a connection.
//!
//! # Design: driver tasks and channels
//!
//! A transport runs its own tasks (for TCP: one reader and one writer task
//! per connection) and talks to the RPC layer through plain, non-async
//! methods and channels, so that the traits are object safe and an RPC
//! client or server does not care which transport it sits on:
//!
//! * **Client side** ([`ClientTransport`]): [`ClientTransport::send_call`]
//!   queues a complete call message ([`OutgoingCall`]: RPC header and
//!   arguments as [`Message`] pieces, plus the DDP result buffer sizes an
//!   RDMA transport needs to offer Write chunks) and returns a oneshot
//!   receiver that the transport's reader task completes with the reply
//!   whose XID matches. Any number of calls may be in flight on one
//!   connection. On connection loss every outstanding receiver gets the
//!   same [`TransportError`].
//! * **Server side**: a transport hands each received call to a
//!   [`CallDispatcher`] (the [`crate::Server`]) as an [`IncomingCall`],
//!   which carries the [`ClientIdentity`] (supplied by the transport; never a
//!   source port), and a [`ServerConnection`] to send the reply on. The
//!   transport bounds the calls in flight per connection with a
//!   [`CallGuard`] that travels with the call and then with its reply
//!   ([`ServerConnection::send_reply`]) until the reply has been written
//!   (or is dropped with the call when there is no reply), so a peer that
//!   sends calls but never reads replies cannot make the server queue
//!   unbounded replies.
//! * **Backchannel** (RFC 8167 over RDMA): a server reaches the client on
//!   the same connection through [`ServerConnection::backchannel`], which is
//!   a [`ClientTransport`]; a client serves backchannel calls by handing a
//!   [`CallDispatcher`] to [`ClientTransport::set_backchannel`]. ONC RPC over
//!   TCP has no backchannel in this project: both return
//!   [`TransportError::Unsupported`].
//!
//! DDP marking travels end to end: an RDMA transport moves [`crate::Piece::Ddp`]
//! pieces by direct placement and delivers received DDP data as DDP pieces;
//! a stream transport sends them inline with their XDR pad and delivers
//! every received message as one inline piece.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::message::Message;
use crate::metrics::Metrics;
use crate::record::RecordError;

/// A connection-level failure. Cloned to every call it fails.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// Closed locally (by [`ClientTransport::close`] or a server shutdown).
    Closed,
    /// The connection was lost (I/O error, or the peer closed it).
    Lost(String),
    /// The peer broke the framing (record marking); the connection was
    /// closed.
    Framing(RecordError),
    /// The transport does not support this operation (e.g. the backchannel
    /// over TCP).
    Unsupported(&'static str),
    /// The caller's message is larger than the transport accepts.
    TooLarge {
        /// XDR octets of the message.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The caller used an XID that already has a call outstanding.
    XidInUse(u32),
    /// The caller's message cannot be sent as described (e.g. inline pieces
    /// that are not whole XDR items); only that call fails, the connection
    /// goes on.
    BadMessage(&'static str),
}

impl TransportError {
    /// True when the caller, not the connection or the peer, is to blame.
    pub fn is_callers(&self) -> bool {
        matches!(
            self,
            TransportError::TooLarge { .. }
                | TransportError::XidInUse(_)
                | TransportError::BadMessage(_)
        )
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Closed => write!(f, "connection closed locally"),
            TransportError::Lost(why) => write!(f, "connection lost: {why}"),
            TransportError::Framing(e) => write!(f, "connection closed: {e}"),
            TransportError::Unsupported(what) => write!(f, "not supported by transport: {what}"),
            TransportError::TooLarge { len, max } => {
                write!(f, "message of {len} octets exceeds transport limit {max}")
            }
            TransportError::XidInUse(x) => write!(f, "xid 0x{x:08x} already outstanding"),
            TransportError::BadMessage(why) => write!(f, "unusable call message: {why}"),
        }
    }
}

impl std::error::Error for TransportError {}

/// A call handed to a [`ClientTransport`].
#[derive(Clone, Debug)]
pub struct OutgoingCall {
    /// The XID (also the first word of `message`).
    pub xid: u32,
    /// The complete call: RPC header and arguments.
    pub message: Message,
    /// Largest reply (XDR octets, DDP results excluded) the caller expects;
    /// an RDMA transport sizes a Reply chunk from it. Stream transports
    /// ignore it.
    pub reply_max: u32,
    /// Maximum length of each DDP-eligible result, in order; an RDMA
    /// transport offers one Write chunk per entry. Stream transports ignore
    /// it (the results arrive inline).
    pub ddp_results: Vec<u32>,
}

impl OutgoingCall {
    /// The call, borrowed.
    pub(crate) fn as_ref(&self) -> AttemptRef<'_> {
        AttemptRef {
            xid: self.xid,
            header: std::borrow::Cow::Borrowed(&[]),
            args: &self.message,
            reply_max: self.reply_max,
            ddp_results: &self.ddp_results,
        }
    }
}

/// One transmission of a call, borrowed from the client that makes it (for
/// a transport that copies what it sends at once: no copy of the message).
pub(crate) struct AttemptRef<'m> {
    /// The XID.
    pub(crate) xid: u32,
    /// Inline octets before `args` (the RPC header; empty when `args` is
    /// the whole call). Owned when nothing needs it after this attempt: the
    /// transport may keep the buffer.
    pub(crate) header: std::borrow::Cow<'m, [u8]>,
    /// The rest of the call message.
    pub(crate) args: &'m Message,
    /// See [`OutgoingCall::reply_max`].
    pub(crate) reply_max: u32,
    /// See [`OutgoingCall::ddp_results`].
    pub(crate) ddp_results: &'m [u32],
}

/// Where a reply (the complete reply message: RPC header and results) or
/// the connection's failure arrives.
pub type ReplyReceiver = oneshot::Receiver<Result<Message, TransportError>>;

/// The requester half of a connection.
pub trait ClientTransport: Send + Sync + 'static {
    /// Queues a call; the reply with the same XID completes the receiver.
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError>;
    /// Queues a call to be given up at `deadline`. True with the receiver
    /// when the transport does that itself: then, at `deadline`, it
    /// forgets the call (as [`ClientTransport::cancel`] does) and drops the
    /// reply's sender, and the caller needs no timer of its own. False (the
    /// default: [`ClientTransport::send_call`]) when the caller must time
    /// the call out and cancel it.
    fn send_call_until(
        &self,
        call: OutgoingCall,
        deadline: std::time::Instant,
    ) -> Result<(ReplyReceiver, bool), TransportError> {
        let _ = deadline;
        self.send_call(call).map(|rx| (rx, false))
    }
    /// The RPC-over-RDMA client transport this is, if it is one: the async
    /// [`crate::Client`] then hands it each transmission borrowed (no copy
    /// of the call message per transmission). `None` by default.
    #[doc(hidden)]
    fn as_rdma(&self) -> Option<&crate::rdma::RdmaClientTransport> {
        None
    }
    /// The ONC RPC over TCP client transport this is, if it is one: the
    /// async [`crate::Client`] then waits for each reply in a slot it may
    /// read itself. `None` by default.
    #[doc(hidden)]
    fn as_tcp(&self) -> Option<&crate::tcp::TcpClientTransport> {
        None
    }
    /// Forgets an outstanding XID (after a timeout): a late reply is dropped
    /// and counted.
    fn cancel(&self, xid: u32);
    /// Serves calls the peer makes on this connection's backchannel.
    fn set_backchannel(&self, dispatcher: Arc<dyn CallDispatcher>) -> Result<(), TransportError>;
    /// Closes the connection gracefully: queued calls are still sent,
    /// outstanding calls fail with [`TransportError::Closed`] once the peer
    /// closes.
    fn close(&self);
    /// Why the connection is unusable, `None` while it is up.
    fn closed_reason(&self) -> Option<TransportError>;
    /// The counters of this connection.
    fn metrics(&self) -> Arc<Metrics>;
    /// Short transport name (`"tcp"`).
    fn name(&self) -> &'static str;
}

/// Who a call comes from, as the duplicate-reply cache keys it. The
/// transport chooses it (for TCP by default the peer's IP address without
/// the port; an RDMA transport may use the connection's identity); it is
/// never the source port alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientIdentity(pub Bytes);

impl fmt::Display for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) => f.write_str(s),
            Err(_) => {
                for b in self.0.iter() {
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// The transport's in-flight accounting of one received call (for TCP its
/// place in the connection's count of calls being executed; for RDMA it
/// may stand for a receive credit). Released when dropped.
#[derive(Default)]
pub struct CallGuard(Held);

/// What a [`CallGuard`] holds.
#[derive(Default)]
enum Held {
    #[default]
    Nothing,
    /// Anything, released by its own `Drop` (held, never read).
    Boxed(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
    /// One call of a count, given back by [`CallCount::release`] (no
    /// allocation per call: a `Box` was a `malloc` and a `free`, ~130
    /// user-space instructions, per call at the TCP server).
    Counted(Arc<dyn CallCount>),
}

/// A count of calls in flight that a [`CallGuard`] holds one of
/// ([`CallGuard::counted`]): the guard calls [`CallCount::release`] once,
/// when it is dropped.
pub trait CallCount: Send + Sync {
    /// Gives one call back.
    fn release(&self);
}

impl CallGuard {
    /// A guard that accounts for nothing.
    pub fn none() -> Self {
        CallGuard(Held::Nothing)
    }

    /// A guard holding `held`, released (dropped) with the guard.
    pub fn new(held: Box<dyn Any + Send + Sync>) -> Self {
        CallGuard(Held::Boxed(held))
    }

    /// A guard holding one call of `count` (taken by the caller), given
    /// back when the guard is dropped.
    pub fn counted(count: Arc<dyn CallCount>) -> Self {
        CallGuard(Held::Counted(count))
    }

    /// True unless the guard accounts for nothing.
    pub fn is_held(&self) -> bool {
        !matches!(self.0, Held::Nothing)
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Held::Counted(c) = &self.0 {
            c.release();
        }
    }
}

impl fmt::Debug for CallGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CallGuard({})",
            if self.is_held() { "held" } else { "none" }
        )
    }
}

/// The responder half of a connection, as a call sees it.
pub trait ServerConnection: Send + Sync + 'static {
    /// Queues the reply (complete message: RPC header and results) to the
    /// call `xid`. The transport keeps `guard` until the reply is written.
    fn send_reply(&self, xid: u32, reply: Message, guard: CallGuard) -> Result<(), TransportError>;
    /// A client transport for calls to the peer on this connection's
    /// backchannel.
    fn backchannel(&self) -> Result<Arc<dyn ClientTransport>, TransportError>;
    /// The peer's address, for logs.
    fn peer(&self) -> String;
    /// Short transport name (`"tcp"`).
    fn name(&self) -> &'static str;
}

/// A call received by a transport.
pub struct IncomingCall {
    /// The complete call message (RPC header and arguments).
    pub message: Message,
    /// Who sent it.
    pub client: ClientIdentity,
    /// Where to answer.
    pub conn: Arc<dyn ServerConnection>,
    /// The transport's in-flight accounting: hand it back with the reply.
    pub guard: CallGuard,
    /// How large a reply the caller can take.
    pub room: ReplyRoom,
}

/// How large a reply the caller can take, as the transport knows it: for
/// RPC-over-RDMA the responder's inline threshold and the Reply chunk the
/// requester offered (RFC 8166 §3.5.3: a reply that fits neither is
/// answered with ERR_CHUNK, never cut), so a procedure whose reply size is
/// its own choice (NFS READDIR) can stay within it; over TCP, no bound
/// beyond the record size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyRoom {
    /// The largest RDMA Send the responder may make, transport header
    /// included (`None`: not an RDMA transport).
    pub inline_threshold: Option<u32>,
    /// Octets of the requester's Reply chunk, if it offered one.
    pub reply_chunk: Option<u64>,
    /// Octets of the first Write chunk the requester offered, when the
    /// transport sends a DDP item that is a file range
    /// ([`Piece::File`](rpcrdma_proto::message::Piece::File)) straight
    /// from the file (RPC-over-RDMA over a provider that can:
    /// [`Provider::sends_files`](rpcrdma_proto::provider::Provider::sends_files)).
    /// `None`: a file piece would be read into memory first (correct, but
    /// no cheaper than reading it yourself).
    pub file_chunk: Option<u64>,
}

impl ReplyRoom {
    /// What an inline reply leaves for a transport header: the fixed seven
    /// words plus echoed chunk lists of a few segments (an unused Reply
    /// chunk, an unused Write chunk, each 16 octets a segment).
    pub const HEADER_ALLOWANCE: u32 = 256;

    /// No bound (TCP, or a transport that does not know).
    pub const UNBOUNDED: ReplyRoom = ReplyRoom {
        inline_threshold: None,
        reply_chunk: None,
        file_chunk: None,
    };

    /// The largest RPC reply message (RPC header and results, without the
    /// DDP-eligible data that goes into Write chunks) the transport can
    /// carry: the larger of the Reply chunk and what the inline threshold
    /// leaves after [`ReplyRoom::HEADER_ALLOWANCE`]. `None`: unbounded.
    pub fn max_reply(&self) -> Option<u64> {
        let inline = self
            .inline_threshold?
            .saturating_sub(Self::HEADER_ALLOWANCE);
        Some(u64::from(inline).max(self.reply_chunk.unwrap_or(0)))
    }
}

impl fmt::Debug for IncomingCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncomingCall")
            .field("len", &self.message.xdr_len())
            .field("client", &self.client)
            .field("peer", &self.conn.peer())
            .finish()
    }
}

/// Receives calls from transports (implemented by [`crate::Server`]).
pub trait CallDispatcher: Send + Sync + 'static {
    /// Takes a received call; must not block (spawn to do work).
    fn dispatch(&self, call: IncomingCall);
}
