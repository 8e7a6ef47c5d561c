//! RDMAP (RFC 5040): the RDMA protocol carried in DDP segments.
//!
//! RDMAP uses the DDP header's ULP-reserved fields: the 8-bit field after
//! the DDP control bits holds the RDMAP control field (version, opcode),
//! and on untagged messages the 32-bit field holds the Invalidate STag of
//! the Send with Invalidate messages.
//!
//! ```text
//!  DDP control   RDMAP control
//!  T L rsvd DV   RV rsvd opcode
//!  0 1 2345 67   01 23   4567
//! ```
//!
//! This module provides:
//! * [`Opcode`] (open newtype) and [`RdmapControl`];
//! * header builders for each message ([`send_header`], [`write_header`],
//!   [`read_request_header`], [`read_response_header`],
//!   [`terminate_header`]);
//! * [`ReadRequest`] (RFC 5040 §4.4) and [`TerminateMessage`] (§4.8);
//! * [`TerminateCode`]: the table of Terminate layer / error type / error
//!   code triples of RFC 5040 §7.1 (RDMAP), RFC 5041 §7.2 (DDP) and
//!   RFC 5044 §8 + RFC 6581 §4 (MPA as the LLP), and [`Segment::parse`],
//!   which classifies an incoming DDP segment and names the Terminate to
//!   send when it violates RDMAP.

use core::fmt;
use core::ops::Range;

use crate::ddp::{
    self, DdpHeader, TaggedHeader, UntaggedHeader, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
pub use crate::terminate_code::{TerminateCode, LAYER_DDP, LAYER_LLP, LAYER_RDMAP};
use crate::{be16, be32, be64, need, EncodeError};

/// The RDMAP version this implementation speaks.
//= rfc5040#section-4.1
//# Bits 24-25; RDMA Version field: 01b for an RNIC that complies with
//# this RDMA protocol specification.
// The same bullet also allows 00b (RDMA Consortium RNICs: "Both version
// numbers are valid"); this crate speaks and accepts 01b only, which is what
// Linux siw sends (lab README).
pub const RDMAP_VERSION: u8 = 1;

/// Untagged queue carrying Send messages (RFC 5040 §5.1).
pub const QN_SEND: u32 = 0;
/// Untagged queue carrying RDMA Read Request messages.
pub const QN_READ_REQUEST: u32 = 1;
/// Untagged queue carrying Terminate messages.
pub const QN_TERMINATE: u32 = 2;

/// RDMAP opcode (4 bits). Open: unknown values decode and re-encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// RDMA Write (tagged).
    pub const WRITE: Opcode = Opcode(0);
    /// RDMA Read Request (untagged, QN 1).
    pub const READ_REQUEST: Opcode = Opcode(1);
    /// RDMA Read Response (tagged).
    pub const READ_RESPONSE: Opcode = Opcode(2);
    /// Send (untagged, QN 0).
    pub const SEND: Opcode = Opcode(3);
    /// Send with Invalidate (untagged, QN 0).
    pub const SEND_INVALIDATE: Opcode = Opcode(4);
    /// Send with Solicited Event (untagged, QN 0).
    pub const SEND_SE: Opcode = Opcode(5);
    /// Send with Solicited Event and Invalidate (untagged, QN 0).
    pub const SEND_SE_INVALIDATE: Opcode = Opcode(6);
    /// Terminate (untagged, QN 2).
    pub const TERMINATE: Opcode = Opcode(7);

    /// The RFC 5040 name, or `None` for an unassigned value.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "RDMA Write",
            1 => "RDMA Read Request",
            2 => "RDMA Read Response",
            3 => "Send",
            4 => "Send with Invalidate",
            5 => "Send with Solicited Event",
            6 => "Send with Solicited Event and Invalidate",
            7 => "Terminate",
            _ => return None,
        })
    }

    /// True for the opcodes RFC 5040 carries in tagged DDP segments.
    pub fn is_tagged(self) -> bool {
        matches!(self.0, 0 | 2)
    }

    /// The untagged queue number of an untagged opcode (`None` for tagged
    /// and unassigned opcodes).
    //= rfc5040#section-3.1
    //# RDMAP uses three queues for Untagged Buffers:
    //#
    //# *  Queue Number 0 (used by RDMAP for Send, Send with Invalidate,
    //#    Send with Solicited Event, and Send with Solicited Event and
    //#    Invalidate operations).
    //#
    //# *  Queue Number 1 (used by RDMAP for RDMA Read operations).
    //#
    //# *  Queue Number 2 (used by RDMAP for Terminate operations).
    pub fn queue(self) -> Option<u32> {
        match self.0 {
            3..=6 => Some(QN_SEND),
            1 => Some(QN_READ_REQUEST),
            7 => Some(QN_TERMINATE),
            _ => None,
        }
    }

    /// True for the four Send variants.
    pub fn is_send(self) -> bool {
        matches!(self.0, 3..=6)
    }

    /// True for Send with Invalidate and Send with SE and Invalidate, whose
    /// untagged header carries the STag to invalidate.
    pub fn carries_invalidate_stag(self) -> bool {
        matches!(self.0, 4 | 6)
    }

    /// True for the Send variants that request a solicited event.
    pub fn solicited(self) -> bool {
        matches!(self.0, 5 | 6)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "opcode {}", self.0),
        }
    }
}

