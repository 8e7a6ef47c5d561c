//! The RDMA provider contract: what the RPC-over-RDMA engine needs from an
//! RDMA transport, shaped like verbs, non-blocking and object-safe.
//!
//! A [`Provider`] is one reliable connected queue pair (RC QP, or one iWARP
//! RDMAP stream) together with its memory registrations and one completion
//! queue. Backends: [`mem`] (an in-process pair, deterministic, for tests and
//! simulations), the software iWARP provider (MPA/DDP/RDMAP over TCP) and the
//! rdma-core verbs provider (other crates). [`fault::FaultInjector`] wraps any
//! of them. [`conformance`] holds checks every backend must pass.
//!
//! # Memory ownership: lifetimes follow the hardware
//!
//! [`Provider::register`] takes the buffer (`Box<[u8]>`) by value. From then
//! on the provider owns it, exactly as an RNIC "owns" registered memory, and
//! gives it back only from [`Provider::deregister`]. Every work request holds
//! the regions its SGEs name from the moment it is posted until its
//! [`Completion`] has been returned by [`Provider::poll_completions`]
//! (success, error or flush alike). While held:
//!
//! * `deregister` fails with [`ProviderError::Busy`] (the buffer cannot be
//!   freed or reused while the "NIC" may still touch it);
//! * [`Provider::region_mut`] fails with `Busy`;
//! * [`Provider::region`] fails with `Busy` if a held WR *writes* the region
//!   (a Receive or an RDMA Read sink); reading a buffer that is the source of
//!   a Send or RDMA Write is allowed.
//!
//! So the owner reads and fills its buffers through the provider, and safe
//! Rust proves that nothing else aliases them.
//!
//! [`Provider::register_shared`] registers a *shared, read-only* buffer
//! ([`Bytes`], e.g. a cached file page or a reply the application still
//! holds) without a copy. Such a region is a local source only (a Send or
//! RDMA Write source, and with [`Access::REMOTE_READ`] the target of the
//! peer's RDMA Read): registration refuses `LOCAL_WRITE` and
//! `REMOTE_WRITE`, so no Receive, RDMA Read sink, [`Provider::region_mut`]
//! or remote RDMA Write can ever place data in it, and the other owners of
//! the bytes never see them change. [`Provider::deregister`] hands the
//! [`Buffer`] back as it came ([`Buffer::Shared`]). Memory exposed for remote
//! access is another matter: a peer may write a `REMOTE_WRITE` region at any
//! time the STag is valid, as with real RDMA; the upper layer learns that a
//! chunk is complete from the protocol (the Reply), and then invalidates the
//! STag (or has the peer do so with Send With Invalidate).
//!
//! # Receive buffers lent by the provider
//!
//! [`Provider::register_recv`] registers a receive buffer whose memory is the
//! provider's, not the owner's: the owner names it in Receive work requests
//! and reads it with [`Provider::region`] once a receive into it has
//! completed; it never writes it nor names it in a Send-queue WR (a
//! lending provider refuses both with [`ProviderError::InvalidArgument`]),
//! and its octets are
//! defined only from that completion until the region is posted again or
//! deregistered (posting it again is how the owner says it has consumed the
//! message). Meanwhile the provider need not keep memory behind it: a
//! software provider takes a buffer from a bounded pool when a Send arrives
//! for the receive and puts it back when the region is posted again, so an
//! idle connection holds no receive memory however many credits it granted
//! (hardware posts real buffers or uses a shared receive queue). A lending
//! provider shows only the octets the completed receive placed
//! ([`Provider::region`] is that long), so a pooled buffer never shows
//! what an earlier message left in it, and a receive that did not complete
//! shows nothing. Every
//! receive-side rule is unchanged: a Send that finds no posted receive, or
//! one too small, fails exactly as before, before any memory is taken.
//!
//! # Keys
//!
//! A registration yields a local key ([`MemoryRegion::lkey`], named by
//! [`Sge`]s) and a remote key [`Stag`] (the RFC 5040 STag, the RFC 8166
//! "handle"), built as a 24-bit index plus an 8-bit key that changes on every
//! registration of the same index (the Linux FRWR `ib_update_fast_reg_key`
//! practice), so an STag from an earlier registration is refused. Remote
//! offsets start at the region's base ([`MemoryRegion::base`]): the first
//! byte of a region is tagged offset `base`, and [`MemoryRegion::remote`]
//! adds it. The software providers use base 0 (zero-based); the verbs
//! provider's base is the buffer's address (its MRs' I/O virtual address,
//! as with `ibv_reg_mr`: Linux refuses an iova whose page offset differs
//! from the buffer's, and siw ignores any other).
//! Invalidation (local, [`SendOp::LocalInvalidate`], or remote, Send With
//! Invalidate) revokes the STag for *remote* access only; the region stays
//! registered for local use until deregistered.
//!
//! # Progress and readiness
//!
//! Posting only queues work. A provider makes progress (transmits, places
//! inbound data, generates completions) inside
//! [`Provider::poll_completions`]; hardware providers do it on their own and
//! merely report. The canonical driver loop is: post; poll until nothing
//! comes back; [`Provider::arm`] the waker; poll once more (to close the race);
//! sleep until woken, or until the fd from [`Provider::wait_fd`] is readable
//! (or writable while [`Provider::write_blocked`]). `arm` wakes at once if
//! work is already pending, so the loop never sleeps on queued work. There
//! is no clock and no thread anywhere in this contract.
//!
//! Readiness belongs to the provider, not to its owner's guesses: the fd
//! to wait on ([`Provider::wait_fd`]: a socket, or a completion channel
//! and a CM event channel behind one epoll fd), whether to wait for
//! writability ([`Provider::write_blocked`]), an optional read gate for an
//! edge-triggered owner ([`Provider::set_read_gate`],
//! [`Provider::note_readable`]: a provider that reads a socket may stop
//! reading between readiness edges once it has drained it, which is how
//! the owner applies backpressure without extra system calls), and for a
//! thread that drives one connection, a sleep inside the provider
//! ([`Provider::read_blocking`], [`Provider::settled`]). Every hook has a
//! default that fits a provider without an fd.
//!
//! # Connection management
//!
//! [`cm`] is the RDMA CM contract: a [`ConnectionManager`] connects (with
//! private data, IRD and ORD) and listens; a [`Listener`] yields
//! [`PendingConnection`]s (the peer's private data; receives may be posted
//! before answering) that are accepted or rejected with private data, and
//! a reject reaches the connector with its private data
//! ([`CmError::Rejected`]). [`mem_cm`] implements it in process; see
//! `docs/design/providers.md` for iWARP and verbs.
//!
//! # Errors and blame
//!
//! Errors the caller can prevent (bad handle, SGE out of bounds, missing
//! access right, too many SGEs, full queue, over-long private data) are
//! refused synchronously at post time with a [`ProviderError`]; the WR is not
//! queued and no completion will follow. Everything detected later is a
//! [`Completion`] with a [`Status`] and never a panic or an `Err`:
//! [`Status::blame`] says whether this endpoint's resources ([`Blame::Local`]),
//! the peer ([`Blame::Remote`]), or the link ([`Blame::Transport`]) failed.
//! A failing status other than `Flushed` is fatal for the connection (as on
//! iWARP, where it ends in a Terminate): it is followed by
//! [`ConnectionEvent::Disconnected`] and every other outstanding WR on both
//! ends completes with [`Status::Flushed`].

