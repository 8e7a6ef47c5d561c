//! RPC-over-RDMA version 2 framing (draft-cel-nfsv4-rpcrdma-version-two-09):
//! data headers (with a fast path for the header without chunks), CONNPROP,
//! RDMA2_ERROR replies, and the decoder of received headers into
//! [`Incoming`] — including every ERR_VERS form a version 1 server answers
//! a version 2 message with (`wire::vers_error`).

use super::{ErrorReply, Incoming, RdmaErrorReport, Shape};
use crate::wire::chunk::ChunkLists;
use crate::wire::header::{self, TransportHeader, WireAnswer};
use crate::wire::v2::{self, Body, ChunkLists2, Flags, HType, PropSet, RdmaError};
use crate::wire::{common::FIXED_PREFIX_LEN, v1};
use crate::xdr::{DecodeErrorKind, XdrEncode};
use crate::Limits;

/// Octets of the fixed part of a data header: the prefix (with
/// `rdma_flags`) and `rdma_inv_handle`.
const FIXED_DATA_LEN: usize = v2::PREFIX_LEN + 4;

/// Octets of an RDMA2_MSG / RDMA2_NOMSG header with three empty lists.
const MIN_HEADER_LEN: usize = FIXED_DATA_LEN + 12;

/// A version 2 data header (see [`super::DataHeader`]).
#[derive(Debug)]
pub(crate) enum Data {
    /// Three empty chunk lists (every small call and reply): nine words,
    /// written without the general encoder; the same octets as `General`
    /// (pinned by a test).
    Plain {
        xid: u32,
        credit: u32,
        shape: Shape,
        response: bool,
    },
    /// Any header.
    General(v2::Header),
}

fn htype(shape: Shape) -> HType {
    match shape {
        Shape::Msg => HType::RDMA2_MSG,
        Shape::Nomsg => HType::RDMA2_NOMSG,
    }
}

//= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
//# When the rdma_start.rdma_htype field has the value RDMA2_MSG or
//# RDMA2_NOMSG, the value of the RPCRDMA2_F_RESPONSE flag MUST be the same
//# as the value of the associated RPC message's msg_type field.
// `response` is the direction the engine already knows (a call CALL = 0,
// clear; a reply REPLY = 1, set), never read back from the message.
fn flags(response: bool) -> Flags {
    if response {
        Flags::RESPONSE
    } else {
        Flags(0)
    }
}

impl Data {
    /// Octets [`Data::write`] produces.
    pub(super) fn len(&self) -> usize {
        match self {
            Data::Plain { .. } => MIN_HEADER_LEN,
            Data::General(h) => h.encoded_len(),
        }
    }

    /// See [`super::DataHeader::write`].
    pub(super) fn write(&self, buf: &mut [u8]) -> usize {
        match self {
            &Data::Plain {
                xid,
                credit,
                shape,
                response,
            } => {
                let Some(out) = buf.get_mut(..MIN_HEADER_LEN) else {
                    return 0;
                };
                // xid, vers, credit, htype, flags, inv_handle 0, then the
                // three lists' "absent" words.
                let words = [
                    xid,
                    v2::RPCRDMA_VERSION_2,
                    credit,
                    htype(shape).0,
                    flags(response).0,
                    0,
                    0,
                    0,
                    0,
                ];
                for (o, w) in out.chunks_exact_mut(4).zip(words) {
                    o.copy_from_slice(&w.to_be_bytes());
                }
                MIN_HEADER_LEN
            }
            Data::General(h) => h.encode(buf).unwrap_or(0),
        }
    }
}

/// Octets of a data header with these chunk lists.
pub(super) fn header_len(chunks: &ChunkLists) -> usize {
    FIXED_DATA_LEN + chunks.encoded_len()
}

/// A data header (see [`super::Framing::data_header`]).
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-10.1
//# To clearly distinguish version 1 and version 2 messages, senders MUST
//# fill in the correct version (fixed after version negotiation) and
//# receivers MUST check that the content of the rdma_vers is correct
//# before using referencing any other header field.
pub(super) fn data_header(
    xid: u32,
    credit: u32,
    shape: Shape,
    chunks: ChunkLists,
    inv_handle: u32,
    response: bool,
) -> Data {
    if chunks.is_empty() && inv_handle == 0 {
        return Data::Plain {
            xid,
            credit,
            shape,
            response,
        };
    }
    let c = ChunkLists2 {
        inv_handle,
        lists: chunks,
    };
    let body = match shape {
        Shape::Msg => Body::Msg(c),
        Shape::Nomsg => Body::Nomsg(c),
    };
    Data::General(v2::Header {
        xid,
        credit,
        flags: flags(response),
        body,
    })
}

