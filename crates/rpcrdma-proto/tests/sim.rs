//! Two-peer simulations of the RPC-over-RDMA engine over the in-memory
//! provider, in version 1 and in version 2 (each test runs in both, see
//! `util::VERSIONS`): every message class, credits, errors, backchannel,
//! loss.

mod util;

use rpcrdma_proto::engine::{
    CallError, CallFailure, CallHandle, Config, Event, OutgoingCall, OutgoingReply, Piece,
    RdmaErrorReport, ReplyForm, RpcRdmaVersion,
};
use util::*;

fn replies(events: &[Event]) -> Vec<&rpcrdma_proto::engine::Reply> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn simple_reply(xid: u32, body: &[u8]) -> OutgoingReply {
    let mut m = reply_header(xid);
    m.extend_from_slice(body);
    OutgoingReply {
        message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]),
    }
}

/// Version 1 (RFC 8797); version 2's CONNPROP outcome is in `sim_v2`.
#[test]
fn negotiates_linux_defaults() {
    let p = Pair::new(Config::client(), Config::server());
    let n = p.c.conn.negotiated().unwrap();
    assert_eq!((n.send_threshold, n.recv_threshold), (4096, 4096));
    //= rfc8797#section-4.1
    //# When either peer on a connection clears this flag, the responder MUST
    //# use only RDMA Send when transmitting RPC Replies.
    assert!(!n.remote_invalidation, "the server clears R by default");
    assert_eq!(p.c.conn.credits(), 1, "credits start at one");
    assert_eq!(p.s.conn.grant(), 64);
}

#[test]
fn short_inline_call_and_reply() {
    for v in VERSIONS {
        short_inline_call_and_reply_in(v);
    }
}

fn short_inline_call_and_reply_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let msg = opaque_call(1, &data(100, 1), false);
    let id = p.call(OutgoingCall {
        message: msg.clone(),
        reply_max: 512,
        ddp_results: vec![],
    });
    let calls = p.server_calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(c.message.flatten(), stream(&msg, c.xid), "byte for byte");
    assert!(ddp_ranges(&c.message).is_empty() && !c.long && !c.backchannel);
    assert!(c.write_chunks.is_empty() && c.reply_chunk.is_none());
    let body = data(64, 2);
    assert_eq!(
        p.reply(c.handle, simple_reply(c.xid, &body)),
        ReplyForm::Inline
    );
    let ev = p.client_events();
    let r = replies(&ev);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].id, id);
    assert_eq!(r[0].xid, c.xid);
    let mut want = reply_header(c.xid);
    want.extend_from_slice(&body);
    assert_eq!(r[0].message.flatten(), want);
    assert!(!r[0].long && r[0].message.results().is_empty());
    // The grant of 64 arrived with the reply.
    assert!(ev.contains(&Event::CreditsChanged { credits: 64 }));
    assert_eq!(p.c.conn.credits(), 64);
    assert_eq!(p.c.conn.metrics().credits_granted, 64);
    assert_eq!(p.c.conn.outstanding(), 0);
    // Everything was deregistered and no work request is left.
    // Only the receive reposted before the reply was processed remains.
    assert_eq!(p.c.conn.inflight_work_requests(), 1);
    // The server keeps one receive per credit it grants.
    assert_eq!(p.s.conn.inflight_work_requests(), 64);
}

#[test]
fn read_chunk_call() {
    for v in VERSIONS {
        read_chunk_call_in(v);
    }
}

