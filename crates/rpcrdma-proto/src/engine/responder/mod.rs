//! The responder half of a connection: calls we received, from their
//! RDMA Reads to our reply. Direction-agnostic (RFC 8167): a server's
//! forward responder and a client's backchannel responder are the same
//! code; the backchannel one takes calls only after
//! `Connection::enable_backchannel`, refuses chunks and replies inline.
//!
//! - [`mod.rs`](self): the responder's state, a received call's state,
//!   the credit grant and the backchannel switch, the overrun rule, and
//!   what the connection's end does to received calls;
//! - `call`: a received call checked, staged for its RDMA Reads or (inline)
//!   delivered at once;
//! - `read`: the Read-sink budget, the RDMA Reads within the ORD, and the
//!   call reassembled and delivered once they are done;
//! - `reply`: the reply planned and posted (RDMA Writes, then the Send),
//!   error replies, and their completions.

use std::collections::VecDeque;
use std::task::Waker;
use std::time::Instant;

use super::budget::Lease;
use super::connection::{Connection, Direction};
use super::ids::IdMap;
use super::slab::Slab;
use super::timer::Deadlines;
use super::{Config, ConnectionError, PeerError};
use crate::provider::{Bytes, MemoryRegion, Provider};
use crate::wire::chunk::{Segment, WriteChunk, WriteList};
use smallvec::SmallVec;

mod call;
mod read;
mod reply;

/// The responder's state.
#[derive(Debug)]
pub(super) struct Responder {
    /// The direction of the calls we answer: reverse (a client's
    /// backchannel) means inline only, chunks refused, and calls taken only
    /// once `enable_backchannel` granted the slots.
    pub(super) direction: Direction,
    /// Receives for calls are posted: always for the forward responder,
    /// after `enable_backchannel` for the backchannel one.
    pub(super) enabled: bool,
    /// The credit grant we send in every reply: `Config::credits_granted`
    /// (clamped to the receive queue) for the forward responder, the
    /// backchannel slots for the backchannel one.
    pub(super) grant: u32,
    /// The largest grant this connection ever advertised: a requester may
    /// still be using it.
    pub(super) max_grant: u32,
    /// Calls received and not answered; a call's handle is its key here
    /// (stored once, found by its slot: no hashing per call). Boxed: a
    /// call moves into the table and out of it, and to `spare`, by its
    /// pointer. A handle is never reused (the next connection's table
    /// starts where this one stopped, see `Connection::reconnect`).
    pub(super) incoming: Slab<Box<InCall>>,
    /// The boxes of answered calls, emptied, for the next calls: no
    /// allocation per call. At most [`SPARE_CALLS`].
    // Boxes, not values: a box moves between the map and here.
    #[allow(clippy::vec_box)]
    pub(super) spare: Vec<Box<InCall>>,
    /// RDMA Reads of admitted calls, waiting for the ORD.
    pub(super) reads: VecDeque<PendingRead>,
    pub(super) reads_outstanding: usize,
    /// Octets of RDMA Read sinks registered now (at most
    /// `Limits::max_read_sink_bytes`).
    pub(super) sink_bytes: u64,
    /// Received calls waiting for Read-sink budget, in arrival order.
    pub(super) sink_waiting: VecDeque<u64>,
    /// This connection's part of the shared Read-sink budget
    /// (`Config::read_budget`; nothing without one).
    pub(super) lease: Lease,
    /// `(deadline, handle)` of the received calls whose RDMA Reads are
    /// issued and not all complete (`Config::read_timeout`), sorted.
    pub(super) read_deadlines: Deadlines<u64>,
    /// Until the peer's first valid call (`Config::idle_timeout`).
    pub(super) idle_deadline: Option<Instant>,
    /// Error replies whose Send has not completed.
    pub(super) errors_unacked: usize,
    /// Replies (not errors) whose Send has not completed: the requester
    /// cannot have received them yet (see `overrun`).
    pub(super) replies_unacked: usize,
    pub(super) next_job: u64,
    /// Replies with RDMA Writes whose work requests have not all
    /// completed.
    pub(super) jobs: IdMap<u64, ReplyJob>,
}

