//! Hostile peers in RPC-over-RDMA version 2: random and mutated version 2
//! transport headers (any htype, any flags, chunk-list-like words) thrown
//! at a version 2 server engine and at a version 2 client engine. Nothing
//! may panic; every answer a server sends is an RDMA2_ERROR with
//! F_RESPONSE and our grant, its own CONNPROP answer, or an ERR_VERS in the
//! version 1 layout; a client never sends an error; nothing undecodable
//! reaches the upper layer.

mod util;

use proptest::prelude::*;
use rpcrdma_proto::engine::{Config, Message, OutgoingCall, OutgoingReply, Piece, RpcRdmaVersion};
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::v2::{self, Body};
use rpcrdma_proto::Limits;
use util::*;

fn message() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Arbitrary bytes.
        proptest::collection::vec(any::<u8>(), 0..200),
        // A version 2 prefix: a small htype, any flags, small words after
        // it (list discriminants, counts, lengths).
        (
            any::<u32>(),
            0u32..9,
            prop_oneof![Just(0u32), Just(1u32), any::<u32>()],
            proptest::collection::vec(0u32..5, 0..28)
        )
            .prop_map(|(xid, htype, flags, rest)| {
                let mut w = vec![xid, 2, 8, htype, flags];
                w.extend(rest);
                words(&w)
            }),
        // A well-formed call header, then anything.
        (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64)).prop_map(|(xid, tail)| {
            let mut m = words(&[xid, 2, 8, 0, 0, 0, 0, 0, 0, xid, 0, 2, 100_003, 3, 0]);
            m.extend(tail);
            m
        }),
        // Version 1 and other versions.
        (any::<u32>(), 1u32..9).prop_map(|(xid, v)| words(&[xid, v, 8, 0, 0, 0, 0])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn v2_server_survives_hostile_requesters(msgs in proptest::collection::vec(message(), 1..6)) {
        let mut s = Config::server();
        s.rpcrdma_version = RpcRdmaVersion::Auto;
        let mut p = RawPair::server(s);
        p.raw.post_recvs(msgs.len() + 1);
        // Settle version 2 first.
        p.raw.send(&words(&[1, 2, 128, 5, 0, 0]));
        p.run();
        prop_assert_eq!(p.side.conn.version(), 2);
        p.raw.got.clear();
        for m in &msgs {
            p.raw.send(m);
        }
        p.run();
        prop_assert!(p.raw.got.len() <= msgs.len());
        for g in &p.raw.got {
            let w = |i: usize| u32::from_be_bytes(g[4 * i..4 * i + 4].try_into().unwrap());
            if w(1) != 2 {
                // ERR_VERS to another version, the version 1 layout, the
                // request's rdma_vers echoed, our range 2..2.
                prop_assert_eq!(g.len(), 28);
                prop_assert_eq!((w(2), w(3), w(4), w(5), w(6)), (64, 4, 1, 2, 2));
                continue;
            }
            let (h, _) = header::decode(g, &Limits::DEFAULT).unwrap();
            let TransportHeader::V2(h) = h else {
                return Err(TestCaseError::fail(format!("{h:?}")));
            };
            //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
            //# When the rdma_start.rdma_htype field has the value RDMA2_ERROR,
            //# the RPCRDMA2_F_RESPONSE flag MUST be set.
            prop_assert!(h.flags.is_response());
            prop_assert_eq!(h.flags.reserved(), 0);
            prop_assert_eq!(h.credit, 64);
            prop_assert!(matches!(h.body, Body::Error(_)), "{:?}", h.body);
        }
        // Whatever reached the upper layer decoded as a call and can be
        // answered.
        let calls = take_calls(&mut p.side.events);
        for c in calls {
            prop_assert_eq!(&c.message.flatten()[..4], &c.xid.to_be_bytes()[..]);
            let mut m = reply_header(c.xid);
            m.extend([0u8; 4]);
            let _ = p.side.conn.send_reply(p.now, &mut p.side.prov, c.handle,
                OutgoingReply { message: Message::from_pieces([Piece::Inline(m.into())]) });
        }
        p.run();
    }

    #[test]
    fn v2_client_survives_hostile_responders(
        msgs in proptest::collection::vec(message(), 1..4),
        backchannel in any::<bool>(),
    ) {
        let mut c = Config::client();
        c.rpcrdma_version = RpcRdmaVersion::V2;
        let mut p = RawPair::client_ready(c, Vec::new(), 2);
        if backchannel {
            p.side.conn.enable_backchannel(&mut p.side.prov, 2);
        }
        let probe = p.raw.got.remove(0);
        let pxid = u32::from_be_bytes(probe[..4].try_into().unwrap());
        p.raw.send(&words(&[pxid, 2, 8, 5, 1, 0]));
        p.run();
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
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# This header type MUST NOT be transmitted by a requester.
        // Its calls are RDMA2_MSG requests; an RDMA2_ERROR only as the
        // responder of the backchannel, answering a request (F_RESPONSE
        // clear) of the peer with F_RESPONSE set.
        for g in &p.raw.got {
            let (h, _) = header::decode(g, &Limits::DEFAULT).unwrap();
            let TransportHeader::V2(h) = h else {
                return Err(TestCaseError::fail(format!("{h:?}")));
            };
            prop_assert_eq!(h.flags.reserved(), 0);
            match h.body {
                Body::Msg(_) => prop_assert!(!h.flags.is_response()),
                Body::Error(_) => {
                    prop_assert!(backchannel, "an error without a backchannel");
                    prop_assert!(h.flags.is_response());
                    let asked = msgs.iter().any(|m| {
                        m.len() >= 20
                            && m[..4] == h.xid.to_be_bytes()
                            && m[4..8] == [0, 0, 0, 2]
                            && m[16..20].last().is_some_and(|f| f & 1 == 0)
                    });
                    prop_assert!(asked, "an error for XID {:#x} no request had", h.xid);
                }
                b => return Err(TestCaseError::fail(format!("{b:?}"))),
            }
        }

        prop_assert!(p.side.conn.outstanding() <= msgs.len());
        let _ = v2::PREFIX_LEN;
    }
}
