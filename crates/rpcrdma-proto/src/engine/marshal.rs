//! Pure helpers for laying out RPC messages: flattening pieces into the XDR
//! stream, removing DDP items, checking Read chunk positions and
//! reassembling a call from its inline part and its Read chunks.

use core::ops::Range;

use bytes::Bytes;

use super::Piece;
use crate::message::Message;

/// XDR roundup of `n` to a multiple of four, minus `n`.
pub(crate) const fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// A DDP-eligible item in the flattened stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DdpItem {
    /// Offset of its data in the full XDR stream (its Read chunk position).
    pub position: usize,
    /// Octets of data (no pad).
    pub len: usize,
}

/// The full XDR stream of `pieces` (DDP items followed by their XDR pad)
/// and where the DDP items are.
//= rfc8166#section-3.4.5
//# The Position value
//# MUST be computed from the beginning of the unreduced Payload
//# stream, which begins at Position zero.
//= rfc8166#section-3.4.4.1
//# If a chunk contains a counted array data type, the count of array
//# elements MUST remain in the Payload stream, while the array elements
//# MUST be moved to the chunk.
// (A `Piece::Ddp` is the data only; its count stays in the inline piece.)
pub(crate) fn flatten(pieces: &[Piece]) -> (Vec<u8>, Vec<DdpItem>) {
    let total: usize = pieces.iter().map(Piece::xdr_len).sum();
    let mut stream = Vec::with_capacity(total);
    let mut ddp = Vec::new();
    for p in pieces {
        match p {
            Piece::Inline(b) => stream.extend_from_slice(b),
            Piece::Ddp(_) | Piece::File(_) => {
                let b = p.file_octets();
                ddp.push(DdpItem {
                    position: stream.len(),
                    len: b.len(),
                });
                stream.extend_from_slice(&b);
                stream.resize(stream.len() + pad4(b.len()), 0);
            }
        }
    }
    (stream, ddp)
}

/// [`flatten`] without building the stream: the stream's length and, for
/// each DDP piece, its index in `pieces` and where it would be.
pub(crate) fn layout(pieces: &[Piece]) -> (usize, Vec<(usize, DdpItem)>) {
    let mut at = 0usize;
    let mut ddp = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Inline(b) => at += b.len(),
            Piece::Ddp(_) | Piece::File(_) => {
                ddp.push((
                    i,
                    DdpItem {
                        position: at,
                        len: p.len(),
                    },
                ));
                at += p.xdr_len();
            }
        }
    }
    (at, ddp)
}

/// `strip(&flatten(pieces).0, items)` without building the full stream:
/// every piece except the DDP pieces whose indexes are in `skip`, which
/// leave neither their data nor their XDR pad.
//= rfc8166#section-3.4.4.4
//# When a variable-length XDR data item is reduced, the sender MUST
//# remove XDR roundup padding for that data item from the Payload stream
//# so that data items remaining in the Payload stream begin on four-byte
//# alignment.
pub(crate) fn inline_except(pieces: &[Piece], skip: &[usize]) -> Vec<u8> {
    let mut out = vec![0u8; inline_len_except(pieces, skip)];
    let n = write_except(pieces, skip, &mut out);
    out.truncate(n);
    out
}

/// Octets of [`inline_except`]`(pieces, skip)`.
pub(crate) fn inline_len_except(pieces: &[Piece], skip: &[usize]) -> usize {
    pieces
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Piece::Inline(b) => b.len(),
            _ if !skip.contains(&i) => p.xdr_len(),
            _ => 0,
        })
        .sum()
}

/// [`inline_except`] written at the front of `out` instead of a new vector
/// (`out` is typically a reused Send buffer): every octet up to the
/// returned length is written, XDR pads as zeros, so nothing `out` held
/// before shows through. Stops at the end of `out`; returns the octets
/// written ([`inline_len_except`] when `out` is long enough).
pub(crate) fn write_except(pieces: &[Piece], skip: &[usize], out: &mut [u8]) -> usize {
    let mut at = 0usize;
    let mut put = |src: &[u8], zeros: usize, out: &mut [u8]| {
        let room = out.len() - at;
        let n = src.len().min(room);
        if let Some(d) = out.get_mut(at..at + n) {
            d.copy_from_slice(src.get(..n).unwrap_or_default());
        }
        at += n;
        let z = zeros.min(out.len() - at);
        if let Some(d) = out.get_mut(at..at + z) {
            d.fill(0);
        }
        at += z;
    };
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Inline(b) => put(b, 0, out),
            Piece::Ddp(b) if !skip.contains(&i) => put(b, pad4(b.len()), out),
            // (Read ahead by the responder: see `send_reply`.)
            Piece::File(_) if !skip.contains(&i) => put(&p.file_octets(), pad4(p.len()), out),
            Piece::Ddp(_) | Piece::File(_) => {}
        }
    }
    at
}

