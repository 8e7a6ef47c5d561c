//! RPC-over-RDMA version 2's nine RDMA2_ERROR codes (draft -09 §5.3.3):
//! each sent by the responder under its condition, and acted on by the
//! requester — the call fails, or goes again with the same XID in the form
//! the report asks for (a Long Call, no Write chunks, a larger chunk),
//! boundedly.

mod util;

use rpcrdma_proto::engine::{
    CallFailure, Config, Event, Message, OutgoingCall, OutgoingReply, Piece, RdmaErrorReport,
    ReplyForm, RpcRdmaVersion,
};
use util::*;

use RpcRdmaVersion::V2;

fn w(m: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(m[4 * i..4 * i + 4].try_into().unwrap())
}

fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

fn rpc_reply(xid: u32) -> Vec<u8> {
    words(&[xid, 1, 0, 0, 0, 0])
}

fn connprop(xid: u32) -> Vec<u8> {
    words(&[xid, 2, 128, 5, 0, 2, 1, 4, 4096, 2, 4, 1])
}

/// The failure of the call in `events`, if it failed.
fn failure(events: &[Event]) -> Option<RdmaErrorReport> {
    events.iter().find_map(|e| match e {
        Event::CallFailed {
            error: CallFailure::RdmaError(r),
            ..
        } => Some(r.clone()),
        _ => None,
    })
}

fn replied(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::ReplyReceived(_)))
        .count()
}

/// A reply of `n` octets of DDP-eligible result after its length word.
fn ddp_reply(xid: u32, n: usize) -> OutgoingReply {
    let mut head = reply_header(xid);
    head.extend(word(n as u32));
    OutgoingReply {
        message: Message::from_pieces([Piece::Inline(head.into()), Piece::Ddp(data(n, 9).into())]),
    }
}

// ----------------------------------------------------------------------
// The responder's conditions, by hand.

/// A version 2 server engine with `limits` set by `f`, a raw client that
/// has done the CONNPROP exchange.
fn server(f: impl FnOnce(&mut Config)) -> RawPair {
    let mut s = Config::server();
    s.rpcrdma_version = RpcRdmaVersion::Auto;
    f(&mut s);
    let mut p = RawPair::server(s);
    p.raw.post_recvs(8);
    p.raw.send(&connprop(1));
    p.run();
    assert_eq!(p.raw.got.len(), 1, "the server's CONNPROP");
    p.raw.got.clear();
    p
}

/// An RDMA2_MSG call with these chunk-list words (after inv_handle).
fn call_with_lists(xid: u32, lists: &[u32]) -> Vec<u8> {
    let mut m = words(&[xid, 2, 128, 0, 0, 0]);
    m.extend(words(lists));
    m.extend(rpc_call(xid));
    m
}

#[test]
fn responder_reports_limits_with_their_codes() {
    // Two Read segments, one allowed: READ_CHUNKS with our maximum.
    let mut p = server(|c| c.limits.max_read_segments = 1);
    let lists = [1, 40, 0x100, 8, 0, 0, 1, 48, 0x101, 8, 0, 0, 0, 0, 0];
    p.raw.send(&call_with_lists(5, &lists));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[5, 2, 64, 4, 1, 4, 1])]);
    // Two Write chunks, one allowed: WRITE_CHUNKS.
    let mut p = server(|c| c.limits.max_write_chunks = 1);
    let lists = [0, 1, 1, 0x200, 64, 0, 0, 1, 1, 0x201, 64, 0, 0, 0, 0];
    p.raw.send(&call_with_lists(6, &lists));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[6, 2, 64, 4, 1, 5, 1])]);
    // A Write chunk of two segments, one allowed: SEGMENTS.
    let mut p = server(|c| c.limits.max_segments_per_chunk = 1);
    let lists = [0, 1, 2, 0x200, 64, 0, 0, 0x201, 64, 0, 0, 0, 0];
    p.raw.send(&call_with_lists(7, &lists));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[7, 2, 64, 4, 1, 6, 1])]);
    assert!(!p.side.conn.is_closed());
}

