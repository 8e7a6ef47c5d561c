//! NFS version 3 (RFC 1813): types, procedure arguments and results.
//!
//! | module | what |
//! |---|---|
//! | [`types`] | nfsstat3, nfs_fh3, filename3, nfspath3, fattr3, wcc_data, sattr3 … |
//! | [`args`] | the arguments of each procedure |
//! | [`results`] | the results of each procedure (`resok` arms) |
//! | [`res`] | [`Res`]: the status union every result is |
//! | [`ddp`] | the four DDP-eligible items, independent of the transport |
//!
//! [`Nfs3Args`] and [`Nfs3Res`] dispatch on the procedure number: decode
//! (the server decodes arguments, the client results), exact-size encode
//! (`XdrEncode`), and the split into inline head and DDP-eligible item
//! ([`DdpParts`]) the transport binding uses. [`Nfs3Args::decode`] gives
//! the server its answer for bad input ([`ArgError`]).

pub mod args;
pub mod ddp;
pub mod res;
pub mod results;
pub mod types;

pub use args::*;
pub use ddp::{DdpCodec, DdpParts, DdpSource, Inline};
pub use res::Res;
pub use results::*;
pub use types::*;

use bytes::Bytes;
use rpcrdma_proto::xdr::{DecodeErrorKind, Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError, XdrEncode};

use crate::codec::Codec;
use crate::{ArgError, Limits};

/// The NFS program number (RFC 1813 §2.2).
pub const NFS_PROGRAM: u32 = 100_003;
/// Its version 3.
pub const NFS_V3: u32 = 3;

/// Procedures this crate has codecs for, with their number, enum variant,
/// argument and result types, and which of the two carries a DDP-eligible
/// item (`ddp`) or not (`plain`).
macro_rules! procedures {
    ($( $(#[$m:meta])* $num:literal $konst:ident $variant:ident
        ($args:ty, $ad:ident => $res:ty, $rd:ident) ),* $(,)?) => {
        $( $(#[$m])* pub const $konst: u32 = $num; )*

        /// The arguments of an NFSv3 procedure.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Nfs3Args { $( $(#[$m])* $variant($args), )* }

        /// The results of an NFSv3 procedure.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Nfs3Res { $( $(#[$m])* $variant($res), )* }

        /// Every procedure number with codecs, in order.
        pub const PROCEDURES: &[u32] = &[$($num),*];

        /// The procedure's name (`None` for a number without codecs).
        pub fn proc_name(proc: u32) -> Option<&'static str> {
            match proc { $( $num => Some(stringify!($konst)), )* _ => None }
        }

        impl Nfs3Args {
            /// The procedure number.
            pub fn proc(&self) -> u32 {
                match self { $( Nfs3Args::$variant(_) => $num, )* }
            }

            /// Decodes the arguments of `proc` (the whole of `r`: trailing
            /// octets are garbage), DDP-eligible data from `ddp`. Decode
            /// failures are [`ArgError::Garbage`]; an unknown procedure is
            /// [`ArgError::ProcUnavail`]. Server limits are not checked
            /// here: see [`Nfs3Args::check`] (or [`Nfs3Args::decode_checked`]).
            pub fn decode(
                proc: u32,
                r: &mut Reader<'_>,
                l: &Limits,
                ddp: &mut dyn DdpSource,
            ) -> Result<Self, ArgError> {
                let _ = &ddp;
                let a = match proc {
                    $( $num => Nfs3Args::$variant(get!($ad, $args, r, l, ddp)?), )*
                    _ => return Err(ArgError::ProcUnavail(proc)),
                };
                r.finish("end of arguments")?;
                Ok(a)
            }
        }

        impl Nfs3Res {
            /// The procedure number.
            pub fn proc(&self) -> u32 {
                match self { $( Nfs3Res::$variant(_) => $num, )* }
            }

            /// Decodes the results of `proc` (the whole of `r`),
            /// DDP-eligible data from `ddp`. Every failure is the server's.
            pub fn decode(
                proc: u32,
                r: &mut Reader<'_>,
                l: &Limits,
                ddp: &mut dyn DdpSource,
            ) -> Result<Self, DecodeError> {
                let _ = &ddp;
                let v = match proc {
                    $( $num => Nfs3Res::$variant(get!($rd, $res, r, l, ddp)?), )*
                    _ => return Err(r.error(
                        DecodeErrorKind::BadValue {
                            what: "NFSv3 procedure",
                            detail: format!("no results of procedure {proc}"),
                        },
                        "procedure",
                    )),
                };
                r.finish("end of results")?;
                Ok(v)
            }
        }

        impl XdrEncode for Nfs3Args {
            fn encoded_len(&self) -> usize {
                match self { $( Nfs3Args::$variant(v) => v.xdr_len(), )* }
            }
            fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                match self { $( Nfs3Args::$variant(v) => v.put(w), )* }
            }
        }

        impl XdrEncode for Nfs3Res {
            fn encoded_len(&self) -> usize {
                match self { $( Nfs3Res::$variant(v) => v.xdr_len(), )* }
            }
            fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                match self { $( Nfs3Res::$variant(v) => v.put(w), )* }
            }
        }

        impl DdpParts for Nfs3Args {
            fn ddp_item(&self) -> Option<Bytes> {
                match self { $( Nfs3Args::$variant(v) => parts!($ad, ddp_item, v), )* }
            }
            fn head_len(&self) -> usize {
                match self { $( Nfs3Args::$variant(v) => parts!($ad, head_len, v), )* }
            }
            fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                match self { $( Nfs3Args::$variant(v) => parts!($ad, put_head, v, w), )* }
            }
        }

        impl DdpParts for Nfs3Res {
            fn ddp_item(&self) -> Option<Bytes> {
                match self { $( Nfs3Res::$variant(v) => parts!($rd, ddp_item, v), )* }
            }
            fn head_len(&self) -> usize {
                match self { $( Nfs3Res::$variant(v) => parts!($rd, head_len, v), )* }
            }
            fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                match self { $( Nfs3Res::$variant(v) => parts!($rd, put_head, v, w), )* }
            }
        }

        #[cfg(test)]
        pub(crate) fn gen_args(proc: u32, g: &mut crate::testgen::Rng) -> Option<Nfs3Args> {
            use crate::testgen::Gen;
            match proc { $( $num => Some(Nfs3Args::$variant(<$args>::gen(g))), )* _ => None }
        }

        #[cfg(test)]
        pub(crate) fn gen_res(proc: u32, g: &mut crate::testgen::Rng) -> Option<Nfs3Res> {
            use crate::testgen::Gen;
            match proc { $( $num => Some(Nfs3Res::$variant(<$res>::gen(g))), )* _ => None }
        }
    };
}

