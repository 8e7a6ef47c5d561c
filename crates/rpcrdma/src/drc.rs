//! Duplicate-reply cache (bounded LRU).
//!
//! A retransmitted call (same client, XID, program, version, procedure and
//! the same call octets) must be executed once and answered again. The key
//! is `(client identity, XID, prog, vers, proc, length of the call, CRC32C
//! of its first DRC_CSUM_LEN octets)` ([`call_checksum`]): the client
//! identity comes from the transport and is never the source port, so a
//! call retransmitted on a new connection after a reconnect still hits; the
//! length and checksum separate a reused XID with different content.
//!
//! Only a prefix is checksummed, as Linux nfsd does (`RC_CSUMLEN`, 256
//! octets, with the request length in the key): the call header and the
//! leading arguments (an NFS WRITE's file handle, offset and count) are
//! what tells two calls under one XID apart, and checksumming a whole
//! bulk argument (a megabyte of WRITE data, or of any Read chunk) would
//! cost more than the transfer itself.
//!
//! While the original is executing, a retransmission is dropped (the
//! original's reply answers it). Bounded by entry count and by the octets of
//! the cached replies; the least recently used entries go first.
//!
//! # Hashing
//!
//! Every field of a key but the checksum is the peer's choice, so the
//! table is keyed with a secret: a key is hashed once, by SipHash with
//! this cache's random keys ([`RandomState`]), into a [`HashedDrcKey`],
//! and the table and its LRU order use that hash as it is (hashing a key
//! again for each lookup, insertion and eviction was four SipHash runs per
//! cached call, ~1,100 user-space instructions). [`DuplicateReplyCache::hashed`]
//! makes one for [`DuplicateReplyCache::begin_hashed`] and the
//! [`DuplicateReplyCache::complete_hashed`] / [`DuplicateReplyCache::abandon_hashed`]
//! that follow it.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::message::Message;
use crate::transport::ClientIdentity;

/// Key of a cached call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DrcKey {
    /// Who sent it (from the transport).
    pub client: ClientIdentity,
    /// XID.
    pub xid: u32,
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure.
    pub proc: u32,
    /// Octets of the call message (contiguous XDR).
    pub len: usize,
    /// CRC32C of the first [`DRC_CSUM_LEN`] octets of the call message.
    pub crc: u32,
}

/// Octets of a call checksummed for its [`DrcKey`] (Linux nfsd's
/// `RC_CSUMLEN`).
pub const DRC_CSUM_LEN: usize = 256;

/// The `(len, crc)` of a call's [`DrcKey`]: the octets of its contiguous
/// XDR stream, and the CRC32C of the first [`DRC_CSUM_LEN`] of them.
pub fn call_checksum(call: &Message) -> (usize, u32) {
    let mut crc = 0u32;
    let mut left = DRC_CSUM_LEN;
    call.for_each_xdr_chunk(|c| {
        let take = c.get(..left.min(c.len())).unwrap_or_default();
        if !take.is_empty() {
            crc = crc32c::crc32c_append(crc, take);
            left -= take.len();
        }
    });
    (call.xdr_len(), crc)
}

/// A [`DrcKey`] with its hash under one cache's secret keys (see
/// "Hashing" in the [module docs](self)); made by
/// [`DuplicateReplyCache::hashed`], good for that cache only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashedDrcKey {
    hash: u64,
    key: DrcKey,
}

impl HashedDrcKey {
    /// The key.
    pub fn key(&self) -> &DrcKey {
        &self.key
    }
}

