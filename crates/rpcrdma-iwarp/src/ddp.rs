//! DDP (RFC 5041): Direct Data Placement headers, segmentation and the
//! placement checks.
//!
//! ```text
//! tagged (T=1), 14 octets:
//!  |T|L| Rsvd  |DV | RsvdULP (8) |          STag (32)          |
//!  |                   Tagged Offset (64)                      |
//! untagged (T=0), 18 octets:
//!  |T|L| Rsvd  |DV | RsvdULP (8) |      RsvdULP (32) ...
//!  |   QN (32)   |   MSN (32)   |   MO (32)   |
//! ```
//!
//! The placement checks are pure functions over a description of the local
//! state ([`RegionInfo`] for a tagged buffer, the expected MSN and the
//! posted buffer lengths for an untagged queue). Each failure returns the
//! [`TerminateCode`] to send:
//!
//! | check | function | Terminate (layer / etype / code) |
//! |---|---|---|
//! | DV ≠ 1 (tagged / untagged) | [`DdpHeader::check_version`] | DDP / 1 / 0x04, DDP / 2 / 0x06 |
//! | STag unknown or invalid | [`check_tagged`] | DDP / 1 / 0x00 (RDMAP / 1 / 0x00 for a Read source) |
//! | STag of another stream (PD) | [`check_tagged`] | DDP / 1 / 0x02 (RDMAP / 1 / 0x03) |
//! | TO + length wraps 2^64 | [`check_tagged`] | DDP / 1 / 0x03 (RDMAP / 1 / 0x04) |
//! | TO, TO + length outside the region | [`check_tagged`] | DDP / 1 / 0x01 (RDMAP / 1 / 0x01) |
//! | access right missing | [`check_tagged`] | RDMAP / 1 / 0x02 (DDP has no such code) |
//! | QN not a queue of the stream | [`check_untagged`] | DDP / 2 / 0x01 |
//! | MSN of a future message with no buffer posted | [`check_untagged`] | DDP / 2 / 0x02 |
//! | MSN of a completed message (behind the window) | [`check_untagged`] | DDP / 2 / 0x03 |
//! | MO beyond the posted buffer | [`check_untagged`] | DDP / 2 / 0x04 |
//! | MO not where the message's placed data ends (gap, overlap, a segment after the last) | [`check_continues`] | DDP / 2 / 0x04 |
//! | MO + length beyond the posted buffer | [`check_untagged`] | DDP / 2 / 0x05 |

use crate::terminate_code::TerminateCode;
use crate::{be32, be64, need, EncodeError};

/// The DDP version this implementation speaks.
//= rfc5041#section-4.1
//# DV - Direct Data Placement Protocol Version: 2 bits.
//#     The version of the DDP Protocol in use.  This field MUST be set
//#     to one to indicate the version of the specification described in
//#     this document.
pub const DDP_VERSION: u8 = 1;

/// Length of the tagged DDP header.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of the untagged DDP header.
pub const UNTAGGED_HEADER_LEN: usize = 18;

const T_BIT: u8 = 0x80;
const L_BIT: u8 = 0x40;

/// The tagged buffer model header (T=1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaggedHeader {
    /// L: last segment of the message.
    pub last: bool,
    /// The 4 reserved control bits (zero on send, kept as received).
    pub reserved: u8,
    /// DV, 2 bits.
    pub version: u8,
    /// The 8-bit ULP-reserved field (the RDMAP control field).
    pub rsvd_ulp: u8,
    /// Steering Tag of the target buffer.
    pub stag: u32,
    /// Tagged Offset of the first payload octet.
    pub to: u64,
}

impl TaggedHeader {
    /// A version-1 tagged header.
    pub const fn new(rsvd_ulp: u8, stag: u32, to: u64, last: bool) -> Self {
        TaggedHeader {
            last,
            reserved: 0,
            version: DDP_VERSION,
            rsvd_ulp,
            stag,
            to,
        }
    }
}

