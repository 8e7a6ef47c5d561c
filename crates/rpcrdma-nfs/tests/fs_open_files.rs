//! The open-file cache: READ/WRITE reuse a descriptor, and what would
//! make it wrong closes it (REMOVE, RENAME, SETATTR, a local unlink, idle
//! time, the bound).

mod common;

use std::time::Duration;

use common::{mode, Scratch};
use rpcrdma_nfs::fs::*;

fn file(s: &Scratch, name: &str, data: &[u8]) -> FileHandle {
    std::fs::write(s.path(name), data).unwrap();
    s.walk(name)
}

#[test]
fn reads_and_writes_reuse_one_descriptor_per_access() {
    let s = Scratch::new();
    let fh = file(&s, "f", b"hello");
    for _ in 0..3 {
        assert_eq!(s.export.read(&fh, 0, 5).unwrap().data, b"hello");
    }
    assert_eq!(s.export.open_file_count(), 1);
    s.export.write(&fh, 5, b"!", StableHow::Unstable).unwrap();
    assert_eq!(s.export.open_file_count(), 2, "read and write descriptors");
    // The read descriptor sees the write.
    assert_eq!(s.export.read(&fh, 0, 10).unwrap().data, b"hello!");
    assert_eq!(s.export.open_file_count(), 2);
}

#[test]
fn remove_rename_and_setattr_close_it() {
    let s = Scratch::new();
    let root = s.root();
    let fh = file(&s, "f", b"data");
    s.export.read(&fh, 0, 4).unwrap();
    s.export.setattr(&fh, &mode(0o600), None).unwrap();
    assert_eq!(s.export.open_file_count(), 0, "SETATTR");
    s.export.read(&fh, 0, 4).unwrap();
    s.export.rename(&root, b"f", &root, b"g").unwrap();
    assert_eq!(s.export.open_file_count(), 0, "RENAME");
    assert_eq!(s.export.read(&fh, 0, 4).unwrap().data, b"data");
    // RENAME over it: the replaced file's descriptor closes.
    let other = file(&s, "h", b"other");
    s.export.read(&other, 0, 5).unwrap();
    s.export.rename(&root, b"g", &root, b"h").unwrap();
    assert_eq!(s.export.read(&other, 0, 5), Err(NfsError::Stale));
    s.export.remove(&root, b"h").unwrap();
    assert_eq!(s.export.open_file_count(), 0, "REMOVE");
    assert_eq!(s.export.read(&fh, 0, 4), Err(NfsError::Stale));
}

#[test]
fn a_file_removed_locally_is_stale_even_while_cached() {
    let s = Scratch::new();
    let fh = file(&s, "f", b"data");
    s.export.read(&fh, 0, 4).unwrap();
    assert_eq!(s.export.open_file_count(), 1);
    std::fs::remove_file(s.path("f")).unwrap();
    assert_eq!(s.export.read(&fh, 0, 4), Err(NfsError::Stale));
    assert_eq!(s.export.open_file_count(), 0);
    let w = s.export.write(&fh, 0, b"x", StableHow::Unstable);
    assert_eq!(w.map(|_| ()), Err(NfsError::Stale));
}

#[test]
fn bounded_and_closed_when_idle() {
    let s = Scratch::with(ExportConfig {
        open_files: 2,
        open_file_idle: Duration::from_millis(50),
        ..ExportConfig::default()
    });
    let fhs: Vec<_> = (0..5).map(|i| file(&s, &format!("f{i}"), b"x")).collect();
    for fh in &fhs {
        s.export.read(fh, 0, 1).unwrap();
        assert!(s.export.open_file_count() <= 2);
    }
    assert_eq!(s.export.open_file_count(), 2);
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(s.export.sweep_open_files(), 2);
    assert_eq!(s.export.open_file_count(), 0);
    // Off: nothing kept.
    let off = Scratch::with(ExportConfig {
        open_files: 0,
        ..ExportConfig::default()
    });
    let fh = file(&off, "f", b"x");
    off.export.read(&fh, 0, 1).unwrap();
    assert_eq!(off.export.open_file_count(), 0);
}
