//! Replays every fuzz corpus file (`fuzz/corpus/<target>/*`) and every
//! hand-written sample (`test_samples/*.hex`, decoded from hex) through the
//! fuzz entry points, so the stable-toolchain test suite exercises what the
//! fuzzers found interesting. A file that makes an entry point panic fails
//! the test with its name.

use std::path::{Path, PathBuf};

use rpcrdma_proto::fuzzing::{replay_dir, TARGETS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hex_sample(text: &str) -> Vec<u8> {
    let mut digits = String::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        digits.extend(line.chars().filter(|c| c.is_ascii_hexdigit()));
    }
    hex::decode(digits).expect("sample is hex")
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
fn samples_through_every_target() {
    let dir = root().join("crates/rpcrdma-proto/test_samples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "hex") {
            continue;
        }
        let data = hex_sample(&std::fs::read_to_string(&path).unwrap());
        for (name, f) in TARGETS {
            let r = std::panic::catch_unwind(|| f(&data));
            assert!(r.is_ok(), "{name} panicked on sample {}", path.display());
            // Every truncation too.
            for cut in 0..data.len() {
                let r = std::panic::catch_unwind(|| f(&data[..cut]));
                assert!(
                    r.is_ok(),
                    "{name} panicked on {} cut at {cut}",
                    path.display()
                );
            }
        }
        n += 1;
    }
    assert!(n >= 30, "expected the sample set, found {n} files");
}
