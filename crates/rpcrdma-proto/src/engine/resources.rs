//! The connection's RDMA resources: the work requests in flight (a slab
//! keyed by `wr_id`, each naming what it is for: [`Op`]), the receive
//! buffers (posted and pooled), the Send buffer pool and the chunk-sink
//! pool, the Send-queue backlog (WRs refused with QueueFull, posted in
//! order as the queue drains) and the zombies (regions whose
//! deregistration waits for a work request to let go of them).
//!
//! Nothing here knows calls, replies or directions; the orchestrator
//! (`super::connection`) routes each completed [`Op`] to its half.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::framing::DataHeader;
use super::marshal;
use super::{Metrics, Piece};
use crate::provider::{
    Access, Buffer, Bytes, MemoryRegion, Provider, ProviderError, RecvWr, SendOp, SendWr, Sges,
};

/// What a work request id stands for.
#[derive(Debug)]
pub(super) enum Op {
    /// A posted receive into this buffer.
    Recv(MemoryRegion),
    /// The Send of one of our calls (by XID).
    CallSend(u32),
    /// A Local Invalidate of one of our call's chunks (by XID).
    CallInv(u32),
    /// An RDMA Read of `len` octets for received call `handle`.
    Read {
        /// The call.
        handle: u64,
        /// Octets asked for.
        len: u32,
    },
    /// A Write or Send of one of our replies.
    Reply(u64),
    /// The Send of one of our replies that has no RDMA Write: its Send
    /// buffer, released on completion (no reply job).
    ReplySend(MemoryRegion),
    /// A Send whose buffer is freed on completion (error replies).
    Bare(MemoryRegion),
    /// The Send of our RDMA2_CONNPROP, its buffer freed on completion.
    Control(MemoryRegion),
}

/// The work requests in flight, by `wr_id`: a slab (no hashing, no
/// allocation once warm). A `wr_id` is the slot index in its low 32 bits
/// and the slot's generation, bumped at every use, in its high 32 bits, so
/// the id of a finished WR never names the slot's next occupant.
#[derive(Debug, Default)]
pub(super) struct WrSlab {
    slots: Vec<(u32, Option<Op>)>,
    free: Vec<u32>,
    len: usize,
}

