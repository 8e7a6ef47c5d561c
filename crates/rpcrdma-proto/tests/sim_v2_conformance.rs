//! RPC-over-RDMA version 2 (draft-cel-nfsv4-rpcrdma-version-two-09): the
//! statements the codec implements, checked where they matter — at the
//! engine, against a peer driven by hand (every message word by word).
//! Transport properties that do not conform to their typedef, zero-length
//! and unknown properties, unparseable headers, reserved flag bits, a
//! malformed answer to the probe, and a client answering the server's
//! unusable reverse requests (version 2 tells a request from a response).

mod util;

use rpcrdma_proto::engine::{Config, Event, OutgoingCall, RpcRdmaVersion};
use rpcrdma_proto::wire::v2::{PropVal, RvReqSup};
use util::*;

use RpcRdmaVersion::{Auto, V2};

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[4 * i..4 * i + 4].try_into().unwrap())
}

fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

fn rpc_reply(xid: u32) -> Vec<u8> {
    words(&[xid, 1, 0, 0, 0, 0])
}

/// An `auto` server engine and a raw client with receives posted.
fn server() -> RawPair {
    let mut s = Config::server();
    s.rpcrdma_version = Auto;
    let mut p = RawPair::server(s);
    p.raw.post_recvs(16);
    p
}

/// The server's CONNPROP answer to XID `xid`: F_RESPONSE, its grant 64,
/// RBSIZ 4096, BRS GENL.
fn server_connprop(xid: u32) -> Vec<u8> {
    words(&[xid, 2, 64, 5, 1, 2, 1, 4, 4096, 2, 4, 2])
}

/// A version 2 client engine (no private data from the raw server: the
/// RFC 8797 thresholds are 1024) whose probe the raw end holds; returns
/// the probe's XID.
fn client(backchannel: bool) -> (RawPair, u32) {
    let mut c = Config::client();
    c.rpcrdma_version = V2;
    let mut p = RawPair::client_ready(c, Vec::new(), 8);
    if backchannel {
        p.side.conn.enable_backchannel(&mut p.side.prov, 4);
        p.run();
    }
    let probe = p.raw.got.remove(0);
    (p, w(&probe, 0))
}

#[test]
fn a_property_that_does_not_conform_to_its_typedef_gets_bad_xdr() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# As a result, when rpcrdma2_propval does not conform to that typedef,
    //# the receiver is REQUIRED to return the error RDMA2_ERR_BAD_XDR using
    //# the header type RDMA2_ERROR as described in Section 5.3.3.
    let cases: [(&str, &[u32]); 4] = [
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
        //# The nominally opaque data within rdma_data is not valid when
        //# interpreted using the property-associated typedef.
        ("BRS 7: outside the enum", &[1, 2, 4, 7]),
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
        //# The length of rdma_data is insufficient to contain the data
        //# represented by the property-associated typedef.
        ("RBSIZ in 3 octets", &[1, 1, 3, 0x0000_1000]),
        // Decision 5: more octets than the typedef is not conforming either.
        ("RBSIZ in 8 octets", &[1, 1, 8, 0, 4096]),
        ("BRS in 2 octets", &[1, 2, 2, 0x0002_0000]),
    ];
    for (what, props) in cases {
        let mut p = server();
        let mut m = words(&[0x40, 2, 128, 5, 0]);
        m.extend(words(props));
        p.raw.send(&m);
        p.run();
        // RDMA2_ERROR, F_RESPONSE, the grant, BAD_XDR; nothing settled.
        assert_eq!(p.raw.got, vec![words(&[0x40, 2, 64, 4, 1, 2])], "{what}");
        assert_eq!(p.side.conn.version(), 0, "{what}: nothing settled");
        assert_eq!(p.side.conn.metrics().connprops_sent, 0, "{what}");
        // The client may try again with a well-formed one.
        p.raw.send(&words(&[0x41, 2, 128, 5, 0, 1, 2, 4, 1]));
        p.run();
        assert_eq!(p.raw.got[1], server_connprop(0x41), "{what}");
        assert_eq!(p.side.conn.version(), 2);
    }
}

