//! The memory registration table shared by the software providers (the
//! in-memory [`super::mem`] pair and the software iWARP queue pair).
//!
//! A [`MemoryTable`] owns registered buffers and implements the rules of the
//! [module docs](super): STags are a 24-bit index plus an 8-bit key that
//! changes on every registration of the index (so a stale STag is refused),
//! a region held by an outstanding work request cannot be deregistered nor
//! borrowed mutably ([`ProviderError::Busy`]), and invalidation revokes
//! remote access only. Shared read-only bytes
//! ([`MemoryTable::register_shared`]) are held as [`Buffer::Shared`] and
//! never written: registration refuses every write right, and
//! [`Region::buf_mut`] and [`MemoryTable::region_mut`] refuse them.
//!
//! It also performs the post-time validation of work requests
//! ([`MemoryTable::check_recv`], [`MemoryTable::check_send`]): SGE count,
//! bounds and access rights of every SGE, total length, and the region a
//! `LocalInvalidate` names. These return the [`Hold`]s the caller takes with
//! [`MemoryTable::hold`] when it queues the WR and gives back with
//! [`MemoryTable::release`] when the completion is polled.
//!
//! Lent receive buffers ([`MemoryTable::register_lent`], the software
//! providers' [`Provider::register_recv`](super::Provider::register_recv))
//! have memory behind them only while a message is in them: the provider
//! calls [`MemoryTable::back`] when a Send arrives for the receive (the
//! table's one spare buffer, else a buffer from [`super::recv_pool`]) and
//! [`MemoryTable::received`] when the receive completes; posting the region
//! again (its writing hold) or deregistering it gives the buffer back (to
//! the spare slot while it is empty, else to the pool).

use super::{
    check_shared_access, Access, Buffer, Bytes, Caps, MemoryRegion, Opcode, ProviderError, RecvWr,
    RegisterError, RemoteAddr, SendOp, SendWr, Sge, Stag,
};

/// Makes room for one more element in a table that lives as long as its
/// connection (the registration table, the engine's work-request slab):
/// a quarter more (at least 8) instead of doubling, so that a connection
/// that registered 66 regions keeps room for 77, not 128. Still amortized
/// constant time per push.
pub(crate) fn reserve_gently<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 4).max(8));
    }
}

/// What the owner's use of a lent receive buffer other than receiving into
/// it and reading it gets.
const LENT: ProviderError =
    ProviderError::InvalidArgument("a lent receive buffer is for receives only");

/// One registered buffer. Its hold counts are private to the table.
#[derive(Debug)]
pub struct Region {
    buf: Buffer,
    access: Access,
    remote_valid: bool,
    readers: u32,
    writers: u32,
    /// A lent receive buffer: its registered length and how many octets
    /// the last completed receive placed (all that is visible).
    lent: Option<Lent>,
}

#[derive(Clone, Copy, Debug)]
struct Lent {
    len: usize,
    visible: usize,
}

impl Region {
    /// The registered bytes (of a lent receive buffer: what the last
    /// completed receive placed).
    #[inline]
    pub fn buf(&self) -> &[u8] {
        match self.lent {
            None => &self.buf,
            Some(l) => self.buf.get(..l.visible).unwrap_or_default(),
        }
    }

    /// The registered length (a lent buffer's, whether memory is behind it
    /// or not).
    #[inline]
    fn len(&self) -> usize {
        match self.lent {
            None => self.buf.len(),
            Some(l) => l.len,
        }
    }

    /// True for a lent receive buffer ([`MemoryTable::register_lent`]).
    #[inline]
    pub fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    /// A lent buffer's memory goes to `spare` (the table's one spare
    /// buffer, when it has none) or back to the pool; nothing is visible.
    fn unback(&mut self, spare: &mut Box<[u8]>) {
        if let Some(l) = self.lent.as_mut() {
            l.visible = 0;
            if let Buffer::Owned(b) = &mut self.buf {
                let b = std::mem::take(b);
                if spare.is_empty() {
                    *spare = b;
                } else {
                    super::recv_pool::give(b);
                }
            }
        }
    }

    /// The registered bytes, for a provider placing inbound data; `None`
    /// for shared read-only bytes (which no placement may reach: they have
    /// no write right).
    #[inline]
    pub fn buf_mut(&mut self) -> Option<&mut [u8]> {
        self.buf.as_mut_slice()
    }

    /// True for shared read-only bytes ([`MemoryTable::register_shared`]).
    pub fn is_shared(&self) -> bool {
        self.buf.is_shared()
    }

    /// The access rights given at registration.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Whether the STag is still valid for remote access (not invalidated).
    pub fn remote_valid(&self) -> bool {
        self.remote_valid
    }
}

#[derive(Debug)]
struct Slot {
    key: u8,
    region: Option<Region>,
}

