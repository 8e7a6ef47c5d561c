//! [`ReadSinkBudget`]: a Read-sink budget shared by connections, and
//! each connection's part of it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// The octets of RDMA Read sinks that every connection sharing it (all
/// the connections of one server) may have registered at once.
///
/// Without it each connection has only its own budget
/// ([`Limits::max_read_sink_bytes`](crate::Limits::max_read_sink_bytes)),
/// and a peer with many connections pins that much per connection.
///
/// Accounting only, sans-IO: a mutex around two counters and a queue, no
/// clock, no runtime. A connection takes budget for one received call at a
/// time (its oldest waiting call) before it registers that call's sinks,
/// and gives it back when the call's Reads are done, when they fail, when
/// the connection ends, or when the engine is dropped.
///
/// Fairness: strict first come, first served across connections. A call
/// that does not fit, or that finds others already waiting, takes a ticket
/// at the back of the queue; only the ticket at the front may take budget,
/// so a large call is never overtaken for ever by smaller ones (no
/// starvation), and each connection holds at most one ticket (its oldest
/// waiting call; its later calls wait behind it in the connection), so a
/// busy connection cannot crowd out the others.
///
/// Wake-ups: a ticket carries the waker its connection's driver gave
/// ([`Connection::set_waker`](super::Connection::set_waker)). Whenever
/// budget is given back or the front of the queue changes, the front
/// ticket's waker is woken if its call now fits; its driver then calls
/// [`Connection::handle_read_budget`](super::Connection::handle_read_budget),
/// which takes the budget and wakes the next ticket if that fits too. The
/// check and the registration of the waker happen under one lock, so no
/// release can slip between them (no lost wake-up), and a connection
/// without a ticket is never woken (no polling).
///
/// Shared by the connections whose engine
/// [`Config::read_budget`](super::Config::read_budget) holds it.
pub struct ReadSinkBudget {
    limit: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: u64,
    high: u64,
    waits: u64,
    next_ticket: u64,
    queue: VecDeque<Waiter>,
}

struct Waiter {
    ticket: u64,
    need: u64,
    waker: Option<Waker>,
}

impl fmt::Debug for ReadSinkBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("ReadSinkBudget")
            .field("limit", &self.limit)
            .field("in_use", &st.used)
            .field("waiting", &st.queue.len())
            .finish()
    }
}

impl ReadSinkBudget {
    /// A budget of `limit` octets.
    pub fn new(limit: u64) -> Arc<ReadSinkBudget> {
        Arc::new(ReadSinkBudget {
            limit,
            state: Mutex::new(State::default()),
        })
    }

    /// Octets the sharing connections may have registered at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Octets taken now.
    pub fn in_use(&self) -> u64 {
        self.lock().used
    }

    /// Most octets ever taken at once (never above the limit).
    pub fn high_water(&self) -> u64 {
        self.lock().high
    }

    /// Connections waiting for budget now.
    pub fn waiting(&self) -> usize {
        self.lock().queue.len()
    }

