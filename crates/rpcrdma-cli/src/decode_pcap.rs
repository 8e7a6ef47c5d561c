//! `rpcrdma decode --pcap FILE`: RPC-over-RDMA over iWARP in a capture
//! (classic pcap or pcapng).
//!
//! Every TCP connection of the capture is reassembled per direction
//! ([`crate::tcp_reassembly`]); a connection whose streams start with the
//! MPA Request / Reply frames (RFC 5044, RFC 6581) is decoded: the frames
//! and their RFC 8797 private data, then each direction's FPDU stream with
//! the negotiated CRC and Markers (Markers counted from the first octet
//! after the MPA frame, RFC 5044 §4.3), DDP (RFC 5041) and RDMAP
//! (RFC 5040). Untagged Sends are reassembled from their DDP segments (by
//! MSN, MO and the L bit) and their payload decoded as an RPC-over-RDMA
//! header (v1 or v2) with the code of `rpcrdma decode`.
//!
//! Output is in capture order of the packet that completes each item (so in
//! stream order per direction). With `--json`, one object per line:
//!
//! * every line: `conn` (`"a:p->b:p"`, initiator → responder, from the
//!   SYN or else from the MPA Request), `dir` (`"a:p->b:p"`, sender →
//!   receiver of this item), `from` (`"initiator"` / `"responder"`),
//!   `frame`, `packet` (1-based record number of the completing packet, or
//!   null for what is found at the end of the capture) and `time`
//!   (seconds, or null);
//! * `mpa-request` / `mpa-reply`: `rev`, `flags` (the octet), `crc`,
//!   `markers`, `reject`, `enhanced`, `reserved`, `pd_length`,
//!   `private_data` (hex), `ird_ord` (RFC 6581 header of an enhanced
//!   frame, or null) and `rpcrdma_private_data` (the object of
//!   `rpcrdma decode --what private-data --json`);
//! * `send`: `opcode` (`Send`, `SendInv`, `SendSE`, `SendSEInv`),
//!   `inv_stag` (Invalidate variants only), `msn`, `length`, `segments`
//!   (DDP segments), and `header` (the object of `rpcrdma decode --json`)
//!   or, when the payload is not a valid header, `header: null` and
//!   `header_error` (the `{"error", "offset", "detail"}` object);
//! * `write` / `read-response` (one line per DDP segment): `stag`,
//!   `offset` (the Tagged Offset), `length`, `last`;
//! * `read-request`: `msn`, `sink_stag`, `sink_to`, `size`, `src_stag`,
//!   `src_to`;
//! * `terminate`: `msn`, `layer`, `etype`, `ecode`, `description` (or
//!   null);
//! * `error`: `error` (a stable name, below) and `detail`; the framing
//!   errors and `ddp-rdmap` also carry the Terminate a peer would send
//!   (`layer`, `etype`, `ecode`, `description`), the framing errors the
//!   `stream_offset` of the FPDU at fault.
//!
//! | `error` | meaning | then |
//! |---|---|---|
//! | `mpa-bad-frame` | no MPA key, or PD_Length over 512 | direction skipped |
//! | `mpa-unexpected-frame` | both sides sent a Request (or a Reply) | direction skipped |
//! | `mpa-crc`, `mpa-marker`, `mpa-length` | FPDU CRC, Marker or ULPDU_Length check failed | direction skipped |
//! | `ddp-rdmap` | DDP / RDMAP header rejected | that segment skipped |
//! | `ddp-reassembly` | Send segment at the wrong MO, opcode change, too long, too many in progress | that message dropped |
//! | `ddp-msn` | untagged message whose MSN is not the next on its queue | informative |
//! | `tcp-gap` | octets missing from the capture | direction skipped |
//! | `capture-truncated` | a segment cut by the snaplen | direction skipped |
//! | `buffer-limit` | too much FPDU data before the peer's MPA frame | direction skipped |
//! | `incomplete-mpa-frame`, `incomplete-fpdu`, `incomplete-send` | the capture ends inside one | end of capture |
//! | `no-peer-mpa-frame` | FPDU data, but the peer's MPA frame is not in the capture | end of capture |
//!
//! Without `--json` the same items are listed per connection (MPA frames
//! with their decoded private data, each Send with the `rpcrdma decode`
//! tree of its header, one line per other RDMAP message), then a summary
//! line.
//!
//! Exit status: 0 when the file parsed (whatever the streams contained), 2
//! for a malformed capture file (after the lines decoded so far, one JSON
//! object `{"error", "offset", "detail"}` under `--json`), 1 for an I/O
//! error.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;

