//! A received call: its chunk lists checked, then either delivered at
//! once (an inline call, every small one) or staged for its RDMA Reads.

use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::{invalidation_handle, rpc_prefix, ErrorReply, Framing, Shape};
use crate::engine::marshal;
use crate::engine::{CallHandle, ConnectionError, Event, IncomingCall, Message, PeerError};
use crate::provider::{Bytes, Provider};
use crate::wire::chunk::{ChunkLists, Segment, WriteChunk};
use crate::wire::rpc::MsgType;

use super::{InCall, InState, PendingRead, ReadChunk};

/// `validate_call`'s refusal of Read chunks when we cannot read at all.
const NO_READS: &str = "Read chunks but no RDMA Read resources (ORD 0)";

/// The error a call refused by `validate_call` gets: version 2 says when
/// we cannot read at all (version 1 sends ERR_CHUNK for every refusal).
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# If the responder implementation cannot handle any Read chunks for a
//# request, it MUST set the rdma_max_chunks to zero in this response.
fn refusal(why: &'static str) -> ErrorReply {
    if why == NO_READS {
        ErrorReply::ReadChunks { max: 0 }
    } else {
        ErrorReply::Chunk
    }
}

/// The error a chunked reverse call gets when we accept inline reverse
/// calls only (version 1 sends ERR_CHUNK for it): Read chunks, we read
/// none; Write or Reply chunks, we write none, so the reply must fit
/// inline (its size is not known before the call runs: 0).
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.2
//# The value RDMA2_RVREQSUP_INLINE indicates that receipt of reverse
//# direction requests or replies is only supported using inline messages
//# and that use of explicit RDMA operations or other form of Direct Data
//# Placement for reverse direction requests or responses is not supported.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# If the responder implementation cannot handle any Write chunks for a
//# request, it MUST return a response of RDMA2_ERR_REPLY_RESOURCE (below).
fn reverse_refusal(chunks: &ChunkLists) -> ErrorReply {
    if !chunks.reads.is_empty() {
        ErrorReply::ReadChunks { max: 0 }
    } else {
        ErrorReply::ReplyResource { needed: 0 }
    }
}

impl Connection {
    /// A header the responder cannot use (`answer`: what the framing says
    /// to answer): answered with that error, unless the peer overran its
    /// credits.
    pub(in crate::engine) fn reject_call(
        &mut self,
        p: &mut dyn Provider,
        xid: u32,
        answer: ErrorReply,
    ) {
        if !self.overrun(p) {
            self.send_error(p, xid, answer);
        }
    }

    /// Client: whether a header it cannot use is a reverse request to
    /// answer (`reject_call`) rather than a reply to discard. Version 1
    /// cannot tell (a malformed header says nothing of its direction), so
    /// a client discards it. Version 2 can: a version 2 header refused with
    /// a version 2 error (BAD_XDR, INVAL_HTYPE, a limit) had F_RESPONSE
    /// clear — a response is dropped before it gets here — so it is the
    /// server's request, answered as a forward one would be, when this
    /// client takes reverse requests at all (the backchannel is enabled;
    /// before that it posted no receive for them and the header is
    /// discarded). Another version's message is still discarded.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.2
    //# RPC-over-RDMA version 2 implementations that receive an OPTIONAL
    //# operation that is not supported MUST respond with an RDMA2_ERROR
    //# message with an error code of RDMA2_ERR_INVAL_HTYPE.
    pub(in crate::engine) fn answers_reverse_reject(&self, answer: &ErrorReply) -> bool {
        self.params().framing == Framing::V2
            && self.setup.is_ready()
            && self.resp.enabled
            && !matches!(answer, ErrorReply::Vers { .. })
    }

