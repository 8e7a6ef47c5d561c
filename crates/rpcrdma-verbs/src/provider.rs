//! [`VerbsProvider`]: one RC queue pair on an rdma-core device, behind the
//! provider contract of `rpcrdma-proto`.
//!
//! Work requests are checked against the registration table before they
//! reach the device (the contract's synchronous refusals), every WR is
//! signalled, and each completion is matched to its WR by a slot number
//! carried in the `wr_id` the device echoes; the holds the WR took on its
//! regions are released when its completion is returned. Completions are
//! mapped to the contract's status classes ([`crate::status`]); the first
//! failing one ends the connection (`rdma_disconnect`, the rest flush).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::ptr;
use std::task::Waker;

use rpcrdma_proto::provider::memory::{Holds, SendRules};
use rpcrdma_proto::provider::{
    Access, Buffer, Bytes, Caps, Completion, ConnectionEvent, ConnectionInfo, ConnectionState,
    DisconnectReason, LinkInfo, MemoryRegion, Notify, Opcode, Provider, ProviderError, RecvWr,
    RegisterError, SendOp, SendWr, SmallVec, Stag, Status,
};

use crate::async_events::{self, Subscription};
use crate::conn::{Channel, CmId, Queues};
use crate::fd::Epoll;
use crate::libs::Rdma;
use crate::mr::{MrUse, Registry, Retired};
use crate::status::status_class;
use crate::sys::*;
use crate::Transport;

/// Completions taken from the CQ per `ibv_poll_cq` call.
const POLL_BATCH: usize = 32;

/// One posted work request, until its completion is returned.
#[derive(Debug)]
struct Posted {
    wr_id: u64,
    opcode: Opcode,
    holds: Holds,
    /// Octets of the Send-queue WR (the device reports them for receives
    /// and reads only).
    len: u32,
    recv: bool,
    /// The MRs its SGEs use (released with the completion).
    uses: SmallVec<[MrUse; 4]>,
    /// Send-queue sequence number (post order of Send-queue WRs, device
    /// and emulated alike).
    seq: u64,
    /// A memory-window bind of ours (`crate::mw`): its completion is not
    /// the caller's (a failure still ends the connection).
    bind: bool,
}

/// A Local Invalidate done by deregistration ([`crate::mr`]): it
/// completes once every Send-queue WR posted before it has completed (the
/// contract's Send-queue order) and the MR is gone.
#[derive(Debug)]
struct PendingInv {
    seq: u64,
    slot: u32,
    idx: u32,
    failed: bool,
}

/// An RDMA connection on an rdma-core device. Build one with
/// [`crate::VerbsCm`].
pub struct VerbsProvider {
    // Drop order matters (fields drop top to bottom after `Drop::drop`
    // has deregistered every MR): the QP and its queues, then the id, then
    // its event channel, then the registered buffers.
    q: Queues,
    pub(crate) id: CmId,
    pub(crate) ch: Channel,
    epoll: Epoll,
    /// The device's async events for this connection.
    sub: Subscription,
    rdma: &'static Rdma,
    caps: Caps,
    rules: SendRules,
    state: ConnectionState,
    info: Option<ConnectionInfo>,
    events: VecDeque<ConnectionEvent>,
    posted: Vec<Option<Posted>>,
    free: Vec<u32>,
    sends: u32,
    recvs: u32,
    /// The next Send-queue sequence number.
    sq_seq: u64,
    /// Sequence numbers of the Send-queue WRs the device holds, oldest
    /// first.
    sq_device: VecDeque<u64>,
    /// Local Invalidates waiting for their turn to complete.
    invs: VecDeque<PendingInv>,
    wcs: Vec<ibv_wc>,
    /// Completions taken from the CQ by `arm` (to close the arming race),
    /// returned by the next `poll_completions`.
    stash: Vec<ibv_wc>,
    local_pd: Vec<u8>,
    peer: Option<SocketAddr>,
    reg: Registry,
    /// Window binds posted and not completed, and how many the Send
    /// queue keeps room for beyond the caller's `max_send_wr`.
    binds: u32,
    bind_room: u32,
}

