//! Sizes and numbers as people type them in configuration and on command
//! lines: `4096`, `4K`, `1MiB`, `0x20005244`.
//!
//! Sizes are binary (`1K` = 1024): `K`/`M`/`G` and `KiB`/`MiB`/`GiB`, any
//! case, the number before the suffix in decimal or `0x` hex. Numbers are
//! decimal or `0x` hex (programs are written in hex in RFCs and by
//! `rpcinfo`).

/// Parses a size: `512`, `4K`, `4k`, `4KiB`, `1M`, `2MiB`, `1G`, `0x1000`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = [("kib", 1u64 << 10), ("mib", 1 << 20), ("gib", 1 << 30)]
        .into_iter()
        .chain([("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30)])
        .find_map(|(suf, m)| lower.strip_suffix(suf).map(|n| (n, m)))
        .unwrap_or((lower.as_str(), 1));
    let n = parse_number(num.trim())
        .map_err(|_| format!("bad size {s:?} (expected e.g. 512, 4K, 64KiB, 1M, 1G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses a size that must fit in 32 bits (a message or buffer size).
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    let n = parse_size(s)?;
    u32::try_from(n).map_err(|_| format!("size {s:?} ({n} octets) exceeds 4 GiB - 1"))
}

/// Parses a comma-separated list of sizes (`1K,4K,1M`; empty items
/// ignored, at least one required).
pub fn parse_size_list(s: &str) -> Result<Vec<u64>, String> {
    let v: Vec<u64> = s
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(parse_size)
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("empty size list".into());
    }
    Ok(v)
}

/// Parses an unsigned number, decimal or `0x` hex (`_` separators
/// allowed: `0x2000_5244`).
pub fn parse_number(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    r.map_err(|_| format!("bad number {s:?} (decimal, or hex with 0x)"))
}

/// Parses a 32-bit number (a program, version, procedure, XID, uid...).
pub fn parse_u32(s: &str) -> Result<u32, String> {
    let n = parse_number(s)?;
    u32::try_from(n).map_err(|_| format!("number {s:?} does not fit in 32 bits"))
}

/// `4096` → "4K", `1048576` → "1M", `1000` → "1000".
pub fn fmt_size(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{}G", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("2mib"), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert_eq!(parse_size("0x1K"), Ok(1024));
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1T").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert!(parse_size("17179869184G").is_err());
        assert_eq!(parse_size_u32("16M"), Ok(16 << 20));
        assert!(parse_size_u32("4G").is_err());
        assert_eq!(parse_size_list("1K,4K,,1M"), Ok(vec![1024, 4096, 1 << 20]));
        assert!(parse_size_list(",").is_err());
        assert_eq!(fmt_size(1024), "1K");
        assert_eq!(fmt_size(1 << 20), "1M");
        assert_eq!(fmt_size(1000), "1000");
        assert_eq!(fmt_size(0), "0");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u32("100003"), Ok(100003));
        assert_eq!(parse_u32("0x20005244"), Ok(0x2000_5244));
        assert_eq!(parse_u32("0X2000_5244"), Ok(0x2000_5244));
        assert!(parse_u32("0x1_0000_0000").is_err());
        assert!(parse_u32("ten").is_err());
        assert!(parse_u32("").is_err());
    }
}
