//! From `SERVER:/export/path` to a working client: MOUNT over TCP for the
//! root handle, NFSv3 over RPC-over-RDMA.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaClientTransport};
use rpcrdma::ClientConfig;

use super::error::NfsError;
use super::mount::MountClient;
use super::path::components;
use super::{NfsClient, NfsClientOptions};
use crate::nfs3::FileHandle;

/// A parsed `SERVER:/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Host name or address (an IPv6 address without its brackets).
    pub host: String,
    /// The absolute path on the server (export path, then the path within
    /// the export).
    pub path: String,
}

/// Parses `SERVER:/path` (`[v6addr]:/path` for an IPv6 address).
pub fn parse_target(s: &str) -> Result<Target, NfsError> {
    let bad = || NfsError::Caller(format!("{s:?}: expected SERVER:/path"));
    let (host, path) = match s.strip_prefix('[') {
        Some(rest) => {
            let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
            (h, p)
        }
        None => s.split_once(':').ok_or_else(bad)?,
    };
    if host.is_empty() || !path.starts_with('/') {
        return Err(bad());
    }
    Ok(Target {
        host: host.to_string(),
        path: path.to_string(),
    })
}

/// How to reach the server.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// NFS over RPC-over-RDMA port (Linux: 20049).
    pub nfs_port: u16,
    /// MOUNT over TCP port (no rpcbind look-up).
    pub mount_port: u16,
    /// The RPC-over-RDMA connection (provider, engine, reconnection).
    pub rdma: RdmaClientConfig,
    /// Connection setup and per-call reply timeout of MOUNT; per-call
    /// reply timeout of NFS calls (the engine's `call_timeout` in `rdma`
    /// governs retransmission over RDMA).
    pub timeout: Duration,
    /// The NFS client's settings (credentials used for MOUNT too).
    pub nfs: NfsClientOptions,
}

/// A mounted export.
#[derive(Debug)]
pub struct Session {
    /// The NFS client.
    pub nfs: NfsClient,
    /// Its RPC-over-RDMA connection (status, counters).
    pub transport: Arc<RdmaClientTransport>,
    /// The MOUNT connection (kept for UMNT).
    pub mount: MountClient,
    /// The export path mounted.
    pub export: String,
    /// The rest of the target path, inside the export (may be empty).
    pub rest: String,
}

impl Session {
    /// UMNT (errors ignored: the server forgets nothing that matters) and
    /// closes both connections.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.mount.umnt(&self.export)).await;
        self.mount.close();
        self.transport.shutdown().await;
    }
}

async fn resolve(host: &str, port: u16, service: &'static str) -> Result<SocketAddr, NfsError> {
    let err = |detail: String| NfsError::Connect {
        service,
        addr: format!("{host}:{port}"),
        detail,
    };
    let mut addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| err(e.to_string()))?;
    addrs.next().ok_or_else(|| err("no address".into()))
}

/// Mounts the export holding `target.path` and connects NFS over
/// RPC-over-RDMA.
///
/// The export is the longest path of the server's EXPORT list that
/// contains `target.path` (component by component); when EXPORT fails or
/// lists none, MNT is tried on the path and then on each parent. The rest
/// of the path is [`Session::rest`], for [`NfsClient::lookup_path`].
pub async fn connect(target: &Target, o: &ConnectOptions) -> Result<Session, NfsError> {
    let maddr = resolve(&target.host, o.mount_port, "MOUNT over TCP").await?;
    let naddr = resolve(&target.host, o.nfs_port, "NFS over RPC-over-RDMA").await?;
    let mount = MountClient::connect(maddr, o.nfs.auth.clone(), o.timeout).await?;
    let (export, root) = mount_best(&mount, &target.path).await?;
    let rest = rest_of(&target.path, &export);
    let config = ClientConfig {
        timeout: o.timeout,
        auth: o.nfs.auth.clone(),
        ..ClientConfig::default()
    };
    let (rpc, transport) = connect_client(naddr, config, o.rdma.clone())
        .await
        .map_err(|e| NfsError::Connect {
            service: "NFS over RPC-over-RDMA",
            addr: naddr.to_string(),
            detail: e.to_string(),
        })?;
    let nfs = match NfsClient::new(rpc, root, o.nfs.clone()).await {
        Ok(n) => n,
        Err(e) => {
            transport.shutdown().await;
            return Err(e);
        }
    };
    Ok(Session {
        nfs,
        transport,
        mount,
        export,
        rest,
    })
}

/// Whether `prefix`'s components begin `path`'s.
fn is_prefix(prefix: &str, path: &str) -> bool {
    match (components(prefix), components(path)) {
        (Ok(a), Ok(b)) => b.starts_with(&a),
        _ => false,
    }
}

/// `path` without the components of `export`.
fn rest_of(path: &str, export: &str) -> String {
    let n = components(export).map_or(0, |c| c.len());
    components(path)
        .map(|c| c.get(n..).unwrap_or_default().join("/"))
        .unwrap_or_default()
}

/// The export to mount for `path` and its root handle.
async fn mount_best(mount: &MountClient, path: &str) -> Result<(String, FileHandle), NfsError> {
    let mut candidates: Vec<String> = Vec::new();
    if let Ok(list) = mount.exports().await {
        let mut dirs: Vec<String> = list
            .0
            .iter()
            .map(|e| String::from_utf8_lossy(e.dir.as_bytes()).into_owned())
            .filter(|d| is_prefix(d, path))
            .collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(components(d).map_or(0, |c| c.len())));
        candidates.extend(dirs);
    }
    let parts = components(path)?;
    for n in (0..=parts.len()).rev() {
        let p = format!("/{}", parts.get(..n).unwrap_or_default().join("/"));
        if !candidates.contains(&p) {
            candidates.push(p);
        }
    }
    let mut first_refusal = None;
    for c in candidates {
        match mount.mnt(&c).await {
            Ok(ok) => return Ok((c, ok.fhandle)),
            Err(e @ NfsError::Mount { .. }) => {
                first_refusal.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(first_refusal.unwrap_or_else(|| NfsError::Caller(format!("nothing to mount for {path:?}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t = parse_target("127.0.0.1:/srv/nfs/a").unwrap();
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("127.0.0.1", "/srv/nfs/a")
        );
        let t = parse_target("[::1]:/x").unwrap();
        assert_eq!((t.host.as_str(), t.path.as_str()), ("::1", "/x"));
        for bad in ["host", "host:rel", ":/x", "[::1]/x", ""] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prefixes_are_whole_components() {
        assert!(is_prefix("/srv/nfs", "/srv/nfs/interop/file16m"));
        assert!(is_prefix("/", "/anything"));
        assert!(is_prefix("/srv/nfs/", "/srv/nfs"));
        assert!(!is_prefix("/srv/nf", "/srv/nfs/x"));
        assert!(!is_prefix("/srv/nfs/x", "/srv/nfs"));
        assert_eq!(
            rest_of("/srv/nfs/interop/file16m", "/srv/nfs"),
            "interop/file16m"
        );
        assert_eq!(rest_of("/srv/nfs", "/srv/nfs"), "");
        assert_eq!(rest_of("/a/./b//c", "/"), "a/b/c");
    }
}
