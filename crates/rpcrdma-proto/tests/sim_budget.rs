//! Resource exhaustion by a hostile requester: the Read-sink budget
//! (`Limits::max_read_sink_bytes`) bounds the RDMA Read sinks a server
//! registers at once; calls beyond it wait in arrival order and all
//! complete.

mod util;

use rpcrdma_proto::engine::{Config, Event, OutgoingCall, OutgoingReply, Piece};
use rpcrdma_proto::Limits;
use util::*;

/// A hand-written RPC call header (xid, CALL, rpcvers 2, prog, vers 1,
/// proc 0, AUTH_NONE cred and verf): 40 octets.
fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

const CHUNK: usize = 100_000;

fn budget_server(budget: u64) -> RawPair {
    let mut s = Config::server();
    let mut l = Limits::DEFAULT;
    l.max_read_sink_bytes = budget;
    s.limits = l;
    RawPair::server(s)
}

/// RDMA_MSG with one Read chunk of `len` octets at position 44 (after the
/// RPC header and the opaque's length word), exposed by the raw peer.
fn read_chunk_call(p: &mut RawPair, xid: u32, arg: &[u8]) -> Vec<u8> {
    let h = p.raw.expose(arg);
    let mut m = words(&[xid, 1, 64, 0, 1, 44, h, arg.len() as u32, 0, 0, 0, 0, 0]);
    m.extend(rpc_call(xid));
    m.extend(words(&[arg.len() as u32, 0xfeed_f00d]));
    m
}

#[test]
fn many_large_read_chunk_calls_stay_under_the_budget_and_all_complete() {
    let budget = 256 * 1024;
    let mut p = budget_server(budget);
    let base = registered(p.side.prov.inner());
    let n = 20u32;
    let args: Vec<Vec<u8>> = (0..n).map(|k| data(CHUNK, k as u8)).collect();
    for k in 0..n {
        let m = read_chunk_call(&mut p, 100 + k, &args[k as usize]);
        p.raw.send(&m);
    }
    // Independent of the engine's own metric: the provider never holds
    // more than budget / CHUNK = 2 sinks beyond the receive buffers.
    let mut high = 0;
    p.run_observed(|side| high = high.max(registered(side.prov.inner())));
    assert!(
        high <= base + 2,
        "at most two 100 kB sinks at once: {high} registrations, {base} before"
    );
    let calls = take_calls(&mut p.side.events);
    assert_eq!(calls.len(), n as usize, "every call completes");
    for (k, c) in calls.iter().enumerate() {
        // Arrival order is kept.
        assert_eq!(c.xid, 100 + k as u32);
        assert_eq!(&c.message.flatten()[44..44 + CHUNK], &args[k][..]);
        assert_eq!(ddp_ranges(&c.message), vec![44..44 + CHUNK]);
    }
    let m = p.side.conn.metrics();
    assert!(m.max_read_sink_bytes <= budget, "{}", m.max_read_sink_bytes);
    assert_eq!(m.max_read_sink_bytes, 2 * CHUNK as u64);
    assert!(
        m.read_sink_waits >= u64::from(n) - 2,
        "{}",
        m.read_sink_waits
    );
    assert!(
        p.raw.got.is_empty(),
        "no error replies: {:?}",
        p.raw.got.len()
    );
    assert!(!p.side.conn.is_closed());
    // Every sink was released.
    assert_eq!(registered(p.side.prov.inner()), base);
}

#[test]
fn the_default_budget_is_16_mib_and_bounds_the_allocation() {
    assert_eq!(Limits::DEFAULT.max_read_sink_bytes, 16 << 20);
    // With the defaults (grant 64, 4 MiB messages) a requester could
    // otherwise make a server register 2 * 64 * 4 MiB = 512 MiB of sinks.
    let mut p = RawPair::server(Config::server());
    p.raw.post_recvs(1);
    let big = 4 << 20;
    let arg = vec![7u8; big - 52];
    for k in 0..6u32 {
        let m = read_chunk_call(&mut p, 500 + k, &arg);
        p.raw.send(&m);
    }
    p.run();
    let calls = take_calls(&mut p.side.events);
    assert_eq!(calls.len(), 6);
    // The budget is 16 MiB, not one message's worth: four of these calls
    // (4 MiB - 52 octets of Read chunk each) have their sinks at once.
    assert_eq!(
        p.side.conn.metrics().max_read_sink_bytes,
        4 * (big as u64 - 52)
    );
    assert!(p.side.conn.metrics().read_sink_waits >= 2);
}

