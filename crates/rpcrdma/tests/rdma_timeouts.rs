//! The async [`Client`]'s timeouts over real loopback software iWARP (task
//! mode, 127.0.0.1 only): the connection's driver ends a call at its
//! deadline (the caller keeps no timer of its own), also when calls with
//! shorter timeouts follow longer ones, and during a reconnection outage.

use std::time::{Duration, Instant};

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{
    testprog, CallOptions, Client, ClientConfig, ClientTransport, Message, ReconnectPolicy,
    RpcError,
};

const LIMIT: Duration = Duration::from_secs(60);

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

mod slowprog;
use slowprog::{server, SLOW_PROG};

async fn slow(c: &Client, ms: u32, timeout: Option<Duration>) -> Result<u32, RpcError> {
    let mut b = Message::builder();
    b.put_u32(ms);
    let opts = CallOptions {
        timeout,
        ..CallOptions::default()
    };
    let r = c.call_with(SLOW_PROG, 1, 1, b.finish(), &opts).await?;
    Ok(r.reader().u32("ms")?)
}

async fn null(c: &Client) {
    c.call(
        testprog::TEST_PROG,
        testprog::TEST_VERS,
        0,
        Message::new(),
        &[],
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_times_out_a_call_and_drops_its_late_reply() {
    bounded(async {
        let s = server();
        let rdma = RdmaServer::serve(&s, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap();
        // Only the slow calls have short timeouts (their own): the other
        // calls keep a long one, so a loaded host cannot time them out
        // and add to the counts asserted below.
        let config = ClientConfig {
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        };
        let (c, t) = connect_client(rdma.local_addr(), config, RdmaClientConfig::default())
            .await
            .unwrap();
        // The server's grant first (one credit until the first reply).
        null(&c).await;
        let t0 = Instant::now();
        let e = slow(&c, 2000, Some(Duration::from_millis(100)))
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(100));
        // Ended at the deadline, not by the reply (2 s later).
        assert!(
            t0.elapsed() < Duration::from_millis(1900),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(c.metrics().timeouts, 1);
        // The late reply comes while the next calls run: dropped, not
        // mistaken for theirs.
        let end = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < end {
            null(&c).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(slow(&c, 5, Some(Duration::from_secs(10))).await.unwrap(), 5);
        assert!(t.closed_reason().is_none());
        // With a retransmission: two transmissions, then the timeout.
        let config = ClientConfig {
            timeout: Duration::from_secs(10),
            retries: 1,
            ..ClientConfig::default()
        };
        let (c2, t2) = connect_client(rdma.local_addr(), config, RdmaClientConfig::default())
            .await
            .unwrap();
        null(&c2).await;
        let before = c2.metrics().retransmits;
        let e = slow(&c2, 1000, Some(Duration::from_millis(60)))
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Timeout { attempts: 2, .. }), "{e}");
        assert_eq!(c2.metrics().retransmits - before, 1);
        null(&c2).await;
        t2.shutdown().await;
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// A call with a short timeout made after one with a long timeout ends
/// first: the driver watches the earliest deadline, not the first call's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_deadline_behind_a_longer_one_ends_first() {
    bounded(async {
        let s = server();
        let rdma = RdmaServer::serve(&s, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap();
        let (c, t) = connect_client(
            rdma.local_addr(),
            ClientConfig::default(),
            RdmaClientConfig::default(),
        )
        .await
        .unwrap();
        null(&c).await;
        let c = std::sync::Arc::new(c);
        let long = {
            let c = c.clone();
            tokio::spawn(async move {
                let r = slow(&c, 5000, Some(Duration::from_millis(3000))).await;
                (r, Instant::now())
            })
        };
        // Let the long call reach the driver first.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let short = slow(&c, 5000, Some(Duration::from_millis(100))).await;
        let short_end = Instant::now();
        let (long, long_end) = long.await.unwrap();
        assert!(matches!(short, Err(RpcError::Timeout { .. })), "{short:?}");
        assert!(matches!(long, Err(RpcError::Timeout { .. })), "{long:?}");
        assert!(short_end < long_end);
        null(&c).await;
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

/// While the driver reconnects (the server is gone) a call still ends at
/// its deadline, long before the reconnection attempts give up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_times_out_during_a_reconnection_outage() {
    bounded(async {
        let s = server();
        let rdma = RdmaServer::serve(&s, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap();
        let cfg = RdmaClientConfig {
            // About 20 s of attempts against a closed port.
            reconnect: Some(ReconnectPolicy {
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(200),
                max_attempts: 100,
            }),
            ..RdmaClientConfig::default()
        };
        let config = ClientConfig {
            timeout: Duration::from_millis(150),
            ..ClientConfig::default()
        };
        let (c, t) = connect_client(rdma.local_addr(), config, cfg)
            .await
            .unwrap();
        null(&c).await;
        rdma.shutdown().await;
        // Wait for the driver to see the loss (a call fails or times out).
        let t0 = Instant::now();
        let e = loop {
            let r = c
                .call(
                    testprog::TEST_PROG,
                    testprog::TEST_VERS,
                    0,
                    Message::new(),
                    &[],
                )
                .await;
            match r {
                Err(e @ RpcError::Timeout { .. }) => break e,
                Err(e) => panic!("not a timeout: {e}"),
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
        // A second call, surely during the outage.
        let t1 = Instant::now();
        let e = slow(&c, 1, None).await.unwrap_err();
        assert!(matches!(e, RpcError::Timeout { .. }), "{e}");
        assert!(t1.elapsed() < Duration::from_secs(10), "{:?}", t1.elapsed());
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        assert!(t.closed_reason().is_none(), "still reconnecting");
        drop(c);
        t.shutdown().await;
    })
    .await
}

/// The deadlines of the async client's calls (over RDMA in task mode and
/// over TCP) are watched without the runtime's timer (`rpcrdma`'s alarm
/// thread: no timer in tokio's wheel for every park to scan): a client on
/// a runtime whose time driver is off still ends a call at its deadline,
/// and its later calls work. (With tokio's timer, the first deadline
/// armed panics: "timers are disabled".)
#[test]
fn calls_time_out_on_a_runtime_without_timers() {
    // The server on a runtime of its own, with timers (its slow procedure
    // sleeps on them).
    let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = server();
            let rdma = RdmaServer::serve(&s, "127.0.0.1:0", RdmaServerConfig::default())
                .await
                .unwrap();
            let tcp = s
                .serve_tcp("127.0.0.1:0", rpcrdma::TcpConfig::default())
                .await
                .unwrap();
            addrs_tx
                .send((rdma.local_addr(), tcp.local_addr()))
                .unwrap();
            let _ = tokio::time::timeout(LIMIT, stop_rx).await;
            tcp.shutdown().await;
            rdma.shutdown().await;
        });
    });
    let (rdma_addr, tcp_addr) = addrs_rx.recv().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = ClientConfig {
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        };
        let (rdma, t) = connect_client(rdma_addr, config.clone(), RdmaClientConfig::default())
            .await
            .unwrap();
        let tcp = Client::connect_tcp(tcp_addr, config, rpcrdma::TcpConfig::default())
            .await
            .unwrap();
        for c in [&rdma, &tcp] {
            null(c).await;
            let t0 = Instant::now();
            let e = slow(c, 3000, Some(Duration::from_millis(100)))
                .await
                .unwrap_err();
            let took = t0.elapsed();
            assert!(matches!(e, RpcError::Timeout { attempts: 1, .. }), "{e}");
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(took < Duration::from_millis(2900), "{took:?}");
            assert_eq!(slow(c, 5, None).await.unwrap(), 5);
            null(c).await;
            assert_eq!(c.metrics().timeouts, 1);
        }
        tcp.close();
        t.shutdown().await;
    });
    stop_tx.send(()).unwrap();
    server.join().unwrap();
}