impl Responder {
    /// The responder to calls in `direction`.
    pub(super) fn new(config: &Config, direction: Direction) -> Responder {
        let grant = match direction {
            Direction::Forward => config.credits_granted.max(1),
            Direction::Reverse => config.backchannel_slots.max(1),
        };
        Responder {
            direction,
            enabled: direction == Direction::Forward,
            grant,
            max_grant: grant,
            incoming: Slab::default(),
            spare: Vec::new(),
            reads: VecDeque::new(),
            reads_outstanding: 0,
            sink_bytes: 0,
            sink_waiting: VecDeque::new(),
            lease: Lease::new(config.read_budget.clone()),
            read_deadlines: Deadlines::default(),
            idle_deadline: None,
            errors_unacked: 0,
            replies_unacked: 0,
            next_job: 1,
            jobs: IdMap::default(),
        }
    }

    /// A box for an inline call (no Read chunks, `Delivered`): a spare
    /// one refilled field by field, or a new one.
    pub(super) fn inline_call(
        &mut self,
        xid: u32,
        writes: WriteList,
        reply: Option<WriteChunk>,
        inv: Option<u32>,
    ) -> Box<InCall> {
        match self.spare.pop() {
            Some(mut c) => {
                debug_assert!(c.base.is_empty() && c.chunks.is_empty());
                c.xid = xid;
                c.long = false;
                c.pz = None;
                c.state = InState::Delivered;
                c.sink_need = 0;
                c.writes = writes;
                c.reply = reply;
                c.inv = inv;
                c
            }
            None => Box::new(InCall {
                xid,
                long: false,
                base: Bytes::new(),
                pz: None,
                chunks: Vec::new(),
                state: InState::Delivered,
                sink_need: 0,
                writes,
                reply,
                inv,
            }),
        }
    }

    /// Keeps the box of an answered call for the next one, emptied now.
    pub(super) fn recycle(&mut self, mut c: Box<InCall>) {
        if self.spare.len() < SPARE_CALLS {
            c.base = Bytes::new();
            // Emptied in place (their capacity kept: bounded by the
            // limits on chunks per call), nothing dropped when empty.
            c.chunks.clear();
            c.writes.clear();
            if c.reply.is_some() {
                c.reply = None;
            }
            c.state = InState::Delivered;
            self.spare.push(c);
        }
    }

    /// The calls we answer are backchannel calls (reverse direction).
    #[inline]
    pub(super) fn backchannel(&self) -> bool {
        self.direction == Direction::Reverse
    }

    /// Receives to keep posted for calls: the grant, once enabled.
    #[inline]
    pub(super) fn budget(&self) -> usize {
        if self.enabled {
            self.grant as usize
        } else {
            0
        }
    }
}

/// Boxes of answered calls kept for the next calls, per responder.
const SPARE_CALLS: usize = 16;

#[derive(Debug)]
pub(super) struct ReadChunk {
    position: u32,
    len: usize,
    sink: Option<MemoryRegion>,
    /// The chunk's data once its Reads are done: the sink buffer itself.
    data: Bytes,
}

/// A call we received.
#[derive(Debug)]
pub(super) struct InCall {
    xid: u32,
    state: InState,
    /// A Long Call (its message in a Position-Zero Read chunk).
    long: bool,
    /// The inline message of an RDMA_MSG call with Read chunks (their data
    /// goes in at their positions).
    base: Bytes,
    /// Index of the Position-Zero Read chunk in `chunks`.
    pz: Option<usize>,
    chunks: Vec<ReadChunk>,
    /// Octets of Read sinks the call needs.
    sink_need: u64,
    /// The Write chunks and Reply chunk the requester offered for the
    /// reply.
    writes: WriteList,
    reply: Option<WriteChunk>,
    /// The handle a reply may invalidate remotely (see
    /// `framing::invalidation_handle`).
    inv: Option<u32>,
}

