//! MPA (RFC 5044, updated by RFC 6581): connection setup and FPDU framing.
//!
//! Connection setup: right after the TCP connection is established the
//! initiator sends an MPA Request frame and the responder answers with an
//! MPA Reply frame (which may be a Reject). Both frames have the same
//! layout:
//!
//! ```text
//!  | Key (16 octets: "MPA ID Req Frame" / "MPA ID Rep Frame")          |
//!  |M|C|R|E|Res (4)| Rev (8)       | PD_Length (16)                   |
//!  | Private Data (PD_Length octets, at most 512) ...                  |
//! ```
//!
//! `E` (0x10) is the RFC 6581 "enhanced RDMA connection establishment"
//! bit, taken from the RFC 5044 reserved bits. With revision 2 and `E` set,
//! the private data starts with the 4-octet [`IrdOrd`] header and the ULP
//! private data follows it. That is what Linux sends: flags `0x10`, rev 2.
//!
//! After the exchange both sides switch to FPDUs ([`fpdu`]).
//!
//! # Linux interoperability (from the lab, `/work/shared/lab/linux-siw`)
//!
//! * Linux siw and svcrdma need revision 2 with `E` and an IRD ≥ 1 from the
//!   initiator; rev 1, rev 2 without `E`, or IRD 0 get an MPA Reject.
//! * A Request with M (markers) gets a Reject: `flags 0x30, rev 2,
//!   PD_Length 4, PD 00000000` ([`MpaFrame::linux_style_reject`]).
//! * CRC is off unless requested; the 4-octet CRC field is still present
//!   in every FPDU (value 0).
//! * A malformed Reply (PD_Length > 256) crashes the Linux siw initiator
//!   (kernel NULL dereference): [`MpaFrame::write`] refuses private data
//!   over 512 octets and always writes PD_Length equal to the private data
//!   it sends; a responder facing Linux keeps its Reply's private data
//!   within [`LINUX_MAX_PRIVATE_DATA`] octets.
//! * [`linux_responder_verdict`] predicts how Linux answers a Request.

pub mod fpdu;

use core::fmt;

use crate::{be16, need, EncodeError, TerminateCode};

/// Key of the MPA Request frame.
pub const KEY_REQ: [u8; 16] = *b"MPA ID Req Frame";
/// Key of the MPA Reply frame.
pub const KEY_REP: [u8; 16] = *b"MPA ID Rep Frame";
/// Length of the fixed part of a Request/Reply frame.
pub const FRAME_HEADER_LEN: usize = 20;
/// Largest private data an MPA frame may carry.
//= rfc5044#section-7.1.1
//# If the receiver detects that the PD_Length field does not match the length
//# of the Private Data field, or if the length of the Private Data field
//# exceeds 512 octets, the receiver MUST close the connection and report an
//# error locally.
//= rfc5044#section-7.1.1
//# The Private Data field MUST be between 0 and 512 octets in length.
pub const MAX_PRIVATE_DATA: usize = 512;
/// Largest private data Linux siw accepts (`MPA_MAX_PRIVDATA` =
/// `RDMA_MAX_PRIVATE_DATA` = 256); more makes siw close the connection, and
/// as a Reply crashes the initiator (lab finding).
pub const LINUX_MAX_PRIVATE_DATA: usize = 256;
/// Length of the RFC 6581 IRD/ORD header.
pub const IRD_ORD_LEN: usize = 4;

/// Which of the two frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// MPA Request (initiator → responder).
    Request,
    /// MPA Reply (responder → initiator); a Reject is a Reply with R set.
    Reply,
}

impl FrameKind {
    /// The 16-octet key.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => &KEY_REQ,
            FrameKind::Reply => &KEY_REP,
        }
    }
}

/// The flags octet of a Request/Reply frame. Open: the reserved bits are
/// kept as received.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MpaFlags(pub u8);

impl MpaFlags {
    /// M: the sender of the frame wants to receive Markers.
    //= rfc5044#section-7.1.1
    //# M: This bit declares an endpoint's REQUIRED Marker usage.  When this
    //# bit is '1' in an MPA Request Frame, the Initiator declares that
    //# Markers are REQUIRED in FPDUs sent from the Responder.  When set
    //# to '1' in an MPA Reply Frame, this bit declares that Markers are
    //# REQUIRED in FPDUs sent from the Initiator.
    pub const MARKERS: u8 = 0x80;
    /// C: the sender of the frame wants CRCs.
    pub const CRC: u8 = 0x40;
    /// R: the connection is rejected (Reply only).
    pub const REJECT: u8 = 0x20;
    /// RFC 6581 enhanced connection establishment (Linux `MPA_RR_FLAG_ENHANCED`).
    pub const ENHANCED: u8 = 0x10;
    /// The bits still reserved (zero on send).
    pub const RESERVED: u8 = 0x0f;

