//! RPC transactions in a dissected capture, as Wireshark's `rpc,srt`
//! statistics see them: each Send's RPC-over-RDMA header decoded, calls
//! matched to their replies by connection, direction and XID, the service
//! response time (SRT: reply time minus call time) of each, and the counts
//! of each RPC-over-RDMA message class and chunk type.
//!
//! Feed [`Transactions::event`] every [`Event`] of [`super::Connections`]
//! in order; it says what each Send is ([`Message`]); [`Transactions::finish`]
//! gives the [`Summary`].
//!
//! A call is matched to the first reply with its XID on the same
//! connection in the other direction (a forward call from the initiator is
//! answered by the responder; an RFC 8167 backchannel call from the
//! responder by the initiator). A call whose RPC message travels in a
//! position-zero Read chunk (RDMA_NOMSG) has no RPC header in its Send: its
//! program, version and procedure are read from the start of the RDMA Read
//! Response that fetched the chunk (the Read Request maps the chunk's
//! handle and offset to the sink the response is written to), as Wireshark
//! does by reassembling the chunk.
//!
//! Bounded: at most [`MAX_PENDING`] calls await a reply and at most
//! [`MAX_READ_TRACK`] position-zero Read chunks are followed; beyond that a
//! call is counted in [`Summary::untracked_calls`] and not matched.

use std::collections::{BTreeMap, HashMap};

use rpcrdma_proto::wire::chunk::ChunkLists;
use rpcrdma_proto::wire::header::{self, TransportHeader};
use rpcrdma_proto::wire::rpc::{names, RpcPeek};
use rpcrdma_proto::wire::{v1, v2};
use rpcrdma_proto::Limits;

use super::{Event, PacketRef};
use crate::dissect::{Item, Side};
use crate::rdmap::Opcode;

/// Most calls awaiting their reply.
pub const MAX_PENDING: usize = 65_536;
/// Most position-zero Read chunks (and the Read Requests fetching them)
/// followed to learn a call's procedure.
pub const MAX_READ_TRACK: usize = 4_096;

/// A procedure: program, version, number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc: u32,
}

impl ProcId {
    /// Its name ([`names::procedure_name`]), or `None`.
    pub fn name(&self) -> Option<&'static str> {
        names::procedure_name(self.prog, self.vers, self.proc)
    }

    /// How a listing shows it: `NFSv3 READ`, or `NFSv3 proc 99`, or
    /// `prog 0x20005244 vers 1 proc 3`.
    pub fn label(&self) -> String {
        match (names::program_name(self.prog), self.name()) {
            (Some(_), Some(n)) => {
                format!("{} {n}", names::program_version_label(self.prog, self.vers))
            }
            (Some(_), None) => format!(
                "{} proc {}",
                names::program_version_label(self.prog, self.vers),
                self.proc
            ),
            _ => format!(
                "prog {:#x} vers {} proc {}",
                self.prog, self.vers, self.proc
            ),
        }
    }
}

/// What a Send is in its RPC transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An RPC call.
    Call,
    /// An RPC reply (or an RDMA_ERROR answering a call).
    Reply,
}

/// The call a reply answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallRef {
    /// The packet that completed the call.
    pub packet: Option<PacketRef>,
    /// Service response time in seconds (reply time minus call time), when
    /// both have time stamps.
    pub srt: Option<f64>,
}

/// One Send as the tracker sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The transport header's XID.
    pub xid: u32,
    /// The message class (`RDMA_MSG`, `RDMA_NOMSG`, `RDMA2_CONNPROP`, …,
    /// `UNKNOWN`).
    pub class: &'static str,
    /// Call, reply, or neither (RDMA_DONE, CONNPROP, an unmatched
    /// RDMA_ERROR).
    pub role: Option<Role>,
    /// True for an RFC 8167 backchannel message (a call from the
    /// responder, a reply from the initiator).
    pub backchannel: bool,
    /// The procedure: a call's own (`None` until known when its header is
    /// in a Read chunk), a reply's call's.
    pub proc: Option<ProcId>,
    /// A matched reply's call.
    pub call: Option<CallRef>,
}

