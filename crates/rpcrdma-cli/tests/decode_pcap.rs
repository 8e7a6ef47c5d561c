//! `rpcrdma decode --pcap` end to end: the built binary on the lab
//! oracle's crafted captures (`tests/data/*.pcap`, copied from
//! `/work/shared/lab/baseline/oracle/pcaps`, built by an independent Python
//! generator and decoded by Wireshark 4.0.17), on captures generated here
//! (every supported link type and file variant, TCP segments out of order,
//! duplicated, overlapping or lost, MPA Markers, bad CRCs and DDP headers,
//! Terminate, MPA Reject) and on malformed files (exit 2 with one JSON
//! error object, never the panic status 101).

use std::process::{Command, Output};

use serde_json::{json, Value};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

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
        sd[6]["header"]["error"],
        json!({"code": 1, "name": "ERR_VERS", "vers_low": 1, "vers_high": 1})
    );
    assert_eq!(
        sd[7]["header"]["error"],
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
    assert_eq!(req["rpcrdma_private_data"]["mpa_ird_ord"]["ird"], 16);
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
    assert_eq!(sd[5]["header"]["error"]["vers_low"], 1);
    assert_eq!(sd[5]["header"]["error"]["vers_high"], 2);
    assert_eq!(sd[6]["header"]["version"], 1);
}

#[test]
fn oracle_segmentation() {
    let v = oracle("segmentation.pcap");
    let sd: Vec<&Value> = v.iter().filter(|l| l["frame"] == "send").collect();
    let got: Vec<(u64, u64, u64, u64)> = sd
        .iter()
        .map(|l| {
            (
                l["header"]["xid"].as_u64().unwrap(),
                l["msn"].as_u64().unwrap(),
                l["segments"].as_u64().unwrap(),
                l["packet"].as_u64().unwrap(),
            )
        })
        .collect();
    // Two FPDUs in packet 6; FPDU 3 completed by packet 8; the 2-FPDU Send
    // completed by packet 10.
    assert_eq!(
        got,
        [
            (0x5e50_0001, 1, 1, 6),
            (0x5e50_0002, 2, 1, 6),
            (0x5e50_0003, 3, 1, 8),
            (0x5e50_0004, 4, 2, 10)
        ]
    );
    assert_eq!(sd[3]["length"], 80);
    assert_eq!(sd[3]["header"]["rpc"]["xid"], 0x5e50_0004);
    assert!(!frames(&v).contains(&"error".to_string()));
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
    assert_eq!(e["error"], "mpa-crc");
    assert_eq!(e["from"], "initiator");
    assert_eq!(e["packet"], 13);
    assert_eq!(e["stream_offset"], 0);
    assert_eq!(
        (&e["layer"], &e["etype"], &e["ecode"]),
        (&json!(2), &json!(0), &json!(2))
    );
    assert!(e["detail"]
        .as_str()
        .unwrap()
        .contains("received 0x00000000"));
}

/// The oracle captures rewritten by Wireshark's editcap 4.0.17 (an
/// independent writer): as pcapng (`-F pcapng`), with nanosecond time
/// stamps (`-F nsecpcap`), and cut to 120 octets per packet (`-s 120`).
#[test]
fn editcap_rewrites() {
    let classic = oracle("v1_all_rev1_crc.pcap");
    assert_eq!(oracle("v1_all_rev1_crc.pcapng"), classic);
    assert_eq!(
        oracle("segmentation-nsec.pcap"),
        oracle("segmentation.pcap")
    );
    let v = oracle("v1_all_snap120.pcap");
    assert_eq!(frames(&v), ["mpa-request", "mpa-reply", "error", "error"]);
    assert_eq!(v[2]["error"], "capture-truncated");
    assert_eq!(v[2]["from"], "initiator");
    assert_eq!(v[2]["packet"], 6);
    assert_eq!(v[3]["error"], "capture-truncated");
    assert_eq!(v[3]["from"], "responder");
    assert_eq!(v[3]["packet"], 7);
}

