//! XID consistency (RFC 8166 §4.2.1, RFC 8167 §5.1/§5.2): the RPC header
//! starts with the transport header's XID and the right msg_type. A call
//! that breaks this gets ERR_CHUNK; a reply that breaks it is dropped and
//! counted, and the call keeps waiting for a good reply.

mod util;

use rpcrdma_proto::engine::{Config, ConnectionError, Event, OutgoingCall, PeerError};
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};
use util::*;

fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

fn server() -> RawPair {
    let mut p = RawPair::server(Config::server());
    p.raw.post_recvs(4);
    p
}

fn linux_server_pd() -> Vec<u8> {
    let s = InlineSize::from_bytes(4096).unwrap();
    PrivateData::new(s, s, false).to_bytes().to_vec()
}

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[i * 4..i * 4 + 4].try_into().unwrap())
}

/// A good call still works afterwards.
fn still_serves(p: &mut RawPair) {
    let mut good = words(&[77, 1, 8, 0, 0, 0, 0]);
    good.extend(rpc_call(77));
    p.raw.send(&good);
    p.run();
    let calls = take_calls(&mut p.side.events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].xid, 77);
}

#[test]
fn forward_call_with_a_different_rpc_xid_gets_err_chunk() {
    let mut p = server();
    let mut m = words(&[0x100, 1, 8, 0, 0, 0, 0]);
    m.extend(rpc_call(0x101));
    p.raw.send(&m);
    p.run();
    //= rfc8166#section-4.2.1
    //# This XID MUST be the same as the XID in the RPC message.
    assert_eq!(p.raw.got, vec![words(&[0x100, 1, 64, 4, 2])]);
    assert!(take_calls(&mut p.side.events).is_empty());
    assert_eq!(p.side.conn.metrics().rpc_header_mismatches, 1);
    assert_eq!(p.side.conn.pending_incoming(), 0);
    p.raw.got.clear();
    still_serves(&mut p);
}

#[test]
fn forward_call_with_a_bad_msg_type_or_no_rpc_header_gets_err_chunk() {
    let mut p = server();
    // msg_type 5.
    let mut m = words(&[0x200, 1, 8, 0, 0, 0, 0]);
    m.extend(words(&[0x200, 5, 2, 100_003, 3, 0, 0, 0, 0, 0]));
    p.raw.send(&m);
    // An RDMA_MSG with no RPC message at all.
    p.raw.send(&words(&[0x201, 1, 8, 0, 0, 0, 0]));
    p.run();
    assert_eq!(
        p.raw.got,
        vec![words(&[0x200, 1, 64, 4, 2]), words(&[0x201, 1, 64, 4, 2])]
    );
    assert!(take_calls(&mut p.side.events).is_empty());
    p.raw.got.clear();
    still_serves(&mut p);
}

#[test]
fn long_call_with_a_different_rpc_xid_gets_err_chunk_after_the_read() {
    let mut p = server();
    let base = registered(p.side.prov.inner());
    let mut pz = rpc_call(0x301);
    pz.extend(data(5000, 1));
    let h = p.raw.expose(&pz);
    let m = words(&[0x300, 1, 8, 1, 1, 0, h, pz.len() as u32, 0, 0, 0, 0, 0]);
    p.raw.send(&m);
    p.run();
    //= rfc8167#section-5.1
    //# Whether presented inline or as a separate chunk, the ONC RPC Call
    //# header MUST start with the same XID value that is present in the
    //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
    //# contain the value CALL.
    assert_eq!(p.raw.got, vec![words(&[0x300, 1, 64, 4, 2])]);
    assert!(take_calls(&mut p.side.events).is_empty());
    assert_eq!(p.side.conn.metrics().rdma_reads, 1);
    // The sink was released (the error reply's Send buffer is pooled).
    assert!(registered(p.side.prov.inner()) <= base + 1);
    p.raw.got.clear();
    still_serves(&mut p);
}

fn client_with_backchannel() -> RawPair {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    p.side.conn.enable_backchannel(&mut p.side.prov, 4);
    p.raw.post_recvs(4);
    p.run();
    p
}

