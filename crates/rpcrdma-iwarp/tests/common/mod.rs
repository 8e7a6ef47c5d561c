//! Test helpers: a classic-libpcap writer (Ethernet / IPv4 / TCP with
//! correct lengths, sequence numbers and checksums) and a reader that
//! reassembles the TCP byte streams of such captures.

#![allow(dead_code)]

use std::collections::BTreeMap;

/// Classic pcap file being built in memory.
pub struct PcapWriter {
    pub bytes: Vec<u8>,
    usec: u64,
}

impl Default for PcapWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl PcapWriter {
    pub fn new() -> Self {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // magic, µs
        bytes.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
        bytes.extend_from_slice(&4u16.to_le_bytes());
        bytes.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        bytes.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        bytes.extend_from_slice(&262_144u32.to_le_bytes()); // snaplen
        bytes.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        PcapWriter {
            bytes,
            usec: 1_700_000_000_000_000,
        }
    }

    pub fn packet(&mut self, frame: &[u8]) {
        self.usec += 100;
        let sec = (self.usec / 1_000_000) as u32;
        let us = (self.usec % 1_000_000) as u32;
        let len = frame.len() as u32;
        for v in [sec, us, len, len] {
            self.bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.bytes.extend_from_slice(frame);
    }
}

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u32::from(w);
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const PSH: u8 = 0x08;

/// Ethernet + IPv4 + TCP frame, 127.0.0.1 both ways.
pub fn eth_ip_tcp(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let ip_src = [127, 0, 0, 1];
    let ip_dst = [127, 0, 0, 1];
    let mut tcp = Vec::with_capacity(20 + payload.len());
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&dport.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.push(5 << 4);
    tcp.push(flags);
    tcp.extend_from_slice(&65535u16.to_be_bytes());
    tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
    tcp.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip_src);
    pseudo.extend_from_slice(&ip_dst);
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(&tcp);
    let c = csum(&pseudo);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
    ip.extend_from_slice(&ip_src);
    ip.extend_from_slice(&ip_dst);
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut eth = vec![0u8; 12];
    eth.extend_from_slice(&[0x08, 0x00]);
    eth.extend_from_slice(&ip);
    eth.extend_from_slice(&tcp);
    eth
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
        p.packet(&eth_ip_tcp(cport, sport, c.cseq, 0, SYN, &[]));
        c.cseq += 1;
        p.packet(&eth_ip_tcp(sport, cport, c.sseq, c.cseq, SYN | ACK, &[]));
        c.sseq += 1;
        p.packet(&eth_ip_tcp(cport, sport, c.cseq, c.sseq, ACK, &[]));
        c
    }

    pub fn c2s(&mut self, p: &mut PcapWriter, data: &[u8]) {
        p.packet(&eth_ip_tcp(
            self.cport,
            self.sport,
            self.cseq,
            self.sseq,
            PSH | ACK,
            data,
        ));
        self.cseq = self.cseq.wrapping_add(data.len() as u32);
    }

    pub fn s2c(&mut self, p: &mut PcapWriter, data: &[u8]) {
        p.packet(&eth_ip_tcp(
            self.sport,
            self.cport,
            self.sseq,
            self.cseq,
            PSH | ACK,
            data,
        ));
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
