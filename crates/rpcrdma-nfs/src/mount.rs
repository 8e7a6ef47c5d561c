//! MOUNT version 3 (RFC 1813 Appendix I, "5.x" in the RFC's numbering):
//! NULL, MNT, UMNT and EXPORT. DUMP and UMNTALL have no codecs (a server
//! answers PROC_UNAVAIL).
//!
//! ```text
//! typedef opaque fhandle3<FHSIZE3>;     /* 64 */
//! typedef string dirpath<MNTPATHLEN>;   /* 1024 */
//! typedef string name<MNTNAMLEN>;       /* 255 */
//! union mountres3 switch (mountstat3 fhs_status) {
//! case MNT3_OK: mountres3_ok mountinfo;  /* fhandle3 fhandle; int auth_flavors<>; */
//! default:      void;
//! };
//! typedef struct groupnode *groups;   struct groupnode  { name gr_name; groups gr_next; };
//! typedef struct exportnode *exports; struct exportnode { dirpath ex_dir; groups ex_groups; exports ex_next; };
//! ```
//!
//! Unlike NFSv3's names, `dirpath` and `name` are bounded by their XDR
//! type: a longer one does not decode (GARBAGE_ARGS).

use rpcrdma_proto::open_enum;
use rpcrdma_proto::xdr::{DecodeErrorKind, Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError, XdrEncode};

use crate::codec::{codec_enum, xdr_encode_via_codec, xdr_string, Codec};
use crate::limits::{MNTNAMLEN, MNTPATHLEN};
use crate::nfs3::FileHandle;
use crate::{ArgError, Limits};

/// The MOUNT program number.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// Its version 3.
pub const MOUNT_V3: u32 = 3;
/// MOUNTPROC3_NULL.
pub const MOUNTPROC3_NULL: u32 = 0;
/// MOUNTPROC3_MNT.
pub const MOUNTPROC3_MNT: u32 = 1;
/// MOUNTPROC3_UMNT.
pub const MOUNTPROC3_UMNT: u32 = 3;
/// MOUNTPROC3_EXPORT.
pub const MOUNTPROC3_EXPORT: u32 = 5;
/// The procedures with codecs.
pub const PROCEDURES: &[u32] = &[
    MOUNTPROC3_NULL,
    MOUNTPROC3_MNT,
    MOUNTPROC3_UMNT,
    MOUNTPROC3_EXPORT,
];

open_enum! {
    /// `mountstat3` (open: `mountres3` has a `default` arm).
    Mountstat3 {
        /// No error.
        MNT3_OK = 0,
        /// Not owner.
        MNT3ERR_PERM = 1,
        /// No such file or directory.
        MNT3ERR_NOENT = 2,
        /// I/O error.
        MNT3ERR_IO = 5,
        /// Permission denied.
        MNT3ERR_ACCES = 13,
        /// Not a directory.
        MNT3ERR_NOTDIR = 20,
        /// Invalid argument.
        MNT3ERR_INVAL = 22,
        /// Filename too long.
        MNT3ERR_NAMETOOLONG = 63,
        /// Operation not supported.
        MNT3ERR_NOTSUPP = 10004,
        /// A failure on the server.
        MNT3ERR_SERVERFAULT = 10006,
    }
}
codec_enum!(open: Mountstat3);

xdr_string!(
    /// `dirpath` (`string<MNTPATHLEN>`, 1024).
    Dirpath,
    "dirpath",
    bounded MNTPATHLEN,
    "MNTPATHLEN"
);
//= rfc1813#section-5.1.4
//# const MNTPATHLEN = 1024;  /* Maximum bytes in a path name */
//# const MNTNAMLEN  = 255;   /* Maximum bytes in a name */
//# const FHSIZE3    = 64;    /* Maximum bytes in a V3 file handle */
xdr_string!(
    /// `name` (`string<MNTNAMLEN>`, 255).
    Name,
    "name",
    bounded MNTNAMLEN,
    "MNTNAMLEN"
);

/// `mountres3_ok`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountResOk {
    /// The export root's handle (`fhandle3`, at most 64 octets).
    pub fhandle: FileHandle,
    /// The RPC auth flavors the server accepts (AUTH_SYS = 1, …), at most
    /// [`Limits::max_auth_flavors`] when decoded.
    pub auth_flavors: Vec<i32>,
}