impl WrSlab {
    /// Stores `op`; returns its `wr_id` (never 0).
    pub(super) fn insert(&mut self, op: Op) -> u64 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                crate::provider::memory::reserve_gently(&mut self.slots);
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let Some(slot) = self.slots.get_mut(idx as usize) else {
            // Not reachable: `idx` is a slot of this slab.
            return 0;
        };
        slot.0 = slot.0.wrapping_add(1).max(1);
        slot.1 = Some(op);
        self.len += 1;
        (u64::from(slot.0) << 32) | u64::from(idx)
    }

    /// Takes the op of `wr_id`, if it is in flight.
    pub(super) fn remove(&mut self, wr_id: u64) -> Option<Op> {
        let idx = wr_id as u32;
        let slot = self.slots.get_mut(idx as usize)?;
        if u64::from(slot.0) != wr_id >> 32 {
            return None;
        }
        let op = slot.1.take()?;
        self.free.push(idx);
        self.len -= 1;
        Some(op)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// The regions of one call's chunks: a small call (a Reply chunk, or one
/// Write chunk and a Reply chunk) keeps them inline, no heap allocation.
pub(super) type Mrs = SmallVec<[MemoryRegion; 2]>;

/// Send buffers kept registered for reuse.
const SEND_POOL_MAX: usize = 256;
/// Octets of (unregistered) chunk-sink buffers kept for reuse.
pub(super) const SINK_POOL_BYTES: usize = 32 << 20;
/// Octets of pooled buffers up to which the Read sink of a received call
/// goes back to the pool: the peer chooses the sizes of its Read chunks,
/// and what is pooled stays until the connection has been idle for
/// [`POOL_IDLE_TRIM`], so a server keeps at most this much per connection
/// beyond its Read-sink budgets: enough for 1 MiB WRITEs four in flight
/// (an NFS client's usual window; at 2 MiB, half of the sinks of a 256 MiB
/// `nfs put` at depth 4 were fresh buffers, zeroed and faulted in on the
/// reactor: BENCHMARKS.md, NFS).
pub(super) const READ_SINK_POOL_BYTES: usize = 4 << 20;
/// How long a connection keeps what bulk traffic left pooled (chunk-sink
/// buffers, Send buffers beyond the first) after its last bulk or
/// concurrent use: an idle connection holds no more than one call at
/// depth 1 needs (issue 18: an idle connection costs at most 64 KiB).
pub(super) const POOL_IDLE_TRIM: Duration = Duration::from_secs(2);

/// Buffers of deregistered chunk sinks, for the next calls' Write and
/// Reply chunks and Read sinks (see [`Res::sink_buffer`]). Shared with the
/// [`PooledSink`]s that carry Write-chunk results and received Read-chunk
/// data to the upper layer, which give their buffer back when dropped.
#[derive(Debug, Default)]
struct SinkPool {
    bufs: Vec<Box<[u8]>>,
    bytes: usize,
    /// The connection has failed: buffers given back are freed.
    closed: bool,
}

impl SinkPool {
    /// Keeps `buf` if the pool then holds at most `cap` octets.
    fn put(&mut self, buf: Box<[u8]>, cap: usize) {
        if !self.closed && !buf.is_empty() && self.bytes + buf.len() <= cap.min(SINK_POOL_BYTES) {
            self.bytes += buf.len();
            self.bufs.push(buf);
        }
    }

    /// A pooled buffer of exactly `len` octets.
    fn take(&mut self, len: usize) -> Option<Box<[u8]>> {
        let i = self.bufs.iter().rposition(|b| b.len() == len)?;
        let b = self.bufs.swap_remove(i);
        self.bytes -= b.len();
        Some(b)
    }
}

/// The buffer of a Write chunk or a Read sink whose registration has
/// ended, owned by the `Bytes` of a [`Reply`](super::Reply) result or of a
/// received call's message: nobody but the holders of that `Bytes` can
/// reach it. Dropped, it goes back to its connection's pool (if the
/// connection still exists).
struct PooledSink {
    buf: Box<[u8]>,
    pool: Weak<Mutex<SinkPool>>,
    /// The pool's size up to which the buffer is kept (see
    /// [`SinkPool::put`]).
    cap: usize,
}

impl AsRef<[u8]> for PooledSink {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledSink {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            let buf = std::mem::take(&mut self.buf);
            pool.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .put(buf, self.cap);
        }
    }
}

/// A copy of `wr` (kept in case the provider refuses it with QueueFull):
/// the SGE list copied as a slice, not element by element.
fn copy_wr(wr: &SendWr) -> SendWr {
    SendWr {
        wr_id: wr.wr_id,
        op: wr.op,
        sges: Sges::from_slice(&wr.sges),
    }
}

/// Octets of `header` followed by the inline part of `body` (the
/// message's pieces but the DDP pieces listed).
fn header_and_body_len(header: &DataHeader, body: Option<(&[Piece], &[usize])>) -> usize {
    header.len() + body.map_or(0, |(pieces, skip)| marshal::inline_len_except(pieces, skip))
}

/// Writes `header` and then the inline part of `body` into `d`, the
/// body's first word (the RPC XID) set to `xid` when given; returns the
/// octets written (all of `d` when it is
/// [`header_and_body_len`] long).
fn write_header_and_body(
    d: &mut [u8],
    header: &DataHeader,
    body: Option<(&[Piece], &[usize])>,
    xid: Option<u32>,
) -> usize {
    let h = header.write(d);
    let Some(rest) = d.get_mut(h..) else {
        return h;
    };
    let b = body.map_or(0, |(pieces, skip)| {
        marshal::write_except(pieces, skip, rest)
    });
    if let (Some(xid), Some(w)) = (xid, rest.get_mut(..4.min(b))) {
        if w.len() == 4 {
            w.copy_from_slice(&xid.to_be_bytes());
        }
    }
    h + b
}

