//! Connection setup: what is settled before calls flow, reduced to one
//! [`Params`] value that the requester, the responder and the planner
//! read (and nothing else about the negotiation).
//!
//! Version 1: the RFC 8797 private data of the CM exchange and the CM's
//! RDMA Read resources (IRD/ORD). Version 2 (draft -09 §7, §4, §5.3.4)
//! adds where the version is decided: a client that may speak version 2
//! probes with its RDMA2_CONNPROP ([`Stage::Probing`]) and either gets the
//! server's CONNPROP (version 2, the server's properties applied) or an
//! ERR_VERS (version 1 on the same connection); a server that may speak
//! version 2 adopts the version of the client's first valid message
//! ([`Stage::AwaitingFirst`]). The messages themselves are handled in
//! `super::version`; the call machinery does not change.

use std::time::Instant;

use super::framing::Framing;
use super::{Config, Role, RpcRdmaVersion};
use crate::provider::ConnectionInfo;
use crate::wire::private_data::{negotiate, Negotiated, PeerPrivateData};
use crate::wire::v2::{PropSet, PropVal, RvReqSup, RBSIZ_DEFAULT};

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
    /// A responder may reply with Send With Invalidate: version 1, both
    /// peers set R (RFC 8797); version 2, our provider can (the requester
    /// names the handle per call).
    pub(super) remote_invalidation: bool,
    /// RDMA Reads we may have outstanding at once (the CM's ORD, the
    /// peer's IRD); 0 forbids RDMA Read.
    pub(super) ord: u8,
    /// Reverse-direction (backchannel) messages may carry chunks: version
    /// 2 with Reverse Request Support GENL on the receiving side (ours for
    /// the calls we answer, the peer's for the calls we make). Version 1:
    /// never (RFC 8167 inline only).
    pub(super) reverse_chunks: bool,
}

/// Where setup stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The connection is not up yet: the parameters are provisional (our
    /// private data against a peer that sent none, RFC 8797 defaults,
    /// without remote invalidation and RDMA Reads): what a call started
    /// (queued) or checked before the connection is up sees.
    AwaitingEstablished,
    /// Client: our RDMA2_CONNPROP (XID `xid`) is out; no call goes until
    /// the server's CONNPROP grants credits or an ERR_VERS says version 1.
    Probing {
        /// The CONNPROP's XID.
        xid: u32,
        /// When the probe counts as lost.
        deadline: Option<Instant>,
    },
    /// Server: the client's first valid message decides the version.
    AwaitingFirst,
    /// The version and the parameters are final.
    Ready,
}

/// Connection setup (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Setup {
    pub(super) stage: Stage,
    params: Params,
    /// The version 1 parameters (RFC 8797), for a fallback.
    v1: Params,
    pub(super) policy: RpcRdmaVersion,
    /// Receives posted beyond the credit-bearing ones: one for the peer's
    /// CONNPROP (or the ERR_VERS that refuses ours) while the version is
    /// open (decision 1).
    pub(super) extra_receives: usize,
    /// Our properties (sent in our CONNPROP; empty in version 1).
    pub(super) local_props: PropSet,
    /// The peer's properties (from its CONNPROP; empty otherwise).
    pub(super) peer_props: PropSet,
    /// The peer's CONNPROP arrived (a later one is ignored).
    pub(super) peer_connprop: bool,
    /// Our version 2 probe was refused with ERR_VERS: the connection went
    /// on in version 1.
    pub(super) fallback: bool,
    /// The connection ended while our probe was unanswered.
    pub(super) probe_lost: bool,
    /// Octets of our Send buffers.
    send_buf: usize,
}

impl Setup {
    /// Setup of a connection that is being established.
    pub(super) fn new(config: &Config) -> Setup {
        let n = negotiate(&config.private_data_struct(), None);
        let params = Params {
            framing: Framing::V1,
            send_threshold: n.send_threshold as usize,
            recv_threshold: n.recv_threshold as usize,
            remote_invalidation: false,
            ord: 0,
            reverse_chunks: false,
        };
        Setup {
            stage: Stage::AwaitingEstablished,
            params,
            v1: params,
            policy: config.rpcrdma_version,
            extra_receives: 0,
            local_props: PropSet::default(),
            peer_props: PropSet::default(),
            peer_connprop: false,
            fallback: false,
            probe_lost: false,
            send_buf: config.inline_send.max(1024) as usize,
        }
    }

    /// The connection is up: applies the peer's RFC 8797 private data
    /// (found at any offset of what the peer sent) and the CM's ORD; a
    /// connection that may speak version 2 opens its version stage
    /// (`probe_xid`: the XID of a client's CONNPROP; `recv_size`: our
    /// receive buffers; `can_invalidate`: our provider's
    /// `Caps::remote_invalidation`).
    pub(super) fn establish(
        &mut self,
        config: &Config,
        info: &ConnectionInfo,
        probe: Option<(u32, Option<Instant>)>,
        recv_size: usize,
        can_invalidate: bool,
    ) {
        let peer = PeerPrivateData::find(&info.peer_private_data);
        let n = negotiate(&config.private_data_struct(), peer.data());
        self.v1 = Params {
            framing: Framing::V1,
            send_threshold: n.send_threshold as usize,
            recv_threshold: n.recv_threshold as usize,
            remote_invalidation: n.remote_invalidation,
            ord: info.ord,
            reverse_chunks: false,
        };
        self.params = self.v1;
        if self.policy == RpcRdmaVersion::V1 {
            self.stage = Stage::Ready;
            return;
        }
        self.params.remote_invalidation = can_invalidate;
        self.local_props = local_props(config, recv_size, info.ord);
        self.extra_receives = 1;
        match (config.role, probe) {
            (Role::Client, Some((xid, deadline))) => {
                self.params.framing = Framing::V2;
                self.stage = Stage::Probing { xid, deadline };
            }
            _ => self.stage = Stage::AwaitingFirst,
        }
    }