// SAFETY: the raw pointers are rdma-core objects owned by this value and
// used only through `&mut self` (or `&self` for reads of immutable
// fields); libibverbs and librdmacm may be called from any thread.
unsafe impl Send for VerbsProvider {}

impl VerbsProvider {
    /// Wraps the objects of a connection being set up (state
    /// `Connecting`; receives may be posted).
    pub(crate) fn new(
        rdma: &'static Rdma,
        ch: Channel,
        id: CmId,
        q: Queues,
    ) -> std::io::Result<VerbsProvider> {
        // SAFETY: the QP is live; `context` is its first field.
        let ctx = unsafe { (*q.qp).context };
        let sub = Subscription::new(rdma, ctx, q.qp, q.cq)?;
        let epoll = Epoll::new(&[q.comp_fd(), ch.fd(), sub.async_fd(), sub.wake.raw()])?;
        let mut caps = caps_of(&q);
        let mut q = q;
        let mut reg = Registry::new(rdma, q.pd, std::mem::take(&mut q.cache));
        // Type 2 memory windows: remote invalidation (`crate::mw`). Half
        // the Send queue is kept for their binds.
        let mut bind_room = 0;
        // Not on iWARP: a Read sink there must be remotely writable under
        // the STag its SGE names (the MR's), which a window does not give.
        if q.transport != Transport::Iwarp && crate::mw::device_supports(ctx, &q.attr) {
            reg.windows = Some(crate::mw::Windows::new(ctx, q.pd));
            caps.remote_invalidation = true;
            bind_room = q.sizes.send_wr / 2;
            caps.max_send_wr = (q.sizes.send_wr - bind_room).max(1);
        }
        let iwarp = q.transport == Transport::Iwarp;
        Ok(VerbsProvider {
            q,
            id,
            ch,
            epoll,
            sub,
            rdma,
            caps,
            rules: SendRules {
                read_single_sge: iwarp,
                read_sink_access: if iwarp {
                    Access::LOCAL_WRITE | Access::REMOTE_WRITE
                } else {
                    Access::LOCAL_WRITE
                },
                ord_zero: true,
            },
            state: ConnectionState::Connecting,
            info: None,
            events: VecDeque::new(),
            posted: Vec::new(),
            free: Vec::new(),
            sends: 0,
            recvs: 0,
            sq_seq: 0,
            sq_device: VecDeque::new(),
            invs: VecDeque::new(),
            wcs: vec![ibv_wc::default(); POLL_BATCH],
            stash: Vec::new(),
            local_pd: Vec::new(),
            peer: None,
            reg,
            binds: 0,
            bind_room,
        })
    }

    /// The OS error of the last registration the device refused (the
    /// [`ProviderError`] names its class only).
    pub fn last_registration_error(&self) -> Option<&std::io::Error> {
        self.reg.last_error.as_ref()
    }

    /// The device's `vendor_id` (`ibv_query_device`; Linux siw's is
    /// 0x626d74, ASCII "bmt").
    pub fn vendor_id(&self) -> u32 {
        self.q.attr.vendor_id
    }

    /// The device's transport.
    pub fn transport(&self) -> Transport {
        self.q.transport
    }

    /// The connection is up: `ird` / `ord` as negotiated, the peer's
    /// private data; queues the `Established` event.
    pub(crate) fn establish(&mut self, local_pd: &[u8], peer_pd: Vec<u8>, ird: u8, ord: u8) {
        let info = ConnectionInfo {
            peer_private_data: peer_pd,
            ird,
            ord,
            max_send_sge: self.caps.max_send_sge,
            max_recv_sge: self.caps.max_recv_sge,
            max_inline: self.caps.max_inline,
            max_msg_size: self.caps.max_msg_size,
        };
        self.rules.ord_zero = ord == 0;
        self.local_pd = local_pd.to_vec();
        self.peer = self.id.peer_addr();
        self.state = ConnectionState::Established;
        self.info = Some(info.clone());
        self.events.push_back(ConnectionEvent::Established(info));
    }