impl Hash for HashedDrcKey {
    /// The keyed hash, as it is (see [`PassThrough`]).
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The table's hasher: a [`HashedDrcKey`]'s hash is already a keyed
/// SipHash, so it is taken as it is.
#[derive(Clone, Copy, Debug, Default)]
struct PassThrough;

/// See [`PassThrough`].
#[derive(Default)]
struct PassThroughHasher(u64);

impl BuildHasher for PassThrough {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

impl Hasher for PassThroughHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `HashedDrcKey` (one `write_u64`); any other input
        // still spreads over the table.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// What to do with a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrcLookup {
    /// Not seen: execute it (an in-progress entry was made).
    New,
    /// The original is still executing: drop this copy.
    InProgress,
    /// Already answered: send this reply again.
    Replay(Message),
}

#[derive(Debug)]
enum State {
    InProgress,
    Done(Message),
}

/// No node (the end of a list).
const NIL: u32 = u32::MAX;

/// An entry, in the recency list (`older` / `newer`) and in the chain of
/// entries whose keys share a hash (`same_hash`; with a keyed SipHash two
/// different keys share one only by accident, but the table never trusts
/// the hash alone).
#[derive(Debug)]
struct Node {
    key: HashedDrcKey,
    state: State,
    bytes: usize,
    older: u32,
    newer: u32,
    same_hash: u32,
}

/// The cache.
///
/// Entries live in a slab (`nodes`, freed slots reused: at most
/// `max_entries + 1` ever), linked in recency order by index, and found
/// through a table from a key's hash to the newest entry with that hash.
/// A new entry, a touch and an eviction are a few index updates and at
/// most one table insertion or removal (an ordered map of sequence numbers
/// cost an insertion and a removal per call, ~500 instructions).
#[derive(Debug)]
pub struct DuplicateReplyCache {
    /// The secret keys of the hash (see "Hashing" in the module docs).
    keys: RandomState,
    index: HashMap<u64, u32, PassThrough>,
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
    /// The least and the most recently used entries.
    oldest: u32,
    newest: u32,
    live: usize,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl DuplicateReplyCache {
    /// A cache of at most `max_entries` entries and `max_bytes` octets of
    /// replies.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        DuplicateReplyCache {
            keys: RandomState::new(),
            index: HashMap::with_hasher(PassThrough),
            nodes: Vec::new(),
            free: Vec::new(),
            oldest: NIL,
            newest: NIL,
            live: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Octets of cached replies.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `key` with its hash under this cache's secret keys.
    pub fn hashed(&self, key: DrcKey) -> HashedDrcKey {
        // Every field in two writes (the fixed-size ones first, then the
        // client identity): SipHash takes a write of many octets in 8-octet
        // blocks, while the derived `Hash` wrote each field on its own
        // (~470 instructions per key in `Hasher::write`).
        let mut fixed = [0u8; 32];
        let words = [key.xid, key.prog, key.vers, key.proc, key.crc];
        for (o, w) in fixed.chunks_exact_mut(4).zip(words) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        fixed[20..28].copy_from_slice(&(key.len as u64).to_be_bytes());
        let mut h = self.keys.build_hasher();
        h.write(&fixed);
        h.write(&key.client.0);
        HashedDrcKey {
            hash: h.finish(),
            key,
        }
    }

    fn node(&self, i: u32) -> Option<&Node> {
        self.nodes.get(i as usize).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, i: u32) -> Option<&mut Node> {
        self.nodes.get_mut(i as usize).and_then(Option::as_mut)
    }

    /// The entry of `key`.
    fn find(&self, key: &HashedDrcKey) -> Option<u32> {
        let mut i = *self.index.get(&key.hash)?;
        while let Some(n) = self.node(i) {
            if n.key == *key {
                return Some(i);
            }
            i = n.same_hash;
        }
        None
    }

    /// Takes entry `i` out of the recency list.
    fn unlink(&mut self, i: u32) {
        let Some((older, newer)) = self.node(i).map(|n| (n.older, n.newer)) else {
            return;
        };
        match self.node_mut(older) {
            Some(o) => o.newer = newer,
            None => self.oldest = newer,
        }
        match self.node_mut(newer) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
    }

    /// Puts entry `i` (out of the list) at its most recent end.
    fn link_newest(&mut self, i: u32) {
        let prev = self.newest;
        if let Some(n) = self.node_mut(i) {
            n.older = prev;
            n.newer = NIL;
        }
        match self.node_mut(prev) {
            Some(p) => p.newer = i,
            None => self.oldest = i,
        }
        self.newest = i;
    }

    fn touch(&mut self, i: u32) {
        if self.newest != i {
            self.unlink(i);
            self.link_newest(i);
        }
    }

    fn insert(&mut self, key: HashedDrcKey) {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.nodes.push(None);
                (self.nodes.len() - 1) as u32
            }
        };
        let same_hash = self.index.insert(key.hash, i).unwrap_or(NIL);
        self.nodes[i as usize] = Some(Node {
            key,
            state: State::InProgress,
            bytes: 0,
            older: NIL,
            newer: NIL,
            same_hash,
        });
        self.live += 1;
        self.link_newest(i);
    }

