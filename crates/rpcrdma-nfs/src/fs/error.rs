//! The failures of the export's operations, one variant per `nfsstat3`
//! value (RFC 1813 §2.6), and the mapping from host errors (errno).

use rustix::io::Errno;

/// Why an operation failed. Each variant is one `nfsstat3` value; its
/// discriminant is the number on the wire ([`NfsError::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NfsError {
    /// NFS3ERR_PERM: not owner; the operation needs privilege.
    Perm = 1,
    /// NFS3ERR_NOENT: no such file or directory.
    NoEnt = 2,
    /// NFS3ERR_IO: a hard error happened while the server did the operation.
    Io = 5,
    /// NFS3ERR_NXIO: no such device or address.
    NxIo = 6,
    /// NFS3ERR_ACCES: permission denied (also: a name or handle that would
    /// lead outside the export).
    Acces = 13,
    /// NFS3ERR_EXIST: the target already exists.
    Exist = 17,
    /// NFS3ERR_XDEV: a hard link or rename across file systems.
    XDev = 18,
    /// NFS3ERR_NODEV: no such device.
    NoDev = 19,
    /// NFS3ERR_NOTDIR: a directory operation on a non-directory.
    NotDir = 20,
    /// NFS3ERR_ISDIR: a non-directory operation on a directory.
    IsDir = 21,
    /// NFS3ERR_INVAL: an invalid argument.
    Inval = 22,
    /// NFS3ERR_FBIG: the file would grow beyond the server's limit.
    FBig = 27,
    /// NFS3ERR_NOSPC: no space left on the device.
    NoSpc = 28,
    /// NFS3ERR_ROFS: the file system is read-only.
    RoFs = 30,
    /// NFS3ERR_MLINK: too many hard links.
    MLink = 31,
    /// NFS3ERR_NAMETOOLONG: a name longer than 255 octets.
    NameTooLong = 63,
    /// NFS3ERR_NOTEMPTY: RMDIR (or RENAME over) a non-empty directory.
    NotEmpty = 66,
    /// NFS3ERR_DQUOT: quota exceeded.
    DQuot = 69,
    /// NFS3ERR_STALE: the handle names nothing any more (removed, from
    /// another export or from an earlier server instance).
    Stale = 70,
    /// NFS3ERR_REMOTE: too many levels of remote in path.
    Remote = 71,
    /// NFS3ERR_BADHANDLE: the handle failed internal consistency checks
    /// (wrong length, version or authentication tag).
    BadHandle = 10001,
    /// NFS3ERR_NOT_SYNC: SETATTR's guard (ctime) did not match.
    NotSync = 10002,
    /// NFS3ERR_BAD_COOKIE: a READDIR cookie (or its verifier) is no longer
    /// valid.
    BadCookie = 10003,
    /// NFS3ERR_NOTSUPP: the operation is not supported.
    NotSupp = 10004,
    /// NFS3ERR_TOOSMALL: the buffer or entry budget is too small for even
    /// one result.
    TooSmall = 10005,
    /// NFS3ERR_SERVERFAULT: an error that fits no other value.
    ServerFault = 10006,
    /// NFS3ERR_BADTYPE: CREATE of an object type the server does not support.
    BadType = 10007,
    /// NFS3ERR_JUKEBOX: the server is short of a resource; retry later.
    Jukebox = 10008,
}

impl NfsError {
    /// The `nfsstat3` value for the wire.
    pub fn status(self) -> u32 {
        self as u32
    }
}

impl std::fmt::Display for NfsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?} (nfsstat3 {})", self.status())
    }
}

impl std::error::Error for NfsError {}

impl From<Errno> for NfsError {
    /// The errno → nfsstat3 table of Linux knfsd (`nfserrno()` in
    /// fs/nfsd/nfsproc.c) for the values NFSv3 has; anything else is
    /// `Io`, as there.
    fn from(e: Errno) -> Self {
        match e {
            Errno::PERM => NfsError::Perm,
            Errno::NOENT => NfsError::NoEnt,
            Errno::IO => NfsError::Io,
            Errno::NXIO => NfsError::NxIo,
            Errno::ACCESS => NfsError::Acces,
            Errno::EXIST => NfsError::Exist,
            Errno::XDEV => NfsError::XDev,
            Errno::NODEV => NfsError::NoDev,
            Errno::NOTDIR => NfsError::NotDir,
            Errno::ISDIR => NfsError::IsDir,
            Errno::INVAL => NfsError::Inval,
            Errno::FBIG => NfsError::FBig,
            Errno::NOSPC => NfsError::NoSpc,
            Errno::ROFS => NfsError::RoFs,
            Errno::MLINK => NfsError::MLink,
            Errno::NAMETOOLONG => NfsError::NameTooLong,
            Errno::NOTEMPTY => NfsError::NotEmpty,
            Errno::DQUOT => NfsError::DQuot,
            Errno::STALE => NfsError::Stale,
            Errno::REMOTE => NfsError::Remote,
            Errno::OPNOTSUPP => NfsError::NotSupp,
            Errno::AGAIN | Errno::TIMEDOUT | Errno::NOMEM => NfsError::Jukebox,
            // A symlink met where none may be followed (O_NOFOLLOW): NFSv3
            // has no NFS4ERR_SYMLINK; the operation's argument is invalid.
            Errno::LOOP => NfsError::Inval,
            _ => NfsError::Io,
        }
    }
}

impl From<std::io::Error> for NfsError {
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(raw) => Errno::from_raw_os_error(raw).into(),
            None => NfsError::Io,
        }
    }
}

/// The result of an export operation.
pub type NfsResult<T> = Result<T, NfsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_are_the_nfsstat3_values() {
        // RFC 1813 §2.6 numbers, written out independently of the enum.
        let table = [
            (NfsError::Perm, 1),
            (NfsError::NoEnt, 2),
            (NfsError::Io, 5),
            (NfsError::Acces, 13),
            (NfsError::Exist, 17),
            (NfsError::NotDir, 20),
            (NfsError::IsDir, 21),
            (NfsError::Inval, 22),
            (NfsError::NameTooLong, 63),
            (NfsError::NotEmpty, 66),
            (NfsError::Stale, 70),
            (NfsError::BadHandle, 10001),
            (NfsError::BadCookie, 10003),
            (NfsError::NotSupp, 10004),
            (NfsError::TooSmall, 10005),
            (NfsError::ServerFault, 10006),
            (NfsError::Jukebox, 10008),
        ];
        for (e, v) in table {
            assert_eq!(e.status(), v, "{e:?}");
        }
    }

    #[test]
    fn errno_maps_like_knfsd() {
        assert_eq!(NfsError::from(Errno::NOENT), NfsError::NoEnt);
        assert_eq!(NfsError::from(Errno::NOTEMPTY), NfsError::NotEmpty);
        assert_eq!(NfsError::from(Errno::ACCESS), NfsError::Acces);
        assert_eq!(NfsError::from(Errno::AGAIN), NfsError::Jukebox);
        assert_eq!(NfsError::from(Errno::BADF), NfsError::Io);
        let io = std::io::Error::from_raw_os_error(Errno::NOSPC.raw_os_error());
        assert_eq!(NfsError::from(io), NfsError::NoSpc);
    }
}
