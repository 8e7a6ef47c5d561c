//! An NFSv4.1 client id and session over one RPC-over-RDMA connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaClientTransport};
use rpcrdma::{Auth, CallOptions, Client, ClientConfig, Message};
use tokio::sync::{mpsc, Mutex};

use super::callback::CallbackService;
use crate::binding::message::inline_bytes;
use crate::client::NfsError;
use crate::nfs4::cb::CbRecallArgs;
use crate::nfs4::ops::*;
use crate::nfs4::status::{NFS4ERR_DELAY, NFS4ERR_GRACE, NFS4_OK};
use crate::nfs4::{Fh, SessionId, StateId, CB_PROGRAM, MAX_CB_OPS, NFS4_PROGRAM, NFS_V4};

/// The smallest RPC-over-RDMA version 1 header (`RPCRDMA_HDRLEN_MIN` in
/// Linux): xid, vers, credits, proc and three empty chunk lists.
pub const RPCRDMA_HDRLEN_MIN: u32 = 28;
/// RFC 8166 §3.3.3: the inline threshold without RFC 8797 private data.
const DEFAULT_INLINE: u32 = 1024;
/// Largest COMPOUND reply we accept.
const REPLY_MAX: u32 = 64 << 10;

/// Settings of an NFSv4.1 client.
#[derive(Clone, Debug)]
pub struct Nfs4Options {
    /// Credentials of the forechannel calls.
    pub auth: Auth,
    /// Per-call reply timeout.
    pub timeout: Duration,
    /// How long OPEN retries while the server answers NFS4ERR_GRACE or
    /// NFS4ERR_DELAY (after a reboot a server refuses new opens for its
    /// grace period, Linux's 90 s by default).
    pub grace_wait: Duration,
    /// `co_ownerid` (unique per client instance).
    pub owner: Vec<u8>,
}

impl Default for Nfs4Options {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        Nfs4Options {
            auth: crate::client::caller_auth_sys(),
            timeout: Duration::from_secs(15),
            grace_wait: Duration::from_secs(100),
            owner: format!("rpcrdma-nfs4/{host}/{}/{nanos}", std::process::id()).into_bytes(),
        }
    }
}

/// The backchannel attributes for the connection's inline thresholds: RFC
/// 8167 §4 has version 1 backchannel messages inline only, so a callback
/// request or reply is at most the smaller threshold less the smallest
/// transport header (as Linux's client computes it,
/// `xprt_rdma_bc_maxpayload`).
//= rfc8167#section-4.2
//# Therefore, the inline threshold values for
//# the forward direction and the reverse direction are the same.
//= rfc8167#section-5.3
//# When chunks are not implemented, RPC messages in the reverse
//# direction are always sent using a Short Message; therefore, they can
//# be no larger than what can be sent inline (that is, without chunks).
pub fn backchannel_attrs(send_threshold: u32, recv_threshold: u32) -> ChannelAttrs {
    let max = send_threshold
        .min(recv_threshold)
        .saturating_sub(RPCRDMA_HDRLEN_MIN);
    ChannelAttrs {
        headerpadsize: 0,
        maxrequestsize: max,
        maxresponsesize: max,
        maxresponsesize_cached: 0,
        maxoperations: MAX_CB_OPS,
        maxrequests: 1,
        rdma_ird: None,
    }
}

/// An OPEN that succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The file.
    pub fh: Fh,
    /// The open stateid.
    pub stateid: StateId,
    /// The delegation granted, if any.
    pub delegation: Delegation,
}

/// A client id with one session on one RPC-over-RDMA connection.
#[derive(Debug)]
pub struct Nfs4Client {
    rpc: Client,
    transport: Arc<RdmaClientTransport>,
    callbacks: CallbackService,
    opts: Nfs4Options,
    clientid: u64,
    session: SessionId,
    /// Next sequence id of forechannel slot 0 (one call at a time).
    slot: Mutex<u32>,
    /// `SEQ4_STATUS_*` of the last SEQUENCE.
    status_flags: std::sync::atomic::AtomicU32,
}

