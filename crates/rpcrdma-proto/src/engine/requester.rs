//! The requester half of a connection: our calls, from queued to done.
//! Direction-agnostic (RFC 8167): a client's forward requester and a
//! server's backchannel requester are the same code; the backchannel one
//! sends inline only and offers no reply chunks.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::time::Instant;

use super::connection::Connection;
use super::framing::{rpc_prefix, Shape};
use super::ids::IdMap;
use super::marshal::{self, pad4, DdpItem};
use super::plan::{plan_call, CallForm, CallLens, CallPlan};
use super::resources::{Mrs, Op};
use super::timer::Deadlines;
use super::{
    CallError, CallFailure, CallId, Config, ConnectionError, Event, OutgoingCall, Piece, Reply,
    Role,
};
use crate::provider::{Access, MemoryRegion, Provider, ProviderError, SendOp, SendWr, Sges, Stag};
use crate::wire::chunk::{ChunkLists, ReadList, ReadSegment, Segment, WriteChunk, WriteList};
use crate::wire::rpc::MsgType;
use smallvec::{smallvec, SmallVec};

/// The requester's state.
#[derive(Debug)]
pub(super) struct Requester {
    /// The backchannel requester (a server's): inline calls only, no
    /// reply resources.
    pub(super) backchannel: bool,
    /// Credits we request in every call: `Config::credits_requested` (a
    /// client), `Config::backchannel_slots` (a server).
    pub(super) requested: u32,
    /// Calls we may have outstanding (the peer's last grant, clamped).
    pub(super) credits: u32,
    pub(super) next_xid: u32,
    pub(super) next_id: u64,
    /// Calls waiting for a credit (or the connection, or room in the send
    /// queue), in order.
    pub(super) queue: VecDeque<OutCall>,
    /// Our calls sent and not finished, by XID (a hash map: a B-tree
    /// shifted these large values on every removal). The XIDs of sent calls
    /// are distinct (see `send_call`); a call whose reply has arrived
    /// (`reply` set) stays here until its Send and invalidations complete,
    /// and no longer matches a received reply.
    pub(super) calls: IdMap<u32, OutCall>,
    /// Calls sent (their Send taken by the provider) and not answered.
    pub(super) outstanding: usize,
    /// `(deadline, XID)` of the calls sent with a deadline, sorted by
    /// deadline (ties in send order). The front is always a call still
    /// waiting for its reply (entries are dropped from the front as replies
    /// arrive; stale entries further back are compacted away), so the
    /// next timeout is read without scanning every call.
    pub(super) deadlines: Deadlines<u32>,
    /// Calls interrupted by the connection's end, for the next one.
    pub(super) retransmits: Vec<OutCall>,
}

impl Requester {
    /// The requester of a connection with this configuration.
    pub(super) fn new(config: &Config) -> Requester {
        let backchannel = config.role == Role::Server;
        Requester {
            backchannel,
            requested: if backchannel {
                config.backchannel_slots.max(1)
            } else {
                config.credits_requested.max(1)
            },
            credits: 1,
            next_xid: config.first_xid,
            next_id: 1,
            queue: VecDeque::new(),
            calls: IdMap::default(),
            outstanding: 0,
            deadlines: Deadlines::default(),
            retransmits: Vec::new(),
        }
    }
}

#[derive(Debug)]
pub(super) struct ReplyData {
    inline: Vec<u8>,
    write_lens: Vec<u32>,
    reply_len: Option<u32>,
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
    send_done: bool,
    remotely_invalidated: SmallVec<[Stag; 1]>,
    pending_inv: usize,
    reply: Option<Result<ReplyData, CallFailure>>,
    deadline: Option<Instant>,
    /// Connections it was sent on.
    transmissions: u32,
    /// Of those, the ones that ended in this call's own timeout (see
    /// [`Config::max_transmissions`]).
    timeouts: u32,
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
            send_done: false,
            remotely_invalidated: SmallVec::new(),
            pending_inv: 0,
            reply: None,
            deadline: None,
            transmissions: 0,
            timeouts: 0,
        }
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

