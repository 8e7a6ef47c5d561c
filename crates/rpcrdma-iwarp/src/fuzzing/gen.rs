//! Structure-aware ULPDUs for the queue pair of [`super::env::Env`]: DDP /
//! RDMAP segments that name its STags, MSNs, offsets and outstanding Reads
//! (so they pass most checks and reach placement), then mutated.

use arbitrary::{Result, Unstructured};

use crate::ddp::{DdpHeader, UntaggedHeader};
use crate::rdmap::{
    self, Opcode, RdmapControl, ReadRequest, TerminateCode, TerminateMessage, QN_READ_REQUEST,
    QN_SEND,
};

use super::env::Env;

/// Where a well-behaved peer would be next; generated headers start from
/// here (and sometimes stray).
#[derive(Clone, Debug)]
pub struct GenState {
    stags: Vec<u32>,
    reads: Vec<(u32, u64, u32)>,
    send_msn: u32,
    send_mo: u32,
    rr_msn: u32,
    read_front: usize,
    read_done: u32,
}

impl GenState {
    /// At the start of the stream of `env`.
    pub fn new(env: &Env) -> Self {
        GenState {
            stags: env.stags(),
            reads: env.reads.clone(),
            send_msn: 1,
            send_mo: 0,
            rr_msn: 1,
            read_front: 0,
            read_done: 0,
        }
    }
}

/// `len` payload octets from `seed` (never all one value).
pub fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(7)) ^ 0x5a)
        .collect()
}

fn stag(u: &mut Unstructured<'_>, g: &GenState) -> Result<u32> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    Ok(*u.choose(&g.stags)?)
}

fn small_len(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => 0,
        1..=5 => usize::from(u.int_in_range(1u8..=64)?),
        6 => usize::from(u.int_in_range(65u16..=300)?),
        _ => usize::from(u.arbitrary::<u16>()? % 1200),
    })
}

fn offset(u: &mut Unstructured<'_>, natural: u64) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=5 => natural,
        6 => u64::from(u.int_in_range(0u16..=300)?),
        7 => natural.wrapping_add(u64::from(u.int_in_range(1u8..=16)?)),
        8 => u64::MAX - u64::from(u.int_in_range(0u8..=64)?),
        _ => u.arbitrary()?,
    })
}

fn msn(u: &mut Unstructured<'_>, natural: u32) -> Result<u32> {
    Ok(match u.int_in_range(0u8..=9)? {
        0..=6 => natural,
        7 => natural.wrapping_add(u32::from(u.int_in_range(1u8..=4)?)),
        8 => natural.wrapping_sub(u32::from(u.int_in_range(1u8..=2)?)),
        _ => u.arbitrary()?,
    })
}

fn header_and(hdr: DdpHeader, tail: &[u8]) -> Vec<u8> {
    let mut v = hdr.to_vec();
    v.extend_from_slice(tail);
    v
}

