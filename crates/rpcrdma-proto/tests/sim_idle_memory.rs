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
        // ... but only the pooled Send buffer of the reply is resident;
        // before lent receive buffers, grant × inline_recv more were.
        let resident = s.resident_bytes();
        assert!(
            resident <= Config::server().inline_send as usize,
            "round {round}: {resident} octets resident ({grant} receives of {recv})"
        );
    }
}