fn read_chunk_call_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let arg = data(9001, 3);
    let msg = opaque_call(7, &arg, true);
    p.call(OutgoingCall {
        message: msg.clone(),
        reply_max: 256,
        ddp_results: vec![],
    });
    let calls = p.server_calls();
    let c = &calls[0];
    assert_eq!(c.message.flatten(), stream(&msg, c.xid));
    assert!(!c.long);
    // The DDP data sits right after the header and its length word.
    let pos = match &msg.pieces()[0] {
        Piece::Inline(b) => b.len(),
        _ => unreachable!(),
    };
    assert_eq!(ddp_ranges(&c.message), vec![pos..pos + 9001]);
    assert_eq!(&c.message.flatten()[pos..pos + 9001], &arg[..]);
    assert_eq!(
        &c.message.flatten()[pos + 9001..pos + 9004],
        &[0, 0, 0],
        "XDR pad"
    );
    let m = p.c.conn.metrics();
    assert_eq!(
        (m.read_chunks, m.read_chunk_bytes, m.long_calls),
        (1, 9001, 0)
    );
    assert_eq!(p.s.conn.metrics().rdma_read_bytes, 9001);
    p.reply(c.handle, simple_reply(c.xid, &[0, 0, 0, 0]));
    assert_eq!(replies(&p.client_events()).len(), 1);
}

#[test]
fn long_call_in_a_position_zero_read_chunk() {
    for v in VERSIONS {
        long_call_in_a_position_zero_read_chunk_in(v);
    }
}

fn long_call_in_a_position_zero_read_chunk_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let arg = data(20_000, 4);
    let msg = opaque_call(8, &arg, false);
    p.call(OutgoingCall {
        message: msg.clone(),
        reply_max: 256,
        ddp_results: vec![],
    });
    let calls = p.server_calls();
    let c = &calls[0];
    //= rfc8166#section-3.5.3
    //# If there are no DDP-
    //# eligible data items in the Payload stream, or the Payload stream is
    //# still too large after it has been reduced, the RDMA transport MUST
    //# use RDMA Read or Write operations to convey the Payload stream
    //# itself.
    assert!(c.long, "RDMA_NOMSG + Position-Zero Read chunk");
    //= rfc8166#section-3.5.3
    //# As these chunks contain a Payload stream, such chunks MUST include
    //# appropriate XDR roundup padding to maintain proper XDR alignment of
    //# their contents.
    assert_eq!(c.message.flatten(), stream(&msg, c.xid));
    //= rfc8166#section-3.4.2
    //# All other XDR data items MUST NOT be reduced.
    assert!(ddp_ranges(&c.message).is_empty());
    assert_eq!(p.c.conn.metrics().long_calls, 1);
    assert_eq!(p.s.conn.metrics().long_calls_received, 1);
    p.reply(c.handle, simple_reply(c.xid, &[1, 2, 3, 4]));
    let ev = p.client_events();
    assert_eq!(replies(&ev)[0].message.flatten()[24..], [1, 2, 3, 4]);
}

#[test]
fn write_chunk_reply_returns_actual_length() {
    for v in VERSIONS {
        write_chunk_reply_returns_actual_length_in(v);
    }
}

fn write_chunk_reply_returns_actual_length_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let msg = opaque_call(6, &data(16, 5), false);
    p.call(OutgoingCall {
        message: msg,
        reply_max: 9000,
        ddp_results: vec![8192],
    });
    let calls = p.server_calls();
    let c = &calls[0];
    assert_eq!(c.write_chunks, vec![8192]);
    assert_eq!(c.reply_chunk, None, "the rest fits inline");
    let result = data(5001, 6);
    let mut head = reply_header(c.xid);
    head.extend(word(5001));
    let tail = word(0xabcd_ef01);
    let r = OutgoingReply {
        message: rpcrdma_proto::engine::Message::from_pieces([
            Piece::Inline(head.clone().into()),
            Piece::Ddp(result.clone().into()),
            Piece::Inline(tail.clone().into()),
        ]),
    };
    assert_eq!(p.reply(c.handle, r), ReplyForm::Inline);
    let ev = p.client_events();
    let r = replies(&ev);
    //= rfc8166#section-3.4.6.2
    //# Therefore, when returning a single variable-length result data item,
    //# a returned Write chunk's total length MUST be the same as the encoded
    //# length of the result data item.
    assert_eq!(
        r[0].message.results(),
        vec![result],
        "actual length, no pad"
    );
    let mut want = head;
    want.extend(tail);
    assert_eq!(r[0].message.flatten(), want, "the DDP item is not inline");
    let m = p.c.conn.metrics();
    assert_eq!((m.write_chunks, m.write_chunk_bytes), (1, 5001));
    assert_eq!(p.s.conn.metrics().rdma_write_bytes, 5001);
}

