//! Terminate handling: the faults the receiver finds in an FPDU (kept
//! until its CRC has been checked, then turned into a Terminate), sending
//! a Terminate and closing (RFC 5040 section 5.4, RFC 5041 section 7), and
//! acting on a Terminate the peer sent.

use smallvec::smallvec;

use rpcrdma_proto::provider::memory::Hold as Held;
use rpcrdma_proto::provider::{
    Blame, Completion, DisconnectReason, Opcode as CqOpcode, SendOp, Status,
};

use crate::ddp::{self, DdpHeader};
use crate::rdmap::{self, Opcode, Segment, TerminateMessage, QN_READ_REQUEST, QN_SEND};
use crate::TerminateCode;

use super::recv::Dst;
use super::send::{Chunk, TxMark};
use super::{QpState, QueuePair, WrState};

/// Why the receiver is killing the stream.
#[derive(Clone, Copy, Debug)]
pub(super) struct RxFault {
    code: TerminateCode,
    reason: CloseError,
    /// Receive (relative index) that completes with a local status.
    recv: Option<(u32, Status)>,
    /// The oldest outstanding RDMA Read completes with `reason.status`
    /// (its Read Response was refused) rather than being flushed.
    read: bool,
}

/// The [`DisconnectReason::Error`] a receive fault closes the stream with
/// (a `Copy` form of it): how it shows on the WRs it fails, and whose fault
/// it is.
#[derive(Clone, Copy, Debug)]
struct CloseError {
    status: Status,
    blame: Blame,
}

impl CloseError {
    /// `status` with its blame: the local statuses (`ReceiverNotReady`: no
    /// receive posted for a Send; `LocalLength`: a receive too small;
    /// `LocalProtection`) are this end's, every other one the peer's.
    fn for_status(status: Status) -> Self {
        CloseError {
            status,
            blame: match status {
                Status::ReceiverNotReady | Status::LocalLength | Status::LocalProtection => {
                    Blame::Local
                }
                _ => Blame::Remote,
            },
        }
    }
}

impl From<CloseError> for DisconnectReason {
    fn from(e: CloseError) -> Self {
        DisconnectReason::Error {
            status: e.status,
            blame: e.blame,
        }
    }
}

/// How a Terminate the peer sent shows on the WR it names.
fn status_for_terminate(code: TerminateCode) -> Status {
    match (code.layer, code.etype, code.code) {
        (rdmap::LAYER_DDP, 1, _) | (rdmap::LAYER_RDMAP, 1, _) => Status::RemoteAccess,
        (rdmap::LAYER_DDP, 2, 0x02) => Status::ReceiverNotReady,
        (rdmap::LAYER_DDP, 2, 0x04) | (rdmap::LAYER_DDP, 2, 0x05) => Status::RemoteOperation,
        (rdmap::LAYER_RDMAP, 2, 0x09) => Status::RemoteOperation,
        _ => Status::RemoteInvalidRequest,
    }
}

impl QueuePair {
    /// Sends a Terminate for `code` (copying the offending header from
    /// `ulpdu_prefix`, whose full ULPDU was `ulpdu_len` octets) and closes.
    pub(super) fn terminate(
        &mut self,
        code: TerminateCode,
        ulpdu_prefix: Option<&[u8]>,
        ulpdu_len: usize,
        reason: DisconnectReason,
    ) {
        if matches!(self.state, QpState::Closed(_)) {
            return;
        }
        let mut t = TerminateMessage::for_segment(code, ulpdu_prefix);
        if let Some(d) = t.ddp.as_mut() {
            d.segment_length = u16::try_from(ulpdu_len).unwrap_or(u16::MAX);
        }
        self.go_down(reason);
        if !self.tx_closed {
            //= rfc5040#section-5.4
            //# A Terminate Message references the Terminate Queue.  That is, the
            //# Local Peer's RDMAP layer MUST request that the DDP layer set the
            //# Queue Number field to two.
            let ulpdu = rdmap::encode_terminate(ddp::INITIAL_MSN, &t);
            let mut v = vec![0u8; self.framer.fpdu_wire_len(ulpdu.len())];
            if let Ok(n) = self.framer.write_fpdu(&[&ulpdu], &mut v) {
                v.truncate(n);
                self.out_bytes += v.len();
                self.push_chunk(Chunk::Owned(v));
                self.push_chunk(Chunk::Mark(TxMark::Terminate));
                self.stats.tx_fpdus[7] += 1;
            }
            self.tx_closed = true;
        }
        self.terminate_sent = Some(t);
    }

    /// Sends a Terminate for `code`, an error not caused by one incoming
    /// segment (so it carries no copied header), and closes with `reason`:
    /// e.g. MPA insufficient IRD (LLP / 0 / 0x06) once the MPA exchange is
    /// over. Establish the stream first: the Terminate is an FPDU.
    //= rfc5040#section-7.1
    //# In this case, the Error Type and Error Code fields are included in the
    //# Terminate Message, but the Terminated DDP Header and Terminated
    //# RDMA Header fields are set to zero.
    pub fn terminate_local(&mut self, code: TerminateCode, reason: DisconnectReason) {
        self.terminate(code, None, 0, reason);
    }

