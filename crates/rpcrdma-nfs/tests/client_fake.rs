//! The NFSv3 client against a scripted server (`fake/`): hand-built
//! replies over the real runtime (NFS on the in-memory RDMA provider, so
//! the chunks are the engine's; MOUNT over TCP on 127.0.0.1).

mod fake;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fake::{rdma_config, Fake, Knobs, DIRVERF, ROOT};
use rpcrdma::rdma::{connect_client, RdmaClientTransport, RdmaServer};
use rpcrdma::ClientConfig;
use rpcrdma_nfs::client::{
    auth_sys, connect, parse_target, Blame, ConnectOptions, NfsClient, NfsClientOptions, NfsError,
    WriteSource, MAX_WRITE_PASSES,
};
use rpcrdma_nfs::nfs3::*;
use rpcrdma_proto::provider::mem_cm::MemNetwork;

const LIMIT: Duration = Duration::from_secs(60);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

struct Rig {
    fake: Arc<Fake>,
    server: RdmaServer,
    transport: Arc<RdmaClientTransport>,
    nfs: NfsClient,
}

impl Rig {
    async fn new(knobs: Knobs, opts: NfsClientOptions) -> Rig {
        let net = MemNetwork::new();
        let fake = Fake::new(knobs);
        let server = fake.serve_nfs(&net).await;
        let (rpc, transport) = connect_client(
            server.local_addr(),
            ClientConfig::default(),
            rdma_config(&net),
        )
        .await
        .unwrap();
        let nfs = NfsClient::new(rpc, FileHandle(ROOT.to_vec()), opts)
            .await
            .unwrap();
        Rig {
            fake,
            server,
            transport,
            nfs,
        }
    }

    async fn stop(self) {
        self.transport.shutdown().await;
        self.server.shutdown().await;
    }
}

fn opts() -> NfsClientOptions {
    NfsClientOptions {
        auth: auth_sys(1234, 5678),
        ..NfsClientOptions::default()
    }
}

async fn read_all(nfs: &NfsClient, name: &str) -> Result<Vec<u8>, NfsError> {
    let (fh, attrs) = nfs.lookup_path(name).await?;
    let mut out = Vec::new();
    let n = nfs
        .read_file(&fh, Some(attrs.size), |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .await?;
    assert_eq!(n as usize, out.len());
    Ok(out)
}

/// READ in `rtmax` pieces, `window` in flight, the data in order and
/// through Write chunks (one per READ that does not fit inline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_windowed_through_write_chunks() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            rtmax: 64 << 10,
            delay: Duration::from_millis(5),
            ..Knobs::default()
        };
        let rig = Rig::new(
            knobs,
            NfsClientOptions {
                window: 4,
                ..opts()
            },
        )
        .await;
        assert_eq!(rig.nfs.rsize(), 64 << 10, "clamped to the server's rtmax");
        let data = pattern((64 << 10) * 10 + 777, 1);
        rig.fake.put_file("f", data.clone());
        let got = read_all(&rig.nfs, "/f").await.unwrap();
        assert!(got == data, "data differs");
        let reads = rig.fake.count(NFSPROC3_READ);
        assert_eq!(reads, 11, "ten full READs and the last");
        let max = rig.fake.state.lock().unwrap().max_in_flight;
        assert!((2..=4).contains(&max), "in flight at once: {max}");
        let st = rig.transport.status();
        assert_eq!(st.engine.write_chunks, 11, "a Write chunk per READ");
        assert!(st.engine.write_chunk_bytes >= data.len() as u64);
        assert_eq!(
            rig.fake.state.lock().unwrap().last_cred,
            Some((1234, 5678)),
            "AUTH_SYS of the caller's choosing"
        );
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// Short READs without eof are continued where they stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_reads_are_continued() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            short_read: Some(10_000),
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let data = pattern(100_003, 2);
        rig.fake.put_file("f", data.clone());
        let got = read_all(&rig.nfs, "f").await.unwrap();
        assert!(got == data);
        assert_eq!(rig.fake.count(NFSPROC3_READ), 11);
        // An empty file: one READ, eof.
        rig.fake.put_file("empty", Vec::new());
        assert!(read_all(&rig.nfs, "empty").await.unwrap().is_empty());
        assert_eq!(
            rig.fake.count(NFSPROC3_READ),
            12,
            "one READ of an empty file"
        );
        // A file that grew past the size hint: read to its end anyway.
        rig.fake.put_file("grown", pattern(50_000, 3));
        let (fh, _) = rig.nfs.lookup_path("grown").await.unwrap();
        let mut got = Vec::new();
        rig.nfs
            .read_file(&fh, Some(20_000), |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .await
            .unwrap();
        assert!(got == pattern(50_000, 3));
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// A READ of 0 octets without eof, or whose count disagrees with its data,
/// is the server's fault — an error, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contradictory_reads_are_the_servers_fault() {
    tokio::time::timeout(LIMIT, async {
        for knobs in [
            Knobs {
                zero_read: true,
                ..Knobs::default()
            },
            Knobs {
                read_count_lies: true,
                ..Knobs::default()
            },
        ] {
            let rig = Rig::new(knobs.clone(), opts()).await;
            rig.fake.put_file("f", pattern(5000, 3));
            let e = read_all(&rig.nfs, "f").await.unwrap_err();
            assert_eq!(e.blame(), Blame::Server, "{knobs:?}: {e}");
            assert!(matches!(e, NfsError::BadReply { .. }), "{e}");
            rig.stop().await;
        }
    })
    .await
    .expect("timed out");
}

