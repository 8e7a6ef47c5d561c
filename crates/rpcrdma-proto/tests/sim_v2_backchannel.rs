//! The reverse direction in RPC-over-RDMA version 2 (draft -09 §4.2.2):
//! with Reverse Request Support GENL a backchannel call and its reply use
//! Read, Write and Reply chunks like forward ones (1 MiB each way); with
//! INLINE an oversized reverse call is refused locally and a peer's
//! chunked reverse call gets the documented error (`sim_v2_errors`).

mod util;

use rpcrdma_proto::engine::{
    CallError, Config, Event, Message, OutgoingCall, OutgoingReply, Piece, ReplyForm,
    RpcRdmaVersion,
};
use rpcrdma_proto::wire::v2::{PropVal, RvReqSup};
use util::*;

const MIB: usize = 1 << 20;

/// Version 2 at both ends, the client with RDMA Read resources (it reads a
/// reverse call's Read chunks from the server, which accepts its Reads).
fn genl_pair() -> Pair {
    let mut c = ccfg(RpcRdmaVersion::V2);
    c.ord = 16;
    let mut s = scfg(RpcRdmaVersion::V2);
    s.ird = 16;
    let mut p = Pair::new(c, s);
    p.c.conn.enable_backchannel(&mut p.c.prov, 4);
    p.run();
    p
}

#[test]
fn genl_backchannel_moves_a_mebibyte_each_way() {
    let mut p = genl_pair();
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.2
    //# The value RDMA2_RVREQSUP_GENL that receipt of reverse direction
    //# requests or replies is supported in the same ways that forward
    //# direction requests or replies typically are.
    assert_eq!(
        p.c.conn.version_info().local_properties.props[1],
        PropVal::Brs(Some(RvReqSup::Genl))
    );
    // The server calls the client with 1 MiB of DDP-eligible argument and
    // asks for 1 MiB of DDP-eligible result.
    let arg = data(MIB, 11);
    let msg = opaque_call(1, &arg, true);
    let id = p.server_call(OutgoingCall {
        message: msg.clone(),
        reply_max: (MIB + 4096) as u32,
        ddp_results: vec![MIB as u32],
    });
    let calls = p.client_calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert!(c.backchannel);
    assert_eq!(
        c.message.flatten(),
        stream(&msg, c.xid),
        "the MiB came by RDMA Read"
    );
    assert_eq!(ddp_ranges(&c.message).len(), 1);
    assert_eq!(c.write_chunks, vec![MIB as u64]);
    assert_eq!(p.c.conn.metrics().rdma_read_bytes, MIB as u64);
    // The client's reply: 1 MiB into the server's Write chunk.
    let result = data(MIB, 12);
    let mut head = reply_header(c.xid);
    head.extend(word(MIB as u32));
    let form =
        p.c.conn
            .send_reply(
                p.now,
                &mut p.c.prov,
                c.handle,
                OutgoingReply {
                    message: Message::from_pieces([
                        Piece::Inline(head.into()),
                        Piece::Ddp(result.clone().into()),
                    ]),
                },
            )
            .unwrap();
    p.run();
    assert_eq!(form, ReplyForm::Inline);
    assert_eq!(p.c.conn.metrics().rdma_write_bytes, MIB as u64);
    let replies: Vec<_> =
        p.s.events
            .iter()
            .filter_map(|e| match e {
                Event::ReplyReceived(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].id, id);
    assert_eq!(replies[0].message.results()[0], result);
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-8.4.1
    //# When chunks are present in a reverse direction RPC request, Remote
    //# Invalidation allows the responder to trigger invalidation of a
    //# requester's STags as part of sending a reply, the same way as is
    //# done in the forward direction.
    // The server (reverse requester) named one of its handles; the client
    // (reverse responder) answered with Send With Invalidate.
    assert_eq!(p.c.conn.metrics().send_with_invalidate, 1);
    assert_eq!(p.s.conn.metrics().remote_invalidations, 1);
    // And a Long reverse Call with a Long Reply (Reply chunk).
    let big = data(100_000, 13);
    let msg = opaque_call(2, &big, false);
    p.server_call(OutgoingCall {
        message: msg.clone(),
        reply_max: 200_000,
        ddp_results: vec![],
    });
    let c = p.client_calls().remove(0);
    assert!(c.long);
    assert_eq!(c.message.flatten(), stream(&msg, c.xid));
    let mut r = reply_header(c.xid);
    r.extend(data(150_000, 14));
    let form =
        p.c.conn
            .send_reply(
                p.now,
                &mut p.c.prov,
                c.handle,
                OutgoingReply {
                    message: Message::inline(r.clone()),
                },
            )
            .unwrap();
    p.run();
    assert_eq!(form, ReplyForm::ReplyChunk);
    assert!(p.s.events.iter().any(|e| matches!(e,
        Event::ReplyReceived(rep) if rep.long && rep.message.flatten() == r)));
}

#[test]
fn inline_brs_refuses_an_oversized_reverse_call_locally() {
    // The client has no RDMA Read resources: it advertises INLINE, and the
    // server sends it inline reverse calls only.
    let mut p = Pair::new(ccfg(RpcRdmaVersion::V2), scfg(RpcRdmaVersion::V2));
    p.c.conn.enable_backchannel(&mut p.c.prov, 4);
    p.run();
    assert_eq!(
        p.c.conn.version_info().local_properties.props[1],
        PropVal::Brs(Some(RvReqSup::Inline))
    );
    let err =
        p.s.conn
            .start_call(
                p.now,
                &mut p.s.prov,
                OutgoingCall {
                    message: opaque_call(1, &data(8000, 1), true),
                    reply_max: 512,
                    ddp_results: vec![],
                },
            )
            .unwrap_err();
    assert!(matches!(err, CallError::TooLarge { .. }), "{err:?}");
    // An inline one goes.
    p.server_call(OutgoingCall {
        message: opaque_call(1, &data(100, 1), false),
        reply_max: 512,
        ddp_results: vec![],
    });
    assert_eq!(p.client_calls().len(), 1);
    // And a version 1 connection is inline only whatever the resources.
    let mut c = Config::client();
    c.ord = 16;
    let mut s = Config::server();
    s.ird = 16;
    let mut p = Pair::new(c, s);
    p.c.conn.enable_backchannel(&mut p.c.prov, 4);
    p.run();
    assert!(p
        .s
        .conn
        .start_call(
            p.now,
            &mut p.s.prov,
            OutgoingCall {
                message: opaque_call(1, &data(8000, 1), true),
                reply_max: 512,
                ddp_results: vec![],
            },
        )
        .is_err());
}
