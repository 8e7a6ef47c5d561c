//! The rdma-core objects behind one connection and the RDMA CM event
//! helpers shared by the active and the passive side.
//!
//! [`Channel`] owns an event channel, [`CmId`] an `rdma_cm_id`, and
//! [`Queues`] the protection domain, completion channel, completion queue
//! and queue pair created on an id; each destroys what it owns when
//! dropped, in the order rdma-core requires (QP, CQ, completion channel,
//! PD, then the id, then its channel).

use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::time::Instant;

use libc::c_int;

use crate::fd;
use crate::libs::Rdma;
use crate::sys::*;

pub(crate) fn errno(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// An RDMA CM event channel (non-blocking).
pub(crate) struct Channel {
    rdma: &'static Rdma,
    pub(crate) ch: *mut rdma_event_channel,
}

impl Channel {
    pub(crate) fn new(rdma: &'static Rdma) -> io::Result<Channel> {
        // SAFETY: no precondition; NULL on failure.
        let ch = unsafe { (rdma.create_event_channel)() };
        if ch.is_null() {
            return Err(errno("rdma_create_event_channel"));
        }
        let c = Channel { rdma, ch };
        fd::set_nonblocking(c.fd())?;
        Ok(c)
    }

    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: `ch` is a live channel (destroyed only in Drop).
        unsafe { (*self.ch).fd }
    }

    /// The next event, if one is queued (copied, then acknowledged).
    pub(crate) fn try_event(&self) -> io::Result<Option<CmEvent>> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: `ch` is live; on success `ev` points to an event we must
        // acknowledge, which `CmEvent::take` does.
        let r = unsafe { (self.rdma.get_cm_event)(self.ch, &mut ev) };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(errno("rdma_get_cm_event")),
            };
        }
        // SAFETY: `ev` is the event just returned, not yet acknowledged.
        Ok(Some(unsafe { CmEvent::take(self.rdma, ev) }))
    }

    /// The next event, waiting until `deadline`.
    pub(crate) fn event_by(&self, deadline: Instant) -> io::Result<CmEvent> {
        loop {
            if let Some(e) = self.try_event()? {
                return Ok(e);
            }
            let ms = fd::millis_until(deadline);
            if ms == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "RDMA CM: no answer in time",
                ));
            }
            fd::wait_readable(
                &[self.fd()],
                Some(std::time::Duration::from_millis(ms as u64)),
            )?;
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel has been destroyed (ids are
        // dropped before their channel) and every event acknowledged.
        unsafe { (self.rdma.destroy_event_channel)(self.ch) }
    }
}

