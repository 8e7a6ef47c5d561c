//! `engine_v2`: the `engine_ops` harness with an engine that speaks
//! RPC-over-RDMA version 2 (draft -09; client `V2` or `Auto`, server `V2`
//! or `Auto`), fed arbitrary version 2 messages from the peer: data headers
//! with flags and `rdma_inv_handle` (the engine's own handles, or any),
//! CONNPROP requests and responses (well-formed, malformed, unknown
//! properties, any RBSIZ), RDMA2_ERROR of every code (the engine's XIDs:
//! retries), the 7-word ERR_VERS of a version 1 server, unknown header
//! types, version 1 messages. On top of what `engine_ops` asserts (no
//! panic, a call completes once, calls posted within the credits, every
//! region released at the end) it asserts what version 2 adds: every Send
//! is a version 2 header (or version 1 after a fallback, or an ERR_VERS in
//! the version 1 layout) with no reserved flag bit set, an RDMA2_ERROR only
//! with F_RESPONSE; and credits come only from non-error responses (the
//! harness's bound on the grant counts no other credit word).

use arbitrary::{Result, Unstructured};

use super::engine_ops::{chunk_words, rpc_words, Sent};
use crate::engine::Role;
use crate::wire::chunk::ChunkLists;
use crate::wire::header::{self, TransportHeader};
use crate::wire::v2::Body;
use crate::Limits;

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// A version 2 message from the peer naming `xid` (`echo`: the Send of
/// ours with that XID, if any; `handles`: handles we offered).
pub(super) fn message(
    u: &mut Unstructured<'_>,
    role: Role,
    xid: u32,
    echo: Option<&Sent>,
    handles: &[u32],
) -> Result<Vec<u8>> {
    let credit = *u.choose(&[0u32, 1, 2, 3, 4, 8, 200])?;
    // Mostly the direction a well-behaved peer would use: a reply to our
    // call (F_RESPONSE), a call to our responder (clear).
    let flags = match u.int_in_range(0u8..=15)? {
        0 => u.arbitrary::<u32>()?,
        1..=7 => 1,
        _ => 0,
    };
    let kind = u.int_in_range(0u8..=15)?;
    let mut w = vec![xid, 2, credit];
    match kind {
        0..=8 => {
            w.push(if kind == 8 { 1 } else { 0 });
            w.push(flags);
            let inv = match u.int_in_range(0u8..=3)? {
                0 if !handles.is_empty() => *u.choose(handles)?,
                1 => u.arbitrary()?,
                _ => 0,
            };
            w.push(inv);
            w.extend(chunk_words(u, echo)?);
            if kind != 8 {
                w.extend(rpc_words(u, xid, role)?);
            }
        }
        9..=10 => {
            // CONNPROP: a response (to our probe) or a request.
            w.extend([
                5,
                if u.ratio(3, 4)? {
                    flags | 1
                } else {
                    flags & !1
                },
            ]);
            let n = u.int_in_range(0u8..=3)?;
            w.push(u32::from(n));
            for _ in 0..n {
                match u.int_in_range(0u8..=4)? {
                    0 => w.extend([
                        1,
                        4,
                        *u.choose(&[0u32, 1024, 4096, 8192, 1 << 20, u32::MAX])?,
                    ]),
                    1 => w.extend([2, 4, u.int_in_range(0u32..=3)?]),
                    2 => w.extend([1, 0]),
                    3 => w.extend([1, 2, 0x1234_0000]),
                    _ => w.extend([u.arbitrary::<u32>()? | 0x100, 4, u.arbitrary()?]),
                }
            }
        }
        11..=13 => {
            // RDMA2_ERROR, every code and an unknown one.
            w.extend([4, flags | u32::from(u.ratio(7, 8)?)]);
            let code = u.int_in_range(1u32..=10)?;
            w.push(code);
            match code {
                1 => w.extend([1, *u.choose(&[1u32, 2])?]),
                4..=6 | 8 => w.push(*u.choose(&[0u32, 1, 2, 64, 9000, 70_000, u32::MAX])?),
                7 => w.extend([
                    u.int_in_range(0u32..=3)?,
                    *u.choose(&[0u32, 100, 9000, 70_000])?,
                ]),
                _ => {}
            }
        }
        // A version 1 server's ERR_VERS: 7 words, rdma_vers 2 echoed.
        14 => {
            w.truncate(1);
            w.extend([2, credit, 4, 1, 1, 1]);
        }
        // An unknown header type, or a version 1 message.
        _ => {
            if u.ratio(1, 2)? {
                w.extend([u.int_in_range(6u32..=20)?, flags, u.arbitrary()?]);
            } else {
                w[1] = 1;
                w.push(0);
                w.extend(chunk_words(u, echo)?);
                w.extend(rpc_words(u, xid, role)?);
            }
        }
    }
    Ok(words(&w))
}

