//! Each NFSv3 procedure on the export: decoded arguments in, results out.
//! Synchronous (it runs on the blocking pool); every failure is an
//! `nfsstat3` in the procedure's own failure result, with the attributes
//! the server can still give (RFC 1813 asks for them where it can:
//! `post_op_attr` / `wcc_data` in the `resfail` arms).

use std::sync::Arc;

use super::bufpool::BufPool;
use super::convert::{
    fattr, fh_in, fh_out, post, sattr, stable_in, stable_out, status, time_in, wcc,
};
use super::dirlist;
use crate::fs::{self, CreateHow, Export, NfsError, NfsResult};
use crate::nfs3::*;
use crate::Limits;
use rpcrdma_proto::provider::FileRange;

/// What a procedure needs besides its arguments.
#[derive(Clone, Debug)]
pub(crate) struct Env {
    /// The server's limits (rtmax, wtmax, READDIR bounds, path lengths).
    pub(crate) limits: Limits,
    /// The most octets of results the reply can carry (the transport's
    /// room less the RPC reply header), for READDIR / READDIRPLUS.
    pub(crate) room: u64,
    /// READ buffers.
    pub(crate) bufs: Arc<BufPool>,
    /// The transport sends a READ's data from the file (the Write chunk
    /// offered: [`rpcrdma::ReplyRoom::file_chunk`]): READ answers with a
    /// file range ([`read_file`]).
    pub(crate) file_chunk: Option<u64>,
}

/// Runs the procedure of `args` on `e` as [`execute`], except a READ the
/// transport sends from the file: its results and the file range of its
/// data (the results' `data` left empty).
pub(crate) fn run(e: &Export, args: Nfs3Args, env: &Env) -> (Nfs3Res, Option<FileRange>) {
    match args {
        Nfs3Args::Read(a) if env.file_chunk.is_some() => {
            let (res, range) = read_file(e, &a, env);
            (Nfs3Res::Read(res), range)
        }
        args => (execute(e, args, env), None),
    }
}

/// Runs the procedure of `args` on `e`.
pub(crate) fn execute(e: &Export, args: Nfs3Args, env: &Env) -> Nfs3Res {
    match args {
        Nfs3Args::Null(()) => Nfs3Res::Null(()),
        Nfs3Args::Getattr(a) => Nfs3Res::Getattr(getattr(e, &a)),
        Nfs3Args::Setattr(a) => Nfs3Res::Setattr(setattr(e, &a)),
        Nfs3Args::Lookup(a) => Nfs3Res::Lookup(lookup(e, &a)),
        Nfs3Args::Access(a) => Nfs3Res::Access(access(e, &a)),
        Nfs3Args::Readlink(a) => Nfs3Res::Readlink(readlink(e, &a, &env.limits)),
        Nfs3Args::Read(a) => Nfs3Res::Read(read(e, &a, env)),
        Nfs3Args::Write(a) => Nfs3Res::Write(write(e, &a, &env.limits)),
        Nfs3Args::Create(a) => Nfs3Res::Create(create(e, &a)),
        Nfs3Args::Mkdir(a) => Nfs3Res::Mkdir(created(e, &a.place, |e, d, n| {
            e.mkdir(d, n, &sattr(&a.attributes))
        })),
        Nfs3Args::Symlink(a) => Nfs3Res::Symlink(created(e, &a.place, |e, d, n| {
            e.symlink(d, n, &a.symlink_data.0, &sattr(&a.symlink_attributes))
        })),
        Nfs3Args::Remove(a) => Nfs3Res::Remove(remove(e, &a.object, Export::remove)),
        Nfs3Args::Rmdir(a) => Nfs3Res::Rmdir(remove(e, &a.object, Export::rmdir)),
        Nfs3Args::Rename(a) => Nfs3Res::Rename(rename(e, &a)),
        Nfs3Args::Readdir(a) => Nfs3Res::Readdir(dirlist::readdir(e, &a, env)),
        Nfs3Args::Readdirplus(a) => Nfs3Res::Readdirplus(dirlist::readdirplus(e, &a, env)),
        Nfs3Args::Fsstat(a) => Nfs3Res::Fsstat(fsstat(e, &a)),
        Nfs3Args::Fsinfo(a) => Nfs3Res::Fsinfo(fsinfo(e, &a, &env.limits)),
        Nfs3Args::Pathconf(a) => Nfs3Res::Pathconf(pathconf(e, &a)),
        Nfs3Args::Commit(a) => Nfs3Res::Commit(commit(e, &a)),
    }
}

/// The object's attributes, when a failure still has a readable object.
pub(crate) fn attr_of(e: &Export, fh: &FileHandle) -> PostOpAttr {
    let fh = fh_in(fh).ok()?;
    e.getattr(&fh).ok().as_ref().map(fattr)
}

/// `wcc_data` with only the after-attributes of `fh` (a failure's).
fn wcc_after(e: &Export, fh: &FileHandle) -> WccData {
    WccData {
        before: None,
        after: attr_of(e, fh),
    }
}

