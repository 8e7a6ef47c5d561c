//! The receive side of the queue pair: the FPDU state machine over the
//! TCP octets (header prefix, payload, trailer; Markers), the whole-FPDU
//! fast path, the placement checks that choose a payload's target, direct
//! placement from the socket, and what a verified FPDU completes. See the
//! [module docs](super) for the data path.

use smallvec::smallvec;

use rpcrdma_proto::provider::memory::Hold as Held;
use rpcrdma_proto::provider::{Access, Completion, Opcode as CqOpcode, Stag, Status};

use crate::crc::{self, Crc32c};
use crate::ddp::{
    self, DdpHeader, TaggedCheck, UntaggedHeader, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::mpa::fpdu::{pad_len, MARKER_INTERVAL, MARKER_LEN};
use crate::rdmap::{
    self, Opcode, Segment, TerminateMessage, QN_READ_REQUEST, QN_SEND, QN_TERMINATE,
};
use crate::TerminateCode;

use super::terminate::RxFault;
use super::{QpState, QueuePair, RespJob};

/// Octets worth reading at once when the next FPDU's header is unknown: a
/// whole FPDU at the largest ULPDU_Length (2 + 65,535 + 2 + 4 octets) and
/// what usually comes right after it — the rest of a message, such as the
/// last short segment of a 64 KiB Read Response or a reply Send of up to
/// 4 KiB inline — so that one read takes it all. With 64 KiB, a 64 KiB
/// Read Response (two FPDUs, of 65,520 and 60 octets at the MULPDU of
/// 65,512 used until 2026-11-29, 64,776 and 804 now) took three reads: 65,536 octets, the last 38 octets of
/// payload, the 6 of PAD and CRC.
pub const READ_AHEAD: usize = 72 * 1024;

/// Most octets [`QueuePair::direct_tail_len`] asks for: PAD (3), CRC (4),
/// ULPDU_Length (2) and a tagged header (14).
pub const DIRECT_TAIL_MAX: usize = 3 + 4 + 2 + TAGGED_HEADER_LEN;

/// Largest FPDU header kept while receiving: ULPDU_Length + the longest
/// prefix [`Segment::parse_prefix`] needs.
const HBUF_LEN: usize = 2 + Segment::MAX_PREFIX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RxState {
    /// Collecting ULPDU_Length and the header prefix into `hbuf`.
    Header,
    /// Payload octets of the current FPDU.
    Payload,
    /// PAD and CRC.
    Trailer,
    /// The stream is dead; input is ignored.
    Dead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dst {
    Mem { idx: u32, off: usize },
    Discard,
}

/// What to do once the current FPDU's CRC has been checked.
#[derive(Clone, Copy, Debug)]
pub(super) enum RxAction {
    None,
    /// A Send segment placed in receive `d` (relative to the head).
    Send {
        d: u32,
        end: u64,
        last: bool,
        opcode: Opcode,
        inval: u32,
    },
    ReadResponse {
        last: bool,
    },
    ReadRequest(RespJob),
    Terminate,
}

pub(super) struct Rx {
    pub(super) state: RxState,
    pub(super) hbuf: [u8; HBUF_LEN],
    pub(super) have: usize,
    need: usize,
    pub(super) ulpdu_len: usize,
    pub(super) hdr_len: usize,
    pub(super) remaining: usize,
    pub(super) dst: Dst,
    crc: Crc32c,
    trailer: [u8; 7],
    trailer_have: usize,
    trailer_need: usize,
    pub(super) action: RxAction,
    pub(super) fault: Option<RxFault>,
    /// Wire position (for Markers).
    pos: u64,
    fpdu_start: u64,
    pub(super) in_fpdu: bool,
    marker: [u8; 4],
    marker_have: usize,
    last_was_large: bool,
}

impl Rx {
    pub(super) fn new() -> Self {
        Rx {
            state: RxState::Header,
            hbuf: [0; HBUF_LEN],
            have: 0,
            need: 2,
            ulpdu_len: 0,
            hdr_len: 0,
            remaining: 0,
            dst: Dst::Discard,
            crc: Crc32c::new(),
            trailer: [0; 7],
            trailer_have: 0,
            trailer_need: 0,
            action: RxAction::None,
            fault: None,
            pos: 0,
            fpdu_start: 0,
            in_fpdu: false,
            marker: [0; 4],
            marker_have: 0,
            last_was_large: true,
        }
    }
}

impl QueuePair {
    /// True while part of an FPDU has been received (the stream ends
    /// uncleanly if the peer closes now).
    pub fn rx_mid_fpdu(&self) -> bool {
        self.rx.state != RxState::Dead
            && (self.rx.state != RxState::Header || self.rx.have > 0 || self.rx.in_fpdu)
    }

    /// How many octets the owner should read from TCP into its read-ahead
    /// buffer next: small right after a large FPDU payload went straight to
    /// memory (so the next large payload can too), or while the oldest
    /// outstanding RDMA Read awaits the first segment of a Read Response
    /// over 16 KiB (its first header then comes with a little payload, and
    /// one direct read takes the rest: see `qp/direct.rs`; a 1 MiB Read
    /// Response took a read-ahead of 72 KiB, copied to the sink, a 64 KiB
    /// one all of it); [`READ_AHEAD`] otherwise.
    pub fn suggested_read_len(&self) -> usize {
        if self.rx.state != RxState::Payload
            && (self.rx.last_was_large || self.awaits_large_read_response())
        {
            128
        } else {
            READ_AHEAD
        }
    }

    /// Where the next octets of the TCP stream may be read to directly: the
    /// rest of the current payload in its target region (`None` when the
    /// next octets are not payload, with Markers, or after an error).
    pub fn direct_target(&mut self) -> Option<&mut [u8]> {
        if self.rx.state != RxState::Payload || self.params.recv_markers || self.rx.remaining == 0 {
            return None;
        }
        let Dst::Mem { idx, off } = self.rx.dst else {
            return None;
        };
        let rem = self.rx.remaining;
        self.mem
            .region_at_mut(idx)?
            .buf_mut()?
            .get_mut(off..off.checked_add(rem)?)
    }

    /// Octets worth reading right after the rest of the current payload,
    /// into a buffer of the caller's that then goes to
    /// [`QueuePair::handle_input`]: the payload's PAD and CRC and the
    /// header of a next tagged FPDU (ULPDU_Length and the 14-octet
    /// DDP/RDMAP header of a Write or Read Response segment), so that one
    /// read takes the end of a payload and all the next payload's direct
    /// placement needs (two reads per FPDU took 32 system calls per MiB).
    /// At most [`DIRECT_TAIL_MAX`]; 0 when no payload is being read.
    pub fn direct_tail_len(&self) -> usize {
        if self.rx.state != RxState::Payload || self.params.recv_markers {
            return 0;
        }
        pad_len(self.rx.ulpdu_len) + 4 + 2 + TAGGED_HEADER_LEN
    }

    /// Reports that `n` octets were read into [`QueuePair::direct_target`].
    pub fn direct_filled(&mut self, n: usize) {
        if self.rx.state != RxState::Payload {
            return;
        }
        let Dst::Mem { idx, off } = self.rx.dst else {
            return;
        };
        let n = n.min(self.rx.remaining);
        if self.params.crc {
            let s = self.mem.slice(idx, off, n);
            self.rx.crc = self.rx.crc.update(s);
        }
        self.rx.pos += n as u64;
        self.rx.remaining -= n;
        self.rx.dst = Dst::Mem { idx, off: off + n };
        self.stats.rx_direct_bytes += n as u64;
        if self.rx.remaining == 0 {
            self.enter_trailer();
        }
    }

    /// Feeds octets read from TCP; everything is consumed (after a fatal
    /// error the rest is ignored). Returns the octets consumed.
    pub fn handle_input(&mut self, mut data: &[u8]) -> usize {
        let total = data.len();
        if !matches!(self.state, QpState::Established) {
            return if self.is_closed() { total } else { 0 };
        }
        while !data.is_empty() && self.rx.state != RxState::Dead {
            if self.params.recv_markers && self.rx.pos.is_multiple_of(MARKER_INTERVAL) {
                // Collect the Marker.
                let take = (MARKER_LEN - self.rx.marker_have).min(data.len());
                let h = self.rx.marker_have;
                self.rx.marker[h..h + take].copy_from_slice(&data[..take]);
                self.rx.marker_have += take;
                data = &data[take..];
                if self.rx.marker_have < MARKER_LEN {
                    break;
                }
                self.rx.marker_have = 0;
                let mpos = self.rx.pos;
                if !self.rx.in_fpdu && self.rx.have == 0 && self.rx.state == RxState::Header {
                    self.start_fpdu();
                }
                if self.params.crc {
                    self.rx.crc = self.rx.crc.update(&self.rx.marker);
                }
                self.rx.pos += MARKER_LEN as u64;
                let ptr = u16::from_be_bytes([self.rx.marker[2], self.rx.marker[3]]);
                let target = mpos.checked_sub(u64::from(ptr));
                let start = self.rx.fpdu_start;
                // After a leading Marker (an FPDU that starts at a Marker
                // position), the ULPDU_Length field is 4 octets later: the
                // other reading of RFC 5044 section 4.2, as FpduReceiver.
                let leading = start.is_multiple_of(MARKER_INTERVAL);
                let after_lead = leading && target == Some(start + MARKER_LEN as u64);
                if target != Some(start) && !after_lead {
                    //= rfc5044#section-4.3
                    //# If an FPDU is large enough to contain multiple Markers, they MUST all
                    //# point to the same point in the TCP stream: the first octet of the
                    //# ULPDU Length field for the FPDU.
                    self.rx_framing_fault(TerminateCode::MPA_MARKER);
                    break;
                }
                continue;
            }
            // Logical octets up to the next Marker.
            let limit = if self.params.recv_markers {
                (MARKER_INTERVAL - self.rx.pos % MARKER_INTERVAL) as usize
            } else {
                usize::MAX
            };
            let n = data.len().min(limit);
            let used = self.consume(&data[..n]);
            data = &data[used..];
        }
        total - data.len().min(total)
    }

    fn start_fpdu(&mut self) {
        self.rx.in_fpdu = true;
        self.rx.fpdu_start = self.rx.pos;
        self.rx.crc = Crc32c::new();
    }

    /// Processes logical (Marker-free) octets; returns how many were used.
    fn consume(&mut self, data: &[u8]) -> usize {
        let mut used = 0;
        while used < data.len() && self.rx.state != RxState::Dead {
            let d = &data[used..];
            match self.rx.state {
                RxState::Header => {
                    if self.rx.have == 0 && !self.params.recv_markers {
                        if let Some(n) = self.whole_fpdu(d) {
                            used += n;
                            continue;
                        }
                    }
                    if !self.rx.in_fpdu {
                        self.start_fpdu();
                    }
                    let take = (self.rx.need - self.rx.have).min(d.len());
                    let h = self.rx.have;
                    self.rx.hbuf[h..h + take].copy_from_slice(&d[..take]);
                    // (Without CRCs nothing is computed: the CRC field is
                    // not checked then.)
                    if self.params.crc {
                        self.rx.crc = self.rx.crc.update(&d[..take]);
                    }
                    self.rx.have += take;
                    self.rx.pos += take as u64;
                    used += take;
                    if self.rx.have == self.rx.need {
                        self.header_progress();
                    }
                }
                RxState::Payload => {
                    let take = self.rx.remaining.min(d.len());
                    let src = &d[..take];
                    if self.params.crc {
                        self.rx.crc = self.rx.crc.update(src);
                    }
                    self.place_payload(src);
                    self.rx.remaining -= take;
                    self.rx.pos += take as u64;
                    used += take;
                    if self.rx.remaining == 0 {
                        self.enter_trailer();
                    }
                }
                RxState::Trailer => {
                    let take = (self.rx.trailer_need - self.rx.trailer_have).min(d.len());
                    let h = self.rx.trailer_have;
                    self.rx.trailer[h..h + take].copy_from_slice(&d[..take]);
                    // PAD octets are covered by the CRC (a Marker may follow
                    // them, before the CRC field).
                    let pad = self.rx.trailer_need - 4;
                    if self.params.crc && h < pad {
                        let e = (h + take).min(pad);
                        self.rx.crc = self.rx.crc.update(&self.rx.trailer[h..e]);
                    }
                    self.rx.trailer_have += take;
                    self.rx.pos += take as u64;
                    used += take;
                    if self.rx.trailer_have == self.rx.trailer_need {
                        self.finish_fpdu();
                    }
                }
                RxState::Dead => break,
            }
        }
        used
    }

    /// Copies payload octets to the current memory destination (a Receive
    /// buffer or a tagged buffer, bounds-checked) and advances it; a
    /// discarded payload (no destination) is skipped.
    fn place_payload(&mut self, src: &[u8]) {
        if let Dst::Mem { idx, off } = self.rx.dst {
            let take = src.len();
            if let Some(dst) = self
                .mem
                .region_at_mut(idx)
                .and_then(|r| r.buf_mut()?.get_mut(off..off + take))
            {
                dst.copy_from_slice(src);
            }
            self.rx.dst = Dst::Mem {
                idx,
                off: off + take,
            };
            self.stats.rx_copied_bytes += take as u64;
        }
    }

    /// Fast path of [`QueuePair::consume`] for an FPDU that starts at
    /// `d[0]` and lies entirely within `d` (no Markers): the same steps as
    /// the octet-wise state machine (header prefix into `hbuf`, the same
    /// checks in [`QueuePair::on_header`], payload to its target, trailer,
    /// [`QueuePair::finish_fpdu`]), in one pass, with one CRC computation.
    /// Returns the octets used, or `None` (nothing done) if the FPDU is
    /// incomplete or its ULPDU_Length is refused (the general path then
    /// handles it).
    fn whole_fpdu(&mut self, d: &[u8]) -> Option<usize> {
        let (&[l0, l1], rest) = d.split_first_chunk::<2>()?;
        let len = u16::from_be_bytes([l0, l1]);
        if len > self.params.max_rx_ulpdu {
            return None;
        }
        let ul = usize::from(len);
        let pad = pad_len(ul);
        let fpdu_len = 2 + ul + pad + 4;
        if d.len() < fpdu_len {
            return None;
        }
        if let Some(n) = self.whole_small_send(d, ul, pad, fpdu_len) {
            return Some(n);
        }
        // The header prefix header_progress would collect.
        let want = match rest.first() {
            None => 0,
            Some(_) if ul == 0 => 0,
            Some(&c) if c & 0x80 != 0 => TAGGED_HEADER_LEN.min(ul),
            Some(_) => {
                let qn = rest
                    .get(6..10)
                    .map(|q| u32::from_be_bytes([q[0], q[1], q[2], q[3]]));
                if ul > UNTAGGED_HEADER_LEN && qn != Some(QN_SEND) {
                    ul.min(Segment::MAX_PREFIX)
                } else {
                    UNTAGGED_HEADER_LEN.min(ul)
                }
            }
        };
        let have = 2 + want;
        self.rx
            .hbuf
            .get_mut(..have)?
            .copy_from_slice(d.get(..have)?);
        self.start_fpdu();
        self.rx.have = have;
        self.rx.need = have;
        self.rx.ulpdu_len = ul;
        self.rx.last_was_large = ul >= 4096;
        self.on_header();
        if self.rx.state == RxState::Payload {
            let take = self.rx.remaining;
            let src = d.get(have..have + take)?;
            self.place_payload(src);
            self.rx.remaining = 0;
            self.enter_trailer();
        }
        if self.rx.state != RxState::Trailer {
            // (Not reached: the checks never end the stream before the
            // trailer.) The general path takes the rest.
            return Some(2 + ul);
        }
        let t = self.rx.trailer_need;
        self.rx.trailer[..t].copy_from_slice(d.get(2 + ul..fpdu_len)?);
        self.rx.trailer_have = t;
        if self.params.crc {
            self.rx.crc = Crc32c::new().update(&d[..2 + ul + pad]);
        }
        self.rx.pos += fpdu_len as u64;
        self.finish_fpdu();
        Some(fpdu_len)
    }

    /// Fast path of [`QueuePair::whole_fpdu`] for the usual small message:
    /// a whole untagged Send or Send with Solicited Event (no Invalidate
    /// STag) in one segment (L set, MO 0) for the receive at the head of
    /// the queue (its MSN the expected one), with room for it there and
    /// nothing of it placed yet, and a good CRC (when on). Such a segment
    /// passes every check of [`Segment::parse_prefix`] and
    /// [`QueuePair::check_send`]; it is placed and completed as the general
    /// path does, in one pass, and the receive state left as that path
    /// leaves it in every field read before the next FPDU sets it
    /// (`whole_fpdu_fast_path_equals_octet_path` and
    /// `small_send_receive_fast_path_equals_octet_path` in tests/qp.rs pin
    /// the two together, the latter also with the stream cut anywhere, so
    /// that the general path takes over mid-stream). `None`: anything else,
    /// nothing done.
    fn whole_small_send(
        &mut self,
        d: &[u8],
        ul: usize,
        pad: usize,
        fpdu_len: usize,
    ) -> Option<usize> {
        let h: &[u8; 2 + UNTAGGED_HEADER_LEN] = d.first_chunk()?;
        let payload = ul.checked_sub(UNTAGGED_HEADER_LEN)?;
        let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        // DDP: untagged (T clear), L set, version 1 (the 4 reserved bits
        // are not checked, as on the general path). RDMAP: version 1,
        // Send or Send with Solicited Event.
        let opcode = Opcode(h[3] & 0x0f);
        if h[2] & 0xc3 != 0x40 | ddp::DDP_VERSION
            || h[3] >> 6 != rdmap::RDMAP_VERSION
            || !(opcode == Opcode::SEND || opcode == Opcode::SEND_SE)
            || word(8) != QN_SEND
            || word(12) != self.rq_msn
            || word(16) != 0
            || self.rx.fault.is_some()
        {
            return None;
        }
        let r = self.rq.front()?;
        if r.next_mo() != Some(0) || payload as u64 > u64::from(r.sge.length) {
            return None;
        }
        let (idx, off) = (r.idx, r.sge.offset as usize);
        let src = d.get(2 + UNTAGGED_HEADER_LEN..2 + ul)?;
        let trailer = d.get(2 + ul..fpdu_len)?;
        if self.params.crc {
            let crc = Crc32c::new().update(d.get(..2 + ul + pad)?);
            let w: [u8; 4] = trailer.get(pad..)?.try_into().ok()?;
            if crc.value() != crc::from_wire(w) {
                // The general path places it, then ends the stream.
                return None;
            }
        }
        // What the general path leaves in the receive state after this
        // FPDU that is read before the next FPDU rewrites it: the stream
        // position, the ULPDU_Length (a framing fault copies it) and the
        // read-ahead hint. The state is `Header` with nothing collected
        // (`need` 2, outside an FPDU) before and after, as the caller
        // checked; the header, trailer, CRC, target and action the general
        // path records are only read while an FPDU is in progress, and the
        // next one sets them before that.
        let rx = &mut self.rx;
        rx.pos += fpdu_len as u64;
        rx.ulpdu_len = ul;
        rx.last_was_large = ul >= 4096;
        // Placement (`check_send`, `place_payload`), then what
        // `finish_fpdu` and `send_placed` do with it.
        self.mem.back(idx);
        if let Some(dst) = self
            .mem
            .region_at_mut(idx)
            .and_then(|r| r.buf_mut()?.get_mut(off..off + payload))
        {
            dst.copy_from_slice(src);
        }
        self.stats.rx_copied_bytes += payload as u64;
        if let Some(c) = self.stats.rx_fpdus.get_mut(usize::from(opcode.0)) {
            *c += 1;
        }
        self.head_recv_done(payload as u32, opcode.solicited());
        Some(fpdu_len)
    }

    fn enter_trailer(&mut self) {
        self.rx.state = RxState::Trailer;
        self.rx.trailer_have = 0;
        self.rx.trailer_need = pad_len(self.rx.ulpdu_len) + 4;
    }

    /// More header octets arrived: decide how many more are needed, or
    /// run the checks.
    fn header_progress(&mut self) {
        let rx = &mut self.rx;
        if rx.have == 2 {
            let len = u16::from_be_bytes([rx.hbuf[0], rx.hbuf[1]]);
            if len > self.params.max_rx_ulpdu {
                // An FPDU longer than this receiver takes is a framing
                // error (LLP / MPA / Marker-Length mismatch).
                self.rx_framing_fault(TerminateCode::MPA_MARKER);
                return;
            }
            rx.ulpdu_len = usize::from(len);
            rx.last_was_large = rx.ulpdu_len >= 4096;
            if rx.ulpdu_len == 0 {
                self.on_header();
                return;
            }
            rx.need = 3;
            return;
        }
        let ul = rx.ulpdu_len;
        if rx.have == 3 {
            let tagged = rx.hbuf[2] & 0x80 != 0;
            let hl = if tagged {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let want = 2 + hl.min(ul);
            if want > rx.have {
                rx.need = want;
                return;
            }
        }
        let tagged = rx.hbuf[2] & 0x80 != 0;
        if !tagged && rx.have == 2 + UNTAGGED_HEADER_LEN && ul > UNTAGGED_HEADER_LEN {
            let qn = u32::from_be_bytes([rx.hbuf[8], rx.hbuf[9], rx.hbuf[10], rx.hbuf[11]]);
            if qn != QN_SEND {
                let want = 2 + ul.min(Segment::MAX_PREFIX);
                if want > rx.have {
                    rx.need = want;
                    return;
                }
            }
        }
        self.on_header();
    }

    /// The header prefix is complete: classify, check, choose the target.
    fn on_header(&mut self) {
        let have = self.rx.have;
        let ul = self.rx.ulpdu_len;
        let prefix_len = have - 2;
        self.rx.hdr_len = prefix_len;
        self.rx.remaining = ul - prefix_len;
        self.rx.dst = Dst::Discard;
        self.rx.action = RxAction::None;
        self.rx.state = RxState::Payload;
        let parsed = Segment::parse_prefix(self.rx.hbuf.get(2..have).unwrap_or_default(), ul);
        match parsed {
            Err(code) => self.rx_fault(code, Status::RemoteInvalidRequest, None),
            Ok(seg) => self.check_segment(&seg, ul),
        }
        if self.rx.remaining == 0 && self.rx.state == RxState::Payload {
            self.enter_trailer();
        }
    }

    //= rfc5041#section-7.1
    //# For non-zero-length Untagged DDP Segments, the DDP Segment MUST be
    //# validated before Placement by verifying:
    fn check_segment(&mut self, seg: &Segment, ul: usize) {
        let payload_len = (ul - seg.payload.start.min(ul)) as u64;
        match seg.ddp {
            DdpHeader::Tagged(t) => {
                if seg.control.opcode == Opcode::READ_RESPONSE {
                    self.check_read_response(&t, payload_len);
                } else if payload_len > 0 {
                    match self.tagged_target(t.stag, t.to, payload_len) {
                        Ok(dst) => self.rx.dst = dst,
                        Err(code) => self.rx_fault(code, Status::RemoteAccess, None),
                    }
                }
                //= rfc5041#section-5.2
                //# The STag and TO fields MUST NOT be
                //# checked for a zero-length Tagged DDP Message.
                // (A zero-length RDMA Write is the RFC 6581 Write RTR; Linux
                // siw sends it with STag 1, and any peer may send one.)
            }
            DdpHeader::Untagged(u) => match u.qn {
                QN_SEND => self.check_send(&u, seg.control.opcode, payload_len),
                QN_READ_REQUEST => self.check_read_request(&u, seg.read_request),
                _ => self.rx.action = RxAction::Terminate,
            },
        }
    }

    /// Checks a Send segment (QN 0) against the receive queue: MSN, MO
    /// and length against the posted receive it names, the continuity of
    /// its message, and the STag a Send with Invalidate names. Chooses the
    /// receive buffer as the target.
    fn check_send(&mut self, u: &UntaggedHeader, opcode: Opcode, payload_len: u64) {
        let rq = &self.rq;
        let r = ddp::check_untagged(
            u,
            payload_len as u32,
            |q| q <= QN_TERMINATE,
            self.rq_msn,
            |d| rq.get(d as usize).map(|r| u64::from(r.sge.length)),
        );
        match r {
            Ok(pl) => {
                let Some(r) = self.rq.get(pl.buffer_index as usize) else {
                    return;
                };
                if let Err(code) = ddp::check_continues(u.mo, r.next_mo()) {
                    self.rx_fault(code, Status::RemoteInvalidRequest, None);
                    return;
                }
                let off = r.sge.offset + u64::from(pl.offset);
                let idx = r.idx;
                // A Send arrives for this receive: a lent buffer gets its
                // memory now (checks passed, nothing placed yet).
                self.mem.back(idx);
                self.rx.dst = Dst::Mem {
                    idx,
                    off: off as usize,
                };
                self.rx.action = RxAction::Send {
                    d: pl.buffer_index,
                    end: u64::from(pl.offset) + payload_len,
                    last: u.last,
                    opcode,
                    inval: u.rsvd_ulp_word,
                };
                if u.last && opcode.carries_invalidate_stag() {
                    let ok = self.mem.lookup(u.rsvd_ulp_word).is_some_and(|(_, r)| {
                        r.access().contains(Access::REMOTE_WRITE)
                            || r.access().contains(Access::REMOTE_READ)
                    });
                    if !ok {
                        // A Send with Invalidate naming an STag
                        // that cannot be invalidated is a remote
                        // operation error; nothing is placed.
                        self.rx_fault(
                            TerminateCode::RDMAP_OPERATION_CANNOT_INVALIDATE,
                            Status::RemoteInvalidRequest,
                            Some((pl.buffer_index, Status::LocalProtection)),
                        );
                    }
                }
            }
            Err(code) => {
                let (status, recv) = match code {
                    TerminateCode::DDP_UNTAGGED_NO_BUFFER => (Status::ReceiverNotReady, None),
                    TerminateCode::DDP_UNTAGGED_TOO_LONG
                    | TerminateCode::DDP_UNTAGGED_INVALID_MO => {
                        let d = u.msn.wrapping_sub(self.rq_msn);
                        (Status::LocalLength, Some((d, Status::LocalLength)))
                    }
                    _ => (Status::RemoteInvalidRequest, None),
                };
                self.rx_fault(code, status, recv);
            }
        }
    }

    pub(super) fn tagged_target(&self, stag: u32, to: u64, len: u64) -> Result<Dst, TerminateCode> {
        let info = self.region_info(stag);
        let off = ddp::check_tagged(
            to,
            len,
            info.as_ref().map(|(_, i)| i),
            ddp::Access::REMOTE_WRITE,
            TaggedCheck::DdpPlacement,
        )?;
        let idx = info.map(|(i, _)| i).unwrap_or(0);
        Ok(Dst::Mem {
            idx,
            off: off as usize,
        })
    }

    /// The trailer is complete: check the CRC, then act.
    fn finish_fpdu(&mut self) {
        let pad = self.rx.trailer_need - 4;
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.rx.trailer[pad..pad + 4]);
        let received = crc::from_wire(w);
        let computed = self.rx.crc.value();
        if self.params.crc && received != computed {
            //= rfc5044#section-4.4
            //# If not, the
            //# receiver MUST treat the FPDU as an invalid FPDU.
            self.rx_framing_fault(TerminateCode::MPA_CRC);
            return;
        }
        let have = self.rx.have;
        let ul = self.rx.ulpdu_len;
        // Reset for the next FPDU.
        self.rx.state = RxState::Header;
        self.rx.have = 0;
        self.rx.need = 2;
        self.rx.in_fpdu = false;
        // The header prefix (octets 2..have of hbuf).
        let pl = have.saturating_sub(2);
        if let Some(f) = self.rx.fault.take() {
            self.fault_terminate(f, have, ul);
            return;
        }
        let ctrl = if pl > 1 { self.rx.hbuf[3] } else { 0 };
        let op = usize::from(ctrl & 0x0f);
        if let Some(c) = self.stats.rx_fpdus.get_mut(op) {
            *c += 1;
        }
        match self.rx.action {
            RxAction::None => {}
            RxAction::Send {
                d,
                end,
                last,
                opcode,
                inval,
            } => self.send_placed(d, end, last, opcode, inval),
            RxAction::ReadResponse { last } => {
                let plen = (ul - self.rx.hdr_len.min(ul)) as u64;
                self.read_response_placed(plen, last);
            }
            RxAction::ReadRequest(job) => self.accept_read_request(job),
            RxAction::Terminate => {
                let t = TerminateMessage::decode(
                    self.rx
                        .hbuf
                        .get(2 + UNTAGGED_HEADER_LEN..have)
                        .unwrap_or_default(),
                );
                if let Ok(t) = t {
                    self.on_terminate(t);
                }
            }
        }
    }

    /// A verified Send segment was placed in receive `d` (relative to the
    /// head of the receive queue), up to MO `end`; `last` ends its message.
    /// Receives whose message is complete then complete in MSN order.
    fn send_placed(&mut self, d: u32, end: u64, last: bool, opcode: Opcode, inval: u32) {
        if let Some(r) = self.rq.get_mut(d as usize) {
            r.placed_end = end;
            if last {
                let cq_op = if opcode.carries_invalidate_stag() {
                    CqOpcode::RecvWithInvalidate { stag: Stag(inval) }
                } else {
                    CqOpcode::Recv
                };
                r.done = Some((cq_op, end as u32, opcode.solicited()));
            }
        }
        if last && opcode.carries_invalidate_stag() {
            self.mem.invalidate(Stag(inval));
        }
        self.complete_done_recvs();
    }

    /// Completes finished receives from the head of the queue, in MSN
    /// order.
    fn complete_done_recvs(&mut self) {
        while let Some(r) = self.rq.front() {
            let Some((op, len, se)) = r.done else { break };
            self.complete_head_recv(op, len, se);
        }
    }

    /// The head receive's message is complete (`len` octets, `op`,
    /// solicited or not): it leaves the queue and completes.
    fn complete_head_recv(&mut self, op: CqOpcode, len: u32, se: bool) {
        let Some(r) = self.rq.pop_front() else { return };
        self.mem
            .received(r.idx, r.sge.offset as usize, len as usize);
        self.rq_msn = self.rq_msn.wrapping_add(1);
        if se {
            self.solicited = true;
        }
        self.complete(
            Completion {
                wr_id: r.wr_id,
                opcode: op,
                byte_len: len,
                status: Status::Success,
            },
            smallvec![Held {
                idx: r.idx,
                write: true,
            }],
        );
    }

    /// [`QueuePair::send_placed`] for a whole Send or Send SE (no
    /// Invalidate) of `len` octets placed in the head receive, nothing of
    /// it placed before: the head completes at once, then any receive
    /// behind it whose message had already arrived.
    fn head_recv_done(&mut self, len: u32, se: bool) {
        self.complete_head_recv(CqOpcode::Recv, len, se);
        if self.rq.front().is_some_and(|r| r.done.is_some()) {
            self.complete_done_recvs();
        }
    }
}
