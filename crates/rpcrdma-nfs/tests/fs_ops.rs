//! Every export operation against a real directory.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{exists, mode, Scratch};
use rpcrdma_nfs::fs::*;

#[test]
fn getattr_reports_the_host_attributes() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"hello").unwrap();
    let fh = s.walk("f");
    let a = s.export.getattr(&fh).unwrap();
    let m = std::fs::metadata(s.path("f")).unwrap();
    assert_eq!(a.ftype, FileType::Regular);
    assert_eq!(a.mode, m.mode() & 0o7777);
    assert_eq!((a.nlink, a.uid, a.gid), (1, m.uid(), m.gid()));
    assert_eq!(a.size, 5);
    assert_eq!(a.used, m.blocks() * 512);
    assert_eq!((a.fileid, a.fsid), (m.ino(), m.dev()));
    assert_eq!(
        (a.mtime.seconds, i64::from(a.mtime.nanos)),
        (m.mtime(), m.mtime_nsec())
    );
    assert_eq!(
        (a.ctime.seconds, i64::from(a.ctime.nanos)),
        (m.ctime(), m.ctime_nsec())
    );
    assert_eq!(
        (a.atime.seconds, i64::from(a.atime.nanos)),
        (m.atime(), m.atime_nsec())
    );
    let r = s.export.getattr(&s.root()).unwrap();
    assert_eq!(r.ftype, FileType::Directory);
    assert_eq!(r.fileid, std::fs::metadata(s.path("")).unwrap().ino());
}

#[test]
fn setattr_mode_owner_size_and_times() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"0123456789").unwrap();
    let fh = s.walk("f");
    let m = std::fs::metadata(s.path("f")).unwrap();
    let set = SetAttr {
        mode: Some(0o640),
        uid: Some(m.uid()),
        gid: Some(m.gid()),
        size: Some(4),
        atime: SetTime::ClientTime(Time {
            seconds: 1_000_000_000,
            nanos: 123_456_789,
        }),
        mtime: SetTime::ClientTime(Time {
            seconds: 1_100_000_000,
            nanos: 987_654_321,
        }),
    };
    let wcc = s.export.setattr(&fh, &set, None).unwrap();
    assert_eq!(wcc.before.unwrap().size, 10);
    let after = wcc.after.unwrap();
    assert_eq!((after.mode, after.size), (0o640, 4));
    assert_eq!(
        after.mtime,
        Time {
            seconds: 1_100_000_000,
            nanos: 987_654_321
        }
    );
    assert_eq!(
        after.atime,
        Time {
            seconds: 1_000_000_000,
            nanos: 123_456_789
        }
    );
    let m = std::fs::metadata(s.path("f")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.len()), (0o640, 4));
    assert_eq!(std::fs::read(s.path("f")).unwrap(), b"0123");

    // Server time: now-ish, not the old client time.
    let now = SetAttr {
        mtime: SetTime::ServerTime,
        ..SetAttr::default()
    };
    let a = s.export.setattr(&fh, &now, None).unwrap().after.unwrap();
    assert!(a.mtime.seconds > 1_600_000_000, "{:?}", a.mtime);

    // Guard: a stale ctime changes nothing.
    let stale = Time {
        seconds: 1,
        nanos: 0,
    };
    assert_eq!(
        s.export.setattr(&fh, &mode(0o600), Some(stale)),
        Err(NfsError::NotSync)
    );
    assert_eq!(
        std::fs::metadata(s.path("f")).unwrap().mode() & 0o777,
        0o640
    );
    let ctime = s.export.getattr(&fh).unwrap().ctime;
    s.export.setattr(&fh, &mode(0o600), Some(ctime)).unwrap();
    assert_eq!(
        std::fs::metadata(s.path("f")).unwrap().mode() & 0o777,
        0o600
    );

    // Size on a directory.
    let size = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(
        s.export.setattr(&s.root(), &size, None),
        Err(NfsError::IsDir)
    );
    // Mode on a directory.
    std::fs::create_dir(s.path("d")).unwrap();
    s.export.setattr(&s.walk("d"), &mode(0o711), None).unwrap();
    assert_eq!(
        std::fs::metadata(s.path("d")).unwrap().mode() & 0o7777,
        0o711
    );
}

