//! The same RDMA transport over the in-memory provider pair (no sockets:
//! the driver runs on the provider's `arm` waker alone).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::rdma::{serve_provider, Connected, LinkInfo, RdmaClientTransport};
use rpcrdma::testprog;
use rpcrdma::{Client, ClientConfig, ClientIdentity, Metrics, Server};
use rpcrdma_proto::engine::{Config, Connection};
use rpcrdma_proto::provider::mem::{self, MemConfig};
use rpcrdma_proto::provider::{ConnectionEvent, Provider};

fn link(peer: &str) -> LinkInfo {
    LinkInfo {
        peer: peer.into(),
        ..LinkInfo::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn test_program_over_the_in_memory_provider() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let ccfg = Config::client();
        let scfg = Config::server();
        let (mut a, mut b) = mem::pair(MemConfig::DEFAULT);
        a.connect(ccfg.connect_params()).unwrap();
        assert!(matches!(
            b.poll_event(),
            Some(ConnectionEvent::ConnectRequest { .. })
        ));
        let mut sconn = Connection::new(scfg.clone());
        sconn.prepare_receives(&mut b);
        b.accept(scfg.connect_params()).unwrap();

        let server = Server::default();
        testprog::register(&server);
        let srv = serve_provider(
            Connected {
                provider: Box::new(b),
                info: link("mem-client"),
            },
            sconn,
            scfg,
            server.dispatcher(),
            ClientIdentity(Bytes::from_static(b"mem-client")),
            Arc::new(Metrics::default()),
        );
        let t = RdmaClientTransport::from_connected(
            Connected {
                provider: Box::new(a),
                info: link("mem-server"),
            },
            ccfg,
            None,
            None,
        );
        let c = Client::new(t.clone(), ClientConfig::default());
        let cb = Server::default();
        testprog::register_cb(&cb);
        c.serve_backchannel(&cb).unwrap();

        testprog::null(&c).await.unwrap();
        // The test program states each procedure's largest reply, so a
        // NULL call offers no Reply chunk (nothing to register or
        // invalidate); only a reply that may exceed 4 KiB gets one.
        assert_eq!(t.status().engine.reply_chunks, 0);
        let big = testprog::pattern(5, 9000);
        assert_eq!(&testprog::echo(&c, &big).await.unwrap()[..], &big[..]);
        let d = testprog::read(&c, 200_001, 8).await.unwrap();
        assert_eq!(&d[..], &testprog::pattern(8, 200_001)[..]);
        let w = testprog::pattern(4, 300_000);
        assert_eq!(
            testprog::write(&c, &w).await.unwrap(),
            (300_000, crc32c::crc32c(&w))
        );
        let e = t.status().engine;
        // Only ECHO 9000 needed a Reply chunk; READ's reply apart from its
        // Write chunk, and WRITE's, fit inline.
        assert_eq!(e.reply_chunks, 1);
        // Read chunks: the Long Call's Position-Zero chunk and WRITE's data.
        assert_eq!(
            (e.long_calls, e.long_replies, e.write_chunks, e.read_chunks),
            (1, 1, 1, 2)
        );
        assert_eq!(t.status().credits, 64);
        let s = srv.status().engine;
        assert_eq!((s.calls_received, s.replies_sent), (4, 4));
        t.shutdown().await;
        srv.shutdown().await;
    })
    .await
    .expect("bounded");
}
