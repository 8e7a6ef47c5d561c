//! RPC messages as lists of pieces: inline XDR and DDP-eligible data.
//!
//! A [`Message`] is the XDR of (part of) an RPC message split into
//! [`Piece`]s, as the RPC-over-RDMA engine carries it
//! (`docs/design/engine.md`):
//!
//! * [`Piece::Inline`] — plain XDR octets (always a multiple of four when the
//!   message is built with [`MessageBuilder`]);
//! * [`Piece::Ddp`] — the *data* of a DDP-eligible opaque. Its length word
//!   stays in the preceding inline piece and the piece carries no XDR pad.
//!
//! Over TCP (and whenever an RDMA transport sends a DDP piece inline) a DDP
//! piece is sent inline followed by its XDR pad: [`Message::flatten`] gives
//! exactly those octets and [`Message::xdr_len`] their number.
//!
//! A received RPC-over-RDMA reply also carries **out-of-band DDP results**
//! ([`Message::with_results`]): the data the responder wrote into each Write
//! chunk the requester offered, in Write list order (empty for a Write
//! chunk the responder returned unused or empty). The inline XDR stream of
//! such a reply keeps each moved item's length word but neither its data nor
//! its XDR pad, and nothing in the transport says *where* in the stream an
//! item was: only the upper layer, which knows which result items are
//! DDP-eligible, can tell. So placement is reader-driven (as Linux's
//! `xdr_buf` page data): each DDP-eligible item is decoded with
//! [`MessageReader::ddp_opaque`], which takes its data from the next
//! out-of-band result.
//!
//! [`MessageReader`] decodes a received message without caring whether a
//! DDP-eligible opaque arrived inline (TCP), as a positioned DDP piece (an
//! RDMA call's Read chunks) or as an out-of-band result (an RDMA reply's
//! Write chunks): [`MessageReader::ddp_opaque`] returns the data as
//! [`Bytes`] in every case, and always as a zero-copy slice of what was
//! received. [`MessageReader::opaque`] is for items that are not
//! DDP-eligible (and for positioned DDP pieces); it never looks at
//! out-of-band results.

use crate::xdr::{pad_len, DecodeErrorKind, Reader, XdrEncode};
use crate::{DecodeError, EncodeError};
use core::ops::Range;

use crate::provider::FileRange;
use bytes::{BufMut, Bytes, BytesMut};
use smallvec::SmallVec;

/// One piece of a [`Message`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Inline XDR octets.
    Inline(Bytes),
    /// The data of a DDP-eligible opaque: no length word (that is in the
    /// preceding inline piece), no XDR pad.
    Ddp(Bytes),
    /// The data of a DDP-eligible opaque still in a file (as [`Piece::Ddp`]
    /// otherwise): an RPC-over-RDMA responder registers it for its Write
    /// chunk with [`Provider::register_file`](crate::provider::Provider::register_file)
    /// (sent from the file where the provider can); every other use reads
    /// it ([`Message::materialize_files`], or on demand, see
    /// [`Piece::file_octets`]).
    File(FileRange),
}

/// The octets of a file piece for a use that needs them in memory: read
/// now, or, when the file no longer has them (it shrank since the reply
/// was built), zeros of the promised length so that the XDR stream stays
/// well formed — never other memory. The runtime reads file pieces ahead
/// of such uses ([`Message::materialize_files`]); this is the fallback.
fn file_octets(r: &FileRange) -> Bytes {
    Bytes::from(r.read().unwrap_or_else(|_| vec![0u8; r.len() as usize]))
}

impl Piece {
    /// The octets of the piece (without any pad); empty for a file piece
    /// (see [`Piece::file_octets`]).
    pub fn bytes(&self) -> &Bytes {
        static NONE: Bytes = Bytes::new();
        match self {
            Piece::Inline(b) | Piece::Ddp(b) => b,
            Piece::File(_) => &NONE,
        }
    }

    /// The data octets of the piece: [`Piece::bytes`], or a file piece's
    /// octets read now (zeros of its length if the file no longer has
    /// them).
    pub fn file_octets(&self) -> Bytes {
        match self {
            Piece::File(r) => file_octets(r),
            p => p.bytes().clone(),
        }
    }

    /// Octets of data in the piece (without any pad).
    pub fn len(&self) -> usize {
        match self {
            Piece::Inline(b) | Piece::Ddp(b) => b.len(),
            Piece::File(r) => r.len() as usize,
        }
    }

    /// True for a piece without octets.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True for a DDP piece (in memory or in a file).
    pub fn is_ddp(&self) -> bool {
        matches!(self, Piece::Ddp(_) | Piece::File(_))
    }

    /// Octets this piece occupies in the contiguous XDR stream (a DDP piece
    /// with its XDR pad).
    pub fn xdr_len(&self) -> usize {
        match self {
            Piece::Inline(b) => b.len(),
            p => p.len() + pad_len(p.len()),
        }
    }
}

/// An RPC message (or the arguments / results part of one) as a list of
/// [`Piece`]s, plus (for a reply received over RPC-over-RDMA) the ordered
/// out-of-band DDP results (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    /// Two pieces inline (a header and its body, or one received buffer):
    /// most messages need no allocation for the list.
    pieces: SmallVec<[Piece; 2]>,
    /// Out-of-band DDP results, one per Write chunk offered, in Write list
    /// order (empty: the chunk came back unused or empty).
    results: Results,
}

/// The out-of-band results of a [`Message`]: one pointer when there are
/// none (every message but an RPC-over-RDMA reply with Write chunks), so
/// that a message, and a call carrying one, stays small enough to move
/// without a `memcpy` call.
// A thin pointer on purpose (a `Vec` is three words, a boxed slice two).
#[allow(clippy::box_collection)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Results(Option<Box<Vec<Bytes>>>);

impl Results {
    /// `v`, kept only when not empty.
    fn from_vec(v: Vec<Bytes>) -> Self {
        Results((!v.is_empty()).then(|| Box::new(v)))
    }

    fn as_slice(&self) -> &[Bytes] {
        self.0.as_deref().map_or(&[], |v| &v[..])
    }

    /// Appends `other`'s results after ours.
    fn extend(&mut self, other: Results) {
        match (&mut self.0, other.0) {
            (_, None) => {}
            (None, o) => self.0 = o,
            (Some(v), Some(o)) => v.extend(*o),
        }
    }
}

const ZERO_PAD: [u8; 3] = [0; 3];

/// `n` rounded up to a multiple of four (saturating).
fn round_up4(n: usize) -> usize {
    n.saturating_add(pad_len(n))
}

impl Message {
    /// An empty message (the XDR of `void`).
    pub fn new() -> Self {
        Message {
            pieces: SmallVec::new(),
            results: Results::default(),
        }
    }

    /// A builder with XDR helpers.
    pub fn builder() -> MessageBuilder {
        MessageBuilder::default()
    }

    /// A message of one inline piece (e.g. a record received over TCP).
    pub fn inline(xdr: impl Into<Bytes>) -> Self {
        let b = xdr.into();
        let mut m = Message::new();
        if !b.is_empty() {
            m.pieces.push(Piece::Inline(b));
        }
        m
    }

