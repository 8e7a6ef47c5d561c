//! READ, WRITE, COMMIT.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use rustix::fs::{fdatasync, fsync, OFlags};
use rustix::io::{pread, pwrite};

use super::attr::{stat_fd, Attr, FileType, Wcc};
use super::error::{NfsError, NfsResult};
use super::export::{Export, MAX_IO};
use super::handle::FileHandle;
use super::open_files::Access;
use super::table::Obj;

/// `stable_how`: how far WRITE must have put the data before replying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StableHow {
    /// UNSTABLE: in the server's cache; COMMIT makes it stable.
    Unstable,
    /// DATA_SYNC: data and the metadata needed to read it back on stable
    /// storage (`fdatasync`).
    DataSync,
    /// FILE_SYNC: data and all metadata on stable storage (`fsync`).
    FileSync,
}

/// The result of READ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The octets read (fewer than asked at the end of the file).
    pub data: Vec<u8>,
    /// Whether the read reached the end of the file.
    pub eof: bool,
    /// The file's attributes after the read.
    pub attr: Attr,
}

/// The result of [`Export::read_into`]: the data is the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadInto {
    /// Octets read into the buffer (fewer than asked at the end of the file).
    pub len: usize,
    /// Whether the read reached the end of the file.
    pub eof: bool,
    /// The file's attributes after the read.
    pub attr: Attr,
}

/// The result of WRITE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Octets written (all of them: a short write is retried).
    pub count: u32,
    /// How far the data was committed (what was asked: never less).
    pub committed: StableHow,
    /// [`Export::write_verifier`].
    pub verf: [u8; 8],
    /// The file before and after.
    pub wcc: Wcc,
}

/// The result of COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// [`Export::write_verifier`].
    pub verf: [u8; 8],
    /// The file before and after.
    pub wcc: Wcc,
}

/// A regular file, or the error NFSv3 gives for the others.
fn regular(obj: &Obj) -> NfsResult<()> {
    match obj.attr.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(NfsError::IsDir),
        _ => Err(NfsError::Inval),
    }
}

/// The largest offset + length a file may reach (`off_t` is signed).
const MAX_END: u64 = i64::MAX as u64;

impl Export {
    /// A descriptor of the regular file `fh` names, opened for `access`:
    /// the open-file cache's, or resolved (confined, as every operation),
    /// opened and cached.
    pub(super) fn open_file(&self, fh: &FileHandle, access: Access) -> NfsResult<(u64, Arc<File>)> {
        let id = self.codec.decode(fh)?;
        let now = Instant::now();
        if let Some(fd) = self.open.get(id, access, now) {
            if self.table.contains(id) {
                return Ok((id, fd));
            }
            // The handle went stale (REMOVE, RMDIR of its parent, ...).
            self.open.forget(id);
        }
        let obj = self.table.resolve(id)?;
        regular(&obj)?;
        let flags = match access {
            Access::Read => OFlags::RDONLY,
            Access::Write => OFlags::WRONLY,
        };
        let fd = Arc::new(File::from(self.reopen(&obj, flags)?));
        self.open.put(id, access, fd.clone(), now);
        Ok((id, fd))
    }

    /// The attributes of an open file after an operation; a file that is
    /// no longer linked anywhere (a local process removed it) is `Stale`
    /// and leaves the cache.
    pub(super) fn attr_after(&self, id: u64, file: &File) -> NfsResult<Attr> {
        let (attr, _) = stat_fd(file)?;
        if attr.nlink == 0 {
            self.open.forget(id);
            return Err(NfsError::Stale);
        }
        Ok(attr)
    }

    /// READ of up to `count` octets at `offset`; `count` is capped at
    /// [`MAX_IO`] (FSINFO `rtmax`), as knfsd caps it at its payload size.
    pub fn read(&self, fh: &FileHandle, offset: u64, count: u32) -> NfsResult<Read> {
        let mut data = vec![0u8; count.min(MAX_IO) as usize];
        let r = self.read_into(fh, offset, &mut data)?;
        data.truncate(r.len);
        Ok(Read {
            data,
            eof: r.eof,
            attr: r.attr,
        })
    }

