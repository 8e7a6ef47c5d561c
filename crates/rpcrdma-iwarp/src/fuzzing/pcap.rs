//! `pcap`: the capture dissector of `rpcrdma decode --pcap`
//! ([`crate::capture`]: pcap / pcapng reader, link / IP / TCP parser, TCP
//! reassembly, MPA / DDP / RDMAP dissection) on arbitrary file octets. It
//! asserts:
//!
//! * no panic (a malformed file is a [`PcapError`]);
//! * bounded memory: after every record, the stream octets the
//!   connections hold ([`Connections::buffered`]: out-of-order TCP data,
//!   octets waiting for an MPA frame or the rest of an FPDU, partial
//!   Sends) never exceed the TCP payload octets read so far (nothing is
//!   held twice, nothing amplified; each direction is also capped by the
//!   named limits of [`crate::capture::tcp_reassembly`] and
//!   [`crate::dissect`]);
//! * every event names a connection, in capture order (the numbers of
//!   the completing packets never go back), and no Send is longer than
//!   [`MAX_SEND_LEN`].
//!
//! The presentation of these events by `rpcrdma decode --pcap` (one JSON
//! object per line) is checked on this corpus by the CLI's
//! `tests/corpus_replay.rs`.

use std::path::Path;

use super::FuzzFn;
use crate::capture::pcap::{parse_packet, Packet, PcapError, PcapReader};
use crate::capture::{Connections, Event};
use crate::dissect::{Item, MAX_SEND_LEN};

/// The fuzz target; see the module docs.
pub fn fuzz_pcap(data: &[u8]) {
    let mut conns = Connections::new();
    let mut events = Vec::new();
    if let Ok(mut reader) = PcapReader::new(data) {
        let mut payload = 0usize;
        loop {
            match reader.next_record() {
                Ok(Some(rec)) => {
                    if let Packet::Tcp(t) = parse_packet(rec.linktype, rec.data) {
                        payload += t.payload.len();
                    }
                    conns.record(&rec, &mut events);
                    let held = conns.buffered();
                    assert!(
                        held <= payload,
                        "dissector holds {held} octets after {payload} of TCP payload"
                    );
                }
                Ok(None) => break,
                Err(e) => {
                    let _: PcapError = e;
                    break;
                }
            }
        }
    }
    conns.finish(&mut events);
    check_events(&conns, &events);
}

fn check_events(conns: &Connections, events: &[Event]) {
    let mut last = 0u64;
    for e in events {
        assert!(conns.get(e.conn).is_some(), "event of no connection: {e:?}");
        if let Some(p) = e.packet {
            assert!(p.number >= last, "packet {} after {last}", p.number);
            last = p.number;
        }
        if let Item::Send(s) = &e.item {
            assert!(
                s.payload.len() <= MAX_SEND_LEN,
                "Send of {} octets",
                s.payload.len()
            );
        }
    }
}

/// Runs `f` on every capture file (`*.pcap`, `*.pcapng`) of `dir`, whole
/// and cut every 97 octets (inside headers and records); panics naming
/// the file and cut on which `f` panics; returns the number of files.
pub fn replay_captures(dir: &Path, f: FuzzFn) -> usize {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("directory {} missing: {e}", dir.display()));
    let mut n = 0;
    for e in entries {
        let path = e.map(|e| e.path()).unwrap_or_default();
        let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
        if ext != "pcap" && ext != "pcapng" {
            continue;
        }
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for cut in (0..=data.len()).step_by(97).chain([data.len()]) {
            let r = std::panic::catch_unwind(|| f(&data[..cut]));
            assert!(r.is_ok(), "panicked on {} cut at {cut}", path.display());
        }
        n += 1;
    }
    n
}