#[test]
fn zero_length_and_unknown_properties_mean_the_defaults_at_both_ends() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# An rdma_data field which is of zero length is interpreted as
    //# indicating the default value or the property indicated by
    //# rdma_which.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# Note that no error is to be reported if rdma_which is unknown to the
    //# receiver.
    // Server: the client's RBSIZ and BRS are zero-length, one property is
    // unknown.
    let mut p = server();
    p.raw
        .send(&words(&[0x50, 2, 128, 5, 0, 3, 1, 0, 0x7777, 4, 9, 2, 0]));
    p.run();
    assert_eq!(p.raw.got, vec![server_connprop(0x50)], "no error");
    let peer = p.side.conn.version_info().peer_properties;
    assert_eq!((peer.rbsiz(), peer.brs()), (4096, RvReqSup::Inline));
    assert_eq!(p.side.conn.negotiated().unwrap().send_threshold, 4096);

    // Client: the server's answer has a zero-length RBSIZ and no BRS. The
    // RFC 8797 threshold was 1024 (no private data); the version 2 default
    // replaces it.
    let (mut p, xid) = client(false);
    assert_eq!(p.side.conn.negotiated().unwrap().send_threshold, 1024);
    p.raw
        .send(&words(&[xid, 2, 16, 5, 1, 2, 1, 0, 0x8888, 4, 1]));
    p.run();
    assert_eq!(p.side.conn.version(), 2);
    assert!(p.raw.got.is_empty(), "a client answers no CONNPROP");
    let peer = p.side.conn.version_info().peer_properties;
    assert_eq!(peer.props[0], PropVal::Rbsiz(None));
    assert_eq!((peer.rbsiz(), peer.brs()), (4096, RvReqSup::Inline));
    assert_eq!(p.side.conn.negotiated().unwrap().send_threshold, 4096);
    assert_eq!(p.side.conn.credits(), 16);
}

#[test]
fn an_unparseable_request_gets_bad_xdr_and_nothing_else() {
    let mut p = server();
    p.raw.send(&words(&[1, 2, 128, 5, 0, 0]));
    p.run();
    p.raw.got.clear();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# If a responder recognizes the values in the rdma_start.rdma_vers and
    //# rdma_start.rdma_proc fields, but the incoming RPC-over-RDMA transport
    //# header cannot be parsed, it MUST set the rdma_err field to
    //# RDMA2_ERR_BAD_XDR.
    // An RDMA2_MSG whose Read list discriminant is 7; a truncated one; a
    // CONNPROP with a word after its properties (decision 9).
    let mut bad_list = words(&[2, 2, 128, 0, 0, 0, 7, 0, 0]);
    bad_list.extend(rpc_call(2));
    p.raw.send(&bad_list);
    p.raw.send(&words(&[3, 2, 128, 1, 0, 0, 0]));
    p.raw.send(&words(&[4, 2, 128, 5, 0, 0, 0x1234]));
    // An RDMA2_NOMSG with a word after its chunk lists: only RDMA2_MSG
    // carries an RPC message (§5.1, Table 2; decision 20).
    p.raw.send(&words(&[6, 2, 128, 1, 0, 0, 0, 0, 0, 0xdead]));
    p.run();
    assert_eq!(
        p.raw.got,
        vec![
            words(&[2, 2, 64, 4, 1, 2]),
            words(&[3, 2, 64, 4, 1, 2]),
            words(&[4, 2, 64, 4, 1, 2]),
            words(&[6, 2, 64, 4, 1, 2]),
        ]
    );
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# The responder MUST NOT process the request in any way except to send
    //# an error message.
    assert!(take_calls(&mut p.side.events).is_empty());
    assert_eq!(p.side.conn.metrics().rdma2_errors_sent, 4);
    // The same shapes as responses (F_RESPONSE): a responder never gets an
    // error, so nothing is sent.
    bad_list[4 * 4..4 * 5].copy_from_slice(&1u32.to_be_bytes());
    p.raw.send(&bad_list);
    p.run();
    assert_eq!(p.raw.got.len(), 4);
    // And the connection goes on: a good call is delivered.
    let mut m = words(&[5, 2, 128, 0, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(5));
    p.raw.send(&m);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
}

#[test]
fn reserved_flag_bits_are_ignored_on_receipt_and_a_client_never_sends_them() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# The other bits are reserved for future use as described in Section
    //# 9.4.  The sender MUST set these to zero.
    let (mut p, xid) = client(false);
    // The server's CONNPROP with every reserved bit set: still a response.
    let mut a = server_connprop(xid);
    a[16..20].copy_from_slice(&0xffff_ffffu32.to_be_bytes());
    p.raw.send(&a);
    p.run();
    assert_eq!(p.side.conn.version(), 2);
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), 512),
        )
        .unwrap();
    p.run();
    let call = p.raw.got.remove(0);
    assert_eq!(w(&call, 4), 0, "a call: F_RESPONSE clear, no other bit");
    let x = w(&call, 0);
    // Its reply with reserved bits set: delivered, and grants.
    let mut r = words(&[x, 2, 9, 0, 0x8000_0001, 0, 0, 0, 0]);
    r.extend(rpc_reply(x));
    p.raw.send(&r);
    p.run();
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(_))));
    assert_eq!(p.side.conn.credits(), 9);
    // A reverse request with reserved bits set but F_RESPONSE clear is a
    // request, not a reply: nothing answers it here (this client posted no
    // backchannel receives).
    let mut c = words(&[0x99, 2, 1, 0, 0x4000_0000, 0, 0, 0, 0]);
    c.extend(rpc_call(0x99));
    p.raw.send(&c);
    p.run();
    assert!(p.raw.got.is_empty());
}

