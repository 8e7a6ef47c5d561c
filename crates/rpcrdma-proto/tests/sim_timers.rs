//! A hostile requester against the responder's timers, in virtual time:
//! the Read deadline (`Config::read_timeout`: a call whose RDMA Reads are
//! never answered, or answered only in part, ends the connection and
//! releases its sinks) and the idle timeout (`Config::idle_timeout`: a
//! connection that never carries a valid call is closed).

mod util;

use std::time::{Duration, Instant};

use rpcrdma_proto::engine::{Config, ConnectionError, Event, PeerError, ReadSinkBudget};
use rpcrdma_proto::provider::fault::FaultConfig;
use rpcrdma_proto::provider::{ConnectionState, Provider};
use util::*;

/// A hand-written RPC call header (xid, CALL, rpcvers 2, prog, vers 3,
/// proc 0, AUTH_NONE cred and verf): 40 octets.
fn rpc_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0])
}

/// RDMA_MSG whose opaque argument (at position 44) travels in one Read
/// chunk of one segment per part of `parts`, exposed by the raw peer.
fn read_call(p: &mut RawPair, xid: u32, parts: &[Vec<u8>]) -> Vec<u8> {
    let total: usize = parts.iter().map(Vec::len).sum();
    let mut hdr = vec![xid, 1, 64, 0];
    for part in parts {
        let h = p.raw.expose(part);
        // Read list entry: present, position 44, segment.
        hdr.extend([1, 44, h, part.len() as u32, 0, 0]);
    }
    hdr.extend([0, 0, 0]);
    let mut m = words(&hdr);
    m.extend(rpc_call(xid));
    m.extend(words(&[total as u32, 0xfeed_f00d]));
    m
}

/// The last 64 KiB of a Read chunk are never answered.
const STALL: usize = 64 * 1024;

fn stalling_server(cfg: Config) -> RawPair {
    let f = FaultConfig {
        stall_read_len: Some(STALL as u32),
        ..FaultConfig::default()
    };
    RawPair::server_with_faults(cfg, f)
}

/// Moves virtual time to `at` and fires the engine's timers.
fn fire(p: &mut RawPair, at: Instant) {
    p.now = at;
    p.side.conn.handle_timeout(p.now, &mut p.side.prov);
    p.run();
}

fn server_with_read_timeout(t: Duration) -> Config {
    let mut c = Config::server();
    c.read_timeout = Some(t);
    c
}

#[test]
fn a_call_whose_reads_are_answered_in_part_ends_the_connection_at_the_read_deadline() {
    let mut cfg = server_with_read_timeout(Duration::from_secs(5));
    let budget = ReadSinkBudget::new(8 << 20);
    cfg.read_budget = Some(budget.clone());
    let mut p = stalling_server(cfg);
    let start = p.now;
    // Call 1: answered in full. Call 2: ~4 MiB answered but its last 64
    // KiB (the defect's hostile peer).
    let a = data(100_000, 1);
    let m = read_call(&mut p, 1, std::slice::from_ref(&a));
    p.raw.send(&m);
    let parts = vec![data((4 << 20) - STALL - 1024, 2), data(STALL, 3)];
    let m = read_call(&mut p, 2, &parts);
    p.raw.send(&m);
    p.run();
    // The complete call is delivered, with its data.
    let calls = take_calls(&mut p.side.events);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].xid, 1);
    assert_eq!(&calls[0].message.flatten()[44..44 + a.len()], &a[..]);
    assert_eq!(p.side.prov.stats().stalled_reads, 1);
    // Call 2 holds its sinks until its deadline, no longer.
    assert_eq!(budget.in_use(), (4 << 20) - 1024);
    assert_eq!(
        p.side.conn.poll_timeout(),
        Some(start + Duration::from_secs(5))
    );
    fire(&mut p, start + Duration::from_millis(4999));
    assert!(!p.side.conn.is_closed());
    fire(&mut p, start + Duration::from_secs(5));
    assert_eq!(
        p.side.conn.error(),
        Some(&ConnectionError::Peer(PeerError::ReadTimeout { xid: 2 }))
    );
    assert_eq!(p.side.conn.metrics().read_timeouts, 1);
    // Never delivered, never answered; every sink and buffer released,
    // and the shared budget given back.
    assert!(take_calls(&mut p.side.events).is_empty());
    assert!(p.raw.got.is_empty(), "{:02x?}", p.raw.got);
    assert!(p
        .side
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectionLost(_))));
    assert_eq!(registered(p.side.prov.inner()), 0);
    assert_eq!(p.side.conn.inflight_work_requests(), 0);
    assert_eq!(budget.in_use(), 0);
    // The peer sees the connection end.
    assert!(matches!(
        p.raw.prov.connection_state(),
        ConnectionState::Disconnected(_)
    ));
}

