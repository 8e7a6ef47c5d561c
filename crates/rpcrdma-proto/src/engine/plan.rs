//! The form of a message, from lengths and [`Params`] alone: pure
//! functions, no provider, no registration (those follow the plan in
//! `requester` and `responder`).
//!
//! - [`plan_call`]: a call goes inline (RDMA_MSG), with its DDP-eligible
//!   items in Read chunks (RDMA_MSG + Read list), or as a Long Call
//!   (RDMA_NOMSG + Position-Zero Read chunk), and which reply resources
//!   (Write chunks, a Reply chunk) it offers (RFC 8166 section 3.5).
//! - [`plan_reply`]: a reply's DDP results go into the Write chunks the
//!   call offered, the rest inline (RDMA_MSG) or into the Reply chunk
//!   (RDMA_NOMSG), or neither fits (ERR_CHUNK).

use super::framing::{ErrorReply, Shape};
use super::marshal::{self, pad4, DdpItem};
use super::setup::Params;
use super::{CallError, ReplyForm};
use crate::provider::{RemoteAddr, Stag};
use crate::wire::chunk::{
    ChunkLists, ReadList, ReadSegment, Segment, SegmentList, WriteChunk, WriteList,
};

/// How a call is conveyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallForm {
    /// RDMA_MSG, the whole message inline (DDP items padded).
    Inline,
    /// RDMA_MSG with each DDP-eligible item in a Read chunk.
    Reads,
    /// RDMA_NOMSG and a Position-Zero Read chunk holding the whole message.
    Long,
}

/// The lengths a call's plan depends on.
#[derive(Clone, Copy, Debug)]
pub(super) struct CallLens<'a> {
    /// Octets of the whole XDR stream (DDP items with their XDR pad).
    pub(super) stream_len: usize,
    /// DDP-eligible items with data (empty ones move nowhere).
    pub(super) ddp_items: usize,
    /// Their octets with XDR pad.
    pub(super) ddp_xdr_len: usize,
    /// The largest possible reply (the configured default already applied).
    pub(super) reply_max: u32,
    /// The largest length of each DDP-eligible result.
    pub(super) ddp_results: &'a [u32],
    /// What an earlier RDMA2_ERROR asked of this call (`Reform::NONE`
    /// for a first transmission).
    pub(super) reform: Reform,
}

/// How a call is sent again after a version 2 error report asked for
/// another form (draft -09 §5.3.3; `requester::retry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Reform {
    /// A Long Call (READ_CHUNKS: the responder reads no data chunks; or
    /// SEGMENTS: the fewest segments).
    pub(super) long: bool,
    /// No Write chunks, the whole reply in a Reply chunk (WRITE_CHUNKS).
    pub(super) no_writes: bool,
    /// A Reply chunk even if the reply looks like it fits inline
    /// (REPLY_RESOURCE).
    pub(super) reply_chunk: bool,
}

impl Reform {
    /// The first transmission's form.
    pub(super) const NONE: Reform = Reform {
        long: false,
        no_writes: false,
        reply_chunk: false,
    };
}

/// What a call sends and offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CallPlan {
    /// How the call itself goes.
    pub(super) form: CallForm,
    /// One Write chunk of each of these lengths (none: empty).
    pub(super) write_lens: Vec<u32>,
    /// A Reply chunk of this length.
    pub(super) reply_len: Option<u32>,
}

/// One single-segment Write chunk per length (placeholders for header
/// sizes); nothing built for the usual empty list.
fn placeholders(lens: &[u32]) -> WriteList {
    if lens.is_empty() {
        return WriteList::new();
    }
    lens.iter()
        .map(|&l| WriteChunk::single(Segment::new(0, l, 0)))
        .collect()
}

/// True when [`plan_call`] plans exactly an inline call offering no reply
/// resources (no Write chunk, no Reply chunk): the first transmission of a
/// call whose header with three empty lists plus its whole XDR stream fits
/// the send threshold, and whose largest reply fits the receive threshold
/// after such a header (or a backchannel call, which offers none). Every
/// small call; the engine then builds neither the plan nor chunk lists
/// (pinned to `plan_call` by a proptest).
#[inline]
pub(super) fn plain_call(
    params: &Params,
    backchannel: bool,
    stream_len: usize,
    reply_max: u32,
    reform: Reform,
) -> bool {
    let min_hdr = params.framing.min_msg_header_len();
    reform == Reform::NONE
        && (backchannel || min_hdr + reply_max as usize <= params.recv_threshold)
        && min_hdr + stream_len <= params.send_threshold
}

