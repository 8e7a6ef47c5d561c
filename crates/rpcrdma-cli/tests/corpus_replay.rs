//! Replays the `pcap` fuzz corpus (`fuzz/corpus/pcap/*`) and the captures
//! of `tests/data/` through the fuzz entry point
//! (`rpcrdma_cli::fuzzing::fuzz_pcap`), so the stable-toolchain test suite
//! exercises what the fuzzer found interesting. A file that makes the entry
//! point panic fails the test with its name.

use std::path::{Path, PathBuf};

use rpcrdma_cli::fuzzing::fuzz_pcap;
use rpcrdma_proto::fuzzing::replay_dir;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn pcap_corpus_replays_without_panics() {
    let n = replay_dir(&root().join("fuzz/corpus/pcap"), "pcap", fuzz_pcap);
    assert!(n > 0, "corpus for pcap is empty");
    eprintln!("replayed {n} corpus files");
}

#[test]
fn test_captures_and_their_truncations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
        if ext != "pcap" && ext != "pcapng" {
            continue;
        }
        let data = std::fs::read(&path).unwrap();
        // The whole file, and cuts inside headers and records.
        for cut in (0..=data.len()).step_by(97).chain([data.len()]) {
            let r = std::panic::catch_unwind(|| fuzz_pcap(&data[..cut]));
            assert!(
                r.is_ok(),
                "pcap panicked on {} cut at {cut}",
                path.display()
            );
        }
        n += 1;
    }
    assert!(n >= 10, "expected the test captures, found {n}");
}
