//! The open-file cache: READ, WRITE and COMMIT reuse a descriptor of the
//! file instead of resolving the handle (a walk of `..` up to the export
//! root for the file's directory, then an `openat` and a `statx` of the
//! file) and opening it again on every call — the role of knfsd's
//! `nfsd_file` cache.
//!
//! * Bounded: at most [`ExportConfig::open_files`] descriptors; when full,
//!   the least recently used one is closed.
//! * Closed when idle for [`ExportConfig::open_file_idle`]
//!   ([`Export::sweep_open_files`], which the server calls periodically,
//!   and lazily when an idle entry is met), and at once when a client
//!   REMOVEs, RENAMEs (either side) or SETATTRs the object through this
//!   export, or when it turns out unlinked (`nlink` 0 after an operation).
//! * Only regular files are cached, with the access mode asked (read, or
//!   read-write/write).
//!
//! What a cached descriptor changes: a local process (not a client) that
//! moves a file out of the export, removes it or changes its mode may see
//! clients keep reading or writing it through the cached descriptor for
//! at most the idle time — as with knfsd, which also keeps files open
//! across calls.
//!
//! [`ExportConfig::open_files`]: super::ExportConfig::open_files
//! [`ExportConfig::open_file_idle`]: super::ExportConfig::open_file_idle
//! [`Export::sweep_open_files`]: super::Export::sweep_open_files

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The access a cached descriptor was opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// `O_RDONLY`.
    Read,
    /// `O_WRONLY` (or `O_RDWR`).
    Write,
}

struct Slot {
    fd: Arc<File>,
    used: Instant,
}

pub(crate) struct OpenFiles {
    slots: Mutex<HashMap<(u64, Access), Slot>>,
    max: usize,
    idle: Duration,
}

impl OpenFiles {
    /// At most `max` descriptors (0: no caching), each closed after `idle`
    /// without use.
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        OpenFiles {
            slots: Mutex::new(HashMap::new()),
            max,
            idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(u64, Access), Slot>> {
        // Every update is one insert or remove: a panic elsewhere left the
        // map consistent.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached descriptor of entry `id` for `access`, if any (an idle
    /// one is closed instead).
    pub(crate) fn get(&self, id: u64, access: Access, now: Instant) -> Option<Arc<File>> {
        let mut g = self.lock();
        let slot = g.get_mut(&(id, access))?;
        if now.saturating_duration_since(slot.used) >= self.idle {
            g.remove(&(id, access));
            return None;
        }
        slot.used = now;
        Some(slot.fd.clone())
    }

    /// Caches `fd` for entry `id`, closing the least recently used
    /// descriptor when full.
    pub(crate) fn put(&self, id: u64, access: Access, fd: Arc<File>, now: Instant) {
        if self.max == 0 {
            return;
        }
        let mut g = self.lock();
        if g.len() >= self.max && !g.contains_key(&(id, access)) {
            let oldest = g.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k);
            if let Some(k) = oldest {
                g.remove(&k);
            }
        }
        g.insert((id, access), Slot { fd, used: now });
    }

    /// Closes the descriptors of entry `id` (both access modes). A call
    /// still using one keeps it open until it is done.
    pub(crate) fn forget(&self, id: u64) {
        let mut g = self.lock();
        g.remove(&(id, Access::Read));
        g.remove(&(id, Access::Write));
    }

    /// Closes every descriptor idle for the idle time; returns how many.
    pub(crate) fn sweep(&self, now: Instant) -> usize {
        let mut g = self.lock();
        let before = g.len();
        g.retain(|_, s| now.saturating_duration_since(s.used) < self.idle);
        before - g.len()
    }

    /// Descriptors cached now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> Arc<File> {
        Arc::new(File::open("/dev/null").unwrap())
    }

    #[test]
    fn bounded_least_recently_used_first() {
        let c = OpenFiles::new(2, Duration::from_secs(60));
        let t = Instant::now();
        c.put(1, Access::Read, fd(), t);
        c.put(2, Access::Read, fd(), t + Duration::from_millis(1));
        // 1 is used again: 2 is now the least recently used.
        assert!(c
            .get(1, Access::Read, t + Duration::from_millis(2))
            .is_some());
        c.put(3, Access::Write, fd(), t + Duration::from_millis(3));
        assert_eq!(c.len(), 2);
        assert!(c.get(2, Access::Read, t).is_none());
        assert!(c.get(1, Access::Read, t).is_some());
        assert!(c.get(3, Access::Write, t).is_some());
        // The access mode is part of the key.
        assert!(c.get(3, Access::Read, t).is_none());
    }

    #[test]
    fn idle_descriptors_close() {
        let c = OpenFiles::new(8, Duration::from_secs(2));
        let t = Instant::now();
        c.put(1, Access::Read, fd(), t);
        c.put(2, Access::Read, fd(), t + Duration::from_secs(1));
        assert_eq!(c.sweep(t + Duration::from_millis(2500)), 1);
        assert!(c
            .get(2, Access::Read, t + Duration::from_millis(2500))
            .is_some());
        // Met idle: closed instead of returned.
        assert!(c
            .get(2, Access::Read, t + Duration::from_secs(10))
            .is_none());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn forget_closes_both_modes_and_zero_disables() {
        let c = OpenFiles::new(8, Duration::from_secs(60));
        let t = Instant::now();
        c.put(5, Access::Read, fd(), t);
        c.put(5, Access::Write, fd(), t);
        c.forget(5);
        assert_eq!(c.len(), 0);
        let off = OpenFiles::new(0, Duration::from_secs(60));
        off.put(1, Access::Read, fd(), t);
        assert_eq!(off.len(), 0);
    }
}
