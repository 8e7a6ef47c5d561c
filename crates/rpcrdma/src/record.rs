//! RFC 5531 §11 record marking (ONC RPC over a byte stream), sans-IO.
//!
//! ```text
//! +-+-------------------------------+--------------------...
//! |L|  fragment length (31 bits)    |  fragment data
//! +-+-------------------------------+--------------------...
//! ```
//!
//! A record is one or more fragments; the high bit of each fragment header
//! says whether it is the last fragment of its record.
//!
//! The [`RecordDecoder`] takes octets as they arrive (any split) and yields
//! complete records. The peer controls every length, so it:
//!
//! * checks the record length so far plus the new fragment length against
//!   [`RecordLimits::max_record_size`] **before** any allocation, and never
//!   reserves more than the octets that have actually arrived;
//! * limits the number of fragments per record
//!   ([`RecordLimits::max_fragments`]);
//! * accepts zero-length fragments (a zero-length last fragment ends the
//!   record; a record of no octets at all is delivered as an empty record,
//!   the RPC layer drops it);
//! * reports every violation as a [`RecordError`]: the connection is then
//!   closed, it never panics.

use bytes::{Buf, Bytes, BytesMut};
use core::fmt;

//= rfc5531#section-11
//# When RPC messages are passed on top of a byte stream transport
//# protocol (like TCP), it is necessary to delimit one message from
//# another in order to detect and possibly recover from protocol errors.
//# This is called record marking (RM).  One RPC message fits into one RM
//# record.
//#
//# A record is composed of one or more record fragments.  A record
//# fragment is a four-byte header followed by 0 to (2**31) - 1 bytes of
//# fragment data.  The bytes encode an unsigned binary number; as with
//# XDR integers, the byte order is from highest to lowest.  The number
//# encodes two values -- a boolean that indicates whether the fragment
//# is the last fragment of the record (bit value 1 implies the fragment
//# is the last fragment) and a 31-bit unsigned binary value that is the
//# length in bytes of the fragment's data.

/// The last-fragment bit of a fragment header.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;
/// Largest fragment length a header can carry (2^31 − 1).
pub const MAX_FRAGMENT_LEN: u32 = 0x7fff_ffff;
/// Default [`RecordLimits::max_record_size`]: 16 MiB + 64 KiB (room for a
/// 16 MiB payload and its RPC header).
pub const DEFAULT_MAX_RECORD_SIZE: usize = (16 << 20) + (64 << 10);
/// Default [`RecordLimits::max_fragments`].
pub const DEFAULT_MAX_FRAGMENTS: u32 = 65_536;

/// Named limits of the record-marking decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLimits {
    /// Largest record (sum of its fragment lengths) accepted, in octets.
    /// Default [`DEFAULT_MAX_RECORD_SIZE`].
    pub max_record_size: usize,
    /// Most fragments accepted in one record. Default
    /// [`DEFAULT_MAX_FRAGMENTS`].
    pub max_fragments: u32,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_record_size: DEFAULT_MAX_RECORD_SIZE,
            max_fragments: DEFAULT_MAX_FRAGMENTS,
        }
    }
}

