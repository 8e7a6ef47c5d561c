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

use std::collections::{BTreeMap, HashMap};

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
    map: HashMap<DrcKey, Entry>,
    lru: BTreeMap<u64, DrcKey>,
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
            map: HashMap::new(),
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

    fn touch(&mut self, key: &DrcKey) {
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
        let n = reply.xdr_len();
        if n > self.max_bytes {
            self.abandon(key);
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
