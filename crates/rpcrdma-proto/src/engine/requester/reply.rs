//! A reply to one of our calls: matched by XID, checked against what the
//! call offered, the grant taken from it, the call's chunks invalidated,
//! and the call completed once nothing can touch its memory any more.

use std::collections::hash_map::Entry;
use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::{rpc_prefix, RdmaErrorReport, Shape};
use crate::engine::resources::{Op, SINK_POOL_BYTES};
use crate::engine::{CallFailure, ConnectionError, Event, Reply};
use crate::provider::{Bytes, MemoryRegion, Provider, SendOp, SendWr, Sges, Stag};
use crate::wire::chunk::{ChunkLists, WriteChunk};
use crate::wire::rpc::MsgType;
use smallvec::SmallVec;

use super::{OutCall, ReplyData};

const UNKNOWN_XID: &str = "unknown XID";

impl Connection {
    /// A Local Invalidate of one of call `xid`'s chunks completed.
    pub(in crate::engine) fn call_invalidated(&mut self, p: &mut dyn Provider, xid: u32) {
        if let Some(call) = self.req.calls.get_mut(&xid) {
            call.state.invalidated();
        }
        self.try_finish(p, xid);
    }

    /// A header the requester cannot use, naming `xid`.
    //= rfc8166#section-4.5
    //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
    //# message, a Requester MUST silently discard the message.
    //= rfc8166#section-4.6.1
    //# Requesters MUST silently discard the message.
    // Nothing is answered and the call the XID names keeps waiting (for a
    // good reply, or for its timeout: the connection is then replaced and
    // the call retransmitted). Linux fails the call with -EIO instead; the
    // RFC is followed here.
    pub(in crate::engine) fn discard_reply(&mut self, xid: u32) {
        if self.awaiting(xid).is_some() {
            self.metrics.bad_replies += 1;
        }
        self.metrics.dropped += 1;
    }

    /// An RDMA_ERROR naming `xid`: it fails only that call (if it is one of
    /// ours, waiting for its reply); the connection stays up (Linux
    /// rpcrdma_decode_error).
    pub(in crate::engine) fn on_rdma_error(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        credit: Option<u32>,
        error: RdmaErrorReport,
        inv: Option<Stag>,
    ) {
        match error {
            RdmaErrorReport::Vers { .. } => self.metrics.err_vers_received += 1,
            RdmaErrorReport::Chunk => self.metrics.err_chunk_received += 1,
            RdmaErrorReport::Other(_) => self.metrics.err_other_received += 1,
            _ => self.metrics.rdma2_errors_received += 1,
        }
        if self.retry_after_error(now, p, xid, &error) {
            return;
        }
        // It is never answered:
        //= rfc8166#section-4.2.4
        //# A Responder MUST silently discard RDMA_ERROR procedures.
        // (At a server, one that names a reverse call of ours fails that
        // call; any other is dropped and counted as a bad XID.)
        let failure = Err(CallFailure::RdmaError(error));
        self.requester_reply(now, p, xid, credit, inv, failure);
    }

