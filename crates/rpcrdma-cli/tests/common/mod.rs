//! What several CLI test files share: running the tool with a time bound.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rpcrdma");

/// Runs the tool; panics (after killing it) when it runs longer than `limit`.
pub fn run_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rpcrdma {args:?} did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
