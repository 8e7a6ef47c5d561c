//! The requester half of a connection: our calls, from queued to done.
//! Direction-agnostic (RFC 8167): a client's forward requester and a
//! server's backchannel requester are the same code; the backchannel one
//! sends inline only and offers no reply chunks.

use std::collections::VecDeque;

use super::connection::OutCall;
use super::ids::IdMap;
use super::timer::Deadlines;
use super::{Config, Role};

/// The requester's state.
#[derive(Debug)]
pub(super) struct Requester {
    /// The backchannel requester (a server's): inline calls only, no
    /// reply resources.
    pub(super) backchannel: bool,
    /// Credits we request in every call: `Config::credits_requested` (a
    /// client), `Config::backchannel_slots` (a server).
    pub(super) requested: u32,
    /// Calls we may have outstanding (the peer's last grant, clamped).
    pub(super) credits: u32,
    pub(super) next_xid: u32,
    pub(super) next_id: u64,
    /// Calls waiting for a credit (or the connection, or room in the send
    /// queue), in order.
    pub(super) queue: VecDeque<OutCall>,
    /// Our calls sent and not finished, by XID (a hash map: a B-tree
    /// shifted these large values on every removal). The XIDs of sent calls
    /// are distinct (see `send_call`); a call whose reply has arrived
    /// (`reply` set) stays here until its Send and invalidations complete,
    /// and no longer matches a received reply.
    pub(super) calls: IdMap<u32, OutCall>,
    /// Calls sent (their Send taken by the provider) and not answered.
    pub(super) outstanding: usize,
    /// `(deadline, XID)` of the calls sent with a deadline, sorted by
    /// deadline (ties in send order). The front is always a call still
    /// waiting for its reply (entries are dropped from the front as replies
    /// arrive; stale entries further back are compacted away), so the
    /// next timeout is read without scanning every call.
    pub(super) deadlines: Deadlines<u32>,
    /// Calls interrupted by the connection's end, for the next one.
    pub(super) retransmits: Vec<OutCall>,
}

impl Requester {
    /// The requester of a connection with this configuration.
    pub(super) fn new(config: &Config) -> Requester {
        let backchannel = config.role == Role::Server;
        Requester {
            backchannel,
            requested: if backchannel {
                config.backchannel_slots.max(1)
            } else {
                config.credits_requested.max(1)
            },
            credits: 1,
            next_xid: config.first_xid,
            next_id: 1,
            queue: VecDeque::new(),
            calls: IdMap::default(),
            outstanding: 0,
            deadlines: Deadlines::default(),
            retransmits: Vec::new(),
        }
    }
}
