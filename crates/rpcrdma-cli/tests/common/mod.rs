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

/// A server child (`rpcrdma serve ...`), killed on drop.
#[allow(dead_code)]
pub struct Child {
    /// The process.
    pub child: std::process::Child,
    /// The address it printed (`listening on ADDR`).
    pub addr: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `rpcrdma serve --listen 127.0.0.1:0 --duration 60 EXTRA...` and
/// waits for its `listening on ADDR` line (stderr inherited).
#[allow(dead_code)]
pub fn serve(extra: &[&str]) -> Child {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--duration", "60"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn serve");
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).expect("read");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Child { child, addr }
}

/// Each line of standard output as JSON.
#[allow(dead_code)]
pub fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}