/// The untagged buffer model header (T=0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UntaggedHeader {
    /// L: last segment of the message.
    pub last: bool,
    /// The 4 reserved control bits (zero on send, kept as received).
    pub reserved: u8,
    /// DV, 2 bits.
    pub version: u8,
    /// The 8-bit ULP-reserved field (the RDMAP control field).
    pub rsvd_ulp: u8,
    /// The 32-bit ULP-reserved field (RDMAP: Invalidate STag or zero).
    pub rsvd_ulp_word: u32,
    /// Queue Number.
    pub qn: u32,
    /// Message Sequence Number.
    pub msn: u32,
    /// Message Offset of the first payload octet.
    pub mo: u32,
}

impl UntaggedHeader {
    /// A version-1 untagged header.
    pub const fn new(
        rsvd_ulp: u8,
        rsvd_ulp_word: u32,
        qn: u32,
        msn: u32,
        mo: u32,
        last: bool,
    ) -> Self {
        UntaggedHeader {
            last,
            reserved: 0,
            version: DDP_VERSION,
            rsvd_ulp,
            rsvd_ulp_word,
            qn,
            msn,
            mo,
        }
    }

    /// The octets of `UntaggedHeader::new(rsvd_ulp, rsvd_ulp_word, qn,
    /// msn, mo, last)` (reserved 0, version 1), straight-line: the octets
    /// [`DdpHeader::write`] gives for it.
    pub fn new_bytes(
        rsvd_ulp: u8,
        rsvd_ulp_word: u32,
        qn: u32,
        msn: u32,
        mo: u32,
        last: bool,
    ) -> [u8; UNTAGGED_HEADER_LEN] {
        let mut b = [0u8; UNTAGGED_HEADER_LEN];
        b[0] = if last { L_BIT } else { 0 } | DDP_VERSION;
        b[1] = rsvd_ulp;
        b[2..6].copy_from_slice(&rsvd_ulp_word.to_be_bytes());
        b[6..10].copy_from_slice(&qn.to_be_bytes());
        b[10..14].copy_from_slice(&msn.to_be_bytes());
        b[14..18].copy_from_slice(&mo.to_be_bytes());
        b
    }
}

/// A DDP segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DdpHeader {
    /// T=1.
    Tagged(TaggedHeader),
    /// T=0.
    Untagged(UntaggedHeader),
}

/// Errors decoding a DDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdpDecodeError {
    /// The segment is shorter than the header its T bit announces.
    Truncated {
        /// Header length needed.
        needed: usize,
        /// Octets available.
        available: usize,
    },
}

impl DdpHeader {
    /// Decodes the header at the start of a DDP segment. Total over all bit
    /// patterns: every field is kept, so an odd header re-encodes to the same
    /// octets.
    pub fn decode(seg: &[u8]) -> Result<DdpHeader, DdpDecodeError> {
        let c = *seg.first().ok_or(DdpDecodeError::Truncated {
            needed: 1,
            available: 0,
        })?;
        let tagged = c & T_BIT != 0;
        let needed = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        if seg.len() < needed {
            return Err(DdpDecodeError::Truncated {
                needed,
                available: seg.len(),
            });
        }
        let last = c & L_BIT != 0;
        let reserved = (c >> 2) & 0x0f;
        let version = c & 0x03;
        let rsvd_ulp = seg[1];
        let trunc = DdpDecodeError::Truncated {
            needed,
            available: seg.len(),
        };
        Ok(if tagged {
            DdpHeader::Tagged(TaggedHeader {
                last,
                reserved,
                version,
                rsvd_ulp,
                stag: be32(seg, 2).ok_or(trunc)?,
                to: be64(seg, 6).ok_or(trunc)?,
            })
        } else {
            DdpHeader::Untagged(UntaggedHeader {
                last,
                reserved,
                version,
                rsvd_ulp,
                rsvd_ulp_word: be32(seg, 2).ok_or(trunc)?,
                qn: be32(seg, 6).ok_or(trunc)?,
                msn: be32(seg, 10).ok_or(trunc)?,
                mo: be32(seg, 14).ok_or(trunc)?,
            })
        })
    }

