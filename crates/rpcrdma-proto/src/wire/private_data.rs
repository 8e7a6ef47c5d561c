//! RFC 8797 RDMA-CM private data for RPC-over-RDMA version 1.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                  Format Identifier (0xf6ab0e18)               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Reserved   |R|   Send Size   | Receive Size  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The R bit is the last bit of the flags octet (value `0x01`, Linux
//! `RPCRDMA_CMP_F_SND_W_INV_OK = BIT(0)`). A size octet `c` stands for
//! `(c + 1) * 1024` octets, so 1 KiB to 256 KiB can be advertised.
//!
//! What is here:
//!
//! * [`InlineSize`]: one size octet, valid by construction. Building one
//!   from a byte count that is not a multiple of 1024 or lies outside
//!   1 KiB..=256 KiB is refused ([`InlineSize::from_bytes`]: the caller's
//!   error); [`InlineSize::from_bytes_round_down`] is the lenient
//!   alternative (round down, cap at 256 KiB), which never advertises more
//!   than the caller can handle;
//! * [`PrivateData`]: the 8-octet version 1 message (encode, Display);
//! * [`PeerPrivateData::find`]: the receive side, which searches a whole
//!   private-data buffer for the format identifier (an iWARP MPA v2 peer puts
//!   the 4-octet RFC 6581 IRD/ORD header in front of it), never fails, and
//!   falls back to the RFC 8166 defaults;
//! * [`MpaIrdOrd`]: the RFC 6581 IRD/ORD header, for display;
//! * [`negotiate`]: the RFC 8797 rules that turn both peers' values into the
//!   connection's inline thresholds and the remote-invalidation decision.

use core::fmt;

use crate::xdr::{EncodeError, Writer, XdrEncode};

/// The RPC-over-RDMA version 1 CM private data format identifier.
//= rfc8797#section-4
//# In RPC-over-RDMA
//# version 1 Private Data, the value of this field is always
//# 0xf6ab0e18, in network byte order.
pub const FORMAT_IDENTIFIER: u32 = 0xf6ab_0e18;

/// The message format version this module understands.
pub const VERSION_1: u8 = 1;

/// Encoded size of a version 1 message.
//= rfc8797#section-4
//# The value "1" in this field indicates that exactly eight octets
//# are present, that they appear in the order described in this
//# section, and that each has the meaning defined in this section.
pub const PRIVATE_DATA_LEN: usize = 8;

/// The R bit in the flags octet: the sender supports remote invalidation.
pub const FLAG_REMOTE_INVALIDATE: u8 = 0x01;

/// The RFC 8166 default inline threshold, which applies in both directions
/// when the peer sends no (recognised) private data.
pub const DEFAULT_INLINE_THRESHOLD: u32 = 1024;

/// Why a byte count cannot be advertised as an [`InlineSize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InlineSizeError {
    /// Below 1024 octets, the RFC 8166 minimum inline threshold.
    TooSmall(u32),
    /// Above 262144 octets (256 KiB), the largest encodable size.
    TooLarge(u32),
    /// Not a multiple of 1024.
    NotMultiple(u32),
}

impl fmt::Display for InlineSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InlineSizeError::TooSmall(b) => write!(f, "inline size {b} is below 1024 octets"),
            InlineSizeError::TooLarge(b) => {
                write!(f, "inline size {b} is above 262144 octets (256 KiB)")
            }
            InlineSizeError::NotMultiple(b) => {
                write!(f, "inline size {b} is not a multiple of 1024")
            }
        }
    }
}

impl std::error::Error for InlineSizeError {}

/// An inline threshold as carried in the Send Size / Receive Size octets:
/// `(code + 1) * 1024` octets. Every value of the octet is valid, so every
/// `InlineSize` is too.
//= rfc8797#section-4.2
//# Thus, a sender
//# computes the encoded value by dividing its actual buffer size, in
//# octets, by 1024 and subtracting one from the result.  A receiver
//# decodes an incoming Size value by performing the inverse set of
//# operations: it adds one to the encoded value and then multiplies that
//# result by 1024.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InlineSize(u8);

