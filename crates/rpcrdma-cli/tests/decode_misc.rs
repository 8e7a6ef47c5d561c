//! `rpcrdma decode --what private-data|rpc` end to end: the binary, hex on
//! stdin or in a file, exit codes and the JSON printed.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

fn samples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rpcrdma-proto/test_samples")
}

fn run_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .arg("decode")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn run_file(args: &[&str], file: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .arg("decode")
        .args(args)
        .arg(samples().join(file))
        .output()
        .expect("run rpcrdma")
}

fn json_of(out: &Output) -> Value {
    let s = String::from_utf8(out.stdout.clone()).unwrap();
    let mut lines = s.lines();
    let v: Value = serde_json::from_str(lines.next().expect("one line")).expect("JSON");
    assert_eq!(lines.next(), None, "exactly one JSON object: {s}");
    v
}

#[test]
fn linux_client_private_data_json() {
    let out = run_stdin(
        &["--what", "private-data", "--json"],
        b"00800000 f6ab0e18 01 01 03 03\n",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = json_of(&out);
    assert_eq!(v["found"], json!(true));
    assert_eq!(v["offset"], json!(4));
    assert_eq!(v["version"], json!(1));
    assert_eq!(v["remote_invalidate"], json!(true));
    assert_eq!(v["send_size"], json!(4096));
    assert_eq!(v["receive_size"], json!(4096));
    assert_eq!(
        v["ird_ord"],
        json!({"ird": 128, "ord": 0, "peer_to_peer": false, "rtr_send": false,
               "rtr_write": false, "rtr_read": false})
    );
}

#[test]
fn linux_server_private_data_json_from_file() {
    let out = run_file(&["--what", "private-data", "--json"], "pd_linux_server.hex");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = json_of(&out);
    assert_eq!(v["found"], json!(true));
    assert_eq!(v["offset"], json!(4));
    assert_eq!(v["remote_invalidate"], json!(false));
    assert_eq!(v["send_size"], json!(4096));
    assert_eq!(v["receive_size"], json!(4096));
    assert_eq!(v["ird_ord"]["ord"], json!(128));
}

#[test]
fn private_data_absent_and_unknown_version() {
    let out = run_file(&["--what", "private-data", "--json"], "pd_absent.hex");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json_of(&out),
        json!({"found": false, "offset": null, "version": null, "remote_invalidate": false,
               "send_size": 1024, "receive_size": 1024})
    );
    let out = run_file(
        &["--what", "private-data", "--json"],
        "pd_unknown_version.hex",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        json_of(&out),
        json!({"found": false, "offset": 0, "version": 2, "remote_invalidate": false,
               "send_size": 1024, "receive_size": 1024})
    );
    // Empty input: nothing found, still exit 0.
    let out = run_stdin(&["--what", "private-data", "--json"], b"");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out)["found"], json!(false));
}

#[test]
fn private_data_tree() {
    let out = run_file(&["--what", "private-data"], "pd_linux_client.hex");
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("MPA v2 (RFC 6581) IRD 128 ORD 0"), "{s}");
    assert!(s.contains("found at offset 4"), "{s}");
    assert!(s.contains("send size: 4096 (code 3)"), "{s}");
}

#[test]
fn rpc_call_auth_sys_json() {
    let out = run_file(
        &["--what", "rpc", "--json"],
        "rpc_call_getattr_auth_sys.hex",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        json_of(&out),
        json!({
            "xid": 0xdeadbeef_u32, "direction": "CALL", "rpcvers": 2, "prog": 100003,
            "vers": 3, "proc": 1,
            "cred": {"flavor": 1, "name": "AUTH_SYS", "length": 36, "stamp": 0x5f5e1000,
                     "machinename": "client", "uid": 1000, "gid": 100, "gids": [100, 10]},
            "verf": {"flavor": 0, "name": "AUTH_NONE", "length": 0, "body": ""},
            "header_len": 76, "body_len": 12
        })
    );
}

