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
use std::collections::{BTreeMap, HashMap};
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

#[derive(Debug)]
struct Entry {
    seq: u64,
    state: State,
    bytes: usize,
}

/// The cache.
#[derive(Debug)]
pub struct DuplicateReplyCache {
    /// The secret keys of the hash (see "Hashing" in the module docs).
    keys: RandomState,
    map: HashMap<HashedDrcKey, Entry, PassThrough>,
    lru: BTreeMap<u64, HashedDrcKey>,
    next_seq: u64,
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
            map: HashMap::with_hasher(PassThrough),
            lru: BTreeMap::new(),
            next_seq: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Octets of cached replies.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `key` with its hash under this cache's secret keys.
    pub fn hashed(&self, key: DrcKey) -> HashedDrcKey {
        HashedDrcKey {
            hash: self.keys.hash_one(&key),
            key,
        }
    }

    fn touch(&mut self, key: &HashedDrcKey) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(e) = self.map.get_mut(key) {
            self.lru.remove(&e.seq);
            e.seq = seq;
            self.lru.insert(seq, key.clone());
        }
    }

    fn evict(&mut self) {
        while self.map.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some((_, key)) = self.lru.pop_first() else {
                break;
            };
            if let Some(e) = self.map.remove(&key) {
                self.bytes -= e.bytes;
            }
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
        let out = match self.map.get(key) {
            Some(Entry {
                state: State::InProgress,
                ..
            }) => DrcLookup::InProgress,
            Some(Entry {
                state: State::Done(m),
                ..
            }) => DrcLookup::Replay(m.clone()),
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.map.insert(
                    key.clone(),
                    Entry {
                        seq,
                        state: State::InProgress,
                        bytes: 0,
                    },
                );
                self.lru.insert(seq, key.clone());
                self.evict();
                return DrcLookup::New;
            }
        };
        self.touch(key);
        out
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
        if let Some(e) = self.map.get_mut(key) {
            self.bytes = self.bytes - e.bytes + n;
            e.bytes = n;
            e.state = State::Done(reply.clone());
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
        if let Some(e) = self.map.remove(key) {
            self.lru.remove(&e.seq);
            self.bytes -= e.bytes;
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
        /// hashed once) answers every sequence of calls as the model does.
        #[test]
        fn the_cache_is_the_model(
            ops in proptest::collection::vec((0u8..3, 0u32..6, 0usize..12), 0..80),
            max_entries in 0usize..5,
            max_bytes in 0usize..30,
        ) {
            let mut model = Model { max_entries, max_bytes, ..Model::default() };
            let mut plain = DuplicateReplyCache::new(max_entries, max_bytes);
            let mut hashed = DuplicateReplyCache::new(max_entries, max_bytes);
            for (op, xid, n) in ops {
                let k = key(xid, xid % 2);
                let hk = hashed.hashed(k.clone());
                let m = Message::inline(vec![xid as u8; n]);
                match op {
                    0 => {
                        let want = model.begin(&k);
                        proptest::prop_assert_eq!(&plain.begin(&k), &want);
                        proptest::prop_assert_eq!(&hashed.begin_hashed(&hk), &want);
                    }
                    1 => {
                        model.complete(&k, &m);
                        plain.complete(&k, &m);
                        hashed.complete_hashed(&hk, &m);
                    }
                    _ => {
                        model.abandon(&k);
                        plain.abandon(&k);
                        hashed.abandon_hashed(&hk);
                    }
                }
                proptest::prop_assert_eq!(plain.len(), model.entries.len());
                proptest::prop_assert_eq!(hashed.len(), model.entries.len());
                proptest::prop_assert_eq!(plain.bytes(), model.bytes());
                proptest::prop_assert_eq!(hashed.bytes(), model.bytes());
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