impl InlineSize {
    /// 1024 octets (code 0), the RFC 8166 default.
    pub const DEFAULT: InlineSize = InlineSize(0);
    /// 1024 octets, the smallest encodable size.
    pub const MIN: InlineSize = InlineSize(0);
    /// 262144 octets (code 255), the largest encodable size.
    pub const MAX: InlineSize = InlineSize(255);

    /// The size whose octet is `code`.
    pub const fn from_code(code: u8) -> Self {
        InlineSize(code)
    }

    /// The octet that goes on the wire.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The size in octets: `(code + 1) * 1024`.
    pub const fn bytes(self) -> u32 {
        (self.0 as u32 + 1) * 1024
    }

    /// Exactly `bytes` octets. A size that is not a multiple of 1024 or lies
    /// outside 1 KiB..=256 KiB is refused: it is the caller's error.
    pub const fn from_bytes(bytes: u32) -> Result<Self, InlineSizeError> {
        if bytes < 1024 {
            return Err(InlineSizeError::TooSmall(bytes));
        }
        if bytes > 262_144 {
            return Err(InlineSizeError::TooLarge(bytes));
        }
        if !bytes.is_multiple_of(1024) {
            return Err(InlineSizeError::NotMultiple(bytes));
        }
        Ok(InlineSize((bytes / 1024 - 1) as u8))
    }

    /// The largest encodable size that is not above `bytes`: rounds down to
    /// a multiple of 1024 and caps at 256 KiB. Advertising less than one can
    /// handle is always safe. Only a size below 1024 is refused (RFC 8166
    /// requires at least 1024).
    pub const fn from_bytes_round_down(bytes: u32) -> Result<Self, InlineSizeError> {
        if bytes < 1024 {
            return Err(InlineSizeError::TooSmall(bytes));
        }
        if bytes >= 262_144 {
            return Ok(InlineSize::MAX);
        }
        Ok(InlineSize((bytes / 1024 - 1) as u8))
    }
}

impl Default for InlineSize {
    fn default() -> Self {
        InlineSize::DEFAULT
    }
}

impl fmt::Display for InlineSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.bytes(), self.0)
    }
}

/// A version 1 RFC 8797 private data message (the 8 octets that start with
/// the format identifier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrivateData {
    /// The whole flags octet as sent. Bit 0 is R ([`FLAG_REMOTE_INVALIDATE`]);
    /// the other 7 bits are reserved. They are kept so that a decoded
    /// message re-encodes to the same octets, but they mean nothing.
    //= rfc8797#section-4
    //# Senders MUST set these bits
    //# to zero, and receivers MUST ignore their value.
    pub flags: u8,
    /// The largest message this peer will transmit in one RDMA Send.
    pub send_size: InlineSize,
    /// The largest message this peer can receive in one RDMA Receive.
    pub receive_size: InlineSize,
}

impl PrivateData {
    /// What to assume about a peer that sent no (recognised) private data.
    //= rfc8797#section-5.1
    //# In other words, the peer MUST behave as if a Private Data message was
    //# received in which (1) bit 15 of the Flags field is zero and (2) both
    //# Size fields contain the value zero.
    pub const DEFAULT: PrivateData = PrivateData {
        flags: 0,
        send_size: InlineSize::DEFAULT,
        receive_size: InlineSize::DEFAULT,
    };

    /// A message with the reserved bits zero, as a sender must produce.
    pub const fn new(
        send_size: InlineSize,
        receive_size: InlineSize,
        remote_invalidate: bool,
    ) -> Self {
        PrivateData {
            flags: if remote_invalidate {
                FLAG_REMOTE_INVALIDATE
            } else {
                0
            },
            send_size,
            receive_size,
        }
    }

    /// The R bit: the sender supports remote invalidation (reserved bits
    /// are ignored).
    pub const fn remote_invalidate(&self) -> bool {
        self.flags & FLAG_REMOTE_INVALIDATE != 0
    }

    /// The reserved flag bits (zero from a conforming sender).
    pub const fn reserved_flags(&self) -> u8 {
        self.flags & !FLAG_REMOTE_INVALIDATE
    }

    /// The 8 octets on the wire.
    pub const fn to_bytes(&self) -> [u8; PRIVATE_DATA_LEN] {
        let m = FORMAT_IDENTIFIER.to_be_bytes();
        [
            m[0],
            m[1],
            m[2],
            m[3],
            VERSION_1,
            self.flags,
            self.send_size.code(),
            self.receive_size.code(),
        ]
    }

