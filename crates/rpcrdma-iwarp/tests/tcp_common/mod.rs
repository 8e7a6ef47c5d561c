//! Helpers shared by the TCP tests: a connected provider pair over
//! 127.0.0.1.
#![allow(dead_code)]

use std::time::Duration;

use rpcrdma_iwarp::cm::{IwarpConfig, Rtr};
use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
use rpcrdma_proto::provider::{ConnectionEvent, Provider};

/// `a` connects with `ini`, `b` accepts with `resp`; both established,
/// their `Established` events consumed.
pub fn connected_pair(ini: &IwarpConfig, resp: &IwarpConfig) -> (IwarpProvider, IwarpProvider) {
    let l = Listener::bind("127.0.0.1:0", resp.clone()).expect("bind");
    let mut a = IwarpProvider::connect(l.local_addr().unwrap(), ini.clone()).expect("connect");
    let pending = l.accept(Duration::from_secs(10)).expect("accept");
    let mut b = pending
        .accept(resp.clone(), Duration::from_secs(10))
        .expect("mpa accept");
    match b.poll_event() {
        Some(ConnectionEvent::Established(_)) => {}
        e => panic!("passive side: {e:?}"),
    }
    for _ in 0..10_000 {
        match a.poll_event() {
            Some(ConnectionEvent::Established(_)) => {
                take_write_rtr(&a, &mut b);
                return (a, b);
            }
            Some(e) => panic!("active side: {e:?}"),
            None => {
                a.wait(Some(Duration::from_millis(10))).unwrap();
            }
        }
    }
    panic!("active side never established");
}

/// The passive side reads the initiator's RFC 6581 Write RTR (a
/// zero-length RDMA Write), if it sent one, so that tests start with
/// nothing in flight.
pub fn take_write_rtr(a: &IwarpProvider, b: &mut IwarpProvider) {
    if a.established().map(|e| e.rtr) != Some(Rtr::Write) {
        return;
    }
    for _ in 0..1_000 {
        if b.stats().rx_fpdus[0] >= 1 {
            return;
        }
        b.wait(Some(Duration::from_millis(10))).unwrap();
        b.poll_event();
    }
    panic!("the Write RTR never arrived");
}