async fn put(nfs: &NfsClient, name: &str, data: &[u8]) -> rpcrdma_nfs::client::WriteSummary {
    let (fh, _) = nfs
        .create(
            nfs.root(),
            name.as_bytes(),
            Createhow3::Unchecked(Sattr3::none()),
        )
        .await
        .unwrap();
    let src: Arc<dyn WriteSource> = Arc::new(Bytes::copy_from_slice(data));
    let mut seen = Vec::new();
    let s = nfs
        .write_file(&fh, src, StableHow::UNSTABLE, |b| seen.extend_from_slice(b))
        .await
        .unwrap();
    assert!(seen == data, "observe saw the data once, in order");
    s
}

/// UNSTABLE WRITEs of `wsize`, a window of them, then one COMMIT; WRITE
/// data in Read chunks when the call does not fit inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_file_unstable_then_commit() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            wtmax: 32 << 10,
            delay: Duration::from_millis(5),
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let data = pattern((32 << 10) * 6 + 5, 4);
        let s = put(&rig.nfs, "out", &data).await;
        assert!(rig.fake.file("out").unwrap() == data);
        assert_eq!(
            rig.fake
                .state
                .lock()
                .unwrap()
                .stable
                .get(b"file:out".as_slice())
                .unwrap(),
            &data
        );
        assert_eq!(
            (s.writes, s.commits, s.passes, s.bytes),
            (7, 1, 1, data.len() as u64)
        );
        assert_eq!(s.verifier, Some(0u64.to_be_bytes()));
        let max = rig.fake.state.lock().unwrap().max_in_flight;
        assert!((2..=4).contains(&max), "in flight at once: {max}");
        let st = rig.transport.status();
        assert_eq!(
            st.engine.read_chunks, 6,
            "WRITE data in Read chunks (not the 5 octets)"
        );
        assert_eq!(st.engine.long_calls, 0);
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// The server "reboots" at the first COMMIT (new verifier, uncommitted
/// data lost): the client sends every UNSTABLE range again and commits
/// under the new verifier (RFC 1813 §3.3.21). A verifier that changes at
/// every WRITE ends in an error after MAX_WRITE_PASSES.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_write_verifier_resends() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            wtmax: 16 << 10,
            reboots_at_commit: 1,
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let data = pattern(100_000, 5);
        let s = put(&rig.nfs, "out", &data).await;
        assert!(rig.fake.file("out").unwrap() == data, "the resent data");
        assert_eq!((s.passes, s.commits), (2, 2));
        assert_eq!(s.writes, 14, "7 WRITEs, twice");
        assert_eq!(s.verifier, Some(1u64.to_be_bytes()));
        rig.stop().await;

        let knobs = Knobs {
            verifier_per_write: true,
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let (fh, _) = rig
            .nfs
            .create(rig.nfs.root(), b"x", Createhow3::Unchecked(Sattr3::none()))
            .await
            .unwrap();
        let src: Arc<dyn WriteSource> = Arc::new(Bytes::from(pattern(3 << 20, 6)));
        let e = rig
            .nfs
            .write_file(&fh, src, StableHow::UNSTABLE, |_| ())
            .await
            .unwrap_err();
        assert_eq!(e.blame(), Blame::Server, "{e}");
        assert!(e.to_string().contains("verifier"), "{e}");
        assert_eq!(
            rig.fake.count(NFSPROC3_WRITE),
            3 * MAX_WRITE_PASSES as usize
        );
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// Short WRITEs are continued; FILE_SYNC replies need no COMMIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_and_stable_writes() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            short_write: Some(3000),
            committed: StableHow::FILE_SYNC,
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let data = pattern(10_000, 7);
        let s = put(&rig.nfs, "out", &data).await;
        assert!(rig.fake.file("out").unwrap() == data);
        assert_eq!((s.writes, s.commits, s.verifier), (4, 0, None));
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// Without DDP-eligible WRITE data, a WRITE above the inline threshold is
/// a Long Call (RDMA_NOMSG, the whole call in a Position-Zero Read chunk);
/// a 3 KiB WRITE fits inline at the default 4 KiB threshold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_and_inline_writes() {
    tokio::time::timeout(LIMIT, async {
        let rig = Rig::new(
            Knobs::default(),
            NfsClientOptions {
                ddp_writes: false,
                ..opts()
            },
        )
        .await;
        let (fh, _) = rig
            .nfs
            .create(rig.nfs.root(), b"f", Createhow3::Unchecked(Sattr3::none()))
            .await
            .unwrap();
        let small = Bytes::from(pattern(3 << 10, 8));
        rig.nfs
            .write(&fh, 0, small.clone(), StableHow::FILE_SYNC)
            .await
            .unwrap();
        let st = rig.transport.status();
        assert_eq!(
            (st.engine.long_calls, st.engine.read_chunks),
            (0, 0),
            "3 KiB inline"
        );
        let big = Bytes::from(pattern(20 << 10, 9));
        rig.nfs
            .write(&fh, 0, big.clone(), StableHow::FILE_SYNC)
            .await
            .unwrap();
        let st = rig.transport.status();
        assert_eq!(st.engine.long_calls, 1, "20 KiB as a Long Call");
        assert!(rig.fake.file("f").unwrap() == big);
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// READDIRPLUS with cookies and the cookie verifier until eof; each reply
/// larger than the inline threshold comes in a Reply chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_dir_follows_cookies_to_eof() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            dir_entries: 1000,
            ..Knobs::default()
        };
        let rig = Rig::new(
            knobs,
            NfsClientOptions {
                dir_maxcount: 32 << 10,
                ..opts()
            },
        )
        .await;
        let entries = rig.nfs.list_dir(rig.nfs.root()).await.unwrap();
        assert_eq!(entries.len(), 1000);
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.name.0, format!("e{i:05}").into_bytes());
        }
        let calls = rig.fake.state.lock().unwrap().dir_calls.clone();
        assert!(calls.len() >= 4, "several calls: {}", calls.len());
        assert_eq!(calls[0], (0, [0; 8]), "cookie 0 and a zero verifier first");
        for &(c, v) in &calls[1..] {
            assert!(
                c > 0 && v == DIRVERF,
                "cookie {c} with the server's verifier"
            );
        }
        let st = rig.transport.status();
        assert_eq!(st.engine.reply_chunks as usize, calls.len());
        assert!(st.engine.long_replies >= calls.len() as u64 - 1);
        rig.stop().await;

        // A server that starts over whatever the cookie: caught.
        let knobs = Knobs {
            dir_entries: 1000,
            loop_cookie: true,
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let e = rig.nfs.list_dir(rig.nfs.root()).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Server, "{e}");
        assert!(e.to_string().contains("twice"), "{e}");
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// Status errors name the procedure, the path and the status; garbage
/// results are the server's fault; names are checked before sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_who_is_to_blame() {
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            garbage: Some(NFSPROC3_GETATTR),
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let e = rig.nfs.lookup_path("/missing/x").await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat3::NFS3ERR_NOENT));
        assert_eq!(e.blame(), Blame::Status);
        let text = e.to_string();
        assert!(
            text.contains("NFS3ERR_NOENT") && text.contains("LOOKUP") && text.contains("/missing"),
            "{text}"
        );

        let e = rig.nfs.getattr(rig.nfs.root()).await.unwrap_err();
        assert!(matches!(e, NfsError::BadReply { .. }), "{e}");
        assert_eq!(e.blame(), Blame::Server);

        let long = vec![b'a'; 256];
        let before = rig.fake.state.lock().unwrap().calls.len();
        let e = rig.nfs.lookup(rig.nfs.root(), &long).await.unwrap_err();
        assert_eq!(e.blame(), Blame::Caller, "{e}");
        let e = rig.nfs.lookup(rig.nfs.root(), b"a/b").await.unwrap_err();
        assert_eq!(e.blame(), Blame::Caller, "{e}");
        assert_eq!(
            rig.fake.state.lock().unwrap().calls.len(),
            before,
            "nothing sent"
        );

        // REMOVE of a missing name.
        let e = rig.nfs.remove(rig.nfs.root(), b"nope").await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat3::NFS3ERR_NOENT));
        rig.stop().await;
    })
    .await
    .expect("timed out");
}

