//! The connection-manager contract on the RDMA CM (librdmacm): connect,
//! listen, accept or reject with private data (RFC 8797 rides in it).
//!
//! Every connection has an event channel of its own (a passive side's
//! connection is moved to one with `rdma_migrate_id` as soon as its
//! request arrives), so a provider's CM events never reach another's.

use std::io;
use std::net::SocketAddr;
use std::ptr;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use libc::c_int;
use rpcrdma_proto::provider::cm::{
    CmError, ConnectRequest, ConnectionManager, DropReason, ListenEvent, Listener,
    PendingConnection,
};
use rpcrdma_proto::provider::{ConnectParams, Provider, ProviderError};

use crate::addr;
use crate::conn::{errno, Channel, CmEvent, CmId, QueueSizes, Queues};
use crate::device::{devices, Unavailable};
use crate::fd::{self, WakeFd};
use crate::libs::{rdma, Rdma};
use crate::provider::VerbsProvider;
use crate::sys::*;

/// Settings of the verbs provider's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Send-queue depth asked for (the device may grant less).
    pub send_depth: u32,
    /// Receive-queue depth asked for.
    pub recv_depth: u32,
    /// SGEs per Send-queue WR asked for.
    pub max_sge: u32,
    /// How long an accept waits for the connection to be established
    /// (one CM message from the peer).
    pub accept_timeout: Duration,
    /// `rdma_listen` backlog.
    pub backlog: u16,
    /// The device connections must use (`--device`): a connect whose
    /// address resolves to another device fails, a listener refuses
    /// requests arriving on another one. `None`: whichever device the
    /// RDMA CM picks for the address.
    pub device: Option<String>,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            send_depth: 256,
            recv_depth: 256,
            max_sge: 4,
            accept_timeout: Duration::from_secs(1),
            backlog: 64,
            device: None,
        }
    }
}

/// The verbs provider's connection manager.
#[derive(Clone, Debug, Default)]
pub struct VerbsCm {
    /// Queue sizes and timeouts.
    pub config: VerbsConfig,
}

impl VerbsCm {
    /// A connection manager with `config`.
    pub fn new(config: VerbsConfig) -> VerbsCm {
        VerbsCm { config }
    }

    /// Whether connections can act on a received Send With Invalidate
    /// (`Caps::remote_invalidation`), known before connecting so that the
    /// RFC 8797 R flag is set only when true: the configured device, or
    /// every device the RDMA CM has, binds type 2 memory windows from user
    /// space (rxe, many RoCE/InfiniBand NICs; not siw, whose user-space
    /// provider has no windows and does not report an invalidation; never
    /// plain MRs: `crate::mw`, docs/verbs.md).
    pub fn remote_invalidation(&self) -> bool {
        match rdma() {
            Ok(r) => crate::mw::cm_remote_invalidation(r, self.config.device.as_deref()),
            Err(_) => false,
        }
    }

    fn sizes(&self) -> QueueSizes {
        QueueSizes {
            send_wr: self.config.send_depth,
            recv_wr: self.config.recv_depth,
            send_sge: self.config.max_sge,
            recv_sge: 1,
            inline: 0,
        }
    }
}

/// rdma-core loaded and at least one device present, or the one line
/// that says why not.
fn ready(want: Option<&str>) -> io::Result<&'static Rdma> {
    let r = rdma().map_err(|e| io::Error::from(Unavailable::Load(e)))?;
    let list = devices()?;
    if let Some(w) = want {
        if !list.iter().any(|d| d.name == w) {
            let names: Vec<&str> = list.iter().map(|d| d.name.as_str()).collect();
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no RDMA device named {w} (devices: {})", names.join(", ")),
            ));
        }
    }
    Ok(r)
}

/// Fails unless `id` (address resolved or from a request) is on the
/// configured device.
fn on_device(r: &Rdma, id: &CmId, want: Option<&str>, addr: SocketAddr) -> io::Result<()> {
    let Some(w) = want else { return Ok(()) };
    let got = id.device_name(r).unwrap_or_default();
    if got != w {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{addr} is on RDMA device {got}, not {w} (--device)"),
        ));
    }
    Ok(())
}

