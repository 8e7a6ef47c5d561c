//! `rpcrdma decode --what header`: tree and JSON output.
//!
//! The JSON object's names are a stable interface (scripts depend on them):
//! `version`, `xid`, `credits`, `proc`, `proc_code`, `flags` (v2),
//! `inv_handle` (v2 MSG/NOMSG), `reads`, `writes`, `reply`, `align` /
//! `thresh` (MSGP), `error`, `props` (CONNPROP), `rpc`, `header_len`,
//! `payload_len`, plus `answer` (what a responder would send back for an
//! unknown version / proc / htype, or null) and `raw` (hex of an
//! undecodable body).

use rpcrdma_proto::wire::chunk::{ChunkLists, Segment};
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::rpc::RpcPeek;
use rpcrdma_proto::wire::{v1, v2};
use rpcrdma_proto::Limits;
use serde_json::{json, Map, Value};

use crate::failure::Failure;

/// Decodes a transport header; returns the text to print.
pub fn decode_header(bytes: &[u8], json: bool) -> Result<String, Failure> {
    if json {
        Ok(header_json(bytes)?.to_string())
    } else {
        header_tree(bytes)
    }
}

/// A decoded header with what is needed to render it.
struct Decoded<'a> {
    hdr: TransportHeader,
    header_len: usize,
    payload: &'a [u8],
    rpc: Option<RpcPeek>,
}

fn decode_parts(bytes: &[u8]) -> Result<Decoded<'_>, Failure> {
    let (hdr, header_len) = header::decode(bytes, &Limits::default()).map_err(|e| Failure {
        kind: e.error.kind.name().to_string(),
        offset: e.error.offset,
        detail: e.to_string(),
    })?;
    let payload = bytes.get(header_len..).unwrap_or(&[]);
    let rpc = if hdr.has_payload() {
        RpcPeek::of(payload)
    } else {
        None
    };
    Ok(Decoded {
        hdr,
        header_len,
        payload,
        rpc,
    })
}

/// The JSON object `rpcrdma decode --json` prints for a transport header.
pub fn header_json(bytes: &[u8]) -> Result<Value, Failure> {
    let d = decode_parts(bytes)?;
    Ok(to_json(
        &d.hdr,
        d.header_len,
        d.payload.len(),
        d.rpc.as_ref(),
    ))
}

/// The readable tree `rpcrdma decode` prints for a transport header.
pub fn header_tree(bytes: &[u8]) -> Result<String, Failure> {
    let d = decode_parts(bytes)?;
    Ok(to_tree(
        &d.hdr,
        d.header_len,
        d.payload.len(),
        d.rpc.as_ref(),
    ))
}

fn to_tree(
    hdr: &TransportHeader,
    header_len: usize,
    payload_len: usize,
    rpc: Option<&RpcPeek>,
) -> String {
    let mut s = hdr.to_string();
    s.push_str(&format!(
        "  header_len {header_len}, payload_len {payload_len}\n"
    ));
    if hdr.has_payload() {
        match rpc {
            Some(RpcPeek {
                xid,
                call: Some((prog, vers, proc)),
            }) => s.push_str(&format!(
                "  rpc: CALL xid 0x{xid:08x} prog {prog} vers {vers} proc {proc}\n"
            )),
            Some(RpcPeek { xid, call: None }) => {
                s.push_str(&format!("  rpc: REPLY xid 0x{xid:08x}\n"))
            }
            None => s.push_str("  rpc: (payload is not a plausible RPC header)\n"),
        }
    }
    if let Some(a) = hdr.answer() {
        s.push_str(&format!("  answer: {a}\n"));
    }
    // println! adds the final newline.
    s.trim_end().to_string()
}

fn seg(s: &Segment) -> Value {
    json!({"handle": s.handle, "length": s.length, "offset": s.offset})
}

fn put_chunks(o: &mut Map<String, Value>, c: Option<&ChunkLists>) {
    let empty = ChunkLists::empty();
    let c = c.unwrap_or(&empty);
    o.insert(
        "reads".into(),
        c.reads
            .iter()
            .map(|r| {
                json!({"position": r.position, "handle": r.target.handle,
                       "length": r.target.length, "offset": r.target.offset})
            })
            .collect(),
    );
    o.insert(
        "writes".into(),
        c.writes
            .iter()
            .map(|w| w.segments.iter().map(seg).collect::<Value>())
            .collect(),
    );
    o.insert(
        "reply".into(),
        match &c.reply {
            Some(w) => w.segments.iter().map(seg).collect(),
            None => Value::Null,
        },
    );
}

fn v1_error(e: &v1::RdmaError) -> Value {
    let code = e.code().0;
    match e {
        v1::RdmaError::Vers { low, high } => {
            json!({"code": code, "name": "ERR_VERS", "vers_low": low, "vers_high": high})
        }
        v1::RdmaError::Chunk => json!({"code": code, "name": "ERR_CHUNK"}),
        v1::RdmaError::Unknown { raw, .. } => {
            json!({"code": code, "name": "UNKNOWN", "raw": hex::encode(raw)})
        }
    }
}

