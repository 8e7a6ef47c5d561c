//! Chunks and chunk lists: identical on the wire in version 1 (RFC 8166
//! §4.2) and version 2 (draft-cel-nfsv4-rpcrdma-version-two-09 §3.3).
//!
//! ```text
//! struct xdr_rdma_segment { uint32 handle; uint32 length; uint64 offset; };
//! struct xdr_read_chunk   { uint32 position; struct xdr_rdma_segment target; };
//! struct xdr_read_list    { struct xdr_read_chunk entry; struct xdr_read_list *next; };
//! struct xdr_write_chunk  { struct xdr_rdma_segment target<>; };
//! struct xdr_write_list   { struct xdr_write_chunk entry; struct xdr_write_list *next; };
//! ```
//!
//! The three lists (`rdma_reads`, `rdma_writes`, `rdma_reply`) are XDR
//! optional-data lists; every discriminant must be 0 or 1, and every count is
//! checked against [`Limits`] before anything is allocated.
//!
//! The lists are small vectors ([`ReadList`], [`WriteList`],
//! [`SegmentList`]) that keep one entry inline: the headers a Linux client
//! or this crate's engine sends most (an NFS READ's Write list of one chunk
//! of one segment, an NFS WRITE's one Read segment, a Reply chunk of one
//! segment) decode without touching the heap. Longer lists spill to the
//! heap, after their counts were checked against the limits.

use core::fmt;

use smallvec::SmallVec;

use crate::xdr::{be_u32_at, be_u64_at, DecodeErrorKind, EncodeError, Reader, Writer, XdrEncode};
use crate::{DecodeError, Limits};

/// The segments of a Write chunk or Reply chunk (one kept inline).
/// Build one from a `Vec` with `.into()`; read it as a slice.
pub type SegmentList = SmallVec<[Segment; 1]>;
/// The Read list (one read segment kept inline).
pub type ReadList = SmallVec<[ReadSegment; 1]>;
/// The Write list (one Write chunk kept inline).
pub type WriteList = SmallVec<[WriteChunk; 1]>;

/// Encoded size of a segment (handle, length, offset).
pub const SEGMENT_LEN: usize = 16;
/// Encoded size of a read segment (position + segment).
pub const READ_SEGMENT_LEN: usize = 20;

/// An RDMA segment: a registered memory region of the requester, named by
/// its handle (STag / R_key), length and offset (tagged offset / address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Segment {
    /// `rdma_handle`: the STag / R_key.
    pub handle: u32,
    /// `rdma_length`: octets.
    pub length: u32,
    /// `rdma_offset`: the tagged offset / virtual address.
    pub offset: u64,
}

impl Segment {
    /// A segment.
    pub const fn new(handle: u32, length: u32, offset: u64) -> Self {
        Segment {
            handle,
            length,
            offset,
        }
    }

    /// Decodes the 16 octets of a segment (one length check), refusing
    /// `offset + length > 2^64`.
    #[inline]
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let at = r.position();
        let Some(b) = r.rest().first_chunk::<SEGMENT_LEN>() else {
            return Err(Self::truncated(r));
        };
        r.skip(SEGMENT_LEN);
        let s = Segment::from_bytes(b);
        if s.offset.checked_add(s.length as u64).is_none() {
            return Err(overflow_error(at));
        }
        Ok(s)
    }

    /// The error of a segment cut short, at the word that is cut (as
    /// reading the fields one by one reports it).
    #[cold]
    #[inline(never)]
    fn truncated(r: &Reader<'_>) -> DecodeError {
        let mut r = r.clone();
        let at = r.position();
        r.u32("rdma_handle")
            .and_then(|_| r.u32("rdma_length"))
            .and_then(|_| r.u64("rdma_offset"))
            .err()
            .unwrap_or_else(|| {
                DecodeError::new(
                    DecodeErrorKind::Truncated {
                        needed: SEGMENT_LEN,
                        available: 0,
                    },
                    at,
                    "rdma_segment",
                )
            })
    }

    #[inline]
    fn from_bytes(b: &[u8; SEGMENT_LEN]) -> Self {
        Segment {
            handle: be_u32_at(b, 0),
            length: be_u32_at(b, 4),
            offset: be_u64_at(b, 8),
        }
    }

    /// The 16 octets of the segment's XDR.
    #[inline]
    pub fn to_bytes(&self) -> [u8; SEGMENT_LEN] {
        let [h0, h1, h2, h3] = self.handle.to_be_bytes();
        let [l0, l1, l2, l3] = self.length.to_be_bytes();
        let [o0, o1, o2, o3, o4, o5, o6, o7] = self.offset.to_be_bytes();
        [
            h0, h1, h2, h3, l0, l1, l2, l3, o0, o1, o2, o3, o4, o5, o6, o7,
        ]
    }

    #[inline]
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.array(self.to_bytes())
    }
}

