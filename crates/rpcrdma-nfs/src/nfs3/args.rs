//! RFC 1813 §3.3 procedure arguments.

use bytes::Bytes;
use rpcrdma_proto::xdr::{Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use super::ddp::{get_ddp_opaque, DdpCodec, DdpParts, DdpSource};
use super::res::codec_via_ddp;
use super::types::{
    Cookieverf3, Createmode3, Createverf3, Diropargs3, FileHandle, NfsPath, Nfstime3, Sattr3,
    StableHow,
};
use crate::codec::{xdr_encode_via_codec, xdr_struct, Codec};
use crate::Limits;

xdr_struct! {
    /// GETATTR3args.
    GetattrArgs {
        /// The object.
        object: FileHandle,
    }
}

xdr_struct! {
    /// SETATTR3args.
    SetattrArgs {
        /// The object.
        object: FileHandle,
        /// What to set.
        new_attributes: Sattr3,
        /// `sattrguard3`: set only if the object's ctime is this.
        guard: Option<Nfstime3>,
    }
}

xdr_struct! {
    /// LOOKUP3args.
    LookupArgs {
        /// Directory and name.
        what: Diropargs3,
    }
}

xdr_struct! {
    /// ACCESS3args.
    AccessArgs {
        /// The object.
        object: FileHandle,
        /// ACCESS3_* bits to check.
        access: u32,
    }
}

xdr_struct! {
    /// READLINK3args.
    ReadlinkArgs {
        /// The symbolic link.
        symlink: FileHandle,
    }
}

xdr_struct! {
    /// READ3args. `count` above [`Limits::rtmax`] is not an error: the
    /// server reads at most rtmax (a short read, RFC 1813 §3.3.6).
    ReadArgs {
        /// The file.
        file: FileHandle,
        /// Offset.
        offset: u64,
        /// Octets wanted.
        count: u32,
    }
}

impl ReadArgs {
    /// The octets the server reads: `count` clamped to rtmax.
    //= rfc1813#section-3.3.6
    //# count
    //# must be less than or equal to the value of the rtmax
    //# field in the FSINFO reply structure for the file system
    //# that contains file. If greater, the server may return
    //# only rtmax bytes, resulting in a short read.
    pub fn effective_count(&self, l: &Limits) -> u32 {
        self.count.min(l.rtmax)
    }
}

/// WRITE3args. The data is DDP-eligible (RFC 8267 §4). Decoding keeps
/// `count` and the data's length as sent; [`super::Nfs3Args::check`]
/// refuses a mismatch and [`WriteArgs::effective_data`] cuts data over
/// [`Limits::wtmax`] (a short write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteArgs {
    /// The file.
    pub file: FileHandle,
    /// Offset.
    pub offset: u64,
    /// Octets to write (must equal the data's length).
    pub count: u32,
    /// Stability wanted.
    pub stable: StableHow,
    /// The data (DDP-eligible).
    pub data: Bytes,
}

impl WriteArgs {
    /// The data the server writes: at most wtmax octets.
    //= rfc1813#section-3.3.7
    //# The size of
    //# data must be less than or equal to the value of the
    //# wtmax field in the FSINFO reply structure for the file
    //# system that contains file. If greater, the server may
    //# write only wtmax bytes, resulting in a short write.
    pub fn effective_data(&self, l: &Limits) -> Bytes {
        self.data.slice(..self.data.len().min(l.wtmax as usize))
    }
}

impl DdpCodec for WriteArgs {
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError> {
        Ok(WriteArgs {
            file: FileHandle::get(r, l)?,
            offset: u64::get(r, l)?,
            count: u32::get(r, l)?,
            stable: StableHow::get(r, l)?,
            // Bounded by the message (a WRITE over wtmax is written short).
            data: get_ddp_opaque(r, ddp, u32::MAX, "message length", "write.data")?,
        })
    }
}

impl DdpParts for WriteArgs {
    fn ddp_item(&self) -> Option<Bytes> {
        Some(self.data.clone())
    }
    fn head_len(&self) -> usize {
        self.file.xdr_len() + 8 + 4 + 4
    }
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.file.put(w)?;
        w.u64(self.offset)?;
        w.u32(self.count)?;
        self.stable.put(w)
    }
}

/// `createhow3`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Createhow3 {
    /// UNCHECKED with the attributes.
    Unchecked(Sattr3),
    /// GUARDED with the attributes.
    Guarded(Sattr3),
    /// EXCLUSIVE with the verifier.
    Exclusive(Createverf3),
}

impl Codec for Createhow3 {
    fn xdr_len(&self) -> usize {
        4 + match self {
            Createhow3::Unchecked(a) | Createhow3::Guarded(a) => a.xdr_len(),
            Createhow3::Exclusive(v) => v.xdr_len(),
        }
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            Createhow3::Unchecked(a) => {
                Createmode3::UNCHECKED.put(w)?;
                a.put(w)
            }
            Createhow3::Guarded(a) => {
                Createmode3::GUARDED.put(w)?;
                a.put(w)
            }
            Createhow3::Exclusive(v) => {
                Createmode3::EXCLUSIVE.put(w)?;
                v.put(w)
            }
        }
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        // Closed: the union has no default arm.
        match Createmode3::get(r, l)? {
            Createmode3::UNCHECKED => Ok(Createhow3::Unchecked(Sattr3::get(r, l)?)),
            Createmode3::GUARDED => Ok(Createhow3::Guarded(Sattr3::get(r, l)?)),
            _ => Ok(Createhow3::Exclusive(<[u8; 8]>::get(r, l)?)),
        }
    }
}
xdr_encode_via_codec!(Createhow3);

