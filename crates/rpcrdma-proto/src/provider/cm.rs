//! The connection-manager contract (the RDMA CM's part of verbs): connect
//! with private data, listen, and answer each connection request with an
//! accept or a reject that carries private data (RFC 8797 rides in it).
//!
//! * [`ConnectionManager::connect`]: the active side. Returns once the
//!   passive side accepted (the provider's next event is
//!   [`ConnectionEvent::Established`](super::ConnectionEvent::Established)
//!   with the peer's private data) or refused ([`CmError::Rejected`] with
//!   the reject's private data), or the timeout passed.
//! * [`ConnectionManager::listen`] → [`Listener`]: [`Listener::poll`]
//!   yields [`ListenEvent::Request`] with a [`PendingConnection`]: the
//!   peer's [`ConnectRequest`] (address, private data, IRD/ORD) and the
//!   provider-to-be, on which the owner registers memory and posts
//!   receives before it answers with [`PendingConnection::accept`] or
//!   [`PendingConnection::reject`] (an unanswered pending connection that
//!   is dropped is closed).
//! * A provider's admission policy for requests that are still arriving
//!   (deadlines, caps per source) is its own configuration; what it closes
//!   is reported as [`ListenEvent::Dropped`] with a [`DropReason`].
//!
//! The contract is blocking where the RDMA CM's synchronous mode is
//! (connect, and a listener's wait bounded by a timeout and interrupted by
//! [`Listener::waker`]); a provider bounds the time an answer may take
//! (one CM message into a fresh connection). `docs/design/providers.md`
//! maps each method to the software iWARP provider and to rdma-core.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::task::Waker;
use std::time::Duration;

use super::{ConnectParams, ConnectionInfo, Provider};

/// What the link negotiated, for tools and logs. Plain data: each
/// provider fills in what it knows ([`Provider::link_info`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkInfo {
    /// The peer's address (or a name for in-memory links).
    pub peer: String,
    /// MPA revision in use (iWARP only).
    pub mpa_rev: Option<u8>,
    /// MPA CRC in use (iWARP only).
    pub crc: Option<bool>,
    /// MPA Markers in use in either direction (iWARP only).
    pub markers: Option<bool>,
    /// Our inbound RDMA Read depth (IRD) after negotiation.
    pub ird: u8,
    /// Our outbound RDMA Read depth (ORD) after negotiation.
    pub ord: u8,
    /// The private data we sent (for MPA: the whole field, IRD/ORD header
    /// included).
    pub local_private_data: Vec<u8>,
    /// The private data the peer sent (same form).
    pub peer_private_data: Vec<u8>,
    /// The RDMA device carrying the connection (`siw0`, `mlx5_0`;
    /// hardware providers only).
    pub device: Option<String>,
}

impl LinkInfo {
    /// What a provider without link details reports: `peer` and the
    /// negotiated depths and peer private data of `info`, if established.
    pub fn from_connection(peer: String, info: Option<&ConnectionInfo>) -> LinkInfo {
        let mut l = LinkInfo {
            peer,
            ..LinkInfo::default()
        };
        if let Some(i) = info {
            l.ird = i.ird;
            l.ord = i.ord;
            l.peer_private_data = i.peer_private_data.clone();
        }
        l
    }
}

/// The ULP's share of an IB CM REQ's private data through the RDMA CM
/// (92 octets less the RDMA CM's 36-octet header).
pub const IB_REQ_PRIVATE_DATA: usize = 56;
/// An IB CM REP's private data (the accept's).
pub const IB_REP_PRIVATE_DATA: usize = 196;
/// An IB CM REJ's private data (the reject's).
pub const IB_REJ_PRIVATE_DATA: usize = 148;

/// Whether `got` is the private data `sent` arriving through a CM: the
/// same octets, or (InfiniBand / RoCE) the IB CM's whole fixed-size field
/// of `ib_field` octets, `sent` followed by zeros.
pub fn same_private_data(sent: &[u8], got: &[u8], ib_field: usize) -> bool {
    got == sent
        || (got.len() == ib_field
            && got.starts_with(sent)
            && got[sent.len()..].iter().all(|&b| b == 0))
}

/// A peer's connection request, as the passive side sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Where it comes from.
    pub peer: SocketAddr,
    /// The requester's private data (the ULP's part: a CM header such as
    /// MPA's IRD/ORD octets is not included). On InfiniBand and RoCE the
    /// IB CM's private-data fields have a fixed size and no length, so the
    /// RDMA CM delivers the whole field — the octets sent followed by
    /// zeros: [`IB_REQ_PRIVATE_DATA`] octets in a request,
    /// [`IB_REP_PRIVATE_DATA`] in an accept, [`IB_REJ_PRIVATE_DATA`] in a
    /// reject. ULP private data with its own framing (RFC 8797) reads the
    /// same either way.
    pub private_data: Vec<u8>,
    /// The requester's IRD (0 when the CM carries none, as MPA revision 1;
    /// larger values reported as 255).
    pub ird: u8,
    /// The requester's ORD (same rules).
    pub ord: u8,
}

