//! `rpcrdma serve` / `call` / `probe` / `demo` end to end over loopback
//! software iWARP (127.0.0.1 only).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::serve;

/// Runs the tool with a time bound.
fn run(args: &[&str]) -> Output {
    common::run_within(args, Duration::from_secs(60))
}

fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// The test program's pattern, written from its documentation
/// (xorshift32 13/17/5, state emitted big-endian, seed 0 → 0x9e3779b9).
fn pattern(seed: u32, count: usize) -> Vec<u8> {
    let mut x = if seed == 0 { 0x9e37_79b9u32 } else { seed };
    let mut v = Vec::new();
    while v.len() < count {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.truncate(count);
    v
}

/// CRC-32C (Castagnoli), bitwise, reflected polynomial 0x82f63b78.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn reference_helpers_are_right() {
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(
        &pattern(1, 12)[..],
        &[0, 4, 0x20, 0x21, 4, 8, 6, 1, 0x9d, 0xcc, 0xa8, 0xc5]
    );
}

const CALL_KEYS: [&str; 14] = [
    "bytes",
    "crc32c",
    "elapsed_us",
    "error",
    "ok",
    "proc",
    "proc_name",
    "proc_stats",
    "prog",
    "result_hex",
    "rpc_status",
    "rpcrdma_version",
    "vers",
    "xid",
];

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn call_json_for_every_procedure() {
    let s = serve(&[]);
    let size = 1_000_003usize;
    let seed = 7u32;
    let expect = crc32c(&pattern(seed, size));
    for (proc, bytes) in [
        ("null", 0),
        ("echo", 70_001),
        ("read", size),
        ("write", size),
    ] {
        let size_s = bytes.to_string();
        let o = run(&[
            "call", &s.addr, "--proc", proc, "--size", &size_s, "--seed", "7", "--json",
        ]);
        assert!(o.status.success(), "{proc}: {o:?}");
        let v = json_lines(&o);
        assert_eq!(v.len(), 1);
        let v = &v[0];
        assert_eq!(keys(v), CALL_KEYS, "{proc}");
        assert_eq!(v["ok"], true, "{proc}: {v}");
        assert_eq!(v["proc_name"], proc);
        assert!(v["proc"].is_u64(), "{v}");
        assert_eq!(v["prog"], 0x2000_5244);
        assert_eq!(v["rpc_status"], "SUCCESS");
        assert!(v["error"].is_null());
        assert_eq!(v["bytes"], bytes as u64);
        assert!(v["xid"].is_u64() && v["elapsed_us"].is_u64());
        let want = match proc {
            "null" => 0, // CRC-32C of nothing
            "echo" => crc32c(&pattern(seed, bytes)),
            _ => expect,
        };
        assert_eq!(v["crc32c"], u64::from(want), "{proc}");
    }
    // --count: one object per call, consecutive XIDs.
    let o = run(&[
        "call", &s.addr, "--proc", "read", "--size", "5", "--count", "3", "--json",
    ]);
    assert!(o.status.success());
    let v = json_lines(&o);
    assert_eq!(v.len(), 3);
    let x0 = v[0]["xid"].as_u64().unwrap();
    for (i, c) in v.iter().enumerate() {
        assert_eq!(c["xid"].as_u64().unwrap(), (x0 + i as u64) & 0xffff_ffff);
        assert_eq!(c["crc32c"], u64::from(crc32c(&pattern(1, 5))));
    }
    // Text output names the outcome and ends with the mountstats line.
    let o = run(&["call", &s.addr, "--proc", "write", "--size", "64"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.starts_with("write: ok xid=0x"), "{t}");
    assert!(t.contains("xprt: rdma connects=1"), "{t}");
}

#[test]
fn call_rpc_errors_and_raw_calls() {
    let s = serve(&[]);
    for (args, status) in [
        (vec!["--prog", "12345", "--procnum", "0"], "PROG_UNAVAIL"),
        (vec!["--vers", "3", "--procnum", "0"], "PROG_MISMATCH"),
        (vec!["--procnum", "9"], "PROC_UNAVAIL"),
    ] {
        let mut a = vec!["call", s.addr.as_str(), "--json"];
        a.extend(args);
        let o = run(&a);
        assert_eq!(o.status.code(), Some(1), "{a:?}");
        let v = &json_lines(&o)[0];
        assert_eq!(keys(v), CALL_KEYS);
        assert_eq!(v["ok"], false);
        assert_eq!(v["rpc_status"], status);
        assert_eq!(v["error"]["kind"], "rpc", "{v}");
        assert_eq!(v["error"]["op"], "call", "{v}");
        assert_eq!(v["error"]["rpc_status"], status, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(status));
    }
    // A raw NULL-style call to the test program's NULL succeeds.
    let o = run(&[
        "call",
        &s.addr,
        "--prog",
        "536891972",
        "--procnum",
        "0",
        "--json",
    ]);
    assert!(o.status.success());
    let v = &json_lines(&o)[0];
    assert_eq!(
        (v["ok"].clone(), v["proc"].clone()),
        (Value::Bool(true), Value::from(0))
    );
    // Nobody listening: ok false, a connect error.
    let o = run(&["call", "127.0.0.1:1", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = &json_lines(&o)[0];
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["kind"], "connect", "{v}");
    assert_eq!(v["error"]["op"], "connect", "{v}");
}

const PROBE_KEYS: [&str; 23] = [
    "device",
    "error",
    "ok",
    "prog",
    "rpc_status",
    "vers",
    "inline_recv",
    "inline_send",
    "credits_granted",
    "crc",
    "ird",
    "local_private_data",
    "local_properties",
    "markers",
    "mpa_rev",
    "ord",
    "peer_private_data",
    "peer_properties",
    "provider",
    "remote_invalidate",
    "rpcrdma_version",
    "version",
    "version_fallback",
];

/// Version 1 (a client told to speak version 1; the server, in its default
/// `auto`, answers in the version of the client's first message).
#[test]
fn probe_json_defaults_and_options() {
    let s = serve(&[]);
    let o = run(&["probe", &s.addr, "--json", "--rpcrdma-version", "1"]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    let mut want: Vec<String> = PROBE_KEYS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(keys(v), want);
    assert_eq!(v["provider"], "iwarp");
    assert_eq!(v["device"], Value::Null);
    assert_eq!(v["version"], 1);
    assert_eq!(v["mpa_rev"], 2);
    assert_eq!(
        (v["crc"].clone(), v["markers"].clone()),
        (false.into(), false.into())
    );
    // The client reads nothing (ORD 0) and accepts 16 reads (IRD 16).
    assert_eq!((v["ird"].clone(), v["ord"].clone()), (16.into(), 0.into()));
    assert_eq!(v["inline_send"], 4096);
    assert_eq!(v["inline_recv"], 4096);
    assert_eq!(v["remote_invalidate"], false);
    assert_eq!(v["credits_granted"], 64);
    assert_eq!(v["rpcrdma_version"], 1);
    assert_eq!(v["version_fallback"], false);
    assert_eq!(v["local_properties"], serde_json::json!([]));
    assert_eq!(v["peer_properties"], serde_json::json!([]));
    let l = &v["local_private_data"];
    assert_eq!(l["found"], true);
    assert_eq!(l["remote_invalidate"], true);
    assert_eq!(l["ird_ord"]["ird"], 16);
    let p = &v["peer_private_data"];
    assert_eq!(p["found"], true);
    assert_eq!(p["remote_invalidate"], false);
    assert_eq!(
        (p["send_size"].clone(), p["receive_size"].clone()),
        (4096.into(), 4096.into())
    );
    // PROG_UNAVAIL still answers (and carries the grant).
    let o = run(&[
        "probe",
        &s.addr,
        "--prog",
        "7",
        "--json",
        "--rpcrdma-version",
        "1",
    ]);
    // PROG_UNAVAIL: the operation failed (1), what was negotiated is shown.
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(json_lines(&o)[0]["credits_granted"], 64);
    assert_eq!(json_lines(&o)[0]["rpc_status"], "PROG_UNAVAIL");

    // Non-default server: grant 32, receive size 2048, R set, CRC
    // required, MPA revision 1.
    let s2 = serve(&[
        "--credits",
        "32",
        "--inline-recv",
        "2048",
        "--remote-invalidate",
        "--crc",
        "--mpa-rev",
        "1",
    ]);
    let o = run(&[
        "probe",
        &s2.addr,
        "--json",
        "--crc",
        "--mpa-rev",
        "1",
        "--rpcrdma-version",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["credits_granted"], 32);
    assert_eq!(v["mpa_rev"], 1);
    assert_eq!(v["crc"], true);
    assert_eq!(v["inline_send"], 2048);
    assert_eq!(v["inline_recv"], 4096);
    assert_eq!(v["remote_invalidate"], true);
    assert!(v["peer_private_data"].get("ird_ord").is_none());
    // And calls work over it (CRC on every FPDU).
    let o = run(&[
        "call",
        &s2.addr,
        "--proc",
        "read",
        "--size",
        "300000",
        "--json",
        "--crc",
        "--mpa-rev",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        json_lines(&o)[0]["crc32c"],
        u64::from(crc32c(&pattern(1, 300_000)))
    );
}

#[test]
fn demo_exchanges_every_message_class() {
    let o = run(&["demo"]);
    assert!(o.status.success(), "{o:?}");
    let t = String::from_utf8_lossy(&o.stdout);
    for class in [
        "short call: NULL",
        "Read chunk: WRITE of 64 KiB",
        "Write chunk: READ of 64 KiB",
        "Long Call: ECHO",
        "Long Reply: READ",
        "backchannel call: the server calls CB_ECHO",
    ] {
        assert!(t.contains(class), "{class} missing:\n{t}");
    }
    // What went on the wire, decoded from the capture.
    for wire in [
        "RDMA_MSG",
        "RDMA_NOMSG",
        "Position-Zero Read chunk",
        "Read chunk (1 segment(s), 65536 octets)",
        "Write chunk (65536 octets)",
        "Reply chunk",
        "RDMA Read Request  65536 octets",
        "RDMA Write          65536 octets",
        "credits 64",
        "credits 128",
    ] {
        assert!(t.contains(wire), "{wire} missing:\n{t}");
    }
    // Then version 2: the CONNPROP exchange, the six classes again, a
    // backchannel call with chunks; and a fallback to version 1.
    for v2 in [
        "[v2.0] CONNPROP both ways",
        "RDMA2_CONNPROP",
        "RDMA2_MSG",
        "RDMA2_NOMSG",
        "[v2.7] backchannel with chunks (BRS GENL)",
        "RDMA Read Request  1048576 octets",
        "RDMA Write          1048576 octets",
        "[v2->v1] CONNPROP probe refused with ERR_VERS",
        "ERR_VERS in the version 1 layout",
        "rpcrdma_version 1 version_fallback true",
    ] {
        assert!(t.contains(v2), "{v2} missing:\n{t}");
    }
    assert_eq!(t.matches("result: ok").count(), 6 + 8 + 1, "{t}");
    assert!(t.contains("all message classes exchanged and checked"));
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rpcrdma-{}-{name}", std::process::id()))
}

#[test]
fn demo_pcap_decodes_with_rpcrdma_decode() {
    let path = tmp("demo.pcap");
    let p = path.to_str().unwrap();
    let o = run(&["demo", "--pcap", p]);
    assert!(o.status.success(), "{o:?}");
    let o = run(&["decode", "--pcap", p, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let items = json_lines(&o);
    assert!(items.iter().all(|v| v["frame"] != "error"), "{items:?}");
    let frames = |f: &str| items.iter().filter(|v| v["frame"] == f).count();
    // Three connections: version 1, version 2, the fallback.
    assert_eq!((frames("mpa-request"), frames("mpa-reply")), (3, 3));
    let all: Vec<&Value> = items.iter().filter(|v| v["frame"] == "send").collect();
    let first = all[0]["conn"].clone();
    // 5 forward calls + replies, 1 backchannel call + reply.
    let sends: Vec<&Value> = all.iter().copied().filter(|s| s["conn"] == first).collect();
    assert_eq!(sends.len(), 12);
    assert!(sends.iter().all(|s| s["header"]["version"] == 1));
    // The backchannel call and its reply are labelled backward (RFC 8167):
    // a CALL from the responder, a REPLY from the initiator.
    let chan = |c: &str| sends.iter().filter(|s| s["channel"] == c).count();
    // (The three RDMA_NOMSG messages carry no RPC header inline: null.)
    assert_eq!((chan("forward"), chan("backward")), (7, 2));
    for s in &sends {
        let rpc = &s["header"]["rpc"];
        if rpc.is_null() {
            assert!(s["channel"].is_null(), "{s}");
        } else {
            let backward = (rpc["direction"] == "CALL") == (s["from"] == "responder");
            assert_eq!(s["channel"] == "backward", backward, "{s}");
        }
    }
    // Version 2: both CONNPROPs and every message class in version 2;
    // the fallback's ERR_VERS recognised in the version 1 layout.
    let v2 = all.iter().filter(|s| s["header"]["version"] == 2).count();
    assert!(v2 >= 20, "{v2}");
    // The version 2 connection (the second) sends nothing but version 2:
    // its two CONNPROPs, RDMA2_MSG and RDMA2_NOMSG both ways, and the
    // server's reverse calls with a Write chunk and a Read chunk.
    let second = all
        .iter()
        .find(|s| s["conn"] != first)
        .map(|s| s["conn"].clone())
        .unwrap();
    let on2: Vec<&Value> = all
        .iter()
        .copied()
        .filter(|s| s["conn"] == second)
        .collect();
    assert!(on2.iter().all(|s| s["header"]["version"] == 2), "{on2:?}");
    let count = |p: &str| on2.iter().filter(|s| s["header"]["proc"] == p).count();
    assert_eq!(count("RDMA2_CONNPROP"), 2);
    assert!(count("RDMA2_NOMSG") >= 3 && count("RDMA2_MSG") >= 12);
    let reverse = |list: &str| {
        on2.iter().any(|s| {
            s["from"] == "responder"
                && s["header"]["rpc"]["direction"] == "CALL"
                && s["header"][list].as_array().is_some_and(|l| !l.is_empty())
        })
    };
    assert!(reverse("writes") && reverse("reads"), "{on2:?}");
    let connprops = all
        .iter()
        .filter(|s| s["header"]["proc"] == "RDMA2_CONNPROP")
        .count();
    assert_eq!(connprops, 3, "two on the v2 connection, the refused probe");
    assert!(all.iter().any(|s| s["header_error"]["message"]
        .as_str()
        .is_some_and(|d| d.contains("version 2 refused"))));
    let procs: Vec<&str> = sends
        .iter()
        .map(|s| s["header"]["proc"].as_str().unwrap())
        .collect();
    assert_eq!(procs.iter().filter(|p| **p == "RDMA_NOMSG").count(), 3);
    assert!(frames("read-request") >= 2 && frames("write") >= 3);
    let _ = std::fs::remove_file(&path);
}

/// Wireshark as an independent oracle (loud skip without tshark).
#[test]
fn demo_pcap_checked_by_tshark() {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("SKIPPED: tshark not installed; demo capture not checked by Wireshark");
        return;
    }
    let path = tmp("demo-tshark.pcap");
    let p = path.to_str().unwrap();
    // Version 1 only: Wireshark's rpcordma dissector knows no version 2.
    let o = run(&["demo", "--pcap", p, "--rpcrdma-version", "1"]);
    assert!(o.status.success(), "{o:?}");
    let opts = [
        "-2",
        "-o",
        "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
        "-r",
        p,
    ];
    let o = Command::new("tshark")
        .args(opts)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
            "-e",
            "iwarp_rdma.opcode",
            "-e",
            "rpcordma.msg_type",
            "-e",
            "rpc.xid",
            "-e",
            "rpc.msgtyp",
            "-e",
            "rpc.repframe",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .expect("tshark");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let mut opcodes = 0usize;
    let mut plain_sends = 0usize;
    let mut se_sends = 0usize;
    let mut decoded = 0usize;
    for l in text.lines() {
        let f: Vec<&str> = l.split('|').collect();
        assert!(f.get(5).is_none_or(|m| m.is_empty()), "malformed: {l}");
        let ops: Vec<&str> = f[0].split(',').filter(|s| !s.is_empty()).collect();
        opcodes += ops.len();
        // Wireshark 4.0's rpcordma heuristic takes Send / Send with
        // Invalidate only (not the Solicited Event variants).
        let plain = ops
            .iter()
            .filter(|o| **o == "0x03" || **o == "0x04")
            .count();
        plain_sends += plain;
        se_sends += ops
            .iter()
            .filter(|o| **o == "0x05" || **o == "0x06")
            .count();
        let msgs = f[1].split(',').filter(|s| !s.is_empty()).count();
        decoded += msgs;
        if plain > 0 {
            assert_eq!(msgs, plain, "Send not decoded as RPC-over-RDMA: {l}");
        }
    }
    assert!(opcodes >= 20, "every FPDU decoded as RDMAP:\n{text}");
    assert_eq!(plain_sends + se_sends, 12, "{text}");
    // Plain Sends only, as Linux posts them, so Wireshark's rpcordma
    // heuristic decodes every one of them.
    assert_eq!(se_sends, 0, "Solicited-Event Sends on the wire:\n{text}");
    assert_eq!(decoded, 12, "{text}");
    // Every RPC call decoded is matched to its reply.
    let calls = text
        .lines()
        .filter(|l| l.split('|').nth(3) == Some("0"))
        .count();
    let matched = text
        .lines()
        .filter(|l| {
            l.split('|').nth(3) == Some("0") && !l.split('|').nth(4).unwrap_or("").is_empty()
        })
        .count();
    assert_eq!(calls, matched, "{text}");
    let bad = Command::new("tshark")
        .args(opts)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        .output()
        .expect("tshark");
    assert!(
        String::from_utf8_lossy(&bad.stdout).trim().is_empty(),
        "{bad:?}"
    );
    let _ = std::fs::remove_file(&path);
}

/// Wireshark decodes every RPC-over-RDMA message of the demo and pairs
/// every RPC call with its reply.
#[test]
fn demo_pcap_rpcrdma_decoded_by_tshark() {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("SKIPPED: tshark not installed; demo capture not checked by Wireshark");
        return;
    }
    let path = tmp("demo-plain.pcap");
    let p = path.to_str().unwrap();
    // Version 1 only: Wireshark's rpcordma dissector knows no version 2.
    let o = run(&["demo", "--pcap", p, "--rpcrdma-version", "1"]);
    assert!(o.status.success(), "{o:?}");
    // The test program is unknown to Wireshark: let the RPC dissector
    // take it anyway.
    let opts = [
        "-2",
        "-o",
        "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
        "-o",
        "rpc.dissect_unknown_programs:TRUE",
        "-r",
        p,
    ];
    let o = Command::new("tshark")
        .args(opts)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
            "-e",
            "rpcordma.msg_type",
            "-e",
            "rpcordma.reads_count",
            "-e",
            "rpcordma.writes_count",
            "-e",
            "rpcordma.reply_count",
            "-e",
            "rpc.msgtyp",
            "-e",
            "rpc.repframe",
            "-e",
            "rpc.reqframe",
            "-e",
            "_ws.malformed",
        ])
        .output()
        .expect("tshark");
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    let msg_types: Vec<&str> = rows
        .iter()
        .flat_map(|r| r[0].split(',').filter(|s| !s.is_empty()))
        .collect();
    // 6 calls and 6 replies: RDMA_MSG (0) and RDMA_NOMSG (1).
    assert_eq!(msg_types.len(), 12, "{text}");
    assert_eq!(msg_types.iter().filter(|m| **m == "1").count(), 3, "{text}");
    assert!(rows.iter().all(|r| r[7].is_empty()), "malformed:\n{text}");
    // Wireshark sees the six RPC calls (the Read chunk and Long Call
    // bodies reassembled from the RDMA Read Responses) and links each one
    // to the frame of its reply; every reply it decodes links back.
    let link = |r: &Vec<&str>| !r[5].is_empty() || !r[6].is_empty();
    let calls: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[4].split(',').any(|m| m == "0"))
        .collect();
    let replies: Vec<&Vec<&str>> = rows
        .iter()
        .filter(|r| r[4].split(',').any(|m| m == "1"))
        .collect();
    assert_eq!(calls.len(), 6, "{text}");
    assert!(calls.iter().all(|r| link(r)), "unanswered call:\n{text}");
    assert!(replies.len() >= 5, "{text}");
    assert!(
        replies.iter().all(|r| link(r)),
        "reply without call:\n{text}"
    );
    let bad = Command::new("tshark")
        .args(opts)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        .output()
        .expect("tshark");
    assert!(
        String::from_utf8_lossy(&bad.stdout).trim().is_empty(),
        "{bad:?}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn serve_blocking_answers_every_procedure() {
    let s = serve(&["--blocking"]);
    let size = 300_001usize;
    for (proc, bytes) in [
        ("null", 0),
        ("echo", 9_000),
        ("read", size),
        ("write", size),
    ] {
        let size_s = bytes.to_string();
        let o = run(&[
            "call", &s.addr, "--proc", proc, "--size", &size_s, "--seed", "3", "--count", "2",
            "--json",
        ]);
        assert!(o.status.success(), "{proc}: {o:?}");
        let v = json_lines(&o);
        assert_eq!(v.len(), 2, "{proc}");
        for c in &v {
            assert_eq!(c["ok"], true, "{proc}: {c}");
            assert_eq!(c["bytes"], bytes as u64, "{proc}");
            let want = if bytes == 0 {
                0
            } else {
                crc32c(&pattern(3, bytes))
            };
            assert_eq!(c["crc32c"], u64::from(want), "{proc}");
        }
    }
}

/// `serve --help` reports the server-wide Read-sink budget, the RDMA Read
/// deadline and the idle timeout with their defaults; `--read-sink-budget`
/// takes effect (a call whose Read chunk can never fit it gets ERR_CHUNK,
/// a smaller one is served); bad timer values are refused.
#[test]
fn serve_read_budget_and_timers() {
    let o = run(&["serve", "--help"]);
    assert!(o.status.success());
    let h = String::from_utf8_lossy(&o.stdout);
    for want in [
        "--read-sink-budget <SIZE>",
        "[default: 128M]",
        "--read-timeout <SECS>",
        "[default: 30]",
        "--idle-timeout <SECS>",
        "[default: 15]",
    ] {
        assert!(h.contains(want), "{want:?} missing from:\n{h}");
    }
    let s = serve(&["--read-sink-budget", "1M", "--read-timeout", "5"]);
    let o = run(&[
        "call",
        &s.addr,
        "--proc",
        "write",
        "--size",
        "1500000",
        "--json",
        "--rpcrdma-version",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["ok"], false);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("RDMA_ERROR ERR_CHUNK"),
        "ERR_CHUNK expected: {v}"
    );
    // Version 2 says it is permanent (RDMA2_ERR_SYSTEM).
    let o = run(&[
        "call", &s.addr, "--proc", "write", "--size", "1500000", "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["rpcrdma_version"], 2);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("RDMA_ERROR RDMA2_ERR_SYSTEM"),
        "RDMA2_ERR_SYSTEM expected: {v}"
    );
    let o = run(&[
        "call", &s.addr, "--proc", "write", "--size", "1000000", "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    for bad in [
        ["--read-timeout", "-1"],
        ["--idle-timeout", "NaN"],
        ["--read-timeout", "x"],
    ] {
        let o = run(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "0",
            bad[0],
            bad[1],
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {o:?}");
    }
}

/// `call` against a server that accepts connections but never answers: the
/// major timeout (`--timeout`) ends each connection, the call goes out
/// again on a new one (`--retrans` times), then fails with an error that
/// says the peer never answered.
#[test]
fn call_to_a_silent_server_gives_up_after_the_retransmissions() {
    use rpcrdma_iwarp::cm::IwarpConfig;
    use rpcrdma_iwarp::tcp::Listener;
    let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let addr = l.local_addr().unwrap().to_string();
    // Accepts for a bounded time (until the call is over); keeps every
    // connection open, answers nothing. (A connection it closed would be a
    // transport loss, which does not use up a transmission.) It posts
    // receives before accepting, as a real responder does: accepting
    // processes what already arrived, and a call Send that arrived with no
    // receive posted would be answered with a Terminate (DDP untagged
    // buffer error, "no buffer available") — a connection loss, not a
    // timeout, so one more transmission (seen 1 in ~100 runs under load).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let over = done.clone();
    let silent = std::thread::spawn(move || {
        use rpcrdma_proto::provider::{Access, Provider, RecvWr};
        let mut kept = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end && !over.load(std::sync::atomic::Ordering::SeqCst) {
            let Ok(mut pc) = l.accept(Duration::from_millis(50)) else {
                continue;
            };
            let p = pc.provider_mut();
            for wr_id in 0..8 {
                let mr = p
                    .register(vec![0u8; 4096].into_boxed_slice(), Access::LOCAL_WRITE)
                    .unwrap();
                p.post_recv(RecvWr {
                    wr_id,
                    sge: mr.sge(0, 4096),
                })
                .unwrap();
            }
            kept.push(
                pc.accept(IwarpConfig::default(), Duration::from_secs(5))
                    .unwrap(),
            );
        }
        kept.len()
    });
    let t0 = Instant::now();
    // (Version 1: an auto client would first lose its version 2 probe
    // to the silent server, one more connection.)
    let o = run(&[
        "call",
        &addr,
        "--procnum",
        "0",
        "--timeout",
        "0.3",
        "--retrans",
        "1",
        "--json",
        "--rpcrdma-version",
        "1",
    ]);
    let took = t0.elapsed();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(!o.status.success());
    let v = json_lines(&o);
    let err = v[0]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("never answered") && err.contains("2 transmission"),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(silent.join().unwrap(), 2, "one connection per transmission");
}

/// `serve --help` shows the connection limits with their defaults.
#[test]
fn serve_help_shows_the_connection_limits() {
    let o = run(&["serve", "--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for (flag, default) in [
        ("--mpa-timeout <SECONDS>", "2"),
        ("--max-pending <N>", "512"),
        ("--max-pending-per-source <N>", "32"),
        ("--max-conns <N>", "1024"),
        ("--max-conns-per-source <N>", "64"),
    ] {
        // The flag's block: its line up to the next flag (clap puts the
        // help on the next lines once any option has a long help).
        let block: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(flag))
            .enumerate()
            .take_while(|(i, l)| *i == 0 || !l.trim_start().starts_with('-'))
            .map(|(_, l)| l)
            .collect();
        assert!(!block.is_empty(), "no {flag} in\n{help}");
        let want = format!("[default: {default}]");
        assert!(
            block.iter().any(|l| l.trim_end().ends_with(&want)),
            "{block:?}"
        );
    }
}

/// `serve --max-conns-per-source` and `--mpa-timeout` reach the server: a
/// second connection from 127.0.0.1 is rejected while one is held, and a
/// silent connection is closed after the MPA deadline.
#[test]
fn serve_connection_limit_flags_apply() {
    use rpcrdma_proto::provider::Provider;
    let s = serve(&["--max-conns-per-source", "1", "--mpa-timeout", "0.3"]);
    let addr: std::net::SocketAddr = s.addr.parse().unwrap();
    let cfg = rpcrdma_iwarp::manager::IwarpCm::default()
        .config_for(&rpcrdma_proto::engine::Config::client().connect_params());
    let mut held =
        rpcrdma_iwarp::tcp::IwarpProvider::connect_blocking(addr, cfg, Duration::from_secs(30))
            .expect("the first connection");
    let o = run(&["call", &s.addr, "--proc", "null"]);
    assert!(!o.status.success(), "a second connection was served: {o:?}");
    held.disconnect();
    drop(held);
    // The slot frees once the server has seen the close.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !run(&["call", &s.addr, "--proc", "null"]).status.success() {
        assert!(Instant::now() < deadline, "never served after the close");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    let mut silent = std::net::TcpStream::connect(addr).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // A signal interrupts a read with SO_RCVTIMEO even under SA_RESTART
    // (signal(7)): read again.
    let r = loop {
        match std::io::Read::read(&mut silent, &mut [0u8; 8]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    assert!(matches!(r, Ok(0)), "{r:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
}

/// RPC-over-RDMA version 2 (client and server default `auto`): the probe
/// reports the properties both ends advertised; against a version 1 server
/// an auto client falls back on the same connection and its second
/// connection (`--again`) starts in version 1; a version 2 only client
/// fails with an error that says why; `call --json` reports the version.
#[test]
fn probe_and_call_speak_version_2_by_default_and_fall_back() {
    let s = serve(&[]);
    let o = run(&["probe", &s.addr, "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v = &json_lines(&o)[0];
    assert_eq!(v["rpcrdma_version"], 2);
    assert_eq!(v["version_fallback"], false);
    assert_eq!(
        v["local_properties"],
        serde_json::json!([
            {"id": 1, "name": "RBSIZ", "value": 4096},
            {"id": 2, "name": "BRS", "value": "RDMA2_RVREQSUP_INLINE"}
        ])
    );
    assert_eq!(
        v["peer_properties"],
        serde_json::json!([
            {"id": 1, "name": "RBSIZ", "value": 4096},
            {"id": 2, "name": "BRS", "value": "RDMA2_RVREQSUP_GENL"}
        ])
    );
    assert_eq!(v["credits_granted"], 64);
    for proc in ["read", "write"] {
        let o = run(&[
            "call", &s.addr, "--proc", proc, "--size", "1000000", "--json",
        ]);
        assert!(o.status.success(), "{o:?}");
        let c = &json_lines(&o)[0];
        assert_eq!(c["rpcrdma_version"], 2);
        assert_eq!(c["crc32c"], u64::from(crc32c(&pattern(1, 1_000_000))));
    }

    let s1 = serve(&["--rpcrdma-version", "1"]);
    let o = run(&["probe", &s1.addr, "--json", "--again"]);
    assert!(o.status.success(), "{o:?}");
    let v = json_lines(&o);
    assert_eq!(v.len(), 2);
    assert_eq!(
        (
            v[0]["rpcrdma_version"].clone(),
            v[0]["version_fallback"].clone()
        ),
        (1.into(), true.into()),
        "the first connection fell back"
    );
    assert_eq!(
        (
            v[1]["rpcrdma_version"].clone(),
            v[1]["version_fallback"].clone()
        ),
        (1.into(), false.into()),
        "the second started in version 1"
    );
    assert_eq!(v[1]["local_properties"], serde_json::json!([]));
    let o = run(&["probe", &s1.addr, "--rpcrdma-version", "2"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("does not speak RPC-over-RDMA version 2"), "{e}");
    assert_eq!(e.matches("connection lost").count(), 1, "said once: {e}");
    // A version 2 only server refuses a version 1 client.
    let s2 = serve(&["--rpcrdma-version", "2"]);
    let o = run(&["call", &s2.addr, "--json", "--rpcrdma-version", "1"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let c = &json_lines(&o)[0];
    assert!(
        c["error"]["message"]
            .as_str()
            .unwrap()
            .contains("RDMA_ERROR ERR_VERS"),
        "{c}"
    );
}
