//! FPDU framing (RFC 5044 §4): the MPA full operation phase.
//!
//! ```text
//!  | ULPDU_Length (16) | ULPDU (ULPDU_Length octets) ...
//!  ... | PAD (0-3 octets, so that 2 + ULPDU_Length + PAD ≡ 0 mod 4) |
//!  | CRC (32, always present; the CRC-32C when negotiated, else 0) |
//! ```
//!
//! With Markers negotiated for a direction, the sender also inserts a
//! 4-octet Marker (`Reserved (16) | FPDUPTR (16)`) at every stream position
//! that is a multiple of 512, counting from the first octet of the first
//! FPDU sent after the MPA exchange. A Marker that falls where an FPDU
//! starts is placed first and belongs to that FPDU. Markers are covered by
//! the CRC and are not counted in ULPDU_Length.
//!
//! The receive path ([`FpduReceiver::poll`]) has three outcomes: a complete
//! FPDU ([`Received::Fpdu`], which gives the ULPDU as ranges of the
//! caller's buffer so the payload can be placed without an intermediate
//! copy), [`Received::NeedMore`], or a [`FramingError`] naming the
//! Terminate to send.

use core::fmt;
use core::ops::Range;

use crate::crc::{self, Crc32c};
use crate::{be16, need, EncodeError, TerminateCode};

/// Octets of the ULPDU_Length field.
pub const LENGTH_FIELD_LEN: usize = 2;
/// Octets of the CRC field.
pub const CRC_LEN: usize = 4;
/// Octets of a Marker.
pub const MARKER_LEN: usize = 4;
/// Marker spacing in the TCP stream.
//= rfc5044#section-4.3
//# When Markers are enabled, MPA senders MUST insert a Marker into the
//# data stream at a 512-octet periodic interval in the TCP Sequence
//# Number Space.
pub const MARKER_INTERVAL: u64 = 512;

/// The largest ULPDU a sender hands to MPA, and the top of the MULPDU
/// range (an FPDU of 64,776 octets without Markers). The receiver still
/// accepts any ULPDU_Length up to its own limit.
//= rfc5044#section-3
//# The range of MULPDU values MUST be
//# between 128 octets and 64768 octets, inclusive.
//= rfc5044#section-3
//# The sending DDP MUST NOT post a ULPDU larger than 64768 octets to
//# MPA.
pub const MULPDU_MAX: u16 = 64_768;

/// The bottom of the MULPDU range.
//= rfc5044#section-4.5
//# In certain rare situations, the EMSS may shrink below 128 octets in
//# size.  If this occurs, the MPA on TCP sender MUST NOT shrink the
//# MULPDU below 128 octets
pub const MULPDU_MIN: u16 = 128;

/// The MULPDU for a connection whose TCP sends segments of up to `emss`
/// octets: the RFC 5044 §4.5 formula (with or without room for Markers),
/// kept within [`MULPDU_MIN`]..=[`MULPDU_MAX`], so that one FPDU fits in
/// one segment wherever the EMSS allows it.
//= rfc5044#section-5.1
//# MPA transmitters SHOULD calculate a MULPDU as described in Section
//# 4.5.  If the TCP implementation allows EMSS to be determined by MPA,
//# that value should be used.
pub fn mulpdu_for_emss(emss: u32, markers: bool) -> u16 {
    let m = if markers {
        mulpdu(emss)
    } else {
        mulpdu_without_markers(emss)
    };
    m.unwrap_or(MULPDU_MIN).clamp(MULPDU_MIN, MULPDU_MAX)
}

/// The ULPDU_Length field of a ULPDU of `ulpdu_len` octets, or an error
/// above [`MULPDU_MAX`].
fn ulpdu_length_field(ulpdu_len: usize) -> Result<[u8; 2], EncodeError> {
    match u16::try_from(ulpdu_len) {
        Ok(n) if n <= MULPDU_MAX => Ok(n.to_be_bytes()),
        _ => Err(EncodeError::ValueOutOfRange("ULPDU_Length above 64768")),
    }
}

/// Octets of PAD for a ULPDU of `ulpdu_len` octets.
//= rfc5044#section-4.1
//# PAD: The PAD field trails the ULPDU and contains between 0 and 3
//# octets of data.  The pad data MUST be set to zero by the sender and
//# ignored by the receiver (except for CRC checking).  The length of the
//# pad is set so as to make the size of the FPDU an integral multiple of
//# four.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (LENGTH_FIELD_LEN + ulpdu_len) % 4) % 4
}