/// Why a connection manager's operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CmError {
    /// The passive side refused the connection, with this private data.
    Rejected {
        /// The reject's private data (the ULP's part).
        private_data: Vec<u8>,
    },
    /// Anything else: address, socket, timeout ([`io::ErrorKind::TimedOut`]),
    /// a CM protocol violation ([`io::ErrorKind::InvalidData`]).
    Io(io::Error),
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmError::Rejected { private_data } => write!(
                f,
                "connection rejected by the peer ({} octets of private data)",
                private_data.len()
            ),
            CmError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CmError::Io(e) => Some(e),
            CmError::Rejected { .. } => None,
        }
    }
}

impl From<io::Error> for CmError {
    fn from(e: io::Error) -> Self {
        CmError::Io(e)
    }
}

impl From<CmError> for io::Error {
    /// A reject becomes [`io::ErrorKind::ConnectionRefused`] (the
    /// [`CmError`] inside, private data and all).
    fn from(e: CmError) -> Self {
        match e {
            CmError::Io(e) => e,
            r @ CmError::Rejected { .. } => io::Error::new(io::ErrorKind::ConnectionRefused, r),
        }
    }
}

/// Why a listener closed a connection before it became a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// No complete request within the provider's deadline.
    TimedOut,
    /// Evicted: its source had too many connections pending.
    EvictedPerSource,
    /// Evicted: too many connections were pending in all.
    EvictedOverall,
    /// The request was invalid (answered as the CM prescribes, then closed).
    Invalid(String),
    /// The peer closed (or reset) before its request.
    PeerClosed,
    /// The connection failed locally.
    Failed(String),
}

/// What [`Listener::poll`] found.
#[derive(Debug)]
pub enum ListenEvent<P> {
    /// A complete connection request: answer it.
    Request(P),
    /// A connection was closed before its request was complete.
    Dropped {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: DropReason,
    },
    /// The listener could not accept (e.g. no file descriptor left); it
    /// pauses briefly and goes on.
    Error(io::Error),
}

/// The active side and the way to the passive side of one provider kind.
pub trait ConnectionManager {
    /// The provider of a connection.
    type Provider: Provider;
    /// A listening endpoint.
    type Listener: Listener<Provider = Self::Provider>;

    /// Connects to `to` with `params` (private data, IRD, ORD) and waits
    /// at most `timeout` for the answer: an established provider whose
    /// next event is `Established` (receives may be posted at once), or
    /// [`CmError::Rejected`] with the reject's private data.
    fn connect(
        &self,
        to: SocketAddr,
        params: &ConnectParams,
        timeout: Duration,
    ) -> Result<Self::Provider, CmError>;

    /// Listens on `at` (port 0: any free one; see
    /// [`Listener::local_addr`]).
    fn listen(&self, at: SocketAddr) -> Result<Self::Listener, CmError>;
}

/// A passive endpoint: it turns arriving connections into
/// [`PendingConnection`]s.
pub trait Listener {
    /// The provider of a connection.
    type Provider: Provider;
    /// A connection request awaiting its answer.
    type Pending: PendingConnection<Provider = Self::Provider>;

    /// The address listened on.
    fn local_addr(&self) -> SocketAddr;

    /// Waits until something happens (a request is complete, a pending
    /// connection is dropped, the [`Listener::waker`] is used) or
    /// `timeout` passes (`None`: no limit but the provider's own
    /// deadlines), then appends what happened to `events`.
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<ListenEvent<Self::Pending>>,
    ) -> io::Result<()>;

    /// A waker that makes the current or next [`Listener::poll`] return at
    /// once (from any thread).
    fn waker(&self) -> Waker;
}

/// A connection request awaiting the passive side's answer.
pub trait PendingConnection {
    /// The provider of the connection.
    type Provider: Provider;

    /// The request: peer address, private data, IRD/ORD.
    fn request(&self) -> &ConnectRequest;

    /// The provider-to-be: register memory and post receives here before
    /// accepting (the peer may send as soon as it has the answer).
    fn provider_mut(&mut self) -> &mut Self::Provider;

    /// Accepts with `params` (our private data, IRD, ORD); the provider's
    /// next event is `Established`.
    fn accept(self, params: &ConnectParams) -> Result<Self::Provider, CmError>;

    /// Refuses with `private_data`, which the connector receives
    /// ([`CmError::Rejected`]), and closes.
    fn reject(self, private_data: &[u8]) -> Result<(), CmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_is_exact_or_the_whole_ib_field_zero_filled() {
        let sent = [0xf6, 0xab, 0x0e, 0x18, 1, 1, 0, 0];
        assert!(same_private_data(&sent, &sent, IB_REQ_PRIVATE_DATA));
        let mut field = sent.to_vec();
        field.resize(IB_REQ_PRIVATE_DATA, 0);
        assert!(same_private_data(&sent, &field, IB_REQ_PRIVATE_DATA));
        // The field of another message, a short padding, a non-zero tail,
        // a different prefix, a truncation: not the same.
        assert!(!same_private_data(&sent, &field, IB_REP_PRIVATE_DATA));
        assert!(!same_private_data(&sent, &field[..20], IB_REQ_PRIVATE_DATA));
        let mut dirty = field.clone();
        dirty[IB_REQ_PRIVATE_DATA - 1] = 1;
        assert!(!same_private_data(&sent, &dirty, IB_REQ_PRIVATE_DATA));
        let mut other = field.clone();
        other[0] = 0;
        assert!(!same_private_data(&sent, &other, IB_REQ_PRIVATE_DATA));
        assert!(!same_private_data(&sent, &sent[..7], IB_REQ_PRIVATE_DATA));
    }
}
