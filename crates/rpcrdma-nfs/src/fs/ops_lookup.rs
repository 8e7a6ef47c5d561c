//! LOOKUP and READLINK.

use rustix::fs::readlinkat;

use super::attr::{Attr, FileType};
use super::error::{NfsError, NfsResult};
use super::export::Export;
use super::handle::FileHandle;
use super::resolve::{check_name, open_parent, Name};
use super::table::{Obj, ROOT};

/// The result of LOOKUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The object's handle.
    pub handle: FileHandle,
    /// The object's attributes.
    pub attr: Attr,
    /// The directory's attributes.
    pub dir_attr: Attr,
}

impl Export {
    /// LOOKUP of one name in a directory. The name is never followed if
    /// it is a symlink (the client gets the symlink's own handle). `.` is
    /// the directory; `..` is its parent, and at the export root the root
    /// itself — knfsd's choice ("`..` == `.` just like at /",
    /// `nfsd_lookup_dentry()`), which RFC 1813 §3.3.3 leaves to the server.
    pub fn lookup(&self, dir: &FileHandle, name: &[u8]) -> NfsResult<Lookup> {
        let d = self.dir(dir)?;
        let name = check_name(name)?;
        let (handle, attr) = match name {
            Name::Dot => (self.codec.encode(d.id), d.attr),
            Name::DotDot => self.parent_of(&d)?,
            Name::Plain(n) => self.lookup_plain(&d, n)?,
        };
        Ok(Lookup {
            handle,
            attr,
            dir_attr: d.attr,
        })
    }

    /// The handle and attributes of a directory's parent; the root's
    /// parent is the root.
    pub(crate) fn parent_of(&self, d: &Obj) -> NfsResult<(FileHandle, Attr)> {
        if d.id == ROOT {
            return Ok((self.codec.encode(ROOT), d.attr));
        }
        let up = open_parent(&*d.fd)?;
        // The parent of a directory has no name of its own to record: a
        // directory entry is held by its descriptor alone.
        self.child(d, b"..", up)
    }

    /// READLINK: the symlink's target, as stored (never interpreted);
    /// `Inval` for anything but a symlink, as knfsd answers.
    pub fn readlink(&self, fh: &FileHandle) -> NfsResult<(Vec<u8>, Attr)> {
        let obj = self.obj(fh)?;
        if obj.attr.ftype != FileType::Symlink {
            return Err(NfsError::Inval);
        }
        let target = readlinkat(&*obj.fd, "", Vec::new())?;
        Ok((target.into_bytes(), obj.attr))
    }
}
