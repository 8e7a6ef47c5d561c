//! Version 2 error reports a call can recover from by being sent again,
//! with the same XID, in another form (draft -09 §5.3.3), and the bound on
//! doing so: READ_CHUNKS → a Long Call (fails if it was one); WRITE_CHUNKS
//! → no Write chunks, the reply in a Reply chunk; SEGMENTS → the fewest
//! segments (a Long Call, no Write chunks: at most two single-segment
//! chunks); WRITE_RESOURCE / REPLY_RESOURCE → a larger chunk of the size
//! needed, if `Config::max_retry_chunk` allows it. Anything else (BAD_XDR,
//! INVAL_HTYPE, SYSTEM, VERS on an established connection, unknown codes),
//! or a form already tried, fails the call with the report.

use std::time::Instant;

use super::{CallState, OutCall};
use crate::engine::connection::Connection;
use crate::engine::framing::{Framing, RdmaErrorReport};
use crate::engine::plan::Reform;
use crate::provider::Provider;

/// Times one call is sent again after error reports: enough for two
/// different fixes (e.g. a Long Call, then a larger Reply chunk), never a
/// loop.
pub(super) const MAX_REFORMS: u8 = 2;

impl Connection {
    /// An RDMA2_ERROR for our call `xid`: if it asks for a form the call
    /// can take, the call is marked to go again in it (its regions are
    /// released first, as after any reply) and the report is not
    /// delivered. False: the report fails the call.
    pub(in crate::engine) fn retry_after_error(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        xid: u32,
        error: &RdmaErrorReport,
    ) -> bool {
        if self.params().framing != Framing::V2 {
            return false;
        }
        let max_chunk = self.config.max_retry_chunk;
        let Some(call) = self.req.calls.get_mut(&xid) else {
            return false;
        };
        if !matches!(call.state, CallState::Sent { .. }) || call.reforms >= MAX_REFORMS {
            return false;
        }
        let Some(reform) = reform(call, error, max_chunk) else {
            return false;
        };
        call.retry = Some(reform);
        call.reforms += 1;
        self.metrics.rdma2_retries += 1;
        // As a reply: the call's chunks are invalidated, its regions
        // released, then `try_finish` puts it back in the queue.
        let failure = Err(crate::engine::CallFailure::RdmaError(error.clone()));
        self.requester_reply(now, p, xid, None, None, failure);
        true
    }

    /// After a completion that may have finished a call to send again.
    #[inline]
    pub(in crate::engine) fn pump_requeued(&mut self, now: Instant, p: &mut dyn Provider) {
        if self.req.requeued {
            self.req.requeued = false;
            self.pump(now, p);
        }
    }

    /// Call `call` is complete after an error report that asked for
    /// another form: it goes back to the front of the queue, same id and
    /// XID, in that form, and leaves it as credits allow.
    pub(in crate::engine) fn requeue_reformed(&mut self, call: &mut OutCall, reform: Reform) {
        let mut next = Box::new(OutCall::new(
            call.id,
            call.xid,
            std::mem::take(&mut call.call),
            call.retransmit,
        ));
        next.transmissions = call.transmissions;
        next.timeouts = call.timeouts;
        next.reform = reform;
        next.reforms = call.reforms;
        self.req.queue.push_front(next);
        self.req.requeued = true;
    }
}

/// The form error report `e` asks `call` to take, if it can take it.
fn reform(call: &mut OutCall, e: &RdmaErrorReport, max_chunk: u32) -> Option<Reform> {
    let mut r = call.reform;
    match *e {
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# The requester SHOULD resend the request using a Position-Zero Read
        //# chunk.
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# If this was a request using a Position-Zero Read chunk, the
        //# requester MUST terminate the transaction with an error.
        RdmaErrorReport::ReadChunks { .. } if !call.long => r.long = true,
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# The requester SHOULD resend the request with no Write chunks and a
        //# Reply chunk of appropriate size.
        RdmaErrorReport::WriteChunks { .. } if !r.no_writes && !call.write_mrs.is_empty() => {
            r.no_writes = true;
            r.reply_chunk = true;
            call.call.reply_max = call.call.reply_max.max(total_reply(call));
        }
        // Our chunks have one segment each: the fewest segments is a Long
        // Call with a Reply chunk and no Write chunks.
        RdmaErrorReport::Segments { max_segments }
            if max_segments > 0 && !(r.long && r.no_writes) =>
        {
            r.long = true;
            r.no_writes = true;
            r.reply_chunk = !call.write_mrs.is_empty() || call.reply_mr.is_some();
            call.call.reply_max = call.call.reply_max.max(total_reply(call));
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# Upon receipt of this error code, a responder MAY choose to
        //# terminate the operation (for instance, if the responder set the
        //# index and length fields to zero), or it MAY send the request again
        //# using the same XID and more reply resources.
        // ("a responder" is the requester: decision 7.)
        RdmaErrorReport::WriteResource {
            chunk_index,
            length_needed,
        } => {
            let i = (chunk_index as usize).checked_sub(1)?;
            let have = *call.call.ddp_results.get(i)?;
            if length_needed <= have || length_needed > max_chunk {
                return None;
            }
            call.call.ddp_results[i] = length_needed;
            call.call.reply_max = call.call.reply_max.saturating_add(length_needed - have);
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# Upon receipt of this error code, a responder MAY choose to
        //# terminate the operation (for instance, if the responder set the
        //# index and length fields to zero), or it MAY send the request again
        //# using the same XID and larger reply resources.
        RdmaErrorReport::ReplyResource { length_needed } => {
            let had = call.reply_mr.map_or(0, |m| m.len());
            if length_needed == 0 || u64::from(length_needed) <= had || length_needed > max_chunk {
                return None;
            }
            r.reply_chunk = true;
            call.call.reply_max = call.call.reply_max.max(length_needed);
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# This is a permanent error: a requester that receives this error
        //# MUST terminate the RPC transaction associated with the XID value in
        //# the rdma_start.rdma_xid field.
        _ => return None,
    }
    Some(r)
}

/// The reply octets a call's offer could take: its Write chunks and its
/// Reply chunk together (what a Reply chunk alone must hold instead).
fn total_reply(call: &OutCall) -> u32 {
    let w: u64 = call.write_mrs.iter().map(|m| m.len()).sum();
    let r = call.reply_mr.map_or(0, |m| m.len());
    u32::try_from(w + r).unwrap_or(u32::MAX)
}
