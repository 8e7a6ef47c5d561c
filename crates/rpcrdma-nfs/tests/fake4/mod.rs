//! A scripted NFSv4.1 server for the v4.1 client's tests, on the real
//! runtime over loopback software iWARP: just enough EXCHANGE_ID,
//! CREATE_SESSION, SEQUENCE, lookups, OPEN with a read delegation,
//! DELEGRETURN, CLOSE and the DESTROYs — and callbacks over the
//! connection's backchannel (RFC 8167), as Linux's knfsd sends them.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma::rdma::{RdmaServer, RdmaServerConfig};
use rpcrdma::{CallContext, Client, ClientConfig, HandlerError, Message, RpcError, Server};
use rpcrdma_nfs::binding::message::inline_bytes;
use rpcrdma_nfs::nfs4::cb::*;
use rpcrdma_nfs::nfs4::ops::*;
use rpcrdma_nfs::nfs4::status::*;
use rpcrdma_nfs::nfs4::*;

pub const SESSION: SessionId = [0xab; 16];
pub const CLIENTID: u64 = 0x1234_5678;
pub const DELEG: StateId = StateId {
    seqid: 1,
    other: [0xde; 12],
};
pub const OPEN_STATE: StateId = StateId {
    seqid: 1,
    other: [0x0e; 12],
};

#[derive(Default)]
pub struct Knobs {
    /// On EXCHANGE_ID, call CB_NULL over the backchannel before answering
    /// (a server that calls back before CREATE_SESSION).
    pub cb_before_session: bool,
    /// As Linux's knfsd for a minor version 1 client: no CB_NULL probe,
    /// the callback path is taken as up at once.
    pub no_cb_null: bool,
}

#[derive(Default, Debug, Clone)]
pub struct State {
    pub ops: Vec<u32>,
    pub cb_program: Option<u32>,
    pub back_attrs: Option<ChannelAttrs>,
    pub cb_null_ok: bool,
    pub cb_seq: u32,
    pub delegated: Option<Fh>,
    pub delegreturned: Option<StateId>,
    pub closed: bool,
    pub session_destroyed: bool,
    pub client_destroyed: bool,
    pub early_cb: Option<String>,
}

pub struct Fake4 {
    pub knobs: Knobs,
    pub state: Mutex<State>,
    bc: Mutex<Option<Arc<Client>>>,
}

impl Fake4 {
    pub fn new(knobs: Knobs) -> Arc<Fake4> {
        Arc::new(Fake4 {
            knobs,
            state: Mutex::new(State::default()),
            bc: Mutex::new(None),
        })
    }

    pub async fn serve(self: &Arc<Self>) -> RdmaServer {
        let server = Server::default();
        let me = self.clone();
        server.register(NFS4_PROGRAM, NFS_V4, move |ctx: CallContext| {
            let me = me.clone();
            async move { me.call(ctx).await }
        });
        RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .unwrap()
    }

    fn bc(&self) -> Arc<Client> {
        self.bc.lock().unwrap().clone().expect("no backchannel")
    }

    /// A raw callback: procedure and arguments; the results' octets.
    pub async fn callback(&self, proc: u32, args: Vec<u8>) -> Result<Vec<u8>, RpcError> {
        let prog = self.state.lock().unwrap().cb_program.unwrap_or(CB_PROGRAM);
        let r = self
            .bc()
            .call(prog, NFS_CB, proc, Message::inline(args), &[])
            .await?;
        Ok(inline_bytes(r.results()).to_vec())
    }

    /// CB_COMPOUND of `ops` after a CB_SEQUENCE on the next slot-0 sequence
    /// id.
    pub fn sequenced(&self, ops: Vec<CbOp>) -> CbCompound {
        let seq = {
            let mut s = self.state.lock().unwrap();
            s.cb_seq += 1;
            s.cb_seq
        };
        let mut all = vec![CbOp::Sequence(CbSequenceArgs {
            sessionid: SESSION,
            sequenceid: seq,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
            referring: vec![],
        })];
        all.extend(ops);
        CbCompound {
            tag: b"fake".to_vec(),
            minorversion: 1,
            callback_ident: 0,
            ops: all,
        }
    }

    pub async fn cb_compound(&self, c: &CbCompound) -> Result<CbCompoundRes, RpcError> {
        let out = self.callback(CB_COMPOUND, c.encode()).await?;
        Ok(CbCompoundRes::decode(&out).expect("client's CB_COMPOUND4res decodes"))
    }

    /// Recalls the delegation granted (as knfsd does on a conflicting
    /// write).
    pub async fn recall(&self) -> Result<CbCompoundRes, RpcError> {
        let fh = self
            .state
            .lock()
            .unwrap()
            .delegated
            .clone()
            .expect("no delegation");
        let c = self.sequenced(vec![CbOp::Recall(CbRecallArgs {
            stateid: DELEG,
            truncate: false,
            fh,
        })]);
        self.cb_compound(&c).await
    }

    async fn call(self: Arc<Self>, ctx: CallContext) -> Result<Message, HandlerError> {
        match ctx.proc {
            NFSPROC4_NULL => Ok(Message::inline(Vec::new())),
            NFSPROC4_COMPOUND => {
                let args = inline_bytes(&ctx.args);
                let c = Compound::decode(&args)?;
                let res = self.compound(&ctx, c).await;
                Ok(Message::inline(res.encode()))
            }
            _ => Err(HandlerError::ProcUnavail),
        }
    }

