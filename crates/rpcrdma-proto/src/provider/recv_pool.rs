//! The memory behind lent receive buffers (see "Receive buffers lent by the
//! provider" in the [module docs](super)): one pool for the whole process,
//! shared by every connection of the software providers, so that an idle
//! connection holds no receive memory at all.
//!
//! A buffer is taken when a Send arrives for a posted receive and given back
//! when the receive's region is posted again (the owner has consumed the
//! message) or deregistered. How many buffers are out at once is bounded by
//! the receives posted (each connection's credit grant, within its
//! provider's `Caps::max_recv_wr`); what the pool keeps idle is bounded by
//! [`RECV_POOL_IDLE_BYTES`] (beyond it a buffer given back is freed) and
//! [`RECV_POOL_CLASSES`] sizes, so no peer can make it grow.

use std::sync::{Mutex, PoisonError};

/// Most octets of idle receive buffers the pool keeps for reuse, for the
/// whole process; a buffer given back beyond it is freed. 4 MiB: a
/// thousand 4 KiB buffers (the default inline size), enough for every
/// message in flight of a busy server to reuse memory instead of zeroing
/// new buffers.
pub const RECV_POOL_IDLE_BYTES: usize = 4 << 20;

/// Most buffer sizes the pool keeps (connections with other inline sizes
/// allocate and free).
pub const RECV_POOL_CLASSES: usize = 4;

#[derive(Debug)]
struct Pool {
    /// Idle buffers by size.
    classes: Vec<(usize, Vec<Box<[u8]>>)>,
    /// Octets of every idle buffer.
    bytes: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    classes: Vec::new(),
    bytes: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A buffer of exactly `len` octets: a pooled one, holding whatever an
/// earlier message left in it (its user shows only the octets it placed
/// since), or a new zeroed one.
pub fn take(len: usize) -> Box<[u8]> {
    let pooled = {
        let mut p = pool();
        let found = p
            .classes
            .iter_mut()
            .find(|(l, _)| *l == len)
            .and_then(|(_, v)| v.pop());
        if found.is_some() {
            p.bytes -= len;
        }
        found
    };
    pooled.unwrap_or_else(|| vec![0u8; len].into_boxed_slice())
}

/// Gives `buf` back: kept while the pool is under its bounds, else freed.
pub fn give(buf: Box<[u8]>) {
    let len = buf.len();
    if len == 0 {
        return;
    }
    let mut p = pool();
    if p.bytes + len > RECV_POOL_IDLE_BYTES {
        return;
    }
    let i = match p.classes.iter().position(|(l, _)| *l == len) {
        Some(i) => i,
        None if p.classes.len() < RECV_POOL_CLASSES => {
            p.classes.push((len, Vec::new()));
            p.classes.len() - 1
        }
        None => return,
    };
    if let Some((_, v)) = p.classes.get_mut(i) {
        v.push(buf);
        p.bytes += len;
    }
}

/// Octets of idle buffers the pool keeps now.
pub fn idle_bytes() -> usize {
    pool().bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_never_keeps_more_than_its_bounds() {
        // Other tests of the process use the pool at the same time: only
        // the bounds, which hold whatever they do, are checked.
        for i in 0..2 * RECV_POOL_IDLE_BYTES / 4096 {
            give(vec![0u8; 4096].into_boxed_slice());
            give(vec![0u8; 100 + i % 10].into_boxed_slice());
            assert!(idle_bytes() <= RECV_POOL_IDLE_BYTES);
        }
        assert!(pool().classes.len() <= RECV_POOL_CLASSES);
        let b = take(4096);
        assert_eq!(b.len(), 4096);
        assert_eq!(take(12_345).len(), 12_345);
        give(Box::default());
    }
}