/// MPA Markers with CRC (`tests/data/gen_markers.py`, built with the
/// oracle's generator; the one-FPDU-per-segment file is decoded by tshark
/// with 8 good CRCs and FPDUPTRs 0, 104, 208, 312).
#[test]
fn markers_with_crc() {
    let xids: Vec<(String, String, u64)> = (0..8u64)
        .map(|i| {
            let from = if i < 4 { "initiator" } else { "responder" };
            s(from, "RDMA_MSG", 0x4d00_0001 + i % 4)
        })
        .collect();
    for name in ["markers_crc.pcap", "markers_crc_segmented.pcap"] {
        let v = oracle(name);
        assert_eq!(v[0]["markers"], true, "{name}");
        assert_eq!(v[1]["markers"], true, "{name}");
        assert_eq!(v.len(), 10, "{name}: {v:?}");
        assert_eq!(sends(&v), xids, "{name}");
        assert!(v[2..]
            .iter()
            .filter(|l| l["from"] == "initiator")
            .all(|l| l["length"] == 380));
    }
    // Corrupt the second Marker of the initiator (FPDUPTR 104 in packet 7):
    // the Marker check (made before the CRC check) fails.
    let mut p = std::fs::read(format!("{DATA}/markers_crc.pcap")).unwrap();
    let pos = p
        .windows(4)
        .position(|w| w == [0, 0, 0, 104])
        .expect("the Marker");
    p[pos + 3] = 108;
    let v = decode_ok(&p);
    let e = v.iter().find(|l| l["frame"] == "error").unwrap();
    assert_eq!(e["error"], "mpa-marker");
    assert_eq!(e["packet"], 7);
    assert_eq!(sends(&v).len(), 1 + 4);
    // A payload octet flipped in the first FPDU: CRC error.
    let mut p = std::fs::read(format!("{DATA}/markers_crc.pcap")).unwrap();
    let pos = p
        .windows(4)
        .position(|w| w == 0x4d00_0001u32.to_be_bytes())
        .unwrap();
    p[pos + 60] ^= 1;
    let v = decode_ok(&p);
    let e = v.iter().find(|l| l["frame"] == "error").unwrap();
    assert_eq!((&e["error"], &e["packet"]), (&json!("mpa-crc"), &json!(6)));
    assert_eq!(sends(&v).len(), 4);
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
        "#9 R->I RDMA Write STag 0xabcd0001 TO 0x7f0000001000 length 512 (last)",
        "#12 R->I RDMA Read Request MSN 1: 136 octets",
        "#13 I->R RDMA Read Response STag 0x00005151",
        "Send with Invalidate MSN 6 (invalidate STag 0xabcd0003)",
        "23 packets, 23 TCP segments",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
}

// ---------------------------------------------------------------- writer

/// How the capture file is written.
#[derive(Clone, Copy)]
struct Format {
    linktype: u32,
    big_endian: bool,
    nanos: bool,
}

const ETH: Format = Format {
    linktype: 1,
    big_endian: false,
    nanos: false,
};

/// One TCP segment: from the client?, flags, sequence number, payload.
#[derive(Clone)]
struct Seg {
    c2s: bool,
    flags: u8,
    seq: u32,
    data: Vec<u8>,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSHACK: u8 = 0x18;

struct Tcp {
    cport: u16,
    cseq: u32,
    sseq: u32,
    segs: Vec<Seg>,
}

impl Tcp {
    fn new(cport: u16) -> Self {
        Tcp {
            cport,
            cseq: 0xffff_ff00, // wraps during the test streams
            sseq: 7000,
            segs: Vec::new(),
        }
    }

