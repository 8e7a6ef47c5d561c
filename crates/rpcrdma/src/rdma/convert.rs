//! Conversions between runtime [`Message`]s and engine pieces.

use std::ops::Range;

use bytes::Bytes;
use rpcrdma_proto::engine::Piece as EPiece;
use rpcrdma_proto::xdr::pad_len;

use crate::message::{Message, Piece};

/// Runtime message → engine pieces (adjacent inline pieces merged; DDP
/// pieces stay DDP pieces, without pad).
pub(crate) fn to_engine(m: &Message) -> Vec<EPiece> {
    let mut out: Vec<EPiece> = Vec::with_capacity(m.pieces().len());
    for p in m.pieces() {
        match p {
            Piece::Inline(b) => match out.last_mut() {
                Some(EPiece::Inline(v)) => v.extend_from_slice(b),
                _ => out.push(EPiece::Inline(b.to_vec())),
            },
            Piece::Ddp(b) => out.push(EPiece::Ddp(b.to_vec())),
        }
    }
    out
}

/// A reassembled received call → runtime message: the ranges that arrived
/// by RDMA Read become DDP pieces (their XDR pad, which the engine inserted
/// after each, is skipped). Unusable ranges give one inline piece.
pub(crate) fn incoming(message: Vec<u8>, ddp: &[Range<usize>]) -> Message {
    let b = Bytes::from(message);
    if ddp.is_empty() {
        return Message::inline(b);
    }
    let mut ranges = ddp.to_vec();
    ranges.sort_by_key(|r| r.start);
    let mut pieces = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut pos = 0usize;
    for r in &ranges {
        if r.start < pos || r.end < r.start || r.end > b.len() {
            return Message::inline(b);
        }
        if r.start > pos {
            pieces.push(Piece::Inline(b.slice(pos..r.start)));
        }
        pieces.push(Piece::Ddp(b.slice(r.clone())));
        pos = r.end.saturating_add(pad_len(r.end - r.start)).min(b.len());
    }
    if pos < b.len() {
        pieces.push(Piece::Inline(b.slice(pos..)));
    }
    Message::from_pieces(pieces)
}

fn word_at(b: &[u8], off: usize) -> Option<u32> {
    let w = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Smallest accepted-reply header (xid, REPLY, MSG_ACCEPTED, verifier
/// flavor and length, accept_stat).
const MIN_REPLY_HEADER: usize = 24;

/// A received reply → runtime message: the first word is set to the
/// runtime's `xid`, and each non-empty Write chunk result goes back as a
/// DDP piece after its length word (see the module docs of `rdma` for the
/// placement rule).
pub(crate) fn reply(mut message: Vec<u8>, results: Vec<Vec<u8>>, xid: u32) -> Message {
    if let Some(w) = message.get_mut(0..4) {
        w.copy_from_slice(&xid.to_be_bytes());
    }
    let b = Bytes::from(message);
    // (offset of the byte after the length word, data), searched from the
    // last result backwards.
    let mut places: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut limit = b.len();
    for data in results.into_iter().rev() {
        if data.is_empty() {
            continue;
        }
        let Ok(len) = u32::try_from(data.len()) else {
            continue;
        };
        let mut found = None;
        let mut off = limit.saturating_sub(4) & !3;
        while off >= MIN_REPLY_HEADER {
            if off + 4 <= limit && word_at(&b, off) == Some(len) {
                found = Some(off);
                break;
            }
            if off < 4 {
                break;
            }
            off -= 4;
        }
        match found {
            Some(off) => {
                places.push((off + 4, data));
                limit = off;
            }
            None => {
                tracing::debug!(len, "DDP result without a matching length word");
                places.push((b.len(), data));
            }
        }
    }
    if places.is_empty() {
        return Message::inline(b);
    }
    places.sort_by_key(|(o, _)| *o);
    let mut pieces = Vec::with_capacity(places.len() * 2 + 1);
    let mut pos = 0usize;
    for (at, data) in places {
        if at > pos {
            pieces.push(Piece::Inline(b.slice(pos..at)));
            pos = at;
        }
        pieces.push(Piece::Ddp(Bytes::from(data)));
    }
    if pos < b.len() {
        pieces.push(Piece::Inline(b.slice(pos..)));
    }
    Message::from_pieces(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    #[test]
    fn reply_result_goes_after_its_length_word() {
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE, 0, SUCCESS, length 5.
        let m = words(&[0xaaaa_aaaa, 1, 0, 0, 0, 0, 5]);
        let r = reply(m, vec![b"hello".to_vec()], 0x0102_0304);
        let p = r.pieces();
        assert_eq!(p.len(), 2);
        assert_eq!(&p[0].bytes()[..4], &[1, 2, 3, 4]);
        assert_eq!(p[0].bytes().len(), 28);
        assert_eq!(p[1], Piece::Ddp(Bytes::from_static(b"hello")));
        let mut rd = r.reader();
        rd.fixed_opaque(24, "hdr").unwrap();
        assert_eq!(&rd.opaque(100, "max", "data").unwrap()[..], b"hello");
        rd.finish("end").unwrap();
    }

    #[test]
    fn reply_result_with_trailing_words_and_equal_count_field() {
        // NFS-READ-like: count (= 3), eof, data length 3, then a trailer.
        let m = words(&[9, 1, 0, 0, 0, 0, 3, 1, 3, 0xfeed]);
        let r = reply(m, vec![b"abc".to_vec()], 9);
        let p = r.pieces();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].bytes().len(), 36);
        assert!(p[1].is_ddp());
        assert_eq!(&p[2].bytes()[..], &words(&[0xfeed])[..]);
    }

    #[test]
    fn empty_results_leave_the_reply_inline() {
        let m = words(&[9, 1, 0, 0, 0, 0, 0]);
        let r = reply(m.clone(), vec![Vec::new()], 7);
        assert_eq!(r.pieces().len(), 1);
        assert_eq!(&r.flatten()[4..], &m[4..]);
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

    #[test]
    fn to_engine_merges_inline_pieces() {
        let m = Message::from_pieces([
            Piece::Inline(Bytes::from_static(&[1, 2, 3, 4])),
            Piece::Inline(Bytes::from_static(&[5, 6, 7, 8])),
            Piece::Ddp(Bytes::from_static(b"xy")),
            Piece::Inline(Bytes::from_static(&[0, 0, 0, 1])),
        ]);
        assert_eq!(
            to_engine(&m),
            vec![
                EPiece::Inline(vec![1, 2, 3, 4, 5, 6, 7, 8]),
                EPiece::Ddp(b"xy".to_vec()),
                EPiece::Inline(vec![0, 0, 0, 1]),
            ]
        );
    }
}
