//! `engine_ops`: the engine ([`Connection`]) driven through every input it
//! has, in any order, against a scripted provider ([`super::mock::Mock`]).
//!
//! The input picks the role (client or server), the configuration (credits,
//! grant, inline sizes, timeout, queue limits), the peer's private data,
//! and then a sequence of operations: messages from the peer (arbitrary
//! octets, or RPC-over-RDMA v1 headers built from what the engine sent:
//! its XIDs, its Write / Reply chunks, with credits, chunk lists and RPC
//! calls or replies, then mutated) delivered into the posted receives,
//! with or without a remote invalidation; completions of the WRs the
//! engine posted (success, or an error status; RDMA Reads fill their sink);
//! completions for WR ids that are not outstanding; the peer writing into
//! our chunks; time passing and timeouts; `start_call`, `send_reply`
//! (including for handles already answered or never issued),
//! `set_credit_grant`, `enable_backchannel`, `close`, and the connection
//! dropping. It asserts:
//!
//! * no panic;
//! * a call is posted only within the credit limit: whenever the engine
//!   sends a call, its calls awaiting replies do not exceed the credits
//!   the peer granted (clamped to `[1, requested]`); a server holds no
//!   more than twice its grant of received calls;
//! * every [`CallId`] from `start_call` gets at most one
//!   `ReplyReceived` / `CallFailed`, and after `close` exactly one; no
//!   event names a call never started; every [`CallHandle`] is delivered
//!   once and answered (`send_reply` returns `Ok`) at most once;
//! * `ConnectionLost` is reported at most once, and nothing is posted after
//!   it;
//! * a `wr_id` is never posted while another WR with that id is
//!   outstanding, and a completion for a `wr_id` that is not outstanding
//!   (never posted, or already completed) changes nothing;
//! * no Send is longer than the negotiated send threshold (RFC 8166
//!   section 3.3.2);
//! * at the end (after `close` and every completion), every registration
//!   has been released.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};

use crate::engine::{
    CallHandle, CallId, Config, Connection, Event, Message, OutgoingCall, OutgoingReply, Piece,
    Role, RpcRdmaVersion,
};
use crate::provider::{
    Bytes, Completion, ConnectionEvent, ConnectionInfo, DisconnectReason, Opcode, Provider, Stag,
    Status,
};
use crate::wire::chunk::ChunkLists;
use crate::wire::header::{self, TransportHeader};
use crate::wire::v1;
use crate::Limits;

use super::mock::Mock;

/// Operations per input at most.
const MAX_OPS: usize = 64;

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// What the harness learned from one Send the engine posted.
#[derive(Clone, Debug)]
pub(super) struct Sent {
    pub(super) xid: u32,
    pub(super) chunks: ChunkLists,
}

struct Harness {
    role: Role,
    /// The engine may speak version 2 (the `engine_v2` target).
    v2: bool,
    conn: Connection,
    p: Mock,
    now: Instant,
    base: Instant,
    /// Calls started: id -> number of terminal events.
    calls: BTreeMap<CallId, u32>,
    handles: BTreeSet<CallHandle>,
    answered: BTreeSet<CallHandle>,
    lost: bool,
    sent: Vec<Sent>,
    /// Most calls the responder ever granted us (clamped), per our
    /// requester side.
    requested: u32,
    max_grant: u32,
    /// The largest grant we (as responder) ever had.
    our_grant: u32,
    sends_seen: usize,
}

impl Harness {
    /// Feeds provider events and completions to the engine until quiet,
    /// checking every engine event and every Send posted.
    fn pump(&mut self) {
        for _ in 0..64 {
            let mut busy = false;
            while let Some(ev) = self.p.poll_event() {
                busy = true;
                match ev {
                    ConnectionEvent::Established(info) => {
                        self.conn.handle_established(self.now, &mut self.p, &info)
                    }
                    ConnectionEvent::Disconnected(r) => {
                        self.conn.handle_disconnected(&mut self.p, r)
                    }
                    ConnectionEvent::ConnectRequest { .. } => {}
                }
                self.after();
            }
            let mut out: Vec<Completion> = Vec::new();
            self.p.poll_completions(&mut out);
            for c in out {
                busy = true;
                self.conn.handle_completion(self.now, &mut self.p, c);
                self.after();
            }
            if !busy {
                return;
            }
        }
    }

