//! A two-peer simulation harness: a client and a server engine over an
//! in-memory provider pair (each end behind a fault injector, transparent
//! by default), stepped until quiescent, with virtual time.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use rpcrdma_proto::engine::{
    CallHandle, CallId, Config, Connection, Event, IncomingCall, Message, OutgoingCall,
    OutgoingReply, Piece, ReplyForm, RpcRdmaVersion,
};
use rpcrdma_proto::provider::fault::{FaultConfig, FaultInjector};
use rpcrdma_proto::provider::mem::{self, MemConfig, MemProvider};
use rpcrdma_proto::provider::{Completion, ConnectionEvent, Provider};
use rpcrdma_proto::wire::rpc::RpcMsg;
use rpcrdma_proto::XdrEncode;

pub type Prov = FaultInjector<MemProvider>;

/// The RPC-over-RDMA versions the two-peer tests that make sense in both
/// run in.
pub const VERSIONS: [RpcRdmaVersion; 2] = [RpcRdmaVersion::V1, RpcRdmaVersion::V2];

/// Client defaults speaking version `v`.
pub fn ccfg(v: RpcRdmaVersion) -> Config {
    let mut c = Config::client();
    c.rpcrdma_version = v;
    c
}

/// Error replies sent other than ERR_VERS, in either version.
pub fn errors_sent(m: &rpcrdma_proto::engine::Metrics) -> u64 {
    m.err_chunk_sent + m.rdma2_errors_sent
}

/// Error replies received other than ERR_VERS, in either version.
pub fn errors_received(m: &rpcrdma_proto::engine::Metrics) -> u64 {
    m.err_chunk_received + m.rdma2_errors_received + m.err_other_received
}

/// Server defaults speaking version `v`.
pub fn scfg(v: RpcRdmaVersion) -> Config {
    let mut c = Config::server();
    c.rpcrdma_version = v;
    c
}

/// One end: engine, provider (by default the in-memory one behind a
/// fault injector), and the events it produced.
pub struct Side<P = Prov> {
    pub conn: Connection,
    pub prov: P,
    pub events: Vec<Event>,
}

impl<P: Provider> Side<P> {
    /// Steps this end once; true if anything happened.
    pub fn step(&mut self, now: Instant) -> bool {
        let mut busy = false;
        while let Some(ev) = self.prov.poll_event() {
            busy = true;
            match ev {
                ConnectionEvent::Established(info) => {
                    self.conn.handle_established(now, &mut self.prov, &info)
                }
                ConnectionEvent::Disconnected(r) => {
                    self.conn.handle_disconnected(&mut self.prov, r)
                }
                ConnectionEvent::ConnectRequest { .. } => {}
            }
        }
        let mut out: Vec<Completion> = Vec::new();
        self.prov.poll_completions(&mut out);
        for c in out {
            busy = true;
            self.conn.handle_completion(now, &mut self.prov, c);
        }
        while let Some(e) = self.conn.poll_event() {
            busy = true;
            self.events.push(e);
        }
        busy
    }
}

/// Client and server.
pub struct Pair {
    pub now: Instant,
    pub c: Side,
    pub s: Side,
    pub ccfg: Config,
    pub scfg: Config,
    pub mem: MemConfig,
    pub steps: u64,
}

fn connect(
    mem: MemConfig,
    ccfg: &Config,
    scfg: &Config,
    server: &mut Connection,
    fc: FaultConfig,
    fs: FaultConfig,
) -> (Prov, Prov) {
    let (mut a, mut b) = mem::pair(mem);
    a.connect(ccfg.connect_params()).expect("connect");
    match b.poll_event() {
        Some(ConnectionEvent::ConnectRequest { .. }) => {}
        other => panic!("expected a connect request, got {other:?}"),
    }
    // Receives are posted before the server accepts (as Linux svcrdma).
    server.prepare_receives(&mut b);
    b.accept(scfg.connect_params()).expect("accept");
    (FaultInjector::new(a, fc), FaultInjector::new(b, fs))
}

