//! RDMA Read bookkeeping: outbound Reads (the Read Request sent, the ORD
//! limit, each Read Response segment checked against the Read it answers
//! before it is placed) and inbound Reads (a Read Request checked against
//! the IRD and the source region, then queued as a Read Response job that
//! the transmit side frames).

use rpcrdma_proto::provider::memory::Hold as Held;
use rpcrdma_proto::provider::{RemoteAddr, Sge, Stag, Status};

use crate::ddp::{self, TaggedCheck, TaggedHeader, UntaggedHeader};
use crate::rdmap::{self, ReadRequest, QN_TERMINATE};
use crate::TerminateCode;

use super::recv::RxAction;
use super::send::Chunk;
use super::{QueuePair, WrState};

/// Length above which the first segment of a Read Response is awaited
/// with a small read (its header and a little payload) so that the rest
/// goes straight to the sink, instead of the read-ahead (one system call
/// fewer, the payload copied from the read-ahead buffer). A system call
/// costs about what copying 16 KiB does here (~0.4 µs). WRITE 64 KiB
/// (Read chunk), task mode, client and server on CPU 0, four interleaved
/// rounds: 6 → 7 system calls per call on the server, CPU per call
/// (client + server) 43.7–46.4 → 42.3–43.6 µs (BENCHMARKS.md, tenth
/// pass).
const HEADER_FIRST_READ_MIN: usize = 16 << 10;

/// An outbound RDMA Read whose Read Request has gone out: WR `seq`, its
/// sink, and the Read Response octets received so far.
pub(super) struct OutRead {
    seq: u64,
    sink_stag: u32,
    sink_to: u64,
    len: u32,
    received: u64,
}

impl OutRead {
    /// Whether a Read Response segment of `payload_len` octets is the next
    /// piece of this Read: the sink STag, the TO where the octets received
    /// so far end (segments arrive in order over TCP), no octet past the
    /// requested length, and L only on a segment that reaches it. A short
    /// response (L too early), a long one, a reordered, gapped or
    /// overlapping one is refused before anything of it is placed.
    //= rfc5040#section-5.2.2
    //# The Data Sink MAY validate that the STag, Tagged Offset, and
    //# length of the RDMA Read Response Message are the same as the STag,
    //# Tagged Offset, and length included in the corresponding RDMA Read
    //# Request Message.
    #[inline]
    fn accepts(&self, stag: u32, to: u64, last: bool, payload_len: u64) -> bool {
        let end = self.received + payload_len;
        let len = u64::from(self.len);
        stag == self.sink_stag
            && self.sink_to.checked_add(self.received) == Some(to)
            && end <= len
            && (!last || end == len)
    }
}

impl OutRead {
    /// For a segment of `seg` payload octets being received for this Read
    /// (its header checked, not yet its CRC): where it ends (a TO in the
    /// sink) and the octets the Read still expects after it. `None` when
    /// it is not the next piece of this Read or nothing follows it.
    pub(super) fn rest_after(&self, seg: u64) -> Option<(u64, u64)> {
        let end = self.sink_to.checked_add(self.received)?.checked_add(seg)?;
        let last = self.sink_to.checked_add(u64::from(self.len))?;
        let rest = last.checked_sub(end)?;
        (rest > 0).then_some((end, rest))
    }
}

/// An inbound Read Request accepted: the Read Response to send, `len`
/// octets of region `idx` from `off`, to the requester's sink.
#[derive(Clone, Copy, Debug)]
pub(super) struct RespJob {
    pub(super) idx: u32,
    pub(super) off: u64,
    pub(super) len: u32,
    pub(super) sink_stag: u32,
    pub(super) sink_to: u64,
}

impl QueuePair {
    /// Sends the Read Request of Send-queue WR `seq` (an RDMA Read of
    /// `remote` into `sge`, its one SGE) and makes the WR wait for the
    /// last Read Response. Returns false (nothing done) at the ORD limit
    /// or without an SGE.
    pub(super) fn start_read(&mut self, seq: u64, remote: RemoteAddr, sge: Option<Sge>) -> bool {
        //= rfc5040#section-6.1
        //# For outbound RDMA Read Requests, the RDMAP layer MUST NOT exceed
        //# the maximum number of outstanding, outbound RDMA Read Requests
        //# that were negotiated between the ULP and the Local Peer's RDMAP
        //# layer.
        if self.ord_q.len() >= usize::from(self.params.ord) {
            return false;
        }
        let Some(sge) = sge else {
            return false;
        };
        let sink = Stag(sge.lkey);
        let rr = ReadRequest {
            sink_stag: sink.0,
            sink_to: sge.offset,
            size: sge.length,
            src_stag: remote.stag.0,
            src_to: remote.offset,
        };
        let msn = self.read_msn;
        self.read_msn = self.read_msn.wrapping_add(1);
        let ulpdu = rdmap::encode_read_request(msn, &rr);
        let mut v = vec![0u8; self.framer.fpdu_wire_len(ulpdu.len())];
        if let Ok(n) = self.framer.write_fpdu(&[&ulpdu], &mut v) {
            v.truncate(n);
            self.out_bytes += n;
            self.push_chunk(Chunk::Owned(v));
            self.stats.tx_fpdus[1] += 1;
        }
        self.ord_q.push_back(OutRead {
            seq,
            sink_stag: sink.0,
            sink_to: sge.offset,
            len: sge.length,
            received: 0,
        });
        if let Some(w) = self.sq_get_mut(seq) {
            w.state = WrState::AwaitRead;
            w.msn = msn;
        }
        self.sq_next_tx += 1;
        true
    }

