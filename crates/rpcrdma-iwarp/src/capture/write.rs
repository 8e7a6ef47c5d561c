//! A classic pcap writer: TCP/IPv4 over Ethernet synthesized around the
//! octets each end of one connection sent (what
//! [`crate::tcp::IwarpProvider::take_capture`] records), for `tshark` or
//! [`super::Connections`].

use std::net::SocketAddr;

use super::pcap::{tcp_flags, LINKTYPE_ETHERNET, MAGIC_USEC, MAX_RECORD_LEN};
use super::recorded::StampedChunk;
use crate::tcp::Direction;

/// Largest TCP payload written in one packet.
pub const MAX_SEGMENT: usize = 32 * 1024;

fn csum(data: &[u8], init: u32) -> u16 {
    let mut s = init;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u32::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A classic pcap file (microsecond time stamps, Ethernet) being built in
/// memory.
pub struct PcapWriter {
    buf: Vec<u8>,
    t: u64,
    next: Option<u64>,
}

impl PcapWriter {
    /// The file header; packets are stamped 10 µs apart from
    /// `start_micros` (microseconds since the Unix epoch).
    pub fn new(start_micros: u64) -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(&MAGIC_USEC.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&0i32.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&MAX_RECORD_LEN.to_le_bytes());
        buf.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        PcapWriter {
            buf,
            t: start_micros,
            next: None,
        }
    }

    /// Stamps the next packet `micros` (microseconds since the Unix epoch;
    /// never before the previous packet) instead of 10 µs after the
    /// previous one.
    pub fn at(&mut self, micros: u64) {
        self.next = Some(micros);
    }

    /// Appends one TCP segment (IPv4 only: other addresses are skipped).
    pub fn tcp(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        seq: u32,
        ack: u32,
        flags: u8,
        payload: &[u8],
    ) {
        let (SocketAddr::V4(s4), SocketAddr::V4(d4)) = (src, dst) else {
            return;
        };
        let tcp_len = 20 + payload.len();
        let mut tcp = Vec::with_capacity(tcp_len);
        tcp.extend_from_slice(&s4.port().to_be_bytes());
        tcp.extend_from_slice(&d4.port().to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.push(5 << 4);
        tcp.push(flags);
        tcp.extend_from_slice(&65535u16.to_be_bytes());
        tcp.extend_from_slice(&[0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        let mut pseudo = Vec::with_capacity(12);
        pseudo.extend_from_slice(&s4.ip().octets());
        pseudo.extend_from_slice(&d4.ip().octets());
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
        let mut sum = 0u32;
        for c in pseudo.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        let c = csum(&tcp, sum);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        let mut ip = Vec::with_capacity(20);
        ip.extend_from_slice(&[0x45, 0]);
        ip.extend_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        ip.extend_from_slice(&s4.ip().octets());
        ip.extend_from_slice(&d4.ip().octets());
        let c = csum(&ip, 0);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut frame = Vec::with_capacity(14 + ip.len() + tcp.len());
        frame.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00]);
        frame.extend_from_slice(&ip);
        frame.extend_from_slice(&tcp);
        self.t = match self.next.take() {
            Some(t) => t.max(self.t),
            None => self.t + 10,
        };
        self.buf
            .extend_from_slice(&((self.t / 1_000_000) as u32).to_le_bytes());
        self.buf
            .extend_from_slice(&((self.t % 1_000_000) as u32).to_le_bytes());
        self.buf
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.buf
            .extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&frame);
    }

    /// The file.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// A capture of one TCP connection from `client` to `server`: handshake,
/// the octets of `segs` in order ([`Direction::Sent`] by the client; split
/// to at most [`MAX_SEGMENT`] octets a packet), FIN both ways.
pub fn tcp_session(
    client: SocketAddr,
    server: SocketAddr,
    segs: &[(Direction, Vec<u8>)],
    start_micros: u64,
) -> Vec<u8> {
    let segs: Vec<StampedChunk> = segs.iter().map(|(d, b)| (None, *d, b.clone())).collect();
    tcp_session_timed(client, server, &segs, start_micros)
}

/// [`tcp_session`] stamping each segment that has a time (microseconds
/// since the Unix epoch, what [`super::Recorded::streams_timed`] gives)
/// with it; the others, the handshake and the FINs 10 µs after the packet
/// before (the handshake from `start_micros`).
pub fn tcp_session_timed(
    client: SocketAddr,
    server: SocketAddr,
    segs: &[StampedChunk],
    start_micros: u64,
) -> Vec<u8> {
    use tcp_flags::{ACK, FIN, PSH, SYN};
    let mut p = PcapWriter::new(start_micros);
    let (mut cs, mut ss) = (0x1000_0000u32, 0x2000_0000u32);
    p.tcp(client, server, cs, 0, SYN, &[]);
    p.tcp(server, client, ss, cs.wrapping_add(1), SYN | ACK, &[]);
    cs = cs.wrapping_add(1);
    ss = ss.wrapping_add(1);
    p.tcp(client, server, cs, ss, ACK, &[]);
    for (t, d, data) in segs {
        for piece in data.chunks(MAX_SEGMENT) {
            if let Some(t) = t {
                p.at(*t);
            }
            if *d == Direction::Sent {
                p.tcp(client, server, cs, ss, PSH | ACK, piece);
                cs = cs.wrapping_add(piece.len() as u32);
            } else {
                p.tcp(server, client, ss, cs, PSH | ACK, piece);
                ss = ss.wrapping_add(piece.len() as u32);
            }
        }
    }
    p.tcp(client, server, cs, ss, FIN | ACK, &[]);
    p.tcp(server, client, ss, cs.wrapping_add(1), FIN | ACK, &[]);
    p.tcp(
        client,
        server,
        cs.wrapping_add(1),
        ss.wrapping_add(1),
        ACK,
        &[],
    );
    p.into_bytes()
}