/// Service response times of one procedure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStats {
    /// Calls seen.
    pub calls: u64,
    /// Calls answered by an RPC reply (Wireshark's "Calls" column counts
    /// these).
    pub replied: u64,
    /// Calls answered by an RDMA_ERROR.
    pub rdma_errors: u64,
    /// Replied calls with both time stamps (the SRT columns cover these).
    pub timed: u64,
    /// Smallest SRT, seconds.
    pub min_srt: f64,
    /// Largest SRT, seconds.
    pub max_srt: f64,
    /// Sum of the SRTs, seconds.
    pub sum_srt: f64,
}

impl ProcStats {
    /// Mean SRT in seconds, if any call was timed.
    pub fn avg_srt(&self) -> Option<f64> {
        (self.timed > 0).then(|| self.sum_srt / self.timed as f64)
    }

    fn add_srt(&mut self, srt: f64) {
        if self.timed == 0 || srt < self.min_srt {
            self.min_srt = srt;
        }
        if self.timed == 0 || srt > self.max_srt {
            self.max_srt = srt;
        }
        self.timed += 1;
        self.sum_srt += srt;
    }
}

/// Counts of one chunk type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkStats {
    /// Chunks.
    pub chunks: u64,
    /// Segments.
    pub segments: u64,
    /// Octets the segments cover.
    pub bytes: u64,
}

impl ChunkStats {
    fn add(&mut self, segments: u64, bytes: u64) {
        self.chunks += 1;
        self.segments += segments;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// Chunk counts by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chunks {
    /// Read chunks at position zero (the whole RPC message).
    pub position_zero_read: ChunkStats,
    /// Other Read chunks (DDP-eligible arguments).
    pub read: ChunkStats,
    /// Write chunks.
    pub write: ChunkStats,
    /// Reply chunks.
    pub reply: ChunkStats,
}

/// What [`Transactions::finish`] reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Per procedure; `None`: calls whose procedure never became known
    /// (the header in a Read chunk whose Read Response is not in the
    /// capture).
    pub procs: BTreeMap<Option<ProcId>, ProcStats>,
    /// Sends per (RPC-over-RDMA version, message class).
    pub classes: BTreeMap<(u32, &'static str), u64>,
    /// Sends that are not an RPC-over-RDMA header.
    pub undecodable: u64,
    /// Chunk counts.
    pub chunks: Chunks,
    /// Replies (and RDMA_ERRORs) with an XID no call had.
    pub unmatched_replies: u64,
    /// Calls not tracked (more than [`MAX_PENDING`] awaiting replies).
    pub untracked_calls: u64,
}

/// Which messages to count ([`Transactions::with_filter`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this XID.
    pub xid: Option<u32>,
    /// Only this procedure: a number, or a name (case-insensitive, any
    /// program that has it).
    pub proc: Option<ProcMatch>,
}

/// A procedure to match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcMatch {
    /// The procedure number (of any program).
    Number(u32),
    /// The procedure name ([`names::procedure_name`]).
    Name(String),
}

impl Filter {
    /// True when a message with `xid` of procedure `proc` passes.
    pub fn matches(&self, xid: u32, proc: Option<ProcId>) -> bool {
        if self.xid.is_some_and(|x| x != xid) {
            return false;
        }
        match (&self.proc, proc) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(ProcMatch::Number(n)), Some(p)) => p.proc == *n,
            (Some(ProcMatch::Name(n)), Some(p)) => {
                p.name().is_some_and(|m| m.eq_ignore_ascii_case(n))
            }
        }
    }
}

/// A call awaiting its reply.
struct Pending {
    packet: Option<PacketRef>,
    proc: Option<ProcId>,
}

/// Key of a call: connection, the side that called, XID.
type CallKey = (usize, Side, u32);

/// The tracker. See the [module docs](self).
#[derive(Default)]
pub struct Transactions {
    filter: Filter,
    pending: HashMap<CallKey, Pending>,
    /// Position-zero Read chunks of calls whose procedure is unknown:
    /// (connection, handle, offset) → call.
    chunk_calls: HashMap<(usize, u32, u64), CallKey>,
    /// Read Requests fetching them: (connection, sink STag, sink TO) →
    /// call.
    sinks: HashMap<(usize, u32, u64), CallKey>,
    summary: Summary,
}

