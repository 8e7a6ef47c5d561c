//! Sending a call: its plan, its chunks registered, its Send buffer built,
//! its Send posted (or the call put back at the front of the queue when the
//! send queue is full).

use std::collections::hash_map::Entry;
use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::{DataHeader, Framing, Shape};
use crate::engine::marshal::{self, pad4, DdpItem};
use crate::engine::plan::{plain_call, plan_call, CallForm, CallLens, CallPlan};
use crate::engine::resources::{Mrs, Op};
use crate::engine::{CallError, CallFailure, ConnectionError, Event, Piece};
use crate::provider::{Access, MemoryRegion, Provider, ProviderError, SendOp, SendWr};
use crate::wire::chunk::{ChunkLists, ReadList, ReadSegment, Segment, WriteChunk, WriteList};
use smallvec::{smallvec, SmallVec};

use super::{CallState, OutCall};

/// The DDP pieces left out of a call's inline part.
type Skip = SmallVec<[usize; 4]>;

/// A marshalled call: its transport header, and the DDP pieces left out
/// of its inline part (`None`: no inline part, a Long Call).
pub(in crate::engine) struct Marshalled {
    header: DataHeader,
    inline: Option<Skip>,
}

/// Why a call could not be written for its Send.
enum Unwritten {
    /// The provider refused the staged Send (as it would refuse a posted
    /// one): fatal for the connection.
    Post(ProviderError),
    /// No Send buffer could be had: the call fails alone.
    Buffer(ProviderError),
}

/// The reply resources a call offers, registered.
struct Offer {
    writes: WriteList,
    write_mrs: Mrs,
    reply: Option<WriteChunk>,
    reply_mr: Option<MemoryRegion>,
}

impl Connection {
    /// The Send of call `xid` completed.
    pub(in crate::engine) fn call_sent(&mut self, p: &mut dyn Provider, xid: u32) {
        if let Some(call) = self.req.calls.get_mut(&xid) {
            call.state.send_completed();
        }
        self.try_finish(p, xid);
    }

    pub(in crate::engine) fn fail_local(&mut self, call: Box<OutCall>, e: CallError) {
        self.events.push_back(Event::CallFailed {
            id: call.id,
            xid: call.xid,
            error: CallFailure::Local(e),
            retransmit: false,
        });
    }

    /// Marshals a call: chooses its form, registers its chunks (kept in
    /// `call`); returns its transport header and the DDP pieces left out
    /// of its inline part (`None`: it has none, a Long Call). The message
    /// itself is written when the call is sent: staged, or into a Send
    /// buffer ([`Connection::call_send_buffer`]). On failure nothing is
    /// left registered.
    pub(in crate::engine) fn marshal_call(
        &mut self,
        p: &mut dyn Provider,
        call: &mut OutCall,
    ) -> Result<Marshalled, CallError> {
        // Nothing is copied yet: the stream is built only for the form
        // chosen below, and DDP items that go into Read chunks are
        // registered as they are.
        let (stream_len, ddp) = marshal::layout(call.call.message.pieces());
        let ddp: Vec<(usize, DdpItem)> = ddp.into_iter().filter(|d| d.1.len > 0).collect();
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
        if plain_call(
            self.params(),
            self.inline_only(),
            stream_len,
            reply_max,
            call.reform,
        ) {
            return Ok(self.marshal_plain(call));
        }
        let lens = CallLens {
            stream_len,
            ddp_items: ddp.len(),
            ddp_xdr_len: ddp.iter().map(|(_, d)| d.len + pad4(d.len)).sum(),
            reply_max,
            ddp_results: &call.call.ddp_results,
            reform: call.reform,
        };
        let CallPlan {
            form,
            write_lens,
            reply_len,
        } = plan_call(self.params(), self.inline_only(), lens)?;

        // Registration: every chunk region per call.
        let mut mrs = Mrs::new();
        call.long = form == CallForm::Long;
        let registered = match form {
            CallForm::Inline => Ok((ReadList::new(), Shape::Msg, Some(Skip::new()))),
            CallForm::Reads | CallForm::Long => self.register_reads(p, call, form, &ddp, &mut mrs),
        }
        .and_then(|(reads, shape, inline)| {
            let offer = self.register_reply_chunks(p, &write_lens, reply_len, &mut mrs)?;
            Ok((reads, shape, inline, offer))
        });
        let (reads, shape, inline, offer) = match registered {
            Ok(x) => x,
            Err(e) => {
                self.res.zombies.extend(mrs);
                self.res.reap(p);
                return Err(CallError::Provider(e));
            }
        };
        let chunks = ChunkLists {
            reads,
            writes: offer.writes,
            reply: offer.reply,
        };
        let inv = self.inv_handle_for(&chunks);
        let header = self.params().framing.data_header(
            call.xid,
            self.req.requested,
            shape,
            chunks,
            inv,
            false,
        );
        call.chunk_mrs = mrs;
        call.write_mrs = offer.write_mrs;
        call.reply_mr = offer.reply_mr;
        Ok(Marshalled { header, inline })
    }

