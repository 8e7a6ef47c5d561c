//! Blocking mode of ONC RPC over TCP: `TcpBlockingClient` and the blocking
//! server (`TcpConfig::blocking`), against each other, against the async
//! sides, against hostile peers (127.0.0.1 only, bounded in time).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::record::{RecordError, RecordLimits};
use rpcrdma::testprog::{self, blocking as tb, pattern};
use rpcrdma::{
    CallContext, CallOptions, Client, ClientConfig, Message, ReconnectPolicy, RpcError, Server,
    TcpBlockingClient, TcpConfig, TcpServer, TransportError,
};
use rpcrdma_proto::wire::rpc::RpcMsg;
use rpcrdma_proto::XdrEncode;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

const SLOW_PROG: u32 = 0x2000_7000;

/// The test program, and a program whose procedure 0 waits `arg` ms on the
/// runtime before answering `arg` (a handler that is not ready at once).
fn serve(rt: &tokio::runtime::Runtime, tcp: TcpConfig) -> (Server, TcpServer) {
    let server = Server::default();
    testprog::register(&server);
    server.register(SLOW_PROG, 1, |ctx: CallContext| async move {
        let ms = ctx.reader().u32("ms")?;
        tokio::time::sleep(Duration::from_millis(ms.into())).await;
        let mut b = Message::builder();
        b.put_u32(ms);
        Ok(b.finish())
    });
    let t = rt
        .block_on(server.serve_tcp("127.0.0.1:0", tcp))
        .expect("bind");
    (server, t)
}

fn blocking_server() -> TcpConfig {
    TcpConfig {
        blocking: true,
        ..TcpConfig::default()
    }
}

fn client(addr: SocketAddr) -> TcpBlockingClient {
    TcpBlockingClient::connect(addr, ClientConfig::default(), TcpConfig::default()).unwrap()
}

fn with_timeout(ms: u64, retries: u32) -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_millis(ms),
        retries,
        ..ClientConfig::default()
    }
}

/// ECHO sizes around the client's receive buffer (64 KiB) and across
/// fragment boundaries, against the blocking and the async server, both
/// with one fragment per record and with small fragments both ways.
#[test]
fn round_trips_across_the_record_boundary() {
    let rt = rt();
    let sizes = [
        0usize,
        1,
        3,
        4,
        5,
        1024,
        4093,
        65_495,
        65_496,
        65_497,
        65_532,
        65_536,
        70_000,
        1 << 20,
    ];
    for blocking in [true, false] {
        for frag in [1u32 << 20, 1000] {
            let cfg = TcpConfig {
                blocking,
                max_fragment: frag,
                ..TcpConfig::default()
            };
            let (server, t) = serve(&rt, cfg);
            let ccfg = TcpConfig {
                max_fragment: frag,
                ..TcpConfig::default()
            };
            let mut c =
                TcpBlockingClient::connect(t.local_addr(), ClientConfig::default(), ccfg).unwrap();
            tb::null(&mut c).unwrap();
            for &n in &sizes {
                let data = pattern(n as u32 + 1, n);
                let got = tb::echo(&mut c, &data).unwrap();
                assert_eq!(got.len(), n, "blocking {blocking} frag {frag} size {n}");
                assert!(
                    got[..] == data[..],
                    "blocking {blocking} frag {frag} size {n}"
                );
            }
            let r = tb::read(&mut c, 200_000, 9).unwrap();
            assert!(r[..] == pattern(9, 200_000)[..]);
            let data = pattern(3, 100_000);
            let (count, crc) = tb::write(&mut c, &data).unwrap();
            assert_eq!((count, crc), (100_000, crc32c::crc32c(&data)));
            let m = c.metrics();
            let calls = sizes.len() as u64 + 3;
            assert_eq!((m.calls_sent, m.replies_received), (calls, calls));
            assert_eq!(
                m.replies_unmatched + m.garbage_messages + m.transport_errors,
                0
            );
            // The server counted every call under "tcp".
            let served: u64 = server
                .stats()
                .snapshot()
                .iter()
                .filter(|(k, _)| k.transport == "tcp")
                .map(|(_, v)| v.calls)
                .sum();
            assert_eq!(served, calls);
            c.close();
            rt.block_on(t.shutdown());
        }
    }
}