#[test]
fn long_reply_in_the_reply_chunk() {
    for v in VERSIONS {
        long_reply_in_the_reply_chunk_in(v);
    }
}

fn long_reply_in_the_reply_chunk_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    p.call(OutgoingCall {
        message: opaque_call(9, &data(8, 7), false),
        reply_max: 30_000,
        ddp_results: vec![],
    });
    let calls = p.server_calls();
    let c = &calls[0];
    assert_eq!(c.reply_chunk, Some(30_000));
    let body = data(12_345, 8);
    assert_eq!(
        p.reply(c.handle, simple_reply(c.xid, &body)),
        ReplyForm::ReplyChunk
    );
    let ev = p.client_events();
    let r = replies(&ev);
    assert!(r[0].long);
    let mut want = reply_header(c.xid);
    want.extend_from_slice(&body);
    assert_eq!(r[0].message.flatten(), want);
    let m = p.c.conn.metrics();
    assert_eq!((m.reply_chunks, m.long_replies), (1, 1));
    assert_eq!(m.reply_chunk_bytes, want.len() as u64);
}

#[test]
fn reply_too_big_for_reply_chunk_fails_only_that_xid() {
    for v in VERSIONS {
        reply_too_big_for_reply_chunk_fails_only_that_xid_in(v);
    }
}

fn reply_too_big_for_reply_chunk_fails_only_that_xid_in(v: RpcRdmaVersion) {
    // (Version 2 would send the call again with the Reply chunk the error
    // names, `sim_v2_errors`; not allowed here.)
    let mut c = ccfg(v);
    c.max_retry_chunk = 0;
    let mut p = Pair::new(c, scfg(v));
    let a = p.call(OutgoingCall {
        message: opaque_call(1, &data(8, 1), false),
        reply_max: 6000,
        ddp_results: vec![],
    });
    // Credits are 64 after the first reply; send the second once A is out.
    let calls = p.server_calls();
    let ca = calls[0].clone();
    assert_eq!(ca.reply_chunk, Some(6000));
    // Reply too large for the 6000-octet Reply chunk: ERR_CHUNK.
    // A reply that fits neither inline nor the Reply chunk: ERR_CHUNK,
    // never truncation.
    assert_eq!(
        p.reply(ca.handle, simple_reply(ca.xid, &data(7000, 2))),
        ReplyForm::ErrChunk
    );
    let b = p.call(OutgoingCall {
        message: opaque_call(2, &data(8, 1), false),
        reply_max: 512,
        ddp_results: vec![],
    });
    let cb = p.server_calls().remove(0);
    p.reply(cb.handle, simple_reply(cb.xid, &[9, 9, 9, 9]));
    let ev = p.client_events();
    // Version 2 says how large a Reply chunk it needs (the 7000 octets
    // and the 24-octet RPC header); version 1 can only say ERR_CHUNK.
    let want = match v {
        RpcRdmaVersion::V1 => RdmaErrorReport::Chunk,
        _ => RdmaErrorReport::ReplyResource {
            length_needed: 7024,
        },
    };
    assert!(ev.iter().any(|e| matches!(e,
        Event::CallFailed { id, error: CallFailure::RdmaError(r), retransmit: false, .. }
        if *id == a && *r == want)));
    assert_eq!(replies(&ev).len(), 1);
    assert_eq!(replies(&ev)[0].id, b);
    assert!(!p.c.conn.is_closed());
    assert_eq!(errors_sent(p.s.conn.metrics()), 1);
    assert_eq!(errors_received(p.c.conn.metrics()), 1);
    // The error carried the grant too (version 1), or the CONNPROP did
    // (version 2).
    assert_eq!(p.c.conn.credits(), 64);
}

