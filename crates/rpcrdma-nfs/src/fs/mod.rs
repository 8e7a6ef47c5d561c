//! The server's file system side: an [`Export`] maps NFSv3 file handles
//! to objects in one directory on disk (DIR), and performs the NFSv3
//! procedures on them as synchronous functions with plain Rust types
//! (the XDR codecs live elsewhere and are wired one-to-one to these).
//!
//! # Handles
//! A [`FileHandle`] is 29 opaque octets: export id, a random server
//! instance, an entry id in the handle table and a keyed tag (see
//! `handle.rs`). Handles are stable for the life of the [`Export`]: the
//! same object always gets the same handle (hard links included), a
//! rename by a client keeps it, and a directory keeps it through any
//! rename because the table holds a descriptor of it. A handle of another
//! export or of an earlier server instance is `Stale`; a malformed or
//! forged one `BadHandle`; one whose object was removed `Stale`. Unlike
//! knfsd's (which encode the inode and survive a reboot), ours do not
//! survive a server restart: clients see `Stale` and remount.
//!
//! # Confinement
//! Nothing outside DIR is ever reached:
//! - every name from a client is one component: `/` or NUL → `Inval`,
//!   over 255 octets → `NameTooLong`;
//! - objects are opened with `openat(dir_fd, name, O_PATH | O_NOFOLLOW)`
//!   relative to the directory's own descriptor, never through a path
//!   re-walked from the root; a symlink is never followed (LOOKUP returns
//!   the symlink itself; READ, WRITE, SETATTR's size on it are `Inval`;
//!   CREATE over it is refused);
//! - `..` of the export root is the root (knfsd: "`..` == `.` just like
//!   at /");
//! - a directory handle is used only while the directory still hangs
//!   below DIR (a `..` walk; a directory a local process moved out is
//!   `Stale` until it comes back) and still exists;
//! - a non-directory is re-opened below its parent with `O_NOFOLLOW` and
//!   must be the same (device, inode, birth time), else `Stale`;
//! - mount points inside DIR are not crossed (`Acces`);
//! - SETATTR's mode goes through the object's own descriptor (`.` of a
//!   directory, `/proc/self/fd/N` of anything else), never a name that
//!   could have been swapped meanwhile; this needs /proc mounted.
//!
//! # Permissions
//! The export acts with the server process's own credentials. The
//! AUTH_SYS uid and gids of a call are reported by the RPC layer but not
//! enforced here: ACCESS answers what the server process may do
//! (`faccessat2(AT_EACCESS)`), and every operation succeeds or fails as
//! the process's own system call does. Run the server as a user that may
//! do no more than every client may. Unlike knfsd, the owner of a file
//! gets no override: a server that is not root cannot WRITE a file it
//! owns with mode 0444 (knfsd lets the owner write such a file, for
//! clients that create read-only files and then fill them).
//!
//! # Open files
//! READ, WRITE and COMMIT keep the file open between calls (a bounded
//! cache closed on idle, REMOVE, RENAME and SETATTR: `open_files.rs`).
//!
//! # Blocking
//! The operations do blocking file I/O; [`AsyncExport`] runs them on
//! tokio's blocking pool with a bound on how many run at once.

mod attr;
mod blocking;
mod error;
mod export;
mod handle;
mod open_files;
mod ops_attr;
mod ops_create;
mod ops_fs;
mod ops_io;
mod ops_lookup;
mod ops_read_file;
mod ops_remove;
mod readdir;
mod resolve;
mod table;

pub use attr::{Attr, FileType, SetAttr, SetTime, Time, Wcc, WccAttr};
pub use blocking::AsyncExport;
pub use error::{NfsError, NfsResult};
pub use export::{Export, ExportConfig, MAX_IO};
pub use handle::{FileHandle, MAX_HANDLE_LEN};
pub use ops_attr::{
    ACCESS_DELETE, ACCESS_EXECUTE, ACCESS_EXTEND, ACCESS_LOOKUP, ACCESS_MODIFY, ACCESS_READ,
};
pub use ops_create::{CreateHow, Created, MAX_PATH};
pub use ops_fs::{
    FsInfo, FsStat, PathConf, FSF_CANSETTIME, FSF_HOMOGENEOUS, FSF_LINK, FSF_SYMLINK,
};
pub use ops_io::{Commit, Read, ReadInto, StableHow, Write};
pub use ops_lookup::Lookup;
pub use ops_read_file::ReadRange;
pub use readdir::{DirEntry, DirEntryPlus, ReadDir};
pub use resolve::NAME_MAX;