    fn handshake(&mut self) {
        self.segs.push(Seg {
            c2s: true,
            flags: SYN,
            seq: self.cseq,
            data: vec![],
        });
        self.segs.push(Seg {
            c2s: false,
            flags: SYN | ACK,
            seq: self.sseq,
            data: vec![],
        });
        self.cseq = self.cseq.wrapping_add(1);
        self.sseq = self.sseq.wrapping_add(1);
        self.segs.push(Seg {
            c2s: true,
            flags: ACK,
            seq: self.cseq,
            data: vec![],
        });
    }

    fn send(&mut self, c2s: bool, data: &[u8]) {
        let seq = if c2s { &mut self.cseq } else { &mut self.sseq };
        self.segs.push(Seg {
            c2s,
            flags: PSHACK,
            seq: *seq,
            data: data.to_vec(),
        });
        *seq = seq.wrapping_add(data.len() as u32);
    }
}

fn put32(v: &mut Vec<u8>, x: u32, be: bool) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}

fn tcp_header(sport: u16, dport: u16, seq: u32, flags: u8) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

fn ip_packet(v6: bool, c2s: bool, tcp: &[u8]) -> Vec<u8> {
    let (a, b) = if c2s { (1u8, 2u8) } else { (2, 1) };
    let mut ip = Vec::new();
    if v6 {
        ip.extend_from_slice(&[0x60, 0, 0, 0]);
        ip.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[6, 64]);
        let mut sa = [0u8; 16];
        sa[0] = 0xfd;
        sa[15] = a;
        let mut da = sa;
        da[15] = b;
        ip.extend_from_slice(&sa);
        ip.extend_from_slice(&da);
    } else {
        ip.extend_from_slice(&[0x45, 0]);
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, a, 10, 0, 0, b]);
    }
    ip.extend_from_slice(tcp);
    ip
}

fn link(linktype: u32, v6: bool, ip: &[u8]) -> Vec<u8> {
    let et: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let mut f = Vec::new();
    match linktype {
        1 => {
            f.extend_from_slice(&[0u8; 12]);
            f.extend_from_slice(&et);
        }
        113 => {
            f.extend_from_slice(&[0u8; 14]);
            f.extend_from_slice(&et);
        }
        276 => {
            f.extend_from_slice(&et);
            f.extend_from_slice(&[0u8; 18]);
        }
        0 => f.extend_from_slice(&if v6 { [10, 0, 0, 0] } else { [2, 0, 0, 0] }),
        _ => {}
    }
    f.extend_from_slice(ip);
    if linktype == 1 && ip.len() < 46 {
        f.resize(14 + 46, 0xee); // Ethernet padding
    }
    f
}

fn pcap_of(tcp: &Tcp, fmt: Format, v6: bool) -> Vec<u8> {
    pcap_of_conns(&[tcp], fmt, v6)
}

/// Writes the segments of several connections, interleaved round-robin.
fn pcap_of_conns(conns: &[&Tcp], fmt: Format, v6: bool) -> Vec<u8> {
    let be = fmt.big_endian;
    let mut p = Vec::new();
    put32(
        &mut p,
        if fmt.nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 },
        be,
    );
    p.extend_from_slice(&if be { [0, 2, 0, 4] } else { [2, 0, 4, 0] });
    put32(&mut p, 0, be);
    put32(&mut p, 0, be);
    put32(&mut p, 262_144, be);
    put32(&mut p, fmt.linktype, be);
    let longest = conns.iter().map(|c| c.segs.len()).max().unwrap_or(0);
    let mut n = 0u32;
    for i in 0..longest {
        for c in conns {
            let Some(sg) = c.segs.get(i) else { continue };
            let (sp, dp) = if sg.c2s {
                (c.cport, 20049)
            } else {
                (20049, c.cport)
            };
            let mut t = tcp_header(sp, dp, sg.seq, sg.flags);
            t.extend_from_slice(&sg.data);
            let frame = link(fmt.linktype, v6, &ip_packet(v6, sg.c2s, &t));
            n += 1;
            put32(&mut p, 1_700_000_000, be);
            put32(&mut p, if fmt.nanos { n * 1000 } else { n }, be);
            put32(&mut p, frame.len() as u32, be);
            put32(&mut p, frame.len() as u32, be);
            p.extend_from_slice(&frame);
        }
    }
    p
}

