//! Write chunks and the XDR pad (Linux interop): as responder the engine
//! never writes the pad and returns actual lengths; as requester it
//! registers Write chunks rounded up to four so a legacy responder that
//! writes the pad stays inside, and accepts a returned length that
//! includes the pad without handing the pad out as data.

mod util;

use rpcrdma_proto::engine::{Config, Event, OutgoingCall, OutgoingReply, Piece, Reply, ReplyForm};
use rpcrdma_proto::provider::Provider;
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};
use util::*;

fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[i * 4..i * 4 + 4].try_into().unwrap())
}

/// A client engine with one call offering one Write chunk for a result of
/// at most `max` octets; returns the pair, the XID and the chunk's STag and
/// registered length.
fn client_with_write_chunk(max: u32) -> (RawPair, u32, u32, u32) {
    let s = InlineSize::from_bytes(4096).unwrap();
    let pd = PrivateData::new(s, s, false).to_bytes().to_vec();
    let mut p = RawPair::client(Config::client(), pd);
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall {
                message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                    rpc_call(0).into(),
                )]),
                reply_max: max + 200,
                ddp_results: vec![max],
            },
        )
        .unwrap();
    p.raw.post_recvs(1);
    p.run();
    let call = p.raw.got.remove(0);
    // xid, 1, 128, RDMA_MSG, no Read list, Write list: one chunk of one
    // segment (handle, length, offset), end of list, no Reply chunk.
    assert_eq!(
        (w(&call, 3), w(&call, 4), w(&call, 5), w(&call, 6)),
        (0, 0, 1, 1)
    );
    assert_eq!((w(&call, 11), w(&call, 12)), (0, 0));
    (p, w(&call, 0), w(&call, 7), w(&call, 8))
}

fn reply_event(p: &RawPair) -> Option<Reply> {
    p.side.events.iter().find_map(|e| match e {
        Event::ReplyReceived(r) => Some(r.clone()),
        _ => None,
    })
}

/// RDMA_MSG reply returning `len` octets in the Write chunk, with the RPC
/// reply (XID, REPLY, accepted, null verifier, SUCCESS) and the result's
/// XDR length word `xdr_len` inline.
fn reply_with(xid: u32, stag: u32, len: u32, xdr_len: u32) -> Vec<u8> {
    let mut m = words(&[xid, 1, 8, 0, 0, 1, 1, stag, len, 0, 0, 0, 0]);
    m.extend(words(&[xid, 1, 0, 0, 0, 0, xdr_len]));
    m
}

#[test]
fn requester_accepts_a_legacy_pad_without_delivering_it() {
    let (mut p, xid, stag, reg) = client_with_write_chunk(5001);
    // The chunk is registered rounded up: 5001 + 3.
    assert_eq!(reg, 5004);
    let result = data(5001, 4);
    // A legacy responder writes the data and its XDR pad, and returns the
    // rounded-up length.
    let mut written = result.clone();
    written.extend([0, 0, 0]);
    p.raw.write(stag, 0, &written);
    p.raw.send(&reply_with(xid, stag, 5004, 5001));
    p.run();
    let r = reply_event(&p).expect("the reply is accepted");
    assert_eq!(
        r.message.results()[0].len(),
        5004,
        "as long as the responder said"
    );
    // With the XDR length word the pad is never part of the data.
    assert_eq!(r.result(0, 5001), Some(&result[..]));
    // A length word that disagrees by more than the pad is refused.
    assert_eq!(r.result(0, 4990), None);
    assert_eq!(r.result(1, 5001), None, "no such chunk");
    assert_eq!(p.side.conn.metrics().bad_replies, 0);
}

#[test]
fn requester_takes_an_exact_length_as_is() {
    let (mut p, xid, stag, _) = client_with_write_chunk(5001);
    let result = data(4001, 5);
    p.raw.write(stag, 0, &result);
    p.raw.send(&reply_with(xid, stag, 4001, 4001));
    p.run();
    let r = reply_event(&p).expect("reply");
    assert_eq!(r.message.results(), vec![result.clone()]);
    assert_eq!(r.result(0, 4001), Some(&result[..]));
}

#[test]
fn requester_discards_a_returned_length_beyond_the_chunk() {
    let (mut p, xid, stag, _) = client_with_write_chunk(5001);
    p.raw.send(&reply_with(xid, stag, 5005, 5005));
    p.run();
    // More than the chunk (5004) is a header error: the reply is discarded
    // and the call waits.
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.metrics().bad_replies, 1);
    assert_eq!(p.side.conn.outstanding(), 1);
}