/// One generated ULPDU (before framing).
pub fn ulpdu(u: &mut Unstructured<'_>, g: &mut GenState) -> Result<Vec<u8>> {
    let mut v = match u.int_in_range(0u8..=15)? {
        // Send, any of the four; the next segment of the current message.
        0..=5 => {
            let op = *u.choose(&[
                Opcode::SEND,
                Opcode::SEND,
                Opcode::SEND_SE,
                Opcode::SEND_INVALIDATE,
                Opcode::SEND_SE_INVALIDATE,
            ])?;
            let m = msn(u, g.send_msn)?;
            let mo = match u.int_in_range(0u8..=7)? {
                0..=4 => g.send_mo,
                5 => 0,
                6 => u32::from(u.int_in_range(1u16..=256)?),
                _ => u.arbitrary()?,
            };
            let last = u.ratio(1, 2)?;
            let inv = stag(u, g)?;
            let len = small_len(u)?;
            let data = payload(u.arbitrary()?, len);
            if m == g.send_msn && mo == g.send_mo {
                if last {
                    g.send_msn = g.send_msn.wrapping_add(1);
                    g.send_mo = 0;
                } else {
                    g.send_mo = g.send_mo.wrapping_add(len as u32);
                }
            }
            let word = if op.carries_invalidate_stag() { inv } else { 0 };
            let hdr = DdpHeader::Untagged(UntaggedHeader::new(
                RdmapControl::new(op).to_byte(),
                word,
                QN_SEND,
                m,
                mo,
                last,
            ));
            header_and(hdr, &data)
        }
        // RDMA Write.
        6..=8 => {
            let s = stag(u, g)?;
            let to = offset(u, 0)?;
            let last = u.ratio(3, 4)?;
            let len = small_len(u)?;
            let data = payload(u.arbitrary()?, len);
            header_and(rdmap::write_header(s, to, last), &data)
        }
        // RDMA Read Response for our front Read (often short, often L=1).
        9..=11 => {
            let (sink, sink_to, total) = g.reads.get(g.read_front).copied().unwrap_or((0, 0, 0));
            let s = if u.ratio(7, 8)? { sink } else { stag(u, g)? };
            let to = offset(u, sink_to + u64::from(g.read_done))?;
            let rest = total.saturating_sub(g.read_done) as usize;
            let len = match u.int_in_range(0u8..=3)? {
                0 => rest,
                1 => rest.saturating_sub(usize::from(u.int_in_range(1u8..=16)?)),
                2 => rest + usize::from(u.int_in_range(1u8..=8)?),
                _ => small_len(u)?,
            };
            let last = if len == rest {
                u.ratio(7, 8)?
            } else {
                u.ratio(1, 2)?
            };
            if s == sink && to == sink_to + u64::from(g.read_done) {
                if last {
                    g.read_front += 1;
                    g.read_done = 0;
                } else {
                    g.read_done = g.read_done.saturating_add(len as u32);
                }
            }
            let data = payload(u.arbitrary()?, len);
            header_and(rdmap::read_response_header(s, to, last), &data)
        }
        // RDMA Read Request.
        12..=13 => {
            let m = msn(u, g.rr_msn)?;
            if m == g.rr_msn {
                g.rr_msn = g.rr_msn.wrapping_add(1);
            }
            let rr = ReadRequest {
                sink_stag: u.arbitrary()?,
                sink_to: u.arbitrary()?,
                size: match u.int_in_range(0u8..=3)? {
                    0 => 0,
                    1 | 2 => u32::from(u.int_in_range(1u16..=300)?),
                    _ => u.arbitrary()?,
                },
                src_stag: stag(u, g)?,
                src_to: offset(u, 0)?,
            };
            let hdr = DdpHeader::Untagged(UntaggedHeader::new(
                RdmapControl::new(Opcode::READ_REQUEST).to_byte(),
                0,
                QN_READ_REQUEST,
                m,
                0,
                true,
            ));
            header_and(hdr, &rr.to_bytes())
        }
        // A Terminate from the peer.
        14 => {
            let (code, _) = *u.choose(TerminateCode::TABLE)?;
            rdmap::encode_terminate(1, &TerminateMessage::new(code))
        }
        // Anything.
        _ => {
            let n = usize::from(u.int_in_range(0u8..=80)?);
            u.bytes(n)?.to_vec()
        }
    };
    mutate(u, &mut v)?;
    Ok(v)
}

/// Sometimes breaks a ULPDU: a header octet, the DDP or RDMAP version,
/// the T bit, a truncation or an extension.
fn mutate(u: &mut Unstructured<'_>, v: &mut Vec<u8>) -> Result<()> {
    if !u.ratio(1, 6)? {
        return Ok(());
    }
    match u.int_in_range(0u8..=5)? {
        0 if !v.is_empty() => {
            let i = u.choose_index(v.len().min(46))?;
            v[i] ^= u.int_in_range(1u8..=255)?;
        }
        1 if !v.is_empty() => v[0] = (v[0] & !0x03) | u.int_in_range(0u8..=3)?,
        2 if v.len() > 1 => v[1] = (v[1] & 0x0f) | (u.int_in_range(0u8..=3)? << 6),
        3 if !v.is_empty() => v[0] ^= 0x80,
        4 => {
            let n = u.choose_index(v.len() + 1)?;
            v.truncate(n);
        }
        _ => {
            let n = usize::from(u.int_in_range(1u8..=8)?);
            v.extend_from_slice(u.bytes(n)?);
        }
    }
    Ok(())
}
