//! Answering a received call: the reply planned (Write chunks, inline or
//! Reply chunk, or ERR_CHUNK), its RDMA Writes and Send posted; error
//! replies; the completions of both.

use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::{ErrorReply, Framing, Shape};
use crate::engine::marshal::{self, DdpItem};
use crate::engine::plan::{plan_reply, reply_shortfall, ReplyPlan, WriteOp};
use crate::engine::resources::Op;
use crate::engine::{
    CallError, CallHandle, ConnectionError, Message, OutgoingReply, Piece, ReplyForm,
};
use crate::provider::{
    Access, Bytes, FileRange, MemoryRegion, Provider, ProviderError, SendOp, SendWr, Sges,
};
use smallvec::smallvec;

use super::{InCall, InState, ReplyJob};

impl Connection {
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
        if !matches!(self.resp.incoming.get(handle.0), Some(c) if matches!(c.state, InState::Delivered))
        {
            return Err(CallError::UnknownHandle);
        }
        match reply.message.pieces().first() {
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
        let message = reply.message;
        let (stream_len, ddp) = marshal::layout(message.pieces());
        if self.resp.backchannel() && !self.params().reverse_chunks {
            let need = self.params().framing.min_msg_header_len() + stream_len;
            if need > thr {
                return Err(CallError::TooLarge {
                    len: need,
                    max: thr,
                });
            }
        }
        let Some(call) = self.resp.incoming.remove(handle.0) else {
            return Err(CallError::UnknownHandle);
        };
        self.answer(p, call, message, stream_len, &ddp)
    }

