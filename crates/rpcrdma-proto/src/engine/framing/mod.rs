//! The version seam: everything that differs between RPC-over-RDMA
//! versions goes through [`Framing`], and what a received header says comes
//! out as the version-neutral [`Incoming`]. The call and reply machinery
//! (`requester`, `responder`, `plan`) never looks at a version number.
//!
//! Version 1 (RFC 8166) is [`v1`], version 2 (draft -09) [`v2`]: its
//! header prefix carries `rdma_flags` (F_RESPONSE says the direction) and
//! `rdma_inv_handle`, its credit word is a grant only in non-error
//! responses, its errors are richer; when its CONNPROP exchange happens
//! and what it settles belongs to connection setup (`super::setup`,
//! `super::version`), not here.

use core::fmt;

use crate::message::{Message, Piece};
use crate::provider::{SendOp, Stag};
use crate::wire::chunk::ChunkLists;
use crate::wire::rpc::MsgType;
use crate::Limits;

mod v1;
mod v2;

pub(crate) use v2::encode_connprop;

/// Shape of a data-carrying header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The RPC message follows the header in the same Send.
    Msg,
    /// The RPC message travels in chunks only.
    Nomsg,
}

/// An RDMA_ERROR as received, version independent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RdmaErrorReport {
    /// The peer does not support our version; it supports `low..=high`.
    Vers {
        /// Lowest version the peer supports.
        low: u32,
        /// Highest version the peer supports.
        high: u32,
    },
    /// The peer could not parse or use our chunks (ERR_CHUNK).
    Chunk,
    /// Version 2: the peer could not parse our header (RDMA2_ERR_BAD_XDR).
    BadXdr,
    /// Version 2: the peer does not support the header type
    /// (RDMA2_ERR_INVAL_HTYPE).
    InvalHtype,
    /// Version 2: more Read chunks than the peer can process
    /// (RDMA2_ERR_READ_CHUNKS).
    ReadChunks {
        /// The most it can process (0: none).
        max_chunks: u32,
    },
    /// Version 2: more Write chunks than the peer can process
    /// (RDMA2_ERR_WRITE_CHUNKS).
    WriteChunks {
        /// The most it can process.
        max_chunks: u32,
    },
    /// Version 2: a chunk with more segments than the peer can process
    /// (RDMA2_ERR_SEGMENTS).
    Segments {
        /// The most it can process.
        max_segments: u32,
    },
    /// Version 2: a Write chunk too small for its result
    /// (RDMA2_ERR_WRITE_RESOURCE).
    WriteResource {
        /// The first chunk too short, 1-based (0: unknown).
        chunk_index: u32,
        /// Octets needed in it.
        length_needed: u32,
    },
    /// Version 2: the reply fits neither inline nor the Reply chunk
    /// (RDMA2_ERR_REPLY_RESOURCE).
    ReplyResource {
        /// Reply chunk octets needed.
        length_needed: u32,
    },
    /// Version 2: a permanent problem at the peer (RDMA2_ERR_SYSTEM).
    System,
    /// An error code the version does not define.
    Other(u32),
}

impl fmt::Display for RdmaErrorReport {
    /// The wire name of the error and what it means, in words (no enum
    /// names: this text reaches users through `CallFailure`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaErrorReport::Vers { low, high } => write!(
                f,
                "ERR_VERS: the peer does not support our version (it supports {low} to {high})"
            ),
            RdmaErrorReport::Chunk => {
                f.write_str("ERR_CHUNK: the peer could not parse or use the call's chunks")
            }
            RdmaErrorReport::BadXdr => {
                f.write_str("RDMA2_ERR_BAD_XDR: the peer could not parse the transport header")
            }
            RdmaErrorReport::InvalHtype => {
                f.write_str("RDMA2_ERR_INVAL_HTYPE: the peer does not support the header type")
            }
            RdmaErrorReport::ReadChunks { max_chunks } => write!(
                f,
                "RDMA2_ERR_READ_CHUNKS: more Read chunks than the peer can process (at most {max_chunks})"
            ),
            RdmaErrorReport::WriteChunks { max_chunks } => write!(
                f,
                "RDMA2_ERR_WRITE_CHUNKS: more Write chunks than the peer can process (at most {max_chunks})"
            ),
            RdmaErrorReport::Segments { max_segments } => write!(
                f,
                "RDMA2_ERR_SEGMENTS: a chunk has more segments than the peer can process (at most {max_segments})"
            ),
            RdmaErrorReport::WriteResource {
                chunk_index,
                length_needed,
            } => write!(
                f,
                "RDMA2_ERR_WRITE_RESOURCE: Write chunk {chunk_index} is too small ({length_needed} octets needed)"
            ),
            RdmaErrorReport::ReplyResource { length_needed } => write!(
                f,
                "RDMA2_ERR_REPLY_RESOURCE: the reply fits neither inline nor the Reply chunk ({length_needed} octets needed)"
            ),
            RdmaErrorReport::System => {
                f.write_str("RDMA2_ERR_SYSTEM: a permanent problem at the peer")
            }
            RdmaErrorReport::Other(code) => write!(f, "error code {code}, unknown to this version"),
        }
    }
}