/// Plans a call. A backchannel call (`backchannel`) is inline or nothing
/// (RFC 8167 section 5.3 leaves chunks to the upper layer binding; the
/// NFSv4.1 backchannel needs none) and offers no reply resources.
pub(super) fn plan_call(
    params: &Params,
    backchannel: bool,
    lens: CallLens<'_>,
) -> Result<CallPlan, CallError> {
    let framing = params.framing;
    let send_thr = params.send_threshold;
    let recv_thr = params.recv_threshold;
    let min_hdr = framing.min_msg_header_len();
    let reply_max = lens.reply_max;
    let stripped_len = lens.stream_len.saturating_sub(lens.ddp_xdr_len);

    // Reply resources.
    let placeholder = |len: u32| WriteChunk::single(Segment::new(0, len, 0));
    let mut write_lens: Vec<u32> = Vec::new();
    let mut reply_len: Option<u32> = None;
    //= rfc8166#section-4.3.3
    //# A
    //# Requester MUST provide a Reply chunk whenever the maximum possible
    //# size of the RPC Reply message's Transport and Payload streams is
    //# larger than the inline threshold for messages from Responder to
    //# Requester.
    // As Linux: a Write chunk for each DDP-eligible result, a Reply chunk
    // when the rest (the header with the Write list echoed, plus the
    // non-DDP part) may not fit.
    let reform = lens.reform;
    if !backchannel && (reform.reply_chunk || min_hdr + reply_max as usize > recv_thr) {
        if !reform.no_writes {
            write_lens = lens.ddp_results.to_vec();
        }
        let echo = ChunkLists {
            reads: ReadList::new(),
            writes: placeholders(&write_lens),
            reply: None,
        };
        let ddp_total: u64 = write_lens.iter().map(|&l| u64::from(l)).sum();
        let rest = u64::from(reply_max).saturating_sub(ddp_total);
        if reform.reply_chunk
            || framing.header_len(Shape::Msg, &echo) as u64 + rest > recv_thr as u64
        {
            reply_len = Some(reply_max);
        }
    }
    let base = ChunkLists {
        reads: ReadList::new(),
        writes: placeholders(&write_lens),
        reply: reply_len.map(placeholder),
    };
    let with_reads = |n: usize| {
        let mut c = base.clone();
        c.reads = ReadList::from_elem(ReadSegment::default(), n);
        c
    };
    //= rfc8166#section-3.5.3
    //# If there are no DDP-
    //# eligible data items in the Payload stream, or the Payload stream is
    //# still too large after it has been reduced, the RDMA transport MUST
    //# use RDMA Read or Write operations to convey the Payload stream
    //# itself.
    // A Call that does not fit the send threshold moves its DDP-eligible
    // data to Read chunks, or becomes a Long Call (RDMA_NOMSG,
    // Position-Zero Read chunk).
    let inline_len = framing.header_len(Shape::Msg, &base) + lens.stream_len;
    let form = if inline_len <= send_thr && !reform.long {
        CallForm::Inline
    } else if backchannel {
        return Err(CallError::TooLarge {
            len: inline_len,
            max: send_thr,
        });
    } else if lens.ddp_items > 0
        && !reform.long
        && framing.header_len(Shape::Msg, &with_reads(lens.ddp_items)) + stripped_len <= send_thr
    {
        CallForm::Reads
    } else {
        let len = framing.header_len(Shape::Nomsg, &with_reads(1));
        if len > send_thr {
            return Err(CallError::TooLarge { len, max: send_thr });
        }
        CallForm::Long
    };
    Ok(CallPlan {
        form,
        write_lens,
        reply_len,
    })
}

/// One RDMA Write of a reply: `len` octets from offset `offset` of source
/// `source` (the written DDP pieces in order, then, for a Long Reply, the
/// inline part) to `remote`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct WriteOp {
    /// Where in the requester's chunk.
    pub(super) remote: RemoteAddr,
    /// Which source.
    pub(super) source: usize,
    /// Offset in the source.
    pub(super) offset: usize,
    /// Octets.
    pub(super) len: usize,
}

/// How a reply goes (unless it fits neither form: ERR_CHUNK).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ReplyPlan {
    /// [`ReplyForm::Inline`] (RDMA_MSG) or [`ReplyForm::ReplyChunk`]
    /// (RDMA_NOMSG).
    pub(super) form: ReplyForm,
    /// The header's chunk lists: the Write list and Reply chunk echoed
    /// with the octets written into each segment.
    pub(super) chunks: ChunkLists,
    /// Indexes (in the message's pieces) of the DDP pieces written into
    /// Write chunks: they leave the inline part.
    pub(super) written: Vec<usize>,
    /// The RDMA Writes, in order.
    pub(super) writes: Vec<WriteOp>,
}

/// A copy of `chunk` with every segment length zero (unused).
fn unused(chunk: &WriteChunk) -> WriteChunk {
    WriteChunk::from_segments(
        chunk
            .segments
            .iter()
            .map(|s| Segment::new(s.handle, 0, s.offset))
            .collect::<SegmentList>(),
    )
}