    fn end(&mut self, reason: DisconnectReason) {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return;
        }
        // SAFETY: the id is live; rdma_disconnect moves the QP to error
        // (outstanding WRs flush) and tells the peer. Calling it on an id
        // the peer disconnected already is allowed.
        unsafe { (self.rdma.disconnect)(self.id.id) };
        self.state = ConnectionState::Disconnected(reason.clone());
        self.events.push_back(ConnectionEvent::Disconnected(reason));
    }

    /// Takes queued RDMA CM events (a disconnect or device removal ends
    /// the connection) and the device's async events for this QP and CQ
    /// (a fatal one ends it with its status).
    ///
    /// One `poll(2)` with no wait says which of the four fds has
    /// something, so an idle check costs one system call.
    fn pump_cm(&mut self) {
        let fds = [
            self.q.comp_fd(),
            self.ch.fd(),
            self.sub.async_fd(),
            self.sub.wake.raw(),
        ];
        let ready =
            crate::fd::wait_readable(&fds, Some(std::time::Duration::ZERO)).unwrap_or(0b1111);
        if ready & 0b0001 != 0 {
            self.q.drain_comp_channel();
        }
        if ready & 0b1100 != 0 {
            for ev in self.sub.take() {
                if let Some(reason) = async_events::reason(ev) {
                    self.end(reason);
                }
            }
        }
        if ready & 0b0010 == 0 {
            return;
        }
        while let Ok(Some(ev)) = self.ch.try_event() {
            match ev.kind {
                RDMA_CM_EVENT_DISCONNECTED => self.end(DisconnectReason::PeerClose),
                RDMA_CM_EVENT_DEVICE_REMOVAL => self.end(DisconnectReason::TransportLost),
                _ => {}
            }
        }
    }

    fn slot(&mut self, p: Posted) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.posted[i as usize] = Some(p);
                i
            }
            None => {
                self.posted.push(Some(p));
                (self.posted.len() - 1) as u32
            }
        }
    }

    /// Undoes [`VerbsProvider::slot`] for a WR the device refused.
    fn unpost(&mut self, i: u32) {
        if let Some(p) = self.unslot(i) {
            self.reg.release(&p.uses);
        }
    }

    fn unslot(&mut self, i: u32) -> Option<Posted> {
        let p = self.posted.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(p)
    }

    fn complete(&mut self, wc: &ibv_wc, out: &mut Vec<Completion>) {
        let Some(p) = u32::try_from(wc.wr_id).ok().and_then(|i| self.unslot(i)) else {
            return;
        };
        self.reg.table.release(&p.holds);
        if !self.reg.release(&p.uses) {
            self.dereg_failed();
        }
        let status = status_class(wc.status);
        if p.bind {
            self.binds = self.binds.saturating_sub(1);
            if !status.is_ok() && status != Status::Flushed {
                self.end(DisconnectReason::Error {
                    status,
                    blame: status.blame(),
                });
            }
            return;
        }
        if p.recv {
            self.recvs -= 1;
        } else {
            self.sends -= 1;
            if let Some(i) = self.sq_device.iter().position(|&s| s == p.seq) {
                self.sq_device.remove(i);
            }
        }
        let mut opcode = p.opcode;
        let mut byte_len = 0;
        if status.is_ok() {
            byte_len = if p.recv || p.opcode == Opcode::Read {
                wc.byte_len
            } else {
                p.len
            };
            if p.recv && self.with_invalidate(wc) {
                let rkey = wc.invalidated_rkey;
                if self.reg.is_window(rkey) {
                    // The device invalidated our window: it is bound
                    // again for a later registration.
                    self.reg.remote_invalidated(rkey);
                } else if self.reg.invalidate(rkey) == Retired::Failed {
                    // The device invalidated the MR; retire it like a
                    // Local Invalidate (local use goes on through a
                    // fresh MR).
                    self.dereg_failed();
                }
                opcode = Opcode::RecvWithInvalidate { stag: Stag(rkey) };
            }
        } else if status != Status::Flushed {
            self.end(DisconnectReason::Error {
                status,
                blame: status.blame(),
            });
        }
        out.push(Completion {
            wr_id: p.wr_id,
            opcode,
            byte_len,
            status,
        });
    }

    /// Whether a receive completion reports a Send With Invalidate.
    /// libibverbs says so with `IBV_WC_WITH_INV` (1 << 3); Linux rxe
    /// writes its completions straight into the user-mapped CQ with the
    /// *kernel's* flag, `IB_WC_WITH_INVALIDATE` = 1 << 2 (rdma-core's
    /// `rxe_poll_cq` copies them as they are), where libibverbs has
    /// `IBV_WC_IP_CSUM_OK` — so on rxe that bit counts too, and only for
    /// an rkey that is one of our valid windows (lab, Linux 6.1 rxe with
    /// rdma-core 44: the flag seen was 1 << 2).
    fn with_invalidate(&self, wc: &ibv_wc) -> bool {
        if wc.wc_flags & IBV_WC_WITH_INV != 0 {
            return true;
        }
        self.q.attr.vendor_id == RXE_VENDOR_ID
            && wc.wc_flags & IB_WC_WITH_INVALIDATE_KERNEL != 0
            && self.reg.is_window(wc.invalidated_rkey)
    }

    /// `ibv_dereg_mr` refused to end an MR: the memory stays reachable by
    /// the device, so the connection ends (RFC 8166 section 4.5.4: a
    /// requester that cannot invalidate closes the connection).
    fn dereg_failed(&mut self) {
        self.end(DisconnectReason::Error {
            status: Status::LocalOperation,
            blame: Status::LocalOperation.blame(),
        });
    }

    /// Whether the oldest waiting Local Invalidate may complete.
    fn inv_ready(&self) -> bool {
        self.invs.front().is_some_and(|i| {
            self.sq_device.front().is_none_or(|&s| s > i.seq)
                && (i.failed
                    || !self.reg.retiring(i.idx)
                    || matches!(self.state, ConnectionState::Disconnected(_)))
        })
    }

    /// Completes the Local Invalidates whose turn has come (after every
    /// earlier Send-queue completion).
    fn complete_invs(&mut self, out: &mut Vec<Completion>) {
        while self.inv_ready() {
            let Some(i) = self.invs.pop_front() else {
                break;
            };
            let Some(p) = self.unslot(i.slot) else {
                continue;
            };
            self.reg.table.release(&p.holds);
            let status = if i.failed {
                self.dereg_failed();
                Status::LocalOperation
            } else if matches!(self.state, ConnectionState::Disconnected(_)) {
                Status::Flushed
            } else {
                Status::Success
            };
            out.push(Completion {
                wr_id: p.wr_id,
                opcode: Opcode::LocalInvalidate,
                byte_len: 0,
                status,
            });
        }
    }

    /// Posts a Local Invalidate: done here by deregistration (see
    /// [`crate::mr`]), completed in Send-queue order by
    /// [`VerbsProvider::complete_invs`].
    fn post_invalidate(&mut self, wr: &SendWr, stag: Stag) -> Result<(), ProviderError> {
        let key = self
            .reg
            .key_of_rkey(stag.0)
            .ok_or(ProviderError::InvalidHandle)?;
        let w = SendWr {
            wr_id: wr.wr_id,
            op: SendOp::LocalInvalidate { stag: Stag(key) },
            sges: wr.sges.clone(),
        };
        let c = self.reg.table.check_send(&w, &self.caps, &self.rules)?;
        let idx = Stag(key).index();
        let failed = self.reg.invalidate(stag.0) == Retired::Failed;
        self.reg.table.hold(&c.holds);
        let seq = self.sq_seq;
        self.sq_seq += 1;
        let slot = self.slot(Posted {
            wr_id: wr.wr_id,
            opcode: Opcode::LocalInvalidate,
            holds: c.holds,
            len: 0,
            recv: false,
            uses: SmallVec::new(),
            seq,
            bind: false,
        });
        self.invs.push_back(PendingInv {
            seq,
            slot,
            idx,
            failed,
        });
        Ok(())
    }

    /// Posts one Send-queue WR built by the caller.
    fn post_raw(&mut self, w: &mut ibv_send_wr) -> Result<(), ProviderError> {
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; ops layout pinned by the ABI test.
        let Some(f) = (unsafe { (*(*self.q.qp).context).ops.post_send }) else {
            return Err(ProviderError::Unsupported);
        };
        // SAFETY: `w` lives across the call (the device copies it); what
        // it names (SGEs, MR, window) is live and checked by the caller.
        let r = unsafe { f(self.q.qp, w, &mut bad) };
        if r != 0 {
            return Err(Self::post_error(r));
        }
        Ok(())
    }

    /// Posts the bind of a window registration (`crate::mw`), ahead of
    /// every later WR of the Send queue (so of the Send that carries its
    /// STag); on failure the registration is undone.
    fn post_bind(
        &mut self,
        mr: MemoryRegion,
        b: crate::mr::Bind,
    ) -> Result<MemoryRegion, (ProviderError, Option<Buffer>)> {
        if self.state != ConnectionState::Established || self.binds >= self.bind_room {
            let e = if self.state == ConnectionState::Established {
                ProviderError::QueueFull
            } else {
                ProviderError::NotConnected
            };
            return Err((e, self.reg.unbind(b.idx)));
        }
        let slot = self.slot(Posted {
            wr_id: 0,
            opcode: Opcode::LocalInvalidate,
            holds: Holds::new(),
            len: 0,
            recv: false,
            uses: SmallVec::new(),
            seq: 0,
            bind: true,
        });
        let mut d = ibv_send_wr {
            wr_id: u64::from(slot),
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
            opcode: IBV_WR_BIND_MW,
            send_flags: IBV_SEND_SIGNALED,
            invalidate_rkey: 0,
            wr: ibv_send_wr_wr {
                rdma: ibv_wr_rdma {
                    remote_addr: 0,
                    rkey: 0,
                },
            },
            remote_srqn: 0,
            tail: ibv_send_wr_tail { bind_mw: b.wr },
        };
        if let Err(e) = self.post_raw(&mut d) {
            self.unslot(slot);
            return Err((e, self.reg.unbind(b.idx)));
        }
        // The window's key is the new one from now on (what
        // `ibv_bind_mw` does; the next bind names it as the current one).
        // SAFETY: the window is ours and live.
        unsafe { (*b.wr.mw).rkey = b.wr.rkey };
        self.binds += 1;
        Ok(mr)
    }

    /// Polls the CQ into `self.wcs`; returns how many.
    fn poll_cq(&mut self) -> usize {
        // SAFETY: `cq` is live and its context's ops table is the one
        // libibverbs filled at open time (layout pinned by the ABI test).
        let f = unsafe { (*(*self.q.cq).context).ops.poll_cq };
        let Some(f) = f else { return 0 };
        // SAFETY: `wcs` has room for POLL_BATCH completions.
        let n = unsafe { f(self.q.cq, POLL_BATCH as libc::c_int, self.wcs.as_mut_ptr()) };
        usize::try_from(n).unwrap_or(0).min(POLL_BATCH)
    }

    fn post_error(r: libc::c_int) -> ProviderError {
        match r {
            libc::ENOMEM => ProviderError::QueueFull,
            _ => ProviderError::InvalidArgument("the device refused the work request"),
        }
    }
}