use std::fmt;
use std::io;
use std::ops::Deref;
use std::task::Waker;
use std::time::Duration;

pub use bytes::Bytes;
pub use smallvec::{smallvec, SmallVec};

pub mod cm;
pub mod conformance;
pub mod fault;
pub mod file;
pub mod mem;
pub mod mem_cm;
pub mod memory;
pub mod recv_pool;

pub use cm::{
    CmError, ConnectRequest, ConnectionManager, DropReason, LinkInfo, ListenEvent, Listener,
    PendingConnection,
};
pub use file::FileRange;

//= rfc5044#section-7.1.1
//# Private Data: This field may contain any value defined by ULPs or may
//# not be present.  The Private Data field MUST be between 0 and 512
//# octets in length.
/// Most private-data octets one connection-setup message carries (MPA,
/// RFC 5044 §7.1). Providers whose CM allows less say so in
/// [`Caps::max_private_data`].
pub const MAX_PRIVATE_DATA: usize = 512;

/// Access rights of a memory registration (verbs `IBV_ACCESS_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read (Send and RDMA Write sources).
    pub const NONE: Access = Access(0);
    /// The local endpoint may write the region: Receive buffers and RDMA
    /// Read sinks.
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may RDMA Read the region (RPC-over-RDMA Read chunks).
    pub const REMOTE_READ: Access = Access(2);
    /// The peer may RDMA Write the region (Write and Reply chunks). Requires
    /// `LOCAL_WRITE`, as in verbs.
    pub const REMOTE_WRITE: Access = Access(4);

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// Every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    /// The union of both sets.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        ];
        let mut first = true;
        for (a, n) in names {
            if self.contains(a) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("NONE")?;
        }
        Ok(())
    }
}

/// A remote key (RFC 5040 STag, RFC 8166 segment handle): 24-bit index and
/// 8-bit key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stag(pub u32);

impl Stag {
    /// Builds an STag from its index (low 24 bits used) and key.
    pub const fn new(index: u32, key: u8) -> Stag {
        Stag((index << 8) | key as u32)
    }
    /// The 24-bit index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }
    /// The 8-bit key, changed on every registration of the index.
    pub const fn key(self) -> u8 {
        (self.0 & 0xff) as u8
    }
}

impl fmt::Debug for Stag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stag({:#010x})", self.0)
    }
}

impl fmt::Display for Stag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// A handle to a registered region. It is a plain descriptor (`Copy`): the
/// buffer itself stays inside the provider, and a handle that outlived its
/// registration is refused with [`ProviderError::InvalidHandle`] because its
/// key no longer matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryRegion {
    lkey: u32,
    stag: Stag,
    len: u64,
    access: Access,
    base: u64,
}