/// Error replies a responder sends: the most specific reason; a version
/// that cannot say it sends its nearest (version 1: everything but
/// ERR_VERS is ERR_CHUNK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorReply {
    /// Unsupported version `vers` (ERR_VERS with our range, in the version
    /// 1 layout, the request's version echoed).
    Vers {
        /// The request's `rdma_vers`.
        vers: u32,
    },
    /// Malformed or unusable header (v1: ERR_CHUNK, v2: BAD_XDR).
    Chunk,
    /// Unknown header type (v2 INVAL_HTYPE).
    InvalHtype,
    /// Too many Read chunks; `max` is what we process (v2 READ_CHUNKS).
    ReadChunks { max: u32 },
    /// Too many Write chunks (v2 WRITE_CHUNKS).
    WriteChunks { max: u32 },
    /// Too many segments in a chunk (v2 SEGMENTS).
    Segments { max: u32 },
    /// Write chunk `index` (1-based, 0 unknown) needs `needed` octets (v2
    /// WRITE_RESOURCE).
    WriteResource { index: u32, needed: u32 },
    /// The reply needs a Reply chunk of `needed` octets (v2
    /// REPLY_RESOURCE).
    ReplyResource { needed: u32 },
    /// Any other problem (v2 SYSTEM).
    System,
}

/// What a received message is, before any direction is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A call or reply: RDMA_MSG (payload at `payload_offset`) or
    /// RDMA_NOMSG. `response` is version 2's F_RESPONSE (which says the
    /// direction; version 1: `None`, the RPC `msg_type` decides);
    /// `inv_handle` version 2's `rdma_inv_handle` (0 in version 1).
    Data {
        xid: u32,
        credit: u32,
        shape: Shape,
        chunks: ChunkLists,
        payload_offset: usize,
        response: Option<bool>,
        inv_handle: u32,
    },
    /// An RDMA_ERROR report; `credit` is `None` when the version says the
    /// word is not a grant (version 2).
    Error {
        xid: u32,
        credit: Option<u32>,
        error: RdmaErrorReport,
    },
    /// A version 2 RDMA2_CONNPROP.
    Connprop {
        xid: u32,
        credit: u32,
        response: bool,
        props: crate::wire::v2::PropSet,
    },
    /// Not answered and not used (too short, deprecated RDMA_DONE, an
    /// undecodable error report).
    Drop { reason: &'static str },
    /// A responder answers this with an error; a requester treats it as an
    /// unusable reply to `xid`.
    Reject {
        xid: u32,
        answer: ErrorReply,
        reason: &'static str,
    },
}

/// A data header encoded on demand, straight into a Send buffer (see
/// [`Framing::data_header`]).
#[derive(Debug)]
pub(crate) enum DataHeader {
    /// Version 1.
    V1(v1::Data),
    /// Version 2.
    V2(v2::Data),
}

impl DataHeader {
    /// Octets [`DataHeader::write`] produces.
    pub(crate) fn len(&self) -> usize {
        match self {
            DataHeader::V1(h) => h.len(),
            DataHeader::V2(h) => h.len(),
        }
    }

    /// Writes the header at the front of `buf` (every one of its
    /// [`DataHeader::len`] octets); returns that length, or 0 (nothing
    /// written) if `buf` is too short.
    pub(crate) fn write(&self, buf: &mut [u8]) -> usize {
        match self {
            DataHeader::V1(h) => h.write(buf),
            DataHeader::V2(h) => h.write(buf),
        }
    }
}

