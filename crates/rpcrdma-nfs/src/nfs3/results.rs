//! RFC 1813 §3.3 procedure results (the `resok` arms; [`Res`] adds the
//! status and the `resfail` arm).

use bytes::Bytes;
use rpcrdma_proto::xdr::{DecodeErrorKind, Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use super::ddp::{get_ddp_opaque, DdpCodec, DdpParts, DdpSource};
use super::res::{codec_via_ddp, Res};
use super::types::{
    Cookieverf3, Fattr3, FileHandle, Filename, NfsPath, Nfstime3, PostOpAttr, PostOpFh3, StableHow,
    WccData, Writeverf3,
};
use crate::codec::{xdr_encode_via_codec, xdr_struct, Codec};
use crate::Limits;

/// GETATTR3res.
pub type GetattrRes = Res<Fattr3, ()>;
/// SETATTR3res (`obj_wcc` either way).
pub type SetattrRes = Res<WccData, WccData>;
/// LOOKUP3res.
pub type LookupRes = Res<LookupResOk, PostOpAttr>;
/// ACCESS3res.
pub type AccessRes = Res<AccessResOk, PostOpAttr>;
/// READLINK3res.
pub type ReadlinkRes = Res<ReadlinkResOk, PostOpAttr>;
/// READ3res.
pub type ReadRes = Res<ReadResOk, PostOpAttr>;
/// WRITE3res.
pub type WriteRes = Res<WriteResOk, WccData>;
/// CREATE3res, MKDIR3res and SYMLINK3res (same XDR).
pub type CreateRes = Res<CreateResOk, WccData>;
/// REMOVE3res and RMDIR3res (`dir_wcc` either way).
pub type RemoveRes = Res<WccData, WccData>;
/// RENAME3res.
pub type RenameRes = Res<RenameWcc, RenameWcc>;
/// READDIR3res.
pub type ReaddirRes = Res<ReaddirResOk, PostOpAttr>;
/// READDIRPLUS3res.
pub type ReaddirplusRes = Res<ReaddirplusResOk, PostOpAttr>;
/// FSSTAT3res.
pub type FsstatRes = Res<FsstatResOk, PostOpAttr>;
/// FSINFO3res.
pub type FsinfoRes = Res<FsinfoResOk, PostOpAttr>;
/// PATHCONF3res.
pub type PathconfRes = Res<PathconfResOk, PostOpAttr>;
/// COMMIT3res.
pub type CommitRes = Res<CommitResOk, WccData>;

xdr_struct! {
    /// LOOKUP3resok.
    LookupResOk {
        /// The object's handle.
        object: FileHandle,
        /// Its attributes.
        obj_attributes: PostOpAttr,
        /// The directory's attributes.
        dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// ACCESS3resok.
    AccessResOk {
        /// The object's attributes.
        obj_attributes: PostOpAttr,
        /// The ACCESS3_* bits granted.
        access: u32,
    }
}

/// READLINK3resok. The path is DDP-eligible (RFC 8267 §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadlinkResOk {
    /// The link's attributes.
    pub symlink_attributes: PostOpAttr,
    /// The target (at most [`Limits::max_path_len`] when decoded).
    pub data: NfsPath,
}

impl DdpCodec for ReadlinkResOk {
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError> {
        Ok(ReadlinkResOk {
            symlink_attributes: PostOpAttr::get(r, l)?,
            data: NfsPath(
                get_ddp_opaque(r, ddp, l.max_path_len, "max_path_len", "readlink.data")?.to_vec(),
            ),
        })
    }
}

impl DdpParts for ReadlinkResOk {
    fn ddp_item(&self) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&self.data.0))
    }
    fn head_len(&self) -> usize {
        self.symlink_attributes.xdr_len()
    }
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.symlink_attributes.put(w)
    }
}

/// READ3resok. The data is DDP-eligible (RFC 8267 §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResOk {
    /// The file's attributes.
    pub file_attributes: PostOpAttr,
    /// Octets read (equals the data's length in a well-formed reply).
    pub count: u32,
    /// End of file reached.
    pub eof: bool,
    /// The data (at most [`Limits::rtmax`] octets when decoded).
    pub data: Bytes,
}

