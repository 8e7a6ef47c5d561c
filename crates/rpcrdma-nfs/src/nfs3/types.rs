//! RFC 1813 §2.5–2.6 basic types: status, file handle, names, times,
//! attributes and their weak-cache-consistency forms, settable attributes.

use rpcrdma_proto::open_enum;
use rpcrdma_proto::xdr::{Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use crate::codec::{codec_enum, get_bounded, opaque_len, xdr_string, xdr_struct, Codec};
use crate::limits::NFS3_FHSIZE;
use crate::Limits;

open_enum! {
    /// `nfsstat3`: open (every NFSv3 result is a union with a `default`
    /// arm, so an unknown status decodes as a failure).
    Nfsstat3 {
        /// Success.
        NFS3_OK = 0,
        /// Not owner.
        NFS3ERR_PERM = 1,
        /// No such file or directory.
        NFS3ERR_NOENT = 2,
        /// I/O error.
        NFS3ERR_IO = 5,
        /// No such device or address.
        NFS3ERR_NXIO = 6,
        /// Permission denied.
        NFS3ERR_ACCES = 13,
        /// File exists.
        NFS3ERR_EXIST = 17,
        /// Cross-device link.
        NFS3ERR_XDEV = 18,
        /// No such device.
        NFS3ERR_NODEV = 19,
        /// Not a directory.
        NFS3ERR_NOTDIR = 20,
        /// Is a directory.
        NFS3ERR_ISDIR = 21,
        /// Invalid argument.
        NFS3ERR_INVAL = 22,
        /// File too large.
        NFS3ERR_FBIG = 27,
        /// No space left on device.
        NFS3ERR_NOSPC = 28,
        /// Read-only file system.
        NFS3ERR_ROFS = 30,
        /// Too many hard links.
        NFS3ERR_MLINK = 31,
        /// Name too long.
        NFS3ERR_NAMETOOLONG = 63,
        /// Directory not empty.
        NFS3ERR_NOTEMPTY = 66,
        /// Disk quota exceeded.
        NFS3ERR_DQUOT = 69,
        /// Stale file handle.
        NFS3ERR_STALE = 70,
        /// Too many levels of remote in path.
        NFS3ERR_REMOTE = 71,
        /// Illegal file handle.
        NFS3ERR_BADHANDLE = 10001,
        /// SETATTR guard mismatch.
        NFS3ERR_NOT_SYNC = 10002,
        /// Stale READDIR cookie.
        NFS3ERR_BAD_COOKIE = 10003,
        /// Operation not supported.
        NFS3ERR_NOTSUPP = 10004,
        /// Buffer or request too small.
        NFS3ERR_TOOSMALL = 10005,
        /// Server fault.
        NFS3ERR_SERVERFAULT = 10006,
        /// Type not supported by the server.
        NFS3ERR_BADTYPE = 10007,
        /// Retry later.
        NFS3ERR_JUKEBOX = 10008,
    }
}

open_enum! {
    /// `ftype3`: open (a client maps an unknown type as Linux does, to a
    /// "bad" type, rather than refusing the attributes).
    Ftype3 {
        /// Regular file.
        NF3REG = 1,
        /// Directory.
        NF3DIR = 2,
        /// Block device.
        NF3BLK = 3,
        /// Character device.
        NF3CHR = 4,
        /// Symbolic link.
        NF3LNK = 5,
        /// Socket.
        NF3SOCK = 6,
        /// Named pipe.
        NF3FIFO = 7,
    }
}

open_enum! {
    /// `stable_how` (decoded closed: a WRITE whose stability nobody can
    /// tell is undecodable, as a WRITE reply with one is to Linux).
    StableHow {
        /// The server may keep the data in volatile memory.
        UNSTABLE = 0,
        /// Data on stable storage before the reply; metadata may lag.
        DATA_SYNC = 1,
        /// Data and metadata on stable storage before the reply.
        FILE_SYNC = 2,
    }
}

open_enum! {
    /// `createmode3`, the switch of `createhow3` (no `default` arm: closed).
    Createmode3 {
        /// Create, or truncate an existing file per the attributes.
        UNCHECKED = 0,
        /// Fail with NFS3ERR_EXIST if the file exists.
        GUARDED = 1,
        /// Exclusive create with a verifier.
        EXCLUSIVE = 2,
    }
}

open_enum! {
    /// `time_how`, the switch of `set_atime` / `set_mtime` (closed, as
    /// Linux's nfsd decodes it).
    TimeHow {
        /// Leave the time alone.
        DONT_CHANGE = 0,
        /// Set to the server's current time.
        SET_TO_SERVER_TIME = 1,
        /// Set to the time given.
        SET_TO_CLIENT_TIME = 2,
    }
}

codec_enum!(open: Nfsstat3, Ftype3);
codec_enum!(closed: StableHow, Createmode3, TimeHow);

#[cfg(test)]
crate::testgen::gen_enum! {
    Nfsstat3 => [NFS3_OK, NFS3ERR_NOENT, NFS3ERR_INVAL, NFS3ERR_NAMETOOLONG, NFS3ERR_STALE,
                 NFS3ERR_BADHANDLE, NFS3ERR_JUKEBOX],
    Ftype3 => [NF3REG, NF3DIR, NF3LNK, NF3FIFO],
    StableHow => [UNSTABLE, DATA_SYNC, FILE_SYNC],
    Createmode3 => [UNCHECKED, GUARDED, EXCLUSIVE],
}

/// `nfs_fh3`: an opaque file handle of at most [`NFS3_FHSIZE`] (64)
/// octets. A longer one breaks the XDR type, so it does not decode
/// (`GARBAGE_ARGS`, as Linux's nfsd answers). An empty one decodes (the
/// export's handle table answers `NFS3ERR_BADHANDLE` for it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct FileHandle(pub Vec<u8>);

impl FileHandle {
    /// The handle's octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Codec for FileHandle {
    fn xdr_len(&self) -> usize {
        opaque_len(self.0.len())
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.var_opaque(&self.0)
    }
    //= rfc1813#section-2.6
    //# struct nfs_fh3 {
    //#    opaque       data<NFS3_FHSIZE>;
    //# };
    fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        Ok(FileHandle(get_bounded(
            r,
            NFS3_FHSIZE,
            "NFS3_FHSIZE",
            "nfs_fh3",
        )?))
    }
}

