//! `rpcrdma demo`: a server and a client in one process over loopback
//! software iWARP (an ephemeral port on 127.0.0.1), one exchange of each
//! RPC-over-RDMA message class, each printed as it went on the wire.
//!
//! The client's iWARP provider captures its TCP stream (both directions);
//! after every exchange the new octets are decoded here (MPA FPDUs, DDP,
//! RDMAP, RPC-over-RDMA headers) and listed: each Send with its message
//! type, XID, credit field and chunk lists, and the RDMA Writes, Read
//! Requests and Read Responses with their octet counts. `--pcap FILE`
//! writes the whole capture (MPA Request and Reply included, TCP/IPv4 over
//! Ethernet synthesized around it) for `tshark` or `rpcrdma decode --pcap`.
//!
//! Classes: short call (NULL: RDMA_MSG, no chunks); Read chunk (WRITE of
//! 64 KiB: DDP-eligible argument); Write chunk (READ of 64 KiB: DDP-eligible
//! result); Long Call (ECHO of 8000 octets: RDMA_NOMSG with a
//! Position-Zero Read chunk; its reply, as large, comes back in the Reply
//! chunk); Long Reply (READ of 8000 octets without a Write chunk: a short
//! call offering a Reply chunk, answered RDMA_NOMSG); backchannel call
//! (the server calls CB_ECHO on the client, RFC 8167).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use rpcrdma::rdma::{
    iwarp_config_for, Connected, LinkInfo, ProviderConnector, RdmaClientTransport, RdmaServer,
    RdmaServerConfig,
};
use rpcrdma::testprog::{self, TEST_PROG, TEST_VERS};
use rpcrdma::{
    CallDispatcher, CallOptions, Client, ClientConfig, IncomingCall, Message, RpcError, Server,
    ServerConnection,
};
use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::ddp::DdpHeader;
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FramingConfig, Received};
use rpcrdma_iwarp::mpa::{KEY_REP, KEY_REQ};
use rpcrdma_iwarp::rdmap::{Opcode, Segment};
use rpcrdma_iwarp::tcp::{Direction, IwarpProvider};
use rpcrdma_proto::engine::Config as EngineConfig;
use rpcrdma_proto::provider::{ConnectionState, Provider};
use serde_json::Value;

use crate::rdma_cmd::runtime;

/// `rpcrdma demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Write a capture of the demo's iWARP traffic (classic pcap,
    /// Ethernet/IPv4/TCP) to FILE.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<String>,
}

/// Records the first connection a call arrives on (to call back on it).
struct Tap {
    inner: Arc<dyn CallDispatcher>,
    conn: Mutex<Option<Arc<dyn ServerConnection>>>,
}

impl CallDispatcher for Tap {
    fn dispatch(&self, call: IncomingCall) {
        {
            let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            if c.is_none() {
                *c = Some(call.conn.clone());
            }
        }
        self.inner.dispatch(call);
    }
}

// ------------------------------------------------------------ wire decoder

/// One decoded item.
enum Item {
    Send {
        from_client: bool,
        len: usize,
        header: Result<Value, String>,
    },
    Tagged {
        from_client: bool,
        write: bool,
        len: usize,
    },
    ReadRequest {
        from_client: bool,
        size: u32,
    },
    Other {
        from_client: bool,
        what: String,
    },
}

#[derive(Default)]
struct DirDecoder {
    started: bool,
    skip_frame: bool,
    pre: Vec<u8>,
    rx: Option<FpduReceiver>,
    buf: Vec<u8>,
    sends: BTreeMap<u32, Vec<u8>>,
    dead: bool,
}