#[test]
fn responder_never_writes_the_pad_and_returns_actual_lengths() {
    let mut p = RawPair::server(Config::server());
    p.raw.post_recvs(2);
    // A Linux-style Write chunk: a data segment, then a 4-octet segment
    // for the XDR pad (offered by older Linux clients).
    let data_seg = p.raw.sink(8192);
    let pad_seg = p.raw.sink(4);
    // Markers: whatever the responder does not write stays 0xee.
    p.raw.prov.region_mut(&data_seg).unwrap().fill(0xee);
    p.raw.prov.region_mut(&pad_seg).unwrap().fill(0xee);
    let mut m = words(&[60, 1, 8, 0, 0]);
    m.extend(words(&[
        1,
        2,
        data_seg.stag().0,
        8192,
        0,
        0,
        pad_seg.stag().0,
        4,
        0,
        0,
        0,
    ]));
    m.extend(words(&[0]));
    m.extend(rpc_call(60));
    p.raw.send(&m);
    p.run();
    let c = take_calls(&mut p.side.events).remove(0);
    let result = data(5001, 6);
    let mut head = words(&[60, 1, 0, 0, 0, 0]);
    head.extend(words(&[5001]));
    let form = p
        .side
        .conn
        .send_reply(
            p.now,
            &mut p.side.prov,
            c.handle,
            OutgoingReply {
                message: rpcrdma_proto::engine::Message::from_pieces([
                    Piece::Inline(head.clone().into()),
                    Piece::Ddp(result.clone().into()),
                ]),
            },
        )
        .unwrap();
    p.run();
    assert_eq!(form, ReplyForm::Inline);
    //= rfc8166#section-3.4.6.2
    //# A Responder MUST NOT write XDR roundup padding into a Write chunk,
    //# even if the Requester made space available for it.
    //= rfc8166#section-3.4.6.2
    //# Therefore, when returning a single variable-length result data item, a
    //# returned Write chunk's total length MUST be the same as the encoded
    //# length of the result data item.
    //= rfc8166#section-3.4.6
    //# The Responder MUST copy the segment count and all segments from the
    //# Requester-provided Write chunk into the RPC Reply message's Transport
    //# header.
    // Both segments echoed, lengths 5001 and 0: the pad segment unused.
    let mut want = words(&[60, 1, 64, 0, 0]);
    want.extend(words(&[
        1,
        2,
        data_seg.stag().0,
        5001,
        0,
        0,
        pad_seg.stag().0,
        0,
        0,
        0,
        0,
    ]));
    want.extend(words(&[0]));
    want.extend(head);
    assert_eq!(p.raw.got, vec![want]);
    let region = p.raw.prov.region(&data_seg).unwrap();
    assert_eq!(&region[..5001], &result[..]);
    // Nothing after the data: no pad in the data segment, nothing in the
    // pad segment.
    assert_eq!(&region[5001..5004], &[0xee; 3]);
    assert_eq!(p.raw.prov.region(&pad_seg).unwrap(), &[0xee; 4]);
    assert_eq!(p.side.conn.metrics().rdma_write_bytes, 5001);
}

#[test]
fn engine_pair_unaligned_result_round_trip_through_reply() {
    let mut p = Pair::new(Config::client(), Config::server());
    p.call(OutgoingCall {
        message: opaque_call(1, &[0; 4], false),
        reply_max: 6000,
        ddp_results: vec![5001],
    });
    let c = p.server_calls().remove(0);
    //= rfc8166#section-3.4.6
    //# Thus, it MUST register Write chunks long enough to accommodate the
    //# maximum possible size of each returned data item.
    // 5001 rounded up to four: room for a legacy responder's pad.
    assert_eq!(c.write_chunks, vec![5004]);
    let result = data(4093, 1);
    let mut head = reply_header(c.xid);
    head.extend(word(4093));
    p.reply(
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                Piece::Inline(head.into()),
                Piece::Ddp(result.clone().into()),
            ]),
        },
    );
    let ev = p.client_events();
    let r = ev
        .iter()
        .find_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .unwrap();
    assert_eq!(r.message.results(), vec![result.clone()]);
    assert_eq!(r.result(0, 4093), Some(&result[..]));
    assert_eq!(p.s.conn.metrics().rdma_write_bytes, 4093);
}

#[test]
fn requester_discards_a_write_chunk_echo_that_is_not_the_offer() {
    let (mut p, xid, stag, _) = client_with_write_chunk(5001);
    // Two segments where one was offered (same handle, 100 + 100 octets).
    let mut m = words(&[
        xid, 1, 8, 0, 0, 1, 2, stag, 100, 0, 0, stag, 100, 0, 100, 0, 0,
    ]);
    m.extend(words(&[xid, 1, 0, 0, 0, 0, 200]));
    p.raw.send(&m);
    p.run();
    // The offered segment at another offset.
    p.raw.send(&{
        let mut m = words(&[xid, 1, 8, 0, 0, 1, 1, stag, 100, 0, 4, 0, 0]);
        m.extend(words(&[xid, 1, 0, 0, 0, 0, 100]));
        m
    });
    p.run();
    //= rfc8166#section-3.4.6
    //# The Responder MUST copy the segment count and all
    //# segments from the Requester-provided Write chunk into the RPC Reply
    //# message's Transport header.
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.metrics().bad_replies, 2);
    assert_eq!(p.side.conn.outstanding(), 1);
}
