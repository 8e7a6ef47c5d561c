//! A MOUNT v3 client (RFC 1813 Appendix I) over ONC RPC over TCP with
//! record marking: MNT gives the root file handle of an export, EXPORT
//! lists the exports, UMNT tells the server the client is done.

use std::net::SocketAddr;
use std::time::Duration;

use rpcrdma::record::RecordLimits;
use rpcrdma::{Auth, CallOptions, Client, ClientConfig, TcpConfig};
use rpcrdma_proto::xdr::Reader;

use super::error::NfsError;
use crate::binding::message::{encode_inline, inline_bytes};
use crate::mount::{
    Dirpath, Exports, MountArgs, MountRes, MountResOk, MountResults, MOUNT_PROGRAM, MOUNT_V3,
};
use crate::Limits;

/// Largest MOUNT reply record accepted: an EXPORT list of
/// [`Limits::max_exports`] entries with short paths fits; a server that
/// sends more breaks the record limit and the connection is closed.
pub const MOUNT_MAX_RECORD: usize = 1 << 20;

/// AUTH_NONE (`0`) and AUTH_SYS (`1`), the flavors this client speaks.
const AUTH_NONE: i32 = 0;
const AUTH_SYS: i32 = 1;

/// A MOUNT v3 client on one TCP connection.
#[derive(Debug)]
pub struct MountClient {
    rpc: Client,
    limits: Limits,
    addr: SocketAddr,
}

impl MountClient {
    /// Connects to the MOUNT service at `addr` (within `timeout`) with
    /// credentials `auth`; each call waits `timeout` for its reply.
    pub async fn connect(
        addr: SocketAddr,
        auth: Auth,
        timeout: Duration,
    ) -> Result<MountClient, NfsError> {
        let tcp = TcpConfig {
            record_limits: RecordLimits {
                max_record_size: MOUNT_MAX_RECORD,
                ..RecordLimits::default()
            },
            ..TcpConfig::default()
        };
        let config = ClientConfig {
            timeout,
            auth,
            reply_max: MOUNT_MAX_RECORD as u32,
            ..ClientConfig::default()
        };
        let connect = Client::connect_tcp(addr, config, tcp);
        let rpc = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_error(addr, e.to_string())),
            Err(_) => return Err(connect_error(addr, format!("no answer in {timeout:?}"))),
        };
        Ok(MountClient {
            rpc,
            limits: Limits::DEFAULT,
            addr,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// MOUNTPROC3_NULL.
    pub async fn null(&self) -> Result<(), NfsError> {
        self.call(MountArgs::Null, "NULL").await.map(drop)
    }

    /// MOUNTPROC3_MNT: the root handle of `path` and the auth flavors the
    /// server accepts there. A refusal is [`NfsError::Mount`]; a server
    /// that accepts only flavors this client cannot speak (neither
    /// AUTH_SYS nor AUTH_NONE) is refused here.
    pub async fn mnt(&self, path: &str) -> Result<MountResOk, NfsError> {
        let dir = dirpath(path)?;
        match self.call(MountArgs::Mnt(dir), "MNT").await? {
            MountResults::Mnt(MountRes::Ok(ok)) => {
                //= rfc1813#section-5.2.1
                //# If mountres3.fhs_status is MNT3_OK, then
                //# mountres3.mountinfo contains the file handle for the
                //# directory and a list of acceptable authentication
                //# flavors.
                let usable = ok.auth_flavors.is_empty()
                    || ok
                        .auth_flavors
                        .iter()
                        .any(|&f| f == AUTH_SYS || f == AUTH_NONE);
                if !usable {
                    return Err(NfsError::Caller(format!(
                        "the server accepts only auth flavors {:?} for {path:?}; \
                         this client speaks AUTH_SYS (1) and AUTH_NONE (0)",
                        ok.auth_flavors
                    )));
                }
                Ok(ok)
            }
            MountResults::Mnt(MountRes::Fail(status)) => Err(NfsError::Mount {
                status,
                path: path.to_string(),
            }),
            other => Err(unexpected("MNT", &other)),
        }
    }

    /// MOUNTPROC3_UMNT.
    pub async fn umnt(&self, path: &str) -> Result<(), NfsError> {
        let dir = dirpath(path)?;
        self.call(MountArgs::Umnt(dir), "UMNT").await.map(drop)
    }

    /// MOUNTPROC3_EXPORT: the export list.
    pub async fn exports(&self) -> Result<Exports, NfsError> {
        match self.call(MountArgs::Export, "EXPORT").await? {
            MountResults::Export(e) => Ok(e),
            other => Err(unexpected("EXPORT", &other)),
        }
    }

    /// Closes the connection.
    pub fn close(&self) {
        self.rpc.close();
    }

    async fn call(&self, args: MountArgs, name: &str) -> Result<MountResults, NfsError> {
        let proc = args.proc();
        let what = format!("MOUNT {name}");
        let msg = encode_inline(&args).map_err(|e| NfsError::Caller(format!("{what}: {e}")))?;
        let reply = self
            .rpc
            .call_with(MOUNT_PROGRAM, MOUNT_V3, proc, msg, &CallOptions::default())
            .await
            .map_err(|error| NfsError::Rpc {
                proc: what.clone(),
                error,
            })?;
        let inline = inline_bytes(reply.results());
        if reply.results().ddp_count() > 0 {
            return Err(NfsError::bad_reply(what, "DDP data in a MOUNT reply"));
        }
        let mut r = Reader::new(&inline);
        MountResults::decode(proc, &mut r, &self.limits)
            .map_err(|e| NfsError::bad_reply(what, e.to_string()))
    }
}

fn connect_error(addr: SocketAddr, detail: String) -> NfsError {
    NfsError::Connect {
        service: "MOUNT over TCP",
        addr: addr.to_string(),
        detail,
    }
}

fn unexpected(proc: &str, got: &MountResults) -> NfsError {
    NfsError::bad_reply(
        format!("MOUNT {proc}"),
        format!("unexpected results {got:?}"),
    )
}

/// A `dirpath` (at most MNTPATHLEN = 1024 octets).
fn dirpath(path: &str) -> Result<Dirpath, NfsError> {
    if path.len() > crate::limits::MNTPATHLEN as usize {
        return Err(NfsError::Caller(format!(
            "export path of {} octets exceeds MNTPATHLEN = {}",
            path.len(),
            crate::limits::MNTPATHLEN
        )));
    }
    Ok(Dirpath::from(path))
}