    /// Parses exactly one version 1 message at the start of `buf` (format
    /// identifier included). `None` unless `buf` holds at least 8 octets that
    /// start with the identifier and version 1. Octets after the eighth are
    /// not looked at.
    pub fn parse_v1(buf: &[u8]) -> Option<PrivateData> {
        match buf.get(..PRIVATE_DATA_LEN)? {
            [m0, m1, m2, m3, VERSION_1, flags, send, recv]
                if u32::from_be_bytes([*m0, *m1, *m2, *m3]) == FORMAT_IDENTIFIER =>
            {
                Some(PrivateData {
                    flags: *flags,
                    send_size: InlineSize(*send),
                    receive_size: InlineSize(*recv),
                })
            }
            _ => None,
        }
    }
}

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData::DEFAULT
    }
}

impl XdrEncode for PrivateData {
    fn encoded_len(&self) -> usize {
        PRIVATE_DATA_LEN
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.raw(&self.to_bytes())
    }
}

impl fmt::Display for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "RPC-over-RDMA v1 CM private data (RFC 8797)")?;
        writeln!(f, "  format identifier: 0x{FORMAT_IDENTIFIER:08x}")?;
        writeln!(f, "  version: {VERSION_1}")?;
        write!(f, "  flags: 0x{:02x}", self.flags)?;
        if self.remote_invalidate() {
            write!(f, " (R: remote invalidation supported)")?;
        } else {
            write!(f, " (R clear: no remote invalidation)")?;
        }
        if self.reserved_flags() != 0 {
            write!(
                f,
                " [reserved bits 0x{:02x} ignored]",
                self.reserved_flags()
            )?;
        }
        writeln!(f)?;
        writeln!(f, "  send size: {}", self.send_size)?;
        writeln!(f, "  receive size: {}", self.receive_size)
    }
}

/// The RFC 6581 "enhanced connection establishment" header that an MPA
/// revision 2 peer puts in the first 4 octets of its private data:
///
/// ```text
/// |P|Z|          IRD (14)         |W|R|          ORD (14)         |
/// ```
///
/// `P` = peer-to-peer model, `Z` = zero-length Send as RTR (IRD word);
/// `W` / `R` = zero-length RDMA Write / Read as RTR (ORD word). Names as in
/// Linux `enum mpa_v2_ctrl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MpaIrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// Bit 15 of the IRD word: peer-to-peer connection model.
    pub peer_to_peer: bool,
    /// Bit 14 of the IRD word: zero-length Send RTR.
    pub zero_length_rtr: bool,
    /// Bit 15 of the ORD word: zero-length RDMA Write RTR.
    pub rdma_write_rtr: bool,
    /// Bit 14 of the ORD word: zero-length RDMA Read RTR.
    pub rdma_read_rtr: bool,
}

impl MpaIrdOrd {
    /// Decodes the first 4 octets of `buf`; `None` if it is shorter.
    pub fn decode(buf: &[u8]) -> Option<MpaIrdOrd> {
        let b = buf.get(..4)?;
        let ird = u16::from_be_bytes([*b.first()?, *b.get(1)?]);
        let ord = u16::from_be_bytes([*b.get(2)?, *b.get(3)?]);
        Some(MpaIrdOrd {
            ird: ird & 0x3fff,
            ord: ord & 0x3fff,
            peer_to_peer: ird & 0x8000 != 0,
            zero_length_rtr: ird & 0x4000 != 0,
            rdma_write_rtr: ord & 0x8000 != 0,
            rdma_read_rtr: ord & 0x4000 != 0,
        })
    }
}

impl fmt::Display for MpaIrdOrd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MPA v2 (RFC 6581) IRD {} ORD {}", self.ird, self.ord)?;
        for (set, name) in [
            (self.peer_to_peer, "peer-to-peer"),
            (self.zero_length_rtr, "zero-length-send-RTR"),
            (self.rdma_write_rtr, "RDMA-Write-RTR"),
            (self.rdma_read_rtr, "RDMA-Read-RTR"),
        ] {
            if set {
                write!(f, " {name}")?;
            }
        }
        Ok(())
    }
}