    /// Checks after every engine call.
    fn after(&mut self) {
        let mut new_call = false;
        let sends: Vec<Vec<u8>> = self.p.sent[self.sends_seen..].to_vec();
        self.sends_seen = self.p.sent.len();
        for s in sends {
            assert!(!self.lost, "the engine posted a Send after ConnectionLost");
            if self.v2 {
                self.check_send_v2(&s, &mut new_call);
                continue;
            }
            if let Some(n) = self.conn.negotiated() {
                assert!(
                    s.len() <= n.send_threshold as usize,
                    "Send of {} octets above the send threshold {}",
                    s.len(),
                    n.send_threshold
                );
            }
            // An ERR_VERS answer echoes the peer's rdma_vers in the version 1
            // layout (RFC 8166 section 4.5), which only v1 decodes.
            if s.get(4..8) != Some(&[0, 0, 0, 1][..]) {
                assert!(
                    s.len() == 28 && s.get(12..20) == Some(&[0, 0, 0, 4, 0, 0, 0, 1][..]),
                    "the engine sent a version other than 1 in something else than ERR_VERS: {:02x?}",
                    &s[..s.len().min(64)]
                );
                continue;
            }
            let Ok((h, off)) = header::decode(&s, &Limits::DEFAULT) else {
                panic!(
                    "the engine sent an undecodable header: {:02x?}",
                    &s[..s.len().min(64)]
                );
            };
            let TransportHeader::V1(h) = h else { continue };
            let chunks = h.body.chunks().cloned().unwrap_or_default();
            let is_call = match h.proc() {
                v1::Proc::RDMA_MSG => s.get(off + 4..off + 8) == Some(&[0, 0, 0, 0][..]),
                v1::Proc::RDMA_NOMSG => !chunks.reads.is_empty(),
                _ => false,
            };
            new_call |= is_call;
            self.sent.push(Sent { xid: h.xid, chunks });
            if self.sent.len() > 64 {
                self.sent.remove(0);
            }
        }
        if new_call {
            let credits = self.conn.credits();
            assert!(
                (1..=self.requested).contains(&credits),
                "credits {credits} outside [1, {}]",
                self.requested
            );
            assert!(
                credits <= self.max_grant,
                "credits {credits} above every grant the peer sent ({})",
                self.max_grant
            );
            assert!(
                self.conn.outstanding() <= credits as usize,
                "a call was posted with {} calls outstanding and {credits} credits",
                self.conn.outstanding()
            );
        }
        self.our_grant = self.our_grant.max(self.conn.grant().max(1));
        assert!(
            self.conn.pending_incoming() <= 2 * self.our_grant as usize,
            "{} received calls held; the largest grant we sent is {}",
            self.conn.pending_incoming(),
            self.our_grant
        );
        while let Some(e) = self.conn.poll_event() {
            match e {
                Event::ReplyReceived(r) => self.terminal(r.id),
                Event::CallFailed { id, .. } => self.terminal(id),
                Event::CallReceived(c) => {
                    assert!(
                        self.handles.insert(c.handle),
                        "call handle {:?} delivered twice",
                        c.handle
                    );
                }
                Event::CreditsChanged { credits } => {
                    assert!((1..=self.requested).contains(&credits), "credits {credits}");
                }
                Event::ConnectionLost(_) => {
                    assert!(!self.lost, "ConnectionLost reported twice");
                    self.lost = true;
                }
            }
        }
    }

    /// [`Harness::after`]'s look at one Send of a version 2 capable engine.
    fn check_send_v2(&mut self, s: &[u8], new_call: &mut bool) {
        if let Some(n) = self.conn.negotiated() {
            assert!(
                s.len() <= (n.send_threshold as usize).max(1024),
                "Send of {} octets above the send threshold {}",
                s.len(),
                n.send_threshold
            );
        }
        // Version 1: after a fallback (or an auto server's settling on it);
        // or an error reply of an auto server to a version 1 message that
        // came before it settled (posted later if the send queue was full).
        let auto = self.conn.config().rpcrdma_version == RpcRdmaVersion::Auto;
        let v1_error = s.get(12..16) == Some(&[0, 0, 0, 4][..]);
        let v1_ok = match self.conn.version() {
            0 => auto,
            1 => true,
            _ => auto && v1_error,
        };
        let Some((xid, chunks, is_call)) = super::engine_v2::check_send(s, v1_ok) else {
            return;
        };
        *new_call |= is_call;
        self.sent.push(Sent { xid, chunks });
        if self.sent.len() > 64 {
            self.sent.remove(0);
        }
    }