#[test]
fn read_chunks_zero_without_read_resources() {
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# If the responder implementation cannot handle any Read chunks for a
    //# request, it MUST set the rdma_max_chunks to zero in this response.
    let mut p = server(|c| c.ord = 0);
    let lists = [1, 40, 0x100, 8, 0, 0, 0, 0, 0];
    p.raw.send(&call_with_lists(8, &lists));
    p.run();
    assert_eq!(p.raw.got, vec![words(&[8, 2, 64, 4, 1, 4, 0])]);
}

// ----------------------------------------------------------------------
// The requester's answers, between two engines.

fn pair(f: impl FnOnce(&mut Config, &mut Config)) -> Pair {
    let (mut c, mut s) = (ccfg(V2), scfg(V2));
    f(&mut c, &mut s);
    Pair::new(c, s)
}

#[test]
fn write_resource_then_retry_with_a_bigger_chunk() {
    let mut p = pair(|_, _| {});
    let id = p.call(OutgoingCall {
        message: opaque_call(1, &data(16, 1), false),
        reply_max: 9000,
        ddp_results: vec![1000],
    });
    let c = p.server_calls().remove(0);
    assert_eq!(c.write_chunks, vec![1000]);
    // 3000 octets do not fit the 1000-octet Write chunk.
    assert_eq!(
        p.reply(c.handle, ddp_reply(c.xid, 3000)),
        ReplyForm::ErrChunk
    );
    // The call came again, same XID, a Write chunk of the 3000 needed.
    let again = p.server_calls().remove(0);
    assert_eq!(again.xid, c.xid);
    assert_eq!(again.write_chunks, vec![3000]);
    assert_eq!(
        p.reply(again.handle, ddp_reply(c.xid, 3000)),
        ReplyForm::Inline
    );
    let ev = p.client_events();
    assert!(ev.iter().any(|e| matches!(e, Event::ReplyReceived(r)
        if r.id == id && r.message.results()[0] == data(3000, 9))));
    assert_eq!(p.c.conn.metrics().rdma2_retries, 1);
    assert_eq!(p.s.conn.metrics().rdma2_errors_sent, 1);
}

#[test]
fn reply_resource_then_retry_with_a_bigger_reply_chunk_unless_not_allowed() {
    for allowed in [true, false] {
        let mut p = pair(|c, _| {
            if !allowed {
                c.max_retry_chunk = 0;
            }
        });
        p.call(OutgoingCall {
            message: opaque_call(1, &data(16, 1), false),
            reply_max: 6000,
            ddp_results: vec![],
        });
        let c = p.server_calls().remove(0);
        assert_eq!(c.reply_chunk, Some(6000));
        let mut big = reply_header(c.xid);
        big.extend(data(7000, 3));
        let big = OutgoingReply {
            message: Message::inline(big),
        };
        assert_eq!(p.reply(c.handle, big.clone()), ReplyForm::ErrChunk);
        if !allowed {
            // Fails with the size needed in the error.
            assert_eq!(
                failure(&p.client_events()),
                Some(RdmaErrorReport::ReplyResource {
                    length_needed: 7024
                })
            );
            assert!(p.server_calls().is_empty());
            continue;
        }
        let again = p.server_calls().remove(0);
        assert_eq!((again.xid, again.reply_chunk), (c.xid, Some(7024)));
        assert_eq!(p.reply(again.handle, big), ReplyForm::ReplyChunk);
        let ev = p.client_events();
        assert_eq!((replied(&ev), failure(&ev)), (1, None));
    }
}

