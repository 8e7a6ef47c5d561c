//! The built-in test program and its backchannel program.
//!
//! Program numbers are in the user-defined range 0x20000000–0x3fffffff of
//! RFC 5531 §7.3 ("RD" / "RE" in the low half).
//!
//! ```text
//! /* Forward channel: the client calls the server. */
//! program RPCRDMA_TEST_PROG {
//!     version RPCRDMA_TEST_V1 {
//!         void               TEST_NULL(void)          = 0;
//!         opaque_data        TEST_ECHO(opaque_data)   = 1;
//!         opaque_data        TEST_READ(read_args)     = 2;  /* result data DDP-eligible */
//!         write_res          TEST_WRITE(opaque_data)  = 3;  /* argument data DDP-eligible */
//!     } = 1;
//! } = 0x20005244;
//!
//! typedef opaque opaque_data<>;            /* at most TEST_MAX_DATA octets */
//! struct read_args { unsigned int count; unsigned int seed; };
//! struct write_res { unsigned int count; unsigned int crc32c; };
//!
//! /* Backchannel: the server calls the client on the same connection. */
//! program RPCRDMA_TEST_CB_PROG {
//!     version RPCRDMA_TEST_CB_V1 {
//!         void        CB_NULL(void)          = 0;
//!         opaque_data CB_ECHO(opaque_data)   = 1;
//!     } = 1;
//! } = 0x20005245;
//! ```
//!
//! * **ECHO** returns its argument (neither is DDP-eligible).
//! * **READ** returns `count` octets of the pattern [`pattern`]`(seed,
//!   count)`; the result data is DDP-eligible (an RDMA server writes it into
//!   the caller's Write chunk; a client decodes it with
//!   [`MessageReader::ddp_opaque`](crate::MessageReader::ddp_opaque), as
//!   [`read`] does). `count` > [`TEST_MAX_DATA`] is GARBAGE_ARGS.
//! * **WRITE** takes DDP-eligible data (an RDMA client may send it in a Read
//!   chunk) and returns its length and its CRC32C (Castagnoli, as iSCSI:
//!   `crc32c("123456789") = 0xe3069283`).
//!
//! ## The pattern generator
//!
//! xorshift32 (Marsaglia 2003, shifts 13/17/5): the state starts at `seed`
//! (or `0x9e3779b9` when `seed` is 0, as xorshift never leaves 0). For each
//! four output octets the state is advanced
//! (`x ^= x << 13; x ^= x >> 17; x ^= x << 5`, all on `u32`) and the new
//! state is emitted big-endian; the last word is cut to `count`. So
//! seed 1 gives `00 04 20 21 04 08 06 01 9d cc a8 c5 …` (states
//! 0x00042021, 0x04080601, 0x9dcca8c5, …).

use bytes::Bytes;

use crate::client::{CallOptions, CallerError, Client, Reply, RpcError};
use crate::message::Message;
use crate::server::{CallContext, HandlerError, Server};

/// Program number of the test program.
pub const TEST_PROG: u32 = 0x2000_5244;
/// Its version.
pub const TEST_VERS: u32 = 1;
/// NULL procedure.
pub const PROC_NULL: u32 = 0;
/// ECHO procedure.
pub const PROC_ECHO: u32 = 1;
/// READ procedure.
pub const PROC_READ: u32 = 2;
/// WRITE procedure.
pub const PROC_WRITE: u32 = 3;

/// Program number of the backchannel test program (served by the client).
pub const TEST_CB_PROG: u32 = 0x2000_5245;
/// Its version.
pub const TEST_CB_VERS: u32 = 1;
/// CB_NULL procedure.
pub const CB_NULL: u32 = 0;
/// CB_ECHO procedure.
pub const CB_ECHO: u32 = 1;

/// Largest `opaque_data` and READ `count` accepted (16 MiB).
pub const TEST_MAX_DATA: u32 = 16 << 20;

/// The READ pattern: `count` octets of xorshift32 output from `seed` (see
/// the module documentation).
pub fn pattern(seed: u32, count: usize) -> Vec<u8> {
    let mut x = if seed == 0 { 0x9e37_79b9 } else { seed };
    let mut out = Vec::with_capacity(count + 3);
    while out.len() < count {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.extend_from_slice(&x.to_be_bytes());
    }
    out.truncate(count);
    out
}

fn opaque_result(data: Bytes, ddp: bool) -> Result<Message, HandlerError> {
    let mut b = Message::builder();
    let r = if ddp {
        b.put_ddp_opaque(data).map(|_| ())
    } else {
        b.put_opaque(&data).map(|_| ())
    };
    r.map_err(|e| HandlerError::SystemErr(e.to_string()))?;
    Ok(b.finish())
}

