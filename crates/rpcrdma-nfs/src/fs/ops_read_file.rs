//! READ answered from the file: the range to send, decided with the
//! attributes, instead of the octets read into memory
//! ([`Export::read_range`]).
//!
//! Consistency: the size, `eof` and the post-operation attributes come
//! from one `statx` taken when the range is decided; the octets are those
//! of the page cache when the transport sends them (`sendfile`, after the
//! reply was queued). A WRITE landing in between reaches the client with
//! the older attributes, as with any `sendfile` server (knfsd's spliced
//! READ takes page references earlier, but also after its `getattr`);
//! NFSv3 gives concurrent unsynchronised writers no better (close-to-open
//! consistency: a client that opens after the writer closed sees the
//! data). A file truncated in between cannot deliver the promised count:
//! the transport closes the connection (the reply is lost) and the client
//! retransmits on a new one, where READ sees the new size.

use rpcrdma_proto::provider::FileRange;

use super::attr::Attr;
use super::error::NfsResult;
use super::export::{Export, MAX_IO};
use super::handle::FileHandle;
use super::open_files::Access;

/// The result of [`Export::read_range`].
#[derive(Debug, Clone)]
pub struct ReadRange {
    /// The octets to send: at most `count` (and [`MAX_IO`]), fewer at the
    /// end of the file.
    pub range: FileRange,
    /// Whether the range reaches the end of the file.
    pub eof: bool,
    /// The file's attributes when the range was decided.
    pub attr: Attr,
}

impl Export {
    /// READ of up to `count` octets at `offset` as a range of the open
    /// file (see the module docs): the same count, `eof` and attributes
    /// as [`Export::read_into`] of an unchanging file.
    pub fn read_range(&self, fh: &FileHandle, offset: u64, count: u32) -> NfsResult<ReadRange> {
        let (id, file) = self.open_file(fh, Access::Read)?;
        let attr = self.attr_after(id, &file)?;
        let want = u64::from(count.min(MAX_IO));
        let end = attr.size.min(i64::MAX as u64);
        let len = end.saturating_sub(offset).min(want);
        let eof = offset.saturating_add(len) >= attr.size;
        Ok(ReadRange {
            range: FileRange::new(file, offset, len as u32),
            eof,
            attr,
        })
    }
}