#[test]
fn credits_limit_outstanding_calls_and_queue_drains() {
    for v in VERSIONS {
        credits_limit_outstanding_calls_and_queue_drains_in(v);
    }
}

fn credits_limit_outstanding_calls_and_queue_drains_in(v: RpcRdmaVersion) {
    let mut s = scfg(v);
    s.credits_granted = 3;
    let mut p = Pair::new(ccfg(v), s);
    let mut ids = Vec::new();
    for i in 0..10u8 {
        let id =
            p.c.conn
                .start_call(
                    p.now,
                    &mut p.c.prov,
                    OutgoingCall::inline(stream(&opaque_call(1, &[i; 4], false), 0), 256),
                )
                .unwrap();
        ids.push(id);
    }
    p.run();
    // Credits start at one: exactly one call reached the server (version
    // 2: the server's CONNPROP granted 3 before any call).
    let first = if v == RpcRdmaVersion::V1 { 1 } else { 3 };
    assert_eq!(p.c.conn.outstanding(), first);
    assert_eq!(p.c.conn.queued(), 10 - first);
    let mut done = 0;
    let mut max_seen = 0;
    while done < 10 {
        let calls = p.server_calls();
        assert!(!calls.is_empty(), "progress");
        max_seen = max_seen.max(p.s.conn.pending_incoming());
        //= rfc8166#section-3.3.1
        //# A Requester MUST NOT send unacknowledged requests in excess of the
        //# Responder's granted credit limit.
        assert!(p.s.conn.pending_incoming() <= 3);
        for c in calls {
            p.s.conn
                .send_reply(p.now, &mut p.s.prov, c.handle, simple_reply(c.xid, &[]))
                .unwrap();
        }
        p.run();
        done += replies(&p.client_events()).len();
    }
    assert_eq!(max_seen, 3, "the grant is used once it arrived");
    assert_eq!(p.c.conn.credits(), 3);
    assert_eq!(p.c.conn.metrics().credit_waits, 10 - first as u64);
}

/// A call started with a free credit and nothing queued is sent at once
/// (without going through the queue); one started while others wait goes
/// behind them. Either way the calls reach the responder in start order,
/// with consecutive XIDs, and only the queued ones count as credit waits.
#[test]
fn calls_sent_at_once_or_queued_keep_start_order() {
    for v in VERSIONS {
        calls_sent_at_once_or_queued_keep_start_order_in(v);
    }
}

fn calls_sent_at_once_or_queued_keep_start_order_in(v: RpcRdmaVersion) {
    let mut s = scfg(v);
    s.credits_granted = 2;
    let mut p = Pair::new(ccfg(v), s);
    let start = |p: &mut Pair, i: u8| {
        p.c.conn
            .start_call(
                p.now,
                &mut p.c.prov,
                OutgoingCall::inline(stream(&opaque_call(1, &[i; 4], false), 0), 256),
            )
            .unwrap()
    };
    // One credit: the first goes at once, the next two wait (version 2:
    // the CONNPROP granted two, one waits).
    let ids: Vec<_> = (0..3).map(|i| start(&mut p, i)).collect();
    let at_once = if v == RpcRdmaVersion::V1 { 1 } else { 2 };
    assert_eq!(
        (p.c.conn.outstanding(), p.c.conn.queued()),
        (at_once, 3 - at_once)
    );
    assert_eq!(p.c.conn.metrics().credit_waits, 3 - at_once as u64);
    p.run();
    let mut xids = Vec::new();
    let mut answered = 0;
    while answered < 5 {
        let calls = p.server_calls();
        assert!(!calls.is_empty(), "progress");
        for c in calls {
            xids.push(c.xid);
            p.s.conn
                .send_reply(p.now, &mut p.s.prov, c.handle, simple_reply(c.xid, &[]))
                .unwrap();
        }
        p.run();
        answered += replies(&p.client_events()).len();
        if answered == 3 {
            // Nothing queued, two credits: both go at once.
            start(&mut p, 3);
            start(&mut p, 4);
            assert_eq!((p.c.conn.outstanding(), p.c.conn.queued()), (2, 0));
            p.run();
        }
    }
    let first = xids[0];
    assert_eq!(xids, (0..5).map(|i| first + i).collect::<Vec<_>>());
    assert_eq!(ids.len(), 3);
    assert_eq!(p.c.conn.metrics().credit_waits, 3 - at_once as u64);
    assert_eq!(p.c.conn.metrics().calls_sent, 5);
    assert_eq!(p.s.conn.metrics().replies_sent, 5);
    // Every reply's Send completed and its buffer went back to the pool.
    assert_eq!(p.s.conn.inflight_work_requests(), 2);
}

