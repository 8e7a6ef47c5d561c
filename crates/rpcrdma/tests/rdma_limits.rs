//! Hostile peers against `RdmaServer` over real loopback software iWARP
//! (127.0.0.1 only), in task and blocking mode: the idle timeout closes an
//! established connection that never sends a call; a peer that never
//! answers its call's RDMA Read holds the server-wide Read-sink budget
//! until the Read deadline, while another connection's call waits for that
//! budget and is served once it is given back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpcrdma::rdma::{
    connect_client, Connected, ProviderConfig, RdmaClientConfig, RdmaServer, RdmaServerConfig,
};
use rpcrdma::testprog;
use rpcrdma::{ClientConfig, Server};
use rpcrdma_proto::engine::Config as EngineConfig;
use rpcrdma_proto::provider::{Access, RecvWr, SendOp, SendWr};

const LIMIT: Duration = Duration::from_secs(60);

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

async fn start(config: RdmaServerConfig) -> (Server, RdmaServer) {
    let server = Server::default();
    testprog::register(&server);
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", config)
        .await
        .expect("bind");
    (server, rdma)
}

/// An MPA-established iWARP connection that we drive by hand (nothing is
/// sent unless we post it).
async fn raw_connect(addr: SocketAddr) -> Connected {
    tokio::task::spawn_blocking(move || {
        ProviderConfig::default().connect(addr, &EngineConfig::client(), Duration::from_secs(10))
    })
    .await
    .unwrap()
    .expect("MPA connect")
}

/// Waits (bounded) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "waited too long for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

