//! The requester half of a connection: our calls, from queued to done.
//! Direction-agnostic (RFC 8167): a client's forward requester and a
//! server's backchannel requester are the same code; the backchannel one
//! sends inline only and offers no reply chunks (see `Direction`).
//!
//! - [`mod.rs`](self): the requester's state, a call's state, starting a
//!   call, the credit-limited queue, the reply deadlines, and what the
//!   connection's end does to our calls;
//! - `send`: marshalling a call (its plan, its chunks' registration, its
//!   Send buffer) and posting its Send;
//! - `reply`: a reply matched to its call, checked against what the call
//!   offered, the chunks invalidated, and the call completed.

use std::collections::VecDeque;
use std::time::Instant;

use super::connection::{Connection, Direction};
use super::ids::IdMap;
use super::plan::Reform;
use super::resources::Mrs;
use super::timer::Deadlines;
use super::{
    CallError, CallFailure, CallId, Config, ConnectionError, Event, Message, OutgoingCall, Piece,
};
use crate::provider::{MemoryRegion, Provider};

mod reply;
mod retry;
mod send;

/// The requester's state.
#[derive(Debug)]
pub(super) struct Requester {
    /// The direction of our calls: reverse (a server's backchannel calls)
    /// means inline calls only, no reply resources.
    pub(super) direction: Direction,
    /// Credits we request in every call: `Config::credits_requested`
    /// (forward), `Config::backchannel_slots` (reverse).
    pub(super) requested: u32,
    /// Calls we may have outstanding (the peer's last grant, clamped).
    pub(super) credits: u32,
    pub(super) next_xid: u32,
    pub(super) next_id: u64,
    /// Calls waiting for a credit (or the connection, or room in the send
    /// queue), in order.
    pub(super) queue: VecDeque<Box<OutCall>>,
    /// Our calls sent and not finished, by XID. Boxed, here and in the
    /// queue: a call is some 400 octets, moved (a `memcpy` each) into the
    /// map and out of it on every call otherwise. The XIDs of sent calls
    /// are distinct (see `send_call`); a call whose reply has arrived
    /// ([`CallState::Replied`]) stays here until its Send and invalidations
    /// complete, and no longer matches a received reply.
    pub(super) calls: IdMap<u32, Box<OutCall>>,
    /// Calls sent (their Send taken by the provider) and not answered.
    pub(super) outstanding: usize,
    /// `(deadline, XID)` of the calls sent with a deadline, sorted by
    /// deadline (ties in send order). The front is always a call still
    /// waiting for its reply (entries are dropped from the front as replies
    /// arrive; stale entries further back are compacted away), so the
    /// next timeout is read without scanning every call.
    pub(super) deadlines: Deadlines<u32>,
    /// Calls interrupted by the connection's end, for the next one.
    // Boxes, not values: a call moves between the queue, the map and these
    // by its pointer.
    #[allow(clippy::vec_box)]
    pub(super) retransmits: Vec<Box<OutCall>>,
    /// The boxes of finished calls, emptied (see [`OutCall::recycle`]),
    /// for the next calls: no allocation per call. At most
    /// [`SPARE_CALLS`].
    #[allow(clippy::vec_box)]
    pub(super) spare: Vec<Box<OutCall>>,
    /// A call went back to the queue after an error report asked for
    /// another form (`retry`): the queue is pumped after the completion
    /// that finished it.
    pub(super) requeued: bool,
}

impl Requester {
    /// The requester of calls in `direction`.
    pub(super) fn new(config: &Config, direction: Direction) -> Requester {
        Requester {
            direction,
            requested: match direction {
                Direction::Forward => config.credits_requested.max(1),
                Direction::Reverse => config.backchannel_slots.max(1),
            },
            credits: 1,
            next_xid: config.first_xid,
            next_id: 1,
            queue: VecDeque::new(),
            calls: IdMap::default(),
            outstanding: 0,
            deadlines: Deadlines::default(),
            retransmits: Vec::new(),
            spare: Vec::new(),
            requeued: false,
        }
    }

