//! Memory registration: the contract's [`MemoryTable`] (ownership, holds,
//! bounds and rights checks, the same code the software providers run)
//! with one `ibv_mr` per region.
//!
//! Keys: a region's *local* key in the contract ([`MemoryRegion::lkey`])
//! is the table's key (index and generation), checked before anything is
//! posted; the device's `lkey` goes into the `ibv_sge`. Its *remote* key
//! ([`MemoryRegion::stag`]) is the device's `rkey`, what the peer puts on
//! the wire. A region is registered at its buffer's process address as
//! its I/O virtual address (what `ibv_reg_mr` does, and all Linux siw
//! honours: `siw_reg_user_mr` ignores any other iova), so its first byte is
//! tagged offset [`MemoryRegion::base`] = that address, which the engine
//! advertises as each chunk's offset.
//!
//! Local-only receive and Send buffers use cache MRs ([`crate::cache`]);
//! on a device with type 2 memory windows, registrations with a remote
//! right are exposed through a window ([`crate::mw`]) whose rkey is the
//! STag, invalidated by the peer's Send With Invalidate or, for a Local
//! Invalidate, by freeing the window. What follows is for plain-MR
//! chunks.
//!
//! # Invalidation by deregistration
//!
//! User-space verbs cannot re-key a plain MR, and siw's user-space
//! provider refuses `IBV_WR_LOCAL_INV` at post time (`libsiw: opcode 8
//! unsupported`; rdma-core `providers/siw/siw.c` maps it to no siw
//! opcode). So a Local Invalidate is done here, on every device, by
//! *retiring* the region's MR: its rkey leaves the lookup at once (no new
//! work names it), and `ibv_dereg_mr` runs as soon as no posted work
//! request uses the MR any more (at once, normally: the engine invalidates
//! a chunk after the reply, when nothing of ours names it). From then on
//! the peer's access with that STag fails on any device, as the contract
//! requires. Local use of the region continues through a second MR
//! registered lazily, with the local right only (`LOCAL_WRITE` if the
//! region has it), at its first local use after the invalidation — the
//! engine deregisters invalidated chunks without using them again, so it
//! never pays for one.

use std::collections::HashMap;
use std::io;

use rpcrdma_proto::provider::memory::MemoryTable;
use rpcrdma_proto::provider::{
    Access, Buffer, Bytes, Caps, MemoryRegion, ProviderError, RegisterError, Sge, Stag,
};

use crate::cache::{CachedMr, MrCache, CACHE_MAX_LEN};
use crate::libs::Rdma;
use crate::mw::{Window, Windows};
use crate::sys::*;

/// The I/O virtual address of a buffer's first byte: its process address
/// (see the module docs). Local SGEs and remote accesses alike address an
/// MR in its iova space, so an SGE's address is `base + offset`.
fn iova_of(ptr: *const u8) -> u64 {
    ptr as u64
}

/// One `ibv_mr` and the posted work requests that use it.
#[derive(Debug)]
struct Mr {
    mr: *mut ibv_mr,
    lkey: u32,
    rkey: u32,
    /// Posted WRs naming this MR in an SGE, until their completions.
    uses: u32,
    /// A cache MR (`LOCAL_WRITE` over a buffer of the cache,
    /// [`crate::cache`]): it goes back to the cache with its buffer.
    cached: bool,
}

/// How a region's buffer relates to the registration cache.
#[derive(Debug, Default)]
enum Cached {
    /// Not a cache buffer (a chunk, a shared or a large buffer).
    #[default]
    No,
    /// A receive buffer the provider lends (`register_recv`); the caller
    /// gets an empty buffer back.
    Lent,
    /// The caller's owned buffer, copied into a cache buffer at
    /// registration and given back with the region's final octets.
    Copied(Box<[u8]>),
}