/// A region a posted work request holds until its completion is polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Index of the region in its [`MemoryTable`] (the STag's 24-bit index).
    pub idx: u32,
    /// Whether the WR writes the region (a Receive or an RDMA Read sink);
    /// such a hold also refuses [`MemoryTable::region`].
    pub write: bool,
}

/// Provider-specific rules for [`MemoryTable::check_send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRules {
    /// An RDMA Read takes exactly one SGE (else: at least one, up to
    /// `Caps::max_read_sge`).
    pub read_single_sge: bool,
    /// Rights an RDMA Read sink SGE needs.
    pub read_sink_access: Access,
    /// The connection's ORD is 0, so RDMA Reads are refused.
    pub ord_zero: bool,
}

/// The holds of one work request: up to three are stored inline (no heap
/// allocation per WR).
pub type Holds = smallvec::SmallVec<[Hold; 3]>;

/// What [`MemoryTable::check_send`] found acceptable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedSend {
    /// The completion opcode of the WR.
    pub opcode: Opcode,
    /// The regions to hold (one per SGE, then the invalidated region).
    pub holds: Holds,
    /// Total length of the SGEs (at most `Caps::max_msg_size`).
    pub total: u64,
}

/// The registration table: see the [module docs](self).
#[derive(Debug)]
pub struct MemoryTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    registered: u32,
    key_base: u8,
    /// One buffer of a lent receive kept back from the pool (empty when
    /// none): the next Send to land takes it ([`MemoryTable::back`]), so a
    /// connection at depth 1 moves one buffer between its posted receive
    /// and this slot and never touches the thread's pool. One receive's
    /// worth of memory stays with an idle connection.
    spare: Box<[u8]>,
}

impl MemoryTable {
    /// An empty table. A new index's first registration gets the key byte
    /// `key_base + 1`; giving two ends different bases makes a local/remote
    /// key mix-up fail.
    pub fn new(key_base: u8) -> Self {
        MemoryTable {
            slots: Vec::new(),
            free: Vec::new(),
            registered: 0,
            key_base,
            spare: Box::default(),
        }
    }

    /// An empty table whose index 0 is never used (so no STag with index 0
    /// is ever valid).
    pub fn without_index_zero(key_base: u8) -> Self {
        let mut t = Self::new(key_base);
        t.slots.push(Slot {
            key: 0,
            region: None,
        });
        t
    }

    /// Number of live registrations.
    pub fn registered(&self) -> u32 {
        self.registered
    }