/// `(ibv opcode, flags, invalidate rkey, remote)` of a Send-queue op.
fn send_op(op: SendOp) -> (libc::c_int, libc::c_uint, u32, Option<(u64, u32)>, Opcode) {
    let sol = |s: bool| if s { IBV_SEND_SOLICITED } else { 0 };
    match op {
        SendOp::Send { solicited } => (IBV_WR_SEND, sol(solicited), 0, None, Opcode::Send),
        SendOp::SendWithInvalidate {
            invalidate,
            solicited,
        } => (
            IBV_WR_SEND_WITH_INV,
            sol(solicited),
            invalidate.0,
            // The STag also in `wr.rdma.rkey`: Linux siw's user-space
            // provider copies only that field into the WQE it hands the
            // kernel (rdma-core providers/siw/siw.c `push_send_wqe`:
            // `siw_sqe->rkey = base_wr->wr.rdma.rkey`, never
            // `invalidate_rkey`), and the kernel sends it as the
            // Invalidate STag; every other provider ignores `wr.rdma` for
            // a Send.
            Some((0, invalidate.0)),
            Opcode::Send,
        ),
        SendOp::Write { remote } => (
            IBV_WR_RDMA_WRITE,
            0,
            0,
            Some((remote.offset, remote.stag.0)),
            Opcode::Write,
        ),
        SendOp::Read { remote } => (
            IBV_WR_RDMA_READ,
            0,
            0,
            Some((remote.offset, remote.stag.0)),
            Opcode::Read,
        ),
        SendOp::LocalInvalidate { stag } => {
            (IBV_WR_LOCAL_INV, 0, stag.0, None, Opcode::LocalInvalidate)
        }
    }
}

