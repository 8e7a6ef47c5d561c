//! # rpcrdma-iwarp
//!
//! A software iWARP stack, written to interoperate with Linux `siw`, and
//! rpcrdma's default RDMA provider. No `unsafe`.
//!
//! * The wire layers ([`mpa`], [`ddp`], [`rdmap`], [`crc`]) and the queue
//!   pair ([`qp::QueuePair`]: memory table, Send / Write / Read / Terminate,
//!   placement checks) and connection setup ([`cm`]) are sans-IO: no
//!   sockets, no threads, no clock.
//! * [`tcp`] is the adapter: [`tcp::IwarpProvider`] implements
//!   `rpcrdma_proto::provider::Provider` over a non-blocking `TcpStream`
//!   (vectored sends gather straight from registered memory; received
//!   payload is read from the socket straight into the target region), and
//!   [`tcp::Listener`] is the passive side. A server drives every pending
//!   MPA exchange from one thread with [`acceptor::Acceptor`] (`poll(2)`),
//!   under the sans-IO admission policy of [`admission`] (deadline, caps
//!   per source address and in all, oldest-first eviction).
//! * [`manager`] implements the connection-manager contract of
//!   `rpcrdma_proto::provider::cm` ([`manager::IwarpCm`]: connect, listen,
//!   accept or reject with private data), which is how the `rpcrdma`
//!   runtime uses this provider.
//! * [`dissect`] is the observer's view: the two byte streams of a
//!   connection in, MPA frames, Sends (reassembled), RDMA Writes, Reads and
//!   Terminates out, sans-IO and bounded. With the `capture` feature,
//!   `capture` reads pcap / pcapng files, reassembles their TCP
//!   connections and dissects them, and writes a capture of one
//!   connection (`rpcrdma decode --pcap`, `rpcrdma demo --pcap`).
//!
//! ## Layering
//!
//! ```text
//!   ULP (RPC-over-RDMA)            verbs: Send / Write / Read / Invalidate
//!   ─────────────────────────────────────────────────────────────────────
//!   rdmap  RFC 5040   opcodes, Read Request, Terminate, error codes
//!   ddp    RFC 5041   tagged / untagged headers, segmentation,
//!                     placement checks (STag, TO, MSN, MO, QN)
//!   mpa    RFC 5044   connection setup (Request/Reply/Reject, RFC 6581
//!          RFC 6581   IRD/ORD), FPDU framing (length, pad, CRC, markers)
//!   crc               CRC-32C with the wire byte order Linux and
//!                     Wireshark use
//!   ─────────────────────────────────────────────────────────────────────
//!   TCP byte stream (owned by the caller)
//! ```
//!
//! * [`mpa`] turns the TCP byte stream into MPA connection-setup frames
//!   ([`mpa::HandshakeReader`]) and then into FPDUs
//!   ([`mpa::fpdu::FpduReceiver`], [`mpa::fpdu::FpduSender`]). The receive
//!   side never copies: it answers "need more bytes", "here is a complete
//!   FPDU whose ULPDU lies in these ranges of your buffer", or "the stream is
//!   corrupt, send this Terminate".
//! * [`ddp`] decodes and encodes the DDP header at the start of a ULPDU,
//!   plans the segmentation of a message into ULPDUs that fit the MULPDU, and
//!   performs the RFC 5041 placement checks as pure functions.
//! * [`rdmap`] interprets the DDP header's ULP-reserved fields as RDMAP
//!   (opcode, version, Invalidate STag), and codes the Read Request and
//!   Terminate messages.
//! * [`terminate_code`]: [`TerminateCode`] is the table of layer / error
//!   type / error code triples; every check in [`mpa`], [`ddp`] and
//!   [`rdmap`] that fails names the triple to send.
//!
//! ## Example: one RDMA Send, from MPA Request to placed payload
//!
//! ```
//! use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FpduSender, FramingConfig, Received};
//! use rpcrdma_iwarp::mpa::{
//!     FrameKind, HandshakeProgress, HandshakeReader, IrdOrd, MpaFrame, Negotiated,
//!     LINUX_MAX_PRIVATE_DATA,
//! };
//! use rpcrdma_iwarp::rdmap::{self, Opcode, Segment};
//!
//! // The initiator's Request, shaped as Linux requires (rev 2, enhanced, IRD >= 1).
//! let rfc8797 = [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3];
//! let req = MpaFrame::enhanced(FrameKind::Request, false, IrdOrd::new(16, 0), &rfc8797).unwrap();
//! let wire = req.to_vec().unwrap();
//!
//! // The responder reads it from the TCP stream, whatever the segmentation.
//! let mut reader = HandshakeReader::new(FrameKind::Request, LINUX_MAX_PRIVATE_DATA);
//! let mut got = None;
//! for piece in wire.chunks(7) {
//!     if let HandshakeProgress::Frame { frame, .. } = reader.feed(piece).unwrap() {
//!         got = Some(frame);
//!     }
//! }
//! let got = got.unwrap();
//! assert_eq!(got.ird_ord(), Some(IrdOrd::new(16, 0)));
//! assert_eq!(got.ulp_private_data(), &rfc8797);
//! let reply = MpaFrame::enhanced(FrameKind::Reply, false, IrdOrd::new(0, 16), &[]).unwrap();
//! let n = Negotiated::from_frames(&reply, &got);
//!
//! // The responder sends "hello" as an RDMA Send, MSN 1 on queue 0.
//! let hdr = rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap().to_vec();
//! let mut tx = FpduSender::new(FramingConfig { crc: n.crc, markers: n.send_markers });
//! let fpdu = tx.fpdu_to_vec(&[&hdr, b"hello"]).unwrap();
//!
//! // The initiator frames, checks and places it without copying the payload
//! // twice: header from a small prefix, payload from ranges of its buffer.
//! let mut rx = FpduReceiver::new(FramingConfig { crc: n.crc, markers: n.send_markers });
//! let Received::Fpdu(f) = rx.poll(&fpdu).unwrap() else { unreachable!() };
//! let mut prefix = [0u8; Segment::MAX_PREFIX];
//! let k = f.copy_prefix(&fpdu, &mut prefix);
//! let seg = Segment::parse_prefix(&prefix[..k], usize::from(f.ulpdu_len)).unwrap();
//! assert_eq!(seg.control.opcode, Opcode::SEND);
//! let mut placed = Vec::new();
//! for r in f.payload_ranges(seg.payload.start) {
//!     placed.extend_from_slice(&fpdu[r]);
//! }
//! assert_eq!(placed, b"hello");
//! ```
//!
//! ## Which failed check sends which Terminate
//!
//! | layer | check | Terminate (layer / etype / code) | constant |
//! |---|---|---|---|
//! | MPA setup | bad key, PD_Length > 512 (or the configured limit) | LLP / 0 / 0x04 | [`TerminateCode::MPA_INVALID_REQ_REP`] (close the connection) |
//! | MPA setup | enhanced frame (rev 2, S set) with PD_Length < 4 (no IRD/ORD octets) | — | responder: MPA Reject, then close; initiator: close ([`cm::HandshakeError::NoIrdOrd`]) |
//! | MPA setup | initiator: the responder's ORD exceeds the IRD we can offer (`caps.max_ird`) | LLP / 0 / 0x06 | [`TerminateCode::MPA_INSUFFICIENT_IRD`] (then close; [`cm::HandshakeError::InsufficientIrd`]) |
//! | MPA FPDU | CRC mismatch (CRC negotiated) | LLP / 0 / 0x02 | [`TerminateCode::MPA_CRC`] |
//! | MPA FPDU | Marker FPDUPTR not pointing at the FPDU start | LLP / 0 / 0x03 | [`TerminateCode::MPA_MARKER`] |
//! | MPA FPDU | ULPDU_Length above the receiver's limit; ULPDU shorter than its DDP header | LLP / 0 / 0x03 | [`TerminateCode::MPA_MARKER`] |
//! | DDP | DV ≠ 1 (tagged / untagged) | DDP / 1 / 0x04, DDP / 2 / 0x06 | [`TerminateCode::DDP_TAGGED_INVALID_VERSION`], [`TerminateCode::DDP_UNTAGGED_INVALID_VERSION`] |
//! | DDP tagged | STag invalid / not this stream's / TO wrap / out of bounds | DDP / 1 / 0x00, 0x02, 0x03, 0x01 | [`TerminateCode::DDP_TAGGED_INVALID_STAG`] … |
//! | DDP tagged | RDMA Read Response not the one requested: another STag, TO ≠ sink TO + octets received so far, octets past the requested length, L before it (the Read completes with an error) | DDP / 1 / 0x01 | [`TerminateCode::DDP_TAGGED_BASE_BOUNDS`] |
//! | DDP untagged | QN invalid / no buffer for MSN / MSN behind / MO past buffer / too long | DDP / 2 / 0x01 … 0x05 | [`TerminateCode::DDP_UNTAGGED_INVALID_QN`] … |
//! | DDP untagged | MO does not continue the message (first segment not at MO 0, a gap, an overlap, a segment after the last; zero-length segments too) | DDP / 2 / 0x04 | [`TerminateCode::DDP_UNTAGGED_INVALID_MO`] ([`ddp::check_continues`]) |
//! | RDMAP | access right missing on the tagged buffer | RDMAP / 1 / 0x02 | [`TerminateCode::RDMAP_ACCESS_RIGHTS`] |
//! | RDMAP | Read Request source STag checks | RDMAP / 1 / 0x00, 0x03, 0x04, 0x01 | [`TerminateCode::RDMAP_INVALID_STAG`] … |
//! | RDMAP | RV ≠ 1 | RDMAP / 2 / 0x05 | [`TerminateCode::RDMAP_INVALID_VERSION`] |
//! | RDMAP | unassigned opcode, opcode on the wrong buffer model or queue | RDMAP / 2 / 0x06 | [`TerminateCode::RDMAP_UNEXPECTED_OPCODE`] |
//! | RDMAP | Read Request / Terminate not one whole segment of the right size | RDMAP / 2 / 0xff | [`TerminateCode::RDMAP_OPERATION_UNSPECIFIED`] |
//!
//! [`rdmap::TerminateMessage::for_segment`] builds the Terminate header
//! (copying the offending DDP header and, for a Read Request, its RDMAP
//! header) and [`rdmap::encode_terminate`] the whole ULPDU for QN 2.
//!
//! Every decoder is panic-free on arbitrary input, and every encoder writes
//! into a caller buffer after telling the exact length (`encoded_len`).
//!
//! Spec citations sit at the checks they justify, as `//= rfcNNNN#section-X`
//! followed by `//#` lines quoting RFC 5040, 5041, 5044 or 6581 verbatim;
//! `scripts/check-citations` checks every quote against the section's text
//! in `specs/`. Explanations and this crate's own choices (where no RFC
//! sentence applies, e.g. what Linux siw does) are ordinary `//` comments.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