impl MemoryRegion {
    /// For provider implementations: builds the handle they hand out.
    pub const fn new(lkey: u32, stag: Stag, len: u64, access: Access) -> Self {
        MemoryRegion {
            lkey,
            stag,
            len,
            access,
            base: 0,
        }
    }
    /// For provider implementations: the same handle whose first byte is
    /// tagged offset `base` (see "Keys" in the [module docs](self)).
    pub const fn with_base(self, base: u64) -> Self {
        MemoryRegion { base, ..self }
    }
    /// Tagged offset of the region's first byte (0 unless the provider
    /// says otherwise): what a peer adds to an offset within the region.
    pub const fn base(&self) -> u64 {
        self.base
    }
    /// Local key, used in [`Sge`]s.
    pub const fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key to advertise to the peer (valid only with a remote right).
    pub const fn stag(&self) -> Stag {
        self.stag
    }
    /// Length of the region in octets.
    pub const fn len(&self) -> u64 {
        self.len
    }
    /// True for a zero-length region.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Access rights given at registration.
    pub const fn access(&self) -> Access {
        self.access
    }
    /// An SGE covering `length` octets at `offset` of this region (checked
    /// when posted, not here).
    pub const fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            lkey: self.lkey,
            offset,
            length,
        }
    }
    /// The remote address of `offset` (counted from the region's first
    /// byte) in this region: tagged offset `base + offset`.
    pub const fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.stag,
            offset: self.base.wrapping_add(offset),
        }
    }
}

/// Scatter/gather element: `length` octets at `offset` of the region with
/// local key `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Local key of the region ([`MemoryRegion::lkey`]).
    pub lkey: u32,
    /// Offset into the region.
    pub offset: u64,
    /// Length in octets.
    pub length: u32,
}

/// The scatter/gather list of a [`SendWr`]: up to two elements are stored
/// inline (no heap allocation), which covers every WR the RPC engine posts.
/// Build one with [`smallvec!`] (re-exported here) or `Vec::into()`.
pub type Sges = SmallVec<[Sge; 2]>;

/// A remote buffer: tagged offset `offset` (zero-based) under STag `stag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// The peer's STag.
    pub stag: Stag,
    /// Zero-based tagged offset within the peer's region.
    pub offset: u64,
}

/// A Receive work request: one buffer for the next inbound Send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier, echoed in the completion.
    pub wr_id: u64,
    /// Where the message lands; the region needs [`Access::LOCAL_WRITE`].
    pub sge: Sge,
}

/// What a Send-queue work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// Send (RDMAP Send, or Send with Solicited Event if `solicited`).
    Send {
        /// Request a solicited event at the receiver.
        solicited: bool,
    },
    /// Send With Invalidate: the receiver invalidates `invalidate` (one of
    /// *its* STags) before completing the receive.
    SendWithInvalidate {
        /// The receiver's STag to invalidate.
        invalidate: Stag,
        /// Request a solicited event at the receiver.
        solicited: bool,
    },
    /// RDMA Write: the local SGEs are placed at `remote`.
    Write {
        /// Where the data goes at the peer.
        remote: RemoteAddr,
    },
    /// RDMA Read: the peer's bytes at `remote` land in the single local SGE
    /// (iWARP reads into one sink STag; see [`Caps::max_read_sge`]).
    Read {
        /// Where the data comes from at the peer.
        remote: RemoteAddr,
    },
    /// Local Invalidate of one of our own STags; needs no SGE. Later remote
    /// access with that STag fails.
    LocalInvalidate {
        /// Our STag to invalidate.
        stag: Stag,
    },
}

/// A Send-queue work request. Every WR is signalled: exactly one completion
/// follows, in post order with the other Send-queue WRs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, echoed in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local data: source for Send and Write, sink for Read (exactly one),
    /// none for LocalInvalidate.
    pub sges: Sges,
}

/// Completion opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// A Send (any flavour) finished.
    Send,
    /// An RDMA Write finished.
    Write,
    /// An RDMA Read finished; the sink holds the data.
    Read,
    /// A Local Invalidate finished.
    LocalInvalidate,
    /// A message arrived in a posted receive.
    Recv,
    /// A Send With Invalidate arrived; `stag` (ours) is now invalid.
    RecvWithInvalidate {
        /// The STag the peer invalidated.
        stag: Stag,
    },
}

/// Who is responsible for a failure, from this endpoint's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blame {
    /// Nothing failed (success) or the status is only a consequence of an
    /// earlier failure (flush).
    None,
    /// This endpoint's own resources did not fit: a receive buffer too small
    /// for what arrived, no receive posted, a bad local key. (The upper layer
    /// may still decide the peer broke its protocol, e.g. exceeded the inline
    /// threshold or its credits.)
    Local,
    /// The peer refused or could not serve our request: bad STag, offset or
    /// rights at its side, no receive posted there, its receive too small.
    Remote,
    /// The link failed (connection lost, retries exhausted); neither end
    /// misbehaved.
    Transport,
}

/// Completion status (the verbs `ibv_wc_status` classes that can occur on an
/// RC / iWARP connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The operation succeeded.
    Success,
    /// The WR was outstanding when the connection failed or was closed.
    Flushed,
    /// An inbound message was longer than the posted receive buffer (nothing
    /// was placed).
    LocalLength,
    /// A local key or STag named in our own WR failed validation when the WR
    /// executed (e.g. Local Invalidate of an unknown STag, or a Send With
    /// Invalidate naming an STag we do not own).
    LocalProtection,
    /// Internal failure of the local QP (also what a fault injector uses to
    /// fail a QP).
    LocalOperation,
    /// The peer refused an RDMA Read/Write: unknown, stale or invalidated
    /// STag, missing access right, or range outside the region. No memory
    /// was touched.
    RemoteAccess,
    /// The peer failed to process a Send (receive buffer too small, or a
    /// Send With Invalidate naming an STag it does not own), or answered an
    /// RDMA Read with a response that is not the one requested (short,
    /// long, out of order; nothing of it is used).
    RemoteOperation,
    /// The peer considered the request malformed.
    RemoteInvalidRequest,
    /// A Send found no posted receive at the peer (RNR). Fatal on iWARP, and
    /// on InfiniBand with `rnr_retry_count = 0` as Linux xprtrdma sets it.
    ReceiverNotReady,
    /// The connection was lost underneath this WR (retry exhausted, reset).
    ConnectionLost,
}