    /// M bit.
    pub const fn markers(self) -> bool {
        self.0 & Self::MARKERS != 0
    }
    /// C bit.
    pub const fn crc(self) -> bool {
        self.0 & Self::CRC != 0
    }
    /// R bit.
    pub const fn reject(self) -> bool {
        self.0 & Self::REJECT != 0
    }
    /// Enhanced (RFC 6581) bit.
    pub const fn enhanced(self) -> bool {
        self.0 & Self::ENHANCED != 0
    }
    /// The reserved bits.
    pub const fn reserved(self) -> u8 {
        self.0 & Self::RESERVED
    }
    /// Returns these flags with `bit` set or cleared.
    #[must_use]
    pub const fn with(self, bit: u8, on: bool) -> Self {
        if on {
            MpaFlags(self.0 | bit)
        } else {
            MpaFlags(self.0 & !bit)
        }
    }
}

/// The RFC 6581 IRD/ORD header at the start of the private data (revision
/// 2 with the enhanced bit).
///
/// ```text
///  |A|B|        IRD (14)         |C|D|        ORD (14)         |
/// ```
///
/// A: peer-to-peer connection model; B: a zero-length Send (FULPDU) can be
/// the RTR message; C: a zero-length RDMA Write can be the RTR; D: a
/// zero-length RDMA Read can be the RTR. Linux siw names these
/// `MPA_V2_PEER_TO_PEER`, `MPA_V2_ZERO_LENGTH_RTR`, `MPA_V2_RDMA_WRITE_RTR`
/// and `MPA_V2_RDMA_READ_RTR`.
//= rfc6581#section-9
//# Note that this field MUST be sent in network byte order, with the IRD and
//# ORD encoded as 14-bit unsigned integers.
//= rfc6581#section-9
//# IRD:  Inbound RDMA Read Queue Depth.
//#
//# ORD:  Outbound RDMA Read Queue Depth.
//#
//# A: Control Flag for connection model.
//#
//# B: Control Flag for use of a zero-length FULPDU (Send) RTR
//#    indication.
//#
//# C: Control Flag for use of a zero-length RDMA Write RTR indication.
//#
//# D: Control Flag for use of a zero-length RDMA Read RTR indication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// A: peer-to-peer model (an RTR message is exchanged).
    pub peer_to_peer: bool,
    /// B: zero-length Send usable as RTR.
    pub rtr_send: bool,
    /// C: zero-length RDMA Write usable as RTR.
    pub rtr_write: bool,
    /// D: zero-length RDMA Read usable as RTR.
    pub rtr_read: bool,
}

impl IrdOrd {
    /// Largest IRD/ORD value (14 bits).
    pub const MAX: u16 = 0x3fff;

    /// Plain IRD/ORD, no flags.
    pub const fn new(ird: u16, ord: u16) -> Self {
        IrdOrd {
            ird,
            ord,
            peer_to_peer: false,
            rtr_send: false,
            rtr_write: false,
            rtr_read: false,
        }
    }

    /// Decodes the 4 octets (total: every bit pattern has a meaning).
    pub const fn from_bytes(b: [u8; 4]) -> Self {
        let i = u16::from_be_bytes([b[0], b[1]]);
        let o = u16::from_be_bytes([b[2], b[3]]);
        IrdOrd {
            ird: i & Self::MAX,
            ord: o & Self::MAX,
            peer_to_peer: i & 0x8000 != 0,
            rtr_send: i & 0x4000 != 0,
            rtr_write: o & 0x8000 != 0,
            rtr_read: o & 0x4000 != 0,
        }
    }

    /// Encodes the 4 octets; IRD and ORD must fit in 14 bits.
    pub fn to_bytes(&self) -> Result<[u8; 4], EncodeError> {
        if self.ird > Self::MAX || self.ord > Self::MAX {
            return Err(EncodeError::ValueOutOfRange("IRD/ORD (14 bits)"));
        }
        let mut i = self.ird;
        let mut o = self.ord;
        if self.peer_to_peer {
            i |= 0x8000;
        }
        if self.rtr_send {
            i |= 0x4000;
        }
        if self.rtr_write {
            o |= 0x8000;
        }
        if self.rtr_read {
            o |= 0x4000;
        }
        let [a, b] = i.to_be_bytes();
        let [c, d] = o.to_be_bytes();
        Ok([a, b, c, d])
    }
}