/// An RDMA2_CONNPROP carrying `props`: `response` set when it answers the
/// peer's (same XID), clear when it opens the exchange (engine decision 1,
/// `docs/compliance-v2.md`).
pub(crate) fn encode_connprop(xid: u32, credit: u32, response: bool, props: &PropSet) -> Vec<u8> {
    let h = v2::Header {
        xid,
        credit,
        flags: flags(response),
        body: Body::Connprop(props.clone()),
    };
    h.to_vec().unwrap_or_default()
}

/// The RDMA2_ERROR body of an error reply (`None`: ERR_VERS, which goes in
/// the version 1 layout).
fn rdma2_error(e: ErrorReply) -> Option<RdmaError> {
    Some(match e {
        ErrorReply::Vers { .. } => return None,
        ErrorReply::Chunk => RdmaError::BadXdr,
        ErrorReply::InvalHtype => RdmaError::InvalHtype,
        ErrorReply::ReadChunks { max } => RdmaError::ReadChunks { max_chunks: max },
        ErrorReply::WriteChunks { max } => RdmaError::WriteChunks { max_chunks: max },
        ErrorReply::Segments { max } => RdmaError::Segments { max_segments: max },
        ErrorReply::WriteResource { index, needed } => RdmaError::WriteResource {
            chunk_index: index,
            length_needed: needed,
        },
        ErrorReply::ReplyResource { needed } => RdmaError::ReplyResource {
            length_needed: needed,
        },
        ErrorReply::System => RdmaError::System,
    })
}

/// Encodes an error reply. `versions` is the range this connection
/// supports (for ERR_VERS).
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# In all cases below, the responder copies the values of the
//# rdma_start.rdma_xid and rdma_start.rdma_vers fields from the incoming
//# transport header that generated the error to transport header of the
//# error response.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
//# When the rdma_start.rdma_htype field has the value RDMA2_ERROR, the
//# RPCRDMA2_F_RESPONSE flag MUST be set.
pub(super) fn encode_error(xid: u32, credit: u32, e: ErrorReply, versions: (u32, u32)) -> Vec<u8> {
    let Some(body) = rdma2_error(e) else {
        // A message of another version: refused in the version 1 layout,
        // its version echoed (the only layout such a peer can be expected
        // to read), with this connection's range.
        let vers = match e {
            ErrorReply::Vers { vers } => vers,
            _ => v1::RPCRDMA_VERSION,
        };
        return WireAnswer::ErrVers { xid, vers }
            .to_header(credit, versions)
            .and_then(|h| h.to_vec().ok())
            .unwrap_or_default();
    };
    v2::Header {
        xid,
        credit,
        flags: Flags::RESPONSE,
        body: Body::Error(body),
    }
    .to_vec()
    .unwrap_or_default()
}

/// A received RDMA2_ERROR body, version independent.
fn report(e: RdmaError) -> RdmaErrorReport {
    match e {
        RdmaError::Vers { low, high } => RdmaErrorReport::Vers { low, high },
        RdmaError::BadXdr => RdmaErrorReport::BadXdr,
        RdmaError::InvalHtype => RdmaErrorReport::InvalHtype,
        RdmaError::ReadChunks { max_chunks } => RdmaErrorReport::ReadChunks { max_chunks },
        RdmaError::WriteChunks { max_chunks } => RdmaErrorReport::WriteChunks { max_chunks },
        RdmaError::Segments { max_segments } => RdmaErrorReport::Segments { max_segments },
        RdmaError::WriteResource {
            chunk_index,
            length_needed,
        } => RdmaErrorReport::WriteResource {
            chunk_index,
            length_needed,
        },
        RdmaError::ReplyResource { length_needed } => {
            RdmaErrorReport::ReplyResource { length_needed }
        }
        RdmaError::System => RdmaErrorReport::System,
        RdmaError::Other(c) => RdmaErrorReport::Other(c.0),
    }
}

