//! The async facade: export operations off the reactor threads, on
//! tokio's blocking pool.
//!
//! Two ways to hand an operation over ([`AsyncExport::new`] picks):
//!
//! * **One hand-off per operation** (`max_wait` `None`, the server's
//!   default): `spawn_blocking` for every operation, at most
//!   `max_blocking` at once.
//! * **A lane** (`max_wait` given): calls queue in one FIFO per export. A
//!   blocking thread (a *drainer*, from tokio's pool) takes calls from the
//!   queue and runs them one after the other until the queue is empty, then
//!   goes back to the pool. A call queued while a drainer runs costs a push
//!   under a lock: no thread wake-up, no futex pair, no context switch into
//!   a pool thread per call (`BENCHMARKS.md`, NFS section). Another drainer
//!   starts when the oldest queued call has waited `max_wait` (the drainers
//!   are busy in something slow: an fsync, a large READDIR), up to
//!   `max_blocking` drainers, so a slow operation holds up the others by
//!   about `max_wait`, not by its own length. The lane is the export's:
//!   on a server with several cores, calls from many clients that each
//!   take less than `max_wait` run one after the other on one core where
//!   the per-operation hand-off spreads them (hence not the default; see
//!   `BENCHMARKS.md`, NFS section, for what it saves on one CPU).
//!
//! Either way at most `max_blocking` operations run at once, the others
//! wait without holding a thread, an operation runs to its end even if the
//! caller's future is dropped, and a panic in one is `ServerFault`.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify, Semaphore};

use super::error::{NfsError, NfsResult};
use super::export::Export;

/// Runs [`Export`] operations off the reactor threads (see the module
/// docs).
#[derive(Clone)]
pub struct AsyncExport {
    export: Arc<Export>,
    how: How,
}

#[derive(Clone)]
enum How {
    Lane(Arc<Lane>),
    PerCall(Arc<Semaphore>),
}

impl AsyncExport {
    /// The facade with a lane whose queued calls wait at most about
    /// `max_wait` for a drainer (`None`: one `spawn_blocking` per
    /// operation); `max_blocking` (at least 1) bounds the operations
    /// running at once. Calls [`AsyncExport::run`] from a tokio runtime
    /// with its timer enabled.
    pub fn new(export: Arc<Export>, max_blocking: usize, max_wait: Option<Duration>) -> Self {
        let max_blocking = max_blocking.max(1);
        let how = match max_wait {
            Some(max_wait) => How::Lane(Arc::new(Lane {
                export: export.clone(),
                state: Mutex::new(LaneState::default()),
                max_drainers: max_blocking,
                max_wait,
                watchdog: AtomicBool::new(false),
                wake: Arc::new(Notify::new()),
            })),
            None => How::PerCall(Arc::new(Semaphore::new(max_blocking))),
        };
        AsyncExport { export, how }
    }

    /// The export.
    pub fn export(&self) -> &Arc<Export> {
        &self.export
    }

    /// Runs `op` off the reactor, e.g.
    /// `facade.run(move |e| e.read(&fh, 0, 4096)).await`. `op` runs to its
    /// end even if the returned future is dropped. A panic in `op` is
    /// `ServerFault`.
    pub async fn run<T, F>(&self, op: F) -> NfsResult<T>
    where
        F: FnOnce(&Export) -> NfsResult<T> + Send + 'static,
        T: Send + 'static,
    {
        match &self.how {
            How::Lane(lane) => lane.run(op).await,
            How::PerCall(permits) => {
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| NfsError::ServerFault)?;
                let export = self.export.clone();
                let job = tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    op(&export)
                });
                job.await.unwrap_or(Err(NfsError::ServerFault))
            }
        }
    }

    /// Drainers running now (0 with one hand-off per operation).
    pub fn drainers(&self) -> usize {
        match &self.how {
            How::Lane(lane) => lane.state().drainers,
            How::PerCall(_) => 0,
        }
    }
}

/// A queued call: the operation with its reply channel, and when it
/// was queued.
struct Job {
    run: Box<dyn FnOnce(&Export) + Send>,
    queued: Instant,
}

/// One export's queue and its drainers.
struct Lane {
    export: Arc<Export>,
    state: Mutex<LaneState>,
    max_drainers: usize,
    max_wait: Duration,
    /// The watchdog task was spawned.
    watchdog: AtomicBool,
    /// Wakes the watchdog (when the lane becomes busy, or is dropped).
    wake: Arc<Notify>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        // The watchdog ends.
        self.wake.notify_one();
    }
}

