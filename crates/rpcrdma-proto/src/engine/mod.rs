//! The RPC-over-RDMA transport engine (sans-IO): one [`Connection`] per RDMA
//! connection, requester and responder at once.
//!
//! The engine owns no provider, no clock and no thread. Operations that
//! need the RDMA provider take it as an argument; `now` is an argument
//! (used as an opaque value, never read from a clock); timers are data
//! ([`Connection::poll_timeout`], [`Connection::handle_timeout`]).
//!
//! A driver loop:
//!
//! 1. connect / accept with [`Config::connect_params`] (our RFC 8797
//!    private data and IRD/ORD); a server calls
//!    [`Connection::prepare_receives`] before accepting;
//! 2. on the provider's `Established` event call
//!    [`Connection::handle_established`], on `Disconnected`
//!    [`Connection::handle_disconnected`];
//! 3. feed every completion from `poll_completions` to
//!    [`Connection::handle_completion`];
//! 4. issue commands ([`Connection::start_call`], [`Connection::send_reply`],
//!    [`Connection::enable_backchannel`], [`Connection::close`]);
//! 5. drain [`Connection::poll_event`], sleep until
//!    [`Connection::poll_timeout`] or provider readiness.
//!
//! After the connection is lost, [`Connection::reconnect`] builds the
//! engine for the next connection with the interrupted calls queued again
//! under their original XIDs.
//!
//! Directions (RFC 8167): a client is the forward-channel requester and the
//! backchannel responder; a server is the forward-channel responder and the
//! backchannel requester. Which direction a received message belongs to
//! follows from the role and [`crate::wire::direction::classify`].
//!
//! Inside (`docs/design/engine.md` has the map, who owns what, and a call's
//! path): `connection` (the orchestrator: routing, receives, the sticky
//! error), `requester` and `responder` (one half each, the same code in
//! both directions, per-call state as an enum), `setup` (what is settled
//! before calls flow, as one `Params`), `framing` (the version seam: header
//! codec, credit and invalidation rules), `plan` (message forms from
//! lengths, pure), `marshal` (XDR stream layout, pure), `resources` (work
//! requests, pools, receive buffers, backlog), `timer`, `budget` (the shared
//! Read-sink budget), `ids`.

use core::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::provider::{Blame, Bytes, ConnectParams, DisconnectReason, ProviderError, Status};
use crate::wire::private_data::{InlineSize, PrivateData};
use crate::Limits;

mod arena;
mod budget;
mod connection;
mod framing;
pub mod ids;
mod marshal;
mod plan;
mod requester;
mod resources;
mod responder;
mod setup;
mod slab;
mod timer;
mod version;

pub use crate::message::{Message, Piece};
pub use crate::wire::direction::Role;
pub use budget::ReadSinkBudget;
pub use connection::Connection;
pub use framing::RdmaErrorReport;
pub use timer::Deadlines;

