//! The client against the project's own server (`rpcrdma_nfs::server`):
//! MOUNT over TCP and NFSv3 over RPC-over-RDMA on loopback software
//! iWARP, a real directory exported, all in one process.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::rdma::{RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{Server, TcpConfig, TcpServer};
use rpcrdma_nfs::client::{
    connect, parse_target, Blame, ConnectOptions, NfsClientOptions, Session, WriteSource,
};
use rpcrdma_nfs::nfs3::{Createhow3, Ftype3, Nfsstat3, Sattr3, StableHow};
use rpcrdma_nfs::server::{NfsService, NfsServiceConfig};
use sha2::{Digest, Sha256};

const LIMIT: Duration = Duration::from_secs(120);

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn sha(b: &[u8]) -> Vec<u8> {
    Sha256::digest(b).to_vec()
}

struct Served {
    dir: PathBuf,
    rdma: RdmaServer,
    mount: TcpServer,
}

impl Served {
    async fn new() -> Served {
        Self::with(NfsServiceConfig::default()).await
    }

    async fn with(config: NfsServiceConfig) -> Served {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("rpcrdma-nfs-client-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let service = NfsService::new(&dir, config).unwrap();
        let nfs = Server::default();
        service.register_nfs(&nfs);
        let rdma = RdmaServer::serve(&nfs, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap();
        let m = Server::default();
        service.register_mount(&m);
        let mount = m
            .serve_tcp("127.0.0.1:0", TcpConfig::default())
            .await
            .unwrap();
        Served { dir, rdma, mount }
    }

    fn options(&self, nfs: NfsClientOptions, rdma: RdmaClientConfig) -> ConnectOptions {
        ConnectOptions {
            nfs_port: self.rdma.local_addr().port(),
            mount_port: self.mount.local_addr().port(),
            rdma: RdmaClientConfig {
                reconnect: None,
                ..rdma
            },
            timeout: Duration::from_secs(30),
            nfs,
        }
    }

    async fn session(&self, path: &str) -> Session {
        let o = self.options(NfsClientOptions::default(), RdmaClientConfig::default());
        connect(&parse_target(&format!("127.0.0.1:{path}")).unwrap(), &o)
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.mount.shutdown().await;
        self.rdma.shutdown().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn get(s: &Session, path: &str) -> (Vec<u8>, Vec<u8>) {
    let (fh, attrs) = s.nfs.lookup_path(path).await.unwrap();
    let mut out = Vec::new();
    let mut h = Sha256::new();
    s.nfs
        .read_file(&fh, Some(attrs.size), |b| {
            h.update(b);
            out.extend_from_slice(b);
            Ok(())
        })
        .await
        .unwrap();
    (out, h.finalize().to_vec())
}

async fn put(s: &Session, name: &str, data: Vec<u8>) -> Vec<u8> {
    let (fh, _) = s
        .nfs
        .create(
            s.nfs.root(),
            name.as_bytes(),
            Createhow3::Unchecked(Sattr3 {
                mode: Some(0o644),
                size: Some(0),
                ..Sattr3::none()
            }),
        )
        .await
        .unwrap();
    let src: Arc<dyn WriteSource> = Arc::new(Bytes::from(data));
    let mut h = Sha256::new();
    let sum = s
        .nfs
        .write_file(&fh, src, StableHow::UNSTABLE, |b| h.update(b))
        .await
        .unwrap();
    assert!(sum.commits >= 1, "UNSTABLE writes committed: {sum:?}");
    h.finalize().to_vec()
}

/// put then get of 16 MiB, bit-exact by sha256 both ways and on disk;
/// 1 MiB per READ / WRITE (the server's rtmax / wtmax), Write and Read
/// chunks; stat of the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_16_mib_bit_exact() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::new().await;
        let s = srv.session("/").await;
        assert_eq!((s.nfs.rsize(), s.nfs.wsize()), (1 << 20, 1 << 20));
        let data = pattern(16 << 20, 7);
        let want = sha(&data);
        assert_eq!(
            put(&s, "big", data.clone()).await,
            want,
            "digest of what was sent"
        );
        let on_disk = std::fs::read(srv.dir.join("big")).unwrap();
        assert_eq!(sha(&on_disk), want, "the server's file");
        let (got, digest) = get(&s, "big").await;
        assert_eq!(digest, want);
        assert!(got == data);
        let (_, attrs) = s.nfs.lookup_path("/big").await.unwrap();
        assert_eq!((attrs.ftype, attrs.size), (Ftype3::NF3REG, 16 << 20));
        let st = s.transport.status();
        assert_eq!(st.engine.write_chunks, 16, "one Write chunk per 1 MiB READ");
        assert_eq!(st.engine.read_chunks, 16, "one Read chunk per 1 MiB WRITE");
        assert_eq!(st.engine.write_chunk_bytes, 16 << 20);
        s.close().await;
        srv.stop().await;
    })
    .await
    .expect("timed out");
}

/// The same through the export's lane (file operations queued for one
/// blocking thread at a time, `io_queue_wait`), client and server on one
/// current-thread runtime as `scripts/bench-nfs` runs them: every WRITE
/// and READ answered with its own data, bit-exact.
#[tokio::test(flavor = "current_thread")]
async fn put_and_get_through_the_lane() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::with(NfsServiceConfig {
            io_queue_wait: Some(rpcrdma_nfs::server::IO_QUEUE_WAIT),
            ..NfsServiceConfig::default()
        })
        .await;
        let s = srv.session("/").await;
        let data = pattern(8 << 20, 11);
        let want = sha(&data);
        assert_eq!(put(&s, "laned", data.clone()).await, want);
        let on_disk = std::fs::read(srv.dir.join("laned")).unwrap();
        assert_eq!(sha(&on_disk), want, "the server's file");
        let (got, digest) = get(&s, "laned").await;
        assert_eq!(digest, want);
        assert!(got == data);
        s.close().await;
        srv.stop().await;
    })
    .await
    .expect("timed out");
}

