//! RPC-over-RDMA version 2 (draft-cel-nfsv4-rpcrdma-version-two-09) at
//! connection level: the CONNPROP exchange and what it settles, F_RESPONSE
//! and credits, version discovery and the fallback to version 1, the
//! server's version policies; two engines, or one engine and a peer driven
//! by hand (every message checked word by word).

mod util;

use rpcrdma_proto::engine::{
    CallFailure, Config, ConnectionError, Event, OutgoingCall, RdmaErrorReport, RpcRdmaVersion,
};
use rpcrdma_proto::provider::Opcode;
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};
use rpcrdma_proto::wire::v2::{PropVal, RvReqSup};
use util::*;

use RpcRdmaVersion::{Auto, V1, V2};

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[4 * i..4 * i + 4].try_into().unwrap())
}

fn linux_pd() -> Vec<u8> {
    let s = InlineSize::from_bytes(4096).unwrap();
    PrivateData::new(s, s, false).to_bytes().to_vec()
}

/// A hand-written RPC call header (xid, CALL, rpcvers 2, prog, vers 3,
/// proc 0, AUTH_NONE cred and verf).
fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

/// A hand-written RPC reply header (MSG_ACCEPTED, AUTH_NONE, SUCCESS).
fn rpc_reply(xid: u32) -> Vec<u8> {
    words(&[xid, 1, 0, 0, 0, 0])
}

/// An RDMA2_CONNPROP with RBSIZ `rbsiz` and BRS `brs`.
fn connprop(xid: u32, credit: u32, flags: u32, rbsiz: u32, brs: u32) -> Vec<u8> {
    words(&[xid, 2, credit, 5, flags, 2, 1, 4, rbsiz, 2, 4, brs])
}

/// An RDMA2_MSG with three empty lists and `rpc` after it.
fn msg2(xid: u32, credit: u32, flags: u32, inv: u32, rpc: &[u8]) -> Vec<u8> {
    let mut m = words(&[xid, 2, credit, 0, flags, inv, 0, 0, 0]);
    m.extend_from_slice(rpc);
    m
}

/// A version 1 RDMA_MSG with three empty lists and `rpc` after it.
fn msg1(xid: u32, credit: u32, rpc: &[u8]) -> Vec<u8> {
    let mut m = words(&[xid, 1, credit, 0, 0, 0, 0]);
    m.extend_from_slice(rpc);
    m
}

fn start(p: &mut RawPair) -> rpcrdma_proto::engine::CallId {
    let id = p
        .side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall::inline(rpc_call(0), 512),
        )
        .unwrap();
    p.run();
    id
}

/// A version 2 capable client (`v`) against a peer driven by hand that has
/// received its probe; returns the probe's XID.
fn probing_client(v: RpcRdmaVersion) -> (RawPair, u32) {
    let mut c = Config::client();
    c.rpcrdma_version = v;
    let mut p = RawPair::client_ready(c, linux_pd(), 4);
    assert_eq!(p.raw.got.len(), 1, "the probe goes out at once");
    let probe = p.raw.got.remove(0);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7
    //# Because the server might support only RPC-over-RDMA version 1, this
    //# initial message can be no larger than the version 1 default inline
    //# threshold of 1024 bytes.
    assert_eq!(probe.len(), 48);
    let xid = w(&probe, 0);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# When no RPC message payload is present, a Requester MUST set the
    //# value of RPCRDMA2_F_RESPONSE to reflect how the receiver is to
    //# interpret the rdma_start.rdma_credits and rdma_start.rdma_xid fields.
    // xid, vers 2, our credit request, RDMA2_CONNPROP, flags clear; two
    // properties: RBSIZ 4096, BRS INLINE (a client without RDMA Read
    // resources cannot take a reverse call's Read chunks).
    assert_eq!(
        probe,
        words(&[xid, 2, 128, 5, 0, 2, 1, 4, 4096, 2, 4, 1]),
        "the probe, word by word"
    );
    (p, xid)
}