impl Nfs4Client {
    /// Connects to `addr` over RPC-over-RDMA (no reconnection: a session's
    /// backchannel would need BIND_CONN_TO_SESSION after one), exchanges a
    /// client id and creates a session with a backchannel. Also returns the
    /// recalls the callback service accepts.
    pub async fn connect(
        addr: SocketAddr,
        mut rdma: RdmaClientConfig,
        opts: Nfs4Options,
    ) -> Result<(Nfs4Client, mpsc::Receiver<CbRecallArgs>), NfsError> {
        rdma.reconnect = None;
        let config = ClientConfig {
            timeout: opts.timeout,
            auth: opts.auth.clone(),
            ..ClientConfig::default()
        };
        let (rpc, transport) =
            connect_client(addr, config, rdma)
                .await
                .map_err(|e| NfsError::Connect {
                    service: "NFSv4.1 over RPC-over-RDMA",
                    addr: addr.to_string(),
                    detail: e.to_string(),
                })?;
        match Self::establish(rpc, transport.clone(), opts).await {
            Ok(c) => Ok(c),
            Err(e) => {
                transport.shutdown().await;
                Err(e)
            }
        }
    }

    /// EXCHANGE_ID, the callback service, CREATE_SESSION on a connected
    /// client.
    pub async fn establish(
        rpc: Client,
        transport: Arc<RdmaClientTransport>,
        opts: Nfs4Options,
    ) -> Result<(Nfs4Client, mpsc::Receiver<CbRecallArgs>), NfsError> {
        let verifier = opts.owner.iter().fold(0u64, |h, &b| {
            h.wrapping_mul(0x100_0000_01b3).wrapping_add(b as u64)
        });
        let x = compound(
            &rpc,
            &opts,
            vec![OpArgs::ExchangeId(ExchangeIdArgs {
                verifier: verifier.to_be_bytes(),
                ownerid: opts.owner.clone(),
                flags: EXCHGID4_FLAG_USE_NON_PNFS,
            })],
        )
        .await?;
        let Some(ResOk::ExchangeId(x)) = x.into_iter().next().and_then(|r| r.ok) else {
            return Err(NfsError::bad_reply("NFSv4 EXCHANGE_ID", "no results"));
        };
        let (callbacks, recalls) = CallbackService::new();
        //= rfc8167#section-4.3.1
        //# To receive incoming reverse-direction Calls, an RPC-over-RDMA client
        //# endpoint posts enough additional Receive buffers to match its
        //# advertised reverse-direction credit value.
        // Posted now, before CREATE_SESSION (after which the server may
        // call at once): the runtime posts them before it sends the next
        // call.
        rpc.serve_backchannel(&callbacks.server())
            .map_err(|error| NfsError::Rpc {
                proc: "backchannel".into(),
                error,
            })?;
        let (snd, rcv) = transport
            .status()
            .negotiated
            .map_or((DEFAULT_INLINE, DEFAULT_INLINE), |n| {
                (n.send_threshold, n.recv_threshold)
            });
        let cs = compound(
            &rpc,
            &opts,
            vec![OpArgs::CreateSession(CreateSessionArgs {
                clientid: x.clientid,
                sequence: x.sequenceid,
                flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                fore: ChannelAttrs {
                    headerpadsize: 0,
                    maxrequestsize: REPLY_MAX,
                    maxresponsesize: REPLY_MAX,
                    maxresponsesize_cached: 4096,
                    maxoperations: crate::nfs4::MAX_OPS,
                    maxrequests: 1,
                    rdma_ird: None,
                },
                back: backchannel_attrs(snd, rcv),
                cb_program: CB_PROGRAM,
            })],
        )
        .await?;
        let Some(ResOk::CreateSession(cs)) = cs.into_iter().next().and_then(|r| r.ok) else {
            return Err(NfsError::bad_reply("NFSv4 CREATE_SESSION", "no results"));
        };
        if cs.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN == 0 {
            return Err(NfsError::bad_reply(
                "NFSv4 CREATE_SESSION",
                "the server did not bind the connection to the backchannel",
            ));
        }
        callbacks.set_session(cs.sessionid);
        Ok((
            Nfs4Client {
                rpc,
                transport,
                callbacks,
                opts,
                clientid: x.clientid,
                session: cs.sessionid,
                slot: Mutex::new(1),
                status_flags: Default::default(),
            },
            recalls,
        ))
    }

