//! The deadlines of a connection's calls, kept by whoever drives its core
//! (so that an async caller needs no timer of its own per call).
//!
//! Ordered by deadline. Calls made with one timeout (the usual case) come
//! in deadline order, so an insert is an append. An entry is not removed
//! when its call ends some other way (a reply): it is dropped when it
//! reaches the front ([`Deadlines::next`]) or when stale entries outnumber
//! the live ones ([`Deadlines::compact`]), so memory stays proportional to
//! the calls outstanding.

use std::time::Instant;

use rpcrdma_proto::engine::{CallId, Deadlines as Queue};

/// Entries beyond twice the live calls tolerated before a compaction.
const SLACK: usize = 64;

/// See the module docs (the engine's sorted queue, [`Queue`], with stale
/// entries dropped lazily).
#[derive(Default)]
pub(crate) struct Deadlines {
    q: Queue<CallId>,
}

impl Deadlines {
    /// Adds the deadline `at` of the call `id`.
    pub(crate) fn push(&mut self, at: Instant, id: CallId) {
        self.q.insert(at, id);
    }

    /// The earliest deadline of a call still `live` (entries of calls
    /// that ended before it are dropped on the way), without removing it.
    pub(crate) fn next(&mut self, live: impl Fn(CallId, Instant) -> bool) -> Option<Instant> {
        while let Some((t, id)) = self.q.front() {
            if live(id, t) {
                return Some(t);
            }
            self.q.pop_front();
        }
        None
    }

    /// The earliest deadline, live or not (a shell may wake for one that
    /// no longer matters; the round after drops it).
    pub(crate) fn peek(&self) -> Option<Instant> {
        self.q.front().map(|(t, _)| t)
    }

    /// Removes and returns the first entry if its deadline is `now` or
    /// earlier.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<CallId> {
        match self.q.front() {
            Some((t, id)) if t <= now => {
                self.q.pop_front();
                Some(id)
            }
            _ => None,
        }
    }

    /// Drops the entries of calls no longer `live` once there are more than
    /// twice `live_count` (plus [`SLACK`]).
    pub(crate) fn compact(&mut self, live_count: usize, live: impl Fn(CallId, Instant) -> bool) {
        if self.q.len() > 2 * live_count + SLACK {
            self.q.retain(|t, id| live(id, t));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.q.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.q.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    proptest! {
        /// Against a plain set of (deadline, id) of the live calls: the
        /// earliest live deadline and the due calls agree, whatever the
        /// order of inserts and ends.
        #[test]
        fn agrees_with_a_set_of_live_calls(ops in proptest::collection::vec((0u8..4, 0u64..50, 0u64..40), 0..200)) {
            let t0 = Instant::now();
            let mut d = Deadlines::default();
            let mut live: BTreeSet<(Instant, CallId)> = BTreeSet::new();
            let mut next_id = 0u64;
            let mut now = t0;
            for (op, a, b) in ops {
                match op {
                    0 | 1 => {
                        let at = t0 + Duration::from_millis(a + b);
                        let id = CallId(next_id);
                        next_id += 1;
                        d.push(at, id);
                        live.insert((at, id));
                    }
                    2 => {
                        // A call ends by a reply.
                        if let Some(&e) = live.iter().nth(a as usize % live.len().max(1)) {
                            live.remove(&e);
                        }
                    }
                    _ => now += Duration::from_millis(b),
                }
                let is_live = |id: CallId, t: Instant| live.contains(&(t, id));
                d.compact(live.len(), is_live);
                prop_assert!(d.len() <= 2 * live.len() + SLACK + 1);
                prop_assert_eq!(d.next(is_live), live.iter().next().map(|e| e.0));
                // Expire what is due, as the core does.
                while let Some(t) = d.next(|id, t| live.contains(&(t, id))) {
                    if t > now {
                        break;
                    }
                    let id = d.pop_due(now).expect("due");
                    prop_assert!(live.remove(&(t, id)));
                }
                prop_assert!(live.iter().all(|e| e.0 > now));
            }
        }
    }
}