/// The connection's RDMA resources (see the module docs).
#[derive(Debug)]
pub(super) struct Res {
    /// The work requests in flight.
    pub(super) ops: WrSlab,
    /// Receives posted.
    pub(super) recv_posted: usize,
    /// Registered receive buffers not posted.
    pub(super) recv_free: Vec<MemoryRegion>,
    /// Octets of every receive buffer.
    recv_size: usize,
    /// Send-queue WRs refused with QueueFull, posted in order as the queue
    /// drains. Never a call's Send: a refused call goes back to the call
    /// queue.
    pub(super) backlog: VecDeque<SendWr>,
    /// The provider refused a WR with QueueFull and no completion has let
    /// the engine retry yet (always set while `backlog` is not empty): no
    /// call is sent meanwhile.
    pub(super) send_queue_full: bool,
    /// Registered Send buffers of `send_size` octets, reused.
    pub(super) send_pool: Vec<MemoryRegion>,
    /// Octets of every pooled Send buffer.
    send_size: usize,
    /// Buffers of deregistered chunk sinks the responder left unused, for
    /// the next calls' Write and Reply chunks (see [`Res::sink_buffer`]).
    sink_pool: Arc<Mutex<SinkPool>>,
    /// Regions waiting to be deregistered (still held by a work request).
    pub(super) zombies: Vec<MemoryRegion>,
    /// The connection has failed: nothing is pooled any more.
    pub(super) closed: bool,
    /// A chunk sink was taken or a second Send buffer pooled since the last
    /// completion: [`Res::note_pool_use`] turns it into `trim_at`.
    pool_used: bool,
    /// When the pools are trimmed ([`Res::trim_pools`]) unless used again.
    pub(super) trim_at: Option<Instant>,
    /// Where small received messages are copied to (see [`super::arena`]).
    pub(super) received: super::arena::ReceivedArena,
}

impl Res {
    /// Resources of a connection whose Send buffers are `send_size` octets
    /// and receive buffers `recv_size`.
    pub(super) fn new(send_size: usize, recv_size: usize) -> Res {
        Res {
            ops: WrSlab::default(),
            recv_posted: 0,
            recv_free: Vec::new(),
            recv_size,
            backlog: VecDeque::new(),
            send_queue_full: false,
            send_pool: Vec::new(),
            send_size,
            sink_pool: Arc::default(),
            zombies: Vec::new(),
            closed: false,
            pool_used: false,
            trim_at: None,
            received: super::arena::ReceivedArena::default(),
        }
    }

    /// Octets of every receive buffer.
    pub(super) fn recv_size(&self) -> usize {
        self.recv_size
    }

    /// After a completion at `now`: if the pools were used for more than a
    /// depth-1 small call, they are trimmed [`POOL_IDLE_TRIM`] from now.
    #[inline]
    pub(super) fn note_pool_use(&mut self, now: Instant) {
        if self.pool_used {
            self.pool_used = false;
            self.trim_at = Some(now + POOL_IDLE_TRIM);
        }
    }

    /// The connection was idle for [`POOL_IDLE_TRIM`]: frees the pooled
    /// chunk-sink buffers and every pooled Send buffer but one. Buffers
    /// still held by upper layers come back to the pool later and arm no
    /// trim of their own (at most the pool caps stay).
    pub(super) fn trim_pools(&mut self, p: &mut dyn Provider) {
        self.trim_at = None;
        self.empty_sink_pool(false);
        self.received.release();
        while self.send_pool.len() > 1 {
            if let Some(mr) = self.send_pool.pop() {
                self.zombies.push(mr);
            }
        }
        self.reap(p);
    }

    pub(super) fn wr(&mut self, op: Op) -> u64 {
        self.ops.insert(op)
    }

    /// Posts a Send-queue WR that needs no credit (anything but a call's
    /// Send, see `send_call`), or keeps it (in order) while the queue is
    /// full.
    pub(super) fn post(
        &mut self,
        p: &mut dyn Provider,
        wr: SendWr,
        metrics: &mut Metrics,
    ) -> Result<(), ProviderError> {
        if !self.backlog.is_empty() {
            metrics.send_queue_waits += 1;
            self.backlog.push_back(wr);
            return Ok(());
        }
        match p.post_send(copy_wr(&wr)) {
            Err(ProviderError::QueueFull) => {
                metrics.send_queue_waits += 1;
                self.backlog.push_back(wr);
                self.send_queue_full = true;
                Ok(())
            }
            r => r,
        }
    }