    /// [`Connection::marshal_call`] for a plain call (see
    /// [`plain_call`]): inline, its DDP pieces too, with three empty chunk
    /// lists, nothing registered — what the general path gives for it,
    /// without the plan, the chunk lists and the offer.
    fn marshal_plain(&mut self, call: &mut OutCall) -> Marshalled {
        debug_assert!(call.chunk_mrs.is_empty() && call.write_mrs.is_empty());
        debug_assert!(call.reply_mr.is_none());
        call.long = false;
        let header = self.params().framing.data_header(
            call.xid,
            self.req.requested,
            Shape::Msg,
            ChunkLists::empty(),
            None,
            false,
        );
        Marshalled {
            header,
            inline: Some(Skip::new()),
        }
    }

    /// Writes call `xid` (in the call map), marshalled as `m`: staged with
    /// the provider (`Ok(None)`: its Send counts as complete at once), or
    /// else into a Send buffer, kept in the
    /// call (`Ok(Some(..))`: the buffer and the message's length). The
    /// header and the inline part go straight into the staging memory or
    /// the buffer, the RPC XID set to this call's.
    fn call_send_buffer(
        &mut self,
        p: &mut dyn Provider,
        xid: u32,
        m: &Marshalled,
    ) -> Result<Option<(MemoryRegion, u32)>, Unwritten> {
        let Some(call) = self.req.calls.get_mut(&xid) else {
            return Ok(None);
        };
        let body = m
            .inline
            .as_ref()
            .map(|skip| (call.call.message.pieces(), &skip[..]));
        let op = SendOp::Send { solicited: false };
        if self
            .res
            .stage_header_and_body(p, op, &m.header, body, Some(xid))
            .map_err(Unwritten::Post)?
        {
            call.state.send_completed();
            return Ok(None);
        }
        let (mr, len) = self
            .res
            .header_and_body(p, &m.header, body, Some(xid))
            .map_err(Unwritten::Buffer)?;
        call.send_mr = Some(mr);
        call.send_len = len;
        Ok(Some((mr, len)))
    }

    /// Our calls go inline only, without reply resources: backchannel
    /// calls (RFC 8167), unless version 2's Reverse Request Support GENL
    /// lets them use chunks like forward ones.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.2
    //# The value RDMA2_RVREQSUP_GENL that receipt of reverse direction
    //# requests or replies is supported in the same ways that forward
    //# direction requests or replies typically are.
    pub(in crate::engine) fn inline_only(&self) -> bool {
        self.req.backchannel() && !self.params().reverse_chunks
    }

