//! RDMA_ERROR paths and hostile input, with one end driven by hand.

mod util;

use rpcrdma_proto::engine::{CallFailure, Config, Event, OutgoingCall, RdmaErrorReport};
use rpcrdma_proto::provider::Provider;
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};
use util::*;

const GRANT: u32 = 64;

/// A server engine, a raw client with `n` receives posted.
fn server() -> RawPair {
    let mut p = RawPair::server(Config::server());
    p.raw.post_recvs(4);
    p
}

/// A hand-written RPC call header (xid, CALL, rpcvers 2, prog, vers 1,
/// proc 0, AUTH_NONE cred and verf).
fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

#[test]
fn err_vers_for_a_version_2_message() {
    let mut p = server();
    // A hand-built RPC-over-RDMA version 2 RDMA2_MSG (htype 0, flags 0,
    // inv_handle 0, three empty lists) followed by an RPC call.
    let mut m = words(&[0x0102_0304, 2, 16, 0, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(0x0102_0304));
    p.raw.send(&m);
    p.run();
    //= rfc8166#section-4.5.1
    //# When a Responder detects an RPC-over-RDMA header version that
    //# it does not support (currently this document defines only
    //# version 1), it MUST reply with an RDMA_ERROR procedure and set
    //# the rdma_err value to ERR_VERS, also providing the low and high
    //# inclusive version numbers it does, in fact, support.
    //= rfc8166#section-4.5
    //# The rdma_vers field MUST contain the same version that was in the
    //# rdma_vers field in the failing request;
    assert_eq!(
        p.raw.got,
        vec![words(&[0x0102_0304, 2, GRANT, 4, 1, 1, 1])],
        "xid, the request's vers 2 echoed, credit, RDMA_ERROR, ERR_VERS, low 1, high 1"
    );
    assert_eq!(p.side.conn.metrics().err_vers_sent, 1);
    assert!(!p.side.conn.is_closed());
    assert!(p.side.events.is_empty());
}

fn expect_err_chunk(msg: Vec<u8>, xid: u32) {
    let mut p = server();
    p.raw.send(&msg);
    p.run();
    //= rfc8166#section-4.5.2
    //# If the rdma_vers field contains a recognized value, but an XDR
    //# parsing error occurs, the Responder MUST reply with an
    //# RDMA_ERROR procedure and set the rdma_err value to ERR_CHUNK.
    //= rfc8166#section-4.5
    //# If other errors are detected in the RPC-over-RDMA header of an RPC
    //# Call message, a Responder MUST send an RDMA_ERROR message back to
    //# the Requester.
    //= rfc8166#section-4.5
    //# o  The rdma_xid field MUST contain the same XID that was in the
    //# rdma_xid field in the failing request;
    //= rfc8166#section-4.5
    //# o  The rdma_vers field MUST contain the same version that was in the
    //# rdma_vers field in the failing request;
    //= rfc8166#section-4.5
    //# o  The rdma_proc field MUST contain the value RDMA_ERROR; and
    assert_eq!(
        p.raw.got,
        vec![words(&[xid, 1, GRANT, 4, 2])],
        "ERR_CHUNK for {msg:02x?}"
    );
    assert_eq!(p.side.conn.metrics().err_chunk_sent, 1);
    assert!(!p.side.conn.is_closed());
    assert!(p.side.events.is_empty(), "nothing reached the upper layer");
    // The connection still serves a good call afterwards.
    let mut good = words(&[77, 1, 8, 0, 0, 0, 0]);
    good.extend(rpc_call(77));
    p.raw.send(&good);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
}

#[test]
fn err_chunk_for_rdma_msgp() {
    //= rfc8166#section-4.6.1
    //# When receiving an RDMA_MSGP procedure, Responders SHOULD reply with
    //# an RDMA_ERROR procedure, setting the rdma_err field to ERR_CHUNK;
    let mut m = words(&[5, 1, 8, 2, 4, 1024, 0, 0, 0]);
    m.extend(rpc_call(5));
    expect_err_chunk(m, 5);
}

#[test]
fn err_chunk_for_unknown_proc() {
    expect_err_chunk(words(&[6, 1, 8, 9, 0, 0, 0]), 6);
}

#[test]
fn err_chunk_for_malformed_lists() {
    // Read-list discriminant 2.
    expect_err_chunk(words(&[7, 1, 8, 0, 2, 0, 0]), 7);
    // Truncated Write list.
    expect_err_chunk(words(&[8, 1, 8, 0, 0, 1, 5]), 8);
    // RDMA_NOMSG with all lists empty.
    //= rfc8166#section-4.2.4
    //# Though any of these MAY be marked as not present, one MUST be present
    //# and MUST hold the Payload stream for this RPC-over-RDMA message.
    expect_err_chunk(words(&[9, 1, 8, 1, 0, 0, 0]), 9);
}

#[test]
fn err_chunk_for_bad_positions() {
    // Read chunk at position 6 (not 4-aligned).
    //= rfc8166#section-3.4.5
    //# The value in this field
    //# MUST be a multiple of four.
    let mut m = words(&[10, 1, 8, 0, 1, 6, 0x1234, 8, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(10));
    expect_err_chunk(m, 10);
    // Read chunk past the end of the inline message (40 octets).
    let mut m = words(&[11, 1, 8, 0, 1, 44, 0x1234, 8, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(11));
    expect_err_chunk(m, 11);
    // Position-Zero Read chunk in an RDMA_MSG.
    let mut m = words(&[12, 1, 8, 0, 1, 0, 0x1234, 8, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(12));
    expect_err_chunk(m, 12);
    // RDMA_NOMSG with only a Reply chunk: no Position-Zero Read chunk.
    expect_err_chunk(words(&[13, 1, 8, 1, 0, 0, 1, 1, 0x99, 4096, 0, 0]), 13);
    // A Read chunk longer than max_message_len.
    expect_err_chunk(
        words(&[14, 1, 8, 1, 1, 0, 0x1234, 0x7fff_ffff, 0, 0, 0, 0, 0]),
        14,
    );
}

#[test]
fn done_and_short_messages_are_dropped() {
    let mut p = server();
    p.raw.send(&words(&[20, 1, 8, 3]));
    p.raw.send(&[0, 0, 0, 21, 0, 0, 0, 1, 0, 0]);
    p.raw.send(&[]);
    // 24 octets: a truncated RDMA_MSG, not answered.
    p.raw.send(&words(&[24, 1, 8, 0, 0, 0]));
    p.run();
    //= rfc8166#section-4.6.2
    //# Receivers MUST silently discard RDMA_DONE messages.
    //= rfc8166#section-4.5
    //# If an incoming RPC-over-RDMA message is not as long as a minimal size
    //# RPC-over-RDMA header (28 bytes), the receiver cannot trust the value
    //# of the XID field; therefore, it MUST silently discard the message
    //# before performing any parsing.
    assert!(p.raw.got.is_empty(), "no answer: {:02x?}", p.raw.got);
    assert_eq!(p.side.conn.metrics().dropped, 4);
    assert!(!p.side.conn.is_closed());
}

/// RDMA_DONE padded to the minimal header (28 octets) or followed by any
/// octets is still RDMA_DONE: discarded, never answered with ERR_CHUNK.
#[test]
fn rdma_done_of_any_length_is_silently_discarded() {
    let mut p = server();
    let lens = [16usize, 20, 28, 32, 44, 200, 4000];
    for (k, &len) in lens.iter().enumerate() {
        let mut m = words(&[30 + k as u32, 1, 8, 3]);
        // Zeros (an empty-chunk-lists look-alike) or arbitrary octets.
        let fill = if k % 2 == 0 { 0 } else { 0xa5 };
        m.resize(len, fill);
        p.raw.send(&m);
    }
    p.run();
    //= rfc8166#section-4.6.2
    //# Receivers MUST silently discard RDMA_DONE messages.
    assert!(p.raw.got.is_empty(), "no answer: {:02x?}", p.raw.got);
    assert_eq!(p.side.conn.metrics().err_chunk_sent, 0);
    assert_eq!(p.side.conn.metrics().dropped, lens.len() as u64);
    assert!(!p.side.conn.is_closed());
    // The connection still serves calls.
    let mut call = words(&[40, 1, 8, 0, 0, 0, 0]);
    call.extend(words(&[40, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]));
    p.raw.send(&call);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
}

#[test]
fn received_rdma_error_is_not_answered() {
    let mut p = server();
    p.raw.send(&words(&[22, 1, 8, 4, 2]));
    p.raw.send(&words(&[23, 1, 8, 4, 1, 1]));
    p.raw.send(&words(&[24, 1, 8, 4, 1, 1, 1]));
    p.run();
    //= rfc8166#section-4.2.4
    //# A Responder MUST silently discard RDMA_ERROR procedures.
    assert!(p.raw.got.is_empty());
    assert!(!p.side.conn.is_closed());
}

fn linux_server_pd() -> Vec<u8> {
    PrivateData::new(
        InlineSize::from_bytes(4096).unwrap(),
        InlineSize::from_bytes(4096).unwrap(),
        false,
    )
    .to_bytes()
    .to_vec()
}

fn client_with_one_call() -> (RawPair, u32) {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), 512),
        )
        .unwrap();
    p.raw.post_recvs(1);
    p.run();
    assert_eq!(p.raw.got.len(), 1);
    let xid = u32::from_be_bytes(p.raw.got[0][..4].try_into().unwrap());
    (p, xid)
}

#[test]
fn unknown_xid_is_dropped_and_counted() {
    let (mut p, xid) = client_with_one_call();
    let mut bogus = words(&[xid ^ 0x5555, 1, 8, 0, 0, 0, 0]);
    bogus.extend(words(&[xid ^ 0x5555, 1, 0, 0, 0, 0]));
    p.raw.send(&bogus);
    p.run();
    assert_eq!(p.side.conn.metrics().bad_xids, 1);
    assert!(p.side.events.is_empty());
    assert!(!p.side.conn.is_closed());
    // The right reply still completes the call (the receive was reposted).
    let mut good = words(&[xid, 1, 8, 0, 0, 0, 0]);
    good.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&good);
    p.run();
    assert!(
        matches!(&p.side.events[..], [Event::CreditsChanged { credits: 8 }, Event::ReplyReceived(r)] if r.xid == xid)
    );
}