/// The test program's version 1 handler.
pub async fn test_handler(ctx: CallContext) -> Result<Message, HandlerError> {
    test_handler_ready(&ctx)
}

/// The arguments of TEST_READ: (count, seed); GARBAGE_ARGS if undecodable
/// or if `count` exceeds [`TEST_MAX_DATA`].
pub fn read_args(ctx: &CallContext) -> Result<(u32, u32), HandlerError> {
    let mut r = ctx.reader();
    let count = r.u32("read.count")?;
    let seed = r.u32("read.seed")?;
    r.finish("read args")?;
    if count > TEST_MAX_DATA {
        return Err(HandlerError::GarbageArgs(format!(
            "read count {count} exceeds TEST_MAX_DATA = {TEST_MAX_DATA}"
        )));
    }
    Ok((count, seed))
}

/// [`test_handler`] run at once (it never waits): for
/// [`Handler::call_ready`](crate::server::Handler::call_ready).
pub fn test_handler_ready(ctx: &CallContext) -> Result<Message, HandlerError> {
    if ctx.proc == PROC_NULL {
        // No reader for the usual empty arguments (a reader would find
        // nothing to refuse in them either).
        if !ctx.args.is_empty() {
            ctx.reader().finish("void")?;
        }
        return Ok(Message::new());
    }
    let mut r = ctx.reader();
    match ctx.proc {
        PROC_ECHO => {
            let data = r.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "echo.data")?;
            r.finish("echo args")?;
            opaque_result(data, false)
        }
        PROC_READ => {
            let (count, seed) = read_args(ctx)?;
            opaque_result(Bytes::from(pattern(seed, count as usize)), true)
        }
        PROC_WRITE => {
            let data = r.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "write.data")?;
            r.finish("write args")?;
            let mut b = Message::builder();
            b.put_u32(data.len() as u32).put_u32(crc32c::crc32c(&data));
            Ok(b.finish())
        }
        _ => Err(HandlerError::ProcUnavail),
    }
}

/// The backchannel program's handler (served by a client).
pub async fn cb_handler(ctx: CallContext) -> Result<Message, HandlerError> {
    let mut r = ctx.reader();
    match ctx.proc {
        CB_NULL => {
            r.finish("void")?;
            Ok(Message::new())
        }
        CB_ECHO => {
            let data = r.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "cb_echo.data")?;
            r.finish("cb_echo args")?;
            opaque_result(data, false)
        }
        _ => Err(HandlerError::ProcUnavail),
    }
}

/// Registers the test program (version 1) on `server`.
pub fn register(server: &Server) {
    server.register(TEST_PROG, TEST_VERS, test_handler);
    // Idempotent, as NFS's NULL and READ are in Linux (RC_NOCACHE): a
    // retransmission runs them again. WRITE's reply is cached.
    server.set_uncached(TEST_PROG, TEST_VERS, &[PROC_NULL, PROC_ECHO, PROC_READ]);
}

/// Registers the backchannel program on `server` (a client's backchannel
/// server).
pub fn register_cb(server: &Server) {
    server.register(TEST_CB_PROG, TEST_CB_VERS, cb_handler);
}

fn opaque_args(data: &[u8], ddp: bool) -> Result<Message, RpcError> {
    let mut b = Message::builder();
    if ddp {
        b.put_ddp_opaque(Bytes::copy_from_slice(data))?;
    } else {
        b.put_opaque(data)?;
    }
    Ok(b.finish())
}

fn check_len(n: usize) -> Result<(), RpcError> {
    if n > TEST_MAX_DATA as usize {
        return Err(RpcError::Caller(CallerError::BadArgument(format!(
            "{n} octets exceed TEST_MAX_DATA = {TEST_MAX_DATA}"
        ))));
    }
    Ok(())
}

/// The largest accepted reply header: xid, msg_type, reply_stat, a verifier
/// of at most 400 octets (RFC 5531 `MAX_AUTH_BYTES`), accept_stat and, for
/// PROG_MISMATCH, the two version words.
pub const REPLY_HEADER_MAX: u32 = 4 * 3 + 8 + 400 + 4 + 8;

/// Per-call options with the exact largest reply of a procedure whose
/// results take at most `results` XDR octets apart from the data of its
/// DDP-eligible items (whose largest lengths are `ddp_results`), so
/// that an RDMA transport offers a Reply chunk only when the reply may not
/// fit inline (as Linux does from each procedure's `p_replen`).
fn reply_of(results: u64, ddp_results: Vec<u32>) -> CallOptions {
    CallOptions {
        reply_max: Some(u32::try_from(u64::from(REPLY_HEADER_MAX) + results).unwrap_or(u32::MAX)),
        ddp_results,
        ..CallOptions::default()
    }
}

