//! XDR (RFC 4506) reader and writer.
//!
//! Everything that comes from a peer is hostile. The [`Reader`] therefore:
//!
//! * never panics and never indexes out of bounds (every access goes through
//!   `get`/`split_at` after a length check);
//! * checks every count or length read from the wire against a named limit
//!   *before* anything is allocated ([`Reader::count`], [`Reader::var_opaque`]),
//!   and also against the number of bytes that are actually left, so a count
//!   of four billion in a 28-byte message is refused before `Vec::with_capacity`;
//! * accepts only `0` or `1` as an XDR boolean / optional-data discriminant;
//! * does checked arithmetic on lengths (`len + pad` cannot wrap);
//! * reports trailing bytes when the caller says a structure must end here
//!   ([`Reader::finish`]).
//!
//! Encoding is into a caller-provided buffer ([`Writer`]). Every encodable
//! type reports its exact [`XdrEncode::encoded_len`] first; that number is what
//! the inline-versus-chunk decision of RPC-over-RDMA is made on, so it is
//! exact, not an estimate (a property test in each codec checks this).

use core::fmt;

/// Why a decode failed. The variant name (see [`DecodeErrorKind::name`]) is
/// what `rpcrdma decode --json` prints as `"error"`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The input ended before the structure did.
    Truncated {
        /// Octets the next item needed.
        needed: usize,
        /// Octets that were left.
        available: usize,
    },
    /// A count or length from the wire is larger than the named limit allows.
    LimitExceeded {
        /// Name of the [`crate::Limits`] field (or fixed protocol limit).
        limit: &'static str,
        /// The limit in force.
        max: u64,
        /// The value the peer sent.
        value: u64,
    },
    /// An XDR boolean or optional-data discriminant other than 0 or 1.
    BadBool(u32),
    /// Bytes were left after a structure that must end the message.
    TrailingBytes(usize),
    /// Length or offset arithmetic overflowed (e.g. `offset + length > 2^64`,
    /// or a chunk whose segment lengths add up to more than `u32::MAX`).
    Overflow(&'static str),
    /// XDR padding octets that are not zero (RFC 4506 §4.10).
    NonZeroPadding,
    /// A value that does not fit the XDR type it is decoded as (for example
    /// an enum value outside a closed enumeration, or a typed property value
    /// of the wrong length).
    BadValue {
        /// What was being decoded.
        what: &'static str,
        /// Details.
        detail: String,
    },
}

impl DecodeErrorKind {
    /// Stable, machine-readable name of the error kind.
    pub fn name(&self) -> &'static str {
        match self {
            DecodeErrorKind::Truncated { .. } => "truncated",
            DecodeErrorKind::LimitExceeded { .. } => "limit-exceeded",
            DecodeErrorKind::BadBool(_) => "bad-optional",
            DecodeErrorKind::TrailingBytes(_) => "trailing-bytes",
            DecodeErrorKind::Overflow(_) => "overflow",
            DecodeErrorKind::NonZeroPadding => "bad-padding",
            DecodeErrorKind::BadValue { .. } => "bad-value",
        }
    }
}

/// A decode failure: what went wrong, at which octet offset of the input, and
/// while decoding which field. The peer is to blame for every one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// What went wrong.
    pub kind: DecodeErrorKind,
    /// Offset (in octets from the start of the decoded buffer) of the item
    /// that could not be decoded.
    pub offset: usize,
    /// The field being decoded, e.g. `"rdma_reads"`.
    pub field: &'static str,
}

