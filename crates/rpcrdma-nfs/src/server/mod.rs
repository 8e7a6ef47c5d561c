//! The NFSv3 server: the NFS program (100003 v3) and the MOUNT program
//! (100005 v3) as handlers of the `rpcrdma` runtime, over one [`Export`].
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use rpcrdma::rdma::{RdmaServer, RdmaServerConfig};
//! use rpcrdma::{Server, TcpConfig};
//! use rpcrdma_nfs::server::{NfsService, NfsServiceConfig};
//!
//! let nfs = NfsService::new("/srv/export", NfsServiceConfig::default())?;
//! let (rdma, tcp) = (Server::default(), Server::default());
//! nfs.register_nfs(&rdma);     // NFSv3 over RPC-over-RDMA
//! nfs.register_mount(&tcp);    // MOUNT v3 over TCP
//! let _rdma = RdmaServer::serve(&rdma, "127.0.0.1:20049", RdmaServerConfig::default()).await?;
//! let _mount = tcp.serve_tcp("127.0.0.1:20048", TcpConfig::default()).await?;
//! let _sweeper = nfs.spawn_sweeper();
//! # Ok(()) }
//! ```
//!
//! * [`nfs`](self): every procedure of RFC 1813 wired to the export
//!   (`procs.rs`), READDIR/READDIRPLUS trimmed to the reply's byte budget
//!   (`dirlist.rs`), the RFC 8267 binding on replies (READ data as a
//!   DDP-eligible piece);
//! * MOUNT v3 (`mount.rs`);
//! * counters and the credentials calls came with ([`StatsSnapshot`]).
//!
//! **Credentials.** AUTH_SYS uid/gid are decoded and reported
//! ([`NfsService::stats`]), never enforced: operations run with the server
//! process's own permissions (see [`crate::fs`], "Permissions"). Run the
//! server as a user that may do no more than every client may.
//!
//! **Duplicate requests.** The idempotent procedures (NULL, GETATTR,
//! LOOKUP, ACCESS, READLINK, READ, READDIR, READDIRPLUS, FSSTAT, FSINFO,
//! PATHCONF, COMMIT — Linux nfsd's `RC_NOCACHE` set) bypass the runtime's
//! duplicate-reply cache; the others' replies are cached, so a
//! retransmitted CREATE, REMOVE, RENAME or WRITE gets its first reply.

mod bufpool;
mod convert;
mod dirlist;
pub(crate) mod fuzz;
mod mount;
mod nfs;
mod procs;
mod stats;

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma::Server;

pub use mount::{MountEntry, MAX_MOUNTS};
pub use stats::{Credential, StatsSnapshot, MAX_CREDENTIALS};

use crate::fs::{AsyncExport, Export, ExportConfig};
use crate::mount::{MOUNT_PROGRAM, MOUNT_V3};
use crate::nfs3::{self, NFS_PROGRAM, NFS_V3};
use crate::Limits;

/// The procedures whose replies the duplicate-reply cache does not keep.
pub const UNCACHED: &[u32] = &[
    nfs3::NFSPROC3_NULL,
    nfs3::NFSPROC3_GETATTR,
    nfs3::NFSPROC3_LOOKUP,
    nfs3::NFSPROC3_ACCESS,
    nfs3::NFSPROC3_READLINK,
    nfs3::NFSPROC3_READ,
    nfs3::NFSPROC3_READDIR,
    nfs3::NFSPROC3_READDIRPLUS,
    nfs3::NFSPROC3_FSSTAT,
    nfs3::NFSPROC3_FSINFO,
    nfs3::NFSPROC3_PATHCONF,
    nfs3::NFSPROC3_COMMIT,
];

/// A bound for [`NfsServiceConfig::io_queue_wait`] when the lane is
/// wanted: several 1 MiB WRITEs into the page cache (~0.4 ms each on
/// tmpfs), below an fsync to a disk.
pub const IO_QUEUE_WAIT: Duration = Duration::from_millis(5);

