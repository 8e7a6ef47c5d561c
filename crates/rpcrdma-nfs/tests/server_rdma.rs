//! The NFSv3 server end to end over loopback software iWARP: every
//! procedure, READ/WRITE of 1 MiB through Write/Read chunks, READDIRPLUS
//! of 1,000 entries through Reply chunks, READDIR within the reply's room.

mod served;

use bytes::Bytes;
use rpcrdma::{CallOptions, ReplyError};
use rpcrdma_nfs::nfs3::*;
use served::*;

fn sattr_mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::none()
    }
}

fn ok<O: std::fmt::Debug, F: std::fmt::Debug>(r: Res<O, F>) -> O {
    match r {
        Res::Ok(o) => o,
        Res::Fail(s, f) => panic!("failed: {s} {f:?}"),
    }
}

fn status<O, F>(r: &Res<O, F>) -> Nfsstat3 {
    r.status()
}

macro_rules! res {
    ($s:expr, $variant:ident, $args:expr) => {
        match $s.call(&Nfs3Args::$variant($args)).await {
            Nfs3Res::$variant(r) => r,
            other => panic!("not a {} result: {other:?}", stringify!($variant)),
        }
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_rdma() {
    bounded(async {
        let s = Served::start().await;
        let root = s.root.clone();
        assert_eq!(s.call(&Nfs3Args::Null(())).await, Nfs3Res::Null(()));

        // FSINFO advertises 1 MiB reads and writes.
        let fi = ok(res!(
            s,
            Fsinfo,
            FsArgs {
                object: root.clone()
            }
        ));
        assert_eq!((fi.rtmax, fi.wtmax), (1 << 20, 1 << 20));
        // LINK is NFS3ERR_NOTSUPP: FSF3_LINK clear, FSF3_SYMLINK set.
        assert_eq!(fi.properties & 0x3, 0x2);
        let pc = ok(res!(
            s,
            Pathconf,
            FsArgs {
                object: root.clone()
            }
        ));
        assert!(pc.no_trunc && pc.name_max >= 255.min(pc.name_max));
        let fs = ok(res!(
            s,
            Fsstat,
            FsArgs {
                object: root.clone()
            }
        ));
        assert!(fs.tbytes > 0);

        // CREATE (GUARDED twice: EXIST), GETATTR, SETATTR (guard).
        let place = diropargs(&root, b"f");
        let how = Createhow3::Guarded(sattr_mode(0o640));
        let c = ok(res!(
            s,
            Create,
            CreateArgs {
                place: place.clone(),
                how: how.clone()
            }
        ));
        let fh = c.obj.clone().expect("handle");
        assert_eq!(c.obj_attributes.as_ref().unwrap().mode, 0o640);
        let again = res!(
            s,
            Create,
            CreateArgs {
                place: place.clone(),
                how
            }
        );
        assert_eq!(status(&again), Nfsstat3::NFS3ERR_EXIST);
        let a = ok(res!(s, Getattr, GetattrArgs { object: fh.clone() }));
        assert_eq!(a.ftype, Ftype3::NF3REG);
        let wrong_guard = Nfstime3 {
            seconds: 1,
            nseconds: 2,
        };
        let r = res!(
            s,
            Setattr,
            SetattrArgs {
                object: fh.clone(),
                new_attributes: sattr_mode(0o600),
                guard: Some(wrong_guard),
            }
        );
        assert_eq!(status(&r), Nfsstat3::NFS3ERR_NOT_SYNC);
        let w = ok(res!(
            s,
            Setattr,
            SetattrArgs {
                object: fh.clone(),
                new_attributes: sattr_mode(0o600),
                guard: Some(a.ctime.clone()),
            }
        ));
        assert_eq!(w.after.unwrap().mode, 0o600);
        // EXCLUSIVE: the same verifier again succeeds with the same file.
        let ex = |v| CreateArgs {
            place: diropargs(&root, b"x"),
            how: Createhow3::Exclusive(v),
        };
        let x1 = ok(res!(s, Create, ex([1; 8])));
        let x2 = ok(res!(s, Create, ex([1; 8])));
        assert_eq!(x1.obj, x2.obj);
        assert_eq!(
            status(&res!(s, Create, ex([2; 8]))),
            Nfsstat3::NFS3ERR_EXIST
        );

        // LOOKUP, ACCESS.
        assert_eq!(s.lookup(&root, b"f").await, Ok(fh.clone()));
        assert_eq!(s.lookup(&root, b"nope").await, Err(Nfsstat3::NFS3ERR_NOENT));
        let acc = ok(res!(
            s,
            Access,
            AccessArgs {
                object: fh.clone(),
                access: 0x3f
            }
        ));
        assert_eq!(acc.access & 0x01, 0x01, "the owner may read");

        // WRITE at each stability, READ back, COMMIT with the same verifier.
        let mut verfs = Vec::new();
        for (i, stable) in [
            StableHow::UNSTABLE,
            StableHow::DATA_SYNC,
            StableHow::FILE_SYNC,
        ]
        .into_iter()
        .enumerate()
        {
            let data = Bytes::from(pattern(i as u32 + 1, 1000));
            let w = ok(res!(
                s,
                Write,
                WriteArgs {
                    file: fh.clone(),
                    offset: 1000 * i as u64,
                    count: 1000,
                    stable,
                    data,
                }
            ));
            assert_eq!((w.count, w.committed), (1000, stable));
            verfs.push(w.verf);
        }
        let r = ok(res!(
            s,
            Read,
            ReadArgs {
                file: fh.clone(),
                offset: 0,
                count: 4000
            }
        ));
        assert_eq!(r.count, 3000);
        assert!(r.eof);
        let want: Vec<u8> = (1..=3).flat_map(|i| pattern(i, 1000)).collect();
        assert_eq!(&r.data[..], &want[..]);
        let cm = ok(res!(
            s,
            Commit,
            CommitArgs {
                file: fh.clone(),
                offset: 0,
                count: 0
            }
        ));
        assert!(
            verfs.iter().all(|v| *v == cm.verf),
            "one write verifier per instance"
        );

        // MKDIR, SYMLINK, READLINK, RENAME, READDIR(PLUS), REMOVE, RMDIR.
        let d = ok(res!(
            s,
            Mkdir,
            MkdirArgs {
                place: diropargs(&root, b"d"),
                attributes: sattr_mode(0o755),
            }
        ));
        let dfh = d.obj.unwrap();
        let l = ok(res!(
            s,
            Symlink,
            SymlinkArgs {
                place: diropargs(&dfh, b"ln"),
                symlink_attributes: Sattr3::none(),
                symlink_data: NfsPath(b"../f".to_vec()),
            }
        ));
        let rl = ok(res!(
            s,
            Readlink,
            ReadlinkArgs {
                symlink: l.obj.unwrap()
            }
        ));
        assert_eq!(rl.data.0, b"../f");
        assert_eq!(
            std::fs::read_link(s.dir.path("d/ln"))
                .unwrap()
                .as_os_str()
                .as_encoded_bytes(),
            b"../f"
        );
        ok(res!(
            s,
            Rename,
            RenameArgs {
                from: diropargs(&root, b"f"),
                to: diropargs(&dfh, b"g"),
            }
        ));
        assert_eq!(
            s.lookup(&dfh, b"g").await,
            Ok(fh.clone()),
            "a renamed file keeps its handle"
        );
        let rd = ok(res!(
            s,
            Readdir,
            ReaddirArgs {
                dir: dfh.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                count: 4096,
            }
        ));
        let mut names: Vec<_> = rd.reply.entries.iter().map(|e| e.name.0.clone()).collect();
        names.sort();
        assert_eq!(names, [&b"."[..], b"..", b"g", b"ln"]);
        assert!(rd.reply.eof);
        let rp = ok(res!(
            s,
            Readdirplus,
            ReaddirplusArgs {
                dir: dfh.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 512,
                maxcount: 8192,
            }
        ));
        let g = rp.reply.entries.iter().find(|e| e.name.0 == b"g").unwrap();
        assert_eq!(g.name_handle.as_ref(), Some(&fh));
        assert_eq!(g.name_attributes.as_ref().unwrap().size, 3000);
        assert_eq!(
            status(&res!(
                s,
                Rmdir,
                RemoveArgs {
                    object: diropargs(&root, b"d")
                }
            )),
            Nfsstat3::NFS3ERR_NOTEMPTY
        );
        ok(res!(
            s,
            Remove,
            RemoveArgs {
                object: diropargs(&dfh, b"g")
            }
        ));
        ok(res!(
            s,
            Remove,
            RemoveArgs {
                object: diropargs(&dfh, b"ln")
            }
        ));
        ok(res!(
            s,
            Rmdir,
            RemoveArgs {
                object: diropargs(&root, b"d")
            }
        ));
        assert!(!s.dir.path("d").exists());
        // The removed file's handle is stale (its cached descriptor closed).
        let r = res!(
            s,
            Read,
            ReadArgs {
                file: fh.clone(),
                offset: 0,
                count: 10
            }
        );
        assert_eq!(status(&r), Nfsstat3::NFS3ERR_STALE);

        // MKNOD and LINK: NFS3ERR_NOTSUPP with their resfail shapes.
        for (proc, len) in [(NFSPROC3_MKNOD, 12), (NFSPROC3_LINK, 16)] {
            let reply = s.raw(proc, words(&[0])).await.expect("reply");
            let v = reply.results().flatten();
            assert_eq!(v.len(), len);
            assert_eq!(&v[..4], &Nfsstat3::NFS3ERR_NOTSUPP.0.to_be_bytes());
        }
        // No procedure 22: PROC_UNAVAIL; version 4: PROG_MISMATCH 3..3.
        //= rfc5531#section-9
        //# PROC_UNAVAIL  = 3, /* program can't support procedure */
        let e = s.raw(22, Bytes::new()).await.unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::ProcUnavail));
        let opts = CallOptions::default();
        let e = s
            .rpc()
            .call_with(NFS_PROGRAM, 4, 0, rpcrdma::Message::new(), &opts)
            .await
            .unwrap_err();
        assert_eq!(
            e.reply_error(),
            Some(ReplyError::ProgMismatch { low: 3, high: 3 })
        );

        // Every call above was counted, with this process's AUTH_SYS.
        let st = s.nfs.stats();
        assert!(st.calls(NFSPROC3_WRITE) >= 3);
        let uid = rustix::process::geteuid().as_raw();
        assert!(st.credentials.iter().any(|(c, n)| *n > 10
            && matches!(c, rpcrdma_nfs::server::Credential::Sys { uid: u, .. } if *u == uid)));
    })
    .await;
}

