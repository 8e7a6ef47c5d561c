//! Interop probe of the software iWARP provider against Linux siw
//! (used by `scripts/interop-linux`).
//!
//! ```text
//! iwarp_probe connect ADDR [--crc] [--rev N] [--ird N]
//!     Connects (MPA rev 2 enhanced by default), passing RFC 8797 private
//!     data, prints the peer's private data and IRD/ORD, sends an NFSv3 NULL
//!     call as RDMA_MSG in a Send and checks the reply (RDMA_MSG, accepted,
//!     SUCCESS). Exit status 0 on success.
//! iwarp_probe connect ADDR --bad vers2|msgp [--crc]
//!     The same connection, but the NULL call goes with a header the
//!     responder must refuse: rdma_vers 2 (expects RDMA_ERROR ERR_VERS,
//!     RFC 8166 §4.5.1) or the retired RDMA_MSGP (expects RDMA_ERROR
//!     ERR_CHUNK, as Linux's svcrdma answers it). Exit status 0 when the
//!     RDMA_ERROR comes back for our XID (its class for capture counts).
//! iwarp_probe listen ADDR [--timeout SECS]
//!     Accepts one connection, prints the initiator's MPA Request, answers
//!     with an MPA Reply, answers RPC NULL calls with SUCCESS and prints the
//!     first other call, then closes.
//! ```
//!
//! The RPC-over-RDMA and RPC messages are built by hand here (XDR, big
//! endian) so the probe depends on nothing but the provider.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
use rpcrdma_proto::provider::{
    Access, Completion, ConnectionEvent, MemoryRegion, Opcode, Provider, RecvWr, SendOp, SendWr,
};

const RFC8797_CLIENT: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
const RFC8797_SERVER: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03];
const INLINE: usize = 4096;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn put(v: &mut Vec<u8>, words: &[u32]) {
    for w in words {
        v.extend_from_slice(&w.to_be_bytes());
    }
}

/// RPC-over-RDMA v1 RDMA_MSG header (RFC 8166 §4.2): xid, vers 1, credits,
/// proc RDMA_MSG (0), empty Read list, Write list, Reply chunk.
fn rdma_msg(xid: u32, credits: u32) -> Vec<u8> {
    let mut v = Vec::new();
    put(&mut v, &[xid, 1, credits, 0, 0, 0, 0]);
    v
}

/// NFSv3 NULL call (RFC 5531): xid, CALL, rpcvers 2, prog 100003, vers 3,
/// proc 0, AUTH_NONE credential and verifier.
fn null_call(xid: u32, prog: u32, vers: u32) -> Vec<u8> {
    let mut v = Vec::new();
    put(&mut v, &[xid, 0, 2, prog, vers, 0, 0, 0, 0, 0]);
    v
}

/// Accepted SUCCESS reply with AUTH_NONE verifier and no results.
fn null_reply(xid: u32) -> Vec<u8> {
    let mut v = Vec::new();
    put(&mut v, &[xid, 1, 0, 0, 0, 0]);
    v
}

fn describe(msg: &[u8]) -> String {
    let (Some(xid), Some(vers), Some(credits), Some(proc_)) =
        (be32(msg, 0), be32(msg, 4), be32(msg, 8), be32(msg, 12))
    else {
        return format!("short message {}", hex(msg));
    };
    let pname = match proc_ {
        0 => "RDMA_MSG",
        1 => "RDMA_NOMSG",
        2 => "RDMA_MSGP",
        3 => "RDMA_DONE",
        4 => "RDMA_ERROR",
        _ => "?",
    };
    let mut s = format!(
        "RPC-over-RDMA xid={xid:#010x} vers={vers} credits={credits} proc={proc_} ({pname})"
    );
    let lists = (be32(msg, 16), be32(msg, 20), be32(msg, 24));
    s += &format!(" lists(read,write,reply)={lists:?}");
    if proc_ == 0 && lists == (Some(0), Some(0), Some(0)) {
        let rpc = &msg[28..];
        match be32(rpc, 4) {
            Some(0) => {
                s += &format!(
                    "\n    RPC CALL xid={:#010x} rpcvers={:?} prog={:?} vers={:?} proc={:?}",
                    be32(rpc, 0).unwrap_or(0),
                    be32(rpc, 8),
                    be32(rpc, 12),
                    be32(rpc, 16),
                    be32(rpc, 20)
                )
            }
            Some(1) => {
                let vlen = be32(rpc, 16).unwrap_or(0) as usize;
                s += &format!(
                    "\n    RPC REPLY xid={:#010x} reply_stat={:?} verf_flavor={:?} verf_len={vlen} accept_stat={:?}",
                    be32(rpc, 0).unwrap_or(0),
                    be32(rpc, 8),
                    be32(rpc, 12),
                    be32(rpc, 20 + vlen.div_ceil(4) * 4)
                );
            }
            _ => s += &format!("\n    RPC bytes {}", hex(&rpc[..rpc.len().min(64)])),
        }
    }
    s
}

