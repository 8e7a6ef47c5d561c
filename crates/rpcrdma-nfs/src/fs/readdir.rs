//! READDIR and READDIRPLUS.
//!
//! Cookies are the host's directory offsets (`d_off` from `getdents64`,
//! resumed with `lseek`), as knfsd uses them: on ext4, xfs, btrfs and
//! tmpfs they stay valid while the directory changes, so a client paging
//! through an unchanged directory sees each entry exactly once. The cookie
//! verifier is fixed for the server instance: a cookie other than 0 must
//! come with it, else `BadCookie` (knfsd ignores the verifier; a server
//! restart makes every handle stale anyway).

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use rustix::fs::{seek, OFlags, RawDir, SeekFrom};
use rustix::io::Errno;

use super::attr::Attr;
use super::error::{NfsError, NfsResult};
use super::export::Export;
use super::handle::FileHandle;
use super::resolve::open_child;
use super::table::{Obj, ROOT};

/// One READDIR entry (`entry3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The inode number.
    pub fileid: u64,
    /// The name (including `.` and `..`).
    pub name: Vec<u8>,
    /// Where the next call resumes to read the entries after this one.
    pub cookie: u64,
}

/// One READDIRPLUS entry (`entryplus3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryPlus {
    /// The entry.
    pub entry: DirEntry,
    /// Its attributes (absent if it vanished meanwhile, or is a mount point).
    pub attr: Option<Attr>,
    /// Its handle (absent likewise).
    pub handle: Option<FileHandle>,
}

/// The result of READDIR / READDIRPLUS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDir<E> {
    /// The cookie verifier to send with the next call's cookie.
    pub verf: [u8; 8],
    /// Entries in directory order.
    pub entries: Vec<E>,
    /// Whether the last entry of the directory is in `entries`.
    pub eof: bool,
    /// The directory's attributes.
    pub dir_attr: Attr,
}

impl Export {
    /// READDIR from `cookie` (0: the start), at most `max_entries` entries
    /// (further capped by [`ExportConfig::max_dir_entries`]); `TooSmall`
    /// for 0. Each entry carries its own cookie, so a caller that must
    /// drop trailing entries to fit a reply size resumes from the last
    /// entry it kept.
    ///
    /// [`ExportConfig::max_dir_entries`]: super::ExportConfig::max_dir_entries
    pub fn readdir(
        &self,
        dir: &FileHandle,
        cookie: u64,
        verf: [u8; 8],
        max_entries: usize,
    ) -> NfsResult<ReadDir<DirEntry>> {
        let d = self.dir(dir)?;
        let (entries, eof) = self.list(&d, cookie, verf, max_entries)?;
        Ok(ReadDir {
            verf: self.cookie_verifier(),
            entries,
            eof,
            dir_attr: d.attr,
        })
    }

    /// READDIRPLUS: READDIR with each entry's attributes and handle.
    pub fn readdirplus(
        &self,
        dir: &FileHandle,
        cookie: u64,
        verf: [u8; 8],
        max_entries: usize,
    ) -> NfsResult<ReadDir<DirEntryPlus>> {
        let d = self.dir(dir)?;
        let (entries, eof) = self.list(&d, cookie, verf, max_entries)?;
        let entries = entries
            .into_iter()
            .map(|entry| {
                let found = match &entry.name[..] {
                    b"." => Ok((self.codec.encode(d.id), d.attr)),
                    b".." => self.parent_of(&d),
                    name => self.lookup_plain(&d, name),
                };
                let (handle, attr) = found.ok().unzip();
                DirEntryPlus {
                    entry,
                    attr,
                    handle,
                }
            })
            .collect();
        Ok(ReadDir {
            verf: self.cookie_verifier(),
            entries,
            eof,
            dir_attr: d.attr,
        })
    }

    fn list(
        &self,
        d: &Obj,
        cookie: u64,
        verf: [u8; 8],
        max_entries: usize,
    ) -> NfsResult<(Vec<DirEntry>, bool)> {
        if cookie != 0 && verf != self.cookie_verifier() {
            return Err(NfsError::BadCookie);
        }
        let max = max_entries.min(self.config.max_dir_entries);
        if max == 0 {
            return Err(NfsError::TooSmall);
        }
        let file = open_child(&*d.fd, b".", OFlags::RDONLY | OFlags::DIRECTORY)?;
        match seek(&file, SeekFrom::Start(cookie)) {
            Err(Errno::INVAL) => return Err(NfsError::BadCookie),
            r => r?,
        };
        read_entries(&file, max, d.id == ROOT, d.attr.fileid)
    }
}

/// Up to `max` entries from the directory's current offset, and whether
/// the end was reached.
fn read_entries(
    file: &OwnedFd,
    max: usize,
    at_root: bool,
    dir_fileid: u64,
) -> NfsResult<(Vec<DirEntry>, bool)> {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 32 * 1024];
    let mut iter = RawDir::new(file, &mut buf);
    let mut out = Vec::new();
    while let Some(e) = iter.next() {
        let e = e?;
        if out.len() == max {
            return Ok((out, false));
        }
        let name = e.file_name().to_bytes().to_vec();
        // The root's `..` is the root (as LOOKUP answers): its real parent
        // is outside the export.
        let fileid = if at_root && name == b".." {
            dir_fileid
        } else {
            e.ino()
        };
        out.push(DirEntry {
            fileid,
            name,
            cookie: e.next_entry_cookie(),
        });
    }
    Ok((out, true))
}