/// ls of 1,000 entries: READDIRPLUS with cookies until eof, in Reply
/// chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_of_1000_entries() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::new().await;
        std::fs::create_dir(srv.dir.join("d")).unwrap();
        for i in 0..1000 {
            std::fs::write(srv.dir.join(format!("d/entry-{i:04}")), b"").unwrap();
        }
        let s = srv.session("/d").await;
        let (fh, attrs) = s.nfs.lookup_path(&s.rest).await.unwrap();
        assert_eq!(attrs.ftype, Ftype3::NF3DIR);
        let entries = s.nfs.list_dir(&fh).await.unwrap();
        let mut names: Vec<String> = entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name.0).into_owned())
            .filter(|n| n != "." && n != "..")
            .collect();
        names.sort();
        assert_eq!(names.len(), 1000);
        assert_eq!(names[0], "entry-0000");
        assert_eq!(names[999], "entry-0999");
        assert!(entries.iter().all(|e| e.name_handle.is_some()));
        let st = s.transport.status();
        assert!(st.engine.reply_chunks >= 2, "{}", st.mountstats());
        s.close().await;
        srv.stop().await;
    })
    .await
    .expect("timed out");
}

/// A WRITE above the inline threshold without DDP is a Long Call; with
/// DDP its data goes in a Read chunk; a CREATE with a 255-octet name
/// works, 256 is refused before sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_and_long_names() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::new().await;
        let data = pattern(3 << 10, 9);
        for (ddp, long_calls, read_chunks) in [(false, 1, 1), (true, 0, 1)] {
            let mut rdma = RdmaClientConfig::default();
            rdma.engine.inline_send = 1024;
            let o = srv.options(
                NfsClientOptions {
                    ddp_writes: ddp,
                    ..NfsClientOptions::default()
                },
                rdma,
            );
            let s = connect(&parse_target("127.0.0.1:/").unwrap(), &o)
                .await
                .unwrap();
            let name = format!("w3k-{ddp}");
            assert_eq!(put(&s, &name, data.clone()).await, sha(&data));
            assert_eq!(std::fs::read(srv.dir.join(&name)).unwrap(), data);
            let st = s.transport.status();
            assert_eq!(
                (st.engine.long_calls, st.engine.read_chunks),
                (long_calls, read_chunks),
                "ddp {ddp}: {}",
                st.mountstats()
            );
            s.close().await;
        }
        let s = srv.session("/").await;
        let long = "n".repeat(255);
        s.nfs
            .create(
                s.nfs.root(),
                long.as_bytes(),
                Createhow3::Unchecked(Sattr3::none()),
            )
            .await
            .unwrap();
        assert!(srv.dir.join(&long).exists());
        let e = s
            .nfs
            .create(
                s.nfs.root(),
                "n".repeat(256).as_bytes(),
                Createhow3::Unchecked(Sattr3::none()),
            )
            .await
            .unwrap_err();
        assert_eq!(e.blame(), Blame::Caller, "{e}");
        s.close().await;
        srv.stop().await;
    })
    .await
    .expect("timed out");
}