#[test]
fn err_vers_received_fails_the_call_with_the_peer_range() {
    let (mut p, xid) = client_with_one_call();
    p.raw.send(&words(&[xid, 1, 8, 4, 1, 2, 3]));
    p.run();
    assert!(p.side.events.iter().any(|e| matches!(
        e,
        Event::CallFailed {
            error: CallFailure::RdmaError(RdmaErrorReport::Vers { low: 2, high: 3 }),
            retransmit: false,
            ..
        }
    )));
    assert_eq!(p.side.conn.metrics().err_vers_received, 1);
    assert_eq!(p.side.conn.outstanding(), 0);
    assert!(!p.side.conn.is_closed());
}

#[test]
fn reply_with_a_read_list_is_silently_discarded() {
    let (mut p, xid) = client_with_one_call();
    let mut m = words(&[xid, 1, 8, 0, 1, 0, 0x77, 8, 0, 0, 0, 0, 0]);
    m.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&m);
    p.run();
    //= rfc8166#section-4.3.1
    //# Responders MUST leave the Read list empty in all replies.
    //= rfc8166#section-4.5
    //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
    //# message, a Requester MUST silently discard the message.
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.raw.got.len(), 1, "only the call: nothing answered");
    assert_eq!(p.side.conn.metrics().bad_replies, 1);
    assert_eq!(p.side.conn.outstanding(), 1, "the call still waits");
    // A good reply completes it.
    let mut good = words(&[xid, 1, 8, 0, 0, 0, 0]);
    good.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&good);
    p.run();
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(r) if r.xid == xid)));
}

