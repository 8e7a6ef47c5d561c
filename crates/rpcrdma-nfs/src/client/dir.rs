//! Listing a directory: READDIRPLUS from cookie 0 with the cookie
//! verifier until end of directory.

use std::collections::HashSet;

use super::error::NfsError;
use super::NfsClient;
use crate::nfs3::{Entryplus3, FileHandle, Nfsstat3};

/// Most READDIRPLUS calls one listing makes (a server that never reports
/// end of directory is cut off).
pub const MAX_DIR_CALLS: u32 = 65_536;

/// Most entries [`NfsClient::list_dir`] collects (about 200 octets of
/// memory each); [`NfsClient::list_dir_with`] keeps none.
pub const MAX_LIST_ENTRIES: usize = 1 << 20;

impl NfsClient {
    /// Every entry of directory `dir` (`.` and `..` included when the
    /// server lists them), in the server's order.
    ///
    /// The server is to blame ([`NfsError::BadReply`]) for a reply that
    /// makes no progress (no entry and no end of directory), a cookie it
    /// gave before (a loop), or more than [`MAX_DIR_CALLS`] calls.
    /// At most [`MAX_LIST_ENTRIES`] entries (more is an error).
    pub async fn list_dir(&self, dir: &FileHandle) -> Result<Vec<Entryplus3>, NfsError> {
        let mut out = Vec::new();
        self.list_dir_with(dir, |e| {
            if out.len() + e.len() > MAX_LIST_ENTRIES {
                return Err(NfsError::Caller(format!(
                    "more than {MAX_LIST_ENTRIES} entries: list the directory with list_dir_with"
                )));
            }
            out.extend_from_slice(e);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// [`NfsClient::list_dir`] without collecting: `each` is called with
    /// each reply's entries as they arrive. Returns the number of entries.
    pub async fn list_dir_with(
        &self,
        dir: &FileHandle,
        mut each: impl FnMut(&[Entryplus3]) -> Result<(), NfsError>,
    ) -> Result<u64, NfsError> {
        let maxcount = self.options().dir_maxcount.max(1024);
        let mut count = 0u64;
        let mut cookie = 0u64;
        let mut verf = [0u8; 8];
        let mut seen: HashSet<u64> = HashSet::new();
        for _ in 0..MAX_DIR_CALLS {
            //= rfc1813#section-3.3.17
            //# cookieverf
            //#    This should be set to 0 on the first request to read a
            //#    directory. On subsequent requests, it should be a
            //#    cookieverf as returned by the server. The cookieverf
            //#    must match that returned by the READDIRPLUS call in
            //#    which the cookie was acquired.
            let r = match self.readdirplus(dir, cookie, verf, maxcount).await {
                Ok(r) => r,
                Err(e) if e.status() == Some(Nfsstat3::NFS3ERR_BAD_COOKIE) && cookie != 0 => {
                    return Err(NfsError::bad_reply(
                        "NFS READDIRPLUS",
                        format!("the server refused its own cookie {cookie} ({e})"),
                    ));
                }
                Err(e) => return Err(e),
            };
            verf = r.cookieverf;
            let entries = r.reply.entries;
            let eof = r.reply.eof;
            if entries.is_empty() && !eof {
                return Err(NfsError::bad_reply(
                    "NFS READDIRPLUS",
                    format!("no entry and no end of directory after cookie {cookie}"),
                ));
            }
            each(&entries)?;
            if let Some(last) = entries.last() {
                if !seen.insert(last.cookie) || (last.cookie == 0 && !eof) {
                    return Err(NfsError::bad_reply(
                        "NFS READDIRPLUS",
                        format!("cookie {} given twice: the listing would loop", last.cookie),
                    ));
                }
                cookie = last.cookie;
            }
            count += entries.len() as u64;
            if eof {
                return Ok(count);
            }
        }
        Err(NfsError::bad_reply(
            "NFS READDIRPLUS",
            format!("no end of directory after {MAX_DIR_CALLS} calls"),
        ))
    }
}
