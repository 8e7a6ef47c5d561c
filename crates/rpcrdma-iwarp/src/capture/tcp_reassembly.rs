//! Reassembly of one direction of a captured TCP connection into its byte
//! stream, by sequence number.
//!
//! * The stream starts after the SYN's sequence number (ISN + 1), or at the
//!   first segment seen when the capture has no SYN.
//! * Octets already delivered (retransmissions, duplicates, the old part of
//!   an overlapping segment) are dropped.
//! * Segments ahead of the next expected octet are buffered, at most
//!   [`MAX_OOO_BYTES`] octets in [`MAX_OOO_SEGMENTS`] segments; beyond that
//!   the hole is reported as a [`Gap`] (the capture lost data).
//! * A segment more than [`MAX_AHEAD`] octets ahead is ignored as bogus.
//!
//! Sequence numbers wrap modulo 2^32; stream offsets are 64-bit.

use std::collections::BTreeMap;

/// Largest number of out-of-order octets buffered per direction.
pub const MAX_OOO_BYTES: usize = 8 << 20;
/// Largest number of out-of-order segments buffered per direction.
pub const MAX_OOO_SEGMENTS: usize = 8192;
/// A segment further ahead than this is ignored (not a plausible window).
pub const MAX_AHEAD: u32 = 1 << 30;

/// Octets the capture does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Stream offset of the first missing octet.
    pub at: u64,
    /// Stream offset of the next octet the capture has.
    pub resumes: u64,
}

/// Counters for the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments whose octets had all been delivered already.
    pub duplicates: u64,
    /// Segments that arrived ahead of a hole (buffered).
    pub out_of_order: u64,
    /// Segments ignored as implausibly far ahead.
    pub ignored: u64,
}

/// One direction's reassembler.
#[derive(Debug, Default)]
pub struct Reassembler {
    next_seq: Option<u32>,
    delivered: u64,
    ooo: BTreeMap<u64, Vec<u8>>,
    ooo_bytes: usize,
    /// Counters.
    pub stats: Stats,
}

impl Reassembler {
    /// A reassembler that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The initial sequence number of a SYN: the stream starts at `isn + 1`.
    /// Ignored once the stream has started (a retransmitted SYN).
    pub fn syn(&mut self, isn: u32) {
        if self.next_seq.is_none() {
            self.next_seq = Some(isn.wrapping_add(1));
        }
    }

    /// Out-of-order octets buffered now (at most [`MAX_OOO_BYTES`]).
    pub fn buffered(&self) -> usize {
        self.ooo_bytes
    }

    /// Octets delivered so far.
    #[cfg(test)]
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Feeds a segment carrying `payload` at sequence number `seq`; appends
    /// the octets that became contiguous to `out`. An `Err` means the
    /// out-of-order buffer overflowed: the hole will not be filled.
    pub fn push(&mut self, seq: u32, payload: &[u8], out: &mut Vec<u8>) -> Result<(), Gap> {
        if payload.is_empty() {
            return Ok(());
        }
        let next = *self.next_seq.get_or_insert(seq);
        // Distance from the next expected octet, within ±2^31.
        let d = seq.wrapping_sub(next) as i32;
        if d <= 0 {
            let old = d.unsigned_abs() as usize;
            if old >= payload.len() {
                self.stats.duplicates += 1;
                return Ok(());
            }
            self.deliver(&payload[old..], out);
            self.drain(out);
            return Ok(());
        }
        let ahead = d.unsigned_abs();
        if ahead > MAX_AHEAD {
            self.stats.ignored += 1;
            return Ok(());
        }
        self.stats.out_of_order += 1;
        let off = self.delivered + u64::from(ahead);
        let keep = match self.ooo.get(&off) {
            Some(v) => v.len() < payload.len(),
            None => true,
        };
        if keep {
            let old_len = self.ooo.get(&off).map_or(0, Vec::len);
            if self.ooo_bytes - old_len + payload.len() > MAX_OOO_BYTES
                || (old_len == 0 && self.ooo.len() >= MAX_OOO_SEGMENTS)
            {
                return Err(self.gap().unwrap_or(Gap {
                    at: self.delivered,
                    resumes: off,
                }));
            }
            self.ooo_bytes = self.ooo_bytes - old_len + payload.len();
            self.ooo.insert(off, payload.to_vec());
        }
        Ok(())
    }

    fn deliver(&mut self, data: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(data);
        self.delivered += data.len() as u64;
        if let Some(n) = self.next_seq.as_mut() {
            // Wraps modulo 2^32 like the sequence space.
            *n = n.wrapping_add(data.len() as u32);
        }
    }

    fn drain(&mut self, out: &mut Vec<u8>) {
        while let Some((&off, _)) = self.ooo.first_key_value() {
            if off > self.delivered {
                break;
            }
            let Some((_, v)) = self.ooo.pop_first() else {
                break;
            };
            self.ooo_bytes -= v.len();
            // off <= delivered: skip what was delivered already.
            let skip = usize::try_from(self.delivered - off).unwrap_or(usize::MAX);
            if skip < v.len() {
                self.deliver(&v[skip..], out);
            } else {
                self.stats.duplicates += 1;
            }
        }
    }