/// The device side of one table region.
#[derive(Debug, Default)]
struct Entry {
    /// The MR new work requests use (`None` after an invalidation until
    /// the next local use).
    cur: Option<Mr>,
    /// An invalidated MR still named by posted WRs: deregistered when the
    /// last of them completes.
    retired: Option<Mr>,
    /// `ibv_dereg_mr` failed on one of its MRs: the device may still
    /// reach the memory, so its buffer is never freed.
    poisoned: bool,
    /// Whether the table's buffer is a cache buffer.
    cached: Cached,
    /// The region's table key (to take its buffer back at teardown).
    key: u32,
    /// The memory window exposing it (`crate::mw`), and whether it is
    /// still valid (bound): its rkey is the region's STag.
    window: Option<(Window, bool)>,
}

/// Which MR of a region an SGE was given (to release it on completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MrUse {
    idx: u32,
    mr: *mut ibv_mr,
}

/// The registrations of one connection (one protection domain).
pub(crate) struct Registry {
    rdma: &'static Rdma,
    pd: *mut ibv_pd,
    pub(crate) table: MemoryTable,
    /// Per table index: the region's buffer address (its iova) and MRs.
    mrs: Vec<(u64, Entry)>,
    /// Device rkey to table key, for Local Invalidate and a received Send
    /// With Invalidate, which name the rkey (valid rkeys only).
    by_rkey: HashMap<u32, u32>,
    /// The OS error of the last refused registration (diagnostics).
    pub(crate) last_error: Option<io::Error>,
    /// The PD's idle cached MRs ([`crate::cache`]).
    pub(crate) cache: MrCache,
    /// Type 2 memory windows, on a device that has them: every
    /// registration with a remote right is exposed through one.
    pub(crate) windows: Option<Windows>,
}

/// A window bind to post (`IBV_WR_BIND_MW`) before the region's STag is
/// used: the region at table index `idx` through `bind.mw`, whose rkey
/// becomes `bind.rkey` once posted.
pub(crate) struct Bind {
    pub(crate) idx: u32,
    pub(crate) wr: ibv_bind_mw_wr,
}

/// The `IBV_ACCESS_*` flags of contract rights.
pub(crate) fn ibv_access(a: Access) -> libc::c_int {
    let mut f = 0;
    if a.contains(Access::LOCAL_WRITE) {
        f |= IBV_ACCESS_LOCAL_WRITE;
    }
    if a.contains(Access::REMOTE_READ) {
        f |= IBV_ACCESS_REMOTE_READ;
    }
    if a.contains(Access::REMOTE_WRITE) {
        f |= IBV_ACCESS_REMOTE_WRITE;
    }
    f
}

/// The rights of the local-only MR of an invalidated region.
fn local_only(a: Access) -> Access {
    if a.contains(Access::LOCAL_WRITE) {
        Access::LOCAL_WRITE
    } else {
        Access::NONE
    }
}

/// The soft `RLIMIT_MEMLOCK` in octets (`None`: unlimited or unknown).
fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `r`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

/// The errno of a refused `ibv_reg_mr` of `len` octets, in words: a
/// pinning failure under a finite `RLIMIT_MEMLOCK` names the limit.
fn reg_error(e: &io::Error, len: usize) -> ProviderError {
    if matches!(
        e.raw_os_error(),
        Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN)
    ) {
        if let Some(limit) = memlock_limit() {
            return ProviderError::PinLimit { len, limit };
        }
    }
    ProviderError::InvalidArgument(match e.raw_os_error() {
        Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN) => {
            "ibv_reg_mr: cannot pin the buffer (RLIMIT_MEMLOCK too low? raise `ulimit -l`)"
        }
        Some(libc::EINVAL) => "ibv_reg_mr: EINVAL (address, length, access or iova refused)",
        Some(libc::EFAULT) => "ibv_reg_mr: EFAULT (buffer not mapped)",
        Some(libc::EACCES) => "ibv_reg_mr: EACCES (access rights refused)",
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => "ibv_reg_mr: not supported by the device",
        _ => "ibv_reg_mr refused the registration",
    })
}