    /// Records the first check the FPDU being received failed: nothing
    /// more of it is placed, and once its CRC has been verified
    /// [`QueuePair::fault_terminate`] Terminates it. `recv`: a receive
    /// (relative index) that completes with its own status.
    pub(super) fn rx_fault(
        &mut self,
        code: TerminateCode,
        status: Status,
        recv: Option<(u32, Status)>,
    ) {
        if self.rx.fault.is_none() {
            self.rx.fault = Some(RxFault {
                code,
                reason: CloseError::for_status(status),
                recv,
                read: false,
            });
        }
        self.rx.dst = Dst::Discard;
    }

    /// A Read Response refused: [`QueuePair::rx_fault`], and the Read it
    /// answers completes with `status` (its WR is not just flushed).
    pub(super) fn read_response_fault(&mut self, code: TerminateCode, status: Status) {
        self.rx_fault(code, status, None);
        if let Some(f) = self.rx.fault.as_mut() {
            f.read = true;
        }
    }

    /// An MPA framing error (bad Marker, CRC, ULPDU_Length): Terminates at
    /// once, copying what header has been collected.
    pub(super) fn rx_framing_fault(&mut self, code: TerminateCode) {
        let have = self.rx.have.max(2);
        let prefix: Vec<u8> = self.rx.hbuf.get(2..have).unwrap_or(&[]).to_vec();
        let ul = self.rx.ulpdu_len;
        self.terminate(
            code,
            (!prefix.is_empty()).then_some(&prefix[..]),
            ul,
            DisconnectReason::Error {
                status: Status::ConnectionLost,
                blame: Blame::Transport,
            },
        );
    }

    /// The FPDU whose header prefix is `hbuf[2..have]` (a ULPDU of `ul`
    /// octets) failed check `f` and its CRC is good: the receive or Read
    /// that `f` names completes with its error, then a Terminate copying
    /// that header goes out and the stream closes.
    pub(super) fn fault_terminate(&mut self, f: RxFault, have: usize, ul: usize) {
        // The header prefix (octets 2..have of hbuf).
        let pl = have.saturating_sub(2);
        let mut prefix = [0u8; Segment::MAX_PREFIX];
        prefix[..pl].copy_from_slice(&self.rx.hbuf[2..have.max(2)]);
        if f.read {
            self.fail_oldest_read(f.reason.status);
        }
        if let Some((d, st)) = f.recv {
            if let Some(r) = self.rq.get(d as usize) {
                let (wr_id, idx) = (r.wr_id, r.idx);
                self.rq.remove(d as usize);
                self.complete(
                    Completion {
                        wr_id,
                        opcode: CqOpcode::Recv,
                        byte_len: 0,
                        status: st,
                    },
                    smallvec![Held { idx, write: true }],
                );
            }
        }
        self.terminate(f.code, Some(&prefix[..pl]), ul, f.reason.into());
    }

    /// The peer sent a Terminate: find the WR it names, fail it, flush the
    /// rest, close.
    pub(super) fn on_terminate(&mut self, t: TerminateMessage) {
        self.terminate_received = Some(t);
        let status = status_for_terminate(t.code);
        let mut target: Option<u64> = None;
        if let Some(d) = t.ddp {
            let opcode = rdmap::RdmapControl::from_byte(d.header.rsvd_ulp()).opcode;
            match d.header {
                DdpHeader::Tagged(th) if opcode == Opcode::WRITE => {
                    target = self
                        .sq
                        .iter()
                        .enumerate()
                        .find(|(_, w)| {
                            matches!(w.op, SendOp::Write { remote } if remote.stag.0 == th.stag)
                                && !matches!(w.state, WrState::Done(..) | WrState::Queued)
                        })
                        .map(|(i, _)| self.sq_front_seq + i as u64);
                }
                DdpHeader::Untagged(u) if u.qn == QN_SEND || u.qn == QN_READ_REQUEST => {
                    target = self
                        .sq
                        .iter()
                        .enumerate()
                        .find(|(_, w)| {
                            let is_read = matches!(w.op, SendOp::Read { .. });
                            let is_send = w.op_is_send();
                            ((u.qn == QN_SEND && is_send) || (u.qn == QN_READ_REQUEST && is_read))
                                && w.msn == u.msn
                                && !matches!(w.state, WrState::Done(..) | WrState::Queued)
                        })
                        .map(|(i, _)| self.sq_front_seq + i as u64);
                }
                _ => {}
            }
        }
        if let Some(seq) = target {
            if let Some(w) = self.sq_get_mut(seq) {
                w.state = WrState::Done(status, 0);
            }
        }
        self.tx_closed = true;
        //= rfc5040#section-5.4
        //# A Terminate Message MUST be Delivered to the Remote Peer's RDMAP
        //# layer.  The RDMAP layer MUST Deliver the Terminate Message to the
        //# ULP.
        self.go_down(DisconnectReason::Error {
            status,
            blame: Blame::Remote,
        });
    }
}
