//! The cutting proxy of the fault campaign (`tests/fault/`) checked on its
//! own: every kind of cut falls where its plan says (the unit it fell in,
//! and how much of it went through), the client recovers from each, and a
//! cut is a FIN or a RST as planned, seen by both ends.

mod fault;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use fault::plan::{CutKind, CutMode, Plan};
use fault::proxy::{CutRecord, Proxy, ProxyStats};
use fault::watch::{Unit, C2S, S2C};
use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig, RdmaStatus};
use rpcrdma::{testprog, Client, ClientConfig, Server};
use rpcrdma_iwarp::mpa::{FrameKind, MpaFlags, MpaFrame};
use rpcrdma_iwarp::rdmap::Opcode;

const LIMIT: Duration = Duration::from_secs(60);

/// A plan that cuts at the first point of `kind`.
fn plan(kind: CutKind, mode: CutMode) -> Plan {
    Plan {
        kind,
        mode,
        after_calls: 1,
        dir: C2S,
        skip: 0,
        offset: 0x1234_5678_9abc,
    }
}

/// A plan that never fires.
fn never() -> Plan {
    Plan {
        after_calls: u32::MAX,
        ..plan(CutKind::AfterCall, CutMode::Fin)
    }
}

/// Calls of every shape (inline, Read chunk, Write chunk, Long Call and
/// Reply), data checked.
async fn every_shape(c: &Client) {
    testprog::null(c).await.unwrap();
    let data = testprog::pattern(3, 300_000);
    let crc = crc32c::crc32c(&data);
    assert_eq!(testprog::write(c, &data).await.unwrap(), (300_000, crc));
    let got = testprog::read(c, 300_000, 4).await.unwrap();
    assert_eq!(got[..], testprog::pattern(4, 300_000)[..]);
    let data = testprog::pattern(5, 20_000);
    assert_eq!(testprog::echo(c, &data).await.unwrap()[..], data[..]);
}

/// An RDMA server of the test program on 127.0.0.1.
async fn testprog_server() -> RdmaServer {
    let server = Server::default();
    testprog::register(&server);
    RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default())
        .await
        .unwrap()
}

/// What the cut of `kind` must look like.
fn check(kind: CutKind, c: &CutRecord) {
    let seg = match c.unit {
        Unit::Fpdu(s) => Some(s),
        _ => None,
    };
    let inside = c.keep > 0 && c.keep < c.len;
    let ok = match kind {
        CutKind::MpaRequest => c.dir == C2S && c.unit == Unit::Frame && inside,
        CutKind::MpaReply => c.dir == S2C && c.unit == Unit::Frame && inside,
        // The RTR: the client's first FPDU, zero-length.
        CutKind::Rtr => c.dir == C2S && seg.is_some_and(|s| s.payload == 0) && c.keep == c.len,
        CutKind::MidFpdu => seg.is_some() && inside,
        CutKind::ReadGap => {
            c.dir == S2C && seg.is_some_and(|s| s.opcode == Opcode::READ_REQUEST) && c.keep == c.len
        }
        CutKind::WriteMid => {
            c.dir == S2C
                && seg.is_some_and(|s| s.opcode == Opcode::WRITE && !s.last)
                && c.keep == c.len
        }
        CutKind::AfterCall => {
            c.dir == C2S && seg.is_some_and(|s| s.ends_message()) && c.keep == c.len
        }
        CutKind::ReplyStart => {
            c.dir == S2C && seg.is_some_and(|s| s.starts_message()) && inside && c.keep <= 32
        }
    };
    assert!(ok, "{kind:?} cut elsewhere: {c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cut_kind_falls_where_planned_and_the_client_recovers() {
    tokio::time::timeout(LIMIT, async {
        let rdma = testprog_server().await;
        for (i, kind) in CutKind::ALL.into_iter().enumerate() {
            let mode = if i % 2 == 0 {
                CutMode::Fin
            } else {
                CutMode::Rst
            };
            let setup = matches!(kind, CutKind::MpaRequest | CutKind::MpaReply | CutKind::Rtr);
            // A setup cut needs a reconnection: connection 0 is cut after
            // its first call, connection 1 by the kind under test.
            let planner = Box::new(move |n| match (n, setup) {
                (0, false) | (1, true) => plan(kind, mode),
                (0, true) => plan(CutKind::AfterCall, mode),
                _ => never(),
            });
            let stats = Arc::new(ProxyStats::default());
            let proxy = Proxy::start(rdma.local_addr(), i, planner, stats.clone()).unwrap();
            let (c, t) = connect_client(
                proxy.addr(),
                ClientConfig::default(),
                RdmaClientConfig::default(),
            )
            .await
            .unwrap();
            for _ in 0..2 {
                every_shape(&c).await;
            }
            let cuts = stats.cuts();
            let cut = cuts
                .iter()
                .find(|c| c.plan.kind == kind)
                .unwrap_or_else(|| panic!("no {kind:?} cut: {cuts:?}"));
            check(kind, cut);
            assert_eq!(cut.plan.mode, mode);
            // Connections made: one more than the cuts, less the one
            // whose handshake was cut (it never counted).
            let handshake = matches!(kind, CutKind::MpaRequest | CutKind::MpaReply);
            let st = t.status();
            assert_eq!(
                st.connects,
                cuts.len() as u64 + 1 - u64::from(handshake),
                "{kind:?}: {cuts:?}"
            );
            assert!(
                st.engine.retransmits > 0 || setup,
                "{kind:?}: nothing re-sent"
            );
            // Both ends at rest: only receives and pooled buffers held,
            // and exactly that many registrations.
            let rest = |st: &RdmaStatus| {
                st.resources.at_rest()
                    && st.registered_regions == Some(st.resources.regions_at_rest() as u32)
            };
            let mut waited = 0;
            while !(rest(&t.status()) && rdma.connections().iter().all(rest)) {
                assert!(waited < 100, "{kind:?}: not at rest: {:?}", t.status());
                tokio::time::sleep(Duration::from_millis(50)).await;
                waited += 1;
            }
            t.shutdown().await;
        }
        rdma.shutdown().await;
    })
    .await
    .expect("test timed out");
}

/// Reads until the end of the stream or an error: (octets, how it ended).
fn read_to_end(s: &mut TcpStream) -> (Vec<u8>, Option<ErrorKind>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e.kind())),
        }
    }
}

