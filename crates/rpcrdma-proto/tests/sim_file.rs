//! Replies whose DDP item is a file range (`Piece::File`) pinned to the
//! same reply with the range read into memory (`Piece::Ddp`): over random
//! files, ranges and Write chunks (offered or not, large enough or not,
//! so the item goes in the Write chunk, inline, in a Reply chunk or gets
//! ERR_CHUNK), the requester receives the same reply, results and form. A
//! file that shrank before the reply was sent loses the reply (the
//! connection closes: RFC 8166 §4.5.4), never sends other octets.

mod util;

use std::fs::File;
use std::io::Write as _;
use std::sync::Arc;

use proptest::prelude::*;
use rpcrdma_proto::engine::{
    CallError, Config, Event, Message, OutgoingCall, OutgoingReply, Piece, Reply, ReplyForm,
};
use rpcrdma_proto::provider::FileRange;
use util::*;

fn temp_file(data: &[u8]) -> Arc<File> {
    let path = std::env::temp_dir().join(format!(
        "rpcrdma-sim-file-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    File::create(&path).unwrap().write_all(data).unwrap();
    let f = File::options().read(true).write(true).open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    Arc::new(f)
}

/// One READ-like call (Write chunk of `chunk` octets if `Some`) answered
/// with `item` as its DDP item; the reply form and what the requester got.
fn exchange(chunk: Option<u32>, reply_max: u32, item: Piece) -> (ReplyForm, Vec<Reply>) {
    let mut p = Pair::new(Config::client(), Config::server());
    p.call(OutgoingCall {
        message: opaque_call(6, &data(16, 1), false),
        reply_max,
        ddp_results: chunk.into_iter().collect(),
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(item.len() as u32));
    let message = Message::from_pieces([
        Piece::Inline(head.into()),
        item,
        Piece::Inline(word(7).into()),
    ]);
    let form = p.reply(c.handle, OutgoingReply { message });
    let replies = p
        .client_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ReplyReceived(r) => Some(r),
            _ => None,
        })
        .collect();
    (form, replies)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_file_item_is_the_item_read_into_memory(
        size in prop_oneof![0usize..64, 64usize..300_000],
        off in 0usize..300_000,
        len in prop_oneof![0usize..64, 64usize..9000, 9000usize..300_000],
        chunk in prop_oneof![Just(None), (0u32..300_000).prop_map(Some)],
        reply_max in prop_oneof![Just(512u32), Just(400_000u32)],
        seed in any::<u8>(),
    ) {
        let bytes: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(29) ^ seed).collect();
        let file = temp_file(&bytes);
        let off = off.min(size);
        let len = len.min(size - off);
        let range = FileRange::new(file, off as u64, len as u32);
        let mem = exchange(chunk, reply_max, Piece::Ddp(range.read().unwrap().into()));
        let fil = exchange(chunk, reply_max, Piece::File(range));
        prop_assert_eq!(fil.0, mem.0);
        prop_assert_eq!(fil.1.len(), mem.1.len());
        for (f, m) in fil.1.iter().zip(&mem.1) {
            prop_assert_eq!(&f.message, &m.message);
        }
    }
}

#[test]
fn a_file_that_shrank_loses_the_reply_and_closes_the_connection() {
    let file = temp_file(&vec![3u8; 100_000]);
    let mut p = Pair::new(Config::client(), Config::server());
    p.call(OutgoingCall {
        message: opaque_call(6, &data(16, 1), false),
        reply_max: 100_512,
        ddp_results: vec![100_000],
    });
    let c = p.server_calls().remove(0);
    let mut head = reply_header(c.xid);
    head.extend(word(100_000));
    let message = Message::from_pieces([
        Piece::Inline(head.into()),
        Piece::File(FileRange::new(file.clone(), 0, 100_000)),
    ]);
    file.set_len(10).unwrap();
    let r =
        p.s.conn
            .send_reply(p.now, &mut p.s.prov, c.handle, OutgoingReply { message });
    assert!(matches!(r, Err(CallError::Closed(_))), "{r:?}");
    p.run();
    let got: Vec<Event> = p
        .client_events()
        .into_iter()
        .filter(|e| matches!(e, Event::ReplyReceived(_)))
        .collect();
    assert!(got.is_empty(), "no reply: {got:?}");
}
