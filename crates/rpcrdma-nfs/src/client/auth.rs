//! AUTH_SYS credentials of the calling process (RFC 5531 App. A), as
//! Linux's client sends them: effective uid and gid, up to 16
//! supplementary groups, the host name as machine name.

use rpcrdma::Auth;
use rpcrdma_proto::wire::rpc::AuthSysParms;

/// Most supplementary groups AUTH_SYS carries (RFC 5531 App. A:
/// `unsigned int gids<16>`).
const MAX_GIDS: usize = 16;
/// Longest machine name (`string machinename<255>`).
const MAX_MACHINE_NAME: usize = 255;

/// AUTH_SYS with the uid, gid and groups of this process.
pub fn caller_auth_sys() -> Auth {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let mut gids: Vec<u32> = rustix::process::getgroups()
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.as_raw())
        .filter(|&g| g != gid)
        .collect();
    gids.truncate(MAX_GIDS);
    let uname = rustix::system::uname();
    let mut host = uname.nodename().to_bytes().to_vec();
    host.truncate(MAX_MACHINE_NAME);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    match AuthSysParms::new(stamp, host, uid, gid, gids) {
        Ok(p) => Auth::Sys(p),
        // Unreachable with the truncations above; AUTH_SYS as root of
        // nothing rather than a panic.
        Err(_) => Auth::None,
    }
}

/// AUTH_SYS with the given uid and gid (no groups), machine name as this
/// host's.
pub fn auth_sys(uid: u32, gid: u32) -> Auth {
    match caller_auth_sys() {
        Auth::Sys(mut p) => {
            p.uid = uid;
            p.gid = gid;
            p.gids.clear();
            Auth::Sys(p)
        }
        a => a,
    }
}