    /// Times a connection had to wait for budget.
    pub fn waits(&self) -> u64 {
        self.lock().waits
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `need` octets for the holder of `ticket` if it may (nobody is
    /// ahead of it and they fit); otherwise queues it (or keeps it queued)
    /// with `waker`, to be woken when it may.
    fn acquire(&self, ticket: &mut Option<u64>, need: u64, waker: Option<&Waker>) -> bool {
        let mut st = self.lock();
        let fits = st.used.saturating_add(need) <= self.limit;
        let first = match *ticket {
            None => st.queue.is_empty(),
            Some(t) => st.queue.front().is_some_and(|w| w.ticket == t),
        };
        if first && fits {
            if ticket.take().is_some() {
                st.queue.pop_front();
            }
            st.used += need;
            st.high = st.high.max(st.used);
            let next = self.front_to_wake(&st);
            drop(st);
            if let Some(w) = next {
                w.wake();
            }
            return true;
        }
        let queued = ticket.and_then(|t| st.queue.iter_mut().find(|w| w.ticket == t));
        match queued {
            Some(w) => {
                w.need = need;
                set_waker(&mut w.waker, waker);
            }
            None => {
                st.next_ticket += 1;
                let t = st.next_ticket;
                st.waits += 1;
                st.queue.push_back(Waiter {
                    ticket: t,
                    need,
                    waker: waker.cloned(),
                });
                *ticket = Some(t);
            }
        }
        false
    }

    /// Gives back `n` octets.
    fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        let mut st = self.lock();
        st.used = st.used.saturating_sub(n);
        let next = self.front_to_wake(&st);
        drop(st);
        if let Some(w) = next {
            w.wake();
        }
    }

    /// Leaves the queue.
    fn cancel(&self, ticket: u64) {
        let mut st = self.lock();
        let Some(i) = st.queue.iter().position(|w| w.ticket == ticket) else {
            return;
        };
        st.queue.remove(i);
        let next = if i == 0 {
            self.front_to_wake(&st)
        } else {
            None
        };
        drop(st);
        if let Some(w) = next {
            w.wake();
        }
    }

    /// A new waker for a queued ticket.
    fn update_waker(&self, ticket: u64, waker: &Waker) {
        let mut st = self.lock();
        if let Some(w) = st.queue.iter_mut().find(|w| w.ticket == ticket) {
            set_waker(&mut w.waker, Some(waker));
        }
    }

    /// The waker of the front ticket, if its call fits now (woken by the
    /// caller after the lock is dropped).
    fn front_to_wake(&self, st: &State) -> Option<Waker> {
        let w = st.queue.front()?;
        if st.used.saturating_add(w.need) <= self.limit {
            w.waker.clone()
        } else {
            None
        }
    }
}

fn set_waker(slot: &mut Option<Waker>, w: Option<&Waker>) {
    if let Some(w) = w {
        match slot {
            Some(old) if old.will_wake(w) => {}
            _ => *slot = Some(w.clone()),
        }
    }
}

/// One connection's share: the octets it holds and its ticket. Dropped
/// (with its engine), it gives everything back.
#[derive(Debug)]
pub(crate) struct Lease {
    budget: Option<Arc<ReadSinkBudget>>,
    held: u64,
    ticket: Option<u64>,
    waker: Option<Waker>,
}

impl Lease {
    pub(crate) fn new(budget: Option<Arc<ReadSinkBudget>>) -> Lease {
        Lease {
            budget,
            held: 0,
            ticket: None,
            waker: None,
        }
    }

    /// The shared limit (`u64::MAX` without a shared budget).
    pub(crate) fn limit(&self) -> u64 {
        self.budget.as_ref().map_or(u64::MAX, |b| b.limit)
    }

    /// Octets taken and not given back.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// Takes `need` octets for this connection's oldest waiting call, or
    /// queues for them (see [`ReadSinkBudget`]).
    pub(crate) fn take(&mut self, need: u64) -> bool {
        let Some(b) = &self.budget else {
            return true;
        };
        let ok = b.acquire(&mut self.ticket, need, self.waker.as_ref());
        if ok {
            self.held += need;
        }
        ok
    }

    /// Gives back `n` octets taken with [`Lease::take`].
    pub(crate) fn give_back(&mut self, n: u64) {
        let n = n.min(self.held);
        self.held -= n;
        if let Some(b) = &self.budget {
            b.release(n);
        }
    }

    /// Leaves the queue (no call waits any more).
    pub(crate) fn cancel(&mut self) {
        if let (Some(b), Some(t)) = (&self.budget, self.ticket.take()) {
            b.cancel(t);
        }
    }

    /// Gives back everything: the octets held and the ticket.
    pub(crate) fn release_all(&mut self) {
        self.cancel();
        let n = self.held;
        self.give_back(n);
    }

