//! `rpcrdma decode --what header`: tree and JSON output. (being written)
use crate::decode::Failure;

/// Decodes a transport header; returns the text to print.
pub fn decode_header(_bytes: &[u8], _json: bool) -> Result<String, Failure> {
    Err(Failure {
        kind: "unimplemented".into(),
        offset: 0,
        detail: "not yet".into(),
    })
}
