//! The server's dispatch under fuzzing (`fuzzing::fuzz_nfs_dispatch`):
//! arguments decoded as the server decodes them, run on a scratch export,
//! the results encoded and decoded back.
//!
//! The input is `[proc selector, room selector, arguments…]`. Handles of
//! one octet in the decoded arguments stand for the scratch export's
//! objects (the root, a file, a directory, a symlink pointing out, a
//! forged handle), so the fuzzer reaches the operations rather than only
//! NFS3ERR_BADHANDLE. After every input: nothing outside the export
//! changed, and the results re-decode to themselves.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use rpcrdma::Message;

use super::convert::fh_out;
use super::procs::{execute, Env};
use crate::binding::message::{decode_args, decode_res, encode_res};
use crate::fs::{self, Export, ExportConfig};
use crate::nfs3::{FileHandle, Nfs3Args, PROCEDURES};
use crate::Limits;

struct Scratch {
    base: PathBuf,
    export: Export,
}

fn scratch() -> &'static Mutex<Scratch> {
    static S: OnceLock<Mutex<Scratch>> = OnceLock::new();
    S.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("rpcrdma-nfs-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("export")).expect("scratch export");
        std::fs::create_dir_all(base.join("outside")).expect("scratch outside");
        std::fs::write(base.join("outside/secret"), b"outside").expect("scratch secret");
        let config = ExportConfig {
            max_handles: 4096,
            max_dir_entries: 64,
            ..ExportConfig::default()
        };
        let export = Export::new(base.join("export"), config).expect("scratch export");
        Mutex::new(Scratch { base, export })
    })
}

impl Scratch {
    /// The fixture's objects (re-made if an input removed them) and a
    /// forged handle.
    fn handles(&self) -> Vec<fs::FileHandle> {
        let p = self.base.join("export");
        if !p.join("f").exists() {
            let _ = std::fs::write(p.join("f"), b"file data");
        }
        let _ = std::fs::create_dir(p.join("d"));
        let _ = std::os::unix::fs::symlink("../outside/secret", p.join("l"));
        let root = self.export.root();
        let mut v = vec![root.clone()];
        for name in [&b"f"[..], b"d", b"l"] {
            if let Ok(l) = self.export.lookup(&root, name) {
                v.push(l.handle);
            }
        }
        let mut forged = root.as_bytes().to_vec();
        if let Some(b) = forged.last_mut() {
            *b ^= 1;
        }
        v.extend(fs::FileHandle::from_bytes(&forged));
        v
    }

    fn outside_intact(&self) -> bool {
        let o = self.base.join("outside");
        std::fs::read(o.join("secret")).is_ok_and(|d| d == b"outside")
            && std::fs::read_dir(&o).is_ok_and(|d| d.count() == 1)
    }
}

/// Every handle of `args`.
fn handles_mut(args: &mut Nfs3Args) -> Vec<&mut FileHandle> {
    match args {
        Nfs3Args::Null(()) => vec![],
        Nfs3Args::Getattr(a) => vec![&mut a.object],
        Nfs3Args::Setattr(a) => vec![&mut a.object],
        Nfs3Args::Lookup(a) => vec![&mut a.what.dir],
        Nfs3Args::Access(a) => vec![&mut a.object],
        Nfs3Args::Readlink(a) => vec![&mut a.symlink],
        Nfs3Args::Read(a) => vec![&mut a.file],
        Nfs3Args::Write(a) => vec![&mut a.file],
        Nfs3Args::Create(a) => vec![&mut a.place.dir],
        Nfs3Args::Mkdir(a) => vec![&mut a.place.dir],
        Nfs3Args::Symlink(a) => vec![&mut a.place.dir],
        Nfs3Args::Remove(a) | Nfs3Args::Rmdir(a) => vec![&mut a.object.dir],
        Nfs3Args::Rename(a) => vec![&mut a.from.dir, &mut a.to.dir],
        Nfs3Args::Readdir(a) => vec![&mut a.dir],
        Nfs3Args::Readdirplus(a) => vec![&mut a.dir],
        Nfs3Args::Fsstat(a) | Nfs3Args::Fsinfo(a) | Nfs3Args::Pathconf(a) => {
            vec![&mut a.object]
        }
        Nfs3Args::Commit(a) => vec![&mut a.file],
    }
}

/// See the module documentation. Panics only on a real bug.
pub(crate) fn dispatch(data: &[u8]) {
    let [sel, room, args @ ..] = data else { return };
    let proc = PROCEDURES[*sel as usize % PROCEDURES.len()];
    let l = Limits::DEFAULT;
    let msg = Message::inline(bytes::Bytes::copy_from_slice(args));
    let Ok(mut args) = decode_args(proc, &msg, &l) else {
        return;
    };
    let s = scratch().lock().unwrap_or_else(|p| p.into_inner());
    let known = s.handles();
    for fh in handles_mut(&mut args) {
        if let [i] = fh.0[..] {
            *fh = fh_out(&known[i as usize % known.len()]);
        }
    }
    // A reply room from tiny to unbounded.
    let room = match room {
        0..=63 => u64::from(*room) * 64,
        64..=127 => u64::from(*room) << 10,
        _ => u64::MAX,
    };
    let env = Env {
        limits: l,
        room,
        bufs: super::bufpool::BufPool::new(l.rtmax as usize, 2),
        file_chunk: None,
    };
    let res = execute(&s.export, args, &env);
    let m = encode_res(&res).expect("results encode");
    let back = decode_res(proc, &m, &l).expect("the server's results decode");
    assert_eq!(back, res, "results re-decode differently");
    assert!(s.outside_intact(), "something outside the export changed");
}
