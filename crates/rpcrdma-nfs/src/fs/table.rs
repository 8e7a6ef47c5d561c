//! The handle table: what each handle's entry id stands for.
//!
//! A directory entry holds an `O_PATH` descriptor of the directory, so it
//! follows the directory through renames (by clients or local processes).
//! Any other object is held by the names it is known under: (parent
//! directory entry, name) pairs, one per hard link seen; it is re-opened
//! below that parent with `O_NOFOLLOW` and must still be the same object
//! (device, inode, birth time), else that link is dropped. An entry whose
//! links are all gone, or a directory that was removed, is forgotten: its
//! handles are `Stale` from then on. Entry ids are never reused.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};

use super::attr::{stat_fd, Attr, FileType, Ident};
use super::error::{NfsError, NfsResult};
use super::resolve::{connected, lookup_child};

/// One name of a non-directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) parent: u64,
    pub(crate) name: Vec<u8>,
}

enum Node {
    Dir(Arc<OwnedFd>),
    Leaf(Vec<Link>),
}

struct Entry {
    ident: Ident,
    node: Node,
}

struct Inner {
    entries: HashMap<u64, Entry>,
    by_inode: HashMap<(u64, u64), u64>,
    next: u64,
}

/// A resolved object: an `O_PATH` descriptor and fresh attributes.
pub(crate) struct Obj {
    pub(crate) id: u64,
    pub(crate) fd: Arc<OwnedFd>,
    pub(crate) attr: Attr,
    pub(crate) ident: Ident,
    /// For a non-directory: the directory and name it was reached by.
    pub(crate) link: Option<(Arc<OwnedFd>, Vec<u8>)>,
}

pub(crate) struct Table {
    inner: Mutex<Inner>,
    root: Ident,
    limit: usize,
}

/// The entry id of the export root.
pub(crate) const ROOT: u64 = 1;