/// The async client against the blocking server, calls in parallel on one
/// connection (the blocking server reads on while handlers wait), and a
/// handler that waits (its reply written from the blocking pool).
#[test]
fn async_client_and_waiting_handlers_on_the_blocking_server() {
    let rt = rt();
    let (_server, t) = serve(&rt, blocking_server());
    let addr = t.local_addr();
    rt.block_on(async {
        let c = Arc::new(
            Client::connect_tcp(addr, ClientConfig::default(), TcpConfig::default())
                .await
                .unwrap(),
        );
        let mut tasks = Vec::new();
        for i in 0..16u32 {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let mut b = Message::builder();
                b.put_u32(50 + i);
                let r = c.call(SLOW_PROG, 1, 0, b.finish(), &[]).await.unwrap();
                assert_eq!(r.reader().u32("v").unwrap(), 50 + i);
                assert_eq!(&testprog::echo(&c, b"x").await.unwrap()[..], b"x");
            }));
        }
        let t0 = Instant::now();
        for t in tasks {
            t.await.unwrap();
        }
        // In parallel: far less than 16 x 50 ms.
        assert!(
            t0.elapsed() < Duration::from_millis(700),
            "{:?}",
            t0.elapsed()
        );
    });
    // The blocking client, a waiting handler.
    let mut c = client(addr);
    let mut b = Message::builder();
    b.put_u32(30);
    let r = c.call(SLOW_PROG, 1, 0, b.finish(), &[]).unwrap();
    assert_eq!(r.reader().u32("v").unwrap(), 30);
    c.close();
    rt.block_on(t.shutdown());
}

/// A server that accepts and then runs `f` on each connection (in turn).
fn raw_server(f: impl Fn(usize, TcpStream) + Send + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for (i, s) in l.incoming().enumerate() {
            match s {
                Ok(s) => f(i, s),
                Err(_) => return,
            }
        }
    });
    addr
}

/// Reads one record-marked call (one fragment) and returns it.
fn read_call(s: &mut TcpStream) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).ok()?;
    let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
    let mut v = vec![0u8; len];
    s.read_exact(&mut v).ok()?;
    Some(v)
}

fn xid_of(call: &[u8]) -> u32 {
    u32::from_be_bytes(call[..4].try_into().unwrap())
}

fn record(body: &[u8]) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

fn success(xid: u32) -> Vec<u8> {
    record(&RpcMsg::success(xid).to_vec().unwrap())
}

fn transport_err(r: Result<(), RpcError>) -> TransportError {
    match r {
        Err(RpcError::Transport(e)) => e,
        other => panic!("expected a transport error, got {other:?}"),
    }
}