/// What a received private-data buffer says about the peer. Never an error:
/// anything that is not usable version 1 private data means "use the
/// defaults".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerPrivateData {
    /// Version 1 private data starting (format identifier included) at
    /// `offset` octets into the buffer.
    Found {
        /// Offset of the format identifier.
        offset: usize,
        /// The decoded message.
        data: PrivateData,
    },
    /// The format identifier is at `offset`, but what follows is not a
    /// version 1 message: an unknown version, or fewer than 8 octets.
    Unrecognized {
        /// Offset of the (first) format identifier.
        offset: usize,
        /// The version octet, if the buffer holds it.
        version: Option<u8>,
    },
    /// No format identifier anywhere in the buffer.
    Absent,
}

impl PeerPrivateData {
    /// Searches `buf` (the whole private data the CM or MPA delivered) for
    /// the format identifier at every octet offset.
    ///
    /// The first occurrence followed by a complete version 1 message wins.
    /// If there is none, the first occurrence is reported as
    /// [`PeerPrivateData::Unrecognized`]. (Taking the first *recognised*
    /// occurrence rather than the first occurrence means that bytes of
    /// another layer's header that happen to equal the identifier, e.g. an
    /// MPA v2 IRD/ORD word, cannot hide the real message behind them.)
    //= rfc8797#section-5.2
    //# As part of connection establishment, the buffer containing the
    //# received Private Data is searched for the Format Identifier word.
    //# The offset of the Format Identifier is not restricted to any
    //# alignment.
    //= rfc8797#section-5.2
    //# As additional assurance that the content
    //# is valid RPC-over-RDMA version 1 CM Private Data, the receiver should
    //# check that the format version number field contains a valid and
    //# recognized version number and the size of the content does not
    //# overrun the length of the buffer.
    pub fn find(buf: &[u8]) -> PeerPrivateData {
        let magic = FORMAT_IDENTIFIER.to_be_bytes();
        let mut first: Option<usize> = None;
        for (offset, w) in buf.windows(4).enumerate() {
            if w != magic {
                continue;
            }
            let rest = buf.get(offset..).unwrap_or(&[]);
            if let Some(data) = PrivateData::parse_v1(rest) {
                return PeerPrivateData::Found { offset, data };
            }
            first.get_or_insert(offset);
        }
        match first {
            Some(offset) => PeerPrivateData::Unrecognized {
                offset,
                version: offset.checked_add(4).and_then(|i| buf.get(i)).copied(),
            },
            //= rfc8797#section-5.2
            //# If the RPC-over-RDMA version 1 CM Private Data Format
            //# Identifier is not present, an RPC-over-RDMA version 1 receiver MUST
            //# behave as if no RPC-over-RDMA version 1 CM Private Data has been
            //# provided.
            None => PeerPrivateData::Absent,
        }
    }

    /// The decoded message, if usable version 1 private data was found.
    pub fn data(&self) -> Option<&PrivateData> {
        match self {
            PeerPrivateData::Found { data, .. } => Some(data),
            _ => None,
        }
    }

    /// True when usable version 1 private data was found.
    pub fn is_found(&self) -> bool {
        matches!(self, PeerPrivateData::Found { .. })
    }

    /// Offset of the format identifier, if there is one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            PeerPrivateData::Found { offset, .. }
            | PeerPrivateData::Unrecognized { offset, .. } => Some(*offset),
            PeerPrivateData::Absent => None,
        }
    }

    /// The version octet behind the format identifier, if there is one.
    pub fn version(&self) -> Option<u8> {
        match self {
            PeerPrivateData::Found { .. } => Some(VERSION_1),
            PeerPrivateData::Unrecognized { version, .. } => *version,
            PeerPrivateData::Absent => None,
        }
    }

    /// The values that apply to the peer: the message if one was found,
    /// otherwise [`PrivateData::DEFAULT`] (1024/1024, no remote
    /// invalidation).
    pub fn effective(&self) -> PrivateData {
        self.data().copied().unwrap_or(PrivateData::DEFAULT)
    }
}

