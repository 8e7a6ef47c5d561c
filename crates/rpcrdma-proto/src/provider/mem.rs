//! An in-process provider pair: two endpoints connected to each other,
//! deterministic, moving bytes between their registered memory the way RDMA
//! would.
//!
//! # Model
//!
//! Each [`MemProvider`] owns its registrations, queues and completions. The
//! two ends share only a "wire": one in-order message queue per direction
//! (Send, Write, Read Request, Read Response, Ack, Terminate, plus the
//! connection-setup messages), like RDMAP messages on one iWARP stream.
//!
//! # Progress (explicit and deterministic)
//!
//! Nothing happens in the background. `post_*` only validates and queues.
//! [`Provider::poll_completions`] (and [`Provider::poll_event`]) on one end
//! first processes every message that has arrived for it, in order (placing
//! Sends into receives, Writes into memory, answering Read Requests,
//! completing its own WRs on Ack / Read Response / Terminate), then
//! transmits every WR queued on its Send queue, in post order. So data moves
//! only when ends are polled, and the same sequence of calls always gives the
//! same result: a simulation with virtual time chooses when each end runs.
//! A Send, Write or Read completes at its poster only after the peer has
//! processed it (like an InfiniBand RC ACK), so errors found at the peer
//! land on the WR that caused them.
//!
//! RDMA ordering follows from the in-order wire: a Send posted after a Write
//! is placed after the Write, and its receive completes after the Write's
//! data is in place. Send-queue completions come out in post order.
//!
//! # Faults
//!
//! Every failure the peer detects (no receive posted, receive too small,
//! bad STag / rights / range, Send With Invalidate of an STag the receiver
//! does not own) is fatal, as on iWARP: the detecting end flushes everything
//! and answers with a Terminate; the poster's WR completes with the error,
//! and its other outstanding WRs are flushed. RDMA Read/Write failures touch
//! no memory. [`Provider::disconnect`] is abortive: undelivered messages in
//! both directions are dropped, both ends flush.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use super::memory::{Holds, MemoryTable, SendRules};
use super::{
    Access, Blame, Buffer, Bytes, Caps, Completion, ConnectParams, ConnectionEvent, ConnectionInfo,
    ConnectionState, DisconnectReason, MemoryRegion, Notify, Opcode, Provider, ProviderError,
    RecvWr, RegisterError, RemoteAddr, SendOp, SendWr, Sge, Sges, Stag, Status,
};
use smallvec::smallvec;

/// Configuration of a [`pair`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemConfig {
    /// Limits each end reports and enforces.
    pub caps: Caps,
    /// Each end takes staged Sends ([`Provider::post_send_staged`]): the
    /// payload is copied at post time and goes out in Send-queue order,
    /// with no completion. Off: staged Sends are declined (`Ok(false)`),
    /// as by a provider that cannot stage.
    pub stage_sends: bool,
}

impl MemConfig {
    /// Defaults: 256 WRs per queue, 8 send SGEs, 1 receive / read SGE,
    /// 16 MiB messages, 1 GiB regions, 4096 registrations, 512 octets of
    /// private data, IRD/ORD up to 16, iWARP rule for Read sinks.
    pub const DEFAULT: MemConfig = MemConfig {
        caps: Caps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 8,
            max_recv_sge: 1,
            max_read_sge: 1,
            max_msg_size: 1 << 24,
            max_mr_size: 1 << 30,
            max_mr: 4096,
            max_private_data: super::MAX_PRIVATE_DATA as u16,
            max_ird: 16,
            max_ord: 16,
            max_inline: 256,
            read_sink_needs_remote_write: true,
            remote_invalidation: true,
        },
        stage_sends: false,
    };
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig::DEFAULT
    }
}

