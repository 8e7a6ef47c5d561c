//! DDP marking end to end through the transport traits: an in-memory
//! transport that, like an RDMA transport, hands pieces over as they are
//! (DDP pieces stay DDP pieces), so handlers and callers see DDP-eligible
//! data as separate buffers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpcrdma::testprog::{self, pattern, PROC_READ, PROC_WRITE, TEST_PROG, TEST_VERS};
use rpcrdma::{
    CallDispatcher, Client, ClientConfig, ClientIdentity, ClientTransport, IncomingCall, Message,
    Metrics, OutgoingCall, Piece, ReplyReceiver, Server, ServerConnection, TransportError,
};
use tokio::sync::oneshot;

type Waiters = Mutex<HashMap<u32, oneshot::Sender<Result<Message, TransportError>>>>;

#[derive(Default)]
struct MemConn {
    waiters: Arc<Waiters>,
    /// The client's backchannel server, once it set one.
    bc: Mutex<Option<Arc<dyn CallDispatcher>>>,
    /// DDP result sizes the caller offered, per XID (what an RDMA
    /// transport turns into Write chunks).
    offered: Arc<Mutex<HashMap<u32, Vec<u32>>>>,
}

impl ServerConnection for MemConn {
    fn send_reply(
        &self,
        xid: u32,
        reply: Message,
        _guard: rpcrdma::CallGuard,
    ) -> Result<(), TransportError> {
        // An RDMA responder puts each DDP piece into the next offered Write
        // chunk; check they fit like it would.
        let offered = self
            .offered
            .lock()
            .unwrap()
            .remove(&xid)
            .unwrap_or_default();
        for (i, d) in reply.ddp_data().enumerate() {
            assert!(
                d.len() as u32 <= offered[i],
                "DDP result fits its Write chunk"
            );
        }
        if let Some(tx) = self.waiters.lock().unwrap().remove(&xid) {
            let _ = tx.send(Ok(reply));
        }
        Ok(())
    }
    fn backchannel(&self) -> Result<Arc<dyn ClientTransport>, TransportError> {
        // The reverse direction: calls go to the client's backchannel
        // server, replies come back on a connection of their own.
        let bc = self.bc.lock().unwrap().clone();
        match bc {
            Some(d) => Ok(Arc::new(MemTransport {
                conn: Arc::default(),
                dispatcher: d,
                metrics: Arc::default(),
            })),
            None => Err(TransportError::Unsupported("no backchannel server set")),
        }
    }
    fn peer(&self) -> String {
        "mem".into()
    }
    fn name(&self) -> &'static str {
        "mem"
    }
}

struct MemTransport {
    conn: Arc<MemConn>,
    dispatcher: Arc<dyn CallDispatcher>,
    metrics: Arc<Metrics>,
}

impl ClientTransport for MemTransport {
    fn send_call(&self, call: OutgoingCall) -> Result<ReplyReceiver, TransportError> {
        let (tx, rx) = oneshot::channel();
        self.conn.waiters.lock().unwrap().insert(call.xid, tx);
        self.conn
            .offered
            .lock()
            .unwrap()
            .insert(call.xid, call.ddp_results.clone());
        self.dispatcher.dispatch(IncomingCall {
            message: call.message,
            client: ClientIdentity(bytes::Bytes::from_static(b"mem-client")),
            conn: self.conn.clone(),
            guard: rpcrdma::CallGuard::none(),
            room: rpcrdma::ReplyRoom::UNBOUNDED,
        });
        Ok(rx)
    }
    fn cancel(&self, xid: u32) {
        self.conn.waiters.lock().unwrap().remove(&xid);
    }
    fn set_backchannel(&self, d: Arc<dyn CallDispatcher>) -> Result<(), TransportError> {
        *self.conn.bc.lock().unwrap() = Some(d);
        Ok(())
    }
    fn close(&self) {}
    fn closed_reason(&self) -> Option<TransportError> {
        None
    }
    fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }
    fn name(&self) -> &'static str {
        "mem"
    }
}

fn mem_client(server: &Server) -> Client {
    let t = MemTransport {
        conn: Arc::default(),
        dispatcher: server.dispatcher(),
        metrics: Arc::default(),
    };
    Client::new(Arc::new(t), ClientConfig::default())
}