#[test]
fn a_client_probes_with_one_connprop_and_sends_no_call_until_answered() {
    let (mut p, xid) = probing_client(Auto);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7
    //# As with RPC-over-RDMA version 1, upon connection establishment a
    //# client MUST NOT send more than a single RPC-over-RDMA message at a
    //# time until it receives a valid non-error RPC-over-RDMA message from
    //# the server that grants client credits.
    start(&mut p);
    start(&mut p);
    assert!(p.raw.got.is_empty(), "calls wait for the answer");
    assert_eq!(p.side.conn.queued(), 2);
    // An answer with another XID, or without F_RESPONSE, answers nothing
    // (one at a time: the client keeps one receive for the answer).
    p.raw.send(&connprop(xid + 9, 32, 1, 4096, 1));
    p.run();
    p.raw.send(&connprop(xid, 32, 0, 4096, 1));
    p.run();
    assert!(p.raw.got.is_empty());
    assert_eq!(p.side.conn.version_info().version, 0, "still open");
    // The server's CONNPROP: same XID, F_RESPONSE, its grant.
    p.raw.send(&connprop(xid, 32, 1, 8192, 2));
    p.run();
    let info = p.side.conn.version_info();
    assert_eq!((info.version, info.fallback), (2, false));
    assert_eq!(
        info.peer_properties.props,
        vec![
            PropVal::Rbsiz(Some(8192)),
            PropVal::Brs(Some(RvReqSup::Genl))
        ]
    );
    assert_eq!(p.side.conn.credits(), 32, "the CONNPROP granted");
    // Both calls went, in version 2, F_RESPONSE clear (CALL), XIDs after
    // the probe's.
    assert_eq!(p.raw.got.len(), 2);
    for (i, m) in p.raw.got.iter().enumerate() {
        let call_xid = xid + 1 + i as u32;
        assert_eq!(m, &msg2(call_xid, 128, 0, 0, &rpc_call(call_xid)));
    }
}

#[test]
fn credits_come_only_from_non_error_responses() {
    let (mut p, xid) = probing_client(Auto);
    p.raw.send(&connprop(xid, 4, 1, 4096, 1));
    p.run();
    let a = start(&mut p);
    let b = start(&mut p);
    let (xa, xb) = (w(&p.raw.got[0], 0), w(&p.raw.got[1], 0));
    // A reply (F_RESPONSE) grants.
    p.raw.send(&msg2(xa, 7, 1, 0, &rpc_reply(xa)));
    p.run();
    assert_eq!(p.side.conn.credits(), 7);
    // An RDMA2_ERROR grants nothing, whatever its credit word says.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# The receiver of this header type MUST ignore the value of the
    //# rdma_start.rdma_credits field.
    p.raw.send(&words(&[xb, 2, 99, 4, 1, 9]));
    p.run();
    assert_eq!(p.side.conn.credits(), 7);
    assert!(p.side.events.iter().any(|e| matches!(e,
        Event::CallFailed { id, error: CallFailure::RdmaError(RdmaErrorReport::System), retransmit: false, .. }
        if *id == b)));
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(r) if r.id == a)));
    // A second CONNPROP changes nothing.
    p.raw.send(&connprop(xid, 50, 1, 65536, 2));
    p.run();
    assert_eq!(p.side.conn.credits(), 7);
    assert_eq!(
        p.side.conn.version_info().peer_properties.props[0],
        PropVal::Rbsiz(Some(4096))
    );
}

#[test]
fn the_linux_err_vers_makes_an_auto_client_go_on_in_version_1() {
    let (mut p, xid) = probing_client(Auto);
    start(&mut p);
    // Linux svcrdma's answer: seven words, v1 layout, vers 2 echoed, its
    // grant (not a grant for us).
    p.raw.send(&words(&[xid, 2, 64, 4, 1, 1, 1]));
    p.run();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
    //# This message also reports a range of protocol versions that the
    //# server supports.  To continue operation, the client selects a
    //# protocol version in the range of server-supported versions for
    //# subsequent messages on this connection.
    let info = p.side.conn.version_info();
    assert_eq!((info.version, info.fallback), (1, true));
    assert!(info.local_properties.props.is_empty());
    assert!(p.side.conn.peer_is_v1_only());
    assert_eq!(p.side.conn.credits(), 1, "version 1 starts with one credit");
    assert_eq!(p.raw.got.len(), 1);
    let x = xid + 1;
    assert_eq!(p.raw.got[0], msg1(x, 128, &rpc_call(x)), "a version 1 call");
    p.raw.send(&msg1(x, 16, &rpc_reply(x)));
    p.run();
    assert_eq!(p.side.conn.credits(), 16);
    assert_eq!(p.side.conn.metrics().err_vers_received, 1);
}