    /// Drops entry `i`.
    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let Some(n) = self.nodes.get_mut(i as usize).and_then(Option::take) else {
            return;
        };
        self.free.push(i);
        self.live -= 1;
        self.bytes -= n.bytes;
        let hash = n.key.hash;
        match self.index.get(&hash).copied() {
            Some(head) if head == i => {
                if n.same_hash == NIL {
                    self.index.remove(&hash);
                } else {
                    self.index.insert(hash, n.same_hash);
                }
            }
            Some(mut j) => {
                // Further down its chain: unlink it from its predecessor.
                while let Some(p) = self.node_mut(j) {
                    if p.same_hash == i {
                        p.same_hash = n.same_hash;
                        break;
                    }
                    j = p.same_hash;
                }
            }
            None => {}
        }
    }

    fn evict(&mut self) {
        while self.live > self.max_entries || self.bytes > self.max_bytes {
            if self.oldest == NIL {
                break;
            }
            self.remove(self.oldest);
        }
    }

    /// Looks a call up; a new call gets an in-progress entry.
    pub fn begin(&mut self, key: &DrcKey) -> DrcLookup {
        let key = self.hashed(key.clone());
        self.begin_hashed(&key)
    }

    /// [`DuplicateReplyCache::begin`] of a key hashed by
    /// [`DuplicateReplyCache::hashed`].
    pub fn begin_hashed(&mut self, key: &HashedDrcKey) -> DrcLookup {
        if self.max_entries == 0 {
            return DrcLookup::New;
        }
        let Some(i) = self.find(key) else {
            self.insert(key.clone());
            self.evict();
            return DrcLookup::New;
        };
        self.touch(i);
        match self.node(i).map(|n| &n.state) {
            Some(State::Done(m)) => DrcLookup::Replay(m.clone()),
            _ => DrcLookup::InProgress,
        }
    }

    /// Stores the reply of a call that [`begin`](Self::begin) said was new.
    /// A reply larger than the whole byte budget is not kept.
    pub fn complete(&mut self, key: &DrcKey, reply: &Message) {
        let key = self.hashed(key.clone());
        self.complete_hashed(&key, reply)
    }

    /// [`DuplicateReplyCache::complete`] of a hashed key.
    pub fn complete_hashed(&mut self, key: &HashedDrcKey, reply: &Message) {
        let n = reply.xdr_len();
        if n > self.max_bytes {
            self.abandon_hashed(key);
            return;
        }
        let Some(i) = self.find(key) else {
            return;
        };
        if let Some(e) = self.node_mut(i) {
            let was = std::mem::replace(&mut e.bytes, n);
            e.state = State::Done(reply.clone());
            self.bytes = self.bytes - was + n;
            self.evict();
        }
    }

    /// Forgets a call (e.g. it produced no reply).
    pub fn abandon(&mut self, key: &DrcKey) {
        let key = self.hashed(key.clone());
        self.abandon_hashed(&key)
    }

    /// [`DuplicateReplyCache::abandon`] of a hashed key.
    pub fn abandon_hashed(&mut self, key: &HashedDrcKey) {
        if let Some(i) = self.find(key) {
            self.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn key(xid: u32, crc: u32) -> DrcKey {
        DrcKey {
            client: ClientIdentity(Bytes::from_static(b"127.0.0.1")),
            xid,
            prog: 1,
            vers: 1,
            proc: 1,
            len: 100,
            crc,
        }
    }

    #[test]
    fn call_checksum_covers_the_length_and_a_prefix() {
        use rpcrdma_proto::engine::Piece;
        let stream: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let whole = Message::inline(stream.clone());
        let (len, crc) = call_checksum(&whole);
        assert_eq!(len, 1000);
        assert_eq!(crc, crc32c::crc32c(&stream[..DRC_CSUM_LEN]));
        // The same stream in pieces (a DDP piece across the prefix's end,
        // its pad in the stream): the same key.
        let mut pieces = Message::new();
        pieces.push(Piece::Inline(Bytes::copy_from_slice(&stream[..200])));
        pieces.push(Piece::Ddp(Bytes::copy_from_slice(&stream[200..298])));
        let mut padded = stream[..298].to_vec();
        padded.extend([0, 0]);
        pieces.push(Piece::Inline(Bytes::copy_from_slice(&stream[300..])));
        padded.extend(&stream[300..]);
        let split = call_checksum(&pieces);
        assert_eq!(split, (1000, crc32c::crc32c(&padded[..DRC_CSUM_LEN])));
        // A change in the prefix or in the length is a different call; one
        // past the prefix is not seen (as in Linux nfsd).
        let mut other = stream.clone();
        other[DRC_CSUM_LEN - 1] ^= 1;
        assert_ne!(call_checksum(&Message::inline(other)), (len, crc));
        assert_ne!(
            call_checksum(&Message::inline(stream[..999].to_vec())).0,
            len
        );
        let mut late = stream.clone();
        late[DRC_CSUM_LEN] ^= 1;
        assert_eq!(call_checksum(&Message::inline(late)), (len, crc));
        // A call shorter than the prefix is checksummed whole.
        assert_eq!(
            call_checksum(&Message::inline(stream[..10].to_vec())),
            (10, crc32c::crc32c(&stream[..10]))
        );
    }

    #[test]
    fn new_in_progress_replay() {
        let mut c = DuplicateReplyCache::new(4, 1000);
        assert_eq!(c.begin(&key(1, 7)), DrcLookup::New);
        assert_eq!(c.begin(&key(1, 7)), DrcLookup::InProgress);
        // Same XID, different call octets: a different call.
        assert_eq!(c.begin(&key(1, 8)), DrcLookup::New);
        let r = Message::inline(vec![1u8; 8]);
        c.complete(&key(1, 7), &r);
        assert_eq!(c.begin(&key(1, 7)), DrcLookup::Replay(r));
        assert_eq!(c.bytes(), 8);
        // A different client with the same XID is a different call.
        let mut k = key(1, 7);
        k.client = ClientIdentity(Bytes::from_static(b"127.0.0.2"));
        assert_eq!(c.begin(&k), DrcLookup::New);
    }

    /// Equal keys hash alike; keys that differ in any one field hash
    /// apart (with SipHash, a collision here would be a 2^-64 accident).
    #[test]
    fn every_field_is_hashed() {
        let c = DuplicateReplyCache::new(4, 1000);
        let k = key(1, 7);
        assert_eq!(c.hashed(k.clone()).hash, c.hashed(k.clone()).hash);
        let h = c.hashed(k.clone()).hash;
        let mut others = Vec::new();
        for f in 0..7 {
            let mut o = k.clone();
            match f {
                0 => o.client = ClientIdentity(Bytes::from_static(b"127.0.0.2")),
                1 => o.xid ^= 1,
                2 => o.prog ^= 1,
                3 => o.vers ^= 1,
                4 => o.proc ^= 1,
                5 => o.len ^= 1,
                _ => o.crc ^= 1,
            }
            others.push(o);
        }
        for o in others {
            assert_ne!(c.hashed(o).hash, h);
        }
        // Another cache, other secret keys.
        assert_ne!(DuplicateReplyCache::new(4, 1000).hashed(k).hash, h);
    }

    /// Two keys whose hashes collide stay two entries: the table compares
    /// the keys, not only their hashes.
    #[test]
    fn colliding_hashes_are_different_calls() {
        let mut c = DuplicateReplyCache::new(4, 1000);
        let a = HashedDrcKey {
            hash: 7,
            key: key(1, 0),
        };
        let b = HashedDrcKey {
            hash: 7,
            key: key(2, 0),
        };
        assert_eq!(c.begin_hashed(&a), DrcLookup::New);
        assert_eq!(c.begin_hashed(&b), DrcLookup::New);
        let r = Message::inline(vec![1u8; 4]);
        c.complete_hashed(&a, &r);
        assert_eq!(c.begin_hashed(&a), DrcLookup::Replay(r));
        assert_eq!(c.begin_hashed(&b), DrcLookup::InProgress);
        assert_eq!(c.len(), 2);
    }

    /// What the cache must do, kept the simple way: entries in recency
    /// order (least recent first), found by comparing keys.
    #[derive(Default)]
    struct Model {
        entries: Vec<(DrcKey, Option<Message>, usize)>,
        max_entries: usize,
        max_bytes: usize,
    }

    impl Model {
        fn bytes(&self) -> usize {
            self.entries.iter().map(|e| e.2).sum()
        }
        fn evict(&mut self) {
            while self.entries.len() > self.max_entries || self.bytes() > self.max_bytes {
                self.entries.remove(0);
            }
        }
        fn begin(&mut self, k: &DrcKey) -> DrcLookup {
            if self.max_entries == 0 {
                return DrcLookup::New;
            }
            match self.entries.iter().position(|e| &e.0 == k) {
                Some(i) => {
                    let e = self.entries.remove(i);
                    let out = match &e.1 {
                        Some(m) => DrcLookup::Replay(m.clone()),
                        None => DrcLookup::InProgress,
                    };
                    self.entries.push(e);
                    out
                }
                None => {
                    self.entries.push((k.clone(), None, 0));
                    self.evict();
                    DrcLookup::New
                }
            }
        }
        fn complete(&mut self, k: &DrcKey, m: &Message) {
            let n = m.xdr_len();
            if n > self.max_bytes {
                self.abandon(k);
                return;
            }
            if let Some(e) = self.entries.iter_mut().find(|e| &e.0 == k) {
                e.1 = Some(m.clone());
                e.2 = n;
                self.evict();
            }
        }
        fn abandon(&mut self, k: &DrcKey) {
            self.entries.retain(|e| &e.0 != k);
        }
    }

    proptest::proptest! {
        /// The cache (through either API: keys hashed per operation, or
        /// hashed once; and with keys whose hashes collide, as chains in
        /// its table) answers every sequence of calls as the model does.
        #[test]
        fn the_cache_is_the_model(
            ops in proptest::collection::vec((0u8..3, 0u32..6, 0usize..12), 0..80),
            max_entries in 0usize..5,
            max_bytes in 0usize..30,
        ) {
            let mut model = Model { max_entries, max_bytes, ..Model::default() };
            let mut plain = DuplicateReplyCache::new(max_entries, max_bytes);
            let mut hashed = DuplicateReplyCache::new(max_entries, max_bytes);
            let mut colliding = DuplicateReplyCache::new(max_entries, max_bytes);
            for (op, xid, n) in ops {
                let k = key(xid, xid % 2);
                let hk = hashed.hashed(k.clone());
                // Three keys to a hash: every chain position is exercised.
                let ck = HashedDrcKey { hash: u64::from(xid / 3), key: k.clone() };
                let m = Message::inline(vec![xid as u8; n]);
                match op {
                    0 => {
                        let want = model.begin(&k);
                        proptest::prop_assert_eq!(&plain.begin(&k), &want);
                        proptest::prop_assert_eq!(&hashed.begin_hashed(&hk), &want);
                        proptest::prop_assert_eq!(&colliding.begin_hashed(&ck), &want);
                    }
                    1 => {
                        model.complete(&k, &m);
                        plain.complete(&k, &m);
                        hashed.complete_hashed(&hk, &m);
                        colliding.complete_hashed(&ck, &m);
                    }
                    _ => {
                        model.abandon(&k);
                        plain.abandon(&k);
                        hashed.abandon_hashed(&hk);
                        colliding.abandon_hashed(&ck);
                    }
                }
                proptest::prop_assert_eq!(plain.len(), model.entries.len());
                proptest::prop_assert_eq!(hashed.len(), model.entries.len());
                proptest::prop_assert_eq!(plain.bytes(), model.bytes());
                proptest::prop_assert_eq!(hashed.bytes(), model.bytes());
                proptest::prop_assert_eq!(colliding.len(), model.entries.len());
                proptest::prop_assert_eq!(colliding.bytes(), model.bytes());
                // The slab never outgrows the bound (freed slots reused).
                proptest::prop_assert!(colliding.nodes.len() <= max_entries + 1);
            }
        }
    }

    #[test]
    fn lru_bounds() {
        let mut c = DuplicateReplyCache::new(2, 20);
        for x in 0..3 {
            assert_eq!(c.begin(&key(x, 0)), DrcLookup::New);
            c.complete(&key(x, 0), &Message::inline(vec![0u8; 8]));
        }
        assert_eq!(c.len(), 2);
        // xid 0 was evicted: it is new again (and evicts xid 1, the LRU).
        assert_eq!(c.begin(&key(0, 0)), DrcLookup::New);
        assert!(matches!(c.begin(&key(2, 0)), DrcLookup::Replay(_)));
        assert_eq!(c.begin(&key(1, 0)), DrcLookup::New);
        // Byte bound: a 16-octet reply pushes the others out (8 + 16 > 20).
        let mut c = DuplicateReplyCache::new(10, 20);
        c.begin(&key(1, 0));
        c.complete(&key(1, 0), &Message::inline(vec![0u8; 8]));
        c.begin(&key(2, 0));
        c.complete(&key(2, 0), &Message::inline(vec![0u8; 16]));
        assert!(c.bytes() <= 20);
        assert_eq!(c.begin(&key(1, 0)), DrcLookup::New);
        // A reply larger than the budget is not cached at all.
        c.begin(&key(3, 0));
        c.complete(&key(3, 0), &Message::inline(vec![0u8; 24]));
        assert_eq!(c.begin(&key(3, 0)), DrcLookup::New);
        // Disabled cache.
        let mut c = DuplicateReplyCache::new(0, 0);
        assert_eq!(c.begin(&key(1, 0)), DrcLookup::New);
        assert_eq!(c.begin(&key(1, 0)), DrcLookup::New);
    }
}
