//! A table that hands out its own keys: each value is stored once, in a
//! slot, and found by indexing (no hashing, no probing, no move on
//! insertion or removal beyond the value itself). A key is the slot's
//! index and the sequence number of the insertion that filled it, so a
//! key whose value was removed never finds the slot's next value (until
//! 2^32 insertions later). Freed slots are reused, the most recently freed
//! first: the table holds at most as many slots as it ever held values at
//! once.

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Indices of empty slots.
    free: Vec<u32>,
    len: usize,
    /// The sequence number of the next insertion.
    seq: u32,
}

#[derive(Debug)]
struct Slot<T> {
    seq: u32,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::starting_at(1)
    }
}

impl<T> Slab<T> {
    /// An empty table whose first key has sequence number `seq` (a table
    /// that replaces another starts where it stopped: see [`Slab::seq`]).
    pub(super) fn starting_at(seq: u32) -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            seq,
        }
    }

    /// The sequence number of the next insertion.
    pub(super) fn seq(&self) -> u32 {
        self.seq
    }

    /// The key the next [`Slab::insert`] returns.
    #[inline]
    pub(super) fn next_key(&self) -> u64 {
        let idx = match self.free.last() {
            Some(&i) => i,
            None => self.slots.len() as u32,
        };
        key(self.seq, idx)
    }

    /// Stores `value`; returns its key.
    #[inline]
    pub(super) fn insert(&mut self, value: T) -> u64 {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        self.len += 1;
        let slot = Slot {
            seq,
            value: Some(value),
        };
        match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    *s = slot;
                }
                key(seq, i)
            }
            None => {
                let i = self.slots.len() as u32;
                self.slots.push(slot);
                key(seq, i)
            }
        }
    }

    #[inline]
    fn slot(&self, k: u64) -> Option<&Slot<T>> {
        self.slots
            .get((k & 0xffff_ffff) as usize)
            .filter(|s| u64::from(s.seq) == k >> 32)
    }

    /// The value under `k`.
    #[inline]
    pub(super) fn get(&self, k: u64) -> Option<&T> {
        self.slot(k)?.value.as_ref()
    }

    /// The value under `k`, mutable.
    #[inline]
    pub(super) fn get_mut(&mut self, k: u64) -> Option<&mut T> {
        self.slots
            .get_mut((k & 0xffff_ffff) as usize)
            .filter(|s| u64::from(s.seq) == k >> 32)?
            .value
            .as_mut()
    }

    /// Takes the value under `k` out; its slot is free again.
    #[inline]
    pub(super) fn remove(&mut self, k: u64) -> Option<T> {
        let i = (k & 0xffff_ffff) as u32;
        let v = self
            .slots
            .get_mut(i as usize)
            .filter(|s| u64::from(s.seq) == k >> 32)?
            .value
            .take()?;
        self.len -= 1;
        self.free.push(i);
        Some(v)
    }

    /// Values stored.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every value with its key, taken out (in slot order); the table is
    /// left empty, its sequence numbers going on.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (u64, T)> {
        self.free.clear();
        self.len = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .enumerate()
            .filter_map(|(i, s)| Some((key(s.seq, i as u32), s.value?)))
    }
}

#[inline]
fn key(seq: u32, idx: u32) -> u64 {
    (u64::from(seq) << 32) | u64::from(idx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        /// Remove the n-th key ever handed out (live or not).
        Remove(usize),
        Get(usize),
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u16>().prop_map(Op::Insert),
            3 => any::<usize>().prop_map(Op::Remove),
            2 => any::<usize>().prop_map(Op::Get),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        /// The slab against a map from never-reused keys: the same values
        /// under the same keys, stale keys finding nothing, distinct keys,
        /// and no more slots than values ever held at once.
        #[test]
        fn a_slab_is_a_map_with_fresh_keys(ops in proptest::collection::vec(op(), 0..200)) {
            let mut slab = Slab::default();
            let mut model: HashMap<u64, u16> = HashMap::new();
            let mut keys: Vec<u64> = Vec::new();
            let mut most = 0usize;
            for o in ops {
                match o {
                    Op::Insert(v) => {
                        let next = slab.next_key();
                        let k = slab.insert(v);
                        prop_assert_eq!(k, next);
                        prop_assert!(!keys.contains(&k), "key {k:#x} handed out twice");
                        keys.push(k);
                        model.insert(k, v);
                    }
                    Op::Remove(n) if !keys.is_empty() => {
                        let k = keys[n % keys.len()];
                        prop_assert_eq!(slab.remove(k), model.remove(&k));
                    }
                    Op::Get(n) if !keys.is_empty() => {
                        let k = keys[n % keys.len()];
                        prop_assert_eq!(slab.get(k), model.get(&k));
                        prop_assert_eq!(slab.get_mut(k).copied(), model.get(&k).copied());
                    }
                    Op::Drain => {
                        let mut got: Vec<(u64, u16)> = slab.drain().collect();
                        let mut want: Vec<(u64, u16)> = model.drain().collect();
                        got.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(got, want);
                    }
                    _ => {}
                }
                most = most.max(model.len());
                prop_assert_eq!(slab.len(), model.len());
                prop_assert_eq!(slab.is_empty(), model.is_empty());
                prop_assert!(slab.slots.len() <= most);
            }
        }
    }

    #[test]
    fn a_table_that_starts_where_another_stopped_hands_out_new_keys() {
        let mut a = Slab::default();
        let old = a.insert(1u8);
        let mut b = Slab::starting_at(a.seq());
        let new = b.insert(2u8);
        assert_ne!(old, new);
        assert_eq!(b.get(old), None, "a key of the old table finds nothing");
        assert_eq!(b.get(new), Some(&2));
    }
}
