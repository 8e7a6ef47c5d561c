//! A forged-frame peer ([`hostile`]) against the real RPC-over-RDMA server
//! over loopback iWARP: what the server answers to frames no well-behaved
//! client sends.

mod hostile;

use std::time::Duration;

use hostile::{rpc, Answer, Event, MpaRequest, Peer, Untagged};
use rpcrdma::rdma::{RdmaServer, RdmaServerConfig};
use rpcrdma::testprog::{self, PROC_ECHO, TEST_PROG, TEST_VERS};
use rpcrdma::Server;
use rpcrdma_iwarp::TerminateCode;

const LIMIT: Duration = Duration::from_secs(60);

async fn start(server: &Server) -> RdmaServer {
    RdmaServer::serve(server, "127.0.0.1:0", RdmaServerConfig::default())
        .await
        .expect("bind")
}

/// Runs the blocking peer script `f` off the runtime, bounded in time.
async fn peer_script<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(LIMIT, tokio::task::spawn_blocking(f))
        .await
        .expect("test timed out")
        .expect("peer script panicked")
}

/// An ECHO call of `data` as one RDMA_MSG.
fn echo_call(xid: u32, data: &[u8]) -> Vec<u8> {
    rpc::call(
        xid,
        32,
        (TEST_PROG, TEST_VERS, PROC_ECHO),
        &rpc::opaque(data),
        &[],
    )
}

/// The peer itself: an ECHO round trip through forged frames, then a
/// segment on queue 3 answered with the DDP "invalid QN" Terminate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peer_round_trip_and_terminate() {
    let server = Server::default();
    testprog::register(&server);
    let rdma = start(&server).await;
    let addr = rdma.local_addr();
    peer_script(move || {
        let mut p = Peer::connect(addr, &MpaRequest::default()).unwrap();
        let Answer::Accepted(reply) = p.answer().clone() else {
            panic!("not accepted: {:?}", p.answer());
        };
        assert!(reply.is_enhanced());
        p.send_message(&echo_call(0x1234, b"forged")).unwrap();
        let r = rpc::reply(&p.recv_send().unwrap()).expect("an RDMA_MSG reply");
        assert_eq!(r.rpc.xid, 0x1234);
        assert!(r.is_success());
        assert_eq!(r.results, rpc::opaque(b"forged"));
        let mut bad = Untagged::send(p.next_msn, b"x");
        bad.qn = 3;
        p.send_untagged(&bad).unwrap();
        let seen = p.recv_until_closed().unwrap();
        let Some(Event::Terminate(t)) = seen.last() else {
            panic!("no Terminate: {seen:?}");
        };
        assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_INVALID_QN);
        let d = t.ddp.expect("offending header copied");
        assert_eq!(d.header.to_vec(), bad.ulpdu()[..18]);
    })
    .await;
    rdma.shutdown().await;
}
