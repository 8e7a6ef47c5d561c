//! Entry point of the `pcap` fuzz target (`fuzz/fuzz_targets/pcap.rs`) and
//! of its corpus replay in the normal test suite (`tests/corpus_replay.rs`).
//!
//! [`fuzz_pcap`] runs the `rpcrdma decode --pcap` dissector (pcap / pcapng
//! reader, link / IP / TCP parser, TCP reassembly, MPA / DDP / RDMAP and
//! RPC-over-RDMA decoding) over arbitrary capture octets, in JSON and in
//! text mode. It asserts:
//!
//! * no panic (a malformed file is a [`crate::pcap::PcapError`]);
//! * bounded memory: after every record, the stream octets the dissector
//!   holds ([`Decoder::buffered`]: out-of-order TCP data, octets waiting for
//!   an MPA frame or the rest of an FPDU, partial Sends) never exceed the
//!   TCP payload octets read so far (nothing is held twice, nothing
//!   amplified; each direction is also capped by the named limits of
//!   [`crate::tcp_reassembly`] and [`crate::decode_pcap`]);
//! * under `--json`, every output line is one JSON object with a `frame`
//!   (or, for a malformed file, an `error`) member.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use crate::decode_pcap::Decoder;
use crate::pcap::{self, Packet, PcapReader};

/// A writer into a buffer the caller keeps a handle on.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Dissects `data` as a capture file; see the module docs for what is
/// asserted.
pub fn fuzz_pcap(data: &[u8]) {
    for json in [true, false] {
        let sink = Shared::default();
        let mut dec = Decoder::new(json, Box::new(sink.clone()));
        if let Ok(mut reader) = PcapReader::new(data) {
            let mut payload = 0usize;
            loop {
                match reader.next_record() {
                    Ok(Some(rec)) => {
                        if let Packet::Tcp(t) = pcap::parse_packet(rec.linktype, rec.data) {
                            payload += t.payload.len();
                        }
                        dec.packet(&rec);
                        let held = dec.buffered();
                        assert!(
                            held <= payload,
                            "dissector holds {held} octets after {payload} of TCP payload"
                        );
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = e.to_string();
                        break;
                    }
                }
            }
        }
        dec.finish();
        drop(dec);
        let out = sink.0.borrow();
        let text = std::str::from_utf8(&out).expect("the dissector prints UTF-8");
        if json {
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                assert!(
                    v.get("frame").is_some_and(|f| f.is_string()),
                    "JSON line without a frame: {line}"
                );
            }
        }
    }
}
