//! A scratch directory under /tmp for one test: `export/` (exported) and
//! `outside/` (a sibling the export must never reach), removed on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rpcrdma_nfs::fs::{Export, ExportConfig, FileHandle, SetAttr};

pub struct Scratch {
    pub base: PathBuf,
    pub export: Export,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Scratch {
    pub fn new() -> Self {
        Self::with(ExportConfig::default())
    }

    pub fn with(config: ExportConfig) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let base = std::env::temp_dir().join(format!(
            "rpcrdma-nfs-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(base.join("export")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/secret"), b"outside data").unwrap();
        let export = Export::new(base.join("export"), config).unwrap();
        Scratch { base, export }
    }

    /// A path inside the exported directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.base.join("export").join(rel)
    }

    pub fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    pub fn root(&self) -> FileHandle {
        self.export.root()
    }

    /// LOOKUP along a `/`-separated path from the root.
    pub fn walk(&self, rel: &str) -> FileHandle {
        let mut fh = self.root();
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            fh = self
                .export
                .lookup(&fh, part.as_bytes())
                .unwrap_or_else(|e| panic!("lookup {part} in {rel}: {e}"))
                .handle;
        }
        fh
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

pub fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

pub fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}
