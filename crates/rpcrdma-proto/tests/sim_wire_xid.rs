//! The wire XID of a call is the caller's own (the first word of its
//! message) unless it is 0 or an unfinished call of ours has it: then the
//! engine numbers it. Either way the XIDs of unfinished calls stay
//! distinct, and a reply comes back under the XID its call went out with.

mod util;

use rpcrdma_proto::engine::{Config, Event, Message, OutgoingCall, Piece};
use util::*;

/// `opaque_call` with the RPC XID `xid` in its first word.
fn call_with_xid(xid: u32, arg: &[u8]) -> OutgoingCall {
    let m = opaque_call(1, arg, false);
    let mut pieces: Vec<Piece> = m.pieces().to_vec();
    if let Some(Piece::Inline(b)) = pieces.first_mut() {
        let mut v = b.to_vec();
        v[..4].copy_from_slice(&xid.to_be_bytes());
        *b = v.into();
    }
    OutgoingCall {
        message: Message::from_pieces(pieces),
        reply_max: 0,
        ddp_results: vec![],
    }
}

/// Answers every call the server has; returns their XIDs.
fn answer_all(p: &mut Pair) -> Vec<u32> {
    let calls = p.server_calls();
    let xids = calls.iter().map(|c| c.xid).collect();
    for c in calls {
        let mut m = reply_header(c.xid);
        m.extend(word(0));
        let h = c.handle;
        p.reply(
            h,
            rpcrdma_proto::engine::OutgoingReply {
                message: Message::from_pieces([Piece::Inline(m.into())]),
            },
        );
    }
    xids
}

fn replies(p: &mut Pair) -> Vec<(u64, u32, Vec<u8>)> {
    p.client_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ReplyReceived(r) => Some((r.id.0, r.xid, r.message.flatten().to_vec())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_callers_xid_goes_on_the_wire_when_free() {
    let mut p = Pair::new(Config::client(), Config::server());
    let a = p.call(call_with_xid(0x1234_5678, b"one"));
    let calls = p.server_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].xid, 0x1234_5678, "the caller's XID on the wire");
    let mut m = reply_header(calls[0].xid);
    m.extend(word(0));
    p.reply(
        calls[0].handle,
        rpcrdma_proto::engine::OutgoingReply {
            message: Message::from_pieces([Piece::Inline(m.into())]),
        },
    );
    let r = replies(&mut p);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0, r[0].1), (a.0, 0x1234_5678));
    assert_eq!(&r[0].2[..4], &0x1234_5678u32.to_be_bytes());
}

#[test]
fn a_busy_or_zero_xid_is_numbered_by_the_engine() {
    let mut p = Pair::new(Config::client(), Config::server());
    // Three calls with the same XID, one with none: only the first keeps
    // it; every unfinished call has its own.
    let ids: Vec<_> = [7u32, 7, 7, 0]
        .iter()
        .map(|&x| p.call(call_with_xid(x, b"arg")))
        .collect();
    // (One credit until the first reply: the others wait in the queue,
    // with their XIDs already chosen.)
    let mut xids = Vec::new();
    let mut r = Vec::new();
    for _ in 0..8 {
        let calls = p.server_calls();
        xids.extend(calls.iter().map(|c| c.xid));
        for c in calls {
            let mut m = reply_header(c.xid);
            m.extend(word(0));
            p.reply(
                c.handle,
                rpcrdma_proto::engine::OutgoingReply {
                    message: Message::from_pieces([Piece::Inline(m.into())]),
                },
            );
        }
        r.extend(replies(&mut p));
    }
    assert_eq!(xids.len(), 4, "{:?}", p.c.events);
    assert_eq!(xids[0], 7);
    let mut distinct = xids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{xids:x?}");
    assert!(xids[1..].iter().all(|&x| x != 0));
    assert_eq!(r.len(), 4);
    for (id, xid) in ids.iter().zip(&xids) {
        let got = r.iter().find(|x| x.0 == id.0).expect("every call answered");
        assert_eq!(got.1, *xid, "each reply under its call's wire XID");
    }
    // Once the first call with XID 7 is finished, 7 is free again.
    let again = p.call(call_with_xid(7, b"arg"));
    assert_eq!(answer_all(&mut p), [7]);
    assert_eq!(replies(&mut p)[0].0, again.0);
}

#[test]
fn set_xid_copies_nothing_when_the_xid_is_in_place() {
    let b = bytes::Bytes::from(vec![0, 0, 0, 9, 1, 2, 3, 4]);
    let ptr = b.as_ptr();
    let mut m = Message::from_pieces([Piece::Inline(b.clone())]);
    m.set_xid(9);
    match m.pieces().first() {
        Some(Piece::Inline(x)) => assert_eq!(x.as_ptr(), ptr, "the same buffer"),
        other => panic!("{other:?}"),
    }
    m.set_xid(10);
    assert_eq!(&m.flatten()[..4], &10u32.to_be_bytes());
    assert_eq!(
        &b[..4],
        &9u32.to_be_bytes(),
        "the shared buffer is untouched"
    );
}
