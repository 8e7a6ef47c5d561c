//! The acceptor over loopback TCP: silent peers (TCP connected, no MPA
//! Request) are held concurrently, closed at their deadline or evicted
//! oldest-first, and never hold up a real initiator. Sources other than
//! 127.0.0.1 are bound from 127.0.0.0/8 (all loopback on Linux).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::acceptor::{AcceptEvent, Acceptor, AcceptorWaker, CloseReason};
use rpcrdma_iwarp::admission::{AcceptLimits, Eviction};
use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
use rpcrdma_proto::provider::{ConnectionEvent, Provider};

/// Bound on every wait of these tests (never reached when they pass).
const LIMIT: Duration = Duration::from_secs(20);

/// A TCP connection to `to` from `127.0.0.<last>`.
fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&fd, &SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, last), 0)).unwrap();
    rustix::net::connect(&fd, &to).unwrap();
    TcpStream::from(fd)
}

/// True if the peer closed `s` (EOF or reset) within `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 16];
    // A signal interrupts a read with SO_RCVTIMEO even under SA_RESTART
    // (signal(7)): read again.
    let r = loop {
        match s.read(&mut b) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    match r {
        Ok(0) => true,
        Ok(n) => panic!("server sent {n} octets to a silent peer"),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) => panic!("read: {e}"),
    }
}

/// An acceptor on its own thread; every event comes out of `rx` with the
/// number of connections pending right after it.
struct Harness {
    addr: SocketAddr,
    rx: mpsc::Receiver<(AcceptEvent, usize)>,
    waker: AcceptorWaker,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<Acceptor>>,
}

impl Harness {
    fn start(limits: AcceptLimits) -> Harness {
        let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
        let mut acc = Acceptor::new(l, limits).unwrap();
        let addr = acc.local_addr().unwrap();
        let waker = acc.waker();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut ev = Vec::new();
            while !st.load(std::sync::atomic::Ordering::SeqCst) {
                acc.poll(None, &mut ev).unwrap();
                for e in ev.drain(..) {
                    let _ = tx.send((e, acc.pending()));
                }
            }
            acc
        });
        Harness {
            addr,
            rx,
            waker,
            stop,
            thread: Some(thread),
        }
    }

    fn next(&self) -> (AcceptEvent, usize) {
        self.rx.recv_timeout(LIMIT).expect("an acceptor event")
    }

    /// Stops the thread (through the waker) and returns the acceptor.
    fn stop(mut self) -> Acceptor {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.waker.wake();
        self.thread.take().unwrap().join().unwrap()
    }
}

fn limits(timeout_ms: u64, total: usize, per_source: usize) -> AcceptLimits {
    AcceptLimits {
        request_timeout: Duration::from_millis(timeout_ms),
        max_pending: total,
        max_pending_per_source: per_source,
    }
}

/// A real initiator's Request is served while 200 silent connections
/// (20 sources, 10 each: within every cap) are all pending at once.
#[test]
fn silent_connections_do_not_hold_up_a_real_initiator() {
    let h = Harness::start(limits(60_000, 512, 32));
    let silent: Vec<TcpStream> = (0..200)
        .map(|i| connect_from(2 + (i % 20) as u8, h.addr))
        .collect();
    let t0 = Instant::now();
    let addr = h.addr;
    let client = std::thread::spawn(move || {
        IwarpProvider::connect_blocking(addr, IwarpConfig::default(), LIMIT)
    });
    let (ev, pending) = h.next();
    let AcceptEvent::Request(p) = ev else {
        panic!("expected the initiator's Request, got {ev:?}");
    };
    // Accepted in order: every silent connection is pending by now.
    assert_eq!(pending, 200);
    let _server = p.accept(IwarpConfig::default(), LIMIT).unwrap();
    let c = client.join().unwrap().expect("initiator established");
    let latency = t0.elapsed();
    eprintln!("initiator established in {latency:?} with 200 silent connections pending");
    assert!(latency < LIMIT);
    drop(c);
    let acc = h.stop();
    assert_eq!(acc.pending(), 200);
    drop(silent);
}

/// A connection without a Request is closed at its deadline, not before.
#[test]
fn a_silent_connection_is_closed_at_its_deadline() {
    let h = Harness::start(limits(300, 8, 8));
    let t0 = Instant::now();
    let mut s = TcpStream::connect(h.addr).unwrap();
    assert!(closed_within(&mut s, LIMIT), "never closed");
    let waited = t0.elapsed();
    // The deadline runs from the accept, which follows the connect.
    assert!(
        waited >= Duration::from_millis(300),
        "closed after {waited:?}"
    );
    let (ev, pending) = h.next();
    match ev {
        AcceptEvent::Closed {
            peer,
            reason: CloseReason::TimedOut,
        } => assert_eq!(peer, s.local_addr().unwrap()),
        e => panic!("{e:?}"),
    }
    assert_eq!(pending, 0);
    h.stop();
}