#[test]
fn read_chunks_then_a_long_call() {
    // Two DDP arguments, each in a Read chunk; the server reads one.
    let mut p = pair(|_, s| s.limits.max_read_segments = 1);
    let mut m = opaque_call(1, &data(6000, 1), true);
    let mut more = Message::new();
    for piece in m.pieces() {
        more.push(piece.clone());
    }
    more.push(Piece::Inline(word(6000).into()));
    more.push(Piece::Ddp(data(6000, 2).into()));
    m = more;
    p.call(OutgoingCall {
        message: m.clone(),
        reply_max: 512,
        ddp_results: vec![],
    });
    let c = p.server_calls().remove(0);
    assert!(c.long, "sent again as a Long Call");
    assert_eq!(c.message.flatten(), stream(&m, c.xid));
    assert_eq!(p.c.conn.metrics().long_calls, 1);
    p.reply(
        c.handle,
        OutgoingReply {
            message: Message::inline(reply_header(c.xid)),
        },
    );
    assert_eq!(replied(&p.client_events()), 1);
    // A Long Call refused in turn: the call fails (it was one already).
    let mut p = pair(|_, s| s.ord = 0);
    p.call(OutgoingCall {
        message: opaque_call(1, &data(20_000, 1), false),
        reply_max: 512,
        ddp_results: vec![],
    });
    assert_eq!(
        failure(&p.client_events()),
        Some(RdmaErrorReport::ReadChunks { max_chunks: 0 })
    );
    assert_eq!(p.c.conn.metrics().rdma2_retries, 0);
}

#[test]
fn write_chunks_then_no_write_chunks_and_a_reply_chunk() {
    let mut p = pair(|_, s| s.limits.max_write_chunks = 1);
    p.call(OutgoingCall {
        message: opaque_call(1, &data(16, 1), false),
        reply_max: 20_000,
        ddp_results: vec![8192, 8192],
    });
    let c = p.server_calls().remove(0);
    assert!(c.write_chunks.is_empty());
    let rc = c.reply_chunk.expect("a Reply chunk instead");
    assert!(rc >= 16_384, "{rc}");
    assert_eq!(
        p.reply(c.handle, ddp_reply(c.xid, 8000)),
        ReplyForm::ReplyChunk
    );
    let ev = p.client_events();
    assert_eq!(replied(&ev), 1);
}

#[test]
fn segments_then_the_fewest_segments() {
    // A Read chunk, two Write chunks, a Reply chunk: four segments in a
    // header that may carry two.
    let mut p = pair(|_, s| s.limits.max_header_segments = 2);
    p.call(OutgoingCall {
        message: opaque_call(1, &data(6000, 1), true),
        reply_max: 30_000,
        ddp_results: vec![8192, 8192],
    });
    let c = p.server_calls().remove(0);
    assert!(c.long && c.write_chunks.is_empty() && c.reply_chunk.is_some());
    p.reply(
        c.handle,
        OutgoingReply {
            message: Message::inline(reply_header(c.xid)),
        },
    );
    assert_eq!(replied(&p.client_events()), 1);
    assert_eq!(p.c.conn.metrics().rdma2_retries, 1);
}

// ----------------------------------------------------------------------
// Every code at the requester, from a responder driven by hand.

/// A version 2 client that sent one call with a Write chunk and a Reply
/// chunk; returns the call's XID.
fn client_with_a_call() -> (RawPair, u32) {
    let mut c = Config::client();
    c.rpcrdma_version = V2;
    let mut p = RawPair::client_ready(c, Vec::new(), 4);
    let probe = p.raw.got.remove(0);
    p.raw.send(&words(&[w(&probe, 0), 2, 8, 5, 1, 0]));
    p.run();
    p.side
        .conn
        .start_call(
            p.now,
            &mut p.side.prov,
            OutgoingCall {
                message: Message::inline(rpc_call(0)),
                reply_max: 20_000,
                ddp_results: vec![4096],
            },
        )
        .unwrap();
    p.run();
    let m = p.raw.got.remove(0);
    (p, w(&m, 0))
}