xdr_string!(
    /// `filename3` (`string<>`): one path component.
    Filename,
    "filename3",
    unbounded
);
xdr_string!(
    /// `nfspath3` (`string<>`): a symbolic link's target.
    NfsPath,
    "nfspath3",
    unbounded
);

#[cfg(test)]
impl crate::testgen::Gen for Filename {
    fn gen(g: &mut crate::testgen::Rng) -> Self {
        Filename(g.bytes(255))
    }
}

#[cfg(test)]
impl crate::testgen::Gen for NfsPath {
    fn gen(g: &mut crate::testgen::Rng) -> Self {
        NfsPath(g.bytes(255))
    }
}

#[cfg(test)]
impl crate::testgen::Gen for FileHandle {
    fn gen(g: &mut crate::testgen::Rng) -> Self {
        FileHandle(g.bytes(NFS3_FHSIZE as usize))
    }
}

xdr_struct! {
    /// `specdata3`: device numbers.
    Specdata3 {
        /// Major.
        specdata1: u32,
        /// Minor.
        specdata2: u32,
    }
}

xdr_struct! {
    /// `nfstime3`.
    Nfstime3 {
        /// Seconds since the epoch.
        seconds: u32,
        /// Nanoseconds.
        nseconds: u32,
    }
}

xdr_struct! {
    /// `fattr3`: file attributes.
    Fattr3 {
        /// Type.
        ftype: Ftype3,
        /// Protection mode bits.
        mode: u32,
        /// Hard links.
        nlink: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Size in octets.
        size: u64,
        /// Octets of disk used.
        used: u64,
        /// Device numbers (NF3BLK, NF3CHR).
        rdev: Specdata3,
        /// File system id.
        fsid: u64,
        /// File id (inode number).
        fileid: u64,
        /// Last access.
        atime: Nfstime3,
        /// Last data modification.
        mtime: Nfstime3,
        /// Last attribute change.
        ctime: Nfstime3,
    }
}