impl DirDecoder {
    fn feed(&mut self, data: &[u8], from_client: bool, cfg: FramingConfig, out: &mut Vec<Item>) {
        if self.dead {
            return;
        }
        if self.rx.is_none() {
            self.pre.extend_from_slice(data);
            if self.skip_frame || self.pre.starts_with(&KEY_REP) || self.pre.starts_with(&KEY_REQ) {
                self.skip_frame = true;
                // key (16), flags, revision, PD_Length (2), private data.
                let Some(pd) = self.pre.get(18..20) else {
                    return;
                };
                let total = 20 + usize::from(u16::from_be_bytes([pd[0], pd[1]]));
                if self.pre.len() < total {
                    return;
                }
                self.buf = self.pre.split_off(total);
            } else {
                self.buf = std::mem::take(&mut self.pre);
            }
            self.rx = Some(FpduReceiver::new(cfg));
            self.started = true;
        } else {
            self.buf.extend_from_slice(data);
        }
        let Some(rx) = self.rx.as_mut() else { return };
        let mut start = 0usize;
        loop {
            let avail = self.buf.get(start..).unwrap_or(&[]);
            if avail.is_empty() {
                break;
            }
            match rx.poll(avail) {
                Ok(Received::Fpdu(f)) => {
                    let mut u = Vec::with_capacity(usize::from(f.ulpdu_len));
                    f.extend_ulpdu(avail, &mut u);
                    start += f.consumed;
                    ulpdu(&u, from_client, &mut self.sends, out);
                }
                Ok(Received::NeedMore(_)) => break,
                Err(e) => {
                    out.push(Item::Other {
                        from_client,
                        what: format!("framing error: {e}"),
                    });
                    self.dead = true;
                    break;
                }
            }
        }
        self.buf.drain(..start.min(self.buf.len()));
    }
}

fn ulpdu(u: &[u8], from_client: bool, sends: &mut BTreeMap<u32, Vec<u8>>, out: &mut Vec<Item>) {
    let Ok(seg) = Segment::parse(u) else {
        out.push(Item::Other {
            from_client,
            what: "undecodable DDP segment".into(),
        });
        return;
    };
    let payload = u.get(seg.payload.clone()).unwrap_or(&[]);
    match (seg.ddp, seg.control.opcode) {
        (DdpHeader::Tagged(_), op @ (Opcode::WRITE | Opcode::READ_RESPONSE)) => {
            out.push(Item::Tagged {
                from_client,
                write: op == Opcode::WRITE,
                len: payload.len(),
            })
        }
        (DdpHeader::Untagged(_), Opcode::READ_REQUEST) => {
            if let Some(rr) = seg.read_request {
                out.push(Item::ReadRequest {
                    from_client,
                    size: rr.size,
                });
            }
        }
        (DdpHeader::Untagged(h), op) if op.is_send() => {
            let m = sends.entry(h.msn).or_default();
            m.extend_from_slice(payload);
            if h.last {
                let data = sends.remove(&h.msn).unwrap_or_default();
                out.push(Item::Send {
                    from_client,
                    len: data.len(),
                    header: crate::json_header::header_json(&data).map_err(|f| f.detail),
                });
            }
        }
        (_, op) => out.push(Item::Other {
            from_client,
            what: format!("RDMAP {op}"),
        }),
    }
}

struct Wire {
    dirs: [DirDecoder; 2],
    cfg: [FramingConfig; 2],
    all: Vec<(Direction, Vec<u8>)>,
}

impl Wire {
    /// Decodes newly captured segments; merges consecutive tagged
    /// segments of one direction into one line.
    fn feed(&mut self, segs: Vec<(Direction, Vec<u8>)>) -> Vec<Item> {
        let mut out = Vec::new();
        for (d, data) in segs {
            let i = usize::from(d == Direction::Received);
            let cfg = FramingConfig {
                crc: self.cfg[i].crc,
                markers: self.cfg[i].markers,
            };
            self.dirs[i].feed(&data, d == Direction::Sent, cfg, &mut out);
            self.all.push((d, data));
        }
        let mut merged: Vec<Item> = Vec::new();
        for it in out {
            if let (
                Item::Tagged {
                    from_client,
                    write,
                    len,
                },
                Some(Item::Tagged {
                    from_client: f2,
                    write: w2,
                    len: l2,
                }),
            ) = (&it, merged.last_mut())
            {
                if from_client == f2 && write == w2 {
                    *l2 += len;
                    continue;
                }
            }
            merged.push(it);
        }
        merged
    }
}

