//! What `rpcrdma decode` reports about input that does not decode.

use rpcrdma_proto::DecodeError;
use serde_json::{json, Value};

/// A decode that went wrong, with the `"error"` kind printed under `--json`.
pub struct Failure {
    /// Stable machine name of the error.
    pub kind: String,
    /// Octet offset of the fault.
    pub offset: usize,
    /// Human readable explanation.
    pub detail: String,
}

impl Failure {
    /// The `{"error", "offset", "detail"}` object printed under `--json`.
    pub fn to_json(&self) -> Value {
        json!({"error": self.kind, "offset": self.offset, "detail": self.detail})
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
