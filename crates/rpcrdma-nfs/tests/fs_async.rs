//! The async facade runs operations off the reactor, bounded: through the
//! export's lane (queued calls drained by one blocking thread, another
//! when the oldest waits too long) or one hand-off per operation.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{mode, Scratch};
use rpcrdma_nfs::fs::*;

/// The lane with the server's default bound.
const LANE: Option<Duration> = Some(rpcrdma_nfs::server::IO_QUEUE_WAIT);
/// Both ways of handing an operation over.
const BOTH: [Option<Duration>; 2] = [LANE, None];

fn facade(max_blocking: usize, how: Option<Duration>) -> (Scratch, Arc<Export>, AsyncExport) {
    let s = Scratch::new();
    let export = Arc::new(Export::new(s.path(""), ExportConfig::default()).unwrap());
    let f = AsyncExport::new(export.clone(), max_blocking, how);
    (s, export, f)
}

#[tokio::test(flavor = "current_thread")]
async fn operations_run_on_the_blocking_pool() {
    for how in BOTH {
        let (_s, export, facade) = facade(4, how);
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
        assert_ne!(thread, reactor, "ran on the reactor thread ({how:?})");
        let fh = created.handle.clone();
        let r = facade.run(move |e| e.read(&fh, 0, 10)).await.unwrap();
        assert_eq!(r.data, b"async");
        // Errors come back as they are.
        let root = export.root();
        let e = facade.run(move |e| e.lookup(&root, b"missing")).await;
        assert_eq!(e.map(|_| ()), Err(NfsError::NoEnt), "{how:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_max_blocking_run_at_once() {
    // A short bound: late calls start more drainers, up to the limit.
    for how in [Some(Duration::from_millis(1)), None] {
        let (_s, _export, facade) = facade(2, how);
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
                        std::thread::sleep(Duration::from_millis(5));
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
            "peak {peak} concurrent blocking operations ({how:?})"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_panicking_operation_is_a_server_fault() {
    for how in BOTH {
        let (_s, _export, facade) = facade(1, how);
        let r: NfsResult<()> = facade.run(|_| panic!("boom")).await;
        assert_eq!(r, Err(NfsError::ServerFault), "{how:?}");
        // The thread (or permit) came back: the next operation runs.
        assert!(facade.run(|e| e.getattr(&e.root())).await.is_ok());
    }
}

/// Calls queued while the lane's drainer is busy run on that same thread,
/// one after the other (no hand-off each), and the drainer goes back to
/// the pool when the queue is empty.
#[tokio::test(flavor = "current_thread")]
async fn queued_calls_run_on_the_busy_drainer() {
    // A bound no call reaches here: one drainer only.
    let (_s, _export, facade) = facade(8, Some(Duration::from_secs(30)));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // The first call holds the drainer until every other call is queued.
    let first = {
        let f = facade.clone();
        tokio::spawn(async move {
            f.run(move |_| {
                go_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                Ok(std::thread::current().id())
            })
            .await
        })
    };
    let mut rest = Vec::new();
    for _ in 0..6 {
        let f = facade.clone();
        rest.push(tokio::spawn(async move {
            f.run(|_| Ok(std::thread::current().id())).await
        }));
    }
    // Let every task queue its call.
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(facade.drainers(), 1, "one drainer for the queue");
    go_tx.send(()).unwrap();
    let drainer = first.await.unwrap().unwrap();
    for t in rest {
        assert_eq!(
            t.await.unwrap().unwrap(),
            drainer,
            "a queued call ran on another thread than the busy drainer"
        );
    }
    // The drainer leaves when the queue is empty.
    let mut waited = 0;
    while facade.drainers() != 0 {
        assert!(waited < 5000, "the drainer never left");
        tokio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
    }
}

/// A slow operation (an fsync, say) holds up calls queued behind it by
/// about the lane's bound, not by its own length: another drainer starts
/// and runs them while it still runs.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_operation_does_not_hold_up_the_queue() {
    let (_s, _export, facade) = facade(4, Some(Duration::from_millis(5)));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let slow = {
        let f = facade.clone();
        tokio::spawn(async move {
            f.run(move |_| {
                started_tx.send(()).unwrap();
                // Until the quick call has finished (or the test gave up).
                release_rx
                    .recv_timeout(Duration::from_secs(20))
                    .map_err(|_| NfsError::Io)
            })
            .await
        })
    };
    tokio::task::yield_now().await;
    // The slow operation holds the only drainer (a blocking wait here is
    // fine: the drainer is another thread).
    started_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(facade.drainers(), 1);
    let quick = facade.run(|e| e.getattr(&e.root()));
    let r = tokio::time::timeout(Duration::from_secs(10), quick).await;
    assert!(
        matches!(r, Ok(Ok(_))),
        "the call queued behind a slow one waited for it"
    );
    assert!(!slow.is_finished(), "the slow operation ended early");
    release_tx.send(()).unwrap();
    slow.await.unwrap().unwrap();
}
