//! The same RDMA transport over the in-memory provider pair (no sockets:
//! the driver runs on the provider's `arm` waker alone).

use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rpcrdma::rdma::{
    serve_provider, BoxProvider, Connected, LinkInfo, RdmaClientTransport, RdmaServerConnection,
};
use rpcrdma::testprog;
use rpcrdma::{Client, ClientConfig, ClientIdentity, Metrics, Server};
use rpcrdma_proto::engine::{Config, Connection};
use rpcrdma_proto::provider::mem::{self, MemConfig};
use rpcrdma_proto::provider::{
    Access, Buffer, Caps, Completion, ConnectionEvent, ConnectionInfo, ConnectionState,
    MemoryRegion, Notify, Provider, ProviderError, RecvWr, RegisterError, SendWr,
};

fn link(peer: &str) -> LinkInfo {
    LinkInfo {
        peer: peer.into(),
        ..LinkInfo::default()
    }
}

/// A test-program server on one end of an in-memory pair (receives posted
/// before accepting, as a server must) and a client transport on the other
/// end, its provider made by `client`.
fn serve_and_connect(
    client: impl FnOnce(mem::MemProvider) -> BoxProvider,
) -> (RdmaServerConnection, Arc<RdmaClientTransport>) {
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
            provider: client(a),
            info: link("mem-server"),
        },
        ccfg,
        None,
        None,
    );
    (srv, t)
}

#[tokio::test(flavor = "current_thread")]
async fn test_program_over_the_in_memory_provider() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (srv, t) = serve_and_connect(|a| Box::new(a));
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

/// A provider with a timer of its own (as the iWARP provider's Read RTR
/// nudges): it holds back its events and completions, and wakes nobody,
/// until `until`; it says so through `RdmaProvider::next_deadline`.
struct LateProvider {
    inner: mem::MemProvider,
    until: Instant,
}

impl LateProvider {
    fn holding(&self) -> bool {
        Instant::now() < self.until
    }
}

impl Provider for LateProvider {
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn connection_state(&self) -> ConnectionState {
        self.inner.connection_state()
    }
    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.inner.connection_info()
    }
    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        if self.holding() {
            return None;
        }
        self.inner.poll_event()
    }
    fn disconnect(&mut self) {
        self.inner.disconnect()
    }
    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.inner.register(buf, access)
    }
    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.inner.register_shared(buf, access)
    }
    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.inner.deregister(mr)
    }
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.inner.region(mr)
    }
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.inner.region_mut(mr)
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        self.inner.post_recv(wr)
    }
    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        self.inner.post_send(wr)
    }
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        if self.holding() {
            return 0;
        }
        self.inner.poll_completions(out)
    }
    fn arm(&mut self, waker: &Waker, notify: Notify) {
        // Until the deadline only the timer can bring work: nothing is
        // woken (the inner provider would wake at once for the event it
        // holds).
        if !self.holding() {
            self.inner.arm(waker, notify);
        }
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.holding().then_some(self.until)
    }
}

// The client's provider holds its Established event for 30 ms and wakes
// nobody meanwhile: only its deadline can get the call out. (Before the
// driver waited for provider deadlines, its 20 ms fallback tick found this
// work as a "lost wake-up"; without the tick and without the deadline the
// call waits for good.)
#[tokio::test(flavor = "current_thread")]
async fn the_driver_wakes_for_the_provider_deadline() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let until = Instant::now() + Duration::from_millis(30);
        let (srv, t) = serve_and_connect(|inner| Box::new(LateProvider { inner, until }));
        let c = Client::new(t.clone(), ClientConfig::default());
        testprog::null(&c).await.unwrap();
        assert_eq!(t.status().engine.calls_sent, 1);
        t.shutdown().await;
        srv.shutdown().await;
    })
    .await
    .expect("the call waited past the provider's deadline");
}

/// The runtime's own server and client over the in-memory provider chosen
/// by configuration: the acceptor thread runs the in-memory listener, the
/// client connects through the connection-manager contract (RFC 8797
/// private data both ways), and a server at its connection cap rejects
/// with a reject the client sees as `ConnectionRefused`. Runs without the
/// `iwarp` feature too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_and_client_over_the_in_memory_cm() {
    use rpcrdma::rdma::{
        connect_client, ProviderConfig, RdmaClientConfig, RdmaServer, RdmaServerConfig,
    };
    use rpcrdma_proto::provider::mem_cm::MemNetwork;
    tokio::time::timeout(Duration::from_secs(60), async {
        let net = MemNetwork::new();
        let server = Server::default();
        testprog::register(&server);
        let scfg = RdmaServerConfig {
            provider: ProviderConfig::Mem(net.clone()),
            max_connections: 1,
            ..RdmaServerConfig::default()
        };
        let rdma = RdmaServer::serve(&server, "127.0.0.1:0", scfg)
            .await
            .unwrap();
        let ccfg = || RdmaClientConfig {
            provider: ProviderConfig::Mem(net.clone()),
            reconnect: None,
            ..RdmaClientConfig::default()
        };
        let (c, t) = connect_client(rdma.local_addr(), ClientConfig::default(), ccfg())
            .await
            .unwrap();
        testprog::null(&c).await.unwrap();
        let d = testprog::read(&c, 100_000, 7).await.unwrap();
        assert_eq!(&d[..], &testprog::pattern(7, 100_000)[..]);
        let st = t.status();
        assert_eq!(st.credits, 64, "the server's grant, from its private data");
        assert_eq!(st.engine.write_chunks, 1);
        assert_eq!(st.link.peer, rdma.local_addr().to_string());
        assert!(
            !st.link.peer_private_data.is_empty(),
            "RFC 8797 private data"
        );
        // The cap is reached: the next connection is rejected.
        match connect_client(rdma.local_addr(), ClientConfig::default(), ccfg()).await {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
            Ok(_) => panic!("a second connection past max_connections = 1"),
        }
        assert_eq!(rdma.metrics().snapshot().connections_refused, 1);
        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
    .expect("timed out");
}