fn chunk_lists(h: &TransportHeader) -> Option<&ChunkLists> {
    match h {
        TransportHeader::V1(h) => h.body.chunks(),
        TransportHeader::V2(h) => match &h.body {
            v2::Body::Msg(c) | v2::Body::Nomsg(c) => Some(&c.lists),
            _ => None,
        },
        TransportHeader::UnknownVersion(_) => None,
    }
}

fn class(h: &TransportHeader) -> &'static str {
    match h {
        TransportHeader::V1(h) => h.proc().name(),
        TransportHeader::V2(h) => h.htype().name(),
        TransportHeader::UnknownVersion(_) => None,
    }
    .unwrap_or("UNKNOWN")
}

fn is_nomsg(h: &TransportHeader) -> bool {
    match h {
        TransportHeader::V1(h) => matches!(h.body, v1::Body::Nomsg(_)),
        TransportHeader::V2(h) => matches!(h.body, v2::Body::Nomsg(_)),
        TransportHeader::UnknownVersion(_) => false,
    }
}

fn is_error(h: &TransportHeader) -> bool {
    match h {
        TransportHeader::V1(h) => matches!(h.body, v1::Body::Error(_)),
        TransportHeader::V2(h) => matches!(h.body, v2::Body::Error(_)),
        TransportHeader::UnknownVersion(_) => false,
    }
}

fn srt(call: Option<PacketRef>, reply: Option<PacketRef>) -> Option<f64> {
    let (c, r) = (call?, reply?);
    Some(if r.nanos >= c.nanos {
        (r.nanos - c.nanos) as f64 / 1e9
    } else {
        -((c.nanos - r.nanos) as f64 / 1e9)
    })
}

impl Transactions {
    /// A tracker counting every message.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker whose [`Summary`] counts only what passes `filter`.
    pub fn with_filter(filter: Filter) -> Self {
        Transactions {
            filter,
            ..Self::default()
        }
    }

    /// Takes one event; `initiator` is its connection's initiator
    /// ([`super::Connection::initiator`], [`Side::A`] when unknown).
    /// Returns what a Send is; `None` for other items.
    pub fn event(&mut self, e: &Event, initiator: Side) -> Option<Message> {
        match &e.item {
            Item::Send(s) => self.send(e.conn, e.side, initiator, e.packet, &s.payload),
            Item::ReadRequest { request: rr, .. } => {
                if self.sinks.len() < MAX_READ_TRACK {
                    if let Some(k) = self.chunk_calls.get(&(e.conn, rr.src_stag, rr.src_to)) {
                        self.sinks.insert((e.conn, rr.sink_stag, rr.sink_to), *k);
                    }
                }
                None
            }
            Item::Tagged {
                opcode,
                stag,
                to,
                head,
                ..
            } if *opcode == Opcode::READ_RESPONSE => {
                self.read_response(e.conn, *stag, *to, head);
                None
            }
            _ => None,
        }
    }

    fn read_response(&mut self, conn: usize, stag: u32, to: u64, head: &[u8]) {
        let Some(key) = self.sinks.remove(&(conn, stag, to)) else {
            return;
        };
        self.chunk_calls.retain(|_, k| *k != key);
        let Some(RpcPeek {
            call: Some((prog, vers, proc)),
            ..
        }) = RpcPeek::of(head)
        else {
            return;
        };
        if let Some(p) = self.pending.get_mut(&key) {
            p.proc = Some(ProcId { prog, vers, proc });
        }
    }