    async fn compound(self: &Arc<Self>, ctx: &CallContext, c: Compound) -> CompoundRes {
        let mut out = CompoundRes {
            status: NFS4_OK,
            tag: c.tag,
            res: vec![],
        };
        let mut cur: Vec<u8> = Vec::new();
        for a in c.ops {
            let r = self.op(ctx, a, &mut cur).await;
            out.status = r.status;
            out.res.push(r);
            if out.status != NFS4_OK {
                break;
            }
        }
        out
    }

    async fn op(self: &Arc<Self>, ctx: &CallContext, a: OpArgs, cur: &mut Vec<u8>) -> OpRes {
        let opnum = a.op();
        self.state.lock().unwrap().ops.push(opnum);
        let ok = |r| OpRes::ok(opnum, r);
        match a {
            OpArgs::ExchangeId(_) => {
                if self.knobs.cb_before_session {
                    self.early_callback(ctx).await;
                }
                ok(ResOk::ExchangeId(ExchangeIdResOk {
                    clientid: CLIENTID,
                    sequenceid: 1,
                    flags: EXCHGID4_FLAG_USE_NON_PNFS,
                    minor_id: 0,
                    major_id: b"fake4".to_vec(),
                    scope: b"fake4".to_vec(),
                    impl_name: None,
                }))
            }
            OpArgs::CreateSession(a) => {
                if a.clientid != CLIENTID || a.sequence != 1 {
                    return OpRes::fail(opnum, NFS4ERR_STALE_CLIENTID);
                }
                {
                    let mut s = self.state.lock().unwrap();
                    s.cb_program = Some(a.cb_program);
                    s.back_attrs = Some(a.back.clone());
                }
                if a.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
                    let bc = ctx.backchannel(ClientConfig::default()).unwrap();
                    *self.bc.lock().unwrap() = Some(Arc::new(bc));
                    // knfsd probes the backchannel with CB_NULL once the
                    // session exists.
                    if self.knobs.no_cb_null {
                        self.state.lock().unwrap().cb_null_ok = true;
                    } else {
                        let me = self.clone();
                        tokio::spawn(async move {
                            let ok = me.callback(CB_NULL, vec![]).await.is_ok();
                            me.state.lock().unwrap().cb_null_ok = ok;
                        });
                    }
                }
                ok(ResOk::CreateSession(CreateSessionResOk {
                    sessionid: SESSION,
                    sequence: 1,
                    flags: a.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
                    fore: a.fore,
                    back: a.back,
                }))
            }
            OpArgs::Sequence(s) => {
                if s.sessionid != SESSION {
                    return OpRes::fail(opnum, NFS4ERR_BADSESSION);
                }
                ok(ResOk::Sequence(SequenceResOk {
                    sessionid: SESSION,
                    sequenceid: s.sequenceid,
                    slotid: 0,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                    status_flags: 0,
                }))
            }
            OpArgs::PutRootFh => {
                *cur = b"/".to_vec();
                ok(ResOk::Void)
            }
            OpArgs::PutFh(fh) => {
                *cur = fh.0;
                ok(ResOk::Void)
            }
            OpArgs::Lookup(n) => {
                cur.extend_from_slice(&n);
                cur.push(b'/');
                ok(ResOk::Void)
            }
            OpArgs::GetFh => ok(ResOk::GetFh(Fh(cur.clone()))),
            OpArgs::GetAttr(_) => ok(ResOk::GetAttr(Fattr::new(2, 4096, 1))),
            OpArgs::ReclaimComplete(_) => ok(ResOk::Void),
            OpArgs::Open(o) => {
                cur.extend_from_slice(&o.name);
                let want = o.share_access & OPEN4_SHARE_ACCESS_WANT_READ_DELEG != 0;
                let cb_up = self.state.lock().unwrap().cb_null_ok;
                let delegation = if want && cb_up {
                    self.state.lock().unwrap().delegated = Some(Fh(cur.clone()));
                    Delegation::Granted {
                        kind: deleg::READ,
                        stateid: DELEG,
                        recall: false,
                    }
                } else {
                    Delegation::None
                };
                ok(ResOk::Open(OpenResOk {
                    stateid: OPEN_STATE,
                    rflags: 0,
                    delegation,
                }))
            }
            OpArgs::DelegReturn(s) => {
                if s.other != DELEG.other {
                    return OpRes::fail(opnum, NFS4ERR_BAD_STATEID);
                }
                self.state.lock().unwrap().delegreturned = Some(s);
                ok(ResOk::Void)
            }
            OpArgs::Close(s) => {
                self.state.lock().unwrap().closed = s == OPEN_STATE;
                ok(ResOk::Close(OPEN_STATE))
            }
            OpArgs::DestroySession(id) => {
                self.state.lock().unwrap().session_destroyed = id == SESSION;
                ok(ResOk::Void)
            }
            OpArgs::DestroyClientId(id) => {
                self.state.lock().unwrap().client_destroyed = id == CLIENTID;
                ok(ResOk::Void)
            }
        }
    }

    /// CB_NULL over the backchannel before any session: the client has
    /// posted no receive for it.
    async fn early_callback(&self, ctx: &CallContext) {
        let bc = ctx.backchannel(ClientConfig {
            timeout: Duration::from_secs(3),
            ..ClientConfig::default()
        });
        let r = match bc {
            Ok(bc) => {
                let call = bc.call(CB_PROGRAM, NFS_CB, CB_NULL, Message::inline(vec![]), &[]);
                match tokio::time::timeout(Duration::from_secs(5), call).await {
                    Ok(r) => format!("{:?}", r.map(|_| ())),
                    Err(_) => "no answer".to_string(),
                }
            }
            Err(e) => format!("no backchannel: {e}"),
        };
        self.state.lock().unwrap().early_cb = Some(r);
    }
}