#[test]
fn a_call_whose_reads_never_complete_is_cut_while_reads_in_time_are_not() {
    let mut p = stalling_server(server_with_read_timeout(Duration::from_secs(2)));
    let start = p.now;
    // Calls 10 and 12 complete; call 11 has a single Read that is never
    // answered, admitted later than call 10.
    let m = read_call(&mut p, 10, &[data(30_000, 4)]);
    p.raw.send(&m);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
    // Call 10's deadline went with its Reads (and the peer is no longer
    // idle): no timer.
    assert_eq!(p.side.conn.poll_timeout(), None);
    p.now = start + Duration::from_secs(1);
    let m = read_call(&mut p, 11, &[data(STALL, 5)]);
    p.raw.send(&m);
    let m = read_call(&mut p, 12, &[data(1000, 6)]);
    p.raw.send(&m);
    p.run();
    let calls = take_calls(&mut p.side.events);
    assert_eq!(calls.iter().map(|c| c.xid).collect::<Vec<_>>(), vec![12]);
    assert_eq!(
        p.side.conn.poll_timeout(),
        Some(start + Duration::from_secs(3))
    );
    fire(&mut p, start + Duration::from_secs(3));
    assert_eq!(
        p.side.conn.error(),
        Some(&ConnectionError::Peer(PeerError::ReadTimeout { xid: 11 }))
    );
    assert_eq!(registered(p.side.prov.inner()), 0);
}

#[test]
fn the_read_deadline_defaults_to_30_s_and_can_be_turned_off() {
    assert_eq!(Config::server().read_timeout, Some(Duration::from_secs(30)));
    let mut cfg = Config::server();
    cfg.read_timeout = None;
    cfg.idle_timeout = None;
    let mut p = stalling_server(cfg);
    let m = read_call(&mut p, 3, &[data(STALL, 7)]);
    p.raw.send(&m);
    p.run();
    assert_eq!(p.side.conn.poll_timeout(), None);
    let later = p.now + Duration::from_secs(3600);
    fire(&mut p, later);
    assert!(!p.side.conn.is_closed());
}

#[test]
fn a_peer_that_never_sends_a_call_is_closed_at_the_idle_timeout() {
    assert_eq!(Config::server().idle_timeout, Some(Duration::from_secs(15)));
    assert_eq!(Config::client().idle_timeout, None);
    let mut p = RawPair::server(Config::server());
    let start = p.now;
    // Messages that are not valid calls do not count: RDMA_DONE, a header
    // answered with ERR_CHUNK, a message too short to parse.
    p.raw.post_recvs(4);
    p.raw.send(&words(&[1, 1, 8, 3, 0, 0, 0]));
    p.raw.send(&words(&[2, 1, 8, 9, 0, 0, 0]));
    p.raw.send(&[0; 12]);
    p.run();
    assert_eq!(p.raw.got.len(), 1, "ERR_CHUNK for the unknown procedure");
    assert_eq!(
        p.side.conn.poll_timeout(),
        Some(start + Duration::from_secs(15))
    );
    fire(&mut p, start + Duration::from_secs(14));
    assert!(!p.side.conn.is_closed());
    fire(&mut p, start + Duration::from_secs(15));
    assert_eq!(p.side.conn.error(), Some(&ConnectionError::IdleTimeout));
    assert_eq!(p.side.conn.metrics().idle_timeouts, 1);
    assert!(matches!(
        p.raw.prov.connection_state(),
        ConnectionState::Disconnected(_)
    ));
    assert_eq!(registered(p.side.prov.inner()), 0);
}

#[test]
fn one_valid_call_stops_the_idle_timer() {
    let mut cfg = Config::server();
    cfg.idle_timeout = Some(Duration::from_secs(1));
    let mut p = RawPair::server(cfg);
    assert!(p.side.conn.poll_timeout().is_some());
    let mut m = words(&[5, 1, 8, 0, 0, 0, 0]);
    m.extend(rpc_call(5));
    p.raw.send(&m);
    p.run();
    assert_eq!(take_calls(&mut p.side.events).len(), 1);
    assert_eq!(p.side.conn.poll_timeout(), None);
    let later = p.now + Duration::from_secs(3600);
    fire(&mut p, later);
    assert!(!p.side.conn.is_closed());
}

#[test]
fn a_call_still_reading_is_not_cut_by_the_idle_timer() {
    let mut cfg = server_with_read_timeout(Duration::from_secs(30));
    cfg.idle_timeout = Some(Duration::from_secs(1));
    let mut p = stalling_server(cfg);
    let start = p.now;
    let m = read_call(&mut p, 6, &[data(STALL, 8)]);
    p.raw.send(&m);
    p.run();
    // The call is valid (its Reads are under way): only the Read deadline
    // is left.
    assert_eq!(
        p.side.conn.poll_timeout(),
        Some(start + Duration::from_secs(30))
    );
    fire(&mut p, start + Duration::from_secs(2));
    assert!(!p.side.conn.is_closed());
}

#[test]
fn an_idle_client_has_no_timer() {
    let p = Pair::new(Config::client(), Config::server());
    assert_eq!(p.c.conn.poll_timeout(), None);
    // The server's idle timer runs: the client has not called yet.
    assert!(p.s.conn.poll_timeout().is_some());
}
