//! The bodies of `rpcrdma nfs ls|get|put|stat` on a mounted export, and
//! what each prints.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma_nfs::client::{components, NfsClient, NfsError, Session, WriteSource, WriteSummary};
use rpcrdma_nfs::nfs3::{
    Createhow3, Entryplus3, Fattr3, FileHandle, Ftype3, Nfsstat3, Sattr3, StableHow,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::client::Op;

/// One listed entry.
#[derive(Debug)]
pub(super) struct EntryOut {
    name: String,
    fileid: u64,
    attrs: Option<Fattr3>,
}

/// What a command did.
#[derive(Debug)]
pub(super) enum Done {
    Ls(Vec<EntryOut>),
    Get {
        bytes: u64,
        sha256: Option<String>,
        local: String,
    },
    Put {
        bytes: u64,
        sha256: Option<String>,
        summary: WriteSummary,
        remote: String,
    },
    Stat(Fattr3),
}

/// Runs `op` on the mounted export of `s`.
pub(super) async fn run(
    op: Op,
    s: &Session,
    local: Option<&str>,
    digest: bool,
) -> Result<Done, NfsError> {
    match op {
        Op::Ls => ls(&s.nfs, &s.rest).await,
        Op::Get => get(&s.nfs, &s.rest, local, digest).await,
        Op::Put => put(&s.nfs, &s.rest, local.unwrap_or_default(), digest).await,
        Op::Stat => Ok(Done::Stat(s.nfs.lookup_path(&s.rest).await?.1)),
    }
}

fn last_name(path: &str) -> Option<&str> {
    components(path).ok()?.last().copied()
}

fn parent_of(path: &str) -> String {
    let c = components(path).unwrap_or_default();
    c.get(..c.len().saturating_sub(1))
        .unwrap_or_default()
        .join("/")
}

async fn ls(nfs: &NfsClient, path: &str) -> Result<Done, NfsError> {
    let (fh, attrs) = nfs.lookup_path(path).await?;
    if attrs.ftype != Ftype3::NF3DIR {
        return Ok(Done::Ls(vec![EntryOut {
            name: last_name(path).unwrap_or("/").to_string(),
            fileid: attrs.fileid,
            attrs: Some(attrs),
        }]));
    }
    let mut out = Vec::new();
    nfs.list_dir_with(&fh, |entries| {
        out.extend(
            entries
                .iter()
                .filter(|e| e.name.0 != b"." && e.name.0 != b"..")
                .map(entry_out),
        );
        Ok(())
    })
    .await?;
    Ok(Done::Ls(out))
}

fn entry_out(e: &Entryplus3) -> EntryOut {
    EntryOut {
        name: String::from_utf8_lossy(&e.name.0).into_owned(),
        fileid: e.fileid,
        attrs: e.name_attributes.clone(),
    }
}

async fn get(
    nfs: &NfsClient,
    path: &str,
    local: Option<&str>,
    digest: bool,
) -> Result<Done, NfsError> {
    let (fh, attrs) = nfs.lookup_path(path).await?;
    if attrs.ftype != Ftype3::NF3REG {
        return Err(NfsError::Caller(format!(
            "{path:?} is not a regular file ({})",
            attrs.ftype
        )));
    }
    let local = match local {
        Some(l) => l.to_string(),
        None => last_name(path)
            .ok_or_else(|| NfsError::Caller("the export root is not a file".into()))?
            .to_string(),
    };
    let mut out: Box<dyn Write> = if local == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            std::fs::File::create(&local)
                .map_err(|e| NfsError::Caller(format!("creating {local:?}: {e}")))?,
        )
    };
    let mut h = Sha256::new();
    let bytes = nfs
        .read_file(&fh, Some(attrs.size), |b| {
            if digest {
                h.update(b);
            }
            out.write_all(b)
                .map_err(|e| NfsError::Caller(format!("writing {local:?}: {e}")))
        })
        .await?;
    out.flush()
        .map_err(|e| NfsError::Caller(format!("writing {local:?}: {e}")))?;
    Ok(Done::Get {
        bytes,
        sha256: digest.then(|| hex(&h.finalize())),
        local,
    })
}

/// The directory to create in and the name, for `put` to `path`.
async fn put_place(
    nfs: &NfsClient,
    path: &str,
    local: &str,
) -> Result<(FileHandle, String), NfsError> {
    let local_name = std::path::Path::new(local)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| NfsError::Caller(format!("{local:?} names no file")))?;
    match nfs.lookup_path(path).await {
        Ok((fh, a)) if a.ftype == Ftype3::NF3DIR => Ok((fh, local_name)),
        Ok(_) => {
            let (dir, _) = nfs.lookup_path(&parent_of(path)).await?;
            Ok((dir, last_name(path).unwrap_or_default().to_string()))
        }
        Err(e) if e.status() == Some(Nfsstat3::NFS3ERR_NOENT) => {
            let (dir, _) = nfs.lookup_path(&parent_of(path)).await?;
            let name = last_name(path).ok_or(e)?;
            Ok((dir, name.to_string()))
        }
        Err(e) => Err(e),
    }
}