fn millis(d: Duration) -> c_int {
    c_int::try_from(d.as_millis().max(1)).unwrap_or(c_int::MAX)
}

/// Private data and depths as `rdma_conn_param` (the pointer borrows
/// `pd`).
fn conn_param(pd: &[u8], ird: u8, ord: u8) -> rdma_conn_param {
    rdma_conn_param {
        private_data: if pd.is_empty() {
            ptr::null()
        } else {
            pd.as_ptr().cast()
        },
        private_data_len: pd.len() as u8,
        responder_resources: ird,
        initiator_depth: ord,
        flow_control: 0,
        // Linux xprtrdma's values: retry transport errors, never RNR
        // (a Send that finds no receive is a credit bug to see).
        retry_count: 6,
        rnr_retry_count: 0,
        srq: 0,
        qp_num: 0,
    }
}

fn check_private_data(p: &VerbsProvider, pd: &[u8]) -> Result<(), CmError> {
    let max = usize::from(p.caps().max_private_data);
    if pd.len() > max {
        return Err(CmError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            ProviderError::PrivateDataTooLong { len: pd.len(), max },
        )));
    }
    Ok(())
}

/// Waits for `want` on `ch`; any other event is an error.
fn expect(r: &Rdma, ch: &Channel, want: c_int, what: &str, by: Instant) -> io::Result<CmEvent> {
    let ev = ch.event_by(by)?;
    if ev.kind != want {
        return Err(ev.unexpected(r, what));
    }
    Ok(ev)
}

/// A connect's answer: an InfiniBand consumer reject (REJ reason 28) or
/// an iWARP MPA reject carrying private data is the peer's refusal with
/// its private data; any other REJECTED (no listener, bad service) is a
/// refused connection without one.
fn rejected(r: &Rdma, ev: CmEvent) -> CmError {
    const IB_CM_REJ_CONSUMER_DEFINED: c_int = 28;
    if ev.status == IB_CM_REJ_CONSUMER_DEFINED || !ev.private_data.is_empty() {
        return CmError::Rejected {
            private_data: ev.private_data,
        };
    }
    CmError::Io(ev.unexpected(r, "ESTABLISHED"))
}

impl ConnectionManager for VerbsCm {
    type Provider = VerbsProvider;
    type Listener = VerbsListener;

    fn connect(
        &self,
        to: SocketAddr,
        params: &ConnectParams,
        timeout: Duration,
    ) -> Result<VerbsProvider, CmError> {
        let want = self.config.device.as_deref();
        let r = ready(want)?;
        let by = Instant::now() + timeout;
        let ch = Channel::new(r)?;
        let id = CmId::new(r, &ch)?;
        let mut dst = addr::to_storage(to);
        // SAFETY: `id` is live; `dst` is a valid socket address for the
        // call's duration; no source address.
        if unsafe {
            (r.resolve_addr)(
                id.id,
                ptr::null_mut(),
                (&mut dst as *mut libc::sockaddr_storage).cast(),
                millis(timeout),
            )
        } != 0
        {
            return Err(errno("rdma_resolve_addr").into());
        }
        expect(r, &ch, RDMA_CM_EVENT_ADDR_RESOLVED, "ADDR_RESOLVED", by)?;
        let left = by.saturating_duration_since(Instant::now());
        // SAFETY: `id` is live with its address resolved.
        if unsafe { (r.resolve_route)(id.id, millis(left)) } != 0 {
            return Err(errno("rdma_resolve_route").into());
        }
        expect(r, &ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "ROUTE_RESOLVED", by)?;
        on_device(r, &id, want, to)?;
        let q = Queues::new(r, &id, self.sizes())?;
        let mut p = VerbsProvider::new(r, ch, id, q)?;
        check_private_data(&p, &params.private_data)?;
        let caps = p.caps();
        // Linux svcrdma refuses a client whose responder resources are 0
        // (it uses them as its initiator depth), so offer at least one.
        let ird = params.ird.clamp(1, caps.max_ird.max(1));
        let ord = params.ord.min(caps.max_ord);
        let mut cp = conn_param(&params.private_data, ird, ord);
        // SAFETY: `id` has a QP; `cp` and the private data it points to
        // live across the call (librdmacm copies them).
        if unsafe { (r.connect)(p.id.id, &mut cp) } != 0 {
            return Err(errno("rdma_connect").into());
        }
        let ev = p.ch.event_by(by)?;
        match ev.kind {
            RDMA_CM_EVENT_ESTABLISHED => {
                // The peer's responder resources bound our reads. On
                // InfiniBand / RoCE the event gives them as
                // `initiator_depth` (`cm_format_rep_event` swaps the REP's
                // fields to our side); on iWARP `cma_iw_handler` passes the
                // device's "negotiated IRD/ORD values we will use" (siw's
                // words), our ORD being `responder_resources`.
                let bound = if p.transport() == crate::Transport::Iwarp {
                    ev.responder_resources
                } else {
                    ev.initiator_depth
                };
                let ord = ord.min(bound);
                p.establish(&params.private_data, ev.private_data, ird, ord);
                Ok(p)
            }
            RDMA_CM_EVENT_REJECTED => Err(rejected(r, ev)),
            _ => Err(ev.unexpected(r, "ESTABLISHED").into()),
        }
    }

