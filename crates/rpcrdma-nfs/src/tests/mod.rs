//! The crate's tests: round trips (proptest), hand-built byte vectors from
//! the RFC 1813 XDR, bounds, and the RFC 8267 binding.

mod binding;
mod bounds;
mod roundtrip;
mod vectors;

/// Hex (whitespace and `#` comments ignored) to octets.
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let digits: String = s
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| c.is_ascii_hexdigit()))
        .collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}