    /// Octets of memory behind the live registrations that this table
    /// owns (shared read-only bytes not counted; a lent receive buffer
    /// only while a message is in it), and its spare receive buffer.
    pub fn resident_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.region.as_ref())
            .filter_map(|r| match &r.buf {
                Buffer::Owned(b) => Some(b.len()),
                Buffer::Shared(_) => None,
            })
            .sum::<usize>()
            + self.spare.len()
    }

    /// The region an STag or local key names, with its index; `None` if the
    /// index is unused or the key byte is stale.
    #[inline]
    pub fn lookup(&self, key32: u32) -> Option<(u32, &Region)> {
        let s = Stag(key32);
        let slot = self.slots.get(s.index() as usize)?;
        let r = slot.region.as_ref()?;
        (slot.key == s.key()).then_some((s.index(), r))
    }

    /// The region at `idx` (as returned by a lookup or held).
    #[inline]
    pub fn region_at(&self, idx: u32) -> Option<&Region> {
        self.slots.get(idx as usize)?.region.as_ref()
    }

    /// The region at `idx` (as returned by a lookup or held), for writing.
    #[inline]
    pub fn region_at_mut(&mut self, idx: u32) -> Option<&mut Region> {
        self.slots.get_mut(idx as usize)?.region.as_mut()
    }

    /// `len` bytes at `off` of the region at `idx`, or empty if out of range.
    #[inline]
    pub fn slice(&self, idx: u32, off: usize, len: usize) -> &[u8] {
        self.slots
            .get(idx as usize)
            .and_then(|s| s.region.as_ref())
            .and_then(|r| r.buf.get(off..off.checked_add(len)?))
            .unwrap_or(&[])
    }

    /// Revokes remote access through `stag`; `false` if it names no live
    /// region (stale key or unused index).
    pub fn invalidate(&mut self, stag: Stag) -> bool {
        let idx = self.lookup(stag.0).map(|(i, _)| i);
        match idx.and_then(|i| self.region_at_mut(i)) {
            Some(r) => {
                r.remote_valid = false;
                true
            }
            None => false,
        }
    }

    /// Registers `buf` with `access`, within `caps.max_mr` and
    /// `caps.max_mr_size`; on refusal the buffer comes back in the error.
    pub fn register(
        &mut self,
        buf: Box<[u8]>,
        access: Access,
        caps: &Caps,
    ) -> Result<MemoryRegion, RegisterError> {
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            return Err(RegisterError {
                error: ProviderError::InvalidArgument("REMOTE_WRITE requires LOCAL_WRITE"),
                buf,
            });
        }
        self.insert(Buffer::Owned(buf), access, None, caps)
            .map_err(|(error, buf)| RegisterError {
                error,
                buf: buf.into_owned(),
            })
    }

    /// Registers shared read-only bytes (see
    /// [`Provider::register_shared`](super::Provider::register_shared)):
    /// `access` may only be `NONE` or `REMOTE_READ`, within `caps.max_mr`
    /// and `caps.max_mr_size`.
    pub fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
        caps: &Caps,
    ) -> Result<MemoryRegion, ProviderError> {
        check_shared_access(access)?;
        self.insert(Buffer::Shared(buf), access, None, caps)
            .map_err(|(e, _)| e)
    }

    /// Registers a lent receive buffer of `len` octets (see the [module
    /// docs](self)): `LOCAL_WRITE` only, no memory behind it yet, within
    /// `caps.max_mr` and `caps.max_mr_size`.
    pub fn register_lent(
        &mut self,
        len: usize,
        caps: &Caps,
    ) -> Result<MemoryRegion, ProviderError> {
        self.insert(
            Buffer::Owned(Box::default()),
            Access::LOCAL_WRITE,
            Some(len),
            caps,
        )
        .map_err(|(e, _)| e)
    }

    /// A Send arrives for the receive that holds the region at `idx`: a
    /// lent buffer without memory gets a buffer of its length from the
    /// pool (nothing for any other region).
    #[inline]
    pub fn back(&mut self, idx: u32) {
        let spare = &mut self.spare;
        if let Some(r) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.region.as_mut())
        {
            if let (Some(l), Buffer::Owned(b)) = (r.lent, &mut r.buf) {
                if b.len() != l.len {
                    *b = if spare.len() == l.len {
                        std::mem::take(spare)
                    } else {
                        super::recv_pool::take(l.len)
                    };
                }
            }
        }
    }

    /// The receive into the region at `idx` completed with `len` octets
    /// placed at offset `off`: a lent buffer shows those, after `off`
    /// zeros (never what an earlier message left before them).
    #[inline]
    pub fn received(&mut self, idx: u32, off: usize, len: usize) {
        if let Some(r) = self.region_at_mut(idx) {
            if let (Some(l), Buffer::Owned(b)) = (r.lent.as_mut(), &mut r.buf) {
                l.visible = off.saturating_add(len).min(b.len());
                if off > 0 {
                    if let Some(before) = b.get_mut(..off.min(l.visible)) {
                        before.fill(0);
                    }
                }
            }
        }
    }

    fn insert(
        &mut self,
        buf: Buffer,
        access: Access,
        lent: Option<usize>,
        caps: &Caps,
    ) -> Result<MemoryRegion, (ProviderError, Buffer)> {
        let len = lent.unwrap_or(buf.len());
        if len as u64 > caps.max_mr_size {
            return Err((ProviderError::TooLong, buf));
        }
        if self.registered >= caps.max_mr {
            return Err((ProviderError::QueueFull, buf));
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len() as u32;
                if i >= 1 << 24 {
                    return Err((ProviderError::QueueFull, buf));
                }
                reserve_gently(&mut self.slots);
                self.slots.push(Slot {
                    key: self.key_base,
                    region: None,
                });
                i
            }
        };
        let len = len as u64;
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            return Err((ProviderError::QueueFull, buf));
        };
        slot.key = slot.key.wrapping_add(1);
        slot.region = Some(Region {
            buf,
            access,
            remote_valid: true,
            readers: 0,
            writers: 0,
            lent: lent.map(|len| Lent { len, visible: 0 }),
        });
        self.registered += 1;
        let stag = Stag::new(idx, slot.key);
        Ok(MemoryRegion::new(stag.0, stag, len, access))
    }

    /// Ends a registration and gives the buffer back; `Busy` while held.
    pub fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        let (idx, r) = self.lookup(mr.lkey()).ok_or(ProviderError::InvalidHandle)?;
        if r.readers != 0 || r.writers != 0 {
            return Err(ProviderError::Busy);
        }
        let mut region = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.region.take())
            .ok_or(ProviderError::InvalidHandle)?;
        region.unback(&mut self.spare);
        self.free.push(idx);
        self.registered = self.registered.saturating_sub(1);
        Ok(region.buf)
    }

    /// The region's bytes; `Busy` while a WR that writes it holds it.
    #[inline]
    pub fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        let (_, r) = self.lookup(mr.lkey()).ok_or(ProviderError::InvalidHandle)?;
        if r.writers != 0 {
            return Err(ProviderError::Busy);
        }
        Ok(r.buf())
    }

    /// The region's bytes for writing; `Busy` while any WR holds it,
    /// `AccessDenied` (`LOCAL_WRITE`) for shared read-only bytes.
    #[inline]
    pub fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        let (idx, r) = self.lookup(mr.lkey()).ok_or(ProviderError::InvalidHandle)?;
        if r.writers != 0 || r.readers != 0 {
            return Err(ProviderError::Busy);
        }
        if r.is_lent() {
            return Err(LENT);
        }
        self.region_at_mut(idx)
            .ok_or(ProviderError::InvalidHandle)?
            .buf
            .as_mut_slice()
            .ok_or(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE,
            })
    }

    /// Validates a local SGE (key, bounds, then rights); returns the index.
    #[inline]
    pub fn check_sge(&self, sge: &Sge, need: Access) -> Result<u32, ProviderError> {
        let (idx, r) = self.lookup(sge.lkey).ok_or(ProviderError::InvalidHandle)?;
        let end = sge
            .offset
            .checked_add(u64::from(sge.length))
            .ok_or(ProviderError::OutOfBounds)?;
        if end > r.len() as u64 {
            return Err(ProviderError::OutOfBounds);
        }
        if !r.access.contains(need) {
            return Err(ProviderError::AccessDenied { needed: need });
        }
        Ok(idx)
    }

    /// Validates a remote access by the peer (valid STag, rights, bounds);
    /// returns the index and the offset, `None` for a remote access error.
    pub fn check_remote(&self, remote: RemoteAddr, len: u64, need: Access) -> Option<(u32, usize)> {
        let (idx, r) = self.lookup(remote.stag.0)?;
        let end = remote.offset.checked_add(len)?;
        if !r.remote_valid || !r.access.contains(need) || end > r.len() as u64 {
            return None;
        }
        Some((idx, usize::try_from(remote.offset).ok()?))
    }

    /// Takes holds (see [`Hold`]); unknown indices are ignored. A writing
    /// hold on a lent receive buffer is a receive posted into it: its
    /// earlier message has been consumed, its memory goes back to the pool.
    #[inline]
    pub fn hold(&mut self, holds: &[Hold]) {
        let spare = &mut self.spare;
        for h in holds {
            if let Some(r) = self
                .slots
                .get_mut(h.idx as usize)
                .and_then(|s| s.region.as_mut())
            {
                if h.write {
                    r.unback(spare);
                    r.writers = r.writers.saturating_add(1);
                } else {
                    r.readers = r.readers.saturating_add(1);
                }
            }
        }
    }

    /// Gives back holds taken with [`MemoryTable::hold`].
    #[inline]
    pub fn release(&mut self, holds: &[Hold]) {
        for h in holds {
            if let Some(r) = self.region_at_mut(h.idx) {
                if h.write {
                    r.writers = r.writers.saturating_sub(1);
                } else {
                    r.readers = r.readers.saturating_sub(1);
                }
            }
        }
    }

    /// Post-time validation of a Receive: its SGE needs `LOCAL_WRITE`.
    /// Returns the (writing) hold to take.
    #[inline]
    pub fn check_recv(&self, wr: &RecvWr) -> Result<Hold, ProviderError> {
        let idx = self.check_sge(&wr.sge, Access::LOCAL_WRITE)?;
        Ok(Hold { idx, write: true })
    }

    /// Post-time validation of a Send-queue WR: SGE count against `caps`
    /// (and `rules` for RDMA Read), every SGE's key, bounds and rights
    /// (an RDMA Read sink needs `rules.read_sink_access` and is held for
    /// writing), the total length against `caps.max_msg_size`, and the
    /// region a `LocalInvalidate` names (held for reading). Nothing is held
    /// yet: the caller holds [`CheckedSend::holds`] once it queues the WR.
    #[inline]
    pub fn check_send(
        &self,
        wr: &SendWr,
        caps: &Caps,
        rules: &SendRules,
    ) -> Result<CheckedSend, ProviderError> {
        let (opcode, need, write, max_sge) = match wr.op {
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => {
                (Opcode::Send, Access::NONE, false, caps.max_send_sge)
            }
            SendOp::Write { .. } => (Opcode::Write, Access::NONE, false, caps.max_send_sge),
            SendOp::Read { .. } => {
                let bad_count = if rules.read_single_sge {
                    wr.sges.len() != 1
                } else {
                    wr.sges.is_empty()
                };
                if bad_count {
                    return Err(ProviderError::BadSgeCount);
                }
                if rules.ord_zero {
                    return Err(ProviderError::InvalidArgument(
                        "RDMA Read needs an ORD above 0",
                    ));
                }
                (
                    Opcode::Read,
                    rules.read_sink_access,
                    true,
                    caps.max_read_sge,
                )
            }
            SendOp::LocalInvalidate { .. } => (Opcode::LocalInvalidate, Access::NONE, false, 0),
        };
        if wr.sges.len() > max_sge as usize {
            return Err(ProviderError::BadSgeCount);
        }
        let mut holds = Holds::new();
        let mut total: u64 = 0;
        for s in &wr.sges {
            let idx = self.check_sge(s, need)?;
            if self.region_at(idx).is_some_and(Region::is_lent) {
                return Err(LENT);
            }
            total += u64::from(s.length);
            holds.push(Hold { idx, write });
        }
        if total > u64::from(caps.max_msg_size) {
            return Err(ProviderError::TooLong);
        }
        if let SendOp::LocalInvalidate { stag } = wr.op {
            let (idx, _) = self.lookup(stag.0).ok_or(ProviderError::InvalidHandle)?;
            holds.push(Hold { idx, write: false });
        }
        Ok(CheckedSend {
            opcode,
            holds,
            total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::mem::MemConfig;

    fn caps() -> Caps {
        let mut c = MemConfig::DEFAULT.caps;
        c.max_send_sge = 2;
        c.max_read_sge = 2;
        c.max_msg_size = 100;
        c.max_mr = 3;
        c.max_mr_size = 64;
        c
    }

    const RULES: SendRules = SendRules {
        read_single_sge: false,
        read_sink_access: Access::LOCAL_WRITE,
        ord_zero: false,
    };

    fn reg(t: &mut MemoryTable, len: usize, access: Access) -> MemoryRegion {
        t.register(vec![0u8; len].into_boxed_slice(), access, &caps())
            .map_err(|e| e.error)
            .expect("register")
    }

    fn send(sges: Vec<Sge>) -> SendWr {
        SendWr {
            wr_id: 1,
            op: SendOp::Send { solicited: false },
            sges: sges.into(),
        }
    }

    #[test]
    fn keys_start_after_base_and_rotate() {
        let mut t = MemoryTable::new(0x80);
        let a = reg(&mut t, 8, Access::NONE);
        assert_eq!(a.stag(), Stag::new(0, 0x81));
        assert_eq!(a.lkey(), a.stag().0);
        t.deregister(&a).expect("deregister");
        let b = reg(&mut t, 8, Access::NONE);
        // Same index, next key.
        assert_eq!(b.stag(), Stag::new(0, 0x82));
        let mut z = MemoryTable::without_index_zero(7);
        assert_eq!(reg(&mut z, 1, Access::NONE).stag(), Stag::new(1, 8));
        assert!(z.lookup(Stag::new(0, 0).0).is_none());
    }

    #[test]
    fn stale_key_refused() {
        let mut t = MemoryTable::new(0);
        let old = reg(&mut t, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        t.deregister(&old).expect("deregister");
        let new = reg(&mut t, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        assert_eq!(old.stag().index(), new.stag().index());
        assert_eq!(t.region(&old), Err(ProviderError::InvalidHandle));
        assert_eq!(t.region_mut(&old).err(), Some(ProviderError::InvalidHandle));
        assert_eq!(t.deregister(&old).err(), Some(ProviderError::InvalidHandle));
        assert_eq!(
            t.check_sge(&old.sge(0, 1), Access::NONE),
            Err(ProviderError::InvalidHandle)
        );
        assert_eq!(t.check_remote(old.remote(0), 1, Access::REMOTE_WRITE), None);
        assert!(!t.invalidate(old.stag()));
        assert!(t.region(&new).is_ok());
    }

    #[test]
    fn busy_while_held() {
        let mut t = MemoryTable::new(0);
        let mr = reg(&mut t, 8, Access::LOCAL_WRITE);
        let idx = mr.stag().index();
        // A reading hold (Send source): region readable, not writable.
        let r = [Hold { idx, write: false }];
        t.hold(&r);
        assert!(t.region(&mr).is_ok());
        assert_eq!(t.region_mut(&mr).err(), Some(ProviderError::Busy));
        assert_eq!(t.deregister(&mr).err(), Some(ProviderError::Busy));
        t.release(&r);
        // A writing hold (Receive): neither readable nor writable.
        let w = [t
            .check_recv(&RecvWr {
                wr_id: 0,
                sge: mr.sge(0, 8),
            })
            .expect("recv")];
        assert_eq!(w[0], Hold { idx, write: true });
        t.hold(&w);
        assert_eq!(t.region(&mr), Err(ProviderError::Busy));
        assert_eq!(t.region_mut(&mr).err(), Some(ProviderError::Busy));
        assert_eq!(t.deregister(&mr).err(), Some(ProviderError::Busy));
        t.release(&w);
        t.region_mut(&mr).expect("free again")[0] = 9;
        assert_eq!(
            &*t.deregister(&mr).expect("deregister"),
            &[9, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(t.registered(), 0);
    }

    #[test]
    fn access_rights() {
        let mut t = MemoryTable::new(0);
        let bad = t.register(
            vec![0u8; 4].into_boxed_slice(),
            Access::REMOTE_WRITE,
            &caps(),
        );
        assert!(matches!(
            bad,
            Err(RegisterError { error: ProviderError::InvalidArgument(_), ref buf }) if buf.len() == 4
        ));
        let ro = reg(&mut t, 8, Access::REMOTE_READ);
        assert_eq!(
            t.check_recv(&RecvWr {
                wr_id: 0,
                sge: ro.sge(0, 8)
            }),
            Err(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE
            })
        );
        let read = SendWr {
            wr_id: 2,
            op: SendOp::Read {
                remote: ro.remote(0),
            },
            sges: vec![ro.sge(0, 4)].into(),
        };
        assert_eq!(
            t.check_send(&read, &caps(), &RULES),
            Err(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE
            })
        );
        assert!(t
            .check_remote(ro.remote(0), 8, Access::REMOTE_READ)
            .is_some());
        assert!(t
            .check_remote(ro.remote(0), 8, Access::REMOTE_WRITE)
            .is_none());
        // Invalidation revokes remote access only.
        assert!(t.invalidate(ro.stag()));
        assert!(t
            .check_remote(ro.remote(0), 8, Access::REMOTE_READ)
            .is_none());
        assert!(t.check_sge(&ro.sge(0, 8), Access::NONE).is_ok());
    }

    #[test]
    fn shared_bytes_are_read_only_and_bounded_by_their_slice() {
        let mut t = MemoryTable::new(0);
        let backing = Bytes::from(vec![7u8; 32]);
        for bad in [
            Access::LOCAL_WRITE,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ] {
            assert!(matches!(
                t.register_shared(backing.clone(), bad, &caps()),
                Err(ProviderError::InvalidArgument(_))
            ));
        }
        // REMOTE_WRITE alone is refused too (it is a write right).
        assert!(t
            .register_shared(backing.clone(), Access::REMOTE_WRITE, &caps())
            .is_err());
        let mr = t
            .register_shared(backing.slice(8..24), Access::REMOTE_READ, &caps())
            .expect("shared");
        assert_eq!(mr.len(), 16);
        let idx = mr.stag().index();
        assert!(t.region_at(idx).is_some_and(Region::is_shared));
        assert!(t.region_at_mut(idx).and_then(Region::buf_mut).is_none());
        assert_eq!(
            t.region_mut(&mr).err(),
            Some(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE
            })
        );
        assert_eq!(t.region(&mr), Ok(&[7u8; 16][..]));
        // Local write uses and remote writes are refused; reads allowed
        // within the slice only.
        assert_eq!(
            t.check_recv(&RecvWr {
                wr_id: 0,
                sge: mr.sge(0, 16)
            }),
            Err(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE
            })
        );
        assert_eq!(t.check_remote(mr.remote(0), 1, Access::REMOTE_WRITE), None);
        assert_eq!(
            t.check_remote(mr.remote(0), 16, Access::REMOTE_READ),
            Some((idx, 0))
        );
        assert_eq!(t.check_remote(mr.remote(0), 17, Access::REMOTE_READ), None);
        assert_eq!(
            t.check_sge(&mr.sge(8, 9), Access::NONE),
            Err(ProviderError::OutOfBounds)
        );
        assert!(t.slice(idx, 10, 7).is_empty());
        // Size limit as for owned buffers.
        let big = Bytes::from(vec![0u8; 65]);
        assert_eq!(
            t.register_shared(big, Access::NONE, &caps()).err(),
            Some(ProviderError::TooLong)
        );
        // Back as it came: shared, same octets, next key on the index.
        let back = t.deregister(&mr).expect("deregister");
        assert!(back.is_shared());
        assert_eq!(back.into_bytes(), backing.slice(8..24));
        assert_eq!(t.registered(), 0);
        let again = reg(&mut t, 4, Access::NONE);
        assert_eq!(again.stag().index(), idx);
        assert_ne!(again.stag(), mr.stag());
        assert!(matches!(
            t.deregister(&again),
            Ok(Buffer::Owned(ref b)) if b.len() == 4
        ));
    }

    #[test]
    fn bounds() {
        let mut t = MemoryTable::new(0);
        let mr = reg(&mut t, 8, Access::LOCAL_WRITE);
        assert_eq!(
            t.check_sge(&mr.sge(0, 8), Access::NONE),
            Ok(mr.stag().index())
        );
        assert_eq!(
            t.check_sge(&mr.sge(1, 8), Access::NONE),
            Err(ProviderError::OutOfBounds)
        );
        assert_eq!(
            t.check_sge(&mr.sge(u64::MAX, 1), Access::NONE),
            Err(ProviderError::OutOfBounds)
        );
        assert_eq!(t.check_remote(mr.remote(u64::MAX), 1, Access::NONE), None);
        assert_eq!(t.check_remote(mr.remote(7), 2, Access::NONE), None);
        assert_eq!(t.check_remote(mr.remote(7), 1, Access::NONE), Some((0, 7)));
        assert_eq!(t.slice(0, 6, 2).len(), 2);
        assert!(t.slice(0, 7, 2).is_empty());
        // Registration limits: size, then count.
        let big = t.register(vec![0u8; 65].into_boxed_slice(), Access::NONE, &caps());
        assert_eq!(big.map_err(|e| e.error).err(), Some(ProviderError::TooLong));
        reg(&mut t, 1, Access::NONE);
        reg(&mut t, 1, Access::NONE);
        let full = t.register(vec![0u8; 1].into_boxed_slice(), Access::NONE, &caps());
        assert_eq!(
            full.map_err(|e| e.error).err(),
            Some(ProviderError::QueueFull)
        );
    }

    #[test]
    fn check_send_counts_lengths_and_holds() {
        let mut t = MemoryTable::new(0);
        let a = reg(&mut t, 64, Access::LOCAL_WRITE);
        let b = reg(&mut t, 64, Access::LOCAL_WRITE);
        let ok = t.check_send(&send(vec![a.sge(0, 50), b.sge(0, 50)]), &caps(), &RULES);
        assert_eq!(
            ok,
            Ok(CheckedSend {
                opcode: Opcode::Send,
                holds: smallvec::smallvec![
                    Hold {
                        idx: 0,
                        write: false
                    },
                    Hold {
                        idx: 1,
                        write: false
                    }
                ],
                total: 100,
            })
        );
        // Nothing is held by validation alone.
        assert!(t.region_mut(&a).is_ok());
        let long = send(vec![a.sge(0, 50), b.sge(0, 51)]);
        assert_eq!(
            t.check_send(&long, &caps(), &RULES),
            Err(ProviderError::TooLong)
        );
        let three = send(vec![a.sge(0, 1); 3]);
        assert_eq!(
            t.check_send(&three, &caps(), &RULES),
            Err(ProviderError::BadSgeCount)
        );
        // RDMA Read: sink held for writing; count and ORD rules.
        let mut read = SendWr {
            wr_id: 3,
            op: SendOp::Read {
                remote: b.remote(0),
            },
            sges: vec![a.sge(0, 4), b.sge(0, 4)].into(),
        };
        let r = t.check_send(&read, &caps(), &RULES).expect("read");
        assert_eq!(r.opcode, Opcode::Read);
        assert!(r.holds.iter().all(|h| h.write));
        let single = SendRules {
            read_single_sge: true,
            ..RULES
        };
        assert_eq!(
            t.check_send(&read, &caps(), &single),
            Err(ProviderError::BadSgeCount)
        );
        let no_ord = SendRules {
            ord_zero: true,
            ..RULES
        };
        assert!(matches!(
            t.check_send(&read, &caps(), &no_ord),
            Err(ProviderError::InvalidArgument(_))
        ));
        read.sges.clear();
        assert_eq!(
            t.check_send(&read, &caps(), &RULES),
            Err(ProviderError::BadSgeCount)
        );
        // LocalInvalidate: no SGE allowed; holds the named region.
        let mut inv = SendWr {
            wr_id: 4,
            op: SendOp::LocalInvalidate { stag: b.stag() },
            sges: vec![].into(),
        };
        let c = t.check_send(&inv, &caps(), &RULES).expect("inv");
        assert_eq!(
            c.holds,
            Holds::from_slice(&[Hold {
                idx: 1,
                write: false
            }])
        );
        assert_eq!(c.opcode, Opcode::LocalInvalidate);
        inv.op = SendOp::LocalInvalidate {
            stag: Stag::new(1, 0x55),
        };
        assert_eq!(
            t.check_send(&inv, &caps(), &RULES),
            Err(ProviderError::InvalidHandle)
        );
        inv.sges.push(a.sge(0, 1));
        assert_eq!(
            t.check_send(&inv, &caps(), &RULES),
            Err(ProviderError::BadSgeCount)
        );
    }

    #[test]
    fn a_lent_receive_buffer_holds_memory_only_with_a_message_and_shows_only_it() {
        let mut t = MemoryTable::new(0);
        let mr = t.register_lent(16, &caps()).expect("lent");
        assert_eq!((mr.len(), mr.access()), (16, Access::LOCAL_WRITE));
        let idx = mr.stag().index();
        let mem = |t: &MemoryTable| t.region_at(idx).map_or(0, |r| r.buf.len());
        // No memory until a Send arrives; bounds are the registered length.
        assert_eq!(mem(&t), 0);
        let wr = RecvWr {
            wr_id: 1,
            sge: mr.sge(0, 16),
        };
        let h = t.check_recv(&wr).expect("receive");
        assert_eq!(
            t.check_recv(&RecvWr {
                wr_id: 1,
                sge: mr.sge(0, 17)
            }),
            Err(ProviderError::OutOfBounds)
        );
        for (round, (fill, len)) in [(7u8, 12usize), (9, 4)].into_iter().enumerate() {
            t.hold(&[h]);
            assert_eq!(mem(&t), 0, "round {round}: posted, nothing arrived");
            t.back(idx);
            assert_eq!(mem(&t), 16);
            let buf = t
                .region_at_mut(idx)
                .and_then(Region::buf_mut)
                .expect("backed");
            buf[..len].fill(fill);
            t.received(idx, 0, len);
            t.release(&[h]);
            // Exactly the message: never the end of the longer one before.
            assert_eq!(t.region(&mr).expect("read"), &vec![fill; len][..]);
        }
        // At an offset: the octets before it read as zeros.
        t.hold(&[h]);
        t.back(idx);
        let buf = t
            .region_at_mut(idx)
            .and_then(Region::buf_mut)
            .expect("backed");
        buf.fill(5);
        t.received(idx, 3, 2);
        t.release(&[h]);
        assert_eq!(t.region(&mr).expect("read"), &[0, 0, 0, 5, 5]);
        // Receives only: no Send source, no owner writes.
        assert!(matches!(
            t.check_send(&send(vec![mr.sge(0, 1)]), &caps(), &RULES),
            Err(ProviderError::InvalidArgument(_))
        ));
        assert!(matches!(
            t.region_mut(&mr),
            Err(ProviderError::InvalidArgument(_))
        ));
        // Deregistered: the memory went back to the pool, nothing comes back.
        let back = t.deregister(&mr).expect("deregister");
        assert!(back.is_empty());
        // A failed receive (flushed before completing) shows nothing.
        let mr = t.register_lent(16, &caps()).expect("lent");
        let idx = mr.stag().index();
        let h = Hold { idx, write: true };
        t.hold(&[h]);
        t.back(idx);
        t.release(&[h]);
        assert_eq!(t.region(&mr).expect("read"), &[] as &[u8]);
        assert_eq!(
            t.register_lent(65, &caps()).err(),
            Some(ProviderError::TooLong)
        );
    }

    #[test]
    fn one_spare_receive_buffer_is_kept_from_the_pool() {
        use super::super::recv_pool::idle_bytes;
        // Each test runs on a thread of its own: the pool starts empty.
        let mut t = MemoryTable::new(0);
        let a = t.register_lent(16, &caps()).expect("lent");
        let b = t.register_lent(16, &caps()).expect("lent");
        let odd = t.register_lent(8, &caps()).expect("lent");
        let (ia, ib, io) = (a.stag().index(), b.stag().index(), odd.stag().index());
        let ptr = |t: &MemoryTable, i: u32| t.region_at(i).map(|r| r.buf.as_ptr() as usize);
        let ha = Hold {
            idx: ia,
            write: true,
        };
        let hb = Hold {
            idx: ib,
            write: true,
        };
        // A message lands in `a` (a new buffer: no spare, empty pool).
        t.hold(&[ha]);
        t.back(ia);
        t.received(ia, 0, 16);
        t.release(&[ha]);
        let first = ptr(&t, ia);
        // Posted again: its buffer becomes the spare, not the pool's.
        t.hold(&[ha]);
        assert_eq!(idle_bytes(), 0);
        assert_eq!(t.resident_bytes(), 16);
        // The next message, in `b`, takes the spare.
        t.hold(&[hb]);
        t.back(ib);
        assert_eq!(ptr(&t, ib), first);
        assert_eq!(t.resident_bytes(), 16);
        // Another size never takes it (and gets a buffer of its own).
        t.back(ia);
        let ho = Hold {
            idx: io,
            write: true,
        };
        t.hold(&[ho]);
        t.back(io);
        assert_eq!(t.region_at(io).map(|r| r.buf.len()), Some(8));
        // With the spare slot taken, a buffer given back goes to the pool.
        t.hold(&[ha]); // `a` again: its (second) buffer is the spare now
        t.received(ib, 0, 1);
        t.release(&[hb]);
        t.hold(&[hb]); // `b`'s buffer: the pool's
        assert_eq!(idle_bytes(), 16);
        assert_eq!(t.resident_bytes(), 16 + 8);
        // Nothing a message left shows in the next one.
        t.back(ib);
        t.received(ib, 3, 1);
        t.release(&[hb]);
        assert_eq!(t.region(&b).expect("read")[..3], [0, 0, 0]);
    }

    #[test]
    fn tables_grow_by_a_quarter_not_by_doubling() {
        let mut v: Vec<u64> = Vec::new();
        for i in 0..66 {
            reserve_gently(&mut v);
            v.push(i);
            assert!(v.capacity() >= v.len());
        }
        assert!(v.capacity() < 80, "capacity {}", v.capacity());
    }
}