/// FPDU length without Markers: 2 + ULPDU + PAD + CRC.
pub const fn fpdu_len_without_markers(ulpdu_len: usize) -> usize {
    LENGTH_FIELD_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// MULPDU for an EMSS, by the RFC 5044 formula (which leaves room for the
/// worst-case number of Markers):
/// `MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) + EMSS mod 4)`.
/// Returns `None` when the EMSS is too small for any ULPDU; caps at 65535.
//= rfc5044#section-4.5
//# The maximum ULPDU Length for a single ULPDU when Markers are
//# present MUST be computed as:
//#
//# MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) + EMSS mod 4)
pub fn mulpdu(emss: u32) -> Option<u16> {
    let emss = u64::from(emss);
    let overhead = 6 + 4 * emss.div_ceil(512) + emss % 4;
    let m = emss.checked_sub(overhead)?;
    if m == 0 {
        return None;
    }
    Some(u16::try_from(m).unwrap_or(u16::MAX))
}

/// The exact largest ULPDU whose FPDU fits in `emss` octets when no Markers
/// are used: `floor4(EMSS - 4) - 2` (Linux siw on a 1500-octet MTU,
/// EMSS 1448, sends ULPDUs of 1442 octets).
//= rfc5044#section-4.5
//# The maximum ULPDU Length for a single ULPDU when Markers are NOT
//# present MUST be computed as:
//#
//# MULPDU = EMSS - (6 + EMSS mod 4)
// The same value: floor4(EMSS - 4) - 2 = 4 * floor(EMSS / 4) - 6.
pub fn mulpdu_without_markers(emss: u32) -> Option<u16> {
    let room = u64::from(emss).checked_sub(CRC_LEN as u64)? & !3;
    let m = room.checked_sub(LENGTH_FIELD_LEN as u64)?;
    if m == 0 {
        return None;
    }
    Some(u16::try_from(m).unwrap_or(u16::MAX))
}

/// What MPA negotiated for one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FramingConfig {
    /// Generate (sender) / check (receiver) the CRC.
    pub crc: bool,
    /// Insert (sender) / expect and strip (receiver) Markers.
    pub markers: bool,
}

/// Wire octets needed to carry `logical` FPDU octets starting at stream
/// position `start`, Markers included.
fn wire_len(start: u64, logical: usize, markers: bool) -> usize {
    if !markers {
        return logical;
    }
    let mut pos = start;
    let mut rem = logical;
    let mut w = 0usize;
    while rem > 0 {
        if pos.is_multiple_of(MARKER_INTERVAL) {
            pos += MARKER_LEN as u64;
            w += MARKER_LEN;
        }
        let room = (MARKER_INTERVAL - pos % MARKER_INTERVAL) as usize;
        let c = room.min(rem);
        pos += c as u64;
        w += c;
        rem -= c;
    }
    w
}

/// The sending half of FPDU framing.
#[derive(Clone, Debug)]
pub struct FpduSender {
    cfg: FramingConfig,
    pos: u64,
}

/// Header and trailer of an FPDU whose ULPDU the caller sends from its own
/// buffers (gather I/O, markers off): send `header`, the ULPDU, then
/// `trailer[..trailer_len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramedParts {
    /// ULPDU_Length.
    pub header: [u8; 2],
    /// PAD followed by CRC.
    pub trailer: [u8; 7],
    /// Octets of `trailer` to send (4 to 7).
    pub trailer_len: usize,
}

struct MarkerWriter<'a> {
    out: &'a mut [u8],
    w: usize,
    pos: u64,
    fpdu_start: u64,
    markers: bool,
}

