//! Replays every iWARP fuzz corpus (`fuzz/corpus/<target>/*`) through the
//! fuzz entry points (`rpcrdma_iwarp::fuzzing::TARGETS`), so the
//! stable-toolchain test suite exercises what the fuzzers found
//! interesting. A file that makes an entry point panic fails the test with
//! its name.

use std::path::{Path, PathBuf};

use rpcrdma_iwarp::fuzzing::TARGETS;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn corpora_replay_without_panics() {
    let mut total = 0;
    for (name, f) in TARGETS {
        let dir = root().join("fuzz/corpus").join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus directory {} missing: {e}", dir.display()));
        let mut n = 0;
        for e in entries {
            let path = e.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let r = std::panic::catch_unwind(|| f(&data));
            assert!(
                r.is_ok(),
                "fuzz target {name} panicked on {}",
                path.display()
            );
            n += 1;
        }
        assert!(n > 0, "corpus for {name} is empty");
        total += n;
    }
    eprintln!("replayed {total} corpus files");
}