/// No reply: the call times out after its timeout, retransmitted with the
/// same XID as configured; a connection stays usable after a timeout.
#[test]
fn timeouts_and_retransmissions() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let addr = raw_server(move |_, mut s| {
        // Ignore the first three calls, answer the fourth.
        let mut n = 0;
        while let Some(call) = read_call(&mut s) {
            s2.lock().unwrap().push(xid_of(&call));
            n += 1;
            if n == 4 {
                s.write_all(&success(xid_of(&call))).unwrap();
            }
        }
    });
    let mut c =
        TcpBlockingClient::connect(addr, with_timeout(150, 2), TcpConfig::default()).unwrap();
    let t0 = Instant::now();
    match tb::null(&mut c) {
        Err(RpcError::Timeout { attempts: 3, xid }) => {
            assert_eq!(*seen.lock().unwrap(), vec![xid; 3]);
        }
        other => panic!("{other:?}"),
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // The fourth call (another XID) is answered on the same connection.
    tb::null(&mut c).unwrap();
    let m = c.metrics();
    assert_eq!((m.retransmits, m.timeouts, m.connections), (2, 1, 1));
    // A per-call timeout overrides the configured one.
    let opts = CallOptions {
        timeout: Some(Duration::from_millis(50)),
        ..CallOptions::default()
    };
    let t0 = Instant::now();
    let r = c.call_with(testprog::TEST_PROG, 1, 0, Message::new(), &opts);
    assert!(
        matches!(r, Err(RpcError::Timeout { attempts: 3, .. })),
        "{r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// Replies to other XIDs are dropped and counted, and the wait goes on to
/// the right one; a server sending only foreign XIDs ends in the timeout.
#[test]
fn foreign_xids_are_dropped() {
    let addr = raw_server(|i, mut s| {
        while let Some(call) = read_call(&mut s) {
            let xid = xid_of(&call);
            for k in 1..=3 {
                s.write_all(&success(xid.wrapping_add(k))).unwrap();
            }
            // A call from the server and a garbage record, too.
            s.write_all(&record(&[0, 0, 0, 9, 0, 0, 0, 0])).unwrap();
            s.write_all(&record(&[1, 2])).unwrap();
            if i == 0 {
                s.write_all(&success(xid)).unwrap();
            }
        }
    });
    let mut c =
        TcpBlockingClient::connect(addr, with_timeout(300, 0), TcpConfig::default()).unwrap();
    tb::null(&mut c).unwrap();
    let m = c.metrics();
    assert_eq!(
        (
            m.replies_unmatched,
            m.backchannel_unsupported,
            m.garbage_messages
        ),
        (3, 1, 1)
    );
    let mut c =
        TcpBlockingClient::connect(addr, with_timeout(300, 0), TcpConfig::default()).unwrap();
    let t0 = Instant::now();
    assert!(matches!(tb::null(&mut c), Err(RpcError::Timeout { .. })));
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(c.closed_reason().is_none());
}

/// A hostile server: bad marks, oversized records, a close inside a
/// record, a close between records. Each is a clear transport error that
/// closes the connection (later calls fail the same way), never a panic,
/// never the memory the peer announced.
#[test]
fn hostile_servers() {
    type Send = fn(u32) -> Vec<u8>;
    type Expect = fn(&TransportError) -> bool;
    let cases: Vec<(&str, Send, Expect)> = vec![
        (
            "huge mark",
            |_| vec![0x7f, 0xff, 0xff, 0xff, 1, 2, 3],
            |e| {
                matches!(
                    e,
                    TransportError::Framing(RecordError::RecordTooLarge { .. })
                )
            },
        ),
        (
            "one octet over the limit",
            |x| {
                let mut r = RpcMsg::success(x).to_vec().unwrap();
                r.resize(4097, 0);
                record(&r)
            },
            |e| {
                matches!(
                    e,
                    TransportError::Framing(RecordError::RecordTooLarge {
                        size: 4097,
                        max_record_size: 4096
                    })
                )
            },
        ),
        (
            "fragments adding up over the limit",
            |x| {
                let r = RpcMsg::success(x).to_vec().unwrap();
                let mut v = 4000u32.to_be_bytes().to_vec();
                v.extend_from_slice(&r);
                v.resize(4004, 0);
                v.extend_from_slice(&(0x8000_0000u32 | 100).to_be_bytes());
                v
            },
            |e| {
                matches!(
                    e,
                    TransportError::Framing(RecordError::RecordTooLarge { size: 4100, .. })
                )
            },
        ),
        (
            "close inside a record",
            |x| {
                let mut v = success(x);
                v.truncate(v.len() - 3);
                v
            },
            |e| {
                matches!(
                    e,
                    TransportError::Framing(RecordError::TruncatedRecord { .. })
                )
            },
        ),
        (
            "close inside a mark",
            |_| vec![0x80, 0],
            |e| {
                matches!(
                    e,
                    TransportError::Framing(RecordError::TruncatedRecord { buffered: 2 })
                )
            },
        ),
        (
            "close between records",
            |_| Vec::new(),
            |e| matches!(e, TransportError::Lost(_)),
        ),
    ];
    for (name, send, ok) in cases {
        let addr = raw_server(move |_, mut s| {
            if let Some(call) = read_call(&mut s) {
                let _ = s.write_all(&send(xid_of(&call)));
            }
            // Then the server closes.
        });
        let tcp = TcpConfig {
            record_limits: RecordLimits {
                max_record_size: 4096,
                ..RecordLimits::default()
            },
            ..TcpConfig::default()
        };
        let mut c = TcpBlockingClient::connect(addr, with_timeout(5000, 0), tcp).unwrap();
        let t0 = Instant::now();
        let e = transport_err(tb::null(&mut c));
        assert!(ok(&e), "{name}: {e:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "{name}: waited for the timeout"
        );
        // The connection is closed: later calls fail with the same error.
        assert_eq!(transport_err(tb::null(&mut c)), e, "{name}");
        assert_eq!(c.closed_reason(), Some(e.clone()), "{name}");
        assert_eq!(c.metrics().transport_errors, 1, "{name}");
    }
}

/// A call larger than the record limit is the caller's fault, and the
/// connection goes on.
#[test]
fn a_call_over_the_limit_is_refused() {
    let rt = rt();
    let (_server, t) = serve(&rt, blocking_server());
    let tcp = TcpConfig {
        record_limits: RecordLimits {
            max_record_size: 2000,
            ..RecordLimits::default()
        },
        ..TcpConfig::default()
    };
    let mut c = TcpBlockingClient::connect(t.local_addr(), ClientConfig::default(), tcp).unwrap();
    let r = tb::echo(&mut c, &[1u8; 3000]);
    assert!(
        matches!(&r, Err(e) if e.blame() == rpcrdma::Blame::Caller),
        "{r:?}"
    );
    assert_eq!(&tb::echo(&mut c, b"ok").unwrap()[..], b"ok");
    rt.block_on(t.shutdown());
}

/// A reconnecting client: a call whose connection is lost is sent again
/// with the same XID on a new connection; a later call reconnects too.
#[test]
fn reconnecting_client_resends_with_the_same_xid() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let addr = raw_server(move |i, mut s| {
        // Connection 0: takes the call and closes. Later ones answer.
        while let Some(call) = read_call(&mut s) {
            s2.lock().unwrap().push((i, xid_of(&call)));
            if i == 0 {
                return;
            }
            s.write_all(&success(xid_of(&call))).unwrap();
        }
    });
    let policy = ReconnectPolicy {
        initial_backoff: Duration::from_millis(10),
        ..ReconnectPolicy::default()
    };
    let mut c =
        TcpBlockingClient::reconnecting(addr, with_timeout(5000, 0), TcpConfig::default(), policy);
    tb::null(&mut c).unwrap();
    tb::null(&mut c).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].1, seen[1].1, "re-sent with the same XID");
    assert_eq!((seen[0].0, seen[1].0, seen[2].0), (0, 1, 1));
    assert_eq!(seen[2].1, seen[0].1.wrapping_add(1));
    let m = c.metrics();
    assert_eq!((m.connections, m.retransmits), (2, 1));
    c.disconnect();
    assert_eq!(transport_err(tb::null(&mut c)), TransportError::Closed);
}