/// The RDMAP control field: the DDP header's 8-bit ULP-reserved field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RdmapControl {
    /// RV, 2 bits (1 for RFC 5040).
    pub version: u8,
    /// The 2 reserved bits (sent as zero, kept as received).
    pub reserved: u8,
    /// The opcode, 4 bits.
    pub opcode: Opcode,
}

impl RdmapControl {
    /// Control field for `opcode` with version 1.
    pub const fn new(opcode: Opcode) -> Self {
        RdmapControl {
            version: RDMAP_VERSION,
            reserved: 0,
            opcode,
        }
    }

    /// Decodes the octet (total: every value has a meaning).
    pub const fn from_byte(b: u8) -> Self {
        RdmapControl {
            version: b >> 6,
            reserved: (b >> 4) & 0x3,
            opcode: Opcode(b & 0x0f),
        }
    }

    /// Encodes the octet (out-of-range fields are masked).
    pub const fn to_byte(self) -> u8 {
        ((self.version & 0x3) << 6) | ((self.reserved & 0x3) << 4) | (self.opcode.0 & 0x0f)
    }
}

/// DDP header of one segment of a Send message.
///
/// `opcode` must be one of the Send variants; for the Invalidate variants
/// `inval_stag` goes into the untagged header's 32-bit ULP-reserved field,
/// for the others that field is zero.
//= rfc5040#section-4.1
//# For Send with Invalidate and Send with Solicited Event and
//# Invalidate, the second through fifth octets of the DDP RsvdULP field
//# MUST be used by RDMAP to carry the Invalidate STag.
//= rfc5040#section-4.1
//# For Send, Send with Solicited Event, RDMA Read Request, and
//# Terminate, the Invalidate STag field MUST be set to zero on
//# transmit and ignored by the receiver.
//= rfc5040#section-5.3
//# For a Send Message Type, the Local Peer's RDMAP layer MUST request
//# that the DDP layer set the Queue Number field to zero.
pub fn send_header(
    opcode: Opcode,
    msn: u32,
    mo: u32,
    last: bool,
    inval_stag: u32,
) -> Result<DdpHeader, EncodeError> {
    if !opcode.is_send() {
        return Err(EncodeError::ValueOutOfRange("send opcode"));
    }
    let word = if opcode.carries_invalidate_stag() {
        inval_stag
    } else {
        0
    };
    Ok(DdpHeader::Untagged(UntaggedHeader::new(
        RdmapControl::new(opcode).to_byte(),
        word,
        QN_SEND,
        msn,
        mo,
        last,
    )))
}

/// DDP header of one segment of an RDMA Write.
pub fn write_header(stag: u32, to: u64, last: bool) -> DdpHeader {
    DdpHeader::Tagged(TaggedHeader::new(
        RdmapControl::new(Opcode::WRITE).to_byte(),
        stag,
        to,
        last,
    ))
}

