//! `capture::Recorded`: the streams an initiator recorded once connected
//! (so without its MPA Request, and with or without the MPA Reply),
//! dissected as they come and completed into a capture file whose
//! dissection is the same.

mod capture_gen;

use capture_gen::{fpdu, mpa, rdma_msg, untagged, PD};
use rpcrdma_iwarp::capture::pcap::PcapReader;
use rpcrdma_iwarp::capture::write::tcp_session;
use rpcrdma_iwarp::capture::{Connections, Recorded};
use rpcrdma_iwarp::dissect::{Item, Items, Side};
use rpcrdma_iwarp::tcp::Direction::{self, Received, Sent};

type Segs = Vec<(Direction, Vec<u8>)>;

/// The MPA frames, a Send from the initiator (transport header xid 1) and
/// one from the responder (xid 2), each one FPDU.
fn conversation() -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let req = mpa(true, 0, 1, &PD);
    let rep = mpa(false, 0, 1, &PD);
    let call = fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(1, 100)), false);
    let answer = fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(2, 0)), false);
    (req, rep, call, answer)
}

/// `(side, name, xid of a Send)` of each item.
fn summary(items: &Items) -> Vec<(Side, &'static str, Option<u32>)> {
    items
        .iter()
        .map(|(s, i)| {
            let xid = match i {
                Item::Send(m) => Some(u32::from_be_bytes(m.payload[..4].try_into().unwrap())),
                _ => None,
            };
            (*s, i.name(), xid)
        })
        .collect()
}

fn per_side(items: &Items, side: Side) -> Vec<(Side, &'static str, Option<u32>)> {
    summary(items)
        .into_iter()
        .filter(|(s, _, _)| *s == side)
        .collect()
}

/// What the capture file of `segs` dissects to.
fn from_file(segs: &Segs) -> Items {
    let file = tcp_session(
        "127.0.0.1:40000".parse().unwrap(),
        "127.0.0.1:20049".parse().unwrap(),
        segs,
        0,
    );
    let mut r = PcapReader::new(&file[..]).unwrap();
    let mut conns = Connections::new();
    let mut events = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        conns.record(&rec, &mut events);
    }
    conns.finish(&mut events);
    events.into_iter().map(|e| (e.side, e.item)).collect()
}

/// Feeds `recorded` in two batches, as the demo does after each exchange;
/// returns the items and the completed streams.
fn record(req: &[u8], rep: &[u8], recorded: Segs) -> (Items, Segs) {
    let mut r = Recorded::new(req.to_vec(), rep.to_vec());
    let mut items = Items::new();
    let (first, second) = recorded.split_at(1);
    r.feed(first.to_vec(), &mut items);
    r.feed(second.to_vec(), &mut items);
    (items, r.streams(Vec::new()))
}

#[test]
fn the_reply_is_put_first_when_recording_missed_it() {
    let (req, rep, call, answer) = conversation();
    let (a, b) = call.split_at(30);
    let (items, streams) = record(
        &req,
        &rep,
        vec![
            (Sent, a.to_vec()),
            (Sent, b.to_vec()),
            (Received, answer.clone()),
        ],
    );
    let want_a = [(Side::A, "mpa-request", None), (Side::A, "send", Some(1))];
    let want_b = [(Side::B, "mpa-reply", None), (Side::B, "send", Some(2))];
    assert_eq!(per_side(&items, Side::A), want_a);
    assert_eq!(per_side(&items, Side::B), want_b);
    assert_eq!(
        streams,
        [
            (Sent, req),
            (Received, rep),
            (Sent, a.to_vec()),
            (Sent, b.to_vec()),
            (Received, answer),
        ]
    );
    assert_eq!(summary(&from_file(&streams)), summary(&items));
}

#[test]
fn a_recorded_reply_is_not_put_in_twice() {
    let (req, rep, call, answer) = conversation();
    let mut first = rep.clone();
    first.extend_from_slice(&answer[..10]);
    let (items, streams) = record(
        &req,
        &rep,
        vec![
            (Received, first.clone()),
            (Sent, call.clone()),
            (Received, answer[10..].to_vec()),
        ],
    );
    assert_eq!(
        per_side(&items, Side::A),
        [(Side::A, "mpa-request", None), (Side::A, "send", Some(1))]
    );
    assert_eq!(
        per_side(&items, Side::B),
        [(Side::B, "mpa-reply", None), (Side::B, "send", Some(2))]
    );
    assert_eq!(
        streams,
        [
            (Sent, req),
            (Received, first),
            (Sent, call),
            (Received, answer[10..].to_vec()),
        ]
    );
    assert_eq!(summary(&from_file(&streams)), summary(&items));
}

/// Nothing received yet: the streams still hold the Reply (a capture file
/// without it would not decode), and what is recorded later but not fed
/// comes last.
#[test]
fn streams_before_anything_was_received() {
    let (req, rep, call, answer) = conversation();
    let mut r = Recorded::new(req.clone(), rep.clone());
    let mut items = Items::new();
    r.feed(vec![(Sent, call.clone())], &mut items);
    // The Request's octets wait for the Reply: only the frame so far.
    assert_eq!(summary(&items), [(Side::A, "mpa-request", None)]);
    let streams = r.streams(vec![(Received, answer.clone())]);
    assert_eq!(
        streams,
        [
            (Sent, req),
            (Received, rep),
            (Sent, call),
            (Received, answer)
        ]
    );
    assert_eq!(
        summary(&from_file(&streams)),
        [
            (Side::A, "mpa-request", None),
            (Side::B, "mpa-reply", None),
            (Side::A, "send", Some(1)),
            (Side::B, "send", Some(2)),
        ]
    );
}