#[test]
fn malformed_and_msgp_replies_are_silently_discarded() {
    let (mut p, xid) = client_with_one_call();
    // RDMA_MSGP (with its align/thresh words), a bad list discriminant,
    // and an unknown rdma_proc: one at a time (one receive).
    let mut msgp = words(&[xid, 1, 8, 2, 4, 1024, 0, 0, 0]);
    msgp.extend(words(&[xid, 1, 0, 0, 0, 0]));
    for m in [
        msgp,
        words(&[xid, 1, 8, 0, 2, 0, 0]),
        words(&[xid, 1, 8, 9, 0, 0, 0]),
    ] {
        p.raw.send(&m);
        p.run();
    }
    //= rfc8166#section-4.6.1
    //# Requesters MUST silently discard the message.
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.raw.got.len(), 1, "only the call: nothing answered");
    assert_eq!(p.side.conn.metrics().bad_replies, 3);
    assert_eq!(p.side.conn.outstanding(), 1);
}

#[test]
fn client_sends_its_credit_request_and_the_right_header() {
    let (p, xid) = client_with_one_call();
    // xid, vers 1, credits requested 128, RDMA_MSG, three empty lists,
    // then the RPC call with the XID patched in.
    //= rfc8166#section-4.2.2
    //# For RPC-over-RDMA version 1, this field MUST contain the value one
    //# (1).
    //= rfc8166#section-4.2.1
    //# This XID MUST be the same as the XID in the RPC message.
    let mut want = words(&[xid, 1, 128, 0, 0, 0, 0]);
    want.extend(rpc_call(xid));
    assert_eq!(p.raw.got[0], want);
}

