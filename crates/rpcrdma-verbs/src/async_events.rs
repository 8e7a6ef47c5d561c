//! The device's asynchronous events (`ibv_get_async_event`): a QP or CQ
//! that failed outside any work completion (an iWARP Terminate received
//! with nothing outstanding, a peer's refused access, a catastrophic
//! device error) becomes the loss of the connections it concerns.
//!
//! The async event fd belongs to the device context, and the RDMA CM
//! opens one context per device per process, shared by every connection
//! on it: whichever connection finds the fd readable reads *all* queued
//! events (non-blocking, under one process-wide lock), delivers each to
//! the connections it names (their inbox, and their eventfd so that a
//! sleeping owner wakes up), and acknowledges it. Every connection has
//! both the context's async fd and its own eventfd in its epoll set (see
//! [`crate::fd::Epoll`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use libc::c_int;
use rpcrdma_proto::provider::{DisconnectReason, Status};

use crate::fd::WakeFd;
use crate::libs::Rdma;
use crate::sys::*;

/// A connection's subscription.
struct Sub {
    ctx: usize,
    qp: usize,
    cq: usize,
    wake: Arc<WakeFd>,
    inbox: Vec<c_int>,
}

#[derive(Default)]
struct Hub {
    next: u64,
    subs: HashMap<u64, Sub>,
    /// Contexts whose async fd is non-blocking already.
    nonblocking: Vec<usize>,
}

static HUB: Mutex<Option<Hub>> = Mutex::new(None);

fn hub() -> MutexGuard<'static, Option<Hub>> {
    // A panic while holding the lock leaves plain data behind: go on.
    HUB.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's registration with the hub; unsubscribes on drop.
pub(crate) struct Subscription {
    id: u64,
    rdma: &'static Rdma,
    ctx: *mut ibv_context,
    pub(crate) wake: Arc<WakeFd>,
}

impl Subscription {
    /// Subscribes the connection whose QP and CQ are `qp` and `cq` on
    /// context `ctx`; makes the context's async fd non-blocking.
    pub(crate) fn new(
        rdma: &'static Rdma,
        ctx: *mut ibv_context,
        qp: *mut ibv_qp,
        cq: *mut ibv_cq,
    ) -> std::io::Result<Subscription> {
        let wake = WakeFd::new()?;
        let mut g = hub();
        let h = g.get_or_insert_with(Hub::default);
        if !h.nonblocking.contains(&(ctx as usize)) {
            crate::fd::set_nonblocking(async_fd(ctx))?;
            h.nonblocking.push(ctx as usize);
        }
        let id = h.next;
        h.next += 1;
        h.subs.insert(
            id,
            Sub {
                ctx: ctx as usize,
                qp: qp as usize,
                cq: cq as usize,
                wake: Arc::clone(&wake),
                inbox: Vec::new(),
            },
        );
        Ok(Subscription {
            id,
            rdma,
            ctx,
            wake,
        })
    }

    /// The context's async event fd (for the epoll set).
    pub(crate) fn async_fd(&self) -> c_int {
        async_fd(self.ctx)
    }

    /// Reads every queued event of the context, delivers them, and
    /// returns this connection's.
    pub(crate) fn take(&self) -> Vec<c_int> {
        self.wake.drain();
        let mut g = hub();
        let Some(h) = g.as_mut() else {
            return Vec::new();
        };
        loop {
            let mut ev = ibv_async_event::default();
            // SAFETY: the context is open (our connection holds it through
            // its id); its async fd is non-blocking, so this returns -1 at
            // once when nothing is queued; `ev` is a complete
            // ibv_async_event (layout pinned by the ABI test).
            if unsafe { (self.rdma.get_async_event)(self.ctx, &mut ev) } != 0 {
                break;
            }
            deliver(h, self.ctx as usize, &ev);
            // SAFETY: one acknowledgement per event returned above, after
            // its last use (rdma-core waits for it before destroying the
            // QP or CQ the event names).
            unsafe { (self.rdma.ack_async_event)(&mut ev) };
        }
        h.subs
            .get_mut(&self.id)
            .map(|s| std::mem::take(&mut s.inbox))
            .unwrap_or_default()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(h) = hub().as_mut() {
            h.subs.remove(&self.id);
        }
    }
}