    fn listen(&self, at: SocketAddr) -> Result<VerbsListener, CmError> {
        let want = self.config.device.as_deref();
        let r = ready(want)?;
        let ch = Channel::new(r)?;
        let id = CmId::new(r, &ch)?;
        let mut a = addr::to_storage(at);
        // SAFETY: `id` is live; `a` is a valid socket address.
        if unsafe { (r.bind_addr)(id.id, (&mut a as *mut libc::sockaddr_storage).cast()) } != 0 {
            return Err(errno(&format!("rdma_bind_addr {at}")).into());
        }
        // A specific address is bound to its device now; a wildcard one
        // is checked per request.
        if !id.verbs().is_null() {
            on_device(r, &id, want, at)?;
        }
        // SAFETY: `id` is bound.
        if unsafe { (r.listen)(id.id, c_int::from(self.config.backlog)) } != 0 {
            return Err(errno("rdma_listen").into());
        }
        let local = id.local_addr().unwrap_or(at);
        Ok(VerbsListener {
            wake: WakeFd::new()?,
            local,
            cm: self.clone(),
            rdma: r,
            _id: id,
            ch,
        })
    }
}

/// A listening RDMA CM id.
pub struct VerbsListener {
    wake: Arc<WakeFd>,
    local: SocketAddr,
    cm: VerbsCm,
    rdma: &'static Rdma,
    // The listening id (kept alive, destroyed before its channel).
    _id: CmId,
    ch: Channel,
}

// SAFETY: the id and channel are owned by this value and used only through
// `&mut self`; librdmacm may be called from any thread.
unsafe impl Send for VerbsListener {}

impl VerbsListener {
    /// Builds the pending connection of a CONNECT_REQUEST: its QP on the
    /// child id, which moves to an event channel of its own.
    fn pending(&self, ev: CmEvent) -> Result<VerbsPending, (SocketAddr, io::Error)> {
        // SAFETY: a CONNECT_REQUEST's id is a new id that we now own
        // (destroyed when the pending connection or provider drops).
        let child = unsafe { CmId::from_request(self.rdma, ev.id) };
        let peer = child
            .peer_addr()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let setup = || -> io::Result<VerbsProvider> {
            on_device(self.rdma, &child, self.cm.config.device.as_deref(), peer)?;
            let ch = Channel::new(self.rdma)?;
            // SAFETY: the child's events are all acknowledged (the request
            // was copied and acked), so migrating does not wait.
            if unsafe { (self.rdma.migrate_id)(child.id, ch.ch) } != 0 {
                return Err(errno("rdma_migrate_id"));
            }
            let q = Queues::new(self.rdma, &child, self.cm.sizes())?;
            VerbsProvider::new(self.rdma, ch, child, q)
        };
        let provider = setup().map_err(|e| (peer, e))?;
        Ok(VerbsPending {
            req: ConnectRequest {
                peer,
                private_data: ev.private_data,
                // The peer's IRD and ORD. The event gives them from our
                // side (`cm_format_req_event`, `iw_conn_req_handler`):
                // `initiator_depth` = the peer's responder resources (its
                // IRD, the most reads we may have in flight),
                // `responder_resources` = the peer's initiator depth (its
                // ORD).
                ird: ev.initiator_depth,
                ord: ev.responder_resources,
            },
            accept_timeout: self.cm.config.accept_timeout,
            provider,
        })
    }
}

