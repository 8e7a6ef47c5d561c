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
//! [`MessageReader`] decodes a received message without caring whether a
//! DDP-eligible opaque arrived inline (TCP) or as a separate DDP piece (RDMA):
//! [`MessageReader::opaque`] returns the data as [`Bytes`] either way, and
//! always as a zero-copy slice of what was received.

use bytes::{BufMut, Bytes, BytesMut};
use rpcrdma_proto::xdr::{pad_len, DecodeErrorKind, Reader, XdrEncode};
use rpcrdma_proto::{DecodeError, EncodeError};

/// One piece of a [`Message`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Inline XDR octets.
    Inline(Bytes),
    /// The data of a DDP-eligible opaque: no length word (that is in the
    /// preceding inline piece), no XDR pad.
    Ddp(Bytes),
}

impl Piece {
    /// The octets of the piece (without any pad).
    pub fn bytes(&self) -> &Bytes {
        match self {
            Piece::Inline(b) | Piece::Ddp(b) => b,
        }
    }

    /// True for a DDP piece.
    pub fn is_ddp(&self) -> bool {
        matches!(self, Piece::Ddp(_))
    }

    /// Octets this piece occupies in the contiguous XDR stream (a DDP piece
    /// with its XDR pad).
    pub fn xdr_len(&self) -> usize {
        match self {
            Piece::Inline(b) => b.len(),
            Piece::Ddp(b) => b.len() + pad_len(b.len()),
        }
    }
}

/// An RPC message (or the arguments / results part of one) as a list of
/// [`Piece`]s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pieces: Vec<Piece>,
}

const ZERO_PAD: [u8; 3] = [0; 3];

impl Message {
    /// An empty message (the XDR of `void`).
    pub fn new() -> Self {
        Message { pieces: Vec::new() }
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

    /// Appends all pieces of `other`.
    pub fn append(&mut self, other: Message) {
        for p in other.pieces {
            self.push(p);
        }
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

    /// Consumes the message, giving its pieces.
    pub fn into_pieces(self) -> Vec<Piece> {
        self.pieces
    }

    /// The DDP pieces' data, in order.
    pub fn ddp_data(&self) -> impl Iterator<Item = &Bytes> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Ddp(b) => Some(b),
            Piece::Inline(_) => None,
        })
    }

    /// Number of DDP pieces.
    pub fn ddp_count(&self) -> usize {
        self.pieces.iter().filter(|p| p.is_ddp()).count()
    }

    /// Octets of the contiguous XDR stream: inline octets plus every DDP
    /// piece with its XDR pad.
    pub fn xdr_len(&self) -> usize {
        self.pieces.iter().map(Piece::xdr_len).sum()
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
        self.pieces.iter().all(|p| p.bytes().is_empty())
    }

    /// The contiguous XDR stream: pieces in order, each DDP piece followed by
    /// its zero XDR pad. A message of one inline piece is returned without a
    /// copy.
    pub fn flatten(&self) -> Bytes {
        if let [Piece::Inline(b)] = self.pieces.as_slice() {
            return b.clone();
        }
        let mut out = BytesMut::with_capacity(self.xdr_len());
        self.for_each_xdr_chunk(|c| out.extend_from_slice(c));
        out.freeze()
    }

    /// Calls `f` on each chunk of the contiguous XDR stream in order (piece
    /// data and pads): what a stream transport writes.
    pub fn for_each_xdr_chunk(&self, mut f: impl FnMut(&[u8])) {
        for p in &self.pieces {
            match p {
                Piece::Inline(b) => f(b),
                Piece::Ddp(b) => {
                    f(b);
                    let pad = pad_len(b.len());
                    if pad != 0 {
                        f(&ZERO_PAD[..pad]);
                    }
                }
            }
        }
    }

    /// CRC32C (Castagnoli) of the contiguous XDR stream, computed piece by
    /// piece without flattening.
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
    pub fn split_inline_prefix(&self, n: usize) -> Option<Message> {
        let mut left = n;
        let mut out = Message::new();
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
                Piece::Ddp(_) => return None,
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

/// Builds a [`Message`] with XDR helpers. Consecutive inline items share one
/// inline piece.
#[derive(Debug, Default)]
pub struct MessageBuilder {
    pieces: Vec<Piece>,
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
        self.cur.extend_from_slice(data);
        self.cur.extend_from_slice(&ZERO_PAD[..pad_len(data.len())]);
        self
    }

    /// Variable-length opaque data (`opaque<>`), inline: length word, data,
    /// pad. Fails when the data is longer than `u32::MAX`.
    pub fn put_opaque(&mut self, data: &[u8]) -> Result<&mut Self, EncodeError> {
        let n = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong("opaque"))?;
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
            let b = self.cur.split().freeze();
            self.pieces.push(Piece::Inline(b));
        }
    }

    /// The message.
    pub fn finish(&mut self) -> Message {
        self.flush_inline();
        Message::from_pieces(std::mem::take(&mut self.pieces))
    }
}