fn v2_error(e: &v2::RdmaError) -> Value {
    let code = e.code();
    let mut o = Map::new();
    o.insert("code".into(), code.0.into());
    o.insert("name".into(), code.name().unwrap_or("UNKNOWN").into());
    match *e {
        v2::RdmaError::Vers { low, high } => {
            o.insert("vers_low".into(), low.into());
            o.insert("vers_high".into(), high.into());
        }
        v2::RdmaError::ReadChunks { max_chunks } | v2::RdmaError::WriteChunks { max_chunks } => {
            o.insert("max_chunks".into(), max_chunks.into());
        }
        v2::RdmaError::Segments { max_segments } => {
            o.insert("max_segments".into(), max_segments.into());
        }
        v2::RdmaError::WriteResource {
            chunk_index,
            length_needed,
        } => {
            o.insert("chunk_index".into(), chunk_index.into());
            o.insert("length_needed".into(), length_needed.into());
        }
        v2::RdmaError::ReplyResource { length_needed } => {
            o.insert("length_needed".into(), length_needed.into());
        }
        _ => {}
    }
    Value::Object(o)
}

fn prop(p: &v2::PropVal) -> Value {
    let id = p.id();
    let (name, value, default) = match p {
        v2::PropVal::Rbsiz(v) => ("RBSIZ", v.map_or(Value::Null, Value::from), v.is_none()),
        v2::PropVal::Brs(v) => (
            "BRS",
            v.map_or(Value::Null, |b| Value::from(b.name())),
            v.is_none(),
        ),
        v2::PropVal::Unknown { .. } => ("UNKNOWN", Value::Null, false),
    };
    json!({"id": id.0, "name": name, "value": value, "default": default,
           "raw": hex::encode(p.data())})
}

fn to_json(
    hdr: &TransportHeader,
    header_len: usize,
    payload_len: usize,
    rpc: Option<&RpcPeek>,
) -> Value {
    let mut o = Map::new();
    o.insert("version".into(), hdr.vers().into());
    o.insert("xid".into(), hdr.xid().into());
    o.insert("credits".into(), hdr.credit().into());
    let proc_name = match hdr {
        TransportHeader::V1(h) => h.proc().name(),
        TransportHeader::V2(h) => h.htype().name(),
        TransportHeader::UnknownVersion(_) => None,
    };
    o.insert("proc".into(), proc_name.unwrap_or("UNKNOWN").into());
    o.insert("proc_code".into(), hdr.proc_code().into());
    let mut error = Value::Null;
    match hdr {
        TransportHeader::V1(h) => {
            put_chunks(&mut o, h.body.chunks());
            match &h.body {
                v1::Body::Msgp(m) => {
                    o.insert("align".into(), m.align.into());
                    o.insert("thresh".into(), m.thresh.into());
                }
                v1::Body::Error(e) => error = v1_error(e),
                v1::Body::Unknown { raw, .. } => {
                    o.insert("raw".into(), hex::encode(raw).into());
                }
                _ => {}
            }
        }
        TransportHeader::V2(h) => {
            o.insert("flags".into(), h.flags.0.into());
            match &h.body {
                v2::Body::Msg(c) | v2::Body::Nomsg(c) => {
                    o.insert("inv_handle".into(), c.inv_handle.into());
                    put_chunks(&mut o, Some(&c.lists));
                }
                other => {
                    put_chunks(&mut o, None);
                    match other {
                        v2::Body::Error(e) => error = v2_error(e),
                        v2::Body::Connprop(p) => {
                            o.insert("props".into(), p.props.iter().map(prop).collect());
                        }
                        v2::Body::Unknown { raw, .. } => {
                            o.insert("raw".into(), hex::encode(raw).into());
                        }
                        _ => {}
                    }
                }
            }
        }
        TransportHeader::UnknownVersion(u) => {
            put_chunks(&mut o, None);
            o.insert("raw".into(), hex::encode(&u.rest).into());
        }
    }
    o.insert("rdma_error".into(), error);
    o.insert(
        "rpc".into(),
        match rpc {
            Some(RpcPeek { xid, call }) => {
                let (dir, prog, vers, proc) = match call {
                    Some((p, v, c)) => ("CALL", json!(p), json!(v), json!(c)),
                    None => ("REPLY", Value::Null, Value::Null, Value::Null),
                };
                json!({"xid": xid, "direction": dir, "prog": prog, "vers": vers, "proc": proc})
            }
            None => Value::Null,
        },
    );
    o.insert(
        "answer".into(),
        hdr.answer().map_or(Value::Null, |a| a.name().into()),
    );
    o.insert("header_len".into(), header_len.into());
    o.insert("payload_len".into(), payload_len.into());
    Value::Object(o)
}