/// The contract's limits of a connection's queues on its device.
fn caps_of(q: &Queues) -> Caps {
    let a = &q.attr;
    let iwarp = q.transport == Transport::Iwarp;
    let u = |v: libc::c_int| u32::try_from(v).unwrap_or(0);
    let depth = |v: libc::c_int| u8::try_from(v.clamp(0, 255)).unwrap_or(255);
    Caps {
        max_send_wr: q.sizes.send_wr,
        max_recv_wr: q.sizes.recv_wr,
        max_send_sge: q.sizes.send_sge,
        max_recv_sge: q.sizes.recv_sge,
        // iWARP reads into one sink STag.
        max_read_sge: if iwarp {
            1
        } else {
            q.sizes.send_sge.min(u(a.max_sge_rd)).max(1)
        },
        max_msg_size: u32::try_from(a.max_mr_size.min(1 << 30)).unwrap_or(1 << 30),
        max_mr_size: a.max_mr_size,
        max_mr: u(a.max_mr).min(1 << 24),
        // rdma_conn_param's private_data_len is one octet; an InfiniBand
        // REQ through the RDMA CM carries 56.
        max_private_data: if iwarp { 255 } else { 56 },
        max_ird: depth(a.max_qp_rd_atom),
        max_ord: depth(a.max_qp_init_rd_atom),
        max_inline: q.sizes.inline,
        read_sink_needs_remote_write: iwarp,
        // Remote invalidation needs the device to invalidate a plain MR's
        // rkey *and* to say so in the receive completion. Linux siw does
        // the first (`siw_invalidate_stag` takes any memory of the QP's
        // PD) but its user-space provider drops the second (rdma-core
        // providers/siw/siw.c `copy_cqe`: `wc->wc_flags = 0`, no
        // `invalidated_rkey`); rxe and hardware invalidate only FRWR /
        // memory-window keys (FRWR keys user-space verbs cannot make). So
        // plain MRs never qualify, and the engine invalidates locally (by
        // deregistration, see `crate::mr`); a device with type 2 memory
        // windows turns this on (`VerbsProvider::new`, `crate::mw`).
        remote_invalidation: false,
    }
}