impl Pair {
    pub fn new(ccfg: Config, scfg: Config) -> Pair {
        Pair::with_faults(
            ccfg,
            scfg,
            MemConfig::DEFAULT,
            FaultConfig::default(),
            FaultConfig::default(),
        )
    }

    pub fn with_faults(
        ccfg: Config,
        scfg: Config,
        mem: MemConfig,
        fc: FaultConfig,
        fs: FaultConfig,
    ) -> Pair {
        let mut server = Connection::new(scfg.clone());
        let client = Connection::new(ccfg.clone());
        let (pa, pb) = connect(mem, &ccfg, &scfg, &mut server, fc, fs);
        let mut p = Pair {
            now: base_instant(),
            c: Side {
                conn: client,
                prov: pa,
                events: Vec::new(),
            },
            s: Side {
                conn: server,
                prov: pb,
                events: Vec::new(),
            },
            ccfg,
            scfg,
            mem,
            steps: 0,
        };
        p.run();
        p
    }

    /// A new connection: the client engine is rebuilt with
    /// [`Connection::reconnect`], the server starts afresh.
    pub fn reconnect(&mut self, fc: FaultConfig, fs: FaultConfig) {
        let old = std::mem::replace(&mut self.c.conn, Connection::new(self.ccfg.clone()));
        self.c.conn = old.reconnect(self.ccfg.clone());
        self.s.conn = Connection::new(self.scfg.clone());
        let (pa, pb) = connect(self.mem, &self.ccfg, &self.scfg, &mut self.s.conn, fc, fs);
        self.c.prov = pa;
        self.s.prov = pb;
        self.run();
    }

    /// Steps both ends until nothing moves.
    pub fn run(&mut self) {
        let mut idle_rounds = 0;
        loop {
            self.steps += 1;
            assert!(self.steps < 10_000_000, "simulation does not quiesce");
            let a = self.c.step(self.now);
            let b = self.s.step(self.now);
            let pending = self.c.prov.inner().pending_work() + self.s.prov.inner().pending_work();
            if !a && !b && pending == 0 {
                idle_rounds += 1;
                if idle_rounds >= 2 {
                    break;
                }
            } else {
                idle_rounds = 0;
            }
        }
    }

    /// Jumps virtual time to the earliest timer and fires it; false if no
    /// timer is armed.
    pub fn advance(&mut self) -> bool {
        let next = [self.c.conn.poll_timeout(), self.s.conn.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        self.c.conn.handle_timeout(self.now, &mut self.c.prov);
        self.s.conn.handle_timeout(self.now, &mut self.s.prov);
        self.run();
        true
    }

    /// Moves virtual time forward.
    pub fn sleep(&mut self, d: Duration) {
        self.now += d;
    }

    pub fn call(&mut self, call: OutgoingCall) -> CallId {
        let id = self
            .c
            .conn
            .start_call(self.now, &mut self.c.prov, call)
            .expect("start_call");
        self.run();
        id
    }

    pub fn server_call(&mut self, call: OutgoingCall) -> CallId {
        let id = self
            .s
            .conn
            .start_call(self.now, &mut self.s.prov, call)
            .expect("start_call (backchannel)");
        self.run();
        id
    }

    pub fn reply(&mut self, h: CallHandle, r: OutgoingReply) -> ReplyForm {
        let f = self
            .s
            .conn
            .send_reply(self.now, &mut self.s.prov, h, r)
            .expect("send_reply");
        self.run();
        f
    }

    /// Calls received by the server so far (removed from its events).
    pub fn server_calls(&mut self) -> Vec<IncomingCall> {
        take_calls(&mut self.s.events)
    }

    /// Calls received by the client (backchannel).
    pub fn client_calls(&mut self) -> Vec<IncomingCall> {
        take_calls(&mut self.c.events)
    }

    pub fn client_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.c.events)
    }
}