impl Status {
    /// Who is to blame, from the WR poster's point of view.
    pub const fn blame(self) -> Blame {
        match self {
            Status::Success | Status::Flushed => Blame::None,
            Status::LocalLength | Status::LocalProtection | Status::LocalOperation => Blame::Local,
            Status::RemoteAccess
            | Status::RemoteOperation
            | Status::RemoteInvalidRequest
            | Status::ReceiverNotReady => Blame::Remote,
            Status::ConnectionLost => Blame::Transport,
        }
    }
    /// Stable machine name.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Flushed => "flushed",
            Status::LocalLength => "local-length",
            Status::LocalProtection => "local-protection",
            Status::LocalOperation => "local-operation",
            Status::RemoteAccess => "remote-access",
            Status::RemoteOperation => "remote-operation",
            Status::RemoteInvalidRequest => "remote-invalid-request",
            Status::ReceiverNotReady => "receiver-not-ready",
            Status::ConnectionLost => "connection-lost",
        }
    }
    /// `Success`.
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Success)
    }
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// What finished. For a failed WR this is the WR's own kind (a failed
    /// receive reports [`Opcode::Recv`]).
    pub opcode: Opcode,
    /// Octets transferred (received for Recv, read for Read, sent for
    /// Send/Write); 0 unless `status` is `Success`.
    pub byte_len: u32,
    /// Outcome.
    pub status: Status,
}

/// Device and queue-pair limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Outstanding Send-queue WRs (posted, completion not yet polled).
    pub max_send_wr: u32,
    /// Outstanding receives.
    pub max_recv_wr: u32,
    /// SGEs per Send / Write.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// SGEs per RDMA Read sink (1 on iWARP).
    pub max_read_sge: u32,
    /// Largest message or RDMA transfer in octets.
    pub max_msg_size: u32,
    /// Largest registration in octets.
    pub max_mr_size: u64,
    /// Registrations at once.
    pub max_mr: u32,
    /// Private data octets per connection-setup message (≤ 512).
    pub max_private_data: u16,
    /// Largest inbound RDMA Read queue (IRD) the device supports.
    pub max_ird: u8,
    /// Largest outbound RDMA Read queue (ORD) the device supports.
    pub max_ord: u8,
    /// Inline data limit of a Send (informational).
    pub max_inline: u32,
    /// RDMA Read sinks must also be registered `REMOTE_WRITE` (true on
    /// iWARP, where the Read Response is a tagged write into the sink).
    pub read_sink_needs_remote_write: bool,
    /// The provider can post Send With Invalidate and invalidates a
    /// region named by a received one (remote invalidation; on verbs,
    /// `IB_DEVICE_MEM_MGT_EXTENSIONS` with FRWR registrations): RPC-over-
    /// RDMA version 2 names a handle to invalidate only when this is set.
    pub remote_invalidation: bool,
}

/// What one side asks for when connecting or accepting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectParams {
    /// Private data for the peer (at most [`Caps::max_private_data`]).
    pub private_data: Vec<u8>,
    /// RDMA Reads we accept at once from the peer (responder resources).
    pub ird: u8,
    /// RDMA Reads we want outstanding at once (initiator depth). Linux
    /// xprtrdma uses 0: the requester never reads.
    pub ord: u8,
}

/// What was agreed when the connection was established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The peer's private data, exactly as sent.
    pub peer_private_data: Vec<u8>,
    /// Inbound RDMA Reads the peer may have outstanding against us.
    pub ird: u8,
    /// Outbound RDMA Reads we may have outstanding (0 forbids RDMA Read).
    pub ord: u8,
    /// SGEs per Send.
    pub max_send_sge: u32,
    /// SGEs per receive.
    pub max_recv_sge: u32,
    /// Inline data limit.
    pub max_inline: u32,
    /// Largest message.
    pub max_msg_size: u32,
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisconnectReason {
    /// The passive side refused the connection, with its private data.
    Rejected {
        /// Private data of the reject.
        private_data: Vec<u8>,
    },
    /// [`Provider::disconnect`] was called here.
    LocalClose,
    /// The peer closed the connection.
    PeerClose,
    /// A fatal error; `status` is how it shows in a completion and `blame`
    /// says who caused it from this endpoint's view (a Send that found no
    /// receive is `ReceiverNotReady` with `Remote` blame at the sender and
    /// `Local` blame at the receiver).
    Error {
        /// The failure.
        status: Status,
        /// Whose fault, seen from here.
        blame: Blame,
    },
    /// The link went away (reset, timeout); nobody's fault.
    TransportLost,
}

impl core::fmt::Display for DisconnectReason {
    /// In words, for messages (no enum names).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DisconnectReason::Rejected { private_data } if private_data.is_empty() => {
                f.write_str("the peer rejected the connection")
            }
            DisconnectReason::Rejected { private_data } => {
                f.write_str("the peer rejected the connection (private data ")?;
                for b in private_data {
                    write!(f, "{b:02x}")?;
                }
                f.write_str(")")
            }
            DisconnectReason::LocalClose => f.write_str("closed locally"),
            DisconnectReason::PeerClose => f.write_str("the peer closed the connection"),
            DisconnectReason::Error { status, blame } => {
                write!(f, "{}", status.name())?;
                match blame {
                    Blame::Local => f.write_str(" (our side)"),
                    Blame::Remote => f.write_str(" (the peer's side)"),
                    _ => Ok(()),
                }
            }
            DisconnectReason::TransportLost => {
                f.write_str("the link was lost (connection reset or closed by the peer)")
            }
        }
    }
}

