//! A scripted NFSv3 + MOUNT server for the client's tests: hand-built
//! replies on the real runtime (NFS over the in-memory RDMA provider, so
//! the engine's chunks are real; MOUNT over TCP on 127.0.0.1), with knobs
//! for what a misbehaving server does.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::rdma::{ProviderConfig, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{CallContext, HandlerError, Message, Server, TcpConfig, TcpServer};
use rpcrdma_nfs::binding::message::{decode_args, encode_inline, encode_res, inline_bytes};
use rpcrdma_nfs::mount::{
    Dirpath, Export, Exports, MountArgs, MountRes, MountResOk, MountResults, Mountstat3,
    MOUNT_PROGRAM, MOUNT_V3,
};
use rpcrdma_nfs::nfs3::*;
use rpcrdma_nfs::Limits;
use rpcrdma_proto::provider::mem_cm::MemNetwork;
use rpcrdma_proto::wire::rpc::OpaqueAuth;
use rpcrdma_proto::xdr::Reader;

pub const ROOT: &[u8] = b"root-handle";
pub const DIRVERF: [u8; 8] = *b"dirverf1";

/// What the server does.
#[derive(Clone, Debug)]
pub struct Knobs {
    pub rtmax: u32,
    pub wtmax: u32,
    /// READ returns at most this many octets (no eof unless at the end).
    pub short_read: Option<u32>,
    /// READ returns 0 octets without eof.
    pub zero_read: bool,
    /// READ's count word says one more than the data.
    pub read_count_lies: bool,
    /// WRITE writes at most this many octets.
    pub short_write: Option<u32>,
    /// WRITE answers this stability.
    pub committed: StableHow,
    /// This many COMMITs "reboot" the server first: new write verifier,
    /// uncommitted data lost.
    pub reboots_at_commit: u32,
    /// Every WRITE reply carries a new verifier.
    pub verifier_per_write: bool,
    /// READDIRPLUS entries of the root (synthetic names `e00000`…).
    pub dir_entries: u32,
    /// READDIRPLUS starts over at cookie 0 whatever is asked.
    pub loop_cookie: bool,
    /// Answer this procedure with 12 octets of 0xff.
    pub garbage: Option<u32>,
    /// Delay before each READ / WRITE reply.
    pub delay: Duration,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            rtmax: 1 << 20,
            wtmax: 1 << 20,
            short_read: None,
            zero_read: false,
            read_count_lies: false,
            short_write: None,
            committed: StableHow::UNSTABLE,
            reboots_at_commit: 0,
            verifier_per_write: false,
            dir_entries: 0,
            loop_cookie: false,
            garbage: None,
            delay: Duration::ZERO,
        }
    }
}

#[derive(Default, Debug)]
pub struct State {
    /// What a READ sees (volatile).
    pub files: HashMap<Vec<u8>, Vec<u8>>,
    /// What survives a reboot.
    pub stable: HashMap<Vec<u8>, Vec<u8>>,
    pub verf: u64,
    /// Procedures called, in order.
    pub calls: Vec<u32>,
    /// READDIRPLUS (cookie, verifier) asked.
    pub dir_calls: Vec<(u64, [u8; 8])>,
    pub in_flight: u32,
    pub max_in_flight: u32,
    /// AUTH_SYS (uid, gid) of the last call.
    pub last_cred: Option<(u32, u32)>,
}

pub struct Fake {
    pub knobs: Mutex<Knobs>,
    pub state: Mutex<State>,
}

fn fattr(size: u64, dir: bool) -> Fattr3 {
    let t = Nfstime3 {
        seconds: 1,
        nseconds: 0,
    };
    Fattr3 {
        ftype: if dir { Ftype3::NF3DIR } else { Ftype3::NF3REG },
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: Specdata3 {
            specdata1: 0,
            specdata2: 0,
        },
        fsid: 1,
        fileid: 7,
        atime: t.clone(),
        mtime: t.clone(),
        ctime: t,
    }
}

fn file_handle(name: &[u8]) -> FileHandle {
    let mut h = b"file:".to_vec();
    h.extend_from_slice(name);
    FileHandle(h)
}