    /// Exact encoded length (14 or 18).
    pub const fn encoded_len(&self) -> usize {
        match self {
            DdpHeader::Tagged(_) => TAGGED_HEADER_LEN,
            DdpHeader::Untagged(_) => UNTAGGED_HEADER_LEN,
        }
    }

    /// Writes the header into `out`; returns the octets written.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let len = self.encoded_len();
        need(out, len)?;
        let (last, reserved, version, rsvd_ulp) = match self {
            DdpHeader::Tagged(h) => (h.last, h.reserved, h.version, h.rsvd_ulp),
            DdpHeader::Untagged(h) => (h.last, h.reserved, h.version, h.rsvd_ulp),
        };
        if reserved > 0x0f || version > 0x03 {
            return Err(EncodeError::ValueOutOfRange("DDP control field"));
        }
        let mut c = (reserved << 2) | version;
        if last {
            c |= L_BIT;
        }
        match self {
            DdpHeader::Tagged(h) => {
                out[0] = c | T_BIT;
                out[1] = rsvd_ulp;
                out[2..6].copy_from_slice(&h.stag.to_be_bytes());
                out[6..14].copy_from_slice(&h.to.to_be_bytes());
            }
            DdpHeader::Untagged(h) => {
                out[0] = c;
                out[1] = rsvd_ulp;
                out[2..6].copy_from_slice(&h.rsvd_ulp_word.to_be_bytes());
                out[6..10].copy_from_slice(&h.qn.to_be_bytes());
                out[10..14].copy_from_slice(&h.msn.to_be_bytes());
                out[14..18].copy_from_slice(&h.mo.to_be_bytes());
            }
        }
        Ok(len)
    }

    /// Encodes into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len()];
        let _ = self.write(&mut v);
        v
    }

    /// The L bit.
    pub const fn last(&self) -> bool {
        match self {
            DdpHeader::Tagged(h) => h.last,
            DdpHeader::Untagged(h) => h.last,
        }
    }

    /// The 8-bit ULP-reserved field (RDMAP control).
    pub const fn rsvd_ulp(&self) -> u8 {
        match self {
            DdpHeader::Tagged(h) => h.rsvd_ulp,
            DdpHeader::Untagged(h) => h.rsvd_ulp,
        }
    }

    /// Checks DV.
    //= rfc5041#section-4.1
    //# The value of DV MUST be the same for all the DDP Segments transmitted or
    //# received on a DDP Stream.
    //= rfc5041#section-7.2
    //# The following error numbers MUST be used when reporting errors to the
    //# ULP.
    // The table there has "Invalid DDP version" as Tagged Buffer Error
    // (0x1) code 0x04 and as Untagged Buffer Error (0x2) code 0x06.
    pub fn check_version(&self) -> Result<(), TerminateCode> {
        match self {
            DdpHeader::Tagged(h) if h.version != DDP_VERSION => {
                Err(TerminateCode::DDP_TAGGED_INVALID_VERSION)
            }
            DdpHeader::Untagged(h) if h.version != DDP_VERSION => {
                Err(TerminateCode::DDP_UNTAGGED_INVALID_VERSION)
            }
            _ => Ok(()),
        }
    }
}

/// The largest DDP payload per segment for a given MULPDU and header length
/// (`None` when the header alone does not fit).
pub fn max_payload(mulpdu: u16, header_len: usize) -> Option<u32> {
    let p = usize::from(mulpdu).checked_sub(header_len)?;
    if p == 0 {
        None
    } else {
        u32::try_from(p).ok()
    }
}

/// One planned DDP segment of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPlan {
    /// Offset of the segment's first payload octet within the message
    /// (the MO, or TO − base TO).
    pub offset: u32,
    /// Payload octets in this segment.
    pub len: u32,
    /// L bit: this is the last segment.
    pub last: bool,
}

/// Iterator over the DDP segments of one message (see [`segments`]).
#[derive(Clone, Debug)]
pub struct Segments {
    total: u32,
    max: u32,
    next: u32,
    done: bool,
}

