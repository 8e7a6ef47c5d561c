//! The sans-IO queue pair: one RDMAP stream (one TCP connection after the
//! MPA exchange), its memory table, its Send and Receive queues and its
//! completion queue.
//!
//! Nothing here touches a socket or a clock. The owner feeds the bytes it
//! read from TCP to [`QueuePair::handle_input`] (or, for the zero-copy path,
//! reads straight into [`QueuePair::direct_target`] and reports the count
//! with [`QueuePair::direct_filled`]), and drains what is to be sent with
//! [`QueuePair::transmit`], which hands a gather list of `IoSlice`s (FPDU
//! headers and trailers, plus slices of *registered memory*) to a writer
//! such as `TcpStream::write_vectored`.
//!
//! # Data paths
//!
//! * **Send side**: Send, Send with Invalidate / Solicited Event, RDMA Write
//!   and RDMA Read Response payloads are never copied: the FPDU header
//!   (ULPDU_Length + DDP/RDMAP header) and trailer (PAD + CRC) are small
//!   inline chunks, the payload is a reference to the registered region
//!   that the work request holds until it completes. Only with MPA Markers
//!   (off by default, refused by Linux) is the FPDU assembled in a buffer.
//!   FPDUs with at most 1 KiB of payload are copied whole into a staging
//!   buffer instead (one gather element for a run of them); a Send that
//!   fits one such FPDU is framed there directly, header, payload, PAD and
//!   CRC in one pass.
//! * **Receive side**: the FPDU header is collected (at most 72 octets),
//!   every placement check runs on it, and the payload then goes to its
//!   target: from the bytes already read, or — with
//!   [`QueuePair::direct_target`] / [`QueuePair::read_direct`] — by reading
//!   the socket straight into the target region (one copy; `read_direct`
//!   also takes the PAD, CRC and next header in the same read, and inside
//!   a Read Response the segments that follow, each straight into the
//!   unreceived part of the Read's sink before its header is checked, then
//!   checked in order: `direct`). Completions and Read Responses happen only
//!   after the FPDU's CRC has been verified. An FPDU that lies whole in one
//!   input slice (without Markers) takes the same steps in one pass, with
//!   one CRC computation over its contiguous octets.
//!
//! The per-message cost of the small-Send path is measured by the
//! `qp_small` bench (`benches/qp_small.rs`).
//!
//! # Completion of Send-queue work requests
//!
//! iWARP has no acknowledgement: like Linux `siw`, a Send or RDMA Write is
//! complete when its last octet has been handed to TCP. This queue pair
//! reports it one step later: a transmitted Send/Write becomes `Success` at
//! the next [`QueuePair::confirm_transmitted`] (the TCP adapter calls it at
//! the start of each progress pass, *after* reading what the peer sent), so
//! a Terminate that the peer sent in answer to it is seen first and the WR
//! completes with the error the Terminate names (e.g. `RemoteAccess` for a
//! Write to a bad STag). An RDMA Read completes when the last Read Response
//! segment has been placed and its CRC checked; a Read Response that is not
//! the one requested (short, long, out of order) is Terminated and the Read
//! completes with `RemoteOperation`.
//!
//! # Errors
//!
//! Every check of RFC 5041 / RFC 5040 that fails sends a Terminate naming
//! the layer / error type / code and carrying a copy of the offending DDP
//! (and Read Request) header, flushes every outstanding WR and closes the
//! stream; memory is never touched by a segment that failed a check
//! (RFC 5042). A received Terminate ends the stream with blame `Remote`.
//!
//! # Modules
//!
//! This module holds the state, the memory table, the Send and Receive
//! queues, completions and closing. `send` is the transmit side (framing,
//! the staging buffer, the output queue and its completion marks,
//! [`QueuePair::transmit`]); `recv` the receive side (the FPDU state
//! machine, the whole-FPDU fast path, placement checks, completion of
//! receives); `direct` the zero-copy receive path of a TCP owner
//! ([`QueuePair::read_direct`]); `read` RDMA Read bookkeeping in both directions (ORD and IRD,
//! Read Response validation, Read Response jobs); `terminate` receive
//! faults and the Terminates sent and received.