    /// A received RPC-over-RDMA reply: the inline XDR stream (in which
    /// every item the responder moved into a Write chunk keeps its length
    /// word but not its data or XDR pad) and the data written into each
    /// Write chunk offered, in Write list order, empty for a chunk that came
    /// back unused or empty. The results are placed as the reply is decoded,
    /// by [`MessageReader::ddp_opaque`].
    //= rfc8166#section-4.3.2
    //# When a Requester provides a Write list, the Responder MUST push data
    //# corresponding to DDP-eligible result data items to Requester memory
    //# referenced in the Write list.  The Responder removes these data items
    //# from the reply's Payload stream.
    pub fn with_results<R: Into<Bytes>>(
        inline: impl Into<Bytes>,
        results: impl IntoIterator<Item = R>,
    ) -> Self {
        let mut m = Message::inline(inline);
        m.results = Results::from_vec(results.into_iter().map(Into::into).collect());
        m
    }

    /// [`Message::with_results`] of parts already in their final types
    /// (a received reply: no conversion of the results list).
    pub(crate) fn from_reply_parts(inline: Bytes, results: Vec<Bytes>) -> Self {
        let mut pieces = SmallVec::new();
        if !inline.is_empty() {
            pieces.push(Piece::Inline(inline));
        }
        Message {
            pieces,
            results: Results::from_vec(results),
        }
    }

    /// A reassembled received call (`message`: the whole XDR stream, each
    /// DDP item followed by its XDR pad): the `ddp` ranges (the data that
    /// arrived by RDMA Read) become DDP pieces, their pads skipped, the
    /// rest inline; all slices of one buffer, no copy. Ranges that overlap
    /// or fall outside the message give one inline piece.
    pub(crate) fn from_reassembled(message: Vec<u8>, ddp: &[Range<usize>]) -> Self {
        let b = Bytes::from(message);
        if ddp.is_empty() {
            return Message::inline(b);
        }
        let mut ranges = ddp.to_vec();
        ranges.sort_by_key(|r| r.start);
        let mut m = Message::new();
        let mut pos = 0usize;
        for r in &ranges {
            if r.start < pos || r.end < r.start || r.end > b.len() {
                return Message::inline(b);
            }
            if r.start > pos {
                m.push(Piece::Inline(b.slice(pos..r.start)));
            }
            m.push(Piece::Ddp(b.slice(r.clone())));
            pos = r.end.saturating_add(pad_len(r.end - r.start)).min(b.len());
        }
        if pos < b.len() {
            m.push(Piece::Inline(b.slice(pos..)));
        }
        m
    }

    /// Overwrites the first word of the message (an RPC message's XID)
    /// when the first piece is inline and at least a word long; the piece's
    /// buffer is copied only when it is shared (a received reply's is
    /// not), and not at all when the word already is `xid`. A runtime
    /// that numbers calls its own way puts its XID back into a reply the
    /// engine delivered under the wire XID.
    pub fn set_xid(&mut self, xid: u32) {
        if let Some(Piece::Inline(b)) = self.pieces.first_mut() {
            if b.get(..4) == Some(&xid.to_be_bytes()[..]) {
                // Already so (the engine used the caller's XID): no copy.
                return;
            }
            if b.len() >= 4 {
                let mut m = BytesMut::from(std::mem::take(b));
                if let Some(w) = m.get_mut(..4) {
                    w.copy_from_slice(&xid.to_be_bytes());
                }
                *b = m.freeze();
            }
        }
    }

    /// A message from pieces as they are (empty pieces are dropped).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Piece>) -> Self {
        let mut m = Message::new();
        for p in pieces {
            m.push(p);
        }
        m
    }

    /// Appends a piece (an empty inline piece is dropped; an empty DDP piece
    /// is kept because it stands for a zero-length DDP-eligible opaque).
    pub fn push(&mut self, piece: Piece) {
        if let Piece::Inline(b) = &piece {
            if b.is_empty() {
                return;
            }
        }
        self.pieces.push(piece);
    }

    /// Appends all pieces of `other` (and its out-of-band results after
    /// ours).
    pub fn append(&mut self, other: Message) {
        for p in other.pieces {
            self.push(p);
        }
        self.results.extend(other.results);
    }

    /// `header` (inline) followed by the pieces of `body`.
    pub fn with_header(header: impl Into<Bytes>, body: Message) -> Self {
        let mut m = Message::inline(header);
        m.append(body);
        m
    }

    /// The pieces.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Consumes the message, giving its pieces (out-of-band results, if
    /// any, are dropped).
    pub fn into_pieces(self) -> Vec<Piece> {
        self.pieces.into_vec()
    }

    /// Consumes the message, giving its pieces without collecting them
    /// (out-of-band results, if any, are dropped).
    pub fn into_piece_iter(self) -> impl Iterator<Item = Piece> {
        self.pieces.into_iter()
    }

    /// The out-of-band DDP results, one per Write chunk offered, in Write
    /// list order (empty for a chunk that came back unused or empty). Empty
    /// except for a reply received over RPC-over-RDMA.
    pub fn results(&self) -> &[Bytes] {
        self.results.as_slice()
    }

    /// The DDP data, in order: the DDP pieces' data, then the non-empty
    /// out-of-band results (file pieces not included: see
    /// [`Message::materialize_files`]).
    pub fn ddp_data(&self) -> impl Iterator<Item = &Bytes> {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Ddp(b) => Some(b),
                Piece::Inline(_) | Piece::File(_) => None,
            })
            .chain(self.results.as_slice().iter().filter(|b| !b.is_empty()))
    }

    /// Number of items of [`Message::ddp_data`]: DDP pieces and non-empty
    /// out-of-band results.
    pub fn ddp_count(&self) -> usize {
        self.ddp_data().count()
    }

    /// Octets of the contiguous XDR stream: inline octets plus every DDP
    /// piece and every non-empty out-of-band result with its XDR pad (a
    /// result that already includes its pad counts once).
    pub fn xdr_len(&self) -> usize {
        let pieces: usize = self.pieces.iter().map(Piece::xdr_len).sum();
        pieces
            + self
                .results
                .as_slice()
                .iter()
                .map(|b| round_up4(b.len()))
                .sum::<usize>()
    }

    /// Octets in inline pieces only.
    pub fn inline_len(&self) -> usize {
        self.pieces
            .iter()
            .filter(|p| !p.is_ddp())
            .map(|p| p.bytes().len())
            .sum()
    }

    /// True when the message has no octets at all.
    pub fn is_empty(&self) -> bool {
        self.pieces.iter().all(Piece::is_empty)
            && self.results.as_slice().iter().all(Bytes::is_empty)
    }

    /// True if a DDP piece is still in a file ([`Piece::File`]).
    pub fn has_files(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::File(_)))
    }

    /// Reads every file piece into memory (a [`Piece::Ddp`] of its
    /// octets). A file that no longer has its range's octets (it shrank
    /// since the reply was built) is an error, and the message is left
    /// with the pieces read so far.
    pub fn materialize_files(&mut self) -> std::io::Result<()> {
        self.materialize_files_except(&[])
    }

    /// [`Message::materialize_files`] except for the pieces whose indexes
    /// are in `keep` (a responder's file pieces that go in Write chunks).
    pub fn materialize_files_except(&mut self, keep: &[usize]) -> std::io::Result<()> {
        for (i, p) in self.pieces.iter_mut().enumerate() {
            if let Piece::File(r) = p {
                if !keep.contains(&i) {
                    *p = Piece::Ddp(Bytes::from(r.read()?));
                }
            }
        }
        Ok(())
    }

    /// The contiguous XDR stream: pieces in order, each DDP piece followed by
    /// its zero XDR pad. A message of one inline piece is returned without a
    /// copy. Out-of-band results are not part of it: where they belong is
    /// known only to the decoder ([`MessageReader::ddp_opaque`]).
    pub fn flatten(&self) -> Bytes {
        if let [Piece::Inline(b)] = self.pieces.as_slice() {
            return b.clone();
        }
        let mut out = BytesMut::with_capacity(self.xdr_len());
        self.for_each_xdr_chunk(|c| out.extend_from_slice(c));
        out.freeze()
    }

    /// Calls `f` on each chunk of the contiguous XDR stream in order (piece
    /// data and pads): what a stream transport writes. Out-of-band results
    /// are not included (see [`Message::flatten`]).
    pub fn for_each_xdr_chunk(&self, mut f: impl FnMut(&[u8])) {
        for p in &self.pieces {
            let file;
            let b = match p {
                Piece::Inline(b) => {
                    f(b);
                    continue;
                }
                Piece::Ddp(b) => b,
                Piece::File(r) => {
                    file = file_octets(r);
                    &file
                }
            };
            f(b);
            let pad = pad_len(b.len());
            if pad != 0 {
                f(&ZERO_PAD[..pad]);
            }
        }
    }

    /// CRC32C (Castagnoli) of the contiguous XDR stream, computed piece by
    /// piece without flattening (out-of-band results not included).
    pub fn crc32c(&self) -> u32 {
        let mut crc = 0u32;
        self.for_each_xdr_chunk(|c| crc = crc32c::crc32c_append(crc, c));
        crc
    }

    /// A reader at the start of the message.
    pub fn reader(&self) -> MessageReader {
        MessageReader::new(self)
    }

    /// The message with its first `n` XDR octets removed, where those octets
    /// lie in inline pieces (used to split an RPC header from the arguments
    /// or results). `None` if `n` reaches into a DDP piece or past the end.
    /// The out-of-band results stay with the rest.
    pub fn split_inline_prefix(&self, n: usize) -> Option<Message> {
        // One inline piece (any received reply): no walk.
        if let [Piece::Inline(b)] = self.pieces.as_slice() {
            let mut out = Message {
                pieces: SmallVec::new(),
                results: self.results.clone(),
            };
            match n.cmp(&b.len()) {
                std::cmp::Ordering::Less => out.pieces.push(Piece::Inline(b.slice(n..))),
                std::cmp::Ordering::Equal => {}
                std::cmp::Ordering::Greater => return None,
            }
            return Some(out);
        }
        self.split_inline_prefix_walk(n)
    }

    /// [`Message::split_inline_prefix`] consuming the message: a message of
    /// one inline piece (any received reply) is cut in place, without a new
    /// message, a copy of the results list or a shared buffer.
    pub fn into_split_inline_prefix(mut self, n: usize) -> Option<Message> {
        if let [Piece::Inline(b)] = self.pieces.as_mut_slice() {
            match n.cmp(&b.len()) {
                std::cmp::Ordering::Less => bytes::Buf::advance(b, n),
                std::cmp::Ordering::Equal => self.pieces.clear(),
                std::cmp::Ordering::Greater => return None,
            }
            return Some(self);
        }
        self.split_inline_prefix(n)
    }

    /// [`Message::split_inline_prefix`] piece by piece.
    fn split_inline_prefix_walk(&self, n: usize) -> Option<Message> {
        let mut left = n;
        let mut out = Message::new();
        out.results = self.results.clone();
        let mut iter = self.pieces.iter();
        for p in iter.by_ref() {
            if left == 0 {
                out.push(p.clone());
                break;
            }
            match p {
                Piece::Inline(b) if b.len() <= left => left -= b.len(),
                Piece::Inline(b) => {
                    out.push(Piece::Inline(b.slice(left..)));
                    left = 0;
                    break;
                }
                Piece::Ddp(_) | Piece::File(_) => return None,
            }
        }
        if left != 0 {
            return None;
        }
        for p in iter {
            out.push(p.clone());
        }
        Some(out)
    }
}