#[test]
fn absent_private_data_means_1024() {
    let p = RawPair::client(Config::client(), Vec::new());
    let n = p.side.conn.negotiated().unwrap();
    //= rfc8797#section-5.1
    //# In other words, the peer MUST behave as if a Private Data message was
    //# received in which (1) bit 15 of the Flags field is zero and (2) both
    //# Size fields contain the value zero.
    //= rfc8166#section-3.3.3
    //# In the absence of such a mechanism,
    //# senders and receives MUST assume the inline thresholds are 1024
    //# bytes.
    //= rfc8797#section-5.2
    //# If the RPC-over-RDMA version 1 CM Private Data Format
    //# Identifier is not present, an RPC-over-RDMA version 1 receiver MUST
    //# behave as if no RPC-over-RDMA version 1 CM Private Data has been
    //# provided.
    assert_eq!((n.send_threshold, n.recv_threshold), (1024, 1024));
    assert!(!n.remote_invalidation);
    // With MPA v2 IRD/ORD in front, the private data is still found.
    let mut pd = vec![0x80, 0x10, 0x00, 0x10];
    pd.extend(linux_server_pd());
    let p = RawPair::client(Config::client(), pd);
    assert_eq!(p.side.conn.negotiated().unwrap().send_threshold, 4096);
}

fn delivered(p: &mut RawPair) -> rpcrdma_proto::engine::IncomingCall {
    let mut calls = take_calls(&mut p.side.events);
    assert_eq!(
        calls.len(),
        1,
        "{:?} / sent back {:02x?}",
        p.side.events,
        p.raw.got
    );
    calls.remove(0)
}

#[test]
fn several_read_chunks_multi_segment_and_included_roundup() {
    //= rfc8166#section-3.4.5.2
    //# If the Requester chooses to include roundup padding in a Read
    //# chunk, the chunk's total length MUST be the sum of the encoded
    //# length of the data item and the length of the roundup padding.
    // (The engine, as responder, accepts both forms.)
    let mut p = server();
    let a = [1u8, 2, 3, 4, 5];
    let b = [6u8, 7, 8, 9, 10, 11, 0, 0]; // roundup included by this requester
    let a1 = p.raw.expose(&a[..3]);
    let a2 = p.raw.expose(&a[3..]);
    let hb = p.raw.expose(&b);
    // Inline: RPC header (40) + len 5 + len 6 + trailer.
    let mut inline = rpc_call(30);
    inline.extend(words(&[5, 6, 0xfeed_f00d]));
    // Read list: chunk at 44 in two segments, chunk at 56 in one.
    let mut m = words(&[30, 1, 8, 0]);
    m.extend(words(&[1, 44, a1, 3, 0, 0]));
    m.extend(words(&[1, 44, a2, 2, 0, 0]));
    m.extend(words(&[1, 56, hb, 8, 0, 0]));
    m.extend(words(&[0, 0, 0]));
    m.extend(&inline);
    p.raw.send(&m);
    p.run();
    let c = delivered(&mut p);
    let mut want = rpc_call(30);
    want.extend(words(&[5]));
    want.extend([1, 2, 3, 4, 5, 0, 0, 0]);
    want.extend(words(&[6]));
    want.extend([6, 7, 8, 9, 10, 11, 0, 0]);
    want.extend(words(&[0xfeed_f00d]));
    assert_eq!(c.message.flatten(), want);
    assert_eq!(ddp_ranges(&c.message), vec![44..49, 56..64]);
    assert!(!c.long);
    assert_eq!(p.side.conn.metrics().rdma_reads, 3);
}

#[test]
fn position_zero_read_chunk_with_a_data_chunk() {
    let mut p = server();
    // The Long Call without its DDP item, and the item itself.
    let mut pz = rpc_call(31);
    pz.extend(words(&[5, 0xfeed_f00d]));
    let hpz = p.raw.expose(&pz);
    let hd = p.raw.expose(&[9, 9, 9, 9, 9]);
    let mut m = words(&[31, 1, 8, 1]);
    m.extend(words(&[1, 0, hpz, pz.len() as u32, 0, 0]));
    m.extend(words(&[1, 44, hd, 5, 0, 0]));
    m.extend(words(&[0, 0, 0]));
    p.raw.send(&m);
    p.run();
    let c = delivered(&mut p);
    let mut want = rpc_call(31);
    want.extend(words(&[5]));
    want.extend([9, 9, 9, 9, 9, 0, 0, 0]);
    want.extend(words(&[0xfeed_f00d]));
    assert_eq!(c.message.flatten(), want);
    assert_eq!(ddp_ranges(&c.message), vec![44..49]);
    assert!(c.long);
}

