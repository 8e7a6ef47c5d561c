//! Credits and a full send queue: a call whose Send the provider refused
//! (QueueFull) is not sent later beyond a grant that a reply has lowered in
//! the meantime; replies are not held behind it; a connection lost while it
//! waits sends it, once, on the next connection. Driven step by step
//! against the scripted provider of the `engine_ops` fuzz target, whose
//! send queue takes `send_limit` WRs and completes nothing until told.

mod util;

use std::time::Instant;

use rpcrdma_proto::engine::{
    CallId, Config, Connection, Event, OutgoingCall, OutgoingReply, Piece, Role,
};
use rpcrdma_proto::fuzzing::mock::Mock;
use rpcrdma_proto::provider::{ConnectionInfo, DisconnectReason, Provider, Status};
use util::{words, Side};

/// An engine against the scripted provider, pumped by hand.
struct Bench {
    side: Side<Mock>,
    now: Instant,
}

impl Bench {
    fn new(config: Config) -> Bench {
        let info = ConnectionInfo {
            peer_private_data: Vec::new(),
            ird: config.ord,
            ord: if config.role == Role::Server { 16 } else { 0 },
            max_send_sge: 8,
            max_recv_sge: 1,
            max_inline: 1024,
            max_msg_size: 1 << 20,
        };
        let mut b = Bench {
            side: Side {
                conn: Connection::new(config),
                prov: Mock::new(info, 64),
                events: Vec::new(),
            },
            now: util::base_instant(),
        };
        if b.side.conn.role() == Role::Server {
            b.side.conn.prepare_receives(&mut b.side.prov);
        }
        b.side.prov.establish();
        b.pump();
        b
    }

    /// Feeds provider events and completions to the engine until quiet.
    fn pump(&mut self) {
        while self.side.step(self.now) {}
    }

    /// A small call; with `reply_chunk`, one whose reply may be too large
    /// to come inline (the call registers a Reply chunk).
    fn call(&mut self, reply_chunk: bool) -> CallId {
        let call = OutgoingCall {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
                words(&[0, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]).into(),
            )]),
            reply_max: if reply_chunk { 8192 } else { 512 },
            ddp_results: Vec::new(),
        };
        let id = self
            .side
            .conn
            .start_call(self.now, &mut self.side.prov, call)
            .expect("start_call");
        self.pump();
        id
    }

    /// XIDs of every Send the engine posted, in order.
    fn sent(&self) -> Vec<u32> {
        self.side
            .prov
            .sent
            .iter()
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
            .collect()
    }

    /// The send-queue WR of the Send of `xid` completes successfully.
    fn complete_send_of(&mut self, xid: u32) {
        let i = self
            .side
            .prov
            .sq
            .iter()
            .position(|s| s.data.get(..4) == Some(&xid.to_be_bytes()[..]))
            .unwrap_or_else(|| panic!("no Send of XID {xid:#x} in the send queue"));
        self.side.prov.complete_send(i, Status::Success, 0);
        self.pump();
    }

    /// The peer's RDMA_MSG carrying an RPC reply (MSG_ACCEPTED, SUCCESS)
    /// to `xid`, granting `credit`.
    fn reply_from_peer(&mut self, xid: u32, credit: u32) {
        let m = words(&[xid, 1, credit, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
        assert!(self.side.prov.deliver(&m, None), "no receive posted");
        self.pump();
    }

    /// The peer's RDMA_MSG carrying an RPC call with `xid`.
    fn call_from_peer(&mut self, xid: u32) {
        let m = words(&[xid, 1, 4, 0, 0, 0, 0, xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]);
        assert!(self.side.prov.deliver(&m, None), "no receive posted");
        self.pump();
    }

    /// Every outstanding send-queue WR (Sends, Local Invalidates)
    /// completes successfully, in order.
    fn complete_all(&mut self) {
        while !self.side.prov.sq.is_empty() {
            self.side.prov.complete_send(0, Status::Success, 0);
            self.pump();
        }
    }

    fn replies(&self) -> Vec<u32> {
        self.side
            .events
            .iter()
            .filter_map(|e| match e {
                Event::ReplyReceived(r) => Some(r.xid),
                _ => None,
            })
            .collect()
    }
}

/// Sets up: call A answered with a grant of 3; the send queue then takes
/// two WRs: B and C are sent, D is refused. Returns the XIDs.
fn three_credits_and_a_full_send_queue(b: &mut Bench) -> [u32; 4] {
    let x = b.side.conn.config().first_xid;
    let [a, xb, c, d] = [x, x + 1, x + 2, x + 3];
    b.call(false);
    b.complete_send_of(a);
    b.reply_from_peer(a, 3);
    assert_eq!(b.side.conn.credits(), 3);
    assert_eq!(b.replies(), [a]);
    b.side.prov.send_limit = 2;
    b.call(false);
    b.call(false);
    b.call(true);
    assert_eq!(b.sent(), [a, xb, c], "the send queue holds B and C only");
    [a, xb, c, d]
}

//= rfc8166#section-3.3.1
//# A Requester MUST NOT send unacknowledged requests in excess of the
//# Responder's granted credit limit.
#[test]
fn a_call_refused_by_a_full_send_queue_waits_for_a_credit_of_the_lowered_grant() {
    let mut b = Bench::new(Config::client());
    let [a, xb, c, d] = three_credits_and_a_full_send_queue(&mut b);
    // The reply to B lowers the grant to 1 while D waits for the send
    // queue; C is still unanswered.
    b.reply_from_peer(xb, 1);
    assert_eq!(b.side.conn.credits(), 1);
    // B's Send completes: the send queue has room, but C alone uses the
    // whole grant.
    b.complete_send_of(xb);
    assert_eq!(
        b.sent(),
        [a, xb, c],
        "D was sent while C was unanswered and the grant was 1"
    );
    assert_eq!(b.side.conn.outstanding(), 1);
    assert_eq!(b.side.conn.queued(), 1);
    // The reply to C frees the credit: D goes out, and is answered.
    b.reply_from_peer(c, 1);
    assert_eq!(b.sent(), [a, xb, c, d]);
    assert_eq!(b.side.conn.outstanding(), 1);
    b.complete_send_of(c);
    b.complete_send_of(d);
    b.reply_from_peer(d, 1);
    b.complete_all();
    assert_eq!(b.replies(), [a, xb, c, d]);
    // D's Reply chunk was registered once, not again when it was sent.
    assert_eq!(b.side.conn.metrics().reply_chunks, 1);
    assert_eq!(b.side.conn.metrics().calls_sent, 4);
    b.side.conn.close(&mut b.side.prov);
    b.pump();
    assert_eq!(b.side.prov.pending(), 0);
    assert_eq!(
        b.side.prov.mem.registered(),
        0,
        "registrations left after close"
    );
}

/// The same rule for the backchannel requester (a server's calls to the
/// client); and the server's replies to forward calls, which need no
/// credit, are not held behind a backchannel call that waits for one.
//= rfc8166#section-3.3.1
//# A Requester MUST NOT send unacknowledged requests in excess of the
//# Responder's granted credit limit.
#[test]
fn backchannel_call_waits_for_a_credit_and_replies_pass_it() {
    let mut s = Config::server();
    s.backchannel_slots = 4;
    let mut b = Bench::new(s);
    // A forward call from the client, answered later.
    b.call_from_peer(0x77);
    let handle = b
        .side
        .events
        .iter()
        .find_map(|e| match e {
            Event::CallReceived(c) => Some(c.handle),
            _ => None,
        })
        .expect("forward call delivered");
    let [a, xb, c, d] = three_credits_and_a_full_send_queue(&mut b);
    b.reply_from_peer(xb, 1);
    b.complete_send_of(xb);
    assert_eq!(
        b.sent(),
        [a, xb, c],
        "D was sent while C was unanswered and the grant was 1"
    );
    // The reply to the forward call goes out at once, D still waits.
    let reply = OutgoingReply {
        message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(
            words(&[0, 1, 0, 0, 0, 0]).into(),
        )]),
    };
    b.side
        .conn
        .send_reply(b.now, &mut b.side.prov, handle, reply)
        .expect("send_reply");
    b.pump();
    assert_eq!(b.sent(), [a, xb, c, 0x77], "the reply waits behind D");
    // C answered: the credit is free but the send queue (C, the reply) is
    // full again; D goes once a Send completes.
    b.reply_from_peer(c, 1);
    assert_eq!(b.sent(), [a, xb, c, 0x77]);
    b.complete_send_of(0x77);
    assert_eq!(b.sent(), [a, xb, c, 0x77, d]);
    b.complete_send_of(c);
    b.complete_send_of(d);
    b.reply_from_peer(d, 1);
    b.complete_all();
    assert_eq!(b.replies(), [a, xb, c, d]);
    b.side.conn.close(&mut b.side.prov);
    b.pump();
    assert_eq!(
        b.side.prov.mem.registered(),
        0,
        "registrations left after close"
    );
}

