//! Confinement: no handle and no operation ever reaches outside the
//! exported directory, and handles follow objects as they should.

mod common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use common::{exists, mode, Scratch};
use rpcrdma_nfs::fs::*;

fn secret(s: &Scratch) -> Vec<u8> {
    std::fs::read(s.outside().join("secret")).unwrap()
}

#[test]
fn names_with_slash_or_nul_are_refused() {
    let s = Scratch::new();
    let root = s.root();
    for bad in [
        &b"../outside/secret"[..],
        b"../outside",
        b"a/b",
        b"/etc",
        b"a\0b",
        b"",
    ] {
        assert_eq!(
            s.export.lookup(&root, bad).map(|_| ()),
            Err(NfsError::Inval),
            "{bad:?}"
        );
        let how = CreateHow::Unchecked(mode(0o644));
        assert_eq!(
            s.export.create(&root, bad, how).map(|_| ()),
            Err(NfsError::Inval)
        );
        assert_eq!(
            s.export.mkdir(&root, bad, &mode(0o755)).map(|_| ()),
            Err(NfsError::Inval)
        );
        assert_eq!(s.export.remove(&root, bad), Err(NfsError::Inval));
        assert_eq!(s.export.rmdir(&root, bad), Err(NfsError::Inval));
    }
    std::fs::write(s.path("f"), b"f").unwrap();
    assert_eq!(
        s.export
            .rename(&root, b"f", &root, b"../outside/f")
            .map(|_| ()),
        Err(NfsError::Inval)
    );
    assert_eq!(
        s.export
            .rename(&root, b"../outside/secret", &root, b"g")
            .map(|_| ()),
        Err(NfsError::Inval)
    );
    let how = CreateHow::Unchecked(mode(0o644));
    assert_eq!(
        s.export.create(&root, b"../outside/new", how).map(|_| ()),
        Err(NfsError::Inval)
    );
    assert!(!exists(&s.outside().join("new")));
    assert!(!exists(&s.outside().join("f")));
    assert_eq!(secret(&s), b"outside data");
}

#[test]
fn dotdot_never_climbs_above_the_root() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("a/b")).unwrap();
    let root = s.root();
    let root_id = s.export.getattr(&root).unwrap().fileid;
    let up = s.export.lookup(&root, b"..").unwrap();
    assert_eq!(up.handle, root, "`..` of the root is the root");
    assert_eq!(up.attr.fileid, root_id);
    // Climb from deep down, further than the depth: stays at the root.
    let mut fh = s.walk("a/b");
    for _ in 0..5 {
        fh = s.export.lookup(&fh, b"..").unwrap().handle;
    }
    assert_eq!(fh, root);
    assert_eq!(s.export.lookup(&fh, b"outside"), Err(NfsError::NoEnt));
    // READDIR(PLUS) of the root: `..` is the root too.
    let rd = s.export.readdirplus(&root, 0, [0; 8], 100).unwrap();
    let dotdot = rd.entries.iter().find(|e| e.entry.name == b"..").unwrap();
    assert_eq!(dotdot.entry.fileid, root_id);
    assert_eq!(dotdot.handle.as_ref(), Some(&root));
}

