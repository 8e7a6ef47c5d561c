//! RFC 8166 requirements checked on the wire, one end driven by hand:
//! credits, Read chunk layout, Write list and Reply chunk handling.

mod util;

use rpcrdma_proto::engine::{
    CallError, Config, Event, OutgoingCall, OutgoingReply, Piece, ReplyForm,
};
use rpcrdma_proto::provider::Provider;
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};
use util::*;

const GRANT: u32 = 64;

fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[i * 4..i * 4 + 4].try_into().unwrap())
}

fn linux_server_pd() -> Vec<u8> {
    let s = InlineSize::from_bytes(4096).unwrap();
    PrivateData::new(s, s, false).to_bytes().to_vec()
}

fn client() -> RawPair {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    p.raw.post_recvs(8);
    p.run();
    p
}

fn start(p: &mut RawPair, call: OutgoingCall) {
    p.side
        .conn
        .start_call(p.now, &mut p.side.prov, call)
        .unwrap();
    p.run();
}

// ----------------------------------------------------------------------
// requester

#[test]
fn requester_assumes_one_credit_and_keeps_a_receive_per_call() {
    let mut p = client();
    for _ in 0..3 {
        start(&mut p, OutgoingCall::inline(rpc_call(0), 256));
    }
    //= rfc8166#section-3.3.3
    //# A Responder MAY exceed this basic
    //# level of configuration, but a Requester MUST NOT assume more than one
    //# credit is available and MUST receive a valid reply from the Responder
    //# carrying the actual number of available credits, prior to sending its
    //# next request.
    assert_eq!(p.raw.got.len(), 1, "one call before the first grant");
    assert_eq!(p.side.conn.queued(), 2);
    let xid = w(&p.raw.got[0], 0);
    let mut reply = words(&[xid, 1, 8, 0, 0, 0, 0]);
    reply.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&reply);
    p.run();
    assert_eq!(p.raw.got.len(), 3, "the grant of 8 lets the other two go");
    //= rfc8166#section-3.3.1
    //# A Requester MUST maintain enough receive resources to accommodate
    //# expected replies.
    // One receive per outstanding call, nothing else posted (backchannel
    // off): the two calls' receives.
    assert_eq!(p.side.conn.outstanding(), 2);
    assert_eq!(p.side.conn.inflight_work_requests(), 2);
}

#[test]
fn requester_read_chunk_layout_by_hand() {
    let mut p = client();
    let arg = data(9001, 3);
    start(
        &mut p,
        OutgoingCall {
            message: opaque_call(7, &arg, true),
            reply_max: 256,
            ddp_results: Vec::new(),
        },
    );
    let m = p.raw.got.remove(0);
    let xid = w(&m, 0);
    // xid, vers 1, credits 128, RDMA_MSG; Read list: one segment at
    // position 44 (RPC header 40 + the opaque's length word), handle,
    // length 9001 (no roundup), offset 0; end of Read list; no Write list;
    // no Reply chunk.
    assert_eq!(&m[..16], &words(&[xid, 1, 128, 0])[..]);
    assert_eq!((w(&m, 4), w(&m, 5)), (1, 44));
    //= rfc8166#section-3.4.5
    //# The Position value
    //# MUST be computed from the beginning of the unreduced Payload
    //# stream, which begins at Position zero.
    //= rfc8166#section-3.4.5.2
    //# When reducing a variable-length argument data item, the Requester
    //# SHOULD NOT include the data item's XDR roundup padding in the chunk.
    //= rfc8166#section-3.4.5.2
    //# If the sender chooses not to include roundup padding in the chunk,
    //# the chunk's total length MUST be the same as the encoded length of
    //# the data item.
    assert_eq!(w(&m, 7), 9001);
    assert_eq!((w(&m, 8), w(&m, 9)), (0, 0));
    assert_eq!((w(&m, 10), w(&m, 11), w(&m, 12)), (0, 0, 0));
    //= rfc8166#section-3.4.4.4
    //# When a variable-length XDR data item is reduced, the sender MUST
    //# remove XDR roundup padding for that data item from the Payload stream
    //# so that data items remaining in the Payload stream begin on four-byte
    //# alignment.
    //= rfc8166#section-3.4.4.1
    //# If a chunk contains a counted array data type, the count of array
    //# elements MUST remain in the Payload stream, while the array elements
    //# MUST be moved to the chunk.
    let mut inline = match &opaque_call(7, &arg, true).pieces()[0] {
        Piece::Inline(b) => b.to_vec(),
        _ => unreachable!(),
    };
    inline[..4].copy_from_slice(&xid.to_be_bytes());
    inline.extend(word(0xfeed_f00d));
    assert_eq!(&m[52..], &inline[..], "length word kept, data and pad gone");
    // The chunk holds exactly the one data item.
    let stag = w(&m, 6);
    //= rfc8166#section-3.4.4.4
    //# Except in special cases (covered in Section 3.5.3), a chunk MUST
    //# contain exactly one XDR data item.
    let sink = p.raw.sink(9001);
    let mut out = Vec::new();
    p.raw
        .prov
        .post_send(rpcrdma_proto::provider::SendWr {
            wr_id: 1,
            op: rpcrdma_proto::provider::SendOp::Read {
                remote: rpcrdma_proto::provider::RemoteAddr {
                    stag: rpcrdma_proto::provider::Stag(stag),
                    offset: 0,
                },
            },
            sges: vec![sink.sge(0, 9001)].into(),
        })
        .unwrap();
    p.run();
    out.extend_from_slice(&p.raw.prov.region(&sink).unwrap()[..9001]);
    assert_eq!(out, arg);
}