fn async_fd(ctx: *mut ibv_context) -> c_int {
    // SAFETY: `ctx` is an open device context (the RDMA CM keeps it open
    // while any id uses it); `async_fd` is at its ABI offset (pinned by
    // the layout test).
    unsafe { (*ctx).async_fd }
}

/// Puts `ev` in the inbox of the connections it concerns and wakes them.
fn deliver(h: &mut Hub, ctx: usize, ev: &ibv_async_event) {
    let el = ev.element as usize;
    for s in h.subs.values_mut().filter(|s| s.ctx == ctx) {
        let mine = match ev.event_type {
            IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR => el == s.qp,
            IBV_EVENT_CQ_ERR => el == s.cq,
            IBV_EVENT_DEVICE_FATAL => true,
            // Port, path, SRQ and informational events: nothing to end.
            _ => false,
        };
        if mine {
            s.inbox.push(ev.event_type);
            s.wake.waker().wake_by_ref();
        }
    }
}

/// Why an async event ends a connection (`None`: it does not).
pub(crate) fn reason(event_type: c_int) -> Option<DisconnectReason> {
    let status = match event_type {
        // The QP went to the error state with no completion to say why:
        // on iWARP a Terminate from the peer or a broken stream.
        IBV_EVENT_QP_FATAL => Status::ConnectionLost,
        // The peer's request was invalid / its access refused here.
        IBV_EVENT_QP_REQ_ERR => Status::RemoteInvalidRequest,
        IBV_EVENT_QP_ACCESS_ERR => Status::RemoteAccess,
        IBV_EVENT_CQ_ERR => Status::LocalOperation,
        IBV_EVENT_DEVICE_FATAL => return Some(DisconnectReason::TransportLost),
        _ => return None,
    };
    Some(DisconnectReason::Error {
        status,
        blame: status.blame(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::provider::Blame;
    use std::ffi::c_void;

    fn sub(ctx: usize, qp: usize, cq: usize) -> Sub {
        Sub {
            ctx,
            qp,
            cq,
            wake: WakeFd::new().expect("eventfd"),
            inbox: Vec::new(),
        }
    }

    #[test]
    fn events_reach_the_connections_they_name() {
        let mut h = Hub::default();
        h.subs.insert(1, sub(10, 100, 200));
        h.subs.insert(2, sub(10, 101, 201));
        h.subs.insert(3, sub(11, 100, 200));
        let ev = |t, el: usize| ibv_async_event {
            element: el as *mut c_void,
            event_type: t,
        };
        deliver(&mut h, 10, &ev(IBV_EVENT_QP_ACCESS_ERR, 101));
        deliver(&mut h, 10, &ev(IBV_EVENT_CQ_ERR, 200));
        deliver(&mut h, 10, &ev(9 /* PORT_ACTIVE */, 1));
        deliver(&mut h, 11, &ev(IBV_EVENT_DEVICE_FATAL, 0));
        assert_eq!(h.subs[&1].inbox, vec![IBV_EVENT_CQ_ERR]);
        assert_eq!(h.subs[&2].inbox, vec![IBV_EVENT_QP_ACCESS_ERR]);
        assert_eq!(h.subs[&3].inbox, vec![IBV_EVENT_DEVICE_FATAL]);
        // The woken connection's eventfd is readable.
        let fd = h.subs[&2].wake.raw();
        assert_eq!(
            crate::fd::wait_readable(&[fd], Some(std::time::Duration::ZERO)).expect("poll"),
            1
        );
        let r = reason(IBV_EVENT_QP_ACCESS_ERR);
        assert!(matches!(
            r,
            Some(DisconnectReason::Error {
                status: Status::RemoteAccess,
                blame: Blame::Remote
            })
        ));
        assert_eq!(
            reason(IBV_EVENT_DEVICE_FATAL),
            Some(DisconnectReason::TransportLost)
        );
        assert_eq!(reason(9), None);
    }
}