#[test]
fn write_chunk_reply_bytes_by_hand() {
    use rpcrdma_proto::engine::{OutgoingReply, Piece, ReplyForm};
    let mut p = server();
    let s1 = p.raw.sink(3000);
    let s2 = p.raw.sink(3000);
    // RDMA_MSG call with one Write chunk of two segments (offsets 0x10, 0x20
    // into regions that start at 0: the engine must use them as given).
    let mut m = words(&[32, 1, 8, 0, 0]);
    m.extend(words(&[
        1,
        2,
        s1.stag().0,
        3000 - 16,
        0,
        0x10,
        s2.stag().0,
        3000 - 32,
        0,
        0x20,
        0,
    ]));
    m.extend(words(&[0]));
    m.extend(rpc_call(32));
    p.raw.send(&m);
    p.run();
    let c = delivered(&mut p);
    assert_eq!(c.write_chunks, vec![(3000 - 16) + (3000 - 32)]);
    let result = data(5001, 9);
    let mut head = words(&[32, 1, 0, 0, 0, 0]);
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
    // xid, vers, grant 64, RDMA_MSG, no Read list, Write list with one
    // chunk of 2 segments and their actual lengths (2984 + 2017 = 5001, no
    // pad), end of Write list, no Reply chunk; then the RPC reply without
    // the DDP data.
    let mut want = words(&[32, 1, GRANT, 0, 0]);
    want.extend(words(&[
        1,
        2,
        s1.stag().0,
        2984,
        0,
        0x10,
        s2.stag().0,
        2017,
        0,
        0x20,
        0,
    ]));
    want.extend(words(&[0]));
    want.extend(head);
    assert_eq!(p.raw.got, vec![want]);
    let r1 = p.raw.prov.region(&s1).unwrap()[0x10..0x10 + 2984].to_vec();
    let r2 = p.raw.prov.region(&s2).unwrap()[0x20..0x20 + 2017].to_vec();
    assert_eq!([r1, r2].concat(), result);
    // Nothing written past the data (no XDR pad).
    assert_eq!(p.raw.prov.region(&s2).unwrap()[0x20 + 2017], 0);
}

#[test]
fn rdma_reads_never_exceed_the_ord() {
    let mut s = Config::server();
    s.ord = 2;
    let mut p = RawPair::server(s);
    p.raw.post_recvs(2);
    // One Read chunk in 7 segments of 100 octets.
    let arg = data(700, 3);
    let mut m = words(&[40, 1, 8, 0]);
    for i in 0..7 {
        let h = p.raw.expose(&arg[i * 100..(i + 1) * 100]);
        m.extend(words(&[1, 44, h, 100, 0, 0]));
    }
    m.extend(words(&[0, 0, 0]));
    let mut inline = rpc_call(40);
    inline.extend(words(&[700]));
    m.extend(&inline);
    p.raw.send(&m);
    p.run();
    let c = delivered(&mut p);
    assert_eq!(&c.message.flatten()[44..744], &arg[..]);
    let mt = p.side.conn.metrics();
    assert_eq!(mt.rdma_reads, 7);
    assert_eq!(mt.max_reads_in_flight, 2);
}

#[test]
fn chunks_are_invalidated_before_the_reply_is_delivered() {
    use rpcrdma_proto::provider::Status;
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall {
                message: rpcrdma_proto::engine::Message::from_pieces([
                    rpcrdma_proto::engine::Piece::Inline(rpc_call(0).into()),
                ]),
                reply_max: 9000,
                ddp_results: vec![8192],
            },
        )
        .unwrap();
    p.raw.post_recvs(1);
    p.run();
    let call = p.raw.got.remove(0);
    // xid, 1, 128, RDMA_MSG, no reads, write list: 1, count 1, handle...
    let w = |i: usize| u32::from_be_bytes(call[i * 4..i * 4 + 4].try_into().unwrap());
    let xid = w(0);
    assert_eq!((w(3), w(4), w(5), w(6)), (0, 0, 1, 1));
    let stag = w(7);
    assert_eq!(w(8), 8192);
    // The responder writes the result, then replies.
    p.raw.write(stag, 0, &[7; 100]);
    let mut reply = words(&[xid, 1, 8, 0, 0, 1, 1, stag, 100, 0, 0, 0, 0]);
    reply.extend(words(&[xid, 1, 0, 0, 0, 0, 100]));
    p.raw.send(&reply);
    p.run();
    let r = match p
        .side
        .events
        .iter()
        .find(|e| matches!(e, Event::ReplyReceived(_)))
    {
        Some(Event::ReplyReceived(r)) => r.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(r.message.results(), vec![vec![7; 100]]);
    assert_eq!(p.side.conn.metrics().local_invalidations, 1);
    // Once delivered, the STag is dead: a late Write is refused by the
    // client's side (and, as on iWARP, ends the connection).
    p.raw.completions.clear();
    p.raw.write(stag, 0, &[8; 4]);
    p.run();
    assert!(
        p.raw
            .completions
            .iter()
            .any(|c| c.status == Status::RemoteAccess),
        "{:?}",
        p.raw.completions
    );
}

