//! Our verbs client against the Linux kernel's RPC-over-RDMA server
//! (svcrdma, the NFS server's RDMA listener): connect with RFC 8797
//! private data, then an NFSv3 NULL and an NFSv4 NULL as RDMA_MSG Sends,
//! each answered by an accepted RPC reply with the same XID.
//!
//! Needs the lab VM (`RPCRDMA_VERBS_SVCRDMA=10.0.2.15:20049` inside the
//! guest, where siw0 is on eth0); prints SKIPPED otherwise.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpcrdma_proto::engine::Config;
use rpcrdma_proto::provider::cm::ConnectionManager;
use rpcrdma_proto::provider::{
    Access, Completion, ConnectionEvent, Opcode, Provider, RecvWr, SendOp, SendWr, Status,
};
use rpcrdma_proto::wire::private_data::PrivateData;
use rpcrdma_verbs::{devices, VerbsCm, VerbsProvider};

const ENV: &str = "RPCRDMA_VERBS_SVCRDMA";

fn target() -> Option<SocketAddr> {
    if let Err(e) = devices() {
        eprintln!("SKIPPED: verbs client -> Linux svcrdma not run: {e}");
        return None;
    }
    match std::env::var(ENV).ok().and_then(|a| a.parse().ok()) {
        Some(a) => Some(a),
        None => {
            eprintln!(
                "SKIPPED: verbs client -> Linux svcrdma not run: set {ENV} (e.g. 10.0.2.15:20049)"
            );
            None
        }
    }
}

/// RDMA_MSG (RFC 8166 §4.2.1, no chunks) carrying an RPC NULL call.
fn null_call(xid: u32, prog: u32, vers: u32) -> Vec<u8> {
    let words = [
        xid, 1, 32, 0, // RPC-over-RDMA: xid, version 1, credits, RDMA_MSG
        0, 0, 0, // empty read list, write list, reply chunk
        xid, 0, 2, prog, vers, 0, // RPC call: CALL, rpcvers 2, prog, vers, NULL
        0, 0, 0, 0, // AUTH_NONE credential and verifier
    ];
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 octets"))
}

/// Polls until the completion of `wr_id` is there; completions of other
/// WRs polled meanwhile stay in `seen` for a later wait.
fn wait_for(p: &mut VerbsProvider, seen: &mut Vec<Completion>, wr_id: u64) -> Completion {
    let by = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = seen.iter().position(|c| c.wr_id == wr_id) {
            return seen.remove(i);
        }
        assert!(Instant::now() < by, "no completion for {wr_id}: {seen:?}");
        p.poll_completions(seen);
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn nfs_null_calls_to_linux_svcrdma() {
    let Some(to) = target() else { return };
    let cfg = Config::client();
    let params = cfg.connect_params();
    let cm = VerbsCm::default();
    let mut p = cm
        .connect(to, &params, Duration::from_secs(10))
        .expect("connect to svcrdma");
    let info = match p.poll_event() {
        Some(ConnectionEvent::Established(info)) => info,
        other => panic!("first event {other:?}"),
    };
    let pd = PrivateData::parse_v1(&info.peer_private_data)
        .expect("svcrdma answers with RFC 8797 private data");
    eprintln!(
        "connected to {to} over {:?}: svcrdma private data {pd:?}, ird {} ord {}",
        p.transport(),
        info.ird,
        info.ord
    );
    let rbuf = p
        .register(vec![0; 4096].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap_or_else(|e| {
            panic!(
                "register receive buffer: {} ({:?})",
                e.error,
                p.last_registration_error()
            )
        });
    let mut seen = Vec::new();
    for (i, (prog, vers)) in [(100_003u32, 3u32), (100_003, 4)].into_iter().enumerate() {
        let xid = 0x7665_7200 + i as u32;
        p.post_recv(RecvWr {
            wr_id: 100 + i as u64,
            sge: rbuf.sge(0, 4096),
        })
        .expect("post receive");
        let msg = null_call(xid, prog, vers);
        let sbuf = p
            .register(msg.clone().into_boxed_slice(), Access::NONE)
            .expect("register send buffer");
        p.post_send(SendWr {
            wr_id: 200 + i as u64,
            op: SendOp::Send { solicited: false },
            sges: vec![sbuf.sge(0, msg.len() as u32)].into(),
        })
        .expect("post send");
        let s = wait_for(&mut p, &mut seen, 200 + i as u64);
        assert_eq!(
            (s.status, s.opcode),
            (Status::Success, Opcode::Send),
            "{s:?}"
        );
        let r = wait_for(&mut p, &mut seen, 100 + i as u64);
        assert_eq!(r.status, Status::Success, "{r:?}");
        let reply = p.region(&rbuf).expect("reply")[..r.byte_len as usize].to_vec();
        assert!(reply.len() >= 13 * 4, "short reply {reply:02x?}");
        // RPC-over-RDMA header: same xid, version 1, RDMA_MSG, no chunks.
        assert_eq!(
            [word(&reply, 0), word(&reply, 1), word(&reply, 3)],
            [xid, 1, 0]
        );
        assert_eq!(
            [word(&reply, 4), word(&reply, 5), word(&reply, 6)],
            [0, 0, 0]
        );
        // RPC reply: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
        let rpc: Vec<u32> = (7..13).map(|i| word(&reply, i)).collect();
        assert_eq!(
            rpc,
            [xid, 1, 0, 0, 0, 0],
            "NFSv{vers} NULL reply {reply:02x?}"
        );
        eprintln!(
            "NFSv{vers} NULL: accepted, {} credits granted",
            word(&reply, 2)
        );
        p.deregister(&sbuf).expect("deregister");
    }
    p.disconnect();
}
