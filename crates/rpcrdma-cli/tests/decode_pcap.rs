//! `rpcrdma decode --pcap` end to end: what the built binary prints (JSON
//! lines, the text listing, exit status) for the lab oracle's crafted
//! captures (`crates/rpcrdma-iwarp/tests/data/oracle/*.pcap`, built by an
//! independent Python generator and decoded by Wireshark 4.0.17), for a
//! generated capture with DDP / RDMAP errors, Terminate and odd payloads,
//! and for malformed, truncated or garbled files (exit 2 with one JSON
//! error object, never the panic status 101). What the dissector finds in captures (link types,
//! file variants, TCP reassembly, Markers, MSNs, …) is tested in
//! `crates/rpcrdma-iwarp/tests/capture.rs`.

#[path = "../../rpcrdma-iwarp/tests/capture_gen/mod.rs"]
mod capture_gen;

use std::process::{Command, Output};

use serde_json::{json, Value};

use capture_gen::{fpdu, mpa, pcap_of, put32, rdma_msg, scenario, untagged, Tcp, ETH, PD};

const DATA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../rpcrdma-iwarp/tests/data/oracle"
);

fn run_file(path: &str, json: bool) -> Output {
    let mut args = vec!["decode", "--pcap", path];
    if json {
        args.push("--json");
    }
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(&args)
        .output()
        .unwrap()
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Decodes an oracle capture: exit 0, JSON lines.
fn oracle(name: &str) -> Vec<Value> {
    let out = run_file(&format!("{DATA}/{name}"), true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out)
}

/// Decodes capture octets written to a temporary file.
fn decode_bytes(pcap: &[u8], json: bool) -> Output {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "rpcrdma-decode-pcap-{}-{}.pcap",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, pcap).unwrap();
    let out = run_file(path.to_str().unwrap(), json);
    let _ = std::fs::remove_file(&path);
    out
}

fn decode_ok(pcap: &[u8]) -> Vec<Value> {
    let out = decode_bytes(pcap, true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out)
}

fn frames(v: &[Value]) -> Vec<String> {
    v.iter()
        .map(|l| l["frame"].as_str().unwrap().to_string())
        .collect()
}