const UNKNOWN_XID: &str = "unknown XID";

impl Requester {
    /// The requester of the next connection takes over the XID and id
    /// counters of `old` and its interrupted calls, queued again in order.
    pub(super) fn carry_over(&mut self, old: &mut Requester) {
        self.next_xid = old.next_xid;
        self.next_id = old.next_id;
        for c in old.retransmits.drain(..) {
            let mut oc = OutCall::new(c.id, c.xid, c.call, c.retransmit);
            oc.transmissions = c.transmissions;
            oc.timeouts = c.timeouts;
            self.queue.push_back(oc);
        }
    }
}

impl Connection {
    /// The Send of call `xid` completed.
    pub(super) fn call_sent(&mut self, p: &mut dyn Provider, xid: u32) {
        if let Some(call) = self.req.calls.get_mut(&xid) {
            call.send_done = true;
        }
        self.try_finish(p, xid);
    }

    /// A Local Invalidate of one of call `xid`'s chunks completed.
    pub(super) fn call_invalidated(&mut self, p: &mut dyn Provider, xid: u32) {
        if let Some(call) = self.req.calls.get_mut(&xid) {
            call.pending_inv = call.pending_inv.saturating_sub(1);
        }
        self.try_finish(p, xid);
    }

    /// Starts a call (a forward call at a client, a backchannel call at a
    /// server). It is queued until the connection is established and a
    /// credit is free.
    pub fn start_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        call: OutgoingCall,
    ) -> Result<CallId, CallError> {
        if let Some(e) = &self.error {
            return Err(CallError::Closed(e.clone()));
        }
        match call.message.first() {
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
        // Read chunk positions are offsets in the XDR stream: every inline
        // piece must be whole XDR items, so every DDP item starts aligned.
        if call
            .message
            .iter()
            .any(|p| matches!(p, Piece::Inline(b) if b.len() % 4 != 0))
        {
            return Err(CallError::BadMessage(
                "inline pieces must be whole XDR items (multiples of four octets)",
            ));
        }
        let len: usize = call
            .message
            .iter()
            .map(|p| match p {
                Piece::Inline(b) => b.len(),
                Piece::Ddp(b) => b.len() + pad4(b.len()),
            })
            .sum();
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
        if self.req.backchannel {
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
        let xid = self.req.next_xid;
        self.req.next_xid = self.req.next_xid.wrapping_add(1);
        let call = OutCall::new(id, xid, call, false);
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
            .filter(|c| c.reply.is_none())
            .filter_map(|c| c.deadline)
            .min()
    }

    /// Call `xid` still waits for its reply, with deadline `d`.
    pub(super) fn waits_for(&self, xid: u32, d: Instant) -> bool {
        self.req
            .calls
            .get(&xid)
            .is_some_and(|c| c.reply.is_none() && c.deadline == Some(d))
    }

    /// The calls whose own deadline passed count a timed-out transmission
    /// (the others were cut short by it).
    pub(super) fn count_timeouts(&mut self, now: Instant) {
        for c in self.req.calls.values_mut() {
            if c.reply.is_none() && c.deadline.is_some_and(|d| d <= now) {
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
                    .is_some_and(|c| c.reply.is_none() && c.deadline == Some(d))
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

    pub(super) fn fail_local(&mut self, call: OutCall, e: CallError) {
        self.events.push_back(Event::CallFailed {
            id: call.id,
            xid: call.xid,
            error: CallFailure::Local(e),
            retransmit: false,
        });
    }

    /// Marshals a call: chooses its form, registers its chunks, builds its
    /// Send buffer (all kept in `call`); returns the Send buffer. On
    /// failure nothing is left registered.
    pub(super) fn marshal_call(
        &mut self,
        p: &mut dyn Provider,
        call: &mut OutCall,
    ) -> Result<MemoryRegion, CallError> {
        // Nothing is copied yet: the stream is built only for the form
        // chosen below, and DDP items that go into Read chunks are
        // registered as they are.
        let (stream_len, ddp) = marshal::layout(&call.call.message);
        let ddp: Vec<(usize, DdpItem)> = ddp.into_iter().filter(|d| d.1.len > 0).collect();
        let xid = call.xid;
        let with_xid = |mut v: Vec<u8>| {
            if let Some(w) = v.get_mut(..4) {
                w.copy_from_slice(&xid.to_be_bytes());
            }
            v
        };
        let flat = |pieces: &[Piece]| with_xid(marshal::flatten(pieces).0);
        let reply_max = match call.call.reply_max {
            0 => self.config.default_reply_max,
            n => n,
        };
        if reply_max > self.config.limits.max_message_len {
            let max = self.config.limits.max_message_len as usize;
            return Err(CallError::TooLarge {
                len: reply_max as usize,
                max,
            });
        }
        let lens = CallLens {
            stream_len,
            ddp_items: ddp.len(),
            ddp_xdr_len: ddp.iter().map(|(_, d)| d.len + pad4(d.len)).sum(),
            reply_max,
            ddp_results: &call.call.ddp_results,
        };
        let CallPlan {
            form,
            write_lens,
            reply_len,
        } = plan_call(self.params(), self.req.backchannel, lens)?;

        // Registration: every chunk region per call.
        let mut mrs = Mrs::new();
        let mut reads = ReadList::new();
        let mut shape = Shape::Msg;
        // The DDP pieces left out of the inline part (`None`: no inline
        // part at all, a Long Call).
        type Skip = SmallVec<[usize; 4]>;
        let r: Result<Option<Skip>, ProviderError> = (|| {
            let inline = match form {
                CallForm::Inline => Some(Skip::new()),
                CallForm::Reads => {
                    for &(pi, d) in &ddp {
                        let Some(Piece::Ddp(data)) = call.call.message.get(pi) else {
                            continue;
                        };
                        //= rfc8166#section-3.4.5.2
                        //# When reducing a variable-length argument data item, the Requester
                        //# SHOULD NOT include the data item's XDR roundup padding in the chunk.
                        //= rfc8166#section-3.4.5.2
                        //# If the sender chooses not to include roundup padding in the chunk,
                        //# the chunk's total length MUST be the same as the encoded length of
                        //# the data item.
                        //= rfc8166#section-3.4.4.4
                        //# Except in special cases (covered in Section 3.5.3), a chunk MUST
                        //# contain exactly one XDR data item.
                        // (Linux leaves the roundup out too.) The piece is
                        // registered as it is, shared and read-only: the
                        // responder may read exactly its octets, nothing
                        // can write them.
                        let mr = p.register_shared(data.clone(), Access::REMOTE_READ)?;
                        mrs.push(mr);
                        reads.push(ReadSegment::new(
                            d.position as u32,
                            Segment::new(mr.stag().0, d.len as u32, 0),
                        ));
                        self.metrics.read_chunks += 1;
                        self.metrics.read_chunk_bytes += d.len as u64;
                    }
                    //= rfc8166#section-3.4.2
                    //# All other XDR data items MUST NOT be reduced.
                    // Only the caller's `Piece::Ddp` items are ever reduced.
                    Some(ddp.iter().map(|&(pi, _)| pi).collect())
                }
                CallForm::Long => {
                    //= rfc8166#section-3.5.3
                    //# Every
                    //# RDMA read segment in this chunk MUST contain zero in its Position
                    //# field.
                    //= rfc8166#section-3.5.3
                    //# As these chunks contain a Payload stream, such chunks MUST include
                    //# appropriate XDR roundup padding to maintain proper XDR alignment of
                    //# their contents.
                    // `stream` is the whole XDR stream, DDP items padded.
                    let stream = flat(&call.call.message);
                    let len = stream.len();
                    let mr = self
                        .res
                        .register(p, stream, Access::REMOTE_READ, &mut mrs)?;
                    reads.push(ReadSegment::new(
                        0,
                        Segment::new(mr.stag().0, len as u32, 0),
                    ));
                    shape = Shape::Nomsg;
                    self.metrics.long_calls += 1;
                    self.metrics.read_chunks += 1;
                    self.metrics.read_chunk_bytes += len as u64;
                    None
                }
            };
            Ok(inline)
        })();
        let inline = match r {
            Ok(i) => i,
            Err(e) => {
                self.res.zombies.extend(mrs);
                self.res.reap(p);
                return Err(CallError::Provider(e));
            }
        };
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mut writes = WriteList::new();
        let mut write_mrs = Mrs::new();
        let mut reply = None;
        let mut reply_mr = None;
        let mut failed = None;
        for &l in &write_lens {
            //= rfc8166#section-3.4.6
            //# Thus, it MUST register Write chunks
            //# long enough to accommodate the maximum possible size of each
            //# returned data item.
            //= rfc8166#section-3.4.6.2
            //# When provisioning a Write chunk for a variable-length result data
            //# item, the Requester SHOULD NOT include additional space for XDR
            //# roundup padding.
            // Deliberately not followed: the chunk is rounded up to four so a
            // legacy responder that writes the roundup of an unaligned result
            // (RFC 5666 era, the reason for Linux's 4-octet pad segment)
            // stays inside it. A conforming one never writes it; the pad is
            // never handed out as data (see `Reply::result`).
            let l = l.saturating_add(pad4(l as usize) as u32);
            let buf = self.res.sink_buffer(l as usize);
            match self.res.register(p, buf, rw, &mut mrs) {
                Ok(mr) => {
                    writes.push(WriteChunk::single(Segment::new(mr.stag().0, l, 0)));
                    write_mrs.push(mr);
                    self.metrics.write_chunks += 1;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let (None, Some(l)) = (&failed, reply_len) {
            let buf = self.res.sink_buffer(l as usize);
            match self.res.register(p, buf, rw, &mut mrs) {
                Ok(mr) => {
                    reply = Some(WriteChunk::single(Segment::new(mr.stag().0, l, 0)));
                    reply_mr = Some(mr);
                    self.metrics.reply_chunks += 1;
                }
                Err(e) => failed = Some(e),
            }
        }
        let chunks = ChunkLists {
            reads,
            writes,
            reply,
        };
        let header =
            self.params()
                .framing
                .data_header(call.xid, self.req.requested, shape, chunks, None);
        // Header and inline part straight into the Send buffer, the RPC
        // XID set to this call's.
        let body = inline
            .as_ref()
            .map(|skip| (&call.call.message[..], &skip[..]));
        let send_mr = match failed {
            Some(e) => Err(e),
            None => self.res.header_and_body(p, &header, body, Some(xid)),
        };
        let (send_mr, send_len) = match send_mr {
            Ok(x) => x,
            Err(e) => {
                self.res.zombies.extend(mrs);
                self.res.reap(p);
                return Err(CallError::Provider(e));
            }
        };
        call.chunk_mrs = mrs;
        call.write_mrs = write_mrs;
        call.reply_mr = reply_mr;
        call.send_mr = Some(send_mr);
        call.send_len = send_len;
        Ok(send_mr)
    }

    pub(super) fn send_call(&mut self, now: Instant, p: &mut dyn Provider, mut call: OutCall) {
        // Marshalled once: a call refused by a full send queue comes back
        // with its chunks registered and its Send buffer built.
        let send_mr = match call.send_mr {
            Some(mr) => mr,
            None => match self.marshal_call(p, &mut call) {
                Ok(mr) => mr,
                Err(e) => {
                    self.fail_local(call, e);
                    return;
                }
            },
        };
        let xid = call.xid;
        let sge = send_mr.sge(0, call.send_len);
        let deadline = self.config.call_timeout.map(|d| now + d);
        let retransmit = call.retransmit;
        call.deadline = deadline;
        call.transmissions += 1;
        match self.req.calls.entry(xid) {
            Entry::Vacant(slot) => {
                slot.insert(call);
            }
            Entry::Occupied(_) => {
                // Only after 2^32 calls, with the call that had this XID
                // still unfinished: a reply could not be told apart.
                let send_mr = call.send_mr.take();
                self.res.zombies.extend(call.all_mrs());
                if let Some(mr) = send_mr {
                    self.res.release(p, mr);
                }
                self.res.reap(p);
                self.fail_local(
                    call,
                    CallError::BadMessage("XID still in use by an unfinished call"),
                );
                return;
            }
        }
        self.req.outstanding += 1;
        // The receive for the reply is posted before the call is sent.
        self.refill(p);
        if self.error.is_some() {
            return;
        }
        let wr_id = self.res.wr(Op::CallSend(xid));
        //= rfc8166#section-3.3.1
        //# A Requester MUST NOT send unacknowledged requests in excess of the
        //# Responder's granted credit limit.
        // The call counts as outstanding only once the provider has taken
        // its Send. Refused with QueueFull, it is not kept to be posted
        // later (when a reply may have lowered the grant below the calls
        // then outstanding) but goes back to the front of the queue, and
        // leaves it again through `pump`, which checks the credits. So it
        // never waits in `backlog`, where replies would queue behind it.
        match p.post_send(SendWr {
            wr_id,
            op: SendOp::Send { solicited: false },
            sges: smallvec![sge],
        }) {
            Ok(()) => {}
            Err(ProviderError::QueueFull) => {
                self.res.ops.remove(wr_id);
                self.requeue(xid);
                return;
            }
            Err(e) => {
                self.res.ops.remove(wr_id);
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
        }
        if retransmit {
            self.metrics.retransmits += 1;
        }
        if let Some(d) = deadline {
            self.add_deadline(d, xid);
        }
        self.metrics.calls_sent += 1;
    }

    /// A call whose Send the provider refused (QueueFull) was not sent: it
    /// goes back to the front of the queue, as it is (XID, chunks, Send
    /// buffer), until a completion makes room (`drain_backlog`).
    #[cold]
    pub(super) fn requeue(&mut self, xid: u32) {
        self.req.outstanding = self.req.outstanding.saturating_sub(1);
        self.res.send_queue_full = true;
        self.metrics.send_queue_waits += 1;
        if let Some(mut call) = self.req.calls.remove(&xid) {
            call.transmissions = call.transmissions.saturating_sub(1);
            self.req.queue.push_front(call);
        }
    }

    /// A reply (or something that is not a call) for one of our calls.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        credit: u32,
        shape: Shape,
        chunks: &ChunkLists,
        payload: Vec<u8>,
        inv: Option<Stag>,
    ) {
        let r = self.parse_reply(xid, shape, chunks, payload);
        if let Err(CallFailure::BadReply(why)) = &r {
            //= rfc8166#section-4.5
            //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
            //# message, a Requester MUST silently discard the message.
            // Unknown XIDs are counted apart (`bad_xids`); every other
            // header error leaves the call waiting, as above.
            if *why == UNKNOWN_XID {
                self.metrics.bad_xids += 1;
            } else {
                self.metrics.bad_replies += 1;
            }
            self.metrics.dropped += 1;
            return;
        }
        if let Ok(d) = &r {
            //= rfc8166#section-4.2.1
            //# This XID MUST be the same as the XID in the RPC message.
            //= rfc8167#section-5.2
            //# Whether presented inline or as a separate chunk, the ONC RPC Reply
            //# header MUST start with the same XID value that is present in the
            //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
            //# contain the value REPLY.
            //= rfc8166#section-4.5
            //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
            //# message, a Requester MUST silently discard the message.
            // A reply whose RPC header disagrees with its transport header
            // cannot be attributed to a call: it is dropped and counted, the
            // call keeps waiting (for a good reply, or for its timeout).
            let head = match (d.reply_len, self.reply_mr_of(xid)) {
                (Some(len), Some(mr)) => p
                    .region(&mr)
                    .ok()
                    .and_then(|b| b.get(..(len as usize).min(8)))
                    .and_then(rpc_prefix),
                _ => rpc_prefix(&d.inline),
            };
            if head != Some((xid, MsgType::REPLY)) {
                self.metrics.rpc_header_mismatches += 1;
                self.metrics.dropped += 1;
                return;
            }
        }
        self.requester_reply(now, p, xid, Some(credit), inv, r);
    }

    pub(super) fn reply_mr_of(&self, xid: u32) -> Option<MemoryRegion> {
        self.awaiting(xid).and_then(|c| c.reply_mr)
    }

    /// Our sent call with this XID, if it still waits for its reply.
    pub(super) fn awaiting(&self, xid: u32) -> Option<&OutCall> {
        self.req.calls.get(&xid).filter(|c| c.reply.is_none())
    }

    /// Checks a reply's chunk lists against what the call offered.
    pub(super) fn parse_reply(
        &self,
        xid: u32,
        shape: Shape,
        chunks: &ChunkLists,
        payload: Vec<u8>,
    ) -> Result<ReplyData, CallFailure> {
        let Some(call) = self.awaiting(xid) else {
            return Err(CallFailure::BadReply(UNKNOWN_XID));
        };
        //= rfc8166#section-4.3.1
        //# Responders MUST leave the Read list empty in all replies.
        if !chunks.reads.is_empty() {
            return Err(CallFailure::BadReply("Read list in a reply"));
        }
        if chunks.writes.len() > call.write_mrs.len() {
            return Err(CallFailure::BadReply("more Write chunks than offered"));
        }
        //= rfc8166#section-3.4.6
        //# The Responder MUST copy the segment count and all
        //# segments from the Requester-provided Write chunk into the RPC Reply
        //# message's Transport header.
        // Every chunk we offer is one segment at offset 0: the echo must be
        // exactly that segment, with a length no larger than it.
        let check = |ours: &MemoryRegion, theirs: &WriteChunk| -> Result<u32, CallFailure> {
            let [s] = theirs.segments.as_slice() else {
                return Err(CallFailure::BadReply(
                    "returned chunk's segment count differs from the offer",
                ));
            };
            if s.handle != ours.stag().0 || s.offset != 0 {
                return Err(CallFailure::BadReply("returned segment not offered"));
            }
            if u64::from(s.length) > ours.len() {
                return Err(CallFailure::BadReply("returned chunk longer than offered"));
            }
            Ok(s.length)
        };
        let mut write_lens = vec![0u32; call.write_mrs.len()];
        for (i, w) in chunks.writes.iter().enumerate() {
            if let (Some(mr), Some(l)) = (call.write_mrs.get(i), write_lens.get_mut(i)) {
                *l = check(mr, w)?;
            }
        }
        match shape {
            Shape::Msg => {
                //= rfc8166#section-4.3.3
                //# When a Requester provides a Reply chunk in an RPC Call message, the
                //# Responder MUST copy that chunk into the Transport header of the RPC
                //# Reply message.
                // A Short reply echoes our Reply chunk with nothing in it (or,
                // from an older responder, leaves it out); data in it would
                // be a second copy of the reply.
                if let Some(theirs) = chunks.reply.as_ref() {
                    let Some(ours) = call.reply_mr.as_ref() else {
                        return Err(CallFailure::BadReply("Reply chunk not offered"));
                    };
                    if check(ours, theirs)? != 0 {
                        return Err(CallFailure::BadReply(
                            "data in the Reply chunk of an RDMA_MSG reply",
                        ));
                    }
                }
                Ok(ReplyData {
                    inline: payload,
                    write_lens,
                    reply_len: None,
                })
            }
            Shape::Nomsg => {
                let (Some(ours), Some(theirs)) = (call.reply_mr.as_ref(), chunks.reply.as_ref())
                else {
                    return Err(CallFailure::BadReply(
                        "RDMA_NOMSG reply without our Reply chunk",
                    ));
                };
                let len = check(ours, theirs)?;
                Ok(ReplyData {
                    inline: Vec::new(),
                    write_lens,
                    reply_len: Some(len),
                })
            }
        }
    }

    pub(super) fn requester_reply(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        credit: Option<u32>,
        inv: Option<Stag>,
        result: Result<ReplyData, CallFailure>,
    ) {
        if self.awaiting(xid).is_none() {
            self.metrics.bad_xids += 1;
            return;
        }
        //= rfc8167#section-4.1
        //# In such cases, the receiver MUST ignore the header's credit value.
        // A credit word is used only here, from a reply (or RDMA_ERROR)
        // matched to one of our calls; every other message's is ignored.
        if let Some(g) = credit.and_then(|c| self.params().framing.grant(c)) {
            self.metrics.credits_granted = g;
            //= rfc8166#section-3.3.1
            //# A Requester MUST NOT send unacknowledged requests in excess of the
            //# Responder's granted credit limit.
            // Clamped to [1, requested] as Linux does: a zero grant would
            // deadlock the connection.
            let new = g.clamp(1, self.req.requested);
            if new != self.req.credits {
                self.req.credits = new;
                self.events
                    .push_back(Event::CreditsChanged { credits: new });
            }
        }
        if result.is_err() && matches!(result, Err(CallFailure::BadReply(_))) {
            self.metrics.bad_replies += 1;
        }
        self.metrics.replies_received += 1;
        self.req.outstanding = self.req.outstanding.saturating_sub(1);
        let mut invs: SmallVec<[Stag; 4]> = SmallVec::new();
        if let Some(call) = self.req.calls.get_mut(&xid) {
            call.reply = Some(result);
            if let Some(stag) = inv {
                if call.chunk_mrs.iter().any(|m| m.stag() == stag) {
                    call.remotely_invalidated.push(stag);
                }
            }
            // The Requester endpoint must ensure that memory regions
            // associated with each RPC transaction are protected from
            // Responder access before allowing upper-layer access to the
            // data contained in them (RFC 8166 section 4.4.1): every chunk
            // STag is invalidated, locally or by Send With Invalidate, before
            // the reply is delivered.
            for mr in &call.chunk_mrs {
                if !call.remotely_invalidated.contains(&mr.stag()) {
                    invs.push(mr.stag());
                }
            }
            call.pending_inv = invs.len();
        }
        self.trim_deadlines(xid);
        for stag in invs {
            let wr_id = self.res.wr(Op::CallInv(xid));
            self.metrics.local_invalidations += 1;
            let wr = SendWr {
                wr_id,
                op: SendOp::LocalInvalidate { stag },
                sges: Sges::new(),
            };
            //= rfc8166#section-4.5.4
            //# After a Requester has received a reply, if it is unable to invalidate
            //# a memory region due to an unrecoverable problem, the Requester MUST
            //# close the connection to protect that memory from Responder access
            //# before the associated RPC transaction is complete.
            // (A failed Local Invalidate completion ends the connection too:
            // every completion error is fatal, and `fatal` disconnects
            // before completing calls whose reply is in.)
            if let Err(e) = self.post(p, wr) {
                self.res.ops.remove(wr_id);
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
        }
        self.try_finish(p, xid);
        self.pump(now, p);
    }

    /// Completes a call once the reply is in, its Send completed and every
    /// chunk is invalidated: hands the Write chunks' buffers over as the
    /// results, copies the Reply chunk out, and deregisters.
    pub(super) fn try_finish(&mut self, p: &mut dyn Provider, xid: u32) {
        let mut call = match self.req.calls.entry(xid) {
            Entry::Occupied(e)
                if e.get().reply.is_some() && e.get().send_done && e.get().pending_inv == 0 =>
            {
                e.remove()
            }
            _ => return,
        };
        let event = self.finish(p, &mut call);
        self.events.push_back(event);
        for mr in call.all_mrs() {
            self.res.release(p, mr);
        }
    }

    pub(super) fn finish(&mut self, p: &mut dyn Provider, call: &mut OutCall) -> Event {
        let result = call
            .reply
            .take()
            .unwrap_or(Err(CallFailure::BadReply("no reply")));
        match result {
            Ok(data) => {
                // Every chunk STag has been invalidated (locally or by Send
                // With Invalidate) before we get here. Each Write chunk's
                // registration ends now and its buffer becomes the result,
                // without a copy; it returns to the sink pool when the upper
                // layer drops the result, so the next calls reuse it (no
                // fresh zeroed, page-faulted buffer per call).
                let read = |mr: &MemoryRegion, len: usize| -> Vec<u8> {
                    p.region(mr)
                        .ok()
                        .and_then(|b| b.get(..len))
                        .map(<[u8]>::to_vec)
                        .unwrap_or_default()
                };
                let (message, long) = match (data.reply_len, call.reply_mr.as_ref()) {
                    (Some(l), Some(mr)) => {
                        self.metrics.long_replies += 1;
                        self.metrics.reply_chunk_bytes += u64::from(l);
                        (read(mr, l as usize), true)
                    }
                    _ => (data.inline, false),
                };
                let mut results = Vec::with_capacity(call.write_mrs.len());
                let write_mrs = std::mem::take(&mut call.write_mrs);
                for (mr, &l) in write_mrs.iter().zip(&data.write_lens) {
                    self.metrics.write_chunk_bytes += u64::from(l);
                    results.push(self.res.take_result(p, mr, l as usize, &mut call.chunk_mrs));
                }
                Event::ReplyReceived(Reply {
                    id: call.id,
                    xid: call.xid,
                    message,
                    results,
                    long,
                })
            }
            Err(error) => Event::CallFailed {
                id: call.id,
                xid: call.xid,
                error,
                retransmit: false,
            },
        }
    }

    /// The connection ended with `err`: calls whose reply arrived complete
    /// now (the peer can no longer touch their memory); the others fail,
    /// kept for retransmission on the next connection unless they have
    /// used up their transmissions.
    pub(super) fn fail_calls(&mut self, p: &mut dyn Provider, err: &ConnectionError) {
        // In call order (the order they were started).
        let mut calls: Vec<OutCall> = std::mem::take(&mut self.req.calls).into_values().collect();
        calls.sort_by_key(|c| c.id);
        self.req.deadlines.clear();
        self.req.outstanding = 0;
        for mut call in calls {
            if call.reply.is_some() {
                let ev = self.finish(p, &mut call);
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
            call.pending_inv = 0;
            call.send_done = false;
            call.remotely_invalidated.clear();
            self.events.push_back(Event::CallFailed {
                id: call.id,
                xid: call.xid,
                error: CallFailure::ConnectionLost(err.clone()),
                retransmit: true,
            });
            self.req.retransmits.push(call);
        }
        for mut call in std::mem::take(&mut self.req.queue) {
            // (A call refused by a full send queue has its regions.)
            self.res.zombies.extend(call.all_mrs());
            self.events.push_back(Event::CallFailed {
                id: call.id,
                xid: call.xid,
                error: CallFailure::ConnectionLost(err.clone()),
                retransmit: true,
            });
            self.req.retransmits.push(call);
        }
        self.req.retransmits.sort_by_key(|c| c.id);
    }
}