use std::collections::VecDeque;

use smallvec::smallvec;

use rpcrdma_proto::provider::memory::{Hold as Held, Holds, MemoryTable, SendRules};
use rpcrdma_proto::provider::{
    Access, Buffer, Bytes, Caps, Completion, DisconnectReason, MemoryRegion, Opcode as CqOpcode,
    ProviderError, RecvWr, RegisterError, SendOp, SendWr, Sge, Sges, Status,
};

use crate::ddp::{self, RegionInfo};
use crate::mpa::fpdu::{FpduSender, FramingConfig, MULPDU_MAX};
use crate::rdmap::TerminateMessage;

mod direct;
mod file_tx;
mod read;
mod recv;
mod send;
mod terminate;

pub use file_tx::TxSink;
use read::{OutRead, RespJob};
use recv::{Rx, RxState};
pub use recv::{DIRECT_TAIL_MAX, READ_AHEAD};
pub use send::StagedSend;
use send::{Chunk, TxMsg};

/// What the MPA exchange agreed, for the FPDU phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamParams {
    /// CRC generated and checked.
    pub crc: bool,
    /// Insert Markers in what we send.
    pub send_markers: bool,
    /// Expect Markers in what we receive.
    pub recv_markers: bool,
    /// Inbound RDMA Read Requests accepted at once (our IRD).
    pub ird: u8,
    /// Outbound RDMA Read Requests outstanding at once (our ORD).
    pub ord: u8,
    /// Largest ULPDU we send (MULPDU): DDP header plus payload.
    pub mulpdu: u16,
    /// Largest ULPDU_Length accepted (a larger one is a framing error).
    pub max_rx_ulpdu: u16,
}

impl StreamParams {
    /// No CRC, no Markers, IRD = ORD = 16, MULPDU 64768.
    pub const DEFAULT: StreamParams = StreamParams {
        crc: false,
        send_markers: false,
        recv_markers: false,
        ird: 16,
        ord: 16,
        mulpdu: DEFAULT_MULPDU,
        max_rx_ulpdu: u16::MAX,
    };
}

/// Default MULPDU: the top of the range RFC 5044 allows
/// ([`MULPDU_MAX`], 64,768 octets; an FPDU of 64,776). Until 2026-11-29 it
/// was 65,512, above that range. Over TCP the provider lowers it to what
/// the connection's EMSS allows ([`crate::mpa::fpdu::mulpdu_for_emss`]).
pub const DEFAULT_MULPDU: u16 = MULPDU_MAX;