#[test]
fn a_cut_is_a_fin_or_a_rst_at_both_ends() {
    for mode in [CutMode::Fin, CutMode::Rst] {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let stats = Arc::new(ProxyStats::default());
        let planner = Box::new(move |_| plan(CutKind::MpaRequest, mode));
        let proxy =
            Proxy::start(upstream.local_addr().unwrap(), 0, planner, stats.clone()).unwrap();
        let mut client = TcpStream::connect(proxy.addr()).unwrap();
        let mut request = MpaFrame::new(FrameKind::Request, MpaFlags(MpaFlags::CRC), 1);
        request.private_data = vec![7; 40];
        client.write_all(&request.to_vec().unwrap()).unwrap();
        let (mut server, _) = upstream.accept().unwrap();
        let (at_server, server_end) = read_to_end(&mut server);
        let (at_client, client_end) = read_to_end(&mut client);
        let cuts = stats.cuts();
        assert_eq!(cuts.len(), 1, "{cuts:?}");
        let keep = cuts[0].keep;
        assert!(keep > 0 && keep < 60, "inside the 60-octet Request: {keep}");
        assert_eq!(at_server, request.to_vec().unwrap()[..keep], "{mode:?}");
        assert!(at_client.is_empty());
        let want = match mode {
            CutMode::Fin => None,
            CutMode::Rst => Some(ErrorKind::ConnectionReset),
        };
        assert_eq!((server_end, client_end), (want, want), "{mode:?}");
    }
}

/// The runtime's `retransmits` counter counts calls sent again, as the
/// engine's does: a call that waited for a credit when the connection was
/// cut goes out for the first time on the next one, which is not a
/// retransmission. (It counted every interrupted call, sent or not.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_at_a_cut_is_not_counted_as_a_retransmission() {
    tokio::time::timeout(LIMIT, async {
        let rdma = testprog_server().await;
        // The first connection is cut right after its first call; a new
        // connection grants one credit until its first reply, so the
        // calls started with it wait.
        let planner = Box::new(|n| match n {
            0 => plan(CutKind::AfterCall, CutMode::Rst),
            _ => never(),
        });
        let stats = Arc::new(ProxyStats::default());
        let proxy = Proxy::start(rdma.local_addr(), 0, planner, stats.clone()).unwrap();
        let metrics = Arc::new(rpcrdma::Metrics::default());
        let cfg = RdmaClientConfig {
            metrics: Some(metrics.clone()),
            ..RdmaClientConfig::default()
        };
        let (c, t) = connect_client(proxy.addr(), ClientConfig::default(), cfg)
            .await
            .unwrap();
        let calls = tokio::join!(testprog::null(&c), testprog::null(&c), testprog::null(&c));
        for r in [calls.0, calls.1, calls.2] {
            r.unwrap();
        }
        assert_eq!(stats.cuts().len(), 1);
        let st = t.status();
        assert_eq!(st.connects, 2);
        assert_eq!(
            st.engine.retransmits, 1,
            "only the first call was sent twice"
        );
        assert_eq!(
            metrics.snapshot().retransmits,
            st.engine.retransmits,
            "the runtime's count"
        );
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
    .expect("test timed out");
}
