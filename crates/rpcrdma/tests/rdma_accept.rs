//! The RDMA server's accept path under hostile peers, end to end over
//! loopback software iWARP: silent TCP connections (no MPA Request) do not
//! delay or lock out a real client, pending connections are capped per
//! source and in all (oldest evicted first), established connections are
//! capped per source (MPA Reject), deadlines close silent peers, and
//! shutdown with pending connections is prompt. Other source addresses
//! come from 127.0.0.0/8 (all loopback on Linux).

use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use rpcrdma::metrics::MetricsSnapshot;
use rpcrdma::rdma::provider::{AcceptLimits, IwarpCm};
use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::testprog;
use rpcrdma::{ClientConfig, Server};
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::engine::Config as EngineConfig;
use rpcrdma_proto::provider::{ConnectionEvent, DisconnectReason, Provider};

/// Bound on every wait (never reached when the tests pass).
const LIMIT: Duration = Duration::from_secs(30);
/// What "a good client is not delayed" means here: generous, since the
/// machine may be loaded; the old accept path took 10 s or failed.
const PROMPT: Duration = Duration::from_secs(5);

async fn start(config: RdmaServerConfig) -> (Server, RdmaServer) {
    let server = Server::default();
    testprog::register(&server);
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", config)
        .await
        .expect("bind");
    (server, rdma)
}

fn config(limits: AcceptLimits) -> RdmaServerConfig {
    let mut c = RdmaServerConfig::default();
    c.provider.iwarp_mut().expect("iWARP").accept = limits;
    c
}

/// A TCP connection from 127.0.0.`host` that sends nothing.
fn silent_from(host: u8, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, host), 0);
    rustix::net::bind(&fd, &src).unwrap();
    rustix::net::connect(&fd, &to).unwrap();
    TcpStream::from(fd)
}

/// Whether the server closed `s` (EOF or reset) within `wait`.
fn server_closed(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    // A signal interrupts a read with SO_RCVTIMEO even under SA_RESTART
    // (signal(7)): read again.
    let r = loop {
        match s.read(&mut [0u8; 8]) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    match r {
        Ok(n) => {
            assert_eq!(n, 0, "the server wrote to a silent peer");
            true
        }
        Err(e) => match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => false,
            ErrorKind::ConnectionReset => true,
            _ => panic!("read: {e}"),
        },
    }
}

/// Waits (bounded) until the server's counters satisfy `f`.
async fn metrics_until(rdma: &RdmaServer, f: impl Fn(&MetricsSnapshot) -> bool) -> MetricsSnapshot {
    let until = Instant::now() + LIMIT;
    loop {
        let m = rdma.metrics().snapshot();
        if f(&m) {
            return m;
        }
        assert!(Instant::now() < until, "counters never got there: {m:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connects a real client and makes one NULL call; returns how long that
/// took.
async fn good_client(addr: SocketAddr) -> Duration {
    let t0 = Instant::now();
    let (c, t) = tokio::time::timeout(
        LIMIT,
        connect_client(addr, ClientConfig::default(), RdmaClientConfig::default()),
    )
    .await
    .expect("connect timed out")
    .expect("connect");
    testprog::null(&c).await.expect("NULL call");
    let took = t0.elapsed();
    t.shutdown().await;
    took
}

/// An MPA exchange from 127.0.0.`host` with RFC 8797 private data; the
/// provider once established, or why not.
fn mpa_from(host: u8, to: SocketAddr) -> Result<IwarpProvider, DisconnectReason> {
    let cfg = IwarpCm::default().config_for(&EngineConfig::client().connect_params());
    let mut p = IwarpProvider::connect_stream(silent_from(host, to), cfg).unwrap();
    let until = Instant::now() + LIMIT;
    loop {
        match p.poll_event() {
            Some(ConnectionEvent::Established(_)) => return Ok(p),
            Some(ConnectionEvent::Disconnected(r)) => return Err(r),
            _ => {
                assert!(Instant::now() < until, "no MPA outcome");
                p.wait(Some(Duration::from_millis(20))).unwrap();
            }
        }
    }
}

/// 200 silent connections (20 sources, 10 each: within every cap, all
/// pending at once) do not delay a real client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_do_not_delay_a_good_client() {
    let (_s, rdma) = start(RdmaServerConfig::default()).await;
    let addr = rdma.local_addr();
    let silent: Vec<TcpStream> = (0..200).map(|i| silent_from(2 + i % 20, addr)).collect();
    let took = good_client(addr).await;
    eprintln!("good client connected and called in {took:?} with 200 silent connections held");
    assert!(took < PROMPT, "{took:?}");
    assert_eq!(rdma.metrics().snapshot().connections, 1);
    drop(silent);
    rdma.shutdown().await;
}

/// 200 silent connections from the client's own address: the per-source
/// cap evicts the oldest, so the real client (newest) still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_the_same_address_do_not_lock_it_out() {
    let limits = AcceptLimits {
        request_timeout: Duration::from_secs(60),
        ..AcceptLimits::default()
    };
    let (_s, rdma) = start(config(limits)).await;
    let addr = rdma.local_addr();
    let silent: Vec<TcpStream> = (0..200).map(|_| silent_from(1, addr)).collect();
    let took = good_client(addr).await;
    eprintln!("good client from the silent peers' address served in {took:?}");
    assert!(took < PROMPT, "{took:?}");
    // 200 silent + the client's: every one past 32 evicted the oldest.
    let m = rdma.metrics().snapshot();
    assert_eq!(m.handshakes_evicted_per_source, 201 - 32);
    assert_eq!(m.handshakes_timed_out, 0);
    drop(silent);
    rdma.shutdown().await;
}

/// Pending connections: per-source cap (that source's oldest evicted),
/// then the overall cap (the oldest of all evicted); a real client still
/// connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_caps_evict_the_oldest() {
    let (_s, rdma) = start(config(AcceptLimits {
        request_timeout: Duration::from_secs(60),
        max_pending: 6,
        max_pending_per_source: 4,
    }))
    .await;
    let addr = rdma.local_addr();
    let mut a: Vec<TcpStream> = (0..6).map(|_| silent_from(2, addr)).collect();
    metrics_until(&rdma, |m| m.handshakes_evicted_per_source == 2).await;
    assert!(server_closed(&mut a[0], LIMIT) && server_closed(&mut a[1], LIMIT));
    for s in &mut a[2..] {
        assert!(!server_closed(s, Duration::from_millis(50)));
    }
    // Three from 127.0.0.3: 4 + 3 > 6, so 127.0.0.2's oldest goes.
    let mut b: Vec<TcpStream> = (0..3).map(|_| silent_from(3, addr)).collect();
    metrics_until(&rdma, |m| m.handshakes_evicted_overall == 1).await;
    assert!(server_closed(&mut a[2], LIMIT));
    assert!(!server_closed(&mut a[3], Duration::from_millis(50)));
    assert!(!server_closed(&mut b[0], Duration::from_millis(50)));
    let took = good_client(addr).await;
    eprintln!("good client served in {took:?} with both caps full");
    let m = rdma.metrics().snapshot();
    assert_eq!(m.handshakes_evicted_overall, 2);
    assert_eq!(m.handshakes_evicted_per_source, 2);
    assert_eq!(m.connections, 1);
    rdma.shutdown().await;
}