/// XDR length of an `opaque_data` of `n` octets.
fn opaque_len(n: u64) -> u64 {
    4 + n.div_ceil(4) * 4
}

/// A prepared call of the test program: procedure, arguments, options.
type Prepared = (u32, Message, CallOptions);

fn null_call() -> Prepared {
    (PROC_NULL, Message::new(), reply_of(0, Vec::new()))
}

fn null_result(r: &Reply) -> Result<(), RpcError> {
    // Nothing at all: what the reader would accept, without making one.
    if r.results().is_empty() {
        return Ok(());
    }
    r.reader().finish("void")?;
    Ok(())
}

fn echo_call(data: &[u8]) -> Result<Prepared, RpcError> {
    check_len(data.len())?;
    Ok((
        PROC_ECHO,
        opaque_args(data, false)?,
        reply_of(opaque_len(data.len() as u64), Vec::new()),
    ))
}

fn echo_result(r: &Reply) -> Result<Bytes, RpcError> {
    let mut rd = r.reader();
    let out = rd.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "echo.result")?;
    rd.finish("echo result")?;
    Ok(out)
}

fn read_call(count: u32, seed: u32) -> Result<Prepared, RpcError> {
    check_len(count as usize)?;
    let mut b = Message::builder();
    b.put_u32(count).put_u32(seed);
    Ok((PROC_READ, b.finish(), reply_of(4, vec![count])))
}

fn read_result(r: &Reply, count: u32) -> Result<Bytes, RpcError> {
    let mut rd = r.reader();
    // DDP-eligible: over RDMA the data is the Write chunk's.
    let out = rd.ddp_opaque(count, "read count", "read.result")?;
    rd.finish("read result")?;
    Ok(out)
}

fn write_call(data: Bytes) -> Result<Prepared, RpcError> {
    check_len(data.len())?;
    // The caller's bytes themselves (over RDMA, registered as they are for
    // the Read chunk): no copy.
    let mut b = Message::builder();
    b.put_ddp_opaque(data)?;
    Ok((PROC_WRITE, b.finish(), reply_of(8, Vec::new())))
}

fn write_result(r: &Reply) -> Result<(u32, u32), RpcError> {
    let mut rd = r.reader();
    let count = rd.u32("write.count")?;
    let crc = rd.u32("write.crc32c")?;
    rd.finish("write result")?;
    Ok((count, crc))
}

async fn call_async(c: &Client, (proc, args, opts): Prepared) -> Result<Reply, RpcError> {
    c.call_with(TEST_PROG, TEST_VERS, proc, args, &opts).await
}

/// TEST_NULL.
pub async fn null(c: &Client) -> Result<(), RpcError> {
    null_result(&call_async(c, null_call()).await?)
}

/// TEST_ECHO.
pub async fn echo(c: &Client, data: &[u8]) -> Result<Bytes, RpcError> {
    echo_result(&call_async(c, echo_call(data)?).await?)
}

/// TEST_READ: `count` octets of the pattern from `seed` (DDP-eligible).
pub async fn read(c: &Client, count: u32, seed: u32) -> Result<Bytes, RpcError> {
    read_result(&call_async(c, read_call(count, seed)?).await?, count)
}

/// TEST_WRITE: sends `data` (DDP-eligible); returns the server's
/// `(count, crc32c)`.
pub async fn write(c: &Client, data: &[u8]) -> Result<(u32, u32), RpcError> {
    write_shared(c, Bytes::copy_from_slice(data)).await
}

/// [`write`] of bytes the caller shares (not copied).
pub async fn write_shared(c: &Client, data: Bytes) -> Result<(u32, u32), RpcError> {
    write_result(&call_async(c, write_call(data)?).await?)
}

/// The test program's calls over a blocking client
/// ([`RdmaBlockingClient`](crate::rdma::RdmaBlockingClient),
/// [`TcpBlockingClient`](crate::TcpBlockingClient): any [`BlockingCall`])
/// with the same arguments, options and result checks as the async ones.
pub mod blocking {
    use super::*;
    use crate::rdma::RdmaBlockingClient;
    use crate::TcpBlockingClient;

    /// A blocking client: one call at a time on the calling thread.
    pub trait BlockingCall {
        /// Calls `prog`/`vers`/`proc` with `args` and waits for the reply.
        fn call_with(
            &mut self,
            prog: u32,
            vers: u32,
            proc: u32,
            args: Message,
            opts: &CallOptions,
        ) -> Result<Reply, RpcError>;
    }