/// The stream with the listed DDP items (data and XDR pad) removed.
#[cfg(test)]
pub(crate) fn strip(stream: &[u8], items: &[DdpItem]) -> Vec<u8> {
    let mut out = Vec::with_capacity(stream.len());
    let mut at = 0;
    for it in items {
        out.extend_from_slice(stream.get(at..it.position).unwrap_or(&[]));
        at = it.position + it.len + pad4(it.len);
    }
    out.extend_from_slice(stream.get(at..).unwrap_or(&[]));
    out
}

/// Checks the data Read chunks (`(position, length)`, in wire order) of a
/// call whose inline part (or Position-Zero Read chunk) is `base_len`
/// octets; returns the reassembled length.
///
/// Positions are offsets in the reassembled XDR stream: 4-aligned,
/// increasing, each inside the inline part that is left. A chunk whose
/// length is not a multiple of four is followed by an XDR pad that the
/// requester did not send (RFC 8166 §3.4.5.2 permits both forms).
pub(crate) fn check_positions(
    base_len: usize,
    chunks: &[(u32, u64)],
    max_len: u64,
) -> Result<u64, &'static str> {
    let mut out: u64 = 0; // octets of the reassembled stream so far
    let mut inline_at: u64 = 0; // octets of the base consumed so far
    for &(pos, len) in chunks {
        let pos = u64::from(pos);
        //= rfc8166#section-3.4.5
        //# The value in this field
        //# MUST be a multiple of four.
        if pos % 4 != 0 {
            return Err("read chunk position not 4-aligned");
        }
        if pos < out {
            return Err("read chunk positions overlap or are out of order");
        }
        let inline_off = inline_at + (pos - out);
        if inline_off > base_len as u64 {
            return Err("read chunk position beyond the end of the message");
        }
        out = pos + len + pad4((len % 4) as usize) as u64;
        inline_at = inline_off;
        if out > max_len {
            return Err("reassembled call exceeds max_message_len");
        }
    }
    let total = out + (base_len as u64 - inline_at);
    if total > max_len {
        return Err("reassembled call exceeds max_message_len");
    }
    Ok(total)
}

/// Reassembles a call: `base` with each chunk's data (plus XDR pad)
/// inserted at its position. Returns the message and the ranges of chunk
/// data. `chunks` must have passed [`check_positions`].
pub(crate) fn reassemble(base: Vec<u8>, chunks: &[(u32, Vec<u8>)]) -> (Vec<u8>, Vec<Range<usize>>) {
    if chunks.is_empty() {
        // Nothing to insert: the message is the inline part as it is.
        return (base, Vec::new());
    }
    let base = base.as_slice();
    let mut out = Vec::new();
    let mut ranges = Vec::with_capacity(chunks.len());
    let mut inline_at = 0usize;
    for (pos, data) in chunks {
        let pos = *pos as usize;
        let inline_off = inline_at + pos.saturating_sub(out.len());
        out.extend_from_slice(base.get(inline_at..inline_off).unwrap_or(&[]));
        inline_at = inline_off.min(base.len());
        let start = out.len();
        out.extend_from_slice(data);
        ranges.push(start..out.len());
        out.resize(out.len() + pad4(data.len()), 0);
    }
    out.extend_from_slice(base.get(inline_at..).unwrap_or(&[]));
    (out, ranges)
}

/// The received call `base` (its inline part, or its Position-Zero Read
/// chunk) with each Read chunk's data (`(position, data)`, wire order)
/// inserted at its position, as a [`Message`] whose pieces share the
/// buffers given (the Read sinks and the inline part are not copied): the
/// same message as `Message::from_reassembled` of [`reassemble`], which
/// copies everything into one buffer first.
///
/// Pieces are laid out directly when the positions are in order and each
/// falls inside the inline part still to come (what [`check_positions`]
/// ensures of every call admitted); anything else goes to the general path.
pub(crate) fn assemble(base: Bytes, chunks: &[(u32, Bytes)]) -> Message {
    if chunks.is_empty() {
        return Message::inline(base);
    }
    let mut m = Message::new();
    let mut out = 0usize; // octets of the reassembled stream so far
    let mut inline_at = 0usize; // octets of `base` consumed so far
    for (pos, data) in chunks {
        let pos = *pos as usize;
        let inline_off = pos
            .checked_sub(out)
            .and_then(|gap| inline_at.checked_add(gap))
            .filter(|&off| off <= base.len());
        let Some(inline_off) = inline_off else {
            return assemble_slow(&base, chunks);
        };
        m.push(Piece::Inline(base.slice(inline_at..inline_off)));
        m.push(Piece::Ddp(data.clone()));
        inline_at = inline_off;
        out = pos + data.len() + pad4(data.len());
    }
    m.push(Piece::Inline(base.slice(inline_at..)));
    m
}