/// A call without Read chunks takes the responder's short path (delivered
/// at once, no staging for RDMA Reads); the same call sent as a Long Call
/// (a Position-Zero Read chunk: the general path) must be delivered the
/// same, field for field, but `long`; so must the reply that answers it.
#[test]
fn inline_call_delivered_as_the_general_path_delivers_it() {
    for v in VERSIONS {
        inline_call_delivered_as_the_general_path_delivers_it_in(v);
    }
}

fn inline_call_delivered_as_the_general_path_delivers_it_in(v: RpcRdmaVersion) {
    let msg = opaque_call(7, &data(1500, 3), false);
    let mut got = Vec::new();
    for inline_send in [4096, 1024] {
        let mut c = ccfg(v);
        c.inline_send = inline_send;
        let mut p = Pair::new(c, scfg(v));
        // reply_max 1 MiB: a Reply chunk is offered (echoed unused).
        p.call(OutgoingCall {
            message: msg.clone(),
            reply_max: 1 << 20,
            ddp_results: vec![],
        });
        let mut calls = p.server_calls();
        assert_eq!(calls.len(), 1);
        let call = calls.remove(0);
        assert_eq!(call.long, inline_send == 1024);
        assert_eq!(p.s.conn.metrics().long_calls_received, u64::from(call.long));
        assert_eq!(p.s.conn.metrics().calls_received, 1);
        assert_eq!(
            p.reply(call.handle, simple_reply(call.xid, &data(24, 5))),
            ReplyForm::Inline
        );
        let ev = p.client_events();
        let r = replies(&ev);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0].message.flatten(),
            stream(&simple_reply(call.xid, &data(24, 5)).message, call.xid)
        );
        assert_eq!(p.s.conn.pending_incoming(), 0);
        got.push(call);
    }
    let (a, mut b) = (got.remove(0), got.remove(0));
    assert_eq!(a.message.flatten(), stream(&msg, a.xid));
    assert!(a.reply_chunk.is_some());
    b.long = false;
    assert_eq!(a, b);
}

/// The short path keeps the general path's checks: a call over
/// `max_message_len`, or whose RPC header disagrees with the transport
/// header, is answered with ERR_CHUNK and never delivered.
#[test]
fn inline_call_checks_match_the_general_path() {
    for v in VERSIONS {
        inline_call_checks_match_the_general_path_in(v);
    }
}

fn inline_call_checks_match_the_general_path_in(v: RpcRdmaVersion) {
    let mut s = scfg(v);
    s.limits.max_message_len = 64;
    let mut p = Pair::new(ccfg(v), s);
    p.call(OutgoingCall::inline(
        stream(&opaque_call(1, &data(100, 1), false), 0),
        256,
    ));
    assert!(p.server_calls().is_empty());
    assert_eq!(errors_sent(p.s.conn.metrics()), 1);
    // A well-formed small one still goes through.
    p.call(OutgoingCall::inline(
        stream(&opaque_call(1, &[], false), 0),
        256,
    ));
    assert_eq!(p.server_calls().len(), 1);
    assert_eq!(p.s.conn.metrics().calls_received, 1);
}

