//! Wake-ups at instants from one thread of the process instead of the
//! runtime's timer wheel: the connections' deadline alarms (the calls'
//! deadlines, the engine's and the provider's timers).
//!
//! Why not tokio's timer: a connection always has a deadline armed while
//! a call is outstanding (its caller's timeout, the engine's), and while
//! any timer sits in tokio's wheel every park of the runtime reads the
//! clock a second time and scans the wheel for its next expiration, though
//! the deadline, seconds away, almost never fires (a reply comes first).
//! That cost ~200 user-space instructions per small call on an async
//! client (BENCHMARKS.md, "Tenth pass: the async client"). Here a
//! connection keeps at most one entry, moved only when its next deadline
//! gets earlier (deadlines of calls made with one timeout only get later),
//! so a call at depth 1 costs one comparison, and the runtime's park sees
//! no timer at all.
//!
//! The thread sleeps on a condition variable until the earliest entry and
//! wakes each entry's waker at or after its instant (a wake-up from
//! another thread: the runtime's own wake-up path), started on the first
//! entry and kept for the life of the process. An entry that fires early
//! for what it guards (its connection's deadline moved later meanwhile)
//! costs one wake-up of the connection, whose next round sets the alarm
//! again. Accuracy is the condition variable's (well under a millisecond
//! on Linux), as good as tokio's millisecond wheel.
//!
//! If the thread cannot be started ([`available`] false) the shells use
//! tokio's timer as before.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// An entry's key: its instant, then the order of arming (unique).
type Key = (Instant, u64);

#[derive(Default)]
struct State {
    entries: BTreeMap<Key, Waker>,
    seq: u64,
    /// The instant the thread sleeps until (`None`: until notified).
    until: Option<Instant>,
}

struct Thread {
    st: Mutex<State>,
    cv: Condvar,
}

impl Thread {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        let mut due = Vec::new();
        loop {
            let now = Instant::now();
            while let Some(e) = st.entries.first_entry() {
                if e.key().0 > now {
                    break;
                }
                due.push(e.remove());
            }
            if !due.is_empty() {
                // Woken without the lock held (a waker may arm again).
                drop(st);
                for w in due.drain(..) {
                    w.wake();
                }
                st = self.lock();
                continue;
            }
            st.until = st.entries.first_key_value().map(|(k, _)| k.0);
            st = match st.until {
                Some(t) => {
                    let wait = t.saturating_duration_since(now);
                    self.cv
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// The process's alarm thread, started on first use (`None` if it could
/// not be).
fn thread() -> Option<&'static Thread> {
    static T: OnceLock<Option<&'static Thread>> = OnceLock::new();
    *T.get_or_init(|| {
        let t: &'static Thread = Box::leak(Box::new(Thread {
            st: Mutex::new(State::default()),
            cv: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("rpcrdma-alarm".into())
            .stack_size(64 << 10)
            .spawn(move || t.run())
        {
            Ok(_) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "alarm thread not started: tokio's timer serves the deadlines");
                None
            }
        }
    })
}

/// True if the alarm thread runs (starting it if need be).
pub(crate) fn available() -> bool {
    thread().is_some()
}

/// One entry in the alarm thread at a time: [`Alarm::set`] moves it.
/// Dropping it removes the entry.
#[derive(Default)]
pub(crate) struct Alarm {
    key: Option<Key>,
}

impl Alarm {
    /// Wakes `waker` at `at` (or at once if `at` has passed), instead of
    /// whatever was set before. False if there is no alarm thread.
    pub(crate) fn set(&mut self, at: Instant, waker: &Waker) -> bool {
        let Some(t) = thread() else {
            return false;
        };
        let mut st = t.lock();
        if let Some(k) = self.key.take() {
            st.entries.remove(&k);
        }
        st.seq += 1;
        let key = (at, st.seq);
        st.entries.insert(key, waker.clone());
        self.key = Some(key);
        // The thread sleeps until later (or indefinitely): it looks again.
        if st.until.is_none_or(|u| at < u) {
            st.until = Some(at);
            drop(st);
            t.cv.notify_one();
        }
        true
    }

    /// Removes the entry, if it has not fired.
    pub(crate) fn clear(&mut self) {
        if let (Some(k), Some(t)) = (self.key.take(), thread()) {
            t.lock().entries.remove(&k);
        }
    }

