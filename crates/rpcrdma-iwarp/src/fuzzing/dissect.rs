//! `dissect`: the connection dissector ([`crate::dissect::Dissector`]) on
//! arbitrary streams, without the capture around it.
//!
//! The input chooses, for each side, an MPA frame to start with (the
//! Request for [`Side::A`], the Reply for [`Side::B`]: any flags, revision
//! and private data) or none, then the rest of each stream: raw octets, or
//! FPDUs framed with the CRC and Markers the two frames negotiate around
//! generated DDP / RDMAP segments ([`super::mpa_stream`]'s builder:
//! headers that mostly pass, then mutated); then the sizes of the pieces
//! the streams are fed in and the order of the two sides. It asserts:
//!
//! * no panic;
//! * what the dissector holds ([`Dissector::buffered`]) never exceeds the
//!   octets fed, and is nothing once both streams ended;
//! * when both frames come first, the items of each side are the same
//!   whether its stream is fed whole or in pieces interleaved with the
//!   other side's (after the frames, the two streams are independent);
//! * no Send is longer than [`MAX_SEND_LEN`], and nothing but
//!   end-of-stream reports follows the end of a stream.

use arbitrary::{Result, Unstructured};

use crate::dissect::{Dissector, Item, Items, Side, MAX_SEND_LEN};
use crate::mpa::fpdu::FramingConfig;
use crate::mpa::{KEY_REP, KEY_REQ};
use crate::qp::StreamParams;

/// An MPA frame with any flags octet, revision and private data.
fn frame(u: &mut Unstructured<'_>, request: bool) -> Result<(Vec<u8>, u8)> {
    let flags: u8 = u.arbitrary()?;
    let rev = *u.choose(&[1u8, 2, 2, 0, 3])?;
    let pd_len = usize::from(u.int_in_range(0u8..=24)?);
    let mut f = if request { KEY_REQ } else { KEY_REP }.to_vec();
    f.extend_from_slice(&[flags, rev]);
    f.extend_from_slice(&(pd_len as u16).to_be_bytes());
    f.extend_from_slice(u.bytes(pd_len)?);
    Ok((f, flags))
}

/// The rest of a stream: raw, or generated FPDUs framed with `cfg`.
fn body(u: &mut Unstructured<'_>, cfg: FramingConfig) -> Result<Vec<u8>> {
    if u.ratio(1, 3)? {
        let n = u.int_in_range(0u16..=2048)?;
        return Ok(u.bytes(usize::from(n).min(u.len()))?.to_vec());
    }
    let params = StreamParams {
        crc: cfg.crc,
        send_markers: cfg.markers,
        recv_markers: cfg.markers,
        ..StreamParams::DEFAULT
    };
    // The builder takes the rest of its input: give it a bounded share.
    let n = usize::from(u.int_in_range(0u16..=1024)?).min(u.len());
    let mut sub = Unstructured::new(u.bytes(n)?);
    super::mpa_stream::build(&mut sub, params, cfg)
}

/// Feeds `streams` in `plan` order (side, piece size); checks the bound
/// after every call; ends both streams; returns every item.
fn run(heads: &[Vec<u8>; 2], streams: &[Vec<u8>; 2], plan: &[(Side, usize)]) -> Items {
    let mut d = Dissector::new();
    let mut out = Items::new();
    let mut fed = 0usize;
    let mut feed = |d: &mut Dissector, side: Side, b: &[u8], out: &mut Items| {
        fed += b.len();
        d.feed(side, b, out);
        let held = d.buffered();
        assert!(held <= fed, "holds {held} octets after {fed} fed");
    };
    for side in Side::BOTH {
        feed(&mut d, side, &heads[side.index()], &mut out);
    }
    let mut at = [0usize; 2];
    for &(side, n) in plan {
        let s = &streams[side.index()];
        let i = side.index();
        let end = (at[i] + n).min(s.len());
        feed(&mut d, side, &s[at[i]..end], &mut out);
        at[i] = end;
    }
    for side in Side::BOTH {
        let i = side.index();
        feed(&mut d, side, &streams[i][at[i]..], &mut out);
    }
    let before_end = out.len();
    for side in Side::BOTH {
        d.end(side, &mut out);
        assert!(d.is_closed(side), "{side:?} open after its end");
    }
    assert_eq!(d.buffered(), 0, "octets held after both ends");
    for (side, it) in &out[before_end..] {
        assert!(
            matches!(it, Item::Error(_)),
            "{side:?}: {it:?} at the end of the stream"
        );
    }
    for (_, it) in &out {
        if let Item::Send(s) = it {
            assert!(s.payload.len() <= MAX_SEND_LEN);
        }
    }
    out
}

fn of(items: &Items, side: Side) -> Vec<&Item> {
    items
        .iter()
        .filter(|(s, _)| *s == side)
        .map(|(_, i)| i)
        .collect()
}

/// The fuzz target; see the module docs.
pub fn fuzz_dissect(data: &[u8]) {
    let _ = fuzz(data);
}

fn fuzz(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let framed = !u.ratio(1, 4)?;
    let (mut heads, mut flags) = ([Vec::new(), Vec::new()], [0u8; 2]);
    if framed {
        (heads[0], flags[0]) = frame(&mut u, true)?;
        (heads[1], flags[1]) = frame(&mut u, false)?;
    }
    // Flags: M 0x80, C 0x40. The Request's M asks Markers of the
    // responder (B), the Reply's of the initiator (A).
    let crc = (flags[0] | flags[1]) & 0x40 != 0;
    let cfg = |m: u8| FramingConfig {
        crc,
        markers: m & 0x80 != 0,
    };
    let streams = [body(&mut u, cfg(flags[1]))?, body(&mut u, cfg(flags[0]))?];
    let mut plan = Vec::new();
    for _ in 0..u.int_in_range(0u8..=32)? {
        let side = if u.arbitrary()? { Side::A } else { Side::B };
        plan.push((side, usize::from(u.int_in_range(1u16..=600)?)));
    }
    let whole = run(&heads, &streams, &[]);
    let pieces = run(&heads, &streams, &plan);
    if framed {
        for side in Side::BOTH {
            assert_eq!(
                of(&whole, side),
                of(&pieces, side),
                "{side:?}: fed in pieces {plan:?}, not the items fed whole"
            );
        }
    }
    Ok(())
}