#[test]
fn a_malformed_answer_to_the_probe_is_dropped_and_the_probe_stays_open() {
    let (mut p, xid) = client(false);
    // The server's CONNPROP with BRS 9 (not in the enum): a requester
    // sends no error (§5.3.3), and nothing is settled from it.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# This header type MUST NOT be transmitted by a requester.
    p.raw.send(&words(&[xid, 2, 64, 5, 1, 1, 2, 4, 9]));
    p.run();
    assert!(p.raw.got.is_empty());
    assert_eq!(p.side.conn.version(), 0);
    assert_eq!(p.side.conn.metrics().dropped, 1);
    // A well-formed answer still settles version 2.
    p.raw.send(&server_connprop(xid));
    p.run();
    assert_eq!(p.side.conn.version(), 2);
    assert_eq!(p.side.conn.credits(), 64);
}

#[test]
fn a_client_answers_the_servers_unusable_reverse_requests() {
    let (mut p, xid) = client(true);
    p.raw.send(&server_connprop(xid));
    p.run();
    assert_eq!(p.side.conn.version(), 2);
    // An unknown header type, as a request (F_RESPONSE clear).
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.2
    //# RPC-over-RDMA version 2 implementations that receive an OPTIONAL
    //# operation that is not supported MUST respond with an RDMA2_ERROR
    //# message with an error code of RDMA2_ERR_INVAL_HTYPE.
    p.raw.send(&words(&[0x700, 2, 4, 6, 0, 1, 2, 3]));
    // A reverse call whose Write list discriminant is 5.
    let mut m = words(&[0x701, 2, 4, 0, 0, 0, 0, 5, 0]);
    m.extend(rpc_call(0x701));
    p.raw.send(&m);
    p.run();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# When the rdma_start.rdma_htype field has the value RDMA2_ERROR, the
    //# RPCRDMA2_F_RESPONSE flag MUST be set.
    // The client's reverse-direction credit word is its backchannel grant.
    let grant = w(&p.raw.got[0], 2);
    assert_eq!(
        p.raw.got,
        vec![
            words(&[0x700, 2, grant, 4, 1, 3]),
            words(&[0x701, 2, grant, 4, 1, 2]),
        ]
    );
    assert!(take_calls(&mut p.side.events).is_empty());
    // As responses (F_RESPONSE set) they are replies to nothing: dropped.
    p.raw.send(&words(&[0x702, 2, 4, 6, 1, 1, 2, 3]));
    p.run();
    assert_eq!(p.raw.got.len(), 2);
    // A version 1 message is no reverse request of this connection's
    // version: discarded, as before.
    p.raw.send(&words(&[0x703, 1, 4, 0, 0, 0, 0]));
    p.run();
    assert_eq!(p.raw.got.len(), 2);
    assert!(!p.side.conn.is_closed());

    // Without a backchannel (Reverse Request Support NONE) no receive was
    // granted for reverse requests: dropped, no answer.
    let (mut p, xid) = client(false);
    p.raw.send(&server_connprop(xid));
    p.run();
    p.raw.send(&words(&[0x710, 2, 4, 6, 0, 1, 2, 3]));
    p.run();
    assert!(p.raw.got.is_empty());
    assert!(!p.side.conn.is_closed());
}