/// The lane's watchdog: asleep while the lane is idle; while it is busy,
/// a look when the oldest queued call would be late, at least every
/// `max_wait` (one timer for the lane, not one per call: a tokio timer set
/// earlier than the runtime's next wake-up costs a wake of the reactor,
/// an eventfd write).
async fn watchdog(lane: Weak<Lane>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let Some(every) = lane.upgrade().map(|l| l.max_wait) else {
            return;
        };
        let mut next = Instant::now() + every;
        loop {
            tokio::time::sleep_until(next.into()).await;
            let Some(l) = lane.upgrade() else { return };
            match l.look() {
                Some(n) => next = n,
                None => break,
            }
        }
    }
}

#[derive(Default)]
struct LaneState {
    queue: VecDeque<Job>,
    /// Drainers started and not yet finished (at most `max_drainers`).
    drainers: usize,
    /// The watchdog looks (it was woken since the lane was last idle).
    watched: bool,
}

impl Lane {
    fn state(&self) -> MutexGuard<'_, LaneState> {
        // A job never panics under the lock (it runs outside it).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn run<T, F>(self: &Arc<Self>, op: F) -> NfsResult<T>
    where
        F: FnOnce(&Export) -> NfsResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.submit(Job {
            run: Box::new(move |e: &Export| {
                let r = catch_unwind(AssertUnwindSafe(|| op(e)));
                let _ = tx.send(r.unwrap_or(Err(NfsError::ServerFault)));
            }),
            queued: Instant::now(),
        });
        rx.await.unwrap_or(Err(NfsError::ServerFault))
    }

    /// Queues `job`, starting a drainer when none runs, and the watchdog
    /// when the lane was idle.
    fn submit(self: &Arc<Self>, job: Job) {
        let (start, watch) = {
            let mut s = self.state();
            s.queue.push_back(job);
            let start = s.drainers == 0;
            if start {
                s.drainers = 1;
            }
            let watch = !s.watched;
            s.watched = true;
            (start, watch)
        };
        if start {
            self.spawn_drainer();
        }
        if watch {
            self.watch();
        }
    }

    /// Wakes the watchdog (started on the first call): while the lane is
    /// busy it looks every `max_wait` for a late call.
    fn watch(self: &Arc<Self>) {
        let first = !self.watchdog.swap(true, Ordering::AcqRel);
        if first {
            let lane = Arc::downgrade(self);
            let wake = self.wake.clone();
            tokio::spawn(watchdog(lane, wake));
        }
        self.wake.notify_one();
    }

    /// One look of the watchdog: another drainer if a call is late; when
    /// to look again (when the oldest queued call will be late, else
    /// `max_wait` on), or `None` (and unwatched) when the lane is idle.
    fn look(self: &Arc<Self>) -> Option<Instant> {
        let now = Instant::now();
        self.overdue(now);
        let mut s = self.state();
        s.watched = s.drainers > 0 || !s.queue.is_empty();
        let next = match s.queue.front() {
            Some(j) if now < j.queued + self.max_wait => j.queued + self.max_wait,
            _ => now + self.max_wait,
        };
        s.watched.then_some(next)
    }

    /// Starts one more drainer when the oldest queued job was queued
    /// `max_wait` before `now` and fewer than `max_drainers` run.
    fn overdue(self: &Arc<Self>, now: Instant) {
        let start = {
            let mut s = self.state();
            let late = s
                .queue
                .front()
                .is_some_and(|j| now.saturating_duration_since(j.queued) >= self.max_wait);
            let start = late && s.drainers < self.max_drainers;
            if start {
                s.drainers += 1;
            }
            start
        };
        if start {
            tracing::debug!(max_wait = ?self.max_wait, "a queued file operation is late: one more drainer");
            self.spawn_drainer();
        }
    }

    /// A drainer on the blocking pool (counted in `drainers` already).
    fn spawn_drainer(self: &Arc<Self>) {
        let d = Drainer {
            lane: self.clone(),
            done: false,
        };
        // Dropped unrun (the runtime shuts down): `Drainer::drop` gives
        // the count back.
        drop(tokio::task::spawn_blocking(move || {
            let mut d = d;
            d.drain()
        }));
    }
}

/// A running drainer: takes jobs until the queue is empty.
struct Drainer {
    lane: Arc<Lane>,
    /// It counted itself out of `drainers`.
    done: bool,
}

impl Drainer {
    fn drain(&mut self) {
        loop {
            let job = {
                let mut s = self.lane.state();
                match s.queue.pop_front() {
                    Some(j) => j,
                    None => {
                        s.drainers -= 1;
                        self.done = true;
                        return;
                    }
                }
            };
            (job.run)(&self.lane.export);
        }
    }
}

impl Drop for Drainer {
    fn drop(&mut self) {
        if !self.done {
            let mut s = self.lane.state();
            s.drainers = s.drainers.saturating_sub(1);
        }
    }
}