/// Two unconnected ends of one in-memory link. Connect them with
/// [`MemProvider::connect`] on one and [`MemProvider::accept`] (or
/// [`MemProvider::reject`]) on the other, after it has seen the
/// [`ConnectionEvent::ConnectRequest`].
pub fn pair(config: MemConfig) -> (MemProvider, MemProvider) {
    let link = Arc::new(Mutex::new(Link::default()));
    (
        MemProvider::new(Arc::clone(&link), 0, config),
        MemProvider::new(link, 1, config),
    )
}

/// A connected pair: `a` connects with `pa`, `b` accepts with `pb`. Both
/// ends are established and their `Established` events have been consumed
/// (as has `b`'s `ConnectRequest`).
pub fn connected_pair(
    config: MemConfig,
    pa: ConnectParams,
    pb: ConnectParams,
) -> Result<(MemProvider, MemProvider), ProviderError> {
    let (mut a, mut b) = pair(config);
    a.connect(pa)?;
    match b.poll_event() {
        Some(ConnectionEvent::ConnectRequest { .. }) => {}
        _ => return Err(ProviderError::InvalidArgument("no connect request")),
    }
    b.accept(pb)?;
    let _ = b.poll_event();
    match a.poll_event() {
        Some(ConnectionEvent::Established(_)) => Ok((a, b)),
        _ => Err(ProviderError::NotConnected),
    }
}

#[derive(Debug)]
enum Msg {
    ConnectRequest(ConnectParams),
    Accept {
        private_data: Vec<u8>,
        ird: u8,
        ord: u8,
    },
    Reject {
        private_data: Vec<u8>,
    },
    Send {
        seq: u64,
        data: Vec<u8>,
        solicited: bool,
        invalidate: Option<Stag>,
    },
    Write {
        seq: u64,
        remote: RemoteAddr,
        data: Vec<u8>,
    },
    ReadReq {
        seq: u64,
        remote: RemoteAddr,
        len: u32,
    },
    ReadResp {
        seq: u64,
        data: Vec<u8>,
    },
    Ack {
        seq: u64,
    },
    /// The peer failed; `status` is what the WR `seq` completes with.
    Terminate {
        seq: u64,
        status: Status,
    },
    Close,
}

impl Msg {
    /// Does this arrival satisfy a `Notify::Solicited` arm?
    fn solicits(&self) -> bool {
        !matches!(
            self,
            Msg::Send {
                solicited: false,
                ..
            } | Msg::Write { .. }
                | Msg::ReadReq { .. }
                | Msg::ReadResp { .. }
                | Msg::Ack { .. }
        )
    }
}

#[derive(Default)]
struct Link {
    /// `inbound[i]`: messages for end `i`, in order.
    inbound: [VecDeque<Msg>; 2],
    wakers: [Option<(Waker, Notify)>; 2],
    /// Set by the end that closed or terminated; later pushes are dropped.
    closed: bool,
}

fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Entry {
    wr_id: u64,
    opcode: Opcode,
    holds: Holds,
    /// False for a staged Send: it never completes.
    signaled: bool,
}

struct Queued {
    entry: Entry,
    op: SendOp,
    sges: Sges,
    /// A staged Send's payload, copied at post time (its `sges` are
    /// empty).
    staged: Option<Vec<u8>>,
}

struct Inflight {
    seq: u64,
    entry: Entry,
    sink: Option<Sge>,
    byte_len: u32,
    done: Option<(Status, u32)>,
}

struct PostedRecv {
    entry: Entry,
    sge: Sge,
}

/// One end of an in-memory pair. See the [module docs](self).
pub struct MemProvider {
    link: Arc<Mutex<Link>>,
    side: usize,
    caps: Caps,
    stage_sends: bool,
    /// Staged Sends queued or in flight (not yet acknowledged).
    staged_outstanding: usize,
    /// Staged Sends taken, ever.
    staged_sends: u64,
    mem: MemoryTable,
    rq: VecDeque<PostedRecv>,
    sq: VecDeque<Queued>,
    inflight: VecDeque<Inflight>,
    cq: VecDeque<(Completion, Holds)>,
    events: VecDeque<ConnectionEvent>,
    state: ConnectionState,
    peer_request: Option<ConnectParams>,
    info: Option<ConnectionInfo>,
    next_seq: u64,
    send_outstanding: u32,
    recv_outstanding: u32,
}