#[tokio::test]
async fn ddp_pieces_travel_end_to_end() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let server = Server::default();
        testprog::register(&server);
        // A second program that reports what the handler saw.
        server.register(0x2000_6001, 1, |ctx: rpcrdma::CallContext| async move {
            let pieces: Vec<(bool, usize)> = ctx
                .args
                .pieces()
                .iter()
                .map(|p| (p.is_ddp(), p.bytes().len()))
                .collect();
            let mut b = Message::builder();
            b.put_u32(pieces.len() as u32);
            for (ddp, len) in pieces {
                b.put_bool(ddp).put_u32(len as u32);
            }
            Ok(b.finish())
        });
        let c = mem_client(&server);

        // The handler sees: inline [u32 len], DDP [5 octets], inline [u32 9].
        let mut b = Message::builder();
        b.put_ddp_opaque(bytes::Bytes::from_static(b"hello"))
            .unwrap();
        b.put_u32(9);
        let r = c.call(0x2000_6001, 1, 0, b.finish(), &[]).await.unwrap();
        let mut rd = r.reader();
        assert_eq!(rd.u32("n").unwrap(), 3);
        let seen: Vec<(bool, u32)> = (0..3)
            .map(|_| (rd.bool("ddp").unwrap(), rd.u32("len").unwrap()))
            .collect();
        assert_eq!(seen, vec![(false, 4), (true, 5), (false, 4)]);

        // READ: the result data comes back as a DDP piece.
        let mut b = Message::builder();
        b.put_u32(1001).put_u32(7);
        let r = c
            .call(TEST_PROG, TEST_VERS, PROC_READ, b.finish(), &[1001])
            .await
            .unwrap();
        let ddp: Vec<_> = r.ddp_data().cloned().collect();
        assert_eq!(ddp.len(), 1);
        assert_eq!(&ddp[0][..], &pattern(7, 1001)[..]);
        assert!(matches!(r.results().pieces()[0], Piece::Inline(_)));
        // The stub reads it the same way as over TCP.
        assert_eq!(
            &testprog::read(&c, 33, 2).await.unwrap()[..],
            &pattern(2, 33)[..]
        );

        // WRITE: DDP argument; same results as over TCP.
        let data = pattern(5, 777);
        let (n, crc) = testprog::write(&c, &data).await.unwrap();
        assert_eq!((n, crc), (777, crc32c::crc32c(&data)));
        let mut b = Message::builder();
        b.put_ddp_opaque(data.clone()).unwrap();
        let args = b.finish();
        assert_eq!(args.ddp_count(), 1);
        assert_eq!(args.xdr_len(), 4 + 780);
        let r = c
            .call(TEST_PROG, TEST_VERS, PROC_WRITE, args, &[])
            .await
            .unwrap();
        assert_eq!(r.reader().u32("count").unwrap(), 777);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn backchannel_hooks_carry_server_to_client_calls() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let server = Server::default();
        // A forward procedure whose handler calls CB_NULL and CB_ECHO on the
        // caller through the backchannel and returns the echo.
        server.register(0x2000_6002, 1, |ctx: rpcrdma::CallContext| async move {
            let data = ctx.reader().opaque(1 << 20, "max", "data")?;
            let bc = ctx
                .backchannel(ClientConfig::default())
                .map_err(|e| rpcrdma::HandlerError::SystemErr(e.to_string()))?;
            testprog::cb_null(&bc)
                .await
                .map_err(|e| rpcrdma::HandlerError::SystemErr(e.to_string()))?;
            let echoed = testprog::cb_echo(&bc, &data)
                .await
                .map_err(|e| rpcrdma::HandlerError::SystemErr(e.to_string()))?;
            let mut b = Message::builder();
            b.put_opaque(&echoed).unwrap();
            Ok(b.finish())
        });
        let c = mem_client(&server);
        let mut args = Message::builder();
        args.put_opaque(b"ping").unwrap();
        // Without a backchannel server the handler fails: SYSTEM_ERR.
        let e = c
            .call(0x2000_6002, 1, 0, args.finish(), &[])
            .await
            .unwrap_err();
        assert_eq!(e.reply_error(), Some(rpcrdma::ReplyError::SystemErr));
        let cb = Server::default();
        testprog::register_cb(&cb);
        c.serve_backchannel(&cb).unwrap();
        let mut args = Message::builder();
        args.put_opaque(b"ping").unwrap();
        let r = c.call(0x2000_6002, 1, 0, args.finish(), &[]).await.unwrap();
        assert_eq!(&r.reader().opaque(100, "max", "r").unwrap()[..], b"ping");
        assert_eq!(cb.metrics().calls_received, 2);
    })
    .await
    .unwrap();
}