use rpcrdma_iwarp::ddp::DdpHeader;
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FramingConfig, FramingError, Received};
use rpcrdma_iwarp::mpa::{FrameDecode, FrameKind, MpaFrame, KEY_REP, KEY_REQ, MAX_PRIVATE_DATA};
use rpcrdma_iwarp::rdmap::{Opcode, Segment};
use rpcrdma_iwarp::TerminateCode;
use serde_json::{json, Map, Value};

use crate::pcap::{self, tcp_flags, Packet, PcapError, PcapReader, TcpSegment};
use crate::tcp_reassembly::Reassembler;

/// Largest number of TCP connections tracked; later ones are ignored.
pub const MAX_CONNS: usize = 65_536;
/// Largest FPDU-stream prefix buffered while waiting for the peer's MPA
/// frame.
pub const MAX_PENDING: usize = 4 << 20;
/// Largest reassembled Send message.
pub const MAX_SEND_LEN: usize = 1 << 20;
/// Largest number of Send messages being reassembled at once per direction.
pub const MAX_PARTIAL_SENDS: usize = 64;

/// The packet that completed an item.
#[derive(Clone, Copy)]
struct Pkt {
    number: u64,
    time: f64,
}

/// Output sink: JSON lines streamed, text grouped per connection.
struct Out {
    json: bool,
    w: Box<dyn Write>,
    texts: Vec<Vec<String>>,
}

impl Out {
    fn print(&mut self, s: &str) {
        // A closed pipe is not an error worth a panic.
        let _ = writeln!(self.w, "{s}");
    }
}

enum St {
    /// Waiting for the MPA Request or Reply at the start of the stream.
    Handshake(Vec<u8>),
    /// The frame is parsed; octets after it wait for the peer's frame.
    Waiting(Vec<u8>),
    /// Full operation: FPDUs.
    Fpdu(Box<FpduState>),
    /// Not decoded further (not MPA, rejected, or after an error).
    Closed,
}

struct Partial {
    opcode: Opcode,
    inv_stag: Option<u32>,
    data: Vec<u8>,
    segments: u32,
}

struct FpduState {
    rx: FpduReceiver,
    buf: Vec<u8>,
    sends: BTreeMap<u32, Partial>,
    /// The MSN of the next message on queues 0, 1 and 2.
    next_msn: [u32; 3],
}

struct Dir {
    reasm: Reassembler,
    isn: Option<u32>,
    state: St,
    frame: Option<MpaFrame>,
}

impl Dir {
    fn new() -> Self {
        Dir {
            reasm: Reassembler::new(),
            isn: None,
            state: St::Handshake(Vec::new()),
            frame: None,
        }
    }

    /// Stream octets this direction holds (out of order, or waiting for a
    /// frame, an FPDU or the rest of a Send).
    fn buffered(&self) -> usize {
        self.reasm.buffered()
            + match &self.state {
                St::Handshake(b) | St::Waiting(b) => b.len(),
                St::Fpdu(fs) => {
                    fs.buf.len() + fs.sends.values().map(|p| p.data.len()).sum::<usize>()
                }
                St::Closed => 0,
            }
    }
}

struct Conn {
    idx: usize,
    ends: [SocketAddr; 2],
    initiator: Option<usize>,
    dirs: [Dir; 2],
    mpa: bool,
}

impl Conn {
    fn name(&self) -> String {
        let i = self.initiator.unwrap_or(0);
        format!("{}->{}", self.ends[i], self.ends[1 - i])
    }

    fn role(&self, d: usize) -> &'static str {
        if self.initiator.unwrap_or(0) == d {
            "initiator"
        } else {
            "responder"
        }
    }

    fn arrow(&self, d: usize) -> &'static str {
        if self.initiator.unwrap_or(0) == d {
            "I->R"
        } else {
            "R->I"
        }
    }

    /// Emits one item of direction `d`.
    fn emit(
        &self,
        out: &mut Out,
        d: usize,
        pkt: Option<Pkt>,
        frame: &str,
        fields: Map<String, Value>,
        text: String,
    ) {
        if out.json {
            let mut o = Map::new();
            o.insert("conn".into(), self.name().into());
            o.insert(
                "dir".into(),
                format!("{}->{}", self.ends[d], self.ends[1 - d]).into(),
            );
            o.insert("from".into(), self.role(d).into());
            o.insert("frame".into(), frame.into());
            o.insert("packet".into(), pkt.map(|p| p.number).into());
            o.insert("time".into(), pkt.map(|p| p.time).into());
            o.extend(fields);
            let line = Value::Object(o).to_string();
            out.print(&line);
        } else {
            let at = pkt.map_or_else(|| "end".to_string(), |p| format!("#{}", p.number));
            let line = format!("  {at:>6} {} {text}", self.arrow(d));
            if let Some(t) = out.texts.get_mut(self.idx) {
                t.push(line);
            }
        }
    }

    fn error(&self, out: &mut Out, d: usize, pkt: Option<Pkt>, kind: &str, detail: String) {
        self.error_with(out, d, pkt, kind, detail, Map::new());
    }

    fn error_with(
        &self,
        out: &mut Out,
        d: usize,
        pkt: Option<Pkt>,
        kind: &str,
        detail: String,
        mut extra: Map<String, Value>,
    ) {
        let text = format!("ERROR {kind}: {detail}");
        extra.insert("error".into(), kind.into());
        extra.insert("detail".into(), detail.into());
        self.emit(out, d, pkt, "error", extra, text);
    }
}