/// Engine configuration. Defaults follow Linux (anchors §1).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Client (active side, forward requester) or server.
    pub role: Role,
    /// Credits we request as a requester (the Call credit word). Default 128
    /// (Linux `RPCRDMA_DEF_SLOT_TABLE`); backchannel calls request
    /// [`Config::backchannel_slots`].
    pub credits_requested: u32,
    /// Credits we grant as forward responder, in every reply. Default 64
    /// (Linux svcrdma `RPCRDMA_MAX_REQUESTS`). Zero is treated as one.
    pub credits_granted: u32,
    /// Largest message we send (our RFC 8797 Send Size). Default 4096.
    pub inline_send: u32,
    /// Largest message we receive (our RFC 8797 Receive Size, and the size
    /// of every receive buffer). Default 4096.
    pub inline_recv: u32,
    /// The R flag of our private data. Default: set by a client, clear by a
    /// server (as Linux).
    pub remote_invalidation: bool,
    /// Backchannel slots: a client grants this many (after
    /// [`Connection::enable_backchannel`]); a server requests this many.
    /// Default 16 (Linux `xprt_rdma_bc_max_slots`).
    pub backchannel_slots: u32,
    /// Limits on peer-controlled values.
    pub limits: Limits,
    /// Reply size assumed when [`OutgoingCall::reply_max`] is 0. Default
    /// 4096.
    pub default_reply_max: u32,
    /// RDMA Reads we accept at once (CM responder resources). Default: 16
    /// for a client (it serves Read chunks), 0 for a server.
    pub ird: u8,
    /// RDMA Reads we issue at once (CM initiator depth). Default: 0 for a
    /// client (it never reads, like Linux), 16 for a server.
    pub ord: u8,
    /// A sent call without a reply after this long ends the connection
    /// (Linux: a timeout forces a disconnect; the call is retransmitted on
    /// the next connection). Default 60 s. `None`: no timer.
    pub call_timeout: Option<Duration>,
    /// Transmissions of one call that end in its own timeout
    /// ([`Config::call_timeout`]; each transmission is on a new
    /// connection) before it fails with [`CallFailure::NoReply`] instead of
    /// waiting for another connection: Linux NFS `retrans` + 1. A
    /// transmission cut short by a connection loss for another reason (a
    /// reset, a Terminate, a failed reconnect) does not count: like Linux
    /// (`xprt_adjust_timeout` counts timeouts, not resets), a flapping
    /// connection never fails a call within milliseconds as "never
    /// answered"; the RPC client's own timeout bounds that case. Default 3
    /// (Linux's `retrans=2` for NFS over RDMA). `None`: unbounded.
    pub max_transmissions: Option<u32>,
    /// Calls waiting for a credit before [`CallError::QueueFull`]. Default
    /// 1024.
    pub max_queued: usize,
    /// First XID this endpoint uses as a requester.
    pub first_xid: u32,
    /// A received call whose RDMA Reads have not all completed this long
    /// after they were issued ends the connection
    /// ([`PeerError::ReadTimeout`]): the requester exposed the chunk and
    /// must answer its Reads. Default 30 s. Linux svcrdma has no such
    /// timer (it relies on the transport), but a peer that answers all but
    /// part of a Read keeps a healthy transport and the sinks pinned for
    /// ever. 30 s is half the default call timeout of a requester (60 s,
    /// as Linux), so a stalled peer's sinks are freed before honest calls
    /// queued behind them time out, and far above the time a Read of
    /// [`Limits::max_message_len`] takes on any working link. `None`: no
    /// timer.
    pub read_timeout: Option<Duration>,
    /// A connection on which the peer has sent no valid RPC-over-RDMA call
    /// this long after it was established is closed
    /// ([`ConnectionError::IdleTimeout`]), so that silent connections
    /// cannot hold a server's connection slots. Default 15 s at a server
    /// (a requester sends its first call right after connecting; Linux
    /// mounts send NULL at once), `None` (no timer) at a client.
    pub idle_timeout: Option<Duration>,
    /// A Read-sink budget shared with other connections (all those of one
    /// server): calls wait for it in arrival order, in addition to the
    /// per-connection [`Limits::max_read_sink_bytes`]; a call that can
    /// never fit gets ERR_CHUNK. Default `None`.
    pub read_budget: Option<Arc<ReadSinkBudget>>,
    /// The RPC-over-RDMA versions this end speaks. Default
    /// [`RpcRdmaVersion::V1`] (the engine as it always was; the command
    /// line tool defaults to `Auto`).
    pub rpcrdma_version: RpcRdmaVersion,
    /// Version 2: reverse-direction (backchannel) messages may carry
    /// chunks — we advertise Reverse Request Support GENL (a client only
    /// with RDMA Read resources, `ord` > 0), else INLINE. Default true.
    /// Version 1 never uses chunks in the reverse direction.
    pub reverse_chunks: bool,
    /// Version 2: the largest Write or Reply chunk a call may offer when
    /// the responder answers RDMA2_ERR_WRITE_RESOURCE or
    /// RDMA2_ERR_REPLY_RESOURCE with the size it needs: the call is sent
    /// again, with the same XID, with a chunk that large; a larger need
    /// fails the call with the size in the error. 0: never. Default 4 MiB
    /// (`Limits::max_message_len`).
    pub max_retry_chunk: u32,
}

/// Which RPC-over-RDMA versions a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum RpcRdmaVersion {
    /// Version 1 only (RFC 8166): a version 2 message is answered with
    /// ERR_VERS in the version 1 layout (as Linux does).
    #[default]
    V1,
    /// Version 2 only (draft -09): a client fails the connection
    /// ([`ConnectionError::VersionRefused`]) when the server answers
    /// ERR_VERS; a server answers a version 1 message with ERR_VERS.
    V2,
    /// Both: a client probes with version 2 and continues in version 1 on
    /// the same connection when refused; a server adopts the version of
    /// the client's first valid message.
    Auto,
}