/// Spreads `len` octets of source `source` over `chunk`'s segments:
/// the Writes go to `writes`, the octets per segment into `echo` (a copy of
/// `chunk`). `None` when they do not fit.
fn spread_into(
    chunk: &WriteChunk,
    echo: &mut WriteChunk,
    source: usize,
    len: usize,
    writes: &mut Vec<WriteOp>,
) -> Option<()> {
    let lens: Vec<u32> = chunk.segments.iter().map(|s| s.length).collect();
    for (si, offset, n) in marshal::spread(len, &lens)? {
        let (Some(seg), Some(e)) = (chunk.segments.get(si), echo.segments.get_mut(si)) else {
            continue;
        };
        e.length = n as u32;
        writes.push(WriteOp {
            remote: RemoteAddr {
                stag: Stag(seg.handle),
                offset: seg.offset,
            },
            source,
            offset,
            len: n,
        });
    }
    Some(())
}

/// Plans a reply whose XDR stream is `stream_len` octets with these DDP
/// pieces (`(piece index, item)`, as [`marshal::layout`] gives them), to a
/// call that offered the Write chunks `writes` and the Reply chunk `reply`.
/// `None`: the reply fits neither inline nor the Reply chunk, or a result
/// does not fit its Write chunk (ERR_CHUNK; a reply is never truncated).
pub(super) fn plan_reply(
    params: &Params,
    writes: &WriteList,
    reply: Option<&WriteChunk>,
    stream_len: usize,
    ddp: &[(usize, DdpItem)],
) -> Option<ReplyPlan> {
    if plain_reply(params, writes, reply, stream_len) {
        return Some(ReplyPlan {
            form: ReplyForm::Inline,
            chunks: ChunkLists::empty(),
            written: Vec::new(),
            writes: Vec::new(),
        });
    }
    plan_reply_general(params, writes, reply, stream_len, ddp)
}

/// True when the call offered no Write chunk and no Reply chunk and the
/// whole reply fits inline after a header with three empty lists: what
/// [`plan_reply_general`] plans then (inline, nothing echoed, nothing
/// written) without its loops and lists (every small reply; pinned to it
/// by a proptest).
#[inline]
fn plain_reply(
    params: &Params,
    writes: &WriteList,
    reply: Option<&WriteChunk>,
    stream_len: usize,
) -> bool {
    writes.is_empty()
        && reply.is_none()
        && params.framing.min_msg_header_len() + stream_len <= params.send_threshold
}

/// [`plan_reply`] for every reply.
fn plan_reply_general(
    params: &Params,
    writes: &WriteList,
    reply: Option<&WriteChunk>,
    stream_len: usize,
    ddp: &[(usize, DdpItem)],
) -> Option<ReplyPlan> {
    let framing = params.framing;
    let thr = params.send_threshold;
    // DDP results into the Write chunks, in order.
    //= rfc8166#section-3.4.6
    //# The Responder MUST copy the segment count and all
    //# segments from the Requester-provided Write chunk into the RPC Reply
    //# message's Transport header.  As it does so, the Responder updates
    //# each segment length field to reflect the actual amount of data that
    //# is being returned in that segment.
    //= rfc8166#section-3.4.6.2
    //# A Responder MUST NOT write XDR roundup padding into
    //# a Write chunk, even if the Requester made space available for it.
    //= rfc8166#section-4.3.2.2
    //# If this is the last or only Write chunk available and it remains
    //# unconsumed, the Responder MUST return this Write chunk as an unused
    //# Write chunk (see Section 3.4.6).
    // Every echoed segment starts at length zero (unused) and gets the
    // octets actually written (Linux pcl_process_nonpayloads).
    // (Nothing to build for the usual small call without a Write list.)
    let mut echo: WriteList = if writes.is_empty() {
        WriteList::new()
    } else {
        writes.iter().map(unused).collect()
    };
    let mut written: Vec<usize> = Vec::new();
    let mut ops: Vec<WriteOp> = Vec::new();
    // Octets (XDR pad included) that leave the inline part.
    let mut moved = 0usize;
    //= rfc8166#section-4.3.2
    //# When a Requester provides a Write list, the Responder MUST push data
    //# corresponding to DDP-eligible result data items to Requester memory
    //# referenced in the Write list.
    //= rfc8166#section-4.3.2.2
    //# If there is a subsequent DDP-eligible result data item in the RPC
    //# Reply message, it MUST be placed in that unconsumed Write chunk.
    // The k-th non-empty DDP item goes into the k-th Write chunk: an
    // empty item (a union arm without data) consumes no chunk.
    for (k, &(pi, d)) in ddp.iter().filter(|d| d.1.len > 0).enumerate() {
        let Some(chunk) = writes.get(k) else {
            break; // no Write chunk left: the item goes inline
        };
        //= rfc8166#section-4.3.2.3
        //# The Responder MUST return the corresponding
        //# result data item inline and MUST return an empty Write chunk in
        //# that Write list position in the RPC Reply message.
        if chunk.segments.is_empty() {
            continue; // echoed with no segments; the item stays inline
        }
        // A result that does not fit the Write chunk offered for it: None.
        let e = echo.get_mut(k)?;
        spread_into(chunk, e, written.len(), d.len, &mut ops)?;
        written.push(pi);
        moved += d.len + pad4(d.len);
    }
    // The inline part: the message minus the written DDP pieces.
    let inline_len = stream_len - moved;
    //= rfc8166#section-4.3.3
    //# When a Requester provides a Reply chunk in an RPC Call message, the
    //# Responder MUST copy that chunk into the Transport header of the RPC
    //# Reply message.
    // A Short reply copies it with every segment length zero (as Linux
    // svcrdma does).
    //= rfc8166#section-4.3.1
    //# Responders MUST leave the Read list empty in all replies.
    let mut chunks = ChunkLists {
        reads: ReadList::new(),
        writes: echo,
        reply: reply.map(unused),
    };
    if framing.header_len(Shape::Msg, &chunks) + inline_len <= thr {
        return Some(ReplyPlan {
            form: ReplyForm::Inline,
            chunks,
            written,
            writes: ops,
        });
    }
    // Long Reply: the rest goes into the Reply chunk (the source after
    // the written DDP pieces).
    //= rfc8166#section-3.5.3
    //# If a Reply chunk was provided and the reduced
    //# Payload stream is larger than the reply inline threshold, the
    //# Responder MUST use the Requester-provided Reply chunk for the reply.
    // A reply that fits neither inline nor the Reply chunk is answered
    // with ERR_CHUNK (Linux svcrdma; libevpl found silent truncation
    // here), never truncated.
    let (rc, rc_echo) = (reply?, chunks.reply.as_mut()?);
    spread_into(rc, rc_echo, written.len(), inline_len, &mut ops)?;
    if framing.header_len(Shape::Nomsg, &chunks) > thr {
        return None;
    }
    Some(ReplyPlan {
        form: ReplyForm::ReplyChunk,
        chunks,
        written,
        writes: ops,
    })
}