impl DecodeError {
    /// Creates an error.
    pub fn new(kind: DecodeErrorKind, offset: usize, field: &'static str) -> Self {
        DecodeError {
            kind,
            offset,
            field,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {} ({}): ",
            self.kind.name(),
            self.offset,
            self.field
        )?;
        match &self.kind {
            DecodeErrorKind::Truncated { needed, available } => {
                write!(f, "needed {needed} octets, {available} left")
            }
            DecodeErrorKind::LimitExceeded { limit, max, value } => {
                write!(f, "{value} exceeds {limit} = {max}")
            }
            DecodeErrorKind::BadBool(v) => {
                write!(f, "optional-data discriminant {v} is neither 0 nor 1")
            }
            DecodeErrorKind::TrailingBytes(n) => write!(f, "{n} trailing octets"),
            DecodeErrorKind::Overflow(what) => write!(f, "arithmetic overflow in {what}"),
            DecodeErrorKind::NonZeroPadding => write!(f, "XDR padding is not zero"),
            DecodeErrorKind::BadValue { what, detail } => write!(f, "bad {what}: {detail}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Encoding failed: the caller's buffer is too small, or a value cannot be
/// represented in XDR (an opaque longer than `u32::MAX`). These are the
/// caller's errors, never the peer's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is shorter than [`XdrEncode::encoded_len`].
    BufferTooSmall {
        /// Octets needed.
        needed: usize,
        /// Octets available.
        available: usize,
    },
    /// A length does not fit in an XDR `unsigned int`.
    TooLong(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall { needed, available } => {
                write!(
                    f,
                    "buffer too small: need {needed} octets, have {available}"
                )
            }
            EncodeError::TooLong(what) => write!(f, "{what} is longer than 2^32-1 octets"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Number of pad octets that round `len` up to a multiple of four.
#[inline]
pub const fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// `len` rounded up to a multiple of four (the XDR roundup).
#[inline]
pub const fn padded_len(len: usize) -> usize {
    len + pad_len(len)
}

/// The big-endian `u32` at octet `at` of `b` (0 if it does not fit; the
/// callers pass constant offsets inside `b`). Reads the four octets in
/// place: no copy of `b`.
#[inline(always)]
pub(crate) fn be_u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    match b.get(at..).and_then(|s| s.first_chunk::<4>()) {
        Some(w) => u32::from_be_bytes(*w),
        None => 0,
    }
}

/// The big-endian `u64` at octet `at` of `b`, as [`be_u32_at`].
#[inline(always)]
pub(crate) fn be_u64_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    match b.get(at..).and_then(|s| s.first_chunk::<8>()) {
        Some(w) => u64::from_be_bytes(*w),
        None => 0,
    }
}

/// Bounded, panic-free XDR reader over a borrowed buffer.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Octets consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Octets left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Skips `n` octets (at most what is left) that the caller decoded from
    /// [`Reader::rest`].
    #[inline]
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos += n.min(self.remaining());
    }

    /// The whole buffer, read and unread.
    #[inline]
    pub(crate) fn whole(&self) -> &'a [u8] {
        self.buf
    }

    /// The unread rest of the buffer.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    /// An error of `kind` at the current position.
    pub fn error(&self, kind: DecodeErrorKind, field: &'static str) -> DecodeError {
        DecodeError::new(kind, self.pos, field)
    }

    /// The truncation error for an item of `needed` octets at the current
    /// position (kept out of line: the hot paths only branch to it).
    #[cold]
    #[inline(never)]
    fn truncated(&self, needed: usize, field: &'static str) -> DecodeError {
        self.error(
            DecodeErrorKind::Truncated {
                needed,
                available: self.remaining(),
            },
            field,
        )
    }

    #[cold]
    #[inline(never)]
    fn u64_truncated(&self, field: &'static str) -> DecodeError {
        let mut r = self.clone();
        match r.u32(field) {
            Ok(_) => r.truncated(4, field),
            Err(e) => e,
        }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        // `pos <= buf.len()` always, so `rest` is the whole unread input and
        // `split_at_checked` is the only length check.
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        match rest.split_at_checked(n) {
            Some((out, _)) => {
                self.pos += n;
                Ok(out)
            }
            None => Err(self.truncated(n, field)),
        }
    }

    /// The next `N` octets as an array (one length check).
    #[inline]
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        match rest.first_chunk::<N>() {
            Some(a) => {
                self.pos += N;
                Ok(*a)
            }
            None => Err(self.truncated(N, field)),
        }
    }

