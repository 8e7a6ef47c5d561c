//! Regions whose first byte is not tagged offset 0 ([`MemoryRegion::base`]:
//! the verbs provider registers at the buffer's page offset). Both peers'
//! providers are wrapped so that every region has base `BASE` and every
//! remote access subtracts it again before reaching the in-memory
//! provider: an offset the engine advertises or checks without the base
//! lands below `BASE`, fails as a remote access error and fails the call.
//! Long Call (Position-Zero Read chunk), DDP Read chunk, Write chunk and
//! Reply chunk, in versions 1 and 2.

mod util;

use std::task::Waker;
use std::time::Instant;

use rpcrdma_proto::engine::{
    Connection, Event, OutgoingCall, OutgoingReply, Piece, RpcRdmaVersion,
};
use rpcrdma_proto::provider::mem::{self, MemConfig, MemProvider};
use rpcrdma_proto::provider::{
    Access, Buffer, Bytes, Caps, Completion, ConnectionEvent, ConnectionInfo, ConnectionState,
    MemoryRegion, Notify, Provider, ProviderError, RecvWr, RegisterError, SendOp, SendWr,
};
use util::*;

const BASE: u64 = 0x0123_4000_0ff0;

struct Based(MemProvider);

fn unbase(op: SendOp) -> SendOp {
    let shift = |mut r: rpcrdma_proto::provider::RemoteAddr| {
        // Below the base: certainly outside the region.
        r.offset = r.offset.checked_sub(BASE).unwrap_or(u64::MAX / 2);
        r
    };
    match op {
        SendOp::Write { remote } => SendOp::Write {
            remote: shift(remote),
        },
        SendOp::Read { remote } => SendOp::Read {
            remote: shift(remote),
        },
        other => other,
    }
}

impl Provider for Based {
    fn caps(&self) -> Caps {
        self.0.caps()
    }
    fn connection_state(&self) -> ConnectionState {
        self.0.connection_state()
    }
    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.0.connection_info()
    }
    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        self.0.poll_event()
    }
    fn disconnect(&mut self) {
        self.0.disconnect()
    }
    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.0.register(buf, access).map(|m| m.with_base(BASE))
    }
    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.0
            .register_shared(buf, access)
            .map(|m| m.with_base(BASE))
    }
    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.0.register_recv(len).map(|m| m.with_base(BASE))
    }
    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.0.deregister(mr)
    }
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.0.region(mr)
    }
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.0.region_mut(mr)
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        self.0.post_recv(wr)
    }
    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        self.0.post_send(SendWr {
            op: unbase(wr.op),
            ..wr
        })
    }
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        self.0.poll_completions(out)
    }
    fn arm(&mut self, waker: &Waker, notify: Notify) {
        self.0.arm(waker, notify)
    }
}

struct BasedPair {
    now: Instant,
    c: Side<Based>,
    s: Side<Based>,
}

impl BasedPair {
    fn new(v: RpcRdmaVersion) -> BasedPair {
        let (ccfg, scfg) = (ccfg(v), scfg(v));
        let mut server = Connection::new(scfg.clone());
        let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
        a.connect(ccfg.connect_params()).expect("connect");
        assert!(matches!(
            b.poll_event(),
            Some(ConnectionEvent::ConnectRequest { .. })
        ));
        let mut b = Based(b);
        server.prepare_receives(&mut b);
        b.0.accept(scfg.connect_params()).expect("accept");
        let mut p = BasedPair {
            now: base_instant(),
            c: Side {
                conn: Connection::new(ccfg),
                prov: Based(a),
                events: Vec::new(),
            },
            s: Side {
                conn: server,
                prov: b,
                events: Vec::new(),
            },
        };
        p.run();
        p
    }

    fn run(&mut self) {
        let mut idle = 0;
        for _ in 0..1_000_000 {
            let a = self.c.step(self.now);
            let b = self.s.step(self.now);
            if !a && !b && self.c.prov.0.pending_work() + self.s.prov.0.pending_work() == 0 {
                idle += 1;
                if idle >= 2 {
                    return;
                }
            } else {
                idle = 0;
            }
        }
        panic!("simulation does not quiesce");
    }
}

fn round_trip(v: RpcRdmaVersion, call: OutgoingCall, reply_len: usize, ddp_reply: bool) {
    let mut p = BasedPair::new(v);
    let sent = call.message.flatten();
    p.c.conn
        .start_call(p.now, &mut p.c.prov, call)
        .expect("start_call");
    p.run();
    let calls = take_calls(&mut p.s.events);
    let [c] = calls.as_slice() else {
        panic!(
            "{v:?}: server got {calls:?}; client events {:?}",
            p.c.events
        )
    };
    let mut want_call = sent.to_vec();
    want_call[..4].copy_from_slice(&c.xid.to_be_bytes());
    assert_eq!(c.message.flatten(), want_call, "{v:?}: call arrived intact");
    let mut head = reply_header(c.xid);
    let body = data(reply_len, 9);
    let message = if ddp_reply {
        head.extend(word(reply_len as u32));
        rpcrdma_proto::engine::Message::from_pieces([
            Piece::Inline(head.clone().into()),
            Piece::Ddp(body.clone().into()),
        ])
    } else {
        head.extend(&body);
        rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(head.clone().into())])
    };
    p.s.conn
        .send_reply(p.now, &mut p.s.prov, c.handle, OutgoingReply { message })
        .expect("send_reply");
    p.run();
    let replies: Vec<_> =
        p.c.events
            .iter()
            .filter_map(|e| match e {
                Event::ReplyReceived(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
    let [r] = replies.as_slice() else {
        panic!("{v:?}: client events {:?}", p.c.events)
    };
    if ddp_reply {
        assert_eq!(r.message.results(), [body], "{v:?}: Write chunk data");
    } else {
        assert_eq!(r.message.flatten(), head, "{v:?}: Reply chunk data");
    }
}

#[test]
fn long_call_and_reply_chunk_with_a_base() {
    for v in VERSIONS {
        let call = OutgoingCall {
            message: opaque_call(3, &data(20_000, 1), false),
            reply_max: 40_000,
            ddp_results: vec![],
        };
        round_trip(v, call, 30_000, false);
    }
}

#[test]
fn ddp_read_chunk_and_write_chunk_with_a_base() {
    for v in VERSIONS {
        let call = OutgoingCall {
            message: opaque_call(4, &data(16_384, 2), true),
            reply_max: 20_000,
            ddp_results: vec![16_384],
        };
        round_trip(v, call, 12_345, true);
    }
}