async fn idle_connection_is_closed(blocking: bool) {
    let mut config = RdmaServerConfig {
        max_connections: 1,
        blocking,
        ..RdmaServerConfig::default()
    };
    config.engine.idle_timeout = Some(Duration::from_millis(300));
    let (_s, rdma) = start(config).await;
    // A silent peer takes the only connection slot...
    let silent = raw_connect(rdma.local_addr()).await;
    until("the server to see the connection", || {
        rdma.connections().len() == 1
    })
    .await;
    // ...until the idle timeout closes it.
    until("the idle connection to be closed", || {
        rdma.connections().is_empty()
    })
    .await;
    drop(silent);
    // The slot is free again: a real client is served.
    let (c, t) = connect_client(
        rdma.local_addr(),
        ClientConfig::default(),
        RdmaClientConfig::default(),
    )
    .await
    .expect("connect");
    testprog::null(&c).await.unwrap();
    // A connection that called is not idle: it outlives the timeout.
    tokio::time::sleep(Duration::from_millis(600)).await;
    testprog::null(&c).await.unwrap();
    assert_eq!(t.status().connects, 1);
    t.shutdown().await;
    rdma.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_established_connection_is_closed_by_the_idle_timeout() {
    bounded(idle_connection_is_closed(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_established_connection_is_closed_by_the_idle_timeout_blocking() {
    bounded(idle_connection_is_closed(true)).await
}

/// Octets of the hostile peer's Read chunk, and of the honest client's
/// WRITE: together they do not fit the server-wide budget.
const HOSTILE: usize = 600_000;
const HONEST: usize = 500_000;
const BUDGET: u64 = 1 << 20;

/// Sends an RDMA_MSG call whose argument is in a Read chunk of `len`
/// octets exposed by `c`, and never answers the server's Read Request: the
/// provider is gated (it reads its socket only when told, and never is).
fn send_unanswered_read_call(c: &mut Connected, len: usize) {
    let p = &mut c.provider;
    // Drain the socket once, closing the gate: from now on no pass reads.
    p.set_read_gate(true);
    let mut comps = Vec::new();
    p.poll_completions(&mut comps);
    for i in 0..4u64 {
        let mr = p
            .register(vec![0u8; 4096].into_boxed_slice(), Access::LOCAL_WRITE)
            .unwrap();
        p.post_recv(RecvWr {
            wr_id: 100 + i,
            sge: mr.sge(0, 4096),
        })
        .unwrap();
    }
    let src = p
        .register(vec![7u8; len].into_boxed_slice(), Access::REMOTE_READ)
        .unwrap();
    let xid = 0x4242;
    let h = src.stag().0;
    let mut m = words(&[xid, 1, 16, 0, 1, 44, h, len as u32, 0, 0, 0, 0, 0]);
    m.extend(words(&[
        xid,
        0,
        2,
        testprog::TEST_PROG,
        testprog::TEST_VERS,
        4,
        0,
        0,
        0,
        0,
    ]));
    m.extend(words(&[len as u32, 0xfeed_f00d]));
    let n = m.len() as u32;
    let send = p
        .register(m.into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    p.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send { solicited: true },
        sges: vec![send.sge(0, n)].into(),
    })
    .unwrap();
    // Transmit (writing never reads while the gate is closed).
    let end = Instant::now() + Duration::from_secs(10);
    while !comps.iter().any(|c| c.wr_id == 1) {
        assert!(Instant::now() < end, "the Send did not complete");
        p.poll_completions(&mut comps);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(comps.iter().all(|c| c.status.is_ok()), "{comps:?}");
}

async fn budget_is_shared_and_the_read_deadline_frees_it(blocking: bool) {
    let mut config = RdmaServerConfig {
        blocking,
        read_sink_budget: Some(BUDGET),
        ..RdmaServerConfig::default()
    };
    config.engine.read_timeout = Some(Duration::from_secs(1));
    let (_s, rdma) = start(config).await;
    let budget = rdma.read_budget().expect("a server-wide budget");
    assert_eq!(budget.limit(), BUDGET);
    // The hostile peer: its call's sinks are registered, its Read is never
    // answered.
    let mut hostile = raw_connect(rdma.local_addr()).await;
    let hostile = tokio::task::spawn_blocking(move || {
        send_unanswered_read_call(&mut hostile, HOSTILE);
        hostile
    })
    .await
    .unwrap();
    until("the hostile call to hold its sinks", || {
        budget.in_use() == HOSTILE as u64
    })
    .await;
    let held_at = Instant::now();
    // An honest client on another connection: its WRITE's Read chunk does
    // not fit beside the hostile call (its own connection's budget is
    // free): it waits for the shared budget.
    let (c, t) = connect_client(
        rdma.local_addr(),
        ClientConfig::default(),
        RdmaClientConfig::default(),
    )
    .await
    .expect("connect");
    let data = testprog::pattern(3, HONEST);
    let c = std::sync::Arc::new(c);
    let call = {
        let (c, data) = (c.clone(), data.clone());
        tokio::spawn(async move { testprog::write(&c, &data).await })
    };
    until("the honest call to wait for the budget", || {
        budget.waiting() == 1
    })
    .await;
    assert!(budget.in_use() <= BUDGET);
    // The Read deadline ends the hostile connection; its share comes back
    // and the honest call is served.
    let (count, crc) = call.await.unwrap().expect("the honest WRITE");
    assert_eq!(count as usize, HONEST);
    assert_eq!(crc, crc32c::crc32c(&data));
    assert!(
        held_at.elapsed() >= Duration::from_millis(500),
        "served only once the hostile call's deadline (1 s) passed"
    );
    assert!(budget.high_water() <= BUDGET);
    assert!(budget.waits() >= 1);
    until("every share to be given back", || budget.in_use() == 0).await;
    until("the hostile connection to be gone", || {
        rdma.connections().len() == 1
    })
    .await;
    drop(hostile);
    t.shutdown().await;
    rdma.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_share_the_read_sink_budget_and_an_unanswered_read_times_out() {
    bounded(budget_is_shared_and_the_read_deadline_frees_it(false)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_connections_share_the_read_sink_budget_and_an_unanswered_read_times_out_blocking() {
    bounded(budget_is_shared_and_the_read_deadline_frees_it(true)).await
}
