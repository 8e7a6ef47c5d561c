//! `rpcrdma decode --what header` end to end: the built binary on the
//! sample messages in `crates/rpcrdma-proto/test_samples/`, and on
//! malformed input (exit 2 with one JSON error object, never a panic).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../rpcrdma-proto/test_samples");

fn sample_path(name: &str) -> String {
    format!("{SAMPLES}/{name}.hex")
}

/// The sample's octets, parsed here independently of the CLI.
fn sample_bytes(name: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(sample_path(name)).unwrap();
    let hex: String = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    hex::decode(hex).unwrap()
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// `rpcrdma decode --json FILE` on a sample: exit 0 and one JSON object.
fn decode_sample(name: &str) -> Value {
    let out = run(&["decode", "--json", &sample_path(name)], b"");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim().lines().count(), 1, "{name}: one line of JSON");
    serde_json::from_str(&text).unwrap()
}

/// Decoding hex `input` from stdin with `--json` fails cleanly: exit 2 and
/// a JSON error object (never exit 101, the panic status).
fn assert_malformed(input: &[u8], what: &str) -> Value {
    let out = run(&["decode", "--json", "-"], input);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The tool's failure object: {"ok": false, "error": {kind, op, message, offset}}.
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false, "{what}: {v}");
    let e = v["error"].clone();
    assert!(e["kind"].is_string(), "{what}: {v}");
    assert_eq!(e["op"], "decode", "{what}: {v}");
    assert!(e["offset"].is_u64(), "{what}: {v}");
    assert!(e["message"].is_string(), "{what}: {v}");
    e
}

fn hex_of(b: &[u8]) -> Vec<u8> {
    hex::encode(b).into_bytes()
}

#[test]
fn v1_msg_with_write_chunk() {
    let v = decode_sample("v1_msg_write_chunk");
    assert_eq!(v["version"], 1);
    assert_eq!(v["xid"], 0x1a2b3c4d);
    assert_eq!(v["credits"], 128);
    assert_eq!(v["proc"], "RDMA_MSG");
    assert_eq!(v["proc_code"], 0);
    assert_eq!(v["reads"], serde_json::json!([]));
    assert_eq!(
        v["writes"],
        serde_json::json!([[{"handle": 0x1234, "length": 8192, "offset": 0x7f00_dead_0000u64}]])
    );
    assert_eq!(v["reply"], Value::Null);
    assert_eq!(v["rdma_error"], Value::Null);
    assert_eq!(
        v["rpc"],
        serde_json::json!({"xid": 0x1a2b3c4d, "direction": "CALL", "prog": 100003, "vers": 3, "proc": 6})
    );
    assert_eq!(v["header_len"], 52);
    assert_eq!(v["payload_len"], 40);
    assert!(v.get("flags").is_none(), "flags is v2 only");
}

#[test]
fn v1_nomsg_with_pzrc_and_reply_chunk() {
    let v = decode_sample("v1_nomsg_pzrc_reply");
    assert_eq!(v["proc"], "RDMA_NOMSG");
    assert_eq!(
        v["reads"],
        serde_json::json!([
            {"position": 0, "handle": 0x11, "length": 4096, "offset": 0x1000},
            {"position": 0, "handle": 0x12, "length": 600, "offset": 0x2000}
        ])
    );
    assert_eq!(v["writes"], serde_json::json!([]));
    assert_eq!(
        v["reply"],
        serde_json::json!([{"handle": 0x21, "length": 8192, "offset": 0x9000}])
    );
    assert_eq!(v["rpc"], Value::Null);
    assert_eq!(v["header_len"], 96);
    assert_eq!(v["payload_len"], 0);
}

#[test]
fn v1_other_shapes() {
    let v = decode_sample("v1_msgp");
    assert_eq!(v["proc"], "RDMA_MSGP");
    assert_eq!(v["align"], 4096);
    assert_eq!(v["thresh"], 1024);
    assert_eq!(v["rpc"]["direction"], "REPLY");
    assert_eq!(v["rpc"]["prog"], Value::Null);

    assert_eq!(decode_sample("v1_done")["proc"], "RDMA_DONE");

    let v = decode_sample("v1_error_vers");
    assert_eq!(
        v["rdma_error"],
        serde_json::json!({"code": 1, "name": "ERR_VERS", "vers_low": 1, "vers_high": 1})
    );
    let v = decode_sample("v1_error_chunk");
    assert_eq!(v["rdma_error"]["name"], "ERR_CHUNK");
    let v = decode_sample("v1_error_unknown");
    assert_eq!(v["rdma_error"]["name"], "UNKNOWN");
    assert_eq!(v["rdma_error"]["code"], 7);

    let v = decode_sample("v1_unknown_proc");
    assert_eq!(v["proc"], "UNKNOWN");
    assert_eq!(v["proc_code"], 9);
    assert_eq!(v["answer"], "RDMA_ERROR/ERR_CHUNK");
}