impl MarkerWriter<'_> {
    fn marker_if_due(&mut self) -> Result<(), EncodeError> {
        if self.markers && self.pos.is_multiple_of(MARKER_INTERVAL) {
            let ptr = u16::try_from(self.pos - self.fpdu_start)
                .map_err(|_| EncodeError::ValueOutOfRange("MPA FPDUPTR"))?;
            let [a, b] = ptr.to_be_bytes();
            self.out[self.w..self.w + 4].copy_from_slice(&[0, 0, a, b]);
            self.w += 4;
            self.pos += 4;
        }
        Ok(())
    }

    fn put(&mut self, mut data: &[u8]) -> Result<(), EncodeError> {
        while !data.is_empty() {
            self.marker_if_due()?;
            let room = if self.markers {
                (MARKER_INTERVAL - self.pos % MARKER_INTERVAL) as usize
            } else {
                data.len()
            };
            let c = room.min(data.len());
            self.out[self.w..self.w + c].copy_from_slice(&data[..c]);
            self.w += c;
            self.pos += c as u64;
            data = &data[c..];
        }
        Ok(())
    }
}

impl FpduSender {
    /// A sender at the start of the FPDU stream.
    pub fn new(cfg: FramingConfig) -> Self {
        FpduSender { cfg, pos: 0 }
    }

    /// The configuration.
    pub fn config(&self) -> FramingConfig {
        self.cfg
    }

    /// Octets sent so far in the FPDU stream (Markers included).
    pub fn stream_position(&self) -> u64 {
        self.pos
    }

    /// Exact wire length of the next FPDU carrying `ulpdu_len` octets
    /// (depends on the stream position when Markers are on).
    pub fn fpdu_wire_len(&self, ulpdu_len: usize) -> usize {
        wire_len(
            self.pos,
            fpdu_len_without_markers(ulpdu_len),
            self.cfg.markers,
        )
    }

    /// Frames the ULPDU made of `parts` (concatenated) into `out`, inserting
    /// Markers and the CRC as configured. Returns the octets written
    /// ([`FpduSender::fpdu_wire_len`]).
    pub fn write_fpdu(&mut self, parts: &[&[u8]], out: &mut [u8]) -> Result<usize, EncodeError> {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        let len_field = ulpdu_length_field(ulpdu_len)?;
        let total = self.fpdu_wire_len(ulpdu_len);
        need(out, total)?;
        let mut w = MarkerWriter {
            out,
            w: 0,
            pos: self.pos,
            fpdu_start: self.pos,
            markers: self.cfg.markers,
        };
        w.put(&len_field)?;
        for p in parts {
            w.put(p)?;
        }
        w.put(&[0u8; 3][..pad_len(ulpdu_len)])?;
        // A Marker due right before the CRC field belongs to this FPDU and
        // is covered by its CRC.
        w.marker_if_due()?;
        let crc_val = if self.cfg.crc {
            crc::crc32c(&w.out[..w.w])
        } else {
            0
        };
        let wr = w.w;
        w.out[wr..wr + 4].copy_from_slice(&crc::to_wire(crc_val));
        w.w += 4;
        w.pos += 4;
        debug_assert_eq!(w.w, total);
        self.pos = w.pos;
        Ok(total)
    }

