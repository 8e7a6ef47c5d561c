//! Conformance checks of the connection-manager contract
//! ([`crate::provider::cm`]), generic over any [`ConnectionManager`]:
//!
//! ```
//! use rpcrdma_proto::provider::conformance;
//! use rpcrdma_proto::provider::mem_cm::MemNetwork;
//! use std::time::Duration;
//! let net = MemNetwork::new();
//! let at = "127.0.0.1:0".parse().unwrap();
//! let n = conformance::cm::run_all(&net, at, Duration::from_secs(10)).unwrap();
//! assert_eq!(n, conformance::cm::CHECK_COUNT);
//! ```
//!
//! Each check listens on `at`, connects from a second thread (a connect
//! waits for the answer, as the RDMA CM's synchronous mode does) and
//! answers on the calling thread. `timeout` bounds the connect; the
//! listener gives up once the connector has returned without its request
//! arriving.

use std::net::SocketAddr;
use std::thread::ScopedJoinHandle;
use std::time::Duration;

use super::{CheckResult, Failure};
use crate::provider::cm::{
    same_private_data, CmError, ConnectionManager, ListenEvent, Listener, PendingConnection,
    IB_REJ_PRIVATE_DATA, IB_REP_PRIVATE_DATA, IB_REQ_PRIVATE_DATA,
};
use crate::provider::{Access, ConnectParams, ConnectionEvent, ConnectionState, Provider, RecvWr};

/// Number of checks [`run_all`] runs.
pub const CHECK_COUNT: usize = 2;

/// The connector's private data (RFC 8797's shape, any octets do).
pub const CONNECT_PD: &[u8] = &[0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3, b'c'];
/// The acceptor's private data.
pub const ACCEPT_PD: &[u8] = &[0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3, b'a'];
/// The reject's private data.
pub const REJECT_PD: &[u8] = b"no room, try later";

/// How long one listener poll waits before it looks at the connector.
const POLL_SLICE: Duration = Duration::from_millis(100);

fn fail(check: &'static str, message: String) -> Failure {
    Failure { check, message }
}

fn params(private_data: &[u8]) -> ConnectParams {
    ConnectParams {
        private_data: private_data.to_vec(),
        ird: 4,
        ord: 4,
    }
}

/// Polls `l` until a request arrives or the connector `h` has returned.
fn next_request<L: Listener, T>(
    check: &'static str,
    l: &mut L,
    h: &ScopedJoinHandle<'_, T>,
) -> Result<L::Pending, Failure> {
    let mut events = Vec::new();
    loop {
        let done = h.is_finished();
        l.poll(Some(POLL_SLICE), &mut events)
            .map_err(|e| fail(check, format!("listener poll failed: {e}")))?;
        if let Some(ev) = events.pop() {
            return match ev {
                ListenEvent::Request(p) => Ok(p),
                ListenEvent::Dropped { peer, reason } => {
                    Err(fail(check, format!("{peer} dropped: {reason:?}")))
                }
                ListenEvent::Error(e) => Err(fail(check, format!("listener: {e}"))),
            };
        }
        if done {
            return Err(fail(
                check,
                "the connector returned, no request came".into(),
            ));
        }
    }
}

/// The provider's next event is `Established` with `peer_pd` (or, on
/// InfiniBand / RoCE, the IB CM's `ib_field`-octet field holding it:
/// [`same_private_data`]).
fn established<P: Provider>(
    check: &'static str,
    side: &str,
    p: &mut P,
    peer_pd: &[u8],
    ib_field: usize,
) -> CheckResult {
    if p.connection_state() != ConnectionState::Established {
        return Err(fail(
            check,
            format!("{side}: state {:?}", p.connection_state()),
        ));
    }
    match p.poll_event() {
        Some(ConnectionEvent::Established(info))
            if same_private_data(peer_pd, &info.peer_private_data, ib_field) =>
        {
            Ok(())
        }
        other => Err(fail(
            check,
            format!("{side}: first event {other:?}, expected Established with {peer_pd:?}"),
        )),
    }
}

