//! An NFS server over loopback software iWARP in this process, its MOUNT
//! service over TCP, and a client of both: the real client
//! (`rpcrdma_nfs::client`) for whole-file work, and raw typed calls
//! (any arguments, any call options, any octets) for the rest.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::rdma::RdmaServerConfig;
use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaClientTransport, RdmaServer};
use rpcrdma::{CallOptions, Client, ClientConfig, Message, Reply, RpcError, Server, TcpConfig};
use rpcrdma_nfs::binding::message::{call_options, decode_res, encode_args};
use rpcrdma_nfs::client::{caller_auth_sys, MountClient, NfsClient, NfsClientOptions};
use rpcrdma_nfs::nfs3::*;
use rpcrdma_nfs::server::{NfsService, NfsServiceConfig};
use rpcrdma_nfs::Limits;

pub const LIMIT: Duration = Duration::from_secs(120);

/// Runs `f` with a time limit.
pub async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A scratch directory (`export/` served, `outside/` beside it), removed
/// on drop.
pub struct Dir {
    pub base: PathBuf,
}

impl Dir {
    pub fn new() -> Self {
        let base = std::env::temp_dir().join(format!(
            "rpcrdma-nfs-served-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret"), b"outside data").unwrap();
        Dir { base }
    }
    pub fn export(&self) -> PathBuf {
        self.base.join("export")
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.export().join(rel)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A running server and a connected client.
pub struct Served {
    pub dir: Dir,
    pub nfs: NfsService,
    pub rdma: RdmaServer,
    pub mount: rpcrdma::TcpServer,
    pub transport: Arc<RdmaClientTransport>,
    pub mnt: MountClient,
    pub root: FileHandle,
    pub client: NfsClient,
}

impl Served {
    pub async fn start() -> Served {
        Self::start_with(NfsServiceConfig::default(), RdmaServerConfig::default()).await
    }

    pub async fn start_with(config: NfsServiceConfig, rdma_config: RdmaServerConfig) -> Served {
        let dir = Dir::new();
        let nfs = NfsService::new(dir.export(), config).expect("export");
        let (rpc_rdma, rpc_tcp) = (Server::default(), Server::default());
        nfs.register_nfs(&rpc_rdma);
        nfs.register_mount(&rpc_tcp);
        let rdma = RdmaServer::serve(&rpc_rdma, "127.0.0.1:0", rdma_config)
            .await
            .expect("rdma listen");
        let mount = rpc_tcp
            .serve_tcp("127.0.0.1:0", TcpConfig::default())
            .await
            .expect("mount listen");
        let mnt = MountClient::connect(mount.local_addr(), caller_auth_sys(), LIMIT)
            .await
            .expect("mount connect");
        let root = mnt.mnt("/").await.expect("MNT /").fhandle;
        let (rpc, transport) = rdma_client(rdma.local_addr()).await;
        let client = NfsClient::new(rpc, root.clone(), NfsClientOptions::default())
            .await
            .expect("FSINFO");
        Served {
            dir,
            nfs,
            rdma,
            mount,
            transport,
            mnt,
            root,
            client,
        }
    }

    /// One NFSv3 call with the binding's chunk offers.
    pub async fn call(&self, args: &Nfs3Args) -> Nfs3Res {
        self.call_with(args, &call_options(args, &Limits::DEFAULT))
            .await
            .expect("call")
    }

    /// One NFSv3 call with the options given.
    pub async fn call_with(
        &self,
        args: &Nfs3Args,
        opts: &CallOptions,
    ) -> Result<Nfs3Res, RpcError> {
        let reply = self
            .raw_with(args.proc(), encode_args(args).unwrap(), opts)
            .await?;
        Ok(decode_res(args.proc(), reply.results(), &Limits::DEFAULT).expect("results decode"))
    }

    /// A call of `proc` (program NFS, version 3) with `args` as given.
    pub async fn raw(&self, proc: u32, args: impl Into<Bytes>) -> Result<Reply, RpcError> {
        let opts = CallOptions {
            reply_max: Some(64 << 10),
            ..CallOptions::default()
        };
        self.raw_with(proc, Message::inline(args.into()), &opts)
            .await
    }

    pub async fn raw_with(
        &self,
        proc: u32,
        args: Message,
        opts: &CallOptions,
    ) -> Result<Reply, RpcError> {
        self.rpc()
            .call_with(NFS_PROGRAM, NFS_V3, proc, args, opts)
            .await
    }

    /// The runtime client under the NFS client.
    pub fn rpc(&self) -> &Client {
        self.client.rpc()
    }

    /// LOOKUP of `name` in `dir`: the handle, or the status.
    pub async fn lookup(&self, dir: &FileHandle, name: &[u8]) -> Result<FileHandle, Nfsstat3> {
        let args = Nfs3Args::Lookup(LookupArgs {
            what: diropargs(dir, name),
        });
        match self.call(&args).await {
            Nfs3Res::Lookup(Res::Ok(ok)) => Ok(ok.object),
            Nfs3Res::Lookup(Res::Fail(s, _)) => Err(s),
            other => panic!("not a LOOKUP result: {other:?}"),
        }
    }

    /// The client transport's engine counters (the requester's side:
    /// chunks offered and used).
    pub fn engine(&self) -> rpcrdma_proto::engine::Metrics {
        self.transport.status().engine
    }
}

pub async fn rdma_client(addr: SocketAddr) -> (Client, Arc<RdmaClientTransport>) {
    let config = ClientConfig {
        auth: caller_auth_sys(),
        timeout: LIMIT,
        ..ClientConfig::default()
    };
    connect_client(addr, config, RdmaClientConfig::default())
        .await
        .expect("rdma connect")
}

pub fn diropargs(dir: &FileHandle, name: &[u8]) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Filename(name.to_vec()),
    }
}

/// XDR words.
pub fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// An `opaque<>` of `b` in XDR (length, data, pad).
pub fn opaque(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v.resize(v.len() + (4 - b.len() % 4) % 4, 0);
    v
}

/// `len` octets of a fixed pseudo-random pattern.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

pub fn read_local(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap()
}