/// DDP header of one segment of an RDMA Read Response.
pub fn read_response_header(sink_stag: u32, sink_to: u64, last: bool) -> DdpHeader {
    DdpHeader::Tagged(TaggedHeader::new(
        RdmapControl::new(Opcode::READ_RESPONSE).to_byte(),
        sink_stag,
        sink_to,
        last,
    ))
}

/// DDP header of an RDMA Read Request (a single segment on QN 1, MO 0).
pub fn read_request_header(msn: u32) -> DdpHeader {
    DdpHeader::Untagged(UntaggedHeader::new(
        RdmapControl::new(Opcode::READ_REQUEST).to_byte(),
        0,
        QN_READ_REQUEST,
        msn,
        0,
        true,
    ))
}

/// DDP header of a Terminate message (a single segment on QN 2, MO 0).
pub fn terminate_header(msn: u32) -> DdpHeader {
    DdpHeader::Untagged(UntaggedHeader::new(
        RdmapControl::new(Opcode::TERMINATE).to_byte(),
        0,
        QN_TERMINATE,
        msn,
        0,
        true,
    ))
}

/// The RDMA Read Request header (RFC 5040 §4.4), the 28 octets after the
/// untagged DDP header.
//= rfc5040#section-4.4
//# The RDMA Read Request Message carries an RDMA Read Request Header
//# that describes the Data Sink and Data Source Buffers used by the RDMA
//# Read operation.  The RDMA Read Request Header immediately follows the
//# DDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReadRequest {
    /// Data Sink STag (the requester's buffer, target of the Read Response).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size in octets.
    pub size: u32,
    /// Data Source STag (the responder's buffer).
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Encoded length.
    pub const LEN: usize = 28;

    /// Exact encoded length (28).
    pub const fn encoded_len(&self) -> usize {
        Self::LEN
    }

    /// Decodes the first 28 octets of `buf`.
    pub fn decode(buf: &[u8]) -> Option<Self> {
        Some(ReadRequest {
            sink_stag: be32(buf, 0)?,
            sink_to: be64(buf, 4)?,
            size: be32(buf, 12)?,
            src_stag: be32(buf, 16)?,
            src_to: be64(buf, 20)?,
        })
    }

    /// Writes the 28 octets into `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        need(out, Self::LEN)?;
        out[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        out[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        out[12..16].copy_from_slice(&self.size.to_be_bytes());
        out[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        out[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        Ok(Self::LEN)
    }

    /// The 28 octets.
    pub fn to_bytes(&self) -> [u8; 28] {
        let mut b = [0u8; 28];
        // Cannot fail: the array is exactly LEN long.
        let _ = self.write(&mut b);
        b
    }
}

/// Terminate header flags (the `HdrCt` bits of the Terminate control field).
//= rfc5040#section-4.8
//# *  M: bit 16.  DDP Segment Length valid.  See Figure 10 for
//#    when this bit SHOULD be set.
//#
//# *  D: bit 17.  DDP Header Included.  See Figure 10 for when
//#    this bit SHOULD be set.
//#
//# *  R: bit 18.  RDMAP Header Included.  See Figure 10 for when
//#    this bit SHOULD be set.
// Bits 16-18 of the Terminate control word are the top three bits of its
// third octet.
const TERM_M: u8 = 0x80;
const TERM_D: u8 = 0x40;
const TERM_R: u8 = 0x20;

/// The header of a Terminated DDP segment, as copied into a Terminate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminatedDdp {
    /// DDP Segment Length: the ULPDU_Length of the offending segment.
    pub segment_length: u16,
    /// The offending DDP header, copied verbatim (the RDMAP control field
    /// and Invalidate STag travel inside it).
    pub header: DdpHeader,
}

/// The RDMAP Terminate header (RFC 5040 §4.8), the payload of a Terminate
/// message after its untagged DDP header.
///
/// ```text
///  | Layer | EType | Error Code |M|D|R| Reserved (13) |
///  | DDP Segment Length (16)    | Terminated DDP Header (14 or 18) ...
///  | Terminated RDMA Header (28, the Read Request header) ...
/// ```
///
/// The DDP Segment Length and the Terminated DDP Header are present when D
/// is set; the length of the copied DDP header follows from its own T bit.
/// M tells whether the DDP Segment Length is valid. The Terminated RDMA
/// Header (28 octets) is present when R is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminateMessage {
    /// Layer, error type and error code.
    pub code: TerminateCode,
    /// M: the DDP Segment Length field is valid.
    pub segment_length_valid: bool,
    /// The 13 reserved bits (zero on send, kept on receive).
    pub reserved: u16,
    /// D: the offending DDP segment's length and header.
    pub ddp: Option<TerminatedDdp>,
    /// R: the offending RDMA Read Request header.
    pub rdmap: Option<[u8; 28]>,
}

