//! The memory behind lent receive buffers (see "Receive buffers lent by the
//! provider" in the [module docs](super)): one pool per thread, shared by
//! every connection of the software providers that thread drives (a
//! runtime's few worker threads drive thousands), so that an idle
//! connection holds no receive memory at all. Per thread, not per
//! process: no lock on the path of every message (a buffer taken on one
//! thread and given back on another simply changes pools).
//!
//! A buffer is taken when a Send arrives for a posted receive and given back
//! when the receive's region is posted again (the owner has consumed the
//! message) or deregistered. How many buffers are out at once is bounded by
//! the receives posted (each connection's credit grant, within its
//! provider's `Caps::max_recv_wr`); what the pool keeps idle is bounded by
//! [`RECV_POOL_IDLE_BYTES`] (beyond it a buffer given back is freed) and
//! [`RECV_POOL_CLASSES`] sizes, so no peer can make it grow.

use std::cell::RefCell;

/// Most octets of idle receive buffers a thread's pool keeps for reuse; a
/// buffer given back beyond it is freed. 1 MiB: 256 buffers of 4 KiB (the
/// default inline size), every message in flight on a thread's
/// connections at depth 32 reusing memory instead of zeroing new buffers.
/// A thread that ends frees its pool.
pub const RECV_POOL_IDLE_BYTES: usize = 1 << 20;

/// Most buffer sizes the pool keeps (connections with other inline sizes
/// allocate and free).
pub const RECV_POOL_CLASSES: usize = 4;

#[derive(Debug, Default)]
struct Pool {
    /// Idle buffers by size.
    classes: Vec<(usize, Vec<Box<[u8]>>)>,
    /// Octets of every idle buffer.
    bytes: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::default();
}

/// Runs `f` on this thread's pool (`None` while the thread is being torn
/// down).
fn with_pool<R>(f: impl FnOnce(&mut Pool) -> R) -> Option<R> {
    POOL.try_with(|p| p.try_borrow_mut().ok().map(|mut p| f(&mut p)))
        .ok()
        .flatten()
}

/// A buffer of exactly `len` octets: a pooled one, holding whatever an
/// earlier message left in it (its user shows only the octets it placed
/// since), or a new zeroed one.
#[inline]
pub fn take(len: usize) -> Box<[u8]> {
    let pooled = with_pool(|p| {
        let found = p
            .classes
            .iter_mut()
            .find(|(l, _)| *l == len)
            .and_then(|(_, v)| v.pop());
        if found.is_some() {
            p.bytes -= len;
        }
        found
    });
    pooled
        .flatten()
        .unwrap_or_else(|| vec![0u8; len].into_boxed_slice())
}

/// Gives `buf` back: kept while the pool is under its bounds, else freed.
#[inline]
pub fn give(buf: Box<[u8]>) {
    let len = buf.len();
    if len == 0 {
        return;
    }
    with_pool(|p| {
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
    });
}

/// Octets of idle buffers this thread's pool keeps now.
pub fn idle_bytes() -> usize {
    with_pool(|p| p.bytes).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_never_keeps_more_than_its_bounds() {
        // Each test runs on a thread of its own: the pool starts empty.
        for _ in 0..2 * RECV_POOL_IDLE_BYTES / 4096 {
            give(vec![0u8; 4096].into_boxed_slice());
            assert!(idle_bytes() <= RECV_POOL_IDLE_BYTES);
        }
        assert_eq!(idle_bytes(), RECV_POOL_IDLE_BYTES);
        // Full: another size is freed, not kept.
        give(vec![0u8; 100].into_boxed_slice());
        assert_eq!(idle_bytes(), RECV_POOL_IDLE_BYTES);
        let b = take(4096);
        assert_eq!(b.len(), 4096);
        assert_eq!(idle_bytes(), RECV_POOL_IDLE_BYTES - 4096);
        // Sizes beyond RECV_POOL_CLASSES are freed too.
        for len in 1..=RECV_POOL_CLASSES + 2 {
            give(vec![0u8; len].into_boxed_slice());
        }
        assert_eq!(with_pool(|p| p.classes.len()), Some(RECV_POOL_CLASSES));
        assert_eq!(take(12_345).len(), 12_345);
        give(Box::default());
    }
}
