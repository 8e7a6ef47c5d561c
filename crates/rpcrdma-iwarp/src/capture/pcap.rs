//! A bounded reader of classic libpcap and pcapng files and a parser of
//! the link, IP and TCP headers of the packets they hold.
//!
//! Classic format: a 24-octet global header (magic `a1b2c3d4` for
//! microsecond or `a1b23c4d` for nanosecond time stamps, in the writer's
//! byte order, which the magic reveals), then records of a 16-octet header
//! (seconds, fraction, captured length, original length) followed by the
//! captured octets. A captured length above [`MAX_RECORD_LEN`] is refused
//! before anything is allocated, and a file that ends inside a header or a
//! record is a [`PcapError`] naming the offset.
//!
//! pcapng: Section Header Blocks (either byte order, several sections),
//! Interface Description Blocks (link type, `if_tsresol`), Enhanced, Simple
//! and obsolete Packet Blocks; other blocks are skipped. A block longer than
//! [`MAX_BLOCK_LEN`], a block whose trailing length differs from its
//! leading one, a packet overrunning its block or naming an undeclared
//! interface are errors; so are more than [`MAX_INTERFACES`] interfaces.
//!
//! Link types: Ethernet (1, with 802.1Q / 802.1ad tags), BSD loopback /
//! null (0, host byte order family) and OpenBSD loop (108, network order),
//! raw IP (101, 228 IPv4, 229 IPv6), Linux cooked SLL (113) and SLL2 (276).
//! IPv4 and IPv6 (with hop-by-hop, routing and destination options
//! extension headers) carrying TCP. IP fragments are not reassembled.

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Largest captured length of one record accepted (also the largest
/// snaplen libpcap writes today). A larger one is a malformed file.
pub const MAX_RECORD_LEN: u32 = 262_144;

/// Octets of the global header.
pub const GLOBAL_HEADER_LEN: usize = 24;
/// Octets of a record header.
pub const RECORD_HEADER_LEN: usize = 16;

pub(crate) const MAGIC_USEC: u32 = 0xa1b2_c3d4;
const MAGIC_NSEC: u32 = 0xa1b2_3c4d;
const MAGIC_PCAPNG: u32 = 0x0a0d_0d0a;

/// LINKTYPE_NULL (BSD loopback, host byte order family).
pub const LINKTYPE_NULL: u32 = 0;
/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_RAW (IPv4 or IPv6 by the version nibble).
pub const LINKTYPE_RAW: u32 = 101;
/// LINKTYPE_LOOP (OpenBSD loopback, network byte order family).
pub const LINKTYPE_LOOP: u32 = 108;
/// LINKTYPE_LINUX_SLL (cooked capture v1).
pub const LINKTYPE_LINUX_SLL: u32 = 113;
/// LINKTYPE_IPV4.
pub const LINKTYPE_IPV4: u32 = 228;
/// LINKTYPE_IPV6.
pub const LINKTYPE_IPV6: u32 = 229;
/// LINKTYPE_LINUX_SLL2 (cooked capture v2).
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

const SUPPORTED_LINKTYPES: [u32; 8] = [
    LINKTYPE_NULL,
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    LINKTYPE_LOOP,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL2,
];

/// A malformed (or unreadable) capture file.
#[derive(Debug)]
pub struct PcapError {
    /// Stable machine name: `io`, `truncated`, `bad-magic`, `bad-block`
    /// (pcapng), `limit-exceeded`, `unsupported-linktype` (classic files;
    /// a pcapng interface of an unsupported type is ignored).
    pub kind: &'static str,
    /// File offset of the header or record at fault.
    pub offset: u64,
    /// Human readable explanation.
    pub detail: String,
}

impl std::fmt::Display for PcapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at file offset {}", self.detail, self.offset)
    }
}

/// One record of the file.
#[derive(Debug)]
pub struct Record<'a> {
    /// 1-based record number (Wireshark's frame number).
    pub number: u64,
    /// Link type of the interface the packet was captured on.
    pub linktype: u32,
    /// Time stamp, seconds.
    pub ts_sec: u64,
    /// Time stamp, nanoseconds within the second.
    pub ts_nsec: u32,
    /// The captured octets.
    pub data: &'a [u8],
}

impl Record<'_> {
    /// Time stamp in seconds.
    pub fn time(&self) -> f64 {
        self.ts_sec as f64 + f64::from(self.ts_nsec) / 1e9
    }
}

/// Largest pcapng block accepted (a packet of [`MAX_RECORD_LEN`] octets
/// plus room for options).
pub const MAX_BLOCK_LEN: u32 = MAX_RECORD_LEN + 65_536;
/// Largest number of interfaces (IDBs) in a pcapng section.
pub const MAX_INTERFACES: usize = 1024;

const NG_BOM: u32 = 0x1a2b_3c4d;
const NG_IDB: u32 = 1;
const NG_OPB: u32 = 2;
const NG_SPB: u32 = 3;
const NG_EPB: u32 = 6;

/// A pcapng interface: its link type and time stamp units per second.
#[derive(Clone, Copy, Debug)]
struct Iface {
    linktype: u32,
    snaplen: u32,
    /// Time stamp units per second (10^6 unless `if_tsresol` says).
    units: u64,
}

enum Format {
    Classic { nanos: bool, linktype: u32 },
    Ng { ifaces: Vec<Iface> },
}