#[test]
fn backchannel_calls_both_directions() {
    for v in VERSIONS {
        backchannel_calls_both_directions_in(v);
    }
}

fn backchannel_calls_both_directions_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    p.c.conn.enable_backchannel(&mut p.c.prov, 4);
    p.run();
    // Reverse call from the server.
    let bmsg = opaque_call(3, &data(40, 9), false);
    let bid = p.server_call(OutgoingCall {
        message: bmsg.clone(),
        reply_max: 256,
        ddp_results: vec![],
    });
    // A forward call at the same time.
    let fid = p.call(OutgoingCall::inline(
        stream(&opaque_call(4, &[1; 8], false), 0),
        256,
    ));
    let bc = p.client_calls();
    assert_eq!(bc.len(), 1);
    assert!(bc[0].backchannel);
    assert_eq!(bc[0].message.flatten(), stream(&bmsg, bc[0].xid));
    let fc = p.server_calls();
    assert_eq!(fc.len(), 1);
    assert!(!fc[0].backchannel);
    // Separate XID spaces.
    assert_ne!(bc[0].xid >> 28, fc[0].xid >> 28);
    // Client answers the reverse call; server answers the forward call.
    p.c.conn
        .send_reply(
            p.now,
            &mut p.c.prov,
            bc[0].handle,
            simple_reply(bc[0].xid, &[5; 8]),
        )
        .unwrap();
    p.reply(fc[0].handle, simple_reply(fc[0].xid, &[6; 8]));
    let sev = std::mem::take(&mut p.s.events);
    let r = replies(&sev);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].id, bid);
    assert_eq!(r[0].message.flatten()[24..], [5; 8]);
    // The client granted 4 backchannel credits.
    assert_eq!(p.s.conn.credits(), 4);
    let cev = p.client_events();
    assert_eq!(replies(&cev)[0].id, fid);
}

#[test]
fn reverse_call_larger_than_inline_is_refused_locally() {
    for v in VERSIONS {
        reverse_call_larger_than_inline_is_refused_locally_in(v);
    }
}

fn reverse_call_larger_than_inline_is_refused_locally_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    p.c.conn.enable_backchannel(&mut p.c.prov, 4);
    let big = OutgoingCall::inline(stream(&opaque_call(3, &data(5000, 1), false), 0), 256);
    let r = p.s.conn.start_call(p.now, &mut p.s.prov, big);
    assert!(
        matches!(r, Err(CallError::TooLarge { max: 4096, .. })),
        "{r:?}"
    );
}

/// Runs one call with a Write chunk (and optionally a Read chunk) between a
/// client and a server with the given R flags; returns (server SWI count,
/// client remote invalidations, client local invalidations).
fn swi_case(
    client_r: bool,
    server_r: bool,
    read_chunk: bool,
    write_chunk: bool,
) -> (u64, u64, u64) {
    let mut c = Config::client();
    c.remote_invalidation = client_r;
    let mut s = Config::server();
    s.remote_invalidation = server_r;
    let mut p = Pair::new(c, s);
    let arg = data(if read_chunk { 6000 } else { 16 }, 1);
    let (reply_max, ddp_results) = if write_chunk {
        (9000, vec![8192])
    } else {
        (512, vec![])
    };
    p.call(OutgoingCall {
        message: opaque_call(1, &arg, read_chunk),
        reply_max,
        ddp_results,
    });
    let call = p.server_calls().remove(0);
    assert_eq!(&call.message.flatten()[44..44 + arg.len()], &arg[..]);
    let result = data(3000, 2);
    let mut head = reply_header(call.xid);
    head.extend(word(3000));
    p.reply(
        call.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                Piece::Inline(head.into()),
                Piece::Ddp(result.clone().into()),
            ]),
        },
    );
    let ev = p.client_events();
    let r = replies(&ev);
    assert_eq!(r.len(), 1);
    if write_chunk {
        assert_eq!(r[0].message.results(), vec![result]);
    } else {
        assert_eq!(&r[0].message.flatten()[28..], &result[..]);
    }
    let (sm, cm) = (p.s.conn.metrics(), p.c.conn.metrics());
    (
        sm.send_with_invalidate,
        cm.remote_invalidations,
        cm.local_invalidations,
    )
}