#[test]
fn requester_provides_a_reply_chunk_exactly_when_the_reply_may_not_fit() {
    let mut p = client();
    start(&mut p, OutgoingCall::inline(rpc_call(0), 4000));
    start(&mut p, OutgoingCall::inline(rpc_call(0), 4096));
    // Credits: the second waits; answer the first.
    let a = p.raw.got.remove(0);
    //= rfc8166#section-4.3.3
    //# A
    //# Requester MUST provide a Reply chunk whenever the maximum possible
    //# size of the RPC Reply message's Transport and Payload streams is
    //# larger than the inline threshold for messages from Responder to
    //# Requester.
    // 28 + 4000 fits the 4096 reply threshold: three empty lists.
    assert_eq!((w(&a, 3), w(&a, 4), w(&a, 5), w(&a, 6)), (0, 0, 0, 0));
    let xid = w(&a, 0);
    let mut reply = words(&[xid, 1, 8, 0, 0, 0, 0]);
    reply.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&reply);
    p.run();
    let b = p.raw.got.remove(0);
    // 28 + 4096 may not: a Reply chunk of one segment of 4096.
    assert_eq!((w(&b, 4), w(&b, 5), w(&b, 6), w(&b, 7)), (0, 0, 1, 1));
    assert_eq!(w(&b, 9), 4096);
}

#[test]
fn start_call_refuses_unaligned_inline_pieces() {
    let mut p = client();
    let mut head = rpc_call(0);
    head.extend([0, 0, 0, 5, 1, 2]); // 46 octets: not whole XDR items
    let r = p.side.conn.start_call(
        p.now,
        &mut p.side.prov,
        OutgoingCall {
            message: rpcrdma_proto::engine::Message::from_pieces([
                Piece::Inline(head.into()),
                Piece::Ddp(vec![9; 5000].into()),
            ]),
            reply_max: 256,
            ddp_results: Vec::new(),
        },
    );
    //= rfc8166#section-3.4.5
    //# The value in this field
    //# MUST be a multiple of four.
    assert!(matches!(r, Err(CallError::BadMessage(_))), "{r:?}");
    p.run();
    assert!(p.raw.got.is_empty());
}

#[test]
fn requester_accepts_a_short_reply_with_its_reply_chunk_echoed() {
    let mut p = Pair::new(Config::client(), Config::server());
    p.call(OutgoingCall::inline(
        stream(&opaque_call(1, &[1; 4], false), 0),
        9000,
    ));
    let c = p.server_calls().remove(0);
    assert_eq!(c.reply_chunk, Some(9000));
    let mut m = reply_header(c.xid);
    m.extend(word(42));
    assert_eq!(
        p.reply(
            c.handle,
            OutgoingReply {
                message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                    m.clone().into()
                )]),
            },
        ),
        ReplyForm::Inline
    );
    let ev = p.client_events();
    let r = ev
        .iter()
        .find_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .expect("reply");
    assert_eq!(r.message.flatten(), m);
    assert!(!r.long);
}