fn who(from_client: bool) -> &'static str {
    if from_client {
        "client -> server"
    } else {
        "server -> client"
    }
}

fn describe(it: &Item) -> String {
    match it {
        Item::Send {
            from_client,
            len,
            header: Ok(h),
        } => {
            let proc = h["proc"].as_str().unwrap_or("?");
            let mut chunks = Vec::new();
            let n_reads = h["reads"].as_array().map_or(0, Vec::len);
            if n_reads > 0 {
                let pz = h["reads"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["position"] == 0);
                let bytes: u64 = h["reads"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["length"].as_u64())
                    .sum();
                chunks.push(format!(
                    "{} ({n_reads} segment(s), {bytes} octets)",
                    if pz {
                        "Position-Zero Read chunk"
                    } else {
                        "Read chunk"
                    }
                ));
            }
            for w in h["writes"].as_array().into_iter().flatten() {
                let bytes: u64 = w
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s["length"].as_u64())
                    .sum();
                chunks.push(format!("Write chunk ({bytes} octets)"));
            }
            if let Some(r) = h["reply"].as_array() {
                let bytes: u64 = r.iter().filter_map(|s| s["length"].as_u64()).sum();
                chunks.push(format!("Reply chunk ({bytes} octets)"));
            }
            let chunks = if chunks.is_empty() {
                "no chunks".to_string()
            } else {
                chunks.join(", ")
            };
            format!(
                "{}  Send {len:>5} octets  {proc:<10} xid 0x{:08x} credits {:<3} {chunks}",
                who(*from_client),
                h["xid"].as_u64().unwrap_or(0),
                h["credits"].as_u64().unwrap_or(0),
            )
        }
        Item::Send {
            from_client,
            len,
            header: Err(e),
        } => format!(
            "{}  Send {len:>5} octets  (not an RPC-over-RDMA header: {e})",
            who(*from_client)
        ),
        Item::Tagged {
            from_client,
            write,
            len,
        } => format!(
            "{}  {} {len} octets",
            who(*from_client),
            if *write {
                "RDMA Write         "
            } else {
                "RDMA Read Response "
            }
        ),
        Item::ReadRequest { from_client, size } => {
            format!("{}  RDMA Read Request  {size} octets", who(*from_client))
        }
        Item::Other { from_client, what } => format!("{}  {what}", who(*from_client)),
    }
}

// ------------------------------------------------------------------- pcap

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

struct PcapOut {
    buf: Vec<u8>,
    t: u64,
}

impl PcapOut {
    fn new() -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        buf.extend_from_slice(&2u16.to_le_bytes());
        buf.extend_from_slice(&4u16.to_le_bytes());
        buf.extend_from_slice(&0i32.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&262_144u32.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        PcapOut { buf, t }
    }