/// Waits (bounded) until the client transport's published counters
/// satisfy `f` (the driver publishes them from its own task).
async fn engine_until(
    s: &Served,
    f: impl Fn(&rpcrdma_proto::engine::Metrics) -> bool,
) -> rpcrdma_proto::engine::Metrics {
    for _ in 0..400 {
        let m = s.engine();
        if f(&m) {
            return m;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    s.engine()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_1mib_bit_exact_through_chunks() {
    bounded(async {
        let s = Served::start().await;
        let data = Bytes::from(pattern(7, (1 << 20) + 3));
        let c = ok(res!(
            s,
            Create,
            CreateArgs {
                place: diropargs(&s.root, b"big"),
                how: Createhow3::Unchecked(sattr_mode(0o644)),
            }
        ));
        let fh = c.obj.unwrap();
        let before = s.engine();
        let sum = s
            .client
            .write_file(
                &fh,
                std::sync::Arc::new(data.clone()),
                StableHow::UNSTABLE,
                |_| {},
            )
            .await
            .expect("write");
        assert_eq!(sum.bytes, data.len() as u64);
        assert!(sum.commits >= 1);
        // The file on disk is bit-exact.
        assert_eq!(read_local(&s.dir.path("big")), &data[..]);
        // The 1 MiB WRITE's data went in a Read chunk (the 3-octet one
        // fits inline).
        let m = engine_until(&s, |m| {
            m.read_chunk_bytes >= before.read_chunk_bytes + (1 << 20)
        })
        .await;
        assert!(m.read_chunks > before.read_chunks, "{m:?}");
        assert!(
            m.read_chunk_bytes >= before.read_chunk_bytes + (1 << 20),
            "{m:?}"
        );

        // READ back through the client's Write chunks.
        let before = s.engine();
        let mut got = Vec::new();
        let n = s
            .client
            .read_file(&fh, Some(data.len() as u64), |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .await
            .expect("read");
        assert_eq!(n, data.len() as u64);
        assert!(got == data[..], "READ data differs");
        let m = engine_until(&s, |m| {
            m.write_chunk_bytes >= before.write_chunk_bytes + (1 << 20)
        })
        .await;
        assert!(
            m.write_chunk_bytes >= before.write_chunk_bytes + (1 << 20),
            "READ data did not come through Write chunks: {m:?}"
        );

        // One READ of exactly 1 MiB (rtmax) in one Write chunk; more than
        // rtmax is a short read of rtmax.
        let r = ok(res!(
            s,
            Read,
            ReadArgs {
                file: fh.clone(),
                offset: 0,
                count: 2 << 20
            }
        ));
        assert_eq!(r.count, 1 << 20);
        assert!(!r.eof);
        assert!(r.data == data[..1 << 20]);
        // The cache served those READs: one descriptor per access mode.
        assert!(s.nfs.export().open_file_count() >= 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_of_1000_entries_through_reply_chunks() {
    bounded(async {
        let s = Served::start().await;
        std::fs::create_dir(s.dir.path("d")).unwrap();
        for i in 0..1000 {
            std::fs::write(s.dir.path(&format!("d/entry-{i:04}")), b"").unwrap();
        }
        let d = s.lookup(&s.root, b"d").await.unwrap();
        let before = s.engine();
        let entries = s.client.list_dir(&d).await.expect("list");
        let mut names: Vec<String> = entries
            .iter()
            .map(|e| String::from_utf8(e.name.0.clone()).unwrap())
            .filter(|n| n != "." && n != "..")
            .collect();
        names.sort();
        let want: Vec<String> = (0..1000).map(|i| format!("entry-{i:04}")).collect();
        assert_eq!(names, want);
        // Every entry with attributes and a handle that LOOKUP agrees with.
        for e in entries.iter().filter(|e| e.name.0 == b"entry-0999") {
            assert_eq!(e.name_attributes.as_ref().unwrap().size, 0);
            assert_eq!(
                s.lookup(&d, b"entry-0999").await.ok(),
                e.name_handle.clone()
            );
        }
        // Cookies strictly ordered as the directory gives them, no repeats.
        let cookies: std::collections::HashSet<u64> = entries.iter().map(|e| e.cookie).collect();
        assert_eq!(cookies.len(), entries.len());
        // Several calls (64 KiB maxcount), each reply in a Reply chunk.
        let m = engine_until(&s, |m| {
            m.reply_chunk_bytes > before.reply_chunk_bytes + 100_000
        })
        .await;
        let calls = s.nfs.stats().calls(NFSPROC3_READDIRPLUS);
        assert!(calls >= 3, "{calls} READDIRPLUS calls for 1,000 entries");
        assert!(m.reply_chunks >= before.reply_chunks + calls, "{m:?}");
        assert!(
            m.reply_chunk_bytes > before.reply_chunk_bytes + 100_000,
            "replies did not come through Reply chunks: {m:?}"
        );
    })
    .await;
}

//= rfc8166#section-3.5.3
//# If a Reply chunk was provided and the reduced
//# Payload stream is larger than the reply inline threshold, the
//# Responder MUST use the Requester-provided Reply chunk for the reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdir_stays_within_the_reply_room() {
    bounded(async {
        let s = Served::start().await;
        for i in 0..300 {
            std::fs::write(s.dir.path(&format!("a-rather-long-file-name-{i:04}")), b"").unwrap();
        }
        let args = |cookie, cookieverf| {
            Nfs3Args::Readdirplus(ReaddirplusArgs {
                dir: s.root.clone(),
                cookie,
                cookieverf,
                dircount: 8192,
                maxcount: 64 << 10,
            })
        };
        // No Reply chunk offered (the reply must fit inline: 4096): the
        // server cuts the list to fit rather than failing the call with
        // ERR_CHUNK for a 64 KiB maxcount.
        let inline_only = CallOptions {
            reply_max: Some(4000),
            ..CallOptions::default()
        };
        let (mut cookie, mut verf, mut seen, mut calls) = (0, [0; 8], 0usize, 0);
        loop {
            let r = match s.call_with(&args(cookie, verf), &inline_only).await {
                Ok(Nfs3Res::Readdirplus(r)) => ok(r),
                other => panic!("{other:?}"),
            };
            calls += 1;
            let n = r.reply.entries.len();
            assert!(n > 0 && n < 40, "{n} entries in an inline reply");
            seen += n;
            cookie = r.reply.entries.last().unwrap().cookie;
            verf = r.cookieverf;
            if r.reply.eof {
                break;
            }
            assert!(calls < 100);
        }
        assert_eq!(seen, 302, "every entry once, with . and ..");
        let m = s.engine();
        assert_eq!(m.reply_chunks, 0, "no Reply chunk was offered");

        // A count too small for one entry: NFS3ERR_TOOSMALL.
        let tiny = Nfs3Args::Readdir(ReaddirArgs {
            dir: s.root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 120,
        });
        match s.call(&tiny).await {
            Nfs3Res::Readdir(r) => assert_eq!(r.status(), Nfsstat3::NFS3ERR_TOOSMALL),
            other => panic!("{other:?}"),
        }
        // A small count cuts the list: eof FALSE, and the client goes on.
        let small = Nfs3Args::Readdir(ReaddirArgs {
            dir: s.root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 1024,
        });
        match s.call(&small).await {
            Nfs3Res::Readdir(Res::Ok(r)) => {
                assert!(!r.reply.eof);
                let len: usize = r
                    .reply
                    .entries
                    .iter()
                    .map(|e| 4 + rpcrdma_proto::XdrEncode::encoded_len(e))
                    .sum();
                assert!(len + 4 + 88 + 8 + 8 <= 1024, "{len}");
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}