    /// An XDR `unsigned int`.
    #[inline]
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array::<4>(field)?))
    }

    /// An XDR `int`.
    #[inline]
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(self.u32(field)? as i32)
    }

    /// An XDR `unsigned hyper`.
    #[inline]
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or(&[]);
        match rest.first_chunk::<8>() {
            Some(a) => {
                self.pos += 8;
                Ok(u64::from_be_bytes(*a))
            }
            // Same error as two `unsigned int` reads: at the half that is cut.
            None => Err(self.u64_truncated(field)),
        }
    }

    /// An XDR `bool`, or the discriminant of optional-data (`*`): exactly 0
    /// or 1 (RFC 4506 §4.4, §4.19). Anything else is [`DecodeErrorKind::BadBool`].
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        let at = self.pos;
        match self.u32(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::new(DecodeErrorKind::BadBool(v), at, field)),
        }
    }

    /// Fixed-length opaque data of `len` octets followed by its zero padding.
    pub fn fixed_opaque(
        &mut self,
        len: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let total = len
            .checked_add(pad_len(len))
            .ok_or_else(|| self.error(DecodeErrorKind::Overflow("opaque length"), field))?;
        let start = self.pos;
        let all = self.take(total, field)?;
        let (data, pad) = all.split_at(len);
        if pad.iter().any(|&b| b != 0) {
            return Err(DecodeError::new(
                DecodeErrorKind::NonZeroPadding,
                start + len,
                field,
            ));
        }
        Ok(data)
    }

    /// Variable-length opaque data (`opaque<max>`): a length word checked
    /// against `max` (named `limit`) and the remaining input, then the data
    /// and its padding.
    pub fn var_opaque(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let len = self.opaque_len(max, limit, field)?;
        self.fixed_opaque(len as usize, field)
    }

    /// The length word of an `opaque<max>`, checked against `max` (named
    /// `limit`; the error is at the length word). The data is not looked
    /// at: [`Reader::var_opaque`] reads it inline, a
    /// [`MessageReader`](crate::message::MessageReader) may find it in a
    /// DDP piece or a Write chunk.
    pub fn opaque_len(
        &mut self,
        max: u32,
        limit: &'static str,
        field: &'static str,
    ) -> Result<u32, DecodeError> {
        let at = self.pos;
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
        Ok(len)
    }

    /// A count of items (the length word of a counted array, or the number
    /// of items a caller is about to read), checked against `max` (named
    /// `limit`) and against the input that is left, assuming every item takes
    /// at least `min_item_len` octets. Only after this check may a caller
    /// allocate `count` items.
    pub fn count(
        &mut self,
        max: u32,
        limit: &'static str,
        min_item_len: usize,
        field: &'static str,
    ) -> Result<u32, DecodeError> {
        let at = self.pos;
        let n = self.u32(field)?;
        check_count(n, max, limit, min_item_len, self.remaining(), at, field)?;
        Ok(n)
    }

    /// Fails with [`DecodeErrorKind::TrailingBytes`] unless the input is used up.
    pub fn finish(&self, field: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error(DecodeErrorKind::TrailingBytes(n), field)),
        }
    }
}

/// Checks a count from the wire against a named limit and the octets left.
pub fn check_count(
    n: u32,
    max: u32,
    limit: &'static str,
    min_item_len: usize,
    remaining: usize,
    at: usize,
    field: &'static str,
) -> Result<(), DecodeError> {
    if n > max {
        return Err(DecodeError::new(
            DecodeErrorKind::LimitExceeded {
                limit,
                max: max as u64,
                value: n as u64,
            },
            at,
            field,
        ));
    }
    let need = (n as usize).saturating_mul(min_item_len);
    if need > remaining {
        return Err(DecodeError::new(
            DecodeErrorKind::Truncated {
                needed: need,
                available: remaining,
            },
            at + 4,
            field,
        ));
    }
    Ok(())
}

