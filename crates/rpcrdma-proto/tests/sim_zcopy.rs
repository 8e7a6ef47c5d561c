//! Two-peer simulations of the zero-copy DDP hand-offs: Write-chunk and
//! Read-chunk sources are the caller's own `Bytes` (registered shared and
//! read-only, released once the transfer is over), and Write-chunk results
//! are the chunk buffers themselves, pooled again only once dropped.

mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rpcrdma_proto::engine::{
    Config, ConnectionError, Event, OutgoingCall, OutgoingReply, Piece, Reply, ReplyForm,
};
use rpcrdma_proto::provider::fault::FaultConfig;
use rpcrdma_proto::provider::mem::MemConfig;
use rpcrdma_proto::provider::{Bytes, Status};
use util::*;

/// Bytes whose owner records when it is dropped (when the last clone of
/// the `Bytes`, in the test, the engine or the provider, is gone).
struct Tracked {
    data: Vec<u8>,
    dropped: Arc<AtomicBool>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

fn tracked(data: Vec<u8>) -> (Bytes, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let b = Bytes::from_owner(Tracked {
        data,
        dropped: dropped.clone(),
    });
    (b, dropped)
}

fn take_replies(p: &mut Pair) -> Vec<Reply> {
    p.client_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// One READ-like call with a Write chunk of `max` octets, answered with
/// `result` as the DDP item; returns the reply.
fn read_call(p: &mut Pair, max: u32, result: Bytes) -> Reply {
    p.call(OutgoingCall {
        message: opaque_call(6, &data(16, 1), false),
        reply_max: max + 512,
        ddp_results: vec![max],
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(result.len() as u32));
    let r = OutgoingReply {
        message: rpcrdma_proto::engine::Message::from_pieces([
            Piece::Inline(head.into()),
            Piece::Ddp(result),
        ]),
    };
    assert_eq!(p.reply(c.handle, r), ReplyForm::Inline);
    let mut r = take_replies(p);
    assert_eq!(r.len(), 1);
    r.remove(0)
}

#[test]
fn write_chunk_source_is_registered_as_is_until_the_write_is_done() {
    let mut p = Pair::new(Config::client(), Config::server());
    p.call(OutgoingCall {
        message: opaque_call(6, &data(16, 1), false),
        reply_max: 70_000,
        ddp_results: vec![65_536],
    });
    let c = p.server_calls().remove(0);
    let want = data(65_536, 9);
    let (result, dropped) = tracked(want.clone());
    let mut head = reply_header(c.xid);
    head.extend(word(65_536));
    let form =
        p.s.conn
            .send_reply(
                p.now,
                &mut p.s.prov,
                c.handle,
                OutgoingReply {
                    message: rpcrdma_proto::engine::Message::from_pieces([
                        Piece::Inline(head.into()),
                        Piece::Ddp(result),
                    ]),
                },
            )
            .expect("send_reply");
    assert_eq!(form, ReplyForm::Inline);
    // Our only handle is gone: the registration holds the bytes (no copy
    // was taken) while the RDMA Write may still read them.
    assert!(!dropped.load(Ordering::SeqCst));
    p.run();
    // Written, completed, deregistered: nothing holds them any more.
    assert!(dropped.load(Ordering::SeqCst));
    let r = take_replies(&mut p);
    assert_eq!(r[0].message.results(), vec![want]);
    assert_eq!(p.s.conn.metrics().rdma_write_bytes, 65_536);
}

#[test]
fn read_chunk_source_is_registered_as_is_until_the_call_completes() {
    let mut p = Pair::new(Config::client(), Config::server());
    let want = data(20_000, 3);
    let (arg, dropped) = tracked(want.clone());
    let mut head = call_header(100_003, 7);
    head.extend(word(20_000));
    let id =
        p.c.conn
            .start_call(
                p.now,
                &mut p.c.prov,
                OutgoingCall {
                    message: rpcrdma_proto::engine::Message::from_pieces([
                        Piece::Inline(head.into()),
                        Piece::Ddp(arg),
                        Piece::Inline(word(0xfeed_f00d).into()),
                    ]),
                    reply_max: 512,
                    ddp_results: vec![],
                },
            )
            .expect("start_call");
    p.run();
    let c = p.server_calls().remove(0);
    assert_eq!(
        ddp_ranges(&c.message).len(),
        1,
        "the argument went in a Read chunk"
    );
    assert_eq!(
        &c.message.flatten()[ddp_ranges(&c.message)[0].clone()],
        &want[..]
    );
    assert_eq!(p.c.conn.metrics().read_chunk_bytes, 20_000);
    // Still the caller's bytes (kept for a retransmission) until the reply.
    assert!(!dropped.load(Ordering::SeqCst));
    let mut m = reply_header(c.xid);
    m.extend(word(0));
    p.reply(
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]),
        },
    );
    let r = take_replies(&mut p);
    assert_eq!(r[0].id, id);
    assert!(dropped.load(Ordering::SeqCst), "call resources released");
}