#[test]
fn backchannel_receives_only_after_enable() {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    assert_eq!(
        p.side.conn.inflight_work_requests(),
        0,
        "no receive before enable"
    );
    p.side.conn.enable_backchannel(&mut p.side.prov, 3);
    p.run();
    //= rfc8167#section-4.3.1
    //# To receive incoming reverse-direction Calls, an RPC-over-RDMA client
    //# endpoint posts enough additional Receive buffers to match its
    //# advertised reverse-direction credit value.
    assert_eq!(p.side.conn.inflight_work_requests(), 3);
    // A reverse call arrives and is delivered as a backchannel call.
    let mut m = words(&[0x9000_0001, 1, 2, 0, 0, 0, 0]);
    m.extend(rpc_call(0x9000_0001));
    p.raw.send(&m);
    p.run();
    let c = delivered(&mut p);
    assert!(c.backchannel);
    // Its receive was reposted.
    assert_eq!(p.side.conn.inflight_work_requests(), 3);
}

#[test]
fn grants_are_clamped_to_one_and_to_the_request() {
    let mut cfg = Config::client();
    cfg.credits_requested = 10;
    let mut p = RawPair::client(cfg, linux_server_pd());
    let mut xids = Vec::new();
    let reply = |xid: u32, credit: u32| {
        let mut m = words(&[xid, 1, credit, 0, 0, 0, 0]);
        m.extend(words(&[xid, 1, 0, 0, 0, 0]));
        m
    };
    let call = |p: &mut RawPair| {
        p.side
            .conn
            .start_call(
                p.now,
                &mut p.side.prov,
                OutgoingCall::inline(rpc_call(0), 256),
            )
            .unwrap();
    };
    call(&mut p);
    p.raw.post_recvs(8);
    p.run();
    xids.push(u32::from_be_bytes(p.raw.got[0][..4].try_into().unwrap()));
    // A grant above the request is clamped to it.
    p.raw.send(&reply(xids[0], 1000));
    p.run();
    assert_eq!(p.side.conn.credits(), 10);
    assert_eq!(p.side.conn.metrics().credits_granted, 1000);
    // A zero grant is treated as one (Linux: "don't deadlock").
    call(&mut p);
    p.run();
    let x = u32::from_be_bytes(p.raw.got[1][..4].try_into().unwrap());
    p.raw.send(&reply(x, 0));
    p.run();
    assert_eq!(p.side.conn.credits(), 1);
    let changes: Vec<_> = p
        .side
        .events
        .iter()
        .filter_map(|e| match e {
            Event::CreditsChanged { credits } => Some(*credits),
            _ => None,
        })
        .collect();
    assert_eq!(changes, vec![10, 1]);
}

#[test]
fn undecodable_rdma_error_is_silently_discarded() {
    let (mut p, xid) = client_with_one_call();
    // ERR_VERS without its high version (24 octets), one at a time.
    p.raw.send(&words(&[xid, 1, 8, 4, 1, 1]));
    p.run();
    //= rfc8166#section-4.5
    //# A receiver MUST silently discard an RDMA_ERROR procedure that it
    //# cannot decode.
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.outstanding(), 1);
    assert_eq!(p.side.conn.metrics().dropped, 1);
    // A decodable one fails the call.
    p.raw.send(&words(&[xid, 1, 8, 4, 2]));
    p.run();
    assert!(p.side.events.iter().any(|e| matches!(
        e,
        Event::CallFailed {
            error: CallFailure::RdmaError(RdmaErrorReport::Chunk),
            ..
        }
    )));
}