/// Streaming reader of a classic pcap or a pcapng file.
pub struct PcapReader<R> {
    r: R,
    swapped: bool,
    format: Format,
    snaplen: u32,
    offset: u64,
    number: u64,
    buf: Vec<u8>,
}

/// Reads up to `out.len()` octets; returns how many (fewer only at EOF).
fn fill<R: Read>(r: &mut R, out: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match r.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn io_err(offset: u64, e: io::Error) -> PcapError {
    PcapError {
        kind: "io",
        offset,
        detail: format!("read error: {e}"),
    }
}

fn bad_block(offset: u64, detail: String) -> PcapError {
    PcapError {
        kind: "bad-block",
        offset,
        detail,
    }
}

fn u32_order(b: [u8; 4], swapped: bool) -> u32 {
    if swapped {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// `out[off..off + 4]` in the file's byte order (0 when out of range;
/// callers check lengths first).
fn get32(b: &[u8], off: usize, swapped: bool) -> u32 {
    match b.get(off..off + 4) {
        Some(s) => u32_order([s[0], s[1], s[2], s[3]], swapped),
        None => 0,
    }
}

fn get16(b: &[u8], off: usize, swapped: bool) -> u16 {
    match b.get(off..off + 2) {
        Some(s) if swapped => u16::from_be_bytes([s[0], s[1]]),
        Some(s) => u16::from_le_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Splits a time stamp of `units` per second into (seconds, nanoseconds).
fn split_ts(ts: u64, units: u64) -> (u64, u32) {
    let units = units.max(1);
    let frac = u128::from(ts % units) * 1_000_000_000 / u128::from(units);
    // frac < 10^9.
    (ts / units, u32::try_from(frac).unwrap_or(999_999_999))
}

/// Parses the `if_tsresol` option (code 9) of an IDB's options.
fn tsresol(opts: &[u8], swapped: bool) -> u64 {
    let mut off = 0usize;
    // At most 256 options examined.
    for _ in 0..256 {
        let code = get16(opts, off, swapped);
        let len = usize::from(get16(opts, off + 2, swapped));
        if code == 0 || off + 4 + len > opts.len() {
            break;
        }
        if code == 9 && len >= 1 {
            let v = opts[off + 4];
            let e = u32::from(v & 0x7f);
            return if v & 0x80 != 0 {
                1u64.checked_shl(e).unwrap_or(1_000_000)
            } else {
                10u64.checked_pow(e).unwrap_or(1_000_000)
            };
        }
        off += 4 + len.div_ceil(4) * 4;
    }
    1_000_000
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header (classic) or the first Section
    /// Header Block (pcapng).
    pub fn new(mut r: R) -> Result<Self, PcapError> {
        let mut h = [0u8; GLOBAL_HEADER_LEN];
        let n = fill(&mut r, &mut h[..4]).map_err(|e| io_err(0, e))?;
        if n == 4 && u32::from_le_bytes([h[0], h[1], h[2], h[3]]) == MAGIC_PCAPNG {
            let mut me = PcapReader {
                r,
                swapped: false,
                format: Format::Ng { ifaces: Vec::new() },
                snaplen: 0,
                offset: 0,
                number: 0,
                buf: Vec::new(),
            };
            me.ng_block_after_type(MAGIC_PCAPNG)?;
            return Ok(me);
        }
        let n = n + fill(&mut r, &mut h[n..]).map_err(|e| io_err(0, e))?;
        if n < GLOBAL_HEADER_LEN {
            return Err(PcapError {
                kind: "truncated",
                offset: 0,
                detail: format!(
                    "file ends inside the pcap global header ({n} of {GLOBAL_HEADER_LEN} octets)"
                ),
            });
        }
        let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let magic_be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match (magic_le, magic_be) {
            (MAGIC_USEC, _) => (false, false),
            (MAGIC_NSEC, _) => (false, true),
            (_, MAGIC_USEC) => (true, false),
            (_, MAGIC_NSEC) => (true, true),
            _ => {
                return Err(PcapError {
                    kind: "bad-magic",
                    offset: 0,
                    detail: format!("not a pcap or pcapng file (magic {magic_be:08x})"),
                })
            }
        };
        let snaplen = get32(&h, 16, swapped);
        // The upper bits may hold an FCS length (pcap-linktype(7)).
        let linktype = get32(&h, 20, swapped) & 0x0fff_ffff;
        if !SUPPORTED_LINKTYPES.contains(&linktype) {
            return Err(PcapError {
                kind: "unsupported-linktype",
                offset: 20,
                detail: format!(
                    "link type {linktype} not supported (Ethernet, SLL, SLL2, raw IP, null/loop are)"
                ),
            });
        }
        Ok(PcapReader {
            r,
            swapped,
            format: Format::Classic { nanos, linktype },
            snaplen,
            offset: GLOBAL_HEADER_LEN as u64,
            number: 0,
            buf: Vec::new(),
        })
    }

    /// The link type of a classic file (of the first interface of pcapng).
    #[cfg(test)]
    pub fn linktype(&self) -> u32 {
        match &self.format {
            Format::Classic { linktype, .. } => *linktype,
            Format::Ng { ifaces } => ifaces.first().map_or(0, |i| i.linktype),
        }
    }

    /// The file's snapshot length (informative; not trusted).
    #[cfg(test)]
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// The next record, `None` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, PcapError> {
        match self.format {
            Format::Classic { nanos, linktype } => self.next_classic(nanos, linktype),
            Format::Ng { .. } => self.next_ng(),
        }
    }

    fn next_classic(
        &mut self,
        nanos: bool,
        linktype: u32,
    ) -> Result<Option<Record<'_>>, PcapError> {
        let at = self.offset;
        let mut h = [0u8; RECORD_HEADER_LEN];
        let n = fill(&mut self.r, &mut h).map_err(|e| io_err(at, e))?;
        if n == 0 {
            return Ok(None);
        }
        if n < RECORD_HEADER_LEN {
            return Err(PcapError {
                kind: "truncated",
                offset: at,
                detail: format!(
                    "file ends inside the header of record {} ({n} of {RECORD_HEADER_LEN} octets)",
                    self.number + 1
                ),
            });
        }
        let sw = self.swapped;
        let ts_sec = get32(&h, 0, sw);
        let frac = get32(&h, 4, sw);
        let incl = get32(&h, 8, sw);
        if incl > MAX_RECORD_LEN {
            return Err(PcapError {
                kind: "limit-exceeded",
                offset: at,
                detail: format!(
                    "record {} claims {incl} captured octets (limit {MAX_RECORD_LEN})",
                    self.number + 1
                ),
            });
        }
        let ts_nsec = if nanos {
            frac.min(999_999_999)
        } else {
            frac.min(999_999).saturating_mul(1000)
        };
        // incl <= MAX_RECORD_LEN: the allocation is bounded.
        let len = incl as usize;
        self.buf.resize(len, 0);
        let got = fill(&mut self.r, &mut self.buf).map_err(|e| io_err(at, e))?;
        if got < len {
            return Err(PcapError {
                kind: "truncated",
                offset: at,
                detail: format!(
                    "file ends inside record {} ({got} of {len} octets)",
                    self.number + 1
                ),
            });
        }
        self.offset = at + (RECORD_HEADER_LEN + len) as u64;
        self.number += 1;
        Ok(Some(Record {
            number: self.number,
            linktype,
            ts_sec: u64::from(ts_sec),
            ts_nsec,
            data: &self.buf,
        }))
    }

    /// Reads exactly `out.len()` octets of the block at `at`.
    fn read_block_part(&mut self, at: u64, len: usize) -> Result<(), PcapError> {
        self.buf.resize(len, 0);
        let got = fill(&mut self.r, &mut self.buf).map_err(|e| io_err(at, e))?;
        if got < len {
            return Err(PcapError {
                kind: "truncated",
                offset: at,
                detail: format!("file ends inside a pcapng block ({got} of {len} octets)"),
            });
        }
        Ok(())
    }

    /// Reads the rest of a block whose 4-octet type was read; leaves its
    /// body (after type and length, before the trailing length) in
    /// `self.buf` and returns the type. A Section Header Block sets the
    /// byte order and forgets the interfaces.
    fn ng_block_after_type(&mut self, btype: u32) -> Result<u32, PcapError> {
        let at = self.offset;
        let mut l = [0u8; 4];
        let n = fill(&mut self.r, &mut l).map_err(|e| io_err(at, e))?;
        let mut bom = [0u8; 4];
        let mut nb = 0;
        if btype == MAGIC_PCAPNG && n == 4 {
            nb = fill(&mut self.r, &mut bom).map_err(|e| io_err(at, e))?;
        }
        if n < 4 || (btype == MAGIC_PCAPNG && nb < 4) {
            return Err(PcapError {
                kind: "truncated",
                offset: at,
                detail: "file ends inside a pcapng block header".into(),
            });
        }
        if btype == MAGIC_PCAPNG {
            self.swapped = match u32::from_le_bytes(bom) {
                NG_BOM => false,
                x if x.swap_bytes() == NG_BOM => true,
                _ => {
                    return Err(bad_block(
                        at,
                        "pcapng Section Header Block with a bad byte-order magic".into(),
                    ))
                }
            };
            self.format = Format::Ng { ifaces: Vec::new() };
        }
        let total = u32_order(l, self.swapped);
        if total < 12 || !total.is_multiple_of(4) {
            return Err(bad_block(
                at,
                format!("pcapng block length {total} is not a multiple of 4 of at least 12"),
            ));
        }
        if total > MAX_BLOCK_LEN {
            return Err(PcapError {
                kind: "limit-exceeded",
                offset: at,
                detail: format!("pcapng block of {total} octets (limit {MAX_BLOCK_LEN})"),
            });
        }
        // total <= MAX_BLOCK_LEN: bounded.
        let already = if btype == MAGIC_PCAPNG { 12 } else { 8 };
        let rest = (total as usize).saturating_sub(already);
        if rest < 4 {
            return Err(bad_block(
                at,
                "pcapng Section Header Block too short".into(),
            ));
        }
        self.read_block_part(at, rest)?;
        let trail_at = rest - 4;
        let trailer = get32(&self.buf, trail_at, self.swapped);
        if trailer != total {
            return Err(bad_block(
                at,
                format!("pcapng block length {total} and trailing length {trailer} differ"),
            ));
        }
        self.buf.truncate(trail_at);
        self.offset = at + u64::from(total);
        Ok(btype)
    }

    fn next_ng(&mut self) -> Result<Option<Record<'_>>, PcapError> {
        loop {
            let at = self.offset;
            let mut t = [0u8; 4];
            let n = fill(&mut self.r, &mut t).map_err(|e| io_err(at, e))?;
            if n == 0 {
                return Ok(None);
            }
            if n < 4 {
                return Err(PcapError {
                    kind: "truncated",
                    offset: at,
                    detail: "file ends inside a pcapng block type".into(),
                });
            }
            let raw = u32::from_le_bytes(t);
            let btype = if raw == MAGIC_PCAPNG {
                raw
            } else {
                u32_order(t, self.swapped)
            };
            // The block's offset for errors is `at`.
            self.offset = at;
            self.ng_block_after_type(btype)?;
            let sw = self.swapped;
            let Format::Ng { ifaces } = &mut self.format else {
                return Ok(None);
            };
            let b = &self.buf;
            match btype {
                NG_IDB => {
                    if b.len() < 8 {
                        return Err(bad_block(
                            at,
                            "pcapng Interface Description Block too short".into(),
                        ));
                    }
                    if ifaces.len() >= MAX_INTERFACES {
                        return Err(PcapError {
                            kind: "limit-exceeded",
                            offset: at,
                            detail: format!("more than {MAX_INTERFACES} pcapng interfaces"),
                        });
                    }
                    ifaces.push(Iface {
                        linktype: u32::from(get16(b, 0, sw)),
                        snaplen: get32(b, 4, sw),
                        units: tsresol(&b[8..], sw),
                    });
                    if ifaces.len() == 1 {
                        self.snaplen = ifaces[0].snaplen;
                    }
                }
                NG_EPB | NG_OPB | NG_SPB => {
                    let (iface, ts, cap_off, caplen) = match btype {
                        NG_SPB => {
                            let orig = get32(b, 0, sw) as usize;
                            let room = b.len().saturating_sub(4);
                            (0u32, 0u64, 4usize, orig.min(room))
                        }
                        _ => {
                            if b.len() < 20 {
                                return Err(bad_block(at, "pcapng packet block too short".into()));
                            }
                            let iface = if btype == NG_EPB {
                                get32(b, 0, sw)
                            } else {
                                u32::from(get16(b, 0, sw))
                            };
                            let ts =
                                (u64::from(get32(b, 4, sw)) << 32) | u64::from(get32(b, 8, sw));
                            (iface, ts, 20usize, get32(b, 12, sw) as usize)
                        }
                    };
                    let Some(ifc) = ifaces.get(iface as usize).copied() else {
                        return Err(bad_block(
                            at,
                            format!("pcapng packet for undeclared interface {iface}"),
                        ));
                    };
                    if cap_off + caplen > b.len() {
                        return Err(bad_block(
                            at,
                            format!("pcapng packet of {caplen} octets overruns its block"),
                        ));
                    }
                    let (ts_sec, ts_nsec) = split_ts(ts, ifc.units);
                    self.number += 1;
                    return Ok(Some(Record {
                        number: self.number,
                        linktype: ifc.linktype,
                        ts_sec,
                        ts_nsec,
                        data: &self.buf[cap_off..cap_off + caplen],
                    }));
                }
                // Section headers, name resolution, statistics, …: skipped.
                _ => {}
            }
        }
    }
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// A TCP segment found in a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Flags octet.
    pub flags: u8,
    /// The captured payload.
    pub payload: &'a [u8],
    /// Payload octets the IP header announces but the capture cut off
    /// (snaplen); 0 normally.
    pub missing: usize,
}

/// What a packet holds, as far as this dissector cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet<'a> {
    /// A TCP segment.
    Tcp(TcpSegment<'a>),
    /// Something else (ARP, UDP, IP fragment, …): ignored.
    Other,
    /// A header that does not parse (counted, ignored).
    Malformed(&'static str),
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// Parses the link, IP and TCP headers of a record's octets.
pub fn parse_packet(linktype: u32, data: &[u8]) -> Packet<'_> {
    let ip = match linktype {
        LINKTYPE_ETHERNET => {
            let mut off = 12;
            let mut et = match be16(data, off) {
                Some(e) => e,
                None => return Packet::Malformed("short Ethernet header"),
            };
            // At most two tags (802.1ad + 802.1Q).
            for _ in 0..2 {
                if et == ETHERTYPE_VLAN || et == ETHERTYPE_QINQ {
                    off += 4;
                    et = match be16(data, off) {
                        Some(e) => e,
                        None => return Packet::Malformed("short VLAN tag"),
                    };
                }
            }
            match et {
                ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => data.get(off + 2..),
                _ => return Packet::Other,
            }
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let Some(f) = data.get(..4) else {
                return Packet::Malformed("short loopback header");
            };
            let a = [f[0], f[1], f[2], f[3]];
            // Host byte order for NULL: accept both.
            let fam = if linktype == LINKTYPE_LOOP {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a).min(u32::from_be_bytes(a))
            };
            match fam {
                2 | 10 | 24 | 28 | 30 => data.get(4..),
                _ => return Packet::Other,
            }
        }
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => Some(data),
        LINKTYPE_LINUX_SLL => match be16(data, 14) {
            Some(ETHERTYPE_IPV4 | ETHERTYPE_IPV6) => data.get(16..),
            Some(_) => return Packet::Other,
            None => return Packet::Malformed("short SLL header"),
        },
        LINKTYPE_LINUX_SLL2 => match be16(data, 0) {
            Some(ETHERTYPE_IPV4 | ETHERTYPE_IPV6) => data.get(20..),
            Some(_) => return Packet::Other,
            None => return Packet::Malformed("short SLL2 header"),
        },
        _ => return Packet::Other,
    };
    let Some(ip) = ip else {
        return Packet::Malformed("short link header");
    };
    match ip.first().map(|b| b >> 4) {
        Some(4) => parse_ipv4(ip),
        Some(6) => parse_ipv6(ip),
        Some(_) => Packet::Other,
        None => Packet::Malformed("empty IP packet"),
    }
}

const PROTO_TCP: u8 = 6;

fn parse_ipv4(ip: &[u8]) -> Packet<'_> {
    let Some(&vihl) = ip.first() else {
        return Packet::Malformed("empty IPv4");
    };
    let ihl = usize::from(vihl & 0x0f) * 4;
    let (Some(total), Some(frag), Some(&proto)) = (be16(ip, 2), be16(ip, 6), ip.get(9)) else {
        return Packet::Malformed("short IPv4 header");
    };
    if ihl < 20 || ip.len() < ihl {
        return Packet::Malformed("bad IPv4 header length");
    }
    // Total length 0: a segmentation-offload packet captured before the
    // NIC split it (Wireshark reads it as "to the end of the capture").
    let total = match usize::from(total) {
        0 => ip.len(),
        t => t,
    };
    if total < ihl {
        return Packet::Malformed("IPv4 total length below header length");
    }
    // MF set or a fragment offset: not reassembled.
    if frag & 0x3fff != 0 {
        return Packet::Other;
    }
    if proto != PROTO_TCP {
        return Packet::Other;
    }
    let src = IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]));
    let dst = IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]));
    // Ethernet padding after the IP packet is dropped; a snaplen cut
    // leaves fewer octets than `total`.
    let end = total.min(ip.len());
    let missing = total - end;
    parse_tcp(src, dst, &ip[ihl..end], missing)
}

