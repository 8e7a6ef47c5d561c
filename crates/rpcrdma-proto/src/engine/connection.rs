//! [`Connection`]: the per-connection state machine.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;

use std::task::Waker;
use std::time::Instant;

use super::framing::{
    invalidation_handle, rpc_prefix, ErrorReply, Incoming, RdmaErrorReport, Shape,
};
use super::marshal::{self, pad4, DdpItem};
use super::plan::{plan_call, plan_reply, CallForm, CallLens, CallPlan, ReplyPlan, WriteOp};
use super::requester::Requester;
use super::resources::{Mrs, Op, Res};
use super::responder::Responder;
use super::setup::{Params, Setup};
use super::{
    CallError, CallFailure, CallHandle, CallId, Config, ConnectionError, Event, IncomingCall,
    Metrics, OutgoingCall, OutgoingReply, PeerError, Piece, Reply, ReplyForm, Resources, Role,
};
use crate::provider::{
    Access, Buffer, Bytes, Completion, ConnectionInfo, DisconnectReason, MemoryRegion, Opcode,
    Provider, ProviderError, RemoteAddr, SendOp, SendWr, Sges, Stag, Status,
};
use crate::wire::chunk::{ChunkLists, ReadList, ReadSegment, Segment, WriteChunk, WriteList};
use crate::wire::private_data::Negotiated;
use crate::wire::rpc::MsgType;
use smallvec::{smallvec, SmallVec};

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

/// One RPC-over-RDMA connection: requester and responder at once. See the
/// [module docs](super).
#[derive(Debug)]
pub struct Connection {
    pub(super) config: Config,
    pub(super) setup: Setup,
    pub(super) error: Option<ConnectionError>,
    /// Work requests in flight, pools, receive buffers, backlog, zombies.
    pub(super) res: Res,
    /// Our calls.
    pub(super) req: Requester,
    /// The calls we received.
    pub(super) resp: Responder,
    pub(super) events: VecDeque<Event>,
    pub(super) metrics: Metrics,
}

const UNKNOWN_XID: &str = "unknown XID";

impl Connection {
    /// A connection engine for a connection that is being set up.
    pub fn new(config: Config) -> Connection {
        let send_size = config.inline_send.max(1024) as usize;
        //= rfc8166#section-3.3.3
        //# Receiver implementations MUST support inline thresholds of 1024 bytes
        //# but MAY support larger inline thresholds values.
        let recv_size = config.inline_recv.max(1024) as usize;
        Connection {
            setup: Setup::new(&config),
            req: Requester::new(&config),
            resp: Responder::new(&config),
            config,
            error: None,
            res: Res::new(send_size, recv_size),
            events: VecDeque::new(),
            metrics: Metrics::default(),
        }
    }

