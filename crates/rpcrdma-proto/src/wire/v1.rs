//! RPC-over-RDMA version 1 transport header (RFC 8166 §4–5; XDR first
//! published in RFC 5666 §4.3).
//!
//! ```text
//! struct rpc_rdma_header       { xdr_read_list *rdma_reads; xdr_write_list *rdma_writes;
//!                                xdr_write_chunk *rdma_reply; /* rpc body follows */ };
//! struct rpc_rdma_header_nomsg { ...the same three lists... };
//! struct rpc_rdma_header_padded{ uint32 rdma_align; uint32 rdma_thresh; ...three lists...
//!                                /* rpc body follows */ };
//! enum rpc_rdma_errcode { ERR_VERS = 1, ERR_CHUNK = 2 };
//! struct rpc_rdma_errvers { uint32 rdma_vers_low; uint32 rdma_vers_high; };
//! union rpc_rdma_error switch (rpc_rdma_errcode err) {
//!   case ERR_VERS: rpc_rdma_errvers range;
//!   case ERR_CHUNK: void; };
//! enum rdma_proc { RDMA_MSG=0, RDMA_NOMSG=1, RDMA_MSGP=2, RDMA_DONE=3, RDMA_ERROR=4 };
//! union rdma_body switch (rdma_proc proc) {
//!   case RDMA_MSG: rpc_rdma_header rdma_msg;      case RDMA_NOMSG: rpc_rdma_header_nomsg rdma_nomsg;
//!   case RDMA_MSGP: rpc_rdma_header_padded rdma_msgp; case RDMA_DONE: void;
//!   case RDMA_ERROR: rpc_rdma_error rdma_error; };
//! struct rdma_msg { uint32 rdma_xid; uint32 rdma_vers; uint32 rdma_credit; rdma_body rdma_body; };
//! ```
//!
//! [`decode`] returns the header and its length; the RPC payload of an
//! RDMA_MSG / RDMA_MSGP message is the rest of the buffer. [`XdrEncode`] on
//! [`Header`] writes the transport header only; the caller appends the
//! payload.
//!
//! Enumerations are open: an unknown `rdma_proc` or an unknown `rdma_err`
//! decodes (keeping the rest of the message as raw bytes) and re-encodes to
//! the same octets, so the caller can answer it (ERR_CHUNK) or print it.

use core::fmt;

use crate::wire::chunk::{ChunkLists, ShortLists};
use crate::wire::common::{hex_string, Prefix};
use crate::xdr::{DecodeErrorKind, EncodeError, Reader, Writer, XdrEncode};
use crate::{DecodeError, Limits};

/// The `rdma_vers` value of version 1.
pub const RPCRDMA_VERSION: u32 = 1;

/// Octets of the fixed prefix every version shares: `rdma_xid`,
/// `rdma_vers`, `rdma_credit`, `rdma_proc`.
pub const FIXED_PREFIX_LEN: usize = 16;

open_enum! {
    /// `rdma_proc`: the message type (an open enumeration).
    Proc unknown = "unknown proc" {
        /// An RPC call or reply follows the chunk lists.
        RDMA_MSG = 0,
        /// The RPC message is conveyed entirely by chunks; nothing follows.
        RDMA_NOMSG = 1,
        /// RPC message with padding (deprecated by RFC 8166).
        RDMA_MSGP = 2,
        /// Signals completion of a Responder-provided Read chunk (deprecated).
        RDMA_DONE = 3,
        /// Reports a transport header error.
        RDMA_ERROR = 4,
    }
}

open_enum! {
    /// `rpc_rdma_errcode`: the error code of an RDMA_ERROR message (open).
    ErrorCode unknown = "unknown error code" {
        /// The peer does not support this `rdma_vers`.
        ERR_VERS = 1,
        /// The header or its chunks could not be parsed or used.
        ERR_CHUNK = 2,
    }
}

