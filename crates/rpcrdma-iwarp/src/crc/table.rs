//! CRC-32C by table, slice-by-8: no special instructions, safe code. The
//! portable baseline of [`super::Impl::Table`] (and what every other
//! implementation is measured against in `benches/crc.rs`).

/// The reflected CRC-32C polynomial (0x1EDC6F41 bit-reversed).
const POLY: u32 = 0x82f6_3b78;

/// `TABLES[k][b]`: the CRC register after octet `b` followed by `k` zero
/// octets (`TABLES[0]` is the classic byte-at-a-time table).
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut i = 0;
        while i < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            i += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// Extends the standard CRC-32C value `crc` (of the octets before) over
/// `data`.
pub(super) fn append(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let (words, tail) = data.split_at(data.len() & !7);
    for w in words.chunks_exact(8) {
        let lo = c ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        let t = &TABLES;
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][usize::from(w[4])]
            ^ t[2][usize::from(w[5])]
            ^ t[1][usize::from(w[6])]
            ^ t[0][usize::from(w[7])];
    }
    for &b in tail {
        c = (c >> 8) ^ TABLES[0][((c ^ u32::from(b)) & 0xff) as usize];
    }
    !c
}
