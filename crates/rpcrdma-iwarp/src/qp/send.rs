//! The transmit side of the queue pair: framing Send-queue WRs and Read
//! Responses into FPDUs, the output queue of chunks (inline headers and
//! trailers, staged small FPDUs, slices of registered memory) with its
//! completion marks, and the gather-list writer [`QueuePair::transmit`].
//! See the [module docs](super) for the data path.

use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::Arc;

use smallvec::SmallVec;

use rpcrdma_proto::provider::memory::Hold as Held;
use rpcrdma_proto::provider::{Blame, DisconnectReason, ProviderError, SendOp, Stag, Status};

use crate::ddp::{self, DdpHeader, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::mpa::fpdu::{fpdu_len_without_markers, pad_len};
use crate::rdmap::{self, Opcode, QN_SEND};

use super::file_tx::ReadSink;
use super::{QpState, QueuePair, RespJob, WrState};

/// Output bytes queued before the queue pair stops framing more.
const OUT_BUDGET: usize = 1 << 20;

/// The same with MPA CRC on: framing computes each FPDU's CRC, so frame
/// less far ahead of the socket — the kernel then copies each FPDU's
/// octets soon after its CRC read them, from L2 (512 KiB on Zen 2/3, 1 MiB
/// on Zen 4/5, more on recent Intel cores). Not less: at 128 KiB a 1 MiB
/// message took 8 `writev` instead of 2, and each early partial write woke
/// the peer on a shared CPU (READ 1 MiB, CRC on, per call: server system
/// calls 8.1 → 4.1, context switches 1.6 → 1.3 per side, loopback
/// segments 22.7 → 18.3; BENCHMARKS.md, sixth pass).
const OUT_BUDGET_CRC: usize = 512 << 10;

/// FPDUs with at most this many payload octets are copied into the
/// staging buffer rather than sent from registered memory. The default
/// inline threshold (4 KiB): a message sent inline (an ECHO of 1 KiB, with
/// its RPC-over-RDMA and RPC headers over 1 KiB) takes the lone-Send path,
/// where copying its octets once costs a fraction of gathering it (at
/// 1 KiB, the ECHO server spent ~1,500 instructions per reply in the
/// gather path against ~500 for a staged Send).
const STAGE_PAYLOAD_MAX: usize = 4096;

/// Octets the staging buffer holds at most (beyond that, FPDUs go out from
/// registered memory until it empties).
const STAGE_MAX: usize = 256 << 10;

/// Gather elements handed to one `write` call at most.
const MAX_GATHER: usize = 64;

pub(super) enum TxSrc {
    Sq(u64),
    Resp(RespJob),
}

pub(super) struct TxMsg {
    src: TxSrc,
    total: u32,
    done: u32,
    sge_i: usize,
    sge_off: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum TxMark {
    SqDone(u64),
    RespDone(u32),
    /// The end of a staged Send (no WR behind it).
    StagedDone,
    Terminate,
}

pub(super) enum Chunk {
    Inline {
        buf: [u8; 24],
        len: u8,
    },
    /// Octets `off..off + len` of the staging buffer (small FPDUs, copied
    /// whole; consecutive ones form one chunk, one gather element).
    Staged {
        off: usize,
        len: usize,
    },
    Mem {
        idx: u32,
        off: usize,
        len: usize,
    },
    Owned(Vec<u8>),
    /// `len` octets of a file from `offset` (an RDMA Write from a file
    /// registration, see `file_tx`).
    File {
        file: Arc<File>,
        offset: u64,
        len: usize,
    },
    Mark(TxMark),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Inline { len, .. } => usize::from(*len),
            Chunk::Staged { len, .. } | Chunk::Mem { len, .. } | Chunk::File { len, .. } => *len,
            Chunk::Owned(v) => v.len(),
            Chunk::Mark(_) => 0,
        }
    }
}

/// What [`QueuePair::send_staged_now`] did with a staged Send.
#[derive(Debug)]
pub enum StagedSend {
    /// Not taken, nothing queued (send it registered).
    NotTaken,
    /// Queued behind earlier output, not written (the next pass sends it).
    Queued,
    /// Handed to the writer: what [`QueuePair::transmit_lone`] returns
    /// (octets written, 0 when the socket is full; a short write leaves
    /// the rest queued).
    Written(io::Result<usize>),
}

