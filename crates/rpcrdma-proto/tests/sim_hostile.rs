//! Hostile peers: random and mutated transport headers thrown at a server
//! engine and at a client engine. Nothing may panic; every answer is a
//! well-formed RDMA_ERROR or nothing; the engine either keeps serving or
//! ends the connection with a sticky error.

mod util;

use proptest::prelude::*;
use rpcrdma_proto::engine::{Config, OutgoingCall, Piece};
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::v1;
use rpcrdma_proto::Limits;
use util::*;

fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Arbitrary bytes.
        proptest::collection::vec(any::<u8>(), 0..200),
        // A v1 prefix with a small proc and random words after it.
        (
            any::<u32>(),
            0u32..6,
            proptest::collection::vec(0u32..4, 0..24)
        )
            .prop_map(|(xid, proc_, rest)| {
                let mut w = vec![xid, 1, 8, proc_];
                w.extend(rest);
                words(&w)
            }),
        // Other versions.
        (any::<u32>(), 2u32..9).prop_map(|(xid, v)| words(&[xid, v, 8, 0, 0, 0, 0])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn server_survives_hostile_requesters(msgs in proptest::collection::vec(message(), 1..6)) {
        let mut p = RawPair::server(Config::server());
        p.raw.post_recvs(msgs.len());
        for m in &msgs {
            p.raw.send(m);
        }
        p.run();
        prop_assert!(p.raw.got.len() <= msgs.len());
        for g in &p.raw.got {
            let w = |i: usize| u32::from_be_bytes(g[4 * i..4 * i + 4].try_into().unwrap());
            if w(1) != 1 {
                // ERR_VERS to another version: the version 1 layout with the
                // request's rdma_vers echoed (RFC 8166 section 4.5).
                prop_assert_eq!(g.len(), 28);
                prop_assert_eq!((w(2), w(3), w(4), w(5), w(6)), (64, 4, 1, 1, 1));
                continue;
            }
            // Every other answer is a v1 RDMA_ERROR carrying our grant.
            let (h, _) = header::decode(g, &Limits::DEFAULT).unwrap();
            match h {
                TransportHeader::V1(h) => {
                    prop_assert!(matches!(h.body, v1::Body::Error(_)));
                    prop_assert_eq!(h.credit, 64);
                }
                other => prop_assert!(false, "{other:?}"),
            }
        }
        // Whatever reached the upper layer can be answered.
        let calls = take_calls(&mut p.side.events);
        for c in calls {
            let mut m = reply_header(c.xid);
            m.extend([0u8; 4]);
            let _ = p.side.conn.send_reply(p.now, &mut p.side.prov, c.handle,
                rpcrdma_proto::engine::OutgoingReply { message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]) });
        }
        p.run();
    }

    #[test]
    fn client_survives_hostile_responders(msgs in proptest::collection::vec(message(), 1..4)) {
        let mut p = RawPair::client(Config::client(), Vec::new());
        for _ in 0..msgs.len() {
            p.side.conn.start_call(p.now, &mut p.side.prov,
                OutgoingCall::inline(words(&[0, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]), 256)).unwrap();
        }
        p.raw.post_recvs(msgs.len());
        p.run();
        for m in &msgs {
            p.raw.send(m);
        }
        p.run();
        // A requester never sends RDMA_ERROR: the raw peer got only calls.
        //= rfc8166#section-4.2.4
        //# A Requester MUST NOT send an RPC-over-RDMA header with the RDMA_ERROR
        //# procedure.
        //= rfc8166#section-4.6.1
        //# Therefore, senders MUST NOT send RDMA_MSGP procedures.
        //= rfc8166#section-4.6.2
        //# Therefore, senders MUST NOT send RDMA_DONE messages.
        for g in &p.raw.got {
            let (h, _) = header::decode(g, &Limits::DEFAULT).unwrap();
            prop_assert!(matches!(h, TransportHeader::V1(ref h) if h.proc() == v1::Proc::RDMA_MSG));
        }
        prop_assert!(p.side.conn.outstanding() <= msgs.len());
    }
}
