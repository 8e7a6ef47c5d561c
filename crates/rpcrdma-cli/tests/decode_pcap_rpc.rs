//! `rpcrdma decode --pcap` as Wireshark users read a capture: a time per
//! item, calls matched to replies with the procedure name and the service
//! response time (SRT), `--summary` (SRT per procedure like `tshark -z
//! rpc,srt`, message classes, chunk types) and the `--xid` / `--proc`
//! filters. SRTs are checked against the capture's own time stamps (read
//! here from the file, independently of the tool), the per-procedure call
//! counts against tshark (loud skip without it), and the demo's capture for
//! real time stamps.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const ORACLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../rpcrdma-iwarp/tests/data/oracle/v1_all_rev1_crc.pcap"
);

fn run(args: &[&str]) -> Output {
    common::run_within(args, Duration::from_secs(120))
}

fn ok_stdout(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

fn json_lines(args: &[&str]) -> Vec<Value> {
    ok_stdout(args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Time stamps (nanoseconds since the epoch) of the records of a classic
/// little-endian pcap file, by 1-based record number.
fn pcap_times(path: &str) -> Vec<u64> {
    let b = std::fs::read(path).unwrap();
    let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
    let frac_ns = match magic {
        0xa1b2_c3d4 => 1_000,
        0xa1b2_3c4d => 1,
        m => panic!("{path}: not a little-endian classic pcap (magic {m:#x})"),
    };
    let mut at = 24;
    let mut times = vec![0];
    while at + 16 <= b.len() {
        let w = |i: usize| {
            u64::from(u32::from_le_bytes(
                b[at + i..at + i + 4].try_into().unwrap(),
            ))
        };
        times.push(w(0) * 1_000_000_000 + w(4) * frac_ns);
        at += 16 + w(8) as usize;
    }
    times
}

/// Every reply's `srt_seconds` is its packet's time minus its call's
/// packet's time, as the file stamps them; returns the replies checked.
fn check_srts(path: &str, items: &[Value]) -> usize {
    let times = pcap_times(path);
    let mut n = 0;
    for it in items {
        let t = &it["transaction"];
        if t["role"] != "reply" || t["call_packet"].is_null() {
            continue;
        }
        let reply = times[it["packet"].as_u64().unwrap() as usize];
        let call = times[t["call_packet"].as_u64().unwrap() as usize];
        let want = (i128::from(reply) - i128::from(call)) as f64 / 1e9;
        let got = t["srt_seconds"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{it}: SRT {got} != {want}");
        n += 1;
    }
    n
}

#[test]
fn replies_are_matched_to_calls_with_names_and_srts_from_the_capture() {
    let items = json_lines(&["decode", "--pcap", ORACLE, "--json"]);
    let sends: Vec<&Value> = items.iter().filter(|v| v["frame"] == "send").collect();
    let tx = |xid: u32, role: &str| {
        sends
            .iter()
            .find(|s| s["transaction"]["xid"] == xid && s["transaction"]["role"] == role)
            .map(|s| s["transaction"].clone())
            .unwrap_or_else(|| panic!("no {role} for xid {xid:#x}"))
    };
    // The READ call in #8, its reply (after the RDMA Write) in #10.
    let r = tx(0x2222_2222, "reply");
    assert_eq!(r["proc_name"], "READ");
    assert_eq!(
        (r["prog"].as_u64(), r["vers"].as_u64(), r["proc"].as_u64()),
        (Some(100003), Some(3), Some(6))
    );
    assert_eq!(r["call_packet"], 8);
    // The WRITE call travels in a position-zero Read chunk (RDMA_NOMSG):
    // its procedure comes from the RDMA Read Response, then names the reply.
    let c = tx(0x3333_3333, "call");
    assert_eq!(
        (c["class"].as_str(), c["proc_name"].is_null()),
        (Some("RDMA_NOMSG"), true)
    );
    assert_eq!(tx(0x3333_3333, "reply")["proc_name"], "WRITE");
    assert_eq!(check_srts(ORACLE, &items), 5);
    // Each item's time is the file's.
    let times = pcap_times(ORACLE);
    for it in &items {
        if let Some(p) = it["packet"].as_u64() {
            let want = times[p as usize] as f64 / 1e9;
            assert!((it["time"].as_f64().unwrap() - want).abs() < 1e-6, "{it}");
        }
    }
}

#[test]
fn text_listing_shows_times_and_who_answered_whom() {
    let t = ok_stdout(&["decode", "--pcap", ORACLE]);
    // Times relative to the first record, as Wireshark shows them.
    assert!(t.contains("      #6    0.000499 I->R Send MSN 1"), "{t}");
    assert!(
        t.contains("=> NFSv3 GETATTR call xid 0x11111111 (reply in #7)"),
        "{t}"
    );
    assert!(
        t.contains("=> NFSv3 GETATTR reply xid 0x11111111 (call in #6, SRT 0.000100 s)"),
        "{t}"
    );
    assert!(
        t.contains("=> NFSv3 WRITE call xid 0x33333333 (reply in #14)"),
        "{t}"
    );
    assert!(
        t.contains("=> NFSv3 WRITE reply xid 0x33333333 (call in #11, SRT 0.000300 s)"),
        "{t}"
    );
}

#[test]
fn summary_lists_srt_per_procedure_classes_and_chunks() {
    let s = json_lines(&["decode", "--pcap", ORACLE, "--summary", "--json"]);
    assert_eq!(s.len(), 1, "{s:?}");
    let s = &s[0];
    let row = |name: &str| {
        s["srt"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["proc_name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {s}"))
            .clone()
    };
    let g = row("GETATTR");
    // Four GETATTR calls, three answered (SRTs 0.1, 0.1, 0.2 ms).
    assert_eq!(
        (
            g["calls"].as_u64(),
            g["replied"].as_u64(),
            g["no_reply"].as_u64()
        ),
        (Some(4), Some(3), Some(1))
    );
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
    assert!(
        close(&g["min_srt_seconds"], 0.0001) && close(&g["max_srt_seconds"], 0.0002),
        "{g}"
    );
    assert!(close(&g["sum_srt_seconds"], 0.0004), "{g}");
    assert!(close(&row("WRITE")["avg_srt_seconds"], 0.0003));
    let class = |c: &str| {
        s["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["class"] == c)
            .map(|r| r["count"].as_u64().unwrap())
    };
    assert_eq!(class("RDMA_MSG"), Some(8));
    assert_eq!(class("RDMA_NOMSG"), Some(2));
    assert_eq!(class("RDMA_ERROR"), Some(2));
    assert_eq!((class("RDMA_MSGP"), class("RDMA_DONE")), (Some(1), Some(1)));
    assert_eq!(s["chunks"]["position_zero_read"]["bytes"], 136);
    assert_eq!(s["chunks"]["write"]["chunks"], 2);
    assert_eq!(s["chunks"]["reply"]["chunks"], 2);
    // The text table, tshark's columns.
    let t = ok_stdout(&["decode", "--pcap", ORACLE, "--summary"]);
    assert!(
        t.contains(
            "Procedure                        Calls    Min SRT    Max SRT    Avg SRT    Sum SRT"
        ),
        "{t}"
    );
    assert!(
        t.contains(
            "NFSv3 GETATTR                        3   0.000100   0.000200   0.000133   0.000400"
        ),
        "{t}"
    );
    assert!(t.contains("  v1 RDMA_NOMSG                   2"), "{t}");
}

#[test]
fn filters_by_xid_and_procedure() {
    let only = |args: &[&str]| -> Vec<(u64, String)> {
        let mut a = vec!["decode", "--pcap", ORACLE, "--json"];
        a.extend_from_slice(args);
        json_lines(&a)
            .iter()
            .map(|v| {
                assert_eq!(v["frame"], "send", "{v}");
                (
                    v["transaction"]["xid"].as_u64().unwrap(),
                    v["transaction"]["role"].as_str().unwrap_or("-").to_string(),
                )
            })
            .collect()
    };
    let read = vec![
        (0x2222_2222, "call".to_string()),
        (0x2222_2222, "reply".to_string()),
    ];
    assert_eq!(only(&["--xid", "0x22222222"]), read);
    assert_eq!(only(&["--xid", "572662306"]), read);
    assert_eq!(only(&["--proc", "read"]), read);
    assert_eq!(only(&["--proc", "READ", "--xid", "0x11111111"]), vec![]);
    // By number (WRITE = 7): its reply; the call's procedure was not known
    // when its Send went by (in the Read chunk).
    assert_eq!(
        only(&["--proc", "7"]),
        vec![(0x3333_3333, "reply".to_string())]
    );
    // The summary counts only what passes.
    let s = &json_lines(&[
        "decode",
        "--pcap",
        ORACLE,
        "--summary",
        "--json",
        "--proc",
        "GETATTR",
    ])[0];
    assert_eq!(s["srt"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["srt"][0]["replied"], 3);
    // Text: the connection with the matching lines only.
    let t = ok_stdout(&["decode", "--pcap", ORACLE, "--proc", "read"]);
    assert_eq!(t.matches(" => NFSv3 READ ").count(), 2, "{t}");
    assert!(!t.contains("MPA Request") && !t.contains("GETATTR"), "{t}");
    // A filter needs --pcap; a bad XID is a usage error.
    assert_eq!(run(&["decode", "--xid", "1"]).status.code(), Some(2));
    assert_eq!(
        run(&["decode", "--pcap", ORACLE, "--xid", "0xzz"])
            .status
            .code(),
        Some(2)
    );
}

/// `tshark -z rpc,srt,100003,3` on the same capture: the same calls per
/// procedure (tshark counts the answered ones) and the same SRTs.
#[test]
fn summary_agrees_with_tshark_rpc_srt() {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("SKIPPED: tshark not installed; --summary not compared with tshark -z rpc,srt");
        return;
    }
    let o = Command::new("tshark")
        .args([
            "-2",
            "-o",
            "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
            "-r",
            ORACLE,
            "-q",
            "-z",
            "rpc,srt,100003,3",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    // Rows: "    1  GETATTR    3   0.000100   0.000200   0.000133   0.000400".
    let theirs: Vec<(String, u64, String)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 7 && f[0].parse::<u32>().is_ok())
                .then(|| (f[1].to_string(), f[2].parse().unwrap(), f[5].to_string()))
        })
        .collect();
    assert!(!theirs.is_empty(), "no rows from tshark:\n{out}");
    let s = &json_lines(&["decode", "--pcap", ORACLE, "--summary", "--json"])[0];
    let ours: Vec<(String, u64, String)> = s["srt"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["prog"] == 100003 && r["vers"] == 3 && r["replied"].as_u64() > Some(0))
        .map(|r| {
            (
                r["proc_name"].as_str().unwrap().to_string(),
                r["replied"].as_u64().unwrap(),
                format!("{:.6}", r["avg_srt_seconds"].as_f64().unwrap()),
            )
        })
        .collect();
    let counts = |v: &[(String, u64, String)]| -> Vec<(String, u64)> {
        v.iter().map(|(n, c, _)| (n.clone(), *c)).collect()
    };
    assert_eq!(counts(&ours), counts(&theirs), "tshark said:\n{out}");
    // The same SRTs, but for the WRITE whose call travels in a Read chunk:
    // tshark dates that call at the Read Response that completes it (#13),
    // we at its Send (#11), when the client made it.
    for (a, b) in ours.iter().zip(&theirs) {
        if a.0 == "WRITE" {
            assert_eq!((a.2.as_str(), b.2.as_str()), ("0.000300", "0.000100"));
        } else {
            assert_eq!(a, b, "tshark said:\n{out}");
        }
    }
}

/// The demo's capture carries the times the octets went out and came in.
#[test]
fn demo_capture_has_real_time_stamps() {
    let path = std::env::temp_dir().join(format!("rpcrdma-{}-srt-demo.pcap", std::process::id()));
    let p = path.to_str().unwrap();
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = now();
    let o = run(&["demo", "--pcap", p, "--rpcrdma-version", "1"]);
    assert!(o.status.success(), "{o:?}");
    let after = now();
    let times = pcap_times(p);
    assert!(times.len() > 20);
    assert!(
        times[1..].iter().all(|t| (before..=after).contains(t)),
        "{before} {after} {times:?}"
    );
    assert!(
        times[1..].windows(2).all(|w| w[0] <= w[1]),
        "time runs forward"
    );
    // Not the old synthetic 10 µs spacing.
    assert!(
        times[1..].windows(2).any(|w| w[1] - w[0] != 10_000),
        "{times:?}"
    );
    let items = json_lines(&["decode", "--pcap", p, "--json"]);
    assert!(check_srts(p, &items) >= 6);
    let s = &json_lines(&["decode", "--pcap", p, "--json", "--summary"])[0];
    let replied: u64 = s["srt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["replied"].as_u64().unwrap())
        .sum();
    let replies = items
        .iter()
        .filter(|v| v["transaction"]["role"] == "reply")
        .count() as u64;
    assert_eq!(replied, replies, "{s}");
    let _ = std::fs::remove_file(&path);
}