// ----------------------------------------------------------------------
// responder

fn server() -> RawPair {
    let mut p = RawPair::server(Config::server());
    p.raw.post_recvs(4);
    p
}

fn deliver(p: &mut RawPair, m: &[u8]) -> rpcrdma_proto::engine::IncomingCall {
    p.raw.send(m);
    p.run();
    let mut calls = take_calls(&mut p.side.events);
    assert_eq!(calls.len(), 1, "{:02x?}", p.raw.got);
    calls.remove(0)
}

fn answer(p: &mut RawPair, c: &rpcrdma_proto::engine::IncomingCall, msg: Vec<Piece>) -> ReplyForm {
    let f = p
        .side
        .conn
        .send_reply(
            p.now,
            &mut p.side.prov,
            c.handle,
            OutgoingReply {
                message: msg.into(),
            },
        )
        .unwrap();
    p.run();
    f
}

#[test]
fn responder_returns_an_item_inline_for_an_empty_write_chunk() {
    let mut p = server();
    let sink = p.raw.sink(8192);
    // Write list: chunk 0 empty (no segments), chunk 1 one segment.
    let mut m = words(&[70, 1, 8, 0, 0]);
    m.extend(words(&[1, 0, 1, 1, sink.stag().0, 8192, 0, 0, 0]));
    m.extend(words(&[0]));
    m.extend(rpc_call(70));
    let c = deliver(&mut p, &m);
    assert_eq!(c.write_chunks, vec![0, 8192]);
    let small = data(10, 1);
    let big = data(3000, 2);
    let mut head = words(&[70, 1, 0, 0, 0, 0, 10]);
    let f = answer(
        &mut p,
        &c,
        vec![
            Piece::Inline(head.clone().into()),
            Piece::Ddp(small.clone().into()),
            Piece::Inline(word(3000).into()),
            Piece::Ddp(big.clone().into()),
        ],
    );
    assert_eq!(f, ReplyForm::Inline);
    //= rfc8166#section-4.3.2.3
    //# The Responder MUST return the corresponding
    //# result data item inline and MUST return an empty Write chunk in
    //# that Write list position in the RPC Reply message.
    let mut want = words(&[70, 1, GRANT, 0, 0]);
    want.extend(words(&[1, 0, 1, 1, sink.stag().0, 3000, 0, 0, 0]));
    want.extend(words(&[0]));
    head.extend(&small);
    head.extend([0, 0]); // the inline item keeps its XDR pad
    head.extend(word(3000));
    want.extend(head);
    assert_eq!(p.raw.got, vec![want]);
    assert_eq!(&p.raw.prov.region(&sink).unwrap()[..3000], &big[..]);
}

#[test]
fn responder_returns_an_unconsumed_last_write_chunk_as_unused() {
    let mut p = server();
    let s1 = p.raw.sink(4096);
    let s2 = p.raw.sink(4096);
    // Two Write chunks, one of one segment, one of two.
    let mut m = words(&[71, 1, 8, 0, 0]);
    m.extend(words(&[1, 1, s1.stag().0, 4096, 0, 0]));
    m.extend(words(&[
        1,
        2,
        s2.stag().0,
        2048,
        0,
        0,
        s2.stag().0,
        2048,
        0,
        2048,
        0,
    ]));
    m.extend(words(&[0]));
    m.extend(rpc_call(71));
    let c = deliver(&mut p, &m);
    let item = data(100, 3);
    let head = words(&[71, 1, 0, 0, 0, 0, 100]);
    answer(
        &mut p,
        &c,
        vec![
            Piece::Inline(head.clone().into()),
            Piece::Ddp(item.clone().into()),
        ],
    );
    //= rfc8166#section-4.3.2.2
    //# If this is the last or only Write chunk available and it remains
    //# unconsumed, the Responder MUST return this Write chunk as an unused
    //# Write chunk (see Section 3.4.6).
    //= rfc8166#section-3.4.6
    //# The Responder MUST copy the segment count and all
    //# segments from the Requester-provided Write chunk into the RPC Reply
    //# message's Transport header.
    //= rfc8166#section-4.3.2
    //# When a Requester provides a Write list, the Responder MUST push data
    //# corresponding to DDP-eligible result data items to Requester memory
    //# referenced in the Write list.
    let mut want = words(&[71, 1, GRANT, 0, 0]);
    want.extend(words(&[1, 1, s1.stag().0, 100, 0, 0]));
    want.extend(words(&[
        1,
        2,
        s2.stag().0,
        0,
        0,
        0,
        s2.stag().0,
        0,
        0,
        2048,
        0,
    ]));
    want.extend(words(&[0]));
    want.extend(head);
    assert_eq!(p.raw.got, vec![want]);
    assert_eq!(&p.raw.prov.region(&s1).unwrap()[..100], &item[..]);
}

