//! What went wrong in a client operation, and who is to blame.

use std::fmt;

use rpcrdma::{Blame as RpcBlame, RpcError};

use crate::mount::Mountstat3;
use crate::nfs3::Nfsstat3;

/// Who is to blame for an [`NfsError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The server answered the operation with a failure status
    /// (`NFS3ERR_NOENT`, `MNT3ERR_ACCES`, …): a regular answer, not a
    /// protocol fault.
    Status,
    /// The server broke the protocol: an RPC error reply (GARBAGE_ARGS,
    /// PROC_UNAVAIL, …), results that do not decode, or results that
    /// contradict the call (more READ data than asked, a zero-length READ
    /// without end of file, a missing handle, …).
    Server,
    /// The connection: refused, lost, timed out.
    Transport,
    /// The caller: a bad path or argument, a local file that cannot be
    /// read or written.
    Caller,
}

/// Why a client operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NfsError {
    /// An NFSv3 procedure answered a status other than `NFS3_OK`.
    Status {
        /// The procedure (`"LOOKUP"`, …).
        proc: &'static str,
        /// The status.
        status: Nfsstat3,
        /// What the call was about (a path, a name).
        what: String,
    },
    /// MOUNT refused the export path.
    Mount {
        /// The status.
        status: Mountstat3,
        /// The path asked for.
        path: String,
    },
    /// The RPC call failed: transport, RPC-level error reply, or a reply
    /// header that does not decode.
    Rpc {
        /// The program and procedure (`"NFS READ"`, `"MOUNT MNT"`).
        proc: String,
        /// The runtime's error (its own blame: transport, peer, caller).
        error: RpcError,
    },
    /// The results broke the protocol (undecodable, or contradicting the
    /// call).
    BadReply {
        /// The program and procedure.
        proc: String,
        /// What was wrong.
        detail: String,
    },
    /// Connecting failed.
    Connect {
        /// Which service (`"MOUNT over TCP"`, `"NFS over RPC-over-RDMA"`).
        service: &'static str,
        /// The address.
        addr: String,
        /// The error.
        detail: String,
    },
    /// The caller's fault: a bad path or argument, or a local I/O error.
    Caller(String),
    /// An NFSv4 operation answered a status other than `NFS4_OK`.
    V4Status {
        /// The operation (`"OPEN"`, …).
        op: &'static str,
        /// The `nfsstat4`.
        status: u32,
    },
}

impl NfsError {
    /// Who is to blame.
    pub fn blame(&self) -> Blame {
        match self {
            NfsError::Status { .. } | NfsError::Mount { .. } | NfsError::V4Status { .. } => {
                Blame::Status
            }
            NfsError::BadReply { .. } => Blame::Server,
            NfsError::Rpc { error, .. } => match error.blame() {
                RpcBlame::Transport => Blame::Transport,
                RpcBlame::Peer => Blame::Server,
                RpcBlame::Caller => Blame::Caller,
            },
            NfsError::Connect { .. } => Blame::Transport,
            NfsError::Caller(_) => Blame::Caller,
        }
    }

    /// The NFS status, if the server answered one.
    pub fn status(&self) -> Option<Nfsstat3> {
        match self {
            NfsError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn bad_reply(proc: impl Into<String>, detail: impl Into<String>) -> Self {
        NfsError::BadReply {
            proc: proc.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn local(what: impl fmt::Display, e: std::io::Error) -> Self {
        NfsError::Caller(format!("{what}: {e}"))
    }
}

impl fmt::Display for NfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NfsError::Status { proc, status, what } => {
                let name = status.name().unwrap_or("unknown nfsstat3");
                write!(
                    f,
                    "server answered {name} ({}) to {proc} of {what}",
                    status.0
                )
            }
            NfsError::Mount { status, path } => {
                let name = status.name().unwrap_or("unknown mountstat3");
                write!(f, "MOUNT refused {path:?}: {name} ({})", status.0)
            }
            NfsError::Rpc { proc, error } => {
                let who = match error.blame() {
                    RpcBlame::Transport => "transport",
                    RpcBlame::Peer => "server",
                    RpcBlame::Caller => "caller",
                };
                write!(f, "{proc} failed ({who}): {error}")
            }
            NfsError::BadReply { proc, detail } => {
                write!(f, "{proc}: the server broke the protocol: {detail}")
            }
            NfsError::Connect {
                service,
                addr,
                detail,
            } => write!(f, "cannot connect {service} to {addr}: {detail}"),
            NfsError::Caller(s) => f.write_str(s),
            NfsError::V4Status { op, status } => write!(
                f,
                "server answered {} ({status}) to {op}",
                crate::nfs4::status::name(*status)
            ),
        }
    }
}

impl std::error::Error for NfsError {}