/// Errors decoding a Terminate message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminateDecodeError {
    /// Fewer octets than the flags announce.
    Truncated,
    /// Octets after the announced fields.
    TrailingBytes,
}

impl TerminateMessage {
    /// A Terminate with no copied headers.
    pub const fn new(code: TerminateCode) -> Self {
        TerminateMessage {
            code,
            segment_length_valid: false,
            reserved: 0,
            ddp: None,
            rdmap: None,
        }
    }

    /// Builds the Terminate for `code` caused by the DDP segment `ulpdu`
    /// (the bytes after the MPA ULPDU_Length, `None` when no segment header
    /// is available, e.g. after a CRC error on garbage).
    ///
    /// Copies the DDP header (D, with the DDP Segment Length and M) when the
    /// segment holds a complete one, and the Read Request header (R) when
    /// the segment is an RDMA Read Request; local catastrophic errors copy
    /// nothing.
    //= rfc5040#section-4.8
    //# The DDP Header of the incoming Message that is associated
    //# with the Terminate.  The DDP Header is not present if the
    //# Terminate Error Type is a Local Catastrophic Error.  It MUST
    //# be present if the D bit is set.
    //= rfc5040#section-4.8
    //# The Terminated RDMA Header is only sent back if the terminate
    //# is associated with an RDMA Read Request Message.  It MUST be
    //# present if the R bit is set.
    //= rfc5040#section-7.1
    //# 3.  For errors detected on an incoming RDMA Read Request Message
    //#     (after the Message has been Delivered by DDP), the Terminate
    //#     Message is sent at the earliest possible opportunity, preferably
    //#     in the next outgoing RDMA Message.  In this case, the Error Type,
    //#     Error Code, ULP PDU Length, Terminated DDP Header, and Terminated
    //#     RDMA Header fields are included in the Terminate Message.
    pub fn for_segment(code: TerminateCode, ulpdu: Option<&[u8]>) -> Self {
        let mut t = TerminateMessage::new(code);
        // RFC 5040 Figure 10 (section 4.8): a Local Catastrophic RDMAP error
        // and every LLP (MPA) error carry neither the DDP nor the RDMA
        // header. The RDMA Read Request header is copied only for RDMAP-layer
        // errors on a Read Request (section 7.1 item 3, quoted above; Figure
        // 10 lists it for Remote Protection errors), never for DDP errors.
        if code.layer == LAYER_LLP || (code.layer == LAYER_RDMAP && code.etype == 0) {
            return t;
        }
        let Some(seg) = ulpdu else { return t };
        let Ok(hdr) = DdpHeader::decode(seg) else {
            return t;
        };
        let seg_len = u16::try_from(seg.len()).unwrap_or(u16::MAX);
        t.segment_length_valid = true;
        t.ddp = Some(TerminatedDdp {
            segment_length: seg_len,
            header: hdr,
        });
        let rdmap_error = code.layer == LAYER_RDMAP;
        if let (true, DdpHeader::Untagged(u)) = (rdmap_error, hdr) {
            if RdmapControl::from_byte(u.rsvd_ulp).opcode == Opcode::READ_REQUEST {
                if let Some(rr) = seg.get(UNTAGGED_HEADER_LEN..UNTAGGED_HEADER_LEN + 28) {
                    let mut b = [0u8; 28];
                    b.copy_from_slice(rr);
                    t.rdmap = Some(b);
                }
            }
        }
        t
    }