    /// A reply (or something that is not a call) for one of our calls.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::engine) fn on_reply(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        credit: u32,
        shape: Shape,
        chunks: &ChunkLists,
        payload: Bytes,
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
            // (The Reply chunk's region is looked up only for a Long
            // Reply: a Short one has its RPC header inline.)
            let long = d
                .reply_len
                .and_then(|len| Some((len, self.reply_mr_of(xid)?)));
            let head = match long {
                Some((len, mr)) => p
                    .region(&mr)
                    .ok()
                    .and_then(|b| b.get(..(len as usize).min(8)))
                    .and_then(rpc_prefix),
                None => rpc_prefix(&d.inline),
            };
            if head != Some((xid, MsgType::REPLY)) {
                self.metrics.rpc_header_mismatches += 1;
                self.metrics.dropped += 1;
                return;
            }
        }
        self.requester_reply(now, p, xid, Some(credit), inv, r);
    }

    pub(in crate::engine) fn reply_mr_of(&self, xid: u32) -> Option<MemoryRegion> {
        self.awaiting(xid).and_then(|c| c.reply_mr)
    }

    /// Our sent call with this XID, if it still waits for its reply.
    pub(in crate::engine) fn awaiting(&self, xid: u32) -> Option<&OutCall> {
        self.req
            .calls
            .get(&xid)
            .map(|c| &**c)
            .filter(|c| c.state.awaits_reply())
    }

    /// Checks a reply's chunk lists against what the call offered.
    pub(in crate::engine) fn parse_reply(
        &self,
        xid: u32,
        shape: Shape,
        chunks: &ChunkLists,
        payload: Bytes,
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
        // Every chunk we offer is one segment at the region's first byte
        // (its base, 0 on the software providers): the echo must be exactly
        // that segment, with a length no larger than it.
        let check = |ours: &MemoryRegion, theirs: &WriteChunk| -> Result<u32, CallFailure> {
            let [s] = theirs.segments.as_slice() else {
                return Err(CallFailure::BadReply(
                    "returned chunk's segment count differs from the offer",
                ));
            };
            if s.handle != ours.stag().0 || s.offset != ours.base() {
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
                    inline: Bytes::new(),
                    write_lens,
                    reply_len: Some(len),
                })
            }
        }
    }

    pub(in crate::engine) fn requester_reply(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        credit: Option<u32>,
        inv: Option<Stag>,
        result: Result<ReplyData, CallFailure>,
    ) {
        // The call, looked up once: it must still wait for its reply.
        let Some(call) = self
            .req
            .calls
            .get_mut(&xid)
            .filter(|c| c.state.awaits_reply())
        else {
            self.metrics.bad_xids += 1;
            return;
        };
        // The Requester endpoint must ensure that memory regions
        // associated with each RPC transaction are protected from
        // Responder access before allowing upper-layer access to the
        // data contained in them (RFC 8166 section 4.4.1): every chunk
        // STag is invalidated, locally or by Send With Invalidate (the
        // STag `inv` the reply's Send named, if it is one of the
        // call's), before the reply is delivered.
        let mut invs: SmallVec<[Stag; 4]> = SmallVec::new();
        for mr in &call.chunk_mrs {
            if inv != Some(mr.stag()) {
                invs.push(mr.stag());
            }
        }
        if matches!(result, Err(CallFailure::BadReply(_))) {
            self.metrics.bad_replies += 1;
        }
        call.state.replied(result, invs.len());
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
        self.metrics.replies_received += 1;
        self.req.outstanding = self.req.outstanding.saturating_sub(1);
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
    pub(in crate::engine) fn try_finish(&mut self, p: &mut dyn Provider, xid: u32) {
        let mut call = match self.req.calls.entry(xid) {
            Entry::Occupied(e) if e.get().state.is_complete() => e.remove(),
            _ => return,
        };
        if let Some(reply) = call.state.finish() {
            match call.retry.take() {
                Some(reform) => self.requeue_reformed(&mut call, reform),
                None => {
                    let event = self.finish(p, &mut call, reply);
                    self.events.push_back(event);
                }
            }
        }
        for mr in call.all_mrs() {
            self.res.release(p, mr);
        }
        self.req.recycle(call);
    }

    /// The event that completes `call`, whose reply is `result`.
    pub(in crate::engine) fn finish(
        &mut self,
        p: &mut dyn Provider,
        call: &mut OutCall,
        result: Result<ReplyData, CallFailure>,
    ) -> Event {
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
                        (Bytes::from(read(mr, l as usize)), true)
                    }
                    _ => (data.inline, false),
                };
                let mut results = Vec::with_capacity(call.write_mrs.len());
                let write_mrs = std::mem::take(&mut call.write_mrs);
                for (mr, &l) in write_mrs.iter().zip(&data.write_lens) {
                    self.metrics.write_chunk_bytes += u64::from(l);
                    results.push(self.res.take_result(
                        p,
                        mr,
                        l as usize,
                        &mut call.chunk_mrs,
                        SINK_POOL_BYTES,
                    ));
                }
                Event::ReplyReceived(Reply {
                    id: call.id,
                    xid: call.xid,
                    message: crate::message::Message::from_reply_parts(message, results),
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
}