#[test]
fn a_call_larger_than_the_budget_gets_err_chunk() {
    let mut p = budget_server(64 * 1024);
    p.raw.post_recvs(2);
    let m = read_chunk_call(&mut p, 7, &data(CHUNK, 1));
    p.raw.send(&m);
    p.run();
    // xid, vers 1, grant 64, RDMA_ERROR, ERR_CHUNK.
    assert_eq!(p.raw.got, vec![words(&[7, 1, 64, 4, 2])]);
    assert!(take_calls(&mut p.side.events).is_empty());
    assert!(!p.side.conn.is_closed());
    // A call within the budget is still served.
    let m = read_chunk_call(&mut p, 8, &data(1000, 2));
    p.raw.send(&m);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
}

#[test]
fn calls_without_read_chunks_do_not_wait_behind_the_budget() {
    let mut p = budget_server(128 * 1024);
    // Two large calls: the second waits for the first's sink.
    for k in 0..2u32 {
        let m = read_chunk_call(&mut p, 10 + k, &data(CHUNK, 3));
        p.raw.send(&m);
    }
    let mut short = words(&[12, 1, 64, 0, 0, 0, 0]);
    short.extend(rpc_call(12));
    p.raw.send(&short);
    p.run();
    let xids: Vec<u32> = take_calls(&mut p.side.events)
        .iter()
        .map(|c| c.xid)
        .collect();
    assert_eq!(xids.len(), 3);
    assert_eq!(
        xids.iter()
            .filter(|&&x| x != 12)
            .copied()
            .collect::<Vec<_>>(),
        vec![10, 11]
    );
}

#[test]
fn engine_client_with_many_read_chunk_calls_against_a_small_budget() {
    let mut s = Config::server();
    let mut l = Limits::DEFAULT;
    l.max_read_sink_bytes = 64 * 1024;
    s.limits = l;
    let mut p = Pair::new(Config::client(), s);
    let args: Vec<Vec<u8>> = (0..12).map(|k| data(30_000 + k, k as u8)).collect();
    for a in &args {
        p.c.conn
            .start_call(
                p.now,
                &mut p.c.prov,
                OutgoingCall {
                    message: opaque_call(4, a, true),
                    reply_max: 256,
                    ddp_results: Vec::new(),
                },
            )
            .unwrap();
    }
    p.run();
    // Credits start at one: serve until every call is answered.
    let mut served = 0;
    let mut replies = 0;
    for _ in 0..100 {
        let calls = p.server_calls();
        if calls.is_empty() {
            break;
        }
        for c in &calls {
            let k = ddp_ranges(&c.message)[0].len() - 30_000;
            assert_eq!(
                &c.message.flatten()[ddp_ranges(&c.message)[0].clone()],
                &args[k][..]
            );
            let mut m = reply_header(c.xid);
            m.extend(word(0));
            p.reply(
                c.handle,
                OutgoingReply {
                    message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]),
                },
            );
            served += 1;
        }
        replies += p
            .client_events()
            .into_iter()
            .filter(|e| matches!(e, Event::ReplyReceived(_)))
            .count();
    }
    assert_eq!((served, replies), (args.len(), args.len()));
    let m = p.s.conn.metrics();
    assert!(m.max_read_sink_bytes <= 64 * 1024);
    assert!(m.read_sink_waits > 0);
}

/// A server granting 4 credits, facing a raw peer with room for 64
/// replies.
fn grant_4_server() -> RawPair {
    let mut s = Config::server();
    s.credits_granted = 4;
    let mut p = RawPair::server(s);
    p.raw.post_recvs(64);
    p
}

/// The server ended the connection for a credit overrun of its grant of 4,
/// and some of its Sends were held (never completed).
fn assert_credit_overrun(p: &RawPair, held: &[rpcrdma_proto::provider::Completion]) {
    use rpcrdma_proto::engine::{ConnectionError, PeerError};
    assert!(matches!(
        p.side.conn.error(),
        Some(ConnectionError::Peer(PeerError::CreditOverrun {
            granted: 4,
            ..
        }))
    ));
    assert!(!held.is_empty());
}