/// The connection is lost while D waits for the send queue: D never
/// reached the wire, so on the next connection it is sent (once, with its
/// XID, after B and C) as a first transmission, not a retransmission; its
/// registrations on the old connection are released.
#[test]
fn a_call_held_by_a_full_send_queue_moves_to_the_next_connection() {
    let config = Config::client();
    let mut b = Bench::new(config.clone());
    let [_, xb, c, d] = three_credits_and_a_full_send_queue(&mut b);
    b.side.prov.go_down(DisconnectReason::TransportLost);
    b.pump();
    let failed: Vec<(u32, bool)> = b
        .side
        .events
        .iter()
        .filter_map(|e| match e {
            Event::CallFailed {
                xid, retransmit, ..
            } => Some((*xid, *retransmit)),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(xb, true), (c, true), (d, true)]);
    assert_eq!(
        b.side.prov.mem.registered(),
        0,
        "registrations left on the old connection"
    );
    let retransmits = b.side.conn.metrics().retransmits;

    let old = std::mem::replace(&mut b.side.conn, Connection::new(config.clone()));
    b.side.conn = old.reconnect(config);
    let info = b.side.prov.connection_info().expect("info");
    b.side.prov = Mock::new(info, 64);
    b.side.events.clear();
    b.side.prov.establish();
    b.pump();
    // One credit on a new connection.
    assert_eq!(b.sent(), [xb]);
    b.complete_send_of(xb);
    b.reply_from_peer(xb, 3);
    assert_eq!(b.sent(), [xb, c, d]);
    b.complete_send_of(c);
    b.complete_send_of(d);
    b.reply_from_peer(c, 3);
    b.reply_from_peer(d, 3);
    b.complete_all();
    assert_eq!(b.replies(), [xb, c, d]);
    // B and C went out again; D for the first time.
    assert_eq!(b.side.conn.metrics().retransmits - retransmits, 2);
    b.side.conn.close(&mut b.side.prov);
    b.pump();
    assert_eq!(b.side.prov.mem.registered(), 0);
}