#[cold]
#[inline(never)]
fn overflow_error(at: usize) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::Overflow("rdma_offset + rdma_length"),
        at,
        "rdma_segment",
    )
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "handle 0x{:08x} length {} offset 0x{:016x}",
            self.handle, self.length, self.offset
        )
    }
}

/// One entry of a Read list: a segment and the XDR position in the RPC
/// message where its data belongs. Read segments with the same position form
/// one Read chunk; position zero denotes the Position-Zero Read chunk that
/// carries a whole Long Call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReadSegment {
    /// `rdma_position`: XDR position (octet offset) in the RPC message.
    pub position: u32,
    /// The segment.
    pub target: Segment,
}

impl ReadSegment {
    /// A read segment.
    pub const fn new(position: u32, target: Segment) -> Self {
        ReadSegment { position, target }
    }
}

/// A Write chunk (or the Reply chunk): a counted array of segments.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct WriteChunk {
    /// The segments, in order (one kept inline).
    pub segments: SegmentList,
}

impl WriteChunk {
    /// A chunk of these segments.
    pub fn new(segments: Vec<Segment>) -> Self {
        WriteChunk {
            segments: SegmentList::from_vec(segments),
        }
    }

    /// A chunk of one segment (no heap allocation).
    pub fn single(segment: Segment) -> Self {
        WriteChunk {
            segments: SegmentList::from_buf([segment]),
        }
    }

    /// A chunk of these segments, from any list of them (a slice, an
    /// array, a [`SegmentList`]).
    pub fn from_segments(segments: impl Into<SegmentList>) -> Self {
        WriteChunk {
            segments: segments.into(),
        }
    }

    /// Total octets the chunk can hold. Decoding guarantees it fits a `u32`.
    pub fn total_len(&self) -> u64 {
        self.segments.iter().map(|s| s.length as u64).sum()
    }

    /// Encoded size: count word plus segments.
    #[inline]
    pub fn encoded_len(&self) -> usize {
        4 + SEGMENT_LEN * self.segments.len()
    }

    fn read(
        r: &mut Reader<'_>,
        limits: &Limits,
        budget: &mut SegmentBudget,
        field: &'static str,
    ) -> Result<Self, DecodeError> {
        let at = r.position();
        let n = r.count(
            limits.max_segments_per_chunk,
            "max_segments_per_chunk",
            SEGMENT_LEN,
            field,
        )?;
        budget.take(n, at, field)?;
        // `n` is within the limits and the input: only now may it size a
        // heap allocation (none for one segment).
        let mut segments = SegmentList::with_capacity(n as usize);
        let mut total: u32 = 0;
        for _ in 0..n {
            let s = Segment::read(r)?;
            total = match total.checked_add(s.length) {
                Some(t) => t,
                None => return Err(chunk_overflow_error(at, field)),
            };
            segments.push(s);
        }
        Ok(WriteChunk { segments })
    }

    #[inline]
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        let n = u32::try_from(self.segments.len()).map_err(|_| EncodeError::TooLong("chunk"))?;
        w.u32(n)?;
        for s in &self.segments {
            s.write(w)?;
        }
        Ok(())
    }
}

#[cold]
#[inline(never)]
fn chunk_overflow_error(at: usize, field: &'static str) -> DecodeError {
    DecodeError::new(DecodeErrorKind::Overflow("chunk length"), at, field)
}

/// Counts segments across all lists of one header against
/// [`Limits::max_header_segments`].
#[derive(Debug)]
struct SegmentBudget {
    left: u32,
    max: u32,
}

