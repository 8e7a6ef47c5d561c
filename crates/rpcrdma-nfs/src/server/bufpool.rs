//! READ buffers reused across calls. A fresh 1 MiB `Vec` per READ costs
//! the server 256 page faults and a 1 MiB memset (glibc returns such a
//! buffer to the kernel when the reply's RDMA Write is done, and maps it
//! anew next time): a third of the server's CPU for 1 MiB READs (perf,
//! 256 MiB `nfs get`). The data of a READ reply is a [`Bytes`] whose owner
//! puts the buffer back when the transport drops it.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Free buffers, each `size` octets (initialised once).
#[derive(Debug)]
pub(crate) struct BufPool {
    free: Mutex<Vec<Vec<u8>>>,
    size: usize,
    keep: usize,
}

impl BufPool {
    /// A pool of buffers of `size` octets keeping at most `keep` idle ones.
    pub(crate) fn new(size: usize, keep: usize) -> Arc<Self> {
        Arc::new(BufPool {
            free: Mutex::new(Vec::new()),
            size,
            keep,
        })
    }

    /// A buffer of at least `len` octets: a pooled one when `len` is more
    /// than a quarter of the pool's size and fits it (large READs, whose
    /// fresh allocations come from new pages), else a fresh one of `len`
    /// (small ones come from the allocator's arenas; a pooled buffer would
    /// hold far more memory than the call needs).
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> Vec<u8> {
        if len <= self.size && len > self.size / 4 {
            let reused = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
            if let Some(b) = reused {
                return b;
            }
            return vec![0; self.size];
        }
        vec![0; len]
    }

    /// `buf[..len]` as `Bytes`; the buffer returns to the pool when the
    /// last clone is dropped.
    pub(crate) fn freeze(self: &Arc<Self>, buf: Vec<u8>, len: usize) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            len,
            pool: self.clone(),
        })
    }

    fn give_back(&self, buf: Vec<u8>) {
        if buf.len() != self.size {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < self.keep {
            free.push(buf);
        }
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.free.lock().unwrap().len()
    }
}

struct Pooled {
    buf: Vec<u8>,
    len: usize,
    pool: Arc<BufPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_the_pool_is_bounded() {
        let pool = BufPool::new(16, 2);
        let mut a = pool.take(10);
        assert_eq!(a.len(), 16, "pooled: more than a quarter of the size");
        a[..3].copy_from_slice(b"abc");
        let a = pool.freeze(a, 3);
        assert_eq!(&a[..], b"abc");
        let a2 = a.clone();
        drop(a);
        assert_eq!(pool.idle(), 0, "a clone still holds it");
        drop(a2);
        assert_eq!(pool.idle(), 1);
        // Reused (same size), then more than `keep` come back.
        let bufs: Vec<_> = (0..4).map(|_| pool.take(16)).collect();
        assert!(bufs.iter().all(|b| b.len() == 16));
        for b in bufs {
            drop(pool.freeze(b, 16));
        }
        assert_eq!(pool.idle(), 2);
        // Larger than the pool's size, or small: a fresh buffer of that
        // size, not kept.
        for len in [100, 3] {
            let b = pool.take(len);
            assert_eq!(b.len(), len);
            drop(pool.freeze(b, len));
            assert_eq!(pool.idle(), 2);
        }
    }
}