impl From<Vec<Piece>> for Message {
    /// [`Message::from_pieces`].
    fn from(pieces: Vec<Piece>) -> Self {
        Message::from_pieces(pieces)
    }
}

impl FromIterator<Piece> for Message {
    /// [`Message::from_pieces`].
    fn from_iter<I: IntoIterator<Item = Piece>>(pieces: I) -> Self {
        Message::from_pieces(pieces)
    }
}

/// Builds a [`Message`] with XDR helpers. Consecutive inline items share one
/// inline piece.
#[derive(Debug, Default)]
pub struct MessageBuilder {
    /// Finished pieces (in a message's own inline storage: a reply of a
    /// piece or two needs no heap list).
    pieces: SmallVec<[Piece; 2]>,
    cur: BytesMut,
}

impl MessageBuilder {
    /// An XDR `unsigned int`.
    pub fn put_u32(&mut self, v: u32) -> &mut Self {
        self.cur.put_u32(v);
        self
    }

    /// An XDR `unsigned hyper`.
    pub fn put_u64(&mut self, v: u64) -> &mut Self {
        self.cur.put_u64(v);
        self
    }

    /// An XDR `bool`.
    pub fn put_bool(&mut self, v: bool) -> &mut Self {
        self.put_u32(v as u32)
    }

    /// Fixed-length opaque data and its zero pad.
    pub fn put_fixed_opaque(&mut self, data: &[u8]) -> &mut Self {
        // One reservation for data and pad (not a growth for each).
        self.cur.reserve(data.len() + pad_len(data.len()));
        self.cur.extend_from_slice(data);
        self.cur.extend_from_slice(&ZERO_PAD[..pad_len(data.len())]);
        self
    }

    /// Variable-length opaque data (`opaque<>`), inline: length word, data,
    /// pad. Fails when the data is longer than `u32::MAX`.
    pub fn put_opaque(&mut self, data: &[u8]) -> Result<&mut Self, EncodeError> {
        let n = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong("opaque"))?;
        // One reservation for the length word, data and pad.
        self.cur.reserve(4 + data.len() + pad_len(data.len()));
        self.put_u32(n);
        Ok(self.put_fixed_opaque(data))
    }

    /// A DDP-eligible `opaque<>`: the length word goes inline, the data
    /// becomes a [`Piece::Ddp`] (no pad). Fails when the data is longer than
    /// `u32::MAX`.
    pub fn put_ddp_opaque(&mut self, data: impl Into<Bytes>) -> Result<&mut Self, EncodeError> {
        let data = data.into();
        let n = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong("opaque"))?;
        self.put_u32(n);
        self.flush_inline();
        self.pieces.push(Piece::Ddp(data));
        Ok(self)
    }

    /// A DDP-eligible `opaque<>` whose data is a file range: the length
    /// word goes inline, the range becomes a [`Piece::File`].
    pub fn put_file_opaque(&mut self, range: FileRange) -> &mut Self {
        self.put_u32(range.len());
        self.flush_inline();
        self.pieces.push(Piece::File(range));
        self
    }

    /// Raw octets appended inline as they are (the caller keeps the XDR
    /// four-octet alignment).
    pub fn put_raw(&mut self, data: &[u8]) -> &mut Self {
        self.cur.extend_from_slice(data);
        self
    }

    /// Any [`XdrEncode`] value, inline, with its exact encoded length.
    pub fn put_encode(&mut self, v: &impl XdrEncode) -> Result<&mut Self, EncodeError> {
        let start = self.cur.len();
        self.cur.resize(start + v.encoded_len(), 0);
        let tail = self.cur.get_mut(start..).unwrap_or_default();
        match v.encode(tail) {
            Ok(_) => Ok(self),
            Err(e) => {
                self.cur.truncate(start);
                Err(e)
            }
        }
    }

    /// Appends the pieces of an existing message.
    pub fn put_message(&mut self, m: Message) -> &mut Self {
        self.flush_inline();
        for p in m.pieces {
            self.pieces.push(p);
        }
        self
    }

    fn flush_inline(&mut self) {
        if !self.cur.is_empty() {
            // The buffer itself (no shared split off it): the next inline
            // octets start a buffer of their own.
            let b = std::mem::take(&mut self.cur).freeze();
            self.pieces.push(Piece::Inline(b));
        }
    }

    /// The message.
    pub fn finish(&mut self) -> Message {
        self.flush_inline();
        // The builder's list as it is: it never holds an empty inline piece
        // (what `Message::from_pieces` would drop).
        Message {
            pieces: std::mem::take(&mut self.pieces),
            results: Results::default(),
        }
    }
}