//= rfc8797#section-4.1
//# When both connection peers have set this bit
//# flag in their CM Private Data, the responder MAY use RDMA Send
//# with Invalidate operations when transmitting RPC Replies.
//= rfc8797#section-4.1
//# When either peer on a connection clears this flag, the responder MUST
//# use only RDMA Send when transmitting RPC Replies.
//= rfc8797#section-4.1
//# Each RDMA Send with Invalidate MUST invalidate an STag associated
//# only with the Transaction ID (XID) in the rdma_xid field of the RPC-
//# over-RDMA Transport Header it carries.
#[test]
fn send_with_invalidate_exactly_when_both_set_r_and_one_handle() {
    // Both R, one handle (the Write chunk): remote invalidation.
    assert_eq!(swi_case(true, true, false, true), (1, 1, 0));
    // Server clears R (Linux default): plain Send, local invalidation.
    assert_eq!(swi_case(true, false, false, true), (0, 0, 1));
    // Client clears R.
    assert_eq!(swi_case(false, true, false, true), (0, 0, 1));
    // Two distinct handles (Read chunk + Write chunk): plain Send.
    assert_eq!(swi_case(true, true, true, true), (0, 0, 2));
    // No handle at all.
    assert_eq!(swi_case(true, true, false, false), (0, 0, 0));
}

#[test]
fn oversized_descriptions_are_refused_synchronously() {
    for v in VERSIONS {
        oversized_descriptions_are_refused_synchronously_in(v);
    }
}

fn oversized_descriptions_are_refused_synchronously_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let huge = OutgoingCall {
        message: opaque_call(1, &[0; 4], false),
        reply_max: 256,
        ddp_results: vec![u32::MAX],
    };
    let r = p.c.conn.start_call(p.now, &mut p.c.prov, huge);
    assert!(matches!(r, Err(CallError::TooLarge { .. })), "{r:?}");
    let no_header = OutgoingCall {
        message: rpcrdma_proto::engine::Message::from_pieces([Piece::Ddp(
            vec![1, 2, 3, 4, 5, 6, 7, 8].into(),
        )]),
        reply_max: 256,
        ddp_results: vec![],
    };
    let r = p.c.conn.start_call(p.now, &mut p.c.prov, no_header);
    assert!(matches!(r, Err(CallError::BadMessage(_))), "{r:?}");
    assert!(!p.c.conn.is_closed());
}

#[test]
fn long_call_with_write_chunk_and_reply_chunk_together() {
    for v in VERSIONS {
        long_call_with_write_chunk_and_reply_chunk_together_in(v);
    }
}

fn long_call_with_write_chunk_and_reply_chunk_together_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    // Inline part alone exceeds the threshold: Long Call, even with DDP.
    let mut head = call_header(100_003, 3);
    head.extend(data(5000, 1));
    head.extend(word(10_000));
    let ddp = data(10_000, 2);
    let msg = rpcrdma_proto::engine::Message::from_pieces([
        Piece::Inline(head.into()),
        Piece::Ddp(ddp.clone().into()),
        Piece::Inline(word(1).into()),
    ]);
    p.call(OutgoingCall {
        message: msg.clone(),
        reply_max: 30_000,
        ddp_results: vec![8192],
    });
    let c = p.server_calls().remove(0);
    assert!(c.long);
    assert_eq!(c.message.flatten(), stream(&msg, c.xid));
    assert_eq!(c.write_chunks, vec![8192]);
    assert_eq!(c.reply_chunk, Some(30_000));
    let result = data(6001, 3);
    let mut rhead = reply_header(c.xid);
    rhead.extend(data(9000, 4));
    rhead.extend(word(6001));
    let form = p.reply(
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                Piece::Inline(rhead.clone().into()),
                Piece::Ddp(result.clone().into()),
            ]),
        },
    );
    assert_eq!(form, ReplyForm::ReplyChunk);
    let ev = p.client_events();
    let r = replies(&ev);
    assert!(r[0].long);
    assert_eq!(r[0].message.flatten(), rhead);
    assert_eq!(r[0].message.results(), vec![result]);
}