// ---------------------------------------------------------------- iWARP

fn mpa(req: bool, flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = if req {
        b"MPA ID Req Frame".to_vec()
    } else {
        b"MPA ID Rep Frame".to_vec()
    };
    v.extend_from_slice(&[flags, rev]);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

const PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3];

/// FPDU: length, ULPDU, pad, CRC-32C stored little-endian (or zero).
fn fpdu(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let mut v = (ulpdu.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(ulpdu);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    let c = if crc {
        rpcrdma_iwarp::crc::crc32c(&v).to_le_bytes()
    } else {
        [0; 4]
    };
    v.extend_from_slice(&c);
    v
}

fn untagged(op: u8, qn: u32, msn: u32, mo: u32, last: bool, inv: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![if last { 0x41 } else { 0x01 }, 0x40 | op];
    for x in [inv, qn, msn, mo] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(payload);
    v
}

fn tagged(op: u8, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0xc1, 0x40 | op];
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// RDMA_MSG v1, no chunks, followed by an NFSv3 NULL call (or `extra`).
fn rdma_msg(xid: u32, extra: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [xid, 1, 32, 0, 0, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for x in [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.resize(v.len() + extra, 0x5a);
    v
}

/// A connection with SYN, MPA (CRC as given) and:
/// Send(call 1), Send(reply 1) as 2 segments, RDMA Write, Send(call 2).
fn scenario(crc: bool) -> Tcp {
    let mut t = Tcp::new(40100);
    t.handshake();
    let c = if crc { 0x40 } else { 0 };
    t.send(true, &mpa(true, c, 1, &PD));
    t.send(false, &mpa(false, c, 1, &PD));
    t.send(
        true,
        &fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(0xa1, 0)), crc),
    );
    let reply = rdma_msg(0xa1, 100);
    t.send(
        false,
        &fpdu(&untagged(3, 0, 1, 0, false, 0, &reply[..64]), crc),
    );
    t.send(
        false,
        &fpdu(&untagged(3, 0, 1, 64, true, 0, &reply[64..]), crc),
    );
    t.send(false, &fpdu(&tagged(0, 0x77, 0x1000, &[9u8; 33]), crc));
    t.send(
        true,
        &fpdu(&untagged(3, 0, 2, 0, true, 0, &rdma_msg(0xa2, 0)), crc),
    );
    t
}

fn check_scenario(v: &[Value], conn: &str) {
    assert_eq!(
        frames(v),
        ["mpa-request", "mpa-reply", "send", "send", "write", "send"],
        "{v:?}"
    );
    assert!(v.iter().all(|l| l["conn"] == conn));
    assert_eq!(
        sends(v),
        [
            s("initiator", "RDMA_MSG", 0xa1),
            s("responder", "RDMA_MSG", 0xa1),
            s("initiator", "RDMA_MSG", 0xa2)
        ]
    );
    assert_eq!(v[3]["segments"], 2);
    assert_eq!(v[3]["length"], 168);
    assert_eq!(v[3]["header"]["payload_len"], 140);
    assert_eq!(
        (&v[4]["stag"], &v[4]["offset"], &v[4]["length"]),
        (&json!(0x77), &json!(0x1000), &json!(33))
    );
}

#[test]
fn every_link_type_and_file_variant() {
    for (linktype, v6) in [
        (1, false),
        (1, true),
        (113, false),
        (276, false),
        (276, true),
        (101, false),
        (101, true),
        (228, false),
        (0, false),
        (0, true),
    ] {
        for (big_endian, nanos) in [(false, false), (true, false), (false, true), (true, true)] {
            let fmt = Format {
                linktype,
                big_endian,
                nanos,
            };
            let v = decode_ok(&pcap_of(&scenario(true), fmt, v6));
            let conn = if v6 {
                "[fd00::1]:40100->[fd00::2]:20049"
            } else {
                "10.0.0.1:40100->10.0.0.2:20049"
            };
            check_scenario(&v, conn);
            let t = v[2]["time"].as_f64().unwrap();
            assert!((t - 1_700_000_000.0).abs() < 1.0, "{t}");
        }
    }
}

/// Rewrites a classic little-endian microsecond capture as pcapng: one
/// section in the given byte order, one interface, Enhanced Packet Blocks.
fn to_pcapng(classic: &[u8], be: bool) -> Vec<u8> {
    let e32 = |x: u32| if be { x.to_be_bytes() } else { x.to_le_bytes() };
    let block = |out: &mut Vec<u8>, btype: u32, body: &[u8]| {
        let mut b = body.to_vec();
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        let total = (12 + b.len()) as u32;
        out.extend_from_slice(&e32(btype));
        out.extend_from_slice(&e32(total));
        out.extend_from_slice(&b);
        out.extend_from_slice(&e32(total));
    };
    let mut out = Vec::new();
    let mut shb = e32(0x1a2b_3c4d).to_vec();
    shb.extend_from_slice(if be { &[0, 1, 0, 0] } else { &[1, 0, 0, 0] });
    shb.extend_from_slice(&[0xff; 8]);
    block(&mut out, 0x0a0d_0d0a, &shb);
    let linktype = u32::from_le_bytes(classic[20..24].try_into().unwrap()) as u16;
    let mut idb = if be {
        linktype.to_be_bytes()
    } else {
        linktype.to_le_bytes()
    }
    .to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&e32(262_144));
    block(&mut out, 1, &idb);
    // A Name Resolution Block, to be skipped.
    block(&mut out, 4, &[0; 4]);
    let mut off = 24;
    while off < classic.len() {
        let w = |i: usize| u32::from_le_bytes(classic[off + i..off + i + 4].try_into().unwrap());
        let (sec, usec, incl) = (w(0), w(4), w(8) as usize);
        let ts = u64::from(sec) * 1_000_000 + u64::from(usec);
        let mut epb = e32(0).to_vec();
        epb.extend_from_slice(&e32((ts >> 32) as u32));
        epb.extend_from_slice(&e32(ts as u32));
        epb.extend_from_slice(&e32(incl as u32));
        epb.extend_from_slice(&e32(incl as u32));
        epb.extend_from_slice(&classic[off + 16..off + 16 + incl]);
        block(&mut out, 6, &epb);
        off += 16 + incl;
    }
    out
}