    /// Exact encoded length.
    pub fn encoded_len(&self) -> usize {
        4 + self.ddp.map_or(0, |d| 2 + d.header.encoded_len()) + self.rdmap.map_or(0, |_| 28)
    }

    /// Writes the Terminate header into `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let len = self.encoded_len();
        need(out, len)?;
        if self.code.layer > 0xf || self.code.etype > 0xf {
            return Err(EncodeError::ValueOutOfRange("terminate layer/etype"));
        }
        if self.reserved > 0x1fff {
            return Err(EncodeError::ValueOutOfRange("terminate reserved"));
        }
        out[0] = (self.code.layer << 4) | self.code.etype;
        out[1] = self.code.code;
        let mut flags = 0u8;
        if self.segment_length_valid {
            flags |= TERM_M;
        }
        if self.ddp.is_some() {
            flags |= TERM_D;
        }
        if self.rdmap.is_some() {
            flags |= TERM_R;
        }
        let tail = self.reserved.to_be_bytes();
        out[2] = flags | tail[0];
        out[3] = tail[1];
        let mut off = 4;
        if let Some(d) = &self.ddp {
            out[off..off + 2].copy_from_slice(&d.segment_length.to_be_bytes());
            off += 2;
            off += d.header.write(&mut out[off..])?;
        }
        if let Some(r) = &self.rdmap {
            out[off..off + 28].copy_from_slice(r);
            off += 28;
        }
        debug_assert_eq!(off, len);
        Ok(off)
    }

    /// Encodes into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len()];
        let _ = self.write(&mut v);
        v
    }

    /// Decodes a Terminate header occupying all of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self, TerminateDecodeError> {
        let b0 = *buf.first().ok_or(TerminateDecodeError::Truncated)?;
        let b1 = *buf.get(1).ok_or(TerminateDecodeError::Truncated)?;
        let fl = be16(buf, 2).ok_or(TerminateDecodeError::Truncated)?;
        let flags = (fl >> 8) as u8;
        let mut t = TerminateMessage {
            code: TerminateCode {
                layer: b0 >> 4,
                etype: b0 & 0xf,
                code: b1,
            },
            segment_length_valid: flags & TERM_M != 0,
            reserved: fl & 0x1fff,
            ddp: None,
            rdmap: None,
        };
        let mut off = 4;
        if flags & TERM_D != 0 {
            let seg_len = be16(buf, off).ok_or(TerminateDecodeError::Truncated)?;
            off += 2;
            let rest = buf.get(off..).ok_or(TerminateDecodeError::Truncated)?;
            let hdr = DdpHeader::decode(rest).map_err(|_| TerminateDecodeError::Truncated)?;
            off += hdr.encoded_len();
            t.ddp = Some(TerminatedDdp {
                segment_length: seg_len,
                header: hdr,
            });
        }
        if flags & TERM_R != 0 {
            let r = buf
                .get(off..off + 28)
                .ok_or(TerminateDecodeError::Truncated)?;
            let mut b = [0u8; 28];
            b.copy_from_slice(r);
            t.rdmap = Some(b);
            off += 28;
        }
        if off != buf.len() {
            return Err(TerminateDecodeError::TrailingBytes);
        }
        Ok(t)
    }
}

/// An incoming DDP segment classified by RDMAP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The DDP header.
    pub ddp: DdpHeader,
    /// The RDMAP control field (from the DDP header).
    pub control: RdmapControl,
    /// The Read Request header of an RDMA Read Request.
    pub read_request: Option<ReadRequest>,
    /// Where the payload lies within the ULPDU: after the DDP header for
    /// data-carrying messages; empty for Read Request; the Terminate header
    /// for Terminate.
    pub payload: Range<usize>,
}