impl SegmentBudget {
    fn new(limits: &Limits) -> Self {
        SegmentBudget {
            left: limits.max_header_segments,
            max: limits.max_header_segments,
        }
    }

    #[inline]
    fn take(&mut self, n: u32, at: usize, field: &'static str) -> Result<(), DecodeError> {
        if n > self.left {
            return Err(self.exceeded(n, at, field));
        }
        self.left -= n;
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn exceeded(&self, n: u32, at: usize, field: &'static str) -> DecodeError {
        DecodeError::new(
            DecodeErrorKind::LimitExceeded {
                limit: "max_header_segments",
                max: self.max as u64,
                value: (self.max - self.left) as u64 + n as u64,
            },
            at,
            field,
        )
    }
}

/// A list grew past its limit (one more entry than `len`).
#[cold]
#[inline(never)]
fn list_limit_error(
    limit: &'static str,
    max: u32,
    len: usize,
    at: usize,
    field: &'static str,
) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::LimitExceeded {
            limit,
            max: max as u64,
            value: len as u64 + 1,
        },
        at,
        field,
    )
}

/// The three chunk lists of an RDMA_MSG / RDMA_NOMSG (v1) or RDMA2_MSG /
/// RDMA2_NOMSG (v2, after `rdma_inv_handle`) header.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ChunkLists {
    /// `rdma_reads`: the Read list, in wire order.
    pub reads: ReadList,
    /// `rdma_writes`: the Write list.
    pub writes: WriteList,
    /// `rdma_reply`: the Reply chunk, if present.
    pub reply: Option<WriteChunk>,
}

impl ChunkLists {
    /// Three empty lists.
    pub const fn empty() -> Self {
        ChunkLists {
            reads: ReadList::new_const(),
            writes: WriteList::new_const(),
            reply: None,
        }
    }

    /// True when all three lists are empty.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// Decodes the three lists, enforcing the limits.
    pub fn read(r: &mut Reader<'_>, limits: &Limits) -> Result<Self, DecodeError> {
        let mut budget = SegmentBudget::new(limits);
        // Read list: optional-data linked list of read segments.
        let mut reads = ReadList::new();
        while r.bool("rdma_reads")? {
            let at = r.position();
            if reads.len() as u32 >= limits.max_read_segments {
                return Err(list_limit_error(
                    "max_read_segments",
                    limits.max_read_segments,
                    reads.len(),
                    at,
                    "rdma_reads",
                ));
            }
            budget.take(1, at, "rdma_reads")?;
            let position = r.u32("rdma_position")?;
            let target = Segment::read(r)?;
            reads.push(ReadSegment { position, target });
        }
        // Write list: optional-data linked list of counted segment arrays.
        let mut writes = WriteList::new();
        while r.bool("rdma_writes")? {
            if writes.len() as u32 >= limits.max_write_chunks {
                return Err(list_limit_error(
                    "max_write_chunks",
                    limits.max_write_chunks,
                    writes.len(),
                    r.position(),
                    "rdma_writes",
                ));
            }
            writes.push(WriteChunk::read(r, limits, &mut budget, "rdma_writes")?);
        }
        // Reply chunk: optional write chunk.
        let reply = if r.bool("rdma_reply")? {
            Some(WriteChunk::read(r, limits, &mut budget, "rdma_reply")?)
        } else {
            None
        };
        Ok(ChunkLists {
            reads,
            writes,
            reply,
        })
    }