fn parse_ipv6(ip: &[u8]) -> Packet<'_> {
    let (Some(plen), Some(&first_next)) = (be16(ip, 4), ip.get(6)) else {
        return Packet::Malformed("short IPv6 header");
    };
    let Some(addrs) = ip.get(8..40) else {
        return Packet::Malformed("short IPv6 header");
    };
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&addrs[..16]);
    d.copy_from_slice(&addrs[16..]);
    let src = IpAddr::V6(Ipv6Addr::from(s));
    let dst = IpAddr::V6(Ipv6Addr::from(d));
    // Payload length 0 (offload or jumbogram): to the end of the capture.
    let total = match usize::from(plen) {
        0 => ip.len(),
        n => 40 + n,
    };
    let end = total.min(ip.len());
    let missing = total - end;
    let body = &ip[40..end];
    let mut next = first_next;
    let mut off = 0usize;
    // Hop-by-hop (0), routing (43), destination options (60); at most 8.
    for _ in 0..8 {
        match next {
            PROTO_TCP => return parse_tcp(src, dst, &body[off.min(body.len())..], missing),
            0 | 43 | 60 => {
                let (Some(&nh), Some(&len)) = (body.get(off), body.get(off + 1)) else {
                    return Packet::Malformed("short IPv6 extension header");
                };
                next = nh;
                off += (usize::from(len) + 1) * 8;
            }
            _ => return Packet::Other,
        }
    }
    Packet::Other
}

