//! Per-procedure statistics, in the spirit of Linux's `mountstats`
//! per-op lines: for each program / version / procedure / transport, the
//! calls, retransmissions, errors by kind, octets sent and received
//! (inline and DDP-eligible), and a latency histogram (the client's
//! round-trip time, from the first transmission to the reply; the
//! server's execution time, from the decoded call to the reply handed to
//! the transport).
//!
//! # Cost
//!
//! Counting is on every call's path, so it is a handful of relaxed atomic
//! adds: a [`ProcStats`] table is a fixed array of slots found by a hash
//! of the key (no lock, no allocation once a key has its slot), and a
//! histogram is power-of-two buckets (a leading-zero count picks the
//! bucket). Readers ([`ProcStats::snapshot`], the Prometheus endpoint)
//! copy the counters when asked. The latency needs a clock read at each
//! end of a call, which costs more than all the rest: every call of a key
//! is timed up to its [`TIME_EVERY_CALL_UNTIL`]th, then one in
//! [`TIME_ONE_IN`] (the histogram's count then trails the calls; its
//! percentiles and mean are those of the calls timed).
//!
//! # Bounds
//!
//! A table holds at most [`SLOTS`] keys; calls of any further key (a peer
//! choosing procedure numbers, say) are counted together under procedure
//! [`OVERFLOW_PROC`] of program 0, so memory does not grow with what a
//! peer sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::message::{Message, Piece};

/// Keys a [`ProcStats`] table holds before it counts the rest together.
pub const SLOTS: usize = 64;
const _: () = assert!(SLOTS.is_power_of_two() && SLOTS <= 1 << 16);

/// The procedure number of the overflow entry (program 0, version 0).
pub const OVERFLOW_PROC: u32 = u32::MAX;

/// Every call of a key up to this many is timed (see
/// [`ProcCounters::start`]).
pub const TIME_EVERY_CALL_UNTIL: u64 = 1024;

/// After [`TIME_EVERY_CALL_UNTIL`] calls, one call in this many is timed.
pub const TIME_ONE_IN: u64 = 8;
const _: () = assert!(TIME_ONE_IN.is_power_of_two());

/// Histogram buckets: bucket `i` counts durations below `1024 << i`
/// nanoseconds (about 1 µs, 2 µs, 4 µs, ... 34 s); the last counts the
/// rest.
pub const HIST_BUCKETS: usize = 26;

/// Why a call failed, as the per-procedure counters tell errors apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ErrorKind {
    /// PROG_UNAVAIL.
    ProgUnavail,
    /// PROG_MISMATCH.
    ProgMismatch,
    /// PROC_UNAVAIL.
    ProcUnavail,
    /// GARBAGE_ARGS.
    GarbageArgs,
    /// SYSTEM_ERR.
    SystemErr,
    /// Another accept_stat.
    OtherAccept,
    /// RPC_MISMATCH.
    RpcMismatch,
    /// AUTH_ERROR.
    AuthError,
    /// No reply after every retransmission (client).
    Timeout,
    /// The connection failed the call (client), or the reply could not be
    /// sent (server).
    Transport,
    /// The caller's call was refused before it went out (too large, ...)
    /// (client).
    Local,
    /// The reply did not decode (client).
    BadReply,
    /// The handler dropped the call without a reply (server).
    Dropped,
}

impl ErrorKind {
    /// Every kind, in counter order.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::ProgUnavail,
        ErrorKind::ProgMismatch,
        ErrorKind::ProcUnavail,
        ErrorKind::GarbageArgs,
        ErrorKind::SystemErr,
        ErrorKind::OtherAccept,
        ErrorKind::RpcMismatch,
        ErrorKind::AuthError,
        ErrorKind::Timeout,
        ErrorKind::Transport,
        ErrorKind::Local,
        ErrorKind::BadReply,
        ErrorKind::Dropped,
    ];

    /// The label used in JSON and Prometheus (`prog_unavail`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::ProgUnavail => "prog_unavail",
            ErrorKind::ProgMismatch => "prog_mismatch",
            ErrorKind::ProcUnavail => "proc_unavail",
            ErrorKind::GarbageArgs => "garbage_args",
            ErrorKind::SystemErr => "system_err",
            ErrorKind::OtherAccept => "other_accept",
            ErrorKind::RpcMismatch => "rpc_mismatch",
            ErrorKind::AuthError => "auth_error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Transport => "transport",
            ErrorKind::Local => "local",
            ErrorKind::BadReply => "bad_reply",
            ErrorKind::Dropped => "dropped",
        }
    }
}

