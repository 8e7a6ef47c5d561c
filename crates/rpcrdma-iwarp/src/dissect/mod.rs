//! A sans-IO dissector of one iWARP connection as an observer sees it:
//! the octets each end sent, in stream order, in; decoded items out.
//!
//! Each of the two byte streams ([`Side::A`], [`Side::B`]) starts with an
//! MPA Request or Reply frame (RFC 5044, RFC 6581); once both frames are
//! known the streams are FPDUs with the negotiated CRC and Markers (Markers
//! counted from the first octet after the MPA frame, RFC 5044 §4.3), each
//! carrying a DDP (RFC 5041) segment with its RDMAP (RFC 5040) header.
//! Untagged Sends are reassembled from their DDP segments (by MSN, MO and
//! the L bit) and handed out whole ([`Item::Send`]); what their payload
//! holds (an RPC-over-RDMA header, say) is for the caller to decode.
//! Tagged segments (RDMA Write, Read Response) are handed out one by one,
//! without their payload.
//!
//! [`Dissector::feed`] takes newly received octets of one stream and
//! appends what they complete, in stream order, each with the side that
//! sent it. [`Dissector::interrupt`] tells that a stream lost octets (the
//! capture has a hole, say): that stream is not decoded further.
//! [`Dissector::end`] reports what the end of a stream leaves incomplete.
//! Nothing is reported about a connection before one of its streams has
//! shown an MPA key ([`Dissector::is_mpa`]): before that it may be any
//! TCP connection.
//!
//! | [`ErrorKind`] | meaning | then |
//! |---|---|---|
//! | `mpa-bad-frame` | no MPA key, or PD_Length over 512 | stream skipped |
//! | `mpa-unexpected-frame` | both sides sent a Request (or a Reply) | stream skipped |
//! | `mpa-crc`, `mpa-marker`, `mpa-length` | FPDU CRC, Marker or ULPDU_Length check failed | stream skipped |
//! | `ddp-rdmap` | DDP / RDMAP header rejected | that segment skipped |
//! | `ddp-reassembly` | Send segment at the wrong MO, opcode change, too long, too many in progress | that message dropped |
//! | `ddp-msn` | untagged message whose MSN is not the next on its queue | informative |
//! | `buffer-limit` | too much FPDU data before the peer's MPA frame | stream skipped |
//! | `incomplete-mpa-frame`, `incomplete-fpdu`, `incomplete-send` | the stream ends inside one | end of stream |
//! | `no-peer-mpa-frame` | FPDU data, but the peer's MPA frame never came | end of stream |
//! | `tcp-gap`, `capture-truncated` | given by the caller to [`Dissector::interrupt`] | stream skipped |
//!
//! Every octet is hostile: no panic, and what a stream holds between calls
//! is bounded by named limits ([`MAX_PENDING`] octets before the peer's
//! frame, one FPDU, [`MAX_PARTIAL_SENDS`] Sends of at most
//! [`MAX_SEND_LEN`] octets; [`Dissector::buffered`] tells).
//!
//! `rpcrdma decode --pcap` (the `capture` module) and `rpcrdma demo` both
//! list what this dissector finds.

mod fpdus;
mod handshake;

use std::collections::BTreeMap;
use std::fmt;

use crate::mpa::fpdu::FpduReceiver;
use crate::mpa::MpaFrame;
use crate::rdmap::{Opcode, ReadRequest};
use crate::TerminateCode;

/// Largest FPDU-stream prefix buffered while waiting for the peer's MPA
/// frame.
pub const MAX_PENDING: usize = 4 << 20;
/// Largest reassembled Send message.
pub const MAX_SEND_LEN: usize = 1 << 20;
/// Largest number of Send messages being reassembled at once per stream.
pub const MAX_PARTIAL_SENDS: usize = 64;

/// One of the two ends of a connection, and the byte stream it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The first end (index 0).
    A,
    /// The second end (index 1).
    B,
}

impl Side {
    /// Both sides, A first.
    pub const BOTH: [Side; 2] = [Side::A, Side::B];

    /// 0 for A, 1 for B.
    pub fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    /// The other end.
    pub fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// A whole untagged Send message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendMessage {
    /// `SEND`, `SEND_INVALIDATE`, `SEND_SE` or `SEND_SE_INVALIDATE`.
    pub opcode: Opcode,
    /// The STag to invalidate (the Invalidate variants).
    pub inv_stag: Option<u32>,
    /// Message Sequence Number (queue 0).
    pub msn: u32,
    /// DDP segments it came in.
    pub segments: u32,
    /// The message.
    pub payload: Vec<u8>,
}