/// The framing of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// RPC-over-RDMA version 1 (RFC 8166).
    V1,
    /// RPC-over-RDMA version 2 (draft-cel-nfsv4-rpcrdma-version-two-09).
    V2,
}

impl Framing {
    /// Octets of a data header of `shape` with these chunk lists.
    pub(crate) fn header_len(self, shape: Shape, chunks: &ChunkLists) -> usize {
        let _ = shape;
        match self {
            Framing::V1 => v1::header_len(chunks),
            Framing::V2 => v2::header_len(chunks),
        }
    }

    /// Octets of a header with three empty lists (the smallest RDMA_MSG).
    pub(crate) fn min_msg_header_len(self) -> usize {
        self.header_len(Shape::Msg, &ChunkLists::empty())
    }

    //= rfc8166#section-4.6.1
    //# Therefore, senders MUST NOT send RDMA_MSGP procedures.
    //= rfc8166#section-4.6.2
    //# Therefore, senders MUST NOT send RDMA_DONE messages.
    // Only RDMA_MSG and RDMA_NOMSG (and RDMA_ERROR, below) can be encoded.
    //= rfc8166#section-4
    //# All RPC-over-RDMA header content is contained in the Transport
    //# stream; thus, it MUST be XDR encoded.
    /// Encodes a data header. `inv_handle` is the handle the requester
    /// asks the responder to invalidate remotely (v2 puts it in the header;
    /// v1 does not carry it); `response`: the message is a reply (v2's
    /// F_RESPONSE; v1 does not carry it).
    #[cfg(test)]
    pub(crate) fn encode_data(
        self,
        xid: u32,
        credit: u32,
        shape: Shape,
        chunks: ChunkLists,
        inv_handle: Option<u32>,
        response: bool,
    ) -> Vec<u8> {
        let h = self.data_header(xid, credit, shape, chunks, inv_handle, response);
        let mut v = vec![0u8; h.len()];
        let n = h.write(&mut v);
        v.truncate(n);
        v
    }

    /// A data header ready to be written straight into a Send buffer (see
    /// [`Framing::encode_data`]).
    pub(crate) fn data_header(
        self,
        xid: u32,
        credit: u32,
        shape: Shape,
        chunks: ChunkLists,
        inv_handle: Option<u32>,
        response: bool,
    ) -> DataHeader {
        match self {
            Framing::V1 => DataHeader::V1(v1::data_header(xid, credit, shape, chunks)),
            Framing::V2 => DataHeader::V2(v2::data_header(
                xid,
                credit,
                shape,
                chunks,
                inv_handle.unwrap_or(0),
                response,
            )),
        }
    }

    /// Encodes an error reply; `versions` is the range of versions this
    /// connection supports (for ERR_VERS).
    pub(crate) fn encode_error(
        self,
        xid: u32,
        credit: u32,
        e: ErrorReply,
        versions: (u32, u32),
    ) -> Vec<u8> {
        match self {
            Framing::V1 => v1::encode_error(xid, credit, e, versions),
            Framing::V2 => v2::encode_error(xid, credit, e, versions),
        }
    }

    /// The `rdma_vers` of this framing.
    pub(crate) fn version(self) -> u32 {
        match self {
            Framing::V1 => 1,
            Framing::V2 => 2,
        }
    }

    /// The credit rule: what a received header's credit word says about the
    /// grant (`None`: it says nothing). Version 1: every reply, including
    /// RDMA_ERROR, carries the responder's current grant. Version 2:
    /// only a non-error response grants (a received RDMA2_ERROR comes with
    /// no credit at all, see [`Incoming::Error`]), and every reply is a
    /// response.
    //= rfc8166#section-4.2.3
    //# When sent with an RPC Call message, the requested credit value is
    //# provided.  When sent with an RPC Reply message, the granted credit
    //# value is returned.
    pub(crate) fn grant(self, credit: u32) -> Option<u32> {
        match self {
            Framing::V1 | Framing::V2 => Some(credit),
        }
    }