    /// The `rdma_handle` of every segment of the three lists, in wire
    /// order (repeats included).
    pub fn handles(&self) -> impl Iterator<Item = u32> + '_ {
        self.reads.iter().map(|r| r.target.handle).chain(
            self.writes
                .iter()
                .chain(self.reply.iter())
                .flat_map(|w| w.segments.iter().map(|s| s.handle)),
        )
    }

    /// Groups the Read list into Read chunks: runs of consecutive read
    /// segments with the same position, in wire order, as
    /// `(position, segments)`.
    pub fn read_chunks(&self) -> Vec<(u32, Vec<Segment>)> {
        let mut out: Vec<(u32, Vec<Segment>)> = Vec::new();
        for rs in &self.reads {
            match out.last_mut() {
                Some((p, segs)) if *p == rs.position => segs.push(rs.target),
                _ => out.push((rs.position, vec![rs.target])),
            }
        }
        out
    }

    /// Writes the pretty-printed tree of the lists, each line prefixed with
    /// `indent`.
    pub fn fmt_tree(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        if self.reads.is_empty() {
            writeln!(f, "{indent}read list: (empty)")?;
        } else {
            writeln!(f, "{indent}read list: {} segment(s)", self.reads.len())?;
            for (i, rs) in self.reads.iter().enumerate() {
                writeln!(f, "{indent}  [{i}] position {} {}", rs.position, rs.target)?;
            }
        }
        if self.writes.is_empty() {
            writeln!(f, "{indent}write list: (empty)")?;
        } else {
            writeln!(f, "{indent}write list: {} chunk(s)", self.writes.len())?;
            for (i, c) in self.writes.iter().enumerate() {
                writeln!(
                    f,
                    "{indent}  chunk {i}: {} segment(s), {} octets",
                    c.segments.len(),
                    c.total_len()
                )?;
                for (j, s) in c.segments.iter().enumerate() {
                    writeln!(f, "{indent}    [{j}] {s}")?;
                }
            }
        }
        match &self.reply {
            None => writeln!(f, "{indent}reply chunk: (none)"),
            Some(c) => {
                writeln!(
                    f,
                    "{indent}reply chunk: {} segment(s), {} octets",
                    c.segments.len(),
                    c.total_len()
                )?;
                for (j, s) in c.segments.iter().enumerate() {
                    writeln!(f, "{indent}    [{j}] {s}")?;
                }
                Ok(())
            }
        }
    }
}

/// Chunk lists of the shapes nearly every header has: a Read list of at
/// most one read segment, a Write list of at most one Write chunk, a Reply
/// chunk or none, each chunk of at most one segment. [`ShortLists::parse`]
/// decodes them word by word into plain values (no list is built until
/// [`ShortLists::into_lists`]), which is what lets a header decode
/// straight into its final place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShortLists {
    read: Option<ReadSegment>,
    /// The Write chunk, if present, and its segment, if it has one.
    write: Option<Option<Segment>>,
    /// The Reply chunk, if present, and its segment, if it has one.
    reply: Option<Option<Segment>>,
}

/// The next XDR word of `p`, advancing it.
#[inline(always)]
fn next_word(p: &mut &[u8]) -> Option<u32> {
    let (w, rest) = p.split_first_chunk::<4>()?;
    *p = rest;
    Some(u32::from_be_bytes(*w))
}

/// The next segment of `p`, advancing it; `None` if it is cut short or
/// `offset + length` overflows.
#[inline(always)]
fn next_segment(p: &mut &[u8]) -> Option<Segment> {
    let (b, rest) = p.split_first_chunk::<SEGMENT_LEN>()?;
    *p = rest;
    let s = Segment::from_bytes(b);
    s.offset.checked_add(s.length as u64)?;
    Some(s)
}

/// A counted array of at most one segment.
#[inline(always)]
fn next_short_chunk(p: &mut &[u8]) -> Option<Option<Segment>> {
    match next_word(p)? {
        0 => Some(None),
        1 => Some(Some(next_segment(p)?)),
        _ => None,
    }
}