#[test]
fn pcapng_captures() {
    for linktype in [1, 276] {
        let fmt = Format {
            linktype,
            big_endian: false,
            nanos: false,
        };
        let classic = pcap_of(&scenario(true), fmt, false);
        let want = decode_ok(&classic);
        for be in [false, true] {
            let v = decode_ok(&to_pcapng(&classic, be));
            check_scenario(&v, "10.0.0.1:40100->10.0.0.2:20049");
            assert_eq!(v, want);
        }
    }
    let oracle = std::fs::read(format!("{DATA}/v1_all_rev1_crc.pcap")).unwrap();
    assert_eq!(decode_ok(&to_pcapng(&oracle, true)), decode_ok(&oracle));
}

#[test]
fn crc_off_stream() {
    let v = decode_ok(&pcap_of(&scenario(false), ETH, false));
    check_scenario(&v, "10.0.0.1:40100->10.0.0.2:20049");
}

/// Splits every data segment into pieces of `n` octets.
fn split(t: &Tcp, n: usize) -> Tcp {
    let mut out = Tcp::new(t.cport);
    for sg in &t.segs {
        if sg.data.is_empty() {
            out.segs.push(sg.clone());
            continue;
        }
        for (i, ch) in sg.data.chunks(n).enumerate() {
            out.segs.push(Seg {
                data: ch.to_vec(),
                seq: sg.seq.wrapping_add((i * n) as u32),
                ..sg.clone()
            });
        }
    }
    out
}

