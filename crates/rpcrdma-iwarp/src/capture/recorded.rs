//! One connection as its initiator recorded it: what
//! [`IwarpProvider::take_capture`](crate::tcp::IwarpProvider::take_capture)
//! hands out once [`set_capture`](crate::tcp::IwarpProvider::set_capture)
//! is on, dissected as it comes and kept whole for a capture file.
//!
//! Recording starts after `connect` sent the MPA Request, so the recorded
//! streams lack it; the MPA Reply may have been read before recording
//! started or after. [`Recorded`] puts back what is missing from the frames
//! the provider kept ([`local_frame`](crate::tcp::IwarpProvider::local_frame),
//! [`peer_frame`](crate::tcp::IwarpProvider::peer_frame)): the initiator's
//! stream ([`Side::A`], [`Direction::Sent`]) starts with its Request, the
//! responder's ([`Side::B`], [`Direction::Received`]) with the Reply,
//! recorded or else put first.

use crate::dissect::{Dissector, Items, Side};
use crate::mpa::KEY_REP;
use crate::tcp::Direction;

/// The recorded streams of one connection and their dissection.
pub struct Recorded {
    dissector: Dissector,
    request: Vec<u8>,
    reply: Vec<u8>,
    /// The Request has been fed to the dissector.
    started: bool,
    /// A received segment has been fed (the Reply is placed by then).
    received: bool,
    /// Every segment fed, in the order recorded, with its time if known.
    segments: Vec<StampedChunk>,
}

/// A recorded chunk with its time (microseconds since the Unix epoch), if
/// known.
pub type StampedChunk = (Option<u64>, Direction, Vec<u8>);

/// The side of the dissector that sent octets of direction `d`.
fn side(d: Direction) -> Side {
    match d {
        Direction::Sent => Side::A,
        Direction::Received => Side::B,
    }
}

impl Recorded {
    /// A connection whose initiator sent the MPA frame `request` and
    /// received `reply` (each whole, as encoded on the wire).
    pub fn new(request: Vec<u8>, reply: Vec<u8>) -> Self {
        Recorded {
            dissector: Dissector::new(),
            request,
            reply,
            started: false,
            received: false,
            segments: Vec::new(),
        }
    }

    /// True when the responder's stream as recorded starts with the MPA
    /// Reply (it may have arrived before recording started).
    fn reply_recorded(&self) -> bool {
        self.segments
            .iter()
            .find(|(_, d, _)| *d == Direction::Received)
            .is_some_and(|(_, _, b)| b.starts_with(&KEY_REP))
    }

    /// Dissects newly recorded segments (in the order recorded) and keeps
    /// them; appends what they complete to `out`, in stream order per side
    /// (the MPA frames included, the first time).
    pub fn feed(&mut self, segs: Vec<(Direction, Vec<u8>)>, out: &mut Items) {
        self.feed_stamped(segs.into_iter().map(|(d, b)| (None, d, b)), out);
    }

    /// [`Recorded::feed`] of segments with the times they were recorded
    /// ([`crate::tcp::Capture::take_timed`]), kept for
    /// [`Recorded::streams_timed`].
    pub fn feed_timed(&mut self, segs: Vec<crate::tcp::TimedChunk>, out: &mut Items) {
        self.feed_stamped(segs.into_iter().map(|(t, d, b)| (Some(t), d, b)), out);
    }

    fn feed_stamped(&mut self, segs: impl Iterator<Item = StampedChunk>, out: &mut Items) {
        if !std::mem::replace(&mut self.started, true) {
            self.dissector.feed(Side::A, &self.request, out);
        }
        for (t, d, data) in segs {
            self.segments.push((t, d, data));
            if d == Direction::Received
                && !std::mem::replace(&mut self.received, true)
                && !self.reply_recorded()
            {
                self.dissector.feed(Side::B, &self.reply, out);
            }
            if let Some((_, _, data)) = self.segments.last() {
                self.dissector.feed(side(d), data, out);
            }
        }
    }

    /// Both streams from their start, as a capture file shows them (for
    /// [`super::write::tcp_session`]): the Request, the Reply unless it
    /// was recorded, what was fed, then `rest` (recorded but not fed).
    pub fn streams(&self, rest: Vec<(Direction, Vec<u8>)>) -> Vec<(Direction, Vec<u8>)> {
        let rest = rest.into_iter().map(|(d, b)| (0, d, b)).collect();
        self.streams_timed(rest)
            .into_iter()
            .map(|(_, d, b)| (d, b))
            .collect()
    }

    /// [`Recorded::streams`] with the time of each segment where it was
    /// recorded ([`Recorded::feed_timed`]; the MPA frames put back have
    /// none), for [`super::write::tcp_session_timed`].
    pub fn streams_timed(&self, rest: Vec<crate::tcp::TimedChunk>) -> Vec<StampedChunk> {
        let mut segs = Vec::with_capacity(self.segments.len() + rest.len() + 2);
        segs.push((None, Direction::Sent, self.request.clone()));
        if !self.reply_recorded() {
            segs.push((None, Direction::Received, self.reply.clone()));
        }
        segs.extend(self.segments.iter().cloned());
        segs.extend(rest.into_iter().map(|(t, d, b)| (Some(t), d, b)));
        segs
    }
}
