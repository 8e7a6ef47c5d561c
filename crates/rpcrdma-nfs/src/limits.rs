//! Named limits on everything an NFS or MOUNT peer controls, and what a
//! server answers when arguments break them.
//!
//! Two kinds of bound, two answers (RFC 5531 §9 and RFC 1813):
//!
//! * a bound of the **XDR type itself** (`opaque data<NFS3_FHSIZE>`,
//!   `dirpath<MNTPATHLEN>`, a closed enumeration, a bool other than 0/1,
//!   truncation, trailing octets): the arguments are **undecodable** and the
//!   server answers the RPC-level `GARBAGE_ARGS` ([`ArgError::Garbage`]);
//! * a bound the **server chooses** (RFC 1813 leaves `filename3<>` and
//!   `nfspath3<>` unbounded: "The actual length restrictions are determined
//!   by the client and server implementations"): the arguments decode, and
//!   the server answers an `nfsstat3` — `NFS3ERR_NAMETOOLONG` for a name
//!   over [`Limits::max_name_len`] or a symlink path over
//!   [`Limits::max_path_len`], `NFS3ERR_INVAL` for values it cannot act on
//!   ([`ArgError::Status`], from [`crate::nfs3::Nfs3Args::check`]).
//!
//! Counts that only size the *reply* (READ `count`, READDIR `count`,
//! READDIRPLUS `dircount`/`maxcount`) are never errors: RFC 1813 lets the
//! server return less (a short read, fewer entries), so the server clamps
//! them to [`Limits::rtmax`] and [`Limits::max_dir_reply`]. A WRITE longer
//! than [`Limits::wtmax`] is written short, as RFC 1813 §3.3.7 allows and
//! Linux's nfsd does. Lists a *client* decodes from a reply (directory
//! entries, exports, groups, auth flavors) are counted against their limit
//! as they are decoded.

use core::fmt;

use rpcrdma_proto::DecodeError;

use crate::nfs3::Nfsstat3;

/// RFC 1813 `NFS3_FHSIZE`: the XDR bound of `nfs_fh3` (also MOUNT's
/// `FHSIZE3`).
pub const NFS3_FHSIZE: u32 = 64;
/// RFC 1813 App. I `MNTPATHLEN`: the XDR bound of `dirpath`.
pub const MNTPATHLEN: u32 = 1024;
/// RFC 1813 App. I `MNTNAMLEN`: the XDR bound of `name`.
pub const MNTNAMLEN: u32 = 255;

/// The server's and the client's limits (defaults: [`Limits::DEFAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest `filename3` a server accepts (PATHCONF `name_max`, with
    /// `no_trunc` TRUE): longer is `NFS3ERR_NAMETOOLONG`. Also the longest
    /// entry name a client accepts in a READDIR(PLUS) reply.
    pub max_name_len: u32,
    /// Longest `nfspath3` (SYMLINK's target, READLINK's result): longer is
    /// `NFS3ERR_NAMETOOLONG` in SYMLINK, a decode error in a READLINK reply.
    pub max_path_len: u32,
    /// FSINFO `rtmax`: a READ asks for at most this much (more is read short).
    pub rtmax: u32,
    /// FSINFO `wtmax`: a WRITE carries at most this much (more is written
    /// short).
    pub wtmax: u32,
    /// Largest READDIR `count` / READDIRPLUS `maxcount` a server honours
    /// (larger is clamped: fewer entries).
    pub max_dir_reply: u32,
    /// Most entries a client decodes from one READDIR / READDIRPLUS reply.
    pub max_dir_entries: u32,
    /// Most exports a client decodes from one MOUNT EXPORT reply.
    pub max_exports: u32,
    /// Most groups of one export, likewise.
    pub max_export_groups: u32,
    /// Most `auth_flavors` in a MNT reply, likewise.
    pub max_auth_flavors: u32,
}

impl Limits {
    /// The defaults: names ≤ 255, paths ≤ 1024, rtmax = wtmax = 1 MiB,
    /// READDIR replies ≤ 1 MiB and ≤ 65,536 entries, ≤ 4,096 exports of
    /// ≤ 256 groups, ≤ 16 auth flavors.
    pub const DEFAULT: Limits = Limits {
        max_name_len: 255,
        max_path_len: 1024,
        rtmax: 1 << 20,
        wtmax: 1 << 20,
        max_dir_reply: 1 << 20,
        max_dir_entries: 65_536,
        max_exports: 4096,
        max_export_groups: 256,
        max_auth_flavors: 16,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Why a server refuses arguments, and what it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// The procedure number is not one of the program's: `PROC_UNAVAIL`.
    ProcUnavail(u32),
    /// The arguments do not decode: answer `GARBAGE_ARGS`.
    Garbage(DecodeError),
    /// The arguments decode but break a server limit or carry a value the
    /// server cannot act on: answer the procedure's failure result with
    /// this status (`NFS3ERR_NAMETOOLONG`, `NFS3ERR_INVAL`).
    Status {
        /// The `nfsstat3` to answer.
        status: Nfsstat3,
        /// What was wrong (for logs).
        detail: String,
    },
}

impl ArgError {
    /// An `nfsstat3` refusal.
    pub fn status(status: Nfsstat3, detail: impl Into<String>) -> Self {
        ArgError::Status {
            status,
            detail: detail.into(),
        }
    }
}

impl From<DecodeError> for ArgError {
    fn from(e: DecodeError) -> Self {
        ArgError::Garbage(e)
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::ProcUnavail(p) => write!(f, "PROC_UNAVAIL: no procedure {p}"),
            ArgError::Garbage(e) => write!(f, "GARBAGE_ARGS: {e}"),
            ArgError::Status { status, detail } => write!(f, "{status}: {detail}"),
        }
    }
}

impl std::error::Error for ArgError {}