    impl BlockingCall for RdmaBlockingClient {
        fn call_with(
            &mut self,
            prog: u32,
            vers: u32,
            proc: u32,
            args: Message,
            opts: &CallOptions,
        ) -> Result<Reply, RpcError> {
            RdmaBlockingClient::call_with(self, prog, vers, proc, args, opts)
        }
    }

    impl BlockingCall for TcpBlockingClient {
        fn call_with(
            &mut self,
            prog: u32,
            vers: u32,
            proc: u32,
            args: Message,
            opts: &CallOptions,
        ) -> Result<Reply, RpcError> {
            TcpBlockingClient::call_with(self, prog, vers, proc, args, opts)
        }
    }

    fn call<C: BlockingCall + ?Sized>(
        c: &mut C,
        (proc, args, opts): Prepared,
    ) -> Result<Reply, RpcError> {
        c.call_with(TEST_PROG, TEST_VERS, proc, args, &opts)
    }

    /// TEST_NULL.
    pub fn null<C: BlockingCall + ?Sized>(c: &mut C) -> Result<(), RpcError> {
        null_result(&call(c, null_call())?)
    }

    /// TEST_ECHO.
    pub fn echo<C: BlockingCall + ?Sized>(c: &mut C, data: &[u8]) -> Result<Bytes, RpcError> {
        echo_result(&call(c, echo_call(data)?)?)
    }

    /// TEST_READ: `count` octets of the pattern from `seed` (DDP-eligible).
    pub fn read<C: BlockingCall + ?Sized>(
        c: &mut C,
        count: u32,
        seed: u32,
    ) -> Result<Bytes, RpcError> {
        read_result(&call(c, read_call(count, seed)?)?, count)
    }

    /// TEST_WRITE: sends `data` (DDP-eligible); returns the server's
    /// `(count, crc32c)`.
    pub fn write<C: BlockingCall + ?Sized>(c: &mut C, data: &[u8]) -> Result<(u32, u32), RpcError> {
        write_shared(c, Bytes::copy_from_slice(data))
    }

    /// [`write`] of bytes the caller shares (not copied).
    pub fn write_shared<C: BlockingCall + ?Sized>(
        c: &mut C,
        data: Bytes,
    ) -> Result<(u32, u32), RpcError> {
        write_result(&call(c, write_call(data)?)?)
    }
}

/// CB_NULL (server → client over the backchannel).
pub async fn cb_null(c: &Client) -> Result<(), RpcError> {
    let r = c
        .call(TEST_CB_PROG, TEST_CB_VERS, CB_NULL, Message::new(), &[])
        .await?;
    r.reader().finish("void")?;
    Ok(())
}

/// CB_ECHO (server → client over the backchannel).
pub async fn cb_echo(c: &Client, data: &[u8]) -> Result<Bytes, RpcError> {
    check_len(data.len())?;
    let r = c
        .call(
            TEST_CB_PROG,
            TEST_CB_VERS,
            CB_ECHO,
            opaque_args(data, false)?,
            &[],
        )
        .await?;
    let mut rd = r.reader();
    let out = rd.opaque(TEST_MAX_DATA, "TEST_MAX_DATA", "cb_echo.result")?;
    rd.finish("cb_echo result")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_hand_checked() {
        // x = 1: x ^= x<<13 -> 0x2001; x ^= x>>17 -> 0x2001;
        // x ^= x<<5 -> 0x2001 ^ 0x40020 = 0x42021.
        let p = pattern(1, 10);
        assert_eq!(&p[..4], &[0x00, 0x04, 0x20, 0x21]);
        // x = 0x00042021: x<<13 = 0x84042000, xor -> 0x84000021;
        // x>>17 = 0x4200, xor -> 0x84004221;
        // x<<5 = 0x80084420 (mod 2^32), xor -> 0x04080601.
        assert_eq!(&p[4..8], &[0x04, 0x08, 0x06, 0x01]);
        assert_eq!(&pattern(1, 12)[8..], &[0x9d, 0xcc, 0xa8, 0xc5]);
        assert_eq!(p.len(), 10);
        assert_eq!(&pattern(1, 3)[..], &[0x00, 0x04, 0x20]);
        assert!(pattern(7, 0).is_empty());
        // Seed 0 behaves as 0x9e3779b9.
        assert_eq!(pattern(0, 64), pattern(0x9e37_79b9, 64));
        assert_ne!(pattern(1, 64), pattern(2, 64));
    }
}