/// Connect with private data, accept with private data: the listener sees
/// the connector's, each end's first event is `Established` carrying the
/// other's, and a receive posted before the accept is allowed.
pub fn accept_with_private_data<CM>(cm: &CM, at: SocketAddr, timeout: Duration) -> CheckResult
where
    CM: ConnectionManager + Sync,
    CM::Provider: Send,
{
    const C: &str = "cm_accept_with_private_data";
    let mut l = cm.listen(at).map_err(|e| fail(C, format!("listen: {e}")))?;
    let addr = l.local_addr();
    std::thread::scope(|s| {
        let h = s.spawn(|| cm.connect(addr, &params(CONNECT_PD), timeout));
        let mut pending = next_request(C, &mut l, &h)?;
        let req = pending.request().clone();
        if !same_private_data(CONNECT_PD, &req.private_data, IB_REQ_PRIVATE_DATA) {
            return Err(fail(
                C,
                format!("request private data {:?}", req.private_data),
            ));
        }
        let p = pending.provider_mut();
        let mr = p
            .register(vec![0u8; 64].into_boxed_slice(), Access::LOCAL_WRITE)
            .map_err(|e| fail(C, format!("register before accept: {e}")))?;
        p.post_recv(RecvWr {
            wr_id: 1,
            sge: mr.sge(0, 64),
        })
        .map_err(|e| fail(C, format!("receive before accept: {e}")))?;
        let mut b = pending
            .accept(&params(ACCEPT_PD))
            .map_err(|e| fail(C, format!("accept: {e}")))?;
        let mut a = h
            .join()
            .map_err(|_| fail(C, "connector panicked".into()))?
            .map_err(|e| fail(C, format!("connect: {e}")))?;
        established(C, "connector", &mut a, ACCEPT_PD, IB_REP_PRIVATE_DATA)?;
        established(C, "acceptor", &mut b, CONNECT_PD, IB_REQ_PRIVATE_DATA)
    })
}

/// Connect with private data, reject with private data: the connector
/// gets [`CmError::Rejected`] with exactly the reject's private data (on
/// InfiniBand / RoCE: the IB CM's REJ field holding it).
pub fn reject_with_private_data<CM>(cm: &CM, at: SocketAddr, timeout: Duration) -> CheckResult
where
    CM: ConnectionManager + Sync,
    CM::Provider: Send,
{
    const C: &str = "cm_reject_with_private_data";
    let mut l = cm.listen(at).map_err(|e| fail(C, format!("listen: {e}")))?;
    let addr = l.local_addr();
    std::thread::scope(|s| {
        let h = s.spawn(|| cm.connect(addr, &params(CONNECT_PD), timeout));
        let pending = next_request(C, &mut l, &h)?;
        pending
            .reject(REJECT_PD)
            .map_err(|e| fail(C, format!("reject: {e}")))?;
        match h.join().map_err(|_| fail(C, "connector panicked".into()))? {
            Err(CmError::Rejected { private_data })
                if same_private_data(REJECT_PD, &private_data, IB_REJ_PRIVATE_DATA) =>
            {
                Ok(())
            }
            Err(e) => Err(fail(C, format!("connect: {e:?}, expected the reject"))),
            Ok(p) => Err(fail(
                C,
                format!("connect succeeded ({:?})", p.connection_state()),
            )),
        }
    })
}

/// Runs every check on a fresh listener at `at` (use port 0); returns the
/// number passed ([`CHECK_COUNT`]) or the first failure.
pub fn run_all<CM>(cm: &CM, at: SocketAddr, timeout: Duration) -> Result<usize, Failure>
where
    CM: ConnectionManager + Sync,
    CM::Provider: Send,
{
    accept_with_private_data(cm, at, timeout)?;
    reject_with_private_data(cm, at, timeout)?;
    Ok(CHECK_COUNT)
}