    /// READ into `buf` (at most [`MAX_IO`] octets of it): the octets read
    /// are `buf[..len]` of the result. A server reuses its buffers this
    /// way (no fresh pages to fault in and zero per call).
    pub fn read_into(&self, fh: &FileHandle, offset: u64, buf: &mut [u8]) -> NfsResult<ReadInto> {
        let (id, file) = self.open_file(fh, Access::Read)?;
        let want = buf.len().min(MAX_IO as usize);
        let mut got = 0;
        while got < want {
            let at = offset.saturating_add(got as u64);
            if at >= MAX_END {
                break;
            }
            match pread(&*file, &mut buf[got..want], at)? {
                0 => break,
                n => got += n,
            }
        }
        let attr = self.attr_after(id, &file)?;
        let eof = offset.saturating_add(got as u64) >= attr.size;
        Ok(ReadInto {
            len: got,
            eof,
            attr,
        })
    }

    /// WRITE of `data` at `offset`, with the file's attributes after it
    /// (no `wcc.before`, as knfsd). `Unstable` returns once the data is
    /// in the page cache; `DataSync` adds `fdatasync`, `FileSync` adds
    /// `fsync`; the reply's `committed` is what was asked (knfsd does the
    /// same). More than [`MAX_IO`] octets is `Inval`; past the largest
    /// file offset is `FBig`.
    pub fn write(
        &self,
        fh: &FileHandle,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> NfsResult<Write> {
        if data.len() > MAX_IO as usize {
            return Err(NfsError::Inval);
        }
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > MAX_END)
        {
            return Err(NfsError::FBig);
        }
        let (id, file) = self.open_file(fh, Access::Write)?;
        // No pre-operation attributes: one `statx` per WRITE, not two.
        // Linux knfsd's WRITE replies carry none either (`before` absent
        // on the wire, docs/interop-linux.md), its clients cope, and with
        // several WRITEs of a file in flight on the blocking pool a
        // `before` read apart from the write could not be atomic with it.
        //= rfc1813#section-3.3.7
        //# For a client
        //# that requires only the post-write file attributes,
        //# these can be found in file_wcc.after.
        //= rfc1813#section-2.6
        //# If there is a window for
        //# the object to get modified between the operation and either of
        //# the get attributes operations, then the client will not be able
        //# to determine whether it was the only entity to modify the
        //# object.
        let mut done = 0;
        while done < data.len() {
            match pwrite(&*file, &data[done..], offset + done as u64)? {
                0 => return Err(NfsError::Io),
                n => done += n,
            }
        }
        sync(&file, stable)?;
        Ok(Write {
            count: done as u32,
            committed: stable,
            verf: self.write_verifier(),
            wcc: Wcc {
                before: None,
                after: Some(self.attr_after(id, &file)?),
            },
        })
    }

    /// COMMIT: `fsync` of the whole file (a superset of the range asked;
    /// knfsd syncs the range).
    pub fn commit(&self, fh: &FileHandle, _offset: u64, _count: u32) -> NfsResult<Commit> {
        // fsync needs a real descriptor; either access mode will do.
        let (id, file) = self
            .open_file(fh, Access::Write)
            .or_else(|_| self.open_file(fh, Access::Read))?;
        let (before, _) = stat_fd(&*file)?;
        sync(&file, StableHow::FileSync)?;
        Ok(Commit {
            verf: self.write_verifier(),
            wcc: Wcc {
                before: Some(before.wcc()),
                after: Some(self.attr_after(id, &file)?),
            },
        })
    }
}

fn sync(file: &File, how: StableHow) -> NfsResult<()> {
    match how {
        StableHow::Unstable => {}
        StableHow::DataSync => fdatasync(file)?,
        StableHow::FileSync => fsync(file)?,
    }
    Ok(())
}