/// Decodes one received message on a version 2 connection (or one a
/// version 2 endpoint is probing).
pub(super) fn decode(buf: &[u8], limits: &Limits) -> Incoming {
    match decode_plain(buf) {
        Some(incoming) => incoming,
        None => decode_general(buf, limits),
    }
}

/// The header of every small call and reply (RDMA2_MSG, three empty
/// lists, whatever the flags and `rdma_inv_handle`), decoded without the
/// general decoder: exactly what [`decode_general`] gives for it (pinned
/// by a proptest); `None` for every other message.
#[inline]
fn decode_plain(buf: &[u8]) -> Option<Incoming> {
    let head: &[u8; MIN_HEADER_LEN] = buf.get(..MIN_HEADER_LEN)?.try_into().ok()?;
    let word = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let plain = word(4) == v2::RPCRDMA_VERSION_2
        && word(12) == HType::RDMA2_MSG.0
        && head[24..] == [0u8; 12]
        // rdma_rpc_first_word: the RPC message has at least one word.
        && buf.len() >= MIN_HEADER_LEN + 4;
    plain.then(|| Incoming::Data {
        xid: word(0),
        credit: word(8),
        shape: Shape::Msg,
        chunks: ChunkLists::empty(),
        payload_offset: MIN_HEADER_LEN,
        response: Some(Flags(word(16)).is_response()),
        inv_handle: word(20),
    })
}

/// `rdma_proc` / `rdma_htype` 4: RDMA_ERROR in version 1, RDMA2_ERROR in
/// version 2 (the only versions defined).
const ERROR_PROC: u32 = 4;

/// [`decode`] for every message.
fn decode_general(buf: &[u8], limits: &Limits) -> Incoming {
    //= rfc8166#section-4.5
    //# If an incoming RPC-over-RDMA message is not as long as a minimal size
    //# RPC-over-RDMA header (28 bytes), the receiver cannot trust the value
    //# of the XID field; therefore, it MUST silently discard the message
    //# before performing any parsing.
    // Version 2 keeps the four common words (§3.1); a message too short
    // to hold them and `rdma_flags` is dropped unread. (A void RDMA2_ERROR
    // is 24 octets, shorter than 28: it is used only if it decodes.)
    if buf.len() < FIXED_PREFIX_LEN + 4 {
        return Incoming::Drop {
            reason: "shorter than the smallest transport header",
        };
    }
    match header::decode(buf, limits) {
        Ok((TransportHeader::V2(h), hlen)) => from_v2(h, hlen),
        Ok((TransportHeader::V1(h), _)) => from_v1(h),
        Ok((TransportHeader::UnknownVersion(u), _)) => {
            if u.prefix.proc == ERROR_PROC {
                return Incoming::Drop {
                    reason: "error report of another version",
                };
            }
            Incoming::Reject {
                xid: u.prefix.xid,
                answer: ErrorReply::Vers {
                    vers: u.prefix.vers,
                },
                reason: "unsupported version",
            }
        }
        Err(e) => {
            // The version 1 layout echoing version 2: how a v1-only server
            // (Linux svcrdma) refuses our probe (decision 8).
            if let Some(v) = e.version_error {
                return Incoming::Error {
                    xid: v.xid,
                    credit: None,
                    error: RdmaErrorReport::Vers {
                        low: v.low,
                        high: v.high,
                    },
                };
            }
            match e.answer() {
                WireAnswer::Drop => Incoming::Drop {
                    reason: "undecodable error report or response",
                },
                //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
                //# If a responder recognizes the values in the
                //# rdma_start.rdma_vers and rdma_start.rdma_proc fields, but
                //# the incoming RPC-over-RDMA transport header cannot be
                //# parsed, it MUST set the rdma_err field to RDMA2_ERR_BAD_XDR.
                WireAnswer::V2BadXdr { xid } => Incoming::Reject {
                    xid,
                    answer: over_limit(&e.error.kind, limits).unwrap_or(ErrorReply::Chunk),
                    reason: "malformed transport header",
                },
                WireAnswer::V2InvalHtype { xid } => Incoming::Reject {
                    xid,
                    answer: ErrorReply::InvalHtype,
                    reason: "unsupported header type",
                },
                // A malformed version 1 message, or another version: this
                // connection does not speak it.
                WireAnswer::ErrChunk { xid } => Incoming::Reject {
                    xid,
                    answer: ErrorReply::Vers {
                        vers: v1::RPCRDMA_VERSION,
                    },
                    reason: "unsupported version",
                },
                WireAnswer::ErrVers { xid, vers } => Incoming::Reject {
                    xid,
                    answer: ErrorReply::Vers { vers },
                    reason: "unsupported version",
                },
            }
        }
    }
}