/// The whole path: MOUNT over TCP (EXPORT, then MNT of the export holding
/// the path), NFS over RDMA, LOOKUP of the rest; a path under no export
/// is refused by MOUNT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_mounts_the_export_holding_the_path() {
    tokio::time::timeout(LIMIT, async {
        let net = MemNetwork::new();
        let fake = Fake::new(Knobs::default());
        fake.put_file("file", pattern(4096, 10));
        let nfs_srv = fake.serve_nfs(&net).await;
        let mount_srv = fake.serve_mount().await;
        let o = ConnectOptions {
            nfs_port: nfs_srv.local_addr().port(),
            mount_port: mount_srv.local_addr().port(),
            rdma: rdma_config(&net),
            timeout: Duration::from_secs(10),
            nfs: opts(),
        };
        let s = connect(&parse_target("127.0.0.1:/export/file").unwrap(), &o)
            .await
            .unwrap();
        assert_eq!((s.export.as_str(), s.rest.as_str()), ("/export", "file"));
        let got = read_all(&s.nfs, &s.rest).await.unwrap();
        assert!(got == pattern(4096, 10));
        s.close().await;

        let e = connect(&parse_target("127.0.0.1:/elsewhere/file").unwrap(), &o)
            .await
            .unwrap_err();
        assert!(matches!(e, NfsError::Mount { .. }), "{e}");
        assert_eq!(e.blame(), Blame::Status);

        // A MOUNT server that answers garbage: the server's fault.
        let e = connect(&parse_target("127.0.0.1:/garbage/x").unwrap(), &o)
            .await
            .unwrap_err();
        assert!(matches!(e, NfsError::BadReply { .. }), "{e}");
        assert_eq!(e.blame(), Blame::Server, "{e}");

        // Nobody at the MOUNT port: a transport error, at once.
        let o2 = ConnectOptions {
            mount_port: 1,
            ..o.clone()
        };
        let e = connect(&parse_target("127.0.0.1:/export").unwrap(), &o2)
            .await
            .unwrap_err();
        assert_eq!(e.blame(), Blame::Transport, "{e}");
        mount_srv.shutdown().await;
        nfs_srv.shutdown().await;
    })
    .await
    .expect("timed out");
}

