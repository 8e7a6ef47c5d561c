//! The capture dissector (`rpcrdma_iwarp::capture` over
//! `rpcrdma_iwarp::dissect`) on the lab oracle's crafted captures
//! (`tests/data/oracle/`: built by an independent Python generator and
//! decoded by Wireshark 4.0.17, some rewritten by Wireshark's editcap) and
//! on captures written here (`capture_gen`: every supported link type and
//! file variant, TCP segments out of order, duplicated, overlapping or
//! lost, MPA Markers, bad CRCs, MSN gaps, MPA Reject, several
//! connections). What `rpcrdma decode --pcap` prints of it is tested in
//! `crates/rpcrdma-cli/tests/decode_pcap.rs`.

mod capture_gen;

use capture_gen::{
    fpdu, markers_conn, mpa, pcap_of, pcap_of_conns, rdma_msg, scenario, split, to_pcapng,
    untagged, Format, Seg, Tcp, ETH, PD,
};
use rpcrdma_iwarp::capture::pcap::PcapReader;
use rpcrdma_iwarp::capture::Connections;
use rpcrdma_iwarp::dissect::{Error, Item, SendMessage, Side};
use rpcrdma_iwarp::mpa::MpaFrame;
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::private_data::PeerPrivateData;
use rpcrdma_proto::Limits;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/oracle");

/// One item, with its connection (`initiator -> responder`), sender role
/// and completing packet.
#[derive(Clone, Debug, PartialEq)]
struct Line {
    conn: String,
    from: &'static str,
    packet: Option<u64>,
    time: Option<f64>,
    item: Item,
}

/// Dissects a capture that must read without error.
fn decode_ok(pcap: &[u8]) -> Vec<Line> {
    let mut r = PcapReader::new(pcap).expect("a capture file");
    let mut conns = Connections::new();
    let mut events = Vec::new();
    while let Some(rec) = r.next_record().expect("a well-formed capture") {
        conns.record(&rec, &mut events);
    }
    conns.finish(&mut events);
    let line = |e: rpcrdma_iwarp::capture::Event| {
        let c = conns.get(e.conn).expect("the event's connection");
        let i = c.initiator().unwrap_or(Side::A);
        let ends = c.ends();
        Line {
            conn: format!("{}->{}", ends[i.index()], ends[i.peer().index()]),
            from: ["responder", "initiator"][usize::from(e.side == i)],
            packet: e.packet.map(|p| p.number),
            time: e.packet.map(|p| p.time),
            item: e.item,
        }
    };
    events.into_iter().map(line).collect()
}

fn oracle(name: &str) -> Vec<Line> {
    decode_ok(&std::fs::read(format!("{DATA}/{name}")).unwrap())
}

fn frames(v: &[Line]) -> Vec<&'static str> {
    v.iter().map(|l| l.item.name()).collect()
}

fn send(l: &Line) -> &SendMessage {
    match &l.item {
        Item::Send(s) => s,
        other => panic!("not a Send: {other:?}"),
    }
}

fn err(l: &Line) -> &Error {
    match &l.item {
        Item::Error(e) => e,
        other => panic!("not an error: {other:?}"),
    }
}

fn frame(l: &Line) -> &MpaFrame {
    match &l.item {
        Item::Mpa(f) => f,
        other => panic!("not an MPA frame: {other:?}"),
    }
}

/// The RPC-over-RDMA header of a Send and the payload octets after it.
fn header(l: &Line) -> Option<(TransportHeader, usize)> {
    let p = &send(l).payload;
    let (h, n) = header::decode(p, &Limits::default()).ok()?;
    Some((h, p.len() - n))
}

fn xid(l: &Line) -> u32 {
    header(l).expect("an RPC-over-RDMA header").0.xid()
}

