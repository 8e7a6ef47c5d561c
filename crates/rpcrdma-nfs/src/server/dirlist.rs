//! READDIR and READDIRPLUS within the reply's byte budget.
//!
//! The budget of one reply is the smallest of
//! * the client's `count` (READDIR) or `maxcount` (READDIRPLUS), which
//!   RFC 1813 makes the largest `READDIR3resok` / `READDIRPLUS3resok`
//!   "including all XDR overhead" (we count the status word too);
//! * the server's [`Limits::max_dir_reply`];
//! * what the transport can carry ([`Env::room`]: over RPC-over-RDMA the
//!   larger of the inline threshold and the client's Reply chunk — a
//!   reply that fits neither would be answered ERR_CHUNK, RFC 8166
//!   §3.5.3).
//!
//! The export lists a number of entries estimated from the budget (a
//! typical entry's size, at most the export's entry cap); the list is then
//! cut at the last entry that fits, with `eof` FALSE when anything was
//! cut: each entry carries its own cookie, so the client resumes after the
//! last entry it got. A budget too small for even one entry is
//! NFS3ERR_TOOSMALL. READDIRPLUS's `dircount` is not used, as knfsd does
//! not (Linux's client sends `maxcount / 8` for it); only `maxcount`
//! bounds the reply.

use super::convert::{fh_in, fh_out, post, status};
use super::procs::{attr_of, Env};
use crate::codec::Codec;
use crate::fs::{self, Export, NfsError};
use crate::nfs3::*;

/// The status word, `dir_attributes` at its largest, `cookieverf`, the
/// last `FALSE` link and `eof`: the octets of an empty list.
const FIXED: u64 = 4 + (4 + 84) + 8 + 4 + 4;
/// A typical `entry3` with its link word (a name of up to 8 octets): how
/// many entries to ask the export for.
const TYPICAL_ENTRY: u64 = 4 + 8 + (4 + 8) + 8;
/// A typical `entryplus3` (attributes and a 29-octet handle present).
const TYPICAL_ENTRY_PLUS: u64 = TYPICAL_ENTRY + (4 + 84) + (4 + 4 + 32);

/// The octets the entries may take, or `None` when not even the fixed part
/// fits.
fn entry_budget(client_count: u32, env: &Env) -> Option<u64> {
    let budget = u64::from(client_count)
        .min(u64::from(env.limits.max_dir_reply))
        .min(env.room);
    budget.checked_sub(FIXED)
}

/// How many entries to list for `room` octets of entries of `typical` size.
fn wanted(room: u64, typical: u64) -> usize {
    usize::try_from(room / typical + 1).unwrap_or(usize::MAX)
}

/// Keeps the longest prefix of `entries` whose encodings (each with its
/// link word) fit `room`; `eof` stays only if nothing was cut. `TooSmall`
/// if entries were listed and none fits.
fn trim<E: Codec>(entries: &mut Vec<E>, eof: &mut bool, room: u64) -> Result<(), NfsError> {
    let mut used = 0u64;
    let keep = entries
        .iter()
        .take_while(|e| {
            used += 4 + e.xdr_len() as u64;
            used <= room
        })
        .count();
    if keep < entries.len() {
        if keep == 0 {
            return Err(NfsError::TooSmall);
        }
        entries.truncate(keep);
        *eof = false;
    }
    Ok(())
}

fn entry(e: &fs::DirEntry) -> Entry3 {
    Entry3 {
        fileid: e.fileid,
        name: Filename(e.name.clone()),
        cookie: e.cookie,
    }
}