/// The server goes away in the middle of a windowed READ and of a
/// windowed WRITE: each fails with a transport error (no reconnection
/// configured), promptly and without hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_mid_transfer_is_a_transport_error() {
    tokio::time::timeout(LIMIT, async {
        for write in [false, true] {
            let knobs = Knobs {
                rtmax: 64 << 10,
                wtmax: 64 << 10,
                delay: Duration::from_millis(20),
                ..Knobs::default()
            };
            let rig = Rig::new(knobs, opts()).await;
            rig.fake.put_file("f", pattern(4 << 20, 11));
            let (fh, attrs) = rig.nfs.lookup_path("f").await.unwrap();
            let nfs = rig.nfs.clone();
            let t0 = std::time::Instant::now();
            let job = tokio::spawn(async move {
                if write {
                    let src: Arc<dyn WriteSource> = Arc::new(Bytes::from(pattern(4 << 20, 12)));
                    nfs.write_file(&fh, src, StableHow::UNSTABLE, |_| ())
                        .await
                        .map(|s| s.bytes)
                } else {
                    nfs.read_file(&fh, Some(attrs.size), |_| Ok(())).await
                }
            });
            tokio::time::sleep(Duration::from_millis(150)).await;
            rig.server.shutdown().await;
            let e = job.await.unwrap().unwrap_err();
            assert_eq!(e.blame(), Blame::Transport, "write {write}: {e}");
            assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
            let done = rig
                .fake
                .count(if write { NFSPROC3_WRITE } else { NFSPROC3_READ });
            assert!(done < 64, "stopped mid-transfer: {done} of 64 calls");
            rig.transport.shutdown().await;
        }
    })
    .await
    .expect("timed out");
}

