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
//! * `send`: `channel` (`"forward"`, `"backward"` for the backchannel of
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
//! Without `--json` the same items are listed per connection (MPA frames
//! with their decoded private data, each Send with the `rpcrdma decode`
//! tree of its header, one line per other RDMAP message), then a summary
//! line.
//!
//! Exit status: 0 when the file parsed (whatever the streams contained), 2
//! for a capture file that cannot be read or is malformed (after the lines
//! decoded so far, the failure object `{"ok": false, "error": {"kind",
//! "op", "message", "offset"}}` under `--json`).

use std::io::{BufReader, Read, Write};

use crate::cli_error::CliError;
use std::process::ExitCode;

use rpcrdma_iwarp::capture::pcap::{PcapError, PcapReader, Record};
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
}

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
            let line = format!("  {at:>6} {} {text}", self.arrow(d));
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

/// The presenter: feed it the records of a capture with
/// [`Decoder::packet`], then call [`Decoder::finish`]; it writes what
/// `rpcrdma decode --pcap` prints.
pub struct Decoder {
    out: Out,
    conns: Connections,
    events: Vec<Event>,
}

impl Decoder {
    /// A presenter writing JSON lines (`json`) or the text listing to `w`.
    pub fn new(json: bool, w: Box<dyn Write>) -> Self {
        Decoder {
            out: Out {
                json,
                w,
                texts: Vec::new(),
            },
            conns: Connections::new(),
            events: Vec::new(),
        }
    }

    /// Dissects one record and prints what it completes.
    pub fn packet(&mut self, rec: &Record<'_>) {
        self.conns.record(rec, &mut self.events);
        self.present();
    }

    fn present(&mut self) {
        for e in self.events.drain(..) {
            let Some(c) = self.conns.get(e.conn) else {
                continue;
            };
            let conn = Named { idx: e.conn, c };
            present(&mut self.out, &conn, e.side, e.packet, &e.item);
        }
    }

    /// End of the capture: reports what is incomplete, prints the text
    /// listing, flushes.
    pub fn finish(&mut self) {
        self.conns.finish(&mut self.events);
        self.present();
        if !self.out.json {
            let mut texts = std::mem::take(&mut self.out.texts);
            texts.resize_with(self.conns.all().len(), Vec::new);
            let mut n = 0;
            for (idx, (c, lines)) in self.conns.all().iter().zip(texts).enumerate() {
                if !c.is_mpa() {
                    continue;
                }
                n += 1;
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
}

/// Prints one item of direction `d` of `conn`.
fn present(out: &mut Out, conn: &Named<'_>, d: Side, pkt: Option<PacketRef>, item: &Item) {
    let frame = item.name();
    let (fields, text) = match item {
        Item::Mpa(f) => mpa(out.json, f),
        Item::Send(s) => send(out.json, s, conn.initiator() == d),
        Item::Tagged {
            opcode,
            stag,
            to,
            len,
            last,
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
pub fn run(path: &str, json: bool) -> ExitCode {
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
