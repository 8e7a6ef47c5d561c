//! Admission of connections that still owe their MPA Request: the policy,
//! sans-IO (no sockets, no clock: `now` is passed in). The
//! [`crate::acceptor::Acceptor`] drives it.
//!
//! A TCP connection that has not sent its MPA Request is unauthenticated
//! and costs the server a socket and a little memory. The policy bounds
//! that cost and keeps silent peers from crowding out real clients:
//!
//! * each pending connection has a deadline
//!   ([`AcceptLimits::request_timeout`] after it was admitted);
//! * at most [`AcceptLimits::max_pending_per_source`] are pending from one
//!   source address: one more evicts that source's oldest
//!   ([`Eviction::PerSource`]);
//! * at most [`AcceptLimits::max_pending`] are pending in all: one more
//!   evicts the oldest of all ([`Eviction::Overall`]).
//!
//! Evicting the oldest (instead of refusing the newcomer) means a real
//! client, whose Request follows its TCP handshake within a round trip,
//! is only crowded out by a peer that opens the cap's worth of new
//! connections within that round trip; silent connections held open
//! cannot lock anyone out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Limits on connections that have not yet sent their MPA Request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptLimits {
    /// Time from the TCP accept to a complete MPA Request; a connection
    /// still silent then is closed. Default 2 s: an initiator sends its
    /// Request as soon as TCP is up (Linux siw does), so an honest one
    /// needs one round trip.
    pub request_timeout: Duration,
    /// Most pending connections in all; one more evicts the oldest.
    /// Default 512 (each costs a socket and about a kilobyte).
    pub max_pending: usize,
    /// Most pending connections from one source address; one more evicts
    /// that source's oldest. Default 32: a client that opens a burst of
    /// connections (NFS `nconnect` allows 16; `rpcrdma bench` sets up 32
    /// at once) stays within it.
    pub max_pending_per_source: usize,
}

impl Default for AcceptLimits {
    fn default() -> Self {
        AcceptLimits {
            request_timeout: Duration::from_secs(2),
            max_pending: 512,
            max_pending_per_source: 32,
        }
    }
}

/// One pending connection; a larger id was admitted later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingId(u64);

/// Why a pending connection was evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Its source reached [`AcceptLimits::max_pending_per_source`].
    PerSource,
    /// [`AcceptLimits::max_pending`] was reached.
    Overall,
}

/// The outcome of [`PendingTable::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The new pending connection.
    pub id: PendingId,
    /// The one evicted to make room for it (close it now).
    pub evicted: Option<(PendingId, Eviction)>,
}

/// The source a connection is counted against: its IP address (an
/// IPv4-mapped IPv6 address counts as the IPv4 address). Per address, not
/// per prefix: an IPv6 peer that owns a whole prefix is bounded only by
/// the overall caps.
pub fn source_of(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    source: IpAddr,
    deadline: Instant,
}

/// The pending connections and the policy. See the [module docs](self).
#[derive(Debug)]
pub struct PendingTable {
    limits: AcceptLimits,
    next: u64,
    /// By age (ids only grow).
    entries: BTreeMap<PendingId, Entry>,
    deadlines: BTreeSet<(Instant, PendingId)>,
    by_source: HashMap<IpAddr, BTreeSet<PendingId>>,
}