    /// Validates a received call's chunk lists; returns the Read chunks
    /// (position, segments, length) and the index of the Position-Zero
    /// Read chunk.
    #[allow(clippy::type_complexity)]
    pub(in crate::engine) fn validate_call(
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
            return Err(NO_READS);
        }
        Ok((groups, pz))
    }

    /// A received message that is a call (`payload`: the RPC message that
    /// followed an RDMA_MSG header; `inv_handle`: version 2's
    /// `rdma_inv_handle`).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::engine) fn on_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        shape: Shape,
        chunks: ChunkLists,
        payload: Bytes,
        inv_handle: u32,
    ) {
        if !self.resp.enabled {
            //= rfc8167#section-6
            //# If an endpoint is not prepared to receive an incoming reverse-
            //# direction message, loss of the RDMA connection might result.
            // It took a receive posted for a reply: the peer's fault, and
            // the end of the connection (as Linux's client ends it), so
            // that the replies it displaced fail now instead of timing
            // out.
            self.metrics.dropped += 1;
            self.fatal(
                p,
                ConnectionError::Peer(PeerError::UnexpectedReverseCall { xid }),
            );
            return;
        }
        if self.overrun(p) {
            return;
        }
        if self.resp.backchannel() && !chunks.is_empty() && !self.params().reverse_chunks {
            //= rfc8167#section-5.3
            //# If a reverse-direction requester provides a non-empty chunk list
            //# to a Responder that does not support chunks, the Responder MUST
            //# reply with an RDMA_ERROR message with rdma_err field set to
            //# ERR_CHUNK.
            // Version 2 with our Reverse Request Support INLINE: decision 4.
            self.send_error(p, xid, reverse_refusal(&chunks));
            return;
        }
        //= rfc8166#section-4.5.2
        //# If the rdma_vers field contains a recognized value, but an XDR
        //# parsing error occurs, the Responder MUST reply with an
        //# RDMA_ERROR procedure and set the rdma_err value to ERR_CHUNK.
        let inv = self.call_inv(&chunks, inv_handle);
        if shape == Shape::Msg && chunks.reads.is_empty() {
            self.on_inline_call(p, xid, chunks, payload, inv);
            return;
        }
        self.stage_call(now, p, xid, shape, chunks, payload, inv);
    }

    /// The handle a reply to this call may invalidate remotely. Version
    /// 1: the call's single handle (Linux `svc_rdma_get_inv_rkey`).
    /// Version 2: the call's `rdma_inv_handle`, if it is one of the call's
    /// handles (a handle the requester did not offer in this call is never
    /// invalidated: it may be another call's, or not ours to touch).
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# To request Remote Invalidation, a requester sets the value of the
    //# rdma_inv_handle field in an RPC Call's transport header to a non-zero
    //# value that matches one of the rdma_handle fields in that header.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If the responder chooses not to use remote invalidation for this
    //# particular RPC Reply, or the RPC Call's rdma_inv_handle field
    //# contains the value zero, the responder uses RDMA Send to transmit the
    //# matching RPC reply.
    fn call_inv(&self, chunks: &ChunkLists, inv_handle: u32) -> Option<u32> {
        match self.params().framing {
            Framing::V1 => invalidation_handle(chunks),
            Framing::V2 if inv_handle == 0 => None,
            Framing::V2 => chunks
                .handles()
                .any(|h| h == inv_handle)
                .then_some(inv_handle),
        }
    }

    /// A forward call with Read chunks (or a Long Call): checked, then
    /// staged for its RDMA Reads (waiting for the Read-sink budget) and
    /// delivered once they are done.
    #[allow(clippy::too_many_arguments)]
    fn stage_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        shape: Shape,
        chunks: ChunkLists,
        payload: Bytes,
        inv: Option<u32>,
    ) {
        let (groups, pz) = match self.validate_call(shape, &chunks, payload.len()) {
            Ok(x) => x,
            Err(why) => {
                self.send_error(p, xid, refusal(why));
                return;
            }
        };
        // The key the call gets below (nothing is stored before).
        let handle = self.resp.incoming.next_key();
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
                data: Bytes::new(),
            });
        }
        // A call whose Read chunks can never fit the Read-sink budget (this
        // connection's or the shared one) is refused; one that fits waits
        // for its turn (below).
        let most = self.sink_budget().min(self.resp.lease.limit());
        if sink_need > most.min(u64::from(self.config.limits.max_message_len)) {
            //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
            //# If some problem occurs on a responder that does not fit into
            //# the above categories, the responder MAY report it to the
            //# sender by setting the rdma_err field to RDMA2_ERR_SYSTEM.
            // A call larger than we can ever hold: permanent.
            self.send_error(p, xid, ErrorReply::System);
            return;
        }
        let long = pz.is_some();
        if long {
            self.metrics.long_calls_received += 1;
        }
        let call = InCall {
            xid,
            long,
            base: if shape == Shape::Msg {
                payload
            } else {
                Bytes::new()
            },
            pz,
            chunks: rchunks,
            state: InState::Waiting { reads },
            sink_need,
            writes: chunks.writes,
            reply: chunks.reply,
            inv,
        };
        let stored = self.resp.incoming.insert(Box::new(call));
        debug_assert_eq!(stored, handle);
        // A valid call: the peer is no longer idle.
        self.resp.idle_deadline = None;
        if sink_need == 0 {
            // Nothing to read: no sink, no wait.
            self.reads_done(now, p, handle);
        } else {
            self.resp.sink_waiting.push_back(handle);
            self.admit_waiting(now, p);
            if self
                .resp
                .incoming
                .get(handle)
                .is_some_and(|c| matches!(c.state, InState::Waiting { .. }))
            {
                self.metrics.read_sink_waits += 1;
            }
        }
    }

    /// [`Connection::on_call`] for an RDMA_MSG call without Read chunks
    /// (every small call): the same checks and outcome as the general path
    /// (`validate_call`, then `reads_done` with nothing to read), without
    /// staging the call for RDMA Reads: the message is the inline payload
    /// as it is, delivered at once.
    pub(in crate::engine) fn on_inline_call(
        &mut self,
        p: &mut dyn Provider,
        xid: u32,
        chunks: ChunkLists,
        payload: Bytes,
        inv: Option<u32>,
    ) {
        if payload.len() as u64 > u64::from(self.config.limits.max_message_len) {
            self.send_error(p, xid, ErrorReply::System);
            return;
        }
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
        let write_chunks = chunks.writes.iter().map(WriteChunk::total_len).collect();
        let reply_chunk = chunks.reply.as_ref().map(WriteChunk::total_len);
        let call = self.resp.inline_call(xid, chunks.writes, chunks.reply, inv);
        let handle = self.resp.incoming.insert(call);
        let ev = IncomingCall {
            handle: CallHandle(handle),
            xid,
            backchannel: self.resp.backchannel(),
            message: Message::inline(payload),
            long: false,
            write_chunks,
            reply_chunk,
        };
        self.resp.idle_deadline = None;
        self.metrics.calls_received += 1;
        self.events.push_back(Event::CallReceived(ev));
    }
}
