//! GETATTR, SETATTR, ACCESS.

use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::Timespec;
use rustix::fs::{
    accessat, chmodat, chownat, ftruncate, utimensat, Access, AtFlags, Gid, Mode, OFlags,
    Timestamps, Uid, CWD, UTIME_NOW, UTIME_OMIT,
};

use super::attr::{Attr, FileType, SetAttr, SetTime, Time, Wcc};
use super::error::{NfsError, NfsResult};
use super::export::Export;
use super::handle::FileHandle;
use super::table::Obj;

/// ACCESS3_READ: read data or list a directory.
pub const ACCESS_READ: u32 = 0x01;
/// ACCESS3_LOOKUP: look up a name in a directory.
pub const ACCESS_LOOKUP: u32 = 0x02;
/// ACCESS3_MODIFY: rewrite data or directory entries.
pub const ACCESS_MODIFY: u32 = 0x04;
/// ACCESS3_EXTEND: append data or add directory entries.
pub const ACCESS_EXTEND: u32 = 0x08;
/// ACCESS3_DELETE: remove a directory entry.
pub const ACCESS_DELETE: u32 = 0x10;
/// ACCESS3_EXECUTE: execute a file.
pub const ACCESS_EXECUTE: u32 = 0x20;

impl Export {
    /// GETATTR.
    pub fn getattr(&self, fh: &FileHandle) -> NfsResult<Attr> {
        Ok(self.obj(fh)?.attr)
    }

    /// SETATTR. `guard` is SETATTR's `sattrguard3`: when given, it must
    /// equal the object's ctime or nothing changes (`NotSync`); the whole
    /// time is compared (knfsd compares the seconds only). The size
    /// is changed first, then owner, then mode (so a mode sent with an
    /// owner keeps its set-id bits), then times. A mode on a symlink is
    /// ignored, as knfsd does.
    pub fn setattr(&self, fh: &FileHandle, set: &SetAttr, guard: Option<Time>) -> NfsResult<Wcc> {
        let obj = self.obj(fh)?;
        if guard.is_some_and(|g| g != obj.attr.ctime) {
            return Err(NfsError::NotSync);
        }
        // A mode or owner change decides who may open the file: the next
        // READ or WRITE opens it again.
        self.open.forget(obj.id);
        self.apply(&obj, set)?;
        Ok(self.after(&obj))
    }

    /// Applies `set` to a resolved object.
    pub(crate) fn apply(&self, obj: &Obj, set: &SetAttr) -> NfsResult<()> {
        if let Some(size) = set.size {
            match obj.attr.ftype {
                FileType::Regular => ftruncate(self.reopen(obj, OFlags::WRONLY)?, size)?,
                FileType::Directory => return Err(NfsError::IsDir),
                _ => return Err(NfsError::Inval),
            }
        }
        // An id of all ones is no id (chown's "leave it"; the host refuses
        // to name it): ignored, as knfsd ignores an id that does not map
        // (`uid_valid` in svcxdr_decode_sattr3).
        let uid = set.uid.filter(|&u| u != u32::MAX).map(Uid::from_raw);
        let gid = set.gid.filter(|&g| g != u32::MAX).map(Gid::from_raw);
        if uid.is_some() || gid.is_some() {
            chownat(&*obj.fd, "", uid, gid, AtFlags::EMPTY_PATH)?;
        }
        if let Some(mode) = set.mode {
            if obj.attr.ftype != FileType::Symlink {
                chmod(obj, mode)?;
            }
        }
        if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
            let times = Timestamps {
                last_access: timespec(set.atime),
                last_modification: timespec(set.mtime),
            };
            utimensat(&*obj.fd, "", &times, AtFlags::EMPTY_PATH)?;
        }
        Ok(())
    }

    /// ACCESS: which of the `mask` bits (`ACCESS_*`) the server process
    /// itself may exercise on the object. The caller's AUTH_SYS uid and
    /// gids are not used: the export grants exactly what the server
    /// process may do (see the module documentation).
    pub fn access(&self, fh: &FileHandle, mask: u32) -> NfsResult<(u32, Attr)> {
        let obj = self.obj(fh)?;
        let map: &[(u32, Access)] = match obj.attr.ftype {
            // knfsd's nfs3_diraccess / nfs3_regaccess / nfs3_anyaccess.
            FileType::Directory => &[
                (ACCESS_READ, Access::READ_OK),
                (ACCESS_LOOKUP, Access::EXEC_OK),
                (ACCESS_MODIFY, Access::EXEC_OK.union(Access::WRITE_OK)),
                (ACCESS_EXTEND, Access::EXEC_OK.union(Access::WRITE_OK)),
                (ACCESS_DELETE, Access::EXEC_OK.union(Access::WRITE_OK)),
            ],
            _ => &[
                (ACCESS_READ, Access::READ_OK),
                (ACCESS_EXECUTE, Access::EXEC_OK),
                (ACCESS_MODIFY, Access::WRITE_OK),
                (ACCESS_EXTEND, Access::WRITE_OK),
            ],
        };
        let mut granted = 0;
        for &(bit, want) in map {
            if mask & bit != 0 && may(&obj, want) {
                granted |= bit;
            }
        }
        Ok((granted, obj.attr))
    }
}

/// Whether the server process may access the object as `want`.
fn may(obj: &Obj, want: Access) -> bool {
    let flags = AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW;
    match &obj.link {
        Some((dir, name)) => {
            let name = std::ffi::OsStr::from_bytes(name);
            accessat(&**dir, name, want, flags).is_ok()
        }
        None => accessat(&*obj.fd, ".", want, AtFlags::EACCESS).is_ok(),
    }
}

/// chmod of exactly the resolved object: a directory through `.` below
/// its own descriptor, anything else through its `/proc/self/fd` link
/// (which names the open inode, not a path that could have been swapped;
/// `fchmod` refuses `O_PATH` descriptors).
fn chmod(obj: &Obj, mode: u32) -> NfsResult<()> {
    let mode = Mode::from_raw_mode(mode & 0o7777);
    if obj.link.is_none() {
        chmodat(&*obj.fd, ".", mode, AtFlags::empty())?;
    } else {
        let path = format!("/proc/self/fd/{}", obj.fd.as_raw_fd());
        chmodat(CWD, path, mode, AtFlags::empty())?;
    }
    Ok(())
}

fn timespec(t: SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        SetTime::ServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        SetTime::ClientTime(t) => Timespec {
            tv_sec: t.seconds,
            tv_nsec: i64::from(t.nanos.min(999_999_999)),
        },
    }
}