/// An MPA Request or Reply frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MpaFrame {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M / C / R / enhanced / reserved bits.
    pub flags: MpaFlags,
    /// Revision (1: RFC 5044, 2: RFC 6581). Open: any value decodes.
    pub revision: u8,
    /// The whole private data (including the IRD/ORD header, if any).
    pub private_data: Vec<u8>,
}

/// Errors of the Request/Reply decoder. Each maps to MPA error code 0x04
/// ("invalid MPA Request or Reply frame"); before the connection is in full
/// operation the action is to close it (after a Reject where possible).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpaFrameError {
    /// The first 16 octets are not the expected key.
    BadKey {
        /// The frame kind that was expected.
        expected: FrameKind,
    },
    /// PD_Length exceeds the limit (512, or the configured one).
    PrivateDataTooLong {
        /// The announced length.
        len: u16,
        /// The limit.
        limit: usize,
    },
}

impl MpaFrameError {
    /// The Terminate code naming this error (RFC 5044 §8, code 0x04).
    pub const fn terminate_code(self) -> TerminateCode {
        TerminateCode::MPA_INVALID_REQ_REP
    }
}

impl fmt::Display for MpaFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MpaFrameError::BadKey { expected } => write!(f, "bad MPA key (expected {expected:?})"),
            MpaFrameError::PrivateDataTooLong { len, limit } => {
                write!(f, "MPA private data length {len} exceeds {limit}")
            }
        }
    }
}

impl std::error::Error for MpaFrameError {}

/// Outcome of [`MpaFrame::decode_prefix`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameDecode {
    /// Not enough octets yet: at least this many more are needed.
    NeedMore(usize),
    /// A complete frame occupying the first `consumed` octets.
    Frame {
        /// The frame.
        frame: MpaFrame,
        /// Octets it occupied (the rest belongs to the FPDU stream).
        consumed: usize,
    },
}

impl MpaFrame {
    /// A frame with no private data.
    pub fn new(kind: FrameKind, flags: MpaFlags, revision: u8) -> Self {
        MpaFrame {
            kind,
            flags,
            revision,
            private_data: Vec::new(),
        }
    }

    /// A revision-2 enhanced frame carrying `ird_ord` followed by
    /// `ulp_private_data`, with the C flag as given. This is the shape Linux
    /// sends and requires.
    pub fn enhanced(
        kind: FrameKind,
        crc: bool,
        ird_ord: IrdOrd,
        ulp_private_data: &[u8],
    ) -> Result<Self, EncodeError> {
        if ulp_private_data.len() > MAX_PRIVATE_DATA - IRD_ORD_LEN {
            return Err(EncodeError::ValueOutOfRange("MPA private data"));
        }
        let mut pd = Vec::with_capacity(IRD_ORD_LEN + ulp_private_data.len());
        pd.extend_from_slice(&ird_ord.to_bytes()?);
        pd.extend_from_slice(ulp_private_data);
        Ok(MpaFrame {
            kind,
            flags: MpaFlags(MpaFlags::ENHANCED).with(MpaFlags::CRC, crc),
            revision: 2,
            private_data: pd,
        })
    }

    /// True for revision 2 with the enhanced bit: the private data starts
    /// with an [`IrdOrd`] header.
    pub fn is_enhanced(&self) -> bool {
        self.revision == 2 && self.flags.enhanced()
    }

