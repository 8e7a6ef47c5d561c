//! The backchannel probe: a session with a backchannel, a read
//! delegation, and the server's recall of it over our own connection.

use std::net::SocketAddr;
use std::time::Duration;

use rpcrdma::rdma::RdmaClientConfig;

use super::session::{Nfs4Client, Nfs4Options};
use crate::client::NfsError;
use crate::nfs4::ops::Delegation;

/// OPENs tried for a delegation.
const OPEN_TRIES: u32 = 5;

/// What to probe.
#[derive(Clone)]
pub struct ProbeOptions {
    /// The server's NFS over RPC-over-RDMA address.
    pub addr: SocketAddr,
    /// The file to open (from the server's root, e.g. `/srv/nfs/deleg.txt`).
    pub path: String,
    /// How long to wait for CB_RECALL once the delegation is held.
    pub wait: Duration,
    /// How long to wait for the server's CB_NULL before OPEN, if it sends
    /// one (Linux's knfsd sends none to a v4.1 client; OPEN is retried
    /// while no delegation is granted anyway).
    pub cb_null_wait: Duration,
    /// The connection.
    pub rdma: RdmaClientConfig,
    /// The client.
    pub nfs4: Nfs4Options,
    /// Called once the delegation is held (the lab script triggers the
    /// conflicting write then; tests make their fake server recall).
    pub on_delegation: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for ProbeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeOptions")
            .field("addr", &self.addr)
            .field("path", &self.path)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// The probe's outcome (the CLI prints it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeReport {
    /// The session was created, the recall came over the backchannel and
    /// the delegation went back, without error (`cb_null_received` is not
    /// required: Linux's server sends no CB_NULL to a v4.1 client).
    pub ok: bool,
    /// CREATE_SESSION with a backchannel succeeded.
    pub session_created: bool,
    /// The server's CB_NULL reached our callback service.
    pub cb_null_received: bool,
    /// The server's CB_RECALL reached our callback service.
    pub cb_recall_received: bool,
    /// DELEGRETURN of the recalled delegation succeeded.
    pub delegreturn_ok: bool,
    /// Whether a delegation was granted (and of which kind).
    pub delegation: Option<String>,
    /// The first error, if any.
    pub error: Option<String>,
}

/// Runs the probe: session, RECLAIM_COMPLETE, wait for CB_NULL, OPEN with
/// a read delegation, wait up to `wait` for CB_RECALL, DELEGRETURN, CLOSE,
/// DESTROY_SESSION, DESTROY_CLIENTID.
pub async fn probe_backchannel(o: ProbeOptions) -> ProbeReport {
    let mut rep = ProbeReport::default();
    let (client, mut recalls) =
        match Nfs4Client::connect(o.addr, o.rdma.clone(), o.nfs4.clone()).await {
            Ok(c) => c,
            Err(e) => {
                rep.error = Some(e.to_string());
                return rep;
            }
        };
    rep.session_created = true;
    let r = run(&client, &mut recalls, &o, &mut rep).await;
    rep.cb_null_received = client.callbacks().counts().cb_null > 0;
    let d = client.destroy().await;
    if let Err(e) = r.and(d) {
        rep.error.get_or_insert(e.to_string());
    }
    // CB_NULL is reported, not required: Linux's knfsd never sends it to
    // a minor version 1 client (nfsd4_run_cb_work: "Don't send probe
    // messages for 4.1 or later"; it marks the callback path up without
    // a call), and RFC 8881 does not oblige a server to probe.
    rep.ok =
        rep.error.is_none() && rep.session_created && rep.cb_recall_received && rep.delegreturn_ok;
    rep
}

async fn run(
    client: &Nfs4Client,
    recalls: &mut tokio::sync::mpsc::Receiver<crate::nfs4::cb::CbRecallArgs>,
    o: &ProbeOptions,
    rep: &mut ProbeReport,
) -> Result<(), NfsError> {
    client.reclaim_complete().await?;
    let deadline = tokio::time::Instant::now() + o.cb_null_wait;
    while client.callbacks().counts().cb_null == 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A Linux server marks the callback path up only once it has the
    // reply to its CB_NULL, and grants no delegation before: a few tries.
    let mut tries = 0;
    let (opened, stateid) = loop {
        tries += 1;
        let opened = client.open_read_deleg(&o.path).await?;
        match opened.delegation {
            Delegation::Granted { kind, stateid, .. } => {
                rep.delegation = Some(if kind == 1 { "read" } else { "write" }.into());
                break (opened, stateid);
            }
            ref d => {
                let d = format!("{d:?}");
                client.close(&opened.fh, opened.stateid).await?;
                if tries >= OPEN_TRIES {
                    return Err(NfsError::Caller(format!(
                        "the server granted no delegation in {tries} OPENs (last: {d}; \
                         callback path {})",
                        if client.status_flags() & crate::nfs4::ops::SEQ4_STATUS_CB_PATH_DOWN != 0 {
                            "down"
                        } else {
                            "up"
                        }
                    )));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    if let Some(f) = &o.on_delegation {
        f();
    }
    let recall = tokio::time::timeout(o.wait, recalls.recv()).await;
    let result = match recall {
        Ok(Some(a)) => {
            rep.cb_recall_received = true;
            if a.stateid.other != stateid.other {
                Err(NfsError::bad_reply(
                    "NFSv4 CB_RECALL",
                    "recalls a delegation we do not hold",
                ))
            } else {
                // The recall was answered NFS4_OK by the callback service;
                // the delegation goes back on the forechannel.
                let r = client.delegreturn(&a.fh, stateid).await;
                rep.delegreturn_ok = r.is_ok();
                r
            }
        }
        _ => Err(NfsError::Caller(format!(
            "no CB_RECALL within {} s",
            o.wait.as_secs()
        ))),
    };
    let c = client.close(&opened.fh, opened.stateid).await;
    result.and(c)
}
