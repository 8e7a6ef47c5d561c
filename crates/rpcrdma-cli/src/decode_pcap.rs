//! `rpcrdma decode --pcap FILE`: RPC-over-RDMA over iWARP in a capture
//! (classic pcap or pcapng), presented.
//!
//! The capture is read and dissected by `rpcrdma_iwarp::capture` (every
//! TCP connection reassembled per direction; a connection whose streams
//! start with the MPA Request / Reply frames decoded by
//! `rpcrdma_iwarp::dissect`: the frames, then each direction's FPDUs with
//! the negotiated CRC and Markers, DDP and RDMAP, untagged Sends
//! reassembled). Here each item is printed: the MPA frames with their
//! RFC 8797 private data, and each Send's payload decoded as an
//! RPC-over-RDMA header (v1 or v2) with the code of `rpcrdma decode`.
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
//! * `send`: `transaction` (what the Send is in its RPC transaction:
//!   `role`, `xid`, `backchannel`, `class`, `prog`, `vers`, `proc`,
//!   `proc_name`, and for a reply `call_packet`, `srt_seconds`; see
//!   `decode_pcap_rpc`), `channel` (`"forward"`, `"backward"` for the backchannel of
//!   RFC 8167 — a CALL from the responder, a REPLY from the initiator —
//!   or null without an RPC header), `opcode` (`Send`, `SendInv`,
//!   `SendSE`, `SendSEInv`),
//!   `inv_stag` (Invalidate variants only), `msn`, `length`, `segments`
//!   (DDP segments), and `header` (the object of `rpcrdma decode --json`)
//!   or, when the payload is not a valid header, `header: null` and
//!   `header_error` (the error object `{"kind", "op", "message",
//!   "offset"}`);
//! * `write` / `read-response` (one line per DDP segment): `stag`,
//!   `offset` (the Tagged Offset), `length`, `last`;
//! * `read-request`: `msn`, `sink_stag`, `sink_to`, `size`, `src_stag`,
//!   `src_to`;
//! * `terminate`: `msn`, `layer`, `etype`, `ecode`, `description` (or
//!   null);
//! * `error`: `error`, the tool's error object (`kind`: a stable name,
//!   the table of `rpcrdma_iwarp::dissect`, plus `tcp-gap` and
//!   `capture-truncated` of `rpcrdma_iwarp::capture`; `op`: `dissect`;
//!   `message`); the framing errors and
//!   `ddp-rdmap` also carry the Terminate a peer would send (`layer`,
//!   `etype`, `ecode`, `description`), the framing errors the
//!   `stream_offset` of the FPDU at fault.
//!
//! Without `--json` the same items are listed per connection (packet
//! number, seconds since the first record; MPA frames with their decoded
//! private data, each Send with the `rpcrdma decode` tree of its header and
//! a `=>` line naming its call or reply, one line per other RDMAP message),
//! then a summary line. `--summary` prints only the summary of
//! `decode_pcap_rpc`; `--xid` / `--proc` keep only the matching Sends.
//!
//! Exit status: 0 when the file parsed (whatever the streams contained), 2
//! for a capture file that cannot be read or is malformed (after the lines
//! decoded so far, the failure object `{"ok": false, "error": {"kind",
//! "op", "message", "offset"}}` under `--json`).

use std::io::{BufReader, Read, Write};

use crate::cli_error::CliError;
use std::process::ExitCode;

use std::collections::HashMap;

use rpcrdma_iwarp::capture::pcap::{PcapError, PcapReader, Record};
use rpcrdma_iwarp::capture::rpc::{Filter, Message, Role, Transactions};
use rpcrdma_iwarp::capture::{Connection, Connections, Event, PacketRef};
use rpcrdma_iwarp::dissect::{Error, Item, SendMessage, Side};
use rpcrdma_iwarp::mpa::{FrameKind, MpaFrame};
use rpcrdma_iwarp::rdmap::Opcode;
use rpcrdma_iwarp::TerminateCode;
use serde_json::{json, Map, Value};

/// Output sink: JSON lines streamed, text grouped per connection.
struct Out {
    json: bool,
    w: Box<dyn Write>,
    texts: Vec<Vec<String>>,
    /// Time of the capture's first record (text times are relative to it,
    /// as Wireshark shows them).
    first_time: Option<u64>,
}

/// Where a call's text line is, to say later which packet answered it:
/// (connection, line) and the offset of its transaction line.
struct CallLine {
    conn: usize,
    line: usize,
    at: usize,
    msg: Message,
}

/// A call: connection, calling side, XID, packet number.
type CallKey = (usize, usize, u32, Option<u64>);

impl Out {
    fn print(&mut self, s: &str) {
        // A closed pipe is not an error worth a panic.
        let _ = writeln!(self.w, "{s}");
    }
}