fn wait_completion(p: &mut IwarpProvider, out: &mut Vec<Completion>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let n0 = out.len();
    while Instant::now() < deadline {
        p.poll_completions(out);
        while let Some(e) = p.poll_event() {
            println!("   event: {e:?}");
            if matches!(e, ConnectionEvent::Disconnected(_)) {
                return out.len() > n0;
            }
        }
        if out.len() > n0 {
            return true;
        }
        let _ = p.wait(Some(Duration::from_millis(50)));
    }
    false
}

fn print_info(p: &IwarpProvider) {
    if let Some(e) = p.established() {
        println!(
            "   MPA rev {} crc={} markers={} peer IRD/ORD={:?} our IRD/ORD={}/{}",
            e.revision,
            e.params.crc,
            e.params.send_markers || e.params.recv_markers,
            e.peer_ird_ord.map(|x| (x.ird, x.ord)),
            e.params.ird,
            e.params.ord
        );
        println!(
            "   peer MPA frame: flags={:#04x} rev={} pd_len={} pd={}",
            e.peer_frame.flags.0,
            e.peer_frame.revision,
            e.peer_frame.private_data.len(),
            hex(&e.peer_frame.private_data)
        );
        println!(
            "   peer ULP private data ({} octets): {}",
            e.peer_private_data.len(),
            hex(&e.peer_private_data)
        );
    }
}

/// One region per receive: a region is not readable while a receive
/// into it is outstanding.
fn post_recvs(p: &mut IwarpProvider, n: u64) -> Vec<MemoryRegion> {
    (0..n)
        .map(|i| {
            let mr = p
                .register(vec![0u8; INLINE].into_boxed_slice(), Access::LOCAL_WRITE)
                .expect("register");
            p.post_recv(RecvWr {
                wr_id: i,
                sge: mr.sge(0, INLINE as u32),
            })
            .expect("post_recv");
            mr
        })
        .collect()
}

fn send(p: &mut IwarpProvider, wr_id: u64, msg: &[u8]) -> MemoryRegion {
    let mr = p
        .register(msg.to_vec().into_boxed_slice(), Access::NONE)
        .expect("register");
    p.post_send(SendWr {
        wr_id,
        op: SendOp::Send { solicited: false },
        sges: vec![mr.sge(0, msg.len() as u32)].into(),
    })
    .expect("post_send");
    mr
}

/// A header the responder must refuse, and the RDMA_ERROR `rdma_err` it
/// answers (1 ERR_VERS, 2 ERR_CHUNK).
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// rdma_vers 2 on an RDMA_MSG header.
    Vers2,
    /// RDMA_MSGP (align 0, thresh 0) with empty chunk lists.
    Msgp,
}

impl Bad {
    fn header(self, xid: u32, credits: u32) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Bad::Vers2 => put(&mut v, &[xid, 2, credits, 0, 0, 0, 0]),
            Bad::Msgp => put(&mut v, &[xid, 1, credits, 2, 0, 0, 0, 0, 0]),
        }
        v
    }
    fn rdma_err(self) -> u32 {
        match self {
            Bad::Vers2 => 1,
            Bad::Msgp => 2,
        }
    }
}

