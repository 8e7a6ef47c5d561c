//! READDIR / READDIRPLUS paging with cookies.

mod common;

use std::collections::HashMap;

use common::Scratch;
use rpcrdma_nfs::fs::*;

/// Pages through a directory `per_call` entries at a time, following
/// cookies; returns every name with how often it was seen.
fn page_all(s: &Scratch, dir: &FileHandle, per_call: usize) -> (HashMap<Vec<u8>, usize>, usize) {
    let mut seen = HashMap::new();
    let (mut cookie, mut verf, mut calls) = (0, [0u8; 8], 0);
    loop {
        let rd = s.export.readdir(dir, cookie, verf, per_call).unwrap();
        calls += 1;
        assert!(rd.entries.len() <= per_call);
        assert!(calls < 10_000, "no progress");
        for e in &rd.entries {
            *seen.entry(e.name.clone()).or_insert(0) += 1;
        }
        if rd.eof {
            return (seen, calls);
        }
        assert!(!rd.entries.is_empty(), "not eof but no entries");
        cookie = rd.entries.last().unwrap().cookie;
        verf = rd.verf;
    }
}

#[test]
fn paging_1000_files_returns_each_exactly_once() {
    let s = Scratch::new();
    std::fs::create_dir(s.path("big")).unwrap();
    for i in 0..1000 {
        std::fs::write(s.path(&format!("big/file{i:04}")), b"").unwrap();
    }
    let dir = s.walk("big");
    for per_call in [1000 + 2, 7, 64] {
        let (seen, calls) = page_all(&s, &dir, per_call);
        assert_eq!(seen.len(), 1002, "per_call {per_call}");
        assert!(
            seen.values().all(|&n| n == 1),
            "duplicates with per_call {per_call}"
        );
        for i in 0..1000 {
            assert!(seen.contains_key(format!("file{i:04}").as_bytes()));
        }
        assert!(seen.contains_key(&b"."[..]) && seen.contains_key(&b".."[..]));
        assert_eq!(calls, 1002_usize.div_ceil(per_call), "per_call {per_call}");
    }
}

#[test]
fn cookies_stay_valid_across_calls_and_entries_carry_fileids() {
    let s = Scratch::new();
    for i in 0..50 {
        std::fs::write(s.path(&format!("f{i}")), b"").unwrap();
    }
    let root = s.root();
    let first = s.export.readdir(&root, 0, [0; 8], 10).unwrap();
    assert!(!first.eof);
    let cookie = first.entries[4].cookie;
    // Resuming twice from the same cookie gives the same entries.
    let a = s.export.readdir(&root, cookie, first.verf, 10).unwrap();
    let b = s.export.readdir(&root, cookie, first.verf, 10).unwrap();
    assert_eq!(a.entries, b.entries);
    assert_eq!(a.entries[..5], first.entries[5..]);
    for e in &a.entries {
        if e.name != b"." && e.name != b".." {
            let l = s.export.lookup(&root, &e.name).unwrap();
            assert_eq!(l.attr.fileid, e.fileid);
        }
    }
}

#[test]
fn cookie_verifier_and_bounds() {
    let s = Scratch::new();
    std::fs::write(s.path("f"), b"").unwrap();
    let root = s.root();
    let rd = s.export.readdir(&root, 0, [9; 8], 1).unwrap();
    assert_eq!(rd.verf, s.export.cookie_verifier());
    let c = rd.entries[0].cookie;
    assert_eq!(
        s.export.readdir(&root, c, [9; 8], 1).map(|_| ()),
        Err(NfsError::BadCookie)
    );
    assert_eq!(
        s.export.readdir(&root, 0, [0; 8], 0).map(|_| ()),
        Err(NfsError::TooSmall)
    );
    // The per-call entry cap of the export applies.
    let capped = ExportConfig {
        max_dir_entries: 2,
        ..ExportConfig::default()
    };
    let s2 = Scratch::with(capped);
    for i in 0..5 {
        std::fs::write(s2.path(&format!("f{i}")), b"").unwrap();
    }
    let rd = s2.export.readdir(&s2.root(), 0, [0; 8], 100).unwrap();
    assert_eq!((rd.entries.len(), rd.eof), (2, false));
}

#[test]
fn readdirplus_gives_the_lookup_handles_and_attributes() {
    let s = Scratch::new();
    std::fs::create_dir(s.path("d")).unwrap();
    std::fs::write(s.path("d/f"), b"abc").unwrap();
    std::os::unix::fs::symlink("/etc", s.path("d/l")).unwrap();
    let d = s.walk("d");
    let rd = s.export.readdirplus(&d, 0, [0; 8], 100).unwrap();
    assert!(rd.eof);
    assert_eq!(rd.entries.len(), 4);
    for e in &rd.entries {
        let h = e.handle.clone().unwrap();
        let a = e.attr.unwrap();
        assert_eq!(a.fileid, e.entry.fileid, "{:?}", e.entry.name);
        let l = s.export.lookup(&d, &e.entry.name).unwrap();
        assert_eq!(l.handle, h, "{:?}", e.entry.name);
        if e.entry.name == b"l" {
            assert_eq!(a.ftype, FileType::Symlink);
        }
        if e.entry.name == b"f" {
            assert_eq!(a.size, 3);
        }
    }
    let dotdot = rd.entries.iter().find(|e| e.entry.name == b"..").unwrap();
    assert_eq!(dotdot.handle.as_ref(), Some(&s.root()));
}
