//! Test helpers: TCP connections written with the classic-libpcap writer
//! of `rpcrdma_iwarp::capture::write` (Ethernet / IPv4 / TCP with correct
//! lengths, sequence numbers and checksums), and a reader of its own that
//! reassembles the TCP byte streams of such captures.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use rpcrdma_iwarp::capture::pcap::tcp_flags::{ACK, PSH, SYN};
pub use rpcrdma_iwarp::capture::write::PcapWriter;

/// Time stamp of the first packet written (µs since the epoch).
pub const START_MICROS: u64 = 1_700_000_000_000_000;

/// 127.0.0.1:`port`.
fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One TCP connection inside a capture.
pub struct TcpConn {
    pub cport: u16,
    pub sport: u16,
    pub cseq: u32,
    pub sseq: u32,
}

impl TcpConn {
    pub fn new(p: &mut PcapWriter, cport: u16, sport: u16) -> Self {
        let mut c = TcpConn {
            cport,
            sport,
            cseq: 1000 + u32::from(cport) * 7,
            sseq: 500_000 + u32::from(cport) * 13,
        };
        p.tcp(lo(cport), lo(sport), c.cseq, 0, SYN, &[]);
        c.cseq += 1;
        p.tcp(lo(sport), lo(cport), c.sseq, c.cseq, SYN | ACK, &[]);
        c.sseq += 1;
        p.tcp(lo(cport), lo(sport), c.cseq, c.sseq, ACK, &[]);
        c
    }

    pub fn c2s(&mut self, p: &mut PcapWriter, data: &[u8]) {
        p.tcp(
            lo(self.cport),
            lo(self.sport),
            self.cseq,
            self.sseq,
            PSH | ACK,
            data,
        );
        self.cseq = self.cseq.wrapping_add(data.len() as u32);
    }

    pub fn s2c(&mut self, p: &mut PcapWriter, data: &[u8]) {
        p.tcp(
            lo(self.sport),
            lo(self.cport),
            self.sseq,
            self.cseq,
            PSH | ACK,
            data,
        );
        self.sseq = self.sseq.wrapping_add(data.len() as u32);
    }
}

/// A TCP payload from a capture.
#[derive(Clone, Debug)]
pub struct Seg {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub payload: Vec<u8>,
}

/// Reads every TCP segment with payload from a classic Ethernet pcap.
pub fn read_pcap(bytes: &[u8]) -> Vec<Seg> {
    assert_eq!(
        &bytes[..4],
        &0xa1b2_c3d4u32.to_le_bytes(),
        "classic LE pcap"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..at + 16 + incl];
        at += 16 + incl;
        assert_eq!(&frame[12..14], &[0x08, 0x00]);
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        assert_eq!(ip[9], 6);
        let tcp = &ip[ihl..tot];
        let doff = usize::from(tcp[12] >> 4) * 4;
        let payload = tcp[doff..].to_vec();
        if payload.is_empty() {
            continue;
        }
        out.push(Seg {
            sport: u16::from_be_bytes([tcp[0], tcp[1]]),
            dport: u16::from_be_bytes([tcp[2], tcp[3]]),
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
            payload,
        });
    }
    out
}

/// One direction's bytes and its TCP payload lengths.
pub type Stream = (Vec<u8>, Vec<usize>);

/// Byte streams per direction `(sport, dport)`, with the payload
/// boundaries, checking that sequence numbers are contiguous.
pub fn streams(segs: &[Seg]) -> BTreeMap<(u16, u16), Stream> {
    type Acc = (Vec<u8>, Vec<usize>, u32);
    let mut m: BTreeMap<(u16, u16), Acc> = BTreeMap::new();
    for s in segs {
        let e = m
            .entry((s.sport, s.dport))
            .or_insert_with(|| (Vec::new(), Vec::new(), s.seq));
        assert_eq!(e.2, s.seq, "contiguous sequence numbers");
        e.0.extend_from_slice(&s.payload);
        e.1.push(s.payload.len());
        e.2 = e.2.wrapping_add(s.payload.len() as u32);
    }
    m.into_iter().map(|(k, (a, b, _))| (k, (a, b))).collect()
}

/// True if `tshark` runs here (oracle tests print SKIPPED otherwise).
#[allow(dead_code)]
pub fn tshark_available() -> bool {
    std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Runs tshark on `pcap` with the oracle options of the lab README
/// (`-2`, no iWARP Send reassembly) plus `args`; returns stdout.
#[allow(dead_code)]
pub fn tshark(args: &[&str], pcap: &str) -> String {
    let out = std::process::Command::new("tshark")
        .args([
            "-2",
            "-o",
            "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
            "-r",
            pcap,
        ])
        .args(args)
        .output()
        .expect("run tshark");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