#[test]
fn v2_msg_and_nomsg() {
    let v = decode_sample("v2_msg_call");
    assert_eq!(v["version"], 2);
    assert_eq!(v["proc"], "RDMA2_MSG");
    assert_eq!(v["flags"], 0);
    assert_eq!(v["inv_handle"], 0x1234);
    assert_eq!(v["rpc"]["vers"], 4);
    assert_eq!(v["rpc"]["proc"], 1);
    let v = decode_sample("v2_nomsg_reply");
    assert_eq!(v["proc"], "RDMA2_NOMSG");
    assert_eq!(v["flags"], 1);
    assert_eq!(v["inv_handle"], 0);
    assert_eq!(v["reply"][0]["handle"], 0x77);
}

#[test]
fn v2_connprop_rbsiz_brs_unknown() {
    let v = decode_sample("v2_connprop");
    assert_eq!(v["proc"], "RDMA2_CONNPROP");
    assert_eq!(v["proc_code"], 5);
    let props = v["props"].as_array().unwrap();
    assert_eq!(props.len(), 3);
    assert_eq!(props[0]["id"], 1);
    assert_eq!(props[0]["name"], "RBSIZ");
    assert_eq!(props[0]["value"], 8192);
    assert_eq!(props[0]["raw"], "00002000");
    assert_eq!(props[1]["name"], "BRS");
    assert_eq!(props[1]["value"], "RDMA2_RVREQSUP_GENL");
    assert_eq!(props[2]["id"], 0x99);
    assert_eq!(props[2]["name"], "UNKNOWN");
    assert_eq!(props[2]["value"], Value::Null);
    assert_eq!(props[2]["raw"], "0102030405");

    let v = decode_sample("v2_connprop_defaults");
    let props = v["props"].as_array().unwrap();
    assert_eq!(props[0]["value"], Value::Null);
    assert_eq!(props[0]["default"], true);
    assert_eq!(props[1]["value"], Value::Null);
}

#[test]
fn v2_error_every_code() {
    // (sample suffix, code, name, arm fields)
    type Case = (
        &'static str,
        u32,
        &'static str,
        &'static [(&'static str, u64)],
    );
    let cases: [Case; 10] = [
        (
            "vers",
            1,
            "RDMA2_ERR_VERS",
            &[("vers_low", 1), ("vers_high", 2)],
        ),
        ("bad_xdr", 2, "RDMA2_ERR_BAD_XDR", &[]),
        ("inval_htype", 3, "RDMA2_ERR_INVAL_HTYPE", &[]),
        (
            "read_chunks",
            4,
            "RDMA2_ERR_READ_CHUNKS",
            &[("max_chunks", 1)],
        ),
        (
            "write_chunks",
            5,
            "RDMA2_ERR_WRITE_CHUNKS",
            &[("max_chunks", 2)],
        ),
        ("segments", 6, "RDMA2_ERR_SEGMENTS", &[("max_segments", 16)]),
        (
            "write_resource",
            7,
            "RDMA2_ERR_WRITE_RESOURCE",
            &[("chunk_index", 1), ("length_needed", 8192)],
        ),
        (
            "reply_resource",
            8,
            "RDMA2_ERR_REPLY_RESOURCE",
            &[("length_needed", 65536)],
        ),
        ("system", 9, "RDMA2_ERR_SYSTEM", &[]),
        ("unknown", 42, "UNKNOWN", &[]),
    ];
    for (file, code, name, fields) in cases {
        let v = decode_sample(&format!("v2_error_{file}"));
        assert_eq!(v["proc"], "RDMA2_ERROR", "{file}");
        assert_eq!(v["flags"], 1, "{file}");
        let e = v["rdma_error"].as_object().unwrap();
        assert_eq!(e["code"], code, "{file}");
        assert_eq!(e["name"], name, "{file}");
        assert_eq!(e.len(), 2 + fields.len(), "{file}: {e:?}");
        for (k, want) in fields {
            assert_eq!(e[*k], *want, "{file}.{k}");
        }
    }
}

