//! [`Connection`], the orchestrator: the engine's inputs and outputs, the
//! routing of every completion (by the `Op` its work request carries) and
//! of every received message (to the requester or the responder), the
//! receive queue, and the sticky error. What each half does is in
//! `requester` and `responder`.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::framing::{rpc_prefix, Incoming, Shape};
use super::requester::Requester;
use super::resources::{Op, Res};
use super::responder::Responder;
use super::setup::{Params, Setup};
use super::slab::Slab;
use super::{Config, ConnectionError, Event, Metrics, Resources, Role};
use crate::provider::{
    Completion, ConnectionInfo, DisconnectReason, MemoryRegion, Opcode, Provider, ProviderError,
    SendWr, Stag, Status,
};
use crate::wire::chunk::ChunkLists;
use crate::wire::private_data::Negotiated;
use crate::wire::rpc::MsgType;

/// Which way the calls a half of the connection handles travel (RFC 8167):
/// forward (client to server) or reverse (the backchannel, server to
/// client). A client's requester and a server's responder are forward, a
/// server's requester and a client's responder reverse. The requester and
/// the responder are the same code in both directions; this value is what
/// differs (a reverse half carries inline messages only, and its credits
/// are the backchannel slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    /// Client to server.
    Forward,
    /// Server to client (the backchannel).
    Reverse,
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

impl Connection {
    /// A connection engine for a connection that is being set up.
    pub fn new(config: Config) -> Connection {
        let send_size = config.inline_send.max(1024) as usize;
        //= rfc8166#section-3.3.3
        //# Receiver implementations MUST support inline thresholds of 1024 bytes
        //# but MAY support larger inline thresholds values.
        let mut recv_size = config.inline_recv.max(1024) as usize;
        if config.rpcrdma_version != super::RpcRdmaVersion::V1 {
            // Version 2's default Receive Buffer Size holds even if the
            // peer never learns ours (decision 2).
            recv_size = recv_size.max(crate::wire::v2::RBSIZ_DEFAULT as usize);
        }
        // The role fixes the direction of each half (and nothing else
        // in them).
        let (calls, answers) = match config.role {
            Role::Client => (Direction::Forward, Direction::Reverse),
            Role::Server => (Direction::Reverse, Direction::Forward),
        };
        Connection {
            setup: Setup::new(&config),
            req: Requester::new(&config, calls),
            resp: Responder::new(&config, answers),
            config,
            error: None,
            res: Res::new(send_size, recv_size),
            events: VecDeque::new(),
            metrics: Metrics::default(),
        }
    }