macro_rules! get {
    (plain, $t:ty, $r:ident, $l:ident, $ddp:ident) => {
        <$t as Codec>::get($r, $l)
    };
    (ddp, $t:ty, $r:ident, $l:ident, $ddp:ident) => {
        <$t as DdpCodec>::get_ddp($r, $l, $ddp)
    };
}

macro_rules! parts {
    (plain, ddp_item, $v:ident) => {{
        let _ = $v;
        None
    }};
    (plain, head_len, $v:ident) => {
        $v.xdr_len()
    };
    (plain, put_head, $v:ident, $w:ident) => {
        $v.put($w)
    };
    (ddp, $f:ident, $v:ident $(, $w:ident)?) => {
        DdpParts::$f($v $(, $w)?)
    };
}

procedures! {
    /// NULL.
    0 NFSPROC3_NULL Null((), plain => (), plain),
    /// GETATTR.
    1 NFSPROC3_GETATTR Getattr(GetattrArgs, plain => GetattrRes, plain),
    /// SETATTR.
    2 NFSPROC3_SETATTR Setattr(SetattrArgs, plain => SetattrRes, plain),
    /// LOOKUP.
    3 NFSPROC3_LOOKUP Lookup(LookupArgs, plain => LookupRes, plain),
    /// ACCESS.
    4 NFSPROC3_ACCESS Access(AccessArgs, plain => AccessRes, plain),
    /// READLINK (result path DDP-eligible).
    5 NFSPROC3_READLINK Readlink(ReadlinkArgs, plain => ReadlinkRes, ddp),
    /// READ (result data DDP-eligible).
    6 NFSPROC3_READ Read(ReadArgs, plain => ReadRes, ddp),
    /// WRITE (argument data DDP-eligible).
    7 NFSPROC3_WRITE Write(WriteArgs, ddp => WriteRes, plain),
    /// CREATE.
    8 NFSPROC3_CREATE Create(CreateArgs, plain => CreateRes, plain),
    /// MKDIR.
    9 NFSPROC3_MKDIR Mkdir(MkdirArgs, plain => CreateRes, plain),
    /// SYMLINK (argument path DDP-eligible).
    10 NFSPROC3_SYMLINK Symlink(SymlinkArgs, ddp => CreateRes, plain),
    /// REMOVE.
    12 NFSPROC3_REMOVE Remove(RemoveArgs, plain => RemoveRes, plain),
    /// RMDIR.
    13 NFSPROC3_RMDIR Rmdir(RemoveArgs, plain => RemoveRes, plain),
    /// RENAME.
    14 NFSPROC3_RENAME Rename(RenameArgs, plain => RenameRes, plain),
    /// READDIR.
    16 NFSPROC3_READDIR Readdir(ReaddirArgs, plain => ReaddirRes, plain),
    /// READDIRPLUS.
    17 NFSPROC3_READDIRPLUS Readdirplus(ReaddirplusArgs, plain => ReaddirplusRes, plain),
    /// FSSTAT.
    18 NFSPROC3_FSSTAT Fsstat(FsArgs, plain => FsstatRes, plain),
    /// FSINFO.
    19 NFSPROC3_FSINFO Fsinfo(FsArgs, plain => FsinfoRes, plain),
    /// PATHCONF.
    20 NFSPROC3_PATHCONF Pathconf(FsArgs, plain => PathconfRes, plain),
    /// COMMIT.
    21 NFSPROC3_COMMIT Commit(CommitArgs, plain => CommitRes, plain),
}

/// MKNOD (RFC 1813 §3.3.11): no codecs; a server answers NFS3ERR_NOTSUPP.
pub const NFSPROC3_MKNOD: u32 = 11;
/// LINK (RFC 1813 §3.3.15): no codecs; a server answers NFS3ERR_NOTSUPP.
pub const NFSPROC3_LINK: u32 = 15;

mod check;
mod failure;
pub use failure::not_supported;