    /// The handle a version 2 call asks the responder to invalidate with
    /// its reply (`rdma_inv_handle`): the Reply chunk's, else the first
    /// Write chunk's — regions registered for this call alone, which our
    /// provider can have invalidated remotely (`Caps::remote_invalidation`,
    /// else none is named). Read chunks are never named: they are shared
    /// read-only registrations of the caller's data. The responder's Send
    /// With Invalidate then spares one Local Invalidate; the others are
    /// invalidated locally as in version 1. Version 1: none (it has no
    /// such field).
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If none of the rdma_handle values in the header conveying the Call
    //# may be invalidated by the responder, the requester sets the RPC
    //# Call's rdma_inv_handle field to the value zero.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-8.4
    //# A requester that mixes persistently- and dynamically-registered
    //# STags in one RPC, or mixes them across RPCs on the same connection,
    //# must therefore indicate which handles may be invalidated via a
    //# mechanism provided in the Upper Layer Protocol.
    fn inv_handle_for(&self, chunks: &ChunkLists) -> Option<u32> {
        let params = self.params();
        if params.framing != Framing::V2 || !params.remote_invalidation {
            return None;
        }
        chunks
            .reply
            .iter()
            .chain(chunks.writes.iter())
            .flat_map(|w| w.segments.first())
            .map(|s| s.handle)
            .next()
    }