/// Decodes the XDR of a [`Message`], inline and DDP pieces alike. Errors are
/// the peer's ([`DecodeError`] with the field and the offset in the
/// contiguous XDR stream).
#[derive(Debug, Clone)]
pub struct MessageReader {
    /// The inline pieces concatenated (no copy for a single inline piece).
    inline: Bytes,
    /// DDP pieces with the inline offset they stand at.
    ddp: Vec<(usize, Bytes)>,
    /// Next DDP piece.
    next_ddp: usize,
    /// Position in `inline`.
    pos: usize,
    /// XDR octets of DDP pieces (with pad) already consumed, for offsets.
    ddp_consumed: usize,
}

impl MessageReader {
    /// A reader at the start of `m`.
    pub fn new(m: &Message) -> Self {
        let mut ddp = Vec::new();
        let inline = if m.ddp_count() == 0 && m.pieces.len() <= 1 {
            m.pieces
                .first()
                .map(|p| p.bytes().clone())
                .unwrap_or_default()
        } else {
            let mut buf = BytesMut::with_capacity(m.inline_len());
            for p in &m.pieces {
                match p {
                    Piece::Inline(b) => buf.extend_from_slice(b),
                    Piece::Ddp(b) => ddp.push((buf.len(), b.clone())),
                }
            }
            buf.freeze()
        };
        MessageReader {
            inline,
            ddp,
            next_ddp: 0,
            pos: 0,
            ddp_consumed: 0,
        }
    }

    /// Offset in the contiguous XDR stream.
    pub fn position(&self) -> usize {
        self.pos + self.ddp_consumed
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

    /// A variable-length `opaque<max>` (`max` named `limit`). If a DDP piece
    /// stands right after the length word, the data is that piece (whose
    /// length must equal the length word); otherwise the data and its zero
    /// pad are inline. Either way the result is a zero-copy slice.
    pub fn opaque(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        let at = self.position();
        let len = self.u32(field)?;
        if len > max {
            return Err(DecodeError::new(
                DecodeErrorKind::LimitExceeded {
                    limit,
                    max: max as u64,
                    value: len as u64,
                },
                at,
                field,
            ));
        }
        let len = len as usize;
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
                self.ddp_consumed += len + pad_len(len);
                return Ok(data);
            }
        }
        let start = self.pos;
        self.with_reader(|r| r.fixed_opaque(len, field).map(|_| ()))?;
        Ok(self.inline.slice(start..start + len))
    }

    /// Fixed-length opaque data of `len` octets (inline) and its pad.
    pub fn fixed_opaque(&mut self, len: usize, field: &'static str) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.with_reader(|r| r.fixed_opaque(len, field).map(|_| ()))?;
        Ok(self.inline.slice(start..start + len))
    }

    /// Octets of XDR left (inline and DDP).
    pub fn remaining(&self) -> usize {
        let ddp_left: usize = self
            .ddp
            .get(self.next_ddp..)
            .unwrap_or_default()
            .iter()
            .map(|(_, b)| b.len() + pad_len(b.len()))
            .sum();
        self.inline.len().saturating_sub(self.pos) + ddp_left
    }

    /// Fails with `trailing-bytes` unless everything (inline and DDP) was
    /// consumed.
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