    /// The first hole, if octets after it are buffered (at the end of the
    /// capture this means data was lost).
    pub fn gap(&self) -> Option<Gap> {
        self.ooo.keys().next().map(|&off| Gap {
            at: self.delivered,
            resumes: off,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(r: &mut Reassembler, segs: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, p) in segs {
            r.push(*seq, p, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn in_order_after_syn() {
        let mut r = Reassembler::new();
        r.syn(99);
        let out = feed(&mut r, &[(100, b"abc"), (103, b"def")]);
        assert_eq!(out, b"abcdef");
        assert_eq!(r.delivered(), 6);
        assert_eq!(r.gap(), None);
    }

    #[test]
    fn out_of_order_duplicates_and_overlap() {
        let mut r = Reassembler::new();
        r.syn(0);
        let out = feed(
            &mut r,
            &[
                (4, b"defg"),  // ahead: buffered
                (1, b"abc"),   // fills the hole
                (1, b"abc"),   // duplicate
                (6, b"fghij"), // overlaps: "hij" new
                (8, b"h"),     // old
            ],
        );
        assert_eq!(out, b"abcdefghij");
        assert_eq!(r.stats.duplicates, 2);
        assert_eq!(r.stats.out_of_order, 1);
    }

    #[test]
    fn buffered_overlapping_segments() {
        let mut r = Reassembler::new();
        r.syn(0);
        let out = feed(&mut r, &[(5, b"efgh"), (3, b"cdef"), (1, b"ab")]);
        assert_eq!(out, b"abcdefgh");
        assert_eq!(r.gap(), None);
    }

    #[test]
    fn no_syn_starts_at_first_segment() {
        let mut r = Reassembler::new();
        let out = feed(&mut r, &[(5000, b"xy"), (5002, b"z")]);
        assert_eq!(out, b"xyz");
    }

    #[test]
    fn sequence_wrap() {
        let mut r = Reassembler::new();
        r.syn(u32::MAX - 2);
        let out = feed(&mut r, &[(1, b"de"), (u32::MAX - 1, b"abc")]);
        assert_eq!(out, b"abcde");
    }

    proptest::proptest! {
        /// Any split of a stream into segments, delivered in any order
        /// within a window, with duplicates and overlapping
        /// retransmissions, reassembles to the stream.
        #[test]
        fn any_order_reassembles(
            data in proptest::collection::vec(proptest::num::u8::ANY, 1..600),
            isn in proptest::num::u32::ANY,
            cuts in proptest::collection::vec(1usize..40, 1..60),
            swaps in proptest::collection::vec((0usize..80, 0usize..4), 0..40),
            dups in proptest::collection::vec((0usize..80, 0usize..20), 0..10),
        ) {
            let mut segs: Vec<(usize, usize)> = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < data.len() {
                let n = cuts[i % cuts.len()].min(data.len() - at);
                segs.push((at, at + n));
                at += n;
                i += 1;
            }
            for (a, d) in swaps {
                let a = a % segs.len();
                let b = (a + d).min(segs.len() - 1);
                segs.swap(a, b);
            }
            for (a, extra) in dups {
                let (s, e) = segs[a % segs.len()];
                // A retransmission that may also cover the next octets.
                let e2 = (e + extra).min(data.len());
                segs.push((s.saturating_sub(extra), e2));
            }
            let mut r = Reassembler::new();
            r.syn(isn);
            let mut out = Vec::new();
            for (s, e) in segs {
                let seq = isn.wrapping_add(1).wrapping_add(s as u32);
                r.push(seq, &data[s..e], &mut out).unwrap();
            }
            proptest::prop_assert_eq!(&out, &data);
            proptest::prop_assert_eq!(r.gap(), None);
            proptest::prop_assert_eq!(r.ooo_bytes, 0);
        }
    }

    #[test]
    fn gap_reported_and_bounded() {
        let mut r = Reassembler::new();
        r.syn(0);
        let out = feed(&mut r, &[(1, b"a"), (10, b"zz")]);
        assert_eq!(out, b"a");
        assert_eq!(r.gap(), Some(Gap { at: 1, resumes: 9 }));
        // Far ahead: ignored.
        let mut sink = Vec::new();
        r.push(2 + MAX_AHEAD + 5, b"q", &mut sink).unwrap();
        assert_eq!(r.stats.ignored, 1);
        // Too many buffered octets: Err.
        let big = vec![0u8; 1 << 20];
        let mut res = Ok(());
        for i in 0..16u32 {
            res = r.push(100 + i * (1 << 20), &big, &mut sink);
            if res.is_err() {
                break;
            }
        }
        assert_eq!(res, Err(Gap { at: 1, resumes: 9 }));
        assert!(r.ooo_bytes <= MAX_OOO_BYTES);
    }
}