/// `(from, proc, xid)` of every `send` line.
fn sends(v: &[Value]) -> Vec<(String, String, u64)> {
    v.iter()
        .filter(|l| l["frame"] == "send")
        .map(|l| {
            (
                l["from"].as_str().unwrap().to_string(),
                l["header"]["proc"].as_str().unwrap_or("-").to_string(),
                l["header"]["xid"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn s(from: &str, proc: &str, xid: u64) -> (String, String, u64) {
    (from.to_string(), proc.to_string(), xid)
}

// ---------------------------------------------------------------- oracle

#[test]
fn oracle_v1_all_rev1_crc() {
    let v = oracle("v1_all_rev1_crc.pcap");
    let conn = "127.0.0.1:40001->127.0.0.1:20049";
    assert!(v.iter().all(|l| l["conn"] == conn));
    // MPA rev 1 with C, RFC 8797 private data, both directions.
    assert_eq!(v[0]["frame"], "mpa-request");
    assert_eq!(v[0]["dir"], conn);
    assert_eq!(v[0]["from"], "initiator");
    assert_eq!(v[0]["packet"], 4);
    assert_eq!(
        (
            &v[0]["rev"],
            &v[0]["crc"],
            &v[0]["markers"],
            &v[0]["reject"]
        ),
        (&json!(1), &json!(true), &json!(false), &json!(false))
    );
    assert_eq!(v[0]["private_data"], "f6ab0e1801010303");
    assert_eq!(
        v[0]["rpcrdma_private_data"],
        json!({"found": true, "offset": 0, "version": 1, "remote_invalidate": true,
               "send_size": 4096, "receive_size": 4096})
    );
    assert_eq!(v[1]["frame"], "mpa-reply");
    assert_eq!(v[1]["dir"], "127.0.0.1:20049->127.0.0.1:40001");
    assert_eq!(v[1]["from"], "responder");
    assert_eq!(
        frames(&v),
        [
            "mpa-request",
            "mpa-reply",
            "send",
            "send",
            "send",
            "write",
            "send",
            "send",
            "read-request",
            "read-response",
            "send",
            "send",
            "send",
            "send",
            "send",
            "send",
            "send",
            "send",
            "write",
            "send"
        ]
    );
    assert_eq!(
        sends(&v),
        [
            s("initiator", "RDMA_MSG", 0x1111_1111),
            s("responder", "RDMA_MSG", 0x1111_1111),
            s("initiator", "RDMA_MSG", 0x2222_2222),
            s("responder", "RDMA_MSG", 0x2222_2222),
            s("initiator", "RDMA_NOMSG", 0x3333_3333),
            s("responder", "RDMA_MSG", 0x3333_3333),
            s("responder", "RDMA_ERROR", 0x4444_4444),
            s("responder", "RDMA_ERROR", 0x5555_5555),
            s("initiator", "RDMA_MSGP", 0x6666_6666),
            s("initiator", "RDMA_DONE", 0x7777_7777),
            s("initiator", "RDMA_MSG", 0x8888_8888),
            s("responder", "RDMA_MSG", 0x8888_8888),
            s("initiator", "RDMA_MSG", 0x9999_9999),
            s("responder", "RDMA_NOMSG", 0x9999_9999),
        ]
    );
    let sd: Vec<&Value> = v.iter().filter(|l| l["frame"] == "send").collect();
    // 1. NFSv3 GETATTR call and reply.
    assert_eq!(
        sd[0]["header"]["rpc"],
        json!({"xid": 0x1111_1111u32, "direction": "CALL", "prog": 100003, "vers": 3, "proc": 1})
    );
    assert_eq!(sd[1]["header"]["rpc"]["direction"], "REPLY");
    assert_eq!(sd[0]["opcode"], "Send");
    assert_eq!(sd[0]["msn"], 1);
    // 2. READ with a write list, the RDMA Write, the reply.
    let wseg = json!([[{"handle": 0xabcd_0001u32, "length": 512, "offset": 0x7f00_0000_1000u64}]]);
    assert_eq!(sd[2]["header"]["writes"], wseg);
    assert_eq!(sd[2]["header"]["rpc"]["proc"], 6);
    let w = &v[5];
    assert_eq!(
        (&w["stag"], &w["offset"], &w["length"], &w["from"]),
        (
            &json!(0xabcd_0001u32),
            &json!(0x7f00_0000_1000u64),
            &json!(512),
            &json!("responder")
        )
    );
    assert_eq!(sd[3]["header"]["writes"], wseg);
    // 3. NOMSG with a position-zero read chunk, Read Request / Response.
    assert_eq!(
        sd[4]["header"]["reads"],
        json!([{"position": 0, "handle": 0xabcd_0002u32, "length": 136,
                "offset": 0x7f00_0000_2000u64}])
    );
    assert_eq!(sd[4]["header"]["rpc"], Value::Null);
    let rr = &v[8];
    assert_eq!(
        (
            &rr["sink_stag"],
            &rr["sink_to"],
            &rr["size"],
            &rr["src_stag"],
            &rr["src_to"],
            &rr["msn"]
        ),
        (
            &json!(0x5151),
            &json!(0x1000),
            &json!(136),
            &json!(0xabcd_0002u32),
            &json!(0x7f00_0000_2000u64),
            &json!(1)
        )
    );
    assert_eq!(rr["from"], "responder");
    let resp = &v[9];
    assert_eq!(
        (
            &resp["stag"],
            &resp["offset"],
            &resp["length"],
            &resp["from"]
        ),
        (
            &json!(0x5151),
            &json!(0x1000),
            &json!(136),
            &json!("initiator")
        )
    );
    // 4. ERR_VERS and ERR_CHUNK.
    assert_eq!(
        sd[6]["header"]["rdma_error"],
        json!({"code": 1, "name": "ERR_VERS", "vers_low": 1, "vers_high": 1})
    );
    assert_eq!(
        sd[7]["header"]["rdma_error"],
        json!({"code": 2, "name": "ERR_CHUNK"})
    );
    // 5. MSGP and DONE.
    assert_eq!(
        (&sd[8]["header"]["align"], &sd[8]["header"]["thresh"]),
        (&json!(4), &json!(1024))
    );
    // 6. The reply by Send with Invalidate.
    assert_eq!(sd[11]["opcode"], "SendInv");
    assert_eq!(sd[11]["inv_stag"], 0xabcd_0003u32);
    assert!(sd[10].get("inv_stag").is_none());
    // 7. Reply chunk, RDMA Write of the reply, NOMSG reply.
    assert_eq!(
        sd[12]["header"]["reply"],
        json!([{"handle": 0xabcd_0004u32, "length": 1024, "offset": 0x7f00_0000_4000u64}])
    );
    assert_eq!(v[18]["stag"], 0xabcd_0004u32);
    assert_eq!(v[18]["length"], 112);
    assert_eq!(
        sd[13]["header"]["reply"],
        json!([{"handle": 0xabcd_0004u32, "length": 112, "offset": 0x7f00_0000_4000u64}])
    );
    // Lines come in capture order of the completing packet.
    let pk: Vec<u64> = v.iter().map(|l| l["packet"].as_u64().unwrap()).collect();
    assert!(pk.windows(2).all(|w| w[0] < w[1]), "{pk:?}");
}

#[test]
fn oracle_mpa_rev2() {
    let v = oracle("mpa_rev2.pcap");
    // Enhanced rev 2: IRD/ORD then the RFC 8797 octets.
    let req = &v[0];
    assert_eq!(req["conn"], "127.0.0.1:40004->127.0.0.1:20049");
    assert_eq!(
        (&req["frame"], &req["rev"], &req["enhanced"], &req["flags"]),
        (&json!("mpa-request"), &json!(2), &json!(true), &json!(0x50))
    );
    assert_eq!(req["private_data"], "80104010f6ab0e1801010303");
    let want = json!({"ird": 16, "ord": 16, "peer_to_peer": true, "rtr_send": false,
                      "rtr_write": false, "rtr_read": true});
    assert_eq!(req["ird_ord"], want);
    assert_eq!(v[1]["ird_ord"], want);
    assert_eq!(req["rpcrdma_private_data"]["found"], true);
    assert_eq!(req["rpcrdma_private_data"]["offset"], 4);
    assert_eq!(req["rpcrdma_private_data"]["ird_ord"]["ird"], 16);
    assert_eq!(
        sends(&v)[..2],
        [
            s("initiator", "RDMA_MSG", 0x2020_0001),
            s("responder", "RDMA_MSG", 0x2020_0001)
        ]
    );
    // Rev 2 without the enhanced bit: no IRD/ORD, RFC 8797 at offset 0.
    let c2: Vec<&Value> = v
        .iter()
        .filter(|l| l["conn"] == "127.0.0.1:40005->127.0.0.1:20049")
        .collect();
    assert_eq!(c2[0]["rev"], 2);
    assert_eq!(c2[0]["enhanced"], false);
    assert_eq!(c2[0]["ird_ord"], Value::Null);
    assert_eq!(c2[0]["rpcrdma_private_data"]["offset"], 0);
    assert_eq!(c2.last().unwrap()["header"]["xid"], 0x2020_0002);
    assert_eq!(v.len(), 4 + 3);
}

#[test]
fn oracle_v2_draft() {
    let v = oracle("v2_draft.pcap");
    assert_eq!(
        sends(&v),
        [
            s("initiator", "RDMA2_CONNPROP", 0),
            s("responder", "RDMA2_CONNPROP", 0),
            s("initiator", "RDMA2_MSG", 0x2a00_0001),
            s("responder", "RDMA2_MSG", 0x2a00_0001),
            s("initiator", "RDMA2_NOMSG", 0x2a00_0002),
            s("responder", "RDMA2_ERROR", 0x2a00_0003),
            s("responder", "RDMA_ERROR", 0x2a00_0004),
        ]
    );
    let sd: Vec<&Value> = v.iter().filter(|l| l["frame"] == "send").collect();
    // What Wireshark shows as "Data" / nothing / Malformed, decoded here.
    assert_eq!(sd[0]["header"]["version"], 2);
    assert_eq!(sd[0]["header"]["props"][0]["name"], "RBSIZ");
    assert_eq!(sd[0]["header"]["props"][0]["value"], 4096);
    assert_eq!(sd[0]["header"]["props"][1]["name"], "BRS");
    assert_eq!(sd[2]["header"]["inv_handle"], 0xabcd_0009u32);
    assert_eq!(sd[2]["header"]["rpc"]["direction"], "CALL");
    assert_eq!(sd[3]["header"]["flags"], 1);
    assert_eq!(sd[3]["header"]["rpc"]["direction"], "REPLY");
    assert_eq!(
        sd[4]["header"]["reads"],
        json!([{"position": 0, "handle": 0xabcd_000au32, "length": 96,
                "offset": 0x7f00_0000_a000u64}])
    );
    assert_eq!(sd[5]["header"]["rdma_error"]["vers_low"], 1);
    assert_eq!(sd[5]["header"]["rdma_error"]["vers_high"], 2);
    assert_eq!(sd[6]["header"]["version"], 1);
}

#[test]
fn oracle_crc_variants() {
    let v = oracle("crc_variants.pcap");
    // CRC off on both sides, zero CRC fields: decoded.
    let off: Vec<&Value> = v
        .iter()
        .filter(|l| l["conn"] == "127.0.0.1:40002->127.0.0.1:20049")
        .collect();
    assert_eq!(off[0]["crc"], false);
    assert_eq!(off.len(), 4);
    assert_eq!(off[2]["header"]["xid"], 0x0c0c_0001);
    assert_eq!(off[3]["header"]["xid"], 0x0c0c_0001);
    // CRC on: the zero CRC of the first FPDU is an error, and the rest of
    // that direction (byte-swapped CRC, then a good one) is skipped.
    let on: Vec<&Value> = v
        .iter()
        .filter(|l| l["conn"] == "127.0.0.1:40003->127.0.0.1:20049")
        .collect();
    assert_eq!(frames(&v[4..]), ["mpa-request", "mpa-reply", "error"]);
    let e = on[2];
    assert_eq!(e["error"]["kind"], "mpa-crc");
    assert_eq!(e["from"], "initiator");
    assert_eq!(e["packet"], 13);
    assert_eq!(e["stream_offset"], 0);
    assert_eq!(
        (&e["layer"], &e["etype"], &e["ecode"]),
        (&json!(2), &json!(0), &json!(2))
    );
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("received 0x00000000"));
}

#[test]
fn oracle_text_listing() {
    let out = run_file(&format!("{DATA}/v1_all_rev1_crc.pcap"), false);
    assert_eq!(out.status.code(), Some(0));
    let t = String::from_utf8(out.stdout).unwrap();
    assert!(t.starts_with("connection 127.0.0.1:40001->127.0.0.1:20049"));
    for want in [
        "MPA Request rev 1, flags 0x40 (C), PD_Length 8: f6ab0e1801010303",
        "RPC-over-RDMA v1 CM private data (RFC 8797)",
        "RDMA_NOMSG",
        "RDMA_MSGP",
        "RDMA_DONE",
        "ERR_CHUNK",
        "rpc: CALL xid 0x11111111 prog 100003 vers 3 proc 1",
        "#9    0.000799 R->I RDMA Write STag 0xabcd0001 TO 0x7f0000001000 length 512 (last)",
        "#12    0.001099 R->I RDMA Read Request MSN 1: 136 octets",
        "#13    0.001199 I->R RDMA Read Response STag 0x00005151",
        "Send with Invalidate MSN 6 (invalidate STag 0xabcd0003)",
        "23 packets, 23 TCP segments",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
}

#[test]
fn ddp_rdmap_errors_terminate_and_odd_payloads() {
    let mut t = Tcp::new(40300);
    t.handshake();
    t.send(true, &mpa(true, 0x40, 1, &PD));
    t.send(false, &mpa(false, 0x40, 1, &PD));
    // DDP version 2: rejected, the stream goes on.
    let mut bad = untagged(3, 0, 1, 0, true, 0, &rdma_msg(0xc1, 0));
    bad[0] = 0x42;
    t.send(true, &fpdu(&bad, true));
    // Send with Solicited Event, and with SE and Invalidate.
    t.send(
        true,
        &fpdu(&untagged(5, 0, 1, 0, true, 0, &rdma_msg(0xc2, 0)), true),
    );
    t.send(
        true,
        &fpdu(
            &untagged(6, 0, 2, 0, true, 0x1234, &rdma_msg(0xc3, 0)),
            true,
        ),
    );
    // A Send that is not an RPC-over-RDMA header (3 octets).
    t.send(
        true,
        &fpdu(&untagged(3, 0, 3, 0, true, 0, &[1, 2, 3]), true),
    );
    // A second segment at the wrong MO.
    t.send(true, &fpdu(&untagged(3, 0, 4, 0, false, 0, &[0; 8]), true));
    t.send(true, &fpdu(&untagged(3, 0, 4, 9, true, 0, &[0; 8]), true));
    // A Send whose last segment never comes.
    t.send(true, &fpdu(&untagged(3, 0, 5, 0, false, 0, &[0; 8]), true));
    // Terminate: DDP untagged, invalid MSN - no buffer (1/2/0x02).
    t.send(
        false,
        &fpdu(
            &untagged(7, 2, 1, 0, true, 0, &[0x12, 0x02, 0x00, 0x00]),
            true,
        ),
    );
    let v = decode_ok(&pcap_of(&t, ETH, false));
    assert_eq!(
        frames(&v),
        [
            "mpa-request",
            "mpa-reply",
            "error",
            "send",
            "send",
            "send",
            "error",
            "terminate",
            "error"
        ],
        "{v:?}"
    );
    assert_eq!(v[2]["error"]["kind"], "ddp-rdmap");
    assert_eq!(
        (&v[2]["layer"], &v[2]["etype"], &v[2]["ecode"]),
        (&json!(1), &json!(2), &json!(6))
    );
    assert_eq!(v[3]["opcode"], "SendSE");
    assert!(v[3].get("inv_stag").is_none());
    assert_eq!(v[4]["opcode"], "SendSEInv");
    assert_eq!(v[4]["inv_stag"], 0x1234);
    assert_eq!(v[4]["header"]["xid"], 0xc3);
    assert_eq!(v[5]["header"], Value::Null);
    assert_eq!(v[5]["header_error"]["kind"], "truncated");
    assert_eq!(v[6]["error"]["kind"], "ddp-reassembly");
    assert!(v[6]["error"]["message"].as_str().unwrap().contains("MO 9"));
    assert_eq!(
        (
            &v[7]["layer"],
            &v[7]["etype"],
            &v[7]["ecode"],
            &v[7]["from"]
        ),
        (&json!(1), &json!(2), &json!(2), &json!("responder"))
    );
    assert_eq!(
        v[7]["description"],
        "DDP: untagged buffer error: invalid MSN - no buffer available"
    );
    assert_eq!(v[8]["error"]["kind"], "incomplete-send");
    assert_eq!(v[8]["packet"], Value::Null);
}

// ---------------------------------------------------------------- malformed

fn assert_malformed(pcap: &[u8], kind: &str) -> Vec<Value> {
    let out = decode_bytes(pcap, true);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = lines(&out);
    let e = v.last().unwrap();
    assert_eq!(e["ok"], false, "{e}");
    assert_eq!(e["error"]["kind"], kind, "{e}");
    assert!(e["error"]["offset"].is_u64());
    assert!(e["error"]["message"].is_string());
    v
}

#[test]
fn malformed_files_exit_2() {
    let good = pcap_of(&scenario(true), ETH, false);
    assert_malformed(&[], "truncated");
    assert_malformed(&good[..23], "truncated");
    assert_malformed(&[0x42; 24], "bad-magic");
    // pcapng: a Section Header Block cut short, a bad block length.
    let ng = hex::decode("0a0d0d0a1c0000004d3c2b1a01000000ffffffffffffffff1c000000").unwrap();
    assert_malformed(&ng[..20], "truncated");
    let mut bad = ng.clone();
    bad[4] = 0x1d;
    assert_malformed(&bad, "bad-block");
    let mut huge = ng.clone();
    huge.extend_from_slice(&hex::decode("06000000f0ffffff").unwrap());
    assert_malformed(&huge, "limit-exceeded");
    // A record header cut short, then a record body cut short: the lines
    // decoded before come first.
    let v = assert_malformed(&good[..good.len() - 3], "truncated");
    assert_eq!(v.len(), 6, "{v:?}");
    let mut cut_hdr = good.clone();
    cut_hdr.extend_from_slice(&[1, 2, 3, 4, 5]);
    let v = assert_malformed(&cut_hdr, "truncated");
    assert_eq!(v[v.len() - 2]["frame"], "send");
    // Absurd captured lengths.
    let mut absurd = good[..24].to_vec();
    absurd.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]);
    assert_malformed(&absurd, "limit-exceeded");
    let mut big = good[..24].to_vec();
    big.extend_from_slice(&[0; 8]);
    big.extend_from_slice(&262_145u32.to_le_bytes());
    big.extend_from_slice(&[0; 4]);
    assert_malformed(&big, "limit-exceeded");
    // Unsupported link type (802.11 = 105).
    let mut wifi = good[..24].to_vec();
    wifi[20..24].copy_from_slice(&105u32.to_le_bytes());
    assert_malformed(&wifi, "unsupported-linktype");
    // Text mode: the error goes to stderr.
    let out = decode_bytes(&good[..30], false);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed capture"));
    // A missing file is bad input (2), with the failure object.
    let out = run_file("/nonexistent/rpcrdma.pcap", true);
    assert_eq!(out.status.code(), Some(2));
    let v = lines(&out);
    assert_eq!(v[0]["error"]["kind"], "io");
}

#[test]
fn truncated_anywhere_never_panics() {
    let good = std::fs::read(format!("{DATA}/segmentation.pcap")).unwrap();
    for cut in (0..good.len()).step_by(7) {
        let out = decode_bytes(&good[..cut], true);
        let code = out.status.code();
        assert!(code == Some(0) || code == Some(2), "cut {cut}: {code:?}");
        for l in String::from_utf8(out.stdout).unwrap().lines() {
            serde_json::from_str::<Value>(l).unwrap();
        }
    }
}

#[test]
fn garbage_packets_never_panic() {
    // Records of every length 0..80 filled with a pattern, on each link
    // type, plus flipped bits in a real capture's packets.
    for linktype in [0u32, 1, 101, 113, 228, 229, 276] {
        let mut p = Vec::new();
        put32(&mut p, 0xa1b2_c3d4, false);
        p.extend_from_slice(&[2, 0, 4, 0]);
        put32(&mut p, 0, false);
        put32(&mut p, 0, false);
        put32(&mut p, 65535, false);
        put32(&mut p, linktype, false);
        for len in 0..80u32 {
            put32(&mut p, 1, false);
            put32(&mut p, len, false);
            put32(&mut p, len, false);
            put32(&mut p, len, false);
            p.extend((0..len).map(|i| (i * 37 + len) as u8 | 0x40));
        }
        decode_ok(&p);
    }
    let good = std::fs::read(format!("{DATA}/v1_all_rev1_crc.pcap")).unwrap();
    for pos in (24..good.len()).step_by(53) {
        let mut p = good.clone();
        p[pos] ^= 0x81;
        let out = decode_bytes(&p, true);
        let code = out.status.code();
        assert!(code == Some(0) || code == Some(2), "flip {pos}: {code:?}");
    }
}
