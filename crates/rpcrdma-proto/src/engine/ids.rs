//! A fast hash for maps keyed by identifiers this end assigns (work
//! request ids, call ids, handles, our own XIDs): SipHash's resistance to
//! chosen keys buys nothing there and cost several percent of a small
//! call's CPU time. Never use it for keys a peer chooses.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hash of integer keys (FxHash style).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(K);
    }
}

/// A map keyed by locally assigned ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_spread_over_buckets() {
        let b = BuildHasherDefault::<IdHasher>::default();
        // The low 7 bits (a 128-bucket table) of 1024 sequential ids hit
        // every bucket, and the top 7 bits (hashbrown's control byte) vary.
        let mut low = [false; 128];
        let mut top = std::collections::HashSet::new();
        for id in 0u64..1024 {
            let h = b.hash_one(id);
            low[(h & 127) as usize] = true;
            top.insert(h >> 57);
        }
        assert!(low.iter().all(|&x| x));
        assert!(top.len() > 64, "{}", top.len());
        let mut m: IdMap<u64, u64> = IdMap::default();
        for id in 0u64..1000 {
            m.insert(id, id * 2);
        }
        assert_eq!(m.get(&999), Some(&1998));
        assert_eq!(m.len(), 1000);
    }
}
