//! The NFSv3 server against a hostile client over loopback software
//! iWARP: confinement (`..`, symlinks pointing out, handles of another
//! export, forged handles), bad arguments (GARBAGE_ARGS, NFS3ERR_INVAL,
//! NFS3ERR_NAMETOOLONG), the MOUNT service's answers, and no panic on any
//! input of the `nfs_args` fuzz corpus sent as the arguments of every
//! procedure.

mod served;

use bytes::Bytes;
use rpcrdma::ReplyError;
use rpcrdma_nfs::mount::Mountstat3;
use rpcrdma_nfs::nfs3::*;
use rpcrdma_nfs::server::NfsService;
use served::*;

fn read_args(fh: &FileHandle) -> Nfs3Args {
    Nfs3Args::Read(ReadArgs {
        file: fh.clone(),
        offset: 0,
        count: 100,
    })
}

async fn read_status(s: &Served, fh: &FileHandle) -> Nfsstat3 {
    match s.call(&read_args(fh)).await {
        Nfs3Res::Read(r) => r.status(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outside_the_export_is_reached() {
    bounded(async {
        let s = Served::start().await;
        let root = s.root.clone();
        // `..` of the root is the root.
        assert_eq!(s.lookup(&root, b"..").await, Ok(root.clone()));
        // A name that is a path: NFS3ERR_INVAL (never two components).
        assert_eq!(
            s.lookup(&root, b"../outside").await,
            Err(Nfsstat3::NFS3ERR_INVAL)
        );
        // A symlink pointing out: LOOKUP gives the link itself, READ on it
        // is NFS3ERR_INVAL, READLINK gives the text (never followed).
        std::os::unix::fs::symlink("../outside/secret", s.dir.path("out")).unwrap();
        let ln = s.lookup(&root, b"out").await.unwrap();
        assert_eq!(read_status(&s, &ln).await, Nfsstat3::NFS3ERR_INVAL);
        match s
            .call(&Nfs3Args::Readlink(ReadlinkArgs {
                symlink: ln.clone(),
            }))
            .await
        {
            Nfs3Res::Readlink(Res::Ok(r)) => assert_eq!(r.data.0, b"../outside/secret"),
            other => panic!("{other:?}"),
        }
        // A directory symlink pointing out is not a directory to LOOKUP in.
        std::os::unix::fs::symlink(s.dir.base.join("outside"), s.dir.path("outdir")).unwrap();
        let od = s.lookup(&root, b"outdir").await.unwrap();
        assert_eq!(
            s.lookup(&od, b"secret").await,
            Err(Nfsstat3::NFS3ERR_NOTDIR)
        );
        // CREATE through a symlink's name does not write outside.
        let r = s
            .call(&Nfs3Args::Create(CreateArgs {
                place: diropargs(&root, b"out"),
                how: Createhow3::Unchecked(Sattr3 {
                    size: Some(0),
                    ..Sattr3::none()
                }),
            }))
            .await;
        match r {
            Nfs3Res::Create(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_EXIST),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read_local(&s.dir.base.join("outside/secret")),
            b"outside data"
        );

        // A handle of another export (another server instance): STALE.
        let other_dir = Dir::new();
        let other = NfsService::new(other_dir.export(), Default::default()).unwrap();
        let foreign = FileHandle(other.export().root().as_bytes().to_vec());
        assert_eq!(read_status(&s, &foreign).await, Nfsstat3::NFS3ERR_STALE);
        assert_eq!(s.lookup(&foreign, b"x").await, Err(Nfsstat3::NFS3ERR_STALE));
        // A forged handle (tag broken): BADHANDLE; an empty one likewise.
        let mut forged = root.0.clone();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        assert_eq!(
            s.lookup(&FileHandle(forged), b"x").await,
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
        assert_eq!(
            s.lookup(&FileHandle(Vec::new()), b"x").await,
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
        // RENAME / REMOVE of `..` and `.`: refused, nothing moved.
        match s
            .call(&Nfs3Args::Rename(RenameArgs {
                from: diropargs(&root, b".."),
                to: diropargs(&root, b"x"),
            }))
            .await
        {
            Nfs3Res::Rename(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_PERM),
            other => panic!("{other:?}"),
        }
        match s
            .call(&Nfs3Args::Remove(RemoveArgs {
                object: diropargs(&root, b".."),
            }))
            .await
        {
            Nfs3Res::Remove(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_ACCES),
            other => panic!("{other:?}"),
        }
        assert!(s.dir.base.join("outside/secret").exists());
    })
    .await;
}

/// A GETATTR call's arguments: a handle of `len` octets.
fn handle_of(len: usize) -> Vec<u8> {
    opaque(&vec![7u8; len])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_get_garbage_args_or_an_nfsstat3() {
    bounded(async {
        let s = Served::start().await;
        let root = opaque(&s.root.0);
        let garbage = |r: Result<rpcrdma::Reply, rpcrdma::RpcError>| match r {
            Err(e) => assert_eq!(e.reply_error(), Some(ReplyError::GarbageArgs), "{e}"),
            Ok(_) => panic!("undecodable arguments were answered"),
        };
        //= rfc1813#section-2.6
        //# struct nfs_fh3 {
        //#    opaque       data<NFS3_FHSIZE>;
        //# };
        garbage(s.raw(NFSPROC3_GETATTR, handle_of(65)).await);
        // Truncated, trailing octets, a bool that is 2.
        garbage(
            s.raw(NFSPROC3_GETATTR, root[..root.len() - 4].to_vec())
                .await,
        );
        let mut trailing = root.clone();
        trailing.extend_from_slice(&[0; 4]);
        garbage(s.raw(NFSPROC3_GETATTR, trailing).await);
        let mut setattr = root.clone();
        setattr.extend(words(&[2]));
        garbage(s.raw(NFSPROC3_SETATTR, setattr).await);
        // WRITE whose count differs from its data's length (as Linux).
        let mut write = root.clone();
        write.extend(words(&[0, 0, 8, 0]));
        write.extend(opaque(b"four"));
        garbage(s.raw(NFSPROC3_WRITE, write).await);
        // A stable_how nobody knows.
        let mut write = root.clone();
        write.extend(words(&[0, 0, 4, 9]));
        write.extend(opaque(b"four"));
        garbage(s.raw(NFSPROC3_WRITE, write).await);

        // Names: 256 octets is NFS3ERR_NAMETOOLONG; NUL is NFS3ERR_INVAL;
        // an empty SYMLINK target NFS3ERR_INVAL.
        let r = s.lookup(&s.root, &[b'n'; 256]).await;
        assert_eq!(r, Err(Nfsstat3::NFS3ERR_NAMETOOLONG));
        assert_eq!(
            s.lookup(&s.root, b"a\0b").await,
            Err(Nfsstat3::NFS3ERR_INVAL)
        );
        assert_eq!(s.lookup(&s.root, b"").await, Err(Nfsstat3::NFS3ERR_INVAL));
        let sym = Nfs3Args::Symlink(SymlinkArgs {
            place: diropargs(&s.root, b"l"),
            symlink_attributes: Sattr3::none(),
            symlink_data: NfsPath(Vec::new()),
        });
        match s.call(&sym).await {
            Nfs3Res::Symlink(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_INVAL),
            other => panic!("{other:?}"),
        }
        let long = Nfs3Args::Symlink(SymlinkArgs {
            place: diropargs(&s.root, b"l"),
            symlink_attributes: Sattr3::none(),
            symlink_data: NfsPath(vec![b'x'; 1025]),
        });
        match s.call(&long).await {
            Nfs3Res::Symlink(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_NAMETOOLONG),
            other => panic!("{other:?}"),
        }
        // SETATTR of uid/gid 0xffffffff (no id: the host cannot name it):
        // ignored, as knfsd does, not a crash (found by nfs_dispatch).
        let set = Nfs3Args::Setattr(SetattrArgs {
            object: s.root.clone(),
            new_attributes: Sattr3 {
                uid: Some(u32::MAX),
                gid: Some(u32::MAX),
                ..Sattr3::none()
            },
            guard: None,
        });
        match s.call(&set).await {
            Nfs3Res::Setattr(r) => assert_eq!(r.status(), Nfsstat3::NFS3_OK),
            other => panic!("{other:?}"),
        }
        // READ or WRITE on a directory: NFS3ERR_ISDIR.
        assert_eq!(read_status(&s, &s.root).await, Nfsstat3::NFS3ERR_ISDIR);
        let st = s.nfs.stats();
        assert_eq!(st.garbage_args, 6);
        assert!(st.arg_status >= 3);
        // The connection survived all of it.
        assert_eq!(s.call(&Nfs3Args::Null(())).await, Nfs3Res::Null(()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_answers() {
    bounded(async {
        let s = Served::start().await;
        std::fs::create_dir(s.dir.path("sub")).unwrap();
        std::fs::write(s.dir.path("file"), b"x").unwrap();
        s.mnt.null().await.unwrap();
        let abs = std::fs::canonicalize(s.dir.export()).unwrap();
        let abs = abs.to_str().unwrap();
        // `/` and DIR's absolute path (with a trailing slash) name the root.
        for p in ["/", abs, &format!("{abs}/")] {
            let m = s.mnt.mnt(p).await.expect(p);
            assert_eq!(m.fhandle, s.root, "{p}");
            assert_eq!(m.auth_flavors, vec![1, 0], "AUTH_SYS then AUTH_NONE");
        }
        let sub = s.mnt.mnt(&format!("{abs}/sub")).await.unwrap();
        assert_eq!(Ok(sub.fhandle), s.lookup(&s.root, b"sub").await);
        // Failures, each with its mountstat3.
        for (p, want) in [
            ("/missing", Mountstat3::MNT3ERR_NOENT),
            ("/file", Mountstat3::MNT3ERR_NOTDIR),
            ("/../outside", Mountstat3::MNT3ERR_ACCES),
            ("/sub/../..", Mountstat3::MNT3ERR_ACCES),
        ] {
            let e = s.mnt.mnt(p).await.expect_err(p);
            let shown = e.to_string();
            let name = format!("{want}");
            assert!(shown.contains(&name), "{p}: {shown}");
        }
        let ex = s.mnt.exports().await.unwrap();
        let dirs: Vec<&[u8]> = ex.0.iter().map(|e| &e.dir.0[..]).collect();
        assert_eq!(dirs, [b"/", abs.as_bytes()]);
        assert_eq!(
            s.nfs.mounts().len(),
            3 + 1 + 1,
            "MNT / in start() and these"
        );
        s.mnt.umnt("/").await.unwrap();
        assert!(s.nfs.mounts().iter().all(|m| m.path != "/"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fuzz_corpus_input_breaks_the_server() {
    bounded(async {
        let s = Served::start().await;
        std::fs::write(s.dir.path("f"), b"some data").unwrap();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/nfs_args");
        let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(dir)
            .expect("the nfs_args corpus")
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        inputs.sort();
        assert!(inputs.len() > 100, "{} corpus inputs", inputs.len());
        let mut answered = 0;
        // Every input as the arguments of a rotating procedure (all 22),
        // plus the root handle in front (so decodable inputs reach the
        // export); the server answers every one, and keeps answering.
        for (i, data) in inputs.iter().enumerate() {
            let proc = (i % 23) as u32;
            let mut with_root = opaque(&s.root.0);
            with_root.extend_from_slice(data);
            for mut args in [data.clone(), with_root] {
                // RPC messages are whole XDR words.
                args.resize(args.len().next_multiple_of(4), 0);
                match s.raw(proc, Bytes::from(args)).await {
                    Ok(_) => answered += 1,
                    Err(e) => assert!(e.reply_error().is_some(), "proc {proc}: {e}"),
                }
            }
        }
        assert!(answered > 0);
        assert_eq!(s.call(&Nfs3Args::Null(())).await, Nfs3Res::Null(()));
        assert_eq!(
            read_local(&s.dir.base.join("outside/secret")),
            b"outside data"
        );
    })
    .await;
}