impl RpcRdmaVersion {
    /// `"1"`, `"2"` or `"auto"`.
    pub fn name(self) -> &'static str {
        match self {
            RpcRdmaVersion::V1 => "1",
            RpcRdmaVersion::V2 => "2",
            RpcRdmaVersion::Auto => "auto",
        }
    }
}

impl std::str::FromStr for RpcRdmaVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1" => Ok(RpcRdmaVersion::V1),
            "2" => Ok(RpcRdmaVersion::V2),
            "auto" => Ok(RpcRdmaVersion::Auto),
            _ => Err(format!("rpcrdma version must be 1, 2 or auto, not {s:?}")),
        }
    }
}

/// What a connection settled about the RPC-over-RDMA version
/// ([`Connection::version_info`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionInfo {
    /// The version in use: 1 or 2 (0 while it is still open).
    pub version: u32,
    /// A version 2 probe was answered with ERR_VERS and the connection
    /// went on in version 1.
    pub fallback: bool,
    /// The properties we advertised (empty in version 1).
    pub local_properties: crate::wire::v2::PropSet,
    /// The properties the peer advertised (empty in version 1, or when
    /// the peer sent no CONNPROP).
    pub peer_properties: crate::wire::v2::PropSet,
    /// The peer showed it speaks no version 2 (see
    /// [`Connection::peer_is_v1_only`]).
    pub peer_v1_only: bool,
}

impl Config {
    /// Client defaults.
    pub fn client() -> Config {
        Config {
            role: Role::Client,
            credits_requested: 128,
            credits_granted: 64,
            inline_send: 4096,
            inline_recv: 4096,
            remote_invalidation: true,
            backchannel_slots: 16,
            limits: Limits::DEFAULT,
            default_reply_max: 4096,
            ird: 16,
            ord: 0,
            call_timeout: Some(Duration::from_secs(60)),
            max_transmissions: Some(3),
            max_queued: 1024,
            first_xid: 0x1000_0000,
            read_timeout: Some(Duration::from_secs(30)),
            idle_timeout: None,
            read_budget: None,
            rpcrdma_version: RpcRdmaVersion::V1,
            reverse_chunks: true,
            max_retry_chunk: Limits::DEFAULT.max_message_len,
        }
    }

    /// Server defaults.
    pub fn server() -> Config {
        Config {
            role: Role::Server,
            remote_invalidation: false,
            ird: 0,
            ord: 16,
            first_xid: 0x8000_0000,
            idle_timeout: Some(Duration::from_secs(15)),
            ..Config::client()
        }
    }

    /// Our RFC 8797 private data (sizes rounded down to what the format can
    /// say; at least 1024).
    pub fn private_data(&self) -> [u8; 8] {
        self.private_data_struct().to_bytes()
    }

    pub(crate) fn private_data_struct(&self) -> PrivateData {
        let size = |b: u32| InlineSize::from_bytes_round_down(b).unwrap_or(InlineSize::MIN);
        PrivateData::new(
            size(self.inline_send),
            size(self.inline_recv),
            self.remote_invalidation,
        )
    }

    /// What to pass to the provider's connect or accept.
    pub fn connect_params(&self) -> ConnectParams {
        ConnectParams {
            private_data: self.private_data().to_vec(),
            ird: self.ird,
            ord: self.ord,
        }
    }
}

/// A call to send. The first piece must be inline and start with the RPC
/// header; its first word (the XID) is overwritten with the XID the engine
/// assigns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingCall {
    /// The whole RPC call message. Its [`Piece::Ddp`] data goes into Read
    /// chunks when it does not fit inline: registered read-only as it is
    /// ([`Provider::register_shared`](crate::provider::Provider::register_shared):
    /// no copy, never written).
    pub message: Message,
    /// Largest possible reply in octets, DDP results included (0: the
    /// configured default).
    pub reply_max: u32,
    /// One entry per DDP-eligible result (e.g. NFS READ data): its largest
    /// length. Each gets a Write chunk when the reply may not fit inline.
    pub ddp_results: Vec<u32>,
}