fn connect(addr: &str, rev: u8, crc: bool, ird: u8, bad: Option<Bad>) -> ExitCode {
    let cfg = IwarpConfig {
        rev,
        crc,
        ird,
        ord: 0,
        private_data: RFC8797_CLIENT.to_vec(),
        ..Default::default()
    };
    println!(
        "== connect {addr}: MPA rev {rev} enhanced={} crc={crc} IRD={ird} ORD=0, ULP private data {}",
        rev == 2,
        hex(&RFC8797_CLIENT)
    );
    // Receives first: the server may send as soon as it has replied.
    let mut p = match IwarpProvider::connect(addr, cfg) {
        Ok(p) => p,
        Err(e) => {
            println!("   TCP connect failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rbuf = post_recvs(&mut p, 2);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match p.poll_event() {
            Some(ConnectionEvent::Established(info)) => {
                println!("   ESTABLISHED: {info:?}");
                break;
            }
            Some(e) => {
                println!("   connection failed: {e:?}");
                return ExitCode::FAILURE;
            }
            None if Instant::now() > deadline => {
                println!("   no MPA Reply within 15 s");
                return ExitCode::FAILURE;
            }
            None => {
                let _ = p.wait(Some(Duration::from_millis(50)));
            }
        }
    }
    print_info(&p);
    let ok_pd = p.established().is_some_and(|e| {
        e.peer_private_data.len() == 8 && e.peer_private_data[..4] == [0xf6, 0xab, 0x0e, 0x18]
    });
    println!("   peer private data is RFC 8797 (magic f6ab0e18): {ok_pd}");
    let xid = 0x7e57_0001;
    let mut msg = match bad {
        None => rdma_msg(xid, 32),
        Some(b) => b.header(xid, 32),
    };
    msg.extend_from_slice(&null_call(xid, 100_003, 3));
    println!(
        "-> Send ({} octets): {}",
        msg.len(),
        describe(&msg).replace('\n', "\n  ")
    );
    let _src = send(&mut p, 100, &msg);
    let mut cq = Vec::new();
    let mut reply = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    while reply.is_none() && Instant::now() < deadline {
        if !wait_completion(&mut p, &mut cq, Duration::from_secs(1)) {
            continue;
        }
        for c in cq.drain(..) {
            println!("   completion: {c:?}");
            if matches!(c.opcode, Opcode::Recv | Opcode::RecvWithInvalidate { .. })
                && c.status.is_ok()
            {
                let mr = &rbuf[c.wr_id as usize % rbuf.len()];
                let region = p.region(mr).expect("region");
                reply = Some(region[..c.byte_len as usize].to_vec());
            }
        }
        if matches!(
            p.connection_state(),
            rpcrdma_proto::provider::ConnectionState::Disconnected(_)
        ) {
            break;
        }
    }
    let Some(reply) = reply else {
        println!("   no reply received");
        return ExitCode::FAILURE;
    };
    println!(
        "<- Recv ({} octets): {}\n   raw: {}",
        reply.len(),
        describe(&reply).replace('\n', "\n  "),
        hex(&reply)
    );
    if let Some(b) = bad {
        // xid, vers (echoed), credits, RDMA_ERROR, rdma_err.
        let ok = be32(&reply, 0) == Some(xid)
            && be32(&reply, 12) == Some(4)
            && be32(&reply, 16) == Some(b.rdma_err());
        println!(
            "   RESULT: {} to {b:?}",
            if ok { "RDMA_ERROR" } else { "unexpected reply" }
        );
        p.disconnect();
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let ok = be32(&reply, 0) == Some(xid)
        && be32(&reply, 4) == Some(1)
        && be32(&reply, 12) == Some(0)
        && (be32(&reply, 16), be32(&reply, 20), be32(&reply, 24)) == (Some(0), Some(0), Some(0))
        && be32(&reply, 28) == Some(xid)
        && be32(&reply, 32) == Some(1)
        && be32(&reply, 36) == Some(0)
        && be32(&reply, 44) == Some(0)
        && be32(&reply, 48) == Some(0);
    println!(
        "   RESULT: {}",
        if ok {
            "RDMA_MSG with accepted SUCCESS reply to NFSv3 NULL"
        } else {
            "unexpected reply"
        }
    );
    p.disconnect();
    for _ in 0..20 {
        if p.poll_event().is_none() {
            break;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn listen(addr: &str, timeout: Duration) -> ExitCode {
    let cfg = IwarpConfig {
        mpa_private_data_max: rpcrdma_iwarp::mpa::LINUX_MAX_PRIVATE_DATA,
        ..Default::default()
    };
    let l = match Listener::bind(addr, cfg) {
        Ok(l) => l,
        Err(e) => {
            println!("   bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("== listening on {addr} (timeout {}s)", timeout.as_secs());
    let mut pending = match l.accept(timeout) {
        Ok(p) => p,
        Err(e) => {
            println!("   no MPA Request: {e}");
            return ExitCode::FAILURE;
        }
    };
    let req = pending.request().clone();
    println!(
        "<- MPA Request from {}: flags={:#04x} rev={} pd_len={} pd={}",
        pending.peer_addr(),
        req.frame.flags.0,
        req.frame.revision,
        req.frame.private_data.len(),
        hex(&req.frame.private_data)
    );
    println!(
        "   IRD/ORD={:?} ULP private data={}",
        req.ird_ord.map(|x| (x.ird, x.ord)),
        hex(&req.private_data)
    );
    let rbuf = post_recvs(pending.provider_mut(), 4);
    let reply_cfg = IwarpConfig {
        ird: 0,
        ord: 16,
        private_data: RFC8797_SERVER.to_vec(),
        ..Default::default()
    };
    let mut p = match pending.accept(reply_cfg, Duration::from_secs(5)) {
        Ok(p) => p,
        Err(e) => {
            println!("   accept failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(f) = p.local_frame() {
        println!("-> MPA Reply: {}", hex(&f.to_vec().unwrap_or_default()));
    }
    print_info(&p);
    let mut cq = Vec::new();
    let mut answered = 0u32;
    let mut next_recv = 4u64;
    let deadline = Instant::now() + timeout;
    let mut keep = Vec::new();
    'outer: while Instant::now() < deadline {
        if !wait_completion(&mut p, &mut cq, Duration::from_secs(1)) {
            if matches!(
                p.connection_state(),
                rpcrdma_proto::provider::ConnectionState::Disconnected(_)
            ) {
                break;
            }
            continue;
        }
        for c in std::mem::take(&mut cq) {
            if !matches!(c.opcode, Opcode::Recv | Opcode::RecvWithInvalidate { .. }) {
                continue;
            }
            if !c.status.is_ok() {
                println!("   receive: {c:?}");
                break 'outer;
            }
            let slot = (c.wr_id % 4) as usize;
            let msg = p.region(&rbuf[slot]).expect("region")[..c.byte_len as usize].to_vec();
            println!(
                "<- Recv ({} octets): {}",
                msg.len(),
                describe(&msg).replace('\n', "\n  ")
            );
            let is_null = be32(&msg, 12) == Some(0)
                && be32(&msg, 28 + 4) == Some(0)
                && be32(&msg, 28 + 20) == Some(0);
            if !is_null {
                println!("   (not a NULL call: stopping here)");
                break 'outer;
            }
            // Re-post the receive, then answer with credits 32.
            let _ = p.post_recv(RecvWr {
                wr_id: next_recv,
                sge: rbuf[slot].sge(0, INLINE as u32),
            });
            next_recv += 1;
            let xid = be32(&msg, 0).unwrap_or(0);
            let mut r = rdma_msg(xid, 32);
            r.extend_from_slice(&null_reply(xid));
            println!("-> Send: {}", describe(&r).replace('\n', "\n  "));
            keep.push(send(&mut p, 1000 + u64::from(answered), &r));
            answered += 1;
        }
    }
    println!("   answered {answered} NULL call(s); closing");
    p.disconnect();
    for _ in 0..20 {
        if p.poll_event().is_none() {
            break;
        }
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let val = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("connect"), Some(addr)) => connect(
            addr,
            val("--rev").and_then(|v| v.parse().ok()).unwrap_or(2),
            flag("--crc"),
            val("--ird").and_then(|v| v.parse().ok()).unwrap_or(16),
            match val("--bad").as_deref() {
                None => None,
                Some("vers2") => Some(Bad::Vers2),
                Some("msgp") => Some(Bad::Msgp),
                Some(other) => {
                    eprintln!("--bad {other}: vers2 or msgp");
                    return ExitCode::from(2);
                }
            },
        ),
        (Some("listen"), Some(addr)) => listen(
            addr,
            Duration::from_secs(val("--timeout").and_then(|v| v.parse().ok()).unwrap_or(60)),
        ),
        _ => {
            eprintln!("usage: iwarp_probe connect ADDR [--crc] [--rev N] [--ird N] [--bad vers2|msgp] | listen ADDR [--timeout SECS]");
            ExitCode::from(2)
        }
    }
}
