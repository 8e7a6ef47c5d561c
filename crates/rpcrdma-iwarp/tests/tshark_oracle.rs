//! Writes an MPA exchange and FPDUs of every RDMAP opcode (CRC on; and a
//! second connection with Markers) to a pcap, then asks tshark, the lab's
//! independent wire oracle, for malformed frames and bad CRCs. Without
//! tshark the test says SKIPPED loudly and only self-checks the capture.

mod common;

use common::{read_pcap, streams, tshark, tshark_available, PcapWriter, TcpConn, START_MICROS};
use rpcrdma_iwarp::ddp::{segments, DdpHeader};
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FpduSender, FramingConfig, Received};
use rpcrdma_iwarp::mpa::{FrameKind, IrdOrd, MpaFlags, MpaFrame};
use rpcrdma_iwarp::rdmap::{
    self, encode_read_request, encode_terminate, Opcode, ReadRequest, TerminateMessage,
};
use rpcrdma_iwarp::TerminateCode;

const SERVER: u16 = 20049;

fn payload(n: usize, seed: u8) -> Vec<u8> {
    // ASCII, so no RPC-over-RDMA heuristic mistakes it for a header.
    (0..n)
        .map(|i| b'a' + ((i as u8).wrapping_add(seed) % 26))
        .collect()
}

fn ulpdu(hdr: DdpHeader, data: &[u8]) -> Vec<u8> {
    let mut v = hdr.to_vec();
    v.extend_from_slice(data);
    v
}

/// Builds the capture; returns it and the number of FPDUs in it.
fn build(markers: bool) -> (Vec<u8>, usize) {
    let mut p = PcapWriter::new(START_MICROS);
    let cport = if markers { 40011 } else { 40010 };
    let mut c = TcpConn::new(&mut p, cport, SERVER);
    let pd = hex::decode("f6ab0e1801010303").unwrap();
    let mut req = MpaFrame::enhanced(FrameKind::Request, true, IrdOrd::new(16, 16), &pd).unwrap();
    let mut rep = MpaFrame::enhanced(FrameKind::Reply, true, IrdOrd::new(16, 16), &pd).unwrap();
    if markers {
        req.flags = req.flags.with(MpaFlags::MARKERS, true);
        rep.flags = rep.flags.with(MpaFlags::MARKERS, true);
    }
    c.c2s(&mut p, &req.to_vec().unwrap());
    c.s2c(&mut p, &rep.to_vec().unwrap());
    let cfg = FramingConfig { crc: true, markers };
    let mut tx_c = FpduSender::new(cfg);
    let mut tx_s = FpduSender::new(cfg);
    let mut n = 0;
    let mut send_c = |p: &mut PcapWriter, c: &mut TcpConn, u: &[u8]| {
        let f = tx_c.fpdu_to_vec(&[u]).unwrap();
        c.c2s(p, &f);
    };
    let mut c_ulpdus: Vec<Vec<u8>> = Vec::new();
    let mut s_ulpdus: Vec<Vec<u8>> = Vec::new();
    // Client: the four Send variants (the last one in two DDP segments).
    let mut msn = 1;
    for (i, op) in [Opcode::SEND, Opcode::SEND_INVALIDATE, Opcode::SEND_SE]
        .into_iter()
        .enumerate()
    {
        let h = rdmap::send_header(op, msn, 0, true, 0xabcd_0003).unwrap();
        c_ulpdus.push(ulpdu(h, &payload(if markers { 700 } else { 40 }, i as u8)));
        msn += 1;
    }
    let big = payload(1000, 7);
    for s in segments(1000, 600) {
        let h =
            rdmap::send_header(Opcode::SEND_SE_INVALIDATE, msn, s.offset, s.last, 0x77).unwrap();
        let r = s.offset as usize..(s.offset + s.len) as usize;
        c_ulpdus.push(ulpdu(h, &big[r]));
    }
    // Client: RDMA Read Request (QN 1, MSN 1).
    let rr = ReadRequest {
        sink_stag: 0x5151,
        sink_to: 0x1000,
        size: 900,
        src_stag: 0xabcd_0002,
        src_to: 0x7f00_0000_2000,
    };
    c_ulpdus.push(encode_read_request(1, &rr).to_vec());
    // Server: RDMA Write in two segments, Read Response in two segments.
    let wdata = payload(1200, 3);
    for s in segments(1200, 700) {
        let to = s.tagged_offset(0x7f00_0000_1000).unwrap();
        let r = s.offset as usize..(s.offset + s.len) as usize;
        s_ulpdus.push(ulpdu(
            rdmap::write_header(0xabcd_0001, to, s.last),
            &wdata[r],
        ));
    }
    let rdata = payload(900, 5);
    for s in segments(900, 500) {
        let to = s.tagged_offset(rr.sink_to).unwrap();
        let r = s.offset as usize..(s.offset + s.len) as usize;
        s_ulpdus.push(ulpdu(
            rdmap::read_response_header(rr.sink_stag, to, s.last),
            &rdata[r],
        ));
    }
    // Client: Terminate for a (pretend) bad Write, QN 2, MSN 1.
    let bad = ulpdu(rdmap::write_header(0xdead, 0x10, true), &payload(18, 1));
    let t = TerminateMessage::for_segment(TerminateCode::DDP_TAGGED_BASE_BOUNDS, Some(&bad));
    let term = encode_terminate(1, &t);
    for u in &c_ulpdus {
        send_c(&mut p, &mut c, u);
        n += 1;
    }
    for u in &s_ulpdus {
        let f = tx_s.fpdu_to_vec(&[u]).unwrap();
        c.s2c(&mut p, &f);
        n += 1;
    }
    send_c(&mut p, &mut c, &term);
    n += 1;
    (p.into_bytes(), n)
}

