//! Conversions between runtime [`Message`]s and engine pieces.

use std::ops::Range;

use bytes::Bytes;
use rpcrdma_proto::engine::{Piece as EPiece, Pieces};
use rpcrdma_proto::xdr::pad_len;

use crate::message::{Message, Piece};

/// Runtime message → engine pieces (adjacent inline pieces merged; DDP
/// pieces stay DDP pieces, without pad, sharing the message's bytes: the
/// engine registers them read-only as they are, so bulk data is never
/// copied here).
#[cfg(test)]
pub(crate) fn to_engine(m: &Message) -> Pieces {
    to_engine_after(Vec::new(), m)
}

/// [`to_engine`] of `m` after the inline octets `header`, which become (the
/// start of) the first inline piece, their buffer kept (so spare capacity
/// for the inline octets of `m` that follow spares a reallocation).
pub(crate) fn to_engine_after(header: Vec<u8>, m: &Message) -> Pieces {
    let mut out = Pieces::new();
    if !header.is_empty() {
        out.push(EPiece::Inline(header));
    }
    for p in m.pieces() {
        push_piece(&mut out, p.clone());
    }
    out
}

/// [`to_engine`] of a message given away (a reply): an inline piece whose
/// buffer is not shared with anything else (e.g. a header built for this
/// reply) becomes the engine's `Vec` without a copy (`Vec::from(Bytes)`);
/// anything else is copied as by [`to_engine`]. The same pieces, octet for
/// octet, as [`to_engine`] (pinned by a test).
pub(crate) fn into_engine(m: Message) -> Pieces {
    let mut out = Pieces::new();
    for p in m.into_piece_iter() {
        push_piece(&mut out, p);
    }
    out
}

/// Appends one runtime piece to engine pieces: inline octets join a
/// preceding inline piece (appended to its buffer), else start one (the
/// `Bytes` turned into a `Vec`, a move when its buffer is unique); a DDP
/// piece stays one, sharing its bytes.
fn push_piece(out: &mut Pieces, p: Piece) {
    match p {
        Piece::Inline(b) => match out.last_mut() {
            Some(EPiece::Inline(v)) => v.extend_from_slice(&b),
            _ => out.push(EPiece::Inline(Vec::from(b))),
        },
        Piece::Ddp(b) => out.push(EPiece::Ddp(b)),
    }
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

/// A received reply → runtime message: the first word is set to the
/// runtime's `xid`, and the data written into each Write chunk goes along,
/// in Write list order, as the message's out-of-band results
/// ([`Message::with_results`]; empty for a chunk that came back unused or
/// empty). Nothing is searched: where each result belongs is decided by the
/// upper layer as it decodes the reply, each DDP-eligible item taking the
/// next result ([`MessageReader::ddp_opaque`](crate::MessageReader::ddp_opaque)).
//= rfc8166#section-3.4.6
//# In addition, the XDR position of DDP-eligible data items in the
//# reply's Payload stream is not predictable when a Requester constructs
//# an RPC Call message.  Therefore, RDMA segments in a Write chunk do
//# not have a Position field.
/// The results are the engine's chunk buffers, passed on without a copy.
pub(crate) fn reply(mut message: Vec<u8>, results: Vec<Bytes>, xid: u32) -> Message {
    if let Some(w) = message.get_mut(0..4) {
        w.copy_from_slice(&xid.to_be_bytes());
    }
    Message::from_reply_parts(Bytes::from(message), results)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let r = reply(m.clone(), vec![Bytes::from_static(b"hello")], 0x0102_0304);
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
        assert_eq!(&reply(vec![7, 7], vec![], 9).flatten()[..], &[7, 7][..]);
    }

    #[test]
    fn reply_result_followed_by_a_word_equal_to_its_length() {
        // {opaque data<> (DDP); unsigned trailer; unsigned another} with
        // trailer == 3 == the data length: the old backwards search put the
        // data after `trailer`. Inline: length 3, trailer 3, another 0xfeed.
        let m = reply_words(&[3, 3, 0xfeed]);
        let r = reply(m, vec![Bytes::from_static(b"abc")], 9);
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
        let r = reply(m, vec![Bytes::new(), Bytes::from_static(b"xy")], 9);
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
        let r = reply(m.clone(), vec![Bytes::new()], 7);
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

    #[test]
    fn to_engine_merges_inline_pieces() {
        let m = Message::from_pieces([
            Piece::Inline(Bytes::from_static(&[1, 2, 3, 4])),
            Piece::Inline(Bytes::from_static(&[5, 6, 7, 8])),
            Piece::Ddp(Bytes::from_static(b"xy")),
            Piece::Inline(Bytes::from_static(&[0, 0, 0, 1])),
        ]);
        let want = [
            EPiece::Inline(vec![1, 2, 3, 4, 5, 6, 7, 8]),
            EPiece::Ddp(Bytes::from_static(b"xy")),
            EPiece::Inline(vec![0, 0, 0, 1]),
        ];
        assert_eq!(&to_engine(&m)[..], &want[..]);
        assert_eq!(&into_engine(m)[..], &want[..]);
    }

    fn arb_piece() -> impl proptest::strategy::Strategy<Value = (bool, Vec<u8>, usize, bool)> {
        use proptest::prelude::*;
        // (ddp, octets, offset cut from the front, buffer shared)
        (
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..24),
            0usize..8,
            any::<bool>(),
        )
    }

    proptest::proptest! {
        /// `into_engine` (moves unique inline buffers) gives the same
        /// pieces as `to_engine` (copies), for unique, shared, sliced and
        /// static buffers, and leaves shared buffers untouched.
        #[test]
        fn into_engine_is_to_engine(spec in proptest::collection::vec(arb_piece(), 0..5), header in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12)) {
            let mut keep = Vec::new();
            let mut pieces = Vec::new();
            for (ddp, octets, cut, shared) in spec {
                let mut b = if octets.len() % 3 == 0 {
                    Bytes::from_static(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0][..octets.len().min(10)])
                } else {
                    Bytes::from(octets)
                };
                let n = cut.min(b.len());
                bytes::Buf::advance(&mut b, n);
                if shared {
                    keep.push(b.clone());
                }
                pieces.push(if ddp { Piece::Ddp(b) } else { Piece::Inline(b) });
            }
            let before: Vec<Bytes> = keep.iter().map(|b| Bytes::copy_from_slice(b)).collect();
            let m = Message::from_pieces(pieces);
            let want = to_engine(&m);
            proptest::prop_assert_eq!(&into_engine(m.clone())[..], &want[..]);
            let with_header = to_engine_after(header.clone(), &m);
            let mut m2 = Message::inline(Bytes::from(header));
            m2.append(m);
            proptest::prop_assert_eq!(&into_engine(m2)[..], &with_header[..]);
            proptest::prop_assert_eq!(keep, before);
        }
    }
}
