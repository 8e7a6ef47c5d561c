//! The NFSv3 client: MOUNT v3 over TCP for the export's root handle
//! ([`MountClient`]), then NFSv3 over any runtime [`Client`] — over
//! RPC-over-RDMA in practice ([`connect`]).
//!
//! * [`NfsClient`]: typed procedures (GETATTR, LOOKUP, READ, WRITE,
//!   COMMIT, CREATE, REMOVE, READDIRPLUS, FSINFO, NULL), each call offered
//!   the chunks of the RFC 8267 binding ([`crate::binding`]: a Write chunk
//!   for READ data, a Reply chunk when the largest reply exceeds the
//!   inline threshold, WRITE data DDP-eligible so that a WRITE that does
//!   not fit inline sends it in a Read chunk; a call too large for the
//!   inline threshold with nothing DDP-eligible goes as a Long Call);
//! * whole-object operations: [`NfsClient::read_file`] and
//!   [`NfsClient::write_file`] (READ / WRITE of up to the server's rtmax /
//!   wtmax per call, [`NfsClientOptions::window`] calls in flight, short
//!   transfers completed, UNSTABLE writes then COMMIT with write-verifier
//!   checks), [`NfsClient::list_dir`] (READDIRPLUS with cookies and the
//!   cookie verifier until end of directory), [`NfsClient::lookup_path`];
//! * [`NfsError`]: the failure with who is to blame ([`Blame`]).
//!
//! # A hostile server
//!
//! Every reply is decoded bounded: over RDMA the reply can only be as
//! large as the chunks and inline buffer offered (a READ's Write chunk is
//! exactly the count asked); the decoders cap names at
//! [`Limits::max_name_len`], READ data at the count asked (a per-call
//! `rtmax`), READDIRPLUS entries at what the offered reply size can hold;
//! replies that contradict the call are [`NfsError::BadReply`], never a
//! panic or an unbounded loop (a zero-length READ or WRITE without
//! progress fails, as Linux's client fails it with EIO; the READDIRPLUS
//! loop stops at a repeated cookie and after [`MAX_DIR_CALLS`] calls).

mod auth;
mod connect;
mod dir;
mod error;
mod io;
pub mod mount;
mod path;
mod procs;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rpcrdma::{Auth, Client};

pub use auth::{auth_sys, caller_auth_sys};
pub use connect::{connect, parse_target, ConnectOptions, Session, Target};
pub use dir::{MAX_DIR_CALLS, MAX_LIST_ENTRIES};
pub use error::{Blame, NfsError};
pub use io::{WriteSource, WriteSummary, MAX_WRITE_PASSES};
pub use mount::MountClient;
pub use path::{components, MAX_PATH_COMPONENTS};

use crate::nfs3::{FileHandle, FsinfoResOk};
use crate::Limits;

/// Client settings.
#[derive(Clone, Debug)]
pub struct NfsClientOptions {
    /// READ or WRITE calls in flight at once in [`NfsClient::read_file`] /
    /// [`NfsClient::write_file`]. Default 4.
    pub window: usize,
    /// Largest READ asked (further clamped to the server's FSINFO rtmax).
    /// Default 1 MiB.
    pub rsize: u32,
    /// Largest WRITE sent (clamped to the server's wtmax). Default 1 MiB.
    pub wsize: u32,
    /// READDIRPLUS `maxcount` (`dircount` is an eighth of it, as Linux's
    /// client sends). Default 64 KiB.
    pub dir_maxcount: u32,
    /// WRITE data is DDP-eligible (RFC 8267 §4): a WRITE that does not fit
    /// inline sends its data in a Read chunk. `false` sends every call as
    /// one XDR stream, inline or as a Long Call (Linux's client does that
    /// when the credential forbids direct placement, e.g. krb5i). Default
    /// true.
    pub ddp_writes: bool,
    /// Credentials of every NFS call. Default: AUTH_SYS of this process
    /// ([`caller_auth_sys`]).
    pub auth: Auth,
    /// Decoding limits (names, paths, entries).
    pub limits: Limits,
}

impl Default for NfsClientOptions {
    fn default() -> Self {
        NfsClientOptions {
            window: 4,
            rsize: 1 << 20,
            wsize: 1 << 20,
            dir_maxcount: 64 << 10,
            ddp_writes: true,
            auth: caller_auth_sys(),
            limits: Limits::DEFAULT,
        }
    }
}

/// An NFSv3 client of one export on one runtime [`Client`] (over
/// RPC-over-RDMA, or any transport). Cheap to clone; calls may be made
/// concurrently.
#[derive(Clone, Debug)]
pub struct NfsClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) rpc: Client,
    pub(crate) root: FileHandle,
    pub(crate) opts: NfsClientOptions,
    pub(crate) fsinfo: FsinfoResOk,
    /// READ size: rsize clamped to rtmax (at least 1).
    pub(crate) rsize: u32,
    /// WRITE size: wsize clamped to wtmax (at least 1).
    pub(crate) wsize: u32,
}

impl NfsClient {
    /// A client of the export whose root handle is `root` (from MOUNT),
    /// over `rpc`: asks FSINFO for the transfer sizes.
    pub async fn new(
        rpc: Client,
        root: FileHandle,
        opts: NfsClientOptions,
    ) -> Result<NfsClient, NfsError> {
        let fsinfo = procs::fsinfo_on(&rpc, &opts, &root).await?;
        if fsinfo.rtmax == 0 || fsinfo.wtmax == 0 {
            return Err(NfsError::bad_reply(
                "NFS FSINFO",
                format!(
                    "rtmax {} and wtmax {}: no READ or WRITE possible",
                    fsinfo.rtmax, fsinfo.wtmax
                ),
            ));
        }
        Ok(Self::with_fsinfo(rpc, root, opts, fsinfo))
    }

    /// A client with the FSINFO results already known.
    pub fn with_fsinfo(
        rpc: Client,
        root: FileHandle,
        opts: NfsClientOptions,
        fsinfo: FsinfoResOk,
    ) -> NfsClient {
        let clamp = |want: u32, max: u32| want.min(max).min(opts.limits.rtmax.max(1)).max(1);
        //= rfc1813#section-3.3.19
        //# rtmax
        //#    The maximum size in bytes of a READ request supported
        //#    by the server. Any READ with a number greater than
        //#    rtmax will result in a short read of rtmax bytes or
        //#    less.
        let rsize = clamp(opts.rsize, fsinfo.rtmax);
        let wsize = opts.wsize.min(fsinfo.wtmax).min(opts.limits.wtmax).max(1);
        NfsClient {
            inner: Arc::new(Inner {
                rpc,
                root,
                opts,
                fsinfo,
                rsize,
                wsize,
            }),
        }
    }

    /// The export's root handle.
    pub fn root(&self) -> &FileHandle {
        &self.inner.root
    }

    /// The server's FSINFO of the export.
    pub fn fsinfo(&self) -> &FsinfoResOk {
        &self.inner.fsinfo
    }

    /// Octets asked per READ.
    pub fn rsize(&self) -> u32 {
        self.inner.rsize
    }

    /// Octets sent per WRITE.
    pub fn wsize(&self) -> u32 {
        self.inner.wsize
    }

    /// The runtime client.
    pub fn rpc(&self) -> &Client {
        &self.inner.rpc
    }

    /// The settings.
    pub fn options(&self) -> &NfsClientOptions {
        &self.inner.opts
    }
}
