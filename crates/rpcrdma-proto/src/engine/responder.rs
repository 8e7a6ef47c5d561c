//! The responder half of a connection: calls we received, from their
//! RDMA Reads to our reply. Direction-agnostic (RFC 8167): a server's
//! forward responder and a client's backchannel responder are the same
//! code; the backchannel one takes calls only after
//! `Connection::enable_backchannel`, refuses chunks and replies inline.

use std::collections::VecDeque;
use std::time::Instant;

use super::budget::Lease;
use super::connection::{InCall, PendingRead, ReplyJob};
use super::ids::IdMap;
use super::timer::Deadlines;
use super::{Config, Role};

/// The responder's state.
#[derive(Debug)]
pub(super) struct Responder {
    /// The backchannel responder (a client's).
    pub(super) backchannel: bool,
    /// Receives for calls are posted: always for the forward responder,
    /// after `enable_backchannel` for the backchannel one.
    pub(super) enabled: bool,
    /// The credit grant we send in every reply: `Config::credits_granted`
    /// (clamped to the receive queue) for the forward responder, the
    /// backchannel slots for the backchannel one.
    pub(super) grant: u32,
    /// The largest grant this connection ever advertised: a requester may
    /// still be using it.
    pub(super) max_grant: u32,
    pub(super) next_handle: u64,
    /// Calls received and not answered, by handle.
    pub(super) incoming: IdMap<u64, InCall>,
    /// RDMA Reads of admitted calls, waiting for the ORD.
    pub(super) reads: VecDeque<PendingRead>,
    pub(super) reads_outstanding: usize,
    /// Octets of RDMA Read sinks registered now (at most
    /// `Limits::max_read_sink_bytes`).
    pub(super) sink_bytes: u64,
    /// Received calls waiting for Read-sink budget, in arrival order.
    pub(super) sink_waiting: VecDeque<u64>,
    /// This connection's part of the shared Read-sink budget
    /// (`Config::read_budget`; nothing without one).
    pub(super) lease: Lease,
    /// `(deadline, handle)` of the received calls whose RDMA Reads are
    /// issued and not all complete (`Config::read_timeout`), sorted.
    pub(super) read_deadlines: Deadlines<u64>,
    /// Until the peer's first valid call (`Config::idle_timeout`).
    pub(super) idle_deadline: Option<Instant>,
    /// Error replies whose Send has not completed.
    pub(super) errors_unacked: usize,
    /// Replies (not errors) whose Send has not completed: the requester
    /// cannot have received them yet (see `overrun`).
    pub(super) replies_unacked: usize,
    pub(super) next_job: u64,
    /// Replies with RDMA Writes whose work requests have not all
    /// completed.
    pub(super) jobs: IdMap<u64, ReplyJob>,
}

impl Responder {
    /// The responder of a connection with this configuration.
    pub(super) fn new(config: &Config) -> Responder {
        let backchannel = config.role == Role::Client;
        let grant = if backchannel {
            config.backchannel_slots.max(1)
        } else {
            config.credits_granted.max(1)
        };
        Responder {
            backchannel,
            enabled: !backchannel,
            grant,
            max_grant: grant,
            next_handle: 1,
            incoming: IdMap::default(),
            reads: VecDeque::new(),
            reads_outstanding: 0,
            sink_bytes: 0,
            sink_waiting: VecDeque::new(),
            lease: Lease::new(config.read_budget.clone()),
            read_deadlines: Deadlines::default(),
            idle_deadline: None,
            errors_unacked: 0,
            replies_unacked: 0,
            next_job: 1,
            jobs: IdMap::default(),
        }
    }

    /// Receives to keep posted for calls: the grant, once enabled.
    #[inline]
    pub(super) fn budget(&self) -> usize {
        if self.enabled {
            self.grant as usize
        } else {
            0
        }
    }
}
