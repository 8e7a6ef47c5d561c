//! The version stage of a connection (draft -09 §7 and §5.3.4; the state
//! is `setup::Stage`): the client's RDMA2_CONNPROP probe and what answers
//! it (the server's CONNPROP, or an ERR_VERS in any layout a version 1
//! server sends: version 1 on the same connection), the server's adoption
//! of the version of the client's first valid message and its CONNPROP
//! answer, and what the connection tells the next one.
//!
//! Decisions 1, 2, 3 and 8 of `docs/compliance-v2.md`: the client's
//! CONNPROP takes a fresh XID and has F_RESPONSE clear (its credit word is
//! a request); the server answers with its CONNPROP, the same XID and
//! F_RESPONSE set (its credit word is the first grant); each is 48 octets;
//! each side keeps one receive posted for the other's beyond its credits.

use std::time::Instant;

use super::connection::Connection;
use super::framing::{encode_connprop, Framing, Incoming, RdmaErrorReport};
use super::resources::Op;
use super::setup::Stage;
use super::{ConnectionError, Event, Role, RpcRdmaVersion, VersionInfo};
use crate::provider::{Provider, SendOp, SendWr};
use crate::wire::v2::PropSet;
use smallvec::smallvec;

impl Connection {
    /// The RPC-over-RDMA version in use: 1 or 2, 0 while it is open.
    #[inline]
    pub fn version(&self) -> u32 {
        if self.setup.is_ready() {
            self.params().framing.version()
        } else {
            0
        }
    }

    /// What the connection settled about the RPC-over-RDMA version.
    pub fn version_info(&self) -> VersionInfo {
        VersionInfo {
            version: self.version(),
            peer_v1_only: self.peer_is_v1_only(),
            fallback: self.setup.fallback,
            local_properties: if self.params().framing == Framing::V2 {
                self.setup.local_props.clone()
            } else {
                PropSet::default()
            },
            peer_properties: self.setup.peer_props.clone(),
        }
    }

    /// The peer showed it does not speak version 2: it refused our probe
    /// with ERR_VERS, or the connection ended while the probe was
    /// unanswered. The next connection to this peer should start in
    /// version 1 ([`Connection::reconnect`] does so by itself).
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
    //# If the connection is lost immediately after an RDMA2_ERROR /
    //# RDMA2_ERR_VERS message is received, a client can avoid a possible
    //# version negotiation loop when re-establishing another connection by
    //# assuming that particular server does not support RPC-over-RDMA
    //# version 2.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
    //# A client can assume the same situation (no server support for RPC-
    //# over-RDMA version 2) if the initial negotiation message is lost or
    //# dropped.
    pub fn peer_is_v1_only(&self) -> bool {
        self.setup.fallback || self.setup.probe_lost
    }

    /// Client that may speak version 2, just established: its CONNPROP
    /// (the probe) goes out, the first and only message until the server
    /// answers.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7
    //# As with RPC-over-RDMA version 1, upon connection establishment a
    //# client MUST NOT send more than a single RPC-over-RDMA message at a
    //# time until it receives a valid non-error RPC-over-RDMA message from
    //# the server that grants client credits.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7
    //# Because the server might support only RPC-over-RDMA version 1, this
    //# initial message can be no larger than the version 1 default inline
    //# threshold of 1024 bytes.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# When no RPC message payload is present, a Requester MUST set the
    //# value of RPCRDMA2_F_RESPONSE to reflect how the receiver is to
    //# interpret the rdma_start.rdma_credits and rdma_start.rdma_xid fields.
    // The probe is a request: F_RESPONSE clear, its credit word our
    // request, its XID fresh (no call has it). Calls wait in the queue
    // (`can_send` needs the stage `Ready`).
    pub(super) fn send_probe(&mut self, p: &mut dyn Provider) {
        if let Stage::Probing { xid, .. } = self.setup.stage {
            let credit = self.req.requested;
            self.send_connprop(p, xid, credit, false);
        }
    }

