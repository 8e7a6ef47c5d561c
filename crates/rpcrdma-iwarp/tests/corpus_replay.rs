//! Replays every iWARP fuzz corpus (`fuzz/corpus/<target>/*`) through the
//! fuzz entry points (`rpcrdma_iwarp::fuzzing::TARGETS`), so the
//! stable-toolchain test suite exercises what the fuzzers found
//! interesting. A file that makes an entry point panic fails the test with
//! its name.

use std::path::{Path, PathBuf};

use rpcrdma_iwarp::fuzzing::TARGETS;
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