    /// The engine for the next connection after this one was lost: the
    /// calls that failed with `retransmit: true` are queued again with
    /// their original [`CallId`]s and XIDs, credits start again at one,
    /// XID and id counters and metrics carry on. The old provider should be
    /// dropped (its registrations die with it).
    //= rfc8166#section-3.3.3
    //# A Responder MAY exceed this basic
    //# level of configuration, but a Requester MUST NOT assume more than one
    //# credit is available and MUST receive a valid reply from the Responder
    //# carrying the actual number of available credits, prior to sending its
    //# next request.
    // Credits start again at one on every connection. A retransmission goes
    // on a new connection only: the credit of a call that is still
    // outstanding cannot be recovered on the same connection (Linux
    // xprt_rdma_send_request drops the connection to retransmit;
    // rpcrdma_reset_cwnd).
    pub fn reconnect(mut self, config: Config) -> Connection {
        let mut next = Connection::new(config);
        next.req.next_xid = self.req.next_xid;
        next.req.next_id = self.req.next_id;
        next.resp.next_handle = self.resp.next_handle;
        next.metrics = self.metrics;
        next.metrics.credits_granted = 0;
        for c in self.req.retransmits.drain(..) {
            let mut oc = OutCall::new(c.id, c.xid, c.call, c.retransmit);
            oc.transmissions = c.transmissions;
            oc.timeouts = c.timeouts;
            next.req.queue.push_back(oc);
        }
        next
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

    // ------------------------------------------------------------------
    // A. getters

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// Client or server.
    pub fn role(&self) -> Role {
        self.config.role
    }
    /// Inline thresholds and remote invalidation, once established.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.setup.negotiated()
    }
    /// Calls we may have outstanding (the peer's grant, clamped).
    pub fn credits(&self) -> u32 {
        self.req.credits
    }
    /// Our calls sent (their Send accepted by the provider) and not yet
    /// answered.
    pub fn outstanding(&self) -> usize {
        self.req.outstanding
    }
    /// Our calls waiting for a credit (or for the connection, or for room
    /// in the send queue).
    pub fn queued(&self) -> usize {
        self.req.queue.len()
    }
    /// Received calls not yet answered.
    pub fn pending_incoming(&self) -> usize {
        self.resp.incoming.len()
    }
    /// The credit grant we send as responder.
    pub fn grant(&self) -> u32 {
        self.resp.grant
    }
    /// Counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
    /// True once the connection has failed or been closed.
    pub fn is_closed(&self) -> bool {
        self.error.is_some()
    }
    /// The sticky connection error.
    pub fn error(&self) -> Option<&ConnectionError> {
        self.error.as_ref()
    }
    /// Work requests posted and not completed yet.
    pub fn inflight_work_requests(&self) -> usize {
        self.res.ops.len()
    }
    /// What the connection holds now (see [`Resources`]).
    pub fn resources(&self) -> Resources {
        Resources {
            work_requests: self.res.ops.len(),
            receives_posted: self.res.recv_posted,
            pooled_regions: self.res.recv_free.len() + self.res.send_pool.len(),
            calls_received: self.resp.incoming.len(),
            reply_jobs: self.resp.jobs.len(),
            calls_sent: self.req.calls.len() + self.req.queue.len(),
            read_sink_bytes: self.resp.sink_bytes,
            read_budget_held: self.resp.lease.held(),
            zombies: self.res.zombies.len(),
        }
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

    // ------------------------------------------------------------------
    // B. inputs

    /// Posts the receives a responder needs before the peer can send (call
    /// before accepting; [`Connection::handle_established`] does it too).
    pub fn prepare_receives(&mut self, p: &mut dyn Provider) {
        self.clamp_grant(p);
        self.refill(p);
    }

    /// The connection is up: applies the peer's RFC 8797 private data,
    /// posts receives, sends queued calls.
    pub fn handle_established(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        info: &ConnectionInfo,
    ) {
        if self.error.is_some() || self.setup.is_ready() {
            return;
        }
        self.setup.establish(&self.config, info);
        self.resp.idle_deadline = self.config.idle_timeout.map(|d| now + d);
        self.clamp_grant(p);
        self.refill(p);
        self.pump(now, p);
    }

    /// The provider reported the end of the connection.
    pub fn handle_disconnected(&mut self, p: &mut dyn Provider, reason: DisconnectReason) {
        self.fatal(p, ConnectionError::Disconnected(reason));
    }

    /// Every completion the provider returns goes here.
    pub fn handle_completion(&mut self, now: Instant, p: &mut dyn Provider, c: Completion) {
        let Some(op) = self.res.ops.remove(c.wr_id) else {
            return;
        };
        if !c.status.is_ok() && c.status != Status::Flushed {
            self.fatal(
                p,
                ConnectionError::Completion {
                    status: c.status,
                    blame: c.status.blame(),
                },
            );
        }
        if !c.status.is_ok() || self.error.is_some() {
            self.cleanup_dead(op);
            self.res.reap(p);
            return;
        }
        match op {
            Op::Recv(mr) => {
                self.res.recv_posted = self.res.recv_posted.saturating_sub(1);
                let len = c.byte_len as usize;
                // The header is decoded in place, in the receive buffer;
                // only the RPC message that follows it is copied out (it
                // becomes the message handed to the upper layer).
                let data = p.region(&mr).ok().and_then(|b| b.get(..len)).map(|b| {
                    let incoming = self.params().framing.decode(b, &self.config.limits);
                    let payload = match &incoming {
                        Incoming::Data { payload_offset, .. } => {
                            b.get(*payload_offset..).unwrap_or_default().to_vec()
                        }
                        _ => Vec::new(),
                    };
                    (incoming, payload)
                });
                self.res.recv_free.push(mr);
                let inv = match c.opcode {
                    Opcode::RecvWithInvalidate { stag } => {
                        self.metrics.remote_invalidations += 1;
                        Some(stag)
                    }
                    _ => None,
                };
                // Repost first: whatever this message makes us send (a
                // reply, an error, a queued call) may let the peer send
                // again before we come back here.
                self.refill(p);
                match data {
                    Some((incoming, payload)) => self.on_message(now, p, incoming, payload, inv),
                    None => self.metrics.dropped += 1,
                }
                self.refill(p);
            }
            Op::CallSend(xid) => {
                if let Some(call) = self.req.calls.get_mut(&xid) {
                    call.send_done = true;
                }
                self.try_finish(p, xid);
            }
            Op::CallInv(xid) => {
                if let Some(call) = self.req.calls.get_mut(&xid) {
                    call.pending_inv = call.pending_inv.saturating_sub(1);
                }
                self.try_finish(p, xid);
            }
            Op::Read(handle) => {
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
            Op::Reply(job) => self.job_step(p, job),
            Op::ReplySend(mr) => {
                self.resp.replies_unacked = self.resp.replies_unacked.saturating_sub(1);
                self.res.release(p, mr);
            }
            Op::Bare(mr) => {
                self.resp.errors_unacked = self.resp.errors_unacked.saturating_sub(1);
                self.res.release(p, mr);
            }
        }
        self.drain_backlog(now, p);
        self.res.reap(p);
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

    // ------------------------------------------------------------------
    // C. commands

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

    /// Closes the connection: outstanding calls fail with
    /// `retransmit: true`.
    pub fn close(&mut self, p: &mut dyn Provider) {
        self.fatal(p, ConnectionError::LocalClose);
    }

    // ------------------------------------------------------------------
    // D. outputs

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
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

    /// The XID of received call `handle` (0 if there is none).
    pub(super) fn incoming_xid(&self, handle: u64) -> u32 {
        self.resp.incoming.get(&handle).map_or(0, |c| c.xid)
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

    // ------------------------------------------------------------------
    // internals: roles and thresholds

    /// Posts a Send-queue WR that needs no credit (see [`Res::post`]).
    pub(super) fn post(&mut self, p: &mut dyn Provider, wr: SendWr) -> Result<(), ProviderError> {
        self.res.post(p, wr, &mut self.metrics)
    }

    /// What setup settled (see [`Params`]).
    #[inline]
    pub(super) fn params(&self) -> &Params {
        self.setup.params()
    }

    /// After a completion, while the send queue was full: posts the WRs
    /// kept back, then, once they are all taken, the calls that wait
    /// (nothing to do, and no call, in the usual case).
    #[inline]
    pub(super) fn drain_backlog(&mut self, now: Instant, p: &mut dyn Provider) {
        if self.res.send_queue_full {
            self.drain_backlog_slow(now, p);
        }
    }

    #[inline(never)]
    pub(super) fn drain_backlog_slow(&mut self, now: Instant, p: &mut dyn Provider) {
        if self.error.is_some() {
            return;
        }
        match self.res.drain_backlog(p) {
            // Calls are checked against the credits again as they leave
            // the queue (`pump`).
            Ok(true) => self.pump(now, p),
            Ok(false) => {}
            Err(e) => self.fatal(p, ConnectionError::Provider(e)),
        }
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

    // ------------------------------------------------------------------
    // receives

    //= rfc8166#section-3.3.1
    //# A Requester MUST maintain enough receive resources to accommodate
    //# expected replies.
    //= rfc8167#section-4.3.2
    //# That is, it posts no fewer buffers than the number of credits granted
    //# in the rdma_credit field of forward-direction RPC replies.
    // The target is the responder budget (our grant) plus one per
    // outstanding call of ours; receives are posted before the credits are
    // granted.
    ///
    /// The check that nothing is missing is inlined (most calls find the
    /// receives complete); the posting loop is `refill_slow`.
    #[inline]
    pub(super) fn refill(&mut self, p: &mut dyn Provider) {
        if self.res.recv_posted < self.recv_target() {
            self.refill_slow(p);
        }
    }

    /// Receives to keep posted: the responder budget (our grant) plus one
    /// per outstanding call of ours.
    #[inline]
    pub(super) fn recv_target(&self) -> usize {
        self.resp.budget() + self.req.outstanding
    }

    #[inline(never)]
    pub(super) fn refill_slow(&mut self, p: &mut dyn Provider) {
        if self.error.is_some() {
            return;
        }
        let target = self.recv_target();
        if let Err(e) = self.res.post_receives(p, target) {
            self.fatal(p, ConnectionError::Provider(e));
        }
    }

    /// A received message, decoded; `payload` is the RPC message that
    /// followed an RDMA_MSG / RDMA_NOMSG header (empty otherwise).
    pub(super) fn on_message(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        incoming: Incoming,
        payload: Vec<u8>,
        inv: Option<Stag>,
    ) {
        match incoming {
            Incoming::Drop { .. } => self.metrics.dropped += 1,
            Incoming::Reject {
                xid,
                answer,
                reason,
            } => match self.config.role {
                Role::Server => {
                    if !self.overrun(p) {
                        self.send_error(p, xid, answer);
                    }
                }
                //= rfc8166#section-4.5
                //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
                //# message, a Requester MUST silently discard the message.
                //= rfc8166#section-4.6.1
                //# Requesters MUST silently discard the message.
                // Nothing is answered and the call the XID names keeps waiting
                // (for a good reply, or for its timeout: the connection is
                // then replaced and the call retransmitted). Linux fails the
                // call with -EIO instead; the RFC is followed here.
                Role::Client => {
                    let _ = (reason, now, inv);
                    if self.awaiting(xid).is_some() {
                        self.metrics.bad_replies += 1;
                    }
                    self.metrics.dropped += 1;
                }
            },
            Incoming::Error { xid, credit, error } => {
                match error {
                    RdmaErrorReport::Vers { .. } => self.metrics.err_vers_received += 1,
                    RdmaErrorReport::Chunk => self.metrics.err_chunk_received += 1,
                    RdmaErrorReport::Other(_) => self.metrics.err_other_received += 1,
                }
                // An RDMA_ERROR fails only that XID; the connection stays
                // up (Linux rpcrdma_decode_error). It is never answered:
                //= rfc8166#section-4.2.4
                //# A Responder MUST silently discard RDMA_ERROR procedures.
                // (At a server, one that names a reverse call of ours fails
                // that call; any other is dropped and counted as a bad XID.)
                self.requester_reply(
                    now,
                    p,
                    xid,
                    Some(credit),
                    inv,
                    Err(CallFailure::RdmaError(error)),
                );
            }
            Incoming::Data {
                xid,
                credit,
                shape,
                chunks,
                payload_offset: _,
            } => {
                // msg_type of an inline RPC message (RFC 5531: CALL = 0,
                // REPLY = 1) says which direction it travels (RFC 8167
                // section 4.1); an RDMA_NOMSG carries none inline.
                let msg_type = match shape {
                    Shape::Msg => rpc_prefix(&payload).map(|(_, t)| t),
                    Shape::Nomsg => None,
                };
                match self.config.role {
                    Role::Client => {
                        // A reverse-direction call: an inline CALL, or an
                        // RDMA_NOMSG with a Read list (a reply never has
                        // one).
                        let reverse_call = match shape {
                            Shape::Msg => msg_type == Some(MsgType::CALL),
                            Shape::Nomsg => !chunks.reads.is_empty(),
                        };
                        if !reverse_call {
                            self.on_reply(now, p, xid, credit, shape, &chunks, payload, inv);
                        } else if !self.resp.enabled {
                            //= rfc8167#section-6
                            //# If an endpoint is not prepared to receive an incoming reverse-
                            //# direction message, loss of the RDMA connection might result.
                            // We drop it instead (no receive was ever granted for it).
                            self.metrics.dropped += 1;
                        } else if !chunks.is_empty() {
                            if self.overrun(p) {
                                return;
                            }
                            //= rfc8167#section-5.3
                            //# If a reverse-direction requester provides a non-empty chunk list
                            //# to a Responder that does not support chunks, the Responder MUST
                            //# reply with an RDMA_ERROR message with rdma_err field set to
                            //# ERR_CHUNK.
                            self.send_error(p, xid, ErrorReply::Chunk);
                        } else {
                            self.on_call(now, p, xid, shape, chunks, payload, true);
                        }
                    }
                    Role::Server if msg_type == Some(MsgType::REPLY) => {
                        self.on_reply(now, p, xid, credit, shape, &chunks, payload, inv);
                    }
                    Role::Server => self.on_call(now, p, xid, shape, chunks, payload, false),
                }
            }
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

    // ------------------------------------------------------------------
    // requester

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

    // ------------------------------------------------------------------
    // responder

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

    // ------------------------------------------------------------------
    // failure

    /// Resources of a WR that completed after the connection failed.
    pub(super) fn cleanup_dead(&mut self, op: Op) {
        match op {
            Op::Recv(mr) => {
                self.res.recv_posted = self.res.recv_posted.saturating_sub(1);
                self.res.zombies.push(mr);
            }
            Op::Bare(mr) => {
                self.resp.errors_unacked = self.resp.errors_unacked.saturating_sub(1);
                self.res.zombies.push(mr);
            }
            Op::ReplySend(mr) => self.res.zombies.push(mr),
            Op::Read(_) => {
                self.resp.reads_outstanding = self.resp.reads_outstanding.saturating_sub(1)
            }
            Op::CallSend(_) | Op::CallInv(_) | Op::Reply(_) => {}
        }
    }

    /// Ends the connection (sticky): calls without a reply are kept for
    /// retransmission, calls whose reply arrived complete now (the peer can
    /// no longer touch their memory), everything else is released.
    pub(super) fn fatal(&mut self, p: &mut dyn Provider, err: ConnectionError) {
        if self.error.is_some() {
            return;
        }
        self.error = Some(err.clone());
        self.res.closed = true;
        p.disconnect();
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
        self.res.zombies.append(&mut self.res.recv_free);
        self.res.zombies.append(&mut self.res.send_pool);
        for wr in std::mem::take(&mut self.res.backlog) {
            if let Some(op) = self.res.ops.remove(wr.wr_id) {
                self.cleanup_dead(op);
            }
        }
        self.events.push_back(Event::ConnectionLost(err));
        self.res.reap(p);
    }
}
