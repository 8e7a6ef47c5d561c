//! One NFSv3 call: encoding with the RFC 8267 chunk offers, the call,
//! bounded decoding, and the typed procedures on top.

use bytes::Bytes;
use rpcrdma::Client;

use super::error::NfsError;
use super::{NfsClient, NfsClientOptions};
use crate::binding::message::{call_options, decode_res, encode_args, encode_inline};
use crate::nfs3::{
    proc_name, CommitArgs, CommitResOk, CreateArgs, CreateResOk, Createhow3, Diropargs3, Fattr3,
    FileHandle, Filename, FsArgs, FsinfoResOk, GetattrArgs, LookupArgs, LookupResOk, Nfs3Args,
    Nfs3Res, ReadArgs, ReadResOk, ReaddirplusArgs, ReaddirplusResOk, RemoveArgs, Res, StableHow,
    WriteArgs, WriteResOk, NFS_PROGRAM, NFS_V3,
};
use crate::Limits;

/// The smallest `entryplus3` on the wire with its list link: link (4),
/// fileid (8), an empty name (4), cookie (8), no attributes (4), no
/// handle (4). A reply of `maxcount` octets holds at most
/// `maxcount / MIN_ENTRYPLUS` entries.
pub(crate) const MIN_ENTRYPLUS: u32 = 32;

/// The procedure's short name (`"READ"`).
pub(crate) fn short_name(proc: u32) -> &'static str {
    proc_name(proc)
        .map(|n| n.trim_start_matches("NFSPROC3_"))
        .unwrap_or("unknown procedure")
}

/// Calls `args` over `rpc`; decodes with `limits` (the caller's, narrowed
/// per call: see [`call_limits`]).
pub(crate) async fn call_on(
    rpc: &Client,
    opts: &NfsClientOptions,
    args: &Nfs3Args,
) -> Result<Nfs3Res, NfsError> {
    let proc = args.proc();
    let name = short_name(proc);
    let msg = if opts.ddp_writes {
        encode_args(args)
    } else {
        encode_inline(args)
    }
    .map_err(|e| NfsError::Caller(format!("NFS {name}: cannot encode the call: {e}")))?;
    let mut co = call_options(args, &opts.limits);
    co.auth = Some(opts.auth.clone());
    let reply = rpc
        .call_with(NFS_PROGRAM, NFS_V3, proc, msg, &co)
        .await
        .map_err(|error| NfsError::Rpc {
            proc: format!("NFS {name}"),
            error,
        })?;
    decode_res(proc, reply.results(), &call_limits(args, &opts.limits))
        .map_err(|e| NfsError::bad_reply(format!("NFS {name}"), e.to_string()))
}

/// The decoding limits of one call's reply: READ data at most the count
/// asked; READDIRPLUS entries at most what `maxcount` octets can hold.
pub(crate) fn call_limits(args: &Nfs3Args, l: &Limits) -> Limits {
    let mut l = *l;
    match args {
        //= rfc1813#section-3.3.6
        //# count
        //#    The number of bytes of data returned by the read.
        Nfs3Args::Read(a) => l.rtmax = l.rtmax.min(a.count),
        Nfs3Args::Readdirplus(a) => {
            l.max_dir_entries = l.max_dir_entries.min(a.maxcount / MIN_ENTRYPLUS + 1)
        }
        _ => {}
    }
    l
}

/// The `resok` arm of a result, or the status as an [`NfsError`] about
/// `what`.
fn ok<O, F>(res: Res<O, F>, proc: u32, what: impl FnOnce() -> String) -> Result<O, NfsError> {
    match res {
        Res::Ok(o) => Ok(o),
        Res::Fail(status, _) => Err(NfsError::Status {
            proc: short_name(proc),
            status,
            what: what(),
        }),
    }
}

/// Results of another procedure than called: cannot happen with
/// `decode_res(proc, ..)`, reported as the server's fault rather than a
/// panic.
fn mismatch(proc: u32) -> NfsError {
    NfsError::bad_reply(
        format!("NFS {}", short_name(proc)),
        "results of another procedure",
    )
}