/// Decodes the XDR of a [`Message`], inline and DDP pieces alike, placing
/// out-of-band DDP results as the DDP-eligible items are read
/// ([`MessageReader::ddp_opaque`]). Errors are the peer's ([`DecodeError`]
/// with the field and the offset in the contiguous XDR stream).
#[derive(Debug, Clone)]
pub struct MessageReader {
    /// The inline pieces concatenated (no copy for a single inline piece).
    inline: Bytes,
    /// DDP pieces with the inline offset they stand at.
    ddp: Vec<(usize, Bytes)>,
    /// Next DDP piece.
    next_ddp: usize,
    /// Out-of-band DDP results (one per Write chunk, in order).
    results: Vec<Bytes>,
    /// Next out-of-band result slot.
    next_result: usize,
    /// Position in `inline`.
    pos: usize,
    /// XDR octets of DDP pieces and results (with pad) already consumed,
    /// for offsets.
    ddp_consumed: usize,
}

impl MessageReader {
    /// A reader at the start of `m`.
    pub fn new(m: &Message) -> Self {
        let mut ddp = Vec::new();
        let inline = if m.pieces.len() <= 1 && !m.pieces.iter().any(Piece::is_ddp) {
            m.pieces
                .first()
                .map(|p| p.bytes().clone())
                .unwrap_or_default()
        } else {
            let mut buf = BytesMut::with_capacity(m.inline_len());
            for p in &m.pieces {
                match p {
                    Piece::Inline(b) => buf.extend_from_slice(b),
                    Piece::Ddp(_) | Piece::File(_) => ddp.push((buf.len(), p.file_octets())),
                }
            }
            buf.freeze()
        };
        MessageReader {
            inline,
            ddp,
            next_ddp: 0,
            results: m.results.as_slice().to_vec(),
            next_result: 0,
            pos: 0,
            ddp_consumed: 0,
        }
    }

    /// Offset in the contiguous XDR stream.
    pub fn position(&self) -> usize {
        self.pos.saturating_add(self.ddp_consumed)
    }

    fn err(&self, kind: DecodeErrorKind, field: &'static str) -> DecodeError {
        DecodeError::new(kind, self.position(), field)
    }

    /// Octets left before the next DDP piece (or the end).
    fn inline_avail(&self) -> usize {
        let end = match self.ddp.get(self.next_ddp) {
            Some((at, _)) => *at,
            None => self.inline.len(),
        };
        end.saturating_sub(self.pos)
    }

    fn with_reader<T>(
        &mut self,
        f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        let avail = self.inline_avail();
        let slice = self
            .inline
            .get(self.pos..self.pos + avail)
            .unwrap_or_default();
        let mut r = Reader::new(slice);
        let base = self.position();
        let out = f(&mut r).map_err(|mut e| {
            e.offset = e.offset.saturating_add(base);
            e
        })?;
        self.pos += r.position();
        Ok(out)
    }