    /// Posts the WRs kept back by [`Res::post`], in order, until the
    /// provider refuses one with QueueFull (`Ok(false)`: it stays first)
    /// or they are all taken (`Ok(true)`: the send queue is no longer
    /// known to be full).
    pub(super) fn drain_backlog(&mut self, p: &mut dyn Provider) -> Result<bool, ProviderError> {
        while let Some(wr) = self.backlog.pop_front() {
            match p.post_send(copy_wr(&wr)) {
                Ok(()) => {}
                Err(ProviderError::QueueFull) => {
                    self.backlog.push_front(wr);
                    return Ok(false);
                }
                Err(e) => {
                    self.backlog.push_front(wr);
                    return Err(e);
                }
            }
        }
        self.send_queue_full = false;
        Ok(true)
    }

    /// Posts receives (pooled buffers first, else new registrations of
    /// receive buffers the provider lends, which need hold no memory while
    /// nothing arrives: `Provider::register_recv`) until `target` are
    /// posted. A full receive queue stops it quietly: the
    /// grant is clamped to it (`clamp_grant`), so this only delays our own
    /// calls. Any other refusal is the caller's to handle (fatal).
    pub(super) fn post_receives(
        &mut self,
        p: &mut dyn Provider,
        target: usize,
    ) -> Result<(), ProviderError> {
        while self.recv_posted < target {
            let mr = match self.recv_free.pop() {
                Some(mr) => mr,
                None => p.register_recv(self.recv_size)?,
            };
            let sge = mr.sge(0, mr.len() as u32);
            let wr_id = self.wr(Op::Recv(mr));
            if let Err(e) = p.post_recv(RecvWr { wr_id, sge }) {
                self.ops.remove(wr_id);
                self.recv_free.push(mr);
                return match e {
                    ProviderError::QueueFull => Ok(()),
                    e => Err(e),
                };
            }
            self.recv_posted += 1;
        }
        Ok(())
    }

    pub(super) fn release(&mut self, p: &mut dyn Provider, mr: MemoryRegion) {
        // Local-only buffers of the pool size go back to the Send pool;
        // anything that was ever exposed remotely is deregistered.
        if !self.closed
            && mr.access() == Access::NONE
            && mr.len() == self.send_size as u64
            && self.send_pool.len() < SEND_POOL_MAX
        {
            self.pool_used |= !self.send_pool.is_empty();
            self.send_pool.push(mr);
            return;
        }
        // A chunk sink whose data nobody took (an unused Write chunk, the
        // Reply chunk, whose contents were copied out): the registration
        // ends here (its STag is dead for good), the buffer is kept for a
        // later call, which registers it afresh under a new STag.
        if !self.closed && mr.access().contains(Access::REMOTE_WRITE) {
            match p.deregister(&mr) {
                Ok(Buffer::Owned(buf)) => self.pool().put(buf, SINK_POOL_BYTES),
                Ok(Buffer::Shared(_)) => {}
                Err(_) => self.zombies.push(mr),
            }
            return;
        }
        if p.deregister(&mr).is_err() {
            self.zombies.push(mr);
        }
    }

    /// A buffer of `len` octets for a Write or Reply chunk, or for the
    /// sink of a received call's Read chunk: a pooled one of that size if
    /// there is one, else a new zeroed one. A pooled buffer is not cleared:
    /// it only ever held zeros or what this connection's peer placed in it
    /// (a result or a received call's chunk data handed out as `Bytes`
    /// comes back unchanged, and only once every clone is dropped, so
    /// nothing the upper layer still holds is ever reused), so nothing in
    /// it is new to the peer, which can never read a sink anyway (none is
    /// registered `REMOTE_READ`), and the upper layer only ever sees the
    /// octets the responder says it wrote for that call, or those the
    /// RDMA Reads of that call placed (a received call is delivered only
    /// once its Reads have all completed with every octet asked for). A
    /// fresh buffer of a size first seen costs its zeroing and its page
    /// faults; a pooled one neither. The pool dies with the connection
    /// (results returned later are freed).
    pub(super) fn sink_buffer(&mut self, len: usize) -> Vec<u8> {
        self.pool_used = true;
        match self.pool().take(len) {
            Some(b) => Vec::from(b),
            None => vec![0u8; len],
        }
    }

    /// The connection has failed: the pooled chunk-sink buffers are freed,
    /// and so are those given back later.
    pub(super) fn close_sink_pool(&mut self) {
        self.trim_at = None;
        self.empty_sink_pool(true);
    }