impl Segment {
    /// Parses and checks the ULPDU of one FPDU (a DDP segment) against
    /// DDP (version, queue number) and RDMAP (version, opcode, opcode vs
    /// buffer model and queue, Read Request / Terminate framing).
    ///
    /// Does **not** check STags, MSNs or offsets against local state: that
    /// is [`ddp::check_tagged`] / [`ddp::check_untagged`].
    ///
    /// | check | Terminate |
    /// |---|---|
    /// | segment shorter than its DDP header | [`TerminateCode::MPA_MARKER`] (ULPDU_Length does not match the frame) |
    /// | DDP version ≠ 1, tagged | [`TerminateCode::DDP_TAGGED_INVALID_VERSION`] |
    /// | DDP version ≠ 1, untagged | [`TerminateCode::DDP_UNTAGGED_INVALID_VERSION`] |
    /// | QN not 0, 1 or 2 | [`TerminateCode::DDP_UNTAGGED_INVALID_QN`] |
    /// | RDMAP version ≠ 1 | [`TerminateCode::RDMAP_INVALID_VERSION`] |
    /// | unassigned opcode, tagged opcode on an untagged segment or the reverse, opcode on the wrong queue | [`TerminateCode::RDMAP_UNEXPECTED_OPCODE`] |
    /// | Read Request or Terminate not a single whole segment, or of the wrong length | [`TerminateCode::RDMAP_OPERATION_UNSPECIFIED`] |
    pub fn parse(ulpdu: &[u8]) -> Result<Segment, TerminateCode> {
        let n = ulpdu.len().min(Self::MAX_PREFIX);
        Self::parse_prefix(&ulpdu[..n], ulpdu.len())
    }

    /// Longest ULPDU prefix [`Segment::parse_prefix`] needs: a Terminate
    /// with both headers copied (18 + 4 + 2 + 18 + 28 octets).
    pub const MAX_PREFIX: usize = UNTAGGED_HEADER_LEN + 4 + 2 + UNTAGGED_HEADER_LEN + 28;

