//! The MOUNT program (100005 version 3) as a runtime [`Handler`], for
//! ONC RPC over TCP (record marking).
//!
//! * NULL: nothing.
//! * MNT: `/` (or an empty path) and the export's absolute path name the
//!   export root; a path below either (`/a/b`, `DIR/a/b`) is looked up one
//!   component at a time inside the export (`..` refused, symlinks never
//!   followed) and must be a directory. The answer carries the directory's
//!   handle and the flavors AUTH_SYS, AUTH_NONE (AUTH_SYS first: Linux's
//!   client takes the first flavor it supports; rpc.mountd lists AUTH_SYS
//!   alone by default). Failures: MNT3ERR_NOENT, MNT3ERR_NOTDIR,
//!   MNT3ERR_ACCES (`..`, a mount point), MNT3ERR_NAMETOOLONG, MNT3ERR_IO.
//!   Like rpc.mountd, an AUTH_NONE caller is not refused (RFC 1813 says
//!   "AUTH_UNIX authentication or better is required": we report the
//!   credential, as for every call, and enforce nothing).
//! * UMNT: forgets the caller's entry in the mount list (void).
//! * EXPORT: `/` and the export's absolute path, no groups (everyone).
//! * DUMP, UMNTALL (no codecs): PROC_UNAVAIL; another version:
//!   PROG_MISMATCH (3, 3).
//!
//! The mount list (who mounted what, for the report) is bounded by
//! [`MAX_MOUNTS`] entries, oldest dropped first.

use std::collections::VecDeque;
use std::future::ready;
use std::sync::{Arc, Mutex};

use rpcrdma::{CallContext, Handler, HandlerError, HandlerFuture, Message};
use rpcrdma_proto::xdr::Reader;

use super::convert::fh_out;
use crate::binding::message::{encode_inline, inline_bytes};
use crate::fs::{AsyncExport, Export, FileType, NfsError};
use crate::mount::{
    Dirpath, Export as ExportNode, Exports, MountArgs, MountRes, MountResOk, MountResults,
    Mountstat3,
};
use crate::{ArgError, Limits};

/// Entries the mount list keeps.
pub const MAX_MOUNTS: usize = 1024;

/// AUTH_SYS, then AUTH_NONE.
const FLAVORS: [i32; 2] = [1, 0];

/// One MNT the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The client's address (without the port).
    pub client: String,
    /// The path it mounted.
    pub path: String,
}

/// The MOUNT handler.
#[derive(Clone)]
pub(crate) struct MountHandler {
    pub(crate) export: AsyncExport,
    /// The export's absolute path name, as clients may give it.
    pub(crate) dir: Vec<u8>,
    pub(crate) limits: Limits,
    pub(crate) mounts: Arc<Mutex<VecDeque<MountEntry>>>,
}

/// The host part of a peer address `host:port` (`[v6]:port`).
fn host_of(peer: &str) -> String {
    match peer.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => {
            h.trim_start_matches('[').trim_end_matches(']').to_string()
        }
        _ => peer.to_string(),
    }
}

/// The components of `path` below the export root, or `None` if `path` is
/// neither `/…` nor the export's path `…`. `.` and empty components are
/// skipped.
fn below_root<'a>(path: &'a [u8], dir: &[u8]) -> Vec<&'a [u8]> {
    let rest = match path.strip_prefix(dir) {
        // DIR itself, or DIR/…; not DIR-with-a-longer-last-name.
        Some(rest) if dir.len() > 1 && (rest.is_empty() || rest[0] == b'/') => rest,
        _ => path,
    };
    rest.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect()
}

/// The handle of the directory `path` names in the export.
fn resolve(e: &Export, path: &[u8], dir: &[u8]) -> Result<MountResOk, Mountstat3> {
    let mut fh = e.root();
    for c in below_root(path, dir) {
        if c == b".." {
            return Err(Mountstat3::MNT3ERR_ACCES);
        }
        fh = e.lookup(&fh, c).map_err(mountstat)?.handle;
    }
    match e.getattr(&fh).map_err(mountstat)?.ftype {
        FileType::Directory => Ok(MountResOk {
            fhandle: fh_out(&fh),
            auth_flavors: FLAVORS.to_vec(),
        }),
        _ => Err(Mountstat3::MNT3ERR_NOTDIR),
    }
}