impl ShortLists {
    /// Decodes the three lists at the start of `b` if they have a short
    /// shape and [`ChunkLists::read`] would accept them under `limits`;
    /// returns them and the octets they take. `None` otherwise (a longer
    /// list, or anything [`ChunkLists::read`] refuses): the caller then
    /// decodes with [`ChunkLists::read`], which yields the same lists, or
    /// the error with its offset and field.
    ///
    /// The checks are those of [`ChunkLists::read`] for lists of this
    /// shape: every optional-data discriminant is 0 or 1, every segment
    /// count 0 or 1 (and within `max_segments_per_chunk`), no segment has
    /// `offset + length > 2^64`, a Read segment and a Write chunk are
    /// within `max_read_segments` and `max_write_chunks`, and all segments
    /// together within `max_header_segments`.
    #[inline(always)]
    pub(crate) fn parse(b: &[u8], limits: &Limits) -> Option<(ShortLists, usize)> {
        let mut p = b;
        let read = match next_word(&mut p)? {
            0 => None,
            1 => {
                let position = next_word(&mut p)?;
                let target = next_segment(&mut p)?;
                // A second read segment is not a short shape.
                if next_word(&mut p)? != 0 {
                    return None;
                }
                Some(ReadSegment { position, target })
            }
            _ => return None,
        };
        let write = match next_word(&mut p)? {
            0 => None,
            1 => {
                let c = next_short_chunk(&mut p)?;
                if next_word(&mut p)? != 0 {
                    return None;
                }
                Some(c)
            }
            _ => return None,
        };
        let reply = match next_word(&mut p)? {
            0 => None,
            1 => Some(next_short_chunk(&mut p)?),
            _ => return None,
        };
        // Entry counts (0 or 1) against the limits, without branches.
        let reads = u32::from(read.is_some());
        let writes = u32::from(write.is_some());
        let write_segs = u32::from(matches!(write, Some(Some(_))));
        let reply_segs = u32::from(matches!(reply, Some(Some(_))));
        let over = (reads > limits.max_read_segments)
            | (writes > limits.max_write_chunks)
            | ((write_segs | reply_segs) > limits.max_segments_per_chunk)
            | (reads + write_segs + reply_segs > limits.max_header_segments);
        if over {
            return None;
        }
        Some((ShortLists { read, write, reply }, b.len() - p.len()))
    }

    /// True when all three lists are empty.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.read.is_none() && self.write.is_none() && self.reply.is_none()
    }

    /// The lists, in inline storage.
    #[inline(always)]
    pub(crate) fn into_lists(self) -> ChunkLists {
        fn chunk(c: Option<Segment>) -> WriteChunk {
            match c {
                Some(s) => WriteChunk::single(s),
                None => WriteChunk::default(),
            }
        }
        ChunkLists {
            reads: match self.read {
                Some(r) => ReadList::from_buf([r]),
                None => ReadList::new(),
            },
            writes: match self.write {
                Some(c) => WriteList::from_buf([chunk(c)]),
                None => WriteList::new(),
            },
            reply: self.reply.map(chunk),
        }
    }
}

impl XdrEncode for ChunkLists {
    #[inline]
    fn encoded_len(&self) -> usize {
        // Three list terminators / the Reply chunk discriminant, then each
        // entry with its discriminant.
        let reads = self.reads.len() * (4 + READ_SEGMENT_LEN);
        let writes: usize = self.writes.iter().map(|c| 4 + c.encoded_len()).sum();
        let reply = self.reply.as_ref().map_or(0, |c| c.encoded_len());
        12 + reads + writes + reply
    }

