//! The server's checks of decoded arguments against its [`Limits`]: what
//! decodes but cannot be acted on gets an `nfsstat3`, not GARBAGE_ARGS.

use rpcrdma_proto::xdr::{DecodeErrorKind, Reader};
use rpcrdma_proto::DecodeError;

use super::{DdpSource, Filename, Nfs3Args, Nfsstat3};
use crate::{ArgError, Limits};

impl Nfs3Args {
    /// Checks decoded arguments against the server's limits:
    ///
    /// * a `filename3` longer than [`Limits::max_name_len`], or a SYMLINK
    ///   target longer than [`Limits::max_path_len`]: `NFS3ERR_NAMETOOLONG`
    ///   (the server advertises `no_trunc` TRUE in PATHCONF);
    /// * an empty SYMLINK target: `NFS3ERR_INVAL` (as Linux's nfsd);
    /// * a WRITE whose `count` differs from its data's length: GARBAGE_ARGS
    ///   (as Linux's nfsd: the two lengths of one item disagree).
    ///
    /// READ and READDIR counts are not checked: the server clamps them
    /// ([`super::ReadArgs::effective_count`], [`Limits::max_dir_reply`]).
    pub fn check(&self, l: &Limits) -> Result<(), ArgError> {
        match self {
            Nfs3Args::Lookup(a) => name(&a.what.name, l),
            Nfs3Args::Create(a) => name(&a.place.name, l),
            Nfs3Args::Mkdir(a) => name(&a.place.name, l),
            Nfs3Args::Remove(a) | Nfs3Args::Rmdir(a) => name(&a.object.name, l),
            Nfs3Args::Rename(a) => name(&a.from.name, l).and(name(&a.to.name, l)),
            Nfs3Args::Symlink(a) => {
                name(&a.place.name, l)?;
                let n = a.symlink_data.0.len();
                too_long("symlink target", n, l.max_path_len, "max_path_len")?;
                if n == 0 {
                    return Err(ArgError::status(
                        Nfsstat3::NFS3ERR_INVAL,
                        "empty symlink target",
                    ));
                }
                Ok(())
            }
            Nfs3Args::Write(a) if a.count as usize != a.data.len() => {
                Err(ArgError::Garbage(DecodeError::new(
                    DecodeErrorKind::BadValue {
                        what: "WRITE3args",
                        detail: format!("count {} but {} octets of data", a.count, a.data.len()),
                    },
                    0,
                    "write.count",
                )))
            }
            _ => Ok(()),
        }
    }

    /// [`Nfs3Args::decode`] then [`Nfs3Args::check`]: what a server calls.
    pub fn decode_checked(
        proc: u32,
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, ArgError> {
        let a = Nfs3Args::decode(proc, r, l, ddp)?;
        a.check(l)?;
        Ok(a)
    }
}

//= rfc1813#section-3.2
//# If no_trunc is TRUE and the filename exceeds the
//# server's file system maximum filename length, the operation will
//# fail with the error, NFS3ERR_NAMETOOLONG.
fn name(n: &Filename, l: &Limits) -> Result<(), ArgError> {
    too_long("name", n.0.len(), l.max_name_len, "max_name_len")
}

/// NFS3ERR_NAMETOOLONG if `len` exceeds `max` (the limit named `limit`).
fn too_long(what: &str, len: usize, max: u32, limit: &str) -> Result<(), ArgError> {
    if len > max as usize {
        return Err(ArgError::status(
            Nfsstat3::NFS3ERR_NAMETOOLONG,
            format!("{what} of {len} octets exceeds {limit} = {max}"),
        ));
    }
    Ok(())
}
