//! The tool's one failure shape and its exit codes (README, "Scripting:
//! JSON output and exit codes"): 0 success, 1 the operation failed, 2 bad
//! usage or input; under `--json` every failure prints
//! `{"ok": false, "error": {"kind", "op", "message", ...}}`.

use std::process::ExitCode;

use serde_json::{json, Map, Value};

/// Exit status of an operation that failed (transport, RPC, data check).
pub const EXIT_FAILED: u8 = 1;
/// Exit status of bad usage or bad input.
pub const EXIT_USAGE: u8 = 2;

/// A failure of a command, as it is reported.
#[derive(Debug, Clone, PartialEq)]
pub struct CliError {
    /// Stable kebab-case name (`connect`, `usage`, `truncated`...).
    pub kind: String,
    /// The operation that failed (`connect`, `call`, `read-file`...).
    pub op: String,
    /// Human readable text (what standard error shows).
    pub message: String,
    /// Fields of the kind (`offset`, `rpc_status`, `option`...).
    pub extra: Map<String, Value>,
    /// The exit status: [`EXIT_FAILED`] or [`EXIT_USAGE`].
    pub exit: u8,
}

impl CliError {
    /// The operation `op` failed (exit status 1).
    pub fn failed(kind: &str, op: &str, message: impl Into<String>) -> Self {
        CliError {
            kind: kind.into(),
            op: op.into(),
            message: message.into(),
            extra: Map::new(),
            exit: EXIT_FAILED,
        }
    }

    /// Bad input or usage found by `op` (exit status 2).
    pub fn bad_input(kind: &str, op: &str, message: impl Into<String>) -> Self {
        CliError {
            exit: EXIT_USAGE,
            ..CliError::failed(kind, op, message)
        }
    }

    /// Bad usage: an option's value that cannot work; names the option.
    pub fn usage(option: &str, message: impl Into<String>) -> Self {
        CliError::bad_input("usage", "parse-arguments", message).with("option", option)
    }

    /// Adds a field of the kind.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// The `error` object: `{"kind", "op", "message", ...}`.
    pub fn error_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("kind".into(), self.kind.clone().into());
        o.insert("op".into(), self.op.clone().into());
        o.insert("message".into(), self.message.clone().into());
        for (k, v) in &self.extra {
            o.insert(k.clone(), v.clone());
        }
        Value::Object(o)
    }

    /// The failure object of a command: `{"ok": false, "error": {...}}`.
    pub fn to_json(&self) -> Value {
        json!({"ok": false, "error": self.error_json()})
    }

    /// The exit status.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit)
    }

    /// Prints the failure (the JSON object on standard output under
    /// `--json`, else `rpcrdma COMMAND: message` on standard error) and
    /// returns the exit status.
    pub fn report(&self, command: &str, json: bool) -> ExitCode {
        if json {
            println!("{}", self.to_json());
        } else {
            eprintln!("rpcrdma {command}: {}", self.message);
        }
        self.exit_code()
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shape() {
        let e = CliError::failed("connect", "connect", "refused").with("addr", "1.2.3.4:5");
        assert_eq!(
            e.to_json(),
            json!({"ok": false, "error": {"kind": "connect", "op": "connect",
                    "message": "refused", "addr": "1.2.3.4:5"}})
        );
        assert_eq!(e.exit, EXIT_FAILED);
        let u = CliError::usage("--size", "too big");
        assert_eq!(u.exit, EXIT_USAGE);
        assert_eq!(u.error_json()["option"], "--size");
        assert_eq!(u.error_json()["kind"], "usage");
    }
}