impl Listener for VerbsListener {
    type Provider = VerbsProvider;
    type Pending = VerbsPending;

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<ListenEvent<VerbsPending>>,
    ) -> io::Result<()> {
        let before = events.len();
        let mut first = true;
        loop {
            while let Some(ev) = self.ch.try_event()? {
                match ev.kind {
                    RDMA_CM_EVENT_CONNECT_REQUEST => match self.pending(ev) {
                        Ok(p) => events.push(ListenEvent::Request(p)),
                        Err((peer, e)) => events.push(ListenEvent::Dropped {
                            peer,
                            reason: DropReason::Failed(e.to_string()),
                        }),
                    },
                    RDMA_CM_EVENT_DEVICE_REMOVAL => events.push(ListenEvent::Error(
                        io::Error::new(io::ErrorKind::NotFound, "RDMA device removed"),
                    )),
                    _ => {}
                }
            }
            if events.len() > before || !first {
                return Ok(());
            }
            first = false;
            let ready = fd::wait_readable(&[self.ch.fd(), self.wake.raw()], timeout)?;
            if ready & 2 != 0 {
                self.wake.drain();
                return Ok(());
            }
        }
    }

    fn waker(&self) -> Waker {
        self.wake.waker()
    }
}

/// A connection request awaiting its answer.
pub struct VerbsPending {
    req: ConnectRequest,
    accept_timeout: Duration,
    provider: VerbsProvider,
}

impl PendingConnection for VerbsPending {
    type Provider = VerbsProvider;

    fn request(&self) -> &ConnectRequest {
        &self.req
    }

    fn provider_mut(&mut self) -> &mut VerbsProvider {
        &mut self.provider
    }

    fn accept(self, params: &ConnectParams) -> Result<VerbsProvider, CmError> {
        let VerbsPending {
            req,
            accept_timeout,
            mut provider,
        } = self;
        check_private_data(&provider, &params.private_data)?;
        let caps = provider.caps();
        // Each side's reads are bounded by the other's responder
        // resources.
        let ird = params.ird.min(req.ord).min(caps.max_ird);
        let ord = params.ord.min(req.ird).min(caps.max_ord);
        let mut cp = conn_param(&params.private_data, ird, ord);
        let r = rdma()?;
        // SAFETY: the child id has its QP; `cp` and the private data live
        // across the call.
        if unsafe { (r.accept)(provider.id.id, &mut cp) } != 0 {
            return Err(errno("rdma_accept").into());
        }
        let by = Instant::now() + accept_timeout;
        let ev = provider.ch.event_by(by)?;
        if ev.kind != RDMA_CM_EVENT_ESTABLISHED {
            return Err(ev.unexpected(r, "ESTABLISHED").into());
        }
        provider.establish(&params.private_data, req.private_data, ird, ord);
        Ok(provider)
    }

    fn reject(self, private_data: &[u8]) -> Result<(), CmError> {
        check_private_data(&self.provider, private_data)?;
        let r = rdma()?;
        // SAFETY: the child id is live and unanswered; the private data
        // lives across the call.
        let rc = unsafe {
            (r.reject)(
                self.provider.id.id,
                if private_data.is_empty() {
                    ptr::null()
                } else {
                    private_data.as_ptr().cast()
                },
                private_data.len() as u8,
            )
        };
        if rc != 0 {
            return Err(errno("rdma_reject").into());
        }
        Ok(())
    }
}

impl From<crate::libs::LoadError> for CmError {
    fn from(e: crate::libs::LoadError) -> CmError {
        CmError::Io(Unavailable::Load(e).into())
    }
}

impl std::fmt::Debug for VerbsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for VerbsPending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsPending")
            .field("request", &self.req)
            .finish_non_exhaustive()
    }
}