impl Fake {
    pub fn new(knobs: Knobs) -> Arc<Fake> {
        Arc::new(Fake {
            knobs: Mutex::new(knobs),
            state: Mutex::new(State::default()),
        })
    }

    pub fn knobs(&self) -> Knobs {
        self.knobs.lock().unwrap().clone()
    }

    pub fn put_file(&self, name: &str, data: Vec<u8>) {
        let mut s = self.state.lock().unwrap();
        let h = file_handle(name.as_bytes()).0;
        s.files.insert(h.clone(), data.clone());
        s.stable.insert(h, data);
    }

    pub fn file(&self, name: &str) -> Option<Vec<u8>> {
        let h = file_handle(name.as_bytes()).0;
        self.state.lock().unwrap().files.get(&h).cloned()
    }

    pub fn count(&self, proc: u32) -> usize {
        let s = self.state.lock().unwrap();
        s.calls.iter().filter(|&&p| p == proc).count()
    }

    fn verf(&self) -> [u8; 8] {
        self.state.lock().unwrap().verf.to_be_bytes()
    }

    /// Serves NFSv3 over the in-memory RDMA provider on `net`.
    pub async fn serve_nfs(self: &Arc<Self>, net: &MemNetwork) -> RdmaServer {
        let server = Server::default();
        let me = self.clone();
        server.register(NFS_PROGRAM, NFS_V3, move |ctx: CallContext| {
            let me = me.clone();
            async move { me.nfs(ctx).await }
        });
        let cfg = RdmaServerConfig {
            provider: ProviderConfig::Mem(net.clone()),
            ..RdmaServerConfig::default()
        };
        RdmaServer::serve(&server, "127.0.0.1:0", cfg)
            .await
            .unwrap()
    }

    /// Serves MOUNT over TCP on 127.0.0.1: `/export` is the only export.
    pub async fn serve_mount(self: &Arc<Self>) -> TcpServer {
        let server = Server::default();
        server.register(MOUNT_PROGRAM, MOUNT_V3, |ctx: CallContext| async move {
            let inline = inline_bytes(&ctx.args);
            let mut r = Reader::new(&inline);
            let args = MountArgs::decode(ctx.proc, &mut r, &Limits::DEFAULT)
                .map_err(|e| HandlerError::GarbageArgs(e.to_string()))?;
            // A path under /garbage gets 12 octets of 0xff as results.
            if matches!(&args, MountArgs::Mnt(p) if p.as_bytes().starts_with(b"/garbage")) {
                return Ok(Message::inline(vec![0xffu8; 12]));
            }
            let res = match args {
                MountArgs::Null | MountArgs::Umnt(_) => MountResults::Void,
                MountArgs::Mnt(p) if p.as_bytes() == b"/export" => {
                    MountResults::Mnt(MountRes::Ok(MountResOk {
                        fhandle: FileHandle(ROOT.to_vec()),
                        auth_flavors: vec![1],
                    }))
                }
                MountArgs::Mnt(_) => MountResults::Mnt(MountRes::Fail(Mountstat3::MNT3ERR_NOENT)),
                MountArgs::Export => MountResults::Export(Exports(vec![Export {
                    dir: Dirpath::from("/export"),
                    groups: vec![],
                }])),
            };
            encode_inline(&res).map_err(|e| HandlerError::SystemErr(e.to_string()))
        });
        server
            .serve_tcp("127.0.0.1:0", TcpConfig::default())
            .await
            .unwrap()
    }