    /// Frees the pooled chunk-sink buffers (outside the lock); `close`:
    /// and those given back later.
    fn empty_sink_pool(&mut self, close: bool) {
        let freed = {
            let mut pool = self.pool();
            pool.closed |= close;
            pool.bytes = 0;
            std::mem::take(&mut pool.bufs)
        };
        drop(freed);
    }

    /// Octets of chunk-sink buffers pooled now.
    pub(super) fn pooled_sink_bytes(&self) -> usize {
        self.pool().bytes
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, SinkPool> {
        self.sink_pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The first `len` octets of a Write chunk whose STag has been
    /// invalidated, or of a Read sink whose Reads are all done, as `Bytes`:
    /// the chunk's buffer itself once deregistered
    /// (it goes back to the pool when the `Bytes` is dropped; `mr` is
    /// removed from `mrs` so it is not released twice), or, if the region
    /// cannot be deregistered yet (still held by a work request after a
    /// failure), a copy. Never more than the registered length. Dropped,
    /// the buffer goes back to the pool if the pool then holds at most
    /// `pool_cap` octets.
    pub(super) fn take_result(
        &mut self,
        p: &mut dyn Provider,
        mr: &MemoryRegion,
        len: usize,
        mrs: &mut Mrs,
        pool_cap: usize,
    ) -> Bytes {
        if len == 0 {
            return Bytes::new();
        }
        if len as u64 <= mr.len() {
            if let Ok(buf) = p.deregister(mr) {
                mrs.retain(|m| m != mr);
                return match buf {
                    Buffer::Owned(buf) if len <= buf.len() => Bytes::from_owner(PooledSink {
                        buf,
                        pool: Arc::downgrade(&self.sink_pool),
                        cap: pool_cap,
                    })
                    .slice(..len),
                    other => Bytes::copy_from_slice(other.get(..len).unwrap_or_default()),
                };
            }
        }
        p.region(mr)
            .ok()
            .and_then(|b| b.get(..len))
            .map(Bytes::copy_from_slice)
            .unwrap_or_default()
    }

    /// A registered buffer holding `msg`, and its length: a pooled buffer
    /// when the message fits (every inline message does), else a fresh
    /// registration.
    pub(super) fn message_buffer(
        &mut self,
        p: &mut dyn Provider,
        msg: &[u8],
    ) -> Result<(MemoryRegion, u32), ProviderError> {
        self.message_buffer_with(p, msg.len(), |d| {
            d.copy_from_slice(msg.get(..d.len()).unwrap_or_default());
            d.len()
        })
    }

    /// A registered Send buffer whose first `len` octets `fill` writes (it
    /// gets exactly `len` octets and must write every one of them: a
    /// pooled buffer still holds an earlier message; it returns how many
    /// it wrote), and the message length. A pooled buffer when `len` fits
    /// (every inline message does), else a fresh registration.
    pub(super) fn message_buffer_with(
        &mut self,
        p: &mut dyn Provider,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(MemoryRegion, u32), ProviderError> {
        let size = self.send_size;
        if len > size {
            let mut msg = vec![0u8; len];
            let n = fill(&mut msg).min(len);
            msg.truncate(n);
            let mr = p
                .register(msg.into_boxed_slice(), Access::NONE)
                .map_err(|e| e.error)?;
            return Ok((mr, n as u32));
        }
        let mr = match self.send_pool.pop() {
            Some(mr) => mr,
            None => p
                .register(vec![0u8; size].into_boxed_slice(), Access::NONE)
                .map_err(|e| e.error)?,
        };
        match p.region_mut(&mr) {
            Ok(buf) => {
                let n = buf.get_mut(..len).map_or(0, |d| fill(d).min(len));
                Ok((mr, n as u32))
            }
            Err(e) => {
                self.zombies.push(mr);
                Err(e)
            }
        }
    }

    /// A Send buffer holding `header` followed by `body` (see
    /// [`Res::message_buffer_with`]): the header is encoded straight
    /// into it, and so is the body, from the message's pieces, except the
    /// DDP pieces listed in `skip`. When `xid` is given, the body's first
    /// word (the RPC XID) is set to it.
    pub(super) fn header_and_body(
        &mut self,
        p: &mut dyn Provider,
        header: &DataHeader,
        body: Option<(&[Piece], &[usize])>,
        xid: Option<u32>,
    ) -> Result<(MemoryRegion, u32), ProviderError> {
        let len = header_and_body_len(header, body);
        self.message_buffer_with(p, len, |d| write_header_and_body(d, header, body, xid))
    }

    /// The same message as [`Res::header_and_body`] builds, written
    /// straight into the provider's staging memory as a staged Send `op`
    /// ([`Provider::post_send_staged`]): no Send buffer, no work request,
    /// no completion. `Ok(false)`: the provider did not take it, or WRs
    /// kept back in `backlog` must go first (nothing was queued): send it
    /// from a Send buffer.
    pub(super) fn stage_header_and_body(
        &mut self,
        p: &mut dyn Provider,
        op: SendOp,
        header: &DataHeader,
        body: Option<(&[Piece], &[usize])>,
        xid: Option<u32>,
    ) -> Result<bool, ProviderError> {
        if !self.backlog.is_empty() {
            // WRs kept back (QueueFull) go out first.
            return Ok(false);
        }
        let len = header_and_body_len(header, body);
        let mut fill = |d: &mut [u8]| {
            write_header_and_body(d, header, body, xid);
        };
        p.post_send_staged(op, len, &mut fill)
    }

    /// Retries deregistration of regions that were still held.
    #[inline]
    pub(super) fn reap(&mut self, p: &mut dyn Provider) {
        if !self.zombies.is_empty() {
            self.reap_slow(p);
        }
    }

    #[inline(never)]
    pub(super) fn reap_slow(&mut self, p: &mut dyn Provider) {
        let z = std::mem::take(&mut self.zombies);
        for mr in z {
            match p.deregister(&mr) {
                Ok(_) | Err(ProviderError::InvalidHandle) => {}
                Err(_) => self.zombies.push(mr),
            }
        }
    }

    pub(super) fn register(
        &mut self,
        p: &mut dyn Provider,
        data: Vec<u8>,
        access: Access,
        into: &mut Mrs,
    ) -> Result<MemoryRegion, ProviderError> {
        match p.register(data.into_boxed_slice(), access) {
            Ok(mr) => {
                into.push(mr);
                Ok(mr)
            }
            Err(e) => Err(e.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_read_sinks_are_pooled_only_up_to_their_cap() {
        // A peer choosing its Read chunks' sizes cannot make an idle
        // connection keep more than READ_SINK_POOL_BYTES of them.
        let pool = Arc::new(Mutex::new(SinkPool::default()));
        let sink = |len: usize, cap: usize| {
            Bytes::from_owner(PooledSink {
                buf: vec![0u8; len].into_boxed_slice(),
                pool: Arc::downgrade(&pool),
                cap,
            })
        };
        let held: Vec<Bytes> = (0..8)
            .map(|i| sink((1 << 20) - 4 * i, READ_SINK_POOL_BYTES))
            .collect();
        drop(held);
        let bytes = pool.lock().unwrap().bytes;
        assert!(bytes <= READ_SINK_POOL_BYTES, "{bytes}");
        assert_eq!(pool.lock().unwrap().bufs.len(), 4);
        // Write-chunk results keep the larger cap.
        drop(sink(1 << 20, SINK_POOL_BYTES));
        assert_eq!(pool.lock().unwrap().bufs.len(), 5);
        // A pooled buffer is handed out by exact size only.
        assert!(pool.lock().unwrap().take(1 << 20).is_some());
        assert!(pool.lock().unwrap().take(12345).is_none());
    }

    #[test]
    fn wr_ids_of_finished_work_requests_never_match_again() {
        let mut s = WrSlab::default();
        let a = s.insert(Op::CallSend(1));
        let b = s.insert(Op::CallSend(2));
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(s.len(), 2);
        assert!(matches!(s.remove(a), Some(Op::CallSend(1))));
        assert!(s.remove(a).is_none(), "removed once only");
        // The slot is reused under a new id; the old id stays dead.
        let c = s.insert(Op::CallSend(3));
        assert_eq!(c as u32, a as u32);
        assert_ne!(c, a);
        assert!(s.remove(a).is_none());
        assert!(s.remove(u64::MAX).is_none());
        assert!(matches!(s.remove(c), Some(Op::CallSend(3))));
        assert!(matches!(s.remove(b), Some(Op::CallSend(2))));
        assert_eq!(s.len(), 0);
    }
}
