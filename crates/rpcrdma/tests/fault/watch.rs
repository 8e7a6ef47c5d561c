//! One direction of a proxied iWARP connection, followed with the crate's
//! own decoders ([`MpaFrame::decode_prefix`] for the MPA Request / Reply,
//! [`FpduReceiver`] for the FPDUs, [`Segment::parse_prefix`] for the
//! DDP/RDMAP header of each): the bytes are cut into whole *units* (the
//! MPA frame, one FPDU each, or raw bytes once the stream is not followed)
//! so that the proxy can forward unit by unit and cut anywhere inside one.
//!
//! The proxy does not check CRCs (the endpoints do); Markers are followed
//! as the two MPA frames negotiated them.

use std::sync::{Arc, Mutex};

use rpcrdma_iwarp::ddp::DdpHeader;
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FramingConfig, Received};
use rpcrdma_iwarp::mpa::{FrameDecode, FrameKind, MpaFrame, Negotiated, MAX_PRIVATE_DATA};
use rpcrdma_iwarp::rdmap::{Opcode, Segment};

/// Client to server (the MPA initiator's direction).
pub const C2S: usize = 0;
/// Server to client.
pub const S2C: usize = 1;

/// A whole unit of one direction's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The MPA Request (client to server) or Reply / Reject.
    Frame,
    /// One FPDU, its segment classified.
    Fpdu(Seg),
    /// Octets not followed (after a Reject, or anything undecodable).
    Raw,
}

/// The DDP/RDMAP segment an FPDU carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// L: the last segment of its message.
    pub last: bool,
    /// MO of an untagged segment (0 for a tagged one).
    pub mo: u32,
    /// Payload octets.
    pub payload: usize,
}

impl Seg {
    /// The last segment of a Send message that carried something (a
    /// zero-length Send is an RTR, not an RPC message).
    pub fn ends_message(&self) -> bool {
        self.opcode.is_send() && self.last && (self.mo > 0 || self.payload > 0)
    }

    /// The first segment of a Send message.
    pub fn starts_message(&self) -> bool {
        self.opcode.is_send() && self.mo == 0
    }
}

/// The MPA frames of both directions (index [`C2S`], [`S2C`]), shared by
/// the two watchers of one connection: each publishes its own before the
/// frame is forwarded, so the other finds it when its FPDUs begin.
pub type Frames = Arc<Mutex<[Option<MpaFrame>; 2]>>;

enum Phase {
    /// Before this direction's MPA frame.
    Frame,
    /// After it, until the other direction's frame is known.
    AwaitPeer,
    /// Following FPDUs.
    Fpdus(FpduReceiver),
    /// Not following.
    Raw,
}

/// One direction's watcher. See the [module docs](self).
pub struct Watch {
    dir: usize,
    frames: Frames,
    phase: Phase,
    buf: Vec<u8>,
    /// Octets at the front of `buf` already forwarded.
    start: usize,
    /// Octets at the front of `buf` already returned as units.
    parsed: usize,
}

impl Watch {
    /// A watcher of direction `dir` ([`C2S`] or [`S2C`]).
    pub fn new(dir: usize, frames: Frames) -> Watch {
        Watch {
            dir,
            frames,
            phase: Phase::Frame,
            buf: Vec::new(),
            start: 0,
            parsed: 0,
        }
    }

    /// Appends octets read from the socket.
    pub fn push(&mut self, data: &[u8]) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.parsed = 0;
        } else if self.start >= 1 << 20 {
            self.buf.drain(..self.start);
            self.parsed -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The octets not forwarded yet: the units returned so far, then the
    /// start of the next one.
    pub fn unforwarded(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// `n` octets of [`Watch::unforwarded`] were forwarded (whole units).
    pub fn forwarded(&mut self, n: usize) {
        self.start += n;
        assert!(self.start <= self.parsed, "forwarded more than whole units");
    }

    /// The next whole unit after those already returned: its length and
    /// kind; `None` until more octets arrive.
    pub fn next_unit(&mut self) -> Option<(usize, Unit)> {
        if self.parsed == self.buf.len() {
            return None;
        }
        if matches!(self.phase, Phase::AwaitPeer) {
            self.phase = self.fpdu_phase()?;
        }
        let rest = &self.buf[self.parsed..];
        let (len, unit, next) = match &mut self.phase {
            Phase::Raw => (rest.len(), Unit::Raw, None),
            Phase::Frame => {
                let kind = if self.dir == C2S {
                    FrameKind::Request
                } else {
                    FrameKind::Reply
                };
                match MpaFrame::decode_prefix(rest, kind, MAX_PRIVATE_DATA) {
                    Ok(FrameDecode::NeedMore(_)) => return None,
                    Ok(FrameDecode::Frame { frame, consumed }) => {
                        let reject = frame.flags.reject();
                        self.frames.lock().unwrap()[self.dir] = Some(frame);
                        let next = if reject { Phase::Raw } else { Phase::AwaitPeer };
                        (consumed, Unit::Frame, Some(next))
                    }
                    Err(_) => (rest.len(), Unit::Raw, Some(Phase::Raw)),
                }
            }
            Phase::Fpdus(rx) => match rx.poll(rest) {
                Ok(Received::Fpdu(f)) => {
                    let mut prefix = [0u8; Segment::MAX_PREFIX];
                    let n = f.copy_prefix(rest, &mut prefix);
                    let unit = Segment::parse_prefix(&prefix[..n], usize::from(f.ulpdu_len))
                        .map_or(Unit::Raw, |s| Unit::Fpdu(seg_of(&s)));
                    (f.consumed, unit, None)
                }
                Ok(Received::NeedMore(_)) => return None,
                Err(_) => (rest.len(), Unit::Raw, Some(Phase::Raw)),
            },
            Phase::AwaitPeer => unreachable!("left above"),
        };
        if let Some(p) = next {
            self.phase = p;
        }
        self.parsed += len;
        Some((len, unit))
    }

    /// The FPDU phase once the other direction's frame is known (`None`
    /// before): Markers as the receiver's frame asked; no CRC check.
    fn fpdu_phase(&self) -> Option<Phase> {
        let frames = self.frames.lock().unwrap();
        let (Some(mine), Some(peer)) = (&frames[self.dir], &frames[1 - self.dir]) else {
            return None;
        };
        if peer.flags.reject() {
            return Some(Phase::Raw);
        }
        let n = Negotiated::from_frames(mine, peer);
        Some(Phase::Fpdus(FpduReceiver::new(FramingConfig {
            crc: false,
            markers: n.send_markers,
        })))
    }
}

fn seg_of(s: &Segment) -> Seg {
    let (last, mo) = match s.ddp {
        DdpHeader::Tagged(t) => (t.last, 0),
        DdpHeader::Untagged(u) => (u.last, u.mo),
    };
    Seg {
        opcode: s.control.opcode,
        last,
        mo,
        payload: s.payload.len(),
    }
}