/// What the dissector found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The MPA Request or Reply frame a stream starts with.
    Mpa(MpaFrame),
    /// A reassembled Send.
    Send(SendMessage),
    /// One DDP segment of an RDMA Write or Read Response (only the first
    /// [`TAGGED_HEAD_LEN`] octets of the payload are kept).
    Tagged {
        /// `WRITE` or `READ_RESPONSE`.
        opcode: Opcode,
        /// The sink STag.
        stag: u32,
        /// The Tagged Offset.
        to: u64,
        /// Payload octets.
        len: usize,
        /// The L bit.
        last: bool,
        /// The first octets of the payload (at most [`TAGGED_HEAD_LEN`]):
        /// enough to peek at an RPC call carried in a position-zero Read
        /// chunk ([`rpcrdma_proto::wire::rpc::RpcPeek`]).
        head: Vec<u8>,
    },
    /// An RDMA Read Request.
    ReadRequest {
        /// Message Sequence Number (queue 1).
        msn: u32,
        /// The request.
        request: ReadRequest,
    },
    /// A Terminate message.
    Terminate {
        /// Message Sequence Number (queue 2).
        msn: u32,
        /// Layer, error type and code.
        code: TerminateCode,
    },
    /// Something wrong with the stream.
    Error(Error),
}

impl Item {
    /// Stable name: `mpa-request`, `mpa-reply`, `send`, `write`,
    /// `read-response`, `read-request`, `terminate` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            Item::Mpa(f) if f.kind == crate::mpa::FrameKind::Request => "mpa-request",
            Item::Mpa(_) => "mpa-reply",
            Item::Send(_) => "send",
            Item::Tagged { opcode, .. } if *opcode == Opcode::WRITE => "write",
            Item::Tagged { .. } => "read-response",
            Item::ReadRequest { .. } => "read-request",
            Item::Terminate { .. } => "terminate",
            Item::Error(_) => "error",
        }
    }
}

/// Octets of a tagged segment's payload an [`Item::Tagged`] keeps: the
/// words of an RPC call header up to its procedure number, and a little
/// more.
pub const TAGGED_HEAD_LEN: usize = 32;

/// What is wrong; [`ErrorKind::name`] is the stable name (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// `mpa-bad-frame`.
    MpaBadFrame,
    /// `mpa-unexpected-frame`.
    MpaUnexpectedFrame,
    /// `mpa-crc`.
    MpaCrc,
    /// `mpa-marker`.
    MpaMarker,
    /// `mpa-length`.
    MpaLength,
    /// `ddp-rdmap`.
    DdpRdmap,
    /// `ddp-reassembly`.
    DdpReassembly,
    /// `ddp-msn`.
    DdpMsn,
    /// `buffer-limit`.
    BufferLimit,
    /// `incomplete-mpa-frame`.
    IncompleteMpaFrame,
    /// `incomplete-fpdu`.
    IncompleteFpdu,
    /// `incomplete-send`.
    IncompleteSend,
    /// `no-peer-mpa-frame`.
    NoPeerMpaFrame,
    /// `tcp-gap` (from the caller).
    TcpGap,
    /// `capture-truncated` (from the caller).
    CaptureTruncated,
}

impl ErrorKind {
    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::MpaBadFrame => "mpa-bad-frame",
            ErrorKind::MpaUnexpectedFrame => "mpa-unexpected-frame",
            ErrorKind::MpaCrc => "mpa-crc",
            ErrorKind::MpaMarker => "mpa-marker",
            ErrorKind::MpaLength => "mpa-length",
            ErrorKind::DdpRdmap => "ddp-rdmap",
            ErrorKind::DdpReassembly => "ddp-reassembly",
            ErrorKind::DdpMsn => "ddp-msn",
            ErrorKind::BufferLimit => "buffer-limit",
            ErrorKind::IncompleteMpaFrame => "incomplete-mpa-frame",
            ErrorKind::IncompleteFpdu => "incomplete-fpdu",
            ErrorKind::IncompleteSend => "incomplete-send",
            ErrorKind::NoPeerMpaFrame => "no-peer-mpa-frame",
            ErrorKind::TcpGap => "tcp-gap",
            ErrorKind::CaptureTruncated => "capture-truncated",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An [`Item::Error`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What is wrong.
    pub kind: ErrorKind,
    /// Human readable explanation.
    pub detail: String,
    /// The Terminate a peer would send (framing and DDP / RDMAP errors).
    pub terminate: Option<TerminateCode>,
    /// Stream offset of the FPDU at fault (framing errors).
    pub stream_offset: Option<u64>,
}

impl Error {
    fn new(kind: ErrorKind, detail: String) -> Self {
        Error {
            kind,
            detail,
            terminate: None,
            stream_offset: None,
        }
    }
}

/// Items found, each with the side that sent it.
pub type Items = Vec<(Side, Item)>;

enum St {
    /// Waiting for the MPA Request or Reply at the start of the stream.
    Handshake(Vec<u8>),
    /// The frame is parsed; octets after it wait for the peer's frame.
    Waiting(Vec<u8>),
    /// Full operation: FPDUs.
    Fpdu(Box<FpduState>),
    /// Not decoded further (not MPA, rejected, or after an error).
    Closed,
}

struct Partial {
    opcode: Opcode,
    inv_stag: Option<u32>,
    data: Vec<u8>,
    segments: u32,
}

struct FpduState {
    rx: FpduReceiver,
    buf: Vec<u8>,
    sends: BTreeMap<u32, Partial>,
    /// The MSN of the next message on queues 0, 1 and 2.
    next_msn: [u32; 3],
}

struct Stream {
    state: St,
    frame: Option<MpaFrame>,
}

impl Stream {
    /// Stream octets held (waiting for a frame, an FPDU or the rest of a
    /// Send).
    fn buffered(&self) -> usize {
        match &self.state {
            St::Handshake(b) | St::Waiting(b) => b.len(),
            St::Fpdu(fs) => fs.buf.len() + fs.sends.values().map(|p| p.data.len()).sum::<usize>(),
            St::Closed => 0,
        }
    }
}

/// The dissector of one connection; see the module docs.
pub struct Dissector {
    dirs: [Stream; 2],
    mpa: bool,
    initiator: Option<Side>,
}

impl Default for Dissector {
    fn default() -> Self {
        Self::new()
    }
}

impl Dissector {
    /// A dissector that has seen nothing of either stream.
    pub fn new() -> Self {
        let stream = || Stream {
            state: St::Handshake(Vec::new()),
            frame: None,
        };
        Dissector {
            dirs: [stream(), stream()],
            mpa: false,
            initiator: None,
        }
    }

