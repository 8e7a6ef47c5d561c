//! Paths inside an export: LOOKUP one component at a time.

use super::error::NfsError;
use super::NfsClient;
use crate::nfs3::{Fattr3, FileHandle};

/// Most components a path may have (a path of at most 1024 octets has at
/// most 512).
pub const MAX_PATH_COMPONENTS: usize = 512;

/// The components of `path` (`/`-separated; empty and `.` components
/// dropped, `..` kept for the server to resolve, as Linux's client sends
/// it for a path typed by the user).
pub fn components(path: &str) -> Result<Vec<&str>, NfsError> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.len() > MAX_PATH_COMPONENTS {
        return Err(NfsError::Caller(format!(
            "path of {} components (most {MAX_PATH_COMPONENTS})",
            parts.len()
        )));
    }
    Ok(parts)
}

impl NfsClient {
    /// LOOKUP along `path` (relative to the export root; a leading `/` is
    /// allowed): the object's handle and attributes (GETATTR when LOOKUP
    /// returned none). The empty path is the root.
    pub async fn lookup_path(&self, path: &str) -> Result<(FileHandle, Fattr3), NfsError> {
        let mut fh = self.root().clone();
        let mut attrs = None;
        let mut walked = String::new();
        for part in components(path)? {
            walked.push('/');
            walked.push_str(part);
            let r = self
                .lookup(&fh, part.as_bytes())
                .await
                .map_err(|e| match e {
                    NfsError::Status { proc, status, .. } => NfsError::Status {
                        proc,
                        status,
                        what: format!("{walked:?}"),
                    },
                    e => e,
                })?;
            fh = r.object;
            attrs = r.obj_attributes;
        }
        let attrs = match attrs {
            Some(a) => a,
            None => self.getattr(&fh).await?,
        };
        Ok((fh, attrs))
    }
}
