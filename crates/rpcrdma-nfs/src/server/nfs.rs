//! The NFSv3 program (100003 version 3) as a runtime [`Handler`].
//!
//! | call | answer |
//! |---|---|
//! | NULL | the empty result, at once |
//! | MKNOD, LINK | `NFS3ERR_NOTSUPP` with empty attributes, at once |
//! | a procedure number above 21 | PROC_UNAVAIL (RFC 5531 §9) |
//! | arguments that do not decode | GARBAGE_ARGS |
//! | arguments that decode but break a server limit | the procedure's failure with NFS3ERR_NAMETOOLONG / NFS3ERR_INVAL |
//! | anything else | the procedure, on the blocking pool ([`AsyncExport`]); a panic there is NFS3ERR_SERVERFAULT |
//!
//! Versions other than 3 get PROG_MISMATCH (3, 3) from the runtime (only
//! version 3 is registered). Replies carry READ's data and READLINK's path
//! as DDP-eligible pieces (RFC 8267 §4: the transport writes them into the
//! Write chunk the client offered, else inline); WRITE's data comes from
//! the call's Read chunk without a copy (`binding::message`). READDIR and
//! READDIRPLUS stay within the room the transport reports
//! ([`CallContext::room`]: the Reply chunk).

use std::future::ready;
use std::sync::Arc;

use rpcrdma::{CallContext, Handler, HandlerError, HandlerFuture, Message};
use rpcrdma_proto::wire::rpc::SUCCESS_HEADER_LEN;

use super::bufpool::BufPool;
use super::procs::{run, Env};
use super::stats::Stats;
use crate::binding::message::{decode_args, encode_res, encode_res_file};
use crate::fs::AsyncExport;
use crate::nfs3::{self, not_supported, Nfs3Res, Nfsstat3};
use crate::{ArgError, Limits};

/// The NFSv3 handler (cheap to clone: shared state).
#[derive(Clone)]
pub(crate) struct Nfs3Handler {
    pub(crate) export: AsyncExport,
    pub(crate) limits: Limits,
    pub(crate) stats: Arc<Stats>,
    pub(crate) bufs: Arc<BufPool>,
}

/// The results of a failed procedure, encoded.
fn failure(proc: u32, status: Nfsstat3) -> Result<Message, HandlerError> {
    match Nfs3Res::failure(proc, status) {
        Some(res) => encode(&res),
        None => Err(HandlerError::SystemErr(format!(
            "no failure result for {proc}"
        ))),
    }
}

fn encode(res: &Nfs3Res) -> Result<Message, HandlerError> {
    encode_res(res).map_err(|e| HandlerError::SystemErr(format!("encoding results: {e}")))
}

impl Nfs3Handler {
    /// What is answered without the export, if anything.
    fn at_once(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
        match ctx.proc {
            nfs3::NFSPROC3_NULL => Some(Ok(Message::new())),
            // MKNOD and LINK: not supported by this server (issue 14).
            p if not_supported(p).is_some() => {
                not_supported(p).map(|v| Ok(Message::inline(bytes::Bytes::from(v))))
            }
            //= rfc5531#section-9
            //# PROC_UNAVAIL  = 3, /* program can't support procedure */
            p if nfs3::proc_name(p).is_none() => Some(Err(HandlerError::ProcUnavail)),
            _ => None,
        }
    }

    /// The room for results: what the transport can carry less our reply
    /// header (AUTH_NONE verifier).
    fn env(&self, ctx: &CallContext) -> Env {
        Env {
            limits: self.limits,
            room: ctx
                .room
                .max_reply()
                .map_or(u64::MAX, |m| m.saturating_sub(SUCCESS_HEADER_LEN as u64)),
            bufs: self.bufs.clone(),
            file_chunk: ctx.room.file_chunk,
        }
    }
}

impl Handler for Nfs3Handler {
    fn call_ready(&self, ctx: &CallContext) -> Option<Result<Message, HandlerError>> {
        let r = self.at_once(ctx)?;
        self.stats.call(ctx.proc, &ctx.cred);
        Some(r)
    }

    fn call(&self, ctx: CallContext) -> HandlerFuture {
        self.stats.call(ctx.proc, &ctx.cred);
        if let Some(r) = self.at_once(&ctx) {
            return Box::pin(ready(r));
        }
        let proc = ctx.proc;
        tracing::debug!(proc, cred = %super::stats::Credential::of(&ctx.cred), "nfs3 call");
        let args = match decode_args(proc, &ctx.args, &self.limits) {
            Ok(a) => a,
            Err(ArgError::Garbage(e)) => {
                self.stats.garbage();
                return Box::pin(ready(Err(HandlerError::GarbageArgs(e.to_string()))));
            }
            Err(ArgError::Status { status, detail }) => {
                self.stats.refused();
                tracing::debug!(proc, %status, detail, "arguments refused");
                return Box::pin(ready(failure(proc, status)));
            }
            Err(ArgError::ProcUnavail(_)) => {
                return Box::pin(ready(Err(HandlerError::ProcUnavail)))
            }
        };
        let env = self.env(&ctx);
        let export = self.export.clone();
        Box::pin(async move {
            match export.run(move |e| Ok(run(e, args, &env))).await {
                Ok((res, None)) => encode(&res),
                Ok((res, Some(range))) => encode_res_file(&res, range)
                    .map_err(|e| HandlerError::SystemErr(format!("encoding results: {e}"))),
                // The operation panicked (or the pool is gone).
                Err(_) => failure(proc, Nfsstat3::NFS3ERR_SERVERFAULT),
            }
        })
    }
}