impl std::fmt::Debug for MemProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemProvider")
            .field("side", &self.side)
            .field("state", &self.state)
            .field("registered", &self.mem.registered())
            .field("rq", &self.rq.len())
            .field("sq", &self.sq.len())
            .field("inflight", &self.inflight.len())
            .field("cq", &self.cq.len())
            .finish()
    }
}

fn check_private_data(caps: &Caps, pd: &[u8]) -> Result<(), ProviderError> {
    let max = usize::from(caps.max_private_data).min(super::MAX_PRIVATE_DATA);
    if pd.len() > max {
        return Err(ProviderError::PrivateDataTooLong { len: pd.len(), max });
    }
    Ok(())
}

impl MemProvider {
    fn new(link: Arc<Mutex<Link>>, side: usize, config: MemConfig) -> Self {
        MemProvider {
            link,
            side,
            caps: config.caps,
            stage_sends: config.stage_sends,
            staged_outstanding: 0,
            staged_sends: 0,
            // The two ends start their key bytes half a cycle apart, so
            // an STag of one end never names a region of the other
            // (until 128 re-registrations of one index): an upper layer
            // that mixes up local and remote keys fails loudly.
            mem: MemoryTable::new(if side == 0 { 0 } else { 0x80 }),
            rq: VecDeque::new(),
            sq: VecDeque::new(),
            inflight: VecDeque::new(),
            cq: VecDeque::new(),
            events: VecDeque::new(),
            state: ConnectionState::Idle,
            peer_request: None,
            info: None,
            next_seq: 0,
            send_outstanding: 0,
            recv_outstanding: 0,
        }
    }

    /// Active side: sends a connect request carrying `params.private_data`
    /// (at most [`Caps::max_private_data`] octets). IRD/ORD are clamped to
    /// the caps.
    pub fn connect(&mut self, mut params: ConnectParams) -> Result<(), ProviderError> {
        if self.state != ConnectionState::Idle {
            return Err(ProviderError::InvalidArgument("connect: not idle"));
        }
        check_private_data(&self.caps, &params.private_data)?;
        params.ird = params.ird.min(self.caps.max_ird);
        params.ord = params.ord.min(self.caps.max_ord);
        self.state = ConnectionState::Connecting;
        self.push(Msg::ConnectRequest(params));
        Ok(())
    }

    /// Passive side: accepts the pending request with our private data and
    /// IRD/ORD. Our ORD becomes min(our ORD, peer IRD) and our IRD
    /// min(our IRD, peer ORD); the peer gets the mirror image.
    pub fn accept(&mut self, params: ConnectParams) -> Result<(), ProviderError> {
        let Some(req) = self.peer_request.take() else {
            return Err(ProviderError::InvalidArgument("accept: no pending request"));
        };
        if let Err(e) = check_private_data(&self.caps, &params.private_data) {
            self.peer_request = Some(req);
            return Err(e);
        }
        let my_ird = params.ird.min(self.caps.max_ird);
        let my_ord = params.ord.min(self.caps.max_ord);
        let ord = my_ord.min(req.ird);
        let ird = my_ird.min(req.ord);
        self.push(Msg::Accept {
            private_data: params.private_data.clone(),
            ird: req.ird.min(my_ord),
            ord: req.ord.min(my_ird),
        });
        self.establish(req.private_data, ird, ord);
        Ok(())
    }

