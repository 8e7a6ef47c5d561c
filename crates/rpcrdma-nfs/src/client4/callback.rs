//! The callback service a client runs on its own RPC-over-RDMA connection
//! (RFC 8167 backchannel): CB_NULL, and CB_COMPOUND with CB_SEQUENCE and
//! CB_RECALL; every other callback operation answers `NFS4ERR_NOTSUPP`
//! (`NFS4ERR_OP_ILLEGAL` outside the operation range), every other
//! procedure PROC_UNAVAIL (by the runtime's dispatcher).
//!
//! Bad input: a CB_COMPOUND header that does not decode within its bounds
//! (tag over [`MAX_TAG`](crate::nfs4::MAX_TAG), more than
//! [`MAX_CB_OPS`](crate::nfs4::MAX_CB_OPS) operations, truncation) answers
//! GARBAGE_ARGS; an operation whose arguments do not decode answers
//! `NFS4ERR_BADXDR` for that operation and ends the compound (the
//! operations before it keep their results).
//!
//! One backchannel slot (slot 0, `ca_maxrequests` 1), no reply cache
//! (`ca_maxresponsesize_cached` 0): a retried sequence id answers
//! `NFS4ERR_RETRY_UNCACHED_REP`, any other out-of-order one
//! `NFS4ERR_SEQ_MISORDERED` (RFC 8881 §2.10.6.1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma::{CallContext, HandlerError, Message, Server};
use rpcrdma_proto::xdr::Reader;
use tokio::sync::{mpsc, watch};

use crate::binding::message::inline_bytes;
use crate::nfs4::cb::{
    CbCompoundRes, CbHeader, CbOp, CbOpRes, CbRecallArgs, CbSequenceArgs, CbSequenceResOk,
    OP_CB_GETATTR, OP_CB_ILLEGAL, OP_CB_OFFLOAD, OP_CB_SEQUENCE,
};
use crate::nfs4::status::*;
use crate::nfs4::{SessionId, CB_COMPOUND, CB_NULL, CB_PROGRAM, MINOR_VERSION, NFS_CB};

/// How long a callback waits for the session it names when it arrives
/// while CREATE_SESSION's reply is still on its way (the server may send
/// CB_NULL as soon as it has created the session).
pub const SESSION_WAIT: Duration = Duration::from_secs(5);
/// Recalls queued for the client before CB_RECALL answers NFS4ERR_DELAY.
const RECALL_QUEUE: usize = 16;

/// What the callback service saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallbackCounts {
    /// CB_NULL calls answered.
    pub cb_null: u64,
    /// CB_COMPOUND calls answered (any status).
    pub cb_compound: u64,
    /// CB_RECALL operations accepted (answered NFS4_OK).
    pub cb_recall: u64,
    /// CB_COMPOUND calls answered GARBAGE_ARGS or with an NFS4ERR_BADXDR
    /// operation.
    pub bad_xdr: u64,
}

struct Inner {
    session: watch::Receiver<Option<SessionId>>,
    set_session: watch::Sender<Option<SessionId>>,
    /// Last sequence id of slot 0 (0: none yet; the first is 1).
    slot: Mutex<u32>,
    recalls: mpsc::Sender<CbRecallArgs>,
    cb_null: AtomicU64,
    cb_compound: AtomicU64,
    cb_recall: AtomicU64,
    bad_xdr: AtomicU64,
}

/// The callback program of one client (cheap to clone).
#[derive(Clone)]
pub struct CallbackService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CallbackService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackService")
            .field("counts", &self.counts())
            .finish()
    }
}

impl CallbackService {
    /// A service, and the receiver of the delegations it is asked to
    /// return (the client answers each with DELEGRETURN).
    pub fn new() -> (Self, mpsc::Receiver<CbRecallArgs>) {
        let (set_session, session) = watch::channel(None);
        let (tx, rx) = mpsc::channel(RECALL_QUEUE);
        let inner = Inner {
            session,
            set_session,
            slot: Mutex::new(0),
            recalls: tx,
            cb_null: AtomicU64::new(0),
            cb_compound: AtomicU64::new(0),
            cb_recall: AtomicU64::new(0),
            bad_xdr: AtomicU64::new(0),
        };
        (
            CallbackService {
                inner: Arc::new(inner),
            },
            rx,
        )
    }

    /// A runtime server with the callback program registered, for
    /// [`rpcrdma::Client::serve_backchannel`].
    pub fn server(&self) -> Server {
        let server = Server::default();
        let me = self.clone();
        server.register(CB_PROGRAM, NFS_CB, move |ctx: CallContext| {
            let me = me.clone();
            async move {
                let args = inline_bytes(&ctx.args);
                me.call(ctx.proc, &args).await.map(Message::inline)
            }
        });
        server
    }

    /// The session whose callbacks are accepted (from CREATE_SESSION).
    pub fn set_session(&self, id: SessionId) {
        let _ = self.inner.set_session.send(Some(id));
    }