    fn terminal(&mut self, id: CallId) {
        let n = self
            .calls
            .get_mut(&id)
            .unwrap_or_else(|| panic!("event for a call never started: {id:?}"));
        *n += 1;
        assert_eq!(*n, 1, "call {id:?} completed twice");
    }

    /// Every chunk handle (STag) the engine offered in what it sent.
    fn handles_sent(&self) -> Vec<u32> {
        self.sent
            .iter()
            .flat_map(|s| {
                let c = &s.chunks;
                c.reads.iter().map(|r| r.target.handle).chain(
                    c.writes
                        .iter()
                        .chain(c.reply.iter())
                        .flat_map(|w| w.segments.iter().map(|g| g.handle)),
                )
            })
            .collect()
    }

    fn xid(&self, u: &mut Unstructured<'_>) -> Result<u32> {
        Ok(if !self.sent.is_empty() && u.ratio(3, 4)? {
            u.choose(&self.sent)?.xid
        } else {
            u.arbitrary()?
        })
    }

    /// An RPC-over-RDMA message from the peer.
    fn message(&mut self, u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
        if u.ratio(1, 8)? {
            let n = usize::from(u.int_in_range(0u8..=120)?);
            return Ok(u.bytes(n)?.to_vec());
        }
        let xid = self.xid(u)?;
        let echo = self.sent.iter().rev().find(|s| s.xid == xid).cloned();
        if self.v2 && u.ratio(7, 8)? {
            let handles = self.handles_sent();
            let m = super::engine_v2::message(u, self.role, xid, echo.as_ref(), &handles)?;
            return self.mutate(u, m);
        }
        let vers = if u.ratio(15, 16)? { 1 } else { u.arbitrary()? };
        let credit = *u.choose(&[0u32, 1, 2, 3, 4, 8, 200])?;
        let proc_ = match u.int_in_range(0u8..=15)? {
            0..=9 => 0,
            10..=11 => 1,
            12 => 4,
            13 => 3,
            14 => 2,
            _ => u.arbitrary()?,
        };
        let mut w = vec![xid, vers, credit, proc_];
        if proc_ == 4 {
            match u.int_in_range(0u8..=2)? {
                0 => w.extend([1, 1, 1]),
                1 => w.push(2),
                _ => w.push(u.arbitrary()?),
            }
            return self.mutate(u, words(&w));
        }
        if proc_ == 2 {
            w.extend([0, 0]);
        }
        w.extend(chunk_words(u, echo.as_ref())?);
        if proc_ == 0 || proc_ == 2 {
            w.extend(rpc_words(u, xid, self.role)?);
        }
        self.mutate(u, words(&w))
    }

    fn mutate(&self, u: &mut Unstructured<'_>, mut m: Vec<u8>) -> Result<Vec<u8>> {
        if !m.is_empty() && u.ratio(1, 8)? {
            let i = u.choose_index(m.len())?;
            m[i] ^= u.int_in_range(1u8..=255)?;
        }
        if u.ratio(1, 16)? {
            let n = u.choose_index(m.len() + 1)?;
            m.truncate(n);
        }
        Ok(m)
    }

    fn outgoing_call(&self, u: &mut Unstructured<'_>) -> Result<OutgoingCall> {
        let mut head = words(&[0, 0, 2, 100_003, 3, u.int_in_range(0..=3)?, 0, 0, 0, 0]);
        for _ in 0..u.int_in_range(0u8..=4)? {
            head.extend(u.arbitrary::<u32>()?.to_be_bytes());
        }
        let mut message = Message::new();
        if u.ratio(1, 3)? {
            let n = usize::from(u.int_in_range(1u16..=3000)?);
            head.extend((n as u32).to_be_bytes());
            message.push(Piece::Inline(head.into()));
            message.push(Piece::Ddp(Bytes::from(vec![0x6b; n])));
            if u.ratio(1, 2)? {
                message.push(Piece::Inline(vec![0; 4].into()));
            }
        } else {
            message.push(Piece::Inline(head.into()));
        }
        let reply_max = match u.int_in_range(0u8..=3)? {
            0 => 0,
            1 => u32::from(u.int_in_range(1u16..=512)?),
            2 => u32::from(u.int_in_range(512u16..=6000)?),
            _ => u.arbitrary::<u32>()? % 20_000,
        };
        let mut ddp_results = Vec::new();
        for _ in 0..u.int_in_range(0u8..=2)? {
            ddp_results.push(u32::from(u.int_in_range(0u16..=5000)?));
        }
        Ok(OutgoingCall {
            message,
            reply_max,
            ddp_results,
        })
    }