fn mountstat(e: NfsError) -> Mountstat3 {
    match e {
        NfsError::NoEnt => Mountstat3::MNT3ERR_NOENT,
        NfsError::NotDir => Mountstat3::MNT3ERR_NOTDIR,
        NfsError::Acces | NfsError::Perm => Mountstat3::MNT3ERR_ACCES,
        NfsError::NameTooLong => Mountstat3::MNT3ERR_NAMETOOLONG,
        NfsError::Inval => Mountstat3::MNT3ERR_INVAL,
        _ => Mountstat3::MNT3ERR_IO,
    }
}

fn reply(r: &MountResults) -> Result<Message, HandlerError> {
    encode_inline(r).map_err(|e| HandlerError::SystemErr(format!("encoding results: {e}")))
}

impl MountHandler {
    fn exports(&self) -> MountResults {
        let node = |dir: &[u8]| ExportNode {
            dir: Dirpath(dir.to_vec()),
            groups: Vec::new(),
        };
        let mut list = vec![node(b"/")];
        if self.dir != b"/" {
            list.push(node(&self.dir));
        }
        MountResults::Export(Exports(list))
    }

    fn record(&self, client: String, path: &[u8]) {
        let mut m = self.mounts.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= MAX_MOUNTS {
            m.pop_front();
        }
        m.push_back(MountEntry {
            client,
            path: String::from_utf8_lossy(path).into_owned(),
        });
    }

    fn forget(&self, client: &str, path: &[u8]) {
        let path = String::from_utf8_lossy(path);
        let mut m = self.mounts.lock().unwrap_or_else(|p| p.into_inner());
        m.retain(|e| !(e.client == client && e.path == path));
    }
}

impl Handler for MountHandler {
    fn call(&self, ctx: CallContext) -> HandlerFuture {
        let inline = inline_bytes(&ctx.args);
        let args = match MountArgs::decode(ctx.proc, &mut Reader::new(&inline), &self.limits) {
            Ok(a) => a,
            Err(ArgError::ProcUnavail(_)) => {
                return Box::pin(ready(Err(HandlerError::ProcUnavail)))
            }
            Err(e) => return Box::pin(ready(Err(HandlerError::GarbageArgs(e.to_string())))),
        };
        let client = host_of(&ctx.peer());
        tracing::debug!(proc = ctx.proc, %client, cred = %super::stats::Credential::of(&ctx.cred), "mount call");
        match args {
            MountArgs::Null => Box::pin(ready(Ok(Message::new()))),
            MountArgs::Export => Box::pin(ready(reply(&self.exports()))),
            MountArgs::Umnt(path) => {
                self.forget(&client, &path.0);
                Box::pin(ready(Ok(Message::new())))
            }
            MountArgs::Mnt(path) => {
                let me = self.clone();
                Box::pin(async move {
                    let p = path.0.clone();
                    let dir = me.dir.clone();
                    let r = me
                        .export
                        .run(move |e| Ok(resolve(e, &p, &dir)))
                        .await
                        .unwrap_or(Err(Mountstat3::MNT3ERR_SERVERFAULT));
                    let res = match r {
                        Ok(ok) => {
                            me.record(client, &path.0);
                            MountRes::Ok(ok)
                        }
                        Err(s) => MountRes::Fail(s),
                    };
                    reply(&MountResults::Mnt(res))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_below_the_root() {
        fn v(p: &[u8]) -> Vec<&[u8]> {
            below_root(p, b"/srv/x")
        }
        assert!(v(b"/").is_empty());
        assert!(v(b"").is_empty());
        assert!(v(b"/srv/x").is_empty());
        assert!(v(b"/srv/x/").is_empty());
        assert_eq!(v(b"/srv/x/a//b/."), vec![&b"a"[..], b"b"]);
        assert_eq!(v(b"/a/b"), vec![&b"a"[..], b"b"]);
        // Not the export's path with a longer last name.
        assert_eq!(v(b"/srv/xy"), vec![&b"srv"[..], b"xy"]);
        assert_eq!(v(b"/../etc"), vec![&b".."[..], b"etc"]);
    }

    #[test]
    fn peer_hosts() {
        assert_eq!(host_of("127.0.0.1:700"), "127.0.0.1");
        assert_eq!(host_of("[::1]:700"), "::1");
        assert_eq!(host_of("odd"), "odd");
    }
}