impl OutgoingCall {
    /// A call whose message is one inline piece.
    pub fn inline(message: impl Into<Bytes>, reply_max: u32) -> Self {
        OutgoingCall {
            message: Message::inline(message),
            reply_max,
            ddp_results: Vec::new(),
        }
    }
}

/// A reply to send. Its DDP pieces go into the call's Write chunks, in
/// order; the first word (XID) is overwritten with the call's XID.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutgoingReply {
    /// The whole RPC reply message (its DDP pieces registered read-only as
    /// they are, as a call's).
    pub message: Message,
}

/// Identifies a call we started (stable across [`Connection::reconnect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub u64);

/// Identifies a call we received and have not answered yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallHandle(pub u64);

/// A call received from the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingCall {
    /// Answer with [`Connection::send_reply`].
    pub handle: CallHandle,
    /// The transport header XID.
    pub xid: u32,
    /// True for a backchannel (RFC 8167) call.
    pub backchannel: bool,
    /// The complete reassembled RPC call: the data of each DDP-eligible
    /// item that arrived by RDMA Read is a [`Piece::Ddp`] (its XDR pad not
    /// included), the rest inline; all of it slices of one buffer.
    pub message: Message,
    /// The call arrived as a Long Call (RDMA_NOMSG + Position-Zero Read
    /// chunk).
    pub long: bool,
    /// Result octets the requester can take in each of its Write chunks.
    pub write_chunks: Vec<u64>,
    /// Octets of the Reply chunk, if the requester provided one.
    pub reply_chunk: Option<u64>,
}

/// A reply to one of our calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Our call.
    pub id: CallId,
    /// Its XID.
    pub xid: u32,
    /// The RPC reply: one inline piece without the DDP results that
    /// arrived in Write chunks (their length words are in place), and, as
    /// the message's out-of-band results ([`Message::results`]), the data
    /// written into each Write chunk we offered, as long as the responder
    /// said (empty for a chunk the responder did not use, in which case the
    /// result is inline). A conforming responder returns the item's exact
    /// length; a legacy (RFC 5666) responder may also have written and
    /// counted the item's XDR pad (up to 3 octets, which always fit: Write
    /// chunks are registered rounded up to a multiple of four). Take the
    /// item with [`Reply::result`] or
    /// [`MessageReader::ddp_opaque`](crate::message::MessageReader::ddp_opaque),
    /// which never yield the pad.
    ///
    /// Each result is the chunk's own buffer, handed over without a copy
    /// once its registration has ended (so the responder can no longer
    /// reach it); the buffer goes back to the connection's pool for a later
    /// call's chunks when the last clone of the `Bytes` is dropped.
    pub message: Message,
    /// The reply came in the Reply chunk (RDMA_NOMSG).
    pub long: bool,
}

impl Reply {
    /// The data of the DDP-eligible result that went into Write chunk `i`,
    /// given its XDR length word `xdr_len` (from `message`): the first
    /// `xdr_len` octets of the result `i` when the responder returned exactly
    /// `xdr_len` octets, or `xdr_len` plus its XDR pad (a legacy responder);
    /// the pad is never part of the data. `None` when chunk `i` is unused
    /// or was not offered, or the returned length disagrees with `xdr_len`
    /// by more than the pad.
    pub fn result(&self, i: usize, xdr_len: u32) -> Option<&[u8]> {
        let r = self.message.results().get(i)?;
        let n = xdr_len as usize;
        if n == 0 {
            return Some(&[]);
        }
        let padded = n.checked_add(marshal::pad4(n))?;
        if r.is_empty() || (r.len() != n && r.len() != padded) {
            return None;
        }
        r.get(..n)
    }
}

