//! Send buffers are pooled and messages are written straight into them
//! (header and inline part, no intermediate vector): a later, shorter
//! message must carry exactly its own octets (XDR pads as zeros), never
//! what an earlier message left in the buffer.

mod util;

use rpcrdma_proto::engine::{Config, Event, OutgoingCall, OutgoingReply, Piece};
use util::*;

/// A call whose argument is a small (inline) DDP-eligible item of `len`
/// octets of `fill`: the stream carries it with an XDR pad.
fn call_with(len: usize, fill: u8) -> Vec<Piece> {
    let mut head = call_header(100_003, 6);
    head.extend(word(len as u32));
    vec![
        Piece::Inline(head.into()),
        Piece::Ddp(vec![fill; len].into()),
    ]
}

#[test]
fn reused_send_buffers_never_show_old_octets() {
    let mut p = Pair::new(Config::client(), Config::server());
    // Long messages first (every octet 0xFF), then shorter ones whose pad
    // falls where the earlier ones had data.
    for (round, (len, fill)) in [(64, 0xFF), (61, 0xFF), (5, 0xEE), (1, 0xDD), (13, 0xCC)]
        .into_iter()
        .enumerate()
    {
        let pieces = call_with(len, fill);
        p.call(OutgoingCall {
            message: pieces.clone().into(),
            reply_max: 1024,
            ddp_results: vec![],
        });
        let calls = p.server_calls();
        assert_eq!(calls.len(), 1, "round {round}");
        let c = &calls[0];
        assert_eq!(
            c.message.flatten(),
            stream(&pieces.clone().into(), c.xid),
            "call of round {round}"
        );

        // The reply: an inline DDP piece (no Write chunk offered) with a pad.
        let mut head = reply_header(c.xid);
        head.extend(word(len as u32));
        let reply = vec![
            Piece::Inline(head.into()),
            Piece::Ddp(vec![fill; len].into()),
        ];
        p.reply(
            c.handle,
            OutgoingReply {
                message: reply.clone().into(),
            },
        );
        let got: Vec<_> = p
            .client_events()
            .into_iter()
            .filter_map(|e| match e {
                Event::ReplyReceived(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1, "round {round}");
        assert_eq!(
            got[0].message.flatten(),
            stream(&reply.clone().into(), c.xid),
            "reply of round {round}"
        );
    }
    // Every round went over the same connection (and its Send pool).
    assert_eq!(p.c.conn.metrics().calls_sent, 5);
}