impl fmt::Display for PeerPrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerPrivateData::Found { offset, data } => {
                writeln!(f, "found at offset {offset}")?;
                write!(f, "{data}")
            }
            PeerPrivateData::Unrecognized { offset, version } => {
                match version {
                    Some(v) => writeln!(
                        f,
                        "format identifier at offset {offset}, unrecognised version {v}"
                    )?,
                    None => writeln!(
                        f,
                        "format identifier at offset {offset}, truncated (no version octet)"
                    )?,
                }
                write_defaults(f)
            }
            PeerPrivateData::Absent => {
                writeln!(
                    f,
                    "no RPC-over-RDMA private data (format identifier absent)"
                )?;
                write_defaults(f)
            }
        }
    }
}

fn write_defaults(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "  defaults apply (RFC 8797 section 5.1): send size 1024, receive size 1024, no remote invalidation"
    )
}

/// The connection's inline thresholds and remote-invalidation decision, as
/// seen from one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Negotiated {
    /// The largest RPC-over-RDMA message (transport header included) this
    /// endpoint may transmit in one RDMA Send: min(our send size, peer's
    /// receive size).
    pub send_threshold: u32,
    /// The largest message a conforming peer transmits to us in one Send:
    /// min(peer's send size, our receive size). Receive buffers must hold at
    /// least this much. (They should normally be the receive size we
    /// advertised: a peer that sent no private data of its own but read ours
    /// may rely on it.)
    pub recv_threshold: u32,
    /// Whether the responder (of either direction) may use RDMA Send With
    /// Invalidate: only when both peers set R.
    pub remote_invalidation: bool,
}

/// Applies the RFC 8797 rules to the values we advertised (`ours`) and what
/// the peer sent (`peer`, `None` when absent or unrecognised, which means
/// [`PrivateData::DEFAULT`]). The rules are symmetric, so the same function
/// serves the client and the server.
///
/// Interoperability note: the Linux server (svcrdma) advertises R clear but
/// still uses Send With Invalidate toward a client that set R (it only looks
/// at the client's flag). So a client must set R only if it really copes
/// with remote invalidation of any STag it exposes, whatever this function
/// returns; a server following this function never invalidates remotely
/// unless both sides set R.
//= rfc8797#section-4.2
//# The client uses the smaller of its own send size and the server's
//# reported receive size as the client-to-server inline threshold.  The
//# server uses the smaller of its own send size and the client's
//# reported receive size as the server-to-client inline threshold.
//= rfc8797#section-4.1
//# When both connection peers have set this bit
//# flag in their CM Private Data, the responder MAY use RDMA Send
//# with Invalidate operations when transmitting RPC Replies.
//= rfc8797#section-4.1
//# When either peer on a connection clears this flag, the responder MUST
//# use only RDMA Send when transmitting RPC Replies.
pub fn negotiate(ours: &PrivateData, peer: Option<&PrivateData>) -> Negotiated {
    let peer = peer.copied().unwrap_or(PrivateData::DEFAULT);
    Negotiated {
        send_threshold: ours.send_size.bytes().min(peer.receive_size.bytes()),
        recv_threshold: peer.send_size.bytes().min(ours.receive_size.bytes()),
        remote_invalidation: ours.remote_invalidate() && peer.remote_invalidate(),
    }
}