/// Where a received call stands: `Waiting` → `Reading` → `Delivered`,
/// then answered (and forgotten); a call without Read chunks is
/// `Delivered` at once. A call refused on the way (ERR_CHUNK) is
/// forgotten at once.
#[derive(Debug)]
pub(super) enum InState {
    /// In `Responder::sink_waiting`, waiting for Read-sink budget; the
    /// RDMA Reads to issue once it is admitted.
    Waiting { reads: Vec<PendingRead> },
    /// Admitted: its sinks are registered and counted in the budgets (this
    /// connection's `sink_bytes`, the shared lease); `reads_left` of its
    /// RDMA Reads (issued, or queued for the ORD) still to complete.
    Reading { reads_left: usize },
    /// Handed to the upper layer (`Event::CallReceived`): waiting for its
    /// reply.
    Delivered,
}

#[derive(Debug)]
pub(super) struct PendingRead {
    handle: u64,
    chunk: usize,
    seg: Segment,
    sink_offset: u64,
}

#[derive(Debug)]
pub(super) struct ReplyJob {
    mrs: SmallVec<[MemoryRegion; 1]>,
    /// Shared read-only sources (the DDP pieces, the Long Reply's inline
    /// part): deregistered when the job is done, never pooled.
    shared: Vec<MemoryRegion>,
    pending: usize,
}

impl Connection {
    /// Changes the grant we send as forward responder (server; Linux keeps
    /// it static). Zero is treated as one.
    //= rfc8166#section-3.3.1
    //# The granted value MUST NOT be zero, since such a value
    //# would result in deadlock.
    // (Linux clients also floor a zero grant to one.)
    //= rfc8166#section-3.3.1
    //# The Responder MUST
    //# ensure that an increase in receive resources is effected before the
    //# next RPC Reply message is sent.
    ///
    /// Receives for a larger grant are posted here, before any reply
    /// advertises it.
    pub fn set_credit_grant(&mut self, p: &mut dyn Provider, credits: u32) {
        // (A client's grant is its backchannel slots, see
        // `enable_backchannel`.)
        if !self.resp.backchannel() {
            self.resp.grant = credits.max(1);
            self.clamp_grant(p);
            self.resp.max_grant = self.resp.max_grant.max(self.resp.grant);
        }
        self.refill(p);
    }

    /// Gives the waker to wake when this connection can move for a reason
    /// outside it: another connection gave back part of the shared
    /// Read-sink budget (`Config::read_budget`) this one waits for. Then
    /// call [`Connection::handle_read_budget`]. Cheap when unchanged.
    pub fn set_waker(&mut self, waker: &Waker) {
        self.resp.lease.set_waker(waker);
    }

    /// True while a received call waits for the shared Read-sink budget
    /// (a blocking driver must then stay wakeable by the waker).
    pub fn waits_for_read_budget(&self) -> bool {
        self.resp.lease.waiting()
    }

    /// Retries the calls waiting for the shared Read-sink budget (after
    /// the waker of [`Connection::set_waker`] was woken); true if one was
    /// admitted (its Reads issued).
    pub fn handle_read_budget(&mut self, now: Instant, p: &mut dyn Provider) -> bool {
        if self.error.is_some() || !self.resp.lease.waiting() {
            return false;
        }
        let waiting = self.resp.sink_waiting.len();
        self.admit_waiting(now, p);
        self.resp.sink_waiting.len() != waiting
    }

    /// Client: accept backchannel calls, granting `slots` credits; posts
    /// their receives (never before this call).
    //= rfc8167#section-4.3.1
    //# To receive incoming reverse-direction Calls, an RPC-over-RDMA client
    //# endpoint posts enough additional Receive buffers to match its
    //# advertised reverse-direction credit value.
    // They are posted here, before any reply can advertise the grant.
    pub fn enable_backchannel(&mut self, p: &mut dyn Provider, slots: u32) {
        if !self.resp.backchannel() {
            return;
        }
        self.config.backchannel_slots = slots.max(1);
        // Nothing was granted before: the grant is the slots.
        self.resp.grant = slots.max(1);
        self.resp.max_grant = slots.max(1);
        self.resp.enabled = true;
        self.refill(p);
    }