#[test]
fn symlinks_pointing_outside_are_never_followed() {
    let s = Scratch::new();
    let root = s.root();
    symlink("../outside", s.path("out")).unwrap();
    symlink("../outside/secret", s.path("sec")).unwrap();
    symlink(s.outside().join("secret"), s.path("abs")).unwrap();
    // LOOKUP gives the symlink itself.
    let out = s.export.lookup(&root, b"out").unwrap();
    assert_eq!(out.attr.ftype, FileType::Symlink);
    assert_eq!(
        s.export.lookup(&out.handle, b"secret").map(|_| ()),
        Err(NfsError::NotDir)
    );
    assert_eq!(
        s.export.readdir(&out.handle, 0, [0; 8], 10).map(|_| ()),
        Err(NfsError::NotDir)
    );
    assert_eq!(
        s.export.mkdir(&out.handle, b"x", &mode(0o755)).map(|_| ()),
        Err(NfsError::NotDir)
    );
    let before = std::fs::metadata(s.outside().join("secret")).unwrap();
    for name in [&b"sec"[..], b"abs"] {
        let l = s.export.lookup(&root, name).unwrap();
        assert_eq!(l.attr.ftype, FileType::Symlink);
        assert_ne!(l.attr.fileid, before.ino());
        assert_eq!(
            s.export.read(&l.handle, 0, 100).map(|_| ()),
            Err(NfsError::Inval)
        );
        let w = s.export.write(&l.handle, 0, b"pwned", StableHow::FileSync);
        assert_eq!(w.map(|_| ()), Err(NfsError::Inval));
        let trunc = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(
            s.export.setattr(&l.handle, &trunc, None).map(|_| ()),
            Err(NfsError::Inval)
        );
        // A mode on a symlink is ignored (knfsd), not applied to the target.
        s.export.setattr(&l.handle, &mode(0o777), None).unwrap();
        // CREATE over the symlink does not open the target.
        let how = CreateHow::Unchecked(SetAttr {
            size: Some(0),
            ..SetAttr::default()
        });
        assert!(s.export.create(&root, name, how).is_err());
        let how = CreateHow::Exclusive([1; 8]);
        assert!(s.export.create(&root, name, how).is_err());
    }
    let after = std::fs::metadata(s.outside().join("secret")).unwrap();
    assert_eq!(secret(&s), b"outside data");
    assert_eq!(after.mode(), before.mode());
    assert_eq!(after.mtime(), before.mtime());
}

#[test]
fn a_file_swapped_for_a_symlink_goes_stale() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"inside").unwrap();
    let f = s.walk("f");
    std::fs::remove_file(s.path("f")).unwrap();
    symlink("../outside/secret", s.path("f")).unwrap();
    assert_eq!(s.export.read(&f, 0, 100).map(|_| ()), Err(NfsError::Stale));
    assert_eq!(
        s.export.write(&f, 0, b"x", StableHow::FileSync).map(|_| ()),
        Err(NfsError::Stale)
    );
    assert_eq!(secret(&s), b"outside data");
}

#[test]
fn removed_objects_are_stale_and_new_ones_get_new_handles() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"1").unwrap();
    std::fs::create_dir(s.path("d")).unwrap();
    let f = s.walk("f");
    let d = s.walk("d");
    std::fs::remove_file(s.path("f")).unwrap();
    std::fs::remove_dir(s.path("d")).unwrap();
    assert_eq!(s.export.getattr(&f), Err(NfsError::Stale));
    assert_eq!(s.export.getattr(&d), Err(NfsError::Stale));
    assert_eq!(s.export.lookup(&d, b"x").map(|_| ()), Err(NfsError::Stale));
    // Recreated under the same names: other objects, other handles.
    std::fs::write(s.path("f"), b"2").unwrap();
    std::fs::create_dir(s.path("d")).unwrap();
    assert_ne!(s.walk("f"), f);
    assert_ne!(s.walk("d"), d);
    assert_eq!(s.export.getattr(&f), Err(NfsError::Stale));
}

#[test]
fn handles_are_stable_across_lookups_and_renames() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("a/b")).unwrap();
    std::fs::write(s.path("a/b/f"), b"data").unwrap();
    let b = s.walk("a/b");
    let f = s.walk("a/b/f");
    for _ in 0..3 {
        assert_eq!(s.walk("a/b"), b);
        assert_eq!(s.walk("a/b/f"), f);
    }
    // Renamed by a client.
    let a = s.walk("a");
    s.export.rename(&a, b"b", &s.root(), b"c").unwrap();
    assert_eq!(s.walk("c"), b);
    assert_eq!(s.export.lookup(&b, b"f").unwrap().handle, f);
    assert_eq!(s.export.read(&f, 0, 10).unwrap().data, b"data");
    // Renamed by a local process while the handles are held.
    std::fs::rename(s.path("c"), s.path("a/e")).unwrap();
    assert_eq!(s.walk("a/e"), b);
    assert_eq!(s.export.read(&f, 0, 10).unwrap().data, b"data");
    s.export
        .create(&b, b"new", CreateHow::Guarded(mode(0o644)))
        .unwrap();
    assert!(exists(&s.path("a/e/new")));
    // A file renamed by a client keeps its handle.
    s.export.rename(&b, b"f", &a, b"g").unwrap();
    assert_eq!(s.walk("a/g"), f);
    assert_eq!(s.export.read(&f, 0, 10).unwrap().data, b"data");
    assert_eq!(s.export.lookup(&b, b"f").map(|_| ()), Err(NfsError::NoEnt));
}

