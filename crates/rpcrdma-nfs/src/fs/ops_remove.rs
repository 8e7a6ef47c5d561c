//! REMOVE, RMDIR, RENAME.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{renameat, unlinkat, AtFlags};

use super::attr::{Ident, Wcc};
use super::error::{NfsError, NfsResult};
use super::export::Export;
use super::handle::FileHandle;
use super::resolve::{lookup_child, plain_name};
use super::table::{Link, Obj};

impl Export {
    /// REMOVE of a non-directory (`IsDir` for a directory, from the host's
    /// `unlink`). `.` and `..` are `Acces`, as knfsd answers. The object's
    /// handles stay valid while it has another name this server has seen.
    pub fn remove(&self, dir: &FileHandle, name: &[u8]) -> NfsResult<Wcc> {
        let d = self.dir(dir)?;
        let name = plain_name(name, NfsError::Acces)?;
        let gone = self.known_child(&d, name);
        unlinkat(&*d.fd, OsStr::from_bytes(name), AtFlags::empty())?;
        if let Some(id) = gone {
            self.open.forget(id);
            self.table.drop_link(id, &link(&d, name));
        }
        Ok(self.after(&d))
    }

    /// RMDIR. `.` and `..` are `Acces` (knfsd).
    pub fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> NfsResult<Wcc> {
        let d = self.dir(dir)?;
        let name = plain_name(name, NfsError::Acces)?;
        let gone = self.known_child(&d, name);
        unlinkat(&*d.fd, OsStr::from_bytes(name), AtFlags::REMOVEDIR)?;
        if let Some(id) = gone {
            self.table.forget(id);
        }
        Ok(self.after(&d))
    }

    /// RENAME. `.` and `..` on either side are `Perm` (knfsd). The moved
    /// object keeps its handle; an object replaced at the target loses
    /// that name (and its handle, if it was its last).
    pub fn rename(
        &self,
        from_dir: &FileHandle,
        from: &[u8],
        to_dir: &FileHandle,
        to: &[u8],
    ) -> NfsResult<(Wcc, Wcc)> {
        let fd = self.dir(from_dir)?;
        let td = self.dir(to_dir)?;
        let from = plain_name(from, NfsError::Perm)?;
        let to = plain_name(to, NfsError::Perm)?;
        let moved = lookup_child(&*fd.fd, from).ok().map(|(_, _, i)| i);
        let replaced = lookup_child(&*td.fd, to).ok().map(|(_, _, i)| i);
        renameat(
            &*fd.fd,
            OsStr::from_bytes(from),
            &*td.fd,
            OsStr::from_bytes(to),
        )?;
        if let Some(r) = replaced.filter(|r| Some(*r) != moved) {
            self.unlinked(&r, &link(&td, to));
        }
        if let Some(id) = moved.and_then(|m| self.table.known(&m)) {
            self.open.forget(id);
            self.table.rename_link(id, &link(&fd, from), link(&td, to));
        }
        Ok((self.after(&fd), self.after(&td)))
    }

    /// The entry of the object now named `name` in `d`, if it has one.
    fn known_child(&self, d: &Obj, name: &[u8]) -> Option<u64> {
        let (_, _, ident) = lookup_child(&*d.fd, name).ok()?;
        self.table.known(&ident)
    }

    /// An object lost the name `l` (a directory's entry notices by
    /// itself: its link count drops to zero).
    fn unlinked(&self, ident: &Ident, l: &Link) {
        if let Some(id) = self.table.known(ident) {
            self.open.forget(id);
            self.table.drop_link(id, l);
        }
    }
}

fn link(d: &Obj, name: &[u8]) -> Link {
    Link {
        parent: d.id,
        name: name.to_vec(),
    }
}