#[test]
fn write_chunk_results_are_the_chunk_buffers_and_are_pooled_only_once_dropped() {
    let mut p = Pair::new(Config::client(), Config::server());
    let (d1, d2, d3) = (data(5001, 1), data(5001, 2), data(4000, 3));
    let r1 = read_call(&mut p, 8192, Bytes::from(d1.clone()));
    assert_eq!(
        r1.message.results(),
        vec![d1.clone()],
        "exact length, intact"
    );
    assert_eq!(r1.result(0, 5001), Some(&d1[..]));
    let p1 = r1.message.results()[0].as_ptr();
    // While the first result is held, the next call gets another buffer,
    // and the first result is never written again.
    let r2 = read_call(&mut p, 8192, Bytes::from(d2.clone()));
    assert_eq!(r2.message.results(), vec![d2.clone()]);
    let p2 = r2.message.results()[0].as_ptr();
    assert_ne!(p1, p2);
    assert_eq!(
        r1.message.results(),
        vec![d1.clone()],
        "a held result is not reused"
    );
    // A clone keeps the buffer out of the pool as well.
    let keep = r2.message.results()[0].clone();
    drop(r1);
    drop(r2);
    // The first buffer is back in the pool: the next call's chunk is it.
    let r3 = read_call(&mut p, 8192, Bytes::from(d3.clone()));
    assert_eq!(r3.message.results(), vec![d3.clone()]);
    assert_eq!(r3.message.results()[0].as_ptr(), p1);
    assert_eq!(keep, d2, "the cloned result is untouched");
    drop(keep);
    // Both buffers pooled now; results stay exact in length whatever the
    // buffer held before.
    let r4 = read_call(&mut p, 8192, Bytes::from_static(b"short"));
    assert_eq!(&r4.message.results()[0][..], b"short");
    assert!(r4.message.results()[0].as_ptr() == p2 || r4.message.results()[0].as_ptr() == p1);
    assert_eq!(r3.message.results(), vec![d3]);
    let m = p.c.conn.metrics();
    assert_eq!(m.write_chunks, 4);
    assert_eq!(m.write_chunk_bytes, 5001 + 5001 + 4000 + 5);
}

#[test]
fn results_outlive_the_connection() {
    let mut p = Pair::new(Config::client(), Config::server());
    let d = data(3000, 4);
    let r = read_call(&mut p, 4096, Bytes::from(d.clone()));
    let result = r.message.results()[0].clone();
    drop(r);
    // The engine (and its pool) go away; the result stays valid.
    let Pair { c, s, .. } = p;
    drop(c);
    drop(s);
    assert_eq!(result, d);
}