/// Why one of our calls failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallFailure {
    /// The responder answered RDMA_ERROR.
    RdmaError(RdmaErrorReport),
    /// The reply broke RFC 8166. Not produced by version 1: RFC 8166
    /// section 4.5 has a requester silently discard a reply with a header
    /// error (counted in [`Metrics::bad_replies`]), and the call keeps
    /// waiting for a good reply or its timeout.
    BadReply(&'static str),
    /// The call could not be marshalled (too large for every form, or a
    /// registration failed).
    Local(CallError),
    /// The connection ended before the reply arrived.
    ConnectionLost(ConnectionError),
    /// The peer never answered: the call went out on `transmissions`
    /// connections, `timeouts` of which ended in the call's own timeout
    /// ([`Config::max_transmissions`]), and the last one ended with `last`.
    NoReply {
        /// Transmissions made, one per connection.
        transmissions: u32,
        /// Transmissions that ended in the call's timeout.
        timeouts: u32,
        /// How the last connection ended.
        last: ConnectionError,
    },
}

impl fmt::Display for CallFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallFailure::RdmaError(e) => write!(f, "RDMA_ERROR {e}"),
            CallFailure::BadReply(why) => write!(f, "bad reply: {why}"),
            CallFailure::Local(e) => write!(f, "{e}"),
            CallFailure::ConnectionLost(e) => write!(f, "connection lost: {e}"),
            CallFailure::NoReply {
                transmissions,
                timeouts,
                last,
            } => write!(
                f,
                "the peer never answered: no reply after {transmissions} transmission(s), \
                 one per connection, {timeouts} of them timed out (last connection: {last})"
            ),
        }
    }
}

/// Engine output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A call arrived (forward at a server, backchannel at a client).
    CallReceived(IncomingCall),
    /// One of our calls completed; its memory is invalidated and
    /// deregistered.
    ReplyReceived(Reply),
    /// One of our calls failed. With `retransmit` the call is kept:
    /// [`Connection::reconnect`] sends it again, with the same XID, on the
    /// new connection (never on this one).
    CallFailed {
        /// Our call.
        id: CallId,
        /// Its XID.
        xid: u32,
        /// Why.
        error: CallFailure,
        /// The call may be retransmitted on a new connection.
        retransmit: bool,
    },
    /// The requester's credit grant changed.
    CreditsChanged {
        /// New number of calls we may have outstanding.
        credits: u32,
    },
    /// The connection is finished (sticky); every later command fails.
    ConnectionLost(ConnectionError),
}

/// A command the caller got wrong, or cannot be carried out now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The connection is finished.
    Closed(ConnectionError),
    /// The message is too large for any form allowed here.
    TooLarge {
        /// Octets needed.
        len: usize,
        /// Octets allowed.
        max: usize,
    },
    /// Too many calls wait for credits.
    QueueFull,
    /// No such received call (already answered, or lost).
    UnknownHandle,
    /// The message description is unusable.
    BadMessage(&'static str),
    /// The provider refused a registration.
    Provider(ProviderError),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Closed(e) => write!(f, "connection closed: {e}"),
            CallError::TooLarge { len, max } => {
                write!(f, "message of {len} octets exceeds {max}")
            }
            CallError::QueueFull => f.write_str("call queue full"),
            CallError::UnknownHandle => f.write_str("unknown call handle"),
            CallError::BadMessage(why) => write!(f, "bad message: {why}"),
            CallError::Provider(e) => write!(f, "provider: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// The peer broke the protocol in a way that ends the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerError {
    /// More calls outstanding than twice our grant.
    CreditOverrun {
        /// Calls received and not answered.
        outstanding: usize,
        /// Our grant.
        granted: u32,
    },
    /// The RDMA Reads of a received call did not all complete within
    /// [`Config::read_timeout`].
    ReadTimeout {
        /// The call's XID.
        xid: u32,
    },
    /// A reverse-direction (backchannel) call arrived at a client that
    /// posted no receives for one (before
    /// [`Connection::enable_backchannel`]): it consumed a receive meant
    /// for a reply. Linux's client disconnects the same way
    /// (`rpcrdma_bc_receive_call`: "backchannel overflow").
    UnexpectedReverseCall {
        /// The call's XID.
        xid: u32,
    },
}

/// Why a connection ended (sticky).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionError {
    /// A work request failed.
    Completion {
        /// Its status.
        status: Status,
        /// Whose fault.
        blame: Blame,
    },
    /// The provider reported the end of the connection.
    Disconnected(DisconnectReason),
    /// The provider refused a post.
    Provider(ProviderError),
    /// The peer broke the protocol.
    Peer(PeerError),
    /// A call timed out.
    Timeout,
    /// The peer sent no valid call within [`Config::idle_timeout`] of the
    /// connection's establishment.
    IdleTimeout,
    /// [`Connection::close`] was called.
    LocalClose,
    /// Our version 2 probe was refused (ERR_VERS) and this end speaks
    /// version 2 only ([`RpcRdmaVersion::V2`]): the peer supports
    /// `low..=high`.
    VersionRefused {
        /// Lowest version the peer supports.
        low: u32,
        /// Highest version the peer supports.
        high: u32,
    },
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionError::Completion { status, blame } => {
                write!(f, "work request failed: {} ({blame:?})", status.name())
            }
            ConnectionError::Disconnected(r) => write!(f, "disconnected: {r}"),
            ConnectionError::Provider(e) => write!(f, "provider refused a post: {e}"),
            ConnectionError::Peer(p) => write!(f, "protocol violation: {p:?}"),
            ConnectionError::Timeout => f.write_str("call timed out"),
            ConnectionError::IdleTimeout => {
                f.write_str("idle: the peer sent no call within the idle timeout")
            }
            ConnectionError::LocalClose => f.write_str("closed locally"),
            ConnectionError::VersionRefused { low, high } => write!(
                f,
                "the peer does not speak RPC-over-RDMA version 2 (it supports \
                 {low}..={high}) and this end was told to speak version 2 only"
            ),
        }
    }
}