/// `rpc_rdma_error`: the body of an RDMA_ERROR message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RdmaError {
    /// `ERR_VERS`: the inclusive range of versions the sender supports.
    Vers {
        /// `rdma_vers_low`.
        low: u32,
        /// `rdma_vers_high`.
        high: u32,
    },
    /// `ERR_CHUNK` (void arm).
    Chunk,
    /// An error code RFC 8166 does not define. The union has no default
    /// arm, so everything after the code word is kept as `raw` octets.
    /// `code` must not be one of the defined codes.
    Unknown {
        /// The code.
        code: ErrorCode,
        /// The rest of the message after the code word.
        raw: Vec<u8>,
    },
}

impl RdmaError {
    /// The `rdma_err` discriminant.
    pub fn code(&self) -> ErrorCode {
        match self {
            RdmaError::Vers { .. } => ErrorCode::ERR_VERS,
            RdmaError::Chunk => ErrorCode::ERR_CHUNK,
            RdmaError::Unknown { code, .. } => *code,
        }
    }

    #[inline]
    fn encoded_len(&self) -> usize {
        4 + match self {
            RdmaError::Vers { .. } => 8,
            RdmaError::Chunk => 0,
            RdmaError::Unknown { raw, .. } => raw.len(),
        }
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(self.code().0)?;
        match self {
            RdmaError::Vers { low, high } => {
                w.u32(*low)?;
                w.u32(*high)
            }
            RdmaError::Chunk => Ok(()),
            RdmaError::Unknown { raw, .. } => w.raw(raw),
        }
    }
}

/// The body of an RDMA_MSGP message: padding parameters and chunk lists.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Msgp {
    /// `rdma_align`: the padding alignment.
    pub align: u32,
    /// `rdma_thresh`: opaque size at or above which padding is applied.
    pub thresh: u32,
    /// The three chunk lists.
    pub chunks: ChunkLists,
}

/// `rdma_body`: the message-type specific part of a version 1 header.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// RDMA_MSG: chunk lists; the RPC message follows the header.
    Msg(ChunkLists),
    /// RDMA_NOMSG: chunk lists; nothing follows.
    Nomsg(ChunkLists),
    /// RDMA_MSGP (deprecated): padding parameters and chunk lists; the RPC
    /// message follows.
    Msgp(Msgp),
    /// RDMA_DONE (deprecated): void.
    Done,
    /// RDMA_ERROR.
    Error(RdmaError),
    /// An `rdma_proc` RFC 8166 does not define; `raw` is the rest of the
    /// message after the proc word. `proc` must not be a defined value.
    Unknown {
        /// The proc.
        proc: Proc,
        /// The undecodable rest of the message.
        raw: Vec<u8>,
    },
}

impl Body {
    /// The `rdma_proc` discriminant.
    pub fn proc(&self) -> Proc {
        match self {
            Body::Msg(_) => Proc::RDMA_MSG,
            Body::Nomsg(_) => Proc::RDMA_NOMSG,
            Body::Msgp(_) => Proc::RDMA_MSGP,
            Body::Done => Proc::RDMA_DONE,
            Body::Error(_) => Proc::RDMA_ERROR,
            Body::Unknown { proc, .. } => *proc,
        }
    }

    /// The chunk lists of an RDMA_MSG, RDMA_NOMSG or RDMA_MSGP body.
    pub fn chunks(&self) -> Option<&ChunkLists> {
        match self {
            Body::Msg(c) | Body::Nomsg(c) => Some(c),
            Body::Msgp(m) => Some(&m.chunks),
            _ => None,
        }
    }
}

/// A version 1 transport header (`rdma_msg` without the RPC payload).
/// `rdma_vers` is always [`RPCRDMA_VERSION`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`: credits requested (Call) or granted (Reply).
    pub credit: u32,
    /// `rdma_body`.
    pub body: Body,
}

impl Header {
    /// The `rdma_proc` word.
    pub fn proc(&self) -> Proc {
        self.body.proc()
    }