    /// What was seen so far.
    pub fn counts(&self) -> CallbackCounts {
        let i = &self.inner;
        CallbackCounts {
            cb_null: i.cb_null.load(Ordering::Relaxed),
            cb_compound: i.cb_compound.load(Ordering::Relaxed),
            cb_recall: i.cb_recall.load(Ordering::Relaxed),
            bad_xdr: i.bad_xdr.load(Ordering::Relaxed),
        }
    }

    /// Answers callback procedure `proc` with arguments `args` (the
    /// results' XDR, or the RPC-level error).
    pub async fn call(&self, proc: u32, args: &[u8]) -> Result<Vec<u8>, HandlerError> {
        match proc {
            CB_NULL => {
                self.inner.cb_null.fetch_add(1, Ordering::Relaxed);
                Ok(Vec::new())
            }
            CB_COMPOUND => {
                let r = self.compound(args).await;
                if r.is_err() {
                    self.inner.bad_xdr.fetch_add(1, Ordering::Relaxed);
                }
                self.inner.cb_compound.fetch_add(1, Ordering::Relaxed);
                r.map(|res| res.encode())
            }
            _ => Err(HandlerError::ProcUnavail),
        }
    }

    async fn compound(&self, args: &[u8]) -> Result<CbCompoundRes, HandlerError> {
        let mut r = Reader::new(args);
        let h = CbHeader::get(&mut r)?;
        let mut out = CbCompoundRes {
            status: NFS4_OK,
            tag: h.tag,
            res: Vec::new(),
        };
        if h.minorversion != MINOR_VERSION {
            out.status = NFS4ERR_MINOR_VERS_MISMATCH;
            return Ok(out);
        }
        for i in 0..h.count {
            let opnum = r.u32("nfs_cb_opnum4")?;
            let res = match CbOp::get_args(opnum, &mut r) {
                Err(_) => {
                    self.inner.bad_xdr.fetch_add(1, Ordering::Relaxed);
                    CbOpRes::fail(opnum, NFS4ERR_BADXDR)
                }
                Ok(op) => self.op(i, op).await,
            };
            out.status = res.status;
            out.res.push(res);
            if out.status != NFS4_OK {
                break;
            }
        }
        Ok(out)
    }

    async fn op(&self, index: u32, op: CbOp) -> CbOpRes {
        match op {
            CbOp::Sequence(s) if index == 0 => self.sequence(s).await,
            CbOp::Sequence(_) => CbOpRes::fail(OP_CB_SEQUENCE, NFS4ERR_SEQUENCE_POS),
            CbOp::Other(n) if !(OP_CB_GETATTR..=OP_CB_OFFLOAD).contains(&n) => {
                CbOpRes::fail(OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL)
            }
            // Every other operation must follow CB_SEQUENCE.
            o if index == 0 => CbOpRes::fail(o.op(), NFS4ERR_OP_NOT_IN_SESSION),
            CbOp::Recall(a) => {
                let op = OP_CB_RECALL_NUM;
                match self.inner.recalls.try_send(a) {
                    Ok(()) => {
                        self.inner.cb_recall.fetch_add(1, Ordering::Relaxed);
                        CbOpRes::fail(op, NFS4_OK)
                    }
                    Err(_) => CbOpRes::fail(op, NFS4ERR_DELAY),
                }
            }
            CbOp::Other(n) => CbOpRes::fail(n, NFS4ERR_NOTSUPP),
        }
    }

    async fn sequence(&self, s: CbSequenceArgs) -> CbOpRes {
        let fail = |st| CbOpRes::fail(OP_CB_SEQUENCE, st);
        let mut rx = self.inner.session.clone();
        let ours = match tokio::time::timeout(SESSION_WAIT, rx.wait_for(|v| v.is_some())).await {
            Ok(Ok(v)) => *v,
            _ => None,
        };
        if ours != Some(s.sessionid) {
            return fail(NFS4ERR_BADSESSION);
        }
        if s.slotid != 0 {
            return fail(NFS4ERR_BADSLOT);
        }
        {
            let mut last = self.inner.slot.lock().unwrap_or_else(|e| e.into_inner());
            if s.sequenceid == *last && *last != 0 {
                return fail(NFS4ERR_RETRY_UNCACHED_REP);
            }
            if s.sequenceid != last.wrapping_add(1) {
                return fail(NFS4ERR_SEQ_MISORDERED);
            }
            *last = s.sequenceid;
        }
        CbOpRes {
            op: OP_CB_SEQUENCE,
            status: NFS4_OK,
            sequence: Some(CbSequenceResOk {
                sessionid: s.sessionid,
                sequenceid: s.sequenceid,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
            }),
        }
    }
}

const OP_CB_RECALL_NUM: u32 = crate::nfs4::cb::OP_CB_RECALL;