fn parse_tcp<'a>(src: IpAddr, dst: IpAddr, tcp: &'a [u8], missing: usize) -> Packet<'a> {
    let (Some(sport), Some(dport), Some(seq), Some(&doff), Some(&flags)) = (
        be16(tcp, 0),
        be16(tcp, 2),
        be32(tcp, 4),
        tcp.get(12),
        tcp.get(13),
    ) else {
        return Packet::Malformed("short TCP header");
    };
    let hlen = usize::from(doff >> 4) * 4;
    if hlen < 20 {
        return Packet::Malformed("bad TCP data offset");
    }
    let Some(payload) = tcp.get(hlen..) else {
        return Packet::Malformed("TCP header beyond the captured octets");
    };
    Packet::Tcp(TcpSegment {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        seq,
        flags,
        payload,
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(magic: u32, be: bool, linktype: u32) -> Vec<u8> {
        let mut v = Vec::new();
        let put32 = |v: &mut Vec<u8>, x: u32| {
            v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() })
        };
        put32(&mut v, magic);
        v.extend_from_slice(&if be { [0, 2, 0, 4] } else { [2, 0, 4, 0] });
        put32(&mut v, 0);
        put32(&mut v, 0);
        put32(&mut v, 65535);
        put32(&mut v, linktype);
        v
    }

    fn record(v: &mut Vec<u8>, be: bool, sec: u32, frac: u32, data: &[u8]) {
        for x in [sec, frac, data.len() as u32, data.len() as u32] {
            v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
        }
        v.extend_from_slice(data);
    }

    #[test]
    fn both_byte_orders_and_resolutions() {
        for (magic, be, frac, want_ns) in [
            (MAGIC_USEC, false, 250_000, 250_000_000),
            (MAGIC_USEC, true, 250_000, 250_000_000),
            (MAGIC_NSEC, false, 123_456_789, 123_456_789),
            (MAGIC_NSEC, true, 123_456_789, 123_456_789),
        ] {
            let mut f = global(magic, be, LINKTYPE_ETHERNET);
            record(&mut f, be, 7, frac, b"abc");
            record(&mut f, be, 8, 0, b"");
            let mut r = PcapReader::new(&f[..]).unwrap();
            assert_eq!(r.linktype(), 1);
            assert_eq!(r.snaplen(), 65535);
            let rec = r.next_record().unwrap().unwrap();
            assert_eq!((rec.number, rec.ts_sec, rec.ts_nsec), (1, 7, want_ns));
            assert_eq!(rec.data, b"abc");
            let rec = r.next_record().unwrap().unwrap();
            assert_eq!((rec.number, rec.data.len()), (2, 0));
            assert!(r.next_record().unwrap().is_none());
        }
    }

    #[test]
    fn hand_written_big_endian_header() {
        // a1b2c3d4 0002 0004 00000000 00000000 0000ffff 00000071 (SLL)
        let f = hex::decode(concat!(
            "a1b2c3d4", "0002", "0004", "00000000", "00000000", "0000ffff", "00000071"
        ))
        .unwrap();
        let r = PcapReader::new(&f[..]).unwrap();
        assert_eq!(r.linktype(), LINKTYPE_LINUX_SLL);
    }

    #[test]
    fn malformed_files() {
        let err = |b: &[u8]| match PcapReader::new(b) {
            Err(e) => e.kind,
            Ok(mut r) => loop {
                match r.next_record() {
                    Ok(Some(_)) => {}
                    Ok(None) => break "ok",
                    Err(e) => break e.kind,
                }
            },
        };
        assert_eq!(err(b""), "truncated");
        assert_eq!(err(&[0xd4, 0xc3, 0xb2]), "truncated");
        assert_eq!(err(&[0u8; 24]), "bad-magic");
        let ng = hex::decode("0a0d0d0a1c0000004d3c2b1a").unwrap();
        assert_eq!(err(&ng), "truncated");
        let g = global(MAGIC_USEC, false, LINKTYPE_ETHERNET);
        assert_eq!(err(&g), "ok");
        assert_eq!(err(&global(MAGIC_USEC, false, 147)), "unsupported-linktype");
        // Truncated at every offset of a record header and body.
        let mut f = g.clone();
        record(&mut f, false, 1, 2, &[9u8; 10]);
        for cut in g.len() + 1..f.len() {
            assert_eq!(err(&f[..cut]), "truncated", "cut at {cut}");
        }
        assert_eq!(err(&f), "ok");
        // Absurd captured length: refused before allocation.
        let mut f = g.clone();
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(err(&f), "limit-exceeded");
        let mut f = g;
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&(MAX_RECORD_LEN + 1).to_le_bytes());
        f.extend_from_slice(&[0; 4]);
        assert_eq!(err(&f), "limit-exceeded");
    }

    fn ng_block(be: bool, btype: u32, body: &[u8]) -> Vec<u8> {
        let mut b = body.to_vec();
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        let total = (12 + b.len()) as u32;
        let e = |x: u32| if be { x.to_be_bytes() } else { x.to_le_bytes() };
        let mut v = e(btype).to_vec();
        v.extend_from_slice(&e(total));
        v.extend_from_slice(&b);
        v.extend_from_slice(&e(total));
        v
    }

    fn ng_shb(be: bool) -> Vec<u8> {
        let mut body = if be {
            NG_BOM.to_be_bytes().to_vec()
        } else {
            NG_BOM.to_le_bytes().to_vec()
        };
        body.extend_from_slice(if be { &[0, 1, 0, 0] } else { &[1, 0, 0, 0] });
        body.extend_from_slice(&[0xff; 8]);
        ng_block(be, MAGIC_PCAPNG, &body)
    }

    fn ng_idb(be: bool, linktype: u16, tsresol: Option<u8>) -> Vec<u8> {
        let mut body = Vec::new();
        let e16 = |x: u16| if be { x.to_be_bytes() } else { x.to_le_bytes() };
        body.extend_from_slice(&e16(linktype));
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&if be {
            65535u32.to_be_bytes()
        } else {
            65535u32.to_le_bytes()
        });
        if let Some(r) = tsresol {
            body.extend_from_slice(&e16(9));
            body.extend_from_slice(&e16(1));
            body.extend_from_slice(&[r, 0, 0, 0]);
            body.extend_from_slice(&[0, 0, 0, 0]);
        }
        ng_block(be, NG_IDB, &body)
    }

    fn ng_epb(be: bool, iface: u32, ts: u64, data: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for x in [
            iface,
            (ts >> 32) as u32,
            ts as u32,
            data.len() as u32,
            data.len() as u32,
        ] {
            body.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
        }
        body.extend_from_slice(data);
        ng_block(be, NG_EPB, &body)
    }

    /// (number, linktype, seconds, nanoseconds, octets) of a record.
    type Rec = (u64, u32, u64, u32, Vec<u8>);

    fn read_all(f: &[u8]) -> Result<Vec<Rec>, &'static str> {
        let mut r = PcapReader::new(f).map_err(|e| e.kind)?;
        let mut v = Vec::new();
        while let Some(rec) = r.next_record().map_err(|e| e.kind)? {
            v.push((
                rec.number,
                rec.linktype,
                rec.ts_sec,
                rec.ts_nsec,
                rec.data.to_vec(),
            ));
        }
        Ok(v)
    }

    #[test]
    fn pcapng_hand_written() {
        // SHB (LE, 28 octets), IDB Ethernet (20), EPB iface 0, time stamp
        // 0x00000001_00000002 µs, 3 octets "abc" padded (36).
        let f = hex::decode(concat!(
            "0a0d0d0a",
            "1c000000",
            "4d3c2b1a",
            "01000000",
            "ffffffffffffffff",
            "1c000000",
            "01000000",
            "14000000",
            "0100",
            "0000",
            "ffff0000",
            "14000000",
            "06000000",
            "24000000",
            "00000000",
            "01000000",
            "02000000",
            "03000000",
            "03000000",
            "61626300",
            "24000000",
        ))
        .unwrap();
        let recs = read_all(&f).unwrap();
        // 0x1_00000002 µs = 4294967298 µs = 4294 s + 967298 µs.
        assert_eq!(recs, vec![(1, 1, 4294, 967_298_000, b"abc".to_vec())]);
    }

    #[test]
    fn pcapng_both_byte_orders_interfaces_and_resolution() {
        for be in [false, true] {
            let mut f = ng_shb(be);
            f.extend(ng_idb(be, 1, None));
            f.extend(ng_epb(be, 0, 1_700_000_000_250_000, b"abc"));
            f.extend(ng_block(be, 5, &[0; 12])); // statistics: skipped
            let mut spb = if be {
                3u32.to_be_bytes()
            } else {
                3u32.to_le_bytes()
            }
            .to_vec();
            spb.extend_from_slice(b"xyz");
            f.extend(ng_block(be, NG_SPB, &spb));
            f.extend(ng_idb(be, 101, Some(9))); // raw IP, nanoseconds
            f.extend(ng_epb(be, 1, 1_700_000_000_123_456_789, b"q"));
            f.extend(ng_idb(be, 1, Some(0x80 | 10))); // 2^-10 s
            f.extend(ng_epb(be, 2, 1024 * 5 + 512, b"r"));
            let recs = read_all(&f).unwrap();
            assert_eq!(
                recs,
                vec![
                    (1, 1, 1_700_000_000, 250_000_000, b"abc".to_vec()),
                    (2, 1, 0, 0, b"xyz".to_vec()),
                    (3, 101, 1_700_000_000, 123_456_789, b"q".to_vec()),
                    (4, 1, 5, 500_000_000, b"r".to_vec()),
                ],
                "be {be}"
            );
            // A second section in the other byte order resets interfaces.
            let mut g = f.clone();
            g.extend(ng_shb(!be));
            g.extend(ng_epb(!be, 0, 0, b"z"));
            assert_eq!(read_all(&g), Err("bad-block"));
            let mut g = f.clone();
            g.extend(ng_shb(!be));
            g.extend(ng_idb(!be, 113, None));
            g.extend(ng_epb(!be, 0, 7_000_000, b"z"));
            let recs = read_all(&g).unwrap();
            assert_eq!(recs[4], (5, 113, 7, 0, b"z".to_vec()));
            // Cut anywhere: a clean end at block boundaries, else truncated.
            let mut bounds = Vec::new();
            let mut off = 0;
            while off < f.len() {
                bounds.push(off);
                let l = f[off + 4..off + 8].try_into().unwrap();
                off += u32_order(l, be) as usize;
            }
            for cut in 1..f.len() {
                let r = read_all(&f[..cut]);
                if bounds.contains(&cut) {
                    assert!(r.is_ok(), "cut {cut}");
                } else {
                    assert_eq!(r.err(), Some("truncated"), "cut {cut}");
                }
            }
        }
    }

    #[test]
    fn pcapng_malformed_blocks() {
        let mut base = ng_shb(false);
        base.extend(ng_idb(false, 1, None));
        // Trailing length differs.
        let mut f = base.clone();
        let mut b = ng_epb(false, 0, 0, b"abcd");
        let n = b.len();
        b[n - 4] ^= 4;
        f.extend(b);
        assert_eq!(read_all(&f), Err("bad-block"));
        // Length not a multiple of 4, or below 12.
        for len in [13u32, 8] {
            let mut f = base.clone();
            f.extend_from_slice(&6u32.to_le_bytes());
            f.extend_from_slice(&len.to_le_bytes());
            f.extend_from_slice(&[0; 16]);
            assert_eq!(read_all(&f), Err("bad-block"));
        }
        // Absurd length: refused before allocation.
        let mut f = base.clone();
        f.extend_from_slice(&6u32.to_le_bytes());
        f.extend_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert_eq!(read_all(&f), Err("limit-exceeded"));
        // Captured length overruns the block.
        let mut f = base.clone();
        let mut b = ng_epb(false, 0, 0, b"abcd");
        b[20..24].copy_from_slice(&100u32.to_le_bytes());
        f.extend(b);
        assert_eq!(read_all(&f), Err("bad-block"));
        // Undeclared interface.
        let mut f = base.clone();
        f.extend(ng_epb(false, 3, 0, b"abcd"));
        assert_eq!(read_all(&f), Err("bad-block"));
        // Bad byte-order magic.
        let mut f = ng_shb(false);
        f[8] = 0;
        assert_eq!(read_all(&f), Err("bad-block"));
        // Too many interfaces.
        let mut f = ng_shb(false);
        for _ in 0..=MAX_INTERFACES {
            f.extend(ng_idb(false, 1, None));
        }
        assert_eq!(read_all(&f), Err("limit-exceeded"));
    }

    /// IPv4 (hand-written) + TCP header with 4 payload octets.
    fn ipv4_tcp() -> Vec<u8> {
        hex::decode(concat!(
            "4500002c00014000400600007f0000017f000002", // IPv4, total 44
            "9c414e510000000100000000501000ff00000000", // TCP 40001 -> 20049 seq 1
            "deadbeef"
        ))
        .unwrap()
    }

    fn check_tcp(p: Packet<'_>) {
        let Packet::Tcp(t) = p else { panic!("{p:?}") };
        assert_eq!(t.src, "127.0.0.1:40001".parse().unwrap());
        assert_eq!(t.dst, "127.0.0.2:20049".parse().unwrap());
        assert_eq!(t.seq, 1);
        assert_eq!(t.flags, tcp_flags::ACK);
        assert_eq!(t.payload, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(t.missing, 0);
    }

    #[test]
    fn link_types() {
        let ip = ipv4_tcp();
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        eth.extend_from_slice(&[0u8; 6]); // Ethernet padding: dropped
        check_tcp(parse_packet(LINKTYPE_ETHERNET, &eth));
        let mut vlan = vec![0u8; 12];
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        vlan.extend_from_slice(&ip);
        check_tcp(parse_packet(LINKTYPE_ETHERNET, &vlan));
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend_from_slice(&ip);
        check_tcp(parse_packet(LINKTYPE_LINUX_SLL, &sll));
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend_from_slice(&ip);
        check_tcp(parse_packet(LINKTYPE_LINUX_SLL2, &sll2));
        check_tcp(parse_packet(LINKTYPE_RAW, &ip));
        check_tcp(parse_packet(LINKTYPE_IPV4, &ip));
        for fam in [[2, 0, 0, 0], [0, 0, 0, 2]] {
            let mut null = fam.to_vec();
            null.extend_from_slice(&ip);
            check_tcp(parse_packet(LINKTYPE_NULL, &null));
        }
        // ARP is ignored, a short frame is malformed.
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_packet(LINKTYPE_ETHERNET, &arp), Packet::Other);
        assert!(matches!(
            parse_packet(LINKTYPE_ETHERNET, &[0; 5]),
            Packet::Malformed(_)
        ));
    }

    #[test]
    fn ipv6_tcp() {
        let mut ip = hex::decode("6000000000180600").unwrap(); // plen 24, TCP
        ip.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        ip.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        ip.extend_from_slice(&hex::decode("9c414e510000000100000000501000ff00000000").unwrap());
        ip.extend_from_slice(&[1, 2, 3, 4]);
        let Packet::Tcp(t) = parse_packet(LINKTYPE_RAW, &ip) else {
            panic!()
        };
        assert_eq!(t.src, "[::1]:40001".parse().unwrap());
        assert_eq!(t.payload, [1, 2, 3, 4]);
    }

    #[test]
    fn snaplen_cut_and_fragments() {
        let ip = ipv4_tcp();
        let Packet::Tcp(t) = parse_packet(LINKTYPE_RAW, &ip[..42]) else {
            panic!()
        };
        assert_eq!((t.payload.len(), t.missing), (2, 2));
        // Total length 0 (TSO): the captured octets are the packet.
        let mut tso = ip.clone();
        tso[2..4].copy_from_slice(&[0, 0]);
        let Packet::Tcp(t) = parse_packet(LINKTYPE_RAW, &tso) else {
            panic!()
        };
        assert_eq!((t.payload.len(), t.missing), (4, 0));
        let mut frag = ip.clone();
        frag[6] = 0x20; // MF
        assert_eq!(parse_packet(LINKTYPE_RAW, &frag), Packet::Other);
    }

    proptest::proptest! {
        /// Arbitrary octets as a file or as a packet: an answer, no panic.
        #[test]
        fn arbitrary_input_never_panics(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            linktype in proptest::sample::select(SUPPORTED_LINKTYPES.to_vec()),
            as_classic in proptest::bool::ANY,
        ) {
            let _ = parse_packet(linktype, &data);
            let mut f = if as_classic {
                let mut g = Vec::new();
                g.extend_from_slice(&MAGIC_USEC.to_le_bytes());
                g.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0]);
                g.extend_from_slice(&linktype.to_le_bytes());
                g
            } else {
                let mut g = ng_shb(false);
                g.extend(ng_idb(false, linktype as u16, None));
                g
            };
            f.extend_from_slice(&data);
            if let Ok(mut r) = PcapReader::new(&f[..]) {
                for _ in 0..1000 {
                    match r.next_record() {
                        Ok(Some(rec)) => {
                            let _ = parse_packet(rec.linktype, rec.data);
                        }
                        _ => break,
                    }
                }
            }
        }
    }

    #[test]
    fn never_panics_on_prefixes() {
        let ip = ipv4_tcp();
        for lt in SUPPORTED_LINKTYPES {
            for cut in 0..ip.len() {
                let _ = parse_packet(lt, &ip[..cut]);
            }
        }
        let mut bad = ip.clone();
        bad[0] = 0x4f; // IHL 60 > packet
        assert!(matches!(
            parse_packet(LINKTYPE_RAW, &bad),
            Packet::Malformed(_)
        ));
    }
}