#[test]
fn reverse_call_with_a_different_rpc_xid_gets_err_chunk() {
    let mut p = client_with_backchannel();
    let mut m = words(&[0x9000_0001, 1, 2, 0, 0, 0, 0]);
    m.extend(rpc_call(0x9000_0002));
    p.raw.send(&m);
    p.run();
    // The client answers as reverse-direction responder, with its
    // backchannel grant (4).
    assert_eq!(p.raw.got, vec![words(&[0x9000_0001, 1, 4, 4, 2])]);
    assert!(take_calls(&mut p.side.events).is_empty());
    // A consistent one is delivered.
    let mut m = words(&[0x9000_0003, 1, 2, 0, 0, 0, 0]);
    m.extend(rpc_call(0x9000_0003));
    p.raw.send(&m);
    p.run();
    let c = take_calls(&mut p.side.events);
    assert_eq!(c.len(), 1);
    assert!(c[0].backchannel);
    // The reverse reply: same version, the call's XID in both headers (the
    // engine writes it into the RPC header).
    p.raw.got.clear();
    p.side
        .conn
        .send_reply(
            p.now,
            &mut p.side.prov,
            c[0].handle,
            rpcrdma_proto::engine::OutgoingReply {
                message: rpcrdma_proto::engine::Message::from_pieces([
                    rpcrdma_proto::engine::Piece::Inline(words(&[0, 1, 0, 0, 0, 0]).into()),
                ]),
            },
        )
        .unwrap();
    p.run();
    //= rfc8167#section-5.2
    //# The rdma_vers field MUST contain the same value in a reverse-
    //# direction Reply message as in the matching Call message.
    //= rfc8167#section-5.2
    //# Whether presented inline or as a separate chunk, the ONC RPC Reply
    //# header MUST start with the same XID value that is present in the
    //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
    //# contain the value REPLY.
    let mut want = words(&[0x9000_0003, 1, 4, 0, 0, 0, 0]);
    want.extend(words(&[0x9000_0003, 1, 0, 0, 0, 0]));
    assert_eq!(p.raw.got, vec![want]);
}

#[test]
fn reverse_call_with_chunks_gets_err_chunk() {
    let mut p = client_with_backchannel();
    // Inline reverse call carrying a Reply chunk.
    let mut m = words(&[0x9000_0010, 1, 2, 0, 0, 0, 1, 1, 0x55, 4096, 0, 0]);
    m.extend(rpc_call(0x9000_0010));
    p.raw.send(&m);
    // A reverse Long Call (RDMA_NOMSG + Position-Zero Read chunk).
    let h = p.raw.expose(&rpc_call(0x9000_0011));
    p.raw
        .send(&words(&[0x9000_0011, 1, 2, 1, 1, 0, h, 40, 0, 0, 0, 0, 0]));
    p.run();
    //= rfc8167#section-5.3
    //# If a reverse-direction requester provides a non-empty chunk list to a
    //# Responder that does not support chunks, the Responder MUST reply with
    //# an RDMA_ERROR message with rdma_err field set to ERR_CHUNK.
    assert_eq!(
        p.raw.got,
        vec![
            words(&[0x9000_0010, 1, 4, 4, 2]),
            words(&[0x9000_0011, 1, 4, 4, 2])
        ]
    );
    assert!(take_calls(&mut p.side.events).is_empty());
    assert_eq!(p.side.conn.metrics().rdma_reads, 0, "a client never reads");
}

//= rfc8167#section-6
//# If an endpoint is not prepared to receive an incoming reverse-
//# direction message, loss of the RDMA connection might result.
#[test]
fn reverse_call_before_enable_ends_the_connection() {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    // A forward call gives the client one receive; the server abuses it.
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), 512),
        )
        .unwrap();
    p.raw.post_recvs(2);
    p.run();
    let _fwd = w(&p.raw.got.remove(0), 0);
    let mut m = words(&[0x9000_0020, 1, 2, 0, 0, 0, 0]);
    m.extend(rpc_call(0x9000_0020));
    p.raw.send(&m);
    p.run();
    assert!(take_calls(&mut p.side.events).is_empty());
    assert!(p.raw.got.is_empty(), "not answered");
    assert_eq!(p.side.conn.metrics().dropped, 1);
    // The receive it took was meant for the reply: the connection ends
    // (Linux's client disconnects too), blaming the peer.
    assert_eq!(
        p.side.conn.error(),
        Some(&ConnectionError::Peer(PeerError::UnexpectedReverseCall {
            xid: 0x9000_0020
        }))
    );
}

fn client_call(reply_max: u32) -> (RawPair, Vec<u8>) {
    let mut p = RawPair::client(Config::client(), linux_server_pd());
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), reply_max),
        )
        .unwrap();
    p.raw.post_recvs(1);
    p.run();
    assert_eq!(p.raw.got.len(), 1);
    let call = p.raw.got.remove(0);
    (p, call)
}