#[test]
fn a_plain_v1_err_vers_is_a_refusal_too() {
    let (mut p, xid) = probing_client(Auto);
    p.raw.send(&words(&[xid, 1, 64, 4, 1, 1, 1]));
    p.run();
    assert_eq!(p.side.conn.version_info().version, 1);
    // ... and so is the version 2 layout.
    let (mut p, xid) = probing_client(Auto);
    p.raw.send(&words(&[xid, 2, 64, 4, 1, 1, 1, 1]));
    p.run();
    assert_eq!(p.side.conn.version_info().version, 1);
}

#[test]
fn a_version_2_only_client_fails_clearly_against_a_version_1_server() {
    let (mut p, xid) = probing_client(V2);
    let id = start(&mut p);
    p.raw.send(&words(&[xid, 2, 64, 4, 1, 1, 1]));
    p.run();
    let want = ConnectionError::VersionRefused { low: 1, high: 1 };
    assert_eq!(p.side.conn.error(), Some(&want));
    assert!(want.to_string().contains("version 2"));
    assert!(p.side.events.iter().any(
        |e| matches!(e, Event::CallFailed { id: i, error: CallFailure::ConnectionLost(e), .. } if *i == id && *e == want)
    ));
    assert!(p.raw.got.is_empty(), "no call went");
}

#[test]
fn an_unanswered_probe_makes_the_next_connection_version_1() {
    let (mut p, _) = probing_client(Auto);
    start(&mut p);
    // Nothing answers: the probe's deadline (the call timeout) ends the
    // connection.
    let t = p
        .side
        .conn
        .poll_timeout()
        .expect("the probe has a deadline");
    p.now = t;
    p.side.conn.handle_timeout(p.now, &mut p.side.prov);
    assert_eq!(p.side.conn.error(), Some(&ConnectionError::Timeout));
    assert!(p.side.conn.peer_is_v1_only());
    let mut c = Config::client();
    c.rpcrdma_version = Auto;
    let next = std::mem::replace(
        &mut p.side.conn,
        rpcrdma_proto::engine::Connection::new(c.clone()),
    )
    .reconnect(c);
    assert_eq!(next.config().rpcrdma_version, V1);
}

/// Two engines: client policy against server policy.
fn pair(c: RpcRdmaVersion, s: RpcRdmaVersion) -> Pair {
    Pair::new(ccfg(c), scfg(s))
}

fn call_and_answer(p: &mut Pair) {
    p.call(OutgoingCall {
        message: opaque_call(1, &data(64, 1), false),
        reply_max: 512,
        ddp_results: vec![],
    });
    let c = p.server_calls().remove(0);
    let mut r = reply_header(c.xid);
    r.extend(data(16, 2));
    p.reply(
        c.handle,
        rpcrdma_proto::engine::OutgoingReply {
            message: rpcrdma_proto::engine::Message::inline(r),
        },
    );
    assert!(p
        .client_events()
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(_))));
}

#[test]
fn every_policy_pair_settles_as_the_draft_says() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.3
    //# If the server supports the RPC-over-RDMA protocol version used in
    //# Call messages from a client, it MUST send Replies with the same RPC-
    //# over-RDMA protocol version that the client uses to send its Calls.
    for (c, s, version, fallback) in [
        (V1, V1, 1, false),
        (V1, Auto, 1, false),
        (Auto, V1, 1, true),
        (Auto, Auto, 2, false),
        (Auto, V2, 2, false),
        (V2, Auto, 2, false),
        (V2, V2, 2, false),
    ] {
        let mut p = pair(c, s);
        call_and_answer(&mut p);
        let (ci, si) = (p.c.conn.version_info(), p.s.conn.version_info());
        assert_eq!(
            (ci.version, si.version, ci.fallback),
            (version, version, fallback),
            "client {c:?} server {s:?}"
        );
        let cp = if version == 2 { 1 } else { 0 };
        assert_eq!(p.s.conn.metrics().connprops_sent, cp);
        assert_eq!(p.c.conn.metrics().connprops_received, cp);
    }
    // Version 1 client, version 2 only server: every call refused.
    let mut p = pair(V1, V2);
    p.call(OutgoingCall::inline(
        stream(&opaque_call(1, &[], false), 0),
        256,
    ));
    assert!(p.server_calls().is_empty());
    assert!(p.client_events().iter().any(|e| matches!(
        e,
        Event::CallFailed {
            error: CallFailure::RdmaError(RdmaErrorReport::Vers { low: 2, high: 2 }),
            ..
        }
    )));
    // Version 2 only client, version 1 server: the connection fails.
    let p = pair(V2, V1);
    assert_eq!(
        p.c.conn.error(),
        Some(&ConnectionError::VersionRefused { low: 1, high: 1 })
    );
}

