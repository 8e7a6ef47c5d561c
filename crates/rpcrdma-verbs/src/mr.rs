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

use std::collections::HashMap;
use std::io;

use rpcrdma_proto::provider::memory::MemoryTable;
use rpcrdma_proto::provider::{
    Access, Buffer, Bytes, Caps, MemoryRegion, ProviderError, RegisterError, Sge, Stag,
};

use crate::libs::Rdma;
use crate::sys::*;

/// The I/O virtual address of a buffer's first byte: its process address
/// (see the module docs). Local SGEs and remote accesses alike address an
/// MR in its iova space, so an SGE's address is `base + offset`.
fn iova_of(ptr: *const u8) -> u64 {
    ptr as u64
}

/// What the `ibv_mr` of a table index gives a work request.
#[derive(Clone, Copy, Debug)]
struct Mr {
    mr: *mut ibv_mr,
    base: u64,
    lkey: u32,
    rkey: u32,
}

/// The registrations of one connection (one protection domain).
pub(crate) struct Registry {
    rdma: &'static Rdma,
    pd: *mut ibv_pd,
    pub(crate) table: MemoryTable,
    mrs: Vec<Option<Mr>>,
    /// Device rkey to table key, for Local Invalidate and a received Send
    /// With Invalidate, which name the rkey.
    by_rkey: HashMap<u32, u32>,
    /// The OS error of the last refused registration (diagnostics).
    pub(crate) last_error: Option<io::Error>,
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

/// What a refused `ibv_reg_mr` means for the caller.
fn reg_error(e: &io::Error) -> ProviderError {
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

impl Registry {
    pub(crate) fn new(rdma: &'static Rdma, pd: *mut ibv_pd) -> Registry {
        Registry {
            rdma,
            pd,
            // Index 0 unused: a zeroed handle is never valid.
            table: MemoryTable::without_index_zero(0),
            mrs: Vec::new(),
            by_rkey: HashMap::new(),
            last_error: None,
        }
    }

    /// Registers the region the table just took at `t` with the device;
    /// on failure the table entry is removed again and its buffer returned.
    fn attach(&mut self, t: MemoryRegion) -> Result<MemoryRegion, (ProviderError, Buffer)> {
        let idx = t.stag().index();
        let region = self.table.region_at(idx).map(|r| r.buf());
        let (ptr, len) = match region {
            Some(b) if !b.is_empty() => (b.as_ptr(), b.len()),
            _ => {
                let buf = self
                    .table
                    .deregister(&t)
                    .unwrap_or(Buffer::Owned(Box::default()));
                return Err((
                    ProviderError::InvalidArgument("zero-length registration"),
                    buf,
                ));
            }
        };
        let base = iova_of(ptr);
        // SAFETY: `ptr..ptr+len` is the heap buffer the table owns until
        // `deregister`, which deregisters this MR before giving the buffer
        // back; it never moves (a Box or Bytes allocation). The device
        // writes it only with LOCAL_WRITE / REMOTE_WRITE, which shared
        // (read-only) buffers never get (checked by the table).
        let mr = unsafe {
            (self.rdma.reg_mr_iova)(
                self.pd,
                ptr.cast_mut().cast(),
                len,
                base,
                ibv_access(t.access()),
            )
        };
        if mr.is_null() {
            let os = io::Error::last_os_error();
            let err = reg_error(&os);
            self.last_error = Some(os);
            let buf = self
                .table
                .deregister(&t)
                .unwrap_or(Buffer::Owned(Box::default()));
            return Err((err, buf));
        }
        // SAFETY: `mr` is the live MR just returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        let slot = idx as usize;
        if self.mrs.len() <= slot {
            self.mrs.resize(slot + 1, None);
        }
        self.mrs[slot] = Some(Mr {
            mr,
            base,
            lkey,
            rkey,
        });
        self.by_rkey.insert(rkey, t.lkey());
        Ok(MemoryRegion::new(t.lkey(), Stag(rkey), t.len(), t.access()).with_base(base))
    }

    pub(crate) fn register(
        &mut self,
        buf: Box<[u8]>,
        access: Access,
        caps: &Caps,
    ) -> Result<MemoryRegion, RegisterError> {
        let t = self.table.register(buf, access, caps)?;
        self.attach(t).map_err(|(error, buf)| RegisterError {
            error,
            buf: buf.into_owned(),
        })
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
        if let Some(m) = self.mrs.get_mut(idx).and_then(Option::take) {
            self.by_rkey.remove(&m.rkey);
            // SAFETY: `m.mr` is live and deregistered once; `buf` (its
            // memory) is still alive here and given back only afterwards.
            if unsafe { (self.rdma.dereg_mr)(m.mr) } != 0 {
                // The device may still reach the memory: never free it.
                std::mem::forget(buf);
                return Err(ProviderError::InvalidArgument(
                    "ibv_dereg_mr failed; the buffer is leaked rather than freed",
                ));
            }
        }
        Ok(buf)
    }

    /// The `ibv_sge` of a checked SGE of the region at table index `idx`.
    #[inline]
    pub(crate) fn sge(&self, s: &Sge, idx: u32) -> ibv_sge {
        match self.mrs.get(idx as usize).copied().flatten() {
            Some(m) => ibv_sge {
                addr: m.base + s.offset,
                length: s.length,
                lkey: m.lkey,
            },
            // Unreachable after the table's check; a zero SGE fails safely.
            None => ibv_sge::default(),
        }
    }

    /// The table key of our region with device rkey `rkey`.
    pub(crate) fn key_of_rkey(&self, rkey: u32) -> Option<u32> {
        self.by_rkey.get(&rkey).copied()
    }

    /// Deregisters every MR (before the PD goes; buffers stay in the
    /// table, freed when it drops).
    pub(crate) fn deregister_all(&mut self) {
        for m in self.mrs.iter_mut().filter_map(Option::take) {
            // SAFETY: each live MR is deregistered once.
            unsafe { (self.rdma.dereg_mr)(m.mr) };
        }
        self.by_rkey.clear();
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
        assert!(reg_error(&inval).to_string().contains("EINVAL"));
        let memlock = io::Error::from_raw_os_error(libc::ENOMEM);
        assert!(reg_error(&memlock).to_string().contains("RLIMIT_MEMLOCK"));
    }
}