/// What a Local Invalidate did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retired {
    /// The MR is deregistered (or no MR had the STag any more).
    Done,
    /// Posted WRs still use the MR: it is deregistered when they complete
    /// (its rkey is out of the lookup already).
    Deferred,
    /// `ibv_dereg_mr` failed: the memory stays reachable by the device.
    Failed,
}

impl Registry {
    pub(crate) fn new(rdma: &'static Rdma, pd: *mut ibv_pd, cache: MrCache) -> Registry {
        Registry {
            rdma,
            pd,
            cache,
            windows: None,
            // Index 0 unused: a zeroed handle is never valid.
            table: MemoryTable::without_index_zero(0),
            mrs: Vec::new(),
            by_rkey: HashMap::new(),
            last_error: None,
        }
    }

    /// `ibv_reg_mr_iova` of `ptr..ptr+len` at its own address.
    fn reg(&mut self, ptr: *const u8, len: usize, access: Access) -> Result<Mr, ProviderError> {
        self.reg_flags(ptr, len, ibv_access(access))
    }

    /// [`Registry::reg`] with raw `IBV_ACCESS_*` flags.
    fn reg_flags(
        &mut self,
        ptr: *const u8,
        len: usize,
        flags: libc::c_int,
    ) -> Result<Mr, ProviderError> {
        crate::cache::count_reg();
        // SAFETY: `ptr..ptr+len` is a heap buffer the table owns until
        // `deregister`, which deregisters every MR of it before giving the
        // buffer back (or never frees it, see `Entry::poisoned`), or a
        // cache buffer (`crate::cache`) that is freed only after its MR
        // is deregistered; it never moves (a Box or Bytes allocation).
        // The device writes it only with LOCAL_WRITE / REMOTE_WRITE,
        // which shared (read-only) buffers never get (checked by the
        // table).
        let mr = unsafe {
            (self.rdma.reg_mr_iova)(self.pd, ptr.cast_mut().cast(), len, iova_of(ptr), flags)
        };
        if mr.is_null() {
            let os = io::Error::last_os_error();
            let err = reg_error(&os, len);
            self.last_error = Some(os);
            return Err(err);
        }
        // SAFETY: `mr` is the live MR just returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Mr {
            mr,
            lkey,
            rkey,
            uses: 0,
            cached: false,
        })
    }

    /// `ibv_dereg_mr`; false if the device refused (then the memory may
    /// still be reachable).
    fn dereg(&self, m: Mr) -> bool {
        crate::cache::count_dereg();
        // SAFETY: `m.mr` is live, deregistered once (the `Mr` is consumed),
        // and its memory is still owned by the table here.
        unsafe { (self.rdma.dereg_mr)(m.mr) == 0 }
    }

    /// Registers the region the table just took at `t` with the device;
    /// on failure the table entry is removed again and its buffer returned.
    fn attach(&mut self, t: MemoryRegion) -> Result<MemoryRegion, (ProviderError, Buffer)> {
        self.attach_with(t, None, Cached::No)
    }

    /// [`Registry::attach`], with the cache MR `pre` already over the
    /// table's buffer (no `ibv_reg_mr`) when given.
    fn attach_with(
        &mut self,
        t: MemoryRegion,
        pre: Option<Mr>,
        cached: Cached,
    ) -> Result<MemoryRegion, (ProviderError, Buffer)> {
        let idx = t.stag().index();
        let region = self.table.region_at(idx).map(|r| r.buf());
        let got = match (region, pre) {
            (Some(b), Some(m)) => Ok((iova_of(b.as_ptr()), m)),
            (Some(b), None) if !b.is_empty() => {
                let (ptr, len) = (b.as_ptr(), b.len());
                self.reg(ptr, len, t.access()).map(|m| (iova_of(ptr), m))
            }
            _ => Err(ProviderError::InvalidArgument("zero-length registration")),
        };
        let (base, mr) = match got {
            Ok(v) => v,
            Err(e) => {
                let buf = self
                    .table
                    .deregister(&t)
                    .unwrap_or(Buffer::Owned(Box::default()));
                return Err((e, buf));
            }
        };
        let rkey = mr.rkey;
        let slot = idx as usize;
        if self.mrs.len() <= slot {
            self.mrs.resize_with(slot + 1, Default::default);
        }
        self.mrs[slot] = (
            base,
            Entry {
                cur: Some(mr),
                cached,
                key: t.lkey(),
                ..Entry::default()
            },
        );
        self.by_rkey.insert(rkey, t.lkey());
        Ok(MemoryRegion::new(t.lkey(), Stag(rkey), t.len(), t.access()).with_base(base))
    }

    /// A cache MR of `len` octets: an idle one (no `ibv_reg_mr`), else a
    /// new `LOCAL_WRITE` registration of a new zeroed buffer.
    fn cache_mr(&mut self, len: usize) -> Result<CachedMr, ProviderError> {
        if let Some(m) = self.cache.take(len) {
            return Ok(m);
        }
        let buf = vec![0u8; len].into_boxed_slice();
        let m = self.reg(buf.as_ptr(), len, Access::LOCAL_WRITE)?;
        Ok(CachedMr {
            buf,
            mr: m.mr,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    /// Gives an unused cache MR back (deregistered if the cache is full).
    fn uncache(&mut self, m: CachedMr) {
        if let Err(m) = self.cache.put(m) {
            let CachedMr {
                buf,
                mr,
                lkey,
                rkey,
            } = m;
            let ok = self.dereg(Mr {
                mr,
                lkey,
                rkey,
                uses: 0,
                cached: true,
            });
            if !ok {
                std::mem::forget(buf);
            }
        }
    }

    /// Registers a cache buffer of `len` octets holding `fill` (or
    /// nothing: zeroed) in the table with `access`.
    fn register_cached(
        &mut self,
        len: usize,
        fill: Option<&[u8]>,
        access: Access,
        caps: &Caps,
        cached: Cached,
    ) -> Result<MemoryRegion, ProviderError> {
        let CachedMr {
            mut buf,
            mr,
            lkey,
            rkey,
        } = self.cache_mr(len)?;
        match fill {
            Some(b) => buf.copy_from_slice(b),
            None => buf.fill(0),
        }
        let t = match self.table.register(buf, access, caps) {
            Ok(t) => t,
            Err(e) => {
                self.uncache(CachedMr {
                    buf: e.buf,
                    mr,
                    lkey,
                    rkey,
                });
                return Err(e.error);
            }
        };
        let m = Mr {
            mr,
            lkey,
            rkey,
            uses: 0,
            cached: true,
        };
        self.attach_with(t, Some(m), cached).map_err(|(e, _)| e)
    }

    /// A receive buffer the provider lends (`Provider::register_recv`):
    /// from the cache when it fits.
    pub(crate) fn register_recv(
        &mut self,
        len: usize,
        caps: &Caps,
    ) -> Result<MemoryRegion, ProviderError> {
        if len == 0 || len > CACHE_MAX_LEN {
            return self
                .register(vec![0u8; len].into_boxed_slice(), Access::LOCAL_WRITE, caps)
                .map_err(|e| e.error);
        }
        self.register_cached(len, None, Access::LOCAL_WRITE, caps, Cached::Lent)
    }

    pub(crate) fn register(
        &mut self,
        buf: Box<[u8]>,
        access: Access,
        caps: &Caps,
    ) -> Result<MemoryRegion, RegisterError> {
        // A local-only buffer of Send size: copied into a cache buffer.
        if !buf.is_empty()
            && buf.len() <= CACHE_MAX_LEN
            && !access.contains(Access::REMOTE_READ)
            && !access.contains(Access::REMOTE_WRITE)
        {
            let len = buf.len();
            return match self.register_cached(len, Some(&buf), access, caps, Cached::No) {
                Ok(mr) => {
                    let idx = mr.stag().index() as usize;
                    if let Some((_, e)) = self.mrs.get_mut(idx) {
                        e.cached = Cached::Copied(buf);
                    }
                    Ok(mr)
                }
                Err(error) => Err(RegisterError { error, buf }),
            };
        }
        let t = self.table.register(buf, access, caps)?;
        self.attach(t).map_err(|(error, buf)| RegisterError {
            error,
            buf: buf.into_owned(),
        })
    }

    /// Whether registrations with `access` go through a memory window.
    pub(crate) fn windowed(&self, access: Access) -> bool {
        self.windows.is_some()
            && (access.contains(Access::REMOTE_READ) || access.contains(Access::REMOTE_WRITE))
    }

    /// Registers the region the table just took at `t` for a memory
    /// window: an MR with its local rights and `MW_BIND` (no remote
    /// right: only the window exposes it), and an idle or new window
    /// whose next rkey is the region's STag; the bind is the caller's to
    /// post. On failure the table entry is removed and its buffer
    /// returned.
    fn attach_window(
        &mut self,
        t: MemoryRegion,
    ) -> Result<(MemoryRegion, Bind), (ProviderError, Buffer)> {
        let idx = t.stag().index();
        let fail = |r: &mut Registry, e: ProviderError| {
            let buf = r
                .table
                .deregister(&t)
                .unwrap_or(Buffer::Owned(Box::default()));
            (e, buf)
        };
        let Some((ptr, len)) = self
            .table
            .region_at(idx)
            .map(|r| (r.buf().as_ptr(), r.buf().len()))
            .filter(|&(_, len)| len > 0)
        else {
            return Err(fail(
                self,
                ProviderError::InvalidArgument("zero-length registration"),
            ));
        };
        let access = t.access();
        let local = if access.contains(Access::LOCAL_WRITE) {
            IBV_ACCESS_LOCAL_WRITE
        } else {
            0
        };
        let m = match self.reg_flags(ptr, len, local | IBV_ACCESS_MW_BIND) {
            Ok(m) => m,
            Err(e) => return Err(fail(self, e)),
        };
        let Some(w) = self.windows.as_mut().and_then(Windows::take) else {
            self.dereg(m);
            return Err(fail(
                self,
                ProviderError::InvalidArgument("ibv_alloc_mw refused a memory window"),
            ));
        };
        let rkey = ibv_inc_rkey(w.rkey);
        let remote = ibv_access(access) & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        let bind = Bind {
            idx,
            wr: ibv_bind_mw_wr {
                mw: w.mw,
                rkey,
                bind_info: ibv_mw_bind_info {
                    mr: m.mr,
                    addr: iova_of(ptr),
                    length: len as u64,
                    mw_access_flags: remote as libc::c_uint,
                },
            },
        };
        let slot = idx as usize;
        if self.mrs.len() <= slot {
            self.mrs.resize_with(slot + 1, Default::default);
        }
        self.mrs[slot] = (
            iova_of(ptr),
            Entry {
                cur: Some(m),
                key: t.lkey(),
                window: Some((Window { mw: w.mw, rkey }, true)),
                ..Entry::default()
            },
        );
        self.by_rkey.insert(rkey, t.lkey());
        let mr = MemoryRegion::new(t.lkey(), Stag(rkey), t.len(), access).with_base(iova_of(ptr));
        Ok((mr, bind))
    }

    /// [`Registry::register`] through a memory window.
    pub(crate) fn register_window(
        &mut self,
        buf: Box<[u8]>,
        access: Access,
        caps: &Caps,
    ) -> Result<(MemoryRegion, Bind), RegisterError> {
        let t = self.table.register(buf, access, caps)?;
        self.attach_window(t).map_err(|(error, buf)| RegisterError {
            error,
            buf: buf.into_owned(),
        })
    }

    /// [`Registry::register_shared`] through a memory window.
    pub(crate) fn register_shared_window(
        &mut self,
        buf: Bytes,
        access: Access,
        caps: &Caps,
    ) -> Result<(MemoryRegion, Bind), ProviderError> {
        let t = self.table.register_shared(buf, access, caps)?;
        self.attach_window(t).map_err(|(e, _)| e)
    }

    /// The bind of the region at `idx` was not posted: the region is
    /// deregistered again (its window, never bound, is freed) and its
    /// buffer given back.
    pub(crate) fn unbind(&mut self, idx: u32) -> Option<Buffer> {
        let (_, e) = self.mrs.get(idx as usize)?;
        let probe = MemoryRegion::new(e.key, Stag(0), 0, Access::NONE);
        self.deregister(&probe).ok()
    }

    /// The peer's Send With Invalidate invalidated our window `rkey`: no
    /// remote access any more; the window is bound again for a later
    /// registration once the region is deregistered.
    pub(crate) fn remote_invalidated(&mut self, rkey: u32) {
        let Some(key) = self.by_rkey.remove(&rkey) else {
            return;
        };
        self.table.invalidate(Stag(key));
        if let Some((_, e)) = self.mrs.get_mut(Stag(key).index() as usize) {
            if let Some((w, valid)) = e.window.as_mut() {
                if w.rkey == rkey {
                    *valid = false;
                }
            }
        }
    }

    /// Whether `rkey` is the STag of a valid window of ours.
    pub(crate) fn is_window(&self, rkey: u32) -> bool {
        self.by_rkey
            .get(&rkey)
            .and_then(|&k| self.mrs.get(Stag(k).index() as usize))
            .is_some_and(|(_, e)| e.window.as_ref().is_some_and(|(w, v)| *v && w.rkey == rkey))
    }

    pub(crate) fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
        caps: &Caps,
    ) -> Result<MemoryRegion, ProviderError> {
        let t = self.table.register_shared(buf, access, caps)?;
        self.attach(t).map_err(|(e, _)| e)
    }

    pub(crate) fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        let buf = self.table.deregister(mr)?;
        let idx = Stag(mr.lkey()).index() as usize;
        let Some((_, e)) = self.mrs.get_mut(idx) else {
            return Ok(buf);
        };
        let mut e = std::mem::take(e);
        match std::mem::take(&mut e.cached) {
            Cached::No => self.end_entry(e, buf),
            Cached::Lent => self.recycle(e, buf, Box::default()),
            Cached::Copied(mut spare) => {
                if spare.len() == buf.len() {
                    spare.copy_from_slice(&buf);
                }
                self.recycle(e, buf, spare)
            }
        }
    }

    /// A cache region's buffer `buf` is out of the table: it goes back to
    /// the cache with its MR if that MR is still the cache MR (not
    /// invalidated); otherwise the entry's MRs are deregistered and the
    /// buffer freed after them. The caller gets `give`.
    fn recycle(&mut self, e: Entry, buf: Buffer, give: Box<[u8]>) -> Result<Buffer, ProviderError> {
        let Buffer::Owned(b) = buf else {
            return Ok(buf);
        };
        let reusable =
            !e.poisoned && e.retired.is_none() && e.cur.as_ref().is_some_and(|m| m.cached);
        if reusable {
            if let Some(m) = e.cur {
                self.by_rkey.remove(&m.rkey);
                self.uncache(CachedMr {
                    buf: b,
                    mr: m.mr,
                    lkey: m.lkey,
                    rkey: m.rkey,
                });
            }
            return Ok(Buffer::Owned(give));
        }
        // Invalidated meanwhile: its MRs end here, the cache buffer is
        // freed after them (by `end_entry`), the caller gets `give`.
        self.end_entry(e, Buffer::Owned(b))?;
        Ok(Buffer::Owned(give))
    }

    /// Deregisters an entry's MRs, then gives back `buf` (or leaks it if
    /// the device refused).
    fn end_entry(&mut self, e: Entry, buf: Buffer) -> Result<Buffer, ProviderError> {
        let mut ok = !e.poisoned;
        // The window before its MR (a device refuses to deregister an MR
        // with windows bound): an invalid one is bound again later, a
        // valid one is freed (which invalidates it).
        if let Some((w, valid)) = e.window {
            self.by_rkey.remove(&w.rkey);
            if let Some(ws) = self.windows.as_mut() {
                if valid {
                    ok &= ws.free(w);
                } else {
                    ws.put(w);
                }
            }
        }
        for m in [e.cur, e.retired].into_iter().flatten() {
            self.by_rkey.remove(&m.rkey);
            // No WR holds the region (the table refused `Busy` otherwise),
            // so none uses its MRs.
            ok &= self.dereg(m);
        }
        if !ok {
            // The device may still reach the memory: never free it.
            std::mem::forget(buf);
            return Err(ProviderError::InvalidArgument(
                "ibv_dereg_mr failed; the buffer is leaked rather than freed",
            ));
        }
        Ok(buf)
    }

    /// The `ibv_sge` of a checked SGE of the region at table index `idx`
    /// and the MR it uses (counted until [`Registry::release`]); a region
    /// invalidated earlier gets its local-only MR here.
    pub(crate) fn sge(&mut self, s: &Sge, idx: u32) -> Result<(ibv_sge, MrUse), ProviderError> {
        let i = idx as usize;
        if self.mrs.get(i).is_some_and(|(_, e)| e.cur.is_none()) {
            let r = self
                .table
                .region_at(idx)
                .ok_or(ProviderError::InvalidHandle)?;
            let (ptr, len, access) = (r.buf().as_ptr(), r.buf().len(), local_only(r.access()));
            let m = self.reg(ptr, len, access)?;
            self.mrs[i].1.cur = Some(m);
        }
        let Some((base, Entry { cur: Some(m), .. })) = self.mrs.get_mut(i) else {
            // Unreachable after the table's check.
            return Err(ProviderError::InvalidHandle);
        };
        m.uses += 1;
        Ok((
            ibv_sge {
                addr: *base + s.offset,
                length: s.length,
                lkey: m.lkey,
            },
            MrUse { idx, mr: m.mr },
        ))
    }

    /// Gives back the uses [`Registry::sge`] counted (the WR completed or
    /// was not posted); a retired MR whose last use this was is
    /// deregistered. False if that deregistration failed.
    pub(crate) fn release(&mut self, uses: &[MrUse]) -> bool {
        let mut ok = true;
        for u in uses {
            let Some((_, e)) = self.mrs.get_mut(u.idx as usize) else {
                continue;
            };
            if let Some(m) = e.cur.as_mut().filter(|m| m.mr == u.mr) {
                m.uses = m.uses.saturating_sub(1);
            } else if let Some(m) = e.retired.as_mut().filter(|m| m.mr == u.mr) {
                m.uses = m.uses.saturating_sub(1);
                if m.uses > 0 {
                    continue;
                }
                if let Some(m) = e.retired.take() {
                    if !self.dereg(m) {
                        self.mrs[u.idx as usize].1.poisoned = true;
                        ok = false;
                    }
                }
            }
        }
        ok
    }

    /// The table key of our region whose valid STag is `rkey`.
    pub(crate) fn key_of_rkey(&self, rkey: u32) -> Option<u32> {
        self.by_rkey.get(&rkey).copied()
    }

    /// Invalidates the STag `rkey` for remote access (see the module
    /// docs): the table revokes it, its MR is retired.
    pub(crate) fn invalidate(&mut self, rkey: u32) -> Retired {
        let Some(key) = self.by_rkey.remove(&rkey) else {
            return Retired::Done;
        };
        self.table.invalidate(Stag(key));
        let idx = Stag(key).index() as usize;
        let Some((_, e)) = self.mrs.get_mut(idx) else {
            return Retired::Done;
        };
        // A window: a Local Invalidate frees it (deallocation invalidates
        // a bound window and is safe on one the peer invalidated already;
        // an `IBV_WR_LOCAL_INV` of an already invalid window oopses Linux
        // 6.1 rxe in `rxe_invalidate_mw`, and a peer's Send With
        // Invalidate can race with ours). Its MR stays for local use
        // until deregistration.
        if e.window.as_ref().is_some_and(|(w, _)| w.rkey == rkey) {
            let Some((w, _)) = e.window.take() else {
                return Retired::Done;
            };
            let freed = self.windows.as_ref().is_some_and(|ws| ws.free(w));
            if freed {
                return Retired::Done;
            }
            self.mrs[idx].1.poisoned = true;
            return Retired::Failed;
        }
        match e.cur.take() {
            Some(m) if m.uses > 0 => {
                e.retired = Some(m);
                Retired::Deferred
            }
            Some(m) => {
                if self.dereg(m) {
                    Retired::Done
                } else {
                    self.mrs[idx].1.poisoned = true;
                    Retired::Failed
                }
            }
            None => Retired::Done,
        }
    }

    /// Whether the region at `idx` has an invalidated MR still waiting
    /// for its last posted WR.
    pub(crate) fn retiring(&self, idx: u32) -> bool {
        self.mrs
            .get(idx as usize)
            .is_some_and(|(_, e)| e.retired.is_some())
    }

    /// Deregisters every MR (before the PD goes; buffers stay in the
    /// table, freed when it drops). Called once the QP is in error or
    /// destroyed, so no posted WR uses them any more.
    pub(crate) fn deregister_all(&mut self) {
        self.recycle_all();
        for (_, e) in &mut self.mrs {
            if let Some((w, _)) = e.window.take() {
                if let Some(ws) = self.windows.as_ref() {
                    let _ = ws.free(w);
                }
            }
        }
        if let Some(ws) = self.windows.as_mut() {
            ws.clear();
        }
        for (_, e) in std::mem::take(&mut self.mrs) {
            for m in [e.cur, e.retired].into_iter().flatten() {
                // A failure leaves nothing to do: the PD goes next.
                let _ = self.dereg(m);
            }
        }
        self.by_rkey.clear();
    }
}

