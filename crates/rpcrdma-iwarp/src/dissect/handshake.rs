//! The start of each stream: the MPA Request or Reply frame, and the
//! framing (CRC, Markers) the two frames negotiate.

use std::collections::BTreeMap;

use super::{
    error, pending_overflow, Dissector, ErrorKind, FpduState, Item, Items, Side, St, MAX_PENDING,
};
use crate::mpa::fpdu::{FpduReceiver, FramingConfig};
use crate::mpa::{FrameDecode, FrameKind, MpaFrame, KEY_REP, KEY_REQ, MAX_PRIVATE_DATA};

/// Which frame the stream starts with: `Ok(None)` needs more octets.
fn classify(buf: &[u8]) -> Result<Option<FrameKind>, ()> {
    let n = buf.len().min(16);
    let req = buf[..n] == KEY_REQ[..n];
    let rep = buf[..n] == KEY_REP[..n];
    match (req, rep) {
        (true, true) => Ok(None),
        (true, false) => Ok(Some(FrameKind::Request)),
        (false, true) => Ok(Some(FrameKind::Reply)),
        (false, false) => Err(()),
    }
}

impl Dissector {
    /// The stream of `side` is still in its MPA frame: `buf` is all of it
    /// so far.
    pub(super) fn handshake(&mut self, side: Side, buf: Vec<u8>, out: &mut Items) {
        let kind = match classify(&buf) {
            Ok(Some(k)) => k,
            Ok(None) => {
                self.dirs[side.index()].state = St::Handshake(buf);
                return;
            }
            Err(()) => {
                if self.mpa {
                    let detail = "the stream does not start with an MPA Request or Reply key";
                    error(out, side, ErrorKind::MpaBadFrame, detail.into());
                }
                return;
            }
        };
        match MpaFrame::decode_prefix(&buf, kind, MAX_PRIVATE_DATA) {
            Ok(FrameDecode::NeedMore(_)) => self.dirs[side.index()].state = St::Handshake(buf),
            Ok(FrameDecode::Frame { frame, consumed }) => {
                let rest = buf.get(consumed..).unwrap_or(&[]).to_vec();
                self.got_frame(side, frame, rest, out);
            }
            Err(e) => {
                self.mpa = true;
                self.set_initiator(side, kind);
                error(out, side, ErrorKind::MpaBadFrame, e.to_string());
            }
        }
    }

    fn set_initiator(&mut self, side: Side, kind: FrameKind) {
        if self.initiator.is_none() {
            self.initiator = Some(if kind == FrameKind::Request {
                side
            } else {
                side.peer()
            });
        }
    }

    fn got_frame(&mut self, side: Side, frame: MpaFrame, rest: Vec<u8>, out: &mut Items) {
        self.mpa = true;
        self.set_initiator(side, frame.kind);
        out.push((side, Item::Mpa(frame.clone())));
        if let Some(peer) = &self.dirs[side.peer().index()].frame {
            if peer.kind == frame.kind {
                let detail = format!("both directions sent an MPA {:?}", frame.kind);
                error(out, side, ErrorKind::MpaUnexpectedFrame, detail);
                return;
            }
        }
        self.dirs[side.index()].frame = Some(frame);
        self.dirs[side.index()].state = St::Waiting(rest);
        self.try_start(out);
        // Still waiting for the peer's frame: what came with this one is
        // held, within the limit like what comes later.
        let d = &mut self.dirs[side.index()];
        if matches!(&d.state, St::Waiting(p) if p.len() > MAX_PENDING) {
            d.state = St::Closed;
            pending_overflow(out, side);
        }
    }

    /// Starts the FPDU phase once both frames are known.
    fn try_start(&mut self, out: &mut Items) {
        let (Some(f0), Some(f1)) = (&self.dirs[0].frame, &self.dirs[1].frame) else {
            return;
        };
        let (req, rep) = if f0.kind == FrameKind::Request {
            (f0, f1)
        } else {
            (f1, f0)
        };
        if rep.flags.reject() {
            // The connection is refused: nothing more is decoded.
            for dir in &mut self.dirs {
                dir.state = St::Closed;
            }
            return;
        }
        //= rfc5044#section-7.1.1
        //# When this bit is '1' in either the MPA Request Frame
        //# or MPA Reply Frame, CRCs MUST be generated and checked by both
        //# endpoints.
        let crc = req.flags.crc() || rep.flags.crc();
        //= rfc5044#section-7.1.1
        //# When this
        //# bit is '1' in an MPA Request Frame, the Initiator declares that
        //# Markers are REQUIRED in FPDUs sent from the Responder.  When set
        //# to '1' in an MPA Reply Frame, this bit declares that Markers are
        //# REQUIRED in FPDUs sent from the Initiator.
        let markers = [
            if f0.kind == FrameKind::Request {
                rep.flags.markers()
            } else {
                req.flags.markers()
            },
            if f1.kind == FrameKind::Request {
                rep.flags.markers()
            } else {
                req.flags.markers()
            },
        ];
        for (side, m) in Side::BOTH.into_iter().zip(markers) {
            let state = std::mem::replace(&mut self.dirs[side.index()].state, St::Closed);
            match state {
                St::Waiting(pending) => {
                    self.dirs[side.index()].state = St::Fpdu(Box::new(FpduState {
                        rx: FpduReceiver::new(FramingConfig { crc, markers: m }),
                        buf: Vec::new(),
                        sends: BTreeMap::new(),
                        next_msn: [1; 3],
                    }));
                    self.feed(side, &pending, out);
                }
                other => self.dirs[side.index()].state = other,
            }
        }
    }
}