#[test]
fn tcp_out_of_order_duplicates_and_overlaps() {
    let base = split(&scenario(true), 16);
    let conn = "10.0.0.1:40100->10.0.0.2:20049";
    check_scenario(&decode_ok(&pcap_of(&base, ETH, false)), conn);
    // Swap neighbouring data segments.
    let mut t = split(&scenario(true), 16);
    let mut i = 3;
    while i + 1 < t.segs.len() {
        t.segs.swap(i, i + 1);
        i += 3;
    }
    check_scenario(&decode_ok(&pcap_of(&t, ETH, false)), conn);
    // Every data segment sent twice, the copy later; plus an overlapping
    // retransmission covering two segments.
    let mut t = split(&scenario(true), 16);
    let mut segs = Vec::new();
    for (i, sg) in t.segs.iter().enumerate() {
        segs.push(sg.clone());
        if i >= 4 && !sg.data.is_empty() && i % 2 == 0 {
            segs.push(sg.clone());
        }
        if i == 10 {
            let mut big = sg.clone();
            big.seq = big.seq.wrapping_sub(8);
            big.data = t.segs[9].data[8..]
                .iter()
                .chain(&sg.data)
                .copied()
                .collect();
            segs.push(big);
        }
    }
    t.segs = segs;
    check_scenario(&decode_ok(&pcap_of(&t, ETH, false)), conn);
    // Reversed order within the client's FPDU phase.
    let mut t = split(&scenario(true), 16);
    let tail: Vec<Seg> = t.segs.split_off(6);
    let (c, srv): (Vec<Seg>, Vec<Seg>) = tail.into_iter().partition(|sg| sg.c2s);
    t.segs.extend(srv);
    t.segs.extend(c.into_iter().rev());
    let v = decode_ok(&pcap_of(&t, ETH, false));
    assert_eq!(
        sends(&v),
        [
            s("responder", "RDMA_MSG", 0xa1),
            s("initiator", "RDMA_MSG", 0xa1),
            s("initiator", "RDMA_MSG", 0xa2)
        ]
    );
}

#[test]
fn lost_segment_is_a_gap() {
    let mut t = split(&scenario(true), 16);
    // Drop a client data segment in the FPDU phase.
    let idx = t
        .segs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.c2s && !s.data.is_empty())
        .nth(4)
        .unwrap()
        .0;
    t.segs.remove(idx);
    let v = decode_ok(&pcap_of(&t, ETH, false));
    let errs: Vec<&Value> = v.iter().filter(|l| l["frame"] == "error").collect();
    assert_eq!(errs.len(), 1, "{v:?}");
    assert_eq!(errs[0]["error"], "tcp-gap");
    assert_eq!(errs[0]["from"], "initiator");
    assert_eq!(errs[0]["packet"], Value::Null);
    // The responder's direction is intact.
    assert_eq!(
        sends(&v)
            .iter()
            .filter(|x| x.0 == "responder")
            .cloned()
            .collect::<Vec<_>>(),
        [s("responder", "RDMA_MSG", 0xa1)]
    );
}

#[test]
fn without_syn_the_mpa_request_names_the_initiator() {
    let mut t = scenario(true);
    t.segs.drain(..3);
    // The Reply is captured before the Request.
    t.segs.swap(0, 1);
    let v = decode_ok(&pcap_of(&t, ETH, false));
    assert_eq!(v[0]["frame"], "mpa-reply");
    assert_eq!(v[0]["from"], "responder");
    let mut v2 = v.clone();
    v2.swap(0, 1);
    check_scenario(&v2, "10.0.0.1:40100->10.0.0.2:20049");
}

/// Inserts MPA Markers into an FPDU stream (CRC off): at every multiple of
/// 512 octets from the start of the FPDU stream, `0000` then FPDUPTR, the
/// distance back to the start of the FPDU the Marker is in.
fn with_markers(fpdus: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    for f in fpdus {
        let start = w.len();
        for &b in f {
            if w.len() % 512 == 0 {
                let ptr = (w.len() - start) as u16;
                w.extend_from_slice(&[0, 0]);
                w.extend_from_slice(&ptr.to_be_bytes());
            }
            w.push(b);
        }
    }
    w
}

