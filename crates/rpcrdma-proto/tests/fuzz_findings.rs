//! Defects the `engine_ops` fuzz target found in the engine, as the
//! fuzzer's inputs (`fuzz/regressions/engine_ops/`, replayed through the
//! entry point with every check on). A defect found and not yet fixed is
//! listed in `rpcrdma_proto::fuzzing::KNOWN_DEFECTS` and its test ignored
//! until the fix.
//!
//! `credit-backlog` (fixed): a call admitted under a grant of N credits
//! whose Send the provider refused with QueueFull waited in the engine's
//! backlog; a reply then lowered the grant; when a completion freed the
//! send queue the backlogged call went out although the calls outstanding
//! then exceeded the grant. A refused call now goes back to the call queue
//! and is checked against the credits again (`tests/sim_credits_sendq.rs`
//! for the focused tests).

use std::path::Path;

//= rfc8166#section-3.3.1
//# A Requester MUST NOT send unacknowledged requests in excess of the
//# Responder's granted credit limit.
#[test]
fn fuzzer_inputs_pass_every_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/engine_ops");
    let n = rpcrdma_proto::fuzzing::replay_dir(
        &dir,
        "engine_ops",
        rpcrdma_proto::fuzzing::fuzz_engine_ops,
    );
    assert!(n > 0);
}

/// The `engine_v2` target's findings (`fuzz/regressions/engine_v2/`).
#[test]
fn engine_v2_fuzzer_inputs_pass_every_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/engine_v2");
    let n = rpcrdma_proto::fuzzing::replay_dir(
        &dir,
        "engine_v2",
        rpcrdma_proto::fuzzing::fuzz_engine_v2,
    );
    assert!(n > 0);
}