#[test]
fn a_fallback_is_remembered_by_the_next_connection() {
    let mut p = pair(Auto, V1);
    call_and_answer(&mut p);
    assert!(p.c.conn.version_info().fallback);
    p.ccfg.rpcrdma_version = Auto;
    p.reconnect(Default::default(), Default::default());
    call_and_answer(&mut p);
    let info = p.c.conn.version_info();
    assert_eq!((info.version, info.fallback), (1, false));
    assert_eq!(
        p.c.conn.metrics().connprops_sent,
        1,
        "no probe on the second connection"
    );
}

#[test]
fn connprop_settles_thresholds_from_rbsiz() {
    // The server's receive buffers are 16 KiB: the client sends up to
    // that much inline, if its own Send buffers hold it.
    let mut c = ccfg(V2);
    c.inline_send = 16384;
    let mut s = scfg(V2);
    s.inline_recv = 16384;
    let mut p = Pair::new(c, s);
    assert_eq!(p.c.conn.negotiated().unwrap().send_threshold, 16384);
    p.call(OutgoingCall {
        message: opaque_call(1, &data(10_000, 1), true),
        reply_max: 512,
        ddp_results: vec![],
    });
    assert_eq!(p.server_calls().len(), 1);
    assert_eq!(p.c.conn.metrics().read_chunks, 0, "10,000 octets inline");
    // Clamped to our Send buffers.
    let mut s = scfg(V2);
    s.inline_recv = 16384;
    let p = Pair::new(ccfg(V2), s);
    assert_eq!(p.c.conn.negotiated().unwrap().send_threshold, 4096);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.1
    //# It is the responsibility of the endpoint sending this value to ensure
    //# that its pre-posted receive buffers are at least the size specified,
    //# allowing the endpoint receiving this value to send messages that are of
    //# this size.
    // Small receive buffers are never advertised below 4096, and are 4096.
    let mut s = scfg(V2);
    s.inline_recv = 1024;
    let p = Pair::new(ccfg(V2), s);
    assert_eq!(
        p.s.conn.version_info().local_properties.props[0],
        PropVal::Rbsiz(Some(4096))
    );
    assert_eq!(p.c.conn.negotiated().unwrap().send_threshold, 4096);
}

// ----------------------------------------------------------------------
// The server side, by hand.

fn server(v: RpcRdmaVersion) -> RawPair {
    let mut s = Config::server();
    s.rpcrdma_version = v;
    let mut p = RawPair::server(s);
    p.raw.post_recvs(8);
    p
}

#[test]
fn an_auto_server_answers_a_connprop_with_its_own() {
    let mut p = server(Auto);
    p.raw.send(&connprop(0x77, 128, 0, 4096, 1));
    p.run();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# In general, when a message carries an XID that was generated by the
    //# message's receiver (that is, the receiver is acting as a requester),
    //# the message's sender sets the RPCRDMA2_F_RESPONSE flag.
    assert_eq!(
        p.raw.got,
        vec![words(&[0x77, 2, 64, 5, 1, 2, 1, 4, 4096, 2, 4, 2])],
        "same XID, F_RESPONSE, the grant, RBSIZ 4096, BRS GENL"
    );
    // A call in version 2, with reserved flag bits set: delivered; the
    // reply has F_RESPONSE and no other bit.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# The other bits are reserved for future use as described in Section
    //# 9.4.  The sender MUST set these to zero.
    p.raw
        .send(&msg2(0x78, 128, 0xfff0_0000, 0, &rpc_call(0x78)));
    p.run();
    let c = take_calls(&mut p.side.events).remove(0);
    p.side
        .conn
        .send_reply(
            p.now,
            &mut p.side.prov,
            c.handle,
            rpcrdma_proto::engine::OutgoingReply {
                message: rpcrdma_proto::engine::Message::inline(rpc_reply(0x78)),
            },
        )
        .unwrap();
    p.run();
    assert_eq!(p.raw.got[1], msg2(0x78, 64, 1, 0, &rpc_reply(0x78)));
    // A version 1 message now: refused in the v1 layout, range 2..2.
    p.raw.send(&msg1(0x79, 128, &rpc_call(0x79)));
    p.run();
    assert_eq!(p.raw.got[2], words(&[0x79, 1, 64, 4, 1, 2, 2]));
}