/// A Send work request's RDMAP opcode and the STag it invalidates (0:
/// none); `None` for any other work request.
fn send_opcode(op: &SendOp) -> Option<(Opcode, u32)> {
    Some(match *op {
        SendOp::Send { solicited: false } => (Opcode::SEND, 0),
        SendOp::Send { solicited: true } => (Opcode::SEND_SE, 0),
        SendOp::SendWithInvalidate {
            solicited: false,
            invalidate,
        } => (Opcode::SEND_INVALIDATE, invalidate.0),
        SendOp::SendWithInvalidate {
            solicited: true,
            invalidate,
        } => (Opcode::SEND_SE_INVALIDATE, invalidate.0),
        _ => return None,
    })
}

fn inline(data: &[u8]) -> Chunk {
    let mut buf = [0u8; 24];
    let n = data.len().min(24);
    buf[..n].copy_from_slice(&data[..n]);
    Chunk::Inline { buf, len: n as u8 }
}

impl QueuePair {
    /// Copies the payload of queued output out of registered memory, so
    /// that holds can be released while the bytes still go out.
    fn materialize_output(&mut self) {
        for c in self.out.iter_mut() {
            if let Chunk::Mem { idx, off, len } = *c {
                *c = Chunk::Owned(self.mem.slice(idx, off, len).to_vec());
            }
        }
        // Read Response jobs in the output release their holds now.
        let mut releases = Vec::new();
        self.tail_marks = None;
        self.out.retain(|c| match c {
            Chunk::Mark(TxMark::RespDone(idx)) => {
                releases.push(*idx);
                false
            }
            _ => true,
        });
        for idx in releases {
            self.mem.release(&[Held { idx, write: false }]);
        }
    }

    /// Releases the holds of output not yet sent (the stream is going
    /// down): queued payload is copied out of registered memory, and the
    /// Read Response in progress and those queued are dropped.
    pub(super) fn release_output_holds(&mut self) {
        self.materialize_output();
        if let Some(TxMsg {
            src: TxSrc::Resp(j),
            ..
        }) = self.cur.take()
        {
            self.mem.release(&[Held {
                idx: j.idx,
                write: false,
            }]);
        }
        for j in std::mem::take(&mut self.resp_q) {
            self.mem.release(&[Held {
                idx: j.idx,
                write: false,
            }]);
        }
    }

    /// Drops all queued output (nothing more goes out), releasing the
    /// holds it had.
    pub(super) fn discard_output(&mut self) {
        self.materialize_output();
        self.out.clear();
        self.stage.clear();
        self.staged = 0;
        self.staged_unsent = 0;
        self.tail_marks = Some(0);
        self.out_bytes = 0;
    }