    /// Frames into a new vector.
    pub fn fpdu_to_vec(&mut self, parts: &[&[u8]]) -> Result<Vec<u8>, EncodeError> {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        let mut v = vec![0u8; self.fpdu_wire_len(ulpdu_len)];
        let n = self.write_fpdu(parts, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// For gather I/O without Markers: computes the ULPDU_Length field and
    /// the PAD + CRC trailer of an FPDU whose ULPDU is `parts`, and advances
    /// the stream position. Errors if Markers are on.
    pub fn frame_parts(&mut self, parts: &[&[u8]]) -> Result<FramedParts, EncodeError> {
        if self.cfg.markers {
            return Err(EncodeError::ValueOutOfRange("frame_parts with markers"));
        }
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        let header = ulpdu_length_field(ulpdu_len)?;
        let pad = pad_len(ulpdu_len);
        let mut trailer = [0u8; 7];
        let crc_val = if self.cfg.crc {
            let mut c = Crc32c::new().update(&header);
            for p in parts {
                c = c.update(p);
            }
            c.update(&[0u8; 3][..pad]).value()
        } else {
            0
        };
        trailer[pad..pad + 4].copy_from_slice(&crc::to_wire(crc_val));
        self.pos += fpdu_len_without_markers(ulpdu_len) as u64;
        Ok(FramedParts {
            header,
            trailer,
            trailer_len: pad + 4,
        })
    }
}

impl FpduSender {
    /// For a staging buffer without Markers, framing in place:
    /// `out[start..]` holds two octets reserved for ULPDU_Length followed
    /// by the ULPDU. Writes ULPDU_Length, appends PAD and CRC (one CRC
    /// computation over the contiguous octets), advances the stream
    /// position and returns the FPDU length. The same octets as
    /// [`FpduSender::write_fpdu`]. Errors (with `out` unchanged) if Markers
    /// are on, `out` is shorter than `start + 2`, or the ULPDU is longer
    /// than [`MULPDU_MAX`] octets.
    pub fn frame_in_place(
        &mut self,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<usize, EncodeError> {
        if self.cfg.markers {
            return Err(EncodeError::ValueOutOfRange("frame_in_place with markers"));
        }
        let ulpdu_len = out
            .len()
            .checked_sub(start)
            .and_then(|n| n.checked_sub(LENGTH_FIELD_LEN))
            .ok_or(EncodeError::ValueOutOfRange("frame_in_place start"))?;
        let len_field = ulpdu_length_field(ulpdu_len)?;
        let pad = pad_len(ulpdu_len);
        let fpdu = out
            .get_mut(start..)
            .ok_or(EncodeError::ValueOutOfRange("frame_in_place start"))?;
        fpdu[..LENGTH_FIELD_LEN].copy_from_slice(&len_field);
        out.extend_from_slice(&[0u8; 3][..pad]);
        let crc_val = if self.cfg.crc {
            Crc32c::new().update(&out[start..]).value()
        } else {
            0
        };
        out.extend_from_slice(&crc::to_wire(crc_val));
        let total = fpdu_len_without_markers(ulpdu_len);
        self.pos += total as u64;
        Ok(total)
    }
}

/// A corrupt FPDU stream. The connection must be terminated: send the
/// Terminate named by [`FramingError::terminate_code`], then close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// The CRC field does not match the CRC-32C of the FPDU.
    BadCrc {
        /// The CRC computed over the received octets.
        computed: u32,
        /// The CRC the FPDU carried.
        received: u32,
    },
    /// A Marker's FPDUPTR does not point at the start of the FPDU it is in.
    BadMarker {
        /// Stream position of the Marker.
        position: u64,
        /// Its FPDUPTR.
        fpduptr: u16,
    },
    /// ULPDU_Length exceeds the receiver's limit.
    BadLength {
        /// The announced ULPDU_Length.
        len: u16,
        /// The limit.
        max: u16,
    },
}

impl FramingError {
    /// The Terminate code (layer LLP, error type MPA).
    //= rfc5044#section-8
    //# The following errors MUST be detected by MPA and the codes SHOULD be
    //# provided to DDP or other Consumer:
    //#
    //# Code Error
    //#
    //# 1   TCP connection closed, terminated, or lost.  This includes lost
    //#     by timeout, too many retries, RST received, or FIN received.
    //#
    //# 2   Received MPA CRC does not match the calculated value for the
    //#     FPDU.
    //#
    //# 3   In the event that the CRC is valid, received MPA Marker (if
    //#     enabled) and ULPDU Length fields do not agree on the start of an
    //#     FPDU.
    // A ULPDU_Length above the receiver's limit has no code of its own; this
    // crate reports it with code 3 (the length does not delimit a valid
    // FPDU).
    pub const fn terminate_code(&self) -> TerminateCode {
        match self {
            FramingError::BadCrc { .. } => TerminateCode::MPA_CRC,
            FramingError::BadMarker { .. } | FramingError::BadLength { .. } => {
                TerminateCode::MPA_MARKER
            }
        }
    }
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::BadCrc { computed, received } => {
                write!(
                    f,
                    "MPA CRC mismatch: computed {computed:#010x}, received {received:#010x}"
                )
            }
            FramingError::BadMarker { position, fpduptr } => {
                write!(
                    f,
                    "MPA marker at stream position {position} has bad FPDUPTR {fpduptr}"
                )
            }
            FramingError::BadLength { len, max } => {
                write!(f, "ULPDU_Length {len} exceeds {max}")
            }
        }
    }
}

impl std::error::Error for FramingError {}

/// The wire ranges of a ULPDU within the receive buffer (one range without
/// Markers; the pieces between Markers otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UlpduRanges {
    wire_off: usize,
    stream: u64,
    remaining: usize,
    markers: bool,
}