/// Settings of an [`NfsService`].
#[derive(Clone, Debug)]
pub struct NfsServiceConfig {
    /// The export's settings (handle table, READDIR cap, open-file cache).
    pub export: ExportConfig,
    /// The limits on what clients send and what replies hold (FSINFO
    /// advertises `rtmax`/`wtmax` from here, at most 1 MiB).
    pub limits: Limits,
    /// The most file operations running at once on tokio's blocking pool
    /// (the rest wait without holding a thread).
    pub max_blocking: usize,
    /// File operations queue for the export's blocking threads, which run
    /// them one after the other; a queued operation waits about this long
    /// at most before another thread starts ([`AsyncExport`]: a slow
    /// fsync holds the others up by this much). `None` (the default): one
    /// hand-off to the blocking pool per operation.
    pub io_queue_wait: Option<Duration>,
    /// How often [`NfsService::spawn_sweeper`] closes idle cached files.
    pub sweep_every: Duration,
}

impl Default for NfsServiceConfig {
    fn default() -> Self {
        NfsServiceConfig {
            export: ExportConfig::default(),
            limits: Limits::DEFAULT,
            max_blocking: 64,
            io_queue_wait: None,
            sweep_every: Duration::from_secs(1),
        }
    }
}

/// One exported directory, served as NFSv3 and MOUNT v3.
#[derive(Clone)]
pub struct NfsService {
    export: AsyncExport,
    dir: Vec<u8>,
    limits: Limits,
    sweep_every: Duration,
    stats: Arc<stats::Stats>,
    mounts: Arc<Mutex<VecDeque<MountEntry>>>,
    bufs: Arc<bufpool::BufPool>,
}

impl std::fmt::Debug for NfsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NfsService")
            .field("dir", &String::from_utf8_lossy(&self.dir))
            .finish()
    }
}

impl NfsService {
    /// Exports `dir` (which must be a directory). Clients mount `/` or
    /// its absolute path (resolved here).
    pub fn new(dir: impl AsRef<Path>, config: NfsServiceConfig) -> io::Result<Self> {
        let abs = std::fs::canonicalize(dir.as_ref())?;
        let export = Export::new(&abs, config.export)
            .map_err(|e| io::Error::other(format!("{}: {e}", abs.display())))?;
        use std::os::unix::ffi::OsStrExt;
        Ok(NfsService {
            export: AsyncExport::new(Arc::new(export), config.max_blocking, config.io_queue_wait),
            dir: abs.as_os_str().as_bytes().to_vec(),
            limits: config.limits,
            sweep_every: config.sweep_every,
            stats: Arc::default(),
            mounts: Arc::default(),
            // One READ buffer per call in flight, up to 32 kept idle.
            bufs: bufpool::BufPool::new(config.limits.rtmax.min(crate::fs::MAX_IO) as usize, 32),
        })
    }

    /// The export.
    pub fn export(&self) -> &Arc<Export> {
        self.export.export()
    }

    /// Registers NFS version 3 with `server` (its other versions get
    /// PROG_MISMATCH), the idempotent procedures ([`UNCACHED`]) outside
    /// the duplicate-reply cache.
    pub fn register_nfs(&self, server: &Server) {
        server.register(
            NFS_PROGRAM,
            NFS_V3,
            nfs::Nfs3Handler {
                export: self.export.clone(),
                limits: self.limits,
                stats: self.stats.clone(),
                bufs: self.bufs.clone(),
            },
        );
        server.set_uncached(NFS_PROGRAM, NFS_V3, UNCACHED);
    }

    /// Registers MOUNT version 3 with `server` (meant for ONC RPC over
    /// TCP). Its replies are small and idempotent: none is cached.
    pub fn register_mount(&self, server: &Server) {
        server.register(
            MOUNT_PROGRAM,
            MOUNT_V3,
            mount::MountHandler {
                export: self.export.clone(),
                dir: self.dir.clone(),
                limits: self.limits,
                mounts: self.mounts.clone(),
            },
        );
        server.set_uncached(MOUNT_PROGRAM, MOUNT_V3, &[0, 1, 2, 3, 4, 5]);
    }

    /// The counters and credentials so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Who has mounted what (MNT not yet followed by UMNT).
    pub fn mounts(&self) -> Vec<MountEntry> {
        let m = self.mounts.lock().unwrap_or_else(|p| p.into_inner());
        m.iter().cloned().collect()
    }

    /// A task that closes idle cached files every
    /// [`NfsServiceConfig::sweep_every`] (on the blocking pool); it ends
    /// when every clone of this service is dropped.
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self.export.export());
        let every = self.sweep_every.max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(e) = weak.upgrade() else { return };
                // Closing files can block (a final close flushes).
                let _ = tokio::task::spawn_blocking(move || e.sweep_open_files()).await;
            }
        })
    }
}