/// XDR writer into a caller-provided buffer. Every method checks the space
/// left and fails with [`EncodeError::BufferTooSmall`] instead of panicking.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Octets written so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The error for `n` more octets than fit (out of line: the hot paths
    /// only branch to it).
    #[cold]
    #[inline(never)]
    fn too_small(&self, n: usize) -> EncodeError {
        EncodeError::BufferTooSmall {
            needed: self.pos.saturating_add(n),
            available: self.buf.len(),
        }
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        let rest = self.buf.get_mut(self.pos..).unwrap_or_default();
        match rest.get_mut(..bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.pos += bytes.len();
                Ok(())
            }
            None => Err(self.too_small(bytes.len())),
        }
    }

    /// `N` octets, as they are (one length check): the XDR of several
    /// fixed-size items assembled by the caller.
    #[inline]
    pub fn array<const N: usize>(&mut self, bytes: [u8; N]) -> Result<(), EncodeError> {
        let rest = self.buf.get_mut(self.pos..).unwrap_or_default();
        match rest.first_chunk_mut::<N>() {
            Some(dst) => {
                *dst = bytes;
                self.pos += N;
                Ok(())
            }
            None => Err(self.too_small(N)),
        }
    }

    /// An XDR `unsigned int`.
    #[inline]
    pub fn u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.array(v.to_be_bytes())
    }

    /// An XDR `int`.
    #[inline]
    pub fn i32(&mut self, v: i32) -> Result<(), EncodeError> {
        self.array(v.to_be_bytes())
    }

    /// An XDR `unsigned hyper`.
    #[inline]
    pub fn u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.array(v.to_be_bytes())
    }

    /// An XDR `bool` / optional-data discriminant.
    #[inline]
    pub fn bool(&mut self, v: bool) -> Result<(), EncodeError> {
        self.u32(v as u32)
    }

    /// Fixed-length opaque data plus zero padding.
    pub fn fixed_opaque(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        self.put(data)?;
        self.put(&[0u8; 3][..pad_len(data.len())])
    }

    /// Variable-length opaque data: length word, data, zero padding.
    pub fn var_opaque(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(data.len()).map_err(|_| EncodeError::TooLong("opaque"))?;
        self.u32(len)?;
        self.fixed_opaque(data)
    }

    /// Raw octets, no length word and no padding (e.g. an RPC message body
    /// appended after a transport header).
    pub fn raw(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        self.put(data)
    }
}

/// A value with an exact XDR encoding.
pub trait XdrEncode {
    /// Exact number of octets [`XdrEncode::write`] produces.
    fn encoded_len(&self) -> usize;

    /// Writes the encoding. Fails only if the writer runs out of space.
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError>;

    /// Encodes into the front of `buf`, after checking that
    /// [`XdrEncode::encoded_len`] octets fit; returns that length. Nothing is
    /// written when the buffer is too small.
    fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let n = self.encoded_len();
        let available = buf.len();
        let dst = buf.get_mut(..n).ok_or(EncodeError::BufferTooSmall {
            needed: n,
            available,
        })?;
        let mut w = Writer::new(dst);
        self.write(&mut w)?;
        debug_assert_eq!(w.position(), n, "encoded_len is not exact");
        Ok(n)
    }

    /// Encodes into a new vector of exactly [`XdrEncode::encoded_len`] octets.
    fn to_vec(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = vec![0u8; self.encoded_len()];
        self.encode(&mut v)?;
        Ok(v)
    }
}