impl std::error::Error for ConnectionError {}

/// How [`Connection::send_reply`] conveyed the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyForm {
    /// RDMA_MSG (DDP results, if any, in Write chunks).
    Inline,
    /// RDMA_NOMSG: the reply went into the Reply chunk.
    ReplyChunk,
    /// Neither fitted: RDMA_ERROR / ERR_CHUNK went to the requester.
    ErrChunk,
}

/// Counters, in the spirit of Linux's mountstats `xprt: rdma` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Calls sent (retransmissions included).
    pub calls_sent: u64,
    /// Calls sent again on a new connection.
    pub retransmits: u64,
    /// Calls that waited for a credit.
    pub credit_waits: u64,
    /// Replies received for our calls.
    pub replies_received: u64,
    /// Calls received from the peer.
    pub calls_received: u64,
    /// Replies we sent (error replies included).
    pub replies_sent: u64,
    /// Read chunks we offered, and their octets.
    pub read_chunks: u64,
    /// Octets in Read chunks we offered.
    pub read_chunk_bytes: u64,
    /// Write chunks we offered.
    pub write_chunks: u64,
    /// Octets the responder wrote into our Write chunks.
    pub write_chunk_bytes: u64,
    /// Reply chunks we offered.
    pub reply_chunks: u64,
    /// Octets the responder wrote into our Reply chunks.
    pub reply_chunk_bytes: u64,
    /// Long Calls we sent (RDMA_NOMSG + Position-Zero Read chunk).
    pub long_calls: u64,
    /// Long Replies we received (RDMA_NOMSG + Reply chunk).
    pub long_replies: u64,
    /// RDMA Reads we issued as responder, and their octets.
    pub rdma_reads: u64,
    /// Octets read by RDMA Read.
    pub rdma_read_bytes: u64,
    /// Most RDMA Reads ever outstanding at once (never above the ORD).
    pub max_reads_in_flight: u64,
    /// Most octets of RDMA Read sinks ever registered at once (never above
    /// [`Limits::max_read_sink_bytes`]).
    pub max_read_sink_bytes: u64,
    /// Received calls that waited for Read-sink budget (this connection's
    /// or the shared [`Config::read_budget`]).
    pub read_sink_waits: u64,
    /// Connections ended because a received call's RDMA Reads did not
    /// complete in time ([`PeerError::ReadTimeout`]).
    pub read_timeouts: u64,
    /// Connections closed because the peer sent no call in time
    /// ([`ConnectionError::IdleTimeout`]).
    pub idle_timeouts: u64,
    /// RDMA Writes we issued as responder.
    pub rdma_writes: u64,
    /// Octets written by RDMA Write.
    pub rdma_write_bytes: u64,
    /// Long Calls received.
    pub long_calls_received: u64,
    /// Long Replies sent.
    pub long_replies_sent: u64,
    /// RDMA_ERROR / ERR_VERS sent.
    pub err_vers_sent: u64,
    /// RDMA_ERROR / ERR_CHUNK sent.
    pub err_chunk_sent: u64,
    /// RDMA_ERROR / ERR_VERS received.
    pub err_vers_received: u64,
    /// RDMA_ERROR / ERR_CHUNK received.
    pub err_chunk_received: u64,
    /// RDMA_ERROR with an unknown code received.
    pub err_other_received: u64,
    /// The last credit grant the peer sent us (raw, before clamping).
    pub credits_granted: u32,
    /// Replies whose XID matched no outstanding call (dropped).
    pub bad_xids: u64,
    /// Replies to one of our calls with a header error (a Read list, a
    /// chunk we did not offer or longer than offered, RDMA_MSGP, an
    /// undecodable header): silently discarded, the call keeps waiting.
    pub bad_replies: u64,
    /// Messages whose RPC header did not start with the transport
    /// header's XID and the right `msg_type` (calls: ERR_CHUNK; replies:
    /// dropped).
    pub rpc_header_mismatches: u64,
    /// Messages dropped without an answer (too short, RDMA_DONE,
    /// unexpected backchannel calls, ...).
    pub dropped: u64,
    /// Replies sent with Send With Invalidate.
    pub send_with_invalidate: u64,
    /// Our STags the peer invalidated (RecvWithInvalidate).
    pub remote_invalidations: u64,
    /// Local Invalidates we posted.
    pub local_invalidations: u64,
    /// Work requests that waited because the send queue was full.
    pub send_queue_waits: u64,
    /// Version 2: RDMA2_CONNPROP messages sent.
    pub connprops_sent: u64,
    /// Version 2: RDMA2_CONNPROP messages received.
    pub connprops_received: u64,
    /// Version 2: RDMA2_ERROR messages sent (other than ERR_VERS, which is
    /// [`Metrics::err_vers_sent`]).
    pub rdma2_errors_sent: u64,
    /// Version 2: RDMA2_ERROR messages received (other than ERR_VERS).
    pub rdma2_errors_received: u64,
    /// Version 2: calls sent again with the same XID after an RDMA2_ERROR
    /// asked for other resources (a Long Call, no Write chunks, bigger
    /// chunks).
    pub rdma2_retries: u64,
}