/// `(from, proc, xid)` of every Send.
fn sends(v: &[Line]) -> Vec<(String, String, u64)> {
    v.iter()
        .filter(|l| l.item.name() == "send")
        .map(|l| {
            let (proc, xid) = match header(l) {
                Some((h, _)) => {
                    let name = match &h {
                        TransportHeader::V1(h) => h.proc().name(),
                        TransportHeader::V2(h) => h.htype().name(),
                        TransportHeader::UnknownVersion(_) => None,
                    };
                    (name.unwrap_or("UNKNOWN"), u64::from(h.xid()))
                }
                None => ("-", 0),
            };
            (l.from.to_string(), proc.to_string(), xid)
        })
        .collect()
}

fn s(from: &str, proc: &str, xid: u64) -> (String, String, u64) {
    (from.to_string(), proc.to_string(), xid)
}

#[test]
fn oracle_segmentation() {
    let v = oracle("segmentation.pcap");
    let sd: Vec<&Line> = v.iter().filter(|l| l.item.name() == "send").collect();
    let got: Vec<(u32, u32, u32, u64)> = sd
        .iter()
        .map(|l| {
            let m = send(l);
            (xid(l), m.msn, m.segments, l.packet.unwrap())
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
    assert_eq!(send(sd[3]).payload.len(), 80);
    // The RPC message after the header: xid, then CALL or REPLY.
    let (_, rest) = header(sd[3]).unwrap();
    let p = &send(sd[3]).payload;
    assert_eq!(p[p.len() - rest..][..4], 0x5e50_0004u32.to_be_bytes());
    assert!(!frames(&v).contains(&"error"));
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
    assert_eq!(err(&v[2]).kind.name(), "capture-truncated");
    assert_eq!(v[2].from, "initiator");
    assert_eq!(v[2].packet, Some(6));
    assert_eq!(err(&v[3]).kind.name(), "capture-truncated");
    assert_eq!(v[3].from, "responder");
    assert_eq!(v[3].packet, Some(7));
}

/// MPA Markers with CRC (`tests/data/oracle/gen_markers.py`, built with
/// the oracle's generator; the one-FPDU-per-segment file is decoded by
/// tshark with 8 good CRCs and FPDUPTRs 0, 104, 208, 312).
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
        assert!(frame(&v[0]).flags.markers(), "{name}");
        assert!(frame(&v[1]).flags.markers(), "{name}");
        assert_eq!(v.len(), 10, "{name}: {v:?}");
        assert_eq!(sends(&v), xids, "{name}");
        assert!(v[2..]
            .iter()
            .filter(|l| l.from == "initiator")
            .all(|l| send(l).payload.len() == 380));
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
    let e = v.iter().find(|l| l.item.name() == "error").unwrap();
    assert_eq!(err(e).kind.name(), "mpa-marker");
    assert_eq!(e.packet, Some(7));
    assert_eq!(sends(&v).len(), 1 + 4);
    // A payload octet flipped in the first FPDU: CRC error.
    let mut p = std::fs::read(format!("{DATA}/markers_crc.pcap")).unwrap();
    let pos = p
        .windows(4)
        .position(|w| w == 0x4d00_0001u32.to_be_bytes())
        .unwrap();
    p[pos + 60] ^= 1;
    let v = decode_ok(&p);
    let e = v.iter().find(|l| l.item.name() == "error").unwrap();
    assert_eq!((err(e).kind.name(), e.packet), ("mpa-crc", Some(6)));
    assert_eq!(sends(&v).len(), 4);
}

fn check_scenario(v: &[Line], conn: &str) {
    assert_eq!(
        frames(v),
        ["mpa-request", "mpa-reply", "send", "send", "write", "send"],
        "{v:?}"
    );
    assert!(v.iter().all(|l| l.conn == conn));
    assert_eq!(
        sends(v),
        [
            s("initiator", "RDMA_MSG", 0xa1),
            s("responder", "RDMA_MSG", 0xa1),
            s("initiator", "RDMA_MSG", 0xa2)
        ]
    );
    assert_eq!(send(&v[3]).segments, 2);
    assert_eq!(send(&v[3]).payload.len(), 168);
    assert_eq!(header(&v[3]).unwrap().1, 140);
    let Item::Tagged { stag, to, len, .. } = v[4].item else {
        panic!("{:?}", v[4])
    };
    assert_eq!((stag, to, len), (0x77, 0x1000, 33));
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
            let t = v[2].time.unwrap();
            assert!((t - 1_700_000_000.0).abs() < 1.0, "{t}");
        }
    }
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
    let errs: Vec<&Line> = v.iter().filter(|l| l.item.name() == "error").collect();
    assert_eq!(errs.len(), 1, "{v:?}");
    assert_eq!(err(errs[0]).kind.name(), "tcp-gap");
    assert_eq!(errs[0].from, "initiator");
    assert_eq!(errs[0].packet, None);
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
    assert_eq!(v[0].item.name(), "mpa-reply");
    assert_eq!(v[0].from, "responder");
    let mut v2 = v.clone();
    v2.swap(0, 1);
    check_scenario(&v2, "10.0.0.1:40100->10.0.0.2:20049");
}