    /// True if an RPC message follows this header in the same Send
    /// (RDMA_MSG, RDMA_MSGP).
    pub fn has_payload(&self) -> bool {
        matches!(self.body, Body::Msg(_) | Body::Msgp(_))
    }
}

/// Decodes a version 1 transport header from the start of `buf` (one whole
/// received message). Returns the header and its encoded length; for
/// RDMA_MSG and RDMA_MSGP the RPC payload is `buf[header_len..]`, for every
/// other type `header_len == buf.len()`.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<(Header, usize), DecodeError> {
    let mut r = Reader::new(buf);
    //= rfc8166#section-4.2.2
    //# For RPC-over-RDMA version 1, this field MUST contain the value one
    //# (1).
    let prefix = Prefix::read_expecting(&mut r, RPCRDMA_VERSION)?;
    decode_body(&mut r, prefix, limits)
}

/// Decodes what follows the common words `prefix` (already read, with
/// `rdma_vers` 1) from `r`, which is positioned after them at the start of
/// the message.
#[inline]
pub(crate) fn decode_body(
    r: &mut Reader<'_>,
    prefix: Prefix,
    limits: &Limits,
) -> Result<(Header, usize), DecodeError> {
    if let Some((h, n)) = decode_short(r.rest(), prefix, limits) {
        r.skip(n);
        return Ok((h, r.position()));
    }
    decode_body_general(r, prefix, limits)
}

/// The RDMA_MSG and RDMA_NOMSG headers with short chunk lists
/// ([`ShortLists`]), decoded from `rest` (what follows the common words
/// `prefix`) without building anything but the result; returns the header
/// and the octets of `rest` it takes. `None` for every other header and
/// for anything the general decoder refuses: [`decode_body_general`] then
/// decodes it (again) to the same header or the error.
#[inline(always)]
pub(crate) fn decode_short(
    rest: &[u8],
    prefix: Prefix,
    limits: &Limits,
) -> Option<(Header, usize)> {
    let nomsg = match Proc(prefix.proc) {
        Proc::RDMA_MSG => false,
        Proc::RDMA_NOMSG => true,
        _ => return None,
    };
    let (lists, used) = ShortLists::parse(rest, limits)?;
    // An RDMA_NOMSG must carry a chunk and end the message (see below).
    if nomsg && (lists.is_empty() || used != rest.len()) {
        return None;
    }
    let chunks = lists.into_lists();
    let body = if nomsg {
        Body::Nomsg(chunks)
    } else {
        Body::Msg(chunks)
    };
    Some((
        Header {
            xid: prefix.xid,
            credit: prefix.credit,
            body,
        },
        used,
    ))
}

/// [`decode_body`] for every header: the general decoder.
#[inline(never)]
pub(crate) fn decode_body_general(
    r: &mut Reader<'_>,
    prefix: Prefix,
    limits: &Limits,
) -> Result<(Header, usize), DecodeError> {
    let Prefix {
        xid, credit, proc, ..
    } = prefix;
    let proc = Proc(proc);
    let body = match proc {
        Proc::RDMA_MSG => Body::Msg(ChunkLists::read(r, limits)?),
        Proc::RDMA_NOMSG => {
            let at = r.position();
            let c = ChunkLists::read(r, limits)?;
            //= rfc8166#section-4.5.2
            //# Examples of such errors include an invalid value in the
            //# rdma_proc field; an RDMA_NOMSG message where the Read list,
            //# Write list, and Reply chunk are marked not present;
            if c.is_empty() {
                return Err(DecodeError::new(
                    DecodeErrorKind::BadValue {
                        what: "rpc_rdma_header_nomsg",
                        detail: "RDMA_NOMSG with no Read list, Write list or Reply chunk".into(),
                    },
                    at,
                    "rdma_nomsg",
                ));
            }
            // Nothing follows an RDMA_NOMSG header.
            r.finish("rdma_nomsg")?;
            Body::Nomsg(c)
        }
        Proc::RDMA_MSGP => {
            let align = r.u32("rdma_align")?;
            let thresh = r.u32("rdma_thresh")?;
            let chunks = ChunkLists::read(r, limits)?;
            Body::Msgp(Msgp {
                align,
                thresh,
                chunks,
            })
        }
        Proc::RDMA_DONE => {
            r.finish("rdma_done")?;
            Body::Done
        }
        Proc::RDMA_ERROR => {
            let code = ErrorCode(r.u32("rdma_err")?);
            let e = match code {
                ErrorCode::ERR_VERS => {
                    let low = r.u32("rdma_vers_low")?;
                    let high = r.u32("rdma_vers_high")?;
                    RdmaError::Vers { low, high }
                }
                ErrorCode::ERR_CHUNK => RdmaError::Chunk,
                code => {
                    let raw = r.rest().to_vec();
                    RdmaError::Unknown { code, raw }
                }
            };
            if !matches!(e, RdmaError::Unknown { .. }) {
                r.finish("rdma_error")?;
            }
            Body::Error(e)
        }
        proc => Body::Unknown {
            proc,
            raw: r.rest().to_vec(),
        },
    };
    let header_len = match &body {
        Body::Unknown { .. } | Body::Error(RdmaError::Unknown { .. }) => {
            r.position() + r.remaining()
        }
        _ => r.position(),
    };
    Ok((Header { xid, credit, body }, header_len))
}