/// Indents every line of `s` by `n` spaces.
fn indent(s: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    s.lines().map(|l| format!("\n{pad}{l}")).collect::<String>()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Counters for the text summary.
#[derive(Default)]
struct Stats {
    packets: u64,
    tcp: u64,
    other: u64,
    malformed: u64,
    ignored_conns: u64,
}

/// The dissector: feed it the records of a capture with
/// [`Decoder::packet`], then call [`Decoder::finish`]; it writes what
/// `rpcrdma decode --pcap` prints.
pub struct Decoder {
    out: Out,
    conns: Vec<Conn>,
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

impl Decoder {
    /// A dissector writing JSON lines (`json`) or the text listing to `w`.
    pub fn new(json: bool, w: Box<dyn Write>) -> Self {
        Decoder {
            out: Out {
                json,
                w,
                texts: Vec::new(),
            },
            conns: Vec::new(),
            by_key: HashMap::new(),
            stats: Stats::default(),
        }
    }

    /// Octets of captured TCP payload held now, over every connection
    /// (each is bounded per direction: [`crate::tcp_reassembly::MAX_OOO_BYTES`],
    /// [`MAX_PENDING`], [`MAX_SEND_LEN`] × [`MAX_PARTIAL_SENDS`], one FPDU).
    pub fn buffered(&self) -> usize {
        self.conns
            .iter()
            .flat_map(|c| c.dirs.iter())
            .map(Dir::buffered)
            .sum()
    }

    /// Dissects one record.
    pub fn packet(&mut self, rec: &pcap::Record<'_>) {
        self.stats.packets += 1;
        let pkt = Pkt {
            number: rec.number,
            time: rec.time(),
        };
        match pcap::parse_packet(rec.linktype, rec.data) {
            Packet::Tcp(seg) => {
                self.stats.tcp += 1;
                self.tcp(&seg, pkt);
            }
            Packet::Other => self.stats.other += 1,
            Packet::Malformed(_) => self.stats.malformed += 1,
        }
    }

    fn new_conn(&mut self, a: SocketAddr, b: SocketAddr) -> Option<usize> {
        if self.conns.len() >= MAX_CONNS {
            self.stats.ignored_conns += 1;
            return None;
        }
        let idx = self.conns.len();
        self.conns.push(Conn {
            idx,
            ends: [a, b],
            initiator: None,
            dirs: [Dir::new(), Dir::new()],
            mpa: false,
        });
        self.out.texts.push(Vec::new());
        self.by_key.insert(key(a, b), idx);
        Some(idx)
    }

    fn tcp(&mut self, seg: &TcpSegment<'_>, pkt: Pkt) {
        let k = key(seg.src, seg.dst);
        let syn = seg.flags & tcp_flags::SYN != 0;
        let ack = seg.flags & tcp_flags::ACK != 0;
        let mut idx = match self.by_key.get(&k) {
            Some(&i) => Some(i),
            None => self.new_conn(seg.src, seg.dst),
        };
        // A new SYN with another ISN on a known 4-tuple: a new connection.
        if let (Some(i), true) = (idx, syn && !ack) {
            let c = &self.conns[i];
            let d = usize::from(c.ends[0] != seg.src);
            if c.dirs[d].isn.is_some_and(|isn| isn != seg.seq) {
                finish_conn(&mut self.out, &mut self.conns[i]);
                idx = self.new_conn(seg.src, seg.dst);
            }
        }
        let Some(i) = idx else { return };
        let out = &mut self.out;
        let conn = &mut self.conns[i];
        let d = usize::from(conn.ends[0] != seg.src);
        let mut seq = seg.seq;
        if syn {
            if conn.initiator.is_none() {
                conn.initiator = Some(if ack { 1 - d } else { d });
            }
            conn.dirs[d].isn.get_or_insert(seg.seq);
            conn.dirs[d].reasm.syn(seg.seq);
            seq = seq.wrapping_add(1);
        }
        if seg.payload.is_empty() && seg.missing == 0 {
            return;
        }
        if matches!(conn.dirs[d].state, St::Closed) {
            return;
        }
        let mut bytes = Vec::new();
        let pushed = conn.dirs[d].reasm.push(seq, seg.payload, &mut bytes);
        feed(out, conn, d, &bytes, pkt);
        if let Err(g) = pushed {
            if !matches!(conn.dirs[d].state, St::Closed) {
                conn.dirs[d].state = St::Closed;
                if conn.mpa {
                    conn.error(
                        out,
                        d,
                        Some(pkt),
                        "tcp-gap",
                        format!(
                            "octets {}..{} of the stream are missing from the capture \
                             (too much data buffered behind the hole)",
                            g.at, g.resumes
                        ),
                    );
                }
            }
        } else if seg.missing > 0 && !matches!(conn.dirs[d].state, St::Closed) {
            conn.dirs[d].state = St::Closed;
            if conn.mpa {
                conn.error(
                    out,
                    d,
                    Some(pkt),
                    "capture-truncated",
                    format!(
                        "{} octets of a TCP segment were not captured (snaplen)",
                        seg.missing
                    ),
                );
            }
        }
    }

    /// End of the capture: reports what is incomplete, prints the text
    /// listing, flushes.
    pub fn finish(&mut self) {
        for c in &mut self.conns {
            finish_conn(&mut self.out, c);
        }
        if !self.out.json {
            let texts = std::mem::take(&mut self.out.texts);
            let mut n = 0;
            for (c, lines) in self.conns.iter().zip(texts) {
                if !c.mpa {
                    continue;
                }
                n += 1;
                let head = format!(
                    "connection {} (initiator -> responder; I->R / R->I below)",
                    c.name()
                );
                self.out.print(&head);
                for l in lines {
                    self.out.print(&l);
                }
            }
            let s = &self.stats;
            let tail = format!(
                "{} packets, {} TCP segments, {} other, {} malformed; {} MPA connection(s), \
                 {} other TCP connection(s){}",
                s.packets,
                s.tcp,
                s.other,
                s.malformed,
                n,
                self.conns.len() - n,
                if s.ignored_conns > 0 {
                    format!(", {} beyond the connection limit", s.ignored_conns)
                } else {
                    String::new()
                }
            );
            self.out.print(&tail);
        }
        let _ = self.out.w.flush();
    }
}

/// End-of-capture checks of a connection.
fn finish_conn(out: &mut Out, conn: &mut Conn) {
    for d in 0..2 {
        let state = std::mem::replace(&mut conn.dirs[d].state, St::Closed);
        let gap = conn.dirs[d].reasm.gap();
        if !conn.mpa {
            continue;
        }
        if let (Some(g), false) = (gap, matches!(state, St::Closed)) {
            conn.error(
                out,
                d,
                None,
                "tcp-gap",
                format!(
                    "octets {}..{} of the stream are missing from the capture",
                    g.at, g.resumes
                ),
            );
            // What is buffered before the hole is incomplete because of it.
            continue;
        }
        match state {
            St::Handshake(buf) if !buf.is_empty() => conn.error(
                out,
                d,
                None,
                "incomplete-mpa-frame",
                format!(
                    "the capture ends inside the MPA frame ({} octets)",
                    buf.len()
                ),
            ),
            St::Waiting(p) if !p.is_empty() => conn.error(
                out,
                d,
                None,
                "no-peer-mpa-frame",
                format!(
                    "{} octets after the MPA frame not decoded: the peer's MPA frame is not in the capture",
                    p.len()
                ),
            ),
            St::Fpdu(fs) => {
                if !fs.buf.is_empty() {
                    conn.error(
                        out,
                        d,
                        None,
                        "incomplete-fpdu",
                        format!(
                            "the capture ends inside an FPDU ({} octets buffered at stream offset {})",
                            fs.buf.len(),
                            fs.rx.stream_position()
                        ),
                    );
                }
                for (msn, p) in &fs.sends {
                    conn.error(
                        out,
                        d,
                        None,
                        "incomplete-send",
                        format!(
                            "the capture ends before the last segment of Send MSN {msn} ({} octets in {} segments)",
                            p.data.len(),
                            p.segments
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

/// Which frame the stream starts with: `Ok(None)` needs more octets.
fn classify(buf: &[u8]) -> Result<Option<FrameKind>, ()> {
    let n = buf.len().min(16);
    let req = buf[..n] == KEY_REQ[..n];
    let rep = buf[..n] == KEY_REP[..n];
    match (req, rep) {
        (true, true) => Ok(None),
        (true, false) => Ok(Some(FrameKind::Request)),
        (false, true) => Ok(Some(FrameKind::Reply)),
        (false, false) => Err(()),
    }
}

/// Feeds newly contiguous stream octets of direction `d`.
fn feed(out: &mut Out, conn: &mut Conn, d: usize, bytes: &[u8], pkt: Pkt) {
    if bytes.is_empty() {
        return;
    }
    let state = std::mem::replace(&mut conn.dirs[d].state, St::Closed);
    match state {
        St::Handshake(mut buf) => {
            buf.extend_from_slice(bytes);
            let kind = match classify(&buf) {
                Ok(Some(k)) => k,
                Ok(None) => {
                    conn.dirs[d].state = St::Handshake(buf);
                    return;
                }
                Err(()) => {
                    if conn.mpa {
                        conn.error(
                            out,
                            d,
                            Some(pkt),
                            "mpa-bad-frame",
                            "the stream does not start with an MPA Request or Reply key".into(),
                        );
                    }
                    return;
                }
            };
            match MpaFrame::decode_prefix(&buf, kind, MAX_PRIVATE_DATA) {
                Ok(FrameDecode::NeedMore(_)) => conn.dirs[d].state = St::Handshake(buf),
                Ok(FrameDecode::Frame { frame, consumed }) => {
                    let rest = buf.get(consumed..).unwrap_or(&[]).to_vec();
                    got_frame(out, conn, d, frame, rest, pkt);
                }
                Err(e) => {
                    conn.mpa = true;
                    if conn.initiator.is_none() {
                        conn.initiator = Some(if kind == FrameKind::Request { d } else { 1 - d });
                    }
                    conn.error(out, d, Some(pkt), "mpa-bad-frame", e.to_string());
                }
            }
        }
        St::Waiting(mut p) => {
            if p.len().saturating_add(bytes.len()) > MAX_PENDING {
                conn.error(
                    out,
                    d,
                    Some(pkt),
                    "buffer-limit",
                    format!(
                        "more than {MAX_PENDING} octets sent before the peer's MPA frame was seen"
                    ),
                );
                return;
            }
            p.extend_from_slice(bytes);
            conn.dirs[d].state = St::Waiting(p);
        }
        St::Fpdu(mut fs) => {
            fs.buf.extend_from_slice(bytes);
            let alive = run_fpdus(out, conn, d, &mut fs, pkt);
            if alive {
                conn.dirs[d].state = St::Fpdu(fs);
            }
        }
        St::Closed => {}
    }
}

fn got_frame(out: &mut Out, conn: &mut Conn, d: usize, frame: MpaFrame, rest: Vec<u8>, pkt: Pkt) {
    conn.mpa = true;
    if conn.initiator.is_none() {
        conn.initiator = Some(if frame.kind == FrameKind::Request {
            d
        } else {
            1 - d
        });
    }
    emit_mpa(out, conn, d, &frame, pkt);
    if let Some(peer) = &conn.dirs[1 - d].frame {
        if peer.kind == frame.kind {
            conn.error(
                out,
                d,
                Some(pkt),
                "mpa-unexpected-frame",
                format!("both directions sent an MPA {:?}", frame.kind),
            );
            return;
        }
    }
    conn.dirs[d].frame = Some(frame);
    conn.dirs[d].state = St::Waiting(rest);
    try_start(out, conn, pkt);
}

/// Starts the FPDU phase once both frames are known.
fn try_start(out: &mut Out, conn: &mut Conn, pkt: Pkt) {
    let (Some(f0), Some(f1)) = (&conn.dirs[0].frame, &conn.dirs[1].frame) else {
        return;
    };
    let (req, rep) = if f0.kind == FrameKind::Request {
        (f0, f1)
    } else {
        (f1, f0)
    };
    if rep.flags.reject() {
        // The connection is refused: nothing more is decoded.
        for dir in &mut conn.dirs {
            dir.state = St::Closed;
        }
        return;
    }
    //= rfc5044#section-7.1.1
    //# When this bit is '1' in either the MPA Request Frame
    //# or MPA Reply Frame, CRCs MUST be generated and checked by both
    //# endpoints.
    let crc = req.flags.crc() || rep.flags.crc();
    //= rfc5044#section-7.1.1
    //# When this
    //# bit is '1' in an MPA Request Frame, the Initiator declares that
    //# Markers are REQUIRED in FPDUs sent from the Responder.  When set
    //# to '1' in an MPA Reply Frame, this bit declares that Markers are
    //# REQUIRED in FPDUs sent from the Initiator.
    let markers = [
        if f0.kind == FrameKind::Request {
            rep.flags.markers()
        } else {
            req.flags.markers()
        },
        if f1.kind == FrameKind::Request {
            rep.flags.markers()
        } else {
            req.flags.markers()
        },
    ];
    for (d, m) in markers.into_iter().enumerate() {
        let state = std::mem::replace(&mut conn.dirs[d].state, St::Closed);
        match state {
            St::Waiting(pending) => {
                conn.dirs[d].state = St::Fpdu(Box::new(FpduState {
                    rx: FpduReceiver::new(FramingConfig { crc, markers: m }),
                    buf: Vec::new(),
                    sends: BTreeMap::new(),
                    next_msn: [1; 3],
                }));
                feed(out, conn, d, &pending, pkt);
            }
            other => conn.dirs[d].state = other,
        }
    }
}

fn emit_mpa(out: &mut Out, conn: &Conn, d: usize, f: &MpaFrame, pkt: Pkt) {
    let pd_text = crate::json_misc::decode_private_data(&f.private_data, out.json);
    let mut m = Map::new();
    m.insert("rev".into(), f.revision.into());
    m.insert("flags".into(), f.flags.0.into());
    m.insert("crc".into(), f.flags.crc().into());
    m.insert("markers".into(), f.flags.markers().into());
    m.insert("reject".into(), f.flags.reject().into());
    m.insert("enhanced".into(), f.flags.enhanced().into());
    m.insert("reserved".into(), f.flags.reserved().into());
    m.insert("pd_length".into(), f.private_data.len().into());
    m.insert("private_data".into(), hex::encode(&f.private_data).into());
    m.insert(
        "ird_ord".into(),
        f.ird_ord().map_or(Value::Null, |io| {
            json!({"ird": io.ird, "ord": io.ord, "peer_to_peer": io.peer_to_peer,
                   "rtr_send": io.rtr_send, "rtr_write": io.rtr_write, "rtr_read": io.rtr_read})
        }),
    );
    let pd_json = match (&pd_text, out.json) {
        (Ok(s), true) => serde_json::from_str(s).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    m.insert("rpcrdma_private_data".into(), pd_json);
    let kind = match f.kind {
        FrameKind::Request => "mpa-request",
        FrameKind::Reply => "mpa-reply",
    };
    let mut flags = Vec::new();
    for (on, n) in [
        (f.flags.markers(), "M"),
        (f.flags.crc(), "C"),
        (f.flags.reject(), "R"),
        (f.flags.enhanced(), "enhanced"),
    ] {
        if on {
            flags.push(n);
        }
    }
    let mut text = format!(
        "MPA {} rev {}, flags {:#04x} ({}), PD_Length {}{}",
        if f.kind == FrameKind::Request {
            "Request"
        } else if f.flags.reject() {
            "Reply (Reject)"
        } else {
            "Reply"
        },
        f.revision,
        f.flags.0,
        if flags.is_empty() {
            "none".to_string()
        } else {
            flags.join(" ")
        },
        f.private_data.len(),
        if f.private_data.is_empty() {
            String::new()
        } else {
            format!(": {}", hex::encode(&f.private_data))
        }
    );
    let pd_has_ird_ord = pd_text.as_ref().is_ok_and(|s| s.contains("RFC 6581"));
    if let (Some(io), false) = (f.ird_ord(), pd_has_ird_ord && !out.json) {
        text.push_str(&format!(
            "\n             RFC 6581: IRD {} ORD {}{}{}{}{}",
            io.ird,
            io.ord,
            if io.peer_to_peer { " P2P" } else { "" },
            if io.rtr_send { " RTR-send" } else { "" },
            if io.rtr_write { " RTR-write" } else { "" },
            if io.rtr_read { " RTR-read" } else { "" },
        ));
    }
    if let (Ok(s), false) = (&pd_text, out.json) {
        text.push_str(&indent(s, 13));
    }
    conn.emit(out, d, Some(pkt), kind, m, text);
}

/// Frames and handles every complete FPDU in `fs.buf`; false when the
/// direction is dead.
fn run_fpdus(out: &mut Out, conn: &mut Conn, d: usize, fs: &mut FpduState, pkt: Pkt) -> bool {
    let mut start = 0usize;
    let alive = loop {
        let avail = fs.buf.get(start..).unwrap_or(&[]);
        if avail.is_empty() {
            break true;
        }
        let at = fs.rx.stream_position();
        match fs.rx.poll(avail) {
            Ok(Received::Fpdu(f)) => {
                let mut u = Vec::with_capacity(usize::from(f.ulpdu_len));
                f.extend_ulpdu(avail, &mut u);
                start += f.consumed;
                ulpdu(out, conn, d, fs, &u, pkt);
            }
            Ok(Received::NeedMore(_)) => break true,
            Err(e) => {
                let kind = match e {
                    FramingError::BadCrc { .. } => "mpa-crc",
                    FramingError::BadMarker { .. } => "mpa-marker",
                    FramingError::BadLength { .. } => "mpa-length",
                };
                let mut extra = Map::new();
                extra.insert("stream_offset".into(), at.into());
                put_code(&mut extra, e.terminate_code());
                conn.error_with(out, d, Some(pkt), kind, e.to_string(), extra);
                break false;
            }
        }
    };
    fs.buf.drain(..start.min(fs.buf.len()));
    alive
}

fn put_code(m: &mut Map<String, Value>, c: TerminateCode) {
    m.insert("layer".into(), c.layer.into());
    m.insert("etype".into(), c.etype.into());
    m.insert("ecode".into(), c.code.into());
    m.insert("description".into(), c.describe().into());
}

fn send_opcode_name(op: Opcode) -> &'static str {
    match op {
        Opcode::SEND => "Send",
        Opcode::SEND_INVALIDATE => "SendInv",
        Opcode::SEND_SE => "SendSE",
        Opcode::SEND_SE_INVALIDATE => "SendSEInv",
        _ => "?",
    }
}

/// Handles one verified ULPDU (a DDP segment).
fn ulpdu(out: &mut Out, conn: &Conn, d: usize, fs: &mut FpduState, u: &[u8], pkt: Pkt) {
    let seg = match Segment::parse(u) {
        Ok(s) => s,
        Err(code) => {
            let mut extra = Map::new();
            put_code(&mut extra, code);
            let detail = format!("DDP/RDMAP segment rejected: {code}");
            conn.error_with(out, d, Some(pkt), "ddp-rdmap", detail, extra);
            return;
        }
    };
    let payload = u.get(seg.payload.clone()).unwrap_or(&[]);
    let op = seg.control.opcode;
    // Segment::parse checked that QN is 0, 1 or 2.
    let untagged = match seg.ddp {
        DdpHeader::Untagged(h) => Some(h),
        DdpHeader::Tagged(_) => None,
    };
    if let Some((h, next)) =
        untagged.and_then(|h| Some((h, fs.next_msn.get_mut(usize::try_from(h.qn).ok()?)?)))
    {
        //= rfc5041#section-4.3
        //# The Message Sequence Number specifies a sequence number that MUST
        //# be increased by one (modulo 2^32) with each DDP Message targeting
        //# the specific Queue Number on the DDP Stream associated with this
        //# DDP Segment.  The initial value for MSN MUST be one.
        if h.last {
            if h.msn != *next {
                let detail = format!(
                    "queue {}: message with MSN {} where MSN {} was expected \
                     (messages missing from the capture, or a peer bug)",
                    h.qn, h.msn, *next
                );
                conn.error(out, d, Some(pkt), "ddp-msn", detail);
            }
            *next = h.msn.wrapping_add(1);
        }
    }
    let sends = &mut fs.sends;
    match (seg.ddp, op) {
        (DdpHeader::Tagged(t), Opcode::WRITE | Opcode::READ_RESPONSE) => {
            let (frame, name) = if op == Opcode::WRITE {
                ("write", "RDMA Write")
            } else {
                ("read-response", "RDMA Read Response")
            };
            let m = obj(
                json!({"stag": t.stag, "offset": t.to, "length": payload.len(),
                               "last": t.last}),
            );
            let text = format!(
                "{name} STag {:#010x} TO {:#x} length {}{}",
                t.stag,
                t.to,
                payload.len(),
                if t.last { " (last)" } else { "" }
            );
            conn.emit(out, d, Some(pkt), frame, m, text);
        }
        (DdpHeader::Untagged(h), Opcode::READ_REQUEST) => {
            let Some(rr) = seg.read_request else { return };
            let m = obj(
                json!({"msn": h.msn, "sink_stag": rr.sink_stag, "sink_to": rr.sink_to,
                               "size": rr.size, "src_stag": rr.src_stag, "src_to": rr.src_to}),
            );
            let text = format!(
                "RDMA Read Request MSN {}: {} octets from STag {:#010x} TO {:#x} to sink STag {:#010x} TO {:#x}",
                h.msn, rr.size, rr.src_stag, rr.src_to, rr.sink_stag, rr.sink_to
            );
            conn.emit(out, d, Some(pkt), "read-request", m, text);
        }
        (DdpHeader::Untagged(h), Opcode::TERMINATE) => {
            let Some(t) = seg.terminate(u) else { return };
            let mut m = Map::new();
            m.insert("msn".into(), h.msn.into());
            put_code(&mut m, t.code);
            let text = format!("Terminate MSN {}: {}", h.msn, t.code);
            conn.emit(out, d, Some(pkt), "terminate", m, text);
        }
        (DdpHeader::Untagged(h), op) if op.is_send() => {
            send_segment(out, conn, d, sends, &seg, h.msn, h.mo, h.last, payload, pkt);
        }
        // Segment::parse accepts no other combination.
        _ => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn send_segment(
    out: &mut Out,
    conn: &Conn,
    d: usize,
    sends: &mut BTreeMap<u32, Partial>,
    seg: &Segment,
    msn: u32,
    mo: u32,
    last: bool,
    payload: &[u8],
    pkt: Pkt,
) {
    let op = seg.control.opcode;
    if !sends.contains_key(&msn) && sends.len() >= MAX_PARTIAL_SENDS {
        conn.error(
            out,
            d,
            Some(pkt),
            "ddp-reassembly",
            format!("more than {MAX_PARTIAL_SENDS} Send messages in progress; MSN {msn} dropped"),
        );
        return;
    }
    let p = sends.entry(msn).or_insert_with(|| Partial {
        opcode: op,
        inv_stag: seg.invalidate_stag(),
        data: Vec::new(),
        segments: 0,
    });
    // Over MPA/TCP the segments of a message arrive in order: MO must be
    // where the previous segment ended.
    //= rfc5041#section-4.3
    //# The Message Offset specifies the offset, in octets, from the
    //# start of the DDP Message represented by the MSN and Queue Number
    //# on the DDP Stream associated with this DDP Segment.
    let problem = if usize::try_from(mo).ok() != Some(p.data.len()) {
        Some(format!(
            "Send MSN {msn}: segment at MO {mo}, expected MO {}",
            p.data.len()
        ))
    } else if p.opcode != op {
        Some(format!(
            "Send MSN {msn}: segment opcode {op} differs from the message's {}",
            p.opcode
        ))
    } else if p.data.len().saturating_add(payload.len()) > MAX_SEND_LEN {
        Some(format!("Send MSN {msn} longer than {MAX_SEND_LEN} octets"))
    } else {
        None
    };
    if let Some(detail) = problem {
        sends.remove(&msn);
        conn.error(out, d, Some(pkt), "ddp-reassembly", detail);
        return;
    }
    p.data.extend_from_slice(payload);
    p.segments += 1;
    if !last {
        return;
    }
    let Some(p) = sends.remove(&msn) else { return };
    let mut m = Map::new();
    m.insert("opcode".into(), send_opcode_name(p.opcode).into());
    if let Some(s) = p.inv_stag {
        m.insert("inv_stag".into(), s.into());
    }
    m.insert("msn".into(), msn.into());
    m.insert("length".into(), p.data.len().into());
    m.insert("segments".into(), p.segments.into());
    let mut text = format!(
        "{} MSN {msn}{}, {} octets in {} segment{}",
        p.opcode,
        p.inv_stag
            .map_or(String::new(), |s| format!(" (invalidate STag {s:#010x})")),
        p.data.len(),
        p.segments,
        if p.segments == 1 { "" } else { "s" }
    );
    if out.json {
        match crate::json_header::header_json(&p.data) {
            Ok(v) => {
                m.insert("header".into(), v);
            }
            Err(f) => {
                m.insert("header".into(), Value::Null);
                m.insert("header_error".into(), f.to_json());
            }
        }
    } else {
        match crate::json_header::header_tree(&p.data) {
            Ok(t) => text.push_str(&indent(&t, 13)),
            Err(f) => text.push_str(&format!(
                "\n             not an RPC-over-RDMA header: {}",
                f.detail
            )),
        }
    }
    conn.emit(out, d, Some(pkt), "send", m, text);
}

fn fail(json: bool, e: &PcapError) -> ExitCode {
    if json {
        let line = json!({"error": e.kind, "offset": e.offset, "detail": e.detail}).to_string();
        let mut o = std::io::stdout();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    } else {
        eprintln!("rpcrdma decode: malformed capture: {e}");
    }
    if e.kind == "io" {
        ExitCode::from(1)
    } else {
        ExitCode::from(2)
    }
}

/// Runs `rpcrdma decode --pcap PATH` (`-` = standard input).
pub fn run(path: &str, json: bool) -> ExitCode {
    let input: Box<dyn Read> = if path == "-" {
        Box::new(std::io::stdin())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("rpcrdma decode: cannot read {path}: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let mut reader = match PcapReader::new(BufReader::with_capacity(1 << 16, input)) {
        Ok(r) => r,
        Err(e) => return fail(json, &e),
    };
    let mut dec = Decoder::new(json, Box::new(std::io::BufWriter::new(std::io::stdout())));
    loop {
        match reader.next_record() {
            Ok(Some(rec)) => dec.packet(&rec),
            Ok(None) => break,
            Err(e) => {
                dec.finish();
                return fail(json, &e);
            }
        }
    }
    dec.finish();
    ExitCode::SUCCESS
}
