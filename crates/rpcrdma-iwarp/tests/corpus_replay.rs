//! Replays every iWARP fuzz corpus (`fuzz/corpus/<target>/*`) through the
//! fuzz entry points (`rpcrdma_iwarp::fuzzing::TARGETS`), so the
//! stable-toolchain test suite exercises what the fuzzers found
//! interesting, and the test captures (`tests/data/oracle/`, whole and
//! cut) through the `pcap` entry point. A file that makes an entry point
//! panic fails the test with its name.

use std::path::{Path, PathBuf};

use rpcrdma_iwarp::fuzzing::{fuzz_pcap, replay_captures, TARGETS};
use rpcrdma_proto::fuzzing::replay_dir;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn corpora_replay_without_panics() {
    let mut total = 0;
    for (name, f) in TARGETS {
        let n = replay_dir(&root().join("fuzz/corpus").join(name), name, *f);
        assert!(n > 0, "corpus for {name} is empty");
        total += n;
    }
    eprintln!("replayed {total} corpus files");
}

#[test]
fn test_captures_and_their_truncations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oracle");
    let n = replay_captures(&dir, fuzz_pcap);
    assert!(n >= 10, "expected the test captures, found {n}");
}