    /// Decodes one received message.
    pub(crate) fn decode(self, buf: &[u8], limits: &Limits) -> Incoming {
        match self {
            Framing::V1 => v1::decode(buf, limits),
            Framing::V2 => v2::decode(buf, limits),
        }
    }

    /// How a reply's Send goes out: Send With Invalidate of the call's
    /// single chunk handle `inv` (see [`invalidation_handle`]) when remote
    /// invalidation was negotiated, else a plain Send. (Version 2 names
    /// the handle in the header instead.)
    //= rfc8797#section-4.1
    //# When both connection peers have set this bit
    //# flag in their CM Private Data, the responder MAY use RDMA Send
    //# with Invalidate operations when transmitting RPC Replies.
    //= rfc8797#section-4.1
    //# When either peer on a connection clears this flag, the responder MUST
    //# use only RDMA Send when transmitting RPC Replies.
    //= rfc8797#section-4.1
    //# Each RDMA Send with Invalidate MUST invalidate an STag associated
    //# only with the Transaction ID (XID) in the rdma_xid field of the RPC-
    //# over-RDMA Transport Header it carries.
    // Only when the call carried exactly one distinct handle (Linux
    // svc_rdma_get_inv_rkey), never on an error reply.
    // Plain Send / Send With Invalidate, never the Solicited Event
    // variants: that is what Linux xprtrdma and svcrdma post, and what
    // Wireshark's RPC-over-RDMA dissector recognises.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If a requester has provided a non-zero value in the RPC Call's
    //# rdma_inv_handle field and the responder chooses to use Remote
    //# Invalidation for the matching RPC Reply, the responder uses RDMA Send
    //# With Invalidate to transmit that RPC reply, and uses the value in the
    //# corresponding Call's rdma_inv_handle field to construct the Send With
    //# Invalidate Work Request.
    // Version 2: `inv` is the call's `rdma_inv_handle`, checked to name one
    // of the call's handles (`responder::call`), and `remote_invalidation`
    // says our provider can send it (`Caps::remote_invalidation`).
    pub(crate) fn reply_send_op(self, remote_invalidation: bool, inv: Option<u32>) -> SendOp {
        match (remote_invalidation, inv) {
            (true, Some(h)) => SendOp::SendWithInvalidate {
                invalidate: Stag(h),
                solicited: false,
            },
            _ => SendOp::Send { solicited: false },
        }
    }
}

/// The handle of every segment of a call's chunks, if they are all the
/// same one: the only case where Send With Invalidate is used (Linux
/// svc_rdma_get_inv_rkey). (No set is built: the first handle, then any
/// other ends it.)
pub(crate) fn invalidation_handle(chunks: &ChunkLists) -> Option<u32> {
    if chunks.is_empty() {
        return None; // (what the iterator below finds, without building it)
    }
    let mut all = chunks.reads.iter().map(|r| r.target.handle).chain(
        chunks
            .writes
            .iter()
            .chain(chunks.reply.iter())
            .flat_map(|w| w.segments.iter().map(|s| s.handle)),
    );
    match all.next() {
        Some(h) if all.all(|x| x == h) => Some(h),
        _ => None,
    }
}

/// The XID and `msg_type` words that start an RPC message (inline, or in
/// a chunk): what says which direction a message travels, and what must
/// agree with the transport header.
pub(crate) fn rpc_prefix(msg: &[u8]) -> Option<(u32, MsgType)> {
    let w = |i: usize| {
        msg.get(i..i + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
    };
    Some((w(0)?, MsgType(w(4)?)))
}

/// [`rpc_prefix`] of a message's contiguous XDR stream (a reassembled
/// call, whose first octets may lie in any piece): the first inline piece
/// when it holds both words (every well-formed call), else the first eight
/// octets gathered across the pieces and their pads.
pub(crate) fn message_prefix(m: &Message) -> Option<(u32, MsgType)> {
    if let Some(Piece::Inline(b)) = m.pieces().first() {
        if b.len() >= 8 {
            return rpc_prefix(b);
        }
    }
    let mut head = [0u8; 8];
    let mut n = 0;
    m.for_each_xdr_chunk(|c| {
        let k = c.len().min(head.len() - n);
        head[n..n + k].copy_from_slice(&c[..k]);
        n += k;
    });
    rpc_prefix(&head[..n])
}