/// `Res::Fail` with `status` and the failure arm `fail` builds, unless
/// the status says the handle itself is bad (then nothing to look at).
fn fail<O, F>(err: NfsError, fail: impl FnOnce() -> F, none: F) -> Res<O, F> {
    match err {
        NfsError::Stale | NfsError::BadHandle => Res::Fail(status(err), none),
        _ => Res::Fail(status(err), fail()),
    }
}

fn getattr(e: &Export, a: &GetattrArgs) -> GetattrRes {
    match fh_in(&a.object).and_then(|fh| e.getattr(&fh)) {
        Ok(attr) => Res::Ok(fattr(&attr)),
        Err(err) => Res::Fail(status(err), ()),
    }
}

fn setattr(e: &Export, a: &SetattrArgs) -> SetattrRes {
    let r = fh_in(&a.object).and_then(|fh| {
        e.setattr(
            &fh,
            &sattr(&a.new_attributes),
            a.guard.as_ref().map(time_in),
        )
    });
    match r {
        Ok(w) => Res::Ok(wcc(&w)),
        Err(err) => fail(err, || wcc_after(e, &a.object), WccData::empty()),
    }
}

fn lookup(e: &Export, a: &LookupArgs) -> LookupRes {
    match fh_in(&a.what.dir).and_then(|d| e.lookup(&d, &a.what.name.0)) {
        Ok(l) => Res::Ok(LookupResOk {
            object: fh_out(&l.handle),
            obj_attributes: post(&l.attr),
            dir_attributes: post(&l.dir_attr),
        }),
        Err(err) => fail(err, || attr_of(e, &a.what.dir), None),
    }
}

fn access(e: &Export, a: &AccessArgs) -> AccessRes {
    match fh_in(&a.object).and_then(|fh| e.access(&fh, a.access)) {
        Ok((granted, attr)) => Res::Ok(AccessResOk {
            obj_attributes: post(&attr),
            access: granted,
        }),
        Err(err) => fail(err, || attr_of(e, &a.object), None),
    }
}

fn readlink(e: &Export, a: &ReadlinkArgs, l: &Limits) -> ReadlinkRes {
    match fh_in(&a.symlink).and_then(|fh| e.readlink(&fh)) {
        // A target longer than the server's path limit (made by a local
        // process) is not sent: clients bound what they accept.
        Ok((target, _)) if target.len() > l.max_path_len as usize => {
            Res::Fail(Nfsstat3::NFS3ERR_NAMETOOLONG, attr_of(e, &a.symlink))
        }
        Ok((target, attr)) => Res::Ok(ReadlinkResOk {
            symlink_attributes: post(&attr),
            data: NfsPath(target),
        }),
        Err(err) => fail(err, || attr_of(e, &a.symlink), None),
    }
}

fn read(e: &Export, a: &ReadArgs, env: &Env) -> ReadRes {
    let want = a.effective_count(&env.limits) as usize;
    let mut buf = env.bufs.take(want);
    let r = fh_in(&a.file).and_then(|fh| e.read_into(&fh, a.offset, &mut buf[..want]));
    match r {
        Ok(r) => Res::Ok(ReadResOk {
            file_attributes: post(&r.attr),
            count: r.len as u32,
            eof: r.eof,
            data: env.bufs.freeze(buf, r.len),
        }),
        Err(err) => fail(err, || attr_of(e, &a.file), None),
    }
}

/// READ as a file range (`fs::ops_read_file` says what the client sees
/// when the file changes before the range is sent).
fn read_file(e: &Export, a: &ReadArgs, env: &Env) -> (ReadRes, Option<FileRange>) {
    let want = a.effective_count(&env.limits);
    match fh_in(&a.file).and_then(|fh| e.read_range(&fh, a.offset, want)) {
        Ok(r) => (
            Res::Ok(ReadResOk {
                file_attributes: post(&r.attr),
                count: r.range.len(),
                eof: r.eof,
                data: bytes::Bytes::new(),
            }),
            Some(r.range),
        ),
        Err(err) => (fail(err, || attr_of(e, &a.file), None), None),
    }
}

fn write(e: &Export, a: &WriteArgs, l: &Limits) -> WriteRes {
    let data = a.effective_data(l);
    let r = fh_in(&a.file).and_then(|fh| e.write(&fh, a.offset, &data, stable_in(a.stable)));
    match r {
        Ok(w) => Res::Ok(WriteResOk {
            file_wcc: wcc(&w.wcc),
            count: w.count,
            committed: stable_out(w.committed),
            verf: w.verf,
        }),
        Err(err) => fail(err, || wcc_after(e, &a.file), WccData::empty()),
    }
}

fn create(e: &Export, a: &CreateArgs) -> CreateRes {
    let how = match &a.how {
        Createhow3::Unchecked(s) => CreateHow::Unchecked(sattr(s)),
        Createhow3::Guarded(s) => CreateHow::Guarded(sattr(s)),
        Createhow3::Exclusive(v) => CreateHow::Exclusive(*v),
    };
    created(e, &a.place, |e, d, n| e.create(d, n, how))
}