/// Connection-level events of the queue pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// The stream ended; every outstanding WR has been flushed.
    Disconnected(DisconnectReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WrState {
    Queued,
    /// Framed (all of it queued for output), not yet all handed to TCP.
    Sending,
    /// Handed to TCP; becomes Success at the next confirmation.
    Transmitted,
    /// Read Request sent; waiting for the last Read Response.
    AwaitRead,
    Done(Status, u32),
}

struct SqWr {
    wr_id: u64,
    opcode: CqOpcode,
    op: SendOp,
    sges: Sges,
    holds: Holds,
    len: u32,
    state: WrState,
    /// MSN of a Send (QN 0) or Read Request (QN 1).
    msn: u32,
}

struct PostedRecv {
    wr_id: u64,
    sge: Sge,
    idx: u32,
    /// MO + length of the last segment placed: where the next segment of
    /// the message must start (segments are placed in order).
    placed_end: u64,
    /// The last segment arrived: opcode and length of the message.
    done: Option<(CqOpcode, u32, bool)>,
}

impl PostedRecv {
    /// Where the next segment of this receive's message must start; `None`
    /// once its last segment has arrived (nothing may follow it).
    #[inline]
    fn next_mo(&self) -> Option<u64> {
        match self.done {
            None => Some(self.placed_end),
            Some(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum QpState {
    Idle,
    Established,
    Closed(DisconnectReason),
}

/// Counters of what went over the wire (for tests and statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpStats {
    /// FPDUs framed for sending, per RDMAP opcode (index = opcode).
    pub tx_fpdus: [u64; 8],
    /// FPDUs received and verified, per RDMAP opcode.
    pub rx_fpdus: [u64; 8],
    /// Payload octets placed straight from the socket into memory.
    pub rx_direct_bytes: u64,
    /// Payload octets copied from the read-ahead buffer into memory.
    pub rx_copied_bytes: u64,
}

/// One RDMAP stream. See the [module docs](self).
pub struct QueuePair {
    caps: Caps,
    mem: MemoryTable,
    state: QpState,
    params: StreamParams,
    framer: FpduSender,
    // Receive queue.
    rq: VecDeque<PostedRecv>,
    rq_msn: u32,
    recv_outstanding: u32,
    // Send queue.
    sq: VecDeque<SqWr>,
    sq_front_seq: u64,
    sq_next_tx: u64,
    send_outstanding: u32,
    send_msn: u32,
    read_msn: u32,
    ord_q: VecDeque<OutRead>,
    // Inbound reads.
    rd_msn: u32,
    inbound_reads: u32,
    resp_q: VecDeque<RespJob>,
    // Output.
    cur: Option<TxMsg>,
    out: VecDeque<Chunk>,
    /// Backing of the `Chunk::Staged` chunks in `out`; emptied whenever
    /// none is left.
    stage: Vec<u8>,
    /// `Chunk::Staged` chunks in `out`.
    staged: usize,
    /// Staged Sends ([`QueuePair::post_send_staged`]) whose octets are not
    /// all handed to TCP yet.
    staged_unsent: usize,
    /// A staged Send was handed to TCP since the last
    /// [`QueuePair::confirm_transmitted`].
    staged_unconfirmed: bool,
    /// Mark chunks at the back of `out`, after its last data chunk (`None`:
    /// not known, nothing is merged until the next data chunk).
    tail_marks: Option<usize>,
    out_bytes: usize,
    front_off: usize,
    tx_closed: bool,
    terminate_sent: Option<TerminateMessage>,
    terminate_received: Option<TerminateMessage>,
    // Input.
    rx: Rx,
    // Completions and events.
    cq: VecDeque<(Completion, Holds)>,
    events: VecDeque<QpEvent>,
    solicited: bool,
    stats: QpStats,
    /// File registrations (RDMA Writes sent from a file).
    files: file_tx::Files,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("state", &self.state)
            .field("rq", &self.rq.len())
            .field("sq", &self.sq.len())
            .field("cq", &self.cq.len())
            .field("out_bytes", &self.out_bytes)
            .finish()
    }
}

fn to_ddp_access(a: Access) -> ddp::Access {
    let mut r = ddp::Access::NONE;
    if a.contains(Access::REMOTE_READ) {
        r = r.union(ddp::Access::REMOTE_READ);
    }
    if a.contains(Access::REMOTE_WRITE) {
        r = r.union(ddp::Access::REMOTE_WRITE);
    }
    r
}

impl QueuePair {
    /// A queue pair with the given limits, not yet established (receives
    /// may be posted). `key_base` is the first STag key byte; giving the two
    /// ends of a test different bases makes a local/remote key mix-up fail.
    pub fn new(caps: Caps, key_base: u8) -> Self {
        QueuePair {
            caps,
            // Index 0 is never used: no STag with index 0 is valid.
            mem: MemoryTable::without_index_zero(key_base),
            state: QpState::Idle,
            params: StreamParams::DEFAULT,
            framer: FpduSender::new(FramingConfig::default()),
            rq: VecDeque::new(),
            rq_msn: ddp::INITIAL_MSN,
            recv_outstanding: 0,
            sq: VecDeque::new(),
            sq_front_seq: 0,
            sq_next_tx: 0,
            send_outstanding: 0,
            send_msn: ddp::INITIAL_MSN,
            read_msn: ddp::INITIAL_MSN,
            ord_q: VecDeque::new(),
            rd_msn: ddp::INITIAL_MSN,
            inbound_reads: 0,
            resp_q: VecDeque::new(),
            cur: None,
            out: VecDeque::new(),
            stage: Vec::new(),
            staged: 0,
            staged_unsent: 0,
            staged_unconfirmed: false,
            tail_marks: Some(0),
            out_bytes: 0,
            front_off: 0,
            tx_closed: false,
            terminate_sent: None,
            terminate_received: None,
            rx: Rx::new(),
            cq: VecDeque::new(),
            events: VecDeque::new(),
            solicited: false,
            stats: QpStats::default(),
            files: file_tx::Files::default(),
        }
    }

    /// Device and queue limits.
    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Enters the FPDU phase with what MPA negotiated.
    pub fn establish(&mut self, params: StreamParams) {
        if !matches!(self.state, QpState::Idle) {
            return;
        }
        // No ULPDU above the RFC 5044 range, whatever the caller asked
        // (the framer refuses one: a message would stall).
        self.params = StreamParams {
            mulpdu: params.mulpdu.min(MULPDU_MAX),
            ..params
        };
        self.framer = FpduSender::new(FramingConfig {
            crc: params.crc,
            markers: params.send_markers,
        });
        self.state = QpState::Established;
    }

    /// The negotiated stream parameters.
    pub fn params(&self) -> StreamParams {
        self.params
    }

    /// True once the stream is up and not yet closed.
    pub fn is_established(&self) -> bool {
        matches!(self.state, QpState::Established)
    }

    /// Why the stream closed, once it has.
    pub fn close_reason(&self) -> Option<&DisconnectReason> {
        match &self.state {
            QpState::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// The Terminate this end sent, if any.
    pub fn terminate_sent(&self) -> Option<&TerminateMessage> {
        self.terminate_sent.as_ref()
    }

    /// The Terminate the peer sent, if any.
    pub fn terminate_received(&self) -> Option<&TerminateMessage> {
        self.terminate_received.as_ref()
    }

    /// Wire counters.
    pub fn stats(&self) -> QpStats {
        self.stats
    }

    // ------------------------------------------------------------------
    // Memory table
    // ------------------------------------------------------------------

    fn region_info(&self, stag: u32) -> Option<(u32, RegionInfo)> {
        let (idx, r) = self.mem.lookup(stag)?;
        Some((
            idx,
            RegionInfo {
                valid: r.remote_valid(),
                owned_by_stream: true,
                base_to: 0,
                len: r.buf().len() as u64,
                access: to_ddp_access(r.access()),
            },
        ))
    }

    /// Live registrations (regions registered and not deregistered).
    pub fn registered_regions(&self) -> u32 {
        self.mem.registered()
    }

    /// Registers `buf` (see [`rpcrdma_proto::provider::Provider::register`]).
    /// The STag is a 24-bit index plus an 8-bit key that changes on every
    /// registration of the index.
    pub fn register(
        &mut self,
        buf: Box<[u8]>,
        access: Access,
    ) -> Result<MemoryRegion, RegisterError> {
        self.mem.register(buf, access, &self.caps)
    }

    /// Registers a receive buffer lent by the queue pair (see
    /// [`rpcrdma_proto::provider::Provider::register_recv`]): no memory
    /// is behind it until a Send arrives for a receive posted into it
    /// (then a buffer comes from `rpcrdma_proto::provider::recv_pool`),
    /// and the buffer goes back when the region is posted again.
    pub fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.mem.register_lent(len, &self.caps)
    }

    /// Registers shared read-only bytes without a copy (see
    /// [`rpcrdma_proto::provider::Provider::register_shared`]): only
    /// `NONE` or `REMOTE_READ` access; RDMA Writes and Sends gather from
    /// them as from any region, no placement ever reaches them.
    pub fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.mem.register_shared(buf, access, &self.caps)
    }

    /// Ends a registration; `Busy` while a WR or a queued Read Response
    /// references the region.
    pub fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        let b = self.mem.deregister(mr)?;
        self.forget_file(mr);
        Ok(b)
    }

    /// The region's bytes (`Busy` while a Receive or Read sink holds it).
    #[inline]
    pub fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.mem.region(mr)
    }

    /// The region's bytes for writing (`Busy` while any WR holds it).
    #[inline]
    pub fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.mem.region_mut(mr)
    }

    // ------------------------------------------------------------------
    // Posting
    // ------------------------------------------------------------------

    /// Posts a receive (allowed before the stream is established).
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        if matches!(self.state, QpState::Closed(_)) {
            return Err(ProviderError::NotConnected);
        }
        if self.recv_outstanding >= self.caps.max_recv_wr {
            return Err(ProviderError::QueueFull);
        }
        let hold = self.mem.check_recv(&wr)?;
        let idx = hold.idx;
        self.mem.hold(&[hold]);
        self.recv_outstanding += 1;
        self.rq.push_back(PostedRecv {
            wr_id: wr.wr_id,
            sge: wr.sge,
            idx,
            placed_end: 0,
            done: None,
        });
        Ok(())
    }

    /// Posts a Send-queue WR; local errors are refused here.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        if !matches!(self.state, QpState::Established) {
            return Err(ProviderError::NotConnected);
        }
        if self.send_outstanding >= self.caps.max_send_wr {
            return Err(ProviderError::QueueFull);
        }
        self.files.check_send(&wr)?;
        let rules = SendRules {
            read_single_sge: true,
            read_sink_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ord_zero: self.params.ord == 0,
        };
        let checked = self.mem.check_send(&wr, &self.caps, &rules)?;
        let (opcode, holds, total) = (checked.opcode, checked.holds, checked.total);
        self.mem.hold(&holds);
        self.send_outstanding += 1;
        self.sq.push_back(SqWr {
            wr_id: wr.wr_id,
            opcode,
            op: wr.op,
            sges: wr.sges,
            holds,
            len: total as u32,
            state: WrState::Queued,
            msn: 0,
        });
        Ok(())
    }

    fn sq_get(&self, seq: u64) -> Option<&SqWr> {
        self.sq
            .get(usize::try_from(seq.checked_sub(self.sq_front_seq)?).ok()?)
    }

    fn sq_get_mut(&mut self, seq: u64) -> Option<&mut SqWr> {
        let i = usize::try_from(seq.checked_sub(self.sq_front_seq)?).ok()?;
        self.sq.get_mut(i)
    }

    // ------------------------------------------------------------------
    // Completions and events
    // ------------------------------------------------------------------

    fn complete(&mut self, c: Completion, holds: Holds) {
        self.cq.push_back((c, holds));
    }

    /// Moves Send-queue WRs from the front, in post order, to the CQ.
    //= rfc5040#section-5.5
    //# RDMA Operations MUST be Completed at the Local Peer in the order
    //# that they were submitted by the ULP.
    fn retire(&mut self) {
        while let Some(w) = self.sq.front() {
            let WrState::Done(status, n) = w.state else {
                break;
            };
            let Some(w) = self.sq.pop_front() else { break };
            self.sq_front_seq += 1;
            let byte_len = if status.is_ok() { n } else { 0 };
            self.complete(
                Completion {
                    wr_id: w.wr_id,
                    opcode: w.opcode,
                    byte_len,
                    status,
                },
                w.holds,
            );
        }
        if self.sq_next_tx < self.sq_front_seq {
            self.sq_next_tx = self.sq_front_seq;
        }
    }

    /// Marks every Send/Write handed to TCP since the last call as
    /// successfully complete (see the module docs). Call it after reading
    /// the peer's input.
    pub fn confirm_transmitted(&mut self) {
        self.staged_unconfirmed = false;
        let mut any = false;
        for w in self.sq.iter_mut() {
            if w.state == WrState::Transmitted {
                w.state = WrState::Done(Status::Success, w.len);
                any = true;
            }
        }
        if any {
            self.retire();
        }
    }

    /// True while a transmitted Send/Write awaits
    /// [`QueuePair::confirm_transmitted`].
    pub fn has_unconfirmed(&self) -> bool {
        self.sq.iter().any(|w| w.state == WrState::Transmitted)
    }

    /// True while a Send handed to TCP since the last
    /// [`QueuePair::confirm_transmitted`] is unconfirmed, staged or not.
    pub fn sent_since_confirm(&self) -> bool {
        self.staged_unconfirmed || self.has_unconfirmed()
    }

    /// Staged Sends whose octets are not all handed to TCP yet (a
    /// registered Send would be outstanding that long and one pass more).
    pub fn staged_outstanding(&self) -> usize {
        self.staged_unsent
    }

    /// Appends every available completion to `out`, releasing the regions
    /// their WRs held; returns the count.
    pub fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        while let Some((c, holds)) = self.cq.pop_front() {
            self.mem.release(&holds);
            match c.opcode {
                CqOpcode::Recv | CqOpcode::RecvWithInvalidate { .. } => {
                    self.recv_outstanding = self.recv_outstanding.saturating_sub(1)
                }
                _ => self.send_outstanding = self.send_outstanding.saturating_sub(1),
            }
            out.push(c);
            n += 1;
        }
        self.solicited = false;
        n
    }

    /// Completions waiting to be polled.
    pub fn completions_pending(&self) -> usize {
        self.cq.len()
    }

    /// True if a solicited receive (or an error) completed since the last
    /// [`QueuePair::poll_completions`].
    pub fn solicited_pending(&self) -> bool {
        self.solicited
    }

    /// Next connection event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// True while events are queued.
    pub fn events_pending(&self) -> bool {
        !self.events.is_empty()
    }

    // ------------------------------------------------------------------
    // Closing
    // ------------------------------------------------------------------

    /// Flushes every outstanding WR and enters the closed state.
    fn go_down(&mut self, reason: DisconnectReason) {
        if matches!(self.state, QpState::Closed(_)) {
            return;
        }
        self.release_output_holds();
        self.ord_q.clear();
        for w in self.sq.iter_mut() {
            if !matches!(w.state, WrState::Done(..)) {
                w.state = WrState::Done(Status::Flushed, 0);
            }
        }
        self.retire();
        while let Some(r) = self.rq.pop_front() {
            self.complete(
                Completion {
                    wr_id: r.wr_id,
                    opcode: CqOpcode::Recv,
                    byte_len: 0,
                    status: Status::Flushed,
                },
                smallvec![Held {
                    idx: r.idx,
                    write: true,
                }],
            );
        }
        self.rx.state = RxState::Dead;
        self.state = QpState::Closed(reason.clone());
        self.solicited = true;
        self.events.push_back(QpEvent::Disconnected(reason));
    }

    /// Abortive local close: every outstanding WR is flushed; the queued
    /// output (whole FPDUs) still goes out, then the owner closes TCP.
    pub fn disconnect(&mut self) {
        self.tx_closed = true;
        self.go_down(DisconnectReason::LocalClose);
    }

    /// Closes with `reason` without sending anything (connection setup
    /// failed or was rejected): every posted WR is flushed.
    pub fn abort(&mut self, reason: DisconnectReason) {
        self.tx_closed = true;
        self.discard_output();
        self.go_down(reason);
    }

    /// The peer closed TCP (end of stream). Mid-FPDU, or on a stream that
    /// was never established, the link was lost.
    pub fn peer_closed(&mut self) {
        let clean = self.rx.state == RxState::Header && self.rx.have == 0 && !self.rx.in_fpdu;
        self.tx_closed = true;
        self.go_down(if clean {
            DisconnectReason::PeerClose
        } else {
            DisconnectReason::TransportLost
        });
    }

    /// TCP failed (reset, error).
    pub fn transport_lost(&mut self) {
        self.tx_closed = true;
        self.discard_output();
        self.go_down(DisconnectReason::TransportLost);
    }

    /// Nothing more will ever be sent and all output has been drained: the
    /// owner can shut TCP down.
    pub fn tx_finished(&self) -> bool {
        self.tx_closed && self.out.is_empty()
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, QpState::Closed(_))
    }
}

impl SqWr {
    fn op_is_send(&self) -> bool {
        matches!(
            self.op,
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. }
        )
    }
}
