//! The connection dissector (`rpcrdma_iwarp::dissect`) fed streams
//! directly, without a capture: the items of each side do not depend on
//! how its stream is cut, and what it holds is bounded by the named limits.

mod capture_gen;

use capture_gen::{fpdu, mpa, rdma_msg, tagged, untagged, with_markers, PD};
use rpcrdma_iwarp::dissect::{Dissector, ErrorKind, Item, Items, Side, MAX_PENDING};

/// The streams of a connection with Markers from the initiator (the
/// Reply's M) and no CRC (`with_markers` writes Markers outside any CRC;
/// `markers_with_crc` in `tests/capture.rs` has both): Sends both ways, one
/// in two segments, an RDMA Write, a Read Request and its Response, a Send
/// left incomplete.
fn streams() -> [Vec<u8>; 2] {
    let mut a = mpa(true, 0, 1, &PD);
    let mut b = mpa(false, 0x80, 1, &PD);
    let call = rdma_msg(0xa1, 700);
    let mut rr = Vec::new();
    for x in [0x11u32, 0, 0x1000, 64, 0x22, 0, 0x2000] {
        rr.extend_from_slice(&x.to_be_bytes());
    }
    let fa = [
        fpdu(&untagged(3, 0, 1, 0, false, 0, &call[..400]), false),
        fpdu(&untagged(3, 0, 1, 400, true, 0, &call[400..]), false),
        fpdu(&tagged(2, 0x11, 0x1000, &[7; 64]), false),
        fpdu(&untagged(3, 0, 2, 0, false, 0, &[1; 8]), false),
    ];
    a.extend(with_markers(&fa));
    b.extend(fpdu(&untagged(1, 1, 1, 0, true, 0, &rr), false));
    b.extend(fpdu(&tagged(0, 0x77, 0, &[9; 33]), false));
    b.extend(fpdu(
        &untagged(3, 0, 1, 0, true, 0, &rdma_msg(0xa1, 0)),
        false,
    ));
    [a, b]
}

/// Feeds both streams in pieces of `n` octets, alternating sides, then
/// ends them.
fn dissect(s: &[Vec<u8>; 2], n: usize) -> Items {
    let mut d = Dissector::new();
    let mut out = Items::new();
    let mut at = [0usize; 2];
    while at[0] < s[0].len() || at[1] < s[1].len() {
        for side in Side::BOTH {
            let (i, st) = (side.index(), &s[side.index()]);
            let end = (at[i] + n).min(st.len());
            d.feed(side, &st[at[i]..end], &mut out);
            at[i] = end;
        }
    }
    for side in Side::BOTH {
        d.end(side, &mut out);
    }
    assert_eq!(d.buffered(), 0);
    out
}

fn names(items: &Items, side: Side) -> Vec<&'static str> {
    items
        .iter()
        .filter(|(s, _)| *s == side)
        .map(|(_, i)| i.name())
        .collect()
}

#[test]
fn items_do_not_depend_on_how_the_streams_are_cut() {
    let s = streams();
    let whole = dissect(&s, usize::MAX);
    assert_eq!(
        names(&whole, Side::A),
        ["mpa-request", "send", "read-response", "error"]
    );
    assert_eq!(
        names(&whole, Side::B),
        ["mpa-reply", "read-request", "write", "send"]
    );
    let Some((_, Item::Error(e))) = whole.iter().rfind(|(s, _)| *s == Side::A) else {
        panic!("{whole:?}")
    };
    assert_eq!(e.kind, ErrorKind::IncompleteSend);
    let Some((_, Item::Send(call))) = whole.iter().find(|(_, i)| i.name() == "send") else {
        panic!("{whole:?}")
    };
    assert_eq!((call.segments, call.payload.len()), (2, 28 + 40 + 700));
    for n in [1, 2, 3, 7, 64, 511, 513] {
        let cut = dissect(&s, n);
        for side in Side::BOTH {
            let of = |v: &Items| -> Vec<Item> {
                v.iter()
                    .filter(|(s, _)| *s == side)
                    .map(|(_, i)| i.clone())
                    .collect()
            };
            assert_eq!(of(&cut), of(&whole), "{side:?} in pieces of {n}");
        }
    }
}

/// FPDU data behind the MPA Request while the Reply has not come is held
/// up to `MAX_PENDING` octets, however it arrives: in one piece with the
/// frame too.
#[test]
fn octets_before_the_peer_frame_are_bounded_even_with_the_frame() {
    let mut a = mpa(true, 0, 1, &PD);
    a.resize(a.len() + MAX_PENDING + 1, 0);
    for pieces in [1, 2] {
        let mut d = Dissector::new();
        let mut out = Items::new();
        let (frame, rest) = a.split_at(a.len() - (MAX_PENDING + 1) * (pieces - 1));
        d.feed(Side::A, frame, &mut out);
        d.feed(Side::A, rest, &mut out);
        assert!(d.buffered() <= MAX_PENDING, "{pieces}: {}", d.buffered());
        let errors: Vec<ErrorKind> = out
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Error(e) => Some(e.kind),
                _ => None,
            })
            .collect();
        assert_eq!(errors, [ErrorKind::BufferLimit], "in {pieces} piece(s)");
        assert!(d.is_closed(Side::A));
    }
    // Within the limit, the octets wait for the peer's frame and are then
    // decoded.
    let mut d = Dissector::new();
    let mut out = Items::new();
    let mut a = mpa(true, 0, 1, &PD);
    a.extend(fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(7, 0)), false));
    d.feed(Side::A, &a, &mut out);
    assert_eq!(d.buffered(), a.len() - 28);
    d.feed(Side::B, &mpa(false, 0, 1, &PD), &mut out);
    assert_eq!(names(&out, Side::A), ["mpa-request", "send"]);
    assert_eq!(d.buffered(), 0);
}
