//! Replays the `nfs_args` fuzz corpus (`fuzz/corpus/nfs_args/*`) through
//! the fuzz entry point, so the stable-toolchain test suite exercises what
//! the fuzzer found interesting (and the seed arguments of every
//! procedure). A file that makes the entry point panic fails the test.

use std::path::Path;

use rpcrdma_nfs::fuzzing::fuzz_nfs_args;
use rpcrdma_proto::fuzzing::replay_dir;

#[test]
fn nfs_args_corpus_replays_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nfs_args");
    let n = replay_dir(&dir, "nfs_args", fuzz_nfs_args);
    assert!(n >= 20, "expected the seed corpus, found {n} files");
}