/// Encoded length of a variable-length opaque of `len` octets.
#[inline]
pub const fn var_opaque_len(len: usize) -> usize {
    4 + padded_len(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_primitives() {
        let b = hex::decode("00000001fffffffe0000000100000002").unwrap();
        let mut r = Reader::new(&b);
        assert_eq!(r.u32("a").unwrap(), 1);
        assert_eq!(r.i32("b").unwrap(), -2);
        assert_eq!(r.u64("c").unwrap(), (1 << 32) | 2);
        r.finish("end").unwrap();
    }

    #[test]
    fn rejects_truncation_with_offset() {
        let b = [0u8, 0, 0];
        let e = Reader::new(&b).u32("x").unwrap_err();
        assert_eq!(e.offset, 0);
        assert_eq!(
            e.kind,
            DecodeErrorKind::Truncated {
                needed: 4,
                available: 3
            }
        );
    }

    //= rfc4506#section-4.4
    //# This is equivalent to:
    //#       enum { FALSE = 0, TRUE = 1 } identifier;
    //= rfc4506#section-4.3
    //# It is an error to encode as an enum any integer other than those that
    //# have been given assignments in the enum declaration.
    #[test]
    fn rejects_bool_other_than_0_1() {
        for v in [2u32, 0x8000_0000, u32::MAX] {
            let b = v.to_be_bytes();
            let e = Reader::new(&b).bool("opt").unwrap_err();
            assert_eq!(e.kind, DecodeErrorKind::BadBool(v));
        }
        assert!(!Reader::new(&[0, 0, 0, 0]).bool("o").unwrap());
        assert!(Reader::new(&[0, 0, 0, 1]).bool("o").unwrap());
    }

    //= rfc4506#section-4.10
    //# If n is not a multiple of four, then the n bytes are followed by
    //# enough (0 to 3) residual zero bytes, r, to make the total byte count
    //# a multiple of four.
    #[test]
    fn var_opaque_padding_roundtrip_and_checks() {
        for len in 0..9usize {
            let data: Vec<u8> = (1..=len as u8).collect();
            let mut buf = vec![0u8; var_opaque_len(len)];
            let mut w = Writer::new(&mut buf);
            w.var_opaque(&data).unwrap();
            assert_eq!(w.position(), var_opaque_len(len));
            assert_eq!(buf.len() % 4, 0);
            let mut r = Reader::new(&buf);
            assert_eq!(r.var_opaque(100, "max", "f").unwrap(), &data[..]);
            r.finish("end").unwrap();
            if pad_len(len) > 0 {
                let mut bad = buf.clone();
                *bad.last_mut().unwrap() = 1;
                let e = Reader::new(&bad).var_opaque(100, "max", "f").unwrap_err();
                assert_eq!(e.kind, DecodeErrorKind::NonZeroPadding);
            }
        }
    }

    #[test]
    fn var_opaque_limit_checked_before_data() {
        let b = hex::decode("ffffffff").unwrap();
        let e = Reader::new(&b)
            .var_opaque(400, "MAX_AUTH_BYTES", "f")
            .unwrap_err();
        assert_eq!(e.kind.name(), "limit-exceeded");
        // Length within the limit but longer than the input: truncated, with
        // no overflow in len + pad.
        let b = hex::decode("00000005aabb").unwrap();
        let e = Reader::new(&b).var_opaque(400, "L", "f").unwrap_err();
        assert_eq!(e.kind.name(), "truncated");
    }

    #[test]
    fn count_checks_limit_and_remaining_input() {
        let b = hex::decode("00000011").unwrap();
        let e = Reader::new(&b).count(16, "max_x", 4, "f").unwrap_err();
        assert!(matches!(
            e.kind,
            DecodeErrorKind::LimitExceeded { value: 17, .. }
        ));
        let b = hex::decode("0000000300000000").unwrap();
        let e = Reader::new(&b).count(16, "max_x", 4, "f").unwrap_err();
        assert!(matches!(
            e.kind,
            DecodeErrorKind::Truncated { needed: 12, .. }
        ));
    }

    #[test]
    fn writer_never_overruns() {
        let mut buf = [0u8; 6];
        let mut w = Writer::new(&mut buf);
        w.u32(7).unwrap();
        assert!(matches!(
            w.u32(8),
            Err(EncodeError::BufferTooSmall {
                needed: 8,
                available: 6
            })
        ));
        assert!(w.var_opaque(&[1, 2, 3]).is_err());
    }

    #[test]
    fn finish_reports_trailing() {
        let b = [0u8; 8];
        let mut r = Reader::new(&b);
        r.u32("a").unwrap();
        let e = r.finish("end").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TrailingBytes(4));
        assert_eq!(e.offset, 4);
    }
}