    /// A server never grants more than its receive queue holds.
    pub(super) fn clamp_grant(&mut self, p: &mut dyn Provider) {
        if !self.resp.backchannel() {
            let room = p
                .caps()
                .max_recv_wr
                .saturating_sub(self.config.backchannel_slots)
                .max(1);
            self.resp.grant = self.resp.grant.min(room);
        }
    }

    /// The XID of received call `handle` (0 if there is none).
    pub(super) fn incoming_xid(&self, handle: u64) -> u32 {
        self.resp.incoming.get(handle).map_or(0, |c| c.xid)
    }

    /// A requester may still use the largest grant we ever advertised;
    /// more than twice that many requests unacknowledged (calls not
    /// answered, replies and error replies whose Send has not completed)
    /// is a protocol violation, and ends the connection. This also bounds
    /// what a hostile requester makes us hold: pending calls and queued
    /// replies (a peer that sends calls but never reads the answers).
    //= rfc8166#section-3.3.1
    //# A Requester MUST NOT send unacknowledged requests in excess of the
    //# Responder's granted credit limit.
    pub(super) fn overrun(&mut self, p: &mut dyn Provider) -> bool {
        let grant = self.resp.grant.max(self.resp.max_grant) as usize;
        // Staged replies (no completion of their own) count while the
        // provider says a registered Send would still be outstanding.
        let unacked = self.resp.incoming.len()
            + self.resp.errors_unacked
            + self.resp.replies_unacked
            + p.staged_outstanding();
        if unacked < grant.saturating_mul(2) {
            return false;
        }
        self.fatal(
            p,
            ConnectionError::Peer(PeerError::CreditOverrun {
                outstanding: unacked + 1,
                granted: grant as u32,
            }),
        );
        true
    }

    /// The connection ended: received calls, their Read sinks and Reads,
    /// their place in the Read-sink budget, and the reply jobs are
    /// dropped (their regions become zombies).
    pub(super) fn drop_incoming(&mut self) {
        for (_, mut c) in self.resp.incoming.drain() {
            for rc in &mut c.chunks {
                self.res.zombies.extend(rc.sink.take());
            }
        }
        self.resp.reads.clear();
        self.resp.sink_waiting.clear();
        self.resp.sink_bytes = 0;
        // The sinks are released (their registrations end as the provider
        // flushes the disconnected connection's work): so is their share
        // of the shared budget, and this connection's place in its queue.
        self.resp.lease.release_all();
        self.resp.read_deadlines.clear();
        self.resp.idle_deadline = None;
        for (_, j) in std::mem::take(&mut self.resp.jobs) {
            self.res.zombies.extend(j.mrs);
            self.res.zombies.extend(j.shared);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(n: u32) -> WriteList {
        (0..n % 3)
            .map(|i| WriteChunk::single(Segment::new(n + i, 64 * n, u64::from(i))))
            .collect()
    }

    #[test]
    fn a_recycled_call_box_refilled_is_a_new_inline_call() {
        // A call that went through Reads (base, chunks, Waiting), recycled,
        // then refilled for an inline call: exactly what a fresh box holds.
        let config = Config::server();
        let mut resp = Responder::new(&config, Direction::Forward);
        let mut fresh = Responder::new(&config, Direction::Forward);
        for n in 0..6u32 {
            let mut used = resp.inline_call(n + 100, writes(n + 1), None, Some(n));
            used.long = true;
            used.base = Bytes::from(vec![1; 40]);
            used.pz = Some(0);
            used.chunks.push(ReadChunk {
                position: 0,
                len: 8,
                sink: None,
                data: Bytes::from_static(&[1; 8]),
            });
            used.state = InState::Waiting { reads: Vec::new() };
            used.sink_need = 8;
            resp.recycle(used);
            assert_eq!(resp.spare.len(), 1);
            let reply = (n % 2 == 0).then(|| WriteChunk::single(Segment::new(9, 9, 9)));
            let inv = (n % 3 == 0).then_some(n);
            let refilled = resp.inline_call(n, writes(n), reply.clone(), inv);
            assert!(resp.spare.is_empty(), "the spare box is reused");
            let new = fresh.inline_call(n, writes(n), reply, inv);
            assert_eq!(format!("{refilled:?}"), format!("{new:?}"));
        }
    }
}
