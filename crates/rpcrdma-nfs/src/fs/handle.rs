//! File handles: opaque to clients, authenticated by a per-instance key.
//!
//! Layout (29 octets, well under NFSv3's 64):
//!
//! | octets | field                                              |
//! |--------|----------------------------------------------------|
//! | 0      | version ([`VERSION`])                              |
//! | 1..5   | export id (big-endian)                             |
//! | 5..13  | server instance (random at [`Export`] creation)    |
//! | 13..21 | entry id in the handle table (never reused)        |
//! | 21..29 | tag: SipHash of octets 0..21 under a secret key    |
//!
//! A handle of another length or version, or with a wrong tag, is
//! `BadHandle` ("failed internal consistency checks", RFC 1813 §2.6); a
//! well-formed one from another export or server instance is `Stale`, as
//! knfsd answers for a handle whose export or inode it cannot find.
//!
//! [`Export`]: super::Export

use std::hash::{BuildHasher, RandomState};

use super::error::{NfsError, NfsResult};

/// The largest handle NFSv3 carries (`NFS3_FHSIZE`, RFC 1813 §2.4).
pub const MAX_HANDLE_LEN: usize = 64;
/// The handle layout this code writes and accepts.
pub(crate) const VERSION: u8 = 1;
const LEN: usize = 29;

/// An NFSv3 file handle: at most [`MAX_HANDLE_LEN`] opaque octets.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FileHandle {
    bytes: Vec<u8>,
}

impl FileHandle {
    /// A handle as received from a client; `BadHandle` when it is longer
    /// than NFSv3 allows. Whether it names anything is decided when an
    /// operation resolves it.
    pub fn from_bytes(bytes: &[u8]) -> NfsResult<Self> {
        if bytes.len() > MAX_HANDLE_LEN {
            return Err(NfsError::BadHandle);
        }
        Ok(FileHandle {
            bytes: bytes.to_vec(),
        })
    }

    /// The octets to put on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileHandle(")?;
        for b in &self.bytes {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Mints and checks handles for one export of one server instance.
pub(crate) struct HandleCodec {
    export_id: u32,
    instance: u64,
    // SipHash-1-3 keyed with 128 random bits the standard library draws
    // from the OS: a keyed PRF, so a client cannot mint a valid tag for an
    // entry id it was never given.
    key: RandomState,
}

impl HandleCodec {
    pub(crate) fn new(export_id: u32) -> Self {
        let instance = RandomState::new().hash_one((
            std::process::id(),
            std::time::SystemTime::now(),
            export_id,
        ));
        HandleCodec {
            export_id,
            instance,
            key: RandomState::new(),
        }
    }

    /// A per-instance random value (for write and cookie verifiers).
    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    pub(crate) fn encode(&self, entry: u64) -> FileHandle {
        let mut bytes = Vec::with_capacity(LEN);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.export_id.to_be_bytes());
        bytes.extend_from_slice(&self.instance.to_be_bytes());
        bytes.extend_from_slice(&entry.to_be_bytes());
        let tag = self.key.hash_one(&bytes[..]);
        bytes.extend_from_slice(&tag.to_be_bytes());
        FileHandle { bytes }
    }

    /// The entry id a handle names, or why it names none.
    pub(crate) fn decode(&self, fh: &FileHandle) -> NfsResult<u64> {
        let b = fh.as_bytes();
        if b.len() != LEN || b[0] != VERSION {
            return Err(NfsError::BadHandle);
        }
        let export_id = u32::from_be_bytes(b[1..5].try_into().expect("4 octets"));
        let instance = u64::from_be_bytes(b[5..13].try_into().expect("8 octets"));
        if export_id != self.export_id || instance != self.instance {
            return Err(NfsError::Stale);
        }
        let tag = u64::from_be_bytes(b[21..29].try_into().expect("8 octets"));
        if tag != self.key.hash_one(&b[..21]) {
            return Err(NfsError::BadHandle);
        }
        Ok(u64::from_be_bytes(b[13..21].try_into().expect("8 octets")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_size() {
        let c = HandleCodec::new(7);
        let fh = c.encode(42);
        assert!(fh.as_bytes().len() <= MAX_HANDLE_LEN);
        assert_eq!(c.decode(&fh), Ok(42));
        assert_eq!(
            c.decode(&FileHandle::from_bytes(fh.as_bytes()).unwrap()),
            Ok(42)
        );
    }

    #[test]
    fn forged_and_foreign_handles_fail() {
        let c = HandleCodec::new(7);
        let mut b = c.encode(42).as_bytes().to_vec();
        // Forge: another entry id, same tag.
        b[20] ^= 1;
        assert_eq!(
            c.decode(&FileHandle::from_bytes(&b).unwrap()),
            Err(NfsError::BadHandle)
        );
        // Another server instance (same export id): stale.
        let other = HandleCodec::new(7);
        assert_eq!(c.decode(&other.encode(42)), Err(NfsError::Stale));
        // Another export: stale.
        assert_eq!(
            c.decode(&HandleCodec::new(8).encode(42)),
            Err(NfsError::Stale)
        );
        // Wrong length, wrong version.
        assert_eq!(
            c.decode(&FileHandle::from_bytes(&[1; 12]).unwrap()),
            Err(NfsError::BadHandle)
        );
        let mut v = c.encode(1).as_bytes().to_vec();
        v[0] = 2;
        assert_eq!(
            c.decode(&FileHandle::from_bytes(&v).unwrap()),
            Err(NfsError::BadHandle)
        );
        assert_eq!(FileHandle::from_bytes(&[0; 65]), Err(NfsError::BadHandle));
    }
}