pub fn take_calls(events: &mut Vec<Event>) -> Vec<IncomingCall> {
    let mut out = Vec::new();
    events.retain(|e| match e {
        Event::CallReceived(c) => {
            out.push(c.clone());
            false
        }
        _ => true,
    });
    out
}

/// The one base instant of a simulation; time only moves by adding
/// durations to it.
pub fn base_instant() -> Instant {
    use std::sync::OnceLock;
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// RPC call header (XID 0: the engine assigns it) for prog/vers/proc.
pub fn call_header(prog: u32, proc_: u32) -> Vec<u8> {
    RpcMsg::call_auth_none(0, prog, 1, proc_).to_vec().unwrap()
}

/// RPC MSG_ACCEPTED/SUCCESS header for `xid`.
pub fn reply_header(xid: u32) -> Vec<u8> {
    RpcMsg::success(xid).to_vec().unwrap()
}

/// Deterministic test data.
pub fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// XDR length word.
pub fn word(n: u32) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

/// A call: header, then `arg` as an XDR opaque (DDP-eligible if `ddp`).
pub fn opaque_call(proc_: u32, arg: &[u8], ddp: bool) -> Message {
    let mut head = call_header(100_003, proc_);
    head.extend(word(arg.len() as u32));
    let mut v = Message::new();
    v.push(Piece::Inline(head.into()));
    if ddp {
        v.push(Piece::Ddp(arg.to_vec().into()));
    } else {
        let mut b = arg.to_vec();
        b.resize(b.len() + (4 - b.len() % 4) % 4, 0);
        v.push(Piece::Inline(b.into()));
    }
    v.push(Piece::Inline(word(0xfeed_f00d).into()));
    v
}

/// Where the DDP pieces of a received call are in its full XDR stream
/// (data only, pads excluded): the ranges that arrived by RDMA Read.
pub fn ddp_ranges(m: &Message) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    let mut out = Vec::new();
    for p in m.pieces() {
        if let Piece::Ddp(b) = p {
            out.push(at..at + b.len());
        }
        at += p.xdr_len();
    }
    out
}

/// The full XDR stream of `pieces` with the first word replaced by `xid`.
pub fn stream(pieces: &Message, xid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces.pieces() {
        match p {
            Piece::Inline(b) => out.extend_from_slice(b),
            Piece::Ddp(_) | Piece::File(_) => {
                let b = p.file_octets();
                out.extend_from_slice(&b);
                out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
            }
        }
    }
    out[..4].copy_from_slice(&xid.to_be_bytes());
    out
}

pub fn provider_of(side: &mut Side) -> &mut dyn Provider {
    &mut side.prov
}

/// Big-endian words to bytes (for hand-built headers).
pub fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// A peer driven by hand: raw Sends and Receives, no engine.
pub struct Raw {
    pub prov: MemProvider,
    pub got: Vec<Vec<u8>>,
    pub completions: Vec<Completion>,
    recvs: std::collections::HashMap<u64, rpcrdma_proto::provider::MemoryRegion>,
    next: u64,
}

impl Raw {
    fn new(prov: MemProvider) -> Raw {
        Raw {
            prov,
            got: Vec::new(),
            completions: Vec::new(),
            recvs: Default::default(),
            next: 1000,
        }
    }

    /// Posts `n` receives of 64 KiB.
    pub fn post_recvs(&mut self, n: usize) {
        use rpcrdma_proto::provider::{Access, RecvWr};
        for _ in 0..n {
            let mr = self
                .prov
                .register(vec![0u8; 65536].into_boxed_slice(), Access::LOCAL_WRITE)
                .unwrap();
            self.next += 1;
            self.recvs.insert(self.next, mr);
            self.prov
                .post_recv(RecvWr {
                    wr_id: self.next,
                    sge: mr.sge(0, 65536),
                })
                .unwrap();
        }
    }