/// Connection state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// Not yet connecting.
    Idle,
    /// Setup in progress (request sent, or request received and not yet
    /// answered). Receives may be posted already.
    Connecting,
    /// Data may flow.
    Established,
    /// Finished; posts are refused with [`ProviderError::NotConnected`].
    Disconnected(DisconnectReason),
}

/// Connection events, in order, from [`Provider::poll_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// Passive side: a peer asks to connect (answer it with the backend's
    /// accept or reject).
    ConnectRequest {
        /// The requester's private data.
        private_data: Vec<u8>,
        /// The requester's IRD.
        ird: u8,
        /// The requester's ORD.
        ord: u8,
    },
    /// The connection is up.
    Established(ConnectionInfo),
    /// The connection is down; outstanding WRs have been flushed.
    Disconnected(DisconnectReason),
}

/// When [`Provider::arm`] wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Notify {
    /// On any new completion or event.
    Any,
    /// Only on a solicited receive (Send with Solicited Event), an error, or
    /// a connection event (verbs `solicited_only`).
    Solicited,
}

/// A synchronous refusal. These are always the caller's (or its
/// configuration's) mistake; nothing was queued.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderError {
    /// The region is referenced by a work request that has not completed.
    Busy,
    /// Unknown or stale local key / handle (deregistered, re-registered).
    InvalidHandle,
    /// An SGE reaches past the end of its region, or lengths overflow.
    OutOfBounds,
    /// The region lacks a right the operation needs.
    AccessDenied {
        /// The missing right.
        needed: Access,
    },
    /// More SGEs than [`Caps`] allows, or a wrong number for the op.
    BadSgeCount,
    /// Total length exceeds [`Caps::max_msg_size`] or the region limit.
    TooLong,
    /// The queue (or the registration table) is full.
    QueueFull,
    /// Private data longer than [`Caps::max_private_data`].
    PrivateDataTooLong {
        /// Length given.
        len: usize,
        /// Allowed.
        max: usize,
    },
    /// The operation needs an established connection (or one not yet
    /// closed).
    NotConnected,
    /// The operation is not valid now or with these arguments.
    InvalidArgument(&'static str),
    /// The backend does not support this.
    Unsupported,
    /// The memory of a registration could not be pinned: the process's
    /// locked-memory limit (`RLIMIT_MEMLOCK`, `ulimit -l`) is too low.
    PinLimit {
        /// Octets the registration needed.
        len: usize,
        /// The limit in octets.
        limit: u64,
    },
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::Busy => f.write_str("region referenced by an in-flight work request"),
            ProviderError::InvalidHandle => f.write_str("unknown or stale memory handle"),
            ProviderError::OutOfBounds => f.write_str("SGE outside its region"),
            ProviderError::AccessDenied { needed } => {
                write!(f, "region lacks access right {needed:?}")
            }
            ProviderError::BadSgeCount => f.write_str("wrong number of SGEs"),
            ProviderError::TooLong => f.write_str("transfer too long"),
            ProviderError::QueueFull => f.write_str("queue full"),
            ProviderError::PrivateDataTooLong { len, max } => {
                write!(f, "private data of {len} octets exceeds {max}")
            }
            ProviderError::NotConnected => f.write_str("not connected"),
            ProviderError::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            ProviderError::Unsupported => f.write_str("unsupported"),
            ProviderError::PinLimit { len, limit } => write!(
                f,
                "cannot pin {len} octets for RDMA: the locked-memory limit \
                 (RLIMIT_MEMLOCK) is {} KiB; raise it (`ulimit -l unlimited`, \
                 or LimitMEMLOCK=infinity for a systemd service)",
                limit / 1024
            ),
        }
    }
}

impl std::error::Error for ProviderError {}

/// A registered buffer as [`Provider::deregister`] gives it back: the
/// owned buffer given to [`Provider::register`], or the shared read-only
/// bytes given to [`Provider::register_shared`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// A buffer the provider owned (and the owner may write).
    Owned(Box<[u8]>),
    /// Shared read-only bytes: never written while registered.
    Shared(Bytes),
}

impl Buffer {
    /// The octets.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Buffer::Owned(b) => b,
            Buffer::Shared(b) => b,
        }
    }

    /// The octets, writable: `None` for shared bytes.
    #[inline]
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match self {
            Buffer::Owned(b) => Some(b),
            Buffer::Shared(_) => None,
        }
    }

    /// True for [`Buffer::Shared`].
    pub fn is_shared(&self) -> bool {
        matches!(self, Buffer::Shared(_))
    }

    /// An owned buffer (for registering it again, writable): the buffer
    /// itself, or a copy of shared bytes.
    pub fn into_owned(self) -> Box<[u8]> {
        match self {
            Buffer::Owned(b) => b,
            Buffer::Shared(b) => Box::from(&b[..]),
        }
    }

    /// The octets as [`Bytes`]: shared bytes as they are, an owned buffer
    /// without a copy.
    pub fn into_bytes(self) -> Bytes {
        match self {
            Buffer::Owned(b) => Bytes::from(b),
            Buffer::Shared(b) => b,
        }
    }
}