#[test]
fn responder_echoes_the_reply_chunk_in_a_short_reply() {
    let mut p = server();
    let rc = p.raw.sink(8192);
    let mut m = words(&[72, 1, 8, 0, 0, 0, 1, 1, rc.stag().0, 8192, 0, 0x40]);
    m.extend(rpc_call(72));
    let c = deliver(&mut p, &m);
    assert_eq!(c.reply_chunk, Some(8192));
    let body = words(&[72, 1, 0, 0, 0, 0, 5]);
    let f = answer(&mut p, &c, vec![Piece::Inline(body.clone().into())]);
    assert_eq!(f, ReplyForm::Inline);
    //= rfc8166#section-4.3.3
    //# When a Requester provides a Reply chunk in an RPC Call message, the
    //# Responder MUST copy that chunk into the Transport header of the RPC
    //# Reply message.
    // RDMA_MSG, no Read list, no Write list, the Reply chunk with its one
    // segment and length 0, then the reply.
    let mut want = words(&[72, 1, GRANT, 0, 0, 0, 1, 1, rc.stag().0, 0, 0, 0x40]);
    want.extend(body);
    assert_eq!(p.raw.got, vec![want]);
}

#[test]
fn responder_uses_the_reply_chunk_for_a_large_reply() {
    let mut p = server();
    let rc = p.raw.sink(8192);
    let mut m = words(&[73, 1, 8, 0, 0, 0, 1, 1, rc.stag().0, 8192, 0, 0]);
    m.extend(rpc_call(73));
    let c = deliver(&mut p, &m);
    let mut body = words(&[73, 1, 0, 0, 0, 0, 5000]);
    body.extend(data(5000, 8));
    let f = answer(&mut p, &c, vec![Piece::Inline(body.clone().into())]);
    //= rfc8166#section-3.5.3
    //# If a Reply chunk was provided and the reduced
    //# Payload stream is larger than the reply inline threshold, the
    //# Responder MUST use the Requester-provided Reply chunk for the reply.
    assert_eq!(f, ReplyForm::ReplyChunk);
    // RDMA_NOMSG, the Reply chunk with the actual length written.
    let want = words(&[
        73,
        1,
        GRANT,
        1,
        0,
        0,
        1,
        1,
        rc.stag().0,
        body.len() as u32,
        0,
        0,
    ]);
    assert_eq!(p.raw.got, vec![want]);
    assert_eq!(&p.raw.prov.region(&rc).unwrap()[..body.len()], &body[..]);
}

#[test]
fn a_larger_grant_posts_its_receives_before_any_reply_advertises_it() {
    let mut p = server();
    assert_eq!(p.side.conn.inflight_work_requests(), GRANT as usize);
    p.side.conn.set_credit_grant(&mut p.side.prov, 100);
    //= rfc8166#section-3.3.1
    //# The Responder MUST
    //# ensure that an increase in receive resources is effected before the
    //# next RPC Reply message is sent.
    assert_eq!(p.side.conn.inflight_work_requests(), 100);
    let mut m = words(&[74, 1, 8, 0, 0, 0, 0]);
    m.extend(rpc_call(74));
    let c = deliver(&mut p, &m);
    answer(
        &mut p,
        &c,
        vec![Piece::Inline(words(&[74, 1, 0, 0, 0, 0]).into())],
    );
    assert_eq!(w(&p.raw.got[0], 2), 100, "the reply grants 100");
}