    /// A boxed call: a spare box refilled in place, or a new one.
    /// The wire XID of a new call: the caller's own (the first word of
    /// its message, where an RPC call has its XID) when it is not 0 and no
    /// call of ours on this connection, sent or queued, has it — a runtime
    /// that numbers its calls then gets each reply under its own XID, with
    /// nothing to rewrite; else the next of our own numbers that none has.
    /// Either way the XIDs of our unfinished calls stay distinct.
    pub(super) fn wire_xid(&mut self, m: &Message) -> u32 {
        let own = match m.pieces().first() {
            Some(Piece::Inline(b)) => b
                .get(..4)
                .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]])),
            _ => 0,
        };
        if own != 0 && !self.xid_in_use(own) {
            return own;
        }
        loop {
            let xid = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.xid_in_use(xid) {
                return xid;
            }
        }
    }

    /// A call of ours, sent or queued, has `xid`.
    fn xid_in_use(&self, xid: u32) -> bool {
        self.calls.contains_key(&xid) || self.queue.iter().any(|c| c.xid == xid)
    }

    pub(super) fn boxed(
        &mut self,
        id: CallId,
        xid: u32,
        call: OutgoingCall,
        retransmit: bool,
    ) -> Box<OutCall> {
        match self.spare.pop() {
            Some(mut b) => {
                b.refill(id, xid, call, retransmit);
                b
            }
            None => Box::new(OutCall::new(id, xid, call, retransmit)),
        }
    }

    /// Keeps the box of a finished call for the next one, its contents
    /// dropped now (the caller's message buffers are not pinned).
    pub(super) fn recycle(&mut self, mut call: Box<OutCall>) {
        if self.spare.len() < SPARE_CALLS {
            call.recycle();
            self.spare.push(call);
        }
    }

    /// Our calls are backchannel calls (reverse direction).
    #[inline]
    pub(super) fn backchannel(&self) -> bool {
        self.direction == Direction::Reverse
    }
}

/// Boxes of finished calls kept for the next calls, per requester (each
/// ~400 octets): enough for the replies one pass handles at depth 32.
const SPARE_CALLS: usize = 16;

/// What a reply brought, checked against the call's offer.
#[derive(Debug)]
pub(super) struct ReplyData {
    /// The RPC message that followed an RDMA_MSG header (empty for
    /// RDMA_NOMSG).
    inline: crate::provider::Bytes,
    /// Octets the responder wrote into each Write chunk we offered.
    write_lens: Vec<u32>,
    /// Octets it wrote into our Reply chunk (RDMA_NOMSG only).
    reply_len: Option<u32>,
}

/// Where one of our calls stands: `Queued` → `Sent` → `Replied` → `Done`
/// (and back to `Queued`, on the next connection, if the connection ends
/// before the reply).
#[derive(Debug)]
pub(super) enum CallState {
    /// In [`Requester::queue`] (or kept for retransmission): waiting for
    /// the connection, a credit, or room in the send queue.
    Queued,
    /// In [`Requester::calls`], its Send posted: waiting for the reply.
    /// `send_completed`: the Send's completion is in already (it may come
    /// after the reply, too).
    Sent { send_completed: bool },
    /// The reply (or an RDMA_ERROR, or a reply the call cannot use) is in;
    /// the call no longer matches a received message. It is done once its
    /// Send has completed and `invalidations` Local Invalidates of its
    /// chunks have (RFC 8166 section 4.4.1: nothing is delivered while the
    /// peer could still touch the call's memory).
    Replied {
        reply: Result<ReplyData, CallFailure>,
        send_completed: bool,
        invalidations: usize,
    },
    /// Its event is out (the reply delivered, or the failure reported);
    /// only its regions are left to release.
    Done,
}