    /// The instant set last (whether it fired or not).
    #[cfg(test)]
    pub(crate) fn at(&self) -> Option<Instant> {
        self.key.map(|k| k.0)
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if self.key.is_some() {
            self.clear();
        }
    }
}

/// A future ready at `at` by the clock, woken by the alarm thread (tokio's
/// `sleep_until` if there is none).
pub(crate) enum SleepUntil {
    Alarm {
        at: Instant,
        alarm: Alarm,
        /// The waker the alarm holds.
        waker: Option<Waker>,
    },
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

/// See [`SleepUntil`].
pub(crate) fn sleep_until(at: Instant) -> SleepUntil {
    if available() {
        SleepUntil::Alarm {
            at,
            alarm: Alarm::default(),
            waker: None,
        }
    } else {
        SleepUntil::Tokio(Box::pin(tokio::time::sleep_until(at.into())))
    }
}

impl Future for SleepUntil {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            SleepUntil::Tokio(s) => s.as_mut().poll(cx),
            SleepUntil::Alarm { at, alarm, waker } => {
                if Instant::now() >= *at {
                    alarm.clear();
                    return Poll::Ready(());
                }
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    alarm.set(*at, cx.waker());
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::task::Wake;
    use std::time::Duration;

    struct Count(AtomicU32, Mutex<Option<Instant>>);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            *self.1.lock().unwrap() = Some(Instant::now());
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicU32::new(0), Mutex::new(None)));
        (c.clone(), Waker::from(c))
    }

    fn wait_for(c: &Count, n: u32, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while c.0.load(Ordering::SeqCst) < n {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// An alarm wakes its waker once, not before its instant; moved
    /// earlier, it wakes at the new instant, not again at the old one; a
    /// cleared (or dropped) one never wakes.
    #[test]
    fn an_alarm_wakes_once_at_its_instant_and_never_when_cleared() {
        assert!(available());
        let (c, w) = counter();
        let t0 = Instant::now();
        let mut a = Alarm::default();
        assert!(a.set(t0 + Duration::from_millis(30), &w));
        assert!(wait_for(&c, 1, Duration::from_secs(10)));
        let fired = c.1.lock().unwrap().unwrap();
        assert!(fired >= t0 + Duration::from_millis(30), "fired early");
        // Moved: far first, then earlier; only the earlier one fires.
        let t1 = Instant::now();
        a.set(t1 + Duration::from_secs(3600), &w);
        a.set(t1 + Duration::from_millis(20), &w);
        assert_eq!(a.at(), Some(t1 + Duration::from_millis(20)));
        assert!(wait_for(&c, 2, Duration::from_secs(10)));
        assert!(c.1.lock().unwrap().unwrap() >= t1 + Duration::from_millis(20));
        // Cleared and dropped alarms do not fire.
        let (d, w2) = counter();
        let mut b = Alarm::default();
        b.set(Instant::now() + Duration::from_millis(10), &w2);
        b.clear();
        let mut e = Alarm::default();
        e.set(Instant::now() + Duration::from_millis(10), &w2);
        drop(e);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(d.0.load(Ordering::SeqCst), 0);
        assert_eq!(c.0.load(Ordering::SeqCst), 2);
    }

    /// Many alarms, set in any order, each fire once at or after its own
    /// instant.
    #[test]
    fn alarms_fire_in_any_order_each_at_its_instant() {
        let t0 = Instant::now();
        let ms = [25u64, 5, 40, 15, 15, 0, 30];
        let mut alarms = Vec::new();
        let mut counts = Vec::new();
        for &m in &ms {
            let (c, w) = counter();
            let mut a = Alarm::default();
            a.set(t0 + Duration::from_millis(m), &w);
            alarms.push(a);
            counts.push(c);
        }
        for (c, &m) in counts.iter().zip(&ms) {
            assert!(wait_for(c, 1, Duration::from_secs(10)));
            assert!(c.1.lock().unwrap().unwrap() >= t0 + Duration::from_millis(m));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(counts.iter().all(|c| c.0.load(Ordering::SeqCst) == 1));
    }

    /// The future is ready at its instant, not before, woken by the alarm
    /// on a runtime without a timer.
    #[test]
    fn sleep_until_is_ready_at_its_instant_without_the_runtimes_timer() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let t0 = Instant::now();
        rt.block_on(sleep_until(t0 + Duration::from_millis(30)));
        assert!(Instant::now() >= t0 + Duration::from_millis(30));
    }
}
