//! Timers: the engine reads no clock. Deadlines are data (`now` comes in
//! with every input); [`Connection::poll_timeout`] says when
//! [`Connection::handle_timeout`] should run next, and spurious calls are
//! harmless.
//!
//! Four kinds: each sent call's reply deadline (`Config::call_timeout`,
//! the requester's), each received call's Read deadline
//! (`Config::read_timeout`, from its admission until its RDMA Reads are
//! all done) and the idle deadline (`Config::idle_timeout`, until the
//! peer's first valid call), the responder's; and the pool trim
//! (`resources::POOL_IDLE_TRIM` after the last bulk or concurrent use), both
//! roles'. Calls and Reads keep theirs
//! in a [`Deadlines`] queue, sorted, so the next one is read at its front
//! instead of by a scan.

use std::collections::VecDeque;
use std::time::Instant;

use super::{Connection, ConnectionError, PeerError};
use crate::provider::Provider;

/// `(deadline, key)` pairs sorted by deadline (ties in insertion order).
/// (Also the runtime's queue of its calls' deadlines.)
#[derive(Debug)]
pub struct Deadlines<K> {
    q: VecDeque<(Instant, K)>,
}

impl<K> Default for Deadlines<K> {
    fn default() -> Self {
        Deadlines { q: VecDeque::new() }
    }
}

impl<K: Copy + PartialEq> Deadlines<K> {
    /// The earliest deadline and its key.
    #[inline]
    pub fn front(&self) -> Option<(Instant, K)> {
        self.q.front().copied()
    }

    /// Adds `(d, key)`, keeping the order.
    pub fn insert(&mut self, d: Instant, key: K) {
        // Deadlines normally come in order (`now` does not go back): the
        // new one goes at the back.
        if self.q.back().is_none_or(|&(e, _)| e <= d) {
            self.q.push_back((d, key));
        } else {
            let at = self.q.partition_point(|&(e, _)| e <= d);
            self.q.insert(at, (d, key));
        }
    }

    /// Drops the earliest deadline.
    pub fn pop_front(&mut self) {
        self.q.pop_front();
    }

    /// Drops the (first) deadline of `key`.
    pub fn remove(&mut self, key: K) {
        if let Some(i) = self.q.iter().position(|&(_, k)| k == key) {
            self.q.remove(i);
        }
    }

    /// Keeps the deadlines for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(Instant, K) -> bool) {
        self.q.retain(|&(d, k)| keep(d, k));
    }

    /// Deadlines kept (stale ones included).
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Drops them all.
    pub fn clear(&mut self) {
        self.q.clear();
    }
}

impl Connection {
    /// Fires expired timers: a call without a reply past its deadline ends
    /// the connection (RDMA has no keepalive; as Linux, a timeout forces a
    /// disconnect and the call is retransmitted on the next connection);
    /// so do a received call whose RDMA Reads are overdue
    /// (`Config::read_timeout`) and a peer silent since the connection was
    /// established (`Config::idle_timeout`).
    pub fn handle_timeout(&mut self, now: Instant, p: &mut dyn Provider) {
        if self.error.is_some() {
            return;
        }
        if self.resp.idle_deadline.is_some_and(|d| d <= now) {
            self.metrics.idle_timeouts += 1;
            self.fatal(p, ConnectionError::IdleTimeout);
            return;
        }
        if let Some((d, handle)) = self.resp.read_deadlines.front() {
            if d <= now {
                let xid = self.incoming_xid(handle);
                self.metrics.read_timeouts += 1;
                self.fatal(p, ConnectionError::Peer(PeerError::ReadTimeout { xid }));
                return;
            }
        }
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
        //# A client can assume the same situation (no server support for RPC-
        //# over-RDMA version 2) if the initial negotiation message is lost or
        //# dropped.
        // An unanswered probe ends the connection like an unanswered call;
        // the next connection starts in version 1 (`peer_is_v1_only`).
        if self.setup.deadline().is_some_and(|d| d <= now) {
            self.fatal(p, ConnectionError::Timeout);
            return;
        }
        if self.res.trim_at.is_some_and(|d| d <= now) && self.quiet() {
            self.res.trim_pools(p);
        }
        let expired = self.call_deadline().is_some_and(|d| d <= now);
        if expired {
            self.count_timeouts(now);
            self.fatal(p, ConnectionError::Timeout);
        }
    }

    /// When [`Connection::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.error.is_some() {
            return None;
        }
        let call = self.call_deadline();
        if self.resp.read_deadlines.is_empty()
            && self.resp.idle_deadline.is_none()
            && self.res.trim_at.is_none()
            && self.setup.deadline().is_none()
        {
            return call;
        }
        self.responder_timeout(call)
    }

    /// No call in progress either way: the pool-trim pause counts only
    /// then (a trim that came due meanwhile fires at the next timeout).
    fn quiet(&self) -> bool {
        self.req.calls.is_empty() && self.req.queue.is_empty() && self.resp.incoming.is_empty()
    }

    /// [`Connection::poll_timeout`] with a Read, idle or pool-trim
    /// deadline armed.
    #[inline(never)]
    fn responder_timeout(&self, call: Option<Instant>) -> Option<Instant> {
        let read = self.resp.read_deadlines.front().map(|(d, _)| d);
        let trim = self.res.trim_at.filter(|_| self.quiet());
        // Pairwise, not an iterator over an array of five: this runs on
        // every pass of a connection with a pool-trim deadline armed (a
        // client's too): 205 -> ~90 instructions per task-mode NULL call.
        let a = earlier(call, read);
        let b = earlier(self.resp.idle_deadline, trim);
        earlier(earlier(a, b), self.setup.deadline())
    }
}

/// The earlier of two optional instants (`None` is no deadline).
#[inline]
fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::earlier;
    use std::time::{Duration, Instant};

    #[test]
    fn earlier_is_the_min_of_what_is_set() {
        let t = Instant::now();
        let u = t + Duration::from_millis(1);
        for (a, b, want) in [
            (None, None, None),
            (Some(t), None, Some(t)),
            (None, Some(u), Some(u)),
            (Some(u), Some(t), Some(t)),
            (Some(t), Some(u), Some(t)),
        ] {
            assert_eq!(earlier(a, b), want);
            assert_eq!(earlier(a, b), [a, b].into_iter().flatten().min());
        }
    }
}
