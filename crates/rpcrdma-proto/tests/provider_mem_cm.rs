//! The in-memory connection manager passes the CM conformance checks, and
//! refuses what a real network refuses.

use std::net::SocketAddr;
use std::time::Duration;

use rpcrdma_proto::provider::cm::{CmError, ConnectionManager, Listener};
use rpcrdma_proto::provider::conformance;
use rpcrdma_proto::provider::mem_cm::MemNetwork;
use rpcrdma_proto::provider::ConnectParams;

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn mem_cm_passes_the_cm_conformance_checks() {
    let net = MemNetwork::new();
    match conformance::cm::run_all(&net, any(), Duration::from_secs(30)) {
        Ok(n) => assert_eq!(n, conformance::cm::CHECK_COUNT),
        Err(f) => panic!("{f}"),
    }
}

#[test]
fn no_listener_is_connection_refused_and_addresses_are_exclusive() {
    let net = MemNetwork::new();
    let l = net.listen(any()).unwrap();
    let at = l.local_addr();
    assert_ne!(at.port(), 0);
    match net.listen(at) {
        Err(CmError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
        other => panic!("second listen on {at}: {other:?}"),
    }
    drop(l);
    let p = ConnectParams::default();
    match net.connect(at, &p, Duration::from_secs(1)) {
        Err(CmError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        other => panic!("connect without a listener: {:?}", other.map(|_| ())),
    }
}

#[test]
fn an_unanswered_request_times_out_at_the_connector() {
    let net = MemNetwork::new();
    let _l = net.listen(any()).unwrap();
    let at = _l.local_addr();
    match net.connect(at, &ConnectParams::default(), Duration::from_millis(20)) {
        Err(CmError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut),
        other => panic!("unanswered connect: {:?}", other.map(|_| ())),
    }
}