#[test]
fn a_zero_grant_is_never_sent() {
    let mut p = server();
    p.side.conn.set_credit_grant(&mut p.side.prov, 0);
    let mut m = words(&[75, 1, 8, 0, 0, 0, 0]);
    m.extend(rpc_call(75));
    let c = deliver(&mut p, &m);
    answer(
        &mut p,
        &c,
        vec![Piece::Inline(words(&[75, 1, 0, 0, 0, 0]).into())],
    );
    //= rfc8166#section-3.3.1
    //# The granted value MUST NOT be zero, since such a value
    //# would result in deadlock.
    assert_eq!(w(&p.raw.got[0], 2), 1);
}

// ----------------------------------------------------------------------
// operational errors (RFC 8166 section 4.5.4)

#[test]
fn requester_closes_the_connection_when_it_cannot_invalidate() {
    use rpcrdma_proto::provider::fault::FaultConfig;
    // Client posts: the reply's receive (1), the call (2), the receive
    // reposted on the reply (3), the Local Invalidate of the Write chunk
    // (4): the QP fails right there.
    let fc = FaultConfig {
        fail_after_posts: Some(4),
        ..FaultConfig::default()
    };
    let mut p = RawPair::client_with_faults(Config::client(), linux_server_pd(), fc);
    p.raw.post_recvs(1);
    start(
        &mut p,
        OutgoingCall {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                rpc_call(0).into(),
            )]),
            reply_max: 9000,
            ddp_results: vec![8192],
        },
    );
    let call = p.raw.got.remove(0);
    let (xid, stag) = (w(&call, 0), w(&call, 7));
    p.raw.write(stag, 0, &[5; 8]);
    let mut reply = words(&[xid, 1, 8, 0, 0, 1, 1, stag, 8, 0, 0, 0, 0]);
    reply.extend(words(&[xid, 1, 0, 0, 0, 0, 8]));
    p.raw.send(&reply);
    p.run();
    //= rfc8166#section-4.5.4
    //# After a Requester has received a reply, if it is unable to invalidate
    //# a memory region due to an unrecoverable problem, the Requester MUST
    //# close the connection to protect that memory from Responder access
    //# before the associated RPC transaction is complete.
    assert!(p.side.conn.is_closed());
    assert_eq!(p.side.conn.metrics().local_invalidations, 1);
    // The reply is handed out only with the connection down (the peer can
    // no longer touch the memory).
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectionLost(_))));
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(_))));
    assert!(matches!(
        p.side.conn.error(),
        Some(rpcrdma_proto::engine::ConnectionError::Disconnected(_))
    ));
}

#[test]
fn responder_closes_the_connection_when_it_cannot_send_a_reply() {
    use rpcrdma_proto::provider::fault::FaultConfig;
    // Server posts after accepting: the receive reposted for the call (1),
    // the reply's Send (2): the QP fails right there.
    let fs = FaultConfig {
        fail_after_posts: Some(2),
        ..FaultConfig::default()
    };
    let mut p = RawPair::server_with_faults(Config::server(), fs);
    p.raw.post_recvs(1);
    let mut m = words(&[76, 1, 8, 0, 0, 0, 0]);
    m.extend(rpc_call(76));
    let c = deliver(&mut p, &m);
    let _ = p.side.conn.send_reply(
        p.now,
        &mut p.side.prov,
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                words(&[76, 1, 0, 0, 0, 0]).into(),
            )]),
        },
    );
    p.run();
    //= rfc8166#section-4.5.4
    //# If a Responder is unable to construct and transmit an RPC Reply or
    //# RPC-over-RDMA error message, the Responder MUST close the connection
    //# to signal to the Requester that a reply was lost.
    assert!(p.side.conn.is_closed());
    assert!(p.raw.got.is_empty(), "the reply was lost");
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectionLost(_))));
}

// ----------------------------------------------------------------------
// RFC 8797 and RFC 8167 odds and ends