/// `mountres3`: the MNT result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountRes {
    /// MNT3_OK.
    Ok(MountResOk),
    /// Any other status (void).
    Fail(Mountstat3),
}

impl Codec for MountRes {
    fn xdr_len(&self) -> usize {
        match self {
            MountRes::Ok(o) => 4 + o.fhandle.xdr_len() + 4 + 4 * o.auth_flavors.len(),
            MountRes::Fail(_) => 4,
        }
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            MountRes::Ok(o) => {
                Mountstat3::MNT3_OK.put(w)?;
                o.fhandle.put(w)?;
                let n = u32::try_from(o.auth_flavors.len())
                    .map_err(|_| EncodeError::TooLong("auth_flavors"))?;
                w.u32(n)?;
                o.auth_flavors.iter().try_for_each(|f| w.i32(*f))
            }
            MountRes::Fail(s) => s.put(w),
        }
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        match Mountstat3::get(r, l)? {
            Mountstat3::MNT3_OK => {
                let fhandle = FileHandle::get(r, l)?;
                let n = r.count(l.max_auth_flavors, "max_auth_flavors", 4, "auth_flavors")?;
                let mut auth_flavors = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    auth_flavors.push(r.i32("auth_flavors")?);
                }
                Ok(MountRes::Ok(MountResOk {
                    fhandle,
                    auth_flavors,
                }))
            }
            s => Ok(MountRes::Fail(s)),
        }
    }
}

/// One `exportnode`: a directory and the groups allowed to mount it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// `ex_dir`.
    pub dir: Dirpath,
    /// `ex_groups` (empty: everyone, by convention).
    pub groups: Vec<Name>,
}

/// `exports`: the EXPORT result (a linked list on the wire).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Exports(pub Vec<Export>);

/// Whether another list node follows, counting it against `max`.
fn next_node(
    r: &mut Reader<'_>,
    have: usize,
    max: u32,
    limit: &'static str,
    field: &'static str,
) -> Result<bool, DecodeError> {
    let at = r.position();
    if !r.bool(field)? {
        return Ok(false);
    }
    if have >= max as usize {
        return Err(DecodeError::new(
            DecodeErrorKind::LimitExceeded {
                limit,
                max: max.into(),
                value: have as u64 + 1,
            },
            at,
            field,
        ));
    }
    Ok(true)
}

impl Codec for Exports {
    fn xdr_len(&self) -> usize {
        4 + self
            .0
            .iter()
            .map(|e| {
                4 + e.dir.xdr_len() + 4 + e.groups.iter().map(|g| 4 + g.xdr_len()).sum::<usize>()
            })
            .sum::<usize>()
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        for e in &self.0 {
            w.bool(true)?;
            e.dir.put(w)?;
            for g in &e.groups {
                w.bool(true)?;
                g.put(w)?;
            }
            w.bool(false)?;
        }
        w.bool(false)
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        let mut out = Vec::new();
        while next_node(r, out.len(), l.max_exports, "max_exports", "exports")? {
            let dir = Dirpath::get(r, l)?;
            let mut groups = Vec::new();
            while next_node(
                r,
                groups.len(),
                l.max_export_groups,
                "max_export_groups",
                "groups",
            )? {
                groups.push(Name::get(r, l)?);
            }
            out.push(Export { dir, groups });
        }
        Ok(Exports(out))
    }
}

xdr_encode_via_codec!(MountRes, Exports, Dirpath, Name);

/// The arguments of a MOUNT procedure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountArgs {
    /// NULL (void).
    Null,
    /// MNT: the directory to mount.
    Mnt(Dirpath),
    /// UMNT: the directory to unmount.
    Umnt(Dirpath),
    /// EXPORT (void).
    Export,
}

impl MountArgs {
    /// The procedure number.
    pub fn proc(&self) -> u32 {
        match self {
            MountArgs::Null => MOUNTPROC3_NULL,
            MountArgs::Mnt(_) => MOUNTPROC3_MNT,
            MountArgs::Umnt(_) => MOUNTPROC3_UMNT,
            MountArgs::Export => MOUNTPROC3_EXPORT,
        }
    }