xdr_struct! {
    /// CREATE3args.
    CreateArgs {
        /// Directory and name.
        place: Diropargs3,
        /// How.
        how: Createhow3,
    }
}

xdr_struct! {
    /// MKDIR3args.
    MkdirArgs {
        /// Directory and name.
        place: Diropargs3,
        /// Initial attributes.
        attributes: Sattr3,
    }
}

/// SYMLINK3args (`diropargs3 where; symlinkdata3 symlink;`). The path is
/// DDP-eligible (RFC 8267 §4; Linux sends it in a Read chunk when the call
/// does not fit inline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymlinkArgs {
    /// Directory and name.
    pub place: Diropargs3,
    /// The link's attributes.
    pub symlink_attributes: Sattr3,
    /// The link's target (DDP-eligible).
    pub symlink_data: NfsPath,
}

impl DdpCodec for SymlinkArgs {
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError> {
        Ok(SymlinkArgs {
            place: Diropargs3::get(r, l)?,
            symlink_attributes: Sattr3::get(r, l)?,
            // Unbounded XDR: a path over max_path_len decodes and is
            // refused with NFS3ERR_NAMETOOLONG by `check`.
            symlink_data: NfsPath(
                get_ddp_opaque(r, ddp, u32::MAX, "message length", "symlink.data")?.to_vec(),
            ),
        })
    }
}

impl DdpParts for SymlinkArgs {
    fn ddp_item(&self) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&self.symlink_data.0))
    }
    fn head_len(&self) -> usize {
        self.place.xdr_len() + self.symlink_attributes.xdr_len()
    }
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.place.put(w)?;
        self.symlink_attributes.put(w)
    }
}

codec_via_ddp!(WriteArgs, SymlinkArgs);

xdr_struct! {
    /// REMOVE3args and RMDIR3args.
    RemoveArgs {
        /// Directory and name.
        object: Diropargs3,
    }
}

xdr_struct! {
    /// RENAME3args.
    RenameArgs {
        /// From.
        from: Diropargs3,
        /// To.
        to: Diropargs3,
    }
}

xdr_struct! {
    /// READDIR3args. `count` is the largest reply the client takes; the
    /// server clamps it to [`Limits::max_dir_reply`].
    ReaddirArgs {
        /// The directory.
        dir: FileHandle,
        /// Where to continue (0: the start).
        cookie: u64,
        /// The verifier of `cookie`.
        cookieverf: Cookieverf3,
        /// Largest READDIR3resok in octets.
        count: u32,
    }
}

xdr_struct! {
    /// READDIRPLUS3args.
    ReaddirplusArgs {
        /// The directory.
        dir: FileHandle,
        /// Where to continue.
        cookie: u64,
        /// The verifier of `cookie`.
        cookieverf: Cookieverf3,
        /// Largest directory information (names and cookies) in octets.
        dircount: u32,
        /// Largest READDIRPLUS3resok in octets.
        maxcount: u32,
    }
}

xdr_struct! {
    /// FSSTAT3args, FSINFO3args and PATHCONF3args: one handle.
    FsArgs {
        /// The file system's root (PATHCONF: the object).
        object: FileHandle,
    }
}

xdr_struct! {
    /// COMMIT3args.
    CommitArgs {
        /// The file.
        file: FileHandle,
        /// Start of the range (0 with count 0: the whole file).
        offset: u64,
        /// Octets (0: to the end).
        count: u32,
    }
}

#[cfg(test)]
mod gen {
    use super::*;
    use crate::testgen::{Gen, Rng};

    impl Gen for WriteArgs {
        fn gen(g: &mut Rng) -> Self {
            let data = Bytes::from(g.bytes(70));
            WriteArgs {
                file: Gen::gen(g),
                offset: Gen::gen(g),
                count: if g.coin() {
                    data.len() as u32
                } else {
                    Gen::gen(g)
                },
                stable: Gen::gen(g),
                data,
            }
        }
    }

    impl Gen for SymlinkArgs {
        fn gen(g: &mut Rng) -> Self {
            SymlinkArgs {
                place: Gen::gen(g),
                symlink_attributes: Gen::gen(g),
                symlink_data: Gen::gen(g),
            }
        }
    }

    impl Gen for Createhow3 {
        fn gen(g: &mut Rng) -> Self {
            match g.below(3) {
                0 => Createhow3::Unchecked(Gen::gen(g)),
                1 => Createhow3::Guarded(Gen::gen(g)),
                _ => Createhow3::Exclusive(Gen::gen(g)),
            }
        }
    }
}