#[test]
fn unknown_htype_and_version() {
    let v = decode_sample("v2_unknown_htype");
    assert_eq!(v["proc"], "UNKNOWN");
    assert_eq!(v["proc_code"], 7);
    assert_eq!(v["raw"], "deadbeef");
    assert_eq!(v["answer"], "RDMA2_ERROR/RDMA2_ERR_INVAL_HTYPE");
    let v = decode_sample("unknown_version");
    assert_eq!(v["version"], 3);
    assert_eq!(v["proc"], "UNKNOWN");
    assert_eq!(v["answer"], "RDMA_ERROR/ERR_VERS");
}

#[test]
fn tree_output() {
    let out = run(&["decode", &sample_path("v2_connprop")], b"");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("RDMA2_CONNPROP"), "{text}");
    assert!(text.contains("RDMA2_RVREQSUP_GENL"), "{text}");
    let out = run(
        &["decode", "--what", "header", "-"],
        &hex_of(&sample_bytes("v1_msg_write_chunk")),
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("write list: 1 chunk(s)"), "{text}");
    assert!(text.contains("prog 100003 vers 3 proc 6"), "{text}");
    // Malformed without --json: exit 2, message on stderr.
    let out = run(&["decode", "-"], b"00000001");
    assert_eq!(out.status.code(), Some(2));
    assert!(!out.stderr.is_empty());
}

#[test]
fn raw_input() {
    let b = sample_bytes("v1_done");
    let out = run(&["decode", "--raw", "--json", "-"], &b);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["proc"], "RDMA_DONE");
}

#[test]
fn truncated_samples_exit_2() {
    for name in [
        "v1_msg_write_chunk",
        "v1_nomsg_pzrc_reply",
        "v1_error_vers",
        "v2_msg_call",
        "v2_connprop",
        "v2_error_write_resource",
    ] {
        let b = sample_bytes(name);
        // Short of the fixed prefix, then a few cuts inside the header.
        for cut in [0, 3, 15, 17, 21, 27, 30, 41] {
            if cut < b.len() {
                let v = assert_malformed(&hex_of(&b[..cut]), &format!("{name}[..{cut}]"));
                if cut < 16 {
                    assert_eq!(v["kind"], "truncated");
                }
            }
        }
    }
}

#[test]
fn every_truncation_exits_2() {
    for name in ["v1_nomsg_pzrc_reply", "v2_connprop"] {
        let b = sample_bytes(name);
        for cut in 0..b.len() {
            assert_malformed(&hex_of(&b[..cut]), &format!("{name}[..{cut}]"));
        }
    }
}

#[test]
fn malformed_inputs_exit_2() {
    let cases: [(&str, &str, &str); 9] = [
        // read list discriminant 2
        ("00000001 00000001 00000001 00000000 00000002 00000000 00000000", "bad-optional", "optional 2"),
        ("00000001 00000001 00000001 00000000 ffffffff 00000000 00000000", "bad-optional", "optional ffffffff"),
        // trailing bytes after RDMA_DONE and RDMA2_CONNPROP
        ("00000004 00000001 00000001 00000003 00000000", "trailing-bytes", "DONE + 4"),
        ("00000001 00000002 00000001 00000005 00000000 00000000 00000000", "trailing-bytes", "CONNPROP + 4"),
        // write chunk with 0xffffffff segments
        ("00000001 00000001 00000001 00000000 00000000 00000001 ffffffff", "limit-exceeded", "segment count"),
        // reply segment offset + length overflows
        ("00000001 00000001 00000001 00000001 00000000 00000000 00000001 00000001 00000005 00000010 ffffffff fffffff8", "overflow", "offset+length"),
        // BRS value 3
        ("00000001 00000002 00000001 00000005 00000000 00000001 00000002 00000004 00000003", "bad-value", "BRS 3"),
        // RBSIZ with 8 octets
        ("00000001 00000002 00000001 00000005 00000000 00000001 00000001 00000008 00001000 00000000", "trailing-bytes", "RBSIZ 8 octets"),
        // not hex at all
        ("zz", "bad-hex", "bad hex"),
    ];
    for (input, kind, what) in cases {
        let v = assert_malformed(input.as_bytes(), what);
        assert_eq!(v["kind"], kind, "{what}: {v}");
    }
    let v = assert_malformed(
        b"00000001 00000002 00000001 00000005 00000000 00000001 00000002 00000004 00000003",
        "BRS answer",
    );
    assert!(
        v["message"].as_str().unwrap().contains("RDMA2_ERR_BAD_XDR"),
        "{v}"
    );
}