    #[allow(clippy::too_many_arguments)]
    fn tcp(
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
        self.t += 10;
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
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// A capture of one TCP connection: handshake, the segments in capture
/// order (split to at most 32 KiB), FIN both ways.
fn write_pcap(client: SocketAddr, server: SocketAddr, segs: &[(Direction, Vec<u8>)]) -> Vec<u8> {
    let mut p = PcapOut::new();
    let (mut cs, mut ss) = (0x1000_0000u32, 0x2000_0000u32);
    p.tcp(client, server, cs, 0, SYN, &[]);
    p.tcp(server, client, ss, cs.wrapping_add(1), SYN | ACK, &[]);
    cs = cs.wrapping_add(1);
    ss = ss.wrapping_add(1);
    p.tcp(client, server, cs, ss, ACK, &[]);
    for (d, data) in segs {
        for piece in data.chunks(32 * 1024) {
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
    p.buf
}

// ------------------------------------------------------------------- demo

/// What the connector recorded about the connection.
#[derive(Default, Clone)]
struct ConnMeta {
    local: Option<SocketAddr>,
    request: Vec<u8>,
    reply: Vec<u8>,
    framing: [(bool, bool); 2],
}

fn connector(
    addr: SocketAddr,
    engine: EngineConfig,
    meta: Arc<Mutex<ConnMeta>>,
) -> ProviderConnector {
    Arc::new(move || {
        let icfg = iwarp_config_for(&IwarpConfig::default(), &engine);
        let mut p = IwarpProvider::connect(addr, icfg)?;
        // On from here: the MPA Request went out in `connect` and is
        // added to the capture from the frame we kept.
        p.set_capture(true);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            p.progress();
            match p.connection_state() {
                ConnectionState::Established => break,
                ConnectionState::Disconnected(r) => {
                    return Err(std::io::Error::other(format!("connect failed: {r:?}")))
                }
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            p.wait(Some(deadline - now))?;
        }
        let mut m = meta.lock().unwrap_or_else(|e| e.into_inner());
        m.local = p.local_addr().ok();
        m.request = p
            .local_frame()
            .and_then(|f| f.to_vec().ok())
            .unwrap_or_default();
        m.reply = p
            .peer_frame()
            .and_then(|f| f.to_vec().ok())
            .unwrap_or_default();
        if let Some(e) = p.established() {
            m.framing = [
                (e.params.crc, e.params.send_markers),
                (e.params.crc, e.params.recv_markers),
            ];
        }
        let info = LinkInfo::of_iwarp(&p, addr.to_string());
        Ok(Connected {
            provider: Box::new(p),
            info,
        })
    })
}

async fn take_capture(t: &RdmaClientTransport) -> Vec<(Direction, Vec<u8>)> {
    t.with_provider(|p| {
        p.downcast_mut::<IwarpProvider>()
            .map(IwarpProvider::take_capture)
            .unwrap_or_default()
    })
    .await
    .unwrap_or_default()
}

/// Runs `rpcrdma demo`.
pub fn demo(args: DemoArgs) -> ExitCode {
    let rt = runtime();
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rpcrdma demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rerr(e: RpcError) -> String {
    e.to_string()
}

async fn run(args: DemoArgs) -> Result<bool, String> {
    let server = Server::default();
    testprog::register(&server);
    let tap = Arc::new(Tap {
        inner: server.dispatcher(),
        conn: Mutex::new(None),
    });
    let rdma = RdmaServer::bind("127.0.0.1:0", RdmaServerConfig::default(), tap.clone())
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let addr = rdma.local_addr();
    println!(
        "rpcrdma demo: RPC-over-RDMA v1 over software iWARP (MPA/DDP/RDMAP over TCP) on {addr}"
    );

    let engine = EngineConfig::client();
    let meta = Arc::new(Mutex::new(ConnMeta::default()));
    let t = RdmaClientTransport::with_connector(
        connector(addr, engine.clone(), meta.clone()),
        engine,
        None,
        None,
    )
    .await
    .map_err(|e| format!("connect: {e}"))?;
    let c = Client::new(t.clone(), ClientConfig::default());
    let cb = Server::default();
    testprog::register_cb(&cb);
    c.serve_backchannel(&cb).map_err(rerr)?;

    let m = meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let st = t.status();
    println!(
        "connected: MPA revision {} CRC {} Markers {} IRD {} ORD {}; RFC 8797 private data sent {} received {}",
        st.link.mpa_rev.unwrap_or(0),
        st.link.crc.unwrap_or(false),
        st.link.markers.unwrap_or(false),
        st.link.ird,
        st.link.ord,
        hex::encode(&st.link.local_private_data),
        hex::encode(&st.link.peer_private_data),
    );
    let mut wire = Wire {
        dirs: [DirDecoder::default(), DirDecoder::default()],
        cfg: [
            FramingConfig {
                crc: m.framing[0].0,
                markers: m.framing[0].1,
            },
            FramingConfig {
                crc: m.framing[1].0,
                markers: m.framing[1].1,
            },
        ],
        all: Vec::new(),
    };
    // The Sent stream starts after our MPA Request.
    wire.dirs[0].rx = Some(FpduReceiver::new(FramingConfig {
        crc: m.framing[0].0,
        markers: m.framing[0].1,
    }));
    let mut ok_all = true;
    let small = 1024u32;
    let k64 = 64 * 1024u32;

    for step in 1..=6 {
        let (title, result): (&str, Result<String, String>) = match step {
            1 => ("short call: NULL (RDMA_MSG, no chunks)", {
                let o = CallOptions {
                    reply_max: Some(small),
                    ..CallOptions::default()
                };
                c.call_with(TEST_PROG, TEST_VERS, testprog::PROC_NULL, Message::new(), &o)
                    .await
                    .map(|_| "NULL answered".to_string())
                    .map_err(rerr)
            }),
            2 => ("Read chunk: WRITE of 64 KiB (DDP-eligible argument)", {
                let data = testprog::pattern(2, k64 as usize);
                let mut a = Message::builder();
                a.put_ddp_opaque(Bytes::from(data.clone())).map_err(|e| e.to_string())?;
                let o = CallOptions {
                    reply_max: Some(small),
                    ..CallOptions::default()
                };
                match c
                    .call_with(TEST_PROG, TEST_VERS, testprog::PROC_WRITE, a.finish(), &o)
                    .await
                {
                    Ok(r) => {
                        let mut rd = r.reader();
                        let n = rd.u32("count").map_err(|e| e.to_string())?;
                        let crc = rd.u32("crc").map_err(|e| e.to_string())?;
                        let want = crc32c::crc32c(&data);
                        if n == k64 && crc == want {
                            Ok(format!("server received {n} octets, crc32c 0x{crc:08x} matches"))
                        } else {
                            Err(format!("server saw {n} octets crc32c 0x{crc:08x}, sent 0x{want:08x}"))
                        }
                    }
                    Err(e) => Err(rerr(e)),
                }
            }),
            3 => ("Write chunk: READ of 64 KiB (DDP-eligible result)", {
                let mut a = Message::builder();
                a.put_u32(k64).put_u32(3);
                let o = CallOptions {
                    reply_max: Some(small),
                    ddp_results: vec![k64],
                    ..CallOptions::default()
                };
                match c
                    .call_with(TEST_PROG, TEST_VERS, testprog::PROC_READ, a.finish(), &o)
                    .await
                {
                    Ok(r) => {
                        let got = r.reader().ddp_opaque(k64, "count", "data").map_err(|e| e.to_string())?;
                        if got[..] == testprog::pattern(3, k64 as usize)[..] {
                            Ok(format!(
                                "{} octets, pattern ok, crc32c 0x{:08x}",
                                got.len(),
                                crc32c::crc32c(&got)
                            ))
                        } else {
                            Err("READ data is not the pattern".into())
                        }
                    }
                    Err(e) => Err(rerr(e)),
                }
            }),
            4 => (
                "Long Call: ECHO of 8000 octets (RDMA_NOMSG + Position-Zero Read chunk; the reply, as large, uses the Reply chunk)",
                {
                    let data = testprog::pattern(4, 8000);
                    let mut a = Message::builder();
                    a.put_opaque(&data).map_err(|e| e.to_string())?;
                    let o = CallOptions {
                        reply_max: Some(small + 8000),
                        ..CallOptions::default()
                    };
                    match c
                        .call_with(TEST_PROG, TEST_VERS, testprog::PROC_ECHO, a.finish(), &o)
                        .await
                    {
                        Ok(r) => {
                            let got = r.reader().opaque(8000, "max", "echo").map_err(|e| e.to_string())?;
                            if got[..] == data[..] {
                                Ok("8000 octets echoed intact".into())
                            } else {
                                Err("echo differs".into())
                            }
                        }
                        Err(e) => Err(rerr(e)),
                    }
                },
            ),
            5 => (
                "Long Reply: READ of 8000 octets without a Write chunk (short call offering a Reply chunk; reply RDMA_NOMSG)",
                {
                    let mut a = Message::builder();
                    a.put_u32(8000).put_u32(5);
                    let o = CallOptions {
                        reply_max: Some(small + 8000),
                        ..CallOptions::default()
                    };
                    match c
                        .call_with(TEST_PROG, TEST_VERS, testprog::PROC_READ, a.finish(), &o)
                        .await
                    {
                        Ok(r) => {
                            let got = r.reader().opaque(8000, "max", "data").map_err(|e| e.to_string())?;
                            if got[..] == testprog::pattern(5, 8000)[..] {
                                Ok("8000 octets, pattern ok".into())
                            } else {
                                Err("READ data is not the pattern".into())
                            }
                        }
                        Err(e) => Err(rerr(e)),
                    }
                },
            ),
            _ => ("backchannel call: the server calls CB_ECHO on the client (RFC 8167)", {
                let conn = tap.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match conn.map(|c| c.backchannel()) {
                    Some(Ok(bt)) => {
                        let bc = Client::new(
                            bt,
                            ClientConfig {
                                timeout: Duration::from_secs(10),
                                ..ClientConfig::default()
                            },
                        );
                        match testprog::cb_echo(&bc, b"hello from the server").await {
                            Ok(b) if &b[..] == b"hello from the server" => {
                                Ok(format!("CB_ECHO of {} octets answered by the client", b.len()))
                            }
                            Ok(_) => Err("CB_ECHO reply differs".into()),
                            Err(e) => Err(rerr(e)),
                        }
                    }
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("no server connection seen".into()),
                }
            }),
        };
        // Let the last completions (and their Sends) reach the capture.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let items = wire.feed(take_capture(&t).await);
        println!("\n[{step}] {title}");
        for it in &items {
            println!("    {}", describe(it));
        }
        match result {
            Ok(s) => println!("    result: ok ({s})"),
            Err(e) => {
                ok_all = false;
                println!("    result: FAILED: {e}");
            }
        }
    }
    let st = t.status();
    println!("\nclient {}", st.mountstats());
    if let Some(s) = rdma.connections().first() {
        println!("server {}", s.mountstats());
    }
    t.shutdown().await;
    rdma.shutdown().await;
    if let Some(path) = &args.pcap {
        let mut segs = Vec::with_capacity(wire.all.len() + 2);
        segs.push((Direction::Sent, m.request.clone()));
        // The MPA Reply is in the capture unless it arrived before the
        // capture started.
        let reply_seen = wire
            .all
            .iter()
            .find(|(d, _)| *d == Direction::Received)
            .is_some_and(|(_, b)| b.starts_with(&KEY_REP));
        if !reply_seen {
            segs.push((Direction::Received, m.reply.clone()));
        }
        segs.extend(wire.all.iter().cloned());
        segs.extend(take_capture(&t).await);
        let local = m
            .local
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 40000)));
        let bytes = write_pcap(local, addr, &segs);
        let r = std::fs::File::create(path).and_then(|mut f| f.write_all(&bytes));
        match r {
            Ok(()) => println!("capture written to {path} ({} octets)", bytes.len()),
            Err(e) => return Err(format!("{path}: {e}")),
        }
    }
    println!(
        "\n{}",
        if ok_all {
            "all message classes exchanged and checked"
        } else {
            "SOME CHECKS FAILED"
        }
    );
    Ok(ok_all)
}