/// Whether a message from the peer may carry a grant the engine can take
/// (an upper bound for the harness): anything but a version 2 header that
/// is a request or an error. (A version 1 message grants after a fallback.)
pub(super) fn may_grant(m: &[u8]) -> bool {
    let word = |i: usize| {
        m.get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if word(1) != Some(2) {
        return true;
    }
    let response = word(4).is_some_and(|f| f & 1 == 1);
    response && word(3) != Some(4)
}

/// Checks one Send of a version 2 capable engine (`v1_ok`: it speaks
/// version 1 now — it fell back, or, `Auto`, has not settled and answers a
/// version 1 message in version 1); returns its XID, chunk lists and
/// whether it is a call, for the harness's bookkeeping (`None`: not a data
/// header).
pub(super) fn check_send(s: &[u8], v1_ok: bool) -> Option<(u32, ChunkLists, bool)> {
    let vers = s.get(4..8)?;
    if vers != [0, 0, 0, 2] {
        // Version 1: only after a fallback (or a server that settled on
        // it), or an ERR_VERS in the version 1 layout (the peer's version
        // echoed).
        let err_vers = s.len() == 28 && s.get(12..20) == Some(&[0, 0, 0, 4, 0, 0, 0, 1][..]);
        assert!(
            v1_ok || err_vers,
            "a version 2 engine sent a non-v2 header: {:02x?}",
            &s[..s.len().min(64)]
        );
        return None;
    }
    let Ok((TransportHeader::V2(h), off)) = header::decode(s, &Limits::DEFAULT) else {
        // The Linux-form ERR_VERS echoing 2 (a version 1 server's answer).
        assert!(
            s.len() == 28 && s.get(12..20) == Some(&[0, 0, 0, 4, 0, 0, 0, 1][..]),
            "the engine sent an undecodable v2 header: {:02x?}",
            &s[..s.len().min(64)]
        );
        return None;
    };
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# The other bits are reserved for future use as described in Section
    //# 9.4.  The sender MUST set these to zero.
    assert_eq!(h.flags.reserved(), 0, "reserved flag bits sent");
    let response = h.flags.is_response();
    match h.body {
        Body::Msg(c) | Body::Nomsg(c) => {
            // A call's F_RESPONSE is clear, a reply's set, and the RPC
            // message (when inline) agrees.
            if let Some(t) = s.get(off + 4..off + 8) {
                let rpc_reply = t == [0, 0, 0, 1];
                if t == [0, 0, 0, 0] || rpc_reply {
                    assert_eq!(response, rpc_reply, "F_RESPONSE disagrees with msg_type");
                }
            }
            Some((h.xid, c.lists, !response))
        }
        Body::Error(_) => {
            //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
            //# When the rdma_start.rdma_htype field has the value RDMA2_ERROR,
            //# the RPCRDMA2_F_RESPONSE flag MUST be set.
            assert!(response, "RDMA2_ERROR without F_RESPONSE");
            None
        }
        Body::Connprop(_) => None,
        Body::Unknown { .. } => panic!("the engine sent an unknown header type"),
    }
}

/// The version 2 fuzz target.
pub fn fuzz_engine_v2(data: &[u8]) {
    super::engine_ops::run(data, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few thousand pseudo-random inputs (xorshift, fixed seed): a smoke
    /// run of the target on the stable toolchain (the corpus replay runs
    /// the cargo-fuzz corpus).
    #[test]
    fn survives_pseudo_random_inputs() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let n: usize = std::env::var("ENGINE_V2_SMOKE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 2048) as usize;
            let mut data = Vec::with_capacity(len);
            let mut y = x;
            for _ in 0..len {
                y ^= y << 13;
                y ^= y >> 7;
                y ^= y << 17;
                data.push(y as u8);
            }
            fuzz_engine_v2(&data);
        }
    }

    #[test]
    fn grants_only_from_non_error_responses() {
        assert!(may_grant(&words(&[1, 2, 9, 0, 1])));
        assert!(may_grant(&words(&[1, 2, 9, 5, 1])));
        assert!(!may_grant(&words(&[1, 2, 9, 0, 0])), "a request");
        assert!(!may_grant(&words(&[1, 2, 9, 4, 1])), "an error");
        assert!(may_grant(&words(&[1, 1, 9, 0])), "version 1");
    }
}