const ERROR_KINDS: usize = ErrorKind::ALL.len();

/// A latency histogram of power-of-two buckets (see [`HIST_BUCKETS`]).
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; HIST_BUCKETS],
    sum_ns: AtomicU64,
}

/// The monotonic clock in nanoseconds (from an arbitrary start): one
/// `clock_gettime(CLOCK_MONOTONIC)`, without `Instant`'s checked
/// arithmetic (the difference of two readings is a duration).
#[inline]
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

impl Histogram {
    /// Counts one duration.
    #[inline]
    pub fn record(&self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Counts one duration of `ns` nanoseconds.
    #[inline]
    pub fn record_ns(&self, ns: u64) {
        let i = (64 - (ns >> 10).leading_zeros() as usize).min(HIST_BUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A copy of a [`Histogram`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Count of each bucket (not cumulative).
    pub buckets: [u64; HIST_BUCKETS],
    /// Sum of every duration counted, in nanoseconds.
    pub sum_ns: u64,
}

impl HistogramSnapshot {
    /// The upper bound of bucket `i` in nanoseconds (`None` for the last,
    /// unbounded one).
    pub fn upper_ns(i: usize) -> Option<u64> {
        (i + 1 < HIST_BUCKETS).then(|| 1024u64 << i)
    }

    /// Durations counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The mean in nanoseconds (0 when empty).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count()).unwrap_or(0)
    }

    /// The `q` quantile (0..=1) in nanoseconds, interpolated linearly in
    /// its bucket, each of the bucket's durations taken at the middle of
    /// its share (so within a factor of 2 of the true value; a lone
    /// duration is the bucket's middle); `None` when empty. The last
    /// bucket reports its lower bound.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            if seen + c >= rank {
                let lo = if i == 0 { 0 } else { 1024u64 << (i - 1) };
                let Some(hi) = Self::upper_ns(i) else {
                    return Some(lo);
                };
                let frac = ((rank - seen) as f64 - 0.5) / c as f64;
                return Some(lo + ((hi - lo) as f64 * frac) as u64);
            }
            seen += c;
        }
        None
    }

    fn add(&mut self, o: &HistogramSnapshot) {
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
        self.sum_ns += o.sum_ns;
    }
}

/// The counters of one program / version / procedure / transport.
#[derive(Debug, Default)]
pub struct ProcCounters {
    calls: AtomicU64,
    retransmits: AtomicU64,
    errors: [AtomicU64; ERROR_KINDS],
    /// Sent inline, sent DDP-eligible, received inline, received
    /// DDP-eligible.
    bytes: [AtomicU64; 4],
    time: Histogram,
}

impl ProcCounters {
    /// One call: its outcome (`None`: success), its latency, the octets
    /// sent and received (see [`Octets`]).
    #[inline]
    pub fn record(&self, error: Option<ErrorKind>, time: Duration, sent: Octets, recv: Octets) {
        self.record_ns(
            error,
            u64::try_from(time.as_nanos()).unwrap_or(u64::MAX),
            sent,
            recv,
        );
    }