    /// True if there are octets to send (or WRs that could be framed).
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
            || (matches!(self.state, QpState::Established)
                && (self.cur.is_some()
                    || !self.resp_q.is_empty()
                    || self.sq_next_tx < self.sq_front_seq + self.sq.len() as u64))
    }

    /// Posts a staged Send (see
    /// [`rpcrdma_proto::provider::Provider::post_send_staged`]): `op`, a
    /// Send of any of the four kinds, of `len` octets that `fill` writes
    /// straight into the staging buffer, framed there as one FPDU with the
    /// next Send MSN, exactly as [`QueuePair::small_send`] frames a
    /// registered Send of that payload, and queued with no WR, no hold and
    /// no completion. Taken only when that keeps the order of the wire:
    /// no Send-queue WR waits to be framed before it, no Read Response is
    /// queued or in progress (the general path frames those first) — and
    /// when it fits one staged FPDU (no Markers, payload ≤ 4 KiB and the
    /// MULPDU) and the staging buffer and the output budget have room.
    /// `Ok(false)`: not taken, nothing queued (send it registered).
    pub fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        let Some((start, n)) = self.frame_staged(op, len, fill)? else {
            return Ok(false);
        };
        self.queue_staged(start, n);
        Ok(true)
    }

    /// [`QueuePair::post_send_staged`] followed by
    /// [`QueuePair::transmit_lone`], in one step when no output is queued
    /// (the usual state of a ping-pong): the Send is framed in the staging
    /// buffer and handed to `write` at once, without entering the output
    /// queue unless the write is short or fails (then it is queued, its
    /// written part taken off, exactly as the two calls leave it). The
    /// wire octets, MSNs, counters and output state are those of the two
    /// calls (the `qp_staged_now` proptest pins them together).
    pub fn send_staged_now<W>(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
        mut write: W,
    ) -> Result<StagedSend, ProviderError>
    where
        W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    {
        if !self.out.is_empty() || self.front_off != 0 {
            if !self.post_send_staged(op, len, fill)? {
                return Ok(StagedSend::NotTaken);
            }
            return Ok(match self.transmit_lone(write) {
                Some(r) => StagedSend::Written(r),
                None => StagedSend::Queued,
            });
        }
        let Some((start, n)) = self.frame_staged(op, len, fill)? else {
            return Ok(StagedSend::NotTaken);
        };
        let fpdu = self.stage.get(start..start + n).unwrap_or_default();
        let r = write(&[IoSlice::new(fpdu)]);
        if matches!(r, Ok(k) if k == n) {
            // What `transmit_lone_staged` leaves after a whole write.
            self.stage.clear();
            self.staged = 0;
            self.tail_marks = Some(0);
            self.staged_unconfirmed = true;
            return Ok(StagedSend::Written(Ok(n)));
        }
        self.queue_staged(start, n);
        Ok(StagedSend::Written(match r {
            Ok(0) => Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => {
                self.advance(k);
                Ok(k)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }))
    }

    /// Queues the staged FPDU `start..start + n` that `frame_staged`
    /// framed, with its completion mark.
    fn queue_staged(&mut self, start: usize, n: usize) {
        self.out_bytes += n;
        self.push_staged(start, n);
        self.push_chunk(Chunk::Mark(TxMark::StagedDone));
        self.staged_unsent += 1;
    }

    /// The checks and framing of [`QueuePair::post_send_staged`]: the
    /// Send framed at the end of the staging buffer with the next Send MSN
    /// (counted), not queued. `None`: not taken, nothing framed.
    fn frame_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<Option<(usize, usize)>, ProviderError> {
        if !matches!(self.state, QpState::Established) {
            return Err(ProviderError::NotConnected);
        }
        let Some((opcode, inval)) = send_opcode(&op) else {
            return Err(ProviderError::InvalidArgument("a staged WR must be a Send"));
        };
        if len as u64 > u64::from(self.caps.max_msg_size) {
            return Err(ProviderError::TooLong);
        }
        let mulpdu = usize::from(self.params.mulpdu.max(64));
        let ulpdu_len = UNTAGGED_HEADER_LEN + len;
        let fpdu_len = fpdu_len_without_markers(ulpdu_len);
        let budget = if self.params.crc {
            OUT_BUDGET_CRC
        } else {
            OUT_BUDGET
        };
        if self.framer.config().markers
            || self.tx_closed
            || len > STAGE_PAYLOAD_MAX
            || ulpdu_len > mulpdu
            || self.cur.is_some()
            || !self.resp_q.is_empty()
            || self.sq_next_tx < self.sq_front_seq + self.sq.len() as u64
            || self.stage.len() + fpdu_len > STAGE_MAX
            || self.out_bytes >= budget
        {
            return Ok(None);
        }
        let msn = self.send_msn;
        let hdr = ddp::UntaggedHeader::new_bytes(
            rdmap::RdmapControl::new(opcode).to_byte(),
            inval,
            QN_SEND,
            msn,
            0,
            true,
        );
        let start = self.stage.len();
        self.stage.reserve(fpdu_len);
        let mut head = [0u8; 2 + UNTAGGED_HEADER_LEN];
        head[2..].copy_from_slice(&hdr);
        self.stage.extend_from_slice(&head);
        let payload = self.stage.len();
        self.stage.resize(payload + len, 0);
        if let Some(d) = self.stage.get_mut(payload..) {
            fill(d);
        }
        let Ok(n) = self.framer.frame_in_place(&mut self.stage, start) else {
            self.stage.truncate(start);
            return Ok(None);
        };
        self.send_msn = msn.wrapping_add(1);
        if let Some(c) = self.stats.tx_fpdus.get_mut(usize::from(opcode.0)) {
            *c += 1;
        }
        Ok(Some((start, n)))
    }

    /// Frames one FPDU: `ddp_hdr` then the payload pieces (region index,
    /// offset, length), then `mark`.
    fn emit(&mut self, hdr: &DdpHeader, pieces: &[(u32, usize, usize)], opcode: Opcode) {
        let mut hb = [0u8; 18];
        let hl = hdr.encoded_len();
        let _ = hdr.write(&mut hb);
        let payload: usize = pieces.iter().map(|p| p.2).sum();
        if self.framer.config().markers {
            let mut ulpdu = Vec::with_capacity(hl + payload);
            ulpdu.extend_from_slice(&hb[..hl]);
            for &(idx, off, len) in pieces {
                ulpdu.extend_from_slice(self.mem.slice(idx, off, len));
            }
            let mut v = vec![0u8; self.framer.fpdu_wire_len(ulpdu.len())];
            if let Ok(n) = self.framer.write_fpdu(&[&ulpdu], &mut v) {
                v.truncate(n);
                self.out_bytes += n;
                self.push_chunk(Chunk::Owned(v));
            }
        } else {
            let total = 2 + hl + payload + pad_len(hl + payload) + 4;
            if payload <= STAGE_PAYLOAD_MAX
                && self.stage.len() + total <= STAGE_MAX
                && !self.files.any(pieces)
            {
                // Small: copied whole (the SGEs' bytes cannot change while
                // the WR holds them) and framed in place, and merged with
                // the staged FPDUs before it into one gather element.
                let start = self.stage.len();
                self.stage.extend_from_slice(&[0, 0]);
                self.stage.extend_from_slice(&hb[..hl]);
                for &(idx, off, len) in pieces {
                    self.stage.extend_from_slice(self.mem.slice(idx, off, len));
                }
                match self.framer.frame_in_place(&mut self.stage, start) {
                    Ok(n) => {
                        self.out_bytes += n;
                        self.push_staged(start, n);
                        if let Some(c) = self.stats.tx_fpdus.get_mut(usize::from(opcode.0)) {
                            *c += 1;
                        }
                    }
                    Err(_) => self.stage.truncate(start),
                }
                return;
            }
            let framed = {
                let mut parts: SmallVec<[&[u8]; 4]> = SmallVec::new();
                parts.push(&hb[..hl]);
                for &(idx, off, len) in pieces {
                    parts.push(self.mem.slice(idx, off, len));
                }
                self.framer.frame_parts(&parts)
            };
            let Ok(fp) = framed else {
                return;
            };
            self.out_bytes += total;
            let mut head = [0u8; 20];
            head[..2].copy_from_slice(&fp.header);
            head[2..2 + hl].copy_from_slice(&hb[..hl]);
            self.push_chunk(inline(&head[..2 + hl]));
            for &(idx, off, len) in pieces {
                if len > 0 {
                    let c = self.data_chunk(idx, off, len);
                    self.push_chunk(c);
                }
            }
            self.push_chunk(inline(&fp.trailer[..fp.trailer_len]));
        }
        if let Some(c) = self.stats.tx_fpdus.get_mut(usize::from(opcode.0)) {
            *c += 1;
        }
    }

    /// Queues staged octets `start..start + len`: they extend the last
    /// data chunk if that is the staged run they follow (Marks after it
    /// then fire once the longer chunk is out, which is later, never
    /// earlier, than their own position), else form a new chunk.
    fn push_staged(&mut self, start: usize, len: usize) {
        let n = self.out.len();
        let last = self.tail_marks.and_then(|t| n.checked_sub(t + 1));
        if let Some(Chunk::Staged { off, len: l }) = last.and_then(|i| self.out.get_mut(i)) {
            if *off + *l == start {
                *l += len;
                return;
            }
        }
        self.push_chunk(Chunk::Staged { off: start, len });
        self.staged += 1;
    }

    /// Appends to `out`, keeping `tail_marks`.
    pub(super) fn push_chunk(&mut self, c: Chunk) {
        self.tail_marks = match c {
            Chunk::Mark(_) => self.tail_marks.map(|t| t + 1),
            _ => Some(0),
        };
        self.out.push_back(c);
    }

    /// Starts the next message: a queued Read Response first, then the next
    /// Send-queue WR. Returns false if nothing can start.
    fn start_next(&mut self) -> bool {
        if let Some(job) = self.resp_q.pop_front() {
            self.cur = Some(TxMsg {
                src: TxSrc::Resp(job),
                total: job.len,
                done: 0,
                sge_i: 0,
                sge_off: 0,
            });
            return true;
        }
        let seq = self.sq_next_tx;
        if self.small_send(seq) {
            return true;
        }
        let Some(w) = self.sq_get(seq) else {
            return false;
        };
        match w.op {
            SendOp::LocalInvalidate { stag } => {
                let status = if self.mem.invalidate(stag) {
                    Status::Success
                } else {
                    Status::LocalProtection
                };
                if let Some(w) = self.sq_get_mut(seq) {
                    w.state = WrState::Done(status, 0);
                }
                self.sq_next_tx += 1;
                self.retire();
                if !status.is_ok() {
                    self.go_down(DisconnectReason::Error {
                        status,
                        blame: Blame::Local,
                    });
                    return false;
                }
                true
            }
            SendOp::Read { remote } => {
                let sge = w.sges.first().copied();
                self.start_read(seq, remote, sge)
            }
            _ => {
                let total = w.len;
                if w.op_is_send() {
                    let msn = self.send_msn;
                    self.send_msn = self.send_msn.wrapping_add(1);
                    if let Some(w) = self.sq_get_mut(seq) {
                        w.msn = msn;
                    }
                }
                if let Some(w) = self.sq_get_mut(seq) {
                    w.state = WrState::Sending;
                }
                self.sq_next_tx += 1;
                self.cur = Some(TxMsg {
                    src: TxSrc::Sq(seq),
                    total,
                    done: 0,
                    sge_i: 0,
                    sge_off: 0,
                });
                true
            }
        }
    }

    /// Fast path of [`QueuePair::start_next`] + [`QueuePair::emit_segment`]
    /// for a Send (any of the four) whose payload fits one staged FPDU,
    /// without Markers: frames it straight into the staging buffer and
    /// queues its completion mark — the same octets, chunks, MSN and WR
    /// state as the general path. Returns false (nothing done) otherwise.
    fn small_send(&mut self, seq: u64) -> bool {
        let Some((start, n)) = self.frame_small(seq) else {
            return false;
        };
        self.out_bytes += n;
        self.push_staged(start, n);
        self.push_chunk(Chunk::Mark(TxMark::SqDone(seq)));
        true
    }

    /// The framing half of [`QueuePair::small_send`]: frames WR `seq` at
    /// the end of the staging buffer and makes it `Sending` (MSN, counters),
    /// but queues no chunk. Returns the FPDU's place in the staging buffer,
    /// or `None` (nothing done) if the WR does not qualify.
    fn frame_small(&mut self, seq: u64) -> Option<(usize, usize)> {
        if self.framer.config().markers {
            return None;
        }
        let i = usize::try_from(seq.checked_sub(self.sq_front_seq)?).ok()?;
        let w = self.sq.get_mut(i)?;
        let (opcode, inval) = send_opcode(&w.op)?;
        let len = w.len as usize;
        let mulpdu = usize::from(self.params.mulpdu.max(64));
        let ulpdu_len = UNTAGGED_HEADER_LEN + len;
        if len > STAGE_PAYLOAD_MAX
            || ulpdu_len > mulpdu
            || self.stage.len() + fpdu_len_without_markers(ulpdu_len) > STAGE_MAX
        {
            return None;
        }
        let msn = self.send_msn;
        let hdr = ddp::UntaggedHeader::new_bytes(
            rdmap::RdmapControl::new(opcode).to_byte(),
            inval,
            QN_SEND,
            msn,
            0,
            true,
        );
        let start = self.stage.len();
        // One reservation for the whole FPDU; ULPDU_Length (written by
        // `frame_in_place`) and the header go in as one fixed-size copy.
        self.stage.reserve(fpdu_len_without_markers(ulpdu_len));
        let mut head = [0u8; 2 + UNTAGGED_HEADER_LEN];
        head[2..].copy_from_slice(&hdr);
        self.stage.extend_from_slice(&head);
        for s in &w.sges {
            let off = s.offset as usize;
            let n = s.length as usize;
            self.stage
                .extend_from_slice(self.mem.slice(Stag(s.lkey).index(), off, n));
        }
        let Ok(n) = self.framer.frame_in_place(&mut self.stage, start) else {
            self.stage.truncate(start);
            return None;
        };
        w.msn = msn;
        w.state = WrState::Sending;
        self.send_msn = msn.wrapping_add(1);
        self.sq_next_tx += 1;
        if let Some(c) = self.stats.tx_fpdus.get_mut(usize::from(opcode.0)) {
            *c += 1;
        }
        Some((start, n))
    }

    /// Frames the next FPDU of the current message.
    fn emit_segment(&mut self) {
        let Some(mut m) = self.cur.take() else { return };
        let mulpdu = usize::from(self.params.mulpdu.max(64));
        // (region index, offset, octets): one per SGE the FPDU spans.
        let mut pieces: SmallVec<[(u32, usize, usize); 3]> = SmallVec::new();
        let (hdr, opcode, finished_mark) = match m.src {
            TxSrc::Resp(job) => {
                let max = mulpdu - TAGGED_HEADER_LEN;
                let len = ((m.total - m.done) as usize).min(max);
                let last = m.done as usize + len == m.total as usize;
                if len > 0 {
                    pieces.push((job.idx, (job.off + u64::from(m.done)) as usize, len));
                }
                let hdr = rdmap::read_response_header(
                    job.sink_stag,
                    job.sink_to.wrapping_add(u64::from(m.done)),
                    last,
                );
                m.done += len as u32;
                (
                    hdr,
                    Opcode::READ_RESPONSE,
                    last.then_some(TxMark::RespDone(job.idx)),
                )
            }
            TxSrc::Sq(seq) => {
                let Some(w) = self.sq_get(seq) else { return };
                let (hl, opcode) = match w.op {
                    SendOp::Write { .. } => (TAGGED_HEADER_LEN, Opcode::WRITE),
                    SendOp::SendWithInvalidate { solicited, .. } => (
                        UNTAGGED_HEADER_LEN,
                        if solicited {
                            Opcode::SEND_SE_INVALIDATE
                        } else {
                            Opcode::SEND_INVALIDATE
                        },
                    ),
                    SendOp::Send { solicited } => (
                        UNTAGGED_HEADER_LEN,
                        if solicited {
                            Opcode::SEND_SE
                        } else {
                            Opcode::SEND
                        },
                    ),
                    _ => return,
                };
                let max = mulpdu - hl;
                let mut want = ((m.total - m.done) as usize).min(max);
                let seg_len = want;
                while want > 0 {
                    let Some(s) = w.sges.get(m.sge_i) else { break };
                    let avail = (u64::from(s.length) - m.sge_off) as usize;
                    if avail == 0 {
                        m.sge_i += 1;
                        m.sge_off = 0;
                        continue;
                    }
                    let c = avail.min(want);
                    pieces.push((Stag(s.lkey).index(), (s.offset + m.sge_off) as usize, c));
                    m.sge_off += c as u64;
                    want -= c;
                }
                let last = m.done as usize + seg_len == m.total as usize;
                let hdr = match w.op {
                    SendOp::Write { remote } => rdmap::write_header(
                        remote.stag.0,
                        remote.offset.wrapping_add(u64::from(m.done)),
                        last,
                    ),
                    SendOp::SendWithInvalidate { invalidate, .. } => {
                        match rdmap::send_header(opcode, w.msn, m.done, last, invalidate.0) {
                            Ok(h) => h,
                            Err(_) => return,
                        }
                    }
                    _ => match rdmap::send_header(opcode, w.msn, m.done, last, 0) {
                        Ok(h) => h,
                        Err(_) => return,
                    },
                };
                m.done += seg_len as u32;
                (hdr, opcode, last.then_some(TxMark::SqDone(seq)))
            }
        };
        self.emit(&hdr, &pieces, opcode);
        match finished_mark {
            Some(mark) => self.push_chunk(Chunk::Mark(mark)),
            None => self.cur = Some(m),
        }
    }

    /// Frames queued work into output chunks until the budget is reached.
    #[inline]
    fn fill(&mut self) {
        // Nothing to start or continue (checked inline: `transmit` calls
        // this again after each write).
        if self.cur.is_none()
            && self.resp_q.is_empty()
            && self.sq_next_tx >= self.sq_front_seq + self.sq.len() as u64
        {
            return;
        }
        self.fill_slow();
    }

    fn fill_slow(&mut self) {
        let budget = if self.params.crc {
            OUT_BUDGET_CRC
        } else {
            OUT_BUDGET
        };
        while matches!(self.state, QpState::Established)
            && !self.tx_closed
            && self.out_bytes < budget
        {
            if self.cur.is_none() && !self.start_next() {
                break;
            }
            if self.cur.is_some() {
                self.emit_segment();
            }
        }
    }

    /// Handles the Mark chunks at the front of `out` (their data has all
    /// been handed over).
    #[inline]
    fn process_marks(&mut self) {
        if let Some(Chunk::Mark(_)) = self.out.front() {
            self.process_marks_slow();
        }
    }

    fn process_marks_slow(&mut self) {
        while let Some(Chunk::Mark(m)) = self.out.front() {
            let m = *m;
            self.out.pop_front();
            self.tail_marks = self.tail_marks.map(|t| t.min(self.out.len()));
            match m {
                TxMark::SqDone(seq) => {
                    if let Some(w) = self.sq_get_mut(seq) {
                        if w.state == WrState::Sending {
                            w.state = WrState::Transmitted;
                        }
                    }
                }
                TxMark::RespDone(idx) => {
                    self.mem.release(&[Held { idx, write: false }]);
                    self.inbound_reads = self.inbound_reads.saturating_sub(1);
                }
                TxMark::StagedDone => {
                    self.staged_unsent = self.staged_unsent.saturating_sub(1);
                    self.staged_unconfirmed = true;
                }
                TxMark::Terminate => {}
            }
        }
    }

    fn advance(&mut self, mut n: usize) {
        self.out_bytes = self.out_bytes.saturating_sub(n);
        while n > 0 {
            let Some(front) = self.out.front() else { break };
            let rest = front.len() - self.front_off;
            if n >= rest {
                n -= rest;
                self.front_off = 0;
                let popped = self.out.pop_front();
                self.tail_marks = self.tail_marks.map(|t| t.min(self.out.len()));
                if let Some(Chunk::Staged { .. }) = popped {
                    self.staged = self.staged.saturating_sub(1);
                    if self.staged == 0 {
                        self.stage.clear();
                    }
                }
                self.process_marks();
            } else {
                self.front_off += n;
                n = 0;
            }
        }
        self.process_marks();
    }

    /// Frames whatever can be sent and hands it, as a gather list, to
    /// `write` (e.g. `|s| stream.write_vectored(s)`) until it returns
    /// `WouldBlock` or nothing is left. Returns the octets written; other
    /// errors are returned as they are.
    pub fn transmit<W>(&mut self, mut write: W) -> io::Result<usize>
    where
        W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    {
        let mut total = 0;
        if let Some(r) = self.transmit_lone_small(&mut write) {
            match r {
                Ok(n) if n > 0 && self.out.is_empty() => return Ok(n),
                Ok(n) => total = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let rest = self.transmit_files(&mut ReadSink(&mut write))?;
        Ok(total + rest)
    }

    /// Frames what can be framed and handles the marks at the front.
    pub(super) fn fill_output(&mut self) {
        self.fill();
        self.process_marks();
    }

    /// The output from the front as a gather list, up to the first file
    /// chunk (and whether one follows: `more`).
    pub(super) fn gather(&self) -> (SmallVec<[IoSlice<'_>; MAX_GATHER]>, bool) {
        // (Inline storage left uninitialised: no 1 KiB of stores per
        // call.)
        let mut slices: SmallVec<[IoSlice<'_>; MAX_GATHER]> = SmallVec::new();
        let mut first = true;
        for c in self.out.iter() {
            if slices.len() == MAX_GATHER {
                break;
            }
            let s: &[u8] = match c {
                Chunk::Inline { buf, len } => &buf[..usize::from(*len)],
                Chunk::Mem { idx, off, len } => self.mem.slice(*idx, *off, *len),
                Chunk::Staged { off, len } => self.stage.get(*off..*off + *len).unwrap_or_default(),
                Chunk::Owned(v) => v,
                Chunk::File { .. } => return (slices, true),
                Chunk::Mark(_) => continue,
            };
            let s = if first {
                first = false;
                s.get(self.front_off..).unwrap_or(&[])
            } else {
                s
            };
            if !s.is_empty() {
                slices.push(IoSlice::new(s));
            }
        }
        (slices, false)
    }

    /// `n` octets of output were handed over.
    pub(super) fn consume_output(&mut self, n: usize) {
        self.advance(n);
    }

    /// [`QueuePair::transmit`] when, and only when, its lone-Send fast path
    /// applies (see `transmit_lone_small`): the output is exactly one small
    /// Send, framed and handed to `write` at once. `None`: it does not
    /// apply, nothing was done (the general path sends it later). A short
    /// write leaves the rest queued, as `transmit` would.
    pub fn transmit_lone<W>(&mut self, mut write: W) -> Option<io::Result<usize>>
    where
        W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    {
        Some(match self.transmit_lone_small(&mut write)? {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            r => r,
        })
    }

    /// Fast path of [`QueuePair::transmit`] for the usual state of a
    /// ping-pong: no output queued, no message in progress, no Read
    /// Response waiting, and exactly one Send-queue WR waiting, a small Send
    /// ([`QueuePair::small_send`]). Frames it (the same octets, MSN, state
    /// and counters as the general path) and hands that one FPDU to `write`
    /// at once, without the output queue: written whole, the WR is
    /// `Transmitted` at once, as its completion mark would have made it.
    /// Otherwise (a short write, `WouldBlock`, another error) the FPDU and
    /// its mark are queued exactly as [`QueuePair::fill`] queues them, the
    /// written part is taken off, and the general path carries on. `None`:
    /// not applicable, nothing done.
    fn transmit_lone_small<W>(&mut self, write: &mut W) -> Option<io::Result<usize>>
    where
        W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    {
        if self.out.len() == 2 {
            return self.transmit_lone_staged(write);
        }
        if !self.out.is_empty()
            || self.cur.is_some()
            || !self.resp_q.is_empty()
            || self.tx_closed
            || !matches!(self.state, QpState::Established)
        {
            return None;
        }
        let seq = self.sq_next_tx;
        if seq.checked_add(1)? != self.sq_front_seq + self.sq.len() as u64 {
            return None;
        }
        let (start, n) = self.frame_small(seq)?;
        let fpdu = self.stage.get(start..start + n).unwrap_or_default();
        let r = write(&[IoSlice::new(fpdu)]);
        if let Ok(k) = r {
            if k == n {
                // What `advance` would do: the staged FPDU and then its
                // mark leave the (empty again) output queue.
                if self.staged == 0 {
                    self.stage.clear();
                }
                self.tail_marks = Some(0);
                if let Some(w) = self.sq_get_mut(seq) {
                    w.state = WrState::Transmitted;
                }
                return Some(Ok(n));
            }
        }
        self.out_bytes += n;
        self.push_staged(start, n);
        self.push_chunk(Chunk::Mark(TxMark::SqDone(seq)));
        match r {
            Ok(0) => Some(Err(io::ErrorKind::WriteZero.into())),
            Ok(k) => {
                self.advance(k);
                Some(Ok(k))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// The same for a lone staged Send: the output is exactly one staged
    /// FPDU and its mark, nothing else waits. Written whole, the output
    /// queue is empty again, as `advance` would leave it.
    fn transmit_lone_staged<W>(&mut self, write: &mut W) -> Option<io::Result<usize>>
    where
        W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
    {
        let (Some(Chunk::Staged { off, len }), Some(Chunk::Mark(TxMark::StagedDone))) =
            (self.out.front(), self.out.get(1))
        else {
            return None;
        };
        let (off, len) = (*off, *len);
        if self.front_off != 0
            || self.cur.is_some()
            || !self.resp_q.is_empty()
            || self.tx_closed
            || !matches!(self.state, QpState::Established)
            || self.sq_next_tx != self.sq_front_seq + self.sq.len() as u64
        {
            return None;
        }
        let fpdu = self.stage.get(off..off + len).unwrap_or_default();
        let r = write(&[IoSlice::new(fpdu)]);
        match r {
            Ok(k) if k == len => {
                self.out.clear();
                self.stage.clear();
                self.staged = 0;
                self.tail_marks = Some(0);
                self.out_bytes = self.out_bytes.saturating_sub(len);
                self.staged_unsent = self.staged_unsent.saturating_sub(1);
                self.staged_unconfirmed = true;
                Some(Ok(len))
            }
            Ok(0) => Some(Err(io::ErrorKind::WriteZero.into())),
            Ok(k) => {
                self.advance(k);
                Some(Ok(k))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Copies up to `out.len()` octets of output into `out` (a convenience
    /// over [`QueuePair::transmit`] for tests and simulations).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> usize {
        let mut w = 0;
        let _ = self.transmit(|slices| {
            let mut n = 0;
            for s in slices {
                let room = out.len() - w;
                if room == 0 {
                    break;
                }
                let c = s.len().min(room);
                out[w..w + c].copy_from_slice(&s[..c]);
                w += c;
                n += c;
            }
            if n == 0 {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                Ok(n)
            }
        });
        w
    }
}