/// READDIR.
//= rfc1813#section-3.3.16
//# The maximum size of the READDIR3resok structure, in
//# bytes.  The size must include all XDR overhead. The
//# server is free to return less than count bytes of
//# data.
pub(crate) fn readdir(e: &Export, a: &ReaddirArgs, env: &Env) -> ReaddirRes {
    let run = || -> Result<ReaddirResOk, NfsError> {
        let room = entry_budget(a.count, env).ok_or(NfsError::TooSmall)?;
        let dir = fh_in(&a.dir)?;
        let r = e.readdir(&dir, a.cookie, a.cookieverf, wanted(room, TYPICAL_ENTRY))?;
        let mut entries: Vec<Entry3> = r.entries.iter().map(entry).collect();
        let mut eof = r.eof;
        trim(&mut entries, &mut eof, room)?;
        Ok(ReaddirResOk {
            dir_attributes: post(&r.dir_attr),
            cookieverf: r.verf,
            reply: Dirlist { entries, eof },
        })
    };
    match run() {
        Ok(ok) => Res::Ok(ok),
        Err(err) => Res::Fail(status(err), attr_of(e, &a.dir)),
    }
}

/// READDIRPLUS.
//= rfc1813#section-3.3.17
//# The maximum size of the READDIRPLUS3resok structure, in
//# bytes. The size must include all XDR overhead. The
//# server is free to return fewer than maxcount bytes of
//# data.
pub(crate) fn readdirplus(e: &Export, a: &ReaddirplusArgs, env: &Env) -> ReaddirplusRes {
    let run = || -> Result<ReaddirplusResOk, NfsError> {
        let room = entry_budget(a.maxcount, env).ok_or(NfsError::TooSmall)?;
        let dir = fh_in(&a.dir)?;
        let want = wanted(room, TYPICAL_ENTRY_PLUS);
        let r = e.readdirplus(&dir, a.cookie, a.cookieverf, want)?;
        let mut entries: Vec<Entryplus3> = r
            .entries
            .iter()
            .map(|p| {
                let Entry3 {
                    fileid,
                    name,
                    cookie,
                } = entry(&p.entry);
                Entryplus3 {
                    fileid,
                    name,
                    cookie,
                    name_attributes: p.attr.as_ref().and_then(post),
                    name_handle: p.handle.as_ref().map(fh_out),
                }
            })
            .collect();
        let mut eof = r.eof;
        trim(&mut entries, &mut eof, room)?;
        Ok(ReaddirplusResOk {
            dir_attributes: post(&r.dir_attr),
            cookieverf: r.verf,
            reply: Dirlist { entries, eof },
        })
    };
    match run() {
        Ok(ok) => Res::Ok(ok),
        Err(err) => Res::Fail(status(err), attr_of(e, &a.dir)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e3(name: &[u8]) -> Entry3 {
        Entry3 {
            fileid: 1,
            name: Filename(name.to_vec()),
            cookie: 2,
        }
    }

    #[test]
    fn trim_keeps_what_fits_and_clears_eof() {
        // Each: link 4 + fileid 8 + name 4+4 + cookie 8 = 28.
        let mut v = vec![e3(b"a"), e3(b"b"), e3(b"c")];
        let mut eof = true;
        trim(&mut v, &mut eof, 3 * 28).unwrap();
        assert_eq!((v.len(), eof), (3, true));
        trim(&mut v, &mut eof, 3 * 28 - 1).unwrap();
        assert_eq!((v.len(), eof), (2, false));
        let mut eof = true;
        assert_eq!(trim(&mut v, &mut eof, 27), Err(NfsError::TooSmall));
        // An empty list always fits.
        let mut none: Vec<Entry3> = Vec::new();
        trim(&mut none, &mut eof, 0).unwrap();
    }

    #[test]
    fn budget_is_the_smallest_bound() {
        let env = |room| Env {
            limits: crate::Limits::DEFAULT,
            room,
            bufs: super::super::bufpool::BufPool::new(64, 1),
            file_chunk: None,
        };
        assert_eq!(entry_budget(4096, &env(u64::MAX)), Some(4096 - FIXED));
        assert_eq!(
            entry_budget(1 << 30, &env(u64::MAX)),
            Some((1 << 20) - FIXED)
        );
        assert_eq!(entry_budget(4096, &env(1000)), Some(1000 - FIXED));
        assert_eq!(entry_budget(FIXED as u32 - 1, &env(u64::MAX)), None);
    }
}
