//! Staged Sends (`Provider::post_send_staged`: a small Send written
//! straight into the provider's staging memory, no Send buffer, no work
//! request, no completion) pinned to registered Sends at the engine: over
//! random sequences of calls (inline, with Read chunks, with Reply
//! chunks), replies of every size, credit grant changes and injected QP
//! failures / connection losses, an engine pair over providers that stage
//! produces the same events on both sides (the same replies, calls,
//! failures, in the same order, each message octet for octet), the same
//! metrics and the same end state as over providers that do not. (The
//! software iWARP provider's wire octets are pinned in
//! `rpcrdma-iwarp/tests/qp_staged.rs`.)

mod util;

use proptest::prelude::*;
use rpcrdma_proto::engine::{Message, OutgoingCall, OutgoingReply, Piece, RpcRdmaVersion};
use rpcrdma_proto::provider::fault::FaultConfig;
use rpcrdma_proto::provider::mem::MemConfig;
use util::*;

#[derive(Clone, Debug)]
enum Op {
    /// A call with an argument of `len` octets (`ddp`: DDP-eligible) and
    /// room for a reply of `reply_max`.
    Call {
        len: usize,
        ddp: bool,
        reply_max: u32,
    },
    /// The server answers up to `n` pending calls with `len` octets each.
    Reply { n: usize, len: usize },
    /// The server changes its grant.
    Grant(u32),
    /// Both ends run until quiet.
    Run,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop_oneof![0usize..64, 64usize..2000, 2000usize..9000], any::<bool>(),
              prop_oneof![Just(0u32), Just(256u32), Just(16384u32)])
            .prop_map(|(len, ddp, reply_max)| Op::Call { len, ddp, reply_max }),
        4 => (1usize..4, prop_oneof![0usize..64, 64usize..1500, 1500usize..12000])
            .prop_map(|(n, len)| Op::Reply { n, len }),
        1 => (1u32..9).prop_map(Op::Grant),
        3 => Just(Op::Run),
    ]
}

fn faults(posts: Option<u64>, lose: bool, seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        fail_after_posts: posts.filter(|_| !lose),
        lose_connection_after_posts: posts.filter(|_| lose),
        ..FaultConfig::default()
    }
}

/// Everything one run shows, as text (events carry `Bytes`).
fn run(
    v: RpcRdmaVersion,
    ops: &[Op],
    stage: bool,
    fc: FaultConfig,
    fs: FaultConfig,
) -> (Vec<String>, u64) {
    let mem = MemConfig {
        stage_sends: stage,
        ..MemConfig::DEFAULT
    };
    let mut p = Pair::with_faults(ccfg(v), scfg(v), mem, fc, fs);
    let mut seen = Vec::new();
    let mut pending = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        match *o {
            Op::Call {
                len,
                ddp,
                reply_max,
            } => {
                let arg = data(len, i as u8);
                let r = p.c.conn.start_call(
                    p.now,
                    &mut p.c.prov,
                    OutgoingCall {
                        message: opaque_call(1, &arg, ddp),
                        reply_max,
                        ddp_results: vec![],
                    },
                );
                seen.push(format!("call {i}: {r:?}"));
            }
            Op::Reply { n, len } => {
                for c in pending.drain(..n.min(pending.len())) {
                    let c: rpcrdma_proto::engine::IncomingCall = c;
                    let mut m = reply_header(c.xid);
                    m.extend(word(len as u32));
                    let mut body = data(len, c.xid as u8);
                    body.resize(len.next_multiple_of(4), 0);
                    let r = p.s.conn.send_reply(
                        p.now,
                        &mut p.s.prov,
                        c.handle,
                        OutgoingReply {
                            message: Message::from_pieces([
                                Piece::Inline(m.into()),
                                Piece::Inline(body.into()),
                            ]),
                        },
                    );
                    seen.push(format!("reply {i} to {:#x}: {r:?}", c.xid));
                }
            }
            Op::Grant(g) => p.s.conn.set_credit_grant(&mut p.s.prov, g),
            Op::Run => p.run(),
        }
        let calls = p.server_calls();
        for c in &calls {
            seen.push(format!(
                "server got {:#x}: {:?}",
                c.xid,
                stream(&c.message, c.xid)
            ));
        }
        pending.extend(calls);
        for e in p.client_events() {
            seen.push(format!("client: {e:?}"));
        }
    }
    p.run();
    for e in p.client_events() {
        seen.push(format!("client: {e:?}"));
    }
    seen.push(format!("client metrics {:?}", p.c.conn.metrics()));
    seen.push(format!("server metrics {:?}", p.s.conn.metrics()));
    seen.push(format!(
        "closed {} {}",
        p.c.conn.is_closed(),
        p.s.conn.is_closed()
    ));
    let staged = p.c.prov.inner().staged_sends() + p.s.prov.inner().staged_sends();
    (seen, staged)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn staged_sends_change_nothing_the_engines_see(
        ops in proptest::collection::vec(op(), 1..40),
        v2 in any::<bool>(),
        posts in proptest::option::weighted(0.3, 1u64..60),
        lose in any::<bool>(),
        server_side in any::<bool>(),
    ) {
        let v = if v2 { RpcRdmaVersion::V2 } else { RpcRdmaVersion::V1 };
        let (f, none) = (faults(posts, lose, 7), FaultConfig::default());
        let (fc, fs) = if server_side { (none, f) } else { (f, none) };
        let (general, zero) = run(v, &ops, false, fc, fs);
        prop_assert_eq!(zero, 0);
        let (staged, _) = run(v, &ops, true, fc, fs);
        prop_assert_eq!(staged, general);
    }
}

#[test]
fn small_calls_and_replies_are_staged() {
    let ops = [
        Op::Call {
            len: 20,
            ddp: false,
            reply_max: 0,
        },
        Op::Run,
        Op::Reply { n: 1, len: 8 },
        Op::Run,
    ];
    let none = FaultConfig::default();
    let (general, _) = run(RpcRdmaVersion::V1, &ops, false, none, none);
    let (staged, n) = run(RpcRdmaVersion::V1, &ops, true, none, none);
    assert_eq!(staged, general);
    // The call and its reply (the setup's Sends are not counted: none).
    assert_eq!(n, 2, "{staged:#?}");
    assert!(general
        .iter()
        .any(|l| l.starts_with("client: ReplyReceived")));
}

#[test]
fn a_qp_failure_after_a_staged_call_fails_it_as_after_a_registered_one() {
    let ops = [
        Op::Call {
            len: 20,
            ddp: false,
            reply_max: 0,
        },
        Op::Call {
            len: 20,
            ddp: false,
            reply_max: 0,
        },
        Op::Run,
    ];
    for lose in [false, true] {
        // The client's receives for the connection are posts too: fail
        // right after the first call's Send.
        for posts in 1..40 {
            let (fc, none) = (faults(Some(posts), lose, 1), FaultConfig::default());
            let (general, _) = run(RpcRdmaVersion::V1, &ops, false, fc, none);
            let (staged, _) = run(RpcRdmaVersion::V1, &ops, true, fc, none);
            assert_eq!(staged, general, "posts {posts} lose {lose}");
        }
    }
}