    fn outgoing_reply(&self, u: &mut Unstructured<'_>) -> Result<OutgoingReply> {
        let mut head = words(&[0, 1, 0, 0, 0, 0]);
        for _ in 0..u.int_in_range(0u8..=4)? {
            head.extend(u.arbitrary::<u32>()?.to_be_bytes());
        }
        let mut message = Message::new();
        if u.ratio(1, 3)? {
            let n = usize::from(u.int_in_range(0u16..=5000)?);
            head.extend((n as u32).to_be_bytes());
            message.push(Piece::Inline(head.into()));
            message.push(Piece::Ddp(Bytes::from(vec![0x3c; n])));
        } else {
            message.push(Piece::Inline(head.into()));
        }
        Ok(OutgoingReply { message })
    }

    fn op(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        match u.int_in_range(0u8..=19)? {
            0..=5 => {
                let m = self.message(u)?;
                let inv = if u.ratio(1, 8)? {
                    let ours = self.handles_sent();
                    Some(Stag(match ours.is_empty() {
                        false if u.ratio(3, 4)? => *u.choose(&ours)?,
                        _ => u.arbitrary()?,
                    }))
                } else {
                    None
                };
                // The credit word of whatever arrives may become the grant
                // (version 2: only a non-error response's).
                let grants = !self.v2 || super::engine_v2::may_grant(&m);
                if let Some(c) = m.get(8..12).filter(|_| grants) {
                    let c = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                    self.max_grant = self.max_grant.max(c.min(self.requested));
                }
                self.p.deliver(&m, inv);
            }
            6..=10 => {
                let i = usize::from(u.arbitrary::<u8>()?);
                let status = match u.int_in_range(0u8..=15)? {
                    0 => Status::Flushed,
                    1 => Status::RemoteAccess,
                    2 => Status::LocalProtection,
                    3 => Status::ConnectionLost,
                    _ => Status::Success,
                };
                let fill = u.arbitrary()?;
                self.p.complete_send(i, status, fill);
            }
            11 => {
                // A completion for a WR that is not outstanding.
                let wr_id = match (u.ratio(1, 2)?, self.p.completed.is_empty()) {
                    (true, false) => *u.choose(&self.p.completed)?,
                    _ => u.arbitrary()?,
                };
                if self.p.rq.iter().any(|(w, _)| w.wr_id == wr_id)
                    || self.p.sq.iter().any(|s| s.wr.wr_id == wr_id)
                {
                    return Ok(());
                }
                let before = self.conn.inflight_work_requests();
                let c = Completion {
                    wr_id,
                    opcode: *u.choose(&[
                        Opcode::Recv,
                        Opcode::Send,
                        Opcode::Read,
                        Opcode::LocalInvalidate,
                    ])?,
                    byte_len: u.arbitrary::<u32>()? % 4096,
                    status: if u.ratio(1, 2)? {
                        Status::Success
                    } else {
                        Status::RemoteAccess
                    },
                };
                self.conn.handle_completion(self.now, &mut self.p, c);
                assert_eq!(
                    self.conn.inflight_work_requests(),
                    before,
                    "a completion for wr_id {wr_id:#x}, not outstanding, changed the engine"
                );
                assert!(
                    self.conn.poll_event().is_none(),
                    "a completion for wr_id {wr_id:#x}, not outstanding, produced an event"
                );
            }
            12 => {
                // The peer writes into one of our chunks (or anywhere).
                let seg = self
                    .sent
                    .iter()
                    .flat_map(|s| s.chunks.writes.iter().chain(s.chunks.reply.iter()))
                    .flat_map(|w| w.segments.iter().copied())
                    .collect::<Vec<_>>();
                let (stag, len) = match seg.is_empty() {
                    false => {
                        let s = u.choose(&seg)?;
                        (s.handle, s.length as usize)
                    }
                    true => (u.arbitrary()?, 64),
                };
                let off = u.int_in_range(0..=len)?;
                let n = u.int_in_range(0..=len - off)?;
                let data: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x77).collect();
                self.p.remote_write(stag, off, &data);
            }
            13 => {
                self.now += match u.int_in_range(0u8..=3)? {
                    0 => Duration::from_millis(10),
                    1 => Duration::from_secs(1),
                    2 => Duration::from_secs(61),
                    _ => Duration::from_millis(u64::from(u.arbitrary::<u16>()?)),
                };
                self.conn.handle_timeout(self.now, &mut self.p);
            }
            14..=15 => {
                let call = self.outgoing_call(u)?;
                if let Ok(id) = self.conn.start_call(self.now, &mut self.p, call) {
                    assert!(self.calls.insert(id, 0).is_none(), "CallId {id:?} reused");
                }
            }
            16..=17 => {
                let h = match (u.ratio(7, 8)?, self.handles.is_empty()) {
                    (true, false) => {
                        *u.choose(&self.handles.iter().copied().collect::<Vec<_>>())?
                    }
                    _ => CallHandle(u.arbitrary()?),
                };
                let reply = self.outgoing_reply(u)?;
                if self
                    .conn
                    .send_reply(self.now, &mut self.p, h, reply)
                    .is_ok()
                {
                    assert!(
                        self.handles.contains(&h),
                        "send_reply accepted unknown {h:?}"
                    );
                    assert!(self.answered.insert(h), "{h:?} answered twice");
                }
            }
            18 => match u.int_in_range(0u8..=3)? {
                0 => self.conn.close(&mut self.p),
                1 => self.p.go_down(DisconnectReason::TransportLost),
                2 => {
                    let n = u.int_in_range(1u32..=8)?;
                    self.conn.set_credit_grant(&mut self.p, n);
                }
                _ => self
                    .conn
                    .enable_backchannel(&mut self.p, u.int_in_range(1u32..=4)?),
            },
            _ => {
                let n = u.int_in_range(1usize..=64)?;
                self.p.send_limit = n;
            }
        }
        self.after();
        self.pump();
        Ok(())
    }
}