    #[inline]
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        for rs in &self.reads {
            let [p0, p1, p2, p3] = rs.position.to_be_bytes();
            w.array([0, 0, 0, 1, p0, p1, p2, p3])?;
            rs.target.write(w)?;
        }
        w.bool(false)?;
        for c in &self.writes {
            w.bool(true)?;
            c.write(w)?;
        }
        w.bool(false)?;
        match &self.reply {
            Some(c) => {
                w.bool(true)?;
                c.write(w)
            }
            None => w.bool(false),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use smallvec::smallvec;

    pub(crate) fn arb_segment() -> impl Strategy<Value = Segment> {
        (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(h, l, o)| {
            // Keep offset + length inside 2^64 as decoding requires.
            let o = o.min(u64::MAX - l as u64);
            Segment::new(h, l, o)
        })
    }

    fn arb_chunk(max: usize) -> impl Strategy<Value = WriteChunk> {
        proptest::collection::vec(arb_segment(), 0..max).prop_map(|mut segs| {
            // Keep the chunk total inside u32 as decoding requires.
            let mut total: u32 = 0;
            for s in segs.iter_mut() {
                s.length = s.length.min(u32::MAX - total);
                total += s.length;
            }
            WriteChunk::new(segs)
        })
    }

    pub(crate) fn arb_chunk_lists() -> impl Strategy<Value = ChunkLists> {
        (
            proptest::collection::vec(
                (any::<u32>(), arb_segment()).prop_map(|(p, s)| ReadSegment::new(p & !3, s)),
                0..5,
            ),
            proptest::collection::vec(arb_chunk(4), 0..3),
            proptest::option::of(arb_chunk(4)),
        )
            .prop_map(|(reads, writes, reply)| ChunkLists {
                reads: reads.into(),
                writes: writes.into(),
                reply,
            })
    }

    proptest! {
        #[test]
        fn chunk_lists_roundtrip(c in arb_chunk_lists()) {
            let bytes = c.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), c.encoded_len());
            let mut r = Reader::new(&bytes);
            let d = ChunkLists::read(&mut r, &Limits::default()).unwrap();
            r.finish("end").unwrap();
            prop_assert_eq!(d, c);
        }
    }

    #[test]
    fn empty_lists_are_three_zero_words() {
        let b = ChunkLists::empty().to_vec().unwrap();
        assert_eq!(b, [0u8; 12]);
    }

    #[test]
    fn rejects_too_many_read_segments() {
        let limits = Limits {
            max_read_segments: 2,
            ..Limits::default()
        };
        let c = ChunkLists {
            reads: smallvec![ReadSegment::default(); 3],
            ..ChunkLists::empty()
        };
        let b = c.to_vec().unwrap();
        let e = ChunkLists::read(&mut Reader::new(&b), &limits).unwrap_err();
        assert!(matches!(
            e.kind,
            DecodeErrorKind::LimitExceeded {
                limit: "max_read_segments",
                ..
            }
        ));
    }

    #[test]
    fn rejects_header_segment_budget() {
        let limits = Limits {
            max_header_segments: 3,
            ..Limits::default()
        };
        let c = ChunkLists {
            reads: smallvec![ReadSegment::default(); 2],
            writes: smallvec![WriteChunk::new(vec![Segment::default(); 2])],
            reply: None,
        };
        let b = c.to_vec().unwrap();
        let e = ChunkLists::read(&mut Reader::new(&b), &limits).unwrap_err();
        assert!(matches!(
            e.kind,
            DecodeErrorKind::LimitExceeded {
                limit: "max_header_segments",
                value: 4,
                ..
            }
        ));
    }

    #[test]
    fn rejects_huge_segment_count_before_allocating() {
        // write list present, count = 0xffffffff, nothing after
        let b = hex::decode("00000000 00000001 ffffffff".replace(' ', "")).unwrap();
        let limits = Limits {
            max_segments_per_chunk: u32::MAX,
            max_header_segments: u32::MAX,
            ..Limits::default()
        };
        let e = ChunkLists::read(&mut Reader::new(&b), &limits).unwrap_err();
        assert!(matches!(e.kind, DecodeErrorKind::Truncated { .. }));
    }

    #[test]
    fn rejects_overflowing_offset_and_chunk_total() {
        let c = ChunkLists {
            reply: Some(WriteChunk::new(vec![Segment::new(1, 16, u64::MAX - 8)])),
            ..ChunkLists::empty()
        };
        let b = c.to_vec().unwrap();
        let e = ChunkLists::read(&mut Reader::new(&b), &Limits::default()).unwrap_err();
        assert_eq!(
            e.kind,
            DecodeErrorKind::Overflow("rdma_offset + rdma_length")
        );

        let c = ChunkLists {
            writes: smallvec![WriteChunk::new(vec![
                Segment::new(1, u32::MAX, 0),
                Segment::new(2, 1, 0),
            ])],
            ..ChunkLists::empty()
        };
        let b = c.to_vec().unwrap();
        let e = ChunkLists::read(&mut Reader::new(&b), &Limits::default()).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Overflow("chunk length"));
    }

    #[test]
    fn read_chunks_group_by_position() {
        let s = Segment::new(1, 2, 3);
        let c = ChunkLists {
            reads: smallvec![
                ReadSegment::new(0, s),
                ReadSegment::new(0, s),
                ReadSegment::new(100, s),
            ],
            ..ChunkLists::empty()
        };
        let g = c.read_chunks();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1.len(), 2);
        assert_eq!(g[1].0, 100);
    }
}