/// A record-marking violation by the peer: the connection must be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The record would exceed `max_record_size`.
    RecordTooLarge {
        /// Record octets before this fragment plus the fragment's length.
        size: u64,
        /// The limit.
        max_record_size: usize,
    },
    /// More fragments in one record than `max_fragments`.
    TooManyFragments {
        /// The limit.
        max_fragments: u32,
    },
    /// The stream ended inside a record.
    TruncatedRecord {
        /// Octets of the unfinished record (including a partial header).
        buffered: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::RecordTooLarge {
                size,
                max_record_size,
            } => write!(
                f,
                "record marking: record of {size} octets exceeds max_record_size = {max_record_size}"
            ),
            RecordError::TooManyFragments { max_fragments } => write!(
                f,
                "record marking: more than max_fragments = {max_fragments} fragments in one record"
            ),
            RecordError::TruncatedRecord { buffered } => write!(
                f,
                "record marking: stream ended inside a record ({buffered} octets buffered)"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// Incremental record-marking decoder.
#[derive(Debug)]
pub struct RecordDecoder {
    limits: RecordLimits,
    /// The record assembled so far (data of completed fragments and of the
    /// current fragment's part that arrived).
    record: BytesMut,
    /// Octets of the current fragment still to come; `None` between
    /// fragments (a header is expected next).
    frag_left: Option<usize>,
    /// The current fragment is the last of the record.
    frag_last: bool,
    /// Fragments started in the current record.
    fragments: u32,
}

impl RecordDecoder {
    /// A decoder with `limits`.
    pub fn new(limits: RecordLimits) -> Self {
        RecordDecoder {
            limits,
            record: BytesMut::new(),
            frag_left: None,
            frag_last: false,
            fragments: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> RecordLimits {
        self.limits
    }

    /// True when no partial record is buffered (a clean point for EOF).
    pub fn is_idle(&self, input: &BytesMut) -> bool {
        input.is_empty() && self.frag_left.is_none() && self.fragments == 0
    }

    /// True between records: no fragment started of a record not yet
    /// returned (octets still in the caller's input are not looked at).
    pub fn at_record_boundary(&self) -> bool {
        self.frag_left.is_none() && self.fragments == 0
    }

    /// Consumes octets from the front of `input` and returns the next
    /// complete record, `Ok(None)` when more input is needed. Call again
    /// after a record is returned: `input` may hold more.
    pub fn decode(&mut self, input: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        loop {
            match self.frag_left {
                None => {
                    if input.len() < 4 {
                        return Ok(None);
                    }
                    //= rfc5531#section-11
                    //# A record fragment is a four-byte header followed by 0 to (2**31) - 1 bytes of
                    //# fragment data.
                    let word = input.get_u32();
                    let len = (word & MAX_FRAGMENT_LEN) as usize;
                    let last = word & LAST_FRAGMENT != 0;
                    if self.fragments >= self.limits.max_fragments {
                        return Err(RecordError::TooManyFragments {
                            max_fragments: self.limits.max_fragments,
                        });
                    }
                    // Checked before anything is allocated for the fragment.
                    let size = self.record.len() as u64 + len as u64;
                    if size > self.limits.max_record_size as u64 {
                        return Err(RecordError::RecordTooLarge {
                            size,
                            max_record_size: self.limits.max_record_size,
                        });
                    }
                    self.fragments += 1;
                    self.frag_left = Some(len);
                    self.frag_last = last;
                }
                Some(left) => {
                    let take = left.min(input.len());
                    if take > 0 {
                        // Grows only by what arrived: a peer announcing a
                        // large fragment and sending nothing costs nothing.
                        if self.record.is_empty() && take == left && self.frag_last {
                            // Whole single-piece record available: no copy.
                            self.record = input.split_to(take);
                        } else {
                            self.record.extend_from_slice(&input[..take]);
                            input.advance(take);
                        }
                    }
                    let left = left - take;
                    if left > 0 {
                        self.frag_left = Some(left);
                        return Ok(None);
                    }
                    self.frag_left = None;
                    if self.frag_last {
                        self.fragments = 0;
                        self.frag_last = false;
                        return Ok(Some(std::mem::take(&mut self.record).freeze()));
                    }
                }
            }
        }
    }

    /// The stream ended: an error if a record was in progress.
    pub fn finish(&self, input: &BytesMut) -> Result<(), RecordError> {
        if self.is_idle(input) {
            Ok(())
        } else {
            Err(RecordError::TruncatedRecord {
                buffered: self.record.len() + input.len(),
            })
        }
    }
}

/// Fragment headers for a record of `len` octets cut into fragments of at
/// most `max_fragment` octets (clamped to 1..=2^31−1): `(header, data_len)`
/// pairs in order. A record of zero octets is one empty last fragment.
pub fn fragment_plan(len: usize, max_fragment: u32) -> Vec<(u32, usize)> {
    let max = max_fragment.clamp(1, MAX_FRAGMENT_LEN) as usize;
    let mut out = Vec::with_capacity(len / max + 1);
    let mut left = len;
    loop {
        let n = left.min(max);
        left -= n;
        let last = if left == 0 { LAST_FRAGMENT } else { 0 };
        out.push((last | n as u32, n));
        if left == 0 {
            return out;
        }
    }
}

/// Encodes a record of `data` in fragments of at most `max_fragment` octets
/// into `out` (headers and data interleaved).
pub fn encode_record(data: &[u8], max_fragment: u32, out: &mut BytesMut) {
    let mut at = 0;
    for (hdr, n) in fragment_plan(data.len(), max_fragment) {
        out.extend_from_slice(&hdr.to_be_bytes());
        out.extend_from_slice(&data[at..at + n]);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec() -> RecordDecoder {
        RecordDecoder::new(RecordLimits::default())
    }

    fn feed_all(d: &mut RecordDecoder, chunks: &[&[u8]]) -> Result<Vec<Bytes>, RecordError> {
        let mut input = BytesMut::new();
        let mut out = Vec::new();
        for c in chunks {
            input.extend_from_slice(c);
            while let Some(r) = d.decode(&mut input)? {
                out.push(r);
            }
        }
        d.finish(&input)?;
        Ok(out)
    }

    //= rfc5531#section-11
    //# The number
    //# encodes two values -- a boolean that indicates whether the fragment
    //# is the last fragment of the record (bit value 1 implies the fragment
    //# is the last fragment) and a 31-bit unsigned binary value that is the
    //# length in bytes of the fragment's data.
    #[test]
    fn hand_checked_single_and_multi_fragment() {
        // One record "abcd" in one last fragment: 0x80000004.
        let wire = [0x80, 0, 0, 4, b'a', b'b', b'c', b'd'];
        let recs = feed_all(&mut dec(), &[&wire]).unwrap();
        assert_eq!(recs, vec![Bytes::from_static(b"abcd")]);
        // "abcdef" as 2 + 0 + 4: 0x00000002 "ab", 0x00000000, 0x80000004 "cdef".
        let wire = [
            0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0x80, 0, 0, 4, b'c', b'd', b'e', b'f',
        ];
        let recs = feed_all(&mut dec(), &[&wire]).unwrap();
        assert_eq!(recs, vec![Bytes::from_static(b"abcdef")]);
        let mut out = BytesMut::new();
        encode_record(b"abcdef", 4, &mut out);
        assert_eq!(
            &out[..],
            &[0, 0, 0, 4, b'a', b'b', b'c', b'd', 0x80, 0, 0, 2, b'e', b'f']
        );
    }

    #[test]
    fn split_at_every_point() {
        // Two records: one of 3 fragments, one single; then an empty record.
        let mut wire = BytesMut::new();
        encode_record(b"hello world, fragments!", 5, &mut wire);
        encode_record(b"second", 100, &mut wire);
        encode_record(b"", 100, &mut wire);
        let expect = vec![
            Bytes::from_static(b"hello world, fragments!"),
            Bytes::from_static(b"second"),
            Bytes::new(),
        ];
        assert_eq!(feed_all(&mut dec(), &[&wire]).unwrap(), expect);
        for i in 0..=wire.len() {
            let (a, b) = wire.split_at(i);
            assert_eq!(feed_all(&mut dec(), &[a, b]).unwrap(), expect, "split {i}");
            // and one byte at a time after the split
            let mut chunks: Vec<&[u8]> = vec![a];
            chunks.extend(b.chunks(1));
            assert_eq!(feed_all(&mut dec(), &chunks).unwrap(), expect, "split {i}");
        }
    }

    #[test]
    fn zero_length_fragments() {
        // Zero-length last fragment alone: an empty record.
        let recs = feed_all(&mut dec(), &[&[0x80, 0, 0, 0]]).unwrap();
        assert_eq!(recs, vec![Bytes::new()]);
        // Data then a zero-length last fragment closes the record.
        let recs = feed_all(&mut dec(), &[&[0, 0, 0, 1, 7, 0x80, 0, 0, 0]]).unwrap();
        assert_eq!(recs, vec![Bytes::from_static(&[7])]);
        // Endless zero-length non-last fragments hit max_fragments.
        let mut d = RecordDecoder::new(RecordLimits {
            max_fragments: 3,
            ..RecordLimits::default()
        });
        let e = feed_all(&mut d, &[&[0u8; 16]]).unwrap_err();
        assert_eq!(e, RecordError::TooManyFragments { max_fragments: 3 });
    }

    #[test]
    fn over_limit_refused_before_allocation() {
        let mut d = RecordDecoder::new(RecordLimits {
            max_record_size: 8,
            ..RecordLimits::default()
        });
        // 0xffffffff: last fragment of 2^31-1 octets.
        let mut input = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert_eq!(
            d.decode(&mut input).unwrap_err(),
            RecordError::RecordTooLarge {
                size: 0x7fff_ffff,
                max_record_size: 8
            }
        );
        // The limit counts the whole record: 6 + 3 > 8.
        let mut d = RecordDecoder::new(RecordLimits {
            max_record_size: 8,
            ..RecordLimits::default()
        });
        let e = feed_all(&mut d, &[&[0, 0, 0, 6, 1, 2, 3, 4, 5, 6, 0x80, 0, 0, 3]]).unwrap_err();
        assert_eq!(
            e,
            RecordError::RecordTooLarge {
                size: 9,
                max_record_size: 8
            }
        );
        // Exactly at the limit is fine.
        let mut d = RecordDecoder::new(RecordLimits {
            max_record_size: 8,
            ..RecordLimits::default()
        });
        let r = feed_all(&mut d, &[&[0x80, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]]).unwrap();
        assert_eq!(r[0].len(), 8);
        // A huge announced fragment that never arrives allocates nothing.
        let mut d = dec();
        let mut input = BytesMut::from(&[0x80, 0xff, 0x00, 0x00, 1][..]);
        assert_eq!(d.decode(&mut input).unwrap(), None);
        assert!(d.record.capacity() < 1024);
    }

    #[test]
    fn truncated_stream_is_an_error() {
        for cut in 1..8 {
            let wire = [0x80, 0, 0, 4, b'a', b'b', b'c', b'd'];
            let e = feed_all(&mut dec(), &[&wire[..cut]]).unwrap_err();
            assert!(
                matches!(e, RecordError::TruncatedRecord { .. }),
                "cut {cut}"
            );
        }
    }

    proptest::proptest! {
        /// Records of random sizes in random fragment sizes, fed in random
        /// chunks, come out as they went in.
        #[test]
        fn round_trip_any_fragmentation_and_chunking(
            records in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), 0..6),
            max_fragment in 1u32..80,
            chunk in 1usize..50,
        ) {
            let mut wire = BytesMut::new();
            let mut expect_len = 0;
            for r in &records {
                encode_record(r, max_fragment, &mut wire);
                let frags = fragment_plan(r.len(), max_fragment).len();
                expect_len += r.len() + 4 * frags;
                proptest::prop_assert_eq!(frags, r.len().div_ceil(max_fragment as usize).max(1));
            }
            proptest::prop_assert_eq!(wire.len(), expect_len);
            let chunks: Vec<&[u8]> = wire.chunks(chunk).collect();
            let got = feed_all(&mut dec(), &chunks).unwrap();
            let want: Vec<Bytes> = records.iter().map(|r| Bytes::copy_from_slice(r)).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn fragment_plan_shapes() {
        assert_eq!(fragment_plan(0, 10), vec![(0x8000_0000, 0)]);
        assert_eq!(fragment_plan(10, 10), vec![(0x8000_000a, 10)]);
        assert_eq!(fragment_plan(11, 10), vec![(10, 10), (0x8000_0001, 1)]);
        assert_eq!(fragment_plan(2, 0), vec![(1, 1), (0x8000_0001, 1)]);
    }
}
