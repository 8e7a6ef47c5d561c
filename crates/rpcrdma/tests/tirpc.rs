//! Interoperability with the C libtirpc peer of the lab baseline
//! (`shared/lab/baseline/tirpc/`: program 0x20049999 v1, NULL / ECHO
//! `opaque<>` / READ `unsigned` → `opaque<>` of 0x42 octets).
//!
//! The peer is built with `make` (rpcgen, cc, libtirpc-dev) from
//! `$RPCRDMA_TIRPC_SRC` or the usual `shared/` locations into a temporary
//! directory. When that is impossible the tests say so on stderr and
//! return without checking anything.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rpcrdma::{
    CallContext, Client, ClientConfig, HandlerError, Message, ReplyError, RpcError, Server,
    TcpConfig,
};

const BENCH_PROG: u32 = 0x2004_9999;
const BENCH_NULL: u32 = 0;
const BENCH_ECHO: u32 = 1;
const BENCH_READ: u32 = 2;

/// Builds the peer once per test process into a fixed directory under the
/// temporary directory (make rebuilds only what changed).
fn build_peer() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_peer_once).clone()
}

fn build_peer_once() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("RPCRDMA_TIRPC_SRC").map(PathBuf::from),
        Some(PathBuf::from("/work/shared/lab/baseline/tirpc")),
        Some(manifest.join("../../../shared/lab/baseline/tirpc")),
        Some(manifest.join("../../shared/lab/baseline/tirpc")),
    ];
    let src = candidates
        .into_iter()
        .flatten()
        .find(|p| p.join("bench.x").exists())?;
    let dir = std::env::temp_dir().join("rpcrdma-tirpc-peer");
    if make_in(&src, &dir) {
        return Some(dir);
    }
    // A stale or broken build directory: start afresh once.
    let _ = std::fs::remove_dir_all(&dir);
    make_in(&src, &dir).then_some(dir)
}

/// Copies the sources that changed (so that make stays incremental) and
/// runs make.
fn make_in(src: &std::path::Path, dir: &std::path::Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    for f in ["Makefile", "bench.x", "bench_server.c", "bench_client.c"] {
        let Ok(new) = std::fs::read(src.join(f)) else {
            return false;
        };
        if std::fs::read(dir.join(f)).ok().as_deref() != Some(&new[..])
            && std::fs::write(dir.join(f), &new).is_err()
        {
            return false;
        }
    }
    Command::new("make")
        .arg("-s")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peer_or_skip(test: &str) -> Option<PathBuf> {
    let p = build_peer();
    if p.is_none() {
        eprintln!("{test}: SKIPPED (libtirpc peer could not be built)");
    }
    p
}

#[tokio::test]
async fn our_client_against_libtirpc_server() {
    let Some(dir) = peer_or_skip("our_client_against_libtirpc_server") else {
        return;
    };
    let port = free_port();
    let _server = Kill(
        Command::new(dir.join("bench_server"))
            .arg(port.to_string())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    tokio::time::timeout(Duration::from_secs(30), async move {
        let mut c = None;
        for _ in 0..100 {
            if let Ok(x) =
                Client::connect_tcp(addr, ClientConfig::default(), TcpConfig::default()).await
            {
                c = Some(x);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let c = c.expect("libtirpc server listens");
        c.call(BENCH_PROG, 1, BENCH_NULL, Message::new(), &[])
            .await
            .unwrap()
            .reader()
            .finish("void")
            .unwrap();
        for n in [0usize, 1, 3, 4, 1024, 1 << 20] {
            let data: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
            let mut b = Message::builder();
            b.put_opaque(&data).unwrap();
            let r = c
                .call(BENCH_PROG, 1, BENCH_ECHO, b.finish(), &[])
                .await
                .unwrap();
            let mut rd = r.reader();
            assert_eq!(&rd.opaque(u32::MAX, "max", "echo").unwrap()[..], &data[..]);
            rd.finish("echo").unwrap();
        }
        let mut b = Message::builder();
        b.put_u32(300_000);
        let r = c
            .call(BENCH_PROG, 1, BENCH_READ, b.finish(), &[300_000])
            .await
            .unwrap();
        let got = r.reader().opaque(u32::MAX, "max", "read").unwrap();
        assert_eq!(got.len(), 300_000);
        assert!(got.iter().all(|&b| b == 0x42));
        // libtirpc's own error replies decode as ours.
        let e = c
            .call(BENCH_PROG, 1, 9, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::ProcUnavail));
        let e = c
            .call(BENCH_PROG, 7, 0, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(
            e,
            RpcError::Reply(ReplyError::ProgMismatch { low: 1, high: 1 })
        );
        let e = c
            .call(0x2004_9998, 1, 0, Message::new(), &[])
            .await
            .unwrap_err();
        assert_eq!(e, RpcError::Reply(ReplyError::ProgUnavail));
        // 16 calls in flight on one connection against libtirpc.
        let c = std::sync::Arc::new(c);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..16usize {
            let c = c.clone();
            set.spawn(async move {
                let mut b = Message::builder();
                b.put_opaque(&vec![i as u8; i * 1000]).unwrap();
                let r = c
                    .call(BENCH_PROG, 1, BENCH_ECHO, b.finish(), &[])
                    .await
                    .unwrap();
                let got = r.reader().opaque(u32::MAX, "max", "echo").unwrap();
                assert_eq!(got.len(), i * 1000);
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    })
    .await
    .unwrap();
}

async fn bench_handler(ctx: CallContext) -> Result<Message, HandlerError> {
    let mut r = ctx.reader();
    let mut b = Message::builder();
    match ctx.proc {
        BENCH_NULL => {}
        BENCH_ECHO => {
            let d = r.opaque(16 << 20, "max", "echo")?;
            b.put_opaque(&d).unwrap();
        }
        BENCH_READ => {
            let n = r.u32("count")?.min(16 << 20);
            b.put_ddp_opaque(vec![0x42u8; n as usize]).unwrap();
        }
        _ => return Err(HandlerError::ProcUnavail),
    }
    r.finish("args")?;
    Ok(b.finish())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libtirpc_client_against_our_server() {
    let Some(dir) = peer_or_skip("libtirpc_client_against_our_server") else {
        return;
    };
    let server = Server::default();
    server.register(BENCH_PROG, 1, bench_handler);
    let tcp = server
        .serve_tcp("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let port = tcp.local_addr().port();
    for (op, size) in [
        ("null", "0"),
        ("echo", "1000"),
        ("echo", "1048576"),
        ("read", "300000"),
    ] {
        let out = tokio::task::spawn_blocking({
            let exe = dir.join("bench_client");
            move || {
                Command::new(exe)
                    .args([&port.to_string(), op, size, "0.2"])
                    .output()
                    .unwrap()
            }
        });
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "bench_client {op} {size}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("\"calls\""), "{stdout}");
    }
    assert!(server.metrics().replies_sent > 4);
    tcp.shutdown().await;
}
