//! Value parsers of the tool's size and number options (`rpcrdma::units`:
//! `4K`, `1MiB`, `0x20005244`), for clap's `value_parser`.

/// A size that fits in 32 bits (`--size`, `--inline-send`, `--max-message`...).
pub fn size_u32(s: &str) -> Result<u32, String> {
    rpcrdma::units::parse_size_u32(s)
}

/// A size (`--read-sink-budget`...).
pub fn size_u64(s: &str) -> Result<u64, String> {
    rpcrdma::units::parse_size(s)
}

/// A 32-bit number, decimal or hex (`--prog 0x20005244`, `--xid`, `--uid`).
pub fn num_u32(s: &str) -> Result<u32, String> {
    rpcrdma::units::parse_u32(s)
}

/// A 64-bit number, decimal or hex (`--count`).
pub fn num_u64(s: &str) -> Result<u64, String> {
    rpcrdma::units::parse_number(s)
}