#[test]
fn an_auto_server_serves_a_version_1_client_in_version_1_for_ever() {
    let mut p = server(Auto);
    p.raw.send(&msg1(5, 128, &rpc_call(5)));
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
    assert_eq!(p.side.conn.version_info().version, 1);
    // A version 2 message later: refused as Linux does.
    p.raw.send(&connprop(6, 128, 0, 4096, 1));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[6, 2, 64, 4, 1, 1, 1])]);
    assert_eq!(p.side.conn.metrics().connprops_sent, 0);
}

#[test]
fn a_version_1_server_answers_version_2_as_linux_and_never_answers_an_error() {
    let mut p = server(V1);
    p.raw.send(&connprop(6, 128, 0, 4096, 1));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[6, 2, 64, 4, 1, 1, 1])]);
    // Error reports of any version are dropped, never answered.
    //= rfc8166#section-4.2.4
    //# A Responder MUST silently discard RDMA_ERROR procedures.
    p.raw.got.clear();
    for e in [
        words(&[7, 2, 1, 4, 1, 9]),       // RDMA2_ERROR / SYSTEM
        words(&[7, 2, 1, 4, 1, 1, 1, 1]), // RDMA2_ERROR / VERS
        words(&[7, 3, 1, 4, 1, 1, 1]),    // an unknown version's error
        words(&[7, 2, 1, 4, 1, 1, 1]),    // Linux-form ERR_VERS
    ] {
        p.raw.send(&e);
        p.run();
    }
    assert!(p.raw.got.is_empty());
    assert!(!p.side.conn.is_closed());
}

#[test]
fn a_version_2_server_refuses_version_1_then_adopts_version_2() {
    let mut p = server(V2);
    p.raw.send(&msg1(5, 128, &rpc_call(5)));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[5, 1, 64, 4, 1, 2, 2])]);
    assert_eq!(p.side.conn.version_info().version, 0);
    p.raw.send(&connprop(6, 128, 0, 4096, 1));
    p.run();
    assert_eq!(p.side.conn.version_info().version, 2);
}

#[test]
fn unknown_header_types_get_inval_htype_unless_they_are_responses() {
    let mut p = server(Auto);
    p.raw.send(&connprop(1, 128, 0, 4096, 1));
    p.run();
    p.raw.got.clear();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.2
    //# RPC-over-RDMA version 2 implementations that receive an OPTIONAL
    //# operation that is not supported MUST respond with an RDMA2_ERROR
    //# message with an error code of RDMA2_ERR_INVAL_HTYPE.
    p.raw.send(&words(&[9, 2, 1, 6, 0, 1, 2, 3]));
    p.raw.send(&words(&[10, 2, 1, 6, 1, 1, 2, 3]));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[9, 2, 64, 4, 1, 3])]);
    assert_eq!(p.side.conn.metrics().rdma2_errors_sent, 1);
}

#[test]
fn a_malformed_known_property_gets_bad_xdr_and_settles_nothing() {
    let mut p = server(Auto);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# The length of rdma_data is insufficient to contain the data
    //# represented by the property-associated typedef.
    p.raw.send(&words(&[3, 2, 128, 5, 0, 1, 1, 2, 0x1000_0000]));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[3, 2, 64, 4, 1, 2])]);
    assert_eq!(p.side.conn.version_info().version, 0);
    // Unknown properties are skipped without an answer of their own.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.4
    //# In such cases, these properties are simply ignored without any
    //# error response being generated.
    p.raw.send(&words(&[4, 2, 128, 5, 0, 1, 99, 4, 7]));
    p.run();
    assert_eq!(p.raw.got.len(), 2);
    assert_eq!(
        p.raw.got[1],
        words(&[4, 2, 64, 5, 1, 2, 1, 4, 4096, 2, 4, 2])
    );
}