/// A missing path is NFS3ERR_NOENT named with the path; REMOVE removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_paths_and_remove() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::new().await;
        std::fs::write(srv.dir.join("f"), b"x").unwrap();
        let s = srv.session("/").await;
        let e = s.nfs.lookup_path("no/such").await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat3::NFS3ERR_NOENT), "{e}");
        assert!(e.to_string().contains("/no"), "{e}");
        s.nfs.remove(s.nfs.root(), b"f").await.unwrap();
        assert!(!srv.dir.join("f").exists());
        let e = s.nfs.remove(s.nfs.root(), b"f").await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat3::NFS3ERR_NOENT), "{e}");
        s.close().await;
        srv.stop().await;
    })
    .await
    .expect("timed out");
}

/// The server stops in the middle of a 16 MiB READ window over loopback
/// iWARP: the read fails with a transport error (no reconnection
/// configured), promptly, without a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_gone_mid_transfer() {
    tokio::time::timeout(LIMIT, async {
        let srv = Served::new().await;
        std::fs::write(srv.dir.join("big"), pattern(16 << 20, 3)).unwrap();
        let o = srv.options(
            NfsClientOptions {
                rsize: 64 << 10,
                ..NfsClientOptions::default()
            },
            RdmaClientConfig::default(),
        );
        let s = connect(&parse_target("127.0.0.1:/big").unwrap(), &o)
            .await
            .unwrap();
        let (fh, attrs) = s.nfs.lookup_path(&s.rest).await.unwrap();
        let nfs = s.nfs.clone();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = std::sync::Mutex::new(go_rx);
        let job = tokio::spawn(async move {
            let mut n = 0u64;
            nfs.read_file(&fh, Some(attrs.size), |b| {
                // The first data holds the transfer (its worker handed over)
                // until the server is gone: no race with a fast transfer.
                if n == 0 {
                    let _ = tx.try_send(());
                    tokio::task::block_in_place(|| go_rx.lock().unwrap().recv()).expect("go");
                }
                n += b.len() as u64;
                Ok(())
            })
            .await
            .map(|_| n)
        });
        rx.recv().await.expect("some data arrived");
        let t0 = std::time::Instant::now();
        srv.rdma.shutdown().await;
        go_tx.send(()).unwrap();
        let e = job.await.unwrap().unwrap_err();
        assert_eq!(e.blame(), Blame::Transport, "{e}");
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        s.transport.shutdown().await;
        srv.mount.shutdown().await;
        let _ = std::fs::remove_dir_all(&srv.dir);
    })
    .await
    .expect("timed out");
}