    async fn nfs(&self, ctx: CallContext) -> Result<Message, HandlerError> {
        let args = decode_args(ctx.proc, &ctx.args, &Limits::DEFAULT)
            .map_err(|e| HandlerError::GarbageArgs(e.to_string()))?;
        let knobs = self.knobs();
        {
            let mut s = self.state.lock().unwrap();
            s.calls.push(ctx.proc);
            s.in_flight += 1;
            s.max_in_flight = s.max_in_flight.max(s.in_flight);
            if let OpaqueAuth::Sys(p) = &ctx.cred {
                s.last_cred = Some((p.uid, p.gid));
            }
        }
        let slow = matches!(args, Nfs3Args::Read(_) | Nfs3Args::Write(_));
        if slow && !knobs.delay.is_zero() {
            tokio::time::sleep(knobs.delay).await;
        }
        let res = self.answer(args, &knobs);
        self.state.lock().unwrap().in_flight -= 1;
        if knobs.garbage == Some(ctx.proc) {
            return Ok(Message::inline(vec![0xffu8; 12]));
        }
        encode_res(&res).map_err(|e| HandlerError::SystemErr(e.to_string()))
    }

    fn answer(&self, args: Nfs3Args, k: &Knobs) -> Nfs3Res {
        let wcc = WccData::empty;
        match args {
            Nfs3Args::Null(()) => Nfs3Res::Null(()),
            Nfs3Args::Fsinfo(_) => Nfs3Res::Fsinfo(Res::Ok(FsinfoResOk {
                obj_attributes: None,
                rtmax: k.rtmax,
                rtpref: k.rtmax,
                rtmult: 4096,
                wtmax: k.wtmax,
                wtpref: k.wtmax,
                wtmult: 4096,
                dtpref: 4096,
                maxfilesize: u64::MAX,
                time_delta: Nfstime3 {
                    seconds: 0,
                    nseconds: 1,
                },
                properties: 0,
            })),
            Nfs3Args::Getattr(a) => {
                let s = self.state.lock().unwrap();
                match (a.object.0.as_slice(), s.files.get(&a.object.0)) {
                    (ROOT, _) => Nfs3Res::Getattr(Res::Ok(fattr(0, true))),
                    (_, Some(f)) => Nfs3Res::Getattr(Res::Ok(fattr(f.len() as u64, false))),
                    _ => Nfs3Res::Getattr(Res::Fail(Nfsstat3::NFS3ERR_STALE, ())),
                }
            }
            Nfs3Args::Lookup(a) => {
                let h = file_handle(&a.what.name.0);
                let s = self.state.lock().unwrap();
                match s.files.get(&h.0) {
                    Some(f) if a.what.dir.0 == ROOT => Nfs3Res::Lookup(Res::Ok(LookupResOk {
                        object: h,
                        obj_attributes: Some(fattr(f.len() as u64, false)),
                        dir_attributes: None,
                    })),
                    _ => Nfs3Res::Lookup(Res::Fail(Nfsstat3::NFS3ERR_NOENT, None)),
                }
            }
            Nfs3Args::Create(a) => {
                let h = file_handle(&a.place.name.0);
                let mut s = self.state.lock().unwrap();
                s.files.insert(h.0.clone(), Vec::new());
                s.stable.insert(h.0.clone(), Vec::new());
                Nfs3Res::Create(Res::Ok(CreateResOk {
                    obj: Some(h),
                    obj_attributes: Some(fattr(0, false)),
                    dir_wcc: wcc(),
                }))
            }
            Nfs3Args::Remove(a) => {
                let h = file_handle(&a.object.name.0);
                let mut s = self.state.lock().unwrap();
                match s.files.remove(&h.0) {
                    Some(_) => Nfs3Res::Remove(Res::Ok(wcc())),
                    None => Nfs3Res::Remove(Res::Fail(Nfsstat3::NFS3ERR_NOENT, wcc())),
                }
            }
            Nfs3Args::Read(a) => self.read(a, k),
            Nfs3Args::Write(a) => self.write(a, k),
            Nfs3Args::Commit(_) => {
                let mut s = self.state.lock().unwrap();
                if self.knobs.lock().unwrap().reboots_at_commit > 0 {
                    self.knobs.lock().unwrap().reboots_at_commit -= 1;
                    s.verf += 1;
                    s.files = s.stable.clone();
                } else {
                    s.stable = s.files.clone();
                }
                Nfs3Res::Commit(Res::Ok(CommitResOk {
                    file_wcc: wcc(),
                    verf: s.verf.to_be_bytes(),
                }))
            }
            Nfs3Args::Readdirplus(a) => self.readdirplus(a, k),
            other => Nfs3Res::failure(other.proc(), Nfsstat3::NFS3ERR_NOTSUPP).unwrap(),
        }
    }