/// Why [`plan_reply`] found no form (version 2 says it; version 1 sends
/// ERR_CHUNK for both): the first DDP result larger than its Write chunk
/// (1-based index, octets needed), else the Reply chunk octets the rest
/// needs.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# The responder MUST set the rdma_chunk_index field to point to the
//# first Write chunk in the transport header that is too short, or to
//# zero to indicate that it was not possible to determine which chunk is
//# too small.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# The responder MUST set the rdma_length_needed to the number of bytes
//# needed in that chunk in order to convey the result data item.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# The responder MUST set the rdma_length_needed to the number of Reply
//# chunk bytes needed to convey the reply.
pub(super) fn reply_shortfall(
    writes: &WriteList,
    stream_len: usize,
    ddp: &[(usize, DdpItem)],
) -> ErrorReply {
    let mut moved = 0usize;
    for (k, &(_, d)) in ddp.iter().filter(|d| d.1.len > 0).enumerate() {
        let Some(chunk) = writes.get(k) else {
            break;
        };
        if chunk.segments.is_empty() {
            continue;
        }
        if chunk.total_len() < d.len as u64 {
            return ErrorReply::WriteResource {
                index: k as u32 + 1,
                needed: d.len as u32,
            };
        }
        moved += d.len + pad4(d.len);
    }
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# If an RPC Reply's Payload stream does not fit inline and the
    //# requester has not provided a large enough Reply chunk to convey the
    //# stream, the responder MUST set the rdma_err field to
    //# RDMA2_ERR_REPLY_RESOURCE.
    ErrorReply::ReplyResource {
        needed: u32::try_from(stream_len.saturating_sub(moved)).unwrap_or(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::framing::Framing;
    use crate::engine::Piece;
    use crate::provider::Bytes;
    use proptest::prelude::*;

    fn params(send: usize, recv: usize) -> Params {
        Params {
            framing: Framing::V1,
            send_threshold: send,
            recv_threshold: recv,
            remote_invalidation: false,
            ord: 16,
            reverse_chunks: false,
        }
    }

    /// The lengths of a call made of `pieces`.
    fn lens<'a>(pieces: &[Piece], reply_max: u32, results: &'a [u32]) -> CallLens<'a> {
        let (stream_len, ddp) = marshal::layout(pieces);
        let ddp: Vec<DdpItem> = ddp.into_iter().map(|d| d.1).filter(|d| d.len > 0).collect();
        CallLens {
            stream_len,
            ddp_items: ddp.len(),
            ddp_xdr_len: ddp.iter().map(|d| d.len + pad4(d.len)).sum(),
            reply_max,
            ddp_results: results,
            reform: Reform::NONE,
        }
    }

    fn inline(n: usize) -> Piece {
        Piece::Inline(vec![0; n].into())
    }

    fn ddp(n: usize) -> Piece {
        Piece::Ddp(Bytes::from(vec![0; n]))
    }

    /// The header lists a call plan sends, with `reads` Read segments.
    fn header(plan: &CallPlan, reads: usize) -> ChunkLists {
        ChunkLists {
            reads: ReadList::from_elem(ReadSegment::default(), reads),
            writes: placeholders(&plan.write_lens),
            reply: plan
                .reply_len
                .map(|l| WriteChunk::single(Segment::new(0, l, 0))),
        }
    }

    #[test]
    fn call_forms_at_their_boundaries_by_hand() {
        // A 4,096-octet threshold; an RDMA_MSG header without chunks is 28
        // octets, with one Read segment 52 (discriminator, position,
        // handle, length, 64-bit offset: 24 more).
        let p = params(4096, 4096);
        let none: &[u32] = &[];
        let plan = |pieces: &[Piece]| plan_call(&p, false, lens(pieces, 100, none));
        let form = |pieces: &[Piece]| plan(pieces).map(|c| c.form);
        // 28 + 4068 = 4096: inline; 4 more: not.
        assert_eq!(form(&[inline(4068)]), Ok(CallForm::Inline));
        assert_eq!(form(&[inline(4072)]), Ok(CallForm::Long));
        // A DDP item that does not fit inline (28 + 4044 + 40 > 4096) goes
        // to a Read chunk when the rest fits with the Read list:
        // 52 + 4044 = 4096.
        assert_eq!(form(&[inline(4044), ddp(40)]), Ok(CallForm::Reads));
        assert_eq!(form(&[inline(4048), ddp(40)]), Ok(CallForm::Long));
        // An empty DDP item moves nowhere: still inline.
        assert_eq!(form(&[inline(4068), ddp(0)]), Ok(CallForm::Inline));
        // The same data, unpadded (1 octet + 3 of pad), inline.
        assert_eq!(form(&[inline(4064), ddp(1)]), Ok(CallForm::Inline));
        // A backchannel call is inline or too large.
        let bc = plan_call(&p, true, lens(&[inline(4044), ddp(40)], 100, none));
        assert_eq!(
            bc,
            Err(CallError::TooLarge {
                len: 4112,
                max: 4096
            })
        );
    }

    #[test]
    fn reply_resources_by_hand() {
        let p = params(4096, 4096);
        // 28 + 4068 = 4096: a reply of 4,068 octets always fits inline,
        // DDP-eligible results included.
        let r = plan_call(&p, false, lens(&[inline(8)], 4068, &[100])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![], None));
        // One more, and a Reply chunk of that size is offered.
        let r = plan_call(&p, false, lens(&[inline(8)], 4069, &[])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![], Some(4069)));
        // A DDP-eligible result gets a Write chunk; the rest of the reply
        // (4,069 - 2,000) fits with the Write list echoed (28 + 24): no
        // Reply chunk.
        let r = plan_call(&p, false, lens(&[inline(8)], 4069, &[2000])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![2000], None));
        // At the boundary: 52 + (6044 - 2000) = 4096 fits; one more does
        // not, and both are offered.
        let r = plan_call(&p, false, lens(&[inline(8)], 6044, &[2000])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![2000], None));
        let r = plan_call(&p, false, lens(&[inline(8)], 6045, &[2000])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![2000], Some(6045)));
        // No reply resources on the backchannel.
        let r = plan_call(&p, true, lens(&[inline(8)], 8000, &[2000])).unwrap();
        assert_eq!((r.write_lens, r.reply_len), (vec![], None));
    }

    fn chunk(lens: &[u32]) -> WriteChunk {
        WriteChunk::from_segments(
            lens.iter()
                .enumerate()
                .map(|(i, &l)| Segment::new(i as u32 + 1, l, 0x1000 * i as u64))
                .collect::<SegmentList>(),
        )
    }

    #[test]
    fn reply_forms_by_hand() {
        let p = params(1024, 1024);
        let plan = |pieces: &[Piece], writes: &[WriteChunk], reply: Option<WriteChunk>| {
            let (stream_len, ddp) = marshal::layout(pieces);
            let writes: WriteList = writes.iter().cloned().collect();
            plan_reply(&p, &writes, reply.as_ref(), stream_len, &ddp)
        };
        // The header with the Reply chunk echoed is 48 octets (a present
        // chunk of one segment: 24 instead of 4); 48 + 976 = 1024: inline,
        // the Reply chunk echoed unused.
        let r = plan(&[inline(976)], &[], Some(chunk(&[4096]))).unwrap();
        assert_eq!(r.form, ReplyForm::Inline);
        assert_eq!(r.chunks.reply, Some(chunk(&[0])));
        assert!(r.writes.is_empty());
        // 4 more: into the Reply chunk (one Write of 980 octets).
        let r = plan(&[inline(980)], &[], Some(chunk(&[4096]))).unwrap();
        assert_eq!(r.form, ReplyForm::ReplyChunk);
        assert_eq!(r.chunks.reply, Some(chunk(&[980])));
        assert_eq!((r.writes.len(), r.writes[0].len), (1, 980));
        // Too large inline (28 + 1000) without a Reply chunk, or with one
        // too small: ERR_CHUNK.
        assert_eq!(plan(&[inline(1000)], &[], None), None);
        assert_eq!(plan(&[inline(980)], &[], Some(chunk(&[979]))), None);
        // A DDP result in its Write chunk, spread over two segments; the
        // echo says what each got; an empty item consumes no chunk.
        let r = plan(
            &[inline(8), ddp(0), ddp(5000), inline(4)],
            &[chunk(&[4096, 4096])],
            None,
        )
        .unwrap();
        assert_eq!(r.form, ReplyForm::Inline);
        assert_eq!(r.written, vec![2]);
        assert_eq!(r.chunks.writes.first(), Some(&chunk(&[4096, 904])));
        // A result larger than its Write chunk: ERR_CHUNK.
        assert_eq!(plan(&[inline(8), ddp(5000)], &[chunk(&[4096])], None), None);
        // A Write chunk without segments: the item stays inline (and fits).
        let r = plan(&[inline(8), ddp(100)], &[chunk(&[])], None).unwrap();
        assert_eq!((r.form, r.written.len()), (ReplyForm::Inline, 0));
    }

    fn pieces() -> impl Strategy<Value = Vec<Piece>> {
        proptest::collection::vec(
            prop_oneof![
                (0usize..400).prop_map(|n| inline(n * 4)),
                prop_oneof![0usize..8, 0usize..3000, 0usize..20000].prop_map(ddp),
            ],
            1..6,
        )
    }

    fn thr() -> impl Strategy<Value = usize> {
        prop_oneof![Just(1024usize), Just(4096), 900usize..9000, 28usize..200]
    }

    proptest! {
        /// A call's plan sends what fits the send threshold, in the
        /// simplest form that fits; it is refused only when nothing fits.
        #[test]
        fn call_plans_fit_and_are_the_simplest(
            pieces in pieces(),
            send in thr(),
            recv in thr(),
            backchannel: bool,
            reply_max in prop_oneof![0u32..2000, 0u32..100000],
            results in proptest::collection::vec(prop_oneof![0u32..100, 0u32..70000], 0..40),
        ) {
            let p = params(send, recv);
            let l = lens(&pieces, reply_max, &results);
            let stripped = l.stream_len - l.ddp_xdr_len;
            let hlen = |shape, lists: &ChunkLists| Framing::V1.header_len(shape, lists);
            match plan_call(&p, backchannel, l) {
                Ok(plan) => {
                    let inline = hlen(Shape::Msg, &header(&plan, 0)) + l.stream_len;
                    let reads = hlen(Shape::Msg, &header(&plan, l.ddp_items)) + stripped;
                    let long = hlen(Shape::Nomsg, &header(&plan, 1));
                    match plan.form {
                        CallForm::Inline => prop_assert!(inline <= send),
                        CallForm::Reads => {
                            prop_assert!(inline > send && l.ddp_items > 0 && reads <= send)
                        }
                        CallForm::Long => {
                            prop_assert!(inline > send && long <= send);
                            prop_assert!(l.ddp_items == 0 || reads > send);
                        }
                    }
                    if backchannel {
                        prop_assert_eq!(plan.form, CallForm::Inline);
                        prop_assert!(plan.write_lens.is_empty() && plan.reply_len.is_none());
                    }
                }
                Err(CallError::TooLarge { len, max }) => {
                    prop_assert_eq!(max, send);
                    prop_assert!(len > send);
                }
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }

        /// `plain_call` says yes exactly when `plan_call` plans an inline
        /// call without reply resources, whatever the thresholds, the
        /// call's pieces, its largest reply and an earlier error report's
        /// reform (the fast path against the general one).
        #[test]
        fn a_plain_call_is_what_plan_call_plans_inline_without_chunks(
            pieces in pieces(),
            send in thr(),
            recv in thr(),
            backchannel: bool,
            v2: bool,
            reply_max in prop_oneof![0u32..2000, 0u32..100000],
            results in proptest::collection::vec(prop_oneof![0u32..100, 0u32..70000], 0..4),
            reform in (any::<bool>(), any::<bool>(), any::<bool>(), 0u8..4).prop_map(
                |(long, no_writes, reply_chunk, none)| if none > 0 {
                    Reform::NONE
                } else {
                    Reform { long, no_writes, reply_chunk }
                }
            ),
            near_send in proptest::option::of(-1isize..=1),
            near_recv in proptest::option::of(-1isize..=1),
        ) {
            let mut p = params(send, recv);
            if v2 {
                p.framing = Framing::V2;
            }
            let mut l = lens(&pieces, reply_max, &results);
            l.reform = reform;
            // Thresholds at, just under and just over what a plain call
            // and its largest reply need.
            let min_hdr = p.framing.min_msg_header_len() as isize;
            let at = |need: isize, d: isize| (need + d).max(0) as usize;
            if let Some(d) = near_send {
                p.send_threshold = at(min_hdr + l.stream_len as isize, d);
            }
            if let Some(d) = near_recv {
                p.recv_threshold = at(min_hdr + reply_max as isize, d);
            }
            let fast = plain_call(&p, backchannel, l.stream_len, reply_max, reform);
            let general = matches!(
                plan_call(&p, backchannel, l),
                Ok(CallPlan { form: CallForm::Inline, ref write_lens, reply_len: None })
                    if write_lens.is_empty()
            );
            // (Only a reform can make the general plan inline and plain
            // while the fast one declines: it is never taken for one.)
            if reform == Reform::NONE {
                prop_assert_eq!(fast, general);
            } else {
                prop_assert!(!fast);
            }
        }

        /// A call offers reply resources only when the largest reply may
        /// not fit the receive threshold, and then enough: Write chunks of
        /// the DDP results' sizes, and a Reply chunk of `reply_max` unless
        /// the rest of the reply fits inline.
        #[test]
        fn call_plans_offer_room_for_the_largest_reply(
            send in thr(),
            recv in thr(),
            reply_max in prop_oneof![0u32..2000, 0u32..100000],
            near in proptest::option::of(0usize..256),
            results in proptest::collection::vec(prop_oneof![0u32..100, 0u32..70000], 0..40),
        ) {
            let p = params(send, recv);
            let reply_max = near.map_or(reply_max, |n| (recv + n).saturating_sub(128) as u32);
            let Ok(plan) = plan_call(&p, false, lens(&[inline(8)], reply_max, &results)) else {
                return Ok(()); // (a tiny send threshold: no header fits)
            };
            if 28 + reply_max as usize <= recv {
                prop_assert!(plan.write_lens.is_empty() && plan.reply_len.is_none());
            } else {
                prop_assert_eq!(&plan.write_lens, &results);
                let echo = ChunkLists {
                    reads: ReadList::new(),
                    writes: placeholders(&results),
                    reply: None,
                };
                let rest = u64::from(reply_max)
                    .saturating_sub(results.iter().map(|&r| u64::from(r)).sum());
                let fits = Framing::V1.header_len(Shape::Msg, &echo) as u64 + rest <= recv as u64;
                prop_assert_eq!(plan.reply_len, (!fits).then_some(reply_max));
            }
        }
    }

    fn arb_chunk() -> impl Strategy<Value = WriteChunk> {
        proptest::collection::vec((1u32..9, 0u32..12000, 0u64..4), 0..4).prop_map(|v| {
            WriteChunk::from_segments(
                v.into_iter()
                    .map(|(h, l, o)| Segment::new(h, l, o))
                    .collect::<SegmentList>(),
            )
        })
    }

    fn total(c: &WriteChunk) -> u64 {
        c.segments.iter().map(|s| u64::from(s.length)).sum()
    }

    proptest! {
        /// `plain_reply` says yes exactly when the general planner plans
        /// an inline reply with nothing echoed and nothing written, and
        /// `plan_reply` then gives that same plan (the fast path against
        /// the general one), at thresholds around the boundary too.
        #[test]
        fn a_plain_reply_is_what_the_general_plan_gives(
            pieces in pieces(),
            send in thr(),
            v2: bool,
            near in proptest::option::of(-1isize..=1),
            writes in proptest::collection::vec(arb_chunk(), 0..2),
            reply in proptest::option::of(arb_chunk()),
            bare in any::<bool>(),
        ) {
            let mut p = params(send, 4096);
            if v2 {
                p.framing = Framing::V2;
            }
            let (writes, reply): (WriteList, _) = if bare {
                (WriteList::new(), None)
            } else {
                (writes.into_iter().collect(), reply)
            };
            let (stream_len, ddp) = marshal::layout(&pieces);
            if let Some(d) = near {
                let need = (p.framing.min_msg_header_len() + stream_len) as isize;
                p.send_threshold = (need + d).max(0) as usize;
            }
            let fast = plain_reply(&p, &writes, reply.as_ref(), stream_len);
            let general = plan_reply_general(&p, &writes, reply.as_ref(), stream_len, &ddp);
            let plain = general.as_ref().is_some_and(|g| {
                g.form == ReplyForm::Inline
                    && g.chunks == ChunkLists::empty()
                    && g.written.is_empty()
                    && g.writes.is_empty()
            });
            prop_assert_eq!(fast, plain && writes.is_empty() && reply.is_none());
            prop_assert_eq!(
                plan_reply(&p, &writes, reply.as_ref(), stream_len, &ddp),
                general
            );
        }

        /// A reply plan echoes every chunk offered (same segments, each
        /// length no more than offered), writes each DDP item it moves in
        /// full into its own chunk, sends the rest inline when it fits and
        /// else in the Reply chunk; the header always fits; ERR_CHUNK
        /// (`None`) only when a form cannot be found.
        #[test]
        fn reply_plans_echo_write_and_fit(
            pieces in pieces(),
            send in thr(),
            writes in proptest::collection::vec(arb_chunk(), 0..4),
            reply in proptest::option::of(arb_chunk()),
        ) {
            let p = params(send, 4096);
            let writes: WriteList = writes.into_iter().collect();
            let (stream_len, ddp) = marshal::layout(&pieces);
            let items: Vec<(usize, DdpItem)> = ddp.iter().copied().filter(|d| d.1.len > 0).collect();
            // What the plan must find: an item larger than its
            // (non-empty) chunk is ERR_CHUNK, the others move; the rest
            // goes inline if it fits, else into a Reply chunk that holds
            // it, else ERR_CHUNK.
            let used = |k: usize| writes.get(k).is_some_and(|c| !c.segments.is_empty());
            let too_big = items
                .iter()
                .enumerate()
                .any(|(k, (_, d))| used(k) && d.len as u64 > writes.get(k).map_or(0, total));
            let rest = stream_len
                - items
                    .iter()
                    .enumerate()
                    .filter(|&(k, _)| used(k))
                    .map(|(_, (_, d))| d.len + pad4(d.len))
                    .sum::<usize>();
            let lists = ChunkLists {
                reads: ReadList::new(),
                writes: writes.clone(),
                reply: reply.clone(),
            };
            let fits_inline = Framing::V1.header_len(Shape::Msg, &lists) + rest <= send;
            let fits_chunk = reply.as_ref().is_some_and(|r| total(r) >= rest as u64)
                && Framing::V1.header_len(Shape::Nomsg, &lists) <= send;
            let plan = plan_reply(&p, &writes, reply.as_ref(), stream_len, &ddp);
            prop_assert_eq!(plan.is_none(), too_big || (!fits_inline && !fits_chunk));
            let Some(plan) = plan else {
                return Ok(());
            };
            prop_assert_eq!(plan.form == ReplyForm::Inline, fits_inline);
            prop_assert!(plan.chunks.reads.is_empty());
            prop_assert_eq!(plan.chunks.writes.len(), writes.len());
            for (echo, offered) in plan.chunks.writes.iter().zip(writes.iter()) {
                prop_assert_eq!(echo.segments.len(), offered.segments.len());
                for (e, o) in echo.segments.iter().zip(offered.segments.iter()) {
                    prop_assert!(e.handle == o.handle && e.offset == o.offset && e.length <= o.length);
                }
            }
            // Each moved item is written whole into the chunk of its rank.
            let mut moved = 0;
            for (k, (pi, d)) in items.iter().enumerate() {
                let echoed = plan.chunks.writes.get(k).map_or(0, total);
                match plan.written.iter().position(|w| w == pi) {
                    Some(src) => {
                        prop_assert_eq!(echoed, d.len as u64);
                        let sent: usize =
                            plan.writes.iter().filter(|w| w.source == src).map(|w| w.len).sum();
                        prop_assert_eq!(sent, d.len);
                        moved += d.len + pad4(d.len);
                    }
                    None => prop_assert_eq!(echoed, 0),
                }
            }
            let inline_len = stream_len - moved;
            let hlen = |shape| Framing::V1.header_len(shape, &plan.chunks);
            match plan.form {
                ReplyForm::Inline => {
                    prop_assert!(hlen(Shape::Msg) + inline_len <= send);
                    prop_assert_eq!(plan.chunks.reply.as_ref().map_or(0, total), 0);
                }
                ReplyForm::ReplyChunk => {
                    prop_assert!(hlen(Shape::Nomsg) <= send);
                    prop_assert_eq!(plan.chunks.reply.as_ref().map(total), Some(inline_len as u64));
                    let src = plan.written.len();
                    let sent: usize =
                        plan.writes.iter().filter(|w| w.source == src).map(|w| w.len).sum();
                    prop_assert_eq!(sent, inline_len);
                }
                ReplyForm::ErrChunk => prop_assert!(false, "not a plan"),
            }
        }
    }
}