    /// The callback service's counters.
    pub fn callbacks(&self) -> &CallbackService {
        &self.callbacks
    }

    /// The connection.
    pub fn transport(&self) -> &Arc<RdmaClientTransport> {
        &self.transport
    }

    /// The session id.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// `sr_status_flags` of the last SEQUENCE.
    pub fn status_flags(&self) -> u32 {
        self.status_flags.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// SEQUENCE then `ops`, on slot 0: the results of `ops`.
    pub async fn sequenced(&self, ops: Vec<OpArgs>) -> Result<Vec<OpRes>, NfsError> {
        let mut slot = self.slot.lock().await;
        let mut all = vec![OpArgs::Sequence(SequenceArgs {
            sessionid: self.session,
            sequenceid: *slot,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
        })];
        all.extend(ops);
        let r = compound(&self.rpc, &self.opts, all).await;
        // The slot advances once SEQUENCE itself succeeded, whatever the
        // later operations answered.
        let seq_ok = match &r {
            Ok(res) => res.first().is_some_and(|s| s.status == NFS4_OK),
            Err(NfsError::V4Status { op, .. }) => *op != "SEQUENCE",
            Err(_) => false,
        };
        if seq_ok {
            *slot = slot.wrapping_add(1);
        }
        let mut res = r?;
        if let Some(OpRes {
            ok: Some(ResOk::Sequence(s)),
            ..
        }) = res.first()
        {
            self.status_flags
                .store(s.status_flags, std::sync::atomic::Ordering::Relaxed);
        }
        res.remove(0);
        Ok(res)
    }

    /// RECLAIM_COMPLETE (nothing to reclaim): lets the server end its
    /// grace period for us.
    pub async fn reclaim_complete(&self) -> Result<(), NfsError> {
        self.sequenced(vec![OpArgs::ReclaimComplete(false)])
            .await
            .map(drop)
    }

    /// PUTROOTFH, LOOKUP of each component, GETFH, GETATTR (type, size,
    /// fileid).
    pub async fn lookup(&self, path: &str) -> Result<(Fh, Fattr), NfsError> {
        let mut ops = vec![OpArgs::PutRootFh];
        for c in crate::client::components(path)? {
            ops.push(OpArgs::Lookup(c.as_bytes().to_vec()));
        }
        ops.push(OpArgs::GetFh);
        ops.push(OpArgs::GetAttr(vec![
            (1 << attr::TYPE) | (1 << attr::SIZE) | (1 << attr::FILEID),
        ]));
        let res = self.sequenced(ops).await?;
        let mut fh = None;
        let mut fattr = None;
        for r in res {
            match r.ok {
                Some(ResOk::GetFh(h)) => fh = Some(h),
                Some(ResOk::GetAttr(a)) => fattr = Some(a),
                _ => {}
            }
        }
        match (fh, fattr) {
            (Some(h), Some(a)) => Ok((h, a)),
            _ => Err(NfsError::bad_reply(
                "NFSv4 LOOKUP",
                "no GETFH / GETATTR result",
            )),
        }
    }

    /// OPEN `path` for reading, asking for a read delegation; retries
    /// while the server answers NFS4ERR_GRACE or NFS4ERR_DELAY, up to
    /// [`Nfs4Options::grace_wait`].
    pub async fn open_read_deleg(&self, path: &str) -> Result<Opened, NfsError> {
        let mut parts = crate::client::components(path)?;
        let name = parts
            .pop()
            .ok_or_else(|| NfsError::Caller(format!("{path:?}: no file name")))?;
        let deadline = tokio::time::Instant::now() + self.opts.grace_wait;
        loop {
            let mut ops = vec![OpArgs::PutRootFh];
            ops.extend(parts.iter().map(|c| OpArgs::Lookup(c.as_bytes().to_vec())));
            ops.push(OpArgs::Open(OpenArgs {
                share_access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
                share_deny: OPEN4_SHARE_DENY_NONE,
                clientid: self.clientid,
                owner: b"rpcrdma-probe-open-owner".to_vec(),
                name: name.as_bytes().to_vec(),
            }));
            ops.push(OpArgs::GetFh);
            match self.sequenced(ops).await {
                Ok(res) => return opened(res),
                Err(NfsError::V4Status { status, .. })
                    if matches!(status, NFS4ERR_GRACE | NFS4ERR_DELAY)
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// PUTFH, DELEGRETURN.
    pub async fn delegreturn(&self, fh: &Fh, stateid: StateId) -> Result<(), NfsError> {
        self.sequenced(vec![
            OpArgs::PutFh(fh.clone()),
            OpArgs::DelegReturn(stateid),
        ])
        .await
        .map(drop)
    }

    /// PUTFH, CLOSE.
    pub async fn close(&self, fh: &Fh, stateid: StateId) -> Result<(), NfsError> {
        self.sequenced(vec![OpArgs::PutFh(fh.clone()), OpArgs::Close(stateid)])
            .await
            .map(drop)
    }

    /// DESTROY_SESSION, DESTROY_CLIENTID (each alone in its COMPOUND), then
    /// closes the connection. The first error is returned; the connection
    /// is closed in any case.
    pub async fn destroy(self) -> Result<(), NfsError> {
        let a = compound(
            &self.rpc,
            &self.opts,
            vec![OpArgs::DestroySession(self.session)],
        )
        .await;
        let b = compound(
            &self.rpc,
            &self.opts,
            vec![OpArgs::DestroyClientId(self.clientid)],
        )
        .await;
        self.transport.shutdown().await;
        a.and(b).map(drop)
    }
}

fn opened(res: Vec<OpRes>) -> Result<Opened, NfsError> {
    let mut open = None;
    let mut fh = None;
    for r in res {
        match r.ok {
            Some(ResOk::Open(o)) => open = Some(o),
            Some(ResOk::GetFh(h)) => fh = Some(h),
            _ => {}
        }
    }
    match (open, fh) {
        (Some(o), Some(fh)) => Ok(Opened {
            fh,
            stateid: o.stateid,
            delegation: o.delegation,
        }),
        _ => Err(NfsError::bad_reply("NFSv4 OPEN", "no OPEN / GETFH result")),
    }
}

/// One COMPOUND: the results of every operation when all succeeded, the
/// first failure as [`NfsError::V4Status`], results that do not match the
/// operations sent as [`NfsError::BadReply`].
pub(crate) async fn compound(
    rpc: &Client,
    opts: &Nfs4Options,
    ops: Vec<OpArgs>,
) -> Result<Vec<OpRes>, NfsError> {
    let sent: Vec<u32> = ops.iter().map(OpArgs::op).collect();
    let main = sent
        .iter()
        .copied()
        .find(|&o| o != op::SEQUENCE)
        .unwrap_or(op::SEQUENCE);
    let proc = format!("NFSv4 {}", op::name(main));
    let args = Compound::v41(ops).encode();
    let co = CallOptions {
        auth: Some(opts.auth.clone()),
        reply_max: Some(REPLY_MAX),
        ..CallOptions::default()
    };
    let reply = rpc
        .call_with(
            NFS4_PROGRAM,
            NFS_V4,
            crate::nfs4::NFSPROC4_COMPOUND,
            Message::inline(args),
            &co,
        )
        .await
        .map_err(|error| NfsError::Rpc {
            proc: proc.clone(),
            error,
        })?;
    let res = crate::nfs4::ops::CompoundRes::decode(&inline_bytes(reply.results()))
        .map_err(|e| NfsError::bad_reply(proc.clone(), e.to_string()))?;
    if res.res.len() > sent.len() || res.res.iter().zip(&sent).any(|(r, &o)| r.op != o) {
        return Err(NfsError::bad_reply(
            proc,
            "results do not match the operations sent",
        ));
    }
    if let Some(f) = res.res.iter().find(|r| r.status != NFS4_OK) {
        return Err(NfsError::V4Status {
            op: op::name(f.op),
            status: f.status,
        });
    }
    if res.res.len() < sent.len() || res.status != NFS4_OK {
        return Err(NfsError::bad_reply(
            proc,
            format!(
                "status {} with {} of {} results",
                res.status,
                res.res.len(),
                sent.len()
            ),
        ));
    }
    Ok(res.res)
}
