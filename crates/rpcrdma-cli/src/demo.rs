//! `rpcrdma demo`: a server and a client in one process over loopback
//! software iWARP (an ephemeral port on 127.0.0.1), one exchange of each
//! RPC-over-RDMA message class, each printed as it went on the wire.
//!
//! The client's iWARP provider records its TCP stream (both directions);
//! after every exchange the new octets are dissected by
//! `rpcrdma_iwarp::capture::Recorded` (the dissector of `rpcrdma decode
//! --pcap`), each Send's payload decoded as an RPC-over-RDMA header as
//! `rpcrdma decode --json` does, and listed: each Send with its message
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

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use rpcrdma::rdma::provider::IwarpCm;
use rpcrdma::rdma::{
    Connected, ProviderConnector, RdmaClientTransport, RdmaServer, RdmaServerConfig,
};
use rpcrdma::testprog::{self, TEST_PROG, TEST_VERS};
use rpcrdma::{
    CallDispatcher, CallOptions, Client, ClientConfig, IncomingCall, Message, RpcError, Server,
    ServerConnection,
};
use rpcrdma_iwarp::capture::{self, Recorded};
use rpcrdma_iwarp::dissect::{self, ErrorKind, Side};
use rpcrdma_iwarp::rdmap::Opcode;
use rpcrdma_iwarp::tcp::{Capture, IwarpProvider, TimedChunk};
use rpcrdma_proto::engine::{Config as EngineConfig, RpcRdmaVersion};
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
    /// Which RPC-over-RDMA versions to show: 1 (the version 1 exchanges),
    /// 2 (the version 2 exchanges), auto (both, then a version 2 -> 1
    /// fallback against a version 1 only server).
    #[arg(long, value_name = "1|2|auto", default_value = "auto")]
    pub rpcrdma_version: RpcRdmaVersion,
}

/// Records the connection the latest call arrived on (to call back on it).
pub(crate) struct Tap {
    inner: Arc<dyn CallDispatcher>,
    pub(crate) conn: Mutex<Option<Arc<dyn ServerConnection>>>,
}

impl CallDispatcher for Tap {
    fn dispatch(&self, call: IncomingCall) {
        {
            let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
            *c = Some(call.conn.clone());
        }
        self.inner.dispatch(call);
    }
}

// ------------------------------------------------------------ wire listing

/// One line of the listing.
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

/// The listing's line for what the dissector found (None for the MPA
/// frames, which the connection line shows).
fn line(side: Side, it: dissect::Item) -> Option<Item> {
    let from_client = side == Side::A;
    Some(match it {
        dissect::Item::Mpa(_) => return None,
        dissect::Item::Send(s) => Item::Send {
            from_client,
            len: s.payload.len(),
            header: crate::json_header::header_json(&s.payload).map_err(|f| f.detail),
        },
        dissect::Item::Tagged { opcode, len, .. } => Item::Tagged {
            from_client,
            write: opcode == Opcode::WRITE,
            len,
        },
        dissect::Item::ReadRequest { request, .. } => Item::ReadRequest {
            from_client,
            size: request.size,
        },
        dissect::Item::Terminate { .. } => Item::Other {
            from_client,
            what: format!("RDMAP {}", Opcode::TERMINATE),
        },
        dissect::Item::Error(e) => Item::Other {
            from_client,
            what: match e.kind {
                ErrorKind::MpaCrc | ErrorKind::MpaMarker | ErrorKind::MpaLength => {
                    format!("framing error: {}", e.detail)
                }
                ErrorKind::DdpRdmap => "undecodable DDP segment".into(),
                k => format!("{k}: {}", e.detail),
            },
        },
    })
}