/// A copied RDMA CM event (acknowledged already, so the id it names can
/// be migrated or destroyed).
#[derive(Debug)]
pub(crate) struct CmEvent {
    pub(crate) kind: c_int,
    pub(crate) status: c_int,
    pub(crate) id: *mut rdma_cm_id,
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl CmEvent {
    /// Copies and acknowledges `ev`.
    ///
    /// # Safety
    ///
    /// `ev` is an event returned by `rdma_get_cm_event` and not yet
    /// acknowledged.
    unsafe fn take(rdma: &Rdma, ev: *mut rdma_cm_event) -> CmEvent {
        // SAFETY: the caller's promise: `ev` is live until acknowledged.
        let e = unsafe { &*ev };
        let conn = e.conn;
        let private_data = if conn.private_data.is_null() || !carries_conn_param(e.event) {
            Vec::new()
        } else {
            // SAFETY: librdmacm points `private_data` at
            // `private_data_len` octets inside the event.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            }
            .to_vec()
        };
        let out = CmEvent {
            kind: e.event,
            status: e.status,
            id: e.id,
            private_data,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
        };
        // SAFETY: acknowledged once, after the last read of `ev`.
        unsafe { (rdma.ack_cm_event)(ev) };
        out
    }

    /// rdma_event_str's name of the event, for errors.
    pub(crate) fn name(&self, rdma: &Rdma) -> String {
        // SAFETY: rdma_event_str returns a static string for any value.
        unsafe { CStr::from_ptr((rdma.event_str)(self.kind)) }
            .to_string_lossy()
            .into_owned()
    }

    /// An error for an event that was not the one awaited.
    pub(crate) fn unexpected(&self, rdma: &Rdma, waiting_for: &str) -> io::Error {
        let kind = match self.kind {
            RDMA_CM_EVENT_UNREACHABLE | RDMA_CM_EVENT_ROUTE_ERROR => io::ErrorKind::HostUnreachable,
            RDMA_CM_EVENT_ADDR_ERROR => io::ErrorKind::AddrNotAvailable,
            RDMA_CM_EVENT_REJECTED => io::ErrorKind::ConnectionRefused,
            _ => io::ErrorKind::ConnectionAborted,
        };
        io::Error::new(
            kind,
            format!(
                "RDMA CM: {} (status {}) while waiting for {waiting_for}",
                self.name(rdma),
                self.status
            ),
        )
    }
}

fn carries_conn_param(kind: c_int) -> bool {
    matches!(
        kind,
        RDMA_CM_EVENT_CONNECT_REQUEST
            | RDMA_CM_EVENT_CONNECT_RESPONSE
            | RDMA_CM_EVENT_REJECTED
            | RDMA_CM_EVENT_ESTABLISHED
    )
}

/// An `rdma_cm_id` (reliable connected, `RDMA_PS_TCP`).
pub(crate) struct CmId {
    rdma: &'static Rdma,
    pub(crate) id: *mut rdma_cm_id,
}

impl CmId {
    pub(crate) fn new(rdma: &'static Rdma, ch: &Channel) -> io::Result<CmId> {
        let mut id = ptr::null_mut();
        // SAFETY: `ch` is live; `id` receives the new id.
        let r = unsafe { (rdma.create_id)(ch.ch, &mut id, ptr::null_mut(), RDMA_PS_TCP) };
        if r != 0 {
            return Err(errno("rdma_create_id"));
        }
        Ok(CmId { rdma, id })
    }

    /// Takes ownership of a child id from a CONNECT_REQUEST event.
    ///
    /// # Safety
    ///
    /// `id` is the event's new id, owned by nobody else.
    pub(crate) unsafe fn from_request(rdma: &'static Rdma, id: *mut rdma_cm_id) -> CmId {
        CmId { rdma, id }
    }

    pub(crate) fn verbs(&self) -> *mut ibv_context {
        // SAFETY: `id` is live; `verbs` is its first field.
        unsafe { (*self.id).verbs }
    }

    /// The name of the device the id is on (`None` before address
    /// resolution or binding to a device address).
    pub(crate) fn device_name(&self, r: &Rdma) -> Option<String> {
        let verbs = self.verbs();
        if verbs.is_null() {
            return None;
        }
        // SAFETY: `verbs` is the id's open context; its `device` lives as
        // long as the context, and ibv_get_device_name returns its
        // NUL-terminated name, owned by libibverbs.
        let name = unsafe { std::ffi::CStr::from_ptr((r.get_device_name)((*verbs).device)) };
        Some(name.to_string_lossy().into_owned())
    }

    pub(crate) fn qp(&self) -> *mut ibv_qp {
        // SAFETY: as above; set by rdma_create_qp.
        unsafe { (*self.id).qp }
    }

    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        // SAFETY: `id` is live; the route's source address is the first
        // address of `rdma_cm_id.route` (what rdma_get_local_addr reads).
        crate::addr::from_storage(unsafe { &(*self.id).src_addr })
    }

    pub(crate) fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        // SAFETY: as above, the destination address.
        crate::addr::from_storage(unsafe { &(*self.id).dst_addr })
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id's QP has been destroyed (`Queues` is dropped
        // first) and its events acknowledged; destroyed once.
        unsafe { (self.rdma.destroy_id)(self.id) };
    }
}

