//! Connection setup: what is settled before calls flow, reduced to one
//! [`Params`] value that the requester, the responder and the planner
//! read (and nothing else about the negotiation).
//!
//! Version 1: the RFC 8797 private data of the CM exchange and the CM's
//! RDMA Read resources (IRD/ORD). Version 2 will add its CONNPROP exchange
//! and the ERR_VERS fallback to version 1 here, as more states of
//! [`Setup`]; the call machinery does not change.

use super::framing::Framing;
use super::Config;
use crate::provider::ConnectionInfo;
use crate::wire::private_data::{negotiate, Negotiated, PeerPrivateData};

/// What the connection settled at setup: all the rest of the engine reads
/// about the negotiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Params {
    /// The RPC-over-RDMA version, as the framing of every message.
    pub(super) framing: Framing,
    /// The largest message we send in one Send (transport header
    /// included): min(our send size, the peer's receive size).
    pub(super) send_threshold: usize,
    /// The largest message the peer sends us in one Send: min(the peer's
    /// send size, our receive size).
    pub(super) recv_threshold: usize,
    /// Both peers set R: a responder may reply with Send With Invalidate.
    pub(super) remote_invalidation: bool,
    /// RDMA Reads we may have outstanding at once (the CM's ORD, the
    /// peer's IRD); 0 forbids RDMA Read.
    pub(super) ord: u8,
}

/// Where setup stands.
#[derive(Clone, Debug)]
pub(super) enum Setup {
    /// The connection is not up yet. The provisional parameters are our
    /// private data against a peer that sent none (RFC 8797 defaults),
    /// without remote invalidation and without RDMA Reads: what a call
    /// started (queued) or checked before the connection is up sees.
    AwaitingEstablished(Params),
    /// The connection is up and its parameters final.
    Ready(Params),
}

impl Setup {
    /// Setup of a connection that is being established.
    pub(super) fn new(config: &Config) -> Setup {
        let n = negotiate(&config.private_data_struct(), None);
        Setup::AwaitingEstablished(Params {
            framing: Framing::V1,
            send_threshold: n.send_threshold as usize,
            recv_threshold: n.recv_threshold as usize,
            remote_invalidation: false,
            ord: 0,
        })
    }

    /// The connection is up: applies the peer's RFC 8797 private data
    /// (found at any offset of what the peer sent) and the CM's ORD.
    pub(super) fn establish(&mut self, config: &Config, info: &ConnectionInfo) {
        let peer = PeerPrivateData::find(&info.peer_private_data);
        let n = negotiate(&config.private_data_struct(), peer.data());
        *self = Setup::Ready(Params {
            framing: Framing::V1,
            send_threshold: n.send_threshold as usize,
            recv_threshold: n.recv_threshold as usize,
            remote_invalidation: n.remote_invalidation,
            ord: info.ord,
        });
    }

    /// True once the connection is up.
    pub(super) fn is_ready(&self) -> bool {
        matches!(self, Setup::Ready(_))
    }

    /// The parameters (provisional until the connection is up).
    #[inline]
    pub(super) fn params(&self) -> &Params {
        match self {
            Setup::AwaitingEstablished(p) | Setup::Ready(p) => p,
        }
    }

    /// The RFC 8797 outcome, once the connection is up.
    pub(super) fn negotiated(&self) -> Option<Negotiated> {
        match self {
            Setup::AwaitingEstablished(_) => None,
            Setup::Ready(p) => Some(Negotiated {
                send_threshold: p.send_threshold as u32,
                recv_threshold: p.recv_threshold as u32,
                remote_invalidation: p.remote_invalidation,
            }),
        }
    }
}
