//! An export: a directory on disk, its handle table and verifiers.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{open, Mode, OFlags};

use super::attr::{stat_fd, Attr, FileType, Wcc};
use super::error::{NfsError, NfsResult};
use super::handle::{FileHandle, HandleCodec};
use super::open_files::OpenFiles;
use super::resolve::open_child;
use super::table::{Obj, Table, ROOT};

/// The largest READ or WRITE (FSINFO `rtmax`/`wtmax`): 1 MiB.
pub const MAX_IO: u32 = 1 << 20;

/// Settings of an [`Export`].
#[derive(Debug, Clone)]
pub struct ExportConfig {
    /// Distinguishes this export's handles from another's in the same server.
    pub export_id: u32,
    /// The most objects the handle table holds (each known directory also
    /// holds one descriptor). Past it, operations that would mint a new
    /// handle fail with `ServerFault`.
    pub max_handles: usize,
    /// The most entries one READDIR / READDIRPLUS returns.
    pub max_dir_entries: usize,
    /// The most descriptors the open-file cache keeps for READ, WRITE and
    /// COMMIT (0: none; each call opens the file).
    pub open_files: usize,
    /// How long an unused cached descriptor stays open.
    pub open_file_idle: Duration,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            export_id: 1,
            max_handles: 1 << 20,
            max_dir_entries: 4096,
            open_files: 128,
            open_file_idle: Duration::from_secs(2),
        }
    }
}

/// A directory exported over NFSv3. Every operation is a synchronous
/// function named after its NFSv3 procedure; none resolves anything
/// outside the directory (see the module documentation).
pub struct Export {
    path: PathBuf,
    pub(crate) config: ExportConfig,
    pub(crate) codec: HandleCodec,
    pub(crate) table: Table,
    pub(crate) open: OpenFiles,
}

impl Export {
    /// Exports `dir` (opened once, here; it must be a directory).
    pub fn new(dir: impl AsRef<Path>, config: ExportConfig) -> NfsResult<Self> {
        let path = dir.as_ref().to_path_buf();
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let root = open(&path, flags, Mode::empty())?;
        Ok(Export {
            path,
            codec: HandleCodec::new(config.export_id),
            table: Table::new(root, config.max_handles)?,
            open: OpenFiles::new(config.open_files, config.open_file_idle),
            config,
        })
    }

    /// The directory as given to [`Export::new`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The handle of the export's root (what MOUNT returns).
    pub fn root(&self) -> FileHandle {
        self.codec.encode(ROOT)
    }

    /// How many objects the handle table knows.
    pub fn handle_count(&self) -> usize {
        self.table.len()
    }

    /// Closes the open-file cache's descriptors idle for
    /// [`ExportConfig::open_file_idle`]; returns how many it closed (a
    /// server calls this periodically).
    pub fn sweep_open_files(&self) -> usize {
        self.open.sweep(Instant::now())
    }

    /// How many descriptors the open-file cache holds.
    pub fn open_file_count(&self) -> usize {
        self.open.len()
    }

    /// The WRITE/COMMIT verifier: random per export instance, so it
    /// changes when the server restarts and clients resend uncommitted
    /// (UNSTABLE) data.
    pub fn write_verifier(&self) -> [u8; 8] {
        self.codec.instance().to_be_bytes()
    }

    /// The READDIR cookie verifier (see [`Export::readdir`]).
    pub fn cookie_verifier(&self) -> [u8; 8] {
        (!self.codec.instance()).to_be_bytes()
    }

    /// The object a handle names.
    pub(crate) fn obj(&self, fh: &FileHandle) -> NfsResult<Obj> {
        self.table.resolve(self.codec.decode(fh)?)
    }

    /// The directory a handle names; `NotDir` for anything else.
    pub(crate) fn dir(&self, fh: &FileHandle) -> NfsResult<Obj> {
        let o = self.obj(fh)?;
        match o.attr.ftype {
            FileType::Directory => Ok(o),
            _ => Err(NfsError::NotDir),
        }
    }

    /// Mints (or finds) the handle of `name` just reached below `dir`.
    pub(crate) fn child(
        &self,
        dir: &Obj,
        name: &[u8],
        fd: OwnedFd,
    ) -> NfsResult<(FileHandle, Attr)> {
        let (attr, ident) = stat_fd(&fd)?;
        if ident.dev != self.table.root_ident().dev {
            // A mount point inside the export: not crossed (knfsd shows
            // the covered directory; user space cannot, so we refuse).
            return Err(NfsError::Acces);
        }
        let id = self.table.intern(dir.id, name, fd, &attr, ident)?;
        Ok((self.codec.encode(id), attr))
    }

    /// Opens `name` below `dir` (`O_PATH`, no symlink followed) and mints
    /// its handle.
    pub(crate) fn lookup_plain(&self, dir: &Obj, name: &[u8]) -> NfsResult<(FileHandle, Attr)> {
        let fd = open_child(&*dir.fd, name, OFlags::PATH)?;
        self.child(dir, name, fd)
    }

    /// Fresh attributes after an operation (`None` if they cannot be read).
    pub(crate) fn after(&self, obj: &Obj) -> Wcc {
        Wcc {
            before: Some(obj.attr.wcc()),
            after: stat_fd(&*obj.fd).ok().map(|(a, _)| a),
        }
    }
}

impl Export {
    /// A real (not `O_PATH`) descriptor of a resolved object, opened the
    /// same confined way and checked to be the same object.
    pub(crate) fn reopen(&self, obj: &Obj, flags: OFlags) -> NfsResult<OwnedFd> {
        let fd = match &obj.link {
            Some((dir, name)) => {
                open_child(&**dir, name, flags | OFlags::NONBLOCK | OFlags::NOCTTY)?
            }
            None => open_child(&*obj.fd, b".", flags | OFlags::DIRECTORY)?,
        };
        let (_, ident) = stat_fd(&fd)?;
        if ident != obj.ident {
            return Err(NfsError::Stale);
        }
        Ok(fd)
    }
}