impl Deref for Buffer {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Box<[u8]>> for Buffer {
    fn from(b: Box<[u8]>) -> Self {
        Buffer::Owned(b)
    }
}

impl From<Bytes> for Buffer {
    fn from(b: Bytes) -> Self {
        Buffer::Shared(b)
    }
}

/// A refused registration; the buffer comes back.
#[derive(Debug)]
pub struct RegisterError {
    /// Why.
    pub error: ProviderError,
    /// The caller's buffer, untouched.
    pub buf: Box<[u8]>,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "registration refused: {}", self.error)
    }
}

impl std::error::Error for RegisterError {}

/// The rights [`Provider::register_shared`] accepts: none but
/// [`Access::REMOTE_READ`] (shared bytes are never written, locally or
/// remotely).
pub fn check_shared_access(access: Access) -> Result<(), ProviderError> {
    if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
        return Err(ProviderError::InvalidArgument(
            "shared buffers are read-only (no LOCAL_WRITE or REMOTE_WRITE)",
        ));
    }
    Ok(())
}

/// One RDMA connection endpoint: memory registration, work requests,
/// completions, readiness and connection events. Object-safe, so a program
/// can choose a backend at run time (`Box<dyn Provider>`). See the module
/// docs for the ownership, progress and blame rules every implementation
/// follows; [`conformance`] checks them.
///
/// Connection *setup* (addresses, listening, accept/reject with private
/// data) is the [`ConnectionManager`] contract ([`cm`]); the trait
/// reports its outcome as [`ConnectionEvent`]s.
pub trait Provider {
    /// Device and queue limits.
    fn caps(&self) -> Caps;

    /// Current connection state.
    fn connection_state(&self) -> ConnectionState;

    /// The negotiated attributes and the peer's private data, once
    /// established (and still after a disconnect).
    fn connection_info(&self) -> Option<ConnectionInfo>;

    /// Next connection event, if any. Providers may make progress here.
    fn poll_event(&mut self) -> Option<ConnectionEvent>;

    /// Closes the connection abortively (QP to error): every outstanding WR
    /// on both ends completes [`Status::Flushed`]. Idempotent.
    fn disconnect(&mut self);

    /// Registers `buf`, moving it into the provider. Fails with the buffer
    /// back: `REMOTE_WRITE` without `LOCAL_WRITE`, too large, table full.
    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError>;