/// The per-source cap evicts that source's oldest connection; another
/// source's older one stays, and a real initiator from the crowded source
/// still gets through.
#[test]
fn per_source_cap_evicts_that_sources_oldest() {
    let h = Harness::start(limits(60_000, 64, 3));
    let mut other = connect_from(3, h.addr);
    let mut mine: Vec<TcpStream> = (0..5).map(|_| connect_from(2, h.addr)).collect();
    for s in &mine[..2] {
        match h.next().0 {
            AcceptEvent::Closed {
                peer,
                reason: CloseReason::Evicted(Eviction::PerSource),
            } => assert_eq!(peer, s.local_addr().unwrap()),
            e => panic!("{e:?}"),
        }
    }
    assert!(closed_within(&mut mine[0], LIMIT));
    assert!(closed_within(&mut mine[1], LIMIT));
    for s in &mut mine[2..] {
        assert!(!closed_within(s, Duration::from_millis(50)));
    }
    assert!(!closed_within(&mut other, Duration::from_millis(50)));

    // A real initiator from 127.0.0.2: its connection is the newest.
    let s = connect_from(2, h.addr);
    let mut p = IwarpProvider::connect_stream(s, IwarpConfig::default()).unwrap();
    let (ev, _) = h.next();
    let AcceptEvent::Closed {
        reason: CloseReason::Evicted(Eviction::PerSource),
        peer,
    } = ev
    else {
        panic!("{ev:?}");
    };
    assert_eq!(peer, mine[2].local_addr().unwrap());
    let (ev, pending) = h.next();
    let AcceptEvent::Request(req) = ev else {
        panic!("{ev:?}");
    };
    assert_eq!(req.peer_addr(), p.local_addr().unwrap());
    assert_eq!(pending, 3, "two of 127.0.0.2 and one of 127.0.0.3 remain");
    let _server = req.accept(IwarpConfig::default(), LIMIT).unwrap();
    let until = Instant::now() + LIMIT;
    loop {
        match p.poll_event() {
            Some(ConnectionEvent::Established(_)) => break,
            Some(e) => panic!("{e:?}"),
            None => {
                assert!(Instant::now() < until, "never established");
                p.wait(Some(Duration::from_millis(50))).unwrap();
            }
        }
    }
    h.stop();
}

/// The overall cap evicts the oldest connection of all.
#[test]
fn overall_cap_evicts_the_oldest() {
    let h = Harness::start(limits(60_000, 4, 4));
    let mut s: Vec<TcpStream> = (2..=6).map(|i| connect_from(i, h.addr)).collect();
    match h.next() {
        (
            AcceptEvent::Closed {
                peer,
                reason: CloseReason::Evicted(Eviction::Overall),
            },
            4,
        ) => assert_eq!(peer, s[0].local_addr().unwrap()),
        e => panic!("{e:?}"),
    }
    assert!(closed_within(&mut s[0], LIMIT));
    assert!(!closed_within(&mut s[1], Duration::from_millis(50)));
    h.stop();
}

/// An invalid Request and a peer that closes are reported and closed.
#[test]
fn invalid_and_vanished_peers_are_reported() {
    let h = Harness::start(limits(60_000, 8, 8));
    let mut junk = TcpStream::connect(h.addr).unwrap();
    junk.write_all(&[0x55; 600]).unwrap();
    match h.next().0 {
        AcceptEvent::Closed {
            reason: CloseReason::Invalid(_),
            ..
        } => {}
        e => panic!("{e:?}"),
    }
    let gone = TcpStream::connect(h.addr).unwrap();
    drop(gone);
    match h.next().0 {
        AcceptEvent::Closed {
            reason: CloseReason::PeerClosed,
            ..
        } => {}
        e => panic!("{e:?}"),
    }
    h.stop();
}

/// The waker ends a `poll` without a deadline at once, and dropping the
/// acceptor closes its pending connections.
#[test]
fn waker_ends_poll_and_drop_closes_pending() {
    let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let mut acc = Acceptor::new(l, limits(60_000, 8, 8)).unwrap();
    let addr = acc.local_addr().unwrap();
    let mut silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let mut ev = Vec::new();
    while acc.pending() < 3 {
        acc.poll(Some(LIMIT), &mut ev).unwrap();
    }
    assert!(ev.is_empty(), "{ev:?}");
    let w = acc.waker();
    let t = std::thread::spawn(move || {
        let woken = acc.poll(None, &mut Vec::new()).unwrap();
        (woken, acc)
    });
    std::thread::sleep(Duration::from_millis(20));
    w.wake();
    let (woken, acc) = t.join().unwrap();
    assert!(woken);
    drop(acc);
    for s in &mut silent {
        assert!(closed_within(s, LIMIT));
    }
}

/// The listener queues a burst of connections nobody accepts yet (std's
/// backlog of 128 would drop the SYNs past it: a connect then waits for
/// a retransmission, 1 s).
#[test]
fn listener_queues_a_burst_of_connections() {
    let somaxconn: i64 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if somaxconn < 400 {
        eprintln!("SKIPPED: net.core.somaxconn is {somaxconn}, below the burst of 400");
        return;
    }
    let l = Listener::bind("127.0.0.1:0", IwarpConfig::default()).unwrap();
    let addr = l.local_addr().unwrap();
    let burst: Vec<TcpStream> = (0..400)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_millis(900))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    assert_eq!(burst.len(), 400);
}
