//! Reading the bytes to decode: hex text (whitespace, newlines, `0x`
//! prefixes, `:` and `,` separators and `#` comments tolerated) or raw
//! octets, from a file or standard input.

use std::io::Read;

/// Why the input could not be read.
#[derive(Debug)]
pub enum InputError {
    /// The file or stdin could not be read.
    Io(std::io::Error),
    /// The text is not hex.
    BadHex { offset: usize, detail: String },
}

/// Reads `path` (`-` = stdin) as raw bytes or as hex text.
pub fn read_input(path: &str, raw: bool) -> Result<Vec<u8>, InputError> {
    let mut data = Vec::new();
    if path == "-" {
        std::io::stdin()
            .read_to_end(&mut data)
            .map_err(InputError::Io)?;
    } else {
        data = std::fs::read(path).map_err(InputError::Io)?;
    }
    if raw {
        Ok(data)
    } else {
        parse_hex(&data)
    }
}

/// Parses hex text. Accepts any mix of whitespace, `0x`/`0X` prefixes,
/// `:`/`,`/`-` separators and `#` comments to end of line. An odd number of
/// digits is an error.
pub fn parse_hex(text: &[u8]) -> Result<Vec<u8>, InputError> {
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut hi: Option<u8> = None;
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        match c {
            b'#' => {
                while i < text.len() && text[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'0' if hi.is_none() && matches!(text.get(i + 1), Some(b'x' | b'X')) => {
                i += 2;
                continue;
            }
            c if c.is_ascii_whitespace() || matches!(c, b':' | b',' | b'-') => {}
            c => {
                let v = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => {
                        return Err(InputError::BadHex {
                            offset: i,
                            detail: format!("unexpected character {:?}", c as char),
                        })
                    }
                };
                match hi.take() {
                    None => hi = Some(v),
                    Some(h) => out.push((h << 4) | v),
                }
            }
        }
        i += 1;
    }
    if hi.is_some() {
        return Err(InputError::BadHex {
            offset: text.len(),
            detail: "odd number of hex digits".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerant_hex() {
        let v = parse_hex(b"0x00800000 f6ab0e18\n01:01,03 03 # comment\n0XfF").unwrap();
        assert_eq!(v, [0, 0x80, 0, 0, 0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3, 0xff]);
    }

    #[test]
    fn rejects_odd_and_garbage() {
        assert!(parse_hex(b"abc").is_err());
        assert!(parse_hex(b"zz").is_err());
    }
}