impl XdrEncode for Header {
    #[inline]
    fn encoded_len(&self) -> usize {
        FIXED_PREFIX_LEN
            + match &self.body {
                Body::Msg(c) | Body::Nomsg(c) => c.encoded_len(),
                Body::Msgp(m) => 8 + m.chunks.encoded_len(),
                Body::Done => 0,
                Body::Error(e) => e.encoded_len(),
                Body::Unknown { raw, .. } => raw.len(),
            }
    }

    #[inline]
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        let prefix = Prefix {
            xid: self.xid,
            vers: RPCRDMA_VERSION,
            credit: self.credit,
            proc: self.proc().0,
        };
        w.array(prefix.to_bytes())?;
        match &self.body {
            Body::Msg(c) | Body::Nomsg(c) => c.write(w),
            Body::Msgp(m) => {
                w.u32(m.align)?;
                w.u32(m.thresh)?;
                m.chunks.write(w)
            }
            Body::Done => Ok(()),
            Body::Error(e) => e.write(w),
            Body::Unknown { raw, .. } => w.raw(raw),
        }
    }
}

impl fmt::Display for RdmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmaError::Vers { low, high } => {
                write!(f, "ERR_VERS (1): supported versions {low}..={high}")
            }
            RdmaError::Chunk => write!(f, "ERR_CHUNK (2)"),
            RdmaError::Unknown { code, raw } => {
                write!(
                    f,
                    "unknown error code {} ({} octets: {})",
                    code.0,
                    raw.len(),
                    hex_string(raw)
                )
            }
        }
    }
}