#[test]
fn lookup_names_dot_and_dotdot() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("a/b")).unwrap();
    std::fs::write(s.path("a/b/f"), b"x").unwrap();
    let a = s.walk("a");
    let b = s.walk("a/b");
    let l = s.export.lookup(&b, b"f").unwrap();
    assert_eq!(l.attr.ftype, FileType::Regular);
    assert_eq!(l.dir_attr.fileid, s.export.getattr(&b).unwrap().fileid);
    assert_eq!(s.export.lookup(&b, b".").unwrap().handle, b);
    assert_eq!(s.export.lookup(&b, b"..").unwrap().handle, a);
    assert_eq!(s.export.lookup(&a, b"..").unwrap().handle, s.root());
    assert_eq!(s.export.lookup(&b, b"missing"), Err(NfsError::NoEnt));
    assert_eq!(s.export.lookup(&l.handle, b"x"), Err(NfsError::NotDir));
    assert_eq!(
        s.export.lookup(&b, &[b'n'; 256]),
        Err(NfsError::NameTooLong)
    );
}

#[test]
fn access_is_the_server_process_permission() {
    let s = Scratch::new();
    std::fs::write(s.path("plain"), b"x").unwrap();
    std::fs::set_permissions(s.path("plain"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(s.path("tool"), b"x").unwrap();
    std::fs::set_permissions(s.path("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let all = ACCESS_READ | ACCESS_MODIFY | ACCESS_EXTEND | ACCESS_EXECUTE;
    // No execute bit anywhere: denied even to root.
    let (g, _) = s.export.access(&s.walk("plain"), all).unwrap();
    assert_eq!(g, ACCESS_READ | ACCESS_MODIFY | ACCESS_EXTEND);
    let (g, _) = s.export.access(&s.walk("tool"), all).unwrap();
    assert_eq!(g, all);
    // Only asked bits are answered.
    let (g, _) = s.export.access(&s.walk("tool"), ACCESS_READ).unwrap();
    assert_eq!(g, ACCESS_READ);
    let dir = ACCESS_READ | ACCESS_LOOKUP | ACCESS_MODIFY | ACCESS_EXTEND | ACCESS_DELETE;
    let (g, _) = s.export.access(&s.root(), dir | ACCESS_EXECUTE).unwrap();
    assert_eq!(g, dir, "EXECUTE means nothing for a directory");
}

#[test]
fn readlink_returns_the_stored_target() {
    let s = Scratch::new();
    std::os::unix::fs::symlink("../../outside/secret", s.path("l")).unwrap();
    let fh = s.walk("l");
    assert_eq!(s.export.getattr(&fh).unwrap().ftype, FileType::Symlink);
    let (target, attr) = s.export.readlink(&fh).unwrap();
    assert_eq!(target, b"../../outside/secret");
    assert_eq!(attr.ftype, FileType::Symlink);
    assert_eq!(s.export.readlink(&s.root()), Err(NfsError::Inval));
}

#[test]
fn read_with_offset_count_and_eof() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"0123456789").unwrap();
    let fh = s.walk("f");
    let r = s.export.read(&fh, 2, 3).unwrap();
    assert_eq!((&r.data[..], r.eof), (&b"234"[..], false));
    let r = s.export.read(&fh, 7, 100).unwrap();
    assert_eq!((&r.data[..], r.eof), (&b"789"[..], true));
    let r = s.export.read(&fh, 10, 5).unwrap();
    assert_eq!((r.data.len(), r.eof), (0, true));
    let r = s.export.read(&fh, u64::MAX - 1, 5).unwrap();
    assert_eq!((r.data.len(), r.eof), (0, true));
    assert_eq!(s.export.read(&s.root(), 0, 1), Err(NfsError::IsDir));
}

#[test]
fn write_then_read_back_and_commit() {
    let s = Scratch::new();
    let c = s
        .export
        .create(&s.root(), b"f", CreateHow::Guarded(mode(0o644)))
        .unwrap();
    let w = s
        .export
        .write(&c.handle, 3, b"abc", StableHow::Unstable)
        .unwrap();
    assert_eq!(
        (w.count, w.committed, w.verf),
        (3, StableHow::Unstable, s.export.write_verifier())
    );
    // No pre-operation attributes on WRITE (as knfsd): one statx per call.
    assert_eq!(w.wcc.before, None);
    assert_eq!(w.wcc.after.unwrap().size, 6);
    assert_eq!(std::fs::read(s.path("f")).unwrap(), b"\0\0\0abc");
    let cm = s.export.commit(&c.handle, 0, 0).unwrap();
    assert_eq!(cm.verf, w.verf);
    assert_eq!(
        s.export.write(&s.root(), 0, b"x", StableHow::FileSync),
        Err(NfsError::IsDir)
    );
    let big = vec![0u8; MAX_IO as usize + 1];
    assert_eq!(
        s.export.write(&c.handle, 0, &big, StableHow::Unstable),
        Err(NfsError::Inval)
    );
    assert_eq!(
        s.export
            .write(&c.handle, u64::MAX - 1, b"xy", StableHow::Unstable),
        Err(NfsError::FBig)
    );
}

#[test]
fn create_modes() {
    let s = Scratch::new();
    let root = s.root();
    let c = s
        .export
        .create(&root, b"g", CreateHow::Guarded(mode(0o664)))
        .unwrap();
    // Exactly the mode asked: the server's umask does not apply.
    assert_eq!(
        std::fs::metadata(s.path("g")).unwrap().mode() & 0o7777,
        0o664
    );
    assert_eq!(c.attr.mode, 0o664);
    assert!(c.dir_wcc.after.is_some());
    assert_eq!(s.export.lookup(&root, b"g").unwrap().handle, c.handle);
    assert_eq!(
        s.export
            .create(&root, b"g", CreateHow::Guarded(mode(0o600))),
        Err(NfsError::Exist)
    );
    // UNCHECKED over an existing file: the same file, only size applied.
    std::fs::write(s.path("g"), b"data").unwrap();
    let set = SetAttr {
        size: Some(0),
        mode: Some(0o600),
        ..SetAttr::default()
    };
    let u = s
        .export
        .create(&root, b"g", CreateHow::Unchecked(set))
        .unwrap();
    assert_eq!(u.handle, c.handle);
    assert_eq!((u.attr.size, u.attr.mode), (0, 0o664));
    let fresh = s
        .export
        .create(&root, b"u", CreateHow::Unchecked(mode(0o600)))
        .unwrap();
    assert_eq!(fresh.attr.mode, 0o600);
    // Over a directory: EXIST.
    std::fs::create_dir(s.path("d")).unwrap();
    assert_eq!(
        s.export
            .create(&root, b"d", CreateHow::Unchecked(mode(0o600))),
        Err(NfsError::Exist)
    );
    assert_eq!(
        s.export
            .create(&root, b".", CreateHow::Guarded(mode(0o600))),
        Err(NfsError::Exist)
    );
    assert_eq!(
        s.export
            .create(&c.handle, b"x", CreateHow::Guarded(mode(0o600))),
        Err(NfsError::NotDir)
    );
}

#[test]
fn exclusive_create_verifier_semantics() {
    let s = Scratch::new();
    let root = s.root();
    let v1 = *b"\x81\x02\x03\x04\x05\x06\x07\x08";
    let first = s
        .export
        .create(&root, b"x", CreateHow::Exclusive(v1))
        .unwrap();
    // The verifier is stored in mtime/atime (top bits cleared).
    assert_eq!(first.attr.mtime.seconds, 0x0102_0304);
    assert_eq!(first.attr.atime.seconds, 0x0506_0708);
    // A retransmission (same verifier) succeeds with the same handle.
    let again = s
        .export
        .create(&root, b"x", CreateHow::Exclusive(v1))
        .unwrap();
    assert_eq!(again.handle, first.handle);
    // Another client's verifier: EXIST.
    let v2 = *b"\x11\x12\x13\x14\x15\x16\x17\x18";
    assert_eq!(
        s.export.create(&root, b"x", CreateHow::Exclusive(v2)),
        Err(NfsError::Exist)
    );
    // After the client's SETATTR of real attributes, the verifier no
    // longer matches: a late retransmission gets EXIST.
    let real = SetAttr {
        mode: Some(0o644),
        mtime: SetTime::ServerTime,
        atime: SetTime::ServerTime,
        ..SetAttr::default()
    };
    s.export.setattr(&first.handle, &real, None).unwrap();
    assert_eq!(
        s.export.create(&root, b"x", CreateHow::Exclusive(v1)),
        Err(NfsError::Exist)
    );
    // An existing file that was never created exclusively: EXIST.
    std::fs::write(s.path("y"), b"").unwrap();
    assert_eq!(
        s.export.create(&root, b"y", CreateHow::Exclusive(v1)),
        Err(NfsError::Exist)
    );
}

#[test]
fn mkdir_symlink_remove_rmdir() {
    let s = Scratch::new();
    let root = s.root();
    let d = s.export.mkdir(&root, b"d", &mode(0o750)).unwrap();
    assert_eq!(d.attr.ftype, FileType::Directory);
    assert_eq!(
        std::fs::metadata(s.path("d")).unwrap().mode() & 0o7777,
        0o750
    );
    assert_eq!(
        s.export.mkdir(&root, b"d", &mode(0o750)),
        Err(NfsError::Exist)
    );
    assert_eq!(
        s.export.mkdir(&root, b"..", &mode(0o750)),
        Err(NfsError::Exist)
    );

    let l = s
        .export
        .symlink(&d.handle, b"l", b"/etc/passwd", &SetAttr::default())
        .unwrap();
    assert_eq!(l.attr.ftype, FileType::Symlink);
    assert_eq!(
        std::fs::read_link(s.path("d/l")).unwrap().to_str(),
        Some("/etc/passwd")
    );
    assert_eq!(s.export.readlink(&l.handle).unwrap().0, b"/etc/passwd");
    assert_eq!(
        s.export.symlink(&d.handle, b"e", b"", &SetAttr::default()),
        Err(NfsError::NoEnt)
    );
    assert_eq!(
        s.export
            .symlink(&d.handle, b"e", b"a\0b", &SetAttr::default()),
        Err(NfsError::Inval)
    );

    assert_eq!(s.export.rmdir(&root, b"d"), Err(NfsError::NotEmpty));
    assert_eq!(s.export.remove(&root, b"d"), Err(NfsError::IsDir));
    s.export.remove(&d.handle, b"l").unwrap();
    assert!(!exists(&s.path("d/l")));
    assert_eq!(s.export.getattr(&l.handle), Err(NfsError::Stale));
    assert_eq!(s.export.remove(&d.handle, b"l"), Err(NfsError::NoEnt));
    assert_eq!(s.export.remove(&d.handle, b".."), Err(NfsError::Acces));
    assert_eq!(s.export.rmdir(&root, b"."), Err(NfsError::Acces));
    let wcc = s.export.rmdir(&root, b"d").unwrap();
    assert!(wcc.after.is_some());
    assert!(!exists(&s.path("d")));
    assert_eq!(s.export.getattr(&d.handle), Err(NfsError::Stale));
}

#[test]
fn rename_within_and_across_directories() {
    let s = Scratch::new();
    let root = s.root();
    std::fs::create_dir(s.path("a")).unwrap();
    std::fs::write(s.path("f"), b"f").unwrap();
    std::fs::write(s.path("a/victim"), b"v").unwrap();
    let f = s.walk("f");
    let victim = s.walk("a/victim");
    let a = s.walk("a");
    let (from, to) = s.export.rename(&root, b"f", &a, b"victim").unwrap();
    assert!(from.after.is_some() && to.after.is_some());
    assert_eq!(std::fs::read(s.path("a/victim")).unwrap(), b"f");
    // The moved file keeps its handle; the replaced one is gone.
    assert_eq!(s.export.read(&f, 0, 10).unwrap().data, b"f");
    assert_eq!(s.export.getattr(&victim), Err(NfsError::Stale));
    assert_eq!(s.export.lookup(&a, b"victim").unwrap().handle, f);
    assert_eq!(s.export.rename(&root, b"..", &a, b"x"), Err(NfsError::Perm));
    assert_eq!(
        s.export.rename(&root, b"nothing", &a, b"x"),
        Err(NfsError::NoEnt)
    );
}

#[test]
fn fsstat_fsinfo_pathconf() {
    let s = Scratch::new();
    let st = s.export.fsstat(&s.root()).unwrap();
    assert!(st.tbytes > 0 && st.fbytes <= st.tbytes && st.abytes <= st.fbytes);
    assert!(st.tfiles >= st.ffiles);
    let info = s.export.fsinfo(&s.root()).unwrap();
    assert_eq!((info.rtmax, info.wtmax), (1 << 20, 1 << 20));
    assert!(info.rtpref <= info.rtmax && info.wtpref <= info.wtmax);
    assert_eq!(info.properties & FSF_SYMLINK, FSF_SYMLINK);
    let pc = s.export.pathconf(&s.root()).unwrap();
    assert_eq!(pc.name_max, 255);
    assert!(pc.no_trunc && pc.case_preserving && !pc.case_insensitive);
}

#[test]
fn errors_map_to_nfsstat3() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"x").unwrap();
    let f = s.walk("f");
    assert_eq!(
        s.export.readdir(&f, 0, [0; 8], 10).map(|_| ()),
        Err(NfsError::NotDir)
    );
    assert_eq!(
        s.export.mkdir(&f, b"x", &mode(0o700)),
        Err(NfsError::NotDir)
    );
    assert_eq!(NfsError::Stale.status(), 70);
}

#[test]
fn the_handle_table_is_bounded() {
    let s = Scratch::with(ExportConfig {
        max_handles: 3,
        ..ExportConfig::default()
    });
    for n in ["a", "b", "c"] {
        std::fs::write(s.path(n), b"").unwrap();
    }
    let root = s.root();
    let a = s.export.lookup(&root, b"a").unwrap().handle;
    s.export.lookup(&root, b"b").unwrap();
    assert_eq!(s.export.handle_count(), 3);
    assert_eq!(
        s.export.lookup(&root, b"c").map(|_| ()),
        Err(NfsError::ServerFault)
    );
    // Known objects still resolve; removing one frees its slot.
    assert_eq!(s.export.lookup(&root, b"a").unwrap().handle, a);
    s.export.remove(&root, b"a").unwrap();
    assert!(s.export.lookup(&root, b"c").is_ok());
}