    /// [`ProcCounters::record`] with the latency in nanoseconds (see
    /// [`now_ns`]).
    #[inline]
    pub fn record_ns(&self, error: Option<ErrorKind>, ns: u64, sent: Octets, recv: Octets) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.errors[e as usize].fetch_add(1, Ordering::Relaxed);
        }
        self.add_octets(sent, recv);
        self.time.record_ns(ns);
    }

    #[inline]
    fn add_octets(&self, sent: Octets, recv: Octets) {
        for (c, n) in self
            .bytes
            .iter()
            .zip([sent.inline, sent.ddp, recv.inline, recv.ddp])
        {
            if n != 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// The start of a call to time ([`now_ns`]), or 0 when this call is
    /// not timed: every call up to the [`TIME_EVERY_CALL_UNTIL`]th of a key
    /// is, then one in [`TIME_ONE_IN`] (a clock read at each end costs more
    /// than the rest of the counting together).
    #[inline]
    pub fn start(&self) -> u64 {
        let n = self.calls.load(Ordering::Relaxed);
        if n < TIME_EVERY_CALL_UNTIL || n & (TIME_ONE_IN - 1) == 0 {
            now_ns()
        } else {
            0
        }
    }

    /// [`ProcCounters::record_ns`] of a call started at `started` (from
    /// [`ProcCounters::start`]; 0: counted, not timed).
    #[inline]
    pub fn record_since(&self, error: Option<ErrorKind>, started: u64, sent: Octets, recv: Octets) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.errors[e as usize].fetch_add(1, Ordering::Relaxed);
        }
        self.add_octets(sent, recv);
        if started != 0 {
            self.time.record_ns(now_ns().wrapping_sub(started));
        }
    }

    /// One retransmission.
    #[inline]
    pub fn retransmit(&self) {
        self.retransmits.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> ProcCountersSnapshot {
        ProcCountersSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            retransmits: self.retransmits.load(Ordering::Relaxed),
            errors: std::array::from_fn(|i| self.errors[i].load(Ordering::Relaxed)),
            sent: Octets {
                inline: self.bytes[0].load(Ordering::Relaxed),
                ddp: self.bytes[1].load(Ordering::Relaxed),
            },
            received: Octets {
                inline: self.bytes[2].load(Ordering::Relaxed),
                ddp: self.bytes[3].load(Ordering::Relaxed),
            },
            time: self.time.snapshot(),
        }
    }
}

/// Octets of a message: inline, and DDP-eligible (over RPC-over-RDMA
/// moved by a Read chunk in a call, a Write chunk in a reply, when the
/// engine places them directly; over TCP sent inline all the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Octets {
    /// Inline octets (RPC header included).
    pub inline: u64,
    /// DDP-eligible octets (pieces and out-of-band results).
    pub ddp: u64,
}

impl Octets {
    /// The octets of `m`.
    #[inline]
    pub fn of(m: &Message) -> Octets {
        if let ([Piece::Inline(b)], []) = (m.pieces(), m.results()) {
            return Octets {
                inline: b.len() as u64,
                ddp: 0,
            };
        }
        let mut o = Octets::default();
        for p in m.pieces() {
            match p {
                Piece::Inline(b) => o.inline += b.len() as u64,
                Piece::Ddp(_) | Piece::File(_) => o.ddp += p.len() as u64,
            }
        }
        for r in m.results() {
            o.ddp += r.len() as u64;
        }
        o
    }
}

/// A copy of one key's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcCountersSnapshot {
    /// Calls completed (successfully or not).
    pub calls: u64,
    /// Retransmissions (client).
    pub retransmits: u64,
    /// Errors, indexed like [`ErrorKind::ALL`].
    pub errors: [u64; ERROR_KINDS],
    /// Octets sent (client: calls; server: replies).
    pub sent: Octets,
    /// Octets received (client: replies; server: calls).
    pub received: Octets,
    /// Client: round-trip time; server: execution time.
    pub time: HistogramSnapshot,
}

impl ProcCountersSnapshot {
    /// Errors of every kind.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// `(kind, count)` of every kind counted at least once.
    pub fn errors_by_kind(&self) -> impl Iterator<Item = (ErrorKind, u64)> + '_ {
        ErrorKind::ALL
            .iter()
            .zip(self.errors)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (*k, n))
    }

    /// The counts since `earlier` (a snapshot of the same entry taken
    /// before this one).
    pub fn since(&self, earlier: &ProcCountersSnapshot) -> ProcCountersSnapshot {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        ProcCountersSnapshot {
            calls: d(self.calls, earlier.calls),
            retransmits: d(self.retransmits, earlier.retransmits),
            errors: std::array::from_fn(|i| d(self.errors[i], earlier.errors[i])),
            sent: Octets {
                inline: d(self.sent.inline, earlier.sent.inline),
                ddp: d(self.sent.ddp, earlier.sent.ddp),
            },
            received: Octets {
                inline: d(self.received.inline, earlier.received.inline),
                ddp: d(self.received.ddp, earlier.received.ddp),
            },
            time: HistogramSnapshot {
                buckets: std::array::from_fn(|i| d(self.time.buckets[i], earlier.time.buckets[i])),
                sum_ns: d(self.time.sum_ns, earlier.time.sum_ns),
            },
        }
    }

    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &ProcCountersSnapshot) {
        self.calls += o.calls;
        self.retransmits += o.retransmits;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.sent.inline += o.sent.inline;
        self.sent.ddp += o.sent.ddp;
        self.received.inline += o.received.inline;
        self.received.ddp += o.received.ddp;
        self.time.add(&o.time);
    }
}

