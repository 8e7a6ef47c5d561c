//! What the server counts and reports: calls per procedure, argument
//! errors, and the credentials calls came with.
//!
//! AUTH_SYS credentials are decoded (by the runtime) and **reported**, not
//! enforced: every operation runs with the server process's own
//! credentials (`crate::fs`, "Permissions"). The report keeps one counter
//! per distinct (flavor, uid, gid, machine name), at most
//! [`MAX_CREDENTIALS`] of them (the rest are counted together), so a
//! client cannot grow it without bound.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rpcrdma_proto::wire::rpc::OpaqueAuth;

/// Distinct credentials the report keeps apart.
pub const MAX_CREDENTIALS: usize = 64;
/// Octets of a machine name the report keeps.
const MACHINE_NAME_MAX: usize = 64;

/// A caller's credential as reported.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Credential {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS: uid, gid, supplementary gids and the machine name (cut
    /// to 64 octets, lossy UTF-8).
    Sys {
        /// Effective user id.
        uid: u32,
        /// Effective group id.
        gid: u32,
        /// Supplementary groups.
        gids: Vec<u32>,
        /// The caller's machine name.
        machine: String,
    },
    /// Another flavor (the runtime refuses them: not counted in practice).
    Other(u32),
}

impl Credential {
    /// The credential of a call.
    pub fn of(cred: &OpaqueAuth) -> Self {
        match cred {
            OpaqueAuth::Sys(p) => {
                let n = p.machinename.len().min(MACHINE_NAME_MAX);
                Credential::Sys {
                    uid: p.uid,
                    gid: p.gid,
                    gids: p.gids.clone(),
                    machine: String::from_utf8_lossy(&p.machinename[..n]).into_owned(),
                }
            }
            OpaqueAuth::Opaque { flavor, .. } if flavor.0 == 0 => Credential::None,
            OpaqueAuth::Opaque { flavor, .. } => Credential::Other(flavor.0),
        }
    }
}

impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::None => write!(f, "AUTH_NONE"),
            Credential::Sys {
                uid,
                gid,
                gids,
                machine,
            } => write!(
                f,
                "AUTH_SYS uid={uid} gid={gid} gids={gids:?} machine={machine:?}"
            ),
            Credential::Other(n) => write!(f, "flavor {n}"),
        }
    }
}

/// The server's counters (shared by every connection).
#[derive(Default)]
pub(crate) struct Stats {
    procs: [AtomicU64; 22],
    garbage_args: AtomicU64,
    arg_status: AtomicU64,
    credentials: Mutex<(BTreeMap<Credential, u64>, u64)>,
}

impl Stats {
    /// A call of procedure `proc` with `cred`.
    pub(crate) fn call(&self, proc: u32, cred: &OpaqueAuth) {
        if let Some(c) = self.procs.get(proc as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let key = Credential::of(cred);
        let mut g = self.credentials.lock().unwrap_or_else(|p| p.into_inner());
        let (map, overflow) = &mut *g;
        if let Some(n) = map.get_mut(&key) {
            *n += 1;
        } else if map.len() < MAX_CREDENTIALS {
            map.insert(key, 1);
        } else {
            *overflow += 1;
        }
    }

    /// Arguments that did not decode (GARBAGE_ARGS).
    pub(crate) fn garbage(&self) {
        self.garbage_args.fetch_add(1, Ordering::Relaxed);
    }

    /// Arguments refused with an `nfsstat3` (NAMETOOLONG, INVAL).
    pub(crate) fn refused(&self) {
        self.arg_status.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let g = self.credentials.lock().unwrap_or_else(|p| p.into_inner());
        StatsSnapshot {
            procs: self
                .procs
                .iter()
                .enumerate()
                .map(|(i, c)| (i as u32, c.load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            garbage_args: self.garbage_args.load(Ordering::Relaxed),
            arg_status: self.arg_status.load(Ordering::Relaxed),
            credentials: g.0.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            other_credentials: g.1,
        }
    }
}

/// The counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Calls per NFSv3 procedure number (only those called).
    pub procs: Vec<(u32, u64)>,
    /// Calls answered GARBAGE_ARGS.
    pub garbage_args: u64,
    /// Calls whose arguments decoded but were refused with an `nfsstat3`.
    pub arg_status: u64,
    /// Calls per credential (at most [`MAX_CREDENTIALS`] distinct ones).
    pub credentials: Vec<(Credential, u64)>,
    /// Calls with a credential beyond the first [`MAX_CREDENTIALS`].
    pub other_credentials: u64,
}

impl StatsSnapshot {
    /// Calls of procedure `proc`.
    pub fn calls(&self, proc: u32) -> u64 {
        self.procs
            .iter()
            .find(|&&(p, _)| p == proc)
            .map_or(0, |&(_, n)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::wire::rpc::AuthSysParms;

    fn sys(uid: u32) -> OpaqueAuth {
        OpaqueAuth::sys(AuthSysParms::new(1, b"host", uid, 100, vec![1, 2]).unwrap())
    }

    #[test]
    fn credentials_are_reported_and_bounded() {
        let s = Stats::default();
        s.call(1, &sys(7));
        s.call(1, &sys(7));
        s.call(6, &OpaqueAuth::none());
        for uid in 0..200 {
            s.call(0, &sys(1000 + uid));
        }
        let snap = s.snapshot();
        assert_eq!(snap.calls(1), 2);
        assert_eq!(snap.calls(6), 1);
        assert_eq!(snap.calls(0), 200);
        assert_eq!(snap.credentials.len(), MAX_CREDENTIALS);
        let seven = Credential::Sys {
            uid: 7,
            gid: 100,
            gids: vec![1, 2],
            machine: "host".into(),
        };
        assert!(snap.credentials.contains(&(seven, 2)));
        assert!(snap.credentials.contains(&(Credential::None, 1)));
        let kept: u64 = snap.credentials.iter().map(|(_, n)| n).sum();
        assert_eq!(kept + snap.other_credentials, 203);
    }
}
