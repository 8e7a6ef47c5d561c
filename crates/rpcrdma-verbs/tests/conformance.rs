//! The provider and connection-manager conformance suites of
//! `rpcrdma-proto` against the verbs provider, on a real (or soft) RDMA
//! device. They need a device and an address on it:
//! `RPCRDMA_VERBS_ADDR=10.0.2.15` (the lab VM's siw0 is on eth0; rdma_cm
//! cannot use 127.0.0.1 there). Without them they print SKIPPED loudly.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rpcrdma_proto::provider::cm::{ConnectionManager, ListenEvent, Listener, PendingConnection};
use rpcrdma_proto::provider::{conformance, ConnectParams, ConnectionEvent, Provider};
use rpcrdma_verbs::{devices, VerbsCm, VerbsProvider};

const ENV: &str = "RPCRDMA_VERBS_ADDR";

fn addr() -> Option<IpAddr> {
    if let Err(e) = devices() {
        eprintln!("SKIPPED: verbs conformance not run: {e}");
        return None;
    }
    match std::env::var(ENV).ok().and_then(|a| a.parse().ok()) {
        Some(a) => Some(a),
        None => {
            eprintln!(
                "SKIPPED: verbs conformance not run: set {ENV} to an address of an RDMA device"
            );
            None
        }
    }
}

fn params() -> ConnectParams {
    ConnectParams {
        private_data: b"conformance".to_vec(),
        ird: 4,
        ord: 4,
    }
}

/// Two established ends, their `Established` events consumed.
fn pair(cm: &VerbsCm, ip: IpAddr) -> (VerbsProvider, VerbsProvider) {
    let mut l = cm.listen(SocketAddr::new(ip, 0)).expect("listen");
    let at = l.local_addr();
    std::thread::scope(|s| {
        let h = s.spawn(|| cm.connect(at, &params(), Duration::from_secs(10)));
        let mut events = Vec::new();
        let pending = loop {
            l.poll(Some(Duration::from_millis(100)), &mut events)
                .expect("listener poll");
            if let Some(ev) = events.pop() {
                match ev {
                    ListenEvent::Request(p) => break p,
                    other => panic!("listener: {other:?}"),
                }
            }
            assert!(!h.is_finished(), "connector returned without a request");
        };
        let mut b = pending.accept(&params()).expect("accept");
        let mut a = h.join().expect("connector").expect("connect");
        for p in [&mut a, &mut b] {
            match p.poll_event() {
                Some(ConnectionEvent::Established(_)) => {}
                other => panic!("first event {other:?}"),
            }
        }
        (a, b)
    })
}

#[test]
fn connection_manager_conformance() {
    let Some(ip) = addr() else { return };
    let cm = VerbsCm::default();
    let n = conformance::cm::run_all(&cm, SocketAddr::new(ip, 0), Duration::from_secs(10))
        .unwrap_or_else(|f| panic!("{f:?}"));
    assert_eq!(n, conformance::cm::CHECK_COUNT);
}

#[test]
fn provider_conformance() {
    let Some(ip) = addr() else { return };
    let cm = VerbsCm::default();
    let mut new_pair = || pair(&cm, ip);
    let n = conformance::run_all(&mut new_pair, 2_000_000).unwrap_or_else(|f| panic!("{f:?}"));
    assert_eq!(n, conformance::CHECK_COUNT);
}