    /// Posts an RDMA2_CONNPROP with our properties.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.4
    //# Given that fact, the sender should make sure that the message can be
    //# received by peers who use the default Receive Buffer Size.
    // Two properties: 48 octets, far below 1024 (decision 3).
    fn send_connprop(&mut self, p: &mut dyn Provider, xid: u32, credit: u32, response: bool) {
        let msg = encode_connprop(xid, credit, response, &self.setup.local_props);
        debug_assert!(msg.len() <= 1024);
        let (mr, len) = match self.res.message_buffer(p, &msg) {
            Ok(x) => x,
            Err(e) => {
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
        };
        let wr_id = self.res.wr(Op::Control(mr));
        let wr = SendWr {
            wr_id,
            op: SendOp::Send { solicited: false },
            sges: smallvec![mr.sge(0, len)],
        };
        if let Err(e) = self.post(p, wr) {
            self.res.ops.remove(wr_id);
            self.res.zombies.push(mr);
            self.fatal(p, ConnectionError::Provider(e));
            return;
        }
        self.metrics.connprops_sent += 1;
    }

    /// A decoded message while the version is still open (`framing`
    /// decoded it). Returns it when it is to be handled as usual (the
    /// version is now settled, or the message is a header to refuse).
    pub(super) fn on_version_stage(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        framing: Framing,
        incoming: Incoming,
    ) -> Option<Incoming> {
        match self.setup.stage {
            Stage::Probing { xid, .. } => {
                self.on_probe_answer(now, p, xid, incoming);
                None
            }
            Stage::AwaitingFirst => self.adopt(now, p, framing, incoming),
            Stage::AwaitingEstablished | Stage::Ready => Some(incoming),
        }
    }

    /// Client: what the server sent while our probe `probe` was out.
    fn on_probe_answer(&mut self, now: Instant, p: &mut dyn Provider, probe: u32, m: Incoming) {
        match m {
            Incoming::Connprop {
                xid,
                credit,
                response: true,
                props,
            } if xid == probe => {
                //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.1
                //# If the server does support RPC-over-RDMA version 2, it
                //# sends RPC-over-RDMA messages back to the client with the
                //# value two (2) in the rdma_vers field.
                self.metrics.connprops_received += 1;
                self.setup.peer_props = props;
                self.setup.peer_connprop = true;
                self.settle(now, p, Framing::V2, Some(credit));
            }
            Incoming::Error {
                xid,
                error: RdmaErrorReport::Vers { low, high },
                ..
            } if xid == probe => {
                self.metrics.err_vers_received += 1;
                self.refused(now, p, low, high);
            }
            // A version 2 server that refuses our CONNPROP otherwise still
            // speaks version 2: its properties are the defaults and no
            // credit was granted (an error grants none), so one call at a
            // time until a reply grants more.
            Incoming::Error { xid, .. } if xid == probe => {
                self.metrics.rdma2_errors_received += 1;
                self.settle(now, p, Framing::V2, None);
            }
            // Nothing else can answer a probe.
            _ => self.metrics.dropped += 1,
        }
    }

    /// Client: the probe was refused with ERR_VERS (`low..=high`).
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
    //# This message also reports a range of protocol versions that the
    //# server supports.  To continue operation, the client selects a
    //# protocol version in the range of server-supported versions for
    //# subsequent messages on this connection.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# The receiver of this header type MUST ignore the value of the
    //# rdma_start.rdma_credits field.
    // The refusal's credit word grants nothing: version 1 starts with one
    // credit (RFC 8166 section 3.3.3) until its first reply.
    fn refused(&mut self, now: Instant, p: &mut dyn Provider, low: u32, high: u32) {
        if self.setup.policy == RpcRdmaVersion::Auto && (low..=high).contains(&1) {
            self.setup.fallback = true;
            self.settle(now, p, Framing::V1, None);
            return;
        }
        self.fatal(p, ConnectionError::VersionRefused { low, high });
    }

    /// Server: the client's first messages, until one is valid. A valid
    /// call (or, in version 2, a CONNPROP request) settles the version it
    /// came in; a header to refuse is refused in that version without
    /// settling; anything else is dropped.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.3
    //# If the server supports the RPC-over-RDMA protocol version used in
    //# Call messages from a client, it MUST send Replies with the same RPC-
    //# over-RDMA protocol version that the client uses to send its Calls.
    fn adopt(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        framing: Framing,
        m: Incoming,
    ) -> Option<Incoming> {
        match m {
            Incoming::Connprop {
                xid,
                response: false,
                props,
                ..
            } if framing == Framing::V2 => {
                self.metrics.connprops_received += 1;
                self.setup.peer_props = props;
                self.setup.peer_connprop = true;
                self.settle(now, p, Framing::V2, None);
                // Our answer: the same XID, F_RESPONSE set, our grant.
                let grant = self.resp.grant;
                self.send_connprop(p, xid, grant, true);
                None
            }
            Incoming::Data {
                response: Some(false) | None,
                ..
            } => {
                self.settle(now, p, framing, None);
                Some(m)
            }
            Incoming::Reject { .. } => Some(m),
            _ => {
                self.metrics.dropped += 1;
                None
            }
        }
    }

    /// The version is `framing` from now on; `grant`: the credits the
    /// message that settled it granted (the server's CONNPROP).
    fn settle(&mut self, now: Instant, p: &mut dyn Provider, framing: Framing, grant: Option<u32>) {
        self.setup.settle(framing, self.config.role);
        if let Some(g) = grant {
            self.metrics.credits_granted = g;
            let new = g.clamp(1, self.req.requested);
            if new != self.req.credits {
                self.req.credits = new;
                self.events
                    .push_back(Event::CreditsChanged { credits: new });
            }
        }
        if self.config.role == Role::Client {
            self.pump(now, p);
        }
    }

    /// A CONNPROP once the version is settled: properties never change
    /// (decision 1); it is counted and ignored.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.4
    //# Properties not included in rdma_props are to be treated by the peer
    //# endpoint as having the default value and are not allowed to change
    //# subsequently.
    pub(super) fn later_connprop(&mut self) {
        self.metrics.connprops_received += 1;
        self.metrics.dropped += 1;
    }

    /// The connection is ending: a probe still out counts as lost.
    pub(super) fn note_probe_lost(&mut self) {
        if matches!(self.setup.stage, Stage::Probing { .. }) {
            self.setup.probe_lost = true;
        }
    }

    /// The policy of the next connection to the same peer: version 1 once
    /// this one showed the peer speaks no version 2.
    pub(super) fn next_policy(&self) -> RpcRdmaVersion {
        if self.setup.policy == RpcRdmaVersion::Auto && self.peer_is_v1_only() {
            RpcRdmaVersion::V1
        } else {
            self.setup.policy
        }
    }
}
