//! RPC-over-RDMA version 1 (RFC 8166) framing: data headers (with a fast
//! path for the header without chunks), error replies, and the decoder of
//! received headers into [`Incoming`].

use super::{ErrorReply, Incoming, RdmaErrorReport, Shape};
use crate::wire::chunk::ChunkLists;
use crate::wire::header::{self, TransportHeader, WireAnswer};
use crate::wire::v1;
use crate::xdr::XdrEncode;
use crate::Limits;

/// The versions a version 1 endpoint supports (for ERR_VERS; the engine
/// passes the connection's range, `Setup::versions`).
#[cfg(test)]
pub(super) const VERSIONS: (u32, u32) = (v1::RPCRDMA_VERSION, v1::RPCRDMA_VERSION);

/// A version 1 data header (see [`super::DataHeader`]).
#[derive(Debug)]
pub(crate) enum Data {
    /// Three empty chunk lists (every small call and reply): seven words,
    /// written without going through the general encoder; the same octets
    /// as `General` with `ChunkLists::empty()` (pinned by a test).
    Plain { xid: u32, credit: u32, shape: Shape },
    /// Any header.
    General(v1::Header),
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
            &Data::Plain { xid, credit, shape } => {
                let Some(out) = buf.get_mut(..MIN_HEADER_LEN) else {
                    return 0;
                };
                let proc = match shape {
                    Shape::Msg => v1::Proc::RDMA_MSG,
                    Shape::Nomsg => v1::Proc::RDMA_NOMSG,
                };
                // xid, vers, credit, proc, then the three lists' "absent"
                // words.
                let words = [xid, v1::RPCRDMA_VERSION, credit, proc.0, 0, 0, 0];
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
    v1::FIXED_PREFIX_LEN + chunks.encoded_len()
}

/// A data header (see [`super::Framing::data_header`]).
pub(super) fn data_header(xid: u32, credit: u32, shape: Shape, chunks: ChunkLists) -> Data {
    if chunks.is_empty() {
        return Data::Plain { xid, credit, shape };
    }
    let body = match shape {
        Shape::Msg => v1::Body::Msg(chunks),
        Shape::Nomsg => v1::Body::Nomsg(chunks),
    };
    //= rfc8166#section-4.2.2
    //# For RPC-over-RDMA version 1, this field MUST contain the value one
    //# (1).
    //= rfc8167#section-5.1
    //# The rdma_vers field MUST contain the same value in reverse- and
    //# forward-direction Call messages on the same connection.
    //= rfc8167#section-5.2
    //# The rdma_vers field MUST contain the same value in a reverse-
    //# direction Reply message as in the matching Call message.
    Data::General(v1::Header { xid, credit, body })
}

/// Encodes an error reply: ERR_VERS, or ERR_CHUNK for every other reason
/// (version 1 has no other code). `versions` is the range this connection
/// supports ([`VERSIONS`] on a version 1 connection).
pub(super) fn encode_error(xid: u32, credit: u32, e: ErrorReply, versions: (u32, u32)) -> Vec<u8> {
    let answer = match e {
        ErrorReply::Vers { vers } => WireAnswer::ErrVers { xid, vers },
        _ => WireAnswer::ErrChunk { xid },
    };
    answer
        .to_header(credit, versions)
        .and_then(|h| h.to_vec().ok())
        .unwrap_or_default()
}

/// Octets of the smallest RDMA_MSG / RDMA_NOMSG header (four fixed words,
/// three empty chunk lists).
const MIN_HEADER_LEN: usize = 28;

/// Octets of an RDMA_ERROR / ERR_CHUNK (four fixed words and the error
/// code; Linux `RPCRDMA_HDRLEN_ERR`).
const MIN_ERROR_LEN: usize = 20;

/// `rdma_proc` of RDMA_ERROR.
const RDMA_ERROR: [u8; 4] = [0, 0, 0, 4];
/// The same, as a word (RDMA2_ERROR in version 2 too).
const RDMA_ERROR_PROC: u32 = 4;

/// `rdma_proc` of RDMA_DONE.
const RDMA_DONE: [u8; 4] = [0, 0, 0, 3];

/// Decodes one received message.
pub(super) fn decode(buf: &[u8], limits: &Limits) -> Incoming {
    match decode_v1_plain(buf) {
        Some(incoming) => incoming,
        None => decode_v1_general(buf, limits),
    }
}

/// The header of every small call and reply, decoded without the general
/// decoder: an RDMA_MSG of version 1 with three empty chunk lists (seven
/// words: xid, 1, credit, 0, 0, 0, 0), whatever follows it. Gives exactly
/// what [`decode_v1_general`] gives for such a message (no limit applies
/// to empty lists; pinned by a test); `None` for every other message.
#[inline]
fn decode_v1_plain(buf: &[u8]) -> Option<Incoming> {
    let head: &[u8; MIN_HEADER_LEN] = buf.get(..MIN_HEADER_LEN)?.try_into().ok()?;
    let word = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let plain = word(4) == v1::RPCRDMA_VERSION
        && word(12) == v1::Proc::RDMA_MSG.0
        && head[16..] == [0u8; 12];
    plain.then(|| Incoming::Data {
        xid: word(0),
        credit: word(8),
        shape: Shape::Msg,
        chunks: ChunkLists::empty(),
        payload_offset: MIN_HEADER_LEN,
        response: None,
        inv_handle: 0,
    })
}

/// What a header that did not decode gets (`HeaderError::answer`).
fn refused(answer: WireAnswer) -> Incoming {
    match answer {
        //= rfc8166#section-4.5
        //# A receiver MUST silently discard an RDMA_ERROR procedure
        //# that it cannot decode.
        WireAnswer::Drop => Incoming::Drop {
            reason: "undecodable error report",
        },
        WireAnswer::ErrVers { xid, vers } => Incoming::Reject {
            xid,
            answer: ErrorReply::Vers { vers },
            reason: "unsupported version",
        },
        WireAnswer::V2BadXdr { xid } | WireAnswer::V2InvalHtype { xid } => Incoming::Reject {
            xid,
            answer: ErrorReply::Vers { vers: 2 },
            reason: "unsupported version",
        },
        WireAnswer::ErrChunk { xid } => Incoming::Reject {
            xid,
            answer: ErrorReply::Chunk,
            reason: "malformed transport header",
        },
    }
}

/// A version 1 RDMA_DONE, whatever its length or what follows its four
/// fixed words (the codec's strict decoder refuses trailing octets, which
/// would have been answered with ERR_CHUNK).
//= rfc8166#section-4.6.2
//# Receivers MUST silently discard RDMA_DONE messages.
fn is_v1_done(buf: &[u8]) -> bool {
    buf.get(4..8) == Some(&[0, 0, 0, 1][..]) && buf.get(12..16) == Some(&RDMA_DONE[..])
}

/// [`decode`] for every message.
fn decode_v1_general(buf: &[u8], limits: &Limits) -> Incoming {
    //= rfc8166#section-4.5
    //# If an incoming RPC-over-RDMA message is not as long as a minimal size
    //# RPC-over-RDMA header (28 bytes), the receiver cannot trust the value
    //# of the XID field; therefore, it MUST silently discard the message
    //# before performing any parsing.
    // The one exception is an RDMA_ERROR: a well-formed ERR_CHUNK is only 20
    // octets (the error reports of section 4.5 would otherwise never reach
    // a requester); it is used only if it decodes completely.
    if buf.len() < MIN_HEADER_LEN
        && !(buf.len() >= MIN_ERROR_LEN && buf.get(12..16) == Some(&RDMA_ERROR[..]))
    {
        return Incoming::Drop {
            reason: "shorter than the smallest transport header",
        };
    }
    if is_v1_done(buf) {
        return Incoming::Drop {
            reason: "RDMA_DONE is deprecated",
        };
    }
    let (h, hlen) = match header::decode(buf, limits) {
        Ok(x) => x,
        Err(e) => return refused(e.answer()),
    };
    let h = match h {
        TransportHeader::V1(h) => h,
        // An error report of any version is never answered (an answer to
        // an answer could bounce between two endpoints for ever): a
        // version 2 RDMA2_ERROR, or rdma_proc 4 (RDMA_ERROR in both defined
        // versions) of an unknown version.
        //= rfc8166#section-4.2.4
        //# A Responder MUST silently discard RDMA_ERROR procedures.
        other if other.proc_code() == RDMA_ERROR_PROC => {
            return Incoming::Drop {
                reason: "error report of another version",
            }
        }
        //= rfc8166#section-4.5.1
        //# When a Responder detects an RPC-over-RDMA header version that
        //# it does not support (currently this document defines only
        //# version 1), it MUST reply with an RDMA_ERROR procedure and set
        //# the rdma_err value to ERR_VERS, also providing the low and high
        //# inclusive version numbers it does, in fact, support.
        other => {
            return Incoming::Reject {
                xid: other.xid(),
                answer: ErrorReply::Vers { vers: other.vers() },
                reason: "unsupported version",
            }
        }
    };
    let (xid, credit) = (h.xid, h.credit);
    match h.body {
        v1::Body::Msg(chunks) => Incoming::Data {
            xid,
            credit,
            shape: Shape::Msg,
            chunks,
            payload_offset: hlen,
            response: None,
            inv_handle: 0,
        },
        v1::Body::Nomsg(chunks) => Incoming::Data {
            xid,
            credit,
            shape: Shape::Nomsg,
            chunks,
            payload_offset: hlen,
            response: None,
            inv_handle: 0,
        },
        //= rfc8166#section-4.5.2
        //# Examples of such errors include an invalid value in the
        //# rdma_proc field;
        //= rfc8166#section-4.6.1
        //# When receiving an RDMA_MSGP procedure, Responders SHOULD reply with
        //# an RDMA_ERROR procedure, setting the rdma_err field to ERR_CHUNK;
        // (Linux svcrdma does too, anchors §1.3.)
        v1::Body::Msgp(_) => Incoming::Reject {
            xid,
            answer: ErrorReply::Chunk,
            reason: "RDMA_MSGP is not supported",
        },
        v1::Body::Unknown { .. } => Incoming::Reject {
            xid,
            answer: ErrorReply::Chunk,
            reason: "unknown rdma_proc",
        },
        // (Not reached: `is_v1_done` took it before the decoder.)
        v1::Body::Done => Incoming::Drop {
            reason: "RDMA_DONE is deprecated",
        },
        v1::Body::Error(e) => Incoming::Error {
            xid,
            credit: Some(credit),
            error: match e {
                v1::RdmaError::Vers { low, high } => RdmaErrorReport::Vers { low, high },
                v1::RdmaError::Chunk => RdmaErrorReport::Chunk,
                v1::RdmaError::Unknown { code, .. } => RdmaErrorReport::Other(code.0),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::framing::{DataHeader, Framing};

    /// Messages around the plain RDMA_MSG header: the plain header itself,
    /// and the same with one word or octet changed, cut short, or followed
    /// by anything.
    fn near_plain() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..48),
            0usize..40,
            any::<u8>(),
            0usize..80,
            any::<bool>(),
        )
            .prop_map(|(xid, credit, tail, at, val, cut, mutate)| {
                let mut m = Vec::new();
                for w in [xid, 1, credit, 0, 0, 0, 0] {
                    m.extend(w.to_be_bytes());
                }
                m.extend(tail);
                if mutate {
                    if let Some(b) = m.get_mut(at) {
                        *b = val;
                    }
                }
                m.truncate(cut.max(20));
                m
            })
    }

    proptest::proptest! {
        /// The plain-header fast path decodes to what the general decoder
        /// gives, for the plain header and everything near it.
        #[test]
        fn plain_header_decode_is_the_general_decode(buf in near_plain()) {
            let limits = Limits::DEFAULT;
            proptest::prop_assert_eq!(decode(&buf, &limits), decode_v1_general(&buf, &limits));
        }
    }

    proptest::proptest! {
        /// The fast path of a header without chunks writes exactly what
        /// the general encoder writes (and nothing into a short buffer).
        #[test]
        fn plain_data_header_is_the_general_encoding(
            xid: u32,
            credit: u32,
            nomsg: bool,
            room in 0usize..40,
        ) {
            let (shape, body) = if nomsg {
                (Shape::Nomsg, v1::Body::Nomsg(ChunkLists::empty()))
            } else {
                (Shape::Msg, v1::Body::Msg(ChunkLists::empty()))
            };
            let general = DataHeader::V1(Data::General(v1::Header { xid, credit, body }));
            let plain = Framing::V1.data_header(xid, credit, shape, ChunkLists::empty(), None, false);
            let fast = matches!(plain, DataHeader::V1(Data::Plain { .. }));
            proptest::prop_assert!(fast);
            proptest::prop_assert_eq!(plain.len(), general.len());
            proptest::prop_assert_eq!(
                plain.len(),
                Framing::V1.header_len(shape, &ChunkLists::empty())
            );
            let (mut a, mut b) = (vec![0xa5; room], vec![0xa5; room]);
            proptest::prop_assert_eq!(plain.write(&mut a), general.write(&mut b));
            proptest::prop_assert_eq!(a, b);
        }
    }

    fn hx(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn err_vers_bytes_by_hand() {
        // A request with vers 7: xid 0x11223344, vers 7 echoed, credit 64,
        // RDMA_ERROR(4), ERR_VERS(1), low 1, high 1.
        let want = hx("11223344 00000007 00000040 00000004 00000001 00000001 00000001");
        assert_eq!(
            Framing::V1.encode_error(0x1122_3344, 64, ErrorReply::Vers { vers: 7 }, VERSIONS),
            want
        );
        let want = hx("11223344 00000001 00000040 00000004 00000002");
        assert_eq!(
            Framing::V1.encode_error(0x1122_3344, 64, ErrorReply::Chunk, VERSIONS),
            want
        );
    }

    #[test]
    fn msg_header_bytes_by_hand() {
        //= rfc8166#section-4
        //# All RPC-over-RDMA header content is contained in the Transport
        //# stream; thus, it MUST be XDR encoded.
        let want = hx("00000007 00000001 00000080 00000000 00000000 00000000 00000000");
        let got = Framing::V1.encode_data(7, 128, Shape::Msg, ChunkLists::empty(), None, false);
        assert_eq!(got, want);
        assert_eq!(Framing::V1.min_msg_header_len(), 28);
    }

    #[test]
    fn error_reports_of_other_versions_are_dropped() {
        let l = Limits::DEFAULT;
        // Error reports of another version are never answered: a version 2
        // RDMA2_ERROR, an unknown version's RDMA_ERROR (rdma_proc 4).
        //= rfc8166#section-4.2.4
        //# A Responder MUST silently discard RDMA_ERROR procedures.
        for e in [
            hx("00000009 00000002 00000010 00000004 00000001 00000009"),
            hx("00000009 00000002 00000010 00000004 00000001 00000001 00000002 00000002"),
            hx("00000009 00000007 00000010 00000004 00000001 00000001 00000001"),
        ] {
            assert!(
                matches!(Framing::V1.decode(&e, &l), Incoming::Drop { .. }),
                "{e:02x?}"
            );
        }
    }

    #[test]
    fn decode_classes() {
        let l = Limits::DEFAULT;
        assert!(matches!(
            Framing::V1.decode(&[0; 15], &l),
            Incoming::Drop { .. }
        ));
        // vers = 2, a hand-built v2 call prefix (xid 5): ERR_VERS.
        let v2 =
            hx("00000005 00000002 00000010 00000000 00000000 00000000 00000000 00000000 00000000");
        assert_eq!(
            Framing::V1.decode(&v2, &l),
            Incoming::Reject {
                xid: 5,
                answer: ErrorReply::Vers { vers: 2 },
                reason: "unsupported version"
            }
        );
        // vers = 7: ERR_VERS.
        let v7 = hx("00000006 00000007 00000010 00000000 00000000 00000000 00000000");
        assert!(matches!(
            Framing::V1.decode(&v7, &l),
            Incoming::Reject {
                xid: 6,
                answer: ErrorReply::Vers { vers: 7 },
                ..
            }
        ));
        // RDMA_MSGP: ERR_CHUNK.
        let msgp =
            hx("00000008 00000001 00000010 00000002 00000004 00000400 00000000 00000000 00000000");
        assert!(matches!(
            Framing::V1.decode(&msgp, &l),
            Incoming::Reject {
                xid: 8,
                answer: ErrorReply::Chunk,
                ..
            }
        ));
        // Shorter than 28 octets: dropped unread, even when the words would
        // decode (a 16-octet unknown proc, a 24-octet RDMA_MSG).
        for short in [
            hx("0000000a 00000001 00000010 00000009"),
            hx("0000000a 00000001 00000010 00000000 00000000 00000000"),
            hx("0000000a 00000007 00000010 00000000 00000000 00000000"),
        ] {
            //= rfc8166#section-4.5
            //# If an incoming RPC-over-RDMA message is not as long as a minimal size
            //# RPC-over-RDMA header (28 bytes), the receiver cannot trust the value
            //# of the XID field; therefore, it MUST silently discard the message
            //# before performing any parsing.
            assert!(
                matches!(Framing::V1.decode(&short, &l), Incoming::Drop { .. }),
                "{short:02x?}"
            );
        }
        // A 20-octet ERR_CHUNK is decoded.
        let ec = hx("0000000d 00000001 00000003 00000004 00000002");
        assert_eq!(
            Framing::V1.decode(&ec, &l),
            Incoming::Error {
                xid: 13,
                credit: Some(3),
                error: RdmaErrorReport::Chunk
            }
        );
        // RDMA_DONE: dropped, whatever its length and trailing octets.
        //= rfc8166#section-4.6.2
        //# Receivers MUST silently discard RDMA_DONE messages.
        for done in [
            hx("00000009 00000001 00000010 00000003"),
            hx("00000009 00000001 00000010 00000003 00000000"),
            hx("00000009 00000001 00000010 00000003 00000000 00000000 00000000"),
            hx("00000009 00000001 00000010 00000003 ffffffff 00000001 00000002 0000"),
            hx(&"00000009 00000001 00000010 00000003 ".repeat(64)),
        ] {
            assert!(
                matches!(Framing::V1.decode(&done, &l), Incoming::Drop { .. }),
                "{done:02x?}"
            );
        }
        // Unknown proc 9: ERR_CHUNK.
        let unk = hx("0000000a 00000001 00000010 00000009 00000000 00000000 00000000");
        assert!(matches!(
            Framing::V1.decode(&unk, &l),
            Incoming::Reject {
                xid: 10,
                answer: ErrorReply::Chunk,
                ..
            }
        ));
        // Malformed list discriminant (2): ERR_CHUNK.
        let bad = hx("0000000b 00000001 00000010 00000000 00000002 00000000 00000000");
        assert!(matches!(
            Framing::V1.decode(&bad, &l),
            Incoming::Reject {
                xid: 11,
                answer: ErrorReply::Chunk,
                ..
            }
        ));
        // RDMA_ERROR / ERR_VERS 1..3.
        let ev = hx("0000000c 00000001 00000003 00000004 00000001 00000001 00000003");
        assert_eq!(
            Framing::V1.decode(&ev, &l),
            Incoming::Error {
                xid: 12,
                credit: Some(3),
                error: RdmaErrorReport::Vers { low: 1, high: 3 }
            }
        );
    }
}
