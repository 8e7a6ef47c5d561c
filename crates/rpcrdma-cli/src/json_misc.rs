//! `rpcrdma decode --what private-data|rpc`: tree and JSON output. (being written)
use crate::decode::Failure;

/// Decodes RFC 8797 private data; returns the text to print.
pub fn decode_private_data(_bytes: &[u8], _json: bool) -> Result<String, Failure> {
    Err(Failure {
        kind: "unimplemented".into(),
        offset: 0,
        detail: "not yet".into(),
    })
}

/// Decodes an ONC RPC message header; returns the text to print.
pub fn decode_rpc(_bytes: &[u8], _json: bool) -> Result<String, Failure> {
    Err(Failure {
        kind: "unimplemented".into(),
        offset: 0,
        detail: "not yet".into(),
    })
}