/// One WRITE-like call whose argument `arg` goes in a Read chunk (followed
/// by one inline word), answered at once (the requester's credit comes
/// back); returns the call as the server received it, its message still
/// held.
fn write_call(p: &mut Pair, arg: &[u8]) -> rpcrdma_proto::engine::IncomingCall {
    let mut head = call_header(100_003, 7);
    head.extend(word(arg.len() as u32));
    p.call(OutgoingCall {
        message: rpcrdma_proto::engine::Message::from_pieces([
            Piece::Inline(head.into()),
            Piece::Ddp(Bytes::copy_from_slice(arg)),
            Piece::Inline(word(0xfeed_f00d).into()),
        ]),
        reply_max: 512,
        ddp_results: vec![],
    });
    let mut calls = p.server_calls();
    assert_eq!(calls.len(), 1, "the call is delivered");
    let c = calls.remove(0);
    let mut m = reply_header(c.xid);
    m.extend(word(arg.len() as u32));
    p.reply(
        c.handle,
        OutgoingReply {
            message: rpcrdma_proto::engine::Message::from_pieces([Piece::Inline(m.into())]),
        },
    );
    assert_eq!(take_replies(p).len(), 1);
    c
}

/// The data of a received call's one Read chunk, and the piece before it.
fn read_chunk_data(c: &rpcrdma_proto::engine::IncomingCall) -> (Bytes, Bytes) {
    match c.message.pieces() {
        [Piece::Inline(head), Piece::Ddp(d), Piece::Inline(_)] => (head.clone(), d.clone()),
        other => panic!("unexpected pieces {other:?}"),
    }
}

#[test]
fn read_chunk_data_is_the_sink_buffer_and_is_pooled_only_once_dropped() {
    let mut p = Pair::new(Config::client(), Config::server());
    let (d1, d2, d3) = (data(5000, 1), data(5000, 2), data(5000, 3));
    let c1 = write_call(&mut p, &d1);
    let (head, got) = read_chunk_data(&c1);
    assert_eq!(got, d1);
    // Not copied into one buffer with the inline part: the piece is the
    // sink the RDMA Read placed it in.
    assert_ne!(got.as_ptr(), head.as_ptr().wrapping_add(head.len()));
    let p1 = got.as_ptr();
    drop(got);
    // While the first call's data is held, the next call gets another
    // sink, and the first call's data is never written again.
    let c2 = write_call(&mut p, &d2);
    let (_, got2) = read_chunk_data(&c2);
    assert_eq!(got2, d2);
    assert_ne!(got2.as_ptr(), p1);
    assert_eq!(read_chunk_data(&c1).1, d1, "held data is not reused");
    // A clone keeps the buffer out of the pool as well.
    let keep = got2;
    drop(c1);
    drop(c2);
    // The first sink is back in the pool: the next call's sink is it.
    let c3 = write_call(&mut p, &d3);
    let (_, got3) = read_chunk_data(&c3);
    assert_eq!(got3, d3);
    assert_eq!(got3.as_ptr(), p1);
    assert_eq!(keep, d2, "the cloned data is untouched");
    assert_eq!(p.s.conn.metrics().rdma_read_bytes, 15_000);
}

#[test]
fn a_read_completion_short_of_its_length_is_never_delivered() {
    // The provider reports a successful Read of 4,999 octets where 5,000
    // were asked (the sink's last octet would be whatever it held before):
    // the call is not delivered and the connection ends.
    let fs = FaultConfig {
        short_read_len: Some(5000),
        ..FaultConfig::default()
    };
    let mut p = Pair::with_faults(
        Config::client(),
        Config::server(),
        MemConfig::DEFAULT,
        FaultConfig::default(),
        fs,
    );
    let mut head = call_header(100_003, 7);
    head.extend(word(5000));
    p.call(OutgoingCall {
        message: rpcrdma_proto::engine::Message::from_pieces([
            Piece::Inline(head.into()),
            Piece::Ddp(Bytes::from(data(5000, 1))),
        ]),
        reply_max: 512,
        ddp_results: vec![],
    });
    assert!(p.server_calls().is_empty(), "nothing delivered");
    assert!(
        matches!(
            p.s.conn.error(),
            Some(ConnectionError::Completion {
                status: Status::LocalLength,
                ..
            })
        ),
        "{:?}",
        p.s.conn.error()
    );
}