    /// Sends the reply `message` to `call` (the call's XID written over
    /// the message's first word where the message is laid out), whose XDR stream
    /// is `stream_len` octets with the DDP items `ddp`: plans it, builds
    /// its Send buffer and posts its RDMA Writes and Send; or answers
    /// ERR_CHUNK when no form fits. A failure to post ends the connection.
    fn answer(
        &mut self,
        p: &mut dyn Provider,
        call: Box<InCall>,
        mut message: Message,
        stream_len: usize,
        ddp: &[(usize, DdpItem)],
    ) -> Result<ReplyForm, CallError> {
        let xid = call.xid;
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
            ddp,
        )
        else {
            let why = reply_shortfall(&call.writes, stream_len, ddp);
            self.send_error(p, xid, why);
            return Ok(ReplyForm::ErrChunk);
        };
        // File pieces that go inline or in the Reply chunk are read now;
        // those in Write chunks go to the provider as files.
        if message.has_files() && message.materialize_files_except(&written).is_err() {
            self.resp.recycle(call);
            let e = ProviderError::InvalidArgument("a file piece could not be read");
            return Err(self.reply_lost(p, ConnectionError::Provider(e)));
        }
        let shape = match form {
            ReplyForm::ReplyChunk => Shape::Nomsg,
            _ => Shape::Msg,
        };
        let header =
            self.params()
                .framing
                .data_header(xid, self.resp.grant, shape, chunks, None, true);
        // The inline part (the message minus the written DDP pieces) is
        // not built: it is written straight into the Send buffer, or, for
        // a Long Reply, built as the source of the Reply chunk's Writes.
        let long_src = (form == ReplyForm::ReplyChunk).then(|| {
            let mut v = marshal::inline_except(message.pieces(), &written);
            if let Some(w) = v.get_mut(..4) {
                w.copy_from_slice(&xid.to_be_bytes());
            }
            Bytes::from(v)
        });
        // Header and (Short reply) inline part, straight into the staging
        // memory or the Send buffer, the RPC XID set to the call's.
        let body = (form == ReplyForm::Inline).then_some((message.pieces(), &written[..]));
        let remote_inv = self.params().remote_invalidation;
        let op = self.params().framing.reply_send_op(remote_inv, call.inv);
        if writes.is_empty() {
            // No RDMA Write: the Send is the whole reply. Staged, there is
            // nothing left to track (no buffer, no completion, so it is
            // not among `replies_unacked`: what a peer that reads nothing
            // makes us hold is the provider's bounded staging memory,
            // beyond which replies take the path below and count).
            match self
                .res
                .stage_header_and_body(p, op, &header, body, Some(xid))
            {
                Ok(true) => {
                    self.resp.recycle(call);
                    self.note_reply_sent(op, form);
                    return Ok(form);
                }
                Ok(false) => {}
                Err(e) => return Err(self.reply_lost(p, ConnectionError::Provider(e))),
            }
        }
        let send = match self.res.header_and_body(p, &header, body, Some(xid)) {
            Ok(x) => x,
            Err(e) => return Err(self.reply_lost(p, ConnectionError::Provider(e))),
        };
        self.resp.recycle(call);
        // The DDP pieces are the Write sources as they are: registered
        // read-only, shared with whoever else holds them, never copied;
        // file pieces registered as files.
        let mut sources: Vec<Source> = Vec::new();
        if !written.is_empty() || long_src.is_some() {
            sources = written
                .iter()
                .map(|&pi| match message.pieces().get(pi) {
                    Some(Piece::Ddp(b)) => Source::Mem(b.clone()),
                    Some(Piece::File(r)) => Source::File(r.clone()),
                    _ => Source::Mem(Bytes::new()),
                })
                .collect();
            sources.extend(long_src.map(Source::Mem));
        }
        let r = self.post_reply(p, sources, writes, send, op);
        //= rfc8166#section-4.5.4
        //# If a Responder is unable to construct and transmit an RPC Reply or
        //# RPC-over-RDMA error message, the Responder MUST close the connection
        //# to signal to the Requester that a reply was lost.
        if let Err(e) = r {
            return Err(self.reply_lost(p, e));
        }
        self.resp.replies_unacked += 1;
        self.note_reply_sent(op, form);
        Ok(form)
    }

    /// Counts a reply of `form` whose Send (`op`) was taken.
    fn note_reply_sent(&mut self, op: SendOp, form: ReplyForm) {
        if let SendOp::SendWithInvalidate { .. } = op {
            self.metrics.send_with_invalidate += 1;
        }
        self.metrics.replies_sent += 1;
        if form == ReplyForm::ReplyChunk {
            self.metrics.long_replies_sent += 1;
        }
    }

    /// A reply could not be sent: the connection ends with `e`, and the
    /// caller learns it is closed.
    #[cold]
    fn reply_lost(&mut self, p: &mut dyn Provider, e: ConnectionError) -> CallError {
        self.fatal(p, e);
        CallError::Closed(self.error.clone().unwrap_or(ConnectionError::LocalClose))
    }

    /// Posts a reply: the RDMA Writes of `plan` (sources registered here,
    /// read-only and local) and then the Send of `send` (a registered Send
    /// buffer already holding the message, and its length), which this
    /// takes over (released with the job, or on failure).
    pub(in crate::engine) fn post_reply(
        &mut self,
        p: &mut dyn Provider,
        sources: Vec<Source>,
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
            let r = match source {
                Source::Mem(b) => p.register_shared(b, Access::NONE),
                Source::File(f) => p.register_file(&f),
            };
            match r {
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

    pub(in crate::engine) fn job_step(&mut self, p: &mut dyn Provider, job: u64) {
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

    /// The Send of a reply without RDMA Writes completed.
    pub(in crate::engine) fn reply_sent(&mut self, p: &mut dyn Provider, mr: MemoryRegion) {
        self.resp.replies_unacked = self.resp.replies_unacked.saturating_sub(1);
        self.res.release(p, mr);
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
    pub(in crate::engine) fn send_error(&mut self, p: &mut dyn Provider, xid: u32, e: ErrorReply) {
        let framing = self.params().framing;
        match (framing, e) {
            (_, ErrorReply::Vers { .. }) => self.metrics.err_vers_sent += 1,
            (Framing::V1, _) => self.metrics.err_chunk_sent += 1,
            (Framing::V2, _) => self.metrics.rdma2_errors_sent += 1,
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# The responder sets the rdma_start.rdma_htype field of the transport
        //# header prefix to RDMA2_ERROR, and the rdma_start.rdma_credit field
        //# is set to the credit grant value for this connection.
        let versions = self.setup.versions();
        let msg = framing.encode_error(xid, self.resp.grant, e, versions);
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

    /// The Send of an error reply completed.
    pub(in crate::engine) fn error_sent(&mut self, p: &mut dyn Provider, mr: MemoryRegion) {
        self.resp.errors_unacked = self.resp.errors_unacked.saturating_sub(1);
        self.res.release(p, mr);
    }
}

/// The source of a reply's RDMA Writes: bytes in memory, or a file range
/// ([`Piece::File`], registered with [`Provider::register_file`]).
pub(in crate::engine) enum Source {
    Mem(Bytes),
    File(FileRange),
}

impl Source {
    fn is_empty(&self) -> bool {
        match self {
            Source::Mem(b) => b.is_empty(),
            Source::File(r) => r.is_empty(),
        }
    }
}