/// A call with one Write chunk (handle `h`) naming `inv` to invalidate; the
/// reply is sent; returns how the raw peer's receive completed.
fn reply_to_write_chunk_call(inv_of: impl Fn(u32) -> u32) -> Opcode {
    let mut p = server(Auto);
    p.raw.send(&connprop(1, 128, 0, 4096, 1));
    p.run();
    let sink = p.raw.sink(8192);
    let h = sink.stag().0;
    let inv = inv_of(h);
    // RDMA2_MSG: inv_handle, no Read list, one Write chunk of one segment
    // (h, 8192, offset 0), no Reply chunk.
    let mut m = words(&[2, 2, 128, 0, 0, inv, 0, 1, 1, h, 8192, 0, 0, 0, 0]);
    m.extend(rpc_call(2));
    p.raw.send(&m);
    p.run();
    let c = take_calls(&mut p.side.events).remove(0);
    assert_eq!(c.write_chunks, vec![8192]);
    let mut head = rpc_reply(2);
    head.extend(word(3000));
    p.side
        .conn
        .send_reply(
            p.now,
            &mut p.side.prov,
            c.handle,
            rpcrdma_proto::engine::OutgoingReply {
                message: rpcrdma_proto::engine::Message::from_pieces([
                    rpcrdma_proto::engine::Piece::Inline(head.into()),
                    rpcrdma_proto::engine::Piece::Ddp(data(3000, 7).into()),
                ]),
            },
        )
        .unwrap();
    p.run();
    let recv = p
        .raw
        .completions
        .iter()
        .rfind(|c| matches!(c.opcode, Opcode::Recv | Opcode::RecvWithInvalidate { .. }))
        .unwrap();
    recv.opcode
}

#[test]
fn the_responder_invalidates_exactly_the_named_handle_of_the_call() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If a requester has provided a non-zero value in the RPC Call's
    //# rdma_inv_handle field and the responder chooses to use Remote
    //# Invalidation for the matching RPC Reply, the responder uses RDMA Send
    //# With Invalidate to transmit that RPC reply, and uses the value in the
    //# corresponding Call's rdma_inv_handle field to construct the Send With
    //# Invalidate Work Request.
    let named = reply_to_write_chunk_call(|h| h);
    assert!(matches!(named, Opcode::RecvWithInvalidate { .. }));
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.3
    //# If the responder chooses not to use remote invalidation for this
    //# particular RPC Reply, or the RPC Call's rdma_inv_handle field
    //# contains the value zero, the responder uses RDMA Send to transmit the
    //# matching RPC reply.
    assert_eq!(reply_to_write_chunk_call(|_| 0), Opcode::Recv);
    // A handle that is not one of the call's is never invalidated.
    assert_eq!(reply_to_write_chunk_call(|h| h ^ 0x100), Opcode::Recv);
}

#[test]
fn two_version_2_engines_invalidate_remotely_by_inv_handle() {
    // Even with the RFC 8797 R flag clear at the server (it means nothing
    // in version 2): the call names its Write chunk.
    let mut p = pair(V2, V2);
    p.call(OutgoingCall {
        message: opaque_call(1, &data(16, 5), false),
        reply_max: 9000,
        ddp_results: vec![8192],
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(3000));
    p.reply(
        c.handle,
        rpcrdma_proto::engine::OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                rpcrdma_proto::engine::Piece::Inline(head.into()),
                rpcrdma_proto::engine::Piece::Ddp(data(3000, 7).into()),
            ]),
        },
    );
    let ev = p.client_events();
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::ReplyReceived(r) if r.message.results()[0] == data(3000, 7))));
    let (sm, cm) = (p.s.conn.metrics(), p.c.conn.metrics());
    // One Write chunk offered (the rest of the reply fits inline):
    // invalidated remotely, no Local Invalidate.
    assert_eq!(sm.send_with_invalidate, 1);
    assert_eq!((cm.remote_invalidations, cm.local_invalidations), (1, 0));
    // With a Reply chunk too, the Reply chunk is named and the Write chunk
    // invalidated locally.
    p.call(OutgoingCall {
        message: opaque_call(1, &data(16, 5), false),
        reply_max: 20000,
        ddp_results: vec![8192],
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(3000));
    p.reply(
        c.handle,
        rpcrdma_proto::engine::OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                rpcrdma_proto::engine::Piece::Inline(head.into()),
                rpcrdma_proto::engine::Piece::Ddp(data(3000, 7).into()),
            ]),
        },
    );
    let cm = p.c.conn.metrics();
    assert_eq!((cm.remote_invalidations, cm.local_invalidations), (2, 1));
}
