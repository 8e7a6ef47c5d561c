//! A range of an open file as the source of an RDMA Write
//! ([`Provider::register_file`](super::Provider::register_file)).
//!
//! A server that answers a READ from a file would otherwise read the range
//! into memory and register that. A provider that can send straight from
//! the file (the software iWARP provider with the MPA CRC and Markers off:
//! the FPDU payload goes from the page cache to the socket by `sendfile`)
//! registers the range itself; every other provider reads it into an owned
//! registration, exactly as the caller would have ([`FileRange::read`], the
//! trait's default).
//!
//! The octets are those of the file when they are *sent*, not when the
//! range was registered: a local write to the file in between is seen by
//! the peer (as with any `sendfile` server). A file that became shorter
//! than the range ends the connection (the reply is lost, the requester
//! retransmits on a new one): the promised length is already on the wire
//! and no octet of stale or zero memory is ever sent in its place.

use std::fs::File;
use std::io;
use std::sync::Arc;

/// `len` octets of `file` from `offset`. Two ranges are equal when they
/// name the same octets of the same open file.
#[derive(Clone, Debug)]
pub struct FileRange {
    file: Arc<File>,
    offset: u64,
    len: u32,
}

impl PartialEq for FileRange {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.file, &o.file) && self.offset == o.offset && self.len == o.len
    }
}

impl Eq for FileRange {}

impl FileRange {
    /// The range `offset..offset + len` of `file`.
    pub fn new(file: Arc<File>, offset: u64, len: u32) -> Self {
        FileRange { file, offset, len }
    }

    /// The open file.
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// The first octet's offset in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Octets in the range.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range of `len` octets at `off` within this one (clamped to
    /// it).
    pub fn slice(&self, off: u64, len: u32) -> FileRange {
        let off = off.min(u64::from(self.len));
        let left = u64::from(self.len) - off;
        FileRange {
            file: self.file.clone(),
            offset: self.offset.saturating_add(off),
            len: len.min(u32::try_from(left).unwrap_or(u32::MAX)),
        }
    }

    /// Reads the whole range into `buf` (exactly [`FileRange::len`]
    /// octets long); a file now shorter than the range is
    /// [`io::ErrorKind::UnexpectedEof`].
    pub fn read_into(&self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() != self.len as usize {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        #[cfg(unix)]
        return std::os::unix::fs::FileExt::read_exact_at(&*self.file, buf, self.offset);
        #[cfg(not(unix))]
        return Err(io::ErrorKind::Unsupported.into());
    }

    /// The range's octets, read now.
    pub fn read(&self) -> io::Result<Vec<u8>> {
        let mut v = vec![0u8; self.len as usize];
        self.read_into(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(data: &[u8]) -> Arc<File> {
        let path = std::env::temp_dir().join(format!(
            "rpcrdma-filerange-{}-{}",
            std::process::id(),
            data.len()
        ));
        let mut f = File::create(&path).unwrap();
        f.write_all(data).unwrap();
        let f = File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        Arc::new(f)
    }

    #[test]
    fn read_gives_the_range_and_short_files_fail() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let f = temp_file(&data);
        let r = FileRange::new(f.clone(), 10, 100);
        assert_eq!(r.read().unwrap(), &data[10..110]);
        assert_eq!(r.slice(90, 50).read().unwrap(), &data[100..110]);
        let past = FileRange::new(f, 950, 100);
        assert_eq!(
            past.read().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