    /// Passive side: refuses the pending request; the active side sees
    /// [`DisconnectReason::Rejected`] with `private_data`.
    pub fn reject(&mut self, private_data: Vec<u8>) -> Result<(), ProviderError> {
        if self.peer_request.is_none() {
            return Err(ProviderError::InvalidArgument("reject: no pending request"));
        }
        check_private_data(&self.caps, &private_data)?;
        self.peer_request = None;
        self.cut(Msg::Reject { private_data });
        self.go_down(DisconnectReason::LocalClose);
        Ok(())
    }

    /// Messages on the wire in both directions plus WRs not yet transmitted
    /// here: zero means this end has nothing left to do until someone posts
    /// (useful to detect quiescence in simulations).
    pub fn pending_work(&self) -> usize {
        let l = lock(&self.link);
        l.inbound[0].len() + l.inbound[1].len() + self.sq.len()
    }

    /// Live registrations (regions registered and not deregistered).
    pub fn registered_regions(&self) -> u32 {
        self.mem.registered()
    }

    /// Staged Sends taken so far ([`MemConfig::stage_sends`]).
    pub fn staged_sends(&self) -> u64 {
        self.staged_sends
    }

    /// Octets of registered memory this end holds (see
    /// [`MemoryTable::resident_bytes`](super::memory::MemoryTable::resident_bytes)).
    pub fn resident_bytes(&self) -> usize {
        self.mem.resident_bytes()
    }

    fn establish(&mut self, peer_private_data: Vec<u8>, ird: u8, ord: u8) {
        let info = ConnectionInfo {
            peer_private_data,
            ird,
            ord,
            max_send_sge: self.caps.max_send_sge,
            max_recv_sge: self.caps.max_recv_sge,
            max_inline: self.caps.max_inline,
            max_msg_size: self.caps.max_msg_size,
        };
        self.info = Some(info.clone());
        self.state = ConnectionState::Established;
        self.events.push_back(ConnectionEvent::Established(info));
    }

    // ----- the wire -----

    fn push(&self, msg: Msg) {
        let mut l = lock(&self.link);
        if l.closed {
            return;
        }
        let peer = 1 - self.side;
        let solicits = msg.solicits();
        l.inbound[peer].push_back(msg);
        let w = take_waker(&mut l, peer, solicits);
        drop(l);
        wake(w);
    }

    fn pop(&self) -> Option<Msg> {
        lock(&self.link).inbound[self.side].pop_front()
    }

    /// Abortive end of the link from this side: drop what is queued for us,
    /// send `last` (Close or Terminate), refuse everything afterwards.
    fn cut(&self, last: Msg) {
        let mut l = lock(&self.link);
        l.inbound[self.side].clear();
        let mut w = None;
        if !l.closed {
            let peer = 1 - self.side;
            l.inbound[peer].push_back(last);
            l.closed = true;
            w = take_waker(&mut l, peer, true);
        }
        drop(l);
        wake(w);
    }

    // ----- memory -----

    fn gather(&self, sges: &[Sge]) -> Vec<u8> {
        let total: usize = sges.iter().map(|s| s.length as usize).sum();
        let mut data = Vec::with_capacity(total);
        for s in sges {
            if let Some((_, r)) = self.mem.lookup(s.lkey) {
                let start = usize::try_from(s.offset).unwrap_or(usize::MAX);
                let end = start.saturating_add(s.length as usize);
                if let Some(src) = r.buf().get(start..end) {
                    data.extend_from_slice(src);
                }
            }
        }
        data
    }

