//! `rpcrdma decode --what private-data|rpc`: tree and JSON output.
//!
//! `--what private-data --json` prints one object:
//! `{"found", "offset", "version", "remote_invalidate", "send_size",
//! "receive_size"}` plus `"ird_ord"` (`ird, ord, peer_to_peer, rtr_send,
//! rtr_write, rtr_read`, as `decode --pcap` names them) when exactly 4 octets (an RFC 6581
//! MPA v2 IRD/ORD header) precede the format identifier. `found` is true only
//! for usable version 1 private data; `offset` / `version` describe the
//! format identifier when there is one (so an unknown version shows
//! `found: false` with its offset and version), and the sizes and flag are
//! the values that apply to the peer (the RFC 8166 defaults when not found).
//! Private data never fails to decode: anything unrecognised means defaults.
//!
//! `--what rpc --json` prints one object with `xid`, `direction`
//! (`"CALL"`/`"REPLY"`), the header fields, `header_len` and `body_len`
//! (octets after the header). Enumerations are printed by name, or as the
//! number when the value has no name.
use rpcrdma_proto::wire::private_data::{MpaIrdOrd, PeerPrivateData};
use rpcrdma_proto::wire::rpc::{
    AcceptedStatus, MsgBody, OpaqueAuth, RejectedReply, ReplyBody, RpcMsg,
};
use rpcrdma_proto::Limits;
use serde_json::{json, Map, Value};

use crate::failure::Failure;

/// Decodes RFC 8797 private data; returns the text to print.
pub fn decode_private_data(bytes: &[u8], json: bool) -> Result<String, Failure> {
    let p = PeerPrivateData::find(bytes);
    let eff = p.effective();
    let mpa = match p.offset() {
        Some(4) => MpaIrdOrd::decode(bytes),
        _ => None,
    };
    if json {
        let mut o = json!({
            "found": p.is_found(),
            "offset": p.offset(),
            "version": p.version(),
            "remote_invalidate": eff.remote_invalidate(),
            "send_size": eff.send_size.bytes(),
            "receive_size": eff.receive_size.bytes(),
        });
        if let (Some(m), Value::Object(map)) = (mpa, &mut o) {
            map.insert(
                "ird_ord".into(),
                // The names of `decode --pcap`'s `ird_ord` (README).
                json!({
                    "ird": m.ird,
                    "ord": m.ord,
                    "peer_to_peer": m.peer_to_peer,
                    "rtr_send": m.zero_length_rtr,
                    "rtr_write": m.rdma_write_rtr,
                    "rtr_read": m.rdma_read_rtr,
                }),
            );
        }
        Ok(o.to_string())
    } else {
        let mut s = String::new();
        if let Some(m) = mpa {
            s.push_str(&format!("{m}\n"));
        }
        s.push_str(&p.to_string());
        Ok(s.trim_end().to_string())
    }
}

/// Decodes an ONC RPC message header; returns the text to print.
pub fn decode_rpc(bytes: &[u8], json: bool) -> Result<String, Failure> {
    let (m, header_len) = RpcMsg::decode(bytes, &Limits::default())?;
    let body_len = bytes.len().saturating_sub(header_len);
    if !json {
        return Ok(format!(
            "{}header_len {header_len}, {body_len} octets of {} follow",
            m,
            if m.call().is_some() {
                "arguments"
            } else {
                "results"
            }
        ));
    }
    let mut o = Map::new();
    o.insert("xid".into(), json!(m.xid));
    o.insert(
        "direction".into(),
        name_or_num(m.msg_type().name(), m.msg_type().0),
    );
    match &m.body {
        MsgBody::Call(c) => {
            o.insert("rpcvers".into(), json!(c.rpcvers));
            o.insert("prog".into(), json!(c.prog));
            o.insert("vers".into(), json!(c.vers));
            o.insert("proc".into(), json!(c.procedure));
            o.insert("cred".into(), auth_json(&c.cred));
            o.insert("verf".into(), auth_json(&c.verf));
        }
        MsgBody::Reply(rb) => {
            o.insert(
                "reply_stat".into(),
                name_or_num(rb.stat().name(), rb.stat().0),
            );
            match rb {
                ReplyBody::Accepted(a) => {
                    let st = a.status.stat();
                    o.insert("verf".into(), auth_json(&a.verf));
                    o.insert("accept_stat".into(), name_or_num(st.name(), st.0));
                    if let AcceptedStatus::ProgMismatch { low, high } = a.status {
                        o.insert("mismatch".into(), json!({"low": low, "high": high}));
                    }
                }
                ReplyBody::Denied(d) => {
                    o.insert(
                        "reject_stat".into(),
                        name_or_num(d.stat().name(), d.stat().0),
                    );
                    match d {
                        RejectedReply::RpcMismatch { low, high } => {
                            o.insert("mismatch".into(), json!({"low": low, "high": high}));
                        }
                        RejectedReply::AuthError(s) => {
                            o.insert("auth_stat".into(), name_or_num(s.name(), s.0));
                        }
                    }
                }
            }
        }
    }
    o.insert("header_len".into(), json!(header_len));
    o.insert("body_len".into(), json!(body_len));
    Ok(Value::Object(o).to_string())
}

fn name_or_num(name: Option<&'static str>, v: u32) -> Value {
    match name {
        Some(n) => json!(n),
        None => json!(v),
    }
}

fn auth_json(a: &OpaqueAuth) -> Value {
    let f = a.flavor();
    let mut o = Map::new();
    o.insert("flavor".into(), json!(f.0));
    o.insert("name".into(), json!(f.name()));
    o.insert("length".into(), json!(a.body_len()));
    match a {
        OpaqueAuth::Sys(p) => {
            o.insert("stamp".into(), json!(p.stamp));
            o.insert(
                "machinename".into(),
                json!(String::from_utf8_lossy(&p.machinename)),
            );
            o.insert("uid".into(), json!(p.uid));
            o.insert("gid".into(), json!(p.gid));
            o.insert("gids".into(), json!(p.gids));
        }
        OpaqueAuth::Opaque { body, .. } => {
            o.insert("body".into(), json!(hex::encode(body)));
        }
    }
    Value::Object(o)
}