    /// [`Segment::parse`] for zero-copy receive: `prefix` holds the first
    /// `min(ulpdu_len, MAX_PREFIX)` octets of a ULPDU of `ulpdu_len` octets
    /// (e.g. gathered with [`crate::mpa::fpdu::Fpdu::copy_prefix`]); the
    /// payload stays in the receive buffer and is placed from
    /// [`crate::mpa::fpdu::Fpdu::payload_ranges`].
    pub fn parse_prefix(prefix: &[u8], ulpdu_len: usize) -> Result<Segment, TerminateCode> {
        let ddp = DdpHeader::decode(prefix).map_err(|_| TerminateCode::MPA_MARKER)?;
        ddp.check_version()?;
        let hlen = ddp.encoded_len();
        if ulpdu_len < hlen {
            return Err(TerminateCode::MPA_MARKER);
        }
        let control = RdmapControl::from_byte(ddp.rsvd_ulp());
        let mut seg = Segment {
            ddp,
            control,
            read_request: None,
            payload: hlen..ulpdu_len,
        };
        match ddp {
            DdpHeader::Untagged(u) => {
                //= rfc5041#section-7.1
                //# For non-zero-length Untagged DDP Segments, the DDP Segment MUST be
                //# validated before Placement by verifying:
                //#
                //# 1.  The QN is valid for this stream.
                // RDMAP streams have queues 0, 1 and 2 (RFC 5040 §3.1); any
                // other QN is Untagged Buffer Error 0x01 "Invalid QN"
                // (RFC 5041 §7.2), checked here for zero-length segments too.
                if u.qn > QN_TERMINATE {
                    return Err(TerminateCode::DDP_UNTAGGED_INVALID_QN);
                }
                check_rdmap_version(control)?;
                if control.opcode.queue() != Some(u.qn) {
                    return Err(TerminateCode::RDMAP_UNEXPECTED_OPCODE);
                }
                match control.opcode {
                    Opcode::READ_REQUEST => {
                        //= rfc5040#section-4.4
                        //# The RDMA Read Request Header immediately follows the
                        //# DDP header.
                        // A Read Request carries no ULP payload (RFC 5040
                        // §4.2, Figure 5), so its segment is the DDP header
                        // plus the 28-octet Read Request header. No RFC
                        // sentence requires it to be one segment (L set,
                        // MO 0); this crate requires it, as the header always
                        // fits (MULPDU is never below 128, RFC 5044 §4.5),
                        // and answers anything else with Remote Operation
                        // Error 0xff (unspecified).
                        if !u.last || u.mo != 0 || ulpdu_len != hlen + ReadRequest::LEN {
                            return Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED);
                        }
                        seg.read_request = prefix.get(hlen..).and_then(ReadRequest::decode);
                        if seg.read_request.is_none() {
                            return Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED);
                        }
                        seg.payload = ulpdu_len..ulpdu_len;
                    }
                    Opcode::TERMINATE => {
                        let body = prefix.get(hlen..ulpdu_len);
                        let ok = u.last
                            && u.mo == 0
                            && body.is_some_and(|b| TerminateMessage::decode(b).is_ok());
                        if !ok {
                            return Err(TerminateCode::RDMAP_OPERATION_UNSPECIFIED);
                        }
                    }
                    _ => {}
                }
            }
            DdpHeader::Tagged(_) => {
                check_rdmap_version(control)?;
                if !control.opcode.is_tagged() {
                    return Err(TerminateCode::RDMAP_UNEXPECTED_OPCODE);
                }
            }
        }
        Ok(seg)
    }

    /// The Terminate header of a Terminate segment.
    pub fn terminate(&self, ulpdu: &[u8]) -> Option<TerminateMessage> {
        if self.control.opcode != Opcode::TERMINATE {
            return None;
        }
        TerminateMessage::decode(ulpdu.get(self.payload.clone())?).ok()
    }

    /// The Invalidate STag of a Send with Invalidate segment.
    pub fn invalidate_stag(&self) -> Option<u32> {
        match self.ddp {
            DdpHeader::Untagged(u) if self.control.opcode.carries_invalidate_stag() => {
                Some(u.rsvd_ulp_word)
            }
            _ => None,
        }
    }
}

//= rfc5040#section-7.2
//# 2.  The RDMA OpCode MUST be valid.
//#
//# 3.  The RDMA Version MUST be valid.
fn check_rdmap_version(c: RdmapControl) -> Result<(), TerminateCode> {
    if c.version != RDMAP_VERSION {
        return Err(TerminateCode::RDMAP_INVALID_VERSION);
    }
    if c.opcode.name().is_none() {
        return Err(TerminateCode::RDMAP_UNEXPECTED_OPCODE);
    }
    Ok(())
}

/// Header lengths: DDP header plus RDMAP-specific header.
pub fn header_len(opcode: Opcode) -> usize {
    match opcode.0 {
        0 | 2 => TAGGED_HEADER_LEN,
        1 => UNTAGGED_HEADER_LEN + ReadRequest::LEN,
        _ => UNTAGGED_HEADER_LEN,
    }
}

/// Encodes a complete RDMA Read Request ULPDU (DDP header + Read Request).
pub fn encode_read_request(msn: u32, rr: &ReadRequest) -> [u8; 46] {
    let mut b = [0u8; UNTAGGED_HEADER_LEN + ReadRequest::LEN];
    let _ = read_request_header(msn).write(&mut b);
    let _ = rr.write(&mut b[UNTAGGED_HEADER_LEN..]);
    b
}

/// Encodes a complete Terminate ULPDU (DDP header + Terminate header).
pub fn encode_terminate(msn: u32, t: &TerminateMessage) -> Vec<u8> {
    let mut v = vec![0u8; UNTAGGED_HEADER_LEN + t.encoded_len()];
    let _ = terminate_header(msn).write(&mut v);
    let _ = t.write(&mut v[UNTAGGED_HEADER_LEN..]);
    v
}

/// Convenience re-export for callers matching on segment kinds.
pub use ddp::DdpHeader as Header;