/// Plans the segmentation of a `msg_len`-octet message into segments of at
/// most `max_payload` payload octets: in order, every segment full but the
/// last, L set on the last one only. A zero-length message is one empty
/// segment with L set.
//= rfc5041#section-5.2
//# At the Data Source, the DDP layer MUST segment the data contained in
//# a ULP message into a series of DDP Segments, where each DDP Segment
//# contains a DDP Header and ULP Payload, and MUST be no larger than the
//# MULPDU value Advertised by the LLP.
//= rfc5041#section-4.1
//# It MUST be set to one on the last DDP Segment of every DDP Message.  It MUST
//# NOT be set to one on any other DDP Segment.
//= rfc5041#section-5.2
//# A zero-length DDP Message is allowed and MUST consume exactly one DDP
//# Segment.
pub fn segments(msg_len: u32, max_payload: u32) -> Segments {
    Segments {
        total: msg_len,
        max: max_payload.max(1),
        next: 0,
        done: false,
    }
}

impl Iterator for Segments {
    type Item = SegmentPlan;

    fn next(&mut self) -> Option<SegmentPlan> {
        if self.done {
            return None;
        }
        let remaining = self.total - self.next;
        let len = remaining.min(self.max);
        let plan = SegmentPlan {
            offset: self.next,
            len,
            last: len == remaining,
        };
        self.next += len;
        self.done = plan.last;
        Some(plan)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            return (0, Some(0));
        }
        let remaining = self.total - self.next;
        let n = (remaining.div_ceil(self.max)).max(1) as usize;
        (n, Some(n))
    }
}

impl SegmentPlan {
    /// The Tagged Offset of this segment for a message whose first octet is
    /// at `base_to`; `None` when it would wrap 2^64 (the sender must not
    /// produce such a segment: the receiver reports TO wrap).
    pub fn tagged_offset(&self, base_to: u64) -> Option<u64> {
        let to = base_to.checked_add(u64::from(self.offset))?;
        // The last octet must have a TO below 2^64.
        if u128::from(to) + u128::from(self.len) > 1u128 << 64 {
            return None;
        }
        Some(to)
    }
}

/// Remote access rights of a tagged buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u8);

impl Access {
    /// No remote access.
    pub const NONE: Access = Access(0);
    /// The peer may read (source of an RDMA Read).
    pub const REMOTE_READ: Access = Access(1);
    /// The peer may write (target of an RDMA Write or Read Response).
    pub const REMOTE_WRITE: Access = Access(2);

    /// True when every right of `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Union.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
}

/// What the local side knows about the buffer an STag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// The STag is currently valid (registered and not invalidated).
    pub valid: bool,
    /// The STag belongs to this stream (protection domain / QP).
    pub owned_by_stream: bool,
    /// Tagged Offset of the region's first octet.
    pub base_to: u64,
    /// Length of the region in octets.
    pub len: u64,
    /// Remote access rights granted.
    pub access: Access,
}

/// Which layer performs a tagged check, which decides the Terminate layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaggedCheck {
    /// DDP placement of an incoming tagged segment (RDMA Write, Read
    /// Response): DDP Tagged Buffer Errors.
    DdpPlacement,
    /// RDMAP validation of the Data Source of an incoming RDMA Read Request
    /// on the responder: RDMAP Remote Protection Errors.
    RdmapReadSource,
}