#[test]
fn megabyte_read_and_write_chunks() {
    for v in VERSIONS {
        megabyte_read_and_write_chunks_in(v);
    }
}

fn megabyte_read_and_write_chunks_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    let arg = data(1 << 20, 5);
    p.call(OutgoingCall {
        message: opaque_call(38, &arg, true),
        reply_max: (1 << 20) + 512,
        ddp_results: vec![1 << 20],
    });
    let c = p.server_calls().remove(0);
    assert_eq!(ddp_ranges(&c.message).len(), 1);
    assert_eq!(
        &c.message.flatten()[ddp_ranges(&c.message)[0].clone()],
        &arg[..]
    );
    let mut head = reply_header(c.xid);
    head.extend(word(1 << 20));
    p.reply(
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([
                Piece::Inline(head.into()),
                Piece::Ddp(arg.clone().into()),
            ]),
        },
    );
    let ev = p.client_events();
    assert_eq!(replies(&ev)[0].message.results()[0], arg);
}

#[test]
fn unaligned_write_chunks_leave_room_for_a_legacy_pad() {
    for v in VERSIONS {
        unaligned_write_chunks_leave_room_for_a_legacy_pad_in(v);
    }
}

fn unaligned_write_chunks_leave_room_for_a_legacy_pad_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    p.call(OutgoingCall {
        message: opaque_call(1, &[0; 4], false),
        reply_max: 6000,
        ddp_results: vec![5001],
    });
    let c = p.server_calls().remove(0);
    assert_eq!(c.write_chunks, vec![5004]);
    let result = data(5001, 1);
    let mut head = reply_header(c.xid);
    head.extend(word(5001));
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
    assert_eq!(replies(&ev)[0].message.results(), vec![result]);
}

#[test]
fn a_refused_reply_leaves_the_call_to_answer() {
    for v in VERSIONS {
        a_refused_reply_leaves_the_call_to_answer_in(v);
    }
}

fn a_refused_reply_leaves_the_call_to_answer_in(v: RpcRdmaVersion) {
    let mut p = Pair::new(ccfg(v), scfg(v));
    p.call(OutgoingCall::inline(
        stream(&opaque_call(1, &[1; 4], false), 0),
        256,
    ));
    let c = p.server_calls().remove(0);
    let now = p.now;
    // No RPC header in the first piece: refused, the call still pending.
    let r = p.s.conn.send_reply(
        now,
        &mut p.s.prov,
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Ddp(vec![0; 8].into())]),
        },
    );
    assert!(matches!(r, Err(CallError::BadMessage(_))), "{r:?}");
    assert_eq!(p.s.conn.pending_incoming(), 1);
    // A handle never delivered.
    let r = p.s.conn.send_reply(
        now,
        &mut p.s.prov,
        CallHandle(c.handle.0 + 1000),
        OutgoingReply::default(),
    );
    assert!(matches!(r, Err(CallError::UnknownHandle)), "{r:?}");
    // The good reply goes through, once.
    let mut m = reply_header(c.xid);
    m.extend(word(42));
    let reply = OutgoingReply {
        message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]),
    };
    assert_eq!(p.reply(c.handle, reply.clone()), ReplyForm::Inline);
    assert_eq!(p.s.conn.pending_incoming(), 0);
    let r = p.s.conn.send_reply(now, &mut p.s.prov, c.handle, reply);
    assert!(matches!(r, Err(CallError::UnknownHandle)), "{r:?}");
    assert!(!p.s.conn.is_closed());
}
