//! Property test: over random sequences of calls, replies and grant
//! changes, the requester never has more calls outstanding than its
//! current grant, and every call completes once.

mod util;

use proptest::prelude::*;
use rpcrdma_proto::engine::{Config, Event, OutgoingCall};
use util::*;

#[derive(Clone, Debug)]
enum Op {
    /// Start a call (small or with a Read chunk).
    Call(bool),
    /// The server answers up to n pending calls.
    Reply(usize),
    /// The server changes its grant.
    Grant(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<bool>().prop_map(Op::Call),
        3 => (1usize..5).prop_map(Op::Reply),
        1 => (1u32..9).prop_map(Op::Grant),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    //= rfc8166#section-3.3.1
    //# A Requester MUST NOT send unacknowledged requests in excess of the
    //# Responder's granted credit limit.
    #[test]
    fn outstanding_never_exceeds_the_grant(ops in proptest::collection::vec(op(), 1..60), first in 1u32..6) {
        let mut s = Config::server();
        s.credits_granted = first;
        let mut p = Pair::new(Config::client(), s);
        let mut pending = Vec::new();
        let mut started = 0usize;
        let mut done = 0usize;
        let mut max_grant = first;
        let step = |p: &mut Pair, pending: &mut Vec<_>, done: &mut usize| {
            pending.extend(p.server_calls());
            for e in p.client_events() {
                if let Event::ReplyReceived(_) = e { *done += 1 }
            }
        };
        for o in ops {
            let before = p.c.conn.outstanding();
            match o {
                Op::Call(ddp) => {
                    let arg = data(if ddp { 5000 } else { 20 }, 1);
                    p.c.conn.start_call(p.now, &mut p.c.prov, OutgoingCall {
                        message: opaque_call(1, &arg, ddp), reply_max: 256, ddp_results: vec![],
                    }).unwrap();
                    started += 1;
                }
                Op::Reply(n) => {
                    for c in pending.drain(..n.min(pending.len())) {
                        let c: rpcrdma_proto::engine::IncomingCall = c;
                        let mut m = reply_header(c.xid);
                        m.extend([0u8; 4]);
                        p.s.conn.send_reply(p.now, &mut p.s.prov, c.handle,
                            rpcrdma_proto::engine::OutgoingReply { message: rpcrdma_proto::engine::Message::from_pieces([rpcrdma_proto::engine::Piece::Inline(m.into())]) }).unwrap();
                    }
                }
                Op::Grant(g) => {
                    p.s.conn.set_credit_grant(&mut p.s.prov, g);
                    max_grant = max_grant.max(g);
                }
            }
            p.run();
            step(&mut p, &mut pending, &mut done);
            prop_assert!(!p.c.conn.is_closed() && !p.s.conn.is_closed());
            let out = p.c.conn.outstanding();
            if out > before {
                prop_assert!(out <= p.c.conn.credits() as usize,
                    "outstanding {} > credits {}", out, p.c.conn.credits());
            }
            prop_assert!(out <= max_grant.max(1) as usize);
            // What the server holds is what the client has outstanding.
            prop_assert_eq!(p.s.conn.pending_incoming(), pending.len());
            prop_assert!(pending.len() <= out);
        }
        // Drain: everything completes exactly once.
        for _ in 0..10_000 {
            if done == started { break; }
            for c in std::mem::take(&mut pending) {
                let c: rpcrdma_proto::engine::IncomingCall = c;
                let mut m = reply_header(c.xid);
                m.extend([0u8; 4]);
                p.s.conn.send_reply(p.now, &mut p.s.prov, c.handle,
                    rpcrdma_proto::engine::OutgoingReply { message: rpcrdma_proto::engine::Message::from_pieces([rpcrdma_proto::engine::Piece::Inline(m.into())]) }).unwrap();
            }
            p.run();
            step(&mut p, &mut pending, &mut done);
        }
        prop_assert_eq!(done, started);
        prop_assert_eq!(p.c.conn.outstanding(), 0);
        prop_assert_eq!(p.c.conn.queued(), 0);
    }
}
