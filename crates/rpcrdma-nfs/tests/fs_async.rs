//! The async facade runs operations off the reactor, bounded.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{mode, Scratch};
use rpcrdma_nfs::fs::*;

#[tokio::test(flavor = "current_thread")]
async fn operations_run_on_the_blocking_pool() {
    let s = Scratch::new();
    let export = Arc::new(Export::new(s.path(""), ExportConfig::default()).unwrap());
    let facade = AsyncExport::new(export.clone(), 4);
    let reactor = std::thread::current().id();
    let root = export.root();
    let (thread, created) = facade
        .run(move |e| {
            let c = e.create(&root, b"f", CreateHow::Guarded(mode(0o644)))?;
            e.write(&c.handle, 0, b"async", StableHow::FileSync)?;
            Ok((std::thread::current().id(), c))
        })
        .await
        .unwrap();
    assert_ne!(thread, reactor, "ran on the reactor thread");
    let fh = created.handle.clone();
    let r = facade.run(move |e| e.read(&fh, 0, 10)).await.unwrap();
    assert_eq!(r.data, b"async");
    // Errors come back as they are.
    let root = export.root();
    let e = facade.run(move |e| e.lookup(&root, b"missing")).await;
    assert_eq!(e.map(|_| ()), Err(NfsError::NoEnt));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_blocking_run_at_once() {
    let s = Scratch::new();
    let export = Arc::new(Export::new(s.path(""), ExportConfig::default()).unwrap());
    let facade = AsyncExport::new(export, 2);
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (facade, running, peak) = (facade.clone(), running.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            facade
                .run(move |e| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Hold the slot while others try to start.
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    running.fetch_sub(1, Ordering::SeqCst);
                    e.getattr(&e.root())
                })
                .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&peak),
        "peak {peak} concurrent blocking operations"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_panicking_operation_is_a_server_fault() {
    let s = Scratch::new();
    let export = Arc::new(Export::new(s.path(""), ExportConfig::default()).unwrap());
    let facade = AsyncExport::new(export, 1);
    let r: NfsResult<()> = facade.run(|_| panic!("boom")).await;
    assert_eq!(r, Err(NfsError::ServerFault));
    // The permit came back: the next operation runs.
    assert!(facade.run(|e| e.getattr(&e.root())).await.is_ok());
}