    /// Sends `bytes` in one RDMA Send.
    pub fn send(&mut self, bytes: &[u8]) {
        use rpcrdma_proto::provider::{Access, SendOp, SendWr};
        let mr = self
            .prov
            .register(bytes.to_vec().into_boxed_slice(), Access::NONE)
            .unwrap();
        self.next += 1;
        self.prov
            .post_send(SendWr {
                wr_id: self.next,
                op: SendOp::Send { solicited: true },
                sges: vec![mr.sge(0, bytes.len() as u32)].into(),
            })
            .unwrap();
    }

    /// RDMA Writes `bytes` at the peer's `stag` + `offset`.
    pub fn write(&mut self, stag: u32, offset: u64, bytes: &[u8]) {
        use rpcrdma_proto::provider::{Access, RemoteAddr, SendOp, SendWr, Stag};
        let mr = self
            .prov
            .register(bytes.to_vec().into_boxed_slice(), Access::NONE)
            .unwrap();
        self.next += 1;
        self.prov
            .post_send(SendWr {
                wr_id: self.next,
                op: SendOp::Write {
                    remote: RemoteAddr {
                        stag: Stag(stag),
                        offset,
                    },
                },
                sges: vec![mr.sge(0, bytes.len() as u32)].into(),
            })
            .unwrap();
    }

    /// Registers `data` for the peer to read; returns the STag.
    pub fn expose(&mut self, data: &[u8]) -> u32 {
        use rpcrdma_proto::provider::Access;
        let mr = self
            .prov
            .register(data.to_vec().into_boxed_slice(), Access::REMOTE_READ)
            .unwrap();
        mr.stag().0
    }

    /// Registers `len` octets for the peer to write.
    pub fn sink(&mut self, len: usize) -> rpcrdma_proto::provider::MemoryRegion {
        use rpcrdma_proto::provider::Access;
        self.prov
            .register(
                vec![0u8; len].into_boxed_slice(),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap()
    }

    pub fn poll(&mut self) -> bool {
        let mut out = Vec::new();
        while self.prov.poll_event().is_some() {}
        self.prov.poll_completions(&mut out);
        let busy = !out.is_empty();
        for c in out {
            if let Some(mr) = self.recvs.remove(&c.wr_id) {
                if c.status.is_ok() {
                    let b = self.prov.region(&mr).unwrap();
                    self.got.push(b[..c.byte_len as usize].to_vec());
                }
            }
            self.completions.push(c);
        }
        busy
    }
}

/// An engine facing a hand-driven peer.
pub struct RawPair {
    pub now: Instant,
    pub raw: Raw,
    pub side: Side,
}

impl RawPair {
    /// A server engine; the raw peer connected as a client with Linux
    /// client private data.
    pub fn server(scfg: Config) -> RawPair {
        RawPair::server_with_faults(scfg, FaultConfig::default())
    }

    /// [`RawPair::server`] with the engine's provider behind `fs`.
    pub fn server_with_faults(scfg: Config, fs: FaultConfig) -> RawPair {
        let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
        a.connect(Config::client().connect_params()).unwrap();
        assert!(matches!(
            b.poll_event(),
            Some(ConnectionEvent::ConnectRequest { .. })
        ));
        let mut conn = Connection::new(scfg.clone());
        conn.prepare_receives(&mut b);
        b.accept(scfg.connect_params()).unwrap();
        let mut p = RawPair {
            now: base_instant(),
            raw: Raw::new(a),
            side: Side {
                conn,
                prov: FaultInjector::new(b, fs),
                events: Vec::new(),
            },
        };
        p.run();
        p
    }

    /// A client engine; the raw peer accepted it as a server with `pd`
    /// as its private data.
    pub fn client(ccfg: Config, pd: Vec<u8>) -> RawPair {
        RawPair::client_with_faults(ccfg, pd, FaultConfig::default())
    }