/// Reconnection gives up after the policy's attempts.
#[test]
fn reconnecting_client_gives_up() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let policy = ReconnectPolicy {
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        max_attempts: 3,
    };
    let mut c =
        TcpBlockingClient::reconnecting(addr, with_timeout(5000, 0), TcpConfig::default(), policy);
    match transport_err(tb::null(&mut c)) {
        TransportError::Lost(why) => assert!(why.contains("after 3 attempts"), "{why}"),
        e => panic!("{e:?}"),
    }
}

/// Reads until the peer closes or `limit` passes: true if it closed.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A hostile client against the blocking server: a bad mark and an
/// oversized record close only that connection; an idle connection and
/// one trickling a record are closed after the idle timeout; connections
/// beyond the thread bound are closed at once; the server serves on.
#[test]
fn hostile_clients_against_the_blocking_server() {
    let rt = rt();
    let cfg = TcpConfig {
        blocking: true,
        blocking_max_threads: 3,
        blocking_idle_timeout: Duration::from_millis(400),
        record_limits: RecordLimits {
            max_record_size: 8192,
            ..RecordLimits::default()
        },
        ..TcpConfig::default()
    };
    let (server, t) = serve(&rt, cfg);
    let addr = t.local_addr();
    let metrics = t.metrics();
    // Bad marks.
    for bad in [
        vec![0x7f, 0xff, 0xff, 0xff],
        (0x8000_0000u32 | 8193).to_be_bytes().to_vec(),
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&bad).unwrap();
        assert!(closed_within(&mut s, Duration::from_secs(5)));
    }
    // Idle: closed after ~400 ms, not before.
    let mut s = TcpStream::connect(addr).unwrap();
    let t0 = Instant::now();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    let idle = t0.elapsed();
    assert!(
        idle >= Duration::from_millis(350) && idle < Duration::from_secs(3),
        "{idle:?}"
    );
    // Trickling a record one octet every 100 ms: closed all the same.
    let mut s = TcpStream::connect(addr).unwrap();
    let t0 = Instant::now();
    let rec = success(1);
    let mut closed = false;
    for b in rec.iter().cycle().take(60) {
        if s.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        thread::sleep(Duration::from_millis(100));
        if t0.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    let _ = closed;
    assert!(closed_within(&mut s, Duration::from_secs(3)));
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    // The thread bound: three held connections, the fourth closed at once.
    let mut held: Vec<TcpBlockingClient> = (0..3).map(|_| client(addr)).collect();
    for c in &mut held {
        tb::null(c).unwrap();
    }
    let refused_before = metrics.snapshot().connections_refused;
    let mut s = TcpStream::connect(addr).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    assert_eq!(metrics.snapshot().connections_refused, refused_before + 1);
    // One ends: a new connection is served.
    held.pop().unwrap().close();
    thread::sleep(Duration::from_millis(100));
    let mut c = client(addr);
    assert_eq!(&tb::echo(&mut c, b"still here").unwrap()[..], b"still here");
    for c in &mut held {
        tb::null(c).unwrap();
    }
    assert!(metrics.snapshot().transport_errors >= 4);
    assert!(server.metrics().calls_received >= 6);
    drop(held);
    drop(c);
    rt.block_on(t.shutdown());
}