#[test]
fn unacknowledged_error_replies_count_against_the_credit_limit() {
    let mut p = grant_4_server();
    // Malformed calls (unknown rdma_proc): each is answered by ERR_CHUNK,
    // whose Send the engine never sees complete. A requester cannot have
    // received those answers, so its requests are all unacknowledged.
    let mut held = Vec::new();
    for k in 0..8u32 {
        p.raw.send(&words(&[0x40 + k, 1, 4, 9, 0, 0, 0]));
        held.extend(p.run_holding_sends());
        assert!(!p.side.conn.is_closed(), "after {} malformed calls", k + 1);
    }
    assert_eq!(p.side.conn.metrics().err_chunk_sent, 8);
    //= rfc8166#section-3.3.1
    //# A Requester MUST NOT send unacknowledged requests in excess of the
    //# Responder's granted credit limit.
    // Twice the grant (8) unacknowledged: the ninth ends the connection
    // instead of queueing another error reply.
    p.raw.send(&words(&[0x50, 1, 4, 9, 0, 0, 0]));
    held.extend(p.run_holding_sends());
    assert_eq!(p.side.conn.metrics().err_chunk_sent, 8);
    assert_credit_overrun(&p, &held);
}

#[test]
fn replies_not_yet_sent_count_against_the_credit_limit() {
    let mut p = grant_4_server();
    // A peer that sends valid calls but never reads the replies: each call
    // is answered at once, and the engine never sees the reply's Send
    // complete. Such a requester has received none of the answers, so all
    // its requests are unacknowledged; without a bound the server would
    // queue (and register a Send buffer for) every reply.
    let mut held = Vec::new();
    for k in 0..8u32 {
        let xid = 0x60 + k;
        let mut m = words(&[xid, 1, 4, 0, 0, 0, 0]);
        m.extend(rpc_call(xid));
        p.raw.send(&m);
        held.extend(p.run_holding_sends());
        let calls = take_calls(&mut p.side.events);
        assert_eq!(calls.len(), 1, "call {xid:#x} delivered");
        for c in calls {
            let r = OutgoingReply {
                message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                    reply_header(c.xid).into(),
                )]),
            };
            p.side
                .conn
                .send_reply(p.now, &mut p.side.prov, c.handle, r)
                .unwrap();
        }
        held.extend(p.run_holding_sends());
        assert!(!p.side.conn.is_closed(), "after {} answered calls", k + 1);
    }
    assert_eq!(p.side.conn.metrics().replies_sent, 8);
    assert_eq!(p.side.conn.pending_incoming(), 0, "every call answered");
    //= rfc8166#section-3.3.1
    //# A Requester MUST NOT send unacknowledged requests in excess of the
    //# Responder's granted credit limit.
    // Twice the grant (8) replies unsent: the ninth call ends the
    // connection instead of being served.
    let mut m = words(&[0x70, 1, 4, 0, 0, 0, 0]);
    m.extend(rpc_call(0x70));
    p.raw.send(&m);
    held.extend(p.run_holding_sends());
    assert!(take_calls(&mut p.side.events).is_empty());
    assert_credit_overrun(&p, &held);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Random Read-chunk sizes (some over the budget): the sinks never
        /// exceed the budget, calls within it are all delivered in arrival
        /// order with their data, the others get ERR_CHUNK, and nothing
        /// stays registered.
        #[test]
        fn the_budget_holds_for_any_mix(sizes in proptest::collection::vec(1usize..300_000, 1..10)) {
            let budget: u64 = 256 * 1024;
            let mut p = budget_server(budget);
            let base = registered(p.side.prov.inner());
            p.raw.post_recvs(sizes.len());
            let args: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(k, &n)| data(n, k as u8)).collect();
            for (k, a) in args.iter().enumerate() {
                let m = read_chunk_call(&mut p, 1000 + k as u32, a);
                p.raw.send(&m);
            }
            p.run();
            let calls = take_calls(&mut p.side.events);
            let fits: Vec<usize> = (0..sizes.len()).filter(|&k| sizes[k] as u64 <= budget).collect();
            prop_assert_eq!(calls.iter().map(|c| c.xid).collect::<Vec<_>>(),
                fits.iter().map(|&k| 1000 + k as u32).collect::<Vec<_>>());
            for (c, &k) in calls.iter().zip(&fits) {
                prop_assert_eq!(&c.message.flatten()[44..44 + sizes[k]], &args[k][..]);
            }
            prop_assert_eq!(p.raw.got.len(), sizes.len() - fits.len(), "one ERR_CHUNK per oversized call");
            prop_assert!(p.side.conn.metrics().max_read_sink_bytes <= budget);
            // No sink left; at most one pooled Send buffer per error reply.
            prop_assert!(registered(p.side.prov.inner()) <= base + p.raw.got.len());
        }
    }
}