/// FSINFO on a bare runtime client (before an [`NfsClient`] exists).
pub(crate) async fn fsinfo_on(
    rpc: &Client,
    opts: &NfsClientOptions,
    fh: &FileHandle,
) -> Result<FsinfoResOk, NfsError> {
    let args = Nfs3Args::Fsinfo(FsArgs { object: fh.clone() });
    let proc = args.proc();
    match call_on(rpc, opts, &args).await? {
        Nfs3Res::Fsinfo(r) => ok(r, proc, || "the export root".into()),
        _ => Err(mismatch(proc)),
    }
}

/// Checks a name the caller gives against the limits before sending it.
fn filename(name: &[u8], l: &Limits) -> Result<Filename, NfsError> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(NfsError::Caller(format!(
            "{:?} is not a file name (empty, or with '/' or NUL)",
            String::from_utf8_lossy(name)
        )));
    }
    if name.len() > l.max_name_len as usize {
        return Err(NfsError::Caller(format!(
            "name of {} octets exceeds {} (NFS3ERR_NAMETOOLONG)",
            name.len(),
            l.max_name_len
        )));
    }
    Ok(Filename(name.to_vec()))
}

/// Shows a name for messages.
pub(crate) fn show(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

impl NfsClient {
    async fn call(&self, args: &Nfs3Args) -> Result<Nfs3Res, NfsError> {
        call_on(&self.inner.rpc, &self.inner.opts, args).await
    }

    /// NFSPROC3_NULL.
    pub async fn null(&self) -> Result<(), NfsError> {
        match self.call(&Nfs3Args::Null(())).await? {
            Nfs3Res::Null(()) => Ok(()),
            _ => Err(mismatch(0)),
        }
    }

    /// NFSPROC3_GETATTR.
    pub async fn getattr(&self, fh: &FileHandle) -> Result<Fattr3, NfsError> {
        let args = Nfs3Args::Getattr(GetattrArgs { object: fh.clone() });
        let proc = args.proc();
        match self.call(&args).await? {
            Nfs3Res::Getattr(r) => ok(r, proc, || "a file handle".into()),
            _ => Err(mismatch(proc)),
        }
    }

    /// NFSPROC3_FSINFO.
    pub async fn fsinfo_of(&self, fh: &FileHandle) -> Result<FsinfoResOk, NfsError> {
        fsinfo_on(&self.inner.rpc, &self.inner.opts, fh).await
    }

    /// NFSPROC3_LOOKUP of `name` in `dir`.
    pub async fn lookup(&self, dir: &FileHandle, name: &[u8]) -> Result<LookupResOk, NfsError> {
        let args = Nfs3Args::Lookup(LookupArgs {
            what: Diropargs3 {
                dir: dir.clone(),
                name: filename(name, &self.inner.opts.limits)?,
            },
        });
        let proc = args.proc();
        match self.call(&args).await? {
            Nfs3Res::Lookup(r) => ok(r, proc, || show(name)),
            _ => Err(mismatch(proc)),
        }
    }

    /// NFSPROC3_READ of `count` octets at `offset`. The data is at most
    /// `count` octets and agrees with the reply's `count` (else
    /// [`NfsError::BadReply`]).
    pub async fn read(
        &self,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<ReadResOk, NfsError> {
        let args = Nfs3Args::Read(ReadArgs {
            file: fh.clone(),
            offset,
            count,
        });
        let proc = args.proc();
        let r = match self.call(&args).await? {
            Nfs3Res::Read(r) => ok(r, proc, || format!("{count} octets at offset {offset}"))?,
            _ => return Err(mismatch(proc)),
        };
        if r.count as usize != r.data.len() || r.count > count {
            return Err(NfsError::bad_reply(
                "NFS READ",
                format!(
                    "asked {count} octets at offset {offset}: count {} with {} octets of data",
                    r.count,
                    r.data.len()
                ),
            ));
        }
        Ok(r)
    }

    /// NFSPROC3_WRITE of `data` at `offset`.
    pub async fn write(
        &self,
        fh: &FileHandle,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<WriteResOk, NfsError> {
        self.write_returning(fh, offset, data, stable).await.0
    }

    /// [`NfsClient::write`], giving the data back (for the caller to
    /// recycle its buffer once nothing else holds it).
    pub(crate) async fn write_returning(
        &self,
        fh: &FileHandle,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> (Result<WriteResOk, NfsError>, Bytes) {
        let count = match u32::try_from(data.len()) {
            Ok(c) => c,
            Err(_) => {
                let e = NfsError::Caller(format!("WRITE of {} octets", data.len()));
                return (Err(e), data);
            }
        };
        let args = Nfs3Args::Write(WriteArgs {
            file: fh.clone(),
            offset,
            count,
            stable,
            data,
        });
        let res = self.call(&args).await;
        let data = match args {
            Nfs3Args::Write(a) => a.data,
            _ => Bytes::new(),
        };
        (check_write(res, count, offset), data)
    }

    /// NFSPROC3_COMMIT of `count` octets at `offset` (0, 0: the whole
    /// file).
    pub async fn commit(
        &self,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<CommitResOk, NfsError> {
        let args = Nfs3Args::Commit(CommitArgs {
            file: fh.clone(),
            offset,
            count,
        });
        let proc = args.proc();
        match self.call(&args).await? {
            Nfs3Res::Commit(r) => ok(r, proc, || "a file".into()),
            _ => Err(mismatch(proc)),
        }
    }

    /// NFSPROC3_CREATE of `name` in `dir`: the new object's handle (from
    /// the reply, or a LOOKUP when the server left it out) and attributes.
    pub async fn create(
        &self,
        dir: &FileHandle,
        name: &[u8],
        how: Createhow3,
    ) -> Result<(FileHandle, Option<Fattr3>), NfsError> {
        let args = Nfs3Args::Create(CreateArgs {
            place: Diropargs3 {
                dir: dir.clone(),
                name: filename(name, &self.inner.opts.limits)?,
            },
            how,
        });
        let proc = args.proc();
        let r: CreateResOk = match self.call(&args).await? {
            Nfs3Res::Create(r) => ok(r, proc, || show(name))?,
            _ => return Err(mismatch(proc)),
        };
        match r.obj {
            Some(fh) => Ok((fh, r.obj_attributes)),
            //= rfc1813#section-3.3.8
            //# obj
            //#    The file handle of the newly created regular file.
            // The handle is a post_op_fh3 (optional): without it, LOOKUP.
            None => {
                let l = self.lookup(dir, name).await?;
                Ok((l.object, l.obj_attributes))
            }
        }
    }

    /// NFSPROC3_REMOVE of `name` in `dir`.
    pub async fn remove(&self, dir: &FileHandle, name: &[u8]) -> Result<(), NfsError> {
        let args = Nfs3Args::Remove(RemoveArgs {
            object: Diropargs3 {
                dir: dir.clone(),
                name: filename(name, &self.inner.opts.limits)?,
            },
        });
        let proc = args.proc();
        match self.call(&args).await? {
            Nfs3Res::Remove(r) => ok(r, proc, || show(name)).map(drop),
            _ => Err(mismatch(proc)),
        }
    }

    /// NFSPROC3_READDIRPLUS of `dir` from `cookie` (with its verifier).
    pub async fn readdirplus(
        &self,
        dir: &FileHandle,
        cookie: u64,
        cookieverf: [u8; 8],
        maxcount: u32,
    ) -> Result<ReaddirplusResOk, NfsError> {
        let args = Nfs3Args::Readdirplus(ReaddirplusArgs {
            dir: dir.clone(),
            cookie,
            cookieverf,
            // As Linux's client (encode_readdirplus3args): "We just make
            // sure we make dircount big enough".
            dircount: maxcount >> 3,
            maxcount,
        });
        let proc = args.proc();
        match self.call(&args).await? {
            Nfs3Res::Readdirplus(r) => ok(r, proc, || "a directory".into()),
            _ => Err(mismatch(proc)),
        }
    }
}

/// The WRITE results of a call of `count` octets at `offset`.
fn check_write(
    res: Result<Nfs3Res, NfsError>,
    count: u32,
    offset: u64,
) -> Result<WriteResOk, NfsError> {
    let proc = crate::nfs3::NFSPROC3_WRITE;
    let r = match res? {
        Nfs3Res::Write(r) => ok(r, proc, || format!("{count} octets at offset {offset}"))?,
        _ => return Err(mismatch(proc)),
    };
    //= rfc1813#section-3.3.7
    //# count
    //#    The number of bytes of data written to the file. The
    //#    server may write fewer bytes than requested. If so, the
    //#    actual number of bytes written starting at location,
    //#    offset, is returned.
    if r.count > count {
        return Err(NfsError::bad_reply(
            "NFS WRITE",
            format!(
                "sent {count} octets at offset {offset}, told {} written",
                r.count
            ),
        ));
    }
    Ok(r)
}
