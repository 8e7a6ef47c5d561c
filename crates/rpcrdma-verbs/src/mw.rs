//! Memory windows: remote invalidation where user-space verbs can do it.
//!
//! What user space can do (rdma-core 44, Linux 6.1; docs/verbs.md has the
//! sources):
//!
//! * **FRWR is not available from user space on any device**: libibverbs
//!   has no `ibv_alloc_mr` and no `IBV_WR_REG_MR` opcode (fast
//!   registration is the kernel's `ib_alloc_mr` / `IB_WR_REG_MR`, which
//!   uverbs does not export), so `IBV_DEVICE_MEM_MGT_EXTENSIONS` (siw's
//!   0x200000) is of no use to us.
//! * Remote invalidation of a **plain MR** (`ibv_reg_mr`) is refused by
//!   rxe (`rxe_invalidate_mr`: only `IB_MR_TYPE_MEM_REG`, i.e. FRWR MRs)
//!   and by hardware; siw invalidates it but libsiw's `poll_cq` drops
//!   `IBV_WC_WITH_INV`, so the receiver never learns it happened.
//! * **Type 2 memory windows** are the user-space path: `ibv_alloc_mw`,
//!   bound with an `IBV_WR_BIND_MW` work request (ordered with the Send
//!   that advertises it) to an MR registered with `IBV_ACCESS_MW_BIND`,
//!   invalidated by the peer's Send With Invalidate naming the window's
//!   rkey, which hardware reports as `IBV_WC_WITH_INV` and rxe with the
//!   kernel's flag value (see `VerbsProvider::with_invalidate`). We
//!   invalidate locally by freeing the window (`ibv_dealloc_mw`), not
//!   with `IBV_WR_LOCAL_INV`, which oopses Linux 6.1 rxe on a window the
//!   peer invalidated already. siw has none (`max_mw` 0, no `alloc_mw`
//!   in libsiw).
//!
//! So a connection on a device with type 2 windows registers each chunk
//! (a registration with a remote right) as an MR with local rights only
//! plus `MW_BIND`, and exposes it through a window bound for that
//! registration: the STag on the wire is the window's rkey, invalidated
//! remotely or (Local Invalidate) freed, and the connection advertises
//! `Caps::remote_invalidation` (the RFC 8797 R flag, the version 2
//! `inv_handle`). Windows are reused (a type 2 window is bound again once
//! invalid, under the next key byte).

use crate::libs::Rdma;
use crate::sys::*;

/// Whether the device behind `ctx` (with attributes `attr`) can bind
/// type 2 memory windows from user space.
pub(crate) fn device_supports(ctx: *mut ibv_context, attr: &ibv_device_attr) -> bool {
    if ctx.is_null() || attr.max_mw <= 0 {
        return false;
    }
    let flags = attr.device_cap_flags;
    if flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B) == 0 {
        return false;
    }
    // SAFETY: `ctx` is a live device context; its ops table is the one
    // libibverbs filled (layout pinned by the ABI test).
    let ops = unsafe { &(*ctx).ops };
    ops.alloc_mw.is_some() && ops.dealloc_mw.is_some()
}

/// Whether connections made through the RDMA CM would get remote
/// invalidation: the device named `want`, or else every device the RDMA
/// CM has open, supports type 2 windows and is not iWARP (false if there
/// is none).
pub(crate) fn cm_remote_invalidation(rdma: &Rdma, want: Option<&str>) -> bool {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` receives the count; the list is freed below.
    let list = unsafe { (rdma.get_cm_devices)(&mut n) };
    if list.is_null() {
        return false;
    }
    let mut any = false;
    let mut all = true;
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: `list` holds `n` live contexts.
        let ctx = unsafe { *list.add(i) };
        if ctx.is_null() {
            break;
        }
        if let Some(w) = want {
            // SAFETY: the context's device and name live as long as it.
            let name = unsafe { std::ffi::CStr::from_ptr((rdma.get_device_name)((*ctx).device)) };
            if name.to_string_lossy() != w {
                continue;
            }
        }
        // SAFETY: the context's device lives as long as it.
        let iwarp = unsafe { (*(*ctx).device).transport_type } == IBV_TRANSPORT_IWARP;
        // SAFETY: plain old data; all-zero is valid.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a complete ibv_device_attr.
        let ok = unsafe { (rdma.query_device)(ctx, &mut attr) } == 0;
        any = true;
        all &= ok && !iwarp && device_supports(ctx, &attr);
    }
    // SAFETY: the list returned above, freed once.
    unsafe { (rdma.free_cm_devices)(list) };
    any && all
}

/// One type 2 memory window and its current rkey.
#[derive(Debug)]
pub(crate) struct Window {
    pub(crate) mw: *mut ibv_mw,
    pub(crate) rkey: u32,
}

/// The windows of one connection's PD: idle ones are bound again.
#[derive(Debug)]
pub(crate) struct Windows {
    pd: *mut ibv_pd,
    ctx: *mut ibv_context,
    idle: Vec<Window>,
}

impl Windows {
    pub(crate) fn new(ctx: *mut ibv_context, pd: *mut ibv_pd) -> Windows {
        Windows {
            pd,
            ctx,
            idle: Vec::new(),
        }
    }

    /// An invalid (unbound) window: an idle one, else a new one.
    pub(crate) fn take(&mut self) -> Option<Window> {
        if let Some(w) = self.idle.pop() {
            return Some(w);
        }
        // SAFETY: the context is live; the slot's layout is pinned.
        let alloc = unsafe { (*self.ctx).ops.alloc_mw }?;
        // SAFETY: `pd` is our live PD; type 2 is what the caller checked
        // the device supports.
        let mw = unsafe { alloc(self.pd, IBV_MW_TYPE_2) };
        if mw.is_null() {
            return None;
        }
        // SAFETY: the window just allocated.
        let rkey = unsafe { (*mw).rkey };
        Some(Window { mw, rkey })
    }

    /// A window known to be invalid again (unbound), for the next bind.
    pub(crate) fn put(&mut self, w: Window) {
        self.idle.push(w);
    }

    /// Frees a window, bound or not (deallocation invalidates it).
    /// False if the device refused.
    pub(crate) fn free(&self, w: Window) -> bool {
        // SAFETY: the context is live; the slot's layout is pinned.
        let Some(dealloc) = (unsafe { (*self.ctx).ops.dealloc_mw }) else {
            return false;
        };
        // SAFETY: `w.mw` is ours and freed once (consumed).
        unsafe { dealloc(w.mw) == 0 }
    }

    /// Frees every idle window (before the PD is reused or freed).
    pub(crate) fn clear(&mut self) {
        for w in std::mem::take(&mut self.idle) {
            let _ = self.free(w);
        }
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        self.clear();
    }
}