impl DdpCodec for ReadResOk {
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError> {
        Ok(ReadResOk {
            file_attributes: PostOpAttr::get(r, l)?,
            count: u32::get(r, l)?,
            eof: bool::get(r, l)?,
            data: get_ddp_opaque(r, ddp, l.rtmax, "rtmax", "read.data")?,
        })
    }
}

impl DdpParts for ReadResOk {
    fn ddp_item(&self) -> Option<Bytes> {
        Some(self.data.clone())
    }
    fn head_len(&self) -> usize {
        self.file_attributes.xdr_len() + 8
    }
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.file_attributes.put(w)?;
        w.u32(self.count)?;
        w.bool(self.eof)
    }
}

codec_via_ddp!(ReadlinkResOk, ReadResOk);

xdr_struct! {
    /// WRITE3resok.
    WriteResOk {
        /// The file's attributes before and after.
        file_wcc: WccData,
        /// Octets written.
        count: u32,
        /// Stability reached.
        committed: StableHow,
        /// The server's write verifier.
        verf: Writeverf3,
    }
}

xdr_struct! {
    /// CREATE3resok, MKDIR3resok, SYMLINK3resok.
    CreateResOk {
        /// The new object's handle.
        obj: PostOpFh3,
        /// Its attributes.
        obj_attributes: PostOpAttr,
        /// The directory's attributes before and after.
        dir_wcc: WccData,
    }
}

xdr_struct! {
    /// RENAME3resok and RENAME3resfail.
    RenameWcc {
        /// The source directory.
        fromdir_wcc: WccData,
        /// The target directory.
        todir_wcc: WccData,
    }
}

xdr_struct! {
    /// `entry3` (without its `nextentry` link: see [`Dirlist`]).
    Entry3 {
        /// File id.
        fileid: u64,
        /// Name.
        name: Filename,
        /// Cookie to continue after this entry.
        cookie: u64,
    }
}

xdr_struct! {
    /// `entryplus3` (without its `nextentry` link).
    Entryplus3 {
        /// File id.
        fileid: u64,
        /// Name.
        name: Filename,
        /// Cookie to continue after this entry.
        cookie: u64,
        /// Attributes.
        name_attributes: PostOpAttr,
        /// Handle.
        name_handle: PostOpFh3,
    }
}

/// A directory entry (for the name check while decoding a list).
pub trait DirEntry: Codec {
    /// The entry's name.
    fn name(&self) -> &Filename;
}

impl DirEntry for Entry3 {
    fn name(&self) -> &Filename {
        &self.name
    }
}

impl DirEntry for Entryplus3 {
    fn name(&self) -> &Filename {
        &self.name
    }
}

/// `dirlist3` / `dirlistplus3`: the entries (a linked list on the wire:
/// `entry3 *entries` with `*nextentry` links) and `eof`. Decoding counts
/// the entries against [`Limits::max_dir_entries`] and checks each name
/// against [`Limits::max_name_len`] (the server is to blame for either).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirlist<E> {
    /// The entries in order.
    pub entries: Vec<E>,
    /// No more entries after these.
    pub eof: bool,
}

impl<E: DirEntry> Codec for Dirlist<E> {
    fn xdr_len(&self) -> usize {
        self.entries.iter().map(|e| 4 + e.xdr_len()).sum::<usize>() + 4 + 4
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        for e in &self.entries {
            w.bool(true)?;
            e.put(w)?;
        }
        w.bool(false)?;
        w.bool(self.eof)
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        let mut entries = Vec::new();
        loop {
            let at = r.position();
            if !r.bool("dirlist.entry follows")? {
                break;
            }
            if entries.len() >= l.max_dir_entries as usize {
                return Err(DecodeError::new(
                    DecodeErrorKind::LimitExceeded {
                        limit: "max_dir_entries",
                        max: l.max_dir_entries.into(),
                        value: entries.len() as u64 + 1,
                    },
                    at,
                    "dirlist.entries",
                ));
            }
            let e = E::get(r, l)?;
            let n = e.name().0.len();
            if n > l.max_name_len as usize {
                return Err(DecodeError::new(
                    DecodeErrorKind::LimitExceeded {
                        limit: "max_name_len",
                        max: l.max_name_len.into(),
                        value: n as u64,
                    },
                    at,
                    "dirlist.entry.name",
                ));
            }
            entries.push(e);
        }
        Ok(Dirlist {
            entries,
            eof: r.bool("dirlist.eof")?,
        })
    }
}