    fn read(&self, a: ReadArgs, k: &Knobs) -> Nfs3Res {
        let s = self.state.lock().unwrap();
        let Some(f) = s.files.get(&a.file.0) else {
            return Nfs3Res::Read(Res::Fail(Nfsstat3::NFS3ERR_STALE, None));
        };
        let mut n = a.count.min(k.rtmax) as usize;
        if let Some(m) = k.short_read {
            n = n.min(m as usize);
        }
        let start = (a.offset as usize).min(f.len());
        let end = (start + n).min(f.len());
        let mut eof = end == f.len();
        let mut data = Bytes::copy_from_slice(&f[start..end]);
        if k.zero_read {
            data = Bytes::new();
            eof = false;
        }
        let count = data.len() as u32 + u32::from(k.read_count_lies);
        Nfs3Res::Read(Res::Ok(ReadResOk {
            file_attributes: None,
            count,
            eof,
            data,
        }))
    }

    fn write(&self, a: WriteArgs, k: &Knobs) -> Nfs3Res {
        let mut s = self.state.lock().unwrap();
        if k.verifier_per_write {
            s.verf += 1;
        }
        let verf = s.verf.to_be_bytes();
        let Some(f) = s.files.get_mut(&a.file.0) else {
            return Nfs3Res::Write(Res::Fail(Nfsstat3::NFS3ERR_STALE, WccData::empty()));
        };
        let n = a
            .data
            .len()
            .min(k.wtmax as usize)
            .min(k.short_write.unwrap_or(u32::MAX) as usize);
        let off = a.offset as usize;
        if f.len() < off + n {
            f.resize(off + n, 0);
        }
        f[off..off + n].copy_from_slice(&a.data[..n]);
        let committed = k.committed;
        if committed != StableHow::UNSTABLE {
            let v = f.clone();
            s.stable.insert(a.file.0.clone(), v);
        }
        Nfs3Res::Write(Res::Ok(WriteResOk {
            file_wcc: WccData::empty(),
            count: n as u32,
            committed,
            verf,
        }))
    }

    fn readdirplus(&self, a: ReaddirplusArgs, k: &Knobs) -> Nfs3Res {
        self.state
            .lock()
            .unwrap()
            .dir_calls
            .push((a.cookie, a.cookieverf));
        if a.cookie != 0 && a.cookieverf != DIRVERF {
            return Nfs3Res::Readdirplus(Res::Fail(Nfsstat3::NFS3ERR_BAD_COOKIE, None));
        }
        let start = if k.loop_cookie { 0 } else { a.cookie };
        // The head (status, dir_attributes FALSE, cookieverf) and the end
        // of the list (FALSE, eof) count against maxcount.
        let mut used = 4 + 4 + 8 + 8;
        let mut entries = Vec::new();
        let mut i = start;
        while i < u64::from(k.dir_entries) {
            let e = Entryplus3 {
                fileid: 1000 + i,
                name: Filename(format!("e{i:05}").into_bytes()),
                cookie: i + 1,
                name_attributes: Some(fattr(0, false)),
                name_handle: Some(file_handle(format!("e{i:05}").as_bytes())),
            };
            let len = 4 + rpcrdma_nfs::codec::Codec::xdr_len(&e);
            if used + len > a.maxcount as usize {
                break;
            }
            used += len;
            entries.push(e);
            i += 1;
        }
        Nfs3Res::Readdirplus(Res::Ok(ReaddirplusResOk {
            dir_attributes: None,
            cookieverf: DIRVERF,
            reply: Dirlist {
                eof: i >= u64::from(k.dir_entries),
                entries,
            },
        }))
    }
}

/// The client settings of a connection over `net` (no reconnection).
pub fn rdma_config(net: &MemNetwork) -> RdmaClientConfig {
    RdmaClientConfig {
        provider: ProviderConfig::Mem(net.clone()),
        reconnect: None,
        ..RdmaClientConfig::default()
    }
}