/// The three chunk lists of a message from the peer, as words: a Read list
/// usually empty, the Write list and Reply chunk of the call `echo` (ours)
/// with used lengths.
pub(super) fn chunk_words(u: &mut Unstructured<'_>, echo: Option<&Sent>) -> Result<Vec<u32>> {
    let mut w = Vec::new();
    // Read list: usually empty; sometimes segments (a call's data, or a
    // Position-Zero chunk of a Long Call).
    if u.ratio(1, 6)? {
        for _ in 0..u.int_in_range(1u8..=3)? {
            let pos = if u.ratio(1, 2)? {
                0
            } else {
                4 * u32::from(u.int_in_range(1u8..=16)?)
            };
            w.extend([
                1,
                pos,
                u.arbitrary()?,
                u32::from(u.int_in_range(0u16..=600)?),
                0,
                0,
            ]);
        }
    }
    w.push(0);
    // Write list and Reply chunk: the call's own, with used lengths.
    let ch = echo.map(|s| s.chunks.clone()).unwrap_or_default();
    if u.ratio(3, 4)? {
        for wc in &ch.writes {
            w.extend([1, wc.segments.len() as u32]);
            for s in wc.segments.iter() {
                let len = if u.ratio(3, 4)? {
                    s.length
                } else {
                    u.int_in_range(0..=s.length.saturating_add(8))?
                };
                w.extend([s.handle, len, (s.offset >> 32) as u32, s.offset as u32]);
            }
        }
    }
    w.push(0);
    match (&ch.reply, u.ratio(3, 4)?) {
        (Some(rc), true) => {
            w.extend([1, rc.segments.len() as u32]);
            for s in rc.segments.iter() {
                let len = u.int_in_range(0..=s.length)?;
                w.extend([s.handle, len, (s.offset >> 32) as u32, s.offset as u32]);
            }
        }
        _ => w.push(0),
    }
    Ok(w)
}

/// An RPC message with XID `xid`: a call (to a server, or a backchannel
/// call) or a reply, and a few words of arguments or results.
pub(super) fn rpc_words(u: &mut Unstructured<'_>, xid: u32, role: Role) -> Result<Vec<u32>> {
    let mut w = Vec::new();
    let call = match role {
        Role::Server => u.ratio(7, 8)?,
        Role::Client => u.ratio(1, 8)?,
    };
    if call {
        w.extend([xid, 0, 2, 100_003, 3, u.int_in_range(0..=3)?, 0, 0, 0, 0]);
    } else {
        w.extend([xid, 1, 0, 0, 0, 0]);
    }
    for _ in 0..u.int_in_range(0u8..=8)? {
        w.push(u.arbitrary()?);
    }
    Ok(w)
}