impl Drop for VerbsProvider {
    fn drop(&mut self) {
        if matches!(self.state, ConnectionState::Established) {
            // SAFETY: the id is live.
            unsafe { (self.rdma.disconnect)(self.id.id) };
        }
        // Every posted WR's holds are released (the QP is destroyed with
        // `q`, right after this, before the PD's cache is used again), so
        // the cache regions' buffers can leave the table.
        for p in self.posted.iter_mut().filter_map(Option::take) {
            self.reg.table.release(&p.holds);
        }
        // Before the PD goes (with `q`) and the buffers (with `reg`): the
        // cache regions go back to the PD's cache, every other MR is
        // deregistered.
        self.reg.deregister_all();
        self.q.cache = std::mem::take(&mut self.reg.cache);
        self.q.device_lost = matches!(
            self.state,
            ConnectionState::Disconnected(DisconnectReason::TransportLost)
        );
    }
}

impl Provider for VerbsProvider {
    fn caps(&self) -> Caps {
        self.caps
    }

    fn connection_state(&self) -> ConnectionState {
        self.state.clone()
    }

    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.info.clone()
    }

    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        if self.events.is_empty() {
            self.pump_cm();
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        self.end(DisconnectReason::LocalClose);
    }

    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        if self.reg.windowed(access) && self.state == ConnectionState::Established {
            let (mr, bind) = self.reg.register_window(buf, access, &self.caps)?;
            // A refused bind has deregistered the region: its buffer
            // comes back with the error.
            return self
                .post_bind(mr, bind)
                .map_err(|(error, buf)| RegisterError {
                    error,
                    buf: buf.map(Buffer::into_owned).unwrap_or_default(),
                });
        }
        self.reg.register(buf, access, &self.caps)
    }

    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        if self.reg.windowed(access) && self.state == ConnectionState::Established {
            let (mr, bind) = self.reg.register_shared_window(buf, access, &self.caps)?;
            return self.post_bind(mr, bind).map_err(|(e, _)| e);
        }
        self.reg.register_shared(buf, access, &self.caps)
    }

    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.reg.register_recv(len, &self.caps)
    }

    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.reg.deregister(mr)
    }

    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.reg.table.region(mr)
    }

    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.reg.table.region_mut(mr)
    }

    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return Err(ProviderError::NotConnected);
        }
        if self.recvs >= self.caps.max_recv_wr {
            return Err(ProviderError::QueueFull);
        }
        let hold = self.reg.table.check_recv(&wr)?;
        let (mut sge, used) = self.reg.sge(&wr.sge, hold.idx)?;
        let slot = self.slot(Posted {
            wr_id: wr.wr_id,
            opcode: Opcode::Recv,
            holds: [hold].into_iter().collect(),
            len: 0,
            recv: true,
            uses: [used].into_iter().collect(),
            seq: 0,
            bind: false,
        });
        let mut w = ibv_recv_wr {
            wr_id: u64::from(slot),
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; its context's ops table is libibverbs'
        // (layout pinned by the ABI test).
        let f = unsafe { (*(*self.q.qp).context).ops.post_recv };
        let Some(f) = f else {
            self.unpost(slot);
            return Err(ProviderError::Unsupported);
        };
        // SAFETY: `w` and `sge` live across the call (the device copies
        // the WR); the SGE names memory of a live MR within its bounds
        // (checked by the table), held until the completion is returned.
        let r = unsafe { f(self.q.qp, &mut w, &mut bad) };
        if r != 0 {
            self.unpost(slot);
            return Err(Self::post_error(r));
        }
        self.reg.table.hold(&[hold]);
        self.recvs += 1;
        Ok(())
    }

    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        if self.state != ConnectionState::Established {
            return Err(ProviderError::NotConnected);
        }
        if self.sends >= self.caps.max_send_wr {
            return Err(ProviderError::QueueFull);
        }
        if let SendOp::LocalInvalidate { stag } = wr.op {
            return self.post_invalidate(&wr, stag);
        }
        let c = self.reg.table.check_send(&wr, &self.caps, &self.rules)?;
        let mut sges: SmallVec<[ibv_sge; 4]> = SmallVec::new();
        let mut uses: SmallVec<[MrUse; 4]> = SmallVec::new();
        for (s, h) in wr.sges.iter().zip(&c.holds) {
            match self.reg.sge(s, h.idx) {
                Ok((sge, used)) => {
                    sges.push(sge);
                    uses.push(used);
                }
                Err(e) => {
                    self.reg.release(&uses);
                    return Err(e);
                }
            }
        }
        let (opcode, flags, inv, remote, done) = send_op(wr.op);
        let (remote_addr, rkey) = remote.unwrap_or((0, 0));
        let seq = self.sq_seq;
        let holds = c.holds;
        let slot = self.slot(Posted {
            wr_id: wr.wr_id,
            opcode: done,
            holds: holds.clone(),
            len: u32::try_from(c.total).unwrap_or(u32::MAX),
            recv: false,
            uses,
            seq,
            bind: false,
        });
        let mut w = ibv_send_wr {
            wr_id: u64::from(slot),
            next: ptr::null_mut(),
            sg_list: if sges.is_empty() {
                ptr::null_mut()
            } else {
                sges.as_mut_ptr()
            },
            num_sge: sges.len() as libc::c_int,
            opcode,
            send_flags: IBV_SEND_SIGNALED | flags,
            invalidate_rkey: inv,
            wr: ibv_send_wr_wr {
                rdma: ibv_wr_rdma { remote_addr, rkey },
            },
            remote_srqn: 0,
            // SAFETY: plain old data (unused for these opcodes).
            tail: unsafe { std::mem::zeroed() },
        };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is live; ops layout pinned by the ABI test.
        let f = unsafe { (*(*self.q.qp).context).ops.post_send };
        let Some(f) = f else {
            self.unpost(slot);
            return Err(ProviderError::Unsupported);
        };
        // SAFETY: `w` and `sges` live across the call (the device copies
        // them); every SGE names a live MR within its bounds with the
        // rights the op needs (checked by the table) and stays held until
        // the completion is returned.
        let r = unsafe { f(self.q.qp, &mut w, &mut bad) };
        if r != 0 {
            self.unpost(slot);
            return Err(Self::post_error(r));
        }
        self.reg.table.hold(&holds);
        self.sends += 1;
        self.sq_seq += 1;
        self.sq_device.push_back(seq);
        Ok(())
    }

    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        let start = out.len();
        self.pump_cm();
        self.complete_invs(out);
        for wc in std::mem::take(&mut self.stash) {
            self.complete(&wc, out);
            self.complete_invs(out);
        }
        loop {
            let n = self.poll_cq();
            for i in 0..n {
                let wc = self.wcs[i];
                self.complete(&wc, out);
                self.complete_invs(out);
            }
            if n < POLL_BATCH {
                break;
            }
        }
        out.len() - start
    }

    fn arm(&mut self, waker: &Waker, notify: Notify) {
        // SAFETY: the CQ is live; ops layout pinned by the ABI test.
        let f = unsafe { (*(*self.q.cq).context).ops.req_notify_cq };
        if let Some(f) = f {
            // SAFETY: arming a live CQ.
            unsafe { f(self.q.cq, libc::c_int::from(notify == Notify::Solicited)) };
        }
        // Close the race: what completed before arming does not raise an
        // event, so look once more.
        let n = self.poll_cq();
        self.stash.extend_from_slice(&self.wcs[..n]);
        if n > 0 || !self.events.is_empty() || self.inv_ready() {
            waker.wake_by_ref();
        }
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.fd())
    }

    fn registered_regions(&self) -> Option<u32> {
        Some(self.reg.table.registered())
    }

    fn link_info(&self) -> LinkInfo {
        let mut l = LinkInfo::from_connection(
            self.peer.map(|p| p.to_string()).unwrap_or_default(),
            self.info.as_ref(),
        );
        l.local_private_data = self.local_pd.clone();
        l.device = self.id.device_name(self.rdma);
        l
    }
}