/// What the queue pair was created with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueSizes {
    pub(crate) send_wr: u32,
    pub(crate) recv_wr: u32,
    pub(crate) send_sge: u32,
    pub(crate) recv_sge: u32,
    pub(crate) inline: u32,
}

/// The PD, completion channel, CQ and QP of one connection.
pub(crate) struct Queues {
    rdma: &'static Rdma,
    id: *mut rdma_cm_id,
    pub(crate) pd: *mut ibv_pd,
    /// The device context (the key of the PD pool, `crate::cache`).
    ctx: *mut ibv_context,
    /// The PD's cached MRs: taken by the registry while the connection
    /// lives, given back before the queues drop, returned to the pool
    /// with the PD once the QP is destroyed.
    pub(crate) cache: crate::cache::MrCache,
    /// The device was lost: the PD and the device's idle PDs are freed,
    /// not pooled.
    pub(crate) device_lost: bool,
    pub(crate) comp: *mut ibv_comp_channel,
    pub(crate) cq: *mut ibv_cq,
    pub(crate) qp: *mut ibv_qp,
    pub(crate) attr: ibv_device_attr,
    pub(crate) transport: crate::Transport,
    pub(crate) sizes: QueueSizes,
}

impl Queues {
    /// Creates them on `id` (whose address is resolved, or which came
    /// from a CONNECT_REQUEST), asking for `want` and getting what the
    /// device grants (at most what it can do).
    pub(crate) fn new(rdma: &'static Rdma, id: &CmId, want: QueueSizes) -> io::Result<Queues> {
        let verbs = id.verbs();
        if verbs.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "RDMA CM: the address is on no RDMA device",
            ));
        }
        let mut q = Queues {
            rdma,
            id: id.id,
            pd: ptr::null_mut(),
            ctx: verbs,
            cache: crate::cache::MrCache::default(),
            device_lost: false,
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            // SAFETY: plain old data; all-zero is valid.
            attr: unsafe { std::mem::zeroed() },
            transport: crate::Transport::Other(-1),
            sizes: want,
        };
        // SAFETY: `verbs` is the id's open device context; `attr` is a
        // complete ibv_device_attr (size pinned by the layout test).
        if unsafe { (rdma.query_device)(verbs, &mut q.attr) } != 0 {
            return Err(errno("ibv_query_device"));
        }
        // SAFETY: `verbs` is live while the id is; `device` is its first
        // field and lives as long as the context.
        q.transport = crate::Transport::from_raw(unsafe { (*(*verbs).device).transport_type });
        q.sizes = fit(want, &q.attr);
        // An idle PD of this device with its cached MRs, else a new one.
        (q.pd, q.cache) = crate::cache::take_pd(rdma, verbs)?;
        // SAFETY: as above.
        q.comp = unsafe { (rdma.create_comp_channel)(verbs) };
        if q.comp.is_null() {
            return Err(errno("ibv_create_comp_channel"));
        }
        fd::set_nonblocking(q.comp_fd())?;
        let cqe = (q.sizes.send_wr + q.sizes.recv_wr) as c_int;
        // SAFETY: `verbs` and `comp` are live; no CQ context.
        q.cq = unsafe { (rdma.create_cq)(verbs, cqe, ptr::null_mut(), q.comp, 0) };
        if q.cq.is_null() {
            return Err(errno("ibv_create_cq"));
        }
        q.create_qp(id)?;
        Ok(q)
    }

    fn create_qp(&mut self, id: &CmId) -> io::Result<()> {
        let mut init = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: ptr::null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: self.sizes.send_wr,
                max_recv_wr: self.sizes.recv_wr,
                max_send_sge: self.sizes.send_sge,
                max_recv_sge: self.sizes.recv_sge,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            // Every WR signalled, as the contract says.
            sq_sig_all: 1,
        };
        // SAFETY: `id`, `pd` and `cq` are live; `init` is complete.
        if unsafe { (self.rdma.create_qp)(id.id, self.pd, &mut init) } != 0 {
            return Err(errno("rdma_create_qp"));
        }
        self.qp = id.qp();
        // rdma_create_qp reports what it granted.
        let c = init.cap;
        self.sizes = QueueSizes {
            send_wr: c.max_send_wr.min(self.sizes.send_wr),
            recv_wr: c.max_recv_wr.min(self.sizes.recv_wr),
            send_sge: c.max_send_sge.min(self.sizes.send_sge),
            recv_sge: c.max_recv_sge.min(self.sizes.recv_sge),
            inline: c.max_inline_data,
        };
        Ok(())
    }

    pub(crate) fn comp_fd(&self) -> RawFd {
        // SAFETY: `comp` is live while `self` is.
        unsafe { (*self.comp).fd }
    }

    /// Drains the completion channel (non-blocking) and acknowledges
    /// what it found; returns whether there was anything.
    pub(crate) fn drain_comp_channel(&self) -> bool {
        let mut any = false;
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: `comp` is live and non-blocking; on success `cq` is
            // our CQ (the only one on the channel), acknowledged at once.
            let r = unsafe { (self.rdma.get_cq_event)(self.comp, &mut cq, &mut ctx) };
            if r != 0 {
                return any;
            }
            any = true;
            // SAFETY: one event of `cq` returned above.
            unsafe { (self.rdma.ack_cq_events)(cq, 1) };
        }
    }
}