#[test]
fn private_data_is_negotiated_again_on_reconnect() {
    use rpcrdma_proto::provider::fault::FaultConfig;
    let mut s = Config::server();
    s.inline_recv = 1024;
    let mut p = Pair::new(Config::client(), s);
    let n = p.c.conn.negotiated().unwrap();
    assert_eq!(n.send_threshold, 1024);
    assert!(!n.remote_invalidation);
    p.scfg.inline_recv = 8192;
    p.scfg.remote_invalidation = true;
    p.c.conn.close(&mut p.c.prov);
    p.run();
    p.reconnect(FaultConfig::default(), FaultConfig::default());
    //= rfc8797#section-4
    //# An implementation of the extension described in this document MUST
    //# be prepared for the settings to change upon a reconnection.
    let n = p.c.conn.negotiated().unwrap();
    assert_eq!(n.send_threshold, 4096, "min(our 4096, the server's 8192)");
    assert!(n.remote_invalidation);
}

#[test]
fn credit_of_a_message_of_unknown_direction_is_ignored() {
    let mut p = client();
    start(&mut p, OutgoingCall::inline(rpc_call(0), 256));
    let xid = w(&p.raw.got[0], 0);
    // RDMA_NOMSG with only a Reply chunk and an XID that is none of ours:
    // not a reverse call (no Read list), not a reply to any call.
    p.raw.send(&words(&[
        xid ^ 0xffff,
        1,
        50,
        1,
        0,
        0,
        1,
        1,
        0x99,
        64,
        0,
        0,
    ]));
    p.run();
    //= rfc8167#section-4.1
    //# In such cases, the receiver MUST ignore the header's credit value.
    assert_eq!(p.side.conn.credits(), 1);
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.metrics().credits_granted, 0);
}

#[test]
fn requester_long_call_header_by_hand() {
    let mut p = client();
    let mut msg = rpc_call(0);
    msg.extend(word(6000));
    msg.extend(data(6000, 9));
    start(&mut p, OutgoingCall::inline(msg.clone(), 256));
    let m = p.raw.got.remove(0);
    let xid = w(&m, 0);
    // xid, 1, 128, RDMA_NOMSG; Read list: one segment, position 0, the
    // whole message; no Write list, no Reply chunk; nothing after.
    //= rfc8166#section-3.5.3
    //# Every
    //# RDMA read segment in this chunk MUST contain zero in its Position
    //# field.
    assert_eq!(&m[..24], &words(&[xid, 1, 128, 1, 1, 0])[..]);
    assert_eq!(w(&m, 7), msg.len() as u32);
    assert_eq!((w(&m, 8), w(&m, 9)), (0, 0), "offset 0");
    assert_eq!(&m[40..], &words(&[0, 0, 0])[..]);
}

#[test]
fn a_zero_length_ddp_item_leaves_its_write_chunk_for_the_next_item() {
    let mut p = server();
    let s1 = p.raw.sink(4096);
    let s2 = p.raw.sink(4096);
    let mut m = words(&[77, 1, 8, 0, 0]);
    m.extend(words(&[1, 1, s1.stag().0, 4096, 0, 0]));
    m.extend(words(&[1, 1, s2.stag().0, 4096, 0, 0, 0]));
    m.extend(words(&[0]));
    m.extend(rpc_call(77));
    let c = deliver(&mut p, &m);
    let item = data(64, 4);
    // A union arm without data (an empty DDP item), then a real item.
    let head = words(&[77, 1, 0, 0, 0, 0, 0]);
    answer(
        &mut p,
        &c,
        vec![
            Piece::Inline(head.clone().into()),
            Piece::Ddp(Default::default()),
            Piece::Inline(word(64).into()),
            Piece::Ddp(item.clone().into()),
        ],
    );
    //= rfc8166#section-4.3.2.2
    //# If there is a subsequent DDP-eligible result data item in the RPC
    //# Reply message, it MUST be placed in that unconsumed Write chunk.
    let mut want = words(&[77, 1, GRANT, 0, 0]);
    want.extend(words(&[1, 1, s1.stag().0, 64, 0, 0]));
    want.extend(words(&[1, 1, s2.stag().0, 0, 0, 0, 0]));
    want.extend(words(&[0]));
    want.extend(head);
    want.extend(word(64));
    assert_eq!(p.raw.got, vec![want]);
    assert_eq!(&p.raw.prov.region(&s1).unwrap()[..64], &item[..]);
}