/// The error a header that decoded up to one of our chunk limits gets:
/// it is well formed, but asks for more than this responder processes.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# If a requester presents more DDP-eligible arguments than the responder
//# is prepared to Read, the responder MUST set the rdma_err field to
//# RDMA2_ERR_READ_CHUNKS, and set the rdma_max_chunks field to the maximum
//# number of Read chunks the responder can receive and process.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# If a requester has constructed an RPC Call message with more DDP-
//# eligible results than the server is prepared to Write, the responder
//# MUST set the rdma_err field to RDMA2_ERR_WRITE_CHUNKS, and set the
//# rdma_max_chunks field to the maximum number of Write chunks the
//# responder can process and return.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
//# If a requester has constructed an RPC Call message with a chunk that
//# contains more segments than the responder supports, the responder MUST
//# set the rdma_err field to RDMA2_ERR_SEGMENTS, and set the
//# rdma_max_segments field to the maximum number of segments the responder
//# can process.
// (Our Read list limit counts segments; every Read chunk has at least
// one, so it bounds the Read chunks too. The limit on all the segments of
// a header is reported as the segments limit it is.)
fn over_limit(kind: &DecodeErrorKind, limits: &Limits) -> Option<ErrorReply> {
    let DecodeErrorKind::LimitExceeded { limit, .. } = kind else {
        return None;
    };
    Some(match *limit {
        "max_read_segments" => ErrorReply::ReadChunks {
            max: limits.max_read_segments,
        },
        "max_write_chunks" => ErrorReply::WriteChunks {
            max: limits.max_write_chunks,
        },
        "max_segments_per_chunk" => ErrorReply::Segments {
            max: limits.max_segments_per_chunk,
        },
        "max_header_segments" => ErrorReply::Segments {
            max: limits.max_header_segments,
        },
        _ => return None,
    })
}

/// A decoded version 2 header.
fn from_v2(h: v2::Header, hlen: usize) -> Incoming {
    let response = h.flags.is_response();
    let (xid, credit) = (h.xid, h.credit);
    match h.body {
        Body::Msg(c) => Incoming::Data {
            xid,
            credit,
            shape: Shape::Msg,
            chunks: c.lists,
            payload_offset: hlen,
            response: Some(response),
            inv_handle: c.inv_handle,
        },
        Body::Nomsg(c) => Incoming::Data {
            xid,
            credit,
            shape: Shape::Nomsg,
            chunks: c.lists,
            payload_offset: hlen,
            response: Some(response),
            inv_handle: c.inv_handle,
        },
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# The receiver of this header type MUST ignore the value of the
        //# rdma_start.rdma_credits field.
        Body::Error(e) => Incoming::Error {
            xid,
            credit: None,
            error: report(e),
        },
        Body::Connprop(props) => Incoming::Connprop {
            xid,
            credit,
            response,
            props,
        },
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.2
        //# RPC-over-RDMA version 2 implementations that receive an OPTIONAL
        //# operation that is not supported MUST respond with an RDMA2_ERROR
        //# message with an error code of RDMA2_ERR_INVAL_HTYPE.
        // Unless it is a response: errors never go to a responder.
        Body::Unknown { .. } if response => Incoming::Drop {
            reason: "unknown header type in a response",
        },
        Body::Unknown { .. } => Incoming::Reject {
            xid,
            answer: ErrorReply::InvalHtype,
            reason: "unsupported header type",
        },
    }
}

