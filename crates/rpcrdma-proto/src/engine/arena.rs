//! The received RPC messages of a connection, copied out of its receive
//! buffers: a small one is carved from a shared block of the connection
//! instead of an allocation of its own.
//!
//! Every received message is copied out of its receive buffer (the buffer
//! is posted again at once), and for a small call or reply that copy's
//! `malloc` and `free` were ~150 of the ~7,000 user-space instructions per
//! call on each side (BENCHMARKS.md, ninth pass). A message of at most
//! [`SMALL`] octets is appended to the connection's current block of
//! [`BLOCK`] octets and handed up as a [`Bytes`] view of it: one
//! allocation per block instead of one per message. The octets are the
//! message's own copy either way; a carved view is never written again
//! (the block only grows past it, and a full block is replaced, not
//! reused), so a message kept by the upper layer stays as it was.
//!
//! Memory: a block lives while any message carved from it does, so a
//! small message the upper layer keeps holds at most [`BLOCK`] octets; a
//! connection holds at most one block besides those (dropped with the
//! idle pools, [`ReceivedArena::release`]).

use bytes::{Bytes, BytesMut};

/// The largest message carved from a block (larger ones get their own
/// allocation, as before).
pub(super) const SMALL: usize = 256;

/// Octets of a block.
pub(super) const BLOCK: usize = 2048;

/// The connection's current block.
#[derive(Debug, Default)]
pub(super) struct ReceivedArena {
    block: BytesMut,
}

impl ReceivedArena {
    /// A copy of `src` as [`Bytes`] (carved from the block when small).
    #[inline]
    pub(super) fn copy(&mut self, src: &[u8]) -> Bytes {
        if src.is_empty() {
            return Bytes::new();
        }
        if src.len() > SMALL {
            return Bytes::copy_from_slice(src);
        }
        if self.block.capacity() - self.block.len() < src.len() {
            // A fresh block; the old one lives on in its messages only.
            self.block = BytesMut::with_capacity(BLOCK);
        }
        self.block.extend_from_slice(src);
        self.block.split().freeze()
    }

    /// Drops the current block (it lives on in the messages carved from
    /// it, if any).
    pub(super) fn release(&mut self) {
        self.block = BytesMut::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A carved message is exactly a copy of its octets (the general
        /// path, `Bytes::copy_from_slice`), and stays so while later
        /// messages are carved, blocks are replaced and released.
        #[test]
        fn carved_messages_equal_copies_and_stay_put(
            msgs in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..(SMALL + 40)),
                0..40,
            ),
            release_at in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let mut arena = ReceivedArena::default();
            let mut kept = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                let b = arena.copy(m);
                prop_assert_eq!(&b[..], &Bytes::copy_from_slice(m)[..]);
                kept.push(b);
                if release_at[i] {
                    arena.release();
                }
                for (k, m) in kept.iter().zip(&msgs) {
                    prop_assert_eq!(&k[..], &m[..]);
                }
            }
        }
    }

    /// Small messages share a block; a large one and a full block do not.
    #[test]
    fn small_messages_share_blocks() {
        let mut arena = ReceivedArena::default();
        let a = arena.copy(&[1; 24]);
        let b = arena.copy(&[2; 40]);
        // b was carved right after a in the same block.
        assert_eq!(a.as_ptr().wrapping_add(24), b.as_ptr());
        let big = arena.copy(&[3; SMALL + 1]);
        assert_eq!(&big[..], &[3; SMALL + 1][..]);
        let c = arena.copy(&[4; 8]);
        assert_eq!(b.as_ptr().wrapping_add(40), c.as_ptr());
        // Fill the block: the next message starts a new one.
        let mut last = c;
        for _ in 0..BLOCK / SMALL + 1 {
            last = arena.copy(&[5; SMALL]);
        }
        assert_eq!(&last[..], &[5; SMALL][..]);
        assert_eq!(&a[..], &[1; 24][..]);
        assert!(arena.copy(&[]).is_empty());
    }
}
