//! What `rpcrdma decode` reports about input that does not decode.

use rpcrdma_proto::DecodeError;
use serde_json::Value;

use crate::cli_error::CliError;

/// A decode that went wrong.
pub struct Failure {
    /// Stable machine name of the error (the `kind` of the error object).
    pub kind: String,
    /// Octet offset of the fault.
    pub offset: usize,
    /// Human readable explanation.
    pub detail: String,
}

impl Failure {
    /// As the tool's failure (bad input: exit status 2), with its offset.
    pub fn to_cli_error(&self) -> CliError {
        CliError::bad_input(&self.kind, "decode", self.detail.clone()).with("offset", self.offset)
    }

    /// The `error` object `{"kind", "op", "message", "offset"}` (embedded
    /// where a decode inside a larger item failed).
    pub fn error_json(&self) -> Value {
        self.to_cli_error().error_json()
    }

    /// The failure object printed under `--json`:
    /// `{"ok": false, "error": {"kind", "op", "message", "offset"}}`.
    pub fn to_json(&self) -> Value {
        self.to_cli_error().to_json()
    }
}

impl From<DecodeError> for Failure {
    fn from(e: DecodeError) -> Self {
        Failure {
            kind: e.kind.name().to_string(),
            offset: e.offset,
            detail: e.to_string(),
        }
    }
}