impl Registry {
    /// At teardown (every hold released, the QP about to be destroyed
    /// before the PD's cache is used again): the cache regions' buffers
    /// and MRs go back to the cache.
    fn recycle_all(&mut self) {
        for i in 0..self.mrs.len() {
            let (_, e) = &mut self.mrs[i];
            if matches!(e.cached, Cached::No) {
                continue;
            }
            let key = e.key;
            let probe = MemoryRegion::new(key, Stag(0), 0, Access::NONE);
            let Ok(buf) = self.table.deregister(&probe) else {
                continue;
            };
            let mut e = std::mem::take(&mut self.mrs[i].1);
            e.cached = Cached::No;
            // On failure the buffer is leaked inside `recycle`.
            let _ = self.recycle(e, buf, Box::default());
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Before the table's buffers are freed.
        self.deregister_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_map_to_ibv() {
        assert_eq!(ibv_access(Access::NONE), 0);
        assert_eq!(ibv_access(Access::REMOTE_READ), IBV_ACCESS_REMOTE_READ);
        assert_eq!(
            ibv_access(Access::LOCAL_WRITE | Access::REMOTE_WRITE),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
        );
        assert_eq!(iova_of(0x7f00_1234_5010 as *const u8), 0x7f00_1234_5010);
        let inval = io::Error::from_raw_os_error(libc::EINVAL);
        assert!(reg_error(&inval, 8).to_string().contains("EINVAL"));
        let memlock = io::Error::from_raw_os_error(libc::ENOMEM);
        let e = reg_error(&memlock, 1 << 20).to_string();
        assert!(e.contains("RLIMIT_MEMLOCK"), "{e}");
        // Under a finite limit the message names it and the size.
        if let Some(limit) = memlock_limit() {
            assert_eq!(
                reg_error(&memlock, 1 << 20),
                ProviderError::PinLimit {
                    len: 1 << 20,
                    limit
                }
            );
            assert!(e.contains("cannot pin 1048576 octets"), "{e}");
        }
    }
}