impl fmt::Display for Header {
    /// A readable tree, one item per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "RPC-over-RDMA version 1 {}", self.proc())?;
        writeln!(f, "  xid 0x{:08x}", self.xid)?;
        writeln!(f, "  credits {}", self.credit)?;
        match &self.body {
            Body::Msg(c) | Body::Nomsg(c) => c.fmt_tree(f, "  "),
            Body::Msgp(m) => {
                writeln!(f, "  align {}", m.align)?;
                writeln!(f, "  thresh {}", m.thresh)?;
                m.chunks.fmt_tree(f, "  ")
            }
            Body::Done => Ok(()),
            Body::Error(e) => writeln!(f, "  error {e}"),
            Body::Unknown { raw, .. } => {
                writeln!(f, "  body ({} octets): {}", raw.len(), hex_string(raw))
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::chunk::tests::arb_chunk_lists;
    use crate::wire::chunk::{ReadSegment, Segment, WriteChunk};
    use proptest::prelude::*;

    pub(crate) fn h(s: &str) -> Vec<u8> {
        let clean: String = s
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        hex::decode(clean).unwrap()
    }

    pub(crate) fn sample(name: &str) -> Vec<u8> {
        let path = format!("{}/test_samples/{name}.hex", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        h(&text)
    }

    fn dec(b: &[u8]) -> Result<(Header, usize), DecodeError> {
        decode(b, &Limits::default())
    }

    /// Every proper prefix of a valid message must fail to decode (or, for
    /// messages with a payload, decode to something shorter); none panics.
    pub(crate) fn assert_truncations_fail(b: &[u8], header_len: usize) {
        for cut in 0..header_len {
            assert!(
                dec(&b[..cut]).is_err(),
                "prefix of {cut} octets decoded: {}",
                hex::encode(&b[..cut])
            );
        }
    }

    fn roundtrip_exact(b: &[u8]) -> (Header, usize) {
        let (hdr, n) = dec(b).unwrap();
        let enc = hdr.to_vec().unwrap();
        assert_eq!(enc.len(), hdr.encoded_len());
        assert_eq!(enc, b[..n]);
        (hdr, n)
    }

    #[test]
    fn msg_with_write_chunk() {
        let b = sample("v1_msg_write_chunk");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(hdr.xid, 0x1a2b3c4d);
        assert_eq!(hdr.credit, 128);
        let Body::Msg(c) = &hdr.body else {
            panic!("not RDMA_MSG")
        };
        assert!(c.reads.is_empty());
        assert_eq!(
            c.writes[..],
            [WriteChunk::new(vec![Segment::new(
                0x0000_1234,
                0x0000_2000,
                0x0000_7f00_dead_0000
            )])]
        );
        assert_eq!(c.reply, None);
        // 16 prefix + read(4) + write present(4) + count(4) + seg(16) + end(4) + reply(4)
        assert_eq!(n, 52);
        assert_eq!(&b[n..n + 4], &[0x1a, 0x2b, 0x3c, 0x4d], "RPC xid follows");
        assert_truncations_fail(&b, n);
    }

    #[test]
    fn nomsg_pzrc_and_reply_chunk() {
        let b = sample("v1_nomsg_pzrc_reply");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(n, b.len());
        let Body::Nomsg(c) = &hdr.body else {
            panic!("not RDMA_NOMSG")
        };
        assert_eq!(
            c.reads[..],
            [
                ReadSegment::new(0, Segment::new(0x11, 4096, 0x1000)),
                ReadSegment::new(0, Segment::new(0x12, 600, 0x2000)),
            ]
        );
        assert!(c.writes.is_empty());
        assert_eq!(
            c.reply,
            Some(WriteChunk::new(vec![Segment::new(0x21, 8192, 0x9000)]))
        );
        assert_truncations_fail(&b, n);
        // Anything after an RDMA_NOMSG header is an error.
        let mut t = b.clone();
        t.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(dec(&t).unwrap_err().kind, DecodeErrorKind::TrailingBytes(4));
    }

    //= rfc8166#section-4.5.2
    //# an RDMA_NOMSG message where the Read list,
    //# Write list, and Reply chunk are marked not present
    #[test]
    fn nomsg_without_chunks_is_an_error() {
        let b = h("00000001 00000001 00000010 00000001  00000000 00000000 00000000");
        let e = dec(&b).unwrap_err();
        assert_eq!(e.kind.name(), "bad-value");
        assert_eq!(e.offset, 16);
    }

    #[test]
    fn msgp() {
        let b = sample("v1_msgp");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(
            hdr.body,
            Body::Msgp(Msgp {
                align: 4096,
                thresh: 1024,
                chunks: ChunkLists::empty()
            })
        );
        assert_eq!(n, 36);
        assert_eq!(b.len() - n, 8, "payload");
        assert_truncations_fail(&b, n);
    }

    #[test]
    fn done_and_trailing_bytes() {
        let b = sample("v1_done");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(hdr.body, Body::Done);
        assert_eq!(n, 16);
        assert_truncations_fail(&b, n);
        let mut t = b.clone();
        t.push(0);
        assert_eq!(dec(&t).unwrap_err().kind, DecodeErrorKind::TrailingBytes(1));
    }

    #[test]
    fn error_vers_chunk_unknown() {
        let b = sample("v1_error_vers");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(hdr.body, Body::Error(RdmaError::Vers { low: 1, high: 1 }));
        assert_eq!(n, 28);
        assert_truncations_fail(&b, n);

        let b = sample("v1_error_chunk");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(hdr.body, Body::Error(RdmaError::Chunk));
        assert_eq!(n, 20);
        assert_truncations_fail(&b, n);
        for mut t in [sample("v1_error_chunk"), sample("v1_error_vers")] {
            t.extend_from_slice(&[0, 0, 0, 9]);
            assert_eq!(dec(&t).unwrap_err().kind, DecodeErrorKind::TrailingBytes(4));
        }

        let b = sample("v1_error_unknown");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(n, b.len());
        assert_eq!(
            hdr.body,
            Body::Error(RdmaError::Unknown {
                code: ErrorCode(7),
                raw: vec![0xca, 0xfe, 0xba, 0xbe, 0x01]
            })
        );
        assert_eq!(ErrorCode(7).name(), None);
    }

    #[test]
    fn unknown_proc_keeps_rest() {
        let b = sample("v1_unknown_proc");
        let (hdr, n) = roundtrip_exact(&b);
        assert_eq!(n, b.len());
        assert_eq!(
            hdr.body,
            Body::Unknown {
                proc: Proc(9),
                raw: vec![0, 0, 0, 0, 0xff, 0xee, 0xdd]
            }
        );
        assert_eq!(hdr.proc().name(), None);
        assert_truncations_fail(&b, FIXED_PREFIX_LEN);
    }

    #[test]
    fn rejects_bad_optional_discriminants() {
        for bad in ["00000002", "ffffffff"] {
            // read list discriminant
            let b = h(&format!(
                "00000001 00000001 00000001 00000000 {bad} 00000000 00000000"
            ));
            let e = dec(&b).unwrap_err();
            assert_eq!(e.kind.name(), "bad-optional");
            assert_eq!(e.offset, 16);
            // reply chunk discriminant
            let b = h(&format!(
                "00000001 00000001 00000001 00000000 00000000 00000000 {bad}"
            ));
            let e = dec(&b).unwrap_err();
            assert_eq!(e.kind.name(), "bad-optional");
            assert_eq!(e.offset, 24);
        }
    }

    #[test]
    fn rejects_over_limit_counts() {
        // Write chunk with 0xffffffff segments.
        let b = h("00000001 00000001 00000001 00000000 00000000 00000001 ffffffff");
        assert_eq!(dec(&b).unwrap_err().kind.name(), "limit-exceeded");
        // Reply chunk with 33 segments > max_segments_per_chunk (32).
        let b = h("00000001 00000001 00000001 00000000 00000000 00000000 00000001 00000021");
        let e = dec(&b).unwrap_err();
        assert!(matches!(
            e.kind,
            DecodeErrorKind::LimitExceeded {
                limit: "max_segments_per_chunk",
                value: 33,
                ..
            }
        ));
    }

    #[test]
    fn rejects_overflowing_segment() {
        // Reply chunk: one segment, length 0x10, offset 0xffffffff_fffffff8.
        let b = h(
            "00000001 00000001 00000001 00000001 00000000 00000000 00000001 00000001
                   00000005 00000010 ffffffff fffffff8",
        );
        assert_eq!(dec(&b).unwrap_err().kind.name(), "overflow");
    }

    #[test]
    fn rejects_wrong_version() {
        let b = h("00000001 00000002 00000001 00000003");
        let e = dec(&b).unwrap_err();
        assert_eq!(e.offset, 4);
        assert_eq!(e.kind.name(), "bad-value");
    }

    /// The general decoder alone (what `decode` does without the short
    /// path).
    fn dec_general(b: &[u8], limits: &Limits) -> Result<(Header, usize), DecodeError> {
        let mut r = Reader::new(b);
        let prefix = Prefix::read_expecting(&mut r, RPCRDMA_VERSION)?;
        decode_body_general(&mut r, prefix, limits)
    }

    #[test]
    fn short_shapes_take_the_short_path_without_allocating() {
        let b = sample("v1_msg_write_chunk");
        let prefix = Prefix::read(&b).unwrap();
        let (hdr, n) = decode_short(&b[16..], prefix, &Limits::DEFAULT).expect("short path");
        assert_eq!(Ok((hdr.clone(), 16 + n)), dec_general(&b, &Limits::DEFAULT));
        let Body::Msg(c) = &hdr.body else {
            panic!("not RDMA_MSG")
        };
        // Inline storage: decoding this header touched no heap.
        assert!(!c.reads.spilled() && !c.writes.spilled());
        assert!(!c.writes[0].segments.spilled());
        // Two read segments are not a short shape: the general path.
        let b = sample("v1_nomsg_pzrc_reply");
        let nomsg = Prefix::read(&b).unwrap();
        assert_eq!(decode_short(&b[16..], nomsg, &Limits::DEFAULT), None);
        let (hdr, _) = dec(&b).unwrap();
        let Body::Nomsg(c) = &hdr.body else {
            panic!("not RDMA_NOMSG")
        };
        assert!(c.reads.spilled(), "two read segments live on the heap");
        // A limit of zero sends even a short shape to the general decoder,
        // which names the limit.
        let b = sample("v1_msg_write_chunk");
        let limits = Limits {
            max_write_chunks: 0,
            ..Limits::DEFAULT
        };
        assert_eq!(decode_short(&b[16..], prefix, &limits), None);
        assert!(matches!(
            dec_general(&b, &limits).unwrap_err().kind,
            DecodeErrorKind::LimitExceeded {
                limit: "max_write_chunks",
                ..
            }
        ));
    }

    /// Chunk lists of zero to two entries per list and segments per chunk
    /// (the short shapes and their nearest neighbours).
    fn arb_small_lists() -> impl Strategy<Value = ChunkLists> {
        let seg = || {
            (
                0u32..4,
                any::<u32>(),
                prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
            )
                .prop_map(|(h, l, o)| Segment::new(h, l, o))
        };
        let chunk = move || proptest::collection::vec(seg(), 0..3).prop_map(WriteChunk::new);
        (
            proptest::collection::vec(
                (0u32..3, seg()).prop_map(|(p, s)| ReadSegment::new(p, s)),
                0..3,
            ),
            proptest::collection::vec(chunk(), 0..3),
            proptest::option::of(chunk()),
        )
            .prop_map(|(reads, writes, reply)| ChunkLists {
                reads: reads.into(),
                writes: writes.into(),
                reply,
            })
    }

    /// A small limit, rarely zero.
    fn arb_limit() -> impl Strategy<Value = u32> {
        prop_oneof![1 => Just(0u32), 4 => 1u32..3]
    }

    /// Words that make chunk lists of every shape, well-formed or not.
    fn arb_word() -> impl Strategy<Value = u32> {
        prop_oneof![
            4 => Just(0u32),
            4 => Just(1u32),
            1 => Just(2u32),
            1 => Just(u32::MAX),
            2 => any::<u32>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// The short path agrees with the general decoder on every input
        /// and every limit: the same header and length when it decodes,
        /// and `decode` (short path first) returns exactly what the general
        /// decoder returns, errors (kind, offset, field) included.
        #[test]
        fn short_path_matches_general_decoder(
            proc in 0u32..3,
            lists in arb_small_lists(),
            garbage in proptest::collection::vec(arb_word(), 0..18),
            structured in prop::bool::weighted(0.8),
            mutate in proptest::option::weighted(0.2, (any::<prop::sample::Index>(), arb_word())),
            cut in proptest::option::weighted(0.2, any::<prop::sample::Index>()),
            tail in proptest::collection::vec(any::<u8>(), 0..4),
            (rs, wc, spc, hs) in (arb_limit(), arb_limit(), arb_limit(), 0u32..4),
        ) {
            let mut b = h("0000000a 00000001 00000020");
            b.extend_from_slice(&proc.to_be_bytes());
            let mut body = if structured {
                lists.to_vec().unwrap()
            } else {
                garbage.iter().flat_map(|w| w.to_be_bytes()).collect()
            };
            if let Some((i, w)) = mutate {
                if body.len() >= 4 {
                    let at = i.index(body.len() / 4) * 4;
                    body[at..at + 4].copy_from_slice(&w.to_be_bytes());
                }
            }
            if let Some(i) = cut {
                body.truncate(i.index(body.len() + 1));
            }
            b.extend_from_slice(&body);
            b.extend_from_slice(&tail);
            let limits = Limits {
                max_read_segments: rs,
                max_write_chunks: wc,
                max_segments_per_chunk: spc,
                max_header_segments: hs,
                ..Limits::DEFAULT
            };
            let general = dec_general(&b, &limits);
            let prefix = Prefix::read(&b).unwrap();
            if let Some((hdr, n)) = decode_short(&b[16..], prefix, &limits) {
                prop_assert_eq!(&general, &Ok((hdr, 16 + n)));
            }
            prop_assert_eq!(&decode(&b, &limits), &general);
            let via_dispatch = crate::wire::header::decode(&b, &limits)
                .map_err(|e| e.error)
                .map(|(t, n)| match t {
                    crate::wire::header::TransportHeader::V1(h) => Some((h, n)),
                    _ => None,
                });
            prop_assert_eq!(via_dispatch, general.map(Some));
        }
    }

    pub(crate) fn arb_header() -> impl Strategy<Value = Header> {
        let body = prop_oneof![
            arb_chunk_lists().prop_map(Body::Msg),
            arb_chunk_lists()
                .prop_filter("NOMSG needs a chunk", |c| !c.is_empty())
                .prop_map(Body::Nomsg),
            (any::<u32>(), any::<u32>(), arb_chunk_lists()).prop_map(|(align, thresh, chunks)| {
                Body::Msgp(Msgp {
                    align,
                    thresh,
                    chunks,
                })
            }),
            Just(Body::Done),
            (any::<u32>(), any::<u32>())
                .prop_map(|(low, high)| Body::Error(RdmaError::Vers { low, high })),
            Just(Body::Error(RdmaError::Chunk)),
            (3u32.., proptest::collection::vec(any::<u8>(), 0..12)).prop_map(|(c, raw)| {
                Body::Error(RdmaError::Unknown {
                    code: ErrorCode(c),
                    raw,
                })
            }),
            (5u32.., proptest::collection::vec(any::<u8>(), 0..12))
                .prop_map(|(p, raw)| { Body::Unknown { proc: Proc(p), raw } }),
        ];
        (any::<u32>(), any::<u32>(), body).prop_map(|(xid, credit, body)| Header {
            xid,
            credit,
            body,
        })
    }

    proptest! {
        #[test]
        fn header_roundtrip(hdr in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut bytes = hdr.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), hdr.encoded_len());
            let header_len = bytes.len();
            if hdr.has_payload() {
                bytes.extend_from_slice(&payload);
            }
            let (d, n) = dec(&bytes).unwrap();
            prop_assert_eq!(n, header_len);
            prop_assert_eq!(d, hdr);
        }

        #[test]
        fn decode_never_panics(mut b in proptest::collection::vec(any::<u8>(), 16..96), p in 0u32..6) {
            b[4..8].copy_from_slice(&1u32.to_be_bytes());
            b[12..16].copy_from_slice(&p.to_be_bytes());
            if let Ok((hdr, n)) = dec(&b) {
                prop_assert_eq!(hdr.to_vec().unwrap(), b[..n].to_vec());
                let _ = hdr.to_string();
            }
        }
    }
}
