//! Attributes in plain Rust types (`fattr3`, `wcc_data`, `sattr3` of
//! RFC 1813 §2.6 without XDR), read with `statx` on a descriptor.

use std::os::fd::AsFd;

use rustix::fs::{makedev, statx, AtFlags, FileType as HostType, StatxFlags, StatxTimestamp};

use super::error::NfsResult;

/// A point in time: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time {
    /// Seconds since 1970-01-01 UTC (`nfstime3.seconds` is unsigned
    /// 32-bit: the codec clamps).
    pub seconds: i64,
    /// Nanoseconds, below 1,000,000,000.
    pub nanos: u32,
}

impl From<StatxTimestamp> for Time {
    fn from(t: StatxTimestamp) -> Self {
        Time {
            seconds: t.tv_sec,
            nanos: t.tv_nsec,
        }
    }
}

/// `ftype3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// NF3REG.
    Regular,
    /// NF3DIR.
    Directory,
    /// NF3BLK.
    Block,
    /// NF3CHR.
    Char,
    /// NF3LNK.
    Symlink,
    /// NF3SOCK.
    Socket,
    /// NF3FIFO.
    Fifo,
}

impl FileType {
    fn from_mode(mode: u32) -> Self {
        match HostType::from_raw_mode(mode) {
            HostType::Directory => FileType::Directory,
            HostType::Symlink => FileType::Symlink,
            HostType::BlockDevice => FileType::Block,
            HostType::CharacterDevice => FileType::Char,
            HostType::Socket => FileType::Socket,
            HostType::Fifo => FileType::Fifo,
            _ => FileType::Regular,
        }
    }
}

/// `fattr3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// The object's type.
    pub ftype: FileType,
    /// Permission bits, set-id and sticky bits (the low 12 bits of st_mode).
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in octets.
    pub size: u64,
    /// Octets of storage used (st_blocks × 512).
    pub used: u64,
    /// Device numbers (major, minor) of a block or character device.
    pub rdev: (u32, u32),
    /// The file system: the host device number (`st_dev`) of the export.
    pub fsid: u64,
    /// The inode number.
    pub fileid: u64,
    /// Last access.
    pub atime: Time,
    /// Last data modification.
    pub mtime: Time,
    /// Last attribute change.
    pub ctime: Time,
}

impl Attr {
    /// The pre-operation part of weak cache consistency data.
    pub fn wcc(&self) -> WccAttr {
        WccAttr {
            size: self.size,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }
}

/// `wcc_attr`: what the client compares to detect changes it did not make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WccAttr {
    /// Size before the operation.
    pub size: u64,
    /// mtime before the operation.
    pub mtime: Time,
    /// ctime before the operation.
    pub ctime: Time,
}

/// `wcc_data`: attributes of a modified object before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wcc {
    /// Before the operation (absent if they could not be read).
    pub before: Option<WccAttr>,
    /// After the operation.
    pub after: Option<Attr>,
}

/// How SETATTR (and CREATE, MKDIR, SYMLINK) sets a time (`set_atime`,
/// `set_mtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// DONT_CHANGE.
    #[default]
    DontChange,
    /// SET_TO_SERVER_TIME.
    ServerTime,
    /// SET_TO_CLIENT_TIME.
    ClientTime(Time),
}

/// `sattr3`: the attributes to change; `None` leaves one alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// New permission bits (the low 12 bits are used).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only).
    pub size: Option<u64>,
    /// New access time.
    pub atime: SetTime,
    /// New modification time.
    pub mtime: SetTime,
}

/// What identifies an object on the host: device, inode and, where the
/// file system records it, the birth time (which tells a reused inode
/// number from the file that had it, the role of knfsd's generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Ident {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) btime: Option<Time>,
}

/// The attributes of the object a descriptor (an `O_PATH` one will do)
/// refers to, and its identity.
pub(crate) fn stat_fd<Fd: AsFd>(fd: Fd) -> NfsResult<(Attr, Ident)> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
    let s = statx(fd, "", AtFlags::EMPTY_PATH, want)?;
    let mode = u32::from(s.stx_mode);
    let dev = makedev(s.stx_dev_major, s.stx_dev_minor);
    let btime = (s.stx_mask & StatxFlags::BTIME.bits() != 0).then(|| s.stx_btime.into());
    let attr = Attr {
        ftype: FileType::from_mode(mode),
        mode: mode & 0o7777,
        nlink: s.stx_nlink,
        uid: s.stx_uid,
        gid: s.stx_gid,
        size: s.stx_size,
        used: s.stx_blocks.saturating_mul(512),
        rdev: (s.stx_rdev_major, s.stx_rdev_minor),
        fsid: dev,
        fileid: s.stx_ino,
        atime: s.stx_atime.into(),
        mtime: s.stx_mtime.into(),
        ctime: s.stx_ctime.into(),
    };
    let ident = Ident {
        dev,
        ino: s.stx_ino,
        btime,
    };
    Ok((attr, ident))
}
