//! The failure result a server answers with a status and nothing else to
//! say (no attributes: every `post_op_attr` / `pre_op_attr` FALSE).

use super::{CreateRes, Nfs3Res, Nfsstat3, RenameWcc, Res, WccData, NFSPROC3_LINK, NFSPROC3_MKNOD};

impl Nfs3Res {
    /// The results of `proc` failing with `status` (which must not be
    /// NFS3_OK) and no attributes. `None` for NULL (it cannot fail) and for
    /// a procedure without codecs.
    pub fn failure(proc: u32, status: Nfsstat3) -> Option<Nfs3Res> {
        let wcc = WccData::empty;
        Some(match proc {
            super::NFSPROC3_GETATTR => Nfs3Res::Getattr(Res::Fail(status, ())),
            super::NFSPROC3_SETATTR => Nfs3Res::Setattr(Res::Fail(status, wcc())),
            super::NFSPROC3_LOOKUP => Nfs3Res::Lookup(Res::Fail(status, None)),
            super::NFSPROC3_ACCESS => Nfs3Res::Access(Res::Fail(status, None)),
            super::NFSPROC3_READLINK => Nfs3Res::Readlink(Res::Fail(status, None)),
            super::NFSPROC3_READ => Nfs3Res::Read(Res::Fail(status, None)),
            super::NFSPROC3_WRITE => Nfs3Res::Write(Res::Fail(status, wcc())),
            super::NFSPROC3_CREATE => Nfs3Res::Create(create(status)),
            super::NFSPROC3_MKDIR => Nfs3Res::Mkdir(create(status)),
            super::NFSPROC3_SYMLINK => Nfs3Res::Symlink(create(status)),
            super::NFSPROC3_REMOVE => Nfs3Res::Remove(Res::Fail(status, wcc())),
            super::NFSPROC3_RMDIR => Nfs3Res::Rmdir(Res::Fail(status, wcc())),
            super::NFSPROC3_RENAME => Nfs3Res::Rename(Res::Fail(
                status,
                RenameWcc {
                    fromdir_wcc: wcc(),
                    todir_wcc: wcc(),
                },
            )),
            super::NFSPROC3_READDIR => Nfs3Res::Readdir(Res::Fail(status, None)),
            super::NFSPROC3_READDIRPLUS => Nfs3Res::Readdirplus(Res::Fail(status, None)),
            super::NFSPROC3_FSSTAT => Nfs3Res::Fsstat(Res::Fail(status, None)),
            super::NFSPROC3_FSINFO => Nfs3Res::Fsinfo(Res::Fail(status, None)),
            super::NFSPROC3_PATHCONF => Nfs3Res::Pathconf(Res::Fail(status, None)),
            super::NFSPROC3_COMMIT => Nfs3Res::Commit(Res::Fail(status, wcc())),
            _ => return None,
        })
    }
}

fn create(status: Nfsstat3) -> CreateRes {
    Res::Fail(status, WccData::empty())
}

/// The XDR of `NFS3ERR_NOTSUPP` for the procedures without codecs: MKNOD
/// (`MKNOD3resfail { wcc_data dir_wcc; }`) and LINK (`LINK3resfail {
/// post_op_attr file_attributes; wcc_data linkdir_wcc; }`), every attribute
/// absent. `None` for any other procedure.
pub fn not_supported(proc: u32) -> Option<Vec<u8>> {
    let words: &[u32] = match proc {
        NFSPROC3_MKNOD => &[Nfsstat3::NFS3ERR_NOTSUPP.0, 0, 0],
        NFSPROC3_LINK => &[Nfsstat3::NFS3ERR_NOTSUPP.0, 0, 0, 0],
        _ => return None,
    };
    Some(words.iter().flat_map(|w| w.to_be_bytes()).collect())
}