impl fmt::Display for Negotiated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "send threshold {} receive threshold {} remote invalidation {}",
            self.send_threshold,
            self.recv_threshold,
            if self.remote_invalidation {
                "yes"
            } else {
                "no"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s.replace(' ', "")).unwrap()
    }

    // Linux xprtrdma client behind siw (MPA v2): IRD 128, ORD 0, then
    // magic, version 1, flags 0x01 (R), send 3 -> 4096, recv 3 -> 4096.
    const LINUX_CLIENT: &str = "00800000 f6ab0e18 01 01 03 03";
    // Linux svcrdma: IRD 0, ORD 128, flags 0, 4096/4096.
    const LINUX_SERVER: &str = "00000080 f6ab0e18 01 00 03 03";

    #[test]
    fn linux_client_private_data() {
        let b = h(LINUX_CLIENT);
        let p = PeerPrivateData::find(&b);
        assert_eq!(p.offset(), Some(4));
        assert_eq!(p.version(), Some(1));
        let d = p.data().unwrap();
        assert!(d.remote_invalidate());
        assert_eq!(d.send_size.bytes(), 4096);
        assert_eq!(d.receive_size.bytes(), 4096);
        assert_eq!(d.reserved_flags(), 0);
        let m = MpaIrdOrd::decode(&b).unwrap();
        assert_eq!((m.ird, m.ord), (128, 0));
        assert!(!m.peer_to_peer && !m.zero_length_rtr && !m.rdma_write_rtr && !m.rdma_read_rtr);
    }

    #[test]
    fn linux_server_private_data() {
        let b = h(LINUX_SERVER);
        let p = PeerPrivateData::find(&b);
        assert_eq!(
            p,
            PeerPrivateData::Found {
                offset: 4,
                data: PrivateData {
                    flags: 0,
                    send_size: InlineSize::from_code(3),
                    receive_size: InlineSize::from_code(3),
                }
            }
        );
        assert!(!p.effective().remote_invalidate());
        let m = MpaIrdOrd::decode(&b).unwrap();
        assert_eq!((m.ird, m.ord), (0, 128));
    }

    #[test]
    fn encode_is_hand_checked() {
        let d = PrivateData::new(
            InlineSize::from_bytes(4096).unwrap(),
            InlineSize::from_bytes(4096).unwrap(),
            true,
        );
        assert_eq!(d.to_vec().unwrap(), h("f6ab0e18 01 01 03 03"));
        assert_eq!(d.encoded_len(), 8);
        let d = PrivateData::new(InlineSize::MAX, InlineSize::MIN, false);
        assert_eq!(d.to_vec().unwrap(), h("f6ab0e18 01 00 ff 00"));
        let mut small = [0u8; 7];
        assert!(d.encode(&mut small).is_err());
    }

    #[test]
    fn found_at_offset_zero_and_unaligned() {
        let p = PeerPrivateData::find(&h("f6ab0e18 01 00 00 01"));
        assert_eq!(p.offset(), Some(0));
        assert_eq!(p.data().unwrap().receive_size.bytes(), 2048);
        // Unaligned: 3 octets of junk in front; trailing octets ignored.
        let p = PeerPrivateData::find(&h("aabbcc f6ab0e18 01 01 0f 1f 99 99"));
        assert_eq!(p.offset(), Some(3));
        let d = p.data().unwrap();
        assert_eq!(
            (d.send_size.bytes(), d.receive_size.bytes()),
            (16384, 32768)
        );
    }

    //= rfc8797#section-5.2
    //# If the RPC-over-RDMA version 1 CM Private Data Format
    //# Identifier is not present, an RPC-over-RDMA version 1 receiver MUST
    //# behave as if no RPC-over-RDMA version 1 CM Private Data has been
    //# provided.
    #[test]
    fn absent_gives_defaults() {
        for b in [h(""), h("00800000"), h("f6ab0e"), h("18f6ab0e 0101 0303")] {
            let p = PeerPrivateData::find(&b);
            assert_eq!(p, PeerPrivateData::Absent, "{b:02x?}");
            assert_eq!(p.effective(), PrivateData::DEFAULT);
            assert_eq!(p.effective().send_size.bytes(), 1024);
            assert_eq!(p.effective().receive_size.bytes(), 1024);
            assert!(!p.effective().remote_invalidate());
        }
    }

    #[test]
    fn unknown_version_or_overrun_gives_defaults() {
        let p = PeerPrivateData::find(&h("00800000 f6ab0e18 02 01 03 03"));
        assert_eq!(
            p,
            PeerPrivateData::Unrecognized {
                offset: 4,
                version: Some(2)
            }
        );
        assert_eq!(p.effective(), PrivateData::DEFAULT);
        // Overruns the buffer: the identifier and version fit, sizes do not.
        let p = PeerPrivateData::find(&h("f6ab0e18 01 01 03"));
        assert_eq!(
            p,
            PeerPrivateData::Unrecognized {
                offset: 0,
                version: Some(1)
            }
        );
        let p = PeerPrivateData::find(&h("0000 f6ab0e18"));
        assert_eq!(
            p,
            PeerPrivateData::Unrecognized {
                offset: 2,
                version: None
            }
        );
        assert!(!p.is_found());
    }

    #[test]
    fn first_recognised_occurrence_wins() {
        // A prefix that happens to equal the identifier, then the real one.
        let p = PeerPrivateData::find(&h("f6ab0e18 f6ab0e18 01 01 03 03"));
        assert_eq!(p.offset(), Some(4));
        assert!(p.is_found());
    }

    //= rfc8797#section-4
    //# Senders MUST set these bits
    //# to zero, and receivers MUST ignore their value.
    #[test]
    fn reserved_bits_ignored_but_kept() {
        let b = h("f6ab0e18 01 fe 03 03");
        let d = *PeerPrivateData::find(&b).data().unwrap();
        assert!(!d.remote_invalidate());
        assert_eq!(d.reserved_flags(), 0xfe);
        assert_eq!(d.to_vec().unwrap(), b);
        let d = PrivateData::parse_v1(&h("f6ab0e18 01 ff 03 03")).unwrap();
        assert!(d.remote_invalidate());
        // A sender built with new() never sets them.
        assert_eq!(
            PrivateData::new(InlineSize::MAX, InlineSize::MAX, true).flags,
            1
        );
    }

    #[test]
    fn inline_size_conversions() {
        assert_eq!(InlineSize::from_bytes(1024), Ok(InlineSize::from_code(0)));
        assert_eq!(InlineSize::from_bytes(262_144), Ok(InlineSize::MAX));
        assert_eq!(
            InlineSize::from_bytes(1023),
            Err(InlineSizeError::TooSmall(1023))
        );
        assert_eq!(
            InlineSize::from_bytes(262_145),
            Err(InlineSizeError::TooLarge(262_145))
        );
        assert_eq!(
            InlineSize::from_bytes(4097),
            Err(InlineSizeError::NotMultiple(4097))
        );
        assert_eq!(
            InlineSize::from_bytes_round_down(4097).unwrap().bytes(),
            4096
        );
        assert_eq!(
            InlineSize::from_bytes_round_down(5000).unwrap().bytes(),
            4096
        );
        assert_eq!(
            InlineSize::from_bytes_round_down(u32::MAX),
            Ok(InlineSize::MAX)
        );
        assert!(InlineSize::from_bytes_round_down(1000).is_err());
        for c in 0..=255u8 {
            let s = InlineSize::from_code(c);
            assert_eq!(s.bytes(), (c as u32 + 1) * 1024);
            assert_eq!(InlineSize::from_bytes(s.bytes()), Ok(s));
        }
    }

    fn pd(send: u32, recv: u32, r: bool) -> PrivateData {
        PrivateData::new(
            InlineSize::from_bytes(send).unwrap(),
            InlineSize::from_bytes(recv).unwrap(),
            r,
        )
    }

    //= rfc8797#section-4.2
    //# The client uses the smaller of its own send size and the server's
    //# reported receive size as the client-to-server inline threshold.  The
    //# server uses the smaller of its own send size and the client's
    //# reported receive size as the server-to-client inline threshold.
    #[test]
    fn negotiation_min_rules() {
        let client = pd(8192, 4096, true);
        let server = pd(2048, 16384, true);
        let c = negotiate(&client, Some(&server));
        let s = negotiate(&server, Some(&client));
        // client-to-server: min(client send 8192, server recv 16384)
        assert_eq!(c.send_threshold, 8192);
        assert_eq!(s.recv_threshold, 8192);
        // server-to-client: min(server send 2048, client recv 4096)
        assert_eq!(s.send_threshold, 2048);
        assert_eq!(c.recv_threshold, 2048);
    }

    //= rfc8797#section-4.1
    //# When either peer on a connection clears this flag, the responder MUST
    //# use only RDMA Send when transmitting RPC Replies.
    #[test]
    fn negotiation_remote_invalidation() {
        let both = negotiate(&pd(4096, 4096, true), Some(&pd(4096, 4096, true)));
        assert!(both.remote_invalidation);
        let ours_only = negotiate(&pd(4096, 4096, true), Some(&pd(4096, 4096, false)));
        assert!(!ours_only.remote_invalidation);
        let peer_only = negotiate(&pd(4096, 4096, false), Some(&pd(4096, 4096, true)));
        assert!(!peer_only.remote_invalidation);
        // Linux client (R) talking to the Linux server (flags 0).
        let linux_c = PeerPrivateData::find(&h(LINUX_CLIENT)).effective();
        let linux_s = PeerPrivateData::find(&h(LINUX_SERVER)).effective();
        let n = negotiate(&linux_c, Some(&linux_s));
        assert_eq!(
            n,
            Negotiated {
                send_threshold: 4096,
                recv_threshold: 4096,
                remote_invalidation: false
            }
        );
    }

    #[test]
    fn negotiation_absent_peer_uses_defaults() {
        let n = negotiate(&pd(4096, 8192, true), None);
        assert_eq!(
            n,
            Negotiated {
                send_threshold: 1024,
                recv_threshold: 1024,
                remote_invalidation: false
            }
        );
        let absent = PeerPrivateData::find(&h("00800000"));
        assert_eq!(negotiate(&pd(4096, 8192, true), absent.data()), n);
        let unknown = PeerPrivateData::find(&h("f6ab0e18 07 01 ff ff"));
        assert_eq!(negotiate(&pd(4096, 8192, true), unknown.data()), n);
    }

    #[test]
    fn display_mentions_fields() {
        let s = PeerPrivateData::find(&h(LINUX_CLIENT)).to_string();
        assert!(s.contains("offset 4"), "{s}");
        assert!(s.contains("send size: 4096 (code 3)"), "{s}");
        assert!(s.contains("remote invalidation supported"), "{s}");
        let s = PeerPrivateData::Absent.to_string();
        assert!(s.contains("defaults apply"), "{s}");
        let s = MpaIrdOrd::decode(&h("c0014002")).unwrap().to_string();
        assert_eq!(
            s,
            "MPA v2 (RFC 6581) IRD 1 ORD 2 peer-to-peer zero-length-send-RTR RDMA-Read-RTR"
        );
    }

    #[test]
    fn samples_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test_samples");
        let read = |n: &str| crate::wire::rpc::tests::read_sample(&dir.join(n));
        let c = PeerPrivateData::find(&read("pd_linux_client.hex"));
        assert_eq!(c, PeerPrivateData::find(&h(LINUX_CLIENT)));
        let s = PeerPrivateData::find(&read("pd_linux_server.hex"));
        assert_eq!(s, PeerPrivateData::find(&h(LINUX_SERVER)));
        assert_eq!(
            PeerPrivateData::find(&read("pd_absent.hex")),
            PeerPrivateData::Absent
        );
        assert_eq!(
            PeerPrivateData::find(&read("pd_unknown_version.hex")),
            PeerPrivateData::Unrecognized {
                offset: 0,
                version: Some(2)
            }
        );
    }

    fn arb_pd() -> impl Strategy<Value = PrivateData> {
        (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(f, s, r)| PrivateData {
            flags: f,
            send_size: InlineSize::from_code(s),
            receive_size: InlineSize::from_code(r),
        })
    }

    proptest! {
        #[test]
        fn roundtrip_at_any_offset(d in arb_pd(), prefix in proptest::collection::vec(any::<u8>(), 0..12)) {
            let bytes = d.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), d.encoded_len());
            prop_assert_eq!(PrivateData::parse_v1(&bytes), Some(d));
            let mut buf = prefix.clone();
            buf.extend_from_slice(&bytes);
            let p = PeerPrivateData::find(&buf);
            // The identifier may also occur inside a random prefix; then the
            // found one is still a valid v1 message at or before ours.
            let off = p.offset().unwrap();
            prop_assert!(off <= prefix.len());
            if off == prefix.len() {
                prop_assert_eq!(p.data(), Some(&d));
            }
        }

        #[test]
        fn find_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            let p = PeerPrivateData::find(&buf);
            let _ = p.to_string();
            if let Some(o) = p.offset() {
                prop_assert!(o + 4 <= buf.len());
            }
        }

        #[test]
        fn negotiated_thresholds_never_exceed_either_side(a in arb_pd(), b in arb_pd()) {
            let n = negotiate(&a, Some(&b));
            prop_assert!(n.send_threshold <= a.send_size.bytes());
            prop_assert!(n.send_threshold <= b.receive_size.bytes());
            prop_assert!(n.recv_threshold <= a.receive_size.bytes());
            prop_assert_eq!(n.send_threshold, negotiate(&b, Some(&a)).recv_threshold);
            prop_assert!(n.send_threshold >= 1024);
        }
    }
}