impl Iterator for UlpduRanges {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.remaining == 0 {
            return None;
        }
        if self.markers && self.stream.is_multiple_of(MARKER_INTERVAL) {
            self.wire_off += MARKER_LEN;
            self.stream += MARKER_LEN as u64;
        }
        let c = if self.markers {
            ((MARKER_INTERVAL - self.stream % MARKER_INTERVAL) as usize).min(self.remaining)
        } else {
            self.remaining
        };
        let r = self.wire_off..self.wire_off + c;
        self.wire_off += c;
        self.stream += c as u64;
        self.remaining -= c;
        Some(r)
    }
}

/// A complete, verified FPDU at the start of the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fpdu {
    /// Wire octets of this FPDU (Markers, PAD and CRC included). The caller
    /// drops them from the front of its buffer before the next
    /// [`FpduReceiver::poll`].
    pub consumed: usize,
    /// ULPDU_Length.
    pub ulpdu_len: u16,
    ranges: UlpduRanges,
}

impl Fpdu {
    /// The ULPDU's pieces as ranges of the buffer given to `poll`.
    pub fn ulpdu_ranges(&self) -> UlpduRanges {
        self.ranges
    }

    /// The ULPDU's pieces after its first `skip` octets (e.g. the payload
    /// after a DDP/RDMAP header of `skip` octets), as ranges of the buffer
    /// given to `poll`: the source of a direct placement.
    pub fn payload_ranges(&self, skip: usize) -> UlpduRanges {
        let mut r = self.ranges;
        let mut n = skip.min(r.remaining);
        while n > 0 {
            if r.markers && r.stream.is_multiple_of(MARKER_INTERVAL) {
                r.wire_off += MARKER_LEN;
                r.stream += MARKER_LEN as u64;
            }
            let room = if r.markers {
                (MARKER_INTERVAL - r.stream % MARKER_INTERVAL) as usize
            } else {
                n
            };
            let c = room.min(n);
            r.wire_off += c;
            r.stream += c as u64;
            r.remaining -= c;
            n -= c;
        }
        r
    }

    /// The ULPDU's range when it is contiguous (always without Markers).
    pub fn ulpdu_contiguous(&self) -> Option<Range<usize>> {
        let mut it = self.ranges;
        let first = it
            .next()
            .unwrap_or(self.ranges.wire_off..self.ranges.wire_off);
        if it.next().is_some() {
            None
        } else {
            Some(first)
        }
    }

    /// Copies up to `out.len()` leading ULPDU octets from `buf` (the buffer
    /// given to `poll`) into `out`, skipping Markers; returns the count.
    /// Use it to read a DDP header that a Marker may split.
    pub fn copy_prefix(&self, buf: &[u8], out: &mut [u8]) -> usize {
        let mut n = 0;
        for r in self.ranges {
            if n == out.len() {
                break;
            }
            let Some(src) = buf.get(r) else { break };
            let c = src.len().min(out.len() - n);
            out[n..n + c].copy_from_slice(&src[..c]);
            n += c;
        }
        n
    }

    /// Appends the whole ULPDU to `out`.
    pub fn extend_ulpdu(&self, buf: &[u8], out: &mut Vec<u8>) {
        for r in self.ranges {
            if let Some(src) = buf.get(r) {
                out.extend_from_slice(src);
            }
        }
    }
}

/// Outcome of [`FpduReceiver::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A complete FPDU is at the start of the buffer.
    Fpdu(Fpdu),
    /// At least this many more octets are needed.
    NeedMore(usize),
}

/// The receiving half of FPDU framing.
#[derive(Clone, Debug)]
pub struct FpduReceiver {
    cfg: FramingConfig,
    pos: u64,
    max_ulpdu: u16,
}

impl FpduReceiver {
    /// A receiver at the start of the FPDU stream accepting ULPDUs up to
    /// 65535 octets.
    pub fn new(cfg: FramingConfig) -> Self {
        FpduReceiver {
            cfg,
            pos: 0,
            max_ulpdu: u16::MAX,
        }
    }

    /// Sets the largest ULPDU_Length accepted (a larger one is a framing
    /// error, so a peer cannot make us buffer more than we planned for).
    #[must_use]
    pub fn with_max_ulpdu(mut self, max: u16) -> Self {
        self.max_ulpdu = max;
        self
    }

    /// The configuration.
    pub fn config(&self) -> FramingConfig {
        self.cfg
    }