xdr_struct! {
    /// READDIR3resok.
    ReaddirResOk {
        /// The directory's attributes.
        dir_attributes: PostOpAttr,
        /// The cookie verifier.
        cookieverf: Cookieverf3,
        /// The entries.
        reply: Dirlist<Entry3>,
    }
}

xdr_struct! {
    /// READDIRPLUS3resok.
    ReaddirplusResOk {
        /// The directory's attributes.
        dir_attributes: PostOpAttr,
        /// The cookie verifier.
        cookieverf: Cookieverf3,
        /// The entries.
        reply: Dirlist<Entryplus3>,
    }
}

xdr_struct! {
    /// FSSTAT3resok.
    FsstatResOk {
        /// The root's attributes.
        obj_attributes: PostOpAttr,
        /// Total octets.
        tbytes: u64,
        /// Free octets.
        fbytes: u64,
        /// Free octets available to the caller.
        abytes: u64,
        /// Total file slots.
        tfiles: u64,
        /// Free file slots.
        ffiles: u64,
        /// Free file slots available to the caller.
        afiles: u64,
        /// Seconds the values stay valid.
        invarsec: u32,
    }
}

xdr_struct! {
    /// FSINFO3resok.
    FsinfoResOk {
        /// The root's attributes.
        obj_attributes: PostOpAttr,
        /// Largest READ.
        rtmax: u32,
        /// Preferred READ size.
        rtpref: u32,
        /// Suggested READ multiple.
        rtmult: u32,
        /// Largest WRITE.
        wtmax: u32,
        /// Preferred WRITE size.
        wtpref: u32,
        /// Suggested WRITE multiple.
        wtmult: u32,
        /// Preferred READDIR size.
        dtpref: u32,
        /// Largest file size.
        maxfilesize: u64,
        /// Time granularity.
        time_delta: Nfstime3,
        /// FSF3_* bits.
        properties: u32,
    }
}

xdr_struct! {
    /// PATHCONF3resok.
    PathconfResOk {
        /// The object's attributes.
        obj_attributes: PostOpAttr,
        /// Most hard links.
        linkmax: u32,
        /// Longest name.
        name_max: u32,
        /// Longer names are refused, not cut.
        no_trunc: bool,
        /// Only the superuser changes owners.
        chown_restricted: bool,
        /// Names compare without case.
        case_insensitive: bool,
        /// Case is kept.
        case_preserving: bool,
    }
}

xdr_struct! {
    /// COMMIT3resok.
    CommitResOk {
        /// The file's attributes before and after.
        file_wcc: WccData,
        /// The server's write verifier.
        verf: Writeverf3,
    }
}

xdr_encode_via_codec!(Dirlist<Entry3>, Dirlist<Entryplus3>);

#[cfg(test)]
mod gen {
    use super::*;
    use crate::testgen::{Gen, Rng};

    impl Gen for ReadlinkResOk {
        fn gen(g: &mut Rng) -> Self {
            ReadlinkResOk {
                symlink_attributes: Gen::gen(g),
                data: NfsPath(g.bytes(40)),
            }
        }
    }

    impl Gen for ReadResOk {
        fn gen(g: &mut Rng) -> Self {
            let data = Bytes::from(g.bytes(70));
            ReadResOk {
                file_attributes: Gen::gen(g),
                count: data.len() as u32,
                eof: Gen::gen(g),
                data,
            }
        }
    }

    impl<E: Gen> Gen for Dirlist<E> {
        fn gen(g: &mut Rng) -> Self {
            let n = g.below(5) as usize;
            Dirlist {
                entries: (0..n).map(|_| E::gen(g)).collect(),
                eof: Gen::gen(g),
            }
        }
    }
}
