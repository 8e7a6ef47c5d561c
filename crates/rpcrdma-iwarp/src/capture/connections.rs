//! The TCP connections of a capture, each direction reassembled
//! ([`super::tcp_reassembly`]) and both dissected ([`crate::dissect`]).

use std::collections::HashMap;
use std::net::SocketAddr;

use super::pcap::{self, tcp_flags, Packet, Record, TcpSegment};
use super::tcp_reassembly::Reassembler;
use crate::dissect::{Dissector, ErrorKind, Item, Items, Side};

/// Largest number of TCP connections tracked; later ones are ignored.
pub const MAX_CONNS: usize = 65_536;

/// The packet that completed an item.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacketRef {
    /// 1-based record number in the file.
    pub number: u64,
    /// Time stamp, seconds.
    pub time: f64,
    /// The same time stamp in nanoseconds since the epoch, exact (for
    /// differences: service response times).
    pub nanos: u64,
}

/// One item of one connection.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Index of the connection ([`Connections::get`]).
    pub conn: usize,
    /// The end that sent it.
    pub side: Side,
    /// The packet that completed it; `None` for what the end of the
    /// capture (or of the connection) reports.
    pub packet: Option<PacketRef>,
    /// What was found.
    pub item: Item,
}

/// Counters of what the capture held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records.
    pub packets: u64,
    /// TCP segments.
    pub tcp: u64,
    /// Packets that are not TCP.
    pub other: u64,
    /// Packets whose headers do not parse.
    pub malformed: u64,
    /// Connections beyond [`MAX_CONNS`].
    pub ignored_conns: u64,
}

struct TcpDir {
    reasm: Reassembler,
    isn: Option<u32>,
}

/// One TCP connection.
pub struct Connection {
    ends: [SocketAddr; 2],
    initiator: Option<Side>,
    dirs: [TcpDir; 2],
    dissector: Dissector,
}

impl Connection {
    /// The two ends: [`Side::A`] is the source of the first segment seen.
    pub fn ends(&self) -> [SocketAddr; 2] {
        self.ends
    }

    /// The end that opened the connection: the sender of the SYN or else
    /// of the MPA Request.
    pub fn initiator(&self) -> Option<Side> {
        self.initiator
    }

    /// True once either stream started with an MPA frame key.
    pub fn is_mpa(&self) -> bool {
        self.dissector.is_mpa()
    }

    /// Stream octets held: out of order, or in the dissector.
    fn buffered(&self) -> usize {
        self.dirs.iter().map(|d| d.reasm.buffered()).sum::<usize>() + self.dissector.buffered()
    }

    fn side_of(&self, src: SocketAddr) -> Side {
        if self.ends[0] != src {
            Side::B
        } else {
            Side::A
        }
    }

    /// End-of-capture checks.
    fn finish(&mut self, out: &mut Items) {
        for side in Side::BOTH {
            if let Some(g) = self.dirs[side.index()].reasm.gap() {
                // What is buffered before the hole is incomplete because
                // of it.
                let detail = format!(
                    "octets {}..{} of the stream are missing from the capture",
                    g.at, g.resumes
                );
                self.dissector
                    .interrupt(side, ErrorKind::TcpGap, detail, out);
            }
            self.dissector.end(side, out);
        }
    }

    /// The initiator from the MPA frames when no SYN told.
    fn adopt_initiator(&mut self) {
        if self.initiator.is_none() {
            self.initiator = self.dissector.initiator();
        }
    }
}

/// The connections of a capture; see the module docs.
#[derive(Default)]
pub struct Connections {
    conns: Vec<Connection>,
    by_key: HashMap<(SocketAddr, SocketAddr), usize>,
    stats: Stats,
}