/// The key of one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc: u32,
    /// The transport's name (`tcp`, `rdma`, ...).
    pub transport: &'static str,
}

/// One entry of a table.
#[derive(Debug)]
pub struct ProcEntry {
    key: ProcKey,
    counters: ProcCounters,
}

impl ProcEntry {
    /// The entry's key.
    pub fn key(&self) -> ProcKey {
        self.key
    }
}

impl std::ops::Deref for ProcEntry {
    type Target = ProcCounters;
    fn deref(&self) -> &ProcCounters {
        &self.counters
    }
}

/// Which side a table counts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Calls made (round-trip times).
    Client,
    /// Calls served (execution times).
    Server,
}

impl Side {
    /// `client` or `server`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// Per-procedure counters of a client or a server (shared by clones of
/// the [`Arc`] it lives in). See the [module documentation](self).
pub struct ProcStats {
    side: Side,
    slots: Box<[OnceLock<Arc<ProcEntry>>]>,
    overflow: OnceLock<Arc<ProcEntry>>,
}

impl std::fmt::Debug for ProcStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcStats")
            .field("side", &self.side)
            .field(
                "keys",
                &self.slots.iter().filter(|s| s.get().is_some()).count(),
            )
            .finish()
    }
}

impl ProcStats {
    /// An empty table.
    pub fn new(side: Side) -> Self {
        ProcStats {
            side,
            slots: (0..SLOTS).map(|_| OnceLock::new()).collect(),
            overflow: OnceLock::new(),
        }
    }

    /// The side counted.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The entry of `key`, made on first use.
    #[inline]
    pub fn entry(&self, key: ProcKey) -> &Arc<ProcEntry> {
        self.at(self.index(key))
    }

    /// The index of `key`'s entry (for [`ProcStats::at`]), made on first
    /// use.
    #[inline]
    pub fn index(&self, key: ProcKey) -> usize {
        let h = (key.prog ^ key.vers.rotate_left(11) ^ key.proc.rotate_left(22))
            .wrapping_mul(0x9E37_79B1);
        let start = (h >> (32 - SLOTS.trailing_zeros())) as usize;
        // The common case: the key's first slot holds it.
        if let Some(e) = self.slots[start].get() {
            if same_key(&e.key, &key) {
                return start;
            }
        }
        self.index_slow(start, key)
    }

    #[cold]
    fn index_slow(&self, start: usize, key: ProcKey) -> usize {
        for i in 0..SLOTS {
            let at = (start + i) % SLOTS;
            let e = self.slots[at].get_or_init(|| {
                Arc::new(ProcEntry {
                    key,
                    counters: ProcCounters::default(),
                })
            });
            if same_key(&e.key, &key) {
                return at;
            }
        }
        self.overflow.get_or_init(|| {
            Arc::new(ProcEntry {
                key: ProcKey {
                    prog: 0,
                    vers: 0,
                    proc: OVERFLOW_PROC,
                    transport: key.transport,
                },
                counters: ProcCounters::default(),
            })
        });
        SLOTS
    }

    /// The entry at `index` (from [`ProcStats::index`] of this table).
    #[inline]
    pub fn at(&self, index: usize) -> &Arc<ProcEntry> {
        match self.slots.get(index).and_then(OnceLock::get) {
            Some(e) => e,
            None => self.overflow_entry(),
        }
    }