fn markers_conn(corrupt: bool) -> Tcp {
    let mut t = Tcp::new(40200);
    t.handshake();
    // M in both frames: Markers in both directions.
    t.send(true, &mpa(true, 0x80, 1, &PD));
    t.send(false, &mpa(false, 0x80, 1, &PD));
    let f: Vec<Vec<u8>> = (0..4u32)
        .map(|i| {
            fpdu(
                &untagged(3, 0, i + 1, 0, true, 0, &rdma_msg(0xb0 + i, 300)),
                false,
            )
        })
        .collect();
    let mut stream = with_markers(&f);
    // Markers at 0 (FPDUPTR 0), 512, 1024.
    assert_eq!(&stream[..4], &[0, 0, 0, 0]);
    if corrupt {
        stream[512 + 3] ^= 0x04;
    }
    for ch in stream.chunks(200) {
        t.send(true, ch);
    }
    t
}

#[test]
fn mpa_markers() {
    let v = decode_ok(&pcap_of(&markers_conn(false), ETH, false));
    assert_eq!(v[0]["markers"], true);
    let got: Vec<u64> = v
        .iter()
        .filter(|l| l["frame"] == "send")
        .map(|l| l["header"]["xid"].as_u64().unwrap())
        .collect();
    assert_eq!(got, [0xb0, 0xb1, 0xb2, 0xb3]);
    assert!(v
        .iter()
        .filter(|l| l["frame"] == "send")
        .all(|l| l["length"] == 368 && l["header"]["payload_len"] == 340));
    let v = decode_ok(&pcap_of(&markers_conn(true), ETH, false));
    let e = v.iter().find(|l| l["frame"] == "error").unwrap();
    assert_eq!(e["error"], "mpa-marker");
    assert_eq!(e["ecode"], 3);
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
    assert_eq!(v[2]["error"], "ddp-rdmap");
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
    assert_eq!(v[5]["header_error"]["error"], "truncated");
    assert_eq!(v[6]["error"], "ddp-reassembly");
    assert!(v[6]["detail"].as_str().unwrap().contains("MO 9"));
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
    assert_eq!(v[8]["error"], "incomplete-send");
    assert_eq!(v[8]["packet"], Value::Null);
}

#[test]
fn msn_sequence_is_checked_per_queue() {
    let mut t = Tcp::new(40350);
    t.handshake();
    t.send(true, &mpa(true, 0x40, 1, &PD));
    t.send(false, &mpa(false, 0x40, 1, &PD));
    t.send(
        true,
        &fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(0xd1, 0)), true),
    );
    // MSN 2 is not in the capture.
    t.send(
        true,
        &fpdu(&untagged(3, 0, 3, 0, true, 0, &rdma_msg(0xd3, 0)), true),
    );
    t.send(
        true,
        &fpdu(&untagged(3, 0, 4, 0, true, 0, &rdma_msg(0xd4, 0)), true),
    );
    // Queue 1 counts on its own: its first Read Request must have MSN 1.
    let mut rr = Vec::new();
    for x in [0x11u32, 0, 0, 8, 0x22, 0, 0] {
        rr.extend_from_slice(&x.to_be_bytes());
    }
    t.send(true, &fpdu(&untagged(1, 1, 2, 0, true, 0, &rr), true));
    let v = decode_ok(&pcap_of(&t, ETH, false));
    assert_eq!(
        frames(&v),
        [
            "mpa-request",
            "mpa-reply",
            "send",
            "error",
            "send",
            "send",
            "error",
            "read-request"
        ]
    );
    assert_eq!(v[3]["error"], "ddp-msn");
    assert!(v[3]["detail"]
        .as_str()
        .unwrap()
        .contains("queue 0: message with MSN 3 where MSN 2 was expected"));
    assert_eq!(v[4]["header"]["xid"], 0xd3);
    assert!(v[6]["detail"].as_str().unwrap().contains("queue 1"));
    assert_eq!(v[7]["size"], 8);
}