    /// True while this connection waits in the shared queue.
    pub(crate) fn waiting(&self) -> bool {
        self.ticket.is_some()
    }

    /// The waker for this connection's ticket.
    pub(crate) fn set_waker(&mut self, w: &Waker) {
        if self.budget.is_none() || self.waker.as_ref().is_some_and(|o| o.will_wake(w)) {
            return;
        }
        self.waker = Some(w.clone());
        if let (Some(b), Some(t)) = (&self.budget, self.ticket) {
            b.update_waker(t, w);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    fn lease(b: &Arc<ReadSinkBudget>, w: &Waker) -> Lease {
        let mut l = Lease::new(Some(b.clone()));
        l.set_waker(w);
        l
    }

    #[test]
    fn first_come_first_served_with_one_wake_per_turn() {
        let b = ReadSinkBudget::new(100);
        let (ca, wa) = counter();
        let (cb, wb) = counter();
        let (cc, wc) = counter();
        let (mut a, mut bb, mut c) = (lease(&b, &wa), lease(&b, &wb), lease(&b, &wc));
        assert!(a.take(70));
        // B needs 60: waits. C needs 10 and would fit, but B is first.
        assert!(!bb.take(60));
        assert!(!c.take(10));
        assert_eq!((b.in_use(), b.waiting(), b.waits()), (70, 2, 2));
        assert!(!c.take(10), "still behind B");
        // A gives back: B (the front, now fitting) is woken, C is not.
        a.give_back(70);
        assert_eq!(cb.0.load(Ordering::SeqCst), 1);
        assert_eq!(cc.0.load(Ordering::SeqCst), 0);
        // B takes; C, next and fitting, is woken by that.
        assert!(bb.take(60));
        assert_eq!(cc.0.load(Ordering::SeqCst), 1);
        assert!(c.take(10));
        assert_eq!((b.in_use(), b.waiting(), b.high_water()), (70, 0, 70));
        assert_eq!(ca.0.load(Ordering::SeqCst), 0);
        // Dropping a lease gives back what it holds.
        drop(bb);
        drop(c);
        assert_eq!(b.in_use(), 0);
        drop(a);
    }

    #[test]
    fn a_cancelled_or_dropped_front_wakes_the_next() {
        let b = ReadSinkBudget::new(10);
        let (_ca, wa) = counter();
        let (cb, wb) = counter();
        let (_cc, wc) = counter();
        let mut a = lease(&b, &wa);
        let mut bb = lease(&b, &wb);
        let mut c = lease(&b, &wc);
        assert!(a.take(8));
        assert!(!bb.take(9));
        assert!(!c.take(1));
        // C leaves from behind: nobody is woken.
        c.cancel();
        assert_eq!(cb.0.load(Ordering::SeqCst), 0);
        assert!(!c.take(1));
        // A is dropped with its octets: B fits and is woken.
        drop(a);
        assert_eq!(cb.0.load(Ordering::SeqCst), 1);
        // B's engine is dropped while queued: its ticket goes, C is next
        // (and C's waker was the one registered when it queued).
        drop(bb);
        assert_eq!(b.waiting(), 1);
        assert!(c.take(1));
        drop(c);
        assert_eq!((b.in_use(), b.waiting()), (0, 0));
    }

    #[test]
    fn a_new_waker_replaces_the_queued_one() {
        let b = ReadSinkBudget::new(4);
        let (_ca, wa) = counter();
        let (c1, w1) = counter();
        let (c2, w2) = counter();
        let mut a = lease(&b, &wa);
        let mut x = lease(&b, &w1);
        assert!(a.take(4));
        assert!(!x.take(4));
        x.set_waker(&w2);
        a.give_back(4);
        assert_eq!(
            (c1.0.load(Ordering::SeqCst), c2.0.load(Ordering::SeqCst)),
            (0, 1)
        );
        assert_eq!(b.limit(), 4);
        assert!(format!("{b:?}").contains("limit: 4"));
    }
}