/// Checks a tagged access of `len` octets at `to` through `stag` against
/// the local region (`None` when the STag is unknown). Returns the offset
/// of `to` within the region.
///
/// Order: STag validity, stream ownership, TO wrap, bounds, access rights.
//= rfc5041#section-7.1
//# For non-zero-length Tagged DDP Segments, the segment MUST be
//# validated before Placement by verifying:
//#
//# 1.  The STag is valid for this stream.
//#
//# 2.  The STag has an associated buffer that allows Placement of the
//#     payload.
//#
//# 3.  The TO falls in the range of legal offsets registered for the
//#     STag.
//#
//# 4.  The sum of the DDP Segment payload length and the TO falls in the
//#     range of legal offsets registered for the STag.
//#
//# 5.  A 64-bit unsigned sum of the DDP Segment payload length and the
//#     TO does not wrap.
//= rfc5041#section-7.2
//# 0x1                  Tagged Buffer Error
//#          0x00        Invalid STag
//#          0x01        Base or bounds violation
//#          0x02        STag not associated with DDP Stream
//#          0x03        TO wrap
//= rfc5040#section-7.2
//# 4.  For non-zero length RDMA Read Request Messages:
//#
//#     a.  The Data Source STag MUST be valid.
//#
//#     b.  The Data Source STag MUST be associated to this RDMAP Stream.
//#
//#     c.  The Data Source Tagged Offset MUST fall in the range of legal
//#         offsets associated with the Data Source STag.
//#
//#     d.  The sum of the Data Source Tagged Offset and the RDMA Read
//#         Message Size MUST fall in the range of legal offsets
//#         associated with the Data Source STag.
//#
//#     e.  The sum of the Data Source Tagged Offset and the RDMA Read
//#         Message Size MUST NOT cause the Data Source Tagged Offset to
//#         wrap.
// RDMAP reports these as Remote Protection Errors (RFC 5040 §4.8,
// Figure 9): Invalid STag 0x00, Base or bounds violation 0x01, Access
// rights violation 0x02, STag not associated with RDMAP Stream 0x03, TO
// wrap 0x04.
pub fn check_tagged(
    to: u64,
    len: u64,
    region: Option<&RegionInfo>,
    need: Access,
    who: TaggedCheck,
) -> Result<u64, TerminateCode> {
    let ddp = who == TaggedCheck::DdpPlacement;
    let pick = |d: TerminateCode, r: TerminateCode| if ddp { d } else { r };
    let r = match region {
        Some(r) if r.valid => r,
        _ => {
            return Err(pick(
                TerminateCode::DDP_TAGGED_INVALID_STAG,
                TerminateCode::RDMAP_INVALID_STAG,
            ))
        }
    };
    if !r.owned_by_stream {
        return Err(pick(
            TerminateCode::DDP_TAGGED_STAG_NOT_ASSOCIATED,
            TerminateCode::RDMAP_STAG_NOT_ASSOCIATED,
        ));
    }
    // The segment wraps when its last octet would need a TO of 2^64 or more.
    let end = u128::from(to) + u128::from(len);
    if end > 1u128 << 64 {
        return Err(pick(
            TerminateCode::DDP_TAGGED_TO_WRAP,
            TerminateCode::RDMAP_TO_WRAP,
        ));
    }
    let region_end = u128::from(r.base_to) + u128::from(r.len);
    if to < r.base_to || end > region_end {
        return Err(pick(
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
            TerminateCode::RDMAP_BASE_BOUNDS,
        ));
    }
    // DDP defines no access-rights code; the violation is reported by RDMAP
    // (Linux siw does the same).
    if !r.access.contains(need) {
        return Err(TerminateCode::RDMAP_ACCESS_RIGHTS);
    }
    Ok(to - r.base_to)
}

/// The MSN of the first message on every untagged queue.
//= rfc5041#section-4.3
//# The Message Sequence Number specifies a sequence number that MUST
//# be increased by one (modulo 2^32) with each DDP Message targeting
//# the specific Queue Number on the DDP Stream associated with this
//# DDP Segment.  The initial value for MSN MUST be one.
pub const INITIAL_MSN: u32 = 1;

/// Where an untagged segment goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntaggedPlacement {
    /// Index of the posted buffer: 0 = the buffer of the expected MSN,
    /// 1 = the next one, …
    pub buffer_index: u32,
    /// Offset within that buffer (the MO).
    pub offset: u32,
}