/// A connection as printed: `initiator -> responder`.
struct Named<'a> {
    idx: usize,
    c: &'a Connection,
}

impl Named<'_> {
    fn initiator(&self) -> Side {
        self.c.initiator().unwrap_or(Side::A)
    }

    fn name(&self) -> String {
        let i = self.initiator();
        let ends = self.c.ends();
        format!("{}->{}", ends[i.index()], ends[i.peer().index()])
    }

    fn role(&self, d: Side) -> &'static str {
        if self.initiator() == d {
            "initiator"
        } else {
            "responder"
        }
    }

    fn arrow(&self, d: Side) -> &'static str {
        if self.initiator() == d {
            "I->R"
        } else {
            "R->I"
        }
    }

    /// Emits one item of direction `d`.
    fn emit(
        &self,
        out: &mut Out,
        d: Side,
        pkt: Option<PacketRef>,
        frame: &str,
        fields: Map<String, Value>,
        text: String,
    ) {
        if out.json {
            let ends = self.c.ends();
            let mut o = Map::new();
            o.insert("conn".into(), self.name().into());
            o.insert(
                "dir".into(),
                format!("{}->{}", ends[d.index()], ends[d.peer().index()]).into(),
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
            let time = match (pkt, out.first_time) {
                (Some(p), Some(t0)) => {
                    let ns = i128::from(p.nanos) - i128::from(t0);
                    format!("{:>11.6}", ns as f64 / 1e9)
                }
                _ => format!("{:>11}", ""),
            };
            let line = format!("  {at:>6} {time} {} {text}", self.arrow(d));
            if out.texts.len() <= self.idx {
                out.texts.resize_with(self.idx + 1, Vec::new);
            }
            out.texts[self.idx].push(line);
        }
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

/// What `rpcrdma decode --pcap` prints besides the items.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// JSON lines instead of the text listing.
    pub json: bool,
    /// Only the summary (SRT per procedure, message classes, chunk
    /// types), no items.
    pub summary: bool,
    /// Only the Sends (and the summary counts) that pass.
    pub filter: Filter,
}

/// The presenter: feed it the records of a capture with
/// [`Decoder::packet`], then call [`Decoder::finish`]; it writes what
/// `rpcrdma decode --pcap` prints.
pub struct Decoder {
    out: Out,
    opts: Options,
    conns: Connections,
    events: Vec<Event>,
    tx: Transactions,
    calls: HashMap<CallKey, CallLine>,
}

impl Decoder {
    /// A presenter writing JSON lines (`json`) or the text listing to `w`.
    pub fn new(json: bool, w: Box<dyn Write>) -> Self {
        Self::with_options(
            Options {
                json,
                ..Options::default()
            },
            w,
        )
    }

    /// A presenter with `opts`, writing to `w`.
    pub fn with_options(opts: Options, w: Box<dyn Write>) -> Self {
        Decoder {
            out: Out {
                json: opts.json,
                w,
                texts: Vec::new(),
                first_time: None,
            },
            tx: Transactions::with_filter(opts.filter.clone()),
            opts,
            conns: Connections::new(),
            events: Vec::new(),
            calls: HashMap::new(),
        }
    }

    /// Dissects one record and prints what it completes.
    pub fn packet(&mut self, rec: &Record<'_>) {
        self.out.first_time.get_or_insert_with(|| {
            rec.ts_sec
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(rec.ts_nsec))
        });
        self.conns.record(rec, &mut self.events);
        self.present();
    }

    fn present(&mut self) {
        let filtered = self.opts.filter != Filter::default();
        for e in std::mem::take(&mut self.events) {
            let Some(c) = self.conns.get(e.conn) else {
                continue;
            };
            let conn = Named { idx: e.conn, c };
            let msg = self.tx.event(&e, conn.initiator());
            if self.opts.summary {
                continue;
            }
            let shown = match &msg {
                Some(m) => self.opts.filter.matches(m.xid, m.proc),
                None => !filtered,
            };
            if !shown {
                continue;
            }
            present(
                &mut self.out,
                &conn,
                e.side,
                e.packet,
                &e.item,
                msg.as_ref(),
            );
            if let (Some(m), false) = (msg, self.out.json) {
                self.link_call(&e, m);
            }
        }
    }

    /// Text listing: remembers a call's line; on its reply, says on the
    /// call's line which packet answered it.
    fn link_call(&mut self, e: &Event, m: Message) {
        let conn = e.conn;
        match m.role {
            Some(Role::Call) => {
                let Some(line) = self.out.texts.get(conn).map(|t| t.len().saturating_sub(1)) else {
                    return;
                };
                let at = self.out.texts[conn][line].rfind("\n").map_or(0, |i| i + 1);
                let key = (conn, e.side.index(), m.xid, e.packet.map(|p| p.number));
                self.calls.insert(
                    key,
                    CallLine {
                        conn,
                        line,
                        at,
                        msg: m,
                    },
                );
            }
            Some(Role::Reply) => {
                let Some(c) = m.call else {
                    return;
                };
                let key = (
                    conn,
                    e.side.peer().index(),
                    m.xid,
                    c.packet.map(|p| p.number),
                );
                let Some(mut cl) = self.calls.remove(&key) else {
                    return;
                };
                cl.msg.proc = m.proc;
                let reply = e.packet.map(|p| (p.number, c.srt));
                let text = crate::decode_pcap_rpc::transaction_text(&cl.msg, reply);
                if let Some(s) = self
                    .out
                    .texts
                    .get_mut(cl.conn)
                    .and_then(|t| t.get_mut(cl.line))
                {
                    s.truncate(cl.at);
                    s.push_str(&" ".repeat(13));
                    s.push_str(&text);
                }
            }
            None => {}
        }
    }

    /// End of the capture: reports what is incomplete, prints the text
    /// listing, flushes.
    pub fn finish(&mut self) {
        self.conns.finish(&mut self.events);
        self.present();
        if self.opts.summary {
            self.print_summary();
        } else if !self.out.json {
            let mut texts = std::mem::take(&mut self.out.texts);
            texts.resize_with(self.conns.all().len(), Vec::new);
            let mut n = 0;
            let filtered = self.opts.filter != Filter::default();
            for (idx, (c, lines)) in self.conns.all().iter().zip(texts).enumerate() {
                if !c.is_mpa() {
                    continue;
                }
                n += 1;
                if filtered && lines.is_empty() {
                    continue;
                }
                let head = format!(
                    "connection {} (initiator -> responder; I->R / R->I below)",
                    Named { idx, c }.name()
                );
                self.out.print(&head);
                for l in lines {
                    self.out.print(&l);
                }
            }
            let s = self.conns.stats();
            let tail = format!(
                "{} packets, {} TCP segments, {} other, {} malformed; {} MPA connection(s), \
                 {} other TCP connection(s){}",
                s.packets,
                s.tcp,
                s.other,
                s.malformed,
                n,
                self.conns.all().len() - n,
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

    fn mpa_connections(&self) -> usize {
        self.conns.all().iter().filter(|c| c.is_mpa()).count()
    }

    fn print_summary(&mut self) {
        let n = self.mpa_connections();
        let stats = self.conns.stats();
        let s = self.tx.finish().clone();
        if self.out.json {
            let v = crate::decode_pcap_rpc::summary_json(&s, stats, n);
            self.out.print(&v.to_string());
        } else {
            self.out.print(&crate::decode_pcap_rpc::summary_text(&s));
            let tail = format!("{} packets, {} MPA connection(s)", stats.packets, n);
            self.out.print(&tail);
        }
    }
}

/// Prints one item of direction `d` of `conn` (`msg`: what a Send is in
/// its RPC transaction).
fn present(
    out: &mut Out,
    conn: &Named<'_>,
    d: Side,
    pkt: Option<PacketRef>,
    item: &Item,
    msg: Option<&Message>,
) {
    let frame = item.name();
    let (mut fields, mut text) = match item {
        Item::Mpa(f) => mpa(out.json, f),
        Item::Send(s) => send(out.json, s, conn.initiator() == d),
        Item::Tagged {
            opcode,
            stag,
            to,
            len,
            last,
            ..
        } => {
            let name = if *opcode == Opcode::WRITE {
                "RDMA Write"
            } else {
                "RDMA Read Response"
            };
            let m = obj(json!({"stag": stag, "offset": to, "length": len, "last": last}));
            let text = format!(
                "{name} STag {stag:#010x} TO {to:#x} length {len}{}",
                if *last { " (last)" } else { "" }
            );
            (m, text)
        }
        Item::ReadRequest { msn, request: rr } => {
            let m = obj(
                json!({"msn": msn, "sink_stag": rr.sink_stag, "sink_to": rr.sink_to,
                               "size": rr.size, "src_stag": rr.src_stag, "src_to": rr.src_to}),
            );
            let text = format!(
                "RDMA Read Request MSN {}: {} octets from STag {:#010x} TO {:#x} to sink STag {:#010x} TO {:#x}",
                msn, rr.size, rr.src_stag, rr.src_to, rr.sink_stag, rr.sink_to
            );
            (m, text)
        }
        Item::Terminate { msn, code } => {
            let mut m = Map::new();
            m.insert("msn".into(), (*msn).into());
            put_code(&mut m, *code);
            (m, format!("Terminate MSN {msn}: {code}"))
        }
        Item::Error(e) => error(e),
    };
    if let Item::Send(_) = item {
        use crate::decode_pcap_rpc::{transaction_json, transaction_text};
        if out.json {
            fields.insert(
                "transaction".into(),
                msg.map_or(Value::Null, transaction_json),
            );
        } else if let Some(m) = msg {
            text.push_str(&format!(
                "\n{}{}",
                " ".repeat(13),
                transaction_text(m, None)
            ));
        }
    }
    conn.emit(out, d, pkt, frame, fields, text);
}

fn error(e: &Error) -> (Map<String, Value>, String) {
    let mut m = Map::new();
    if let Some(at) = e.stream_offset {
        m.insert("stream_offset".into(), at.into());
    }
    if let Some(c) = e.terminate {
        put_code(&mut m, c);
    }
    let kind = e.kind.name();
    let text = format!("ERROR {kind}: {}", e.detail);
    m.insert(
        "error".into(),
        json!({"kind": kind, "op": "dissect", "message": e.detail}),
    );
    (m, text)
}

fn mpa(json: bool, f: &MpaFrame) -> (Map<String, Value>, String) {
    let pd_text = crate::json_misc::decode_private_data(&f.private_data, json);
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
    let pd_json = match (&pd_text, json) {
        (Ok(s), true) => serde_json::from_str(s).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    m.insert("rpcrdma_private_data".into(), pd_json);
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
    if let (Some(io), false) = (f.ird_ord(), pd_has_ird_ord && !json) {
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
    if let (Ok(s), false) = (&pd_text, json) {
        text.push_str(&indent(s, 13));
    }
    (m, text)
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

/// The RPC channel of a message: a CALL from the initiator or a REPLY from
/// the responder is `forward`; a CALL from the responder (the connection's
/// server calling its client, RFC 8167) or a REPLY from the initiator is
/// `backward`; `None` without an RPC header.
fn channel(payload: &[u8], from_initiator: bool) -> Option<&'static str> {
    let h = crate::json_header::header_json(payload).ok()?;
    let call = match h.get("rpc")?.get("direction")?.as_str()? {
        "CALL" => true,
        "REPLY" => false,
        _ => return None,
    };
    Some(if call == from_initiator {
        "forward"
    } else {
        "backward"
    })
}

fn send(json: bool, p: &SendMessage, from_initiator: bool) -> (Map<String, Value>, String) {
    let mut m = Map::new();
    let chan = channel(&p.payload, from_initiator);
    m.insert("channel".into(), chan.into());
    m.insert("opcode".into(), send_opcode_name(p.opcode).into());
    if let Some(s) = p.inv_stag {
        m.insert("inv_stag".into(), s.into());
    }
    m.insert("msn".into(), p.msn.into());
    m.insert("length".into(), p.payload.len().into());
    m.insert("segments".into(), p.segments.into());
    let mut text = format!(
        "{} MSN {}{}, {} octets in {} segment{}",
        p.opcode,
        p.msn,
        p.inv_stag
            .map_or(String::new(), |s| format!(" (invalidate STag {s:#010x})")),
        p.payload.len(),
        p.segments,
        if p.segments == 1 { "" } else { "s" }
    );
    if chan == Some("backward") {
        text.push_str(if from_initiator {
            " [backward direction (RFC 8167): the client's reply]"
        } else {
            " [backward direction (RFC 8167): a call from the server]"
        });
    }
    if json {
        match crate::json_header::header_json(&p.payload) {
            Ok(v) => {
                m.insert("header".into(), v);
            }
            Err(f) => {
                m.insert("header".into(), Value::Null);
                m.insert("header_error".into(), f.error_json());
            }
        }
    } else {
        match crate::json_header::header_tree(&p.payload) {
            Ok(t) => text.push_str(&indent(&t, 13)),
            Err(f) => text.push_str(&format!(
                "\n             not an RPC-over-RDMA header: {}",
                f.detail
            )),
        }
    }
    (m, text)
}

fn fail(json: bool, e: &PcapError) -> ExitCode {
    // A capture that cannot be read or parsed is bad input (exit 2).
    let err = CliError::bad_input(e.kind, "read-capture", format!("malformed capture: {e}"))
        .with("offset", e.offset);
    let _ = std::io::stdout().flush();
    err.report("decode", json)
}

/// Runs `rpcrdma decode --pcap PATH` (`-` = standard input).
pub fn run(path: &str, opts: Options) -> ExitCode {
    let json = opts.json;
    let input: Box<dyn Read> = if path == "-" {
        Box::new(std::io::stdin())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                return CliError::bad_input("io", "read-file", format!("cannot read {path}: {e}"))
                    .with("path", path)
                    .report("decode", json);
            }
        }
    };
    let mut reader = match PcapReader::new(BufReader::with_capacity(1 << 16, input)) {
        Ok(r) => r,
        Err(e) => return fail(json, &e),
    };
    let mut dec = Decoder::with_options(opts, Box::new(std::io::BufWriter::new(std::io::stdout())));
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