    fn send(
        &mut self,
        conn: usize,
        side: Side,
        initiator: Side,
        packet: Option<PacketRef>,
        payload: &[u8],
    ) -> Option<Message> {
        let Ok((hdr, header_len)) = header::decode(payload, &Limits::default()) else {
            if self.filter == Filter::default() {
                self.summary.undecodable += 1;
            }
            return None;
        };
        let xid = hdr.xid();
        let peek = if hdr.has_payload() {
            payload.get(header_len..).and_then(RpcPeek::of)
        } else {
            None
        };
        let answers = self.pending.contains_key(&(conn, side.peer(), xid));
        let role = match peek {
            Some(RpcPeek { call: Some(_), .. }) => Some(Role::Call),
            Some(RpcPeek { call: None, .. }) => Some(Role::Reply),
            None if answers && (is_nomsg(&hdr) || is_error(&hdr)) => Some(Role::Reply),
            None if is_nomsg(&hdr) => Some(Role::Call),
            None => None,
        };
        let caller = match role {
            Some(Role::Reply) => side.peer(),
            _ => side,
        };
        let mut m = Message {
            xid,
            class: class(&hdr),
            role,
            backchannel: role.is_some() && caller != initiator,
            proc: None,
            call: None,
        };
        match role {
            Some(Role::Call) => {
                m.proc =
                    peek.and_then(|p| p.call)
                        .map(|(prog, vers, proc)| ProcId { prog, vers, proc });
                self.call(conn, side, xid, packet, m.proc, chunk_lists(&hdr));
            }
            Some(Role::Reply) => {
                let rpc_reply = !is_error(&hdr);
                if let Some(c) = self.pending.remove(&(conn, caller, xid)) {
                    if c.proc.is_none() {
                        let key = (conn, caller, xid);
                        self.chunk_calls.retain(|_, k| *k != key);
                        self.sinks.retain(|_, k| *k != key);
                    }
                    m.proc = c.proc;
                    let srt = srt(c.packet, packet);
                    m.call = Some(CallRef {
                        packet: c.packet,
                        srt,
                    });
                    if self.filter.matches(xid, c.proc) {
                        let st = self.summary.procs.entry(c.proc).or_default();
                        st.calls += 1;
                        if !rpc_reply {
                            st.rdma_errors += 1;
                        } else {
                            st.replied += 1;
                            if let Some(t) = srt {
                                st.add_srt(t);
                            }
                        }
                    }
                } else if self.filter.matches(xid, None) {
                    self.summary.unmatched_replies += 1;
                }
            }
            None => {}
        }
        if self.filter.matches(xid, m.proc) {
            *self
                .summary
                .classes
                .entry((hdr.vers(), m.class))
                .or_default() += 1;
            if let Some(c) = chunk_lists(&hdr) {
                count_chunks(&mut self.summary.chunks, c);
            }
        }
        Some(m)
    }

    fn call(
        &mut self,
        conn: usize,
        side: Side,
        xid: u32,
        packet: Option<PacketRef>,
        proc: Option<ProcId>,
        chunks: Option<&ChunkLists>,
    ) {
        let key = (conn, side, xid);
        if self.pending.contains_key(&key) {
            // A retransmission: the first call's time stands.
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.summary.untracked_calls += 1;
            return;
        }
        self.pending.insert(key, Pending { packet, proc });
        if proc.is_some() || self.chunk_calls.len() >= MAX_READ_TRACK {
            return;
        }
        let p0 = chunks.and_then(|c| c.reads.iter().find(|r| r.position == 0));
        if let Some(r) = p0 {
            self.chunk_calls
                .insert((conn, r.target.handle, r.target.offset), key);
        }
    }

    /// End of the capture: calls still awaiting a reply are counted as
    /// unanswered; returns the summary.
    pub fn finish(&mut self) -> &Summary {
        for ((_, _, xid), p) in self.pending.drain() {
            if self.filter.matches(xid, p.proc) {
                self.summary.procs.entry(p.proc).or_default().calls += 1;
            }
        }
        self.chunk_calls.clear();
        self.sinks.clear();
        &self.summary
    }
}

/// Counts the chunks of one header: Read segments with one position form
/// a chunk.
fn count_chunks(n: &mut Chunks, c: &ChunkLists) {
    let mut i = 0;
    while let Some(first) = c.reads.get(i) {
        let same: Vec<_> = c.reads[i..]
            .iter()
            .take_while(|r| r.position == first.position)
            .collect();
        let bytes = same.iter().map(|r| u64::from(r.target.length)).sum();
        let st = if first.position == 0 {
            &mut n.position_zero_read
        } else {
            &mut n.read
        };
        st.add(same.len() as u64, bytes);
        i += same.len();
    }
    for w in &c.writes {
        let bytes = w.segments.iter().map(|s| u64::from(s.length)).sum();
        n.write.add(w.segments.len() as u64, bytes);
    }
    if let Some(w) = &c.reply {
        let bytes = w.segments.iter().map(|s| u64::from(s.length)).sum();
        n.reply.add(w.segments.len() as u64, bytes);
    }
}