    /// An XDR `unsigned int`.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.with_reader(|r| r.u32(field))
    }

    /// An XDR `unsigned hyper`.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.with_reader(|r| r.u64(field))
    }

    /// An XDR `bool` (strictly 0 or 1).
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        self.with_reader(|r| r.bool(field))
    }

    /// The length word of an `opaque<max>`, checked against `max` (named
    /// `limit`).
    fn opaque_len(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<usize, DecodeError> {
        self.with_reader(|r| r.opaque_len(max, limit, field))
            .map(|n| n as usize)
    }

    /// The `len` data octets of an opaque whose length word was just read:
    /// the DDP piece standing here, or inline data and its zero pad.
    fn opaque_data(&mut self, len: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        if let Some((ddp_at, data)) = self.ddp.get(self.next_ddp) {
            if *ddp_at == self.pos {
                if data.len() != len {
                    return Err(self.err(
                        DecodeErrorKind::BadValue {
                            what: "DDP piece length",
                            detail: format!(
                                "length word says {len} octets, DDP piece has {}",
                                data.len()
                            ),
                        },
                        field,
                    ));
                }
                let data = data.clone();
                self.next_ddp += 1;
                self.ddp_consumed = self.ddp_consumed.saturating_add(round_up4(len));
                return Ok(data);
            }
        }
        let start = self.pos;
        self.with_reader(|r| r.fixed_opaque(len, field).map(|_| ()))?;
        Ok(self.inline.slice(start..start + len))
    }

    /// A variable-length `opaque<max>` (`max` named `limit`) that is not a
    /// DDP-eligible result. If a DDP piece stands right after the length
    /// word (a call whose Read chunks gave exact positions), the data is
    /// that piece (whose length must equal the length word); otherwise the
    /// data and its zero pad are inline. Either way the result is a
    /// zero-copy slice. Out-of-band results are never looked at: decode a
    /// DDP-eligible result with [`MessageReader::ddp_opaque`].
    pub fn opaque(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        let len = self.opaque_len(max, limit, field)?;
        self.opaque_data(len, field)
    }

    /// A DDP-eligible `opaque<max>` (`max` named `limit`), such as an NFS
    /// READ's data: the item a requester offers a Write chunk for.
    ///
    /// The length word is read from the inline stream. A zero-length item
    /// consumes no Write chunk (a chunk written with zero octets cannot be
    /// told from an unused one, so responders — this crate's engine, Linux
    /// `svc_rdma_result_payload` — leave the chunk to the next item): its
    /// data is empty (or a positioned empty DDP piece). Otherwise, if an
    /// out-of-band result slot is left, the next one is consumed:
    ///
    /// * a non-empty result is the data (the responder wrote it into the
    ///   Write chunk and left data and pad out of the inline stream, so
    ///   nothing more is read inline). Its length must equal the length
    ///   word; a result exactly the length word plus its XDR pad (a legacy
    ///   RFC 5666 responder that wrote the pad; the pad is not checked) is
    ///   cut to the length word; any other length is a `bad-value` error;
    /// * an empty result (the chunk came back empty or unused, so the
    ///   responder sent the item inline) or no slot left: the data is read
    ///   as [`MessageReader::opaque`] reads it (inline, or a positioned DDP
    ///   piece).
    ///
    /// Without out-of-band results (TCP, in-memory transports, calls) this
    /// is exactly [`MessageReader::opaque`].
    //= rfc8166#section-4.3.2.1
    //# When a Requester has provided multiple Write chunks, the Responder
    //# fills in each Write chunk with one DDP-eligible result until there
    //# are either no more DDP-eligible results or no more Write chunks.
    //
    //= rfc8166#section-4.3.2.1
    //# As a Requester decodes a reply Payload stream, it is clear from the
    //# contents of the RPC Reply message which Write chunk contains which
    //# result data item.
    //
    //= rfc8166#section-3.4.6.1
    //# After receiving the RPC Reply message, the Requester reconstructs the
    //# transferred data by concatenating the contents of each segment, in
    //# array order, into the RPC Reply message's XDR stream at the known XDR
    //# position of the associated DDP-eligible result data item.
    //
    // A chunk left unconsumed by a union arm without a DDP-eligible item is
    // not skipped: slots are consumed only by DDP-eligible items read here.
    //= rfc8166#section-4.3.2.2
    //# If there is a subsequent DDP-eligible result data item in the RPC
    //# Reply message, it MUST be placed in that unconsumed Write chunk.
    //
    //= rfc8166#section-4.3.2.3
    //# The Responder MUST return the corresponding
    //# result data item inline and MUST return an empty Write chunk in
    //# that Write list position in the RPC Reply message.
    //
    // No pad inline after a moved item:
    //= rfc8166#section-3.4.4.4
    //# When a variable-length XDR data item is reduced, the sender MUST
    //# remove XDR roundup padding for that data item from the Payload stream
    //# so that data items remaining in the Payload stream begin on four-byte
    //# alignment.
    //
    //= rfc8166#section-3.4.6.2
    //# Therefore, when returning a single variable-length result data item,
    //# a returned Write chunk's total length MUST be the same as the encoded
    //# length of the result data item.
    pub fn ddp_opaque(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        let len = self.opaque_len(max, limit, field)?;
        if len == 0 {
            return self.opaque_data(len, field);
        }
        if let Some(slot) = self.results.get(self.next_result).cloned() {
            self.next_result += 1;
            if !slot.is_empty() {
                let padded = round_up4(len);
                if slot.len() != len && slot.len() != padded {
                    return Err(self.err(
                        DecodeErrorKind::BadValue {
                            what: "Write chunk result length",
                            detail: format!(
                                "length word says {len} octets, Write chunk {} returned {}",
                                self.next_result - 1,
                                slot.len()
                            ),
                        },
                        field,
                    ));
                }
                self.ddp_consumed = self.ddp_consumed.saturating_add(padded);
                return Ok(slot.slice(..len));
            }
        }
        self.opaque_data(len, field)
    }

    /// Fixed-length opaque data of `len` octets (inline) and its pad.
    pub fn fixed_opaque(&mut self, len: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.with_reader(|r| r.fixed_opaque(len, field).map(|_| ()))?;
        Ok(self.inline.slice(start..start + len))
    }

    /// Octets of XDR left (inline, DDP pieces and unconsumed non-empty
    /// out-of-band results, each with its pad).
    pub fn remaining(&self) -> usize {
        let ddp_left: usize = self
            .ddp
            .get(self.next_ddp..)
            .unwrap_or_default()
            .iter()
            .map(|(_, b)| round_up4(b.len()))
            .sum();
        let results_left: usize = self
            .results
            .get(self.next_result..)
            .unwrap_or_default()
            .iter()
            .map(|b| round_up4(b.len()))
            .sum();
        self.inline
            .len()
            .saturating_sub(self.pos)
            .saturating_add(ddp_left)
            .saturating_add(results_left)
    }

    /// Fails with `trailing-bytes` unless everything (inline, DDP pieces and
    /// non-empty out-of-band results) was consumed: a Write chunk holding
    /// data no DDP-eligible item claimed is trailing data.
    pub fn finish(&self, field: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.err(DecodeErrorKind::TrailingBytes(n), field)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn builder_hand_checked_bytes() {
        let mut b = Message::builder();
        b.put_u32(7).put_opaque(b"abcde").unwrap();
        b.put_ddp_opaque(Bytes::from_static(b"xyz")).unwrap();
        b.put_u32(0x01020304);
        let m = b.finish();
        assert_eq!(m.pieces().len(), 3);
        assert_eq!(
            m.pieces()[0],
            Piece::Inline(Bytes::from_static(&[
                0, 0, 0, 7, // u32 7
                0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0, // opaque + pad
                0, 0, 0, 3, // DDP length word stays inline
            ]))
        );
        assert_eq!(m.pieces()[1], Piece::Ddp(Bytes::from_static(b"xyz")));
        assert_eq!(
            m.pieces()[2],
            Piece::Inline(Bytes::from_static(&[1, 2, 3, 4]))
        );
        assert_eq!(m.xdr_len(), 20 + 4 + 4);
        assert_eq!(m.inline_len(), 24);
        assert_eq!(
            &m.flatten()[..],
            &[
                0, 0, 0, 7, 0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0, 0, 0, 0, 3, b'x',
                b'y', b'z', 0, 1, 2, 3, 4
            ][..]
        );
        // CRC32C check value of "123456789" is 0xe3069283 (RFC 3720 B.4).
        assert_eq!(Message::inline(&b"123456789"[..]).crc32c(), 0xe306_9283);
        assert_eq!(m.crc32c(), crc32c::crc32c(&m.flatten()));
    }

    #[test]
    fn reader_takes_ddp_piece_or_inline_data() {
        let mut b = Message::builder();
        b.put_ddp_opaque(Bytes::from_static(b"hello")).unwrap();
        b.put_u32(9);
        let m = b.finish();
        for msg in [m.clone(), Message::inline(m.flatten())] {
            let mut r = msg.reader();
            assert_eq!(&r.opaque(100, "max", "data").unwrap()[..], b"hello");
            assert_eq!(r.u32("n").unwrap(), 9);
            r.finish("end").unwrap();
        }
        // A length word that disagrees with the DDP piece.
        let bad = Message::from_pieces([
            Piece::Inline(Bytes::from_static(&[0, 0, 0, 4])),
            Piece::Ddp(Bytes::from_static(b"abc")),
        ]);
        let e = bad.reader().opaque(100, "max", "data").unwrap_err();
        assert_eq!(e.kind.name(), "bad-value");
        // Over the limit.
        let e = m.reader().opaque(4, "max_x", "data").unwrap_err();
        assert_eq!(e.kind.name(), "limit-exceeded");
        // Inline reads do not run into a DDP piece.
        let e = m.reader().u64("h").unwrap_err();
        assert_eq!(e.kind.name(), "truncated");
        // Unconsumed DDP data is trailing.
        let mut r = m.reader();
        r.u32("len").unwrap();
        assert_eq!(r.finish("end").unwrap_err().kind.name(), "trailing-bytes");
    }

    /// Big-endian words, written out by hand in the tests below.
    fn w(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    fn reply(inline: &[u8], results: &[&'static [u8]]) -> Message {
        Message::with_results(
            inline.to_vec(),
            results.iter().map(|r| Bytes::from_static(r)),
        )
    }

    //= rfc8166#section-4.3.2
    //# The Responder removes these data items
    //# from the reply's Payload stream.
    #[test]
    fn ddp_opaque_takes_the_write_chunk_result() {
        // Inline: length word 5, then trailer 0x01020304; no data, no pad.
        let inline = [0, 0, 0, 5, 1, 2, 3, 4];
        let m = reply(&inline, &[b"hello"]);
        assert_eq!(m.pieces().len(), 1);
        assert_eq!(m.results(), &[Bytes::from_static(b"hello")][..]);
        assert_eq!(
            m.ddp_data().collect::<Vec<_>>(),
            vec![&Bytes::from_static(b"hello")]
        );
        assert_eq!(m.xdr_len(), 8 + 8);
        let mut r = m.reader();
        assert_eq!(r.remaining(), 16);
        assert_eq!(&r.ddp_opaque(100, "max", "data").unwrap()[..], b"hello");
        // Offsets count the moved item with its pad.
        assert_eq!(r.position(), 4 + 8);
        assert_eq!(r.u32("trailer").unwrap(), 0x0102_0304);
        r.finish("end").unwrap();
        // opaque() never looks at out-of-band results: here it reads the
        // trailer as 5 data octets and runs out.
        let e = m.reader().opaque(100, "max", "data").unwrap_err();
        assert_eq!(e.kind.name(), "truncated");
    }

    //= rfc8166#section-4.3.2.3
    //# The Responder MUST return the corresponding
    //# result data item inline and MUST return an empty Write chunk in
    //# that Write list position in the RPC Reply message.
    #[test]
    fn ddp_opaque_empty_slot_reads_inline_and_consumes_the_slot() {
        // Item 1 inline (empty chunk): length 3, "abc", pad 0; item 2 in
        // chunk 2: length 2.
        let inline = [0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 2];
        let m = reply(&inline, &[b"", b"xy"]);
        assert_eq!(m.ddp_count(), 1);
        assert_eq!(m.xdr_len(), 12 + 4);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(100, "max", "a").unwrap()[..], b"abc");
        assert_eq!(&r.ddp_opaque(100, "max", "b").unwrap()[..], b"xy");
        r.finish("end").unwrap();
        // The inline read of an item whose chunk came back empty keeps the
        // strict pad check.
        let bad = reply(&[0, 0, 0, 1, b'a', 0, 9, 0], &[b""]);
        let e = bad.reader().ddp_opaque(100, "max", "a").unwrap_err();
        assert_eq!(e.kind.name(), "bad-padding");
    }

    #[test]
    fn ddp_opaque_without_slots_is_opaque() {
        // No results at all (TCP): length 2, "hi", pad, then 7.
        let inline = [0, 0, 0, 2, b'h', b'i', 0, 0, 0, 0, 0, 7];
        for m in [Message::inline(inline.to_vec()), reply(&inline, &[])] {
            let mut r = m.reader();
            assert_eq!(&r.ddp_opaque(100, "max", "d").unwrap()[..], b"hi");
            assert_eq!(r.u32("n").unwrap(), 7);
            r.finish("end").unwrap();
        }
        // More DDP items than slots: the extra ones are inline.
        let inline = [0, 0, 0, 1, 0, 0, 0, 1, b'z', 0, 0, 0];
        let m = reply(&inline, &[b"y"]);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(100, "max", "a").unwrap()[..], b"y");
        assert_eq!(&r.ddp_opaque(100, "max", "b").unwrap()[..], b"z");
        r.finish("end").unwrap();
        // Positioned DDP pieces (in-memory transports, calls) as opaque().
        let m = Message::from_pieces([
            Piece::Inline(Bytes::from_static(&[0, 0, 0, 3])),
            Piece::Ddp(Bytes::from_static(b"abc")),
            Piece::Inline(Bytes::from_static(&[0, 0, 0, 9])),
        ]);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(100, "max", "d").unwrap()[..], b"abc");
        assert_eq!(r.u32("n").unwrap(), 9);
        r.finish("end").unwrap();
    }

    //= rfc8166#section-3.4.6.2
    //# A Responder MUST NOT write XDR roundup padding into
    //# a Write chunk, even if the Requester made space available for it.
    #[test]
    fn ddp_opaque_result_with_legacy_pad_is_cut_and_others_fail() {
        // Length word 5; a legacy responder returned 8 octets (data + pad).
        let m = reply(&[0, 0, 0, 5, 0, 0, 0, 6], &[b"hello\0\0\0"]);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(100, "max", "d").unwrap()[..], b"hello");
        assert_eq!(r.position(), 12);
        assert_eq!(r.u32("n").unwrap(), 6);
        r.finish("end").unwrap();
        // Shorter than the length word: bad-value at the data's offset.
        let m = reply(&[0, 0, 0, 5], &[b"hell"]);
        let e = m.reader().ddp_opaque(100, "max", "d").unwrap_err();
        assert_eq!(e.kind.name(), "bad-value");
        assert_eq!(e.offset, 4);
        assert_eq!(e.field, "d");
        // Longer, but not by exactly the pad (5 + 3 = 8): 6, 7 and 9 fail.
        for bad in [&b"hello!"[..], b"hello!!", b"hello!!!!"] {
            let m = reply(&[0, 0, 0, 5], &[bad]);
            let e = m.reader().ddp_opaque(100, "max", "d").unwrap_err();
            assert_eq!(e.kind.name(), "bad-value", "{} octets", bad.len());
        }
        // A length word 0 leaves the result for a later item: if none
        // claims it, it is trailing.
        let m = reply(&[0, 0, 0, 0], &[b"x"]);
        let mut r = m.reader();
        assert!(r.ddp_opaque(100, "max", "d").unwrap().is_empty());
        assert_eq!(r.finish("end").unwrap_err().kind.name(), "trailing-bytes");
        // A length word 4 (no pad): only exactly 4 octets.
        let m = reply(&[0, 0, 0, 4], &[b"abcd\0"]);
        assert_eq!(
            m.reader()
                .ddp_opaque(100, "max", "d")
                .unwrap_err()
                .kind
                .name(),
            "bad-value"
        );
        // Over the limit: limit-exceeded at the length word, before the
        // result is looked at.
        let m = reply(&[0, 0, 0, 5], &[b"hello"]);
        let e = m.reader().ddp_opaque(4, "max_d", "d").unwrap_err();
        assert_eq!(e.kind.name(), "limit-exceeded");
        assert_eq!(e.offset, 0);
        // No length word at all.
        let m = reply(&[0, 0, 5], &[b"hello"]);
        assert_eq!(
            m.reader()
                .ddp_opaque(100, "max", "d")
                .unwrap_err()
                .kind
                .name(),
            "truncated"
        );
    }

    //= rfc8166#section-4.3.2.1
    //# When a Requester has provided multiple Write chunks, the Responder
    //# fills in each Write chunk with one DDP-eligible result until there
    //# are either no more DDP-eligible results or no more Write chunks.
    #[test]
    fn ddp_opaque_consumes_results_in_order() {
        // { opaque a<> (DDP); unsigned 0x11; opaque name<> (not DDP);
        //   opaque b<> (DDP); opaque c<> (DDP) }: a = "one", name inline =
        // "n", b = "" (zero octets: no Write chunk), c = "three" in the
        // second chunk; the third chunk came back unused.
        let mut inline = w(&[3, 0x11, 1]);
        inline.extend_from_slice(b"n\0\0\0");
        inline.extend(w(&[0, 5]));
        let m = reply(&inline, &[b"one", b"three", b""]);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(10, "max", "a").unwrap()[..], b"one");
        assert_eq!(r.u32("x").unwrap(), 0x11);
        assert_eq!(&r.opaque(10, "max", "name").unwrap()[..], b"n");
        assert!(r.ddp_opaque(10, "max", "b").unwrap().is_empty());
        assert_eq!(&r.ddp_opaque(10, "max", "c").unwrap()[..], b"three");
        r.finish("end").unwrap();
    }

    //= rfc8166#section-4.3.2.2
    //# If there is a subsequent DDP-eligible result data item in the RPC
    //# Reply message, it MUST be placed in that unconsumed Write chunk.
    #[test]
    fn ddp_item_followed_by_a_word_equal_to_its_length() {
        // { opaque data<> (DDP); unsigned trailer; unsigned another } with
        // trailer == 4 == the data length. Inline: 4, 4, 0xfeed. A search
        // for a word equal to the length from the end finds `trailer`.
        let m = reply(&w(&[4, 4, 0xfeed]), &[b"DATA"]);
        let mut r = m.reader();
        assert_eq!(&r.ddp_opaque(10, "max", "data").unwrap()[..], b"DATA");
        assert_eq!(r.u32("trailer").unwrap(), 4);
        assert_eq!(r.u32("another").unwrap(), 0xfeed);
        r.finish("end").unwrap();
        // An unused chunk stays for the next DDP-eligible item: a union arm
        // without one (here a plain u32 arm) does not consume it, nor does
        // a zero-length item.
        let m = reply(&w(&[2, 0x77, 0, 3]), &[b"abc"]);
        let mut r = m.reader();
        assert_eq!(r.u32("arm").unwrap(), 2);
        assert_eq!(r.u32("arm2.value").unwrap(), 0x77);
        assert!(r.ddp_opaque(10, "max", "empty").unwrap().is_empty());
        assert_eq!(&r.ddp_opaque(10, "max", "later").unwrap()[..], b"abc");
        r.finish("end").unwrap();
    }

    #[test]
    fn unclaimed_results_are_trailing_and_travel_with_the_body() {
        let m = reply(&w(&[1, 2, 3]), &[b"", b"abcde"]);
        let mut r = m.reader();
        for _ in 0..3 {
            r.u32("w").unwrap();
        }
        // 5 octets of chunk data (8 with pad) nobody claimed.
        assert_eq!(r.remaining(), 8);
        let e = r.finish("end").unwrap_err();
        assert_eq!(e.kind.name(), "trailing-bytes");
        // An empty (unused) slot is not trailing.
        let m = reply(&w(&[1]), &[b""]);
        let mut r = m.reader();
        r.u32("w").unwrap();
        r.finish("end").unwrap();
        // Splitting the RPC header off keeps the results; so does append.
        let rest = m.split_inline_prefix(4).unwrap();
        assert!(rest.pieces().is_empty());
        assert_eq!(rest.results().len(), 1);
        assert!(rest.is_empty());
        let full = reply(&w(&[9, 3]), &[b"xyz"]);
        let body = full.split_inline_prefix(4).unwrap();
        assert!(!body.is_empty());
        assert_eq!(
            &body.reader().ddp_opaque(3, "max", "d").unwrap()[..],
            b"xyz"
        );
        let mut joined = Message::inline(w(&[7]));
        joined.append(body.clone());
        assert_eq!(joined.results(), body.results());
        // flatten() cannot place results: the inline stream only.
        assert_eq!(&full.flatten()[..], &w(&[9, 3])[..]);
    }

    #[test]
    fn split_inline_prefix() {
        let mut b = Message::builder();
        b.put_u32(1).put_u32(2);
        b.put_ddp_opaque(Bytes::from_static(b"d")).unwrap();
        let m = b.finish();
        let rest = m.split_inline_prefix(4).unwrap();
        assert_eq!(rest.xdr_len(), m.xdr_len() - 4);
        assert_eq!(&rest.flatten()[..4], &[0, 0, 0, 2]);
        assert_eq!(m.split_inline_prefix(12).unwrap().ddp_count(), 1);
        assert!(m.split_inline_prefix(13).is_none());
        assert!(Message::inline(vec![0u8; 4])
            .split_inline_prefix(8)
            .is_none());
    }

    // A received reply as the engine gives it out (`Message::from_reply_parts`)
    // with the runtime's XID put back (`Message::set_xid`), and a received
    // call's DDP ranges (`Message::from_reassembled`): what
    // the runtime's conversion layer did before the engine gave out
    // messages.
    fn engine_reply(message: Vec<u8>, results: Vec<Bytes>, xid: u32) -> Message {
        let mut m = Message::from_reply_parts(Bytes::from(message), results);
        m.set_xid(xid);
        m
    }

    fn incoming(message: Vec<u8>, ddp: &[std::ops::Range<usize>]) -> Message {
        Message::from_reassembled(message, ddp)
    }

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    /// xid, REPLY, MSG_ACCEPTED, AUTH_NONE, length 0, SUCCESS.
    const HDR: [u32; 6] = [0xaaaa_aaaa, 1, 0, 0, 0, 0];

    fn reply_words(body: &[u32]) -> Vec<u8> {
        let mut w = HDR.to_vec();
        w.extend_from_slice(body);
        words(&w)
    }

    #[test]
    fn reply_rewrites_the_xid_and_keeps_the_rest_inline() {
        let m = reply_words(&[5]);
        let r = engine_reply(m.clone(), vec![Bytes::from_static(b"hello")], 0x0102_0304);
        // One inline piece, byte for byte what the engine delivered except
        // the first word.
        assert_eq!(r.pieces().len(), 1);
        assert_eq!(&r.pieces()[0].bytes()[..8], &[1, 2, 3, 4, 0, 0, 0, 1][..]);
        assert_eq!(&r.pieces()[0].bytes()[4..], &m[4..]);
        // The result goes along out of band, unplaced.
        assert_eq!(r.results(), &[Bytes::from_static(b"hello")][..]);
        assert_eq!(r.ddp_count(), 1);
        // Placed by the reader.
        let mut rd = r.reader();
        rd.fixed_opaque(24, "hdr").unwrap();
        assert_eq!(&rd.ddp_opaque(100, "max", "data").unwrap()[..], b"hello");
        rd.finish("end").unwrap();
        // A reply shorter than a word keeps its octets.
        assert_eq!(
            &engine_reply(vec![7, 7], vec![], 9).flatten()[..],
            &[7, 7][..]
        );
    }

    #[test]
    fn reply_result_followed_by_a_word_equal_to_its_length() {
        // {opaque data<> (DDP); unsigned trailer; unsigned another} with
        // trailer == 3 == the data length: the old backwards search put the
        // data after `trailer`. Inline: length 3, trailer 3, another 0xfeed.
        let m = reply_words(&[3, 3, 0xfeed]);
        let r = engine_reply(m, vec![Bytes::from_static(b"abc")], 9);
        let mut rd = r.reader();
        rd.fixed_opaque(24, "hdr").unwrap();
        assert_eq!(&rd.ddp_opaque(10, "max", "data").unwrap()[..], b"abc");
        assert_eq!(rd.u32("trailer").unwrap(), 3);
        assert_eq!(rd.u32("another").unwrap(), 0xfeed);
        rd.finish("end").unwrap();
    }

    #[test]
    fn reply_slots_keep_write_list_order_including_empty_ones() {
        // Two DDP items; the first chunk came back unused (item inline), the
        // second holds "xy". Inline: len 1, "q" + pad, len 2.
        let mut m = reply_words(&[1]);
        m.extend_from_slice(b"q\0\0\0");
        m.extend(words(&[2]));
        let r = engine_reply(m, vec![Bytes::new(), Bytes::from_static(b"xy")], 9);
        assert_eq!(r.results().len(), 2);
        assert_eq!(r.ddp_count(), 1);
        let mut rd = r.reader();
        rd.fixed_opaque(24, "hdr").unwrap();
        assert_eq!(&rd.ddp_opaque(10, "max", "a").unwrap()[..], b"q");
        assert_eq!(&rd.ddp_opaque(10, "max", "b").unwrap()[..], b"xy");
        rd.finish("end").unwrap();
    }

    #[test]
    fn empty_results_leave_the_reply_inline() {
        let m = reply_words(&[0]);
        let r = engine_reply(m.clone(), vec![Bytes::new()], 7);
        assert_eq!(r.pieces().len(), 1);
        assert_eq!(r.ddp_count(), 0);
        assert_eq!(&r.flatten()[4..], &m[4..]);
        let mut rd = r.reader();
        rd.fixed_opaque(24, "hdr").unwrap();
        assert!(rd.ddp_opaque(10, "max", "data").unwrap().is_empty());
        rd.finish("end").unwrap();
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn incoming_ranges_become_ddp_pieces_without_pad() {
        // header word, length 5, data "hello", pad 3, trailer.
        let mut m = words(&[7, 5]);
        m.extend_from_slice(b"hello\0\0\0");
        m.extend(words(&[0xfeed]));
        let r = incoming(m, &[8..13]);
        let p = r.pieces();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1], Piece::Ddp(Bytes::from_static(b"hello")));
        assert_eq!(&p[2].bytes()[..], &words(&[0xfeed])[..]);
        // A bad range: one inline piece.
        assert_eq!(incoming(vec![0; 8], &[4..20]).pieces().len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Item {
        U32(u32),
        Opaque(Vec<u8>),
        Ddp(Vec<u8>),
    }

    fn arb_item() -> impl Strategy<Value = Item> {
        prop_oneof![
            any::<u32>().prop_map(Item::U32),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Item::Opaque),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Item::Ddp),
        ]
    }

    proptest! {
        #[test]
        fn split_inline_prefix_of_one_piece_is_the_walk(
            data in proptest::collection::vec(any::<u8>(), 0..40),
            results in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 0..3),
            n in 0usize..48,
        ) {
            let m = Message::with_results(data, results);
            let walked = m.split_inline_prefix_walk(n);
            prop_assert_eq!(&m.split_inline_prefix(n), &walked);
            prop_assert_eq!(m.into_split_inline_prefix(n), walked);
        }

        #[test]
        fn build_flatten_read_round_trip(items in proptest::collection::vec(arb_item(), 0..12)) {
            let mut b = Message::builder();
            let mut expect_len = 0usize;
            for it in &items {
                match it {
                    Item::U32(v) => { b.put_u32(*v); expect_len += 4; }
                    Item::Opaque(d) => { b.put_opaque(d).unwrap(); expect_len += 4 + d.len() + pad_len(d.len()); }
                    Item::Ddp(d) => { b.put_ddp_opaque(d.clone()).unwrap(); expect_len += 4 + d.len() + pad_len(d.len()); }
                }
            }
            let m = b.finish();
            // The builder's list taken as it is equals the general
            // constructor's (which drops empty inline pieces).
            prop_assert_eq!(&m, &Message::from_pieces(m.pieces().to_vec()));
            let flat = m.flatten();
            prop_assert_eq!(m.xdr_len(), expect_len);
            prop_assert_eq!(flat.len(), expect_len);
            prop_assert_eq!(m.crc32c(), crc32c::crc32c(&flat));
            let ddp_items = items.iter().filter(|i| matches!(i, Item::Ddp(_))).count();
            prop_assert_eq!(m.ddp_count(), ddp_items);
            // Read back both the pieces and the flattened (TCP) form.
            for msg in [m.clone(), Message::inline(flat.clone())] {
                let mut r = msg.reader();
                for it in &items {
                    match it {
                        Item::U32(v) => prop_assert_eq!(r.u32("u").unwrap(), *v),
                        Item::Opaque(d) | Item::Ddp(d) => {
                            prop_assert_eq!(&r.opaque(u32::MAX, "m", "o").unwrap()[..], &d[..])
                        }
                    }
                }
                prop_assert!(r.finish("end").is_ok());
            }
            // The RPC-over-RDMA reply form: DDP items' data out of band
            // (every third one's chunk comes back empty, the item inline),
            // read with ddp_opaque.
            let mut inline = Vec::new();
            let mut results: Vec<Bytes> = Vec::new();
            for (i, it) in items.iter().enumerate() {
                match it {
                    Item::U32(v) => inline.extend_from_slice(&v.to_be_bytes()),
                    Item::Opaque(d) => {
                        inline.extend_from_slice(&(d.len() as u32).to_be_bytes());
                        inline.extend_from_slice(d);
                        inline.resize(inline.len() + pad_len(d.len()), 0);
                    }
                    // A zero-length item takes no Write chunk.
                    Item::Ddp(d) if d.is_empty() => inline.extend_from_slice(&[0; 4]),
                    Item::Ddp(d) => {
                        inline.extend_from_slice(&(d.len() as u32).to_be_bytes());
                        if i % 3 == 0 {
                            inline.extend_from_slice(d);
                            inline.resize(inline.len() + pad_len(d.len()), 0);
                            results.push(Bytes::new());
                        } else {
                            results.push(Bytes::from(d.clone()));
                        }
                    }
                }
            }
            let rdma = Message::with_results(inline.clone(), results.clone());
            prop_assert_eq!(rdma.xdr_len(), expect_len);
            for msg in [rdma.clone(), m.clone(), Message::inline(flat.clone())] {
                let mut r = msg.reader();
                for it in &items {
                    match it {
                        Item::U32(v) => prop_assert_eq!(r.u32("u").unwrap(), *v),
                        Item::Opaque(d) => prop_assert_eq!(&r.opaque(u32::MAX, "m", "o").unwrap()[..], &d[..]),
                        Item::Ddp(d) => prop_assert_eq!(&r.ddp_opaque(u32::MAX, "m", "o").unwrap()[..], &d[..]),
                    }
                }
                prop_assert_eq!(r.position(), expect_len);
                prop_assert!(r.finish("end").is_ok());
            }
            // Every truncation of the reply form's inline stream fails to
            // decode, never panics.
            for cut in 0..inline.len() {
                let msg = Message::with_results(inline[..cut].to_vec(), results.clone());
                let mut r = msg.reader();
                let mut failed = false;
                for it in &items {
                    let res = match it {
                        Item::U32(_) => r.u32("u").map(|_| ()),
                        Item::Opaque(_) => r.opaque(u32::MAX, "m", "o").map(|_| ()),
                        Item::Ddp(_) => r.ddp_opaque(u32::MAX, "m", "o").map(|_| ()),
                    };
                    if res.is_err() { failed = true; break; }
                }
                prop_assert!(failed || r.finish("end").is_err());
            }
            // Every truncation of the flattened form fails to decode, never panics.
            for cut in 0..flat.len() {
                let msg = Message::inline(flat.slice(..cut));
                let mut r = msg.reader();
                let mut failed = false;
                for it in &items {
                    let res = match it {
                        Item::U32(_) => r.u32("u").map(|_| ()),
                        _ => r.opaque(u32::MAX, "m", "o").map(|_| ()),
                    };
                    if res.is_err() { failed = true; break; }
                }
                prop_assert!(failed || r.finish("end").is_err());
            }
        }
    }
}