impl Table {
    /// A table whose entry [`ROOT`] is the directory `root`; at most
    /// `limit` entries.
    pub(crate) fn new(root: OwnedFd, limit: usize) -> NfsResult<Self> {
        let (attr, ident) = stat_fd(&root)?;
        if attr.ftype != FileType::Directory {
            return Err(NfsError::NotDir);
        }
        let mut entries = HashMap::new();
        entries.insert(
            ROOT,
            Entry {
                ident,
                node: Node::Dir(Arc::new(root)),
            },
        );
        let by_inode = HashMap::from([((ident.dev, ident.ino), ROOT)]);
        Ok(Table {
            inner: Mutex::new(Inner {
                entries,
                by_inode,
                next: ROOT + 1,
            }),
            root: ident,
            limit: limit.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock was held left the maps consistent (every
        // update is a single insert or remove), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn root_ident(&self) -> Ident {
        self.root
    }

    /// How many objects the table knows.
    pub(crate) fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// The object entry `id` stands for, checked to still exist and to be
    /// inside the export; `Stale` otherwise.
    pub(crate) fn resolve(&self, id: u64) -> NfsResult<Obj> {
        let (ident, node) = {
            let g = self.lock();
            let e = g.entries.get(&id).ok_or(NfsError::Stale)?;
            let node = match &e.node {
                Node::Dir(fd) => Node::Dir(fd.clone()),
                Node::Leaf(links) => Node::Leaf(links.clone()),
            };
            (e.ident, node)
        };
        match node {
            Node::Dir(fd) => self.resolve_dir(id, ident, fd),
            Node::Leaf(links) => self.resolve_leaf(id, ident, links),
        }
    }

    fn resolve_dir(&self, id: u64, ident: Ident, fd: Arc<OwnedFd>) -> NfsResult<Obj> {
        let (attr, now) = stat_fd(&*fd)?;
        if now != ident || attr.nlink == 0 {
            // Removed (a directory's descriptor outlives its name).
            self.forget(id);
            return Err(NfsError::Stale);
        }
        // Moved out of the export by a local process: stale while it is
        // outside (it may come back).
        connected(&fd, &self.root)?;
        Ok(Obj {
            id,
            fd,
            attr,
            ident,
            link: None,
        })
    }

    fn resolve_leaf(&self, id: u64, ident: Ident, links: Vec<Link>) -> NfsResult<Obj> {
        for link in links {
            let dir = match self.resolve(link.parent) {
                Ok(dir) => dir,
                // The parent is gone for good: so is this name.
                Err(NfsError::Stale) if !self.lock().entries.contains_key(&link.parent) => {
                    self.drop_link(id, &link);
                    continue;
                }
                // The parent is outside the export for now (it may return).
                Err(NfsError::Stale) => continue,
                Err(other) => return Err(other),
            };
            match lookup_child(&*dir.fd, &link.name) {
                Ok((fd, attr, now)) if now == ident => {
                    return Ok(Obj {
                        id,
                        fd: Arc::new(fd),
                        attr,
                        ident,
                        link: Some((dir.fd, link.name)),
                    })
                }
                // Another object (or a symlink) under that name now, or none.
                Ok(_) | Err(NfsError::NoEnt) => self.drop_link(id, &link),
                Err(other) => return Err(other),
            }
        }
        Err(NfsError::Stale)
    }

    /// The entry id for an object just reached as `name` below directory
    /// entry `parent` (`fd` is its `O_PATH` descriptor). A directory keeps
    /// `fd`; another object gains the link.
    pub(crate) fn intern(
        &self,
        parent: u64,
        name: &[u8],
        fd: OwnedFd,
        attr: &Attr,
        ident: Ident,
    ) -> NfsResult<u64> {
        let mut g = self.lock();
        let key = (ident.dev, ident.ino);
        if let Some(&id) = g.by_inode.get(&key) {
            let e = g.entries.get_mut(&id).expect("by_inode names live entries");
            if e.ident == ident {
                if let Node::Leaf(links) = &mut e.node {
                    let link = Link {
                        parent,
                        name: name.to_vec(),
                    };
                    if !links.contains(&link) {
                        links.push(link);
                    }
                }
                return Ok(id);
            }
            // The inode number was reused by a new object: the old entry
            // names something that no longer exists.
            g.entries.remove(&id);
            g.by_inode.remove(&key);
        }
        if g.entries.len() >= self.limit {
            return Err(NfsError::ServerFault);
        }
        let id = g.next;
        g.next += 1;
        let node = if attr.ftype == FileType::Directory {
            Node::Dir(Arc::new(fd))
        } else {
            Node::Leaf(vec![Link {
                parent,
                name: name.to_vec(),
            }])
        };
        g.entries.insert(id, Entry { ident, node });
        g.by_inode.insert(key, id);
        Ok(id)
    }

    /// Whether entry `id` is still in the table.
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.lock().entries.contains_key(&id)
    }

    /// The entry id already given to an object, if any.
    pub(crate) fn known(&self, ident: &Ident) -> Option<u64> {
        let g = self.lock();
        let id = *g.by_inode.get(&(ident.dev, ident.ino))?;
        (g.entries[&id].ident == *ident).then_some(id)
    }

    /// Forgets an entry (its handles become `Stale`).
    pub(crate) fn forget(&self, id: u64) {
        if id == ROOT {
            return;
        }
        let mut g = self.lock();
        if let Some(e) = g.entries.remove(&id) {
            g.by_inode.remove(&(e.ident.dev, e.ident.ino));
        }
    }

    /// Forgets one name of a non-directory; the entry goes with its last.
    pub(crate) fn drop_link(&self, id: u64, link: &Link) {
        let empty = {
            let mut g = self.lock();
            match g.entries.get_mut(&id).map(|e| &mut e.node) {
                Some(Node::Leaf(links)) => {
                    links.retain(|l| l != link);
                    links.is_empty()
                }
                _ => false,
            }
        };
        if empty {
            self.forget(id);
        }
    }

    /// A client renamed `from` to `to`: the object keeps its entry (and
    /// so its handles) under the new name.
    pub(crate) fn rename_link(&self, id: u64, from: &Link, to: Link) {
        let mut g = self.lock();
        if let Some(Node::Leaf(links)) = g.entries.get_mut(&id).map(|e| &mut e.node) {
            links.retain(|l| l != from && *l != to);
            links.push(to);
        }
    }
}