    fn place(&mut self, idx: u32, offset: usize, data: &[u8]) -> bool {
        let Some(r) = self.mem.region_at_mut(idx) else {
            return false;
        };
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        match r.buf_mut().and_then(|b| b.get_mut(offset..end)) {
            Some(dst) => {
                dst.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    // ----- completions and failure -----

    fn complete(&mut self, entry: Entry, status: Status, byte_len: u32) {
        if !entry.signaled {
            self.staged_outstanding = self.staged_outstanding.saturating_sub(1);
            return;
        }
        let c = Completion {
            wr_id: entry.wr_id,
            opcode: entry.opcode,
            byte_len: if status.is_ok() { byte_len } else { 0 },
            status,
        };
        self.cq.push_back((c, entry.holds));
    }

    /// Moves finished Send-queue WRs to the CQ, in post order.
    fn retire(&mut self) {
        while self.inflight.front().is_some_and(|f| f.done.is_some()) {
            if let Some(f) = self.inflight.pop_front() {
                let (status, len) = f.done.unwrap_or((Status::Flushed, 0));
                self.complete(f.entry, status, len);
            }
        }
    }

    fn flush_all(&mut self) {
        while let Some(f) = self.inflight.pop_front() {
            let (status, len) = f.done.unwrap_or((Status::Flushed, 0));
            self.complete(f.entry, status, len);
        }
        while let Some(q) = self.sq.pop_front() {
            self.complete(q.entry, Status::Flushed, 0);
        }
        while let Some(r) = self.rq.pop_front() {
            self.complete(r.entry, Status::Flushed, 0);
        }
    }

    fn go_down(&mut self, reason: DisconnectReason) {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return;
        }
        self.flush_all();
        self.peer_request = None;
        self.state = ConnectionState::Disconnected(reason.clone());
        self.events
            .push_back(ConnectionEvent::Disconnected(reason.clone()));
    }

    /// A fatal error detected here while serving the peer's WR `seq`.
    fn fail_here(&mut self, status_here: Status, blame: Blame, seq: u64, status_peer: Status) {
        self.cut(Msg::Terminate {
            seq,
            status: status_peer,
        });
        self.go_down(DisconnectReason::Error {
            status: status_here,
            blame,
        });
    }

    // ----- progress -----

    pub(crate) fn progress(&mut self) {
        while let Some(msg) = self.pop() {
            self.handle(msg);
        }
        self.transmit();
    }

    fn handle(&mut self, msg: Msg) {
        let data = matches!(
            msg,
            Msg::Send { .. }
                | Msg::Write { .. }
                | Msg::ReadReq { .. }
                | Msg::ReadResp { .. }
                | Msg::Ack { .. }
        );
        if data && self.state != ConnectionState::Established {
            // Cannot happen (the peer sends data only once established, and
            // whoever goes down cuts the wire first); ignored to be safe.
            return;
        }
        match msg {
            Msg::ConnectRequest(p) => {
                if self.state == ConnectionState::Idle {
                    self.state = ConnectionState::Connecting;
                    self.events.push_back(ConnectionEvent::ConnectRequest {
                        private_data: p.private_data.clone(),
                        ird: p.ird,
                        ord: p.ord,
                    });
                    self.peer_request = Some(p);
                }
            }
            Msg::Accept {
                private_data,
                ird,
                ord,
            } => {
                if self.state == ConnectionState::Connecting {
                    self.establish(private_data, ird, ord);
                }
            }
            Msg::Reject { private_data } => {
                self.go_down(DisconnectReason::Rejected { private_data });
            }
            Msg::Close => self.go_down(DisconnectReason::PeerClose),
            Msg::Terminate { seq, status } => {
                if let Some(f) = self.inflight.iter_mut().find(|f| f.seq == seq) {
                    f.done.get_or_insert((status, 0));
                }
                self.retire();
                self.go_down(DisconnectReason::Error {
                    status,
                    blame: status.blame(),
                });
            }
            Msg::Ack { seq } => {
                if let Some(f) = self.inflight.iter_mut().find(|f| f.seq == seq) {
                    let len = f.byte_len;
                    f.done.get_or_insert((Status::Success, len));
                }
                self.retire();
            }
            Msg::ReadResp { seq, data } => {
                let sink = self
                    .inflight
                    .iter()
                    .find(|f| f.seq == seq)
                    .and_then(|f| f.sink);
                if let Some(sink) = sink {
                    let idx = Stag(sink.lkey).index();
                    let ok = data.len() <= sink.length as usize
                        && self.place(idx, sink.offset as usize, &data);
                    let done = if ok {
                        (Status::Success, data.len() as u32)
                    } else {
                        (Status::LocalLength, 0)
                    };
                    if let Some(f) = self.inflight.iter_mut().find(|f| f.seq == seq) {
                        f.done.get_or_insert(done);
                    }
                    self.retire();
                }
            }
            Msg::Send {
                seq,
                data,
                solicited: _,
                invalidate,
            } => self.on_send(seq, data, invalidate),
            Msg::Write { seq, remote, data } => {
                match self
                    .mem
                    .check_remote(remote, data.len() as u64, Access::REMOTE_WRITE)
                {
                    Some((idx, off)) if self.place(idx, off, &data) => {
                        self.push(Msg::Ack { seq });
                    }
                    _ => self.fail_here(
                        Status::RemoteAccess,
                        Blame::Remote,
                        seq,
                        Status::RemoteAccess,
                    ),
                }
            }
            Msg::ReadReq { seq, remote, len } => {
                let src = self
                    .mem
                    .check_remote(remote, u64::from(len), Access::REMOTE_READ)
                    .and_then(|(idx, off)| {
                        let r = self.mem.region_at(idx)?;
                        r.buf().get(off..off.checked_add(len as usize)?)
                    })
                    .map(|s| s.to_vec());
                match src {
                    Some(data) => self.push(Msg::ReadResp { seq, data }),
                    None => self.fail_here(
                        Status::RemoteAccess,
                        Blame::Remote,
                        seq,
                        Status::RemoteAccess,
                    ),
                }
            }
        }
    }

    //= rfc8166#section-3.3
    //# If any pre-posted Receive buffer on the connection is not large
    //# enough to accept an incoming RDMA Send, or if a pre-posted Receive
    //# buffer is not available to accept an incoming RDMA Send, the RDMA
    //# connection can be terminated.
    //= rfc5041#section-7.1
    //# If there is not an associated buffer, DDP implementations MAY choose
    //# to disable the stream for the reception and report an error to the
    //# ULP at the Data Sink.
    // This provider terminates at the first occurrence, as iWARP does (and
    // InfiniBand with rnr_retry_count = 0, as Linux sets it): an untagged
    // message with no buffer, or a buffer too small, is a DDP error that
    // terminates the stream.
    fn on_send(&mut self, seq: u64, data: Vec<u8>, invalidate: Option<Stag>) {
        let Some(recv) = self.rq.pop_front() else {
            self.fail_here(
                Status::ReceiverNotReady,
                Blame::Local,
                seq,
                Status::ReceiverNotReady,
            );
            return;
        };
        if data.len() > recv.sge.length as usize {
            self.complete(recv.entry, Status::LocalLength, 0);
            self.fail_here(
                Status::LocalLength,
                Blame::Local,
                seq,
                Status::RemoteOperation,
            );
            return;
        }
        let mut opcode = Opcode::Recv;
        if let Some(stag) = invalidate {
            if self.mem.invalidate(stag) {
                opcode = Opcode::RecvWithInvalidate { stag };
            } else {
                self.complete(recv.entry, Status::LocalProtection, 0);
                self.fail_here(
                    Status::RemoteInvalidRequest,
                    Blame::Remote,
                    seq,
                    Status::RemoteOperation,
                );
                return;
            }
        }
        let idx = Stag(recv.sge.lkey).index();
        self.mem.back(idx);
        let placed = self.place(idx, recv.sge.offset as usize, &data);
        let mut entry = recv.entry;
        entry.opcode = opcode;
        if placed {
            self.mem.received(idx, recv.sge.offset as usize, data.len());
            self.complete(entry, Status::Success, data.len() as u32);
            self.push(Msg::Ack { seq });
        } else {
            self.complete(entry, Status::LocalProtection, 0);
            self.fail_here(
                Status::LocalProtection,
                Blame::Local,
                seq,
                Status::RemoteOperation,
            );
        }
    }

    fn transmit(&mut self) {
        if self.state != ConnectionState::Established {
            return;
        }
        while let Some(q) = self.sq.pop_front() {
            let seq = self.next_seq;
            self.next_seq = self.next_seq.wrapping_add(1);
            let byte_len = q.sges.iter().fold(0u32, |a, s| a.saturating_add(s.length));
            let mut sink = None;
            let mut done = None;
            match q.op {
                SendOp::Send { solicited } => {
                    let data = match q.staged {
                        Some(d) => d,
                        None => self.gather(&q.sges),
                    };
                    self.push(Msg::Send {
                        seq,
                        data,
                        solicited,
                        invalidate: None,
                    });
                }
                SendOp::SendWithInvalidate {
                    invalidate,
                    solicited,
                } => {
                    let data = match q.staged {
                        Some(d) => d,
                        None => self.gather(&q.sges),
                    };
                    self.push(Msg::Send {
                        seq,
                        data,
                        solicited,
                        invalidate: Some(invalidate),
                    });
                }
                SendOp::Write { remote } => {
                    let data = self.gather(&q.sges);
                    self.push(Msg::Write { seq, remote, data });
                }
                SendOp::Read { remote } => {
                    sink = q.sges.first().copied();
                    self.push(Msg::ReadReq {
                        seq,
                        remote,
                        len: byte_len,
                    });
                }
                SendOp::LocalInvalidate { stag } => {
                    // Validated and held at post time, so it cannot have
                    // been deregistered since; checked again all the same.
                    done = Some(if self.mem.invalidate(stag) {
                        (Status::Success, 0)
                    } else {
                        (Status::LocalProtection, 0)
                    });
                }
            }
            let failed = matches!(done, Some((s, _)) if !s.is_ok());
            self.inflight.push_back(Inflight {
                seq,
                entry: q.entry,
                sink,
                byte_len,
                done,
            });
            if failed {
                self.retire();
                self.cut(Msg::Close);
                self.go_down(DisconnectReason::Error {
                    status: Status::LocalProtection,
                    blame: Blame::Local,
                });
                return;
            }
        }
        self.retire();
    }
}

/// Takes `side`'s waker if this arrival satisfies its arm. Wakers are
/// called after the link lock is released, so a waker that polls the
/// provider inline cannot deadlock.
fn take_waker(l: &mut Link, side: usize, solicits: bool) -> Option<Waker> {
    let fire = matches!(&l.wakers[side], Some((_, n)) if *n == Notify::Any || solicits);
    if fire {
        l.wakers[side].take().map(|(w, _)| w)
    } else {
        None
    }
}

fn wake(w: Option<Waker>) {
    if let Some(w) = w {
        w.wake();
    }
}

impl Provider for MemProvider {
    fn caps(&self) -> Caps {
        self.caps
    }

    fn connection_state(&self) -> ConnectionState {
        self.state.clone()
    }

    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.info.clone()
    }

    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        if self.events.is_empty() {
            self.progress();
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return;
        }
        self.cut(Msg::Close);
        self.go_down(DisconnectReason::LocalClose);
    }

    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.mem.register(buf, access, &self.caps)
    }

    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.mem.register_shared(buf, access, &self.caps)
    }

    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.mem.register_lent(len, &self.caps)
    }

    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.mem.deregister(mr)
    }

    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.mem.region(mr)
    }

    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.mem.region_mut(mr)
    }

    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return Err(ProviderError::NotConnected);
        }
        if self.recv_outstanding >= self.caps.max_recv_wr {
            return Err(ProviderError::QueueFull);
        }
        let holds: Holds = smallvec![self.mem.check_recv(&wr)?];
        self.mem.hold(&holds);
        self.recv_outstanding += 1;
        self.rq.push_back(PostedRecv {
            entry: Entry {
                wr_id: wr.wr_id,
                opcode: Opcode::Recv,
                holds,
                signaled: true,
            },
            sge: wr.sge,
        });
        self.wake_self();
        Ok(())
    }

    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        if self.state != ConnectionState::Established {
            return Err(ProviderError::NotConnected);
        }
        if self.send_outstanding >= self.caps.max_send_wr {
            return Err(ProviderError::QueueFull);
        }
        let mut read_sink_access = Access::LOCAL_WRITE;
        if self.caps.read_sink_needs_remote_write {
            read_sink_access = read_sink_access | Access::REMOTE_WRITE;
        }
        let rules = SendRules {
            read_single_sge: false,
            read_sink_access,
            ord_zero: self.info.as_ref().is_some_and(|i| i.ord == 0),
        };
        let checked = self.mem.check_send(&wr, &self.caps, &rules)?;
        let (opcode, holds) = (checked.opcode, checked.holds);
        self.mem.hold(&holds);
        self.send_outstanding += 1;
        self.sq.push_back(Queued {
            entry: Entry {
                wr_id: wr.wr_id,
                opcode,
                holds,
                signaled: true,
            },
            op: wr.op,
            sges: wr.sges,
            staged: None,
        });
        self.wake_self();
        Ok(())
    }

    /// With [`MemConfig::stage_sends`]: the payload is copied now and
    /// queued behind the Send-queue WRs posted before it (transmitted in
    /// order with them), with no hold, no Send-queue slot and no
    /// completion; a failure at the peer ends the connection as for a
    /// registered Send.
    fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        if self.state != ConnectionState::Established {
            return Err(ProviderError::NotConnected);
        }
        let opcode = match op {
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => Opcode::Send,
            _ => return Err(ProviderError::InvalidArgument("a staged WR must be a Send")),
        };
        if len as u64 > u64::from(self.caps.max_msg_size) {
            return Err(ProviderError::TooLong);
        }
        if !self.stage_sends {
            return Ok(false);
        }
        let mut data = vec![0u8; len];
        fill(&mut data);
        self.sq.push_back(Queued {
            entry: Entry {
                wr_id: 0,
                opcode,
                holds: Holds::new(),
                signaled: false,
            },
            op,
            sges: Sges::new(),
            staged: Some(data),
        });
        self.staged_outstanding += 1;
        self.staged_sends += 1;
        self.wake_self();
        Ok(true)
    }

    fn staged_outstanding(&self) -> usize {
        self.staged_outstanding
    }

    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        self.progress();
        let mut n = 0;
        while let Some((c, holds)) = self.cq.pop_front() {
            self.mem.release(&holds);
            match c.opcode {
                Opcode::Recv | Opcode::RecvWithInvalidate { .. } => {
                    self.recv_outstanding = self.recv_outstanding.saturating_sub(1)
                }
                _ => self.send_outstanding = self.send_outstanding.saturating_sub(1),
            }
            out.push(c);
            n += 1;
        }
        n
    }

    fn registered_regions(&self) -> Option<u32> {
        Some(self.mem.registered())
    }

    fn arm(&mut self, waker: &Waker, notify: Notify) {
        let mut l = lock(&self.link);
        let pending = !self.cq.is_empty()
            || !self.events.is_empty()
            || (!self.sq.is_empty() && self.state == ConnectionState::Established)
            || !l.inbound[self.side].is_empty();
        if pending {
            l.wakers[self.side] = None;
            drop(l);
            waker.wake_by_ref();
        } else {
            l.wakers[self.side] = Some((waker.clone(), notify));
        }
    }
}

impl MemProvider {
    fn wake_self(&self) {
        let w = lock(&self.link).wakers[self.side].take().map(|(w, _)| w);
        wake(w);
    }
}