use core::fmt;

pub mod acceptor;
pub mod admission;
#[cfg(feature = "capture")]
pub mod capture;
pub mod cm;
mod congestion;
pub mod crc;
pub mod ddp;
pub mod dissect;
pub mod fuzzing;
pub mod manager;
pub mod mpa;
pub mod qp;
pub mod rdmap;
mod rtr;
pub mod tcp;
pub mod terminate_code;

pub use terminate_code::TerminateCode;

/// Errors of the encoders (never caused by peer input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is shorter than the exact encoded length.
    BufferTooSmall {
        /// Octets needed.
        needed: usize,
        /// Octets available.
        available: usize,
    },
    /// A field value does not fit the wire field (the name says which).
    ValueOutOfRange(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall { needed, available } => {
                write!(
                    f,
                    "output buffer too small: need {needed}, have {available}"
                )
            }
            EncodeError::ValueOutOfRange(field) => write!(f, "value out of range for {field}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Checks that `out` can hold `needed` octets.
pub(crate) fn need(out: &[u8], needed: usize) -> Result<(), EncodeError> {
    if out.len() < needed {
        Err(EncodeError::BufferTooSmall {
            needed,
            available: out.len(),
        })
    } else {
        Ok(())
    }
}

/// Reads a big-endian u16 at `off` (None when out of range).
#[inline]
pub(crate) fn be16(buf: &[u8], off: usize) -> Option<u16> {
    let b = buf.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Reads a big-endian u32 at `off` (None when out of range).
#[inline]
pub(crate) fn be32(buf: &[u8], off: usize) -> Option<u32> {
    let b = buf.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a big-endian u64 at `off` (None when out of range).
#[inline]
pub(crate) fn be64(buf: &[u8], off: usize) -> Option<u64> {
    let b = buf.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}