#[test]
fn without_remote_invalidation_no_handle_is_named_and_every_chunk_is_invalidated_locally() {
    use rpcrdma_proto::engine::{Message, OutgoingReply, Piece};
    use rpcrdma_proto::provider::fault::FaultConfig;
    use rpcrdma_proto::provider::mem::MemConfig;
    // Providers that cannot take (requester) or send (responder) an
    // invalidation: a verbs device without MEM_MGT_EXTENSIONS.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If none of the rdma_handle values in the header conveying the Call
    //# may be invalidated by the responder, the requester sets the RPC
    //# Call's rdma_inv_handle field to the value zero.
    let mut mem = MemConfig::DEFAULT;
    mem.caps.remote_invalidation = false;
    let mut p = Pair::with_faults(
        ccfg(V2),
        scfg(V2),
        mem,
        FaultConfig::default(),
        FaultConfig::default(),
    );
    p.call(OutgoingCall {
        message: opaque_call(1, &data(16, 5), false),
        reply_max: 20_000,
        ddp_results: vec![8192],
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(3000));
    p.reply(
        c.handle,
        OutgoingReply {
            message: Message::from_pieces([
                Piece::Inline(head.into()),
                Piece::Ddp(data(3000, 7).into()),
            ]),
        },
    );
    assert!(p
        .client_events()
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(r) if r.message.results()[0] == data(3000, 7))));
    let (sm, cm) = (p.s.conn.metrics(), p.c.conn.metrics());
    assert_eq!(sm.send_with_invalidate, 0, "a plain Send");
    // The Write chunk and the Reply chunk: both invalidated locally.
    assert_eq!((cm.remote_invalidations, cm.local_invalidations), (0, 2));
}

#[test]
fn a_server_sends_no_reverse_call_to_a_client_whose_brs_is_none() {
    use rpcrdma_proto::engine::CallError;
    let reverse = || OutgoingCall::inline(rpc_call(0), 512);
    // BRS NONE: refused locally, nothing sent.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.2
    //# The value RDMA2_RVREQSUP_NONE indicates that receipt of reverse
    //# direction requests and replies is not supported.
    let mut p = server();
    p.raw.send(&words(&[0x60, 2, 128, 5, 0, 1, 2, 4, 0]));
    p.run();
    p.raw.got.clear();
    let err = p
        .side
        .conn
        .start_call(p.now, &mut p.side.prov, reverse())
        .unwrap_err();
    assert!(
        matches!(err, CallError::BadMessage(m) if m.contains("NONE")),
        "{err:?}"
    );
    p.run();
    assert!(p.raw.got.is_empty());
    // BRS absent (the default, INLINE): an inline reverse call goes.
    let mut p = server();
    p.raw.send(&words(&[0x61, 2, 128, 5, 0, 0]));
    p.run();
    p.raw.got.clear();
    p.side
        .conn
        .start_call(p.now, &mut p.side.prov, reverse())
        .unwrap();
    p.run();
    assert_eq!(p.raw.got.len(), 1);
    assert_eq!(
        (w(&p.raw.got[0], 3), w(&p.raw.got[0], 4)),
        (0, 0),
        "RDMA2_MSG, a request"
    );
}