/// The fuzz target; see the module docs.
pub fn fuzz_engine_ops(data: &[u8]) {
    run(data, false);
}

/// Runs the harness on `data`; `v2`: the engine may speak version 2 (see
/// `super::engine_v2`).
pub(super) fn run(data: &[u8], v2: bool) {
    let mut u = Unstructured::new(data);
    let Ok(mut h) = setup(&mut u, v2) else { return };
    for _ in 0..MAX_OPS {
        if u.is_empty() || h.op(&mut u).is_err() {
            break;
        }
    }
    finish(&mut h);
}

fn setup(u: &mut Unstructured<'_>, v2: bool) -> Result<Harness> {
    let role = if u.arbitrary()? {
        Role::Client
    } else {
        Role::Server
    };
    let mut config = match role {
        Role::Client => Config::client(),
        Role::Server => Config::server(),
    };
    config.credits_requested = u.int_in_range(1u32..=8)?;
    config.credits_granted = u.int_in_range(0u32..=8)?;
    config.backchannel_slots = u.int_in_range(0u32..=3)?;
    config.inline_send = *u.choose(&[1024u32, 2048, 4096])?;
    config.inline_recv = *u.choose(&[1024u32, 2048, 4096])?;
    config.max_queued = u.int_in_range(1usize..=8)?;
    config.call_timeout = if u.ratio(3, 4)? {
        Some(Duration::from_secs(60))
    } else {
        None
    };
    config.limits.max_message_len = 64 << 10;
    if v2 {
        config.rpcrdma_version = *u.choose(&[RpcRdmaVersion::V2, RpcRdmaVersion::Auto])?;
        config.max_retry_chunk = *u.choose(&[0u32, 16 << 10, 64 << 10])?;
    }
    config.limits.max_read_sink_bytes = *u.choose(&[1024u64, 64 << 10])?;
    let requested = match role {
        Role::Client => config.credits_requested.max(1),
        Role::Server => config.backchannel_slots.max(1),
    };
    let pd = match u.int_in_range(0u8..=3)? {
        0 => Vec::new(),
        1 => u.bytes(8)?.to_vec(),
        _ => vec![
            0xf6,
            0xab,
            0x0e,
            0x18,
            1,
            u.arbitrary::<u8>()? & 1,
            u.int_in_range(0u8..=7)?,
            u.int_in_range(0u8..=7)?,
        ],
    };
    let info = ConnectionInfo {
        peer_private_data: pd,
        ird: config.ord,
        ord: if role == Role::Server { 16 } else { 0 },
        max_send_sge: 8,
        max_recv_sge: 1,
        max_inline: 1024,
        max_msg_size: 1 << 20,
    };
    let mut p = Mock::new(info, 64);
    let mut conn = Connection::new(config.clone());
    if role == Role::Server {
        conn.prepare_receives(&mut p);
    }
    let base = Instant::now();
    let mut h = Harness {
        role,
        v2,
        conn,
        p,
        now: base,
        base,
        calls: BTreeMap::new(),
        handles: BTreeSet::new(),
        answered: BTreeSet::new(),
        lost: false,
        sent: Vec::new(),
        requested,
        max_grant: 1,
        our_grant: 1,
        sends_seen: 0,
    };
    h.after();
    // Calls started before the connection is up wait for it.
    for _ in 0..u.int_in_range(0u8..=2)? {
        let call = h.outgoing_call(u)?;
        if let Ok(id) = h.conn.start_call(h.now, &mut h.p, call) {
            h.calls.insert(id, 0);
        }
    }
    h.p.establish();
    h.pump();
    Ok(h)
}

fn finish(h: &mut Harness) {
    h.conn.close(&mut h.p);
    h.after();
    h.pump();
    assert_eq!(
        h.p.pending(),
        0,
        "work requests left outstanding after close"
    );
    for (id, n) in &h.calls {
        assert_eq!(*n, 1, "call {id:?} got {n} terminal events by close");
    }
    assert!(h.lost, "close did not report ConnectionLost");
    let _ = h.base;
    assert_eq!(
        h.p.mem.registered(),
        0,
        "registrations left after close and every completion"
    );
}