    /// Registers the Read chunks of a call that does not go inline: each
    /// DDP item as it is (`CallForm::Reads`), or the whole XDR stream (a
    /// Long Call). Every region goes into `mrs`. Returns the Read list, the
    /// header's shape and the DDP pieces left out of the inline part
    /// (`None`: no inline part at all, a Long Call).
    fn register_reads(
        &mut self,
        p: &mut dyn Provider,
        call: &OutCall,
        form: CallForm,
        ddp: &[(usize, DdpItem)],
        mrs: &mut Mrs,
    ) -> Result<(ReadList, Shape, Option<Skip>), ProviderError> {
        let mut reads = ReadList::new();
        if form == CallForm::Long {
            //= rfc8166#section-3.5.3
            //# Every
            //# RDMA read segment in this chunk MUST contain zero in its Position
            //# field.
            //= rfc8166#section-3.5.3
            //# As these chunks contain a Payload stream, such chunks MUST include
            //# appropriate XDR roundup padding to maintain proper XDR alignment of
            //# their contents.
            // `stream` is the whole XDR stream, DDP items padded, the RPC
            // XID set to this call's.
            let mut stream = marshal::flatten(call.call.message.pieces()).0;
            if let Some(w) = stream.get_mut(..4) {
                w.copy_from_slice(&call.xid.to_be_bytes());
            }
            let len = stream.len();
            let mr = self.res.register(p, stream, Access::REMOTE_READ, mrs)?;
            reads.push(ReadSegment::new(
                0,
                Segment::new(mr.stag().0, len as u32, mr.base()),
            ));
            self.metrics.long_calls += 1;
            self.metrics.read_chunks += 1;
            self.metrics.read_chunk_bytes += len as u64;
            return Ok((reads, Shape::Nomsg, None));
        }
        for &(pi, d) in ddp {
            let Some(Piece::Ddp(data)) = call.call.message.pieces().get(pi) else {
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
            // (Linux leaves the roundup out too.) The piece is registered as
            // it is, shared and read-only: the responder may read exactly
            // its octets, nothing can write them.
            let mr = p.register_shared(data.clone(), Access::REMOTE_READ)?;
            mrs.push(mr);
            reads.push(ReadSegment::new(
                d.position as u32,
                Segment::new(mr.stag().0, d.len as u32, mr.base()),
            ));
            self.metrics.read_chunks += 1;
            self.metrics.read_chunk_bytes += d.len as u64;
        }
        //= rfc8166#section-3.4.2
        //# All other XDR data items MUST NOT be reduced.
        // Only the caller's `Piece::Ddp` items are ever reduced.
        Ok((
            reads,
            Shape::Msg,
            Some(ddp.iter().map(|&(pi, _)| pi).collect()),
        ))
    }

    /// Registers the reply resources a call offers: one Write chunk of
    /// each of `write_lens` (rounded up, see below) and a Reply chunk of
    /// `reply_len`. Every region goes into `mrs`.
    fn register_reply_chunks(
        &mut self,
        p: &mut dyn Provider,
        write_lens: &[u32],
        reply_len: Option<u32>,
        mrs: &mut Mrs,
    ) -> Result<Offer, ProviderError> {
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mut offer = Offer {
            writes: WriteList::new(),
            write_mrs: Mrs::new(),
            reply: None,
            reply_mr: None,
        };
        for &l in write_lens {
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
            let mr = self.res.register(p, buf, rw, mrs)?;
            offer
                .writes
                .push(WriteChunk::single(Segment::new(mr.stag().0, l, mr.base())));
            offer.write_mrs.push(mr);
            self.metrics.write_chunks += 1;
        }
        if let Some(l) = reply_len {
            let buf = self.res.sink_buffer(l as usize);
            let mr = self.res.register(p, buf, rw, mrs)?;
            offer.reply = Some(WriteChunk::single(Segment::new(mr.stag().0, l, mr.base())));
            offer.reply_mr = Some(mr);
            self.metrics.reply_chunks += 1;
        }
        Ok(offer)
    }

    pub(in crate::engine) fn send_call(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        mut call: Box<OutCall>,
    ) {
        // Marshalled once: a call refused by a full send queue comes back
        // with its chunks registered and its Send buffer built.
        let built = call.send_mr.map(|mr| (mr, call.send_len));
        let marshalled = match built {
            Some(_) => None,
            None => match self.marshal_call(p, &mut call) {
                Ok(m) => Some(m),
                Err(e) => {
                    self.fail_local(call, e);
                    return;
                }
            },
        };
        let xid = call.xid;
        let deadline = self.config.call_timeout.map(|d| now + d);
        let retransmit = call.retransmit;
        call.deadline = deadline;
        call.transmissions += 1;
        call.state = CallState::Sent {
            send_completed: false,
        };
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
        // A fresh call is written now: staged (no Send buffer, no work
        // request, no completion: its Send counts as complete at once,
        // there is nothing of ours the provider could still read), or
        // else into a Send buffer.
        let send = match (built, &marshalled) {
            (Some(b), _) => Some(b),
            (None, Some(m)) => match self.call_send_buffer(p, xid, m) {
                Ok(b) => b,
                Err(Unwritten::Post(e)) => {
                    self.fatal(p, ConnectionError::Provider(e));
                    return;
                }
                Err(Unwritten::Buffer(e)) => {
                    self.unsend(p, xid, CallError::Provider(e));
                    return;
                }
            },
            (None, None) => None,
        };
        let Some((send_mr, send_len)) = send else {
            // Staged (marked complete by `call_send_buffer`).
            self.call_posted(xid, retransmit, deadline);
            return;
        };
        let sge = send_mr.sge(0, send_len);
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
        self.call_posted(xid, retransmit, deadline);
    }

    /// Call `xid`'s Send was taken by the provider.
    fn call_posted(&mut self, xid: u32, retransmit: bool, deadline: Option<Instant>) {
        if retransmit {
            self.metrics.retransmits += 1;
        }
        if let Some(d) = deadline {
            self.add_deadline(d, xid);
        }
        self.metrics.calls_sent += 1;
    }

    /// Call `xid` (in the call map) could not be written for its Send
    /// (no Send buffer): it fails alone, as a call whose marshalling
    /// failed, its chunks released.
    #[cold]
    fn unsend(&mut self, p: &mut dyn Provider, xid: u32, e: CallError) {
        self.req.outstanding = self.req.outstanding.saturating_sub(1);
        if let Some(mut call) = self.req.calls.remove(&xid) {
            self.res.zombies.extend(call.all_mrs());
            self.res.reap(p);
            call.state = CallState::Queued;
            self.fail_local(call, e);
        }
    }

    /// A call whose Send the provider refused (QueueFull) was not sent: it
    /// goes back to the front of the queue, as it is (XID, chunks, Send
    /// buffer), until a completion makes room (`drain_backlog`).
    #[cold]
    pub(in crate::engine) fn requeue(&mut self, xid: u32) {
        self.req.outstanding = self.req.outstanding.saturating_sub(1);
        self.res.send_queue_full = true;
        self.metrics.send_queue_waits += 1;
        if let Some(mut call) = self.req.calls.remove(&xid) {
            call.transmissions = call.transmissions.saturating_sub(1);
            call.state = CallState::Queued;
            self.req.queue.push_front(call);
        }
    }
}