/// A source that copies into the buffer it is given and counts how often
/// that buffer is a recycled one (capacity from an earlier WRITE).
struct Counting {
    data: Vec<u8>,
    recycled: std::sync::atomic::AtomicUsize,
    reads: std::sync::atomic::AtomicUsize,
}

impl WriteSource for Counting {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
    fn read_at(&self, offset: u64, len: usize, mut buf: bytes::BytesMut) -> std::io::Result<Bytes> {
        use std::sync::atomic::Ordering::Relaxed;
        self.reads.fetch_add(1, Relaxed);
        if buf.capacity() >= len {
            self.recycled.fetch_add(1, Relaxed);
        }
        buf.clear();
        buf.extend_from_slice(&self.data[offset as usize..offset as usize + len]);
        Ok(buf.freeze())
    }
}

/// The buffers of finished WRITEs (in Read chunks) come back for the next
/// ones: after the first window, no allocation per WRITE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_buffers_are_recycled() {
    use std::sync::atomic::Ordering::Relaxed;
    tokio::time::timeout(LIMIT, async {
        let knobs = Knobs {
            wtmax: 64 << 10,
            ..Knobs::default()
        };
        let rig = Rig::new(knobs, opts()).await;
        let (fh, _) = rig
            .nfs
            .create(rig.nfs.root(), b"r", Createhow3::Unchecked(Sattr3::none()))
            .await
            .unwrap();
        let src = Arc::new(Counting {
            data: pattern(64 << 10 << 5, 13),
            recycled: Default::default(),
            reads: Default::default(),
        });
        let s = rig
            .nfs
            .write_file(&fh, src.clone(), StableHow::UNSTABLE, |_| ())
            .await
            .unwrap();
        assert_eq!(s.writes, 32);
        assert!(rig.fake.file("r").unwrap() == src.data);
        let (reads, recycled) = (src.reads.load(Relaxed), src.recycled.load(Relaxed));
        assert_eq!(reads, 32);
        eprintln!("{recycled} of {reads} WRITEs reused a buffer");
        assert!(
            recycled >= 24,
            "{recycled} of {reads} WRITEs reused a buffer"
        );
        rig.stop().await;
    })
    .await
    .expect("timed out");
}