fn replies(p: &RawPair) -> Vec<&rpcrdma_proto::engine::Reply> {
    p.side
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn reply_with_a_different_rpc_xid_is_dropped_and_the_call_waits() {
    let (mut p, call) = client_call(512);
    let xid = w(&call, 0);
    // Transport XID right, RPC XID wrong; then msg_type CALL-less garbage
    // (msg_type 7); then a reply with no RPC message at all.
    let mut bad = words(&[xid, 1, 8, 0, 0, 0, 0]);
    bad.extend(words(&[xid + 1, 1, 0, 0, 0, 0]));
    let mut bad2 = words(&[xid, 1, 8, 0, 0, 0, 0]);
    bad2.extend(words(&[xid, 7, 0, 0, 0, 0]));
    // One at a time: the client has one receive (reposted after each).
    for m in [bad, bad2, words(&[xid, 1, 8, 0, 0, 0, 0])] {
        p.raw.send(&m);
        p.run();
    }
    //= rfc8166#section-4.5
    //# If errors are detected in the RPC-over-RDMA header of an RPC Reply
    //# message, a Requester MUST silently discard the message.
    assert!(replies(&p).is_empty());
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.metrics().rpc_header_mismatches, 3);
    assert_eq!(p.side.conn.outstanding(), 1);
    assert_eq!(p.side.conn.credits(), 1, "a dropped reply grants nothing");
    assert!(p.raw.got.is_empty(), "a requester never answers");
    // The good reply completes the call.
    let mut good = words(&[xid, 1, 8, 0, 0, 0, 0]);
    good.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&good);
    p.run();
    assert_eq!(replies(&p).len(), 1);
    assert_eq!(p.side.conn.outstanding(), 0);
}

#[test]
fn long_reply_with_a_different_rpc_xid_is_dropped() {
    let (mut p, call) = client_call(9000);
    let xid = w(&call, 0);
    // RDMA_MSG, no Read list, no Write list, a Reply chunk of one segment.
    assert_eq!((w(&call, 3), w(&call, 4), w(&call, 5)), (0, 0, 0));
    assert_eq!((w(&call, 6), w(&call, 7), w(&call, 9)), (1, 1, 9000));
    let stag = w(&call, 8);
    let nomsg = |p: &mut RawPair, rpc_xid: u32| {
        let body = words(&[rpc_xid, 1, 0, 0, 0, 0, 0xabcd]);
        p.raw.write(stag, 0, &body);
        p.raw.send(&words(&[
            xid,
            1,
            8,
            1,
            0,
            0,
            1,
            1,
            stag,
            body.len() as u32,
            0,
            0,
        ]));
        p.run();
    };
    nomsg(&mut p, xid ^ 1);
    assert!(replies(&p).is_empty());
    assert_eq!(p.side.conn.metrics().rpc_header_mismatches, 1);
    assert_eq!(p.side.conn.outstanding(), 1);
    nomsg(&mut p, xid);
    let r = replies(&p);
    assert_eq!(r.len(), 1);
    assert!(r[0].long);
    assert_eq!(r[0].message.flatten(), words(&[xid, 1, 0, 0, 0, 0, 0xabcd]));
}

#[test]
fn reverse_reply_with_a_different_rpc_xid_is_dropped() {
    let mut p = server();
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), 256),
        )
        .unwrap();
    p.run();
    let call = p.raw.got.remove(0);
    let xid = w(&call, 0);
    //= rfc8167#section-5.1
    //# The rdma_vers field MUST contain the same value in reverse- and
    //# forward-direction Call messages on the same connection.
    // A reverse call: vers 1, our backchannel request (16), RDMA_MSG, three
    // empty lists, the RPC call with its XID.
    let mut want = words(&[xid, 1, 16, 0, 0, 0, 0]);
    want.extend(rpc_call(xid));
    assert_eq!(call, want);
    let mut bad = words(&[xid, 1, 4, 0, 0, 0, 0]);
    bad.extend(words(&[xid.wrapping_add(9), 1, 0, 0, 0, 0]));
    p.raw.send(&bad);
    p.run();
    assert!(p.side.events.is_empty(), "{:?}", p.side.events);
    assert_eq!(p.side.conn.metrics().rpc_header_mismatches, 1);
    assert!(p.raw.got.is_empty(), "nothing answered");
    let mut good = words(&[xid, 1, 4, 0, 0, 0, 0]);
    good.extend(words(&[xid, 1, 0, 0, 0, 0]));
    p.raw.send(&good);
    p.run();
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(r) if r.xid == xid)));
}