#[test]
fn mpa_reject_and_not_mpa_connections() {
    let mut t = Tcp::new(40400);
    t.handshake();
    t.send(true, &mpa(true, 0x80, 2, &[0, 1, 0, 1]));
    t.send(false, &mpa(false, 0x30, 2, &[0, 0, 0, 0]));
    // Plain TCP traffic on another connection: ignored.
    let mut o = Tcp::new(40401);
    o.handshake();
    o.send(true, b"GET / HTTP/1.0\r\n\r\n");
    let v = decode_ok(&pcap_of_conns(&[&t, &o], ETH, false));
    assert_eq!(frames(&v), ["mpa-request", "mpa-reply"]);
    assert_eq!(v[1]["reject"], true);
    assert_eq!(v[1]["enhanced"], true);
    assert_eq!(v[1]["ird_ord"]["ird"], 0);
    assert_eq!(v[1]["rpcrdma_private_data"]["found"], false);
    assert_eq!(v[0]["markers"], true);
}

#[test]
fn connections_interleave_by_completing_packet() {
    let mut a = scenario(true);
    a.cport = 40500;
    let mut b = scenario(true);
    b.cport = 40501;
    let v = decode_ok(&pcap_of_conns(&[&a, &b], ETH, false));
    assert_eq!(v.len(), 12);
    let conns: Vec<&str> = v.iter().map(|l| l["conn"].as_str().unwrap()).collect();
    assert_eq!(conns[0], "10.0.0.1:40500->10.0.0.2:20049");
    assert_eq!(conns[1], "10.0.0.1:40501->10.0.0.2:20049");
    let pk: Vec<u64> = v.iter().map(|l| l["packet"].as_u64().unwrap()).collect();
    assert!(pk.windows(2).all(|w| w[0] < w[1]), "{pk:?}");
    let only = |c: &str| -> Vec<Value> { v.iter().filter(|l| l["conn"] == c).cloned().collect() };
    check_scenario(&only(conns[0]), conns[0]);
    check_scenario(&only(conns[1]), conns[1]);
}

#[test]
fn capture_cut_by_snaplen_and_ending_inside_fpdu() {
    let mut t = scenario(true);
    // The last FPDU is cut short: the capture ends inside it.
    let last = t.segs.last_mut().unwrap();
    last.data.truncate(10);
    let v = decode_ok(&pcap_of(&t, ETH, false));
    let e = v.last().unwrap();
    assert_eq!(
        (&e["frame"], &e["error"]),
        (&json!("error"), &json!("incomplete-fpdu"))
    );
    // An IP packet longer than what was captured (snaplen).
    let t = scenario(true);
    let mut p = pcap_of(&t, ETH, false);
    // Lower the captured length of the last record by 4 and drop 4 octets.
    let n = p.len();
    p.truncate(n - 4);
    let mut off = 24;
    let mut last_hdr = 0;
    while off < p.len() {
        last_hdr = off;
        let incl = u32::from_le_bytes(p[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    let incl = u32::from_le_bytes(p[last_hdr + 8..last_hdr + 12].try_into().unwrap()) - 4;
    p[last_hdr + 8..last_hdr + 12].copy_from_slice(&incl.to_le_bytes());
    let v = decode_ok(&p);
    assert_eq!(v.last().unwrap()["error"], "capture-truncated");
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
    assert_eq!(e["error"], kind, "{e}");
    assert!(e["offset"].is_u64());
    assert!(e["detail"].is_string());
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
    // A missing file is an I/O error (1).
    let out = run_file("/nonexistent/rpcrdma.pcap", true);
    assert_eq!(out.status.code(), Some(1));
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