/// CREATE, MKDIR and SYMLINK: the same result.
fn created(
    e: &Export,
    place: &Diropargs3,
    op: impl FnOnce(&Export, &fs::FileHandle, &[u8]) -> NfsResult<fs::Created>,
) -> CreateRes {
    match fh_in(&place.dir).and_then(|d| op(e, &d, &place.name.0)) {
        Ok(c) => Res::Ok(CreateResOk {
            obj: Some(fh_out(&c.handle)),
            obj_attributes: post(&c.attr),
            dir_wcc: wcc(&c.dir_wcc),
        }),
        Err(err) => fail(err, || wcc_after(e, &place.dir), WccData::empty()),
    }
}

fn remove(
    e: &Export,
    what: &Diropargs3,
    op: fn(&Export, &fs::FileHandle, &[u8]) -> NfsResult<fs::Wcc>,
) -> RemoveRes {
    match fh_in(&what.dir).and_then(|d| op(e, &d, &what.name.0)) {
        Ok(w) => Res::Ok(wcc(&w)),
        Err(err) => fail(err, || wcc_after(e, &what.dir), WccData::empty()),
    }
}

fn rename(e: &Export, a: &RenameArgs) -> RenameRes {
    let r = fh_in(&a.from.dir).and_then(|fd| {
        let td = fh_in(&a.to.dir)?;
        e.rename(&fd, &a.from.name.0, &td, &a.to.name.0)
    });
    match r {
        Ok((from, to)) => Res::Ok(RenameWcc {
            fromdir_wcc: wcc(&from),
            todir_wcc: wcc(&to),
        }),
        Err(err) => {
            let both = RenameWcc {
                fromdir_wcc: WccData::empty(),
                todir_wcc: WccData::empty(),
            };
            let after = || RenameWcc {
                fromdir_wcc: wcc_after(e, &a.from.dir),
                todir_wcc: wcc_after(e, &a.to.dir),
            };
            fail(err, after, both)
        }
    }
}

fn fsstat(e: &Export, a: &FsArgs) -> FsstatRes {
    match fh_in(&a.object).and_then(|fh| e.fsstat(&fh)) {
        Ok(s) => Res::Ok(FsstatResOk {
            obj_attributes: post(&s.attr),
            tbytes: s.tbytes,
            fbytes: s.fbytes,
            abytes: s.abytes,
            tfiles: s.tfiles,
            ffiles: s.ffiles,
            afiles: s.afiles,
            invarsec: s.invarsec,
        }),
        Err(err) => fail(err, || attr_of(e, &a.object), None),
    }
}

//= rfc1813#section-3.3.19
//# rtmax
//#    The maximum size in bytes of a READ request supported
//#    by the server. Any READ with a number greater than
//#    rtmax will result in a short read of rtmax bytes or
//#    less.
fn fsinfo(e: &Export, a: &FsArgs, l: &Limits) -> FsinfoRes {
    match fh_in(&a.object).and_then(|fh| e.fsinfo(&fh)) {
        Ok(i) => Res::Ok(FsinfoResOk {
            obj_attributes: post(&i.attr),
            rtmax: i.rtmax.min(l.rtmax),
            rtpref: i.rtpref.min(l.rtmax),
            rtmult: i.rtmult,
            wtmax: i.wtmax.min(l.wtmax),
            wtpref: i.wtpref.min(l.wtmax),
            wtmult: i.wtmult,
            dtpref: i.dtpref.min(l.max_dir_reply),
            maxfilesize: i.maxfilesize,
            time_delta: super::convert::time_out(i.time_delta),
            // LINK answers NFS3ERR_NOTSUPP: no FSF_LINK ("FSINFO describes
            // the most commonly unsupported procedures in the properties
            // bit map", RFC 1813 §1.6).
            properties: i.properties & !fs::FSF_LINK,
        }),
        Err(err) => fail(err, || attr_of(e, &a.object), None),
    }
}

fn pathconf(e: &Export, a: &FsArgs) -> PathconfRes {
    match fh_in(&a.object).and_then(|fh| e.pathconf(&fh)) {
        Ok(p) => Res::Ok(PathconfResOk {
            obj_attributes: post(&p.attr),
            linkmax: p.linkmax,
            name_max: p.name_max,
            no_trunc: p.no_trunc,
            chown_restricted: p.chown_restricted,
            case_insensitive: p.case_insensitive,
            case_preserving: p.case_preserving,
        }),
        Err(err) => fail(err, || attr_of(e, &a.object), None),
    }
}

fn commit(e: &Export, a: &CommitArgs) -> CommitRes {
    match fh_in(&a.file).and_then(|fh| e.commit(&fh, a.offset, a.count)) {
        Ok(c) => Res::Ok(CommitResOk {
            file_wcc: wcc(&c.wcc),
            verf: c.verf,
        }),
        Err(err) => fail(err, || wcc_after(e, &a.file), WccData::empty()),
    }
}