/// One address cannot take every connection: past
/// `max_connections_per_source` it gets an MPA Reject, while another
/// address still connects; a closed connection frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_source_connection_cap_rejects_the_extra_one() {
    let (_s, rdma) = start(RdmaServerConfig {
        max_connections_per_source: 3,
        ..RdmaServerConfig::default()
    })
    .await;
    let addr = rdma.local_addr();
    let mut held: Vec<IwarpProvider> = (0..3)
        .map(|_| mpa_from(2, addr).expect("within the cap"))
        .collect();
    match mpa_from(2, addr) {
        Err(DisconnectReason::Rejected { .. }) => {}
        Err(r) => panic!("expected an MPA Reject, got {r:?}"),
        Ok(_) => panic!("a fourth connection from 127.0.0.2 was accepted"),
    }
    assert_eq!(rdma.metrics().snapshot().connections_refused_per_source, 1);
    // Other sources are not affected.
    let _other = mpa_from(3, addr).expect("127.0.0.3");
    let took = good_client(addr).await;
    eprintln!("good client served in {took:?} with 127.0.0.2 at its cap");
    // Once the server has seen one of 127.0.0.2's connections close, the
    // address may connect again.
    drop(held.pop());
    let until = Instant::now() + LIMIT;
    loop {
        match mpa_from(2, addr) {
            Ok(p) => {
                held.push(p);
                break;
            }
            Err(DisconnectReason::Rejected { .. }) => {
                assert!(Instant::now() < until, "the slot was never freed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(r) => panic!("{r:?}"),
        }
    }
    assert_eq!(rdma.metrics().snapshot().connections_refused, 0);
    rdma.shutdown().await;
}

/// A connection without an MPA Request is closed at its deadline (not
/// before) and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_its_deadline() {
    let deadline = Duration::from_millis(300);
    let (_s, rdma) = start(config(AcceptLimits {
        request_timeout: deadline,
        ..AcceptLimits::default()
    }))
    .await;
    let t0 = Instant::now();
    let mut s = silent_from(1, rdma.local_addr());
    let closed = tokio::task::spawn_blocking(move || server_closed(&mut s, LIMIT))
        .await
        .unwrap();
    let after = t0.elapsed();
    assert!(closed, "never closed");
    // The deadline runs from the accept, which follows the connect.
    assert!(after >= deadline, "closed after {after:?}");
    metrics_until(&rdma, |m| m.handshakes_timed_out == 1).await;
    rdma.shutdown().await;
}

/// Shutdown does not wait for silent peers, and closes them and the
/// listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_pending_handshakes_is_prompt() {
    let (_s, rdma) = start(config(AcceptLimits {
        request_timeout: Duration::from_secs(60),
        ..AcceptLimits::default()
    }))
    .await;
    let addr = rdma.local_addr();
    let mut silent: Vec<TcpStream> = (0..10).map(|i| silent_from(2 + i, addr)).collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    rdma.shutdown().await;
    let took = t0.elapsed();
    eprintln!("shutdown with 10 pending connections took {took:?}");
    assert!(took < PROMPT, "{took:?}");
    // Closed by the shutdown itself, not by their 60 s deadline.
    for s in &mut silent {
        assert!(server_closed(s, Duration::from_secs(2)));
    }
    assert!(TcpStream::connect(addr).is_err(), "still listening");
}
