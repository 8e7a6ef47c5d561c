//! CREATE, MKDIR, SYMLINK.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{fchmod, mkdirat, symlinkat, Mode, OFlags};

use super::attr::{stat_fd, Attr, FileType, SetAttr, SetTime, Time, Wcc};
use super::error::{NfsError, NfsResult};
use super::export::Export;
use super::handle::FileHandle;
use super::resolve::{open_child, plain_name};
use super::table::Obj;

/// The longest symlink target accepted (the bound on paths).
pub const MAX_PATH: usize = 1024;

/// `createhow3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow {
    /// UNCHECKED: create, or if a regular file of that name exists, use it
    /// (only `size` of the attributes is applied to it, as knfsd does).
    Unchecked(SetAttr),
    /// GUARDED: create; `Exist` if the name exists.
    Guarded(SetAttr),
    /// EXCLUSIVE: create once per verifier. The verifier is kept in the
    /// file's mtime and atime seconds (knfsd's scheme); a retransmission
    /// with the same verifier finds the file and succeeds, another
    /// verifier gets `Exist`. The client then sets the real attributes
    /// with SETATTR.
    Exclusive([u8; 8]),
}

/// The result of CREATE, MKDIR and SYMLINK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The new object's handle.
    pub handle: FileHandle,
    /// Its attributes (after the requested ones were applied).
    pub attr: Attr,
    /// The directory before and after.
    pub dir_wcc: Wcc,
}

/// The verifier as (mtime, atime) seconds: each half with the top bit
/// cleared, as knfsd stores it (`nfsd3_proc_create`), so it survives
/// 32-bit time on the wire.
fn verifier_times(v: [u8; 8]) -> (i64, i64) {
    let hi = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) & 0x7fff_ffff;
    let lo = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & 0x7fff_ffff;
    (i64::from(hi), i64::from(lo))
}

impl Export {
    /// CREATE of a regular file. Modes are set exactly as asked (the
    /// server's umask does not apply); without one the file gets mode 0,
    /// as with knfsd (clients send one).
    pub fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow) -> NfsResult<Created> {
        let d = self.dir(dir)?;
        let name = plain_name(name, NfsError::Exist)?;
        let excl = OFlags::CREATE | OFlags::EXCL | OFlags::RDONLY;
        let (set, opened) = match how {
            CreateHow::Guarded(set) => (set, open_child(&*d.fd, name, excl)?),
            CreateHow::Unchecked(set) => match open_child(&*d.fd, name, excl) {
                Err(NfsError::Exist) => return self.create_existing(&d, name, set),
                other => (set, other?),
            },
            CreateHow::Exclusive(verf) => {
                let (mtime, atime) = verifier_times(verf);
                let set = SetAttr {
                    atime: SetTime::ClientTime(Time {
                        seconds: atime,
                        nanos: 0,
                    }),
                    mtime: SetTime::ClientTime(Time {
                        seconds: mtime,
                        nanos: 0,
                    }),
                    ..SetAttr::default()
                };
                match open_child(&*d.fd, name, excl) {
                    Err(NfsError::Exist) => return self.exclusive_retry(&d, name, mtime, atime),
                    other => (set, other?),
                }
            }
        };
        fchmod(&opened, Mode::from_raw_mode(set.mode.unwrap_or(0) & 0o7777))?;
        self.finish(&d, name, &opened, SetAttr { mode: None, ..set })
    }

    fn create_existing(&self, d: &Obj, name: &[u8], set: SetAttr) -> NfsResult<Created> {
        let (handle, _) = self.lookup_plain(d, name)?;
        let obj = self.obj(&handle)?;
        if obj.attr.ftype != FileType::Regular {
            return Err(NfsError::Exist);
        }
        let only_size = SetAttr {
            size: set.size,
            ..SetAttr::default()
        };
        self.apply(&obj, &only_size)?;
        self.created(d, handle)
    }

    fn exclusive_retry(&self, d: &Obj, name: &[u8], mtime: i64, atime: i64) -> NfsResult<Created> {
        let (handle, attr) = self.lookup_plain(d, name)?;
        let same = attr.ftype == FileType::Regular
            && attr.mtime.seconds == mtime
            && attr.atime.seconds == atime
            && attr.size == 0;
        if !same {
            return Err(NfsError::Exist);
        }
        self.created(d, handle)
    }

    /// MKDIR. As for CREATE, the mode is set exactly (0 if not given).
    pub fn mkdir(&self, dir: &FileHandle, name: &[u8], set: &SetAttr) -> NfsResult<Created> {
        let d = self.dir(dir)?;
        let name = plain_name(name, NfsError::Exist)?;
        mkdirat(&*d.fd, OsStr::from_bytes(name), Mode::empty())?;
        let fd = open_child(&*d.fd, name, OFlags::PATH | OFlags::DIRECTORY)?;
        let set = SetAttr {
            mode: Some(set.mode.unwrap_or(0)),
            size: None,
            ..*set
        };
        self.finish(&d, name, &fd, set)
    }

    /// SYMLINK: `target` is stored as given (it may point anywhere: it is
    /// never followed by the server). An empty target is `NoEnt` (knfsd);
    /// one with NUL is `Inval`; longer than [`MAX_PATH`] `NameTooLong`.
    /// A mode is ignored (symlinks have none on Linux).
    pub fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> NfsResult<Created> {
        let d = self.dir(dir)?;
        let name = plain_name(name, NfsError::Exist)?;
        if target.is_empty() {
            return Err(NfsError::NoEnt);
        }
        if target.contains(&0) {
            return Err(NfsError::Inval);
        }
        if target.len() > MAX_PATH {
            return Err(NfsError::NameTooLong);
        }
        symlinkat(OsStr::from_bytes(target), &*d.fd, OsStr::from_bytes(name))?;
        let fd = open_child(&*d.fd, name, OFlags::PATH)?;
        let set = SetAttr {
            mode: None,
            size: None,
            ..*set
        };
        self.finish(&d, name, &fd, set)
    }

    /// Registers a just-created object (checked to be the one `opened`
    /// refers to) and applies the remaining attributes.
    fn finish(&self, d: &Obj, name: &[u8], opened: &OwnedFd, set: SetAttr) -> NfsResult<Created> {
        let (_, made) = stat_fd(opened)?;
        let (handle, _) = self.lookup_plain(d, name)?;
        let obj = self.obj(&handle)?;
        if obj.ident != made {
            // Replaced between creation and lookup.
            return Err(NfsError::Stale);
        }
        self.apply(&obj, &set)?;
        self.created(d, handle)
    }

    fn created(&self, d: &Obj, handle: FileHandle) -> NfsResult<Created> {
        let attr = self.obj(&handle)?.attr;
        Ok(Created {
            handle,
            attr,
            dir_wcc: self.after(d),
        })
    }
}
