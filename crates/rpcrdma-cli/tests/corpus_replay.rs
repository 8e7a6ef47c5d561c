//! Replays the `pcap` fuzz corpus (`fuzz/corpus/pcap/*`) and the test
//! captures (`crates/rpcrdma-iwarp/tests/data/oracle/`, whole and cut) through
//! the presenter of `rpcrdma decode --pcap` (`rpcrdma_cli::decode_pcap`),
//! in JSON and in text mode: no panic, UTF-8 out, and under `--json`
//! every line one JSON object with a `frame` member. (The dissector under
//! it is replayed on the same corpus by `rpcrdma_iwarp`'s
//! `tests/corpus_replay.rs`, through the `pcap` fuzz entry point.) A file
//! that makes it panic fails the test with its name.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rpcrdma_cli::decode_pcap::Decoder;
use rpcrdma_iwarp::capture::pcap::PcapReader;
use rpcrdma_iwarp::fuzzing::replay_captures;
use rpcrdma_proto::fuzzing::replay_dir;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

/// Presents `data` as a capture file, as `rpcrdma decode --pcap` does.
fn present(data: &[u8]) {
    for json in [true, false] {
        let sink = Shared::default();
        let mut dec = Decoder::new(json, Box::new(sink.clone()));
        if let Ok(mut reader) = PcapReader::new(data) {
            while let Ok(Some(rec)) = reader.next_record() {
                dec.packet(&rec);
            }
        }
        dec.finish();
        drop(dec);
        let out = sink.0.borrow();
        let text = std::str::from_utf8(&out).expect("the presenter prints UTF-8");
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

#[test]
fn pcap_corpus_replays_without_panics() {
    let n = replay_dir(&root().join("fuzz/corpus/pcap"), "pcap", present);
    assert!(n > 0, "corpus for pcap is empty");
    eprintln!("replayed {n} corpus files");
}

#[test]
fn test_captures_and_their_truncations() {
    let dir = root().join("crates/rpcrdma-iwarp/tests/data/oracle");
    let n = replay_captures(&dir, present);
    assert!(n >= 10, "expected the test captures, found {n}");
}