/// A version 1 header received on a version 2 connection: a plain v1
/// ERR_VERS is the peer refusing version 2; any other error report is
/// dropped; anything else is refused with ERR_VERS.
fn from_v1(h: v1::Header) -> Incoming {
    match h.body {
        v1::Body::Error(v1::RdmaError::Vers { low, high }) => Incoming::Error {
            xid: h.xid,
            credit: None,
            error: RdmaErrorReport::Vers { low, high },
        },
        v1::Body::Error(_) => Incoming::Drop {
            reason: "error report of another version",
        },
        _ => Incoming::Reject {
            xid: h.xid,
            answer: ErrorReply::Vers {
                vers: v1::RPCRDMA_VERSION,
            },
            reason: "unsupported version",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::framing::{DataHeader, Framing};
    use crate::wire::v2::{PropVal, RvReqSup};

    fn hx(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Messages around the plain RDMA2_MSG header.
    fn near_plain() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..48),
            0usize..44,
            any::<u8>(),
            0usize..90,
            any::<bool>(),
        )
            .prop_map(|(xid, credit, flags, inv, tail, at, val, cut, mutate)| {
                let mut m = Vec::new();
                for w in [xid, 2, credit, 0, flags, inv, 0, 0, 0] {
                    m.extend(w.to_be_bytes());
                }
                m.extend(tail);
                if mutate {
                    if let Some(b) = m.get_mut(at) {
                        *b = val;
                    }
                }
                m.truncate(cut.max(16));
                m
            })
    }

    proptest::proptest! {
        /// The plain-header fast path decodes to what the general decoder
        /// gives, for the plain header and everything near it.
        #[test]
        fn plain_header_decode_is_the_general_decode(buf in near_plain()) {
            let limits = Limits::DEFAULT;
            proptest::prop_assert_eq!(decode(&buf, &limits), decode_general(&buf, &limits));
        }

        /// The fast path of a header without chunks writes exactly what
        /// the general encoder writes.
        #[test]
        fn plain_data_header_is_the_general_encoding(
            xid: u32,
            credit: u32,
            nomsg: bool,
            response: bool,
            room in 0usize..48,
        ) {
            let shape = if nomsg { Shape::Nomsg } else { Shape::Msg };
            let c = ChunkLists2 { inv_handle: 0, lists: ChunkLists::empty() };
            let body = if nomsg { Body::Nomsg(c) } else { Body::Msg(c) };
            let general = DataHeader::V2(Data::General(v2::Header {
                xid, credit, flags: flags(response), body,
            }));
            let plain = Framing::V2.data_header(xid, credit, shape, ChunkLists::empty(), None, response);
            let fast = matches!(plain, DataHeader::V2(Data::Plain { .. }));
            proptest::prop_assert!(fast);
            proptest::prop_assert_eq!(plain.len(), general.len());
            proptest::prop_assert_eq!(plain.len(), Framing::V2.header_len(shape, &ChunkLists::empty()));
            let (mut a, mut b) = (vec![0xa5; room], vec![0xa5; room]);
            proptest::prop_assert_eq!(plain.write(&mut a), general.write(&mut b));
            proptest::prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn data_header_bytes_by_hand() {
        // A call: xid 7, vers 2, credit 128, RDMA2_MSG, flags 0,
        // inv_handle 0, three absent lists.
        let want =
            hx("00000007 00000002 00000080 00000000 00000000 00000000 00000000 00000000 00000000");
        let got = Framing::V2.encode_data(7, 128, Shape::Msg, ChunkLists::empty(), None, false);
        assert_eq!(got, want);
        assert_eq!(Framing::V2.min_msg_header_len(), 36);
        // A reply: F_RESPONSE set.
        let got = Framing::V2.encode_data(7, 64, Shape::Nomsg, ChunkLists::empty(), None, true);
        assert_eq!(
            got,
            hx("00000007 00000002 00000040 00000001 00000001 00000000 00000000 00000000 00000000")
        );
        // An inv_handle goes into its word.
        let got = Framing::V2.encode_data(7, 1, Shape::Msg, ChunkLists::empty(), Some(0xab), false);
        assert_eq!(&got[20..24], &[0, 0, 0, 0xab]);
    }

    #[test]
    fn errors_bytes_by_hand() {
        // REPLY_RESOURCE: xid, vers 2, credit, RDMA2_ERROR, F_RESPONSE,
        // code 8, length_needed.
        let got =
            Framing::V2.encode_error(9, 32, ErrorReply::ReplyResource { needed: 5000 }, (2, 2));
        assert_eq!(
            got,
            hx("00000009 00000002 00000020 00000004 00000001 00000008 00001388")
        );
        // A version 1 message on a version 2 connection: ERR_VERS in the
        // version 1 layout, its version echoed, our range.
        let got = Framing::V2.encode_error(9, 32, ErrorReply::Vers { vers: 1 }, (2, 2));
        assert_eq!(
            got,
            hx("00000009 00000001 00000020 00000004 00000001 00000002 00000002")
        );
    }

    #[test]
    fn decode_classes() {
        let l = Limits::DEFAULT;
        // Linux svcrdma's answer to a v2 message: 7 words, vers 2 echoed.
        let linux = hx("00000005 00000002 00000040 00000004 00000001 00000001 00000001");
        assert_eq!(
            Framing::V2.decode(&linux, &l),
            Incoming::Error {
                xid: 5,
                credit: None,
                error: RdmaErrorReport::Vers { low: 1, high: 1 }
            }
        );
        // A plain v1 ERR_VERS.
        let v1 = hx("00000005 00000001 00000040 00000004 00000001 00000001 00000001");
        assert!(matches!(
            Framing::V2.decode(&v1, &l),
            Incoming::Error {
                error: RdmaErrorReport::Vers { low: 1, high: 1 },
                ..
            }
        ));
        // Another v1 error report: dropped; a v1 call: ERR_VERS.
        let v1chunk = hx("00000005 00000001 00000040 00000004 00000002");
        assert!(matches!(
            Framing::V2.decode(&v1chunk, &l),
            Incoming::Drop { .. }
        ));
        let v1call = hx("00000005 00000001 00000040 00000000 00000000 00000000 00000000 00000000");
        assert!(matches!(
            Framing::V2.decode(&v1call, &l),
            Incoming::Reject {
                answer: ErrorReply::Vers { vers: 1 },
                ..
            }
        ));
        // Unknown htype 9 in a request: INVAL_HTYPE; in a response: dropped.
        let unk = hx("00000006 00000002 00000010 00000009 00000000");
        assert!(matches!(
            Framing::V2.decode(&unk, &l),
            Incoming::Reject {
                xid: 6,
                answer: ErrorReply::InvalHtype,
                ..
            }
        ));
        let unk_resp = hx("00000006 00000002 00000010 00000009 00000001");
        assert!(matches!(
            Framing::V2.decode(&unk_resp, &l),
            Incoming::Drop { .. }
        ));
        // A malformed RDMA2_MSG (list discriminant 2): BAD_XDR.
        let bad =
            hx("00000007 00000002 00000010 00000000 00000000 00000000 00000002 00000000 00000000");
        assert!(matches!(
            Framing::V2.decode(&bad, &l),
            Incoming::Reject {
                xid: 7,
                answer: ErrorReply::Chunk,
                ..
            }
        ));
        // RDMA2_ERROR: its credit is not reported.
        let err = hx("00000008 00000002 00000099 00000004 00000001 00000009");
        assert_eq!(
            Framing::V2.decode(&err, &l),
            Incoming::Error {
                xid: 8,
                credit: None,
                error: RdmaErrorReport::System
            }
        );
        // An unknown version's error report: dropped; its call: ERR_VERS.
        let v7e = hx("00000008 00000007 00000001 00000004 00000001 00000001 00000001");
        assert!(matches!(
            Framing::V2.decode(&v7e, &l),
            Incoming::Drop { .. }
        ));
        let v7 = hx("00000008 00000007 00000001 00000000 00000001 00000001 00000001");
        assert!(matches!(
            Framing::V2.decode(&v7, &l),
            Incoming::Reject {
                answer: ErrorReply::Vers { vers: 7 },
                ..
            }
        ));
        // CONNPROP.
        let props = PropSet {
            props: vec![
                PropVal::Rbsiz(Some(8192)),
                PropVal::Brs(Some(RvReqSup::Genl)),
            ],
        };
        let cp = encode_connprop(3, 64, true, &props);
        assert_eq!(cp.len(), 48);
        assert_eq!(
            Framing::V2.decode(&cp, &l),
            Incoming::Connprop {
                xid: 3,
                credit: 64,
                response: true,
                props
            }
        );
        // Too short for the prefix and flags: dropped unread.
        assert!(matches!(
            Framing::V2.decode(&[0; 19], &l),
            Incoming::Drop { .. }
        ));
    }
}