    /// Registers shared read-only bytes without copying them: a local
    /// source (Send, RDMA Write) and, with [`Access::REMOTE_READ`], a target
    /// of the peer's RDMA Read. `access` may hold no right but
    /// `REMOTE_READ`: `LOCAL_WRITE` or `REMOTE_WRITE` are refused with
    /// [`ProviderError::InvalidArgument`], so the bytes are never written
    /// (a Receive or RDMA Read sink SGE naming the region is refused with
    /// [`ProviderError::AccessDenied`], a peer's RDMA Write to it completes
    /// [`Status::RemoteAccess`] at the peer, [`Provider::region_mut`] is
    /// refused). Only `buf.len()` octets are registered, whatever buffer
    /// they are a slice of. [`Provider::deregister`] gives back
    /// [`Buffer::Shared`].
    ///
    /// The default copies the bytes into an owned registration (correct,
    /// not zero-copy; `deregister` then gives back [`Buffer::Owned`]).
    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        check_shared_access(access)?;
        self.register(Box::from(&buf[..]), access)
            .map_err(|e| e.error)
    }

    /// Registers a range of an open file as the source of RDMA Writes
    /// (only: no remote right, never written, [`Provider::region`] need
    /// not show its octets). A provider that can send from the file
    /// ([`Provider::sends_files`]) sends the file's octets as they are when
    /// they go out (see [`file`]); the default reads the range now into an
    /// owned registration ([`Access::NONE`]), as a caller without this
    /// method would. A file shorter than the range is refused
    /// ([`ProviderError::InvalidArgument`]).
    fn register_file(&mut self, range: &FileRange) -> Result<MemoryRegion, ProviderError> {
        let data = range
            .read()
            .map_err(|_| ProviderError::InvalidArgument("file range unreadable or short"))?;
        self.register(data.into_boxed_slice(), Access::NONE)
            .map_err(|e| e.error)
    }

    /// True if [`Provider::register_file`] sends from the file without
    /// reading it into memory first. The default: false.
    fn sends_files(&self) -> bool {
        false
    }

    /// Registers a receive buffer of `len` octets whose memory the provider
    /// lends (see "Receive buffers lent by the provider" in the [module
    /// docs](self)): [`Access::LOCAL_WRITE`] only, for Receive work
    /// requests only. Its octets are defined from the successful
    /// completion of a receive into it until it is posted again or
    /// deregistered, and then [`Provider::region`] shows exactly the
    /// octets that receive placed; [`Provider::deregister`] gives back an
    /// empty [`Buffer::Owned`].
    ///
    /// The default registers an owned zeroed buffer (always resident, and
    /// usable as any other region).
    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.register(vec![0u8; len].into_boxed_slice(), Access::LOCAL_WRITE)
            .map_err(|e| e.error)
    }

    /// Ends a registration and returns the buffer. The STag becomes invalid.
    /// [`ProviderError::Busy`] while a WR still references the region.
    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError>;

    /// The region's bytes, for reading. `Busy` while a Receive or RDMA Read
    /// into it is outstanding.
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError>;

    /// The region's bytes, for writing. `Busy` while any WR references it;
    /// [`ProviderError::AccessDenied`] (`LOCAL_WRITE`) for shared bytes
    /// ([`Provider::register_shared`]).
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError>;

    /// Posts a receive. Allowed before the connection is established (post
    /// receives before accepting, as Linux svcrdma does).
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError>;

    /// Posts a Send-queue WR. Local errors are refused here.
    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError>;

    /// Posts a *staged* Send: `op` ([`SendOp::Send`] or
    /// [`SendOp::SendWithInvalidate`]) of `len` octets that `fill` writes
    /// straight into the provider's own transmit memory, with no
    /// registered Send buffer, no work request and no completion (what
    /// verbs would call an unsignaled inline Send). `fill` is handed
    /// exactly `len` octets and must write every one of them.
    ///
    /// * `Ok(true)`: staged. It goes on the wire after everything posted
    ///   to the Send queue before it and before everything posted after
    ///   it, with the octets a registered Send of the same op and payload
    ///   posted here would have, and it consumes no Send-queue slot. No
    ///   completion follows: if it fails (e.g. the peer has no receive for
    ///   it), the connection fails as it would for a registered Send —
    ///   [`ConnectionEvent::Disconnected`] with the same reason, every
    ///   outstanding WR flushed — only without that Send's own error
    ///   completion.
    /// * `Ok(false)`: not staged (the provider cannot stage, or not this
    ///   message, or not now: earlier work still waits to be framed, its
    ///   staging memory is full); `fill` was not called and nothing was
    ///   queued: post it as a registered Send ([`Provider::post_send`]).
    /// * `Err`: refused as [`Provider::post_send`] would refuse the same
    ///   Send (`NotConnected`, `TooLong`), or `InvalidArgument` for an op
    ///   that is not a Send.
    ///
    /// The default stages nothing (`Ok(false)`).
    fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        let _ = (op, len, fill);
        Ok(false)
    }

    /// Staged Sends taken and not yet complete by the rule this
    /// provider completes a registered Send under (handed to the
    /// transport, acknowledged by the peer): what a registered Send would
    /// still count as outstanding, so an upper layer that bounds its
    /// unfinished Sends (a responder's replies to a peer that reads
    /// nothing) bounds the staged ones too. The default: 0.
    fn staged_outstanding(&self) -> usize {
        0
    }

    /// Posts a Local Invalidate of our `stag` (shorthand for
    /// [`SendOp::LocalInvalidate`]); it completes as
    /// [`Opcode::LocalInvalidate`].
    fn invalidate(&mut self, wr_id: u64, stag: Stag) -> Result<(), ProviderError> {
        self.post_send(SendWr {
            wr_id,
            op: SendOp::LocalInvalidate { stag },
            sges: Sges::new(),
        })
    }

    /// Makes whatever progress is possible without blocking and appends
    /// every available completion to `out`; returns how many were appended.
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize;

    /// Asks to be woken once when something new happens (one-shot; see
    /// [`Notify`]). Wakes immediately if work is already pending.
    fn arm(&mut self, waker: &Waker, notify: Notify);

    // ----- Readiness (see the module docs): what an owner that sleeps
    // waits on. Every default fits a provider without a file descriptor
    // (the in-memory one), whose owner relies on `arm` alone. -----

    /// The file descriptor that becomes readable (or writable, see
    /// [`Provider::write_blocked`]) when the provider needs polling: the
    /// socket of a software provider, or one fd a hardware provider makes
    /// readable for its completion channel and CM event channel (an epoll
    /// set holding both). The owner registers it with its event loop and
    /// never reads or writes it. `None`: rely on [`Provider::arm`] alone.
    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// True while transmission waits for [`Provider::wait_fd`] to become
    /// writable: the owner then waits for writability too.
    fn write_blocked(&self) -> bool {
        false
    }

    /// The owner watches [`Provider::wait_fd`] edge-triggered and will
    /// call [`Provider::note_readable`] after clearing each readiness edge
    /// (`on`), or stops doing so (`!on`). A provider may then skip reading
    /// its fd between edges once it has drained it (the read gate).
    fn set_read_gate(&mut self, _on: bool) {}

    /// The fd may have become readable (see [`Provider::set_read_gate`]).
    fn note_readable(&mut self) {}

    /// Blocking owners (a thread that drives one connection): let
    /// [`Provider::read_blocking`] sleep in the fd's receive call. False if
    /// the provider cannot.
    fn set_blocking_reads(&mut self, _on: bool) -> bool {
        false
    }

    /// Blocking owners: sleep until input arrives (and take it in) or
    /// `timeout` passes; `Some(Ok(true))` if something may be ready.
    /// `None` if not supported: the owner then polls
    /// [`Provider::wait_fd`].
    fn read_blocking(&mut self, _timeout: Duration) -> Option<io::Result<bool>> {
        None
    }

    /// True when a progress pass now could not move anything by itself
    /// (nothing waits to be polled or transmitted): a blocking owner then
    /// sleeps at once instead of making one more, empty pass. False (the
    /// default) is always safe.
    fn settled(&self) -> bool {
        false
    }

    /// The provider's own next deadline, if it has one: work it does on a
    /// timer, without input or a new work request (a software iWARP
    /// initiator's RTR retry). An owner sleeps no longer than this and then
    /// makes a pass; [`Provider::arm`] wakes at once only when it is
    /// already due. `None` (the default): no timer. (The provider compares
    /// it with the clock; the contract reads none.)
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }

    /// Live memory registrations, if the provider counts them.
    fn registered_regions(&self) -> Option<u32> {
        None
    }

    /// What the link negotiated, for tools and logs. The default reports
    /// [`Provider::connection_info`] and no peer name.
    fn link_info(&self) -> LinkInfo {
        LinkInfo::from_connection(String::new(), self.connection_info().as_ref())
    }
}