    #[cold]
    fn overflow_entry(&self) -> &Arc<ProcEntry> {
        self.overflow.get_or_init(|| {
            Arc::new(ProcEntry {
                key: ProcKey {
                    prog: 0,
                    vers: 0,
                    proc: OVERFLOW_PROC,
                    transport: "overflow",
                },
                counters: ProcCounters::default(),
            })
        })
    }

    /// A copy of every entry's counters, in key order, the overflow entry
    /// last.
    pub fn snapshot(&self) -> Vec<(ProcKey, ProcCountersSnapshot)> {
        let mut v: Vec<_> = self
            .slots
            .iter()
            .filter_map(|s| s.get())
            .map(|e| (e.key, e.counters.snapshot()))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v.extend(self.overflow.get().map(|e| (e.key, e.counters.snapshot())));
        v
    }
}

/// Key equality; the transport names compare by address first (the same
/// literal), by content otherwise.
#[inline]
fn same_key(a: &ProcKey, b: &ProcKey) -> bool {
    a.prog == b.prog
        && a.proc == b.proc
        && a.vers == b.vers
        && (std::ptr::eq(a.transport, b.transport) || same_str(a.transport, b.transport))
}

#[cold]
fn same_str(a: &str, b: &str) -> bool {
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(prog: u32, proc: u32) -> ProcKey {
        ProcKey {
            prog,
            vers: 1,
            proc,
            transport: "tcp",
        }
    }

    #[test]
    fn histogram_buckets_and_quantiles() {
        let h = Histogram::default();
        h.record(Duration::from_nanos(500)); // bucket 0 (< 1024 ns)
        h.record(Duration::from_nanos(1024)); // bucket 1
        h.record(Duration::from_micros(3)); // 3000 ns: bucket 2 (< 4096)
        h.record(Duration::from_secs(1000)); // the last bucket
        let s = h.snapshot();
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[2], 1);
        assert_eq!(s.buckets[HIST_BUCKETS - 1], 1);
        assert_eq!(s.count(), 4);
        assert_eq!(s.sum_ns, 500 + 1024 + 3000 + 1_000_000_000_000);
        assert_eq!(s.quantile_ns(0.25), Some(512)); // the middle of bucket 0
        assert_eq!(s.quantile_ns(0.5), Some(1536));
        assert_eq!(s.quantile_ns(1.0), Some(1024 << (HIST_BUCKETS - 2)));
        assert_eq!(HistogramSnapshot::default().quantile_ns(0.5), None);
    }

    #[test]
    fn every_key_has_its_counters_until_the_table_is_full() {
        let t = ProcStats::new(Side::Client);
        for p in 0..SLOTS as u32 {
            t.entry(key(100, p)).record(
                None,
                Duration::from_micros(5),
                Octets::default(),
                Octets::default(),
            );
        }
        t.entry(key(100, 3)).record(
            Some(ErrorKind::GarbageArgs),
            Duration::from_micros(5),
            Octets { inline: 40, ddp: 0 },
            Octets {
                inline: 24,
                ddp: 4096,
            },
        );
        // Full: two more keys share the overflow entry.
        t.entry(key(200, 0)).retransmit();
        t.entry(key(201, 0)).retransmit();
        let s = t.snapshot();
        assert_eq!(s.len(), SLOTS + 1);
        let (_, three) = s.iter().find(|(k, _)| *k == key(100, 3)).unwrap();
        assert_eq!(three.calls, 2);
        assert_eq!(three.errors_total(), 1);
        assert_eq!(
            three.errors_by_kind().collect::<Vec<_>>(),
            [(ErrorKind::GarbageArgs, 1)]
        );
        assert_eq!(three.received.ddp, 4096);
        assert_eq!(three.sent.inline, 40);
        let (k, over) = s.last().unwrap();
        assert_eq!((k.prog, k.proc), (0, OVERFLOW_PROC));
        assert_eq!(over.retransmits, 2);
    }

    #[test]
    fn octets_of_a_message() {
        let mut m = Message::inline(vec![0u8; 12]);
        m.push(Piece::Ddp(vec![1u8; 5].into()));
        m.push(Piece::Inline(vec![0u8; 4].into()));
        assert_eq!(Octets::of(&m), Octets { inline: 16, ddp: 5 });
    }
}
