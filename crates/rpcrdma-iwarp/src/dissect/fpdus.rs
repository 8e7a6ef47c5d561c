//! The FPDU phase of a stream: framing, DDP / RDMAP headers, the MSN
//! sequence and the reassembly of untagged Sends.

use std::collections::BTreeMap;

use super::{
    error, Error, ErrorKind, FpduState, Item, Items, Partial, SendMessage, Side, MAX_PARTIAL_SENDS,
    MAX_SEND_LEN,
};
use crate::ddp::DdpHeader;
use crate::mpa::fpdu::{FramingError, Received};
use crate::rdmap::{Opcode, Segment};

/// Frames and handles every complete FPDU in `fs.buf`; false when the
/// stream is dead.
pub(super) fn run(side: Side, fs: &mut FpduState, out: &mut Items) -> bool {
    let mut start = 0usize;
    let alive = loop {
        let avail = fs.buf.get(start..).unwrap_or(&[]);
        if avail.is_empty() {
            break true;
        }
        let at = fs.rx.stream_position();
        match fs.rx.poll(avail) {
            Ok(Received::Fpdu(f)) => {
                let mut u = Vec::with_capacity(usize::from(f.ulpdu_len));
                f.extend_ulpdu(avail, &mut u);
                start += f.consumed;
                ulpdu(side, fs, &u, out);
            }
            Ok(Received::NeedMore(_)) => break true,
            Err(e) => {
                let kind = match e {
                    FramingError::BadCrc { .. } => ErrorKind::MpaCrc,
                    FramingError::BadMarker { .. } => ErrorKind::MpaMarker,
                    FramingError::BadLength { .. } => ErrorKind::MpaLength,
                };
                let err = Error {
                    kind,
                    detail: e.to_string(),
                    terminate: Some(e.terminate_code()),
                    stream_offset: Some(at),
                };
                out.push((side, Item::Error(err)));
                break false;
            }
        }
    };
    fs.buf.drain(..start.min(fs.buf.len()));
    alive
}

/// Handles one verified ULPDU (a DDP segment).
fn ulpdu(side: Side, fs: &mut FpduState, u: &[u8], out: &mut Items) {
    let seg = match Segment::parse(u) {
        Ok(s) => s,
        Err(code) => {
            let err = Error {
                kind: ErrorKind::DdpRdmap,
                detail: format!("DDP/RDMAP segment rejected: {code}"),
                terminate: Some(code),
                stream_offset: None,
            };
            out.push((side, Item::Error(err)));
            return;
        }
    };
    let payload = u.get(seg.payload.clone()).unwrap_or(&[]);
    let op = seg.control.opcode;
    // Segment::parse checked that QN is 0, 1 or 2.
    let untagged = match seg.ddp {
        DdpHeader::Untagged(h) => Some(h),
        DdpHeader::Tagged(_) => None,
    };
    if let Some((h, next)) =
        untagged.and_then(|h| Some((h, fs.next_msn.get_mut(usize::try_from(h.qn).ok()?)?)))
    {
        //= rfc5041#section-4.3
        //# The Message Sequence Number specifies a sequence number that MUST
        //# be increased by one (modulo 2^32) with each DDP Message targeting
        //# the specific Queue Number on the DDP Stream associated with this
        //# DDP Segment.  The initial value for MSN MUST be one.
        if h.last {
            if h.msn != *next {
                let detail = format!(
                    "queue {}: message with MSN {} where MSN {} was expected \
                     (messages missing from the capture, or a peer bug)",
                    h.qn, h.msn, *next
                );
                error(out, side, ErrorKind::DdpMsn, detail);
            }
            *next = h.msn.wrapping_add(1);
        }
    }
    match (seg.ddp, op) {
        (DdpHeader::Tagged(t), Opcode::WRITE | Opcode::READ_RESPONSE) => {
            let item = Item::Tagged {
                opcode: op,
                stag: t.stag,
                to: t.to,
                len: payload.len(),
                last: t.last,
                head: payload
                    .iter()
                    .take(super::TAGGED_HEAD_LEN)
                    .copied()
                    .collect(),
            };
            out.push((side, item));
        }
        (DdpHeader::Untagged(h), Opcode::READ_REQUEST) => {
            let Some(request) = seg.read_request else {
                return;
            };
            out.push((
                side,
                Item::ReadRequest {
                    msn: h.msn,
                    request,
                },
            ));
        }
        (DdpHeader::Untagged(h), Opcode::TERMINATE) => {
            let Some(t) = seg.terminate(u) else { return };
            let code = t.code;
            out.push((side, Item::Terminate { msn: h.msn, code }));
        }
        (DdpHeader::Untagged(h), op) if op.is_send() => {
            let at = Place {
                msn: h.msn,
                mo: h.mo,
                last: h.last,
            };
            send_segment(side, &mut fs.sends, &seg, at, payload, out);
        }
        // Segment::parse accepts no other combination.
        _ => {}
    }
}

/// Where a Send segment belongs.
struct Place {
    msn: u32,
    mo: u32,
    last: bool,
}

fn send_segment(
    side: Side,
    sends: &mut BTreeMap<u32, Partial>,
    seg: &Segment,
    at: Place,
    payload: &[u8],
    out: &mut Items,
) {
    let Place { msn, mo, last } = at;
    let op = seg.control.opcode;
    if !sends.contains_key(&msn) && sends.len() >= MAX_PARTIAL_SENDS {
        let detail =
            format!("more than {MAX_PARTIAL_SENDS} Send messages in progress; MSN {msn} dropped");
        error(out, side, ErrorKind::DdpReassembly, detail);
        return;
    }
    let p = sends.entry(msn).or_insert_with(|| Partial {
        opcode: op,
        inv_stag: seg.invalidate_stag(),
        data: Vec::new(),
        segments: 0,
    });
    // Over MPA/TCP the segments of a message arrive in order: MO must be
    // where the previous segment ended.
    //= rfc5041#section-4.3
    //# The Message Offset specifies the offset, in octets, from the
    //# start of the DDP Message represented by the MSN and Queue Number
    //# on the DDP Stream associated with this DDP Segment.
    let problem = if usize::try_from(mo).ok() != Some(p.data.len()) {
        Some(format!(
            "Send MSN {msn}: segment at MO {mo}, expected MO {}",
            p.data.len()
        ))
    } else if p.opcode != op {
        Some(format!(
            "Send MSN {msn}: segment opcode {op} differs from the message's {}",
            p.opcode
        ))
    } else if p.data.len().saturating_add(payload.len()) > MAX_SEND_LEN {
        Some(format!("Send MSN {msn} longer than {MAX_SEND_LEN} octets"))
    } else {
        None
    };
    if let Some(detail) = problem {
        sends.remove(&msn);
        error(out, side, ErrorKind::DdpReassembly, detail);
        return;
    }
    p.data.extend_from_slice(payload);
    p.segments += 1;
    if !last {
        return;
    }
    let Some(p) = sends.remove(&msn) else { return };
    let send = SendMessage {
        opcode: p.opcode,
        inv_stag: p.inv_stag,
        msn,
        segments: p.segments,
        payload: p.data,
    };
    out.push((side, Item::Send(send)));
}
