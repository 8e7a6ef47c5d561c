//! A test program whose procedure 1 waits `ms` (its only argument) on the
//! runtime's timer before replying with the argument: a handler that is
//! not ready when first polled, and a reply that can come after a client's
//! timeout.

use std::time::Duration;

use rpcrdma::{CallContext, HandlerError, Message, Server};

/// The program number.
pub const SLOW_PROG: u32 = 0x2000_5301;

/// A server with the test program ([`rpcrdma::testprog`]) and
/// [`SLOW_PROG`] registered.
pub fn server() -> Server {
    let server = Server::default();
    rpcrdma::testprog::register(&server);
    server.register(SLOW_PROG, 1, |ctx: CallContext| async move {
        if ctx.proc != 1 {
            return Err(HandlerError::ProcUnavail);
        }
        let ms = ctx.args.reader().u32("ms")?;
        tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
        let mut b = Message::builder();
        b.put_u32(ms);
        Ok(b.finish())
    });
    server
}
