//! The connection-manager contract of `rpcrdma-proto`
//! ([`rpcrdma_proto::provider::cm`]) over TCP and MPA: [`IwarpCm`]
//! connects ([`crate::tcp::IwarpProvider`], MPA Request with the ULP's
//! private data and IRD/ORD) and listens ([`IwarpListener`]: one
//! [`Acceptor`] drives every pending MPA exchange under
//! [`IwarpCm::accept`]'s deadline and caps); an [`IwarpPending`] is
//! answered with an MPA Reply or an MPA Reject carrying private data.
//!
//! The iWARP specifics stay here: the MPA settings ([`IwarpConfig`], into
//! which each connect or accept puts the ULP's private data, IRD and ORD)
//! and the admission of connections that still owe their MPA Request
//! ([`AcceptLimits`]); what the acceptor closes surfaces as the
//! contract's [`DropReason`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use rpcrdma_proto::provider::{
    CmError, ConnectParams, ConnectRequest, ConnectionManager, DropReason, ListenEvent, Listener,
    PendingConnection,
};

use crate::acceptor::{AcceptEvent, Acceptor, AcceptorWaker, CloseReason};
use crate::admission::{AcceptLimits, Eviction};
use crate::cm::IwarpConfig;
use crate::tcp::{self, IwarpProvider};

/// Bound on writing our MPA Reply or Reject: one frame of at most 532
/// octets into a new socket's empty send buffer, which never waits.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// The software iWARP connection manager: its MPA settings and the
/// admission limits of its listeners.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IwarpCm {
    /// MPA revision, CRC, Markers, RTR, caps. Its private data, IRD and
    /// ORD are replaced by the [`ConnectParams`] of each connect and
    /// accept.
    pub config: IwarpConfig,
    /// New TCP connections that owe their MPA Request (unauthenticated):
    /// the deadline for the Request and the caps on how many are pending,
    /// per source address and in all (one more evicts the oldest). Default
    /// [`AcceptLimits::default`]: 2 s, 32 per source, 512 in all.
    pub accept: AcceptLimits,
}

impl IwarpCm {
    /// `config` with the ULP's private data, IRD and ORD.
    pub fn config_for(&self, params: &ConnectParams) -> IwarpConfig {
        with_params(&self.config, params)
    }
}

fn with_params(cfg: &IwarpConfig, params: &ConnectParams) -> IwarpConfig {
    IwarpConfig {
        private_data: params.private_data.clone(),
        ird: params.ird,
        ord: params.ord,
        ..cfg.clone()
    }
}

impl ConnectionManager for IwarpCm {
    type Provider = IwarpProvider;
    type Listener = IwarpListener;

    /// TCP connect (bounded by `timeout`), then the MPA exchange (and the
    /// RFC 6581 RTR) within what is left of it.
    fn connect(
        &self,
        to: SocketAddr,
        params: &ConnectParams,
        timeout: Duration,
    ) -> Result<IwarpProvider, CmError> {
        let deadline = Instant::now() + timeout;
        let cfg = self.config_for(params);
        let sock = crate::congestion::connect(&to, Some(timeout), &cfg)?;
        IwarpProvider::connect_stream(sock, cfg)?.establish(deadline)
    }

    fn listen(&self, at: SocketAddr) -> Result<IwarpListener, CmError> {
        let acceptor = Acceptor::new(tcp::Listener::bind(at, self.config.clone())?, self.accept)?;
        let local = acceptor.local_addr()?;
        Ok(IwarpListener {
            acceptor,
            config: self.config.clone(),
            local,
            events: Vec::new(),
        })
    }
}

/// A TCP listener whose connections start with an MPA Request, with the
/// admission of [`IwarpCm::accept`] (see [`Acceptor`]).
#[derive(Debug)]
pub struct IwarpListener {
    acceptor: Acceptor,
    config: IwarpConfig,
    local: SocketAddr,
    events: Vec<AcceptEvent>,
}

struct WakeAcceptor(AcceptorWaker);

impl Wake for WakeAcceptor {
    fn wake(self: Arc<Self>) {
        self.0.wake();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake();
    }
}

fn drop_reason(r: CloseReason) -> DropReason {
    match r {
        CloseReason::TimedOut => DropReason::TimedOut,
        CloseReason::Evicted(Eviction::PerSource) => DropReason::EvictedPerSource,
        CloseReason::Evicted(Eviction::Overall) => DropReason::EvictedOverall,
        CloseReason::Invalid(e) => DropReason::Invalid(e.to_string()),
        CloseReason::PeerClosed => DropReason::PeerClosed,
        CloseReason::Failed(e) => DropReason::Failed(e.to_string()),
    }
}

impl Listener for IwarpListener {
    type Provider = IwarpProvider;
    type Pending = IwarpPending;

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<ListenEvent<IwarpPending>>,
    ) -> io::Result<()> {
        self.acceptor.poll(timeout, &mut self.events)?;
        for ev in self.events.drain(..) {
            events.push(match ev {
                AcceptEvent::Request(p) => {
                    ListenEvent::Request(IwarpPending::new(*p, &self.config))
                }
                AcceptEvent::Closed { peer, reason } => ListenEvent::Dropped {
                    peer,
                    reason: drop_reason(reason),
                },
                AcceptEvent::ListenerError(e) => ListenEvent::Error(e),
            });
        }
        Ok(())
    }

    fn waker(&self) -> Waker {
        Waker::from(Arc::new(WakeAcceptor(self.acceptor.waker())))
    }
}

/// A TCP connection whose MPA Request arrived, awaiting the MPA Reply or
/// Reject.
#[derive(Debug)]
pub struct IwarpPending {
    inner: tcp::PendingConnection,
    request: ConnectRequest,
    config: IwarpConfig,
}

impl IwarpPending {
    fn new(inner: tcp::PendingConnection, config: &IwarpConfig) -> Self {
        let io = inner.ird_ord();
        let depth = |v: Option<u16>| v.map_or(0, |v| u8::try_from(v).unwrap_or(u8::MAX));
        let request = ConnectRequest {
            peer: inner.peer_addr(),
            private_data: inner.private_data().to_vec(),
            ird: depth(io.map(|p| p.ird)),
            ord: depth(io.map(|p| p.ord)),
        };
        IwarpPending {
            inner,
            request,
            config: config.clone(),
        }
    }

    /// The MPA side of the request (raw frame, IRD/ORD header).
    pub fn mpa(&self) -> &tcp::PendingConnection {
        &self.inner
    }
}

impl PendingConnection for IwarpPending {
    type Provider = IwarpProvider;

    fn request(&self) -> &ConnectRequest {
        &self.request
    }

    fn provider_mut(&mut self) -> &mut IwarpProvider {
        self.inner.provider_mut()
    }

    fn accept(self, params: &ConnectParams) -> Result<IwarpProvider, CmError> {
        let cfg = with_params(&self.config, params);
        Ok(self.inner.accept(cfg, ANSWER_TIMEOUT)?)
    }

    fn reject(self, private_data: &[u8]) -> Result<(), CmError> {
        Ok(self.inner.reject(private_data, ANSWER_TIMEOUT)?)
    }
}