xdr_struct! {
    /// `wcc_attr`: the attributes weak cache consistency compares.
    WccAttr {
        /// Size.
        size: u64,
        /// Data modification time.
        mtime: Nfstime3,
        /// Attribute change time.
        ctime: Nfstime3,
    }
}

/// `post_op_attr`.
pub type PostOpAttr = Option<Fattr3>;
/// `pre_op_attr`.
pub type PreOpAttr = Option<WccAttr>;
/// `post_op_fh3`.
pub type PostOpFh3 = Option<FileHandle>;
/// `cookieverf3`.
pub type Cookieverf3 = [u8; 8];
/// `createverf3`.
pub type Createverf3 = [u8; 8];
/// `writeverf3`.
pub type Writeverf3 = [u8; 8];

xdr_struct! {
    /// `wcc_data`: attributes before and after an operation.
    WccData {
        /// Before.
        before: PreOpAttr,
        /// After.
        after: PostOpAttr,
    }
}

impl WccData {
    /// Neither before nor after attributes (what a failure answers when it
    /// has none).
    pub const fn empty() -> Self {
        WccData {
            before: None,
            after: None,
        }
    }
}

/// `set_atime` / `set_mtime`: `union switch (time_how set_it)`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SetTime {
    /// `DONT_CHANGE`.
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME`.
    ServerTime,
    /// `SET_TO_CLIENT_TIME` with the time.
    ClientTime(Nfstime3),
}

impl Codec for SetTime {
    fn xdr_len(&self) -> usize {
        match self {
            SetTime::ClientTime(_) => 12,
            _ => 4,
        }
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            SetTime::DontChange => TimeHow::DONT_CHANGE.put(w),
            SetTime::ServerTime => TimeHow::SET_TO_SERVER_TIME.put(w),
            SetTime::ClientTime(t) => {
                TimeHow::SET_TO_CLIENT_TIME.put(w)?;
                t.put(w)
            }
        }
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        match TimeHow::get(r, l)? {
            TimeHow::SET_TO_SERVER_TIME => Ok(SetTime::ServerTime),
            TimeHow::SET_TO_CLIENT_TIME => Ok(SetTime::ClientTime(Nfstime3::get(r, l)?)),
            _ => Ok(SetTime::DontChange),
        }
    }
}

#[cfg(test)]
impl crate::testgen::Gen for SetTime {
    fn gen(g: &mut crate::testgen::Rng) -> Self {
        match g.below(3) {
            0 => SetTime::DontChange,
            1 => SetTime::ServerTime,
            _ => SetTime::ClientTime(Nfstime3::gen(g)),
        }
    }
}

xdr_struct! {
    /// `sattr3`: the attributes SETATTR, CREATE, MKDIR and SYMLINK set
    /// (`None`: leave alone).
    Sattr3 {
        /// `set_mode3`.
        mode: Option<u32>,
        /// `set_uid3`.
        uid: Option<u32>,
        /// `set_gid3`.
        gid: Option<u32>,
        /// `set_size3`.
        size: Option<u64>,
        /// `set_atime`.
        atime: SetTime,
        /// `set_mtime`.
        mtime: SetTime,
    }
}

impl Sattr3 {
    /// Sets nothing.
    pub const fn none() -> Self {
        Sattr3 {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: SetTime::DontChange,
            mtime: SetTime::DontChange,
        }
    }
}

xdr_struct! {
    /// `diropargs3`: a name in a directory.
    Diropargs3 {
        /// The directory.
        dir: FileHandle,
        /// The name.
        name: Filename,
    }
}