#[test]
fn rpc_call_auth_none_json_and_tree() {
    let out = run_file(&["--what", "rpc", "--json"], "rpc_call_null_auth_none.hex");
    assert_eq!(out.status.code(), Some(0));
    let v = json_of(&out);
    assert_eq!(v["cred"]["name"], json!("AUTH_NONE"));
    assert_eq!(
        (v["header_len"].clone(), v["body_len"].clone()),
        (json!(40), json!(0))
    );
    let out = run_file(&["--what", "rpc"], "rpc_call_null_auth_none.hex");
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("RPC CALL xid 0x00000001"), "{s}");
    assert!(s.contains("header_len 40"), "{s}");
}

#[test]
fn rpc_replies_json() {
    let v = json_of(&run_file(
        &["--what", "rpc", "--json"],
        "rpc_reply_success.hex",
    ));
    assert_eq!(v["direction"], json!("REPLY"));
    assert_eq!(v["reply_stat"], json!("MSG_ACCEPTED"));
    assert_eq!(v["accept_stat"], json!("SUCCESS"));
    assert_eq!(
        (v["header_len"].clone(), v["body_len"].clone()),
        (json!(24), json!(4))
    );

    let v = json_of(&run_file(
        &["--what", "rpc", "--json"],
        "rpc_reply_prog_mismatch.hex",
    ));
    assert_eq!(v["accept_stat"], json!("PROG_MISMATCH"));
    assert_eq!(v["mismatch"], json!({"low": 2, "high": 4}));

    let v = json_of(&run_file(
        &["--what", "rpc", "--json"],
        "rpc_reply_rpc_mismatch.hex",
    ));
    assert_eq!(v["reply_stat"], json!("MSG_DENIED"));
    assert_eq!(v["reject_stat"], json!("RPC_MISMATCH"));
    assert_eq!(v["mismatch"], json!({"low": 2, "high": 2}));

    let v = json_of(&run_file(
        &["--what", "rpc", "--json"],
        "rpc_reply_auth_error.hex",
    ));
    assert_eq!(v["reject_stat"], json!("AUTH_ERROR"));
    assert_eq!(v["auth_stat"], json!("RPCSEC_GSS_CREDPROBLEM"));

    // Unknown accept_stat is printed as its number.
    let out = run_stdin(
        &["--what", "rpc", "--json"],
        b"00000001 00000001 00000000 00000000 00000000 00000063",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json_of(&out)["accept_stat"], json!(99));
}

fn assert_malformed(out: &Output, kind: &str) -> Value {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v = json_of(out);
    assert_eq!(v["ok"], json!(false), "{v}");
    let e = v["error"].clone();
    assert_eq!(e["kind"], json!(kind), "{v}");
    assert!(e["offset"].is_u64(), "{v}");
    assert!(e["message"].is_string(), "{v}");
    e
}

#[test]
fn malformed_rpc_exits_2_with_json_error() {
    let v = assert_malformed(
        &run_file(&["--what", "rpc", "--json"], "rpc_bad_msg_type.hex"),
        "bad-value",
    );
    assert_eq!(v["offset"], json!(4));
    let v = assert_malformed(
        &run_file(&["--what", "rpc", "--json"], "rpc_bad_auth_sys_gids.hex"),
        "limit-exceeded",
    );
    assert_eq!(v["offset"], json!(48));
    assert_malformed(
        &run_file(&["--what", "rpc", "--json"], "rpc_bad_truncated.hex"),
        "truncated",
    );
    // Empty input.
    assert_malformed(&run_stdin(&["--what", "rpc", "--json"], b""), "truncated");
    // Without --json: exit 2, message on stderr, never a panic (101).
    let out = run_file(&["--what", "rpc"], "rpc_bad_msg_type.hex");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed"));
}

#[test]
fn rpc_never_panics_on_truncations_of_samples() {
    // Every prefix of a valid sample either decodes (exit 0) or is a
    // malformed-input error (exit 2): never a panic (101).
    let text = std::fs::read_to_string(samples().join("rpc_call_getattr_auth_sys.hex")).unwrap();
    let hex: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .collect();
    let bytes = hex::decode(hex).unwrap();
    for n in (0..bytes.len()).step_by(3) {
        let out = run_stdin(&["--what", "rpc", "--json", "--raw"], &bytes[..n]);
        let code = out.status.code();
        assert!(code == Some(0) || code == Some(2), "prefix {n}: {out:?}");
        if n < 76 {
            assert_malformed(&out, "truncated");
        }
    }
}