    /// True once the version and the parameters are final.
    #[inline]
    pub(super) fn is_ready(&self) -> bool {
        self.stage == Stage::Ready
    }

    /// The parameters (provisional until the connection is ready).
    #[inline]
    pub(super) fn params(&self) -> &Params {
        &self.params
    }

    /// The framing that decodes a received message: the connection's,
    /// except at a server still waiting for the client's first valid
    /// message, where the message's own `rdma_vers` (the second word)
    /// chooses, within the policy.
    #[inline]
    pub(super) fn framing_for(&mut self, msg: &[u8]) -> Framing {
        if self.stage != Stage::AwaitingFirst {
            return self.params.framing;
        }
        self.params.framing = match (msg.get(4..8), self.policy) {
            (Some([0, 0, 0, 1]), RpcRdmaVersion::Auto) => Framing::V1,
            (Some([0, 0, 0, 2]), _) | (_, RpcRdmaVersion::V2) => Framing::V2,
            _ => Framing::V1,
        };
        self.params.framing
    }

    /// The version is decided: `framing` (with the peer's properties
    /// already in `peer_props` for version 2, and `reverse_chunks` per
    /// our role).
    pub(super) fn settle(&mut self, framing: Framing, role: Role) {
        self.stage = Stage::Ready;
        self.extra_receives = 0;
        if framing == Framing::V1 {
            self.params = self.v1;
            return;
        }
        self.params.framing = Framing::V2;
        let peer_rbsiz = self.peer_props.rbsiz() as usize;
        let our_rbsiz = self.local_rbsiz() as usize;
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.1
        //# The Receive Buffer Size specifies the minimum size, in octets, of
        //# pre-posted receive buffers.
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.1
        //# Both peers may use the default inline threshold value for RPC-
        //# over-RDMA version 2 connections (4096 bytes).
        // Decision 2: the send threshold is the peer's RBSIZ, never below
        // the version 2 default, clamped to our Send buffers (the RFC 8797
        // send size is what they hold).
        self.params.send_threshold = peer_rbsiz.max(RBSIZ_DEFAULT as usize).min(self.send_buf);
        self.params.recv_threshold = self
            .v1
            .recv_threshold
            .max(RBSIZ_DEFAULT as usize)
            .min(our_rbsiz);
        self.params.reverse_chunks = match role {
            // The calls we answer: what we advertised.
            Role::Client => self.local_brs() == RvReqSup::Genl,
            // The calls we make: what the peer advertised.
            Role::Server => {
                self.peer_props.brs() == RvReqSup::Genl && self.local_brs() == RvReqSup::Genl
            }
        };
    }

    /// The peer said, in version 2, that it takes no reverse requests
    /// (Reverse Request Support NONE; absent means INLINE).
    pub(super) fn peer_refuses_reverse_requests(&self) -> bool {
        self.params.framing == Framing::V2 && self.peer_props.brs() == RvReqSup::None
    }

    /// The Receive Buffer Size we advertise.
    fn local_rbsiz(&self) -> u32 {
        self.local_props.rbsiz()
    }

    /// The Reverse Request Support we advertise.
    fn local_brs(&self) -> RvReqSup {
        self.local_props.brs()
    }

    /// The range of versions this connection supports, for ERR_VERS: the
    /// policy's while undecided, the connection's once decided.
    pub(super) fn versions(&self) -> (u32, u32) {
        if self.is_ready() {
            let v = self.params.framing.version();
            return (v, v);
        }
        match self.policy {
            RpcRdmaVersion::V1 => (1, 1),
            RpcRdmaVersion::V2 => (2, 2),
            RpcRdmaVersion::Auto => (1, 2),
        }
    }

    /// The deadline of our probe, if one is out.
    #[inline]
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.stage {
            Stage::Probing { deadline, .. } => deadline,
            _ => None,
        }
    }

    /// The RFC 8797 outcome, once the connection is up.
    pub(super) fn negotiated(&self) -> Option<Negotiated> {
        if self.stage == Stage::AwaitingEstablished {
            return None;
        }
        let p = &self.params;
        Some(Negotiated {
            send_threshold: p.send_threshold as u32,
            recv_threshold: p.recv_threshold as u32,
            remote_invalidation: p.remote_invalidation,
        })
    }
}

/// Our properties (decisions 2 and 4): RBSIZ = our receive buffers (never
/// below the version 2 default), BRS = GENL when reverse-direction chunks
/// are enabled (a client also needs RDMA Read resources, ORD > 0, to take
/// a reverse call's Read chunks), else INLINE.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.4
//# All relevant transport properties that the sender is aware of should
//# be included in rdma_props.
//= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.2.1
//# It is the responsibility of the endpoint sending this value to ensure
//# that its pre-posted receive buffers are at least the size specified,
//# allowing the endpoint receiving this value to send messages that are of
//# this size.
fn local_props(config: &Config, recv_size: usize, ord: u8) -> PropSet {
    let rbsiz = (recv_size as u32).max(RBSIZ_DEFAULT);
    let genl = config.reverse_chunks && (config.role == Role::Server || ord > 0);
    let brs = if genl {
        RvReqSup::Genl
    } else {
        RvReqSup::Inline
    };
    PropSet {
        props: vec![PropVal::Rbsiz(Some(rbsiz)), PropVal::Brs(Some(brs))],
    }
}