impl PendingTable {
    /// An empty table; caps below 1 count as 1.
    pub fn new(limits: AcceptLimits) -> Self {
        PendingTable {
            limits: AcceptLimits {
                max_pending: limits.max_pending.max(1),
                max_pending_per_source: limits.max_pending_per_source.max(1),
                ..limits
            },
            next: 0,
            entries: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            by_source: HashMap::new(),
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &AcceptLimits {
        &self.limits
    }

    /// Pending connections.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Pending connections from `source`.
    pub fn pending_from(&self, source: IpAddr) -> usize {
        self.by_source
            .get(&source_of(source))
            .map_or(0, BTreeSet::len)
    }

    /// Admits a connection from `source` accepted at `now`, evicting one
    /// if a cap is reached (at most one: a per-source eviction frees the
    /// room the newcomer takes in the total).
    pub fn admit(&mut self, source: IpAddr, now: Instant) -> Admitted {
        let source = source_of(source);
        let evicted = if self.pending_from(source) >= self.limits.max_pending_per_source {
            self.oldest_from(source).map(|id| (id, Eviction::PerSource))
        } else if self.entries.len() >= self.limits.max_pending {
            self.entries
                .first_key_value()
                .map(|(id, _)| (*id, Eviction::Overall))
        } else {
            None
        };
        if let Some((id, _)) = evicted {
            self.remove(id);
        }
        let id = PendingId(self.next);
        self.next += 1;
        let deadline = now + self.limits.request_timeout;
        self.entries.insert(id, Entry { source, deadline });
        self.deadlines.insert((deadline, id));
        self.by_source.entry(source).or_default().insert(id);
        Admitted { id, evicted }
    }

    fn oldest_from(&self, source: IpAddr) -> Option<PendingId> {
        self.by_source.get(&source)?.first().copied()
    }

    /// Forgets `id` (its Request arrived, or it failed or closed); false
    /// if it was not pending.
    pub fn remove(&mut self, id: PendingId) -> bool {
        let Some(e) = self.entries.remove(&id) else {
            return false;
        };
        self.deadlines.remove(&(e.deadline, id));
        if let Some(s) = self.by_source.get_mut(&e.source) {
            s.remove(&id);
            if s.is_empty() {
                self.by_source.remove(&e.source);
            }
        }
        true
    }

    /// Removes and returns one connection whose deadline is at or before
    /// `now` (the earliest), if any: call until `None`.
    pub fn pop_expired(&mut self, now: Instant) -> Option<PendingId> {
        let &(deadline, id) = self.deadlines.first()?;
        if deadline > now {
            return None;
        }
        self.remove(id);
        Some(id)
    }

    /// The earliest deadline, if anything is pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn limits(total: usize, per_source: usize) -> AcceptLimits {
        AcceptLimits {
            request_timeout: Duration::from_secs(2),
            max_pending: total,
            max_pending_per_source: per_source,
        }
    }

    #[test]
    fn per_source_cap_evicts_that_sources_oldest() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(100, 3));
        let a: Vec<_> = (0..3).map(|_| t.admit(ip(1), t0)).collect();
        assert!(a.iter().all(|x| x.evicted.is_none()));
        let other = t.admit(ip(2), t0);
        assert_eq!(other.evicted, None);
        // The fourth from 10.0.0.1 evicts the first from 10.0.0.1, not the
        // (younger, but other-source) one from 10.0.0.2.
        let fourth = t.admit(ip(1), t0);
        assert_eq!(fourth.evicted, Some((a[0].id, Eviction::PerSource)));
        assert_eq!(t.pending_from(ip(1)), 3);
        assert_eq!(t.pending_from(ip(2)), 1);
        assert_eq!(t.len(), 4);
        // Then the second, and so on: oldest first.
        let fifth = t.admit(ip(1), t0);
        assert_eq!(fifth.evicted, Some((a[1].id, Eviction::PerSource)));
    }

    #[test]
    fn overall_cap_evicts_the_oldest_of_all() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(3, 10));
        let ids: Vec<_> = (1..=3).map(|i| t.admit(ip(i), t0).id).collect();
        let d = t.admit(ip(4), t0);
        assert_eq!(d.evicted, Some((ids[0], Eviction::Overall)));
        assert_eq!(t.len(), 3);
        assert_eq!(t.pending_from(ip(1)), 0);
        // A removed one (its Request came) is not evicted later.
        assert!(t.remove(ids[1]));
        assert!(!t.remove(ids[1]));
        assert_eq!(t.admit(ip(5), t0).evicted, None);
        assert_eq!(
            t.admit(ip(6), t0).evicted,
            Some((ids[2], Eviction::Overall))
        );
    }

    #[test]
    fn deadlines_expire_in_order_and_only_when_due() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(10, 10));
        let a = t.admit(ip(1), t0).id;
        let b = t.admit(ip(2), t0 + Duration::from_millis(500)).id;
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(2)));
        assert_eq!(t.pop_expired(t0 + Duration::from_millis(1999)), None);
        let at = t0 + Duration::from_secs(2);
        assert_eq!(t.pop_expired(at), Some(a));
        assert_eq!(t.pop_expired(at), None);
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_millis(2500)));
        // Removed before its deadline: never expires.
        assert!(t.remove(b));
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(60)), None);
        assert_eq!(t.next_deadline(), None);
        assert!(t.is_empty());
    }

    #[test]
    fn evicted_ones_leave_no_deadline_behind() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(1, 1));
        let a = t.admit(ip(1), t0).id;
        let b = t.admit(ip(2), t0 + Duration::from_secs(1));
        assert_eq!(b.evicted, Some((a, Eviction::Overall)));
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(2)), None);
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(3)), Some(b.id));
    }

    #[test]
    fn mapped_ipv6_counts_as_its_ipv4_source_and_zero_caps_mean_one() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(0, 0));
        assert_eq!(t.limits().max_pending, 1);
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped());
        let a = t.admit(v4, t0).id;
        assert_eq!(t.pending_from(mapped), 1);
        let b = t.admit(mapped, t0);
        assert_eq!(b.evicted, Some((a, Eviction::PerSource)));
        let c = t.admit(IpAddr::V6(Ipv6Addr::LOCALHOST), t0);
        assert_eq!(c.evicted, Some((b.id, Eviction::Overall)));
    }

    #[test]
    fn many_sources_stay_bounded() {
        let t0 = Instant::now();
        let mut t = PendingTable::new(limits(64, 4));
        for i in 0..10_000u32 {
            let src = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (i % 300)));
            t.admit(src, t0 + Duration::from_micros(u64::from(i)));
            assert!(t.len() <= 64);
            assert!(t.pending_from(src) <= 4);
        }
        assert_eq!(t.len(), 64);
        // The youngest 64 remain: everything expires by the last deadline.
        let mut n = 0;
        while t.pop_expired(t0 + Duration::from_secs(3)).is_some() {
            n += 1;
        }
        assert_eq!(n, 64);
        assert!(t.by_source.is_empty() && t.deadlines.is_empty());
    }
}