async fn put(nfs: &NfsClient, path: &str, local: &str, digest: bool) -> Result<Done, NfsError> {
    use std::os::unix::fs::PermissionsExt;
    let file = std::fs::File::open(local)
        .map_err(|e| NfsError::Caller(format!("opening {local:?}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| NfsError::Caller(format!("{local:?}: {e}")))?;
    if !meta.is_file() {
        return Err(NfsError::Caller(format!("{local:?} is not a regular file")));
    }
    let (dir, name) = put_place(nfs, path, local).await?;
    let attrs = Sattr3 {
        mode: Some(meta.permissions().mode() & 0o7777),
        size: Some(0),
        ..Sattr3::none()
    };
    let (fh, _) = nfs
        .create(&dir, name.as_bytes(), Createhow3::Unchecked(attrs))
        .await?;
    let src: Arc<dyn WriteSource> = Arc::new((file, meta.len()));
    let mut h = Sha256::new();
    let summary = nfs
        .write_file(&fh, src, StableHow::UNSTABLE, |b: &Bytes| {
            if digest {
                h.update(b)
            }
        })
        .await?;
    let parent = parent_of(path);
    let remote = match nfs.lookup_path(path).await {
        Ok((_, a)) if a.ftype == Ftype3::NF3DIR => format!("{}/{name}", path.trim_end_matches('/')),
        _ if parent.is_empty() => name.clone(),
        _ => format!("{parent}/{name}"),
    };
    Ok(Done::Put {
        bytes: summary.bytes,
        sha256: digest.then(|| hex(&h.finalize())),
        summary,
        remote,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ftype_name(t: Ftype3) -> &'static str {
    match t {
        Ftype3::NF3REG => "file",
        Ftype3::NF3DIR => "directory",
        Ftype3::NF3LNK => "symlink",
        Ftype3::NF3BLK => "block",
        Ftype3::NF3CHR => "char",
        Ftype3::NF3SOCK => "socket",
        Ftype3::NF3FIFO => "fifo",
        _ => "unknown",
    }
}

fn attrs_json(a: &Fattr3) -> Value {
    let t = |t: &rpcrdma_nfs::nfs3::Nfstime3| json!([t.seconds, t.nseconds]);
    json!({
        "type": ftype_name(a.ftype),
        "mode": format!("{:04o}", a.mode),
        "nlink": a.nlink,
        "uid": a.uid,
        "gid": a.gid,
        "size": a.size,
        "used": a.used,
        "fsid": a.fsid,
        "fileid": a.fileid,
        "atime": t(&a.atime),
        "mtime": t(&a.mtime),
        "ctime": t(&a.ctime),
    })
}

fn rate(bytes: u64, elapsed: Duration) -> String {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        format!("{:.1} MB/s", bytes as f64 / s / 1e6)
    } else {
        "-".into()
    }
}

impl Done {
    /// Fills the JSON object's fields.
    pub(super) fn fill_json(&self, j: &mut Value) {
        match self {
            Done::Ls(entries) => {
                j["entries"] = Value::Array(
                    entries
                        .iter()
                        .map(|e| {
                            json!({
                                "name": e.name,
                                "fileid": e.fileid,
                                "type": e.attrs.as_ref().map(|a| ftype_name(a.ftype)),
                                "mode": e.attrs.as_ref().map(|a| format!("{:04o}", a.mode)),
                                "size": e.attrs.as_ref().map(|a| a.size),
                            })
                        })
                        .collect(),
                );
            }
            Done::Get { bytes, sha256, .. } | Done::Put { bytes, sha256, .. } => {
                j["bytes"] = json!(bytes);
                j["sha256"] = json!(sha256);
            }
            Done::Stat(a) => {
                j["bytes"] = json!(a.size);
                j["attributes"] = attrs_json(a);
            }
        }
    }

    /// The text output.
    pub(super) fn print_summary(&self, op: Op, elapsed: Duration) {
        match self {
            Done::Ls(entries) => {
                let mut out = std::io::stdout().lock();
                for e in entries {
                    let (t, mode, size) = e
                        .attrs
                        .as_ref()
                        .map_or(("?", 0, 0), |a| (ftype_name(a.ftype), a.mode, a.size));
                    let _ = writeln!(out, "{t:9} {mode:04o} {size:>12} {}", e.name);
                }
                eprintln!(
                    "{} entries in {:.3} s",
                    entries.len(),
                    elapsed.as_secs_f64()
                );
            }
            Done::Get {
                bytes,
                sha256,
                local,
            } => eprintln!(
                "{}: {bytes} octets to {local} in {:.3} s ({}), sha256 {}",
                op.name(),
                elapsed.as_secs_f64(),
                rate(*bytes, elapsed),
                sha256.as_deref().unwrap_or("not computed")
            ),
            Done::Put {
                bytes,
                sha256,
                summary,
                remote,
            } => eprintln!(
                "{}: {bytes} octets to {remote} in {:.3} s ({}), {} WRITEs, {} COMMITs, sha256 {}",
                op.name(),
                elapsed.as_secs_f64(),
                rate(*bytes, elapsed),
                summary.writes,
                summary.commits,
                sha256.as_deref().unwrap_or("not computed")
            ),
            Done::Stat(a) => println!("{}", attrs_json(a)),
        }
    }
}
