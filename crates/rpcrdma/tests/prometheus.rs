//! The per-procedure statistics of a client and a server, and the
//! Prometheus endpoint that exposes them, scraped over HTTP.
#![cfg(feature = "prometheus")]

use std::time::Duration;

use rpcrdma::prometheus::{Exporter, MetricsServer};
use rpcrdma::stats::{ErrorKind, Side};
use rpcrdma::testprog::{self, PROC_ECHO, PROC_NULL, TEST_PROG, TEST_VERS};
use rpcrdma::{Client, ClientConfig, Message, RpcError, Server, TcpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// GETs `path` from `addr`: (status line, body).
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut all = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut all))
        .await
        .expect("the endpoint answers and closes")
        .unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.lines().next().unwrap_or_default().to_string();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("Content-Length")
        .parse()
        .unwrap();
    assert_eq!(len, body.len(), "Content-Length is the body's");
    (status, body.to_string())
}

/// The value of the sample `name{labels}` (labels exactly as printed).
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name_and_labels} in:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn per_procedure_counters_scraped_over_http() {
    let server = Server::default();
    testprog::register(&server);
    let tcp = server
        .serve_tcp("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let client = Client::connect_tcp(
        tcp.local_addr(),
        ClientConfig::default(),
        TcpConfig::default(),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        testprog::null(&client).await.unwrap();
    }
    assert_eq!(
        &testprog::echo(&client, &[7u8; 100]).await.unwrap()[..],
        &[7u8; 100]
    );
    // An unknown procedure of the test program: PROC_UNAVAIL.
    let e = client
        .call(TEST_PROG, TEST_VERS, 99, Message::new(), &[])
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::Reply(_)), "{e}");

    // The tables, directly.
    let c = client.stats().snapshot();
    assert_eq!(client.stats().side(), Side::Client);
    let null = c.iter().find(|(k, _)| k.proc == PROC_NULL).unwrap();
    assert_eq!((null.0.prog, null.0.transport), (TEST_PROG, "tcp"));
    assert_eq!(null.1.calls, 3);
    assert_eq!(null.1.time.count(), 3);
    assert_eq!(null.1.errors_total(), 0);
    let echo = c.iter().find(|(k, _)| k.proc == PROC_ECHO).unwrap();
    // The RPC header (40 octets with AUTH_NONE) and the opaque<> (4 + 100).
    assert_eq!(echo.1.sent.inline, 40 + 4 + 100);
    // The reply header (24 octets) and the opaque<> back.
    assert_eq!(echo.1.received.inline, 24 + 4 + 100);
    let bad = c.iter().find(|(k, _)| k.proc == 99).unwrap();
    assert_eq!(
        bad.1.errors_by_kind().collect::<Vec<_>>(),
        [(ErrorKind::ProcUnavail, 1)]
    );
    let s = server.stats().snapshot();
    let served_echo = s.iter().find(|(k, _)| k.proc == PROC_ECHO).unwrap();
    assert_eq!(served_echo.1.calls, 1);
    assert_eq!(served_echo.1.received, echo.1.sent);
    assert_eq!(served_echo.1.sent, echo.1.received);

    // Over HTTP.
    let exporter = Exporter::new()
        .procs(server.stats().clone())
        .procs(client.stats().clone())
        .transport("tcp", tcp.metrics())
        .gauges(|| vec![("connections", "Live connections", 1)]);
    let m = MetricsServer::bind("127.0.0.1:0", exporter).await.unwrap();
    let (status, text) = get(m.local_addr(), "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let labels = |side: &str, proc: u32| {
        format!(
            "{{side=\"{side}\",program=\"{TEST_PROG}\",version=\"1\",procedure=\"{proc}\",transport=\"tcp\"}}"
        )
    };
    assert_eq!(
        sample(
            &text,
            &format!("rpcrdma_rpc_calls_total{}", labels("server", 0))
        ),
        3.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("rpcrdma_rpc_calls_total{}", labels("client", 0))
        ),
        3.0
    );
    let echo_labels = labels("client", 1);
    let sent = echo_labels.replace('}', ",direction=\"sent\",chunk=\"inline\"}");
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_bytes_total{sent}")),
        144.0
    );
    let err = labels("client", 99).replace('}', ",kind=\"proc_unavail\"}");
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_errors_total{err}")),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("rpcrdma_rpc_rtt_seconds_count{}", labels("client", 0))
        ),
        3.0
    );
    let inf = labels("server", 0).replace('}', ",le=\"+Inf\"}");
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_execute_seconds_bucket{inf}")),
        3.0
    );
    assert!(
        sample(
            &text,
            &format!("rpcrdma_rpc_execute_seconds_sum{}", labels("server", 0))
        ) > 0.0
    );
    assert_eq!(
        sample(
            &text,
            "rpcrdma_transport_connections_total{transport=\"tcp\"}"
        ),
        1.0
    );
    assert_eq!(sample(&text, "rpcrdma_connections"), 1.0);
    assert!(
        text.contains("# TYPE rpcrdma_rpc_rtt_seconds histogram"),
        "{text}"
    );

    // Other paths and methods.
    let (status, _) = get(m.local_addr(), "/nothing").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let mut s = TcpStream::connect(m.local_addr()).await.unwrap();
    s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).await.unwrap();
    assert!(all.starts_with("HTTP/1.1 405"), "{all}");
    // A request that never ends its headers is cut off at 8 KiB (exactly
    // 8 KiB sent: nothing unread, so the close is not a reset).
    let mut s = TcpStream::connect(m.local_addr()).await.unwrap();
    s.write_all(&[b'a'; 8192]).await.unwrap();
    let mut all = String::new();
    let _ = s.read_to_string(&mut all).await;
    assert!(all.starts_with("HTTP/1.1 431"), "{all}");

    m.shutdown();
    tcp.shutdown().await;
}