    /// [`RawPair::client`] with `recvs` receives posted at the raw end
    /// before the engine first runs (a version 2 client sends its CONNPROP
    /// as soon as it is established).
    pub fn client_ready(ccfg: Config, pd: Vec<u8>, recvs: usize) -> RawPair {
        RawPair::client_inner(ccfg, pd, FaultConfig::default(), recvs)
    }

    /// [`RawPair::client`] with the engine's provider behind `fc`.
    pub fn client_with_faults(ccfg: Config, pd: Vec<u8>, fc: FaultConfig) -> RawPair {
        RawPair::client_inner(ccfg, pd, fc, 0)
    }

    fn client_inner(ccfg: Config, pd: Vec<u8>, fc: FaultConfig, recvs: usize) -> RawPair {
        let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
        a.connect(ccfg.connect_params()).unwrap();
        assert!(matches!(
            b.poll_event(),
            Some(ConnectionEvent::ConnectRequest { .. })
        ));
        b.accept(rpcrdma_proto::provider::ConnectParams {
            private_data: pd,
            ird: 0,
            ord: 16,
        })
        .unwrap();
        let mut p = RawPair {
            now: base_instant(),
            raw: Raw::new(b),
            side: Side {
                conn: Connection::new(ccfg),
                prov: FaultInjector::new(a, fc),
                events: Vec::new(),
            },
        };
        p.raw.post_recvs(recvs);
        p.run();
        p
    }

    pub fn run(&mut self) {
        self.run_observed(|_| {});
    }

    /// [`RawPair::run`], but the engine never sees the completions of its
    /// Send-queue work (they are returned instead): its Sends look
    /// unacknowledged forever.
    pub fn run_holding_sends(&mut self) -> Vec<Completion> {
        use rpcrdma_proto::provider::Opcode;
        let mut held = Vec::new();
        let mut idle = 0;
        for _ in 0..1_000_000 {
            let mut busy = false;
            while let Some(ev) = self.side.prov.poll_event() {
                busy = true;
                if let ConnectionEvent::Disconnected(r) = ev {
                    self.side.conn.handle_disconnected(&mut self.side.prov, r);
                }
            }
            let mut out: Vec<Completion> = Vec::new();
            self.side.prov.poll_completions(&mut out);
            for c in out {
                busy = true;
                match c.opcode {
                    Opcode::Recv | Opcode::RecvWithInvalidate { .. } => self
                        .side
                        .conn
                        .handle_completion(self.now, &mut self.side.prov, c),
                    _ => held.push(c),
                }
            }
            while let Some(e) = self.side.conn.poll_event() {
                busy = true;
                self.side.events.push(e);
            }
            let b = self.raw.poll();
            let pending = self.raw.prov.pending_work() + self.side.prov.inner().pending_work();
            if !busy && !b && pending == 0 {
                idle += 1;
                if idle >= 2 {
                    return held;
                }
            } else {
                idle = 0;
            }
        }
        panic!("raw pair does not quiesce");
    }

    /// [`RawPair::run`], calling `f` on the engine side after every step.
    pub fn run_observed(&mut self, mut f: impl FnMut(&Side)) {
        let mut idle = 0;
        for _ in 0..1_000_000 {
            let a = self.side.step(self.now);
            f(&self.side);
            let b = self.raw.poll();
            let pending = self.raw.prov.pending_work() + self.side.prov.inner().pending_work();
            if !a && !b && pending == 0 {
                idle += 1;
                if idle >= 2 {
                    return;
                }
            } else {
                idle = 0;
            }
        }
        panic!("raw pair does not quiesce");
    }
}

/// Registrations held by a memory provider (from its Debug output).
pub fn registered(p: &MemProvider) -> usize {
    let d = format!("{p:?}");
    let at = d.find("registered: ").unwrap() + "registered: ".len();
    d[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
