//! Reply decoding: the RPC reply header of a call's reply, its results, and
//! the error a refused or failed call is (RFC 5531 §9).

use rpcrdma_proto::wire::rpc::{
    AcceptedStatus, MsgBody, RejectedReply, ReplyBody, RpcMsg, SUCCESS_HEADER_LEN,
};
use rpcrdma_proto::{DecodeError, Limits};

use super::{inline_prefix, Reply, ReplyError, RpcError};
use crate::message::{Message, Piece};
use crate::metrics::Metrics;

fn count_reply_error(metrics: &Metrics, e: &ReplyError) {
    let c = match e {
        ReplyError::ProgUnavail => &metrics.err_prog_unavail,
        ReplyError::ProgMismatch { .. } => &metrics.err_prog_mismatch,
        ReplyError::ProcUnavail => &metrics.err_proc_unavail,
        ReplyError::GarbageArgs => &metrics.err_garbage_args,
        ReplyError::SystemErr => &metrics.err_system_err,
        ReplyError::OtherAccept(_) => &metrics.err_other,
        ReplyError::RpcMismatch { .. } => &metrics.err_rpc_mismatch,
        ReplyError::AuthError(_) => &metrics.err_auth_error,
    };
    Metrics::inc(c);
}

/// The reply to the call `xid` (the transport matched it; the XID in the
/// header is not looked at again): its results, or the error it carries.
/// The common reply — MSG_ACCEPTED, an AUTH_NONE verifier with an empty
/// body, SUCCESS, in the first inline piece — is taken without building
/// the header's [`RpcMsg`] ([`success_results`]); every other one goes
/// through [`decode_reply_general`], which gives the same for it (proptest
/// below).
#[inline]
pub(super) fn decode_reply(
    xid: u32,
    reply: Message,
    limits: &Limits,
    metrics: &Metrics,
) -> Result<Reply, RpcError> {
    if is_success_none(&reply) {
        return Ok(Reply {
            xid,
            verf: None,
            results: reply
                .into_split_inline_prefix(SUCCESS_HEADER_LEN)
                .unwrap_or_default(),
        });
    }
    decode_reply_general(xid, reply, limits, metrics)
}

/// True if `reply` starts with the header of an accepted SUCCESS reply
/// with an AUTH_NONE verifier (any XID) in its first inline piece.
#[inline]
fn is_success_none(reply: &Message) -> bool {
    let Some(Piece::Inline(b)) = reply.pieces().first() else {
        return false;
    };
    let want = RpcMsg::success_header(0);
    b.get(4..SUCCESS_HEADER_LEN) == Some(&want[4..])
}

/// [`decode_reply`] through the general header decoder.
fn decode_reply_general(
    xid: u32,
    reply: Message,
    limits: &Limits,
    metrics: &Metrics,
) -> Result<Reply, RpcError> {
    let prefix = inline_prefix(&reply);
    let (msg, hdr_len) = RpcMsg::decode_reply(&prefix, limits)?;
    let body = match msg.body {
        MsgBody::Reply(b) => b,
        MsgBody::Call(_) => {
            return Err(RpcError::BadReply(DecodeError::new(
                rpcrdma_proto::DecodeErrorKind::BadValue {
                    what: "msg_type",
                    detail: "a call where a reply was expected".into(),
                },
                4,
                "msg_type",
            )))
        }
    };
    let err = match body {
        ReplyBody::Accepted(a) => match a.status {
            AcceptedStatus::Success => {
                let results = reply.into_split_inline_prefix(hdr_len).unwrap_or_default();
                return Ok(Reply {
                    xid,
                    verf: Reply::thin_verf(a.verf),
                    results,
                });
            }
            AcceptedStatus::ProgUnavail => ReplyError::ProgUnavail,
            AcceptedStatus::ProgMismatch { low, high } => ReplyError::ProgMismatch { low, high },
            AcceptedStatus::ProcUnavail => ReplyError::ProcUnavail,
            AcceptedStatus::GarbageArgs => ReplyError::GarbageArgs,
            AcceptedStatus::SystemErr => ReplyError::SystemErr,
            AcceptedStatus::Other(s) => ReplyError::OtherAccept(s),
        },
        ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }) => {
            ReplyError::RpcMismatch { low, high }
        }
        ReplyBody::Denied(RejectedReply::AuthError(s)) => ReplyError::AuthError(s),
    };
    count_reply_error(metrics, &err);
    Err(RpcError::Reply(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;
    use rpcrdma_proto::wire::rpc::OpaqueAuth;
    use rpcrdma_proto::XdrEncode;

    /// What a decode gave, comparable (and the error counters it moved).
    fn outcome(
        f: fn(u32, Message, &Limits, &Metrics) -> Result<Reply, RpcError>,
        m: &Message,
    ) -> String {
        let metrics = Metrics::default();
        let r = f(7, m.clone(), &Limits::DEFAULT, &metrics);
        format!(
            "{:?} {:?}",
            r.map(|r| (r.xid, r.verf().clone(), r.results)),
            metrics.snapshot()
        )
    }

    /// Headers near the common one: each word the success header's, or a
    /// value a reply may hold there, or anything.
    fn header() -> impl Strategy<Value = Vec<u8>> {
        let good = RpcMsg::success_header(0x1234_5678);
        proptest::collection::vec((0usize..4, any::<u32>()), 6).prop_map(move |words| {
            let mut v = Vec::new();
            for (i, (pick, w)) in words.into_iter().enumerate() {
                let word = match pick {
                    0 | 1 => u32::from_be_bytes(good[4 * i..4 * i + 4].try_into().unwrap()),
                    2 => w % 4,
                    _ => w,
                };
                v.extend_from_slice(&word.to_be_bytes());
            }
            v
        })
    }

    proptest! {
        /// The common reply's fast path gives what the general decoder
        /// gives, for any reply: header, cut, results (inline and DDP
        /// pieces after it) alike.
        #[test]
        fn fast_path_is_the_general_decode(
            head in header(),
            cut in 0usize..30,
            tail in proptest::collection::vec(any::<u8>(), 0..12),
            ddp in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        ) {
            let mut first = head.clone();
            first.extend_from_slice(&tail);
            let cut = cut.min(first.len());
            let mut pieces = vec![Piece::Inline(Bytes::copy_from_slice(&first[..cut]))];
            if cut < first.len() {
                pieces.push(Piece::Inline(Bytes::copy_from_slice(&first[cut..])));
            }
            if let Some(d) = ddp {
                pieces.push(Piece::Ddp(d.into()));
            }
            for m in [Message::from_pieces(pieces), Message::inline(first.clone())] {
                prop_assert_eq!(outcome(decode_reply, &m), outcome(decode_reply_general, &m));
            }
        }
    }

    #[test]
    fn the_common_reply_takes_the_fast_path() {
        let mut v = RpcMsg::success_header(99).to_vec();
        v.extend_from_slice(&[0, 0, 0, 5]);
        let m = Message::inline(v);
        assert!(is_success_none(&m));
        let r = decode_reply(99, m.clone(), &Limits::DEFAULT, &Metrics::default()).unwrap();
        assert_eq!(r.results.flatten(), Bytes::from_static(&[0, 0, 0, 5]));
        assert_eq!(r.verf(), &OpaqueAuth::none());
        let mut err = RpcMsg::garbage_args(99).to_vec().unwrap();
        err.truncate(24);
        assert!(!is_success_none(&Message::inline(err)));
    }
}