fn key(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

fn events(conn: usize, packet: Option<PacketRef>, items: Items, out: &mut Vec<Event>) {
    out.extend(items.into_iter().map(|(side, item)| Event {
        conn,
        side,
        packet,
        item,
    }));
}

impl Connections {
    /// No connection yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Connection `i` (of an [`Event`]).
    pub fn get(&self, i: usize) -> Option<&Connection> {
        self.conns.get(i)
    }

    /// Every connection, in the order they were first seen.
    pub fn all(&self) -> &[Connection] {
        &self.conns
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Octets of captured TCP payload held now, over every connection
    /// (each is bounded per direction:
    /// [`super::tcp_reassembly::MAX_OOO_BYTES`] and the limits of
    /// [`crate::dissect`]).
    pub fn buffered(&self) -> usize {
        self.conns.iter().map(Connection::buffered).sum()
    }

    /// Dissects one record; appends what it completes.
    pub fn record(&mut self, rec: &Record<'_>, out: &mut Vec<Event>) {
        self.stats.packets += 1;
        let pkt = PacketRef {
            number: rec.number,
            time: rec.time(),
            nanos: rec
                .ts_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(rec.ts_nsec)),
        };
        match pcap::parse_packet(rec.linktype, rec.data) {
            Packet::Tcp(seg) => {
                self.stats.tcp += 1;
                self.tcp(&seg, pkt, out);
            }
            Packet::Other => self.stats.other += 1,
            Packet::Malformed(_) => self.stats.malformed += 1,
        }
    }

    /// End of the capture: appends what every connection leaves
    /// incomplete.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        for (i, c) in self.conns.iter_mut().enumerate() {
            let mut items = Items::new();
            c.finish(&mut items);
            events(i, None, items, out);
        }
    }

    fn new_conn(&mut self, a: SocketAddr, b: SocketAddr) -> Option<usize> {
        if self.conns.len() >= MAX_CONNS {
            self.stats.ignored_conns += 1;
            return None;
        }
        let idx = self.conns.len();
        let dir = || TcpDir {
            reasm: Reassembler::new(),
            isn: None,
        };
        self.conns.push(Connection {
            ends: [a, b],
            initiator: None,
            dirs: [dir(), dir()],
            dissector: Dissector::new(),
        });
        self.by_key.insert(key(a, b), idx);
        Some(idx)
    }

    fn tcp(&mut self, seg: &TcpSegment<'_>, pkt: PacketRef, out: &mut Vec<Event>) {
        let k = key(seg.src, seg.dst);
        let syn = seg.flags & tcp_flags::SYN != 0;
        let ack = seg.flags & tcp_flags::ACK != 0;
        let mut idx = match self.by_key.get(&k) {
            Some(&i) => Some(i),
            None => self.new_conn(seg.src, seg.dst),
        };
        // A new SYN with another ISN on a known 4-tuple: a new connection.
        if let (Some(i), true) = (idx, syn && !ack) {
            let c = &mut self.conns[i];
            let d = c.side_of(seg.src);
            if c.dirs[d.index()].isn.is_some_and(|isn| isn != seg.seq) {
                let mut items = Items::new();
                c.finish(&mut items);
                events(i, None, items, out);
                idx = self.new_conn(seg.src, seg.dst);
            }
        }
        let Some(i) = idx else { return };
        let conn = &mut self.conns[i];
        let d = conn.side_of(seg.src);
        let mut seq = seg.seq;
        if syn {
            if conn.initiator.is_none() {
                conn.initiator = Some(if ack { d.peer() } else { d });
            }
            let dir = &mut conn.dirs[d.index()];
            dir.isn.get_or_insert(seg.seq);
            dir.reasm.syn(seg.seq);
            seq = seq.wrapping_add(1);
        }
        if seg.payload.is_empty() && seg.missing == 0 {
            return;
        }
        if conn.dissector.is_closed(d) {
            return;
        }
        let mut bytes = Vec::new();
        let pushed = conn.dirs[d.index()]
            .reasm
            .push(seq, seg.payload, &mut bytes);
        let mut items = Items::new();
        conn.dissector.feed(d, &bytes, &mut items);
        if let Err(g) = pushed {
            let detail = format!(
                "octets {}..{} of the stream are missing from the capture \
                 (too much data buffered behind the hole)",
                g.at, g.resumes
            );
            conn.dissector
                .interrupt(d, ErrorKind::TcpGap, detail, &mut items);
        } else if seg.missing > 0 {
            let detail = format!(
                "{} octets of a TCP segment were not captured (snaplen)",
                seg.missing
            );
            conn.dissector
                .interrupt(d, ErrorKind::CaptureTruncated, detail, &mut items);
        }
        conn.adopt_initiator();
        events(i, Some(pkt), items, out);
    }
}
