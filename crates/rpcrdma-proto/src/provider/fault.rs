//! A seeded fault-injecting decorator over any [`Provider`] (the smoltcp
//! `FaultInjector` shape, with the RDMA fault model instead of packet loss).
//!
//! RDMA RC is reliable, so the faults worth injecting are the ones an
//! RPC-over-RDMA engine must survive:
//!
//! * **QP failure after N posts** ([`FaultConfig::fail_after_posts`]): the
//!   queue pair goes to error; every outstanding WR completes
//!   [`Status::Flushed`]; the reason is `Error { LocalOperation, Local }`.
//! * **Connection loss** after N posts or N completions
//!   ([`FaultConfig::lose_connection_after_posts`],
//!   [`FaultConfig::lose_connection_after_completions`]): like a retry
//!   timeout, the first flushed WR reports [`Status::ConnectionLost`], the
//!   rest are flushed, and the reason is [`DisconnectReason::TransportLost`].
//! * **Remote access errors** on RDMA Read/Write with probability
//!   [`FaultConfig::remote_access_error_chance`]: the STag's key byte is
//!   altered before posting, so the *peer* genuinely refuses the access
//!   (and the failure takes its real path through both ends).
//! * **Empty receive queue** ([`FaultConfig::drop_recv_chance`]): a posted
//!   receive is swallowed instead of reaching the provider, so a later Send
//!   from the peer meets receiver-not-ready. A swallowed receive completes
//!   `Flushed` once the connection is down, so every WR still completes
//!   exactly once. (Its region is not held by the inner provider.)
//! * **Unanswered RDMA Reads** ([`FaultConfig::stall_read_len`]): a Read of
//!   that many octets is swallowed, as if the peer never answered its Read
//!   Request (a hostile requester that leaves part of a Read chunk
//!   unanswered while the transport stays healthy); it completes `Flushed`
//!   once the connection is down.
//! * **Short Read completions** ([`FaultConfig::short_read_len`]): a Read
//!   of that many octets that succeeds reports one octet fewer (a provider
//!   that completes a Read it did not wholly place: what an engine reusing
//!   its Read sinks must never deliver).
//!
//! Every decision comes from one SplitMix64 stream seeded by
//! [`FaultConfig::seed`], drawn only for faults whose probability is above
//! zero, so the same seed and the same sequence of calls give the same
//! faults and the same completions. The peer sees the consequences through
//! the inner provider (for a lost connection, an orderly close).

use std::task::Waker;

use super::{
    Access, Blame, Buffer, Bytes, Caps, Completion, ConnectionEvent, ConnectionInfo,
    ConnectionState, DisconnectReason, MemoryRegion, Notify, Opcode, Provider, ProviderError,
    RecvWr, RegisterError, SendOp, SendWr, Stag, Status,
};

/// Which faults to inject. `Default` injects none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// RNG seed.
    pub seed: u64,
    /// The QP fails right after this many successful posts (sends and
    /// receives together).
    pub fail_after_posts: Option<u64>,
    /// The connection is lost right after this many successful posts.
    pub lose_connection_after_posts: Option<u64>,
    /// The connection is lost once this many completions were returned.
    pub lose_connection_after_completions: Option<u64>,
    /// Probability that an RDMA Read or Write gets a bad remote key.
    pub remote_access_error_chance: f64,
    /// Probability that a posted receive is silently dropped.
    pub drop_recv_chance: f64,
    /// RDMA Reads of exactly this many octets are never answered.
    pub stall_read_len: Option<u32>,
    /// Successful RDMA Reads of exactly this many octets report one octet
    /// fewer in their completion.
    pub short_read_len: Option<u32>,
}

/// What was injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// RDMA Reads/Writes posted with a corrupted STag.
    pub bad_stags: u64,
    /// Receives swallowed.
    pub dropped_recvs: u64,
    /// QP failures injected.
    pub qp_failures: u64,
    /// Connection losses injected.
    pub connection_losses: u64,
    /// RDMA Reads swallowed (never answered).
    pub stalled_reads: u64,
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, seedable, good enough for
/// fault schedules (here and in the socket fault campaign,
/// `crates/rpcrdma/tests/fault_campaign.rs`).
#[derive(Clone, Copy, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (draws nothing when `p <= 0`).
    pub fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        unit < p
    }

    /// A number in `0..n` (0 when `n` is 0), by Lemire's multiply-shift
    /// (bias below 2^-32 for the small `n` of a schedule).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// The decorator. See the [module docs](self).