    /// The engine for the next connection after this one was lost: the
    /// calls that failed with `retransmit: true` are queued again with
    /// their original [`CallId`](super::CallId)s and XIDs, credits start again at one,
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
    ///
    /// A connection whose peer showed it speaks no version 2 (see
    /// [`Connection::peer_is_v1_only`]) makes an `Auto` configuration start
    /// the next one in version 1.
    pub fn reconnect(mut self, mut config: Config) -> Connection {
        if config.rpcrdma_version == super::RpcRdmaVersion::Auto {
            config.rpcrdma_version = self.next_policy();
        }
        let mut next = Connection::new(config);
        next.req.carry_over(&mut self.req);
        next.resp.incoming = Slab::starting_at(self.resp.incoming.seq());
        next.metrics = self.metrics;
        next.metrics.credits_granted = 0;
        next
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
            pooled_sink_bytes: self.res.pooled_sink_bytes(),
        }
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
        // A client that may speak version 2 probes with its CONNPROP, under
        // a fresh XID, and the call timeout.
        let probe = (self.config.role == Role::Client
            && self.config.rpcrdma_version != super::RpcRdmaVersion::V1)
            .then(|| {
                let xid = self.req.next_xid;
                self.req.next_xid = xid.wrapping_add(1);
                (xid, self.config.call_timeout.map(|d| now + d))
            });
        let can_invalidate = p.caps().remote_invalidation;
        let recv_size = self.res.recv_size();
        self.setup
            .establish(&self.config, info, probe, recv_size, can_invalidate);
        self.resp.idle_deadline = self.config.idle_timeout.map(|d| now + d);
        self.clamp_grant(p);
        self.refill(p);
        self.send_probe(p);
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
            Op::Recv(mr) => self.on_receive(now, p, mr, c.byte_len as usize, c.opcode),
            Op::CallSend(xid) => {
                self.call_sent(p, xid);
                self.pump_requeued(now, p);
            }
            Op::CallInv(xid) => {
                self.call_invalidated(p, xid);
                self.pump_requeued(now, p);
            }
            Op::Read { handle, len } => self.read_done(now, p, handle, len, c.byte_len),
            Op::Reply(job) => self.job_step(p, job),
            Op::ReplySend(mr) => self.reply_sent(p, mr),
            Op::Bare(mr) => self.error_sent(p, mr),
            Op::Control(mr) => self.res.release(p, mr),
        }
        self.drain_backlog(now, p);
        self.res.note_pool_use(now);
        self.res.reap(p);
    }

    /// A receive completed with `len` octets in `mr`: decode, repost, and
    /// hand the message to the half it is for.
    pub(super) fn on_receive(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        mr: MemoryRegion,
        len: usize,
        opcode: Opcode,
    ) {
        self.res.recv_posted = self.res.recv_posted.saturating_sub(1);
        // The header is decoded in place, in the receive buffer;
        // only the RPC message that follows it is copied out (it
        // becomes the message handed to the upper layer).
        // Small received messages (calls, replies) are carved from the
        // connection's block (`arena`). A reply's XID is the caller's own
        // (`Requester::wire_xid`), so a runtime that puts its XID back
        // (`Message::set_xid`) finds it there and copies nothing.
        let carve = true;
        let received = &mut self.res.received;
        let data = p.region(&mr).ok().and_then(|b| b.get(..len)).map(|b| {
            let framing = self.setup.framing_for(b);
            let incoming = framing.decode(b, &self.config.limits);
            let payload = match &incoming {
                Incoming::Data { payload_offset, .. } => {
                    let m = b.get(*payload_offset..).unwrap_or_default();
                    if carve {
                        received.copy(m)
                    } else {
                        Bytes::from(m.to_vec())
                    }
                }
                _ => Bytes::new(),
            };
            (framing, incoming, payload)
        });
        self.res.recv_free.push(mr);
        let inv = match opcode {
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
            Some((_, incoming, payload)) if self.setup.is_ready() => {
                self.on_message(now, p, incoming, payload, inv)
            }
            Some((framing, incoming, payload)) => {
                if let Some(m) = self.on_version_stage(now, p, framing, incoming) {
                    self.on_message(now, p, m, payload, inv);
                }
            }
            None => self.metrics.dropped += 1,
        }
        self.refill(p);
    }

    // ------------------------------------------------------------------
    // C. commands

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

    /// True while an event waits for [`Connection::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    // ------------------------------------------------------------------
    // internals: posting, parameters, the send-queue backlog

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
    /// per outstanding call of ours, plus one for the peer's CONNPROP
    /// while the version is open.
    #[inline]
    pub(super) fn recv_target(&self) -> usize {
        self.resp.budget() + self.req.outstanding + self.setup.extra_receives
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
        payload: Bytes,
        inv: Option<Stag>,
    ) {
        match incoming {
            Incoming::Drop { .. } => self.metrics.dropped += 1,
            // A header that could not be used: the responder answers it
            // with an error, the requester discards it.
            Incoming::Reject { xid, answer, .. } => match self.config.role {
                Role::Server => self.reject_call(p, xid, answer),
                Role::Client if self.answers_reverse_reject(&answer) => {
                    self.reject_call(p, xid, answer)
                }
                Role::Client => self.discard_reply(xid),
            },
            // Never for the responder (RFC 8166 section 4.2.4).
            Incoming::Error { xid, credit, error } => {
                self.on_rdma_error(now, p, xid, credit, error, inv)
            }
            Incoming::Connprop { .. } => self.later_connprop(),
            Incoming::Data {
                xid,
                credit,
                shape,
                chunks,
                payload_offset: _,
                response,
                inv_handle,
            } => {
                //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
                //# The RPCRDMA2_F_RESPONSE flag enables a receiver to reliably
                //# avoid performing an XID lookup on incoming reverse
                //# direction Call messages, and apply the value of the
                //# rdma_start.rdma_credits field correctly, based on the
                //# direction of the message being conveyed.
                let call = match response {
                    Some(r) => !r,
                    None => self.is_call(shape, &chunks, &payload),
                };
                if call {
                    self.on_call(now, p, xid, shape, chunks, payload, inv_handle);
                } else {
                    self.on_reply(now, p, xid, credit, shape, &chunks, payload, inv);
                }
            }
        }
    }

    /// Whether a received RPC-over-RDMA message carries a call (for our
    /// responder) or a reply (for our requester).
    fn is_call(&self, shape: Shape, chunks: &ChunkLists, payload: &[u8]) -> bool {
        // msg_type of an inline RPC message (RFC 5531: CALL = 0, REPLY =
        // 1) says which direction it travels (RFC 8167 section 4.1); an
        // RDMA_NOMSG carries none inline.
        let msg_type = match shape {
            Shape::Msg => rpc_prefix(payload).map(|(_, t)| t),
            Shape::Nomsg => None,
        };
        match self.config.role {
            // A reverse-direction call: an inline CALL, or an RDMA_NOMSG
            // with a Read list (a reply never has one).
            Role::Client => match shape {
                Shape::Msg => msg_type == Some(MsgType::CALL),
                Shape::Nomsg => !chunks.reads.is_empty(),
            },
            Role::Server => msg_type != Some(MsgType::REPLY),
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
            Op::ReplySend(mr) | Op::Control(mr) => self.res.zombies.push(mr),
            Op::Read { .. } => {
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
        self.note_probe_lost();
        self.error = Some(err.clone());
        self.res.closed = true;
        p.disconnect();
        self.fail_calls(p, &err);
        self.drop_incoming();
        self.res.zombies.append(&mut self.res.recv_free);
        self.res.zombies.append(&mut self.res.send_pool);
        self.res.close_sink_pool();
        for wr in std::mem::take(&mut self.res.backlog) {
            if let Some(op) = self.res.ops.remove(wr.wr_id) {
                self.cleanup_dead(op);
            }
        }
        self.events.push_back(Event::ConnectionLost(err));
        self.res.reap(p);
    }
}