    /// True while the oldest outstanding RDMA Read, longer than
    /// [`HEADER_FIRST_READ_MIN`], has received nothing yet.
    pub(super) fn awaits_large_read_response(&self) -> bool {
        self.ord_q
            .front()
            .is_some_and(|r| r.received == 0 && r.len as usize > HEADER_FIRST_READ_MIN)
    }

    /// Checks a Read Response segment: it must answer the oldest
    /// outstanding Read and be the next piece of it
    /// ([`OutRead::accepts`]), and its sink must take it. Chooses the sink
    /// as the target.
    pub(super) fn check_read_response(&mut self, t: &TaggedHeader, payload_len: u64) {
        let Some(front) = self.ord_q.front() else {
            // A Read Response with no outstanding Read Request is
            // an unexpected opcode.
            self.rx_fault(
                TerminateCode::RDMAP_UNEXPECTED_OPCODE,
                Status::RemoteInvalidRequest,
                None,
            );
            return;
        };
        if front.len == 0 && payload_len == 0 {
            self.rx.action = RxAction::ReadResponse { last: t.last };
            return;
        }
        if !front.accepts(t.stag, t.to, t.last, payload_len) {
            // RFC 5041 §7.2 has no code for a Read Response
            // that is not the requested one; the part of the
            // sink buffer still expected is the bound it
            // breaks: Base or bounds violation, as Linux siw
            // (`siw_rresp_check_ntoh`).
            self.read_response_fault(
                TerminateCode::DDP_TAGGED_BASE_BOUNDS,
                Status::RemoteOperation,
            );
            return;
        }
        match self.tagged_target(t.stag, t.to, payload_len) {
            Ok(dst) => {
                self.rx.dst = dst;
                self.rx.action = RxAction::ReadResponse { last: t.last };
            }
            Err(code) => self.read_response_fault(code, Status::RemoteAccess),
        }
    }

    /// A verified Read Response segment of `plen` octets was placed; the
    /// last one completes the Read.
    pub(super) fn read_response_placed(&mut self, plen: u64, last: bool) {
        if let Some(f) = self.ord_q.front_mut() {
            f.received += plen;
        }
        if last {
            if let Some(f) = self.ord_q.pop_front() {
                let seq = f.seq;
                if let Some(w) = self.sq_get_mut(seq) {
                    w.state = WrState::Done(Status::Success, f.len);
                }
                self.retire();
            }
        }
    }

    /// Checks a Read Request (QN 1): MSN and IRD, then the source region
    /// (STag, bounds, remote read access). The job it becomes is queued
    /// once the FPDU's CRC has been verified.
    pub(super) fn check_read_request(
        &mut self,
        u: &UntaggedHeader,
        read_request: Option<ReadRequest>,
    ) {
        let Some(rr) = read_request else {
            self.rx_fault(
                TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
                Status::RemoteInvalidRequest,
                None,
            );
            return;
        };
        let room = self.inbound_reads < u32::from(self.params.ird);
        let r = ddp::check_untagged(
            u,
            0,
            |q| q <= QN_TERMINATE,
            self.rd_msn,
            |d| (d == 0 && room).then_some(0),
        );
        if let Err(code) = r {
            //= rfc5040#section-6.1
            //# For inbound RDMA Read Requests, the RDMAP layer MUST NOT exceed
            //# the maximum number of outstanding, inbound RDMA Read Requests that
            //# were negotiated between the ULP and the Local Peer's RDMAP layer.
            // A Read Request beyond the IRD finds no Read Request
            // buffer for its MSN: DDP untagged "no buffer".
            self.rx_fault(code, Status::RemoteInvalidRequest, None);
            return;
        }
        let mut job = RespJob {
            idx: 0,
            off: 0,
            len: rr.size,
            sink_stag: rr.sink_stag,
            sink_to: rr.sink_to,
        };
        if rr.size > 0 {
            let info = self.region_info(rr.src_stag);
            let checked = ddp::check_tagged(
                rr.src_to,
                u64::from(rr.size),
                info.as_ref().map(|(_, i)| i),
                ddp::Access::REMOTE_READ,
                TaggedCheck::RdmapReadSource,
            );
            match (checked, info) {
                (Ok(off), Some((idx, _))) => {
                    job.idx = idx;
                    job.off = off;
                }
                (Err(code), _) => {
                    self.rx_fault(code, Status::RemoteAccess, None);
                    return;
                }
                (Ok(_), None) => return,
            }
        }
        self.rx.action = RxAction::ReadRequest(job);
    }

    /// A verified Read Request: holds its source region and queues the Read
    /// Response.
    pub(super) fn accept_read_request(&mut self, job: RespJob) {
        self.rd_msn = self.rd_msn.wrapping_add(1);
        self.inbound_reads += 1;
        if job.len > 0 {
            self.mem.hold(&[Held {
                idx: job.idx,
                write: false,
            }]);
        }
        self.resp_q.push_back(job);
    }

    /// The oldest outstanding RDMA Read completes with `status` (the rest
    /// of the Send queue is flushed by the close that follows).
    pub(super) fn fail_oldest_read(&mut self, status: Status) {
        if let Some(seq) = self.ord_q.front().map(|r| r.seq) {
            if let Some(w) = self.sq_get_mut(seq) {
                w.state = WrState::Done(status, 0);
            }
        }
    }
}