#[derive(Debug)]
pub struct FaultInjector<P> {
    inner: P,
    config: FaultConfig,
    rng: SplitMix64,
    posts: u64,
    completions: u64,
    tripped: Option<DisconnectReason>,
    rewrite_first_flush: Option<Status>,
    /// Swallowed WRs (receives, Reads): flushed once disconnected.
    dropped: Vec<(u64, Opcode)>,
    stats: FaultStats,
}

impl<P: Provider> FaultInjector<P> {
    /// Wraps `inner`.
    pub fn new(inner: P, config: FaultConfig) -> Self {
        FaultInjector {
            inner,
            config,
            rng: SplitMix64(config.seed),
            posts: 0,
            completions: 0,
            tripped: None,
            rewrite_first_flush: None,
            dropped: Vec::new(),
            stats: FaultStats::default(),
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, mutably (for backend-specific setup calls).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// Faults injected so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    fn trip(&mut self, reason: DisconnectReason, first_flush: Option<Status>) {
        if self.tripped.is_some()
            || matches!(
                self.inner.connection_state(),
                ConnectionState::Disconnected(_)
            )
        {
            return;
        }
        match reason {
            DisconnectReason::TransportLost => self.stats.connection_losses += 1,
            _ => self.stats.qp_failures += 1,
        }
        self.tripped = Some(reason);
        self.rewrite_first_flush = first_flush;
        self.inner.disconnect();
    }

    fn after_post(&mut self) {
        self.posts += 1;
        if self.config.fail_after_posts == Some(self.posts) {
            self.trip(
                DisconnectReason::Error {
                    status: Status::LocalOperation,
                    blame: Blame::Local,
                },
                None,
            );
        }
        if self.config.lose_connection_after_posts == Some(self.posts) {
            self.trip(
                DisconnectReason::TransportLost,
                Some(Status::ConnectionLost),
            );
        }
    }

    /// Keeps a WR from the inner provider: it completes `Flushed` once the
    /// connection is down.
    fn swallow(&mut self, wr_id: u64, opcode: Opcode) -> Result<(), ProviderError> {
        if matches!(
            self.inner.connection_state(),
            ConnectionState::Disconnected(_)
        ) {
            return Err(ProviderError::NotConnected);
        }
        self.dropped.push((wr_id, opcode));
        Ok(())
    }

    fn rewrite(&self, reason: DisconnectReason) -> DisconnectReason {
        match (&self.tripped, reason) {
            (Some(t), DisconnectReason::LocalClose) => t.clone(),
            (_, r) => r,
        }
    }
}

impl<P: Provider> Provider for FaultInjector<P> {
    fn caps(&self) -> Caps {
        self.inner.caps()
    }