/// Checks an untagged segment (`payload_len` octets) against the queue
/// state.
///
/// * `queue_valid(qn)`: whether the stream has queue `qn` (RDMAP: 0, 1, 2);
/// * `expected_msn`: the MSN of the oldest message not yet complete on that
///   queue;
/// * `buffer_len(i)`: the length of the `i`-th posted buffer counting from
///   the one for `expected_msn`, `None` if fewer than `i + 1` are posted.
///
/// The MSN window: `d = msn − expected_msn (mod 2^32)`; `d` below 2^31 is a
/// current or future message (no posted buffer → "no buffer available"),
/// otherwise the MSN names a message already completed ("MSN range is not
/// valid").
pub fn check_untagged(
    hdr: &UntaggedHeader,
    payload_len: u32,
    queue_valid: impl Fn(u32) -> bool,
    expected_msn: u32,
    buffer_len: impl Fn(u32) -> Option<u64>,
) -> Result<UntaggedPlacement, TerminateCode> {
    if !queue_valid(hdr.qn) {
        return Err(TerminateCode::DDP_UNTAGGED_INVALID_QN);
    }
    let d = hdr.msn.wrapping_sub(expected_msn);
    if d >= 1 << 31 {
        return Err(TerminateCode::DDP_UNTAGGED_MSN_RANGE);
    }
    let Some(blen) = buffer_len(d) else {
        return Err(TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    };
    if u64::from(hdr.mo) > blen {
        return Err(TerminateCode::DDP_UNTAGGED_INVALID_MO);
    }
    if u64::from(hdr.mo) + u64::from(payload_len) > blen {
        return Err(TerminateCode::DDP_UNTAGGED_TOO_LONG);
    }
    Ok(UntaggedPlacement {
        buffer_index: d,
        offset: hdr.mo,
    })
}

/// Checks that an untagged segment at `mo` continues its message: this
/// receiver places in order (TCP delivers the segments of a message in the
/// order the source posted them), so a segment must start exactly where the
/// message's placed data ends (`placed_end`; 0 for a new message), and no
/// segment may follow the one with L set (`placed_end` is `None` then).
/// Anything else — a first segment not at MO 0, a gap, an overlap, a
/// segment after the last — is Untagged Buffer Error 0x04 "Invalid MO", as
/// Linux siw answers it (`siw_send_check_ntoh`), also for a zero-length
/// segment: otherwise a lone last segment at MO n would complete an
/// n-octet message out of whatever the receive buffer held before.
//= rfc5041#section-5.4
//# At the Data Sink, DDP MUST Deliver a DDP Message if and only if all
//# of the following are true:
//#
//#    * the last DDP Segment of the DDP Message had its Last flag set,
//#
//#    * all of the DDP Segments of the DDP Message have been Placed,
//= rfc5041#section-4.1
//# For an Untagged DDP Message, the DDP Segment with the L bit set to 1 MUST
//# carry the highest MO.
//= rfc5041#section-7.2
//# 0x2                  Untagged Buffer Error
//#          0x01        Invalid QN
//#          0x02        Invalid MSN - no buffer available
//#          0x03        Invalid MSN - MSN range is not valid
//#          0x04        Invalid MO
#[inline]
pub fn check_continues(mo: u32, placed_end: Option<u64>) -> Result<(), TerminateCode> {
    if placed_end == Some(u64::from(mo)) {
        Ok(())
    } else {
        Err(TerminateCode::DDP_UNTAGGED_INVALID_MO)
    }
}

/// Per-queue MSN bookkeeping for a receiver (or sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsnCounter {
    next: u32,
}

impl Default for MsnCounter {
    fn default() -> Self {
        MsnCounter { next: INITIAL_MSN }
    }
}

impl MsnCounter {
    /// A counter at [`INITIAL_MSN`].
    pub const fn new() -> Self {
        MsnCounter { next: INITIAL_MSN }
    }

    /// The MSN of the current (receiver: oldest incomplete; sender: next)
    /// message.
    pub const fn current(&self) -> u32 {
        self.next
    }

    /// Moves past the current message (wrapping modulo 2^32).
    pub fn advance(&mut self) -> u32 {
        let cur = self.next;
        self.next = self.next.wrapping_add(1);
        cur
    }
}