/// What one [`Connection`] holds at one moment
/// ([`Connection::resources`]), for leak checks and status: at rest (no
/// call in progress either way) everything is zero but the receives
/// posted and the pooled regions, and the provider's registrations are
/// exactly `receives_posted + pooled_regions`
/// ([`Resources::regions_at_rest`]). After a close and every completion,
/// everything is zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Work requests posted and not completed (receives included).
    pub work_requests: usize,
    /// Receives posted.
    pub receives_posted: usize,
    /// Registered buffers kept for reuse: receive buffers not posted and
    /// Send buffers.
    pub pooled_regions: usize,
    /// Received calls not finished (reading their chunks, executing, or
    /// replying).
    pub calls_received: usize,
    /// Replies whose work requests have not all completed.
    pub reply_jobs: usize,
    /// Our calls sent or queued and not finished.
    pub calls_sent: usize,
    /// Octets of RDMA Read sinks registered.
    pub read_sink_bytes: u64,
    /// Octets of the shared Read-sink budget ([`Config::read_budget`])
    /// this connection holds.
    pub read_budget_held: u64,
    /// Regions waiting to be deregistered (still held by a work request
    /// after a failure).
    pub zombies: usize,
    /// Octets of unregistered chunk-sink buffers pooled for the next bulk
    /// calls (freed after an idle pause, see `Connection::poll_timeout`).
    pub pooled_sink_bytes: usize,
}

impl Resources {
    /// The provider registrations a connection at rest holds: its
    /// receive buffers (posted or pooled) and its pooled Send buffers.
    pub fn regions_at_rest(&self) -> usize {
        self.receives_posted + self.pooled_regions
    }