/// [`assemble`] by the general path: copied into one buffer by
/// [`reassemble`], then split into pieces again.
pub(crate) fn assemble_slow(base: &[u8], chunks: &[(u32, Bytes)]) -> Message {
    let data: Vec<(u32, Vec<u8>)> = chunks.iter().map(|(p, d)| (*p, d.to_vec())).collect();
    let (message, ddp) = reassemble(base.to_vec(), &data);
    Message::from_reassembled(message, &ddp)
}

/// How `len` octets spread over segments of the given lengths:
/// `(segment index, offset in the data, octets)`, or `None` if they do not
/// fit.
pub(crate) fn spread(len: usize, segs: &[u32]) -> Option<Vec<(usize, usize, usize)>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for (i, &s) in segs.iter().enumerate() {
        if at == len {
            break;
        }
        let n = (s as usize).min(len - at);
        if n > 0 {
            out.push((i, at, n));
        }
        at += n;
    }
    (at == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatten_and_strip() {
        let pieces = vec![
            Piece::Inline(vec![1, 2, 3, 4, 0, 0, 0, 5].into()),
            Piece::Ddp(vec![9, 9, 9, 9, 9].into()),
            Piece::Inline(vec![7, 7, 7, 7].into()),
        ];
        let (s, d) = flatten(&pieces);
        assert_eq!(
            s,
            vec![1, 2, 3, 4, 0, 0, 0, 5, 9, 9, 9, 9, 9, 0, 0, 0, 7, 7, 7, 7]
        );
        assert_eq!(
            d,
            vec![DdpItem {
                position: 8,
                len: 5
            }]
        );
        assert_eq!(strip(&s, &d), vec![1, 2, 3, 4, 0, 0, 0, 5, 7, 7, 7, 7]);
    }

    #[test]
    fn layout_and_inline_except_match_flatten_and_strip() {
        let pieces = vec![
            Piece::Inline(vec![1, 2, 3, 4, 0, 0, 0, 5].into()),
            Piece::Ddp(vec![9, 9, 9, 9, 9].into()),
            Piece::Inline(vec![0, 0, 0, 2].into()),
            Piece::Ddp(vec![6, 6].into()),
            Piece::Inline(vec![7, 7, 7, 7].into()),
        ];
        let (total, items) = layout(&pieces);
        assert_eq!(total, 28);
        assert_eq!(
            items,
            vec![
                (
                    1,
                    DdpItem {
                        position: 8,
                        len: 5
                    }
                ),
                (
                    3,
                    DdpItem {
                        position: 20,
                        len: 2
                    }
                ),
            ]
        );
        // Only the first DDP item removed: the second stays, padded.
        assert_eq!(
            inline_except(&pieces, &[1]),
            vec![1, 2, 3, 4, 0, 0, 0, 5, 0, 0, 0, 2, 6, 6, 0, 0, 7, 7, 7, 7]
        );
        let (s, d) = flatten(&pieces);
        assert_eq!(s.len(), total);
        assert_eq!(inline_except(&pieces, &[1, 3]), strip(&s, &d));
        assert_eq!(inline_except(&pieces, &[]), s);
    }

    #[test]
    fn write_except_overwrites_every_octet_of_a_reused_buffer() {
        let pieces = vec![
            Piece::Inline(vec![1, 2, 3, 4].into()),
            Piece::Ddp(vec![9, 9, 9, 9, 9].into()),
            Piece::Inline(vec![0, 0, 0, 2].into()),
            Piece::Ddp(vec![6].into()),
        ];
        for skip in [&[][..], &[1], &[3], &[1, 3]] {
            let want = inline_except(&pieces, skip);
            assert_eq!(want.len(), inline_len_except(&pieces, skip));
            // A Send buffer that held an earlier message: its old octets
            // (pads included) must not show through.
            let mut buf = vec![0xAAu8; 64];
            let n = write_except(&pieces, skip, &mut buf);
            assert_eq!(&buf[..n], &want[..], "skip {skip:?}");
            assert!(buf[n..].iter().all(|&b| b == 0xAA));
            // Too short a buffer: filled, never overrun.
            let mut short = vec![0xAAu8; 6];
            assert_eq!(write_except(&pieces, skip, &mut short), 6.min(want.len()));
            assert_eq!(&short[..6.min(want.len())], &want[..6.min(want.len())]);
        }
    }

    #[test]
    fn positions() {
        // Inline 12 octets, one chunk of 5 at 8: 8 + 5 + 3 + 4 = 20.
        assert_eq!(check_positions(12, &[(8, 5)], 1 << 20), Ok(20));
        assert!(check_positions(12, &[(6, 5)], 1 << 20).is_err());
        assert!(check_positions(12, &[(16, 5)], 1 << 20).is_err());
        assert_eq!(check_positions(12, &[(12, 4)], 1 << 20), Ok(16));
        // Two chunks: 4 inline, chunk A (8 octets), 4 inline, chunk B.
        assert_eq!(check_positions(8, &[(4, 8), (16, 3)], 1 << 20), Ok(20));
        assert!(check_positions(8, &[(16, 3), (4, 8)], 1 << 20).is_err());
        assert!(check_positions(8, &[(4, 8)], 15).is_err());
        assert!(check_positions(0, &[(0, u64::from(u32::MAX))], u64::MAX).is_ok());
    }

    #[test]
    fn reassemble_inserts_data_and_pad() {
        let base = vec![1u8, 1, 1, 1, 2, 2, 2, 2];
        assert_eq!(reassemble(base.clone(), &[]), (base.clone(), vec![]));
        let (m, r) = reassemble(base, &[(4, vec![9, 9, 9, 9, 9, 9, 9, 9]), (16, vec![8])]);
        assert_eq!(
            m,
            vec![1, 1, 1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 2, 2, 2, 2, 8, 0, 0, 0]
        );
        assert_eq!(r, vec![4..12, 16..17]);
    }

    #[test]
    fn assemble_shares_the_buffers() {
        let base = Bytes::from(vec![1u8, 1, 1, 1, 2, 2, 2, 2]);
        let a = Bytes::from(vec![9u8; 8]);
        let b = Bytes::from(vec![8u8]);
        let m = assemble(base.clone(), &[(4, a.clone()), (16, b.clone())]);
        assert_eq!(
            m.pieces(),
            &[
                Piece::Inline(base.slice(..4)),
                Piece::Ddp(a.clone()),
                Piece::Inline(base.slice(4..)),
                Piece::Ddp(b.clone()),
            ]
        );
        // No copy: the DDP pieces are the sinks themselves.
        assert_eq!(m.pieces()[1].bytes().as_ptr(), a.as_ptr());
        assert_eq!(m.pieces()[3].bytes().as_ptr(), b.as_ptr());
        let slow = assemble_slow(&base, &[(4, a), (16, b)]);
        assert_eq!(m, slow);
    }

    proptest::proptest! {
        /// The fast path is the general path: the same message for any
        /// inline part and any chunks, positions valid or not.
        #[test]
        fn assemble_is_reassemble(
            base in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            chunks in proptest::collection::vec(
                (0u32..64, proptest::collection::vec(proptest::num::u8::ANY, 0..13)),
                0..4,
            ),
            aligned in proptest::bool::ANY,
        ) {
            let chunks: Vec<(u32, Bytes)> = chunks
                .into_iter()
                .map(|(p, d)| (if aligned { p & !3 } else { p }, Bytes::from(d)))
                .collect();
            let fast = assemble(Bytes::from(base.clone()), &chunks);
            let slow = assemble_slow(&base, &chunks);
            proptest::prop_assert_eq!(&fast, &slow);
            proptest::prop_assert_eq!(fast.pieces(), slow.pieces());
            // And the RPC header words the responder checks are those of
            // the flat reassembled stream, wherever they lie.
            let data: Vec<(u32, Vec<u8>)> = chunks.iter().map(|(p, d)| (*p, d.to_vec())).collect();
            let flat = reassemble(base, &data).0;
            proptest::prop_assert_eq!(
                crate::engine::framing::message_prefix(&fast),
                crate::engine::framing::rpc_prefix(&flat)
            );
        }
    }

    #[test]
    fn spread_over_segments() {
        assert_eq!(
            spread(10, &[4, 4, 4]),
            Some(vec![(0, 0, 4), (1, 4, 4), (2, 8, 2)])
        );
        assert_eq!(spread(0, &[4]), Some(vec![]));
        assert_eq!(spread(13, &[4, 4, 4]), None);
    }
}