impl std::fmt::Debug for VerbsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsProvider")
            .field("transport", &self.q.transport)
            .field("state", &self.state)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::provider::RemoteAddr;

    #[test]
    fn send_ops_map_to_ibv_opcodes_flags_and_remotes() {
        let remote = RemoteAddr {
            stag: Stag(0x1234_5678),
            offset: 4096,
        };
        assert_eq!(
            send_op(SendOp::Send { solicited: true }),
            (IBV_WR_SEND, IBV_SEND_SOLICITED, 0, None, Opcode::Send)
        );
        assert_eq!(
            send_op(SendOp::SendWithInvalidate {
                invalidate: Stag(7),
                solicited: false
            }),
            (IBV_WR_SEND_WITH_INV, 0, 7, Some((0, 7)), Opcode::Send)
        );
        assert_eq!(
            send_op(SendOp::Write { remote }),
            (
                IBV_WR_RDMA_WRITE,
                0,
                0,
                Some((4096, 0x1234_5678)),
                Opcode::Write
            )
        );
        assert_eq!(
            send_op(SendOp::Read { remote }),
            (
                IBV_WR_RDMA_READ,
                0,
                0,
                Some((4096, 0x1234_5678)),
                Opcode::Read
            )
        );
        assert_eq!(
            send_op(SendOp::LocalInvalidate { stag: Stag(9) }),
            (IBV_WR_LOCAL_INV, 0, 9, None, Opcode::LocalInvalidate)
        );
    }
}