    /// True once a stream has started with an MPA frame key.
    pub fn is_mpa(&self) -> bool {
        self.mpa
    }

    /// The side that sent the MPA Request, once a frame tells.
    pub fn initiator(&self) -> Option<Side> {
        self.initiator
    }

    /// True when the stream of `side` is not decoded any more.
    pub fn is_closed(&self, side: Side) -> bool {
        matches!(self.dirs[side.index()].state, St::Closed)
    }

    /// Stream octets held now, both sides.
    pub fn buffered(&self) -> usize {
        self.dirs.iter().map(Stream::buffered).sum()
    }

    /// Feeds octets `side` sent, following those fed before.
    pub fn feed(&mut self, side: Side, bytes: &[u8], out: &mut Items) {
        if bytes.is_empty() {
            return;
        }
        let state = std::mem::replace(&mut self.dirs[side.index()].state, St::Closed);
        match state {
            St::Handshake(mut buf) => {
                buf.extend_from_slice(bytes);
                self.handshake(side, buf, out);
            }
            St::Waiting(mut p) => {
                if p.len().saturating_add(bytes.len()) > MAX_PENDING {
                    pending_overflow(out, side);
                    return;
                }
                p.extend_from_slice(bytes);
                self.dirs[side.index()].state = St::Waiting(p);
            }
            St::Fpdu(mut fs) => {
                fs.buf.extend_from_slice(bytes);
                if fpdus::run(side, &mut fs, out) {
                    self.dirs[side.index()].state = St::Fpdu(fs);
                }
            }
            St::Closed => {}
        }
    }

    /// The stream of `side` lost octets (`kind` and `detail` say how): it
    /// is not decoded further. Reported once, and only for an MPA
    /// connection.
    pub fn interrupt(&mut self, side: Side, kind: ErrorKind, detail: String, out: &mut Items) {
        if self.is_closed(side) {
            return;
        }
        self.dirs[side.index()].state = St::Closed;
        if self.mpa {
            error(out, side, kind, detail);
        }
    }

    /// The stream of `side` ends: reports what it leaves incomplete.
    pub fn end(&mut self, side: Side, out: &mut Items) {
        let state = std::mem::replace(&mut self.dirs[side.index()].state, St::Closed);
        if !self.mpa {
            return;
        }
        match state {
            St::Handshake(buf) if !buf.is_empty() => {
                let detail = format!(
                    "the capture ends inside the MPA frame ({} octets)",
                    buf.len()
                );
                error(out, side, ErrorKind::IncompleteMpaFrame, detail);
            }
            St::Waiting(p) if !p.is_empty() => {
                let detail = format!(
                    "{} octets after the MPA frame not decoded: the peer's MPA frame is not in the capture",
                    p.len()
                );
                error(out, side, ErrorKind::NoPeerMpaFrame, detail);
            }
            St::Fpdu(fs) => {
                if !fs.buf.is_empty() {
                    let detail = format!(
                        "the capture ends inside an FPDU ({} octets buffered at stream offset {})",
                        fs.buf.len(),
                        fs.rx.stream_position()
                    );
                    error(out, side, ErrorKind::IncompleteFpdu, detail);
                }
                for (msn, p) in &fs.sends {
                    let detail = format!(
                        "the capture ends before the last segment of Send MSN {msn} ({} octets in {} segments)",
                        p.data.len(),
                        p.segments
                    );
                    error(out, side, ErrorKind::IncompleteSend, detail);
                }
            }
            _ => {}
        }
    }
}

/// Reports more than [`MAX_PENDING`] octets waiting for the peer's frame.
fn pending_overflow(out: &mut Items, side: Side) {
    let detail =
        format!("more than {MAX_PENDING} octets sent before the peer's MPA frame was seen");
    error(out, side, ErrorKind::BufferLimit, detail);
}

/// Reports an error of the stream of `side`.
fn error(out: &mut Items, side: Side, kind: ErrorKind, detail: String) {
    out.push((side, Item::Error(Error::new(kind, detail))));
}