/// Shutdown ends connections at once (a held idle connection included)
/// and lets a call in flight finish and its reply be written.
#[test]
fn shutdown_ends_blocking_connections() {
    let rt = rt();
    let (_server, t) = serve(&rt, blocking_server());
    let addr = t.local_addr();
    let mut idle = TcpStream::connect(addr).unwrap();
    let got = Arc::new(AtomicU32::new(0));
    let g2 = got.clone();
    let caller = thread::spawn(move || {
        let mut c = client(addr);
        let mut b = Message::builder();
        b.put_u32(300);
        let r = c.call(SLOW_PROG, 1, 0, b.finish(), &[]).unwrap();
        g2.store(r.reader().u32("v").unwrap(), Ordering::SeqCst);
    });
    thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    rt.block_on(t.shutdown());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    caller.join().unwrap();
    assert_eq!(got.load(Ordering::SeqCst), 300);
    assert!(closed_within(&mut idle, Duration::from_secs(2)));
}

/// A server trickling its reply (an octet every 40 ms), or flooding other
/// XIDs, cannot stretch a call past its timeout.
#[test]
fn trickle_and_flood_end_at_the_deadline() {
    let addr = raw_server(|i, mut s| {
        if let Some(call) = read_call(&mut s) {
            let xid = xid_of(&call);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                let ok = if i == 0 {
                    let r = success(xid);
                    r.iter().all(|b| {
                        thread::sleep(Duration::from_millis(40));
                        s.write_all(&[*b]).is_ok()
                    })
                } else {
                    s.write_all(&success(xid.wrapping_add(7))).is_ok()
                };
                if !ok {
                    return;
                }
            }
        }
    });
    for flood in [false, true] {
        let mut c =
            TcpBlockingClient::connect(addr, with_timeout(300, 0), TcpConfig::default()).unwrap();
        let t0 = Instant::now();
        let r = tb::null(&mut c);
        assert!(matches!(r, Err(RpcError::Timeout { .. })), "{r:?}");
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
            "flood {flood}: {took:?}"
        );
        if flood {
            assert!(c.metrics().replies_unmatched > 0);
        }
    }
}