    /// Stream position of the next octet `poll` expects.
    pub fn stream_position(&self) -> u64 {
        self.pos
    }

    /// Examines the unconsumed received octets `buf` (starting at the
    /// receiver's stream position). On [`Received::Fpdu`] the receiver
    /// advances past that FPDU and the caller must drop `consumed` octets
    /// from the front of its buffer before polling again. On an error the
    /// stream is dead.
    //= rfc5044#section-4.4
    //# When an FPDU is received, and CRC checking is enabled, the receiver
    //# MUST first perform the following:
    //#
    //# 1)  Calculate the CRC of the incoming FPDU in the same fashion as
    //#     defined above.
    //#
    //# 2)  Verify that the calculated CRC-32c value is the same as the
    //#     received CRC-32c value found in the FPDU CRC field.  If not, the
    //#     receiver MUST treat the FPDU as an invalid FPDU.
    //= rfc5044#section-8
    //# Once MPA delivers an error of any type, it MUST NOT pass or deliver
    //# any additional FPDUs on that half connection.
    pub fn poll(&mut self, buf: &[u8]) -> Result<Received, FramingError> {
        let markers = self.cfg.markers;
        let lead = if markers && self.pos.is_multiple_of(MARKER_INTERVAL) {
            MARKER_LEN
        } else {
            0
        };
        let Some(len) = be16(buf, lead) else {
            return Ok(Received::NeedMore(lead + LENGTH_FIELD_LEN - buf.len()));
        };
        if len > self.max_ulpdu {
            return Err(FramingError::BadLength {
                len,
                max: self.max_ulpdu,
            });
        }
        let ulpdu_len = usize::from(len);
        let total = wire_len(self.pos, fpdu_len_without_markers(ulpdu_len), markers);
        if buf.len() < total {
            return Ok(Received::NeedMore(total - buf.len()));
        }
        if markers {
            self.check_markers(buf, total, lead)?;
        }
        let crc_at = total - CRC_LEN;
        if self.cfg.crc {
            let received = crc::from_wire([
                buf[crc_at],
                buf[crc_at + 1],
                buf[crc_at + 2],
                buf[crc_at + 3],
            ]);
            let computed = crc::crc32c(&buf[..crc_at]);
            if received != computed {
                return Err(FramingError::BadCrc { computed, received });
            }
        }
        let ranges = UlpduRanges {
            wire_off: lead + LENGTH_FIELD_LEN,
            stream: self.pos + (lead + LENGTH_FIELD_LEN) as u64,
            remaining: ulpdu_len,
            markers,
        };
        self.pos += total as u64;
        Ok(Received::Fpdu(Fpdu {
            consumed: total,
            ulpdu_len: len,
            ranges,
        }))
    }

    /// Every Marker inside the FPDU must point back at its start: either at
    /// the first octet of the FPDU (a leading Marker, which points at itself
    /// with FPDUPTR 0, as this crate's sender does) or at the ULPDU_Length
    /// field after a leading Marker (the other reading of RFC 5044 §4.2).
    //= rfc5044#section-4.2
    //# FPDUPTR: The FPDU Pointer is a relative pointer, 16 bits long,
    //# interpreted as an unsigned integer that indicates the number of
    //# octets in the TCP stream from the beginning of the ULPDU Length field
    //# to the first octet of the entire Marker.
    //= rfc5044#section-4.3
    //# If an FPDU is large enough to contain multiple Markers, they MUST all
    //# point to the same point in the TCP stream: the first octet of the
    //# ULPDU Length field for the FPDU.
    fn check_markers(&self, buf: &[u8], total: usize, lead: usize) -> Result<(), FramingError> {
        let start = self.pos;
        let end = start + total as u64;
        let mut p = start.div_ceil(MARKER_INTERVAL) * MARKER_INTERVAL;
        while p < end {
            let off = (p - start) as usize;
            let ptr = be16(buf, off + 2).unwrap_or(u16::MAX);
            let target = p.checked_sub(u64::from(ptr));
            let ok = target == Some(start) || (lead > 0 && target == Some(start + lead as u64));
            if !ok {
                return Err(FramingError::BadMarker {
                    position: p,
                    fpduptr: ptr,
                });
            }
            p += MARKER_INTERVAL;
        }
        Ok(())
    }
}