impl CallState {
    /// Still waiting for its reply.
    #[inline]
    fn awaits_reply(&self) -> bool {
        matches!(self, CallState::Sent { .. })
    }

    /// Ready to be done: replied, its Send and invalidations complete.
    #[inline]
    fn is_complete(&self) -> bool {
        matches!(
            self,
            CallState::Replied {
                send_completed: true,
                invalidations: 0,
                ..
            }
        )
    }

    /// The Send's completion came in.
    fn send_completed(&mut self) {
        match self {
            CallState::Sent { send_completed } | CallState::Replied { send_completed, .. } => {
                *send_completed = true
            }
            CallState::Queued | CallState::Done => {}
        }
    }

    /// A Local Invalidate of one of the chunks completed.
    fn invalidated(&mut self) {
        if let CallState::Replied { invalidations, .. } = self {
            *invalidations = invalidations.saturating_sub(1);
        }
    }

    /// The reply is in; `invalidations` Local Invalidates were posted.
    fn replied(&mut self, reply: Result<ReplyData, CallFailure>, invalidations: usize) {
        if let CallState::Sent { send_completed } = *self {
            *self = CallState::Replied {
                reply,
                send_completed,
                invalidations,
            };
        }
    }

    /// `Done`: the reply, if it is in, taken.
    fn finish(&mut self) -> Option<Result<ReplyData, CallFailure>> {
        match std::mem::replace(self, CallState::Done) {
            CallState::Replied { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

/// One of our calls.
#[derive(Debug)]
pub(super) struct OutCall {
    id: CallId,
    xid: u32,
    call: OutgoingCall,
    retransmit: bool,
    /// Every chunk region (Read, Write, Reply chunks), for invalidation.
    chunk_mrs: Mrs,
    write_mrs: Mrs,
    reply_mr: Option<MemoryRegion>,
    /// The Send buffer (header and inline part), `send_len` octets: set
    /// once the call is marshalled and its chunks registered. A queued call
    /// that has one was refused by a full send queue; it goes out as it is.
    send_mr: Option<MemoryRegion>,
    send_len: u32,
    state: CallState,
    /// The reply deadline of its last transmission.
    deadline: Option<Instant>,
    /// Connections it was sent on.
    transmissions: u32,
    /// Of those, the ones that ended in this call's own timeout (see
    /// [`Config::max_transmissions`]).
    timeouts: u32,
    /// The form version 2 error reports asked for (see `retry`).
    reform: Reform,
    /// Times it was sent again after such a report (bounded).
    reforms: u8,
    /// Sent as a Long Call (its last marshalling).
    long: bool,
    /// An error report asked for another form: once its regions are
    /// released, the call goes back to the front of the queue in it.
    retry: Option<Reform>,
}

impl OutCall {
    pub(super) fn new(id: CallId, xid: u32, call: OutgoingCall, retransmit: bool) -> Self {
        OutCall {
            id,
            xid,
            call,
            retransmit,
            chunk_mrs: Mrs::new(),
            write_mrs: Mrs::new(),
            reply_mr: None,
            send_mr: None,
            send_len: 0,
            state: CallState::Queued,
            deadline: None,
            transmissions: 0,
            timeouts: 0,
            reform: Reform::NONE,
            reforms: 0,
            long: false,
            retry: None,
        }
    }

    /// Refills a recycled box as [`OutCall::new`] builds a call, field by
    /// field (no ~400-octet temporary moved in).
    fn refill(&mut self, id: CallId, xid: u32, call: OutgoingCall, retransmit: bool) {
        debug_assert!(self.chunk_mrs.is_empty() && self.write_mrs.is_empty());
        debug_assert!(self.send_mr.is_none() && self.reply_mr.is_none());
        self.id = id;
        self.xid = xid;
        self.call = call;
        self.retransmit = retransmit;
        self.send_len = 0;
        self.state = CallState::Queued;
        self.deadline = None;
        self.transmissions = 0;
        self.timeouts = 0;
        self.reform = Reform::NONE;
        self.reforms = 0;
        self.long = false;
        self.retry = None;
    }

    /// Empties a finished call for [`OutCall::refill`]: its message and
    /// regions dropped (its regions are released already).
    fn recycle(&mut self) {
        self.call = OutgoingCall::default();
        self.chunk_mrs.clear();
        self.write_mrs.clear();
        self.reply_mr = None;
        self.send_mr = None;
        self.state = CallState::Done;
    }

    /// Every region of the call (chunks, then the Send buffer), taken.
    pub(super) fn all_mrs(&mut self) -> impl Iterator<Item = MemoryRegion> {
        self.write_mrs.clear();
        self.reply_mr = None;
        std::mem::take(&mut self.chunk_mrs)
            .into_iter()
            .chain(self.send_mr.take())
    }
}

impl Requester {
    /// The requester of the next connection takes over the XID and id
    /// counters of `old` and its interrupted calls, queued again in order.
    pub(super) fn carry_over(&mut self, old: &mut Requester) {
        self.next_xid = old.next_xid;
        self.next_id = old.next_id;
        for c in old.retransmits.drain(..) {
            let mut oc = Box::new(OutCall::new(c.id, c.xid, c.call, c.retransmit));
            oc.transmissions = c.transmissions;
            oc.timeouts = c.timeouts;
            oc.reform = c.reform;
            oc.reforms = c.reforms;
            self.queue.push_back(oc);
        }
    }
}

/// True when every run of consecutive inline pieces of `pieces` is a
/// multiple of four octets long.
fn inline_runs_aligned(pieces: &[Piece]) -> bool {
    let mut run = 0usize;
    for p in pieces {
        match p {
            Piece::Inline(b) => run += b.len(),
            _ if !run.is_multiple_of(4) => return false,
            Piece::Ddp(_) | Piece::File(_) => run = 0,
        }
    }
    run.is_multiple_of(4)
}

impl Connection {
    /// Starts a call (a forward call at a client, a backchannel call at a
    /// server). It is queued until the connection is established and a
    /// credit is free.
    pub fn start_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        mut call: OutgoingCall,
    ) -> Result<CallId, CallError> {
        if let Some(e) = &self.error {
            return Err(CallError::Closed(e.clone()));
        }
        // A call's DDP data goes in Read chunks, read by the peer from
        // registered memory: file pieces are read here.
        if call.message.has_files() && call.message.materialize_files().is_err() {
            return Err(CallError::BadMessage("a file piece could not be read"));
        }
        match call.message.pieces().first() {
            Some(Piece::Inline(b)) if b.len() >= 8 => {}
            _ => {
                return Err(CallError::BadMessage(
                    "the first piece must be inline and hold the RPC header",
                ))
            }
        }
        //= rfc8166#section-3.4.5
        //# The value in this field
        //# MUST be a multiple of four.
        // Read chunk positions are offsets in the XDR stream: every run of
        // inline pieces must be whole XDR items, so every DDP item starts
        // aligned.
        if !inline_runs_aligned(call.message.pieces()) {
            return Err(CallError::BadMessage(
                "inline pieces must be whole XDR items (multiples of four octets)",
            ));
        }
        let len: usize = call.message.pieces().iter().map(Piece::xdr_len).sum();
        let max = self.config.limits.max_message_len as usize;
        if len > max {
            return Err(CallError::TooLarge { len, max });
        }
        // Reply buffers are allocated from these: bounded like messages.
        let biggest = call
            .ddp_results
            .iter()
            .copied()
            .chain([call.reply_max])
            .max()
            .unwrap_or(0) as usize;
        if biggest > max {
            return Err(CallError::TooLarge { len: biggest, max });
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.2
        //# The value RDMA2_RVREQSUP_NONE indicates that receipt of reverse
        //# direction requests and replies is not supported.
        if self.req.backchannel() && self.setup.peer_refuses_reverse_requests() {
            return Err(CallError::BadMessage(
                "the peer's Reverse Request Support is NONE: it takes no reverse calls",
            ));
        }
        if self.req.backchannel() && !self.params().reverse_chunks {
            //= rfc8167#section-4.2
            //# Forward- and reverse-direction operation on the same connection share
            //# the same Receive buffers.
            // This implementation carries reverse-direction messages inline
            // only (no chunks: RFC 8167 section 5.3 leaves chunk use to the
            // ULB, and the NFSv4.1 backchannel needs none), so a reverse call
            // larger than the inline threshold cannot be sent at all.
            let thr = self.params().send_threshold;
            let need = self.params().framing.min_msg_header_len() + len;
            if need > thr {
                return Err(CallError::TooLarge {
                    len: need,
                    max: thr,
                });
            }
        }
        if self.req.queue.len() >= self.config.max_queued {
            return Err(CallError::QueueFull);
        }
        let id = CallId(self.req.next_id);
        self.req.next_id += 1;
        let xid = self.req.wire_xid(&call.message);
        let call = self.req.boxed(id, xid, call, false);
        if self.req.queue.is_empty() && self.can_send() {
            // What `pump` would do with the call at the front of an empty
            // queue, without moving it through the queue.
            self.send_call(now, p, call);
        } else {
            self.req.queue.push_back(call);
            self.pump(now, p);
        }
        // `pump` takes calls from the front only: still queued, the call is
        // at the back. (A wait for the send queue is a `send_queue_waits`.)
        if self.req.queue.back().is_some_and(|c| c.id == id) && !self.res.send_queue_full {
            self.metrics.credit_waits += 1;
        }
        Ok(id)
    }

    /// Gives up the calls kept for retransmission (instead of
    /// [`Connection::reconnect`]): `(id, xid, call)`.
    pub fn take_retransmits(&mut self) -> Vec<(CallId, u32, OutgoingCall)> {
        self.req
            .retransmits
            .drain(..)
            .map(|c| (c.id, c.xid, c.call))
            .collect()
    }

    /// The earliest deadline of our calls waiting for their replies.
    pub(super) fn call_deadline(&self) -> Option<Instant> {
        let (d, xid) = self.req.deadlines.front()?;
        if self.waits_for(xid, d) {
            return Some(d);
        }
        // Not expected (the front is kept pending): the full scan.
        self.req
            .calls
            .values()
            .filter(|c| c.state.awaits_reply())
            .filter_map(|c| c.deadline)
            .min()
    }

    /// Call `xid` still waits for its reply, with deadline `d`.
    pub(super) fn waits_for(&self, xid: u32, d: Instant) -> bool {
        self.req
            .calls
            .get(&xid)
            .is_some_and(|c| c.state.awaits_reply() && c.deadline == Some(d))
    }

    /// The calls whose own deadline passed count a timed-out transmission
    /// (the others were cut short by it).
    pub(super) fn count_timeouts(&mut self, now: Instant) {
        for c in self.req.calls.values_mut() {
            if c.state.awaits_reply() && c.deadline.is_some_and(|d| d <= now) {
                c.timeouts += 1;
            }
        }
    }

    /// Records a sent call's deadline, keeping `deadlines` sorted.
    pub(super) fn add_deadline(&mut self, d: Instant, id: u32) {
        self.req.deadlines.insert(d, id);
        // Stale entries (answered calls behind a pending front) are
        // bounded: compacted once they outnumber the calls.
        if self.req.deadlines.len() > 2 * self.req.calls.len() + 64 {
            let calls = &self.req.calls;
            self.req.deadlines.retain(|d, id| {
                calls
                    .get(&id)
                    .is_some_and(|c| c.state.awaits_reply() && c.deadline == Some(d))
            });
        }
    }

    /// Drops answered calls from the front of `deadlines`; call `answered`
    /// (an XID, just answered) is known not to wait any more.
    pub(super) fn trim_deadlines(&mut self, answered: u32) {
        while let Some((d, id)) = self.req.deadlines.front() {
            if id != answered && self.waits_for(id, d) {
                break;
            }
            self.req.deadlines.pop_front();
        }
    }

    pub(super) fn pump(&mut self, now: Instant, p: &mut dyn Provider) {
        //= rfc8166#section-3.3.1
        //# A Requester MUST NOT send unacknowledged requests in excess of the
        //# Responder's granted credit limit.
        while self.can_send() {
            let Some(call) = self.req.queue.pop_front() else {
                break;
            };
            self.send_call(now, p, call);
        }
    }

    /// A call may be sent now (connection up, a credit free, the send
    /// queue not known to be full).
    pub(super) fn can_send(&self) -> bool {
        self.setup.is_ready()
            && self.error.is_none()
            && !self.res.send_queue_full
            && self.req.outstanding < self.req.credits as usize
    }

    /// The connection ended with `err`: calls whose reply arrived complete
    /// now (the peer can no longer touch their memory); the others fail,
    /// kept for retransmission on the next connection unless they have
    /// used up their transmissions.
    pub(super) fn fail_calls(&mut self, p: &mut dyn Provider, err: &ConnectionError) {
        // In call order (the order they were started).
        let mut calls: Vec<Box<OutCall>> =
            std::mem::take(&mut self.req.calls).into_values().collect();
        calls.sort_by_key(|c| c.id);
        self.req.deadlines.clear();
        self.req.outstanding = 0;
        for mut call in calls {
            if let Some(reply) = call.state.finish() {
                let ev = self.finish(p, &mut call, reply);
                self.events.push_back(ev);
                self.res.zombies.extend(call.all_mrs());
                continue;
            }
            self.res.zombies.extend(call.all_mrs());
            if self
                .config
                .max_transmissions
                .is_some_and(|m| call.timeouts >= m)
            {
                // Sent on as many connections as allowed: the peer never
                // answered (Linux: the major timeout, rpc_check_timeout).
                self.events.push_back(Event::CallFailed {
                    id: call.id,
                    xid: call.xid,
                    error: CallFailure::NoReply {
                        transmissions: call.transmissions,
                        timeouts: call.timeouts,
                        last: err.clone(),
                    },
                    retransmit: false,
                });
                continue;
            }
            // It was sent: sending it again is a retransmission.
            call.retransmit = true;
            self.keep_for_retransmission(call, err);
        }
        for mut call in std::mem::take(&mut self.req.queue) {
            // (A call refused by a full send queue has its regions.)
            self.res.zombies.extend(call.all_mrs());
            self.keep_for_retransmission(call, err);
        }
        self.req.retransmits.sort_by_key(|c| c.id);
    }

    /// `call` (its regions given up) fails with the connection's end `err`
    /// and is kept, `Queued`, for the next connection.
    fn keep_for_retransmission(&mut self, mut call: Box<OutCall>, err: &ConnectionError) {
        call.state = CallState::Queued;
        if let ConnectionError::VersionRefused { .. } = err {
            // No connection to this peer will take it (a version 2 only
            // end against a version 1 server): it fails for good.
            self.events.push_back(Event::CallFailed {
                id: call.id,
                xid: call.xid,
                error: CallFailure::ConnectionLost(err.clone()),
                retransmit: false,
            });
            return;
        }
        self.events.push_back(Event::CallFailed {
            id: call.id,
            xid: call.xid,
            error: CallFailure::ConnectionLost(err.clone()),
            retransmit: true,
        });
        self.req.retransmits.push(call);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    fn outgoing(n: u8) -> OutgoingCall {
        OutgoingCall {
            message: Message::inline(vec![n; 8 + 4 * usize::from(n)]),
            reply_max: u32::from(n) * 100,
            ddp_results: vec![u32::from(n); usize::from(n % 3)],
        }
    }

    #[test]
    fn a_recycled_call_box_refilled_is_a_new_call() {
        // A used call in every field a call's life sets, recycled, then
        // refilled: exactly what `OutCall::new` builds (the fast path
        // against the general one), nothing of the old call left.
        let config = Config::client();
        let mut req = Requester::new(&config, Direction::Forward);
        for (n, retransmit) in [(0u8, false), (1, true), (5, false), (7, true)] {
            let mut used = req.boxed(CallId(90 + u64::from(n)), 7, outgoing(n + 1), !retransmit);
            used.send_len = 99;
            used.state = CallState::Replied {
                reply: reply(),
                send_completed: true,
                invalidations: 0,
            };
            let _ = used.state.finish();
            used.state = CallState::Sent {
                send_completed: true,
            };
            used.deadline = Some(Instant::now());
            used.transmissions = 3;
            used.timeouts = 2;
            used.reform = Reform {
                long: true,
                no_writes: true,
                reply_chunk: true,
            };
            used.reforms = 4;
            used.long = true;
            used.retry = Some(Reform::NONE);
            req.recycle(used);
            assert_eq!(req.spare.len(), 1);
            let fresh = OutCall::new(CallId(u64::from(n)), u32::from(n), outgoing(n), retransmit);
            let refilled = req.boxed(CallId(u64::from(n)), u32::from(n), outgoing(n), retransmit);
            assert!(req.spare.is_empty(), "the spare box is reused");
            assert_eq!(format!("{refilled:?}"), format!("{fresh:?}"));
        }
    }

    #[test]
    fn spare_call_boxes_are_bounded() {
        let config = Config::client();
        let mut req = Requester::new(&config, Direction::Forward);
        for i in 0..(SPARE_CALLS as u64 + 10) {
            req.recycle(Box::new(OutCall::new(CallId(i), 0, outgoing(2), false)));
        }
        assert_eq!(req.spare.len(), SPARE_CALLS);
        // A recycled box holds no message (the caller's buffers are free).
        assert!(req
            .spare
            .iter()
            .all(|c| c.call.message.pieces().is_empty() && c.call.ddp_results.is_empty()));
    }

    fn reply() -> Result<ReplyData, CallFailure> {
        Ok(ReplyData {
            inline: crate::provider::Bytes::from(vec![1, 2, 3, 4]),
            write_lens: Vec::new(),
            reply_len: None,
        })
    }

    #[test]
    fn a_call_is_complete_only_once_its_send_and_invalidations_are() {
        // The Send's completion before the reply.
        let mut s = CallState::Queued;
        s.send_completed();
        assert!(
            matches!(s, CallState::Queued),
            "not sent: nothing to complete"
        );
        s = CallState::Sent {
            send_completed: false,
        };
        assert!(s.awaits_reply() && !s.is_complete());
        s.send_completed();
        s.replied(reply(), 2);
        assert!(!s.awaits_reply() && !s.is_complete());
        s.invalidated();
        assert!(!s.is_complete());
        s.invalidated();
        assert!(s.is_complete());
        assert!(matches!(s.finish(), Some(Ok(d)) if d.inline[..] == [1, 2, 3, 4]));
        assert!(matches!(s, CallState::Done));
        assert!(s.finish().is_none(), "a reply is taken once");

        // The reply before the Send's completion.
        let mut s = CallState::Sent {
            send_completed: false,
        };
        s.replied(reply(), 0);
        assert!(!s.is_complete());
        s.send_completed();
        assert!(s.is_complete());

        // A second reply does not replace the first.
        let mut s = CallState::Sent {
            send_completed: true,
        };
        s.replied(reply(), 0);
        s.replied(Err(CallFailure::BadReply("second")), 0);
        assert!(matches!(s.finish(), Some(Ok(_))));
    }
}