    /// Decodes the arguments of `proc` (all of `r`). A `dirpath` longer
    /// than MNTPATHLEN breaks its XDR type: GARBAGE_ARGS.
    pub fn decode(proc: u32, r: &mut Reader<'_>, l: &Limits) -> Result<Self, ArgError> {
        let a = match proc {
            MOUNTPROC3_NULL => MountArgs::Null,
            MOUNTPROC3_MNT => MountArgs::Mnt(Dirpath::get(r, l)?),
            MOUNTPROC3_UMNT => MountArgs::Umnt(Dirpath::get(r, l)?),
            MOUNTPROC3_EXPORT => MountArgs::Export,
            _ => return Err(ArgError::ProcUnavail(proc)),
        };
        r.finish("end of arguments")?;
        Ok(a)
    }
}

impl XdrEncode for MountArgs {
    fn encoded_len(&self) -> usize {
        match self {
            MountArgs::Mnt(d) | MountArgs::Umnt(d) => d.xdr_len(),
            MountArgs::Null | MountArgs::Export => 0,
        }
    }
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            MountArgs::Mnt(d) | MountArgs::Umnt(d) => d.put(w),
            MountArgs::Null | MountArgs::Export => Ok(()),
        }
    }
}

/// The results of a MOUNT procedure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountResults {
    /// NULL, UMNT (void).
    Void,
    /// MNT.
    Mnt(MountRes),
    /// EXPORT.
    Export(Exports),
}

impl MountResults {
    /// Decodes the results of `proc` (all of `r`).
    pub fn decode(proc: u32, r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        let v = match proc {
            MOUNTPROC3_NULL | MOUNTPROC3_UMNT => MountResults::Void,
            MOUNTPROC3_MNT => MountResults::Mnt(MountRes::get(r, l)?),
            MOUNTPROC3_EXPORT => MountResults::Export(Exports::get(r, l)?),
            _ => {
                return Err(r.error(
                    DecodeErrorKind::BadValue {
                        what: "MOUNT procedure",
                        detail: format!("no results of procedure {proc}"),
                    },
                    "procedure",
                ))
            }
        };
        r.finish("end of results")?;
        Ok(v)
    }
}

impl XdrEncode for MountResults {
    fn encoded_len(&self) -> usize {
        match self {
            MountResults::Void => 0,
            MountResults::Mnt(m) => m.xdr_len(),
            MountResults::Export(e) => e.xdr_len(),
        }
    }
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            MountResults::Void => Ok(()),
            MountResults::Mnt(m) => m.put(w),
            MountResults::Export(e) => e.put(w),
        }
    }
}

#[cfg(test)]
pub(crate) mod gen {
    use super::*;
    use crate::testgen::{Gen, Rng};

    pub(crate) fn args(proc: u32, g: &mut Rng) -> Option<MountArgs> {
        Some(match proc {
            MOUNTPROC3_NULL => MountArgs::Null,
            MOUNTPROC3_MNT => MountArgs::Mnt(Dirpath(g.bytes(1024))),
            MOUNTPROC3_UMNT => MountArgs::Umnt(Dirpath(g.bytes(1024))),
            MOUNTPROC3_EXPORT => MountArgs::Export,
            _ => return None,
        })
    }

    pub(crate) fn results(proc: u32, g: &mut Rng) -> Option<MountResults> {
        Some(match proc {
            MOUNTPROC3_NULL | MOUNTPROC3_UMNT => MountResults::Void,
            MOUNTPROC3_MNT if g.coin() => MountResults::Mnt(MountRes::Ok(MountResOk {
                fhandle: Gen::gen(g),
                auth_flavors: (0..g.below(4)).map(|_| g.next() as i32).collect(),
            })),
            MOUNTPROC3_MNT => MountResults::Mnt(MountRes::Fail(Mountstat3::MNT3ERR_NOENT)),
            MOUNTPROC3_EXPORT => MountResults::Export(Exports(
                (0..g.below(4))
                    .map(|_| Export {
                        dir: Dirpath(g.bytes(30)),
                        groups: (0..g.below(3)).map(|_| Name(g.bytes(20))).collect(),
                    })
                    .collect(),
            )),
            _ => return None,
        })
    }
}
