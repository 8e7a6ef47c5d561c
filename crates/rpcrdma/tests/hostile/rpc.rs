//! RPC-over-RDMA version 1 messages for the hostile peer, built and parsed
//! with `rpcrdma_proto::wire` (RFC 8166 header, RFC 5531 call / reply).

use rpcrdma_proto::wire::chunk::{ChunkLists, ReadSegment};
use rpcrdma_proto::wire::rpc::{AcceptedStatus, ReplyBody, RpcMsg};
use rpcrdma_proto::wire::v1::{self, Body, Header};
use rpcrdma_proto::{Limits, XdrEncode};

/// An RDMA_MSG carrying an AUTH_NONE call of `(prog, vers, proc)` with
/// the XDR arguments `args`, and the Read list `reads` (no Write list, no
/// Reply chunk).
pub fn call(
    xid: u32,
    credits: u32,
    (prog, vers, proc_): (u32, u32, u32),
    args: &[u8],
    reads: &[ReadSegment],
) -> Vec<u8> {
    let chunks = ChunkLists {
        reads: reads.iter().copied().collect(),
        ..ChunkLists::empty()
    };
    let hdr = Header {
        xid,
        credit: credits,
        body: Body::Msg(chunks),
    };
    let mut v = hdr.to_vec().expect("header encodes");
    v.extend(
        RpcMsg::call_auth_none(xid, prog, vers, proc_)
            .to_vec()
            .expect("call encodes"),
    );
    v.extend_from_slice(args);
    v
}

/// A reply as the server sent it in one Send.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The transport header.
    pub header: Header,
    /// The RPC reply header.
    pub rpc: RpcMsg,
    /// The results after the RPC header.
    pub results: Vec<u8>,
}

impl Reply {
    /// True for an accepted SUCCESS reply.
    pub fn is_success(&self) -> bool {
        matches!(
            self.rpc.reply(),
            Some(ReplyBody::Accepted(a)) if a.status == AcceptedStatus::Success
        )
    }
}

/// Parses an RDMA_MSG reply; `None` for anything else.
pub fn reply(msg: &[u8]) -> Option<Reply> {
    let limits = Limits::default();
    let (header, hlen) = v1::decode(msg, &limits).ok()?;
    if !matches!(header.body, Body::Msg(_)) {
        return None;
    }
    let rest = msg.get(hlen..)?;
    let (rpc, rlen) = RpcMsg::decode(rest, &limits).ok()?;
    Some(Reply {
        header,
        rpc,
        results: rest.get(rlen..)?.to_vec(),
    })
}

/// XDR `opaque<>` (with the crate's own encoder).
pub fn opaque(data: &[u8]) -> Vec<u8> {
    let mut b = rpcrdma::Message::builder();
    b.put_opaque(data).expect("opaque encodes");
    b.finish().flatten().to_vec()
}