    /// True when nothing but receives and pooled buffers is held.
    pub fn at_rest(&self) -> bool {
        self.work_requests == self.receives_posted
            && self.calls_received == 0
            && self.reply_jobs == 0
            && self.calls_sent == 0
            && self.read_sink_bytes == 0
            && self.read_budget_held == 0
            && self.zombies == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_result_strips_only_a_legacy_pad() {
        let r = Reply {
            id: CallId(1),
            xid: 1,
            message: Message::with_results(
                Bytes::new(),
                [
                    Bytes::from_static(&[1, 2, 3, 4, 5, 0, 0, 0]),
                    Bytes::from(vec![9; 8]),
                    Bytes::new(),
                ],
            ),
            long: false,
        };
        // 5 octets + 3 of pad returned: the data is the 5.
        assert_eq!(r.result(0, 5), Some(&[1, 2, 3, 4, 5][..]));
        // Exact length.
        assert_eq!(r.result(1, 8), Some(&[9; 8][..]));
        // A length word that the returned length cannot come from.
        assert_eq!(r.result(0, 4), None);
        assert_eq!(r.result(0, 9), None);
        assert_eq!(r.result(1, 3), None, "8 is not 3 plus its pad");
        assert_eq!(r.result(0, u32::MAX), None);
        // Unused chunk (the item was inline), empty item, no such chunk.
        assert_eq!(r.result(2, 5), None);
        assert_eq!(r.result(2, 0), Some(&[][..]));
        assert_eq!(r.result(3, 0), None);
    }

    #[test]
    fn an_rdma_error_is_said_in_words_not_enum_names() {
        let all = [
            (
                RdmaErrorReport::Vers { low: 1, high: 1 },
                "ERR_VERS",
                "Vers",
            ),
            (RdmaErrorReport::Chunk, "ERR_CHUNK", "Chunk {"),
            (RdmaErrorReport::BadXdr, "RDMA2_ERR_BAD_XDR", "BadXdr"),
            (
                RdmaErrorReport::InvalHtype,
                "RDMA2_ERR_INVAL_HTYPE",
                "InvalHtype",
            ),
            (
                RdmaErrorReport::ReadChunks { max_chunks: 2 },
                "RDMA2_ERR_READ_CHUNKS",
                "ReadChunks",
            ),
            (
                RdmaErrorReport::WriteChunks { max_chunks: 3 },
                "RDMA2_ERR_WRITE_CHUNKS",
                "WriteChunks",
            ),
            (
                RdmaErrorReport::Segments { max_segments: 4 },
                "RDMA2_ERR_SEGMENTS",
                "Segments",
            ),
            (
                RdmaErrorReport::WriteResource {
                    chunk_index: 1,
                    length_needed: 5,
                },
                "RDMA2_ERR_WRITE_RESOURCE",
                "WriteResource",
            ),
            (
                RdmaErrorReport::ReplyResource { length_needed: 6 },
                "RDMA2_ERR_REPLY_RESOURCE",
                "ReplyResource",
            ),
            (RdmaErrorReport::System, "RDMA2_ERR_SYSTEM", "System"),
            (RdmaErrorReport::Other(77), "77", "Other"),
        ];
        for (e, wire, debug_name) in all {
            let said = CallFailure::RdmaError(e.clone()).to_string();
            assert!(said.starts_with("RDMA_ERROR "), "{said}");
            assert!(said.contains(wire), "{said} lacks {wire}");
            assert!(
                !said.contains(debug_name),
                "{said} names the enum variant {debug_name}"
            );
            assert!(format!("{e:?}").contains(debug_name.trim_end_matches(" {")));
        }
    }

    #[test]
    fn private_data_bytes_by_hand() {
        //= rfc8797#section-4
        //# Senders MUST set these bits
        //# to zero, and receivers MUST ignore their value.
        // Format identifier f6ab0e18, version 1, flags (R for the client,
        // none for the server), sizes 4096 = code 3.
        assert_eq!(
            Config::client().private_data(),
            [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03]
        );
        assert_eq!(
            Config::server().private_data(),
            [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03]
        );
        // Sizes round down to what the format can say; below 1024 is 1024.
        //= rfc8166#section-3.3.3
        //# Receiver implementations MUST support inline thresholds of 1024 bytes
        //# but MAY support larger inline thresholds values.
        let mut c = Config::client();
        c.inline_send = 5000;
        c.inline_recv = 100;
        assert_eq!(&c.private_data()[6..], &[0x03, 0x00]);
        let p = c.connect_params();
        assert_eq!((p.ird, p.ord, p.private_data.len()), (16, 0, 8));
        let s = Config::server().connect_params();
        assert_eq!((s.ird, s.ord), (0, 16));
    }
}