/// The queue sizes the device can give.
fn fit(want: QueueSizes, a: &ibv_device_attr) -> QueueSizes {
    let cap = |v: u32, max: c_int| v.min(u32::try_from(max).unwrap_or(0)).max(1);
    // The CQ holds both queues' completions.
    let cqe = u32::try_from(a.max_cqe).unwrap_or(0);
    let mut send_wr = cap(want.send_wr, a.max_qp_wr);
    let mut recv_wr = cap(want.recv_wr, a.max_qp_wr);
    if cqe > 1 && send_wr + recv_wr > cqe {
        send_wr = (cqe / 2).max(1);
        recv_wr = (cqe / 2).max(1);
    }
    QueueSizes {
        send_wr,
        recv_wr,
        send_sge: cap(want.send_sge, a.max_sge),
        recv_sge: cap(want.recv_sge, a.max_sge),
        inline: 0,
    }
}

impl Drop for Queues {
    fn drop(&mut self) {
        // SAFETY: each object is destroyed once, QP first (rdma_destroy_qp
        // on the id that created it), then the CQ (all its channel events
        // were acknowledged by `drain_comp_channel`) and the channel.
        unsafe {
            if !self.qp.is_null() {
                (self.rdma.destroy_qp)(self.id);
            }
            if !self.cq.is_null() {
                (self.rdma.destroy_cq)(self.cq);
            }
            if !self.comp.is_null() {
                (self.rdma.destroy_comp_channel)(self.comp);
            }
        }
        // The QP is gone, so nothing the device does touches the PD's
        // memory any more: the PD, with the cached MRs the provider gave
        // back (every other MR of it is deregistered), goes to the pool
        // (while the CM id, dropped after us, still holds the device).
        if !self.pd.is_null() {
            let cache = std::mem::take(&mut self.cache);
            crate::cache::give_back(self.rdma, self.ctx, self.pd, cache, self.device_lost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_sizes_fit_the_device() {
        // SAFETY: plain old data; all-zero is valid.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        a.max_qp_wr = 1024;
        a.max_sge = 6;
        a.max_cqe = 300;
        let want = QueueSizes {
            send_wr: 256,
            recv_wr: 256,
            send_sge: 8,
            recv_sge: 1,
            inline: 0,
        };
        let got = fit(want, &a);
        // One CQ holds both queues: 300 entries split evenly.
        assert_eq!((got.send_wr, got.recv_wr), (150, 150));
        assert_eq!((got.send_sge, got.recv_sge), (6, 1));
        a.max_cqe = 4096;
        a.max_qp_wr = 100;
        let got = fit(want, &a);
        assert_eq!((got.send_wr, got.recv_wr), (100, 100));
    }
}
