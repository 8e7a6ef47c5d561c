//! The export's plain Rust types (`crate::fs`) to and from the NFSv3 XDR
//! types (`crate::nfs3`): one function per type, no logic beyond the
//! representation (times clamped to the wire's 32-bit seconds).

use crate::fs::{self, Attr, FileType, NfsError};
use crate::nfs3::{
    Fattr3, FileHandle, Ftype3, Nfsstat3, Nfstime3, PostOpAttr, Sattr3, SetTime, Specdata3,
    StableHow, WccAttr, WccData,
};

/// The `nfsstat3` of an export failure.
pub(crate) fn status(e: NfsError) -> Nfsstat3 {
    Nfsstat3(e.status())
}

/// A handle from a client as the export takes it (the XDR bounds it to
/// 64 octets, so `BadHandle` cannot happen here, but is mapped anyway).
pub(crate) fn fh_in(fh: &FileHandle) -> Result<fs::FileHandle, NfsError> {
    fs::FileHandle::from_bytes(fh.as_bytes())
}

/// A handle for the wire.
pub(crate) fn fh_out(fh: &fs::FileHandle) -> FileHandle {
    FileHandle(fh.as_bytes().to_vec())
}

/// `nfstime3`: seconds before 1970 are 0, after 2106 the largest value
/// (the wire's `uint32`).
pub(crate) fn time_out(t: fs::Time) -> Nfstime3 {
    Nfstime3 {
        seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: t.nanos,
    }
}

/// A client's `nfstime3`.
pub(crate) fn time_in(t: &Nfstime3) -> fs::Time {
    fs::Time {
        seconds: i64::from(t.seconds),
        nanos: t.nseconds,
    }
}

fn ftype(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::NF3REG,
        FileType::Directory => Ftype3::NF3DIR,
        FileType::Block => Ftype3::NF3BLK,
        FileType::Char => Ftype3::NF3CHR,
        FileType::Symlink => Ftype3::NF3LNK,
        FileType::Socket => Ftype3::NF3SOCK,
        FileType::Fifo => Ftype3::NF3FIFO,
    }
}

/// `fattr3`.
pub(crate) fn fattr(a: &Attr) -> Fattr3 {
    Fattr3 {
        ftype: ftype(a.ftype),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: Specdata3 {
            specdata1: a.rdev.0,
            specdata2: a.rdev.1,
        },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: time_out(a.atime),
        mtime: time_out(a.mtime),
        ctime: time_out(a.ctime),
    }
}

/// `post_op_attr` present.
pub(crate) fn post(a: &Attr) -> PostOpAttr {
    Some(fattr(a))
}

/// `wcc_data`.
pub(crate) fn wcc(w: &fs::Wcc) -> WccData {
    WccData {
        before: w.before.map(|b| WccAttr {
            size: b.size,
            mtime: time_out(b.mtime),
            ctime: time_out(b.ctime),
        }),
        after: w.after.as_ref().map(fattr),
    }
}

fn set_time(t: &SetTime) -> fs::SetTime {
    match t {
        SetTime::DontChange => fs::SetTime::DontChange,
        SetTime::ServerTime => fs::SetTime::ServerTime,
        SetTime::ClientTime(t) => fs::SetTime::ClientTime(time_in(t)),
    }
}

/// `sattr3` as the export's [`fs::SetAttr`].
pub(crate) fn sattr(s: &Sattr3) -> fs::SetAttr {
    fs::SetAttr {
        mode: s.mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: set_time(&s.atime),
        mtime: set_time(&s.mtime),
    }
}

/// `stable_how` in (the codec decodes it closed: only the three values).
pub(crate) fn stable_in(s: StableHow) -> fs::StableHow {
    match s {
        StableHow::FILE_SYNC => fs::StableHow::FileSync,
        StableHow::DATA_SYNC => fs::StableHow::DataSync,
        _ => fs::StableHow::Unstable,
    }
}

/// `stable_how` out.
pub(crate) fn stable_out(s: fs::StableHow) -> StableHow {
    match s {
        fs::StableHow::FileSync => StableHow::FILE_SYNC,
        fs::StableHow::DataSync => StableHow::DATA_SYNC,
        fs::StableHow::Unstable => StableHow::UNSTABLE,
    }
}
