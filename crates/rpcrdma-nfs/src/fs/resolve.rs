//! Confinement primitives: one name component at a time, relative to a
//! directory descriptor, never following a symlink, never climbing above
//! the export root.
//!
//! Every object is reached by `openat(dir_fd, name, O_PATH | O_NOFOLLOW)`
//! where `name` is a single component checked by [`check_name`]; no path
//! string is ever re-walked from the root. A directory is held by an
//! `O_PATH` descriptor, so a rename does not lose it, and before use it is
//! checked to still hang below the root ([`connected`]).

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{openat, Mode, OFlags};

use super::attr::{stat_fd, Attr, Ident};
use super::error::{NfsError, NfsResult};

/// The longest name component (`NAME_MAX`, advertised by PATHCONF).
pub const NAME_MAX: usize = 255;

/// The deepest a directory may sit below the export root (a bound on the
/// [`connected`] walk).
pub(crate) const MAX_DEPTH: usize = 4096;

/// What a name component means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Name<'a> {
    /// `.`.
    Dot,
    /// `..`.
    DotDot,
    /// Any other name: one component, no `/`, no NUL.
    Plain(&'a [u8]),
}

/// Classifies a name from a client: `Inval` for an empty name or one
/// containing `/` or NUL (it would be several components, or be cut short
/// by the host), `NameTooLong` beyond [`NAME_MAX`].
pub(crate) fn check_name(name: &[u8]) -> NfsResult<Name<'_>> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(NfsError::Inval);
    }
    if name.len() > NAME_MAX {
        return Err(NfsError::NameTooLong);
    }
    Ok(match name {
        b"." => Name::Dot,
        b".." => Name::DotDot,
        _ => Name::Plain(name),
    })
}

/// A name that is to be created, removed or renamed: `.` and `..` are
/// refused with `dot` (knfsd: EXIST for create, ACCES for remove, PERM for
/// rename).
pub(crate) fn plain_name(name: &[u8], dot: NfsError) -> NfsResult<&[u8]> {
    match check_name(name)? {
        Name::Plain(n) => Ok(n),
        Name::Dot | Name::DotDot => Err(dot),
    }
}

fn os(name: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(name)
}

/// Opens one component below `dir` without following it if it is a
/// symlink; `flags` are added to `O_NOFOLLOW | O_CLOEXEC`.
pub(crate) fn open_child<Fd: AsFd>(dir: Fd, name: &[u8], flags: OFlags) -> NfsResult<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(openat(dir, os(name), flags, Mode::empty())?)
}

/// [`open_child`] for an `O_PATH` descriptor, with its attributes.
pub(crate) fn lookup_child<Fd: AsFd>(dir: Fd, name: &[u8]) -> NfsResult<(OwnedFd, Attr, Ident)> {
    let fd = open_child(dir, name, OFlags::PATH)?;
    let (attr, ident) = stat_fd(&fd)?;
    Ok((fd, attr, ident))
}

/// The parent of a directory (`..` of a descriptor).
pub(crate) fn open_parent<Fd: AsFd>(dir: Fd) -> NfsResult<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(openat(dir, "..", flags, Mode::empty())?)
}

/// Whether the directory `dir` still hangs below the directory `root`
/// (a local process may have moved it out of the export): walks `..` up
/// to `root`, at most [`MAX_DEPTH`] steps. `Stale` when it is not below.
pub(crate) fn connected(dir: &OwnedFd, root: &Ident) -> NfsResult<()> {
    let (_, mut here) = stat_fd(dir)?;
    let mut cur = None::<OwnedFd>;
    for _ in 0..MAX_DEPTH {
        if (here.dev, here.ino) == (root.dev, root.ino) {
            return Ok(());
        }
        let up = open_parent(cur.as_ref().unwrap_or(dir))?;
        let (_, above) = stat_fd(&up)?;
        if (above.dev, above.ino) == (here.dev, here.ino) {
            // At the host's root: `root` was not on the way.
            return Err(NfsError::Stale);
        }
        here = above;
        cur = Some(up);
    }
    Err(NfsError::Stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(check_name(b"a"), Ok(Name::Plain(b"a")));
        assert_eq!(check_name(b"."), Ok(Name::Dot));
        assert_eq!(check_name(b".."), Ok(Name::DotDot));
        assert_eq!(check_name(b"...").map(|_| ()), Ok(()));
        assert_eq!(check_name(b""), Err(NfsError::Inval));
        assert_eq!(check_name(b"a/b"), Err(NfsError::Inval));
        assert_eq!(check_name(b"../x"), Err(NfsError::Inval));
        assert_eq!(check_name(b"/"), Err(NfsError::Inval));
        assert_eq!(check_name(b"a\0b"), Err(NfsError::Inval));
        assert_eq!(check_name(&[b'x'; 255]).map(|_| ()), Ok(()));
        assert_eq!(check_name(&[b'x'; 256]), Err(NfsError::NameTooLong));
        assert_eq!(plain_name(b"..", NfsError::Exist), Err(NfsError::Exist));
    }
}