    fn connection_state(&self) -> ConnectionState {
        match self.inner.connection_state() {
            ConnectionState::Disconnected(r) => ConnectionState::Disconnected(self.rewrite(r)),
            s => s,
        }
    }

    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.inner.connection_info()
    }

    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        match self.inner.poll_event()? {
            ConnectionEvent::Disconnected(r) => {
                Some(ConnectionEvent::Disconnected(self.rewrite(r)))
            }
            e => Some(e),
        }
    }

    fn disconnect(&mut self) {
        self.inner.disconnect()
    }

    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.inner.register(buf, access)
    }

    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.inner.register_shared(buf, access)
    }

    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.inner.register_recv(len)
    }

    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.inner.deregister(mr)
    }

    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.inner.region(mr)
    }

    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.inner.region_mut(mr)
    }

    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        if self.rng.chance(self.config.drop_recv_chance) {
            self.swallow(wr.wr_id, Opcode::Recv)?;
            self.stats.dropped_recvs += 1;
        } else {
            self.inner.post_recv(wr)?;
        }
        self.after_post();
        Ok(())
    }

    fn post_send(&mut self, mut wr: SendWr) -> Result<(), ProviderError> {
        if let SendOp::Write { remote } | SendOp::Read { remote } = &mut wr.op {
            if self.rng.chance(self.config.remote_access_error_chance) {
                remote.stag = Stag::new(remote.stag.index(), remote.stag.key() ^ 0x5a);
                self.stats.bad_stags += 1;
            }
        }
        let stall = match (&wr.op, self.config.stall_read_len) {
            (SendOp::Read { .. }, Some(n)) => wr.sges.iter().map(|s| s.length).sum::<u32>() == n,
            _ => false,
        };
        if stall {
            self.swallow(wr.wr_id, Opcode::Read)?;
            self.stats.stalled_reads += 1;
        } else {
            self.inner.post_send(wr)?;
        }
        self.after_post();
        Ok(())
    }

    /// A staged Send counts as a post (for `fail_after_posts` and
    /// `lose_connection_after_posts`) when the inner provider takes it.
    fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        let staged = self.inner.post_send_staged(op, len, fill)?;
        if staged {
            self.after_post();
        }
        Ok(staged)
    }

    fn staged_outstanding(&self) -> usize {
        self.inner.staged_outstanding()
    }

    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        let start = out.len();
        self.inner.poll_completions(out);
        if !self.dropped.is_empty()
            && matches!(
                self.inner.connection_state(),
                ConnectionState::Disconnected(_)
            )
        {
            for (wr_id, opcode) in self.dropped.drain(..) {
                out.push(Completion {
                    wr_id,
                    opcode,
                    byte_len: 0,
                    status: Status::Flushed,
                });
            }
        }
        if let Some(status) = self.rewrite_first_flush {
            let first = out
                .get_mut(start..)
                .and_then(|new| new.iter_mut().find(|c| c.status == Status::Flushed));
            if let Some(c) = first {
                c.status = status;
                self.rewrite_first_flush = None;
            }
        }
        if let Some(len) = self.config.short_read_len {
            for c in out.get_mut(start..).unwrap_or_default() {
                if c.opcode == Opcode::Read && c.status.is_ok() && c.byte_len == len {
                    c.byte_len = len.saturating_sub(1);
                }
            }
        }
        let n = out.len() - start;
        self.completions += n as u64;
        if let Some(limit) = self.config.lose_connection_after_completions {
            if self.completions >= limit {
                self.trip(
                    DisconnectReason::TransportLost,
                    Some(Status::ConnectionLost),
                );
            }
        }
        n
    }

    fn arm(&mut self, waker: &Waker, notify: Notify) {
        if !self.dropped.is_empty()
            && matches!(
                self.inner.connection_state(),
                ConnectionState::Disconnected(_)
            )
        {
            // Swallowed WRs are waiting to be reported as flushed.
            waker.wake_by_ref();
            return;
        }
        self.inner.arm(waker, notify)
    }

    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.wait_fd()
    }
    fn write_blocked(&self) -> bool {
        self.inner.write_blocked()
    }
    fn set_read_gate(&mut self, on: bool) {
        self.inner.set_read_gate(on)
    }
    fn note_readable(&mut self) {
        self.inner.note_readable()
    }
    fn set_blocking_reads(&mut self, on: bool) -> bool {
        self.inner.set_blocking_reads(on)
    }
    fn read_blocking(&mut self, timeout: std::time::Duration) -> Option<std::io::Result<bool>> {
        self.inner.read_blocking(timeout)
    }
    fn settled(&self) -> bool {
        // Swallowed WRs still owe their flush completions.
        self.dropped.is_empty() && self.inner.settled()
    }
    fn next_deadline(&self) -> Option<std::time::Instant> {
        self.inner.next_deadline()
    }
    fn registered_regions(&self) -> Option<u32> {
        self.inner.registered_regions()
    }
    fn link_info(&self) -> super::LinkInfo {
        self.inner.link_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_outputs() {
        // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn below_stays_below() {
        let mut r = SplitMix64(9);
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| r.below(7) < 7));
        let mut seen = [false; 7];
        (0..1000).for_each(|_| seen[r.below(7) as usize] = true);
        assert!(seen.iter().all(|&s| s), "every value drawn: {seen:?}");
    }

    #[test]
    fn chance_bounds_and_no_draw_at_zero() {
        let mut r = SplitMix64(5);
        assert!(!r.chance(0.0));
        assert!(!r.chance(-1.0));
        assert!(!r.chance(f64::NAN));
        assert_eq!(r.0, 5, "p <= 0 must not advance the stream");
        assert!((0..1000).all(|_| r.chance(1.0)));
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2200..2800).contains(&hits), "{hits}");
    }
}