#[test]
fn a_directory_moved_out_of_the_export_is_stale_until_it_returns() {
    let s = Scratch::new();
    std::fs::create_dir(s.path("d")).unwrap();
    std::fs::write(s.path("d/f"), b"x").unwrap();
    let d = s.walk("d");
    let f = s.walk("d/f");
    std::fs::rename(s.path("d"), s.outside().join("d")).unwrap();
    assert_eq!(s.export.getattr(&d), Err(NfsError::Stale));
    assert_eq!(s.export.lookup(&d, b"f").map(|_| ()), Err(NfsError::Stale));
    assert_eq!(s.export.read(&f, 0, 1).map(|_| ()), Err(NfsError::Stale));
    let how = CreateHow::Guarded(mode(0o644));
    assert_eq!(
        s.export.create(&d, b"n", how).map(|_| ()),
        Err(NfsError::Stale)
    );
    assert!(!exists(&s.outside().join("d/n")));
    std::fs::rename(s.outside().join("d"), s.path("d2")).unwrap();
    assert_eq!(s.export.getattr(&d).unwrap().ftype, FileType::Directory);
    assert_eq!(s.walk("d2"), d);
    // Files in it were unreachable, not forgotten.
    assert_eq!(s.export.read(&f, 0, 1).unwrap().data, b"x");
}

#[test]
fn hard_links_share_one_handle() {
    let s = Scratch::new();
    std::fs::create_dir(s.path("d")).unwrap();
    std::fs::write(s.path("one"), b"x").unwrap();
    std::fs::hard_link(s.path("one"), s.path("d/two")).unwrap();
    let one = s.walk("one");
    let two = s.walk("d/two");
    assert_eq!(one, two);
    assert_eq!(s.export.getattr(&one).unwrap().nlink, 2);
    s.export.remove(&s.root(), b"one").unwrap();
    assert_eq!(s.export.read(&two, 0, 1).unwrap().data, b"x");
    assert_eq!(s.export.getattr(&two).unwrap().nlink, 1);
    s.export.remove(&s.walk("d"), b"two").unwrap();
    assert_eq!(s.export.getattr(&two), Err(NfsError::Stale));
}

#[test]
fn handles_from_elsewhere_or_forged_fail() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"x").unwrap();
    let f = s.walk("f");
    // Another server instance over the same directory.
    let again = Export::new(s.path(""), ExportConfig::default()).unwrap();
    assert_eq!(again.getattr(&f), Err(NfsError::Stale));
    assert_eq!(again.getattr(&s.root()), Err(NfsError::Stale));
    // Another export of this server (another id).
    let other = ExportConfig {
        export_id: 2,
        ..ExportConfig::default()
    };
    let other = Export::new(s.outside(), other).unwrap();
    assert_eq!(s.export.getattr(&other.root()), Err(NfsError::Stale));
    // Forged: every single-bit change of a valid handle is refused.
    let bytes = f.as_bytes().to_vec();
    for i in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[i / 8] ^= 1 << (i % 8);
        let r = s.export.getattr(&FileHandle::from_bytes(&b).unwrap());
        assert!(
            matches!(r, Err(NfsError::BadHandle | NfsError::Stale)),
            "bit {i}: {r:?}"
        );
    }
    assert_eq!(
        s.export.getattr(&FileHandle::from_bytes(&[]).unwrap()),
        Err(NfsError::BadHandle)
    );
    assert!(f.as_bytes().len() <= MAX_HANDLE_LEN);
}

#[test]
fn mode_changes_reach_only_the_object() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"x").unwrap();
    let f = s.walk("f");
    s.export.setattr(&f, &mode(0o600), None).unwrap();
    assert_eq!(
        std::fs::metadata(s.path("f")).unwrap().permissions().mode() & 0o777,
        0o600
    );
}