    /// The IRD/ORD header of an enhanced frame (`None` if the frame is not
    /// enhanced or its private data is shorter than 4 octets).
    pub fn ird_ord(&self) -> Option<IrdOrd> {
        if !self.is_enhanced() {
            return None;
        }
        let b = self.private_data.get(..IRD_ORD_LEN)?;
        Some(IrdOrd::from_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The ULP private data: after the IRD/ORD header on an enhanced frame,
    /// all of it otherwise.
    pub fn ulp_private_data(&self) -> &[u8] {
        if self.is_enhanced() {
            self.private_data.get(IRD_ORD_LEN..).unwrap_or(&[])
        } else {
            &self.private_data
        }
    }

    /// Exact encoded length.
    pub fn encoded_len(&self) -> usize {
        FRAME_HEADER_LEN + self.private_data.len()
    }

    /// Writes the frame. Refuses private data over [`MAX_PRIVATE_DATA`]
    /// (a peer receiving such a frame must treat it as an error; Linux's
    /// siw initiator even crashes on PD_Length > 256).
    pub fn write(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if self.private_data.len() > MAX_PRIVATE_DATA {
            return Err(EncodeError::ValueOutOfRange("MPA private data"));
        }
        let len = self.encoded_len();
        need(out, len)?;
        out[..16].copy_from_slice(self.kind.key());
        out[16] = self.flags.0;
        out[17] = self.revision;
        // Cannot truncate: at most 512.
        out[18..20].copy_from_slice(&(self.private_data.len() as u16).to_be_bytes());
        out[20..len].copy_from_slice(&self.private_data);
        Ok(len)
    }

    /// Encodes into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = vec![0u8; self.encoded_len()];
        self.write(&mut v)?;
        Ok(v)
    }

    /// Decodes a frame of kind `expected` from the start of `buf`, which may
    /// hold only part of it (any TCP segmentation) or more than it (the
    /// octets after it are FPDU stream). `pd_limit` is the receiver's limit
    /// on PD_Length (at most [`MAX_PRIVATE_DATA`]; use
    /// [`LINUX_MAX_PRIVATE_DATA`] to mirror siw).
    ///
    /// The key is checked as soon as its octets arrive, so garbage fails
    /// fast; PD_Length is checked before waiting for the private data.
    pub fn decode_prefix(
        buf: &[u8],
        expected: FrameKind,
        pd_limit: usize,
    ) -> Result<FrameDecode, MpaFrameError> {
        let key = expected.key();
        let have_key = buf.len().min(16);
        if buf.get(..have_key) != key.get(..have_key) {
            return Err(MpaFrameError::BadKey { expected });
        }
        let Some(pd_len) = be16(buf, 18) else {
            return Ok(FrameDecode::NeedMore(FRAME_HEADER_LEN - buf.len()));
        };
        let limit = pd_limit.min(MAX_PRIVATE_DATA);
        if usize::from(pd_len) > limit {
            return Err(MpaFrameError::PrivateDataTooLong { len: pd_len, limit });
        }
        let total = FRAME_HEADER_LEN + usize::from(pd_len);
        let Some(pd) = buf.get(FRAME_HEADER_LEN..total) else {
            return Ok(FrameDecode::NeedMore(total - buf.len()));
        };
        Ok(FrameDecode::Frame {
            frame: MpaFrame {
                kind: expected,
                flags: MpaFlags(buf[16]),
                revision: buf[17],
                private_data: pd.to_vec(),
            },
            consumed: total,
        })
    }

    /// The MPA Reject Linux siw sends for `request`: on an enhanced
    /// revision-2 request `flags 0x30 rev 2 PD_Length 4 PD 00000000`
    /// (R + enhanced, IRD = ORD = 0), otherwise `flags 0x20` with the
    /// request's revision and no private data.
    pub fn linux_style_reject(request: &MpaFrame) -> MpaFrame {
        if request.is_enhanced() {
            MpaFrame {
                kind: FrameKind::Reply,
                flags: MpaFlags(MpaFlags::REJECT | MpaFlags::ENHANCED),
                revision: 2,
                private_data: vec![0; IRD_ORD_LEN],
            }
        } else {
            MpaFrame::new(
                FrameKind::Reply,
                MpaFlags(MpaFlags::REJECT),
                request.revision,
            )
        }
    }
}

/// How a Linux responder (siw + svcrdma, kernels 6.1 and 6.12) answers an
/// MPA Request, as observed in the lab (`/work/shared/lab/linux-siw`,
/// "Protocol findings"). A Rust initiator checks its own Request with
/// [`linux_responder_verdict`] before sending it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxVerdict {
    /// Accepted: an MPA Reply follows.
    Accept,
    /// An MPA Reject ([`MpaFrame::linux_style_reject`]) for this reason.
    Reject(&'static str),
    /// The TCP connection is closed without a Reply.
    Close(&'static str),
}

/// Predicts [`LinuxVerdict`] for `request`.
pub fn linux_responder_verdict(request: &MpaFrame) -> LinuxVerdict {
    if request.kind != FrameKind::Request {
        return LinuxVerdict::Close("not an MPA Request");
    }
    if request.private_data.len() > LINUX_MAX_PRIVATE_DATA {
        return LinuxVerdict::Close("private data longer than 256 octets");
    }
    match request.revision {
        1 => return LinuxVerdict::Reject("MPA revision 1 gives svcrdma no IRD"),
        2 => {}
        _ => return LinuxVerdict::Close("unknown MPA revision"),
    }
    if request.flags.markers() {
        return LinuxVerdict::Reject("markers requested");
    }
    match request.ird_ord() {
        None => LinuxVerdict::Reject("revision 2 without the enhanced IRD/ORD header"),
        Some(io) if io.ird == 0 => LinuxVerdict::Reject("IRD 0: svcrdma needs RDMA Read"),
        Some(_) => LinuxVerdict::Accept,
    }
}

/// Incremental reader of one Request/Reply frame: feed it the TCP stream in
/// whatever pieces arrive.
#[derive(Clone, Debug)]
pub struct HandshakeReader {
    expected: FrameKind,
    pd_limit: usize,
    buf: Vec<u8>,
}

/// Outcome of [`HandshakeReader::feed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeProgress {
    /// All input consumed, the frame is not complete yet.
    NeedMore,
    /// The frame is complete. `consumed` octets of the last input belonged
    /// to it; the rest of that input is FPDU stream.
    Frame {
        /// The frame.
        frame: MpaFrame,
        /// Octets of the last `feed` input that belonged to the frame.
        consumed: usize,
    },
}

impl HandshakeReader {
    /// A reader expecting a frame of kind `expected` with private data of at
    /// most `pd_limit` octets (capped at 512).
    pub fn new(expected: FrameKind, pd_limit: usize) -> Self {
        HandshakeReader {
            expected,
            pd_limit: pd_limit.min(MAX_PRIVATE_DATA),
            buf: Vec::new(),
        }
    }