impl<P: Provider + ?Sized> Provider for Box<P> {
    fn caps(&self) -> Caps {
        (**self).caps()
    }
    fn connection_state(&self) -> ConnectionState {
        (**self).connection_state()
    }
    fn connection_info(&self) -> Option<ConnectionInfo> {
        (**self).connection_info()
    }
    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        (**self).poll_event()
    }
    fn disconnect(&mut self) {
        (**self).disconnect()
    }
    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        (**self).register(buf, access)
    }
    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        (**self).register_shared(buf, access)
    }
    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        (**self).register_recv(len)
    }
    fn register_file(&mut self, range: &FileRange) -> Result<MemoryRegion, ProviderError> {
        (**self).register_file(range)
    }
    fn sends_files(&self) -> bool {
        (**self).sends_files()
    }
    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        (**self).deregister(mr)
    }
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        (**self).region(mr)
    }
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        (**self).region_mut(mr)
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        (**self).post_recv(wr)
    }
    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        (**self).post_send(wr)
    }
    fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        (**self).post_send_staged(op, len, fill)
    }
    fn staged_outstanding(&self) -> usize {
        (**self).staged_outstanding()
    }
    fn invalidate(&mut self, wr_id: u64, stag: Stag) -> Result<(), ProviderError> {
        (**self).invalidate(wr_id, stag)
    }
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        (**self).poll_completions(out)
    }
    fn arm(&mut self, waker: &Waker, notify: Notify) {
        (**self).arm(waker, notify)
    }
    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).wait_fd()
    }
    fn write_blocked(&self) -> bool {
        (**self).write_blocked()
    }
    fn set_read_gate(&mut self, on: bool) {
        (**self).set_read_gate(on)
    }
    fn note_readable(&mut self) {
        (**self).note_readable()
    }
    fn set_blocking_reads(&mut self, on: bool) -> bool {
        (**self).set_blocking_reads(on)
    }
    fn read_blocking(&mut self, timeout: Duration) -> Option<io::Result<bool>> {
        (**self).read_blocking(timeout)
    }
    fn settled(&self) -> bool {
        (**self).settled()
    }
    fn next_deadline(&self) -> Option<std::time::Instant> {
        (**self).next_deadline()
    }
    fn registered_regions(&self) -> Option<u32> {
        (**self).registered_regions()
    }
    fn link_info(&self) -> LinkInfo {
        (**self).link_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stag_is_index_and_key() {
        let s = Stag::new(0x12_3456, 0x9a);
        assert_eq!(s.0, 0x1234_569a);
        assert_eq!((s.index(), s.key()), (0x12_3456, 0x9a));
        assert_eq!(format!("{s}"), "0x1234569a");
        assert_eq!(format!("{s:?}"), "Stag(0x1234569a)");
    }

    #[test]
    fn access_flags() {
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert_eq!(rw.bits(), 0b101);
        assert!(rw.contains(Access::REMOTE_WRITE));
        assert!(!rw.contains(Access::REMOTE_READ));
        assert!(rw.contains(Access::NONE));
        assert_eq!(format!("{rw:?}"), "LOCAL_WRITE|REMOTE_WRITE");
        assert_eq!(format!("{:?}", Access::NONE), "NONE");
    }

    #[test]
    fn status_blame_table() {
        use Status::*;
        let table = [
            (Success, Blame::None, "success"),
            (Flushed, Blame::None, "flushed"),
            (LocalLength, Blame::Local, "local-length"),
            (LocalProtection, Blame::Local, "local-protection"),
            (LocalOperation, Blame::Local, "local-operation"),
            (RemoteAccess, Blame::Remote, "remote-access"),
            (RemoteOperation, Blame::Remote, "remote-operation"),
            (
                RemoteInvalidRequest,
                Blame::Remote,
                "remote-invalid-request",
            ),
            (ReceiverNotReady, Blame::Remote, "receiver-not-ready"),
            (ConnectionLost, Blame::Transport, "connection-lost"),
        ];
        for (s, b, n) in table {
            assert_eq!((s.blame(), s.name()), (b, n));
            assert_eq!(s.is_ok(), s == Success);
        }
    }

    #[test]
    fn memory_region_helpers() {
        let mr = MemoryRegion::new(0x105, Stag(0x105), 64, Access::REMOTE_READ);
        assert_eq!(
            mr.sge(8, 4),
            Sge {
                lkey: 0x105,
                offset: 8,
                length: 4
            }
        );
        assert_eq!(
            mr.remote(16),
            RemoteAddr {
                stag: Stag(0x105),
                offset: 16
            }
        );
        assert_eq!((mr.len(), mr.is_empty()), (64, false));
        let based = mr.with_base(0x10);
        assert_eq!(based.base(), 0x10);
        assert_eq!(based.remote(16).offset, 0x20);
        // Local SGE offsets stay relative to the region.
        assert_eq!(based.sge(8, 4), mr.sge(8, 4));
    }

    #[test]
    fn provider_is_object_safe() {
        fn takes(_: Option<&mut dyn Provider>) {}
        takes(None);
    }
}