#[test]
fn every_error_code_fails_or_retries_as_documented() {
    use RdmaErrorReport as R;
    // (code words, the call's fate: None = sent again)
    let cases: [(Vec<u32>, Option<R>); 9] = [
        (vec![1, 2, 2], Some(R::Vers { low: 2, high: 2 })),
        (vec![2], Some(R::BadXdr)),
        (vec![3], Some(R::InvalHtype)),
        (vec![4, 0], None), // READ_CHUNKS: a Long Call
        (vec![5, 0], None), // WRITE_CHUNKS: no Write chunks
        (vec![6, 1], None), // SEGMENTS: the fewest
        (vec![7, 1, 8000], None),
        (vec![8, 30_000], None),
        (vec![9], Some(R::System)),
    ];
    for (code, fate) in cases {
        let (mut p, xid) = client_with_a_call();
        let mut e = words(&[xid, 2, 77, 4, 1]);
        e.extend(words(&code));
        p.raw.send(&e);
        p.run();
        assert_eq!(failure(&p.side.events), fate.clone(), "{code:?}");
        match fate {
            Some(_) => assert!(p.raw.got.is_empty(), "{code:?}: not sent again"),
            None => {
                assert_eq!(p.raw.got.len(), 1, "{code:?}: sent again");
                assert_eq!(w(&p.raw.got[0], 0), xid, "same XID");
            }
        }
        assert_eq!(p.side.conn.credits(), 8, "no grant from an error");
    }
    // An unknown code fails the call (the default arm, void).
    let (mut p, xid) = client_with_a_call();
    p.raw.send(&words(&[xid, 2, 77, 4, 1, 42]));
    p.run();
    assert_eq!(failure(&p.side.events), Some(R::Other(42)));
}

#[test]
fn retries_are_bounded() {
    let (mut p, mut xid) = client_with_a_call();
    // Ever larger Reply chunk needs: two retries, then the call fails.
    for (i, need) in [30_000u32, 40_000, 50_000].into_iter().enumerate() {
        p.raw.send(&words(&[xid, 2, 1, 4, 1, 8, need]));
        p.run();
        if i < 2 {
            assert_eq!(p.raw.got.len(), 1, "retry {i}");
            xid = w(&p.raw.got.remove(0), 0);
        }
    }
    assert_eq!(
        failure(&p.side.events),
        Some(RdmaErrorReport::ReplyResource {
            length_needed: 50_000
        })
    );
    assert!(p.raw.got.is_empty());
    assert_eq!(p.side.conn.metrics().rdma2_retries, 2);
}

#[test]
fn inline_only_reverse_responder_refuses_chunks() {
    // A client without RDMA Read resources advertises BRS INLINE.
    let mut c = Config::client();
    c.rpcrdma_version = V2;
    let mut p = RawPair::client_ready(c, Vec::new(), 4);
    let probe = p.raw.got.remove(0);
    p.raw.send(&words(&[w(&probe, 0), 2, 8, 5, 1, 0]));
    p.run();
    p.side.conn.enable_backchannel(&mut p.side.prov, 4);
    p.run();
    // A reverse call (F_RESPONSE clear) with a Read chunk: READ_CHUNKS 0.
    let mut m = words(&[0x900, 2, 4, 0, 0, 0, 1, 40, 0x300, 8, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(0x900));
    p.raw.send(&m);
    p.run();
    assert_eq!(p.raw.got, vec![words(&[0x900, 2, 4, 4, 1, 4, 0])]);
    // With a Write chunk: REPLY_RESOURCE (it writes none).
    let mut m = words(&[0x901, 2, 4, 0, 0, 0, 0, 1, 1, 0x301, 64, 0, 0, 0, 0]);
    m.extend(rpc_call(0x901));
    p.raw.send(&m);
    p.run();
    assert_eq!(p.raw.got[1], words(&[0x901, 2, 4, 4, 1, 8, 0]));
    // An inline reverse call is delivered.
    p.raw.send(&{
        let mut m = words(&[0x902, 2, 4, 0, 0, 0, 0, 0, 0]);
        m.extend(rpc_call(0x902));
        m
    });
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
    let _ = rpc_reply(0);
}
