//! A look at the first words of an RPC message without decoding it: what a
//! dissector shows behind an RPC-over-RDMA header whose credentials or
//! arguments may not decode (or be present at all).

use super::{MsgType, RPC_VERSION};
use crate::xdr::Reader;

/// What the start of an RPC payload says (RFC 5531 `rpc_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RpcPeek {
    /// The transaction id.
    pub xid: u32,
    /// `(prog, vers, proc)` of a CALL; `None` for a REPLY.
    pub call: Option<(u32, u32, u32)>,
}

impl RpcPeek {
    /// Peeks at the RPC message at the start of `payload` (behind an
    /// RDMA_MSG / RDMA_MSGP / RDMA2_MSG header): xid and msg_type, and for
    /// a CALL rpcvers (must be 2), prog, vers, proc. `None` if the payload
    /// is not a plausible RPC header. Nothing after those words is read.
    pub fn of(payload: &[u8]) -> Option<RpcPeek> {
        let mut r = Reader::new(payload);
        let xid = r.u32("xid").ok()?;
        match MsgType(r.u32("msg_type").ok()?) {
            MsgType::CALL => {
                if r.u32("rpcvers").ok()? != RPC_VERSION {
                    return None;
                }
                let prog = r.u32("prog").ok()?;
                let vers = r.u32("vers").ok()?;
                let proc = r.u32("proc").ok()?;
                Some(RpcPeek {
                    xid,
                    call: Some((prog, vers, proc)),
                })
            }
            MsgType::REPLY => Some(RpcPeek { xid, call: None }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_peek() {
        let call = hex::decode("0000000100000000000000020001869f0000000300000006").unwrap();
        assert_eq!(
            RpcPeek::of(&call),
            Some(RpcPeek {
                xid: 1,
                call: Some((0x1869f, 3, 6))
            })
        );
        assert_eq!(
            RpcPeek::of(&hex::decode("0000000700000001").unwrap()),
            Some(RpcPeek { xid: 7, call: None })
        );
        // msg_type 2, rpcvers 3, truncated CALL: not plausible.
        assert_eq!(RpcPeek::of(&hex::decode("0000000700000002").unwrap()), None);
        assert_eq!(
            RpcPeek::of(&hex::decode("00000001000000000000000300000001").unwrap()),
            None
        );
        assert_eq!(RpcPeek::of(&call[..20]), None);
        assert_eq!(RpcPeek::of(&[]), None);
    }
}
