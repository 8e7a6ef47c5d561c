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

/// The `nfs_args` corpus as the arguments of every procedure, through the
/// server's dispatch on a scratch export (`fuzz_nfs_dispatch`), handles
/// of one octet standing for the export's objects.
#[test]
fn nfs_args_corpus_through_the_server_dispatch() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nfs_args");
    let n = replay_dir(&dir, "nfs_args", |data| {
        for sel in 0..20u8 {
            for room in [0u8, 40, 100, 255] {
                let mut input = vec![sel, room];
                input.extend_from_slice(data);
                rpcrdma_nfs::fuzzing::fuzz_nfs_dispatch(&input);
                // The same with a one-octet handle in front (the fixture).
                let mut with_handle = vec![sel, room, 0, 0, 0, 1, sel % 5, 0, 0, 0];
                with_handle.extend_from_slice(data);
                rpcrdma_nfs::fuzzing::fuzz_nfs_dispatch(&with_handle);
            }
        }
    });
    assert!(n >= 20, "expected the seed corpus, found {n} files");
}

/// The `nfs_dispatch` corpus through its entry point.
#[test]
fn nfs_dispatch_corpus_replays_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nfs_dispatch");
    let n = replay_dir(
        &dir,
        "nfs_dispatch",
        rpcrdma_nfs::fuzzing::fuzz_nfs_dispatch,
    );
    assert!(n >= 19, "expected the seed corpus, found {n} files");
}