    /// Feeds the next octets. Never consumes past the end of the frame; the
    /// internal buffer never exceeds 20 + `pd_limit` octets. Once the frame
    /// is complete, further calls return it again with `consumed` 0.
    pub fn feed(&mut self, input: &[u8]) -> Result<HandshakeProgress, MpaFrameError> {
        let before = self.buf.len();
        // Take only what can belong to the frame: first the header, then
        // exactly the private data.
        let want = FRAME_HEADER_LEN.saturating_sub(before);
        let take = want.min(input.len());
        self.buf.extend_from_slice(&input[..take]);
        let mut consumed = take;
        match MpaFrame::decode_prefix(&self.buf, self.expected, self.pd_limit)? {
            FrameDecode::Frame { frame, .. } => {
                return Ok(HandshakeProgress::Frame { frame, consumed })
            }
            FrameDecode::NeedMore(n) => {
                if self.buf.len() < FRAME_HEADER_LEN {
                    return Ok(HandshakeProgress::NeedMore);
                }
                let more = n.min(input.len() - consumed);
                self.buf
                    .extend_from_slice(&input[consumed..consumed + more]);
                consumed += more;
            }
        }
        match MpaFrame::decode_prefix(&self.buf, self.expected, self.pd_limit)? {
            FrameDecode::Frame { frame, .. } => Ok(HandshakeProgress::Frame { frame, consumed }),
            FrameDecode::NeedMore(_) => Ok(HandshakeProgress::NeedMore),
        }
    }
}

/// What the two frames of a successful exchange imply for the FPDU phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// CRCs are generated and checked in both directions.
    pub crc: bool,
    /// We must insert Markers in what we send (the peer's frame had M).
    pub send_markers: bool,
    /// The peer inserts Markers in what it sends (our frame had M).
    pub recv_markers: bool,
    /// Our IRD/ORD header, if both frames were enhanced.
    pub local_ird_ord: Option<IrdOrd>,
    /// The peer's IRD/ORD header, if both frames were enhanced.
    pub peer_ird_ord: Option<IrdOrd>,
}

impl Negotiated {
    /// Derives the FPDU-phase parameters from the frame we sent and the one
    /// we received (either may be the Request).
    //= rfc5044#section-7.1.1
    //# When this field is '0' in the MPA Request Frame and the MPA Reply Frame,
    //# CRCs MUST not be checked and need not be generated by either endpoint.
    //# When this bit is '1' in either the MPA Request Frame or MPA Reply Frame,
    //# CRCs MUST be generated and checked by both endpoints.
    //= rfc5044#section-7.1.1
    //# When in a received MPA Request Frame or MPA Reply Frame and the value is
    //# '0', Markers MUST NOT be added to the data stream by that endpoint. When
    //# '1' Markers MUST be added as described in Section 4.3, MPA Markers.
    pub fn from_frames(sent: &MpaFrame, received: &MpaFrame) -> Self {
        let both_enhanced = sent.is_enhanced() && received.is_enhanced();
        Negotiated {
            crc: sent.flags.crc() || received.flags.crc(),
            send_markers: received.flags.markers(),
            recv_markers: sent.flags.markers(),
            local_ird_ord: if both_enhanced { sent.ird_ord() } else { None },
            peer_ird_ord: if both_enhanced {
                received.ird_ord()
            } else {
                None
            },
        }
    }
}
