//! The responder half of a connection: calls we received, from their
//! RDMA Reads to our reply. Direction-agnostic (RFC 8167): a server's
//! forward responder and a client's backchannel responder are the same
//! code; the backchannel one takes calls only after
//! `Connection::enable_backchannel`, refuses chunks and replies inline.

use std::collections::VecDeque;
use std::task::Waker;
use std::time::Instant;

use super::budget::Lease;
use super::connection::Connection;
use super::framing::{invalidation_handle, rpc_prefix, ErrorReply, Shape};
use super::ids::IdMap;
use super::marshal::{self};
use super::plan::{plan_reply, ReplyPlan, WriteOp};
use super::resources::{Mrs, Op};
use super::timer::Deadlines;
use super::{
    CallError, CallHandle, Config, ConnectionError, Event, IncomingCall, OutgoingReply, PeerError,
    Piece, ReplyForm, Role,
};
use crate::provider::{
    Access, Buffer, Bytes, MemoryRegion, Provider, RemoteAddr, SendOp, SendWr, Sges, Stag,
};
use crate::wire::chunk::{ChunkLists, Segment, WriteChunk, WriteList};
use crate::wire::rpc::MsgType;
use smallvec::{smallvec, SmallVec};

/// The responder's state.
#[derive(Debug)]
pub(super) struct Responder {
    /// The backchannel responder (a client's).
    pub(super) backchannel: bool,
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
    pub(super) next_handle: u64,
    /// Calls received and not answered, by handle.
    pub(super) incoming: IdMap<u64, InCall>,
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
    /// The responder of a connection with this configuration.
    pub(super) fn new(config: &Config) -> Responder {
        let backchannel = config.role == Role::Client;
        let grant = if backchannel {
            config.backchannel_slots.max(1)
        } else {
            config.credits_granted.max(1)
        };
        Responder {
            backchannel,
            enabled: !backchannel,
            grant,
            max_grant: grant,
            next_handle: 1,
            incoming: IdMap::default(),
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

#[derive(Debug)]
pub(super) struct ReadChunk {
    position: u32,
    len: usize,
    sink: Option<MemoryRegion>,
    data: Vec<u8>,
}

/// A call we received.
#[derive(Debug)]
pub(super) struct InCall {
    xid: u32,
    backchannel: bool,
    long: bool,
    base: Vec<u8>,
    /// Index of the Position-Zero Read chunk in `chunks`.
    pz: Option<usize>,
    chunks: Vec<ReadChunk>,
    reads_left: usize,
    /// RDMA Reads to issue once the call is admitted to the Read-sink
    /// budget.
    pending_reads: Vec<PendingRead>,
    /// Octets of Read sinks the call needs.
    sink_need: u64,
    /// Its sinks are registered (counted in `Connection::sink_bytes`).
    admitted: bool,
    writes: WriteList,
    reply: Option<WriteChunk>,
    inv: Option<u32>,
    delivered: bool,
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
    /// An RDMA Read of received call `handle` completed.
    pub(super) fn read_done(&mut self, now: Instant, p: &mut dyn Provider, handle: u64) {
        self.resp.reads_outstanding = self.resp.reads_outstanding.saturating_sub(1);
        let done = match self.resp.incoming.get_mut(&handle) {
            Some(call) => {
                call.reads_left = call.reads_left.saturating_sub(1);
                call.reads_left == 0
            }
            None => false,
        };
        if done {
            self.reads_done(now, p, handle);
        }
        self.issue_reads(p);
    }

    /// The Send of a reply without RDMA Writes completed.
    pub(super) fn reply_sent(&mut self, p: &mut dyn Provider, mr: MemoryRegion) {
        self.resp.replies_unacked = self.resp.replies_unacked.saturating_sub(1);
        self.res.release(p, mr);
    }

    /// The Send of an error reply completed.
    pub(super) fn error_sent(&mut self, p: &mut dyn Provider, mr: MemoryRegion) {
        self.resp.errors_unacked = self.resp.errors_unacked.saturating_sub(1);
        self.res.release(p, mr);
    }

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
        if !self.resp.backchannel {
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

    /// Answers a received call.
    pub fn send_reply(
        &mut self,
        _now: Instant,
        p: &mut dyn Provider,
        handle: CallHandle,
        reply: OutgoingReply,
    ) -> Result<ReplyForm, CallError> {
        if let Some(e) = &self.error {
            return Err(CallError::Closed(e.clone()));
        }
        let (xid, backchannel) = match self.resp.incoming.get(&handle.0) {
            Some(c) if c.delivered => (c.xid, c.backchannel),
            _ => return Err(CallError::UnknownHandle),
        };
        match reply.message.first() {
            Some(Piece::Inline(b)) if b.len() >= 4 => {}
            _ => {
                return Err(CallError::BadMessage(
                    "the first piece must be inline and hold the RPC header",
                ))
            }
        }
        let thr = self.params().send_threshold;
        // The DDP data is never copied: the pieces that go into Write
        // chunks are registered as they are (see `post_reply`).
        let mut message = reply.message;
        let (stream_len, ddp) = marshal::layout(&message);
        if let Some(Piece::Inline(b)) = message.first_mut() {
            if let Some(w) = b.get_mut(..4) {
                w.copy_from_slice(&xid.to_be_bytes());
            }
        }
        if backchannel {
            let need = self.params().framing.min_msg_header_len() + stream_len;
            if need > thr {
                return Err(CallError::TooLarge {
                    len: need,
                    max: thr,
                });
            }
        }
        let Some(call) = self.resp.incoming.remove(&handle.0) else {
            return Err(CallError::UnknownHandle);
        };
        let grant = self.resp.grant;

        let Some(ReplyPlan {
            form,
            chunks,
            written,
            writes,
        }) = plan_reply(
            self.params(),
            &call.writes,
            call.reply.as_ref(),
            stream_len,
            &ddp,
        )
        else {
            self.send_error(p, xid, ErrorReply::Chunk);
            return Ok(ReplyForm::ErrChunk);
        };
        let shape = match form {
            ReplyForm::ReplyChunk => Shape::Nomsg,
            _ => Shape::Msg,
        };
        let header = self
            .params()
            .framing
            .data_header(xid, grant, shape, chunks, None);
        // The inline part (the message minus the written DDP pieces) is
        // not built: it is written straight into the Send buffer, or, for
        // a Long Reply, built as the source of the Reply chunk's Writes.
        let long_src = (form == ReplyForm::ReplyChunk)
            .then(|| Bytes::from(marshal::inline_except(&message, &written)));
        // Header and (Short reply) inline part, straight into the Send
        // buffer; the XID is already in the message's first piece.
        let body = (form == ReplyForm::Inline).then_some((&message[..], &written[..]));
        let send = match self.res.header_and_body(p, &header, body, None) {
            Ok(x) => x,
            Err(e) => {
                let e = ConnectionError::Provider(e);
                self.fatal(p, e);
                return Err(CallError::Closed(
                    self.error.clone().unwrap_or(ConnectionError::LocalClose),
                ));
            }
        };

        let remote_inv = self.params().remote_invalidation;
        let op = self.params().framing.reply_send_op(remote_inv, call.inv);
        if let SendOp::SendWithInvalidate { .. } = op {
            self.metrics.send_with_invalidate += 1;
        }
        // The DDP pieces are the Write sources as they are: registered
        // read-only, shared with whoever else holds them, never copied.
        let mut sources: Vec<Bytes> = Vec::new();
        if !written.is_empty() || long_src.is_some() {
            sources = written
                .iter()
                .map(|&pi| match message.get_mut(pi) {
                    Some(Piece::Ddp(b)) => std::mem::take(b),
                    _ => Bytes::new(),
                })
                .collect();
            sources.extend(long_src);
        }
        let r = self.post_reply(p, sources, writes, send, op);
        //= rfc8166#section-4.5.4
        //# If a Responder is unable to construct and transmit an RPC Reply or
        //# RPC-over-RDMA error message, the Responder MUST close the connection
        //# to signal to the Requester that a reply was lost.
        if let Err(e) = r {
            self.fatal(p, e);
            return Err(CallError::Closed(
                self.error.clone().unwrap_or(ConnectionError::LocalClose),
            ));
        }
        self.resp.replies_unacked += 1;
        self.metrics.replies_sent += 1;
        if form == ReplyForm::ReplyChunk {
            self.metrics.long_replies_sent += 1;
        }
        Ok(form)
    }

    /// Client: accept backchannel calls, granting `slots` credits; posts
    /// their receives (never before this call).
    //= rfc8167#section-4.3.1
    //# To receive incoming reverse-direction Calls, an RPC-over-RDMA client
    //# endpoint posts enough additional Receive buffers to match its
    //# advertised reverse-direction credit value.
    // They are posted here, before any reply can advertise the grant.
    pub fn enable_backchannel(&mut self, p: &mut dyn Provider, slots: u32) {
        if !self.resp.backchannel {
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
        if !self.resp.backchannel {
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
        self.resp.incoming.get(&handle).map_or(0, |c| c.xid)
    }

    //= rfc8166#section-4.5
    //# o  The rdma_xid field MUST contain the same XID that was in the
    //# rdma_xid field in the failing request;
    //= rfc8166#section-4.5
    //# o  The rdma_proc field MUST contain the value RDMA_ERROR; and
    //= rfc8166#section-4.2.4
    //# A Requester MUST NOT send an RPC-over-RDMA header with the RDMA_ERROR
    //# procedure.
    // Called only where this endpoint is the responder: a server for
    // forward calls, a client for reverse-direction calls.
    pub(super) fn send_error(&mut self, p: &mut dyn Provider, xid: u32, e: ErrorReply) {
        match e {
            ErrorReply::Vers { .. } => self.metrics.err_vers_sent += 1,
            ErrorReply::Chunk => self.metrics.err_chunk_sent += 1,
        }
        let msg = self.params().framing.encode_error(xid, self.resp.grant, e);
        let (mr, len) = match self.res.message_buffer(p, &msg) {
            Ok(x) => x,
            Err(e) => {
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
        };
        let wr_id = self.res.wr(Op::Bare(mr));
        self.metrics.replies_sent += 1;
        self.resp.errors_unacked += 1;
        let wr = SendWr {
            wr_id,
            op: SendOp::Send { solicited: false },
            sges: smallvec![mr.sge(0, len)],
        };
        if let Err(e) = self.post(p, wr) {
            self.res.ops.remove(wr_id);
            self.resp.errors_unacked = self.resp.errors_unacked.saturating_sub(1);
            self.res.zombies.push(mr);
            self.fatal(p, ConnectionError::Provider(e));
        }
    }

    /// Validates a received call's chunk lists; returns the Read chunks
    /// (position, segments, length) and the index of the Position-Zero
    /// Read chunk.
    #[allow(clippy::type_complexity)]
    pub(super) fn validate_call(
        &self,
        shape: Shape,
        chunks: &ChunkLists,
        payload_len: usize,
    ) -> Result<(Vec<(u32, Vec<Segment>, u64)>, Option<usize>), &'static str> {
        let groups: Vec<(u32, Vec<Segment>, u64)> = chunks
            .read_chunks()
            .into_iter()
            .map(|(pos, segs)| {
                let len = segs.iter().map(|s| u64::from(s.length)).sum();
                (pos, segs, len)
            })
            .collect();
        let mut pz = None;
        let mut data = Vec::new();
        for (i, (pos, _, len)) in groups.iter().enumerate() {
            if *pos == 0 {
                //= rfc8166#section-3.5.3
                //# To transmit a Long Message, the sender conveys only the
                //# Transport stream with an RDMA Send operation.  The Payload
                //# stream is not included in the Send buffer in this instance.
                // So a Position-Zero Read chunk (a Long Call) comes with
                // RDMA_NOMSG only.
                if shape == Shape::Msg {
                    return Err("Position-Zero Read chunk in an RDMA_MSG call");
                }
                if pz.is_some() {
                    return Err("two Position-Zero Read chunks");
                }
                pz = Some(i);
            } else {
                data.push((*pos, *len));
            }
        }
        let max = u64::from(self.config.limits.max_message_len);
        let base_len = match (shape, pz) {
            (Shape::Msg, _) => payload_len as u64,
            (Shape::Nomsg, Some(i)) => groups.get(i).map_or(0, |g| g.2),
            //= rfc8166#section-4.2.4
            //# Though any of these MAY be marked as not present, one MUST be present
            //# and MUST hold the Payload stream for this RPC-over-RDMA message.
            // For a call, that is the Position-Zero Read chunk.
            (Shape::Nomsg, None) => {
                return Err("RDMA_NOMSG call without a Position-Zero Read chunk")
            }
        };
        if base_len > max {
            return Err("call exceeds max_message_len");
        }
        marshal::check_positions(base_len as usize, &data, max)?;
        if !groups.is_empty() && self.params().ord == 0 {
            return Err("Read chunks but no RDMA Read resources (ORD 0)");
        }
        Ok((groups, pz))
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
        let unacked =
            self.resp.incoming.len() + self.resp.errors_unacked + self.resp.replies_unacked;
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        shape: Shape,
        chunks: ChunkLists,
        payload: Vec<u8>,
        backchannel: bool,
    ) {
        if self.overrun(p) {
            return;
        }
        //= rfc8166#section-4.5.2
        //# If the rdma_vers field contains a recognized value, but an XDR
        //# parsing error occurs, the Responder MUST reply with an
        //# RDMA_ERROR procedure and set the rdma_err value to ERR_CHUNK.
        if shape == Shape::Msg && chunks.reads.is_empty() {
            self.on_inline_call(p, xid, chunks, payload, backchannel);
            return;
        }
        let (groups, pz) = match self.validate_call(shape, &chunks, payload.len()) {
            Ok(x) => x,
            Err(_why) => {
                self.send_error(p, xid, ErrorReply::Chunk);
                return;
            }
        };
        let inv = invalidation_handle(&chunks);
        let handle = self.resp.next_handle;
        self.resp.next_handle += 1;
        let mut reads = Vec::new();
        let mut rchunks = Vec::with_capacity(groups.len());
        let mut sink_need: u64 = 0;
        for (ci, (position, segments, len)) in groups.into_iter().enumerate() {
            sink_need = sink_need.saturating_add(len);
            let mut off = 0u64;
            for s in &segments {
                if s.length > 0 {
                    reads.push(PendingRead {
                        handle,
                        chunk: ci,
                        seg: *s,
                        sink_offset: off,
                    });
                }
                off += u64::from(s.length);
            }
            rchunks.push(ReadChunk {
                position,
                len: len as usize,
                sink: None,
                data: Vec::new(),
            });
        }
        // A call whose Read chunks can never fit the Read-sink budget (this
        // connection's or the shared one) is refused; one that fits waits
        // for its turn (below).
        let most = self.sink_budget().min(self.resp.lease.limit());
        if sink_need > most.min(u64::from(self.config.limits.max_message_len)) {
            self.send_error(p, xid, ErrorReply::Chunk);
            return;
        }
        let long = pz.is_some();
        if long {
            self.metrics.long_calls_received += 1;
        }
        let call = InCall {
            xid,
            backchannel,
            long,
            base: if shape == Shape::Msg {
                payload
            } else {
                Vec::new()
            },
            pz,
            chunks: rchunks,
            reads_left: reads.len(),
            pending_reads: reads,
            sink_need,
            admitted: false,
            writes: chunks.writes,
            reply: chunks.reply,
            inv,
            delivered: false,
        };
        self.resp.incoming.insert(handle, call);
        // A valid call: the peer is no longer idle.
        self.resp.idle_deadline = None;
        if sink_need == 0 {
            // Nothing to read: no sink, no wait.
            self.reads_done(now, p, handle);
        } else {
            self.resp.sink_waiting.push_back(handle);
            self.admit_waiting(now, p);
            if self.resp.incoming.get(&handle).is_some_and(|c| !c.admitted) {
                self.metrics.read_sink_waits += 1;
            }
        }
    }

    /// [`Connection::on_call`] for an RDMA_MSG call without Read chunks
    /// (every small call): the same checks and outcome as the general path
    /// (`validate_call`, then `reads_done` with nothing to read), without
    /// staging the call for RDMA Reads: the message is the inline payload
    /// as it is, delivered at once.
    pub(super) fn on_inline_call(
        &mut self,
        p: &mut dyn Provider,
        xid: u32,
        chunks: ChunkLists,
        payload: Vec<u8>,
        backchannel: bool,
    ) {
        if payload.len() as u64 > u64::from(self.config.limits.max_message_len) {
            self.send_error(p, xid, ErrorReply::Chunk);
            return;
        }
        let inv = invalidation_handle(&chunks);
        let handle = self.resp.next_handle;
        self.resp.next_handle += 1;
        //= rfc8167#section-5.1
        //# Whether presented inline or as a separate chunk, the ONC RPC Call
        //# header MUST start with the same XID value that is present in the
        //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
        //# contain the value CALL.
        // As in `reads_done`: a mismatch is answered with ERR_CHUNK.
        if rpc_prefix(&payload) != Some((xid, MsgType::CALL)) {
            self.metrics.rpc_header_mismatches += 1;
            self.send_error(p, xid, ErrorReply::Chunk);
            return;
        }
        let ev = IncomingCall {
            handle: CallHandle(handle),
            xid,
            backchannel,
            message: payload,
            ddp: Vec::new(),
            long: false,
            write_chunks: chunks.writes.iter().map(WriteChunk::total_len).collect(),
            reply_chunk: chunks.reply.as_ref().map(WriteChunk::total_len),
        };
        self.resp.incoming.insert(
            handle,
            InCall {
                xid,
                backchannel,
                long: false,
                base: Vec::new(),
                pz: None,
                chunks: Vec::new(),
                reads_left: 0,
                pending_reads: Vec::new(),
                sink_need: 0,
                admitted: false,
                writes: chunks.writes,
                reply: chunks.reply,
                inv,
                delivered: true,
            },
        );
        self.resp.idle_deadline = None;
        self.metrics.calls_received += 1;
        self.events.push_back(Event::CallReceived(ev));
    }

    /// Octets of Read sinks this connection may have registered at once
    /// ([`Limits::max_read_sink_bytes`](crate::Limits::max_read_sink_bytes),
    /// several calls' worth: it was once also capped at one message's
    /// length, which serialised the Read chunks of a connection's calls).
    pub(super) fn sink_budget(&self) -> u64 {
        self.config.limits.max_read_sink_bytes
    }

    /// Registers the Read sinks of waiting calls, in arrival order, while
    /// they fit this connection's Read-sink budget and the shared one, and
    /// starts their RDMA Reads (whose deadline starts now).
    pub(super) fn admit_waiting(&mut self, now: Instant, p: &mut dyn Provider) {
        let budget = self.sink_budget();
        let sink_access = if p.caps().read_sink_needs_remote_write {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        } else {
            Access::LOCAL_WRITE
        };
        while self.error.is_none() {
            let Some(&handle) = self.resp.sink_waiting.front() else {
                break;
            };
            let Some(need) = self.resp.incoming.get(&handle).map(|c| c.sink_need) else {
                self.resp.sink_waiting.pop_front();
                continue;
            };
            if self.resp.sink_bytes.saturating_add(need) > budget || !self.resp.lease.take(need) {
                break; // backpressure: later calls wait behind this one
            }
            self.resp.sink_waiting.pop_front();
            let lens: Vec<usize> = self
                .resp
                .incoming
                .get(&handle)
                .map(|c| c.chunks.iter().map(|c| c.len).collect())
                .unwrap_or_default();
            let mut sinks: Vec<Option<MemoryRegion>> = Vec::with_capacity(lens.len());
            let mut failed = false;
            for len in lens {
                if len == 0 || failed {
                    sinks.push(None);
                    continue;
                }
                let mut v = Mrs::new();
                match self.res.register(p, vec![0u8; len], sink_access, &mut v) {
                    Ok(mr) => sinks.push(Some(mr)),
                    Err(_) => {
                        failed = true;
                        sinks.push(None);
                    }
                }
            }
            if failed {
                self.resp.lease.give_back(need);
                self.res.zombies.extend(sinks.into_iter().flatten());
                self.res.reap(p);
                if let Some(call) = self.resp.incoming.remove(&handle) {
                    self.send_error(p, call.xid, ErrorReply::Chunk);
                }
                continue;
            }
            self.resp.sink_bytes += need;
            self.metrics.max_read_sink_bytes =
                self.metrics.max_read_sink_bytes.max(self.resp.sink_bytes);
            let Some(call) = self.resp.incoming.get_mut(&handle) else {
                continue;
            };
            call.admitted = true;
            for (c, mr) in call.chunks.iter_mut().zip(sinks) {
                c.sink = mr;
            }
            let reads = std::mem::take(&mut call.pending_reads);
            self.resp.reads.extend(reads);
            if let Some(t) = self.config.read_timeout {
                self.resp.read_deadlines.insert(now + t, handle);
            }
        }
        if self.resp.sink_waiting.is_empty() {
            self.resp.lease.cancel();
        }
        self.issue_reads(p);
    }

    pub(super) fn issue_reads(&mut self, p: &mut dyn Provider) {
        // Never more RDMA Reads outstanding than the ORD the connection
        // negotiated (the peer's IRD): an excess Read Request is fatal at
        // the peer's RNIC.
        let ord = usize::from(self.params().ord);
        while self.error.is_none() && self.resp.reads_outstanding < ord {
            let Some(r) = self.resp.reads.pop_front() else {
                break;
            };
            let Some(sink) = self
                .resp
                .incoming
                .get(&r.handle)
                .and_then(|c| c.chunks.get(r.chunk))
                .and_then(|c| c.sink)
            else {
                continue;
            };
            let wr_id = self.res.wr(Op::Read(r.handle));
            self.metrics.rdma_reads += 1;
            self.metrics.rdma_read_bytes += u64::from(r.seg.length);
            let res = self.post(
                p,
                SendWr {
                    wr_id,
                    op: SendOp::Read {
                        remote: RemoteAddr {
                            stag: Stag(r.seg.handle),
                            offset: r.seg.offset,
                        },
                    },
                    sges: smallvec![sink.sge(r.sink_offset, r.seg.length)],
                },
            );
            if let Err(e) = res {
                self.res.ops.remove(wr_id);
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
            self.resp.reads_outstanding += 1;
            self.metrics.max_reads_in_flight = self
                .metrics
                .max_reads_in_flight
                .max(self.resp.reads_outstanding as u64);
        }
    }

    pub(super) fn reads_done(&mut self, now: Instant, p: &mut dyn Provider, handle: u64) {
        let mut sinks = Vec::new();
        let Some(call) = self.resp.incoming.get_mut(&handle) else {
            return;
        };
        let call_admitted = std::mem::take(&mut call.admitted);
        let sink_need = call.sink_need;
        for c in &mut call.chunks {
            if let Some(mr) = c.sink.take() {
                // Every Read into the sink has completed: its registration
                // ends and the buffer itself is the chunk's data (no copy).
                // Should it still be held, the data is copied out and the
                // region released as usual.
                match p.deregister(&mr) {
                    Ok(Buffer::Owned(buf)) if buf.len() >= c.len => {
                        let mut v = Vec::from(buf);
                        v.truncate(c.len);
                        c.data = v;
                    }
                    Ok(other) => c.data = other.get(..c.len).unwrap_or_default().to_vec(),
                    Err(_) => {
                        c.data = p
                            .region(&mr)
                            .ok()
                            .and_then(|b| b.get(..c.len))
                            .map(<[u8]>::to_vec)
                            .unwrap_or_default();
                        sinks.push(mr);
                    }
                }
            }
        }
        let base = match call.pz {
            Some(i) => call
                .chunks
                .get_mut(i)
                .map(|c| std::mem::take(&mut c.data))
                .unwrap_or_default(),
            None => std::mem::take(&mut call.base),
        };
        let data: Vec<(u32, Vec<u8>)> = call
            .chunks
            .iter_mut()
            .filter(|c| c.position != 0)
            .map(|c| (c.position, std::mem::take(&mut c.data)))
            .collect();
        //= rfc8166#section-3.4.5.2
        //# If the Requester chooses to include roundup padding in a Read
        //# chunk, the chunk's total length MUST be the sum of the encoded
        //# length of the data item and the length of the roundup padding.
        // Both forms are accepted: a chunk of unaligned length is followed
        // in the reassembled stream by zero octets of XDR pad.
        let (message, ddp) = marshal::reassemble(base, &data);
        //= rfc8166#section-4.2.1
        //# This XID MUST be the same as the XID in the RPC message.
        //= rfc8167#section-5.1
        //# Whether presented inline or as a separate chunk, the ONC RPC Call
        //# header MUST start with the same XID value that is present in the
        //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
        //# contain the value CALL.
        //= rfc8166#section-4.5
        //# If other errors are detected in the RPC-over-RDMA header of an RPC
        //# Call message, a Responder MUST send an RDMA_ERROR message back to
        //# the Requester.
        // RFC 8166 lets a receiver ignore the RPC XID; we do not: a call
        // whose RPC header disagrees with its transport header (forward or
        // reverse, inline or in a Position-Zero Read chunk) is malformed and
        // answered with ERR_CHUNK, never delivered.
        let header_ok = rpc_prefix(&message) == Some((call.xid, MsgType::CALL));
        let xid = call.xid;
        call.delivered = header_ok;
        let ev = IncomingCall {
            handle: CallHandle(handle),
            xid: call.xid,
            backchannel: call.backchannel,
            message,
            ddp,
            long: call.long,
            write_chunks: call.writes.iter().map(WriteChunk::total_len).collect(),
            reply_chunk: call.reply.as_ref().map(WriteChunk::total_len),
        };
        for mr in sinks {
            self.res.release(p, mr);
        }
        if header_ok {
            self.metrics.calls_received += 1;
            self.events.push_back(Event::CallReceived(ev));
        } else {
            self.resp.incoming.remove(&handle);
            self.metrics.rpc_header_mismatches += 1;
            self.send_error(p, xid, ErrorReply::Chunk);
        }
        if call_admitted {
            // The Reads are over: no deadline any more.
            self.resp.read_deadlines.remove(handle);
            self.resp.sink_bytes = self.resp.sink_bytes.saturating_sub(sink_need);
            self.resp.lease.give_back(sink_need);
            self.admit_waiting(now, p);
        }
    }

    /// Posts a reply: the RDMA Writes of `plan` (sources registered here,
    /// read-only and local) and then the Send of `send` (a registered Send
    /// buffer already holding the message, and its length), which this
    /// takes over (released with the job, or on failure).
    pub(super) fn post_reply(
        &mut self,
        p: &mut dyn Provider,
        sources: Vec<Bytes>,
        plan: Vec<WriteOp>,
        send: (MemoryRegion, u32),
        op: SendOp,
    ) -> Result<(), ConnectionError> {
        let (send_mr, send_len) = send;
        if plan.is_empty() {
            // No RDMA Write: no source is registered, and the Send is the
            // whole reply (no job to track).
            let wr_id = self.res.wr(Op::ReplySend(send_mr));
            let sges: Sges = smallvec![send_mr.sge(0, send_len)];
            if let Err(e) = self.post(p, SendWr { wr_id, op, sges }) {
                self.res.ops.remove(wr_id);
                self.res.zombies.push(send_mr);
                return Err(ConnectionError::Provider(e));
            }
            return Ok(());
        }
        let job = self.resp.next_job;
        self.resp.next_job += 1;
        let mut shared = Vec::new();
        let mut srcs: Vec<Option<MemoryRegion>> = Vec::with_capacity(sources.len());
        for (i, source) in sources.into_iter().enumerate() {
            if source.is_empty() || !plan.iter().any(|w| w.source == i) {
                srcs.push(None);
                continue;
            }
            // Local read only: the source of RDMA Writes, never exposed to
            // the peer (no STag of it is ever sent).
            match p.register_shared(source, Access::NONE) {
                Ok(mr) => {
                    shared.push(mr);
                    srcs.push(Some(mr));
                }
                Err(e) => {
                    self.res.zombies.extend(shared);
                    self.res.zombies.push(send_mr);
                    return Err(ConnectionError::Provider(e));
                }
            }
        }
        self.resp.jobs.insert(
            job,
            ReplyJob {
                mrs: smallvec![send_mr],
                shared,
                pending: 0,
            },
        );
        let writes = plan.into_iter().filter_map(|w| {
            let WriteOp {
                remote,
                source: i,
                offset: off,
                len: n,
            } = w;
            let src = srcs.get(i).copied().flatten()?;
            let sges: Sges = smallvec![src.sge(off as u64, n as u32)];
            Some((SendOp::Write { remote }, sges, n))
        });
        let send: Sges = smallvec![send_mr.sge(0, send_len)];
        for (op, sges, n) in writes.chain([(op, send, 0)]) {
            if let SendOp::Write { .. } = op {
                self.metrics.rdma_writes += 1;
                self.metrics.rdma_write_bytes += n as u64;
            }
            let wr_id = self.res.wr(Op::Reply(job));
            if let Some(j) = self.resp.jobs.get_mut(&job) {
                j.pending += 1;
            }
            if let Err(e) = self.post(p, SendWr { wr_id, op, sges }) {
                self.res.ops.remove(wr_id);
                if let Some(j) = self.resp.jobs.get_mut(&job) {
                    j.pending -= 1;
                }
                return Err(ConnectionError::Provider(e));
            }
        }
        Ok(())
    }

    pub(super) fn job_step(&mut self, p: &mut dyn Provider, job: u64) {
        let done = match self.resp.jobs.get_mut(&job) {
            Some(j) => {
                j.pending = j.pending.saturating_sub(1);
                j.pending == 0
            }
            None => false,
        };
        if done {
            if let Some(j) = self.resp.jobs.remove(&job) {
                self.resp.replies_unacked = self.resp.replies_unacked.saturating_sub(1);
                for mr in j.mrs {
                    self.res.release(p, mr);
                }
                for mr in j.shared {
                    if p.deregister(&mr).is_err() {
                        self.res.zombies.push(mr);
                    }
                }
            }
        }
    }

    /// The connection ended: received calls, their Read sinks and Reads,
    /// their place in the Read-sink budget, and the reply jobs are
    /// dropped (their regions become zombies).
    pub(super) fn drop_incoming(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.resp.incoming) {
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