/// The listing of newly recorded segments: what the dissector finds, the
/// MPA frames left out (the connection line shows them), consecutive
/// tagged segments of one direction merged into one line.
fn listing(rec: &mut Recorded, segs: Vec<TimedChunk>) -> Vec<Item> {
    let mut found = Vec::new();
    rec.feed_timed(segs, &mut found);
    let mut merged: Vec<Item> = Vec::new();
    for it in found.into_iter().filter_map(|(side, it)| line(side, it)) {
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
        } if e.contains("refused for xid") => format!(
            "{}  Send {len:>5} octets  ERR_VERS in the version 1 layout ({})",
            who(*from_client),
            // The decoder's detail says why it is no version 2 header, then
            // what it is: show what it is.
            e.split("; ")
                .find(|s| s.contains("refused for xid"))
                .unwrap_or(e)
        ),
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

// ------------------------------------------------------------------- demo

/// What the connector recorded about the connection.
#[derive(Default, Clone)]
struct ConnMeta {
    local: Option<SocketAddr>,
    request: Vec<u8>,
    reply: Vec<u8>,
    /// The provider's recording, taken while the driver owns it.
    capture: Capture,
}

fn connector(
    addr: SocketAddr,
    engine: EngineConfig,
    meta: Arc<Mutex<ConnMeta>>,
) -> ProviderConnector {
    Arc::new(move || {
        let icfg = IwarpCm::default().config_for(&engine.connect_params());
        let mut p = IwarpProvider::connect(addr, icfg)?;
        // On from here: the MPA Request went out in `connect` and is
        // added to the capture from the frame we kept.
        let capture = p.capture();
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
        m.capture = capture;
        m.local = p.local_addr().ok();
        m.request = p
            .local_frame()
            .and_then(|f| f.to_vec().ok())
            .unwrap_or_default();
        m.reply = p
            .peer_frame()
            .and_then(|f| f.to_vec().ok())
            .unwrap_or_default();
        let mut info = p.link_info();
        info.peer = addr.to_string();
        Ok(Connected {
            provider: Box::new(p),
            info,
        })
    })
}

fn take_capture(meta: &Mutex<ConnMeta>) -> Vec<TimedChunk> {
    meta.lock()
        .unwrap_or_else(|e| e.into_inner())
        .capture
        .take_timed()
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
    // The server answers each client in the version of its first message
    // (auto) and accepts RDMA Reads (IRD 16), which a version 2 client uses
    // for the Read chunks of reverse calls.
    let mut scfg = RdmaServerConfig::default();
    scfg.engine.rpcrdma_version = RpcRdmaVersion::Auto;
    scfg.engine.ird = 16;
    let rdma = RdmaServer::bind("127.0.0.1:0", scfg, tap.clone())
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let addr = rdma.local_addr();
    println!(
        "rpcrdma demo: RPC-over-RDMA v1 over software iWARP (MPA/DDP/RDMAP over TCP) on {addr}"
    );
    let mut sessions = Vec::new();
    let mut ok_all = true;
    let (v1, v2) = match args.rpcrdma_version {
        RpcRdmaVersion::V1 => (true, false),
        RpcRdmaVersion::V2 => (false, true),
        RpcRdmaVersion::Auto => (true, true),
    };
    if v1 {
        let (ok, s) = part(&tap, addr, EngineConfig::client(), 1).await?;
        ok_all &= ok;
        sessions.push(s);
        if let Some(s) = rdma.connections().first() {
            println!("server {}", s.mountstats());
        }
    }
    if v2 {
        println!(
            "\n=== RPC-over-RDMA version 2 (draft-cel-nfsv4-rpcrdma-version-two-09) on {addr} ==="
        );
        let mut e2 = EngineConfig::client();
        e2.rpcrdma_version = RpcRdmaVersion::V2;
        e2.ord = 16;
        let (ok, s) = part(&tap, addr, e2, 2).await?;
        ok_all &= ok;
        sessions.push(s);
    }
    if v1 && v2 {
        let (ok, s) = crate::demo_v2::fallback().await?;
        ok_all &= ok;
        sessions.push(s);
    }
    rdma.shutdown().await;
    if let Some(path) = &args.pcap {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let mut bytes = Vec::new();
        for (i, s) in sessions.into_iter().enumerate() {
            // Each segment stamped when it was written or read; the
            // handshake just before the first.
            let segs = s.rec.streams_timed(take_capture(&s.meta));
            let first = segs.iter().find_map(|(t, _, _)| *t).unwrap_or(now);
            let local = s
                .meta
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .local
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 40000 + i as u16)));
            let one = capture::write::tcp_session_timed(
                local,
                s.server,
                &segs,
                first.saturating_sub(100),
            );
            // One pcap: the first session's file header, every session's
            // records.
            bytes.extend_from_slice(if i == 0 { &one[..] } else { &one[24..] });
        }
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

/// One recorded client connection of the demo.
pub(crate) struct Session {
    meta: Arc<Mutex<ConnMeta>>,
    rec: Recorded,
    server: SocketAddr,
}

impl Session {
    /// Lists and prints what was recorded since the last look.
    pub(crate) fn print_new(&mut self) -> Vec<String> {
        let items = listing(&mut self.rec, take_capture(&self.meta));
        items.iter().map(describe).collect()
    }
}

/// A client connection to `addr` with `engine`, recorded.
pub(crate) async fn connect_recorded(
    addr: SocketAddr,
    engine: EngineConfig,
) -> Result<(Arc<RdmaClientTransport>, Session), String> {
    let meta = Arc::new(Mutex::new(ConnMeta::default()));
    let t = RdmaClientTransport::with_connector(
        connector(addr, engine.clone(), meta.clone()),
        engine,
        None,
        None,
    )
    .await
    .map_err(|e| format!("connect: {e}"))?;
    let m = meta.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let rec = Recorded::new(m.request.clone(), m.reply.clone());
    Ok((
        t,
        Session {
            meta,
            rec,
            server: addr,
        },
    ))
}

/// The message classes on one connection (`version` 1 or 2; in version 2
/// also the CONNPROP exchange and a backchannel call with chunks).
async fn part(
    tap: &Arc<Tap>,
    addr: SocketAddr,
    engine: EngineConfig,
    version: u32,
) -> Result<(bool, Session), String> {
    let (t, mut sess) = connect_recorded(addr, engine).await?;
    let c = Client::new(t.clone(), ClientConfig::default());
    let cb = Server::default();
    testprog::register_cb(&cb);
    // Version 2: the test program on the backchannel too (READ and WRITE
    // with chunks, server to client).
    if version == 2 {
        testprog::register(&cb);
    }
    c.serve_backchannel(&cb).map_err(rerr)?;
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
    let mut ok_all = true;
    if version == 2 {
        ok_all &= crate::demo_v2::connprop_step(&t, &mut sess).await;
    }

    let small = 1024u32;
    let k64 = 64 * 1024u32;

    let last = if version == 2 { 7 } else { 6 };
    for step in 1..=last {
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
            7 => (
                "backchannel with chunks (BRS GENL): the server calls the client's READ of 1 MiB (Write chunk) and WRITE of 1 MiB (Read chunk)",
                crate::demo_v2::genl_backchannel(tap).await,
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
        let lines = sess.print_new();
        let step = if version == 2 {
            format!("v2.{step}")
        } else {
            step.to_string()
        };
        println!("\n[{step}] {title}");
        for l in &lines {
            println!("    {l}");
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
    if version == 2 {
        ok_all &= crate::demo_v2::check_version(&st, 2, false);
    }
    t.shutdown().await;
    Ok((ok_all, sess))
}