#[test]
fn mpa_markers() {
    let v = decode_ok(&pcap_of(&markers_conn(false), ETH, false));
    assert!(frame(&v[0]).flags.markers());
    let got: Vec<u32> = v
        .iter()
        .filter(|l| l.item.name() == "send")
        .map(xid)
        .collect();
    assert_eq!(got, [0xb0, 0xb1, 0xb2, 0xb3]);
    assert!(v
        .iter()
        .filter(|l| l.item.name() == "send")
        .all(|l| send(l).payload.len() == 368 && header(l).unwrap().1 == 340));
    let v = decode_ok(&pcap_of(&markers_conn(true), ETH, false));
    let e = v.iter().find(|l| l.item.name() == "error").unwrap();
    assert_eq!(err(e).kind.name(), "mpa-marker");
    assert_eq!(err(e).terminate.map(|c| c.code), Some(3));
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
    assert_eq!(err(&v[3]).kind.name(), "ddp-msn");
    assert!(err(&v[3])
        .detail
        .contains("queue 0: message with MSN 3 where MSN 2 was expected"));
    assert_eq!(xid(&v[4]), 0xd3);
    assert!(err(&v[6]).detail.contains("queue 1"));
    let Item::ReadRequest { request, .. } = v[7].item else {
        panic!("{:?}", v[7])
    };
    assert_eq!(request.size, 8);
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
    let rep = frame(&v[1]);
    assert!(rep.flags.reject());
    assert!(rep.flags.enhanced());
    assert_eq!(rep.ird_ord().map(|io| io.ird), Some(0));
    assert!(!PeerPrivateData::find(&rep.private_data).is_found());
    assert!(frame(&v[0]).flags.markers());
}

#[test]
fn connections_interleave_by_completing_packet() {
    let mut a = scenario(true);
    a.cport = 40500;
    let mut b = scenario(true);
    b.cport = 40501;
    let v = decode_ok(&pcap_of_conns(&[&a, &b], ETH, false));
    assert_eq!(v.len(), 12);
    let conns: Vec<&str> = v.iter().map(|l| l.conn.as_str()).collect();
    assert_eq!(conns[0], "10.0.0.1:40500->10.0.0.2:20049");
    assert_eq!(conns[1], "10.0.0.1:40501->10.0.0.2:20049");
    let pk: Vec<u64> = v.iter().map(|l| l.packet.unwrap()).collect();
    assert!(pk.windows(2).all(|w| w[0] < w[1]), "{pk:?}");
    let only = |c: &str| -> Vec<Line> { v.iter().filter(|l| l.conn == c).cloned().collect() };
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
        (e.item.name(), err(e).kind.name()),
        ("error", "incomplete-fpdu")
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
    assert_eq!(err(v.last().unwrap()).kind.name(), "capture-truncated");
}