/// Our own decode of the capture: every FPDU frames, passes the CRC and
/// parses as DDP/RDMAP, and every opcode 0-7 appears.
fn self_check(pcap: &[u8], markers: bool, fpdus: usize) {
    let st = streams(&read_pcap(pcap));
    let mut seen = [false; 8];
    let mut count = 0;
    for ((sport, _), (bytes, _)) in &st {
        let kind = if *sport == SERVER {
            FrameKind::Reply
        } else {
            FrameKind::Request
        };
        let consumed = match MpaFrame::decode_prefix(bytes, kind, 512).unwrap() {
            rpcrdma_iwarp::mpa::FrameDecode::Frame { consumed, .. } => consumed,
            _ => panic!(),
        };
        let mut rx = FpduReceiver::new(FramingConfig { crc: true, markers });
        let mut buf = &bytes[consumed..];
        while !buf.is_empty() {
            let Received::Fpdu(f) = rx.poll(buf).unwrap() else {
                panic!("truncated")
            };
            let mut u = Vec::new();
            f.extend_ulpdu(buf, &mut u);
            let seg = rdmap::Segment::parse(&u).unwrap();
            seen[usize::from(seg.control.opcode.0)] = true;
            buf = &buf[f.consumed..];
            count += 1;
        }
    }
    assert_eq!(count, fpdus);
    assert!(seen.iter().all(|s| *s), "{seen:?}");
}

#[test]
fn tshark_accepts_our_frames() {
    for markers in [false, true] {
        let (pcap, fpdus) = build(markers);
        self_check(&pcap, markers, fpdus);
        let path = std::env::temp_dir().join(format!(
            "rpcrdma-iwarp-oracle-{}-{}.pcap",
            std::process::id(),
            if markers { "markers" } else { "crc" }
        ));
        std::fs::write(&path, &pcap).unwrap();
        if !tshark_available() {
            let msg = format!(
                "\n*** SKIPPED: tshark not installed; the Wireshark oracle did NOT check {} \
                 (self-check only). Install tshark (Debian: apt-get install tshark) and rerun. ***\n",
                path.display()
            );
            eprintln!("{msg}");
            println!("{msg}");
            continue;
        }
        let p = path.to_str().unwrap();
        let verbose = tshark(&["-V"], p);
        let bad = verbose.matches("Bad CRC32").count();
        let good = verbose.matches("Good CRC32").count();
        let malformed = tshark(&["-Y", "_ws.malformed || _ws.expert.severity >= error"], p);
        let ops = tshark(
            &[
                "-T",
                "fields",
                "-E",
                "occurrence=a",
                "-e",
                "iwarp_rdma.opcode",
            ],
            p,
        );
        println!(
            "tshark ({}): good={good} bad={bad} malformed_lines={}",
            p,
            malformed.lines().count()
        );
        assert_eq!(bad, 0, "Bad CRC32 in {p}");
        assert_eq!(
            malformed.lines().count(),
            0,
            "malformed frames in {p}:\n{malformed}"
        );
        if !markers {
            // Wireshark's marker model assumes one FPDU per TCP segment, as
            // here; the CRC verdict is printed for every FPDU either way.
            assert_eq!(good, fpdus, "Good CRC32 count in {p}");
        } else {
            assert_eq!(good, fpdus, "Good CRC32 count (markers) in {p}");
        }
        for op in 0..8 {
            assert!(
                ops.lines().any(|l| l
                    .split(',')
                    .any(|v| v.trim() == op.to_string() || v.trim() == format!("0x{op:02x}"))),
                "opcode {op} not decoded in {p}:\n{ops}"
            );
        }
        if std::env::var_os("RPCRDMA_KEEP_PCAP").is_none() {
            let _ = std::fs::remove_file(&path);
        }
    }
}
