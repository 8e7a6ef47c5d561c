//! The tool's conventions (README, "Scripting: JSON output and exit
//! codes"), one test per point of issue 15 (items 1, 2, 6, 7): sizes and
//! hex numbers on every option, one `--max-message` limit checked up
//! front, one failure object, exit status 0 / 1 / 2.

use std::time::Duration;

use serde_json::Value;

mod common;
use common::{json_lines, serve};

fn run(args: &[&str]) -> std::process::Output {
    common::run_within(args, Duration::from_secs(60))
}

/// Asserts the failure object `{"ok": false, "error": {kind, op, message}}`
/// on the last line and the exit status; returns the error object.
fn failure(o: &std::process::Output, code: i32, kind: &str) -> Value {
    assert_eq!(o.status.code(), Some(code), "{o:?}");
    let v = json_lines(o);
    let last = v.last().unwrap_or_else(|| panic!("no JSON: {o:?}")).clone();
    assert_eq!(last["ok"], false, "{last}");
    let e = last["error"].clone();
    assert_eq!(e["kind"], kind, "{last}");
    assert!(e["op"].is_string() && e["message"].is_string(), "{last}");
    e
}

/// Item 1: the README's example with `--size 1M`; K/KiB/M suffixes on
/// size options of every command; hex on program and number options.
#[test]
fn sizes_take_suffixes_and_numbers_take_hex() {
    let s = serve(&[
        "--inline-send",
        "4KiB",
        "--inline-recv",
        "4K",
        "--max-message",
        "4MiB",
    ]);
    let o = run(&["call", &s.addr, "--proc", "read", "--size", "1M", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["bytes"], 1 << 20, "{v}");
    let o = run(&[
        "call", &s.addr, "--proc", "write", "--size", "64KiB", "--seed", "0x10", "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(json_lines(&o)[0]["bytes"], 64 << 10);
    // The test program, in hex as `probe` prints it.
    let o = run(&[
        "call",
        &s.addr,
        "--prog",
        "0x20005244",
        "--vers",
        "0x1",
        "--procnum",
        "0x0",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(json_lines(&o)[0]["prog"], 0x2000_5244);
    let o = run(&["probe", &s.addr, "--prog", "0x20005244", "--json"]);
    assert!(o.status.success(), "{o:?}");
    // bench: --size and --sweep alike.
    let o = run(&[
        "bench", "--proc", "echo", "--size", "2KiB", "--count", "3", "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(json_lines(&o)[0]["size"], 2048);
    // A bad size is bad usage (2), with the accepted forms named.
    let o = run(&["call", &s.addr, "--size", "1T"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("4K"), "{o:?}");
    let o = run(&["call", &s.addr, "--prog", "0xzz", "--procnum", "0"]);
    assert_eq!(o.status.code(), Some(2));
    // Help shows the defaults as sizes.
    let h = String::from_utf8_lossy(&run(&["call", "--help"]).stdout).to_string();
    assert!(
        h.contains("--max-message <SIZE>") && h.contains("[default: 4M]"),
        "{h}"
    );
}

/// Item 2: one limit, `--max-message`, checked before connecting, naming
/// the option to raise; raised on both sides, the call goes through.
#[test]
fn one_message_limit_checked_up_front() {
    // Nobody listens on port 1: the check comes first (2, not a connect
    // failure).
    let o = run(&[
        "call",
        "127.0.0.1:1",
        "--proc",
        "write",
        "--size",
        "16777216",
        "--json",
    ]);
    let e = failure(&o, 2, "too-large");
    assert_eq!(e["option"], "--max-message", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("raise --max-message"),
        "{e}"
    );
    // Over the test program's own limit: names --size.
    let o = run(&[
        "call",
        "127.0.0.1:1",
        "--size",
        "17M",
        "--max-message",
        "32M",
        "--json",
    ]);
    let e = failure(&o, 2, "usage");
    assert_eq!(e["option"], "--size", "{e}");
    // bench: the same check, not a failed "first NULL call".
    let o = run(&["bench", "--proc", "write", "--size", "4M", "--count", "2"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--max-message") && !err.contains("NULL"),
        "{err}"
    );
    // Raised (the in-process server takes it too): 4 MiB writes work.
    let o = run(&[
        "bench",
        "--proc",
        "write",
        "--size",
        "4M",
        "--count",
        "2",
        "--max-message",
        "5M",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(json_lines(&o)[0]["errors"], 0);
    // Client raised, server not: the call fails, as a call (1), and says
    // what failed.
    let s = serve(&[]);
    let o = run(&[
        "call",
        &s.addr,
        "--proc",
        "write",
        "--size",
        "4M",
        "--max-message",
        "5M",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["error"]["op"], "call", "{v}");
    let s2 = serve(&["--max-message", "5M"]);
    let o = run(&[
        "call",
        &s2.addr,
        "--proc",
        "write",
        "--size",
        "4M",
        "--max-message",
        "5M",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
}

/// Item 6: one failure object for every command, the same names.
#[test]
fn every_failure_prints_the_error_object() {
    // decode of a missing file: bad input.
    let o = run(&["decode", "--json", "/nonexistent/x.hex"]);
    let e = failure(&o, 2, "io");
    assert_eq!(e["op"], "read-file");
    let o = run(&["decode", "--json", "--pcap", "/nonexistent/x.pcap"]);
    failure(&o, 2, "io");
    // Connection refused: call, probe, bench alike (1).
    for cmd in [
        vec!["call", "127.0.0.1:1", "--json"],
        vec!["probe", "127.0.0.1:1", "--json"],
        vec!["bench", "127.0.0.1:1", "--count", "1", "--json"],
    ] {
        let o = run(&cmd);
        let e = failure(&o, 1, "connect");
        assert_eq!(e["op"], "connect", "{cmd:?}");
    }
    // A bad address is bad input (2).
    for cmd in [
        vec!["call", "no-such-host.invalid:1", "--json"],
        vec!["probe", "no-such-host.invalid:1", "--json"],
    ] {
        failure(&run(&cmd), 2, "bad-address");
    }
    // call: proc is the number, proc_name the name.
    let s = serve(&[]);
    let o = run(&["call", &s.addr, "--proc", "echo", "--size", "8", "--json"]);
    let v = &json_lines(&o)[0];
    assert_eq!(
        (&v["proc"], &v["proc_name"]),
        (&Value::from(1), &Value::from("echo"))
    );
    let o = run(&["call", &s.addr, "--procnum", "0", "--json"]);
    let v = &json_lines(&o)[0];
    assert_eq!(
        (&v["proc"], &v["proc_name"]),
        (&Value::from(0), &Value::Null)
    );
    // probe and decode name the RFC 6581 header alike.
    let o = run(&["probe", &s.addr, "--json"]);
    let v = &json_lines(&o)[0];
    assert_eq!(v["ok"], true);
    assert!(v["error"].is_null());
    let io = &v["local_private_data"]["ird_ord"];
    for k in [
        "ird",
        "ord",
        "peer_to_peer",
        "rtr_send",
        "rtr_write",
        "rtr_read",
    ] {
        assert!(io.get(k).is_some(), "{k}: {v}");
    }
}

/// Item 7: exit codes, `--crc` / `--no-crc` everywhere, bench's link
/// options, `call --args-hex` with the result in hex.
#[test]
fn options_and_exit_codes() {
    let s = serve(&["--crc"]);
    // PROG_UNAVAIL is a failed operation: probe says what was negotiated
    // and exits 1.
    let o = run(&["probe", &s.addr, "--prog", "12345", "--json", "--crc"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["ok"], false);
    assert_eq!(v["rpc_status"], "PROG_UNAVAIL");
    assert_eq!(v["error"]["kind"], "rpc");
    assert_eq!(v["crc"], true);
    // --args-hex: ECHO of the 3 octets "abc" (XDR opaque), result in hex.
    let o = run(&[
        "call",
        &s.addr,
        "--crc",
        "--procnum",
        "1",
        "--args-hex",
        "00000003 61626300",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["result_hex"], "0000000361626300", "{v}");
    let o = run(&[
        "call",
        &s.addr,
        "--crc",
        "--procnum",
        "1",
        "--args-hex",
        "00000003 61626300",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("result (8 octets): 0000000361626300"));
    // Not whole XDR units: bad usage.
    let o = run(&[
        "call",
        &s.addr,
        "--procnum",
        "1",
        "--args-hex",
        "616263",
        "--json",
    ]);
    failure(&o, 2, "bad-hex");
    // bench takes the link options of call and serve.
    let o = run(&[
        "bench",
        "--count",
        "5",
        "--crc",
        "--credits",
        "16",
        "--inline-send",
        "2K",
        "--inline-recv",
        "2K",
        "--mpa-rev",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let p = &json_lines(&o)[0]["params"];
    assert_eq!(
        (&p["crc"], &p["mpa_rev"]),
        (&Value::from(true), &Value::from(1)),
        "{p}"
    );
    assert_eq!(p["inline_send"], 2048, "{p}");
    // --crc with TCP is bad usage.
    let o = run(&[
        "bench",
        "--transport",
        "tcp",
        "--crc",
        "--count",
        "1",
        "--json",
    ]);
    failure(&o, 2, "usage");
    // Clap's own errors are 2 as well.
    assert_eq!(run(&["call"]).status.code(), Some(2));
}

/// Item 7: `decode` without `--what` decodes RFC 8797 private data or an
/// RPC message as what it is (saying so on standard error), or suggests
/// `--what` instead of "truncated at offset 0" alone.
#[test]
fn decode_detects_the_kind_or_suggests_what() {
    let pd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/linux_private_data.hex"
    );
    let o = run(&["decode", "--json", pd]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["found"], true, "{v}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--what private-data"));
    let dir = std::env::temp_dir().join(format!("rpcrdma-decode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An RPC call header (NULL of program 100003 v3, AUTH_NONE).
    let rpc = dir.join("rpc.hex");
    std::fs::write(
        &rpc,
        "00000001 00000000 00000002 000186a3 00000003 00000000 00000000 00000000 00000000 00000000",
    )
    .unwrap();
    let o = run(&["decode", "--json", rpc.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(json_lines(&o)[0]["prog"], 100003);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--what rpc"));
    // Neither: the failure suggests --what.
    let bad = dir.join("bad.hex");
    std::fs::write(&bad, "0001").unwrap();
    let o = run(&["decode", "--json", bad.to_str().unwrap()]);
    let e = failure(&o, 2, "truncated");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("--what private-data"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
