//! An idle connection holds no receive memory: the server keeps its
//! grant's worth of receives posted (RFC 8166 section 3.3.1), but the
//! buffers are lent by the provider (`Provider::register_recv`), which
//! backs one only while a message is in it.

mod util;

use rpcrdma_proto::engine::{Config, Event, OutgoingCall, OutgoingReply, Piece};
use util::*;

#[test]
fn an_idle_server_connection_holds_no_receive_memory() {
    let scfg = Config::server();
    let grant = scfg.credits_granted as usize;
    let recv = scfg.inline_recv as usize;
    let mut p = Pair::new(Config::client(), scfg);
    for round in 0..3 {
        p.call(OutgoingCall {
            message: opaque_call(0, &[], false),
            reply_max: 1024,
            ddp_results: vec![],
        });
        let calls = p.server_calls();
        assert_eq!(calls.len(), 1, "round {round}");
        p.reply(
            calls[0].handle,
            OutgoingReply {
                message: vec![Piece::Inline(reply_header(calls[0].xid).into())].into(),
            },
        );
        let replies = p
            .client_events()
            .into_iter()
            .filter(|e| matches!(e, Event::ReplyReceived(_)))
            .count();
        assert_eq!(replies, 1, "round {round}: the reply");
        let s = p.s.prov.inner();
        // Every receive of the grant is posted (and registered) ...
        assert!(
            s.registered_regions() as usize > grant,
            "round {round}: {} registrations",
            s.registered_regions()
        );
        // ... but only the pooled Send buffer of the reply and one spare
        // receive buffer (kept back from the pool, for the next message)
        // are resident; before lent receive buffers, grant × inline_recv
        // more were.
        let resident = s.resident_bytes();
        assert!(
            resident <= Config::server().inline_send as usize + recv,
            "round {round}: {resident} octets resident ({grant} receives of {recv})"
        );
    }
}

/// What bulk traffic leaves pooled (the server's Read sinks, Send buffers
/// beyond the first) is freed once the connection has been idle for the
/// pool-trim pause; a connection that keeps working keeps its pool.
#[test]
fn bulk_pools_are_trimmed_after_an_idle_pause() {
    let mut p = Pair::new(Config::client(), Config::server());
    let arg = data(64 << 10, 7);
    // A first call brings the client the server's grant (one credit before).
    p.call(OutgoingCall {
        message: opaque_call(0, &[], false),
        reply_max: 1024,
        ddp_results: vec![],
    });
    let first = p.server_calls();
    assert_eq!(first.len(), 1);
    p.reply(
        first[0].handle,
        OutgoingReply {
            message: vec![Piece::Inline(reply_header(first[0].xid).into())].into(),
        },
    );
    p.client_events();
    // Two bulk calls in flight at once: a Read sink each, two Send buffers.
    for _ in 0..2 {
        p.call(OutgoingCall {
            message: opaque_call(1, &arg, true),
            reply_max: 1024,
            ddp_results: vec![],
        });
    }
    let calls = p.server_calls();
    assert_eq!(calls.len(), 2);
    let handles: Vec<_> = calls.iter().map(|c| (c.handle, c.xid)).collect();
    drop(calls); // the received arguments give their Read sinks back
    for (h, xid) in handles {
        p.reply(
            h,
            OutgoingReply {
                message: vec![Piece::Inline(reply_header(xid).into())].into(),
            },
        );
    }
    let ev = p.client_events();
    let replies = ev
        .iter()
        .filter(|e| matches!(e, Event::ReplyReceived(_)))
        .count();
    assert_eq!(replies, 2, "{ev:?}");
    let busy = p.s.conn.resources();
    assert!(
        busy.pooled_sink_bytes >= arg.len(),
        "the server pools its Read sinks: {busy:?}"
    );
    assert!(busy.at_rest(), "{busy:?}");
    // A little later the pool is still there (the next bulk call reuses it).
    p.sleep(std::time::Duration::from_millis(500));
    p.s.conn.handle_timeout(p.now, &mut p.s.prov);
    assert_eq!(
        p.s.conn.resources().pooled_sink_bytes,
        busy.pooled_sink_bytes
    );
    // After the idle pause, a timer is armed and fires: the pools are trimmed.
    assert!(p.s.conn.poll_timeout().is_some(), "a pool-trim deadline");
    while p.advance() {}
    let idle = p.s.conn.resources();
    assert_eq!(idle.pooled_sink_bytes, 0, "{idle:?}");
    let posted_and_one_send = idle.receives_posted + 1;
    assert!(
        idle.regions_at_rest() <= posted_and_one_send,
        "one Send buffer stays pooled: {idle:?}"
    );
    assert_eq!(p.s.conn.poll_timeout(), None, "nothing armed once trimmed");
}
