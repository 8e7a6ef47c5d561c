//! The Terminate layer / error type / error code table (RFC 5040 §4.8,
//! RFC 5041 §7, RFC 5044 §8): the one value every layer of the stack
//! (MPA, DDP, RDMAP) uses to say why it ends a stream. A module of its own
//! so that `ddp` and `rdmap` both import it and neither imports the other's
//! internals (`rdmap` re-exports it as `rdmap::TerminateCode`).

use core::fmt;

/// The Terminate layer / error type / error code triple (RFC 5040 §4.8).
///
/// An open value: every 4/4/8-bit combination decodes and re-encodes. The
/// associated constants are the table this crate uses; [`TerminateCode::describe`]
/// names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TerminateCode {
    /// Layer (4 bits): 0 RDMAP, 1 DDP, 2 LLP (MPA).
    pub layer: u8,
    /// Error type (4 bits), meaning depends on the layer.
    pub etype: u8,
    /// Error code (8 bits), meaning depends on layer and error type.
    pub code: u8,
}

/// Terminate layer: RDMAP.
pub const LAYER_RDMAP: u8 = 0;
/// Terminate layer: DDP.
pub const LAYER_DDP: u8 = 1;
/// Terminate layer: the LLP, i.e. MPA.
pub const LAYER_LLP: u8 = 2;

macro_rules! codes {
    ($( $(#[$m:meta])* $name:ident = ($l:expr, $e:expr, $c:expr, $desc:expr); )*) => {
        impl TerminateCode {
            $( $(#[$m])* pub const $name: TerminateCode = TerminateCode { layer: $l, etype: $e, code: $c }; )*

            /// Every triple of the table, with its description.
            pub const TABLE: &'static [(TerminateCode, &'static str)] = &[
                $( (TerminateCode::$name, $desc), )*
            ];
        }
    };
}

codes! {
    // ---- RDMAP (layer 0), RFC 5040 §7.1 ----
    /// RDMAP local catastrophic error.
    RDMAP_LOCAL_CATASTROPHIC = (0, 0, 0x00, "RDMAP: local catastrophic error");
    /// RDMAP remote protection error: invalid STag.
    RDMAP_INVALID_STAG = (0, 1, 0x00, "RDMAP: remote protection error: invalid STag");
    /// RDMAP remote protection error: base or bounds violation.
    RDMAP_BASE_BOUNDS = (0, 1, 0x01, "RDMAP: remote protection error: base or bounds violation");
    /// RDMAP remote protection error: access rights violation.
    RDMAP_ACCESS_RIGHTS = (0, 1, 0x02, "RDMAP: remote protection error: access rights violation");
    /// RDMAP remote protection error: STag not associated with RDMAP stream.
    RDMAP_STAG_NOT_ASSOCIATED = (0, 1, 0x03, "RDMAP: remote protection error: STag not associated with RDMAP Stream");
    /// RDMAP remote protection error: TO wrap.
    RDMAP_TO_WRAP = (0, 1, 0x04, "RDMAP: remote protection error: TO wrap");
    /// RDMAP remote protection error: STag cannot be invalidated.
    RDMAP_PROTECTION_CANNOT_INVALIDATE = (0, 1, 0x09, "RDMAP: remote protection error: STag cannot be invalidated");
    /// RDMAP remote protection error: unspecified.
    RDMAP_PROTECTION_UNSPECIFIED = (0, 1, 0xff, "RDMAP: remote protection error: unspecified");
    /// RDMAP remote operation error: invalid RDMAP version.
    RDMAP_INVALID_VERSION = (0, 2, 0x05, "RDMAP: remote operation error: invalid RDMAP version");
    /// RDMAP remote operation error: unexpected opcode.
    RDMAP_UNEXPECTED_OPCODE = (0, 2, 0x06, "RDMAP: remote operation error: unexpected OpCode");
    /// RDMAP remote operation error: catastrophic error, localized to the stream.
    RDMAP_CATASTROPHIC_STREAM = (0, 2, 0x07, "RDMAP: remote operation error: catastrophic error, localized to RDMAP Stream");
    /// RDMAP remote operation error: catastrophic error, global.
    RDMAP_CATASTROPHIC_GLOBAL = (0, 2, 0x08, "RDMAP: remote operation error: catastrophic error, global");
    /// RDMAP remote operation error: STag cannot be invalidated.
    RDMAP_OPERATION_CANNOT_INVALIDATE = (0, 2, 0x09, "RDMAP: remote operation error: STag cannot be invalidated");
    /// RDMAP remote operation error: unspecified.
    RDMAP_OPERATION_UNSPECIFIED = (0, 2, 0xff, "RDMAP: remote operation error: unspecified");
    // ---- DDP (layer 1), RFC 5041 §7.2 ----
    /// DDP local catastrophic error.
    DDP_LOCAL_CATASTROPHIC = (1, 0, 0x00, "DDP: local catastrophic error");
    /// DDP tagged buffer error: invalid STag.
    DDP_TAGGED_INVALID_STAG = (1, 1, 0x00, "DDP: tagged buffer error: invalid STag");
    /// DDP tagged buffer error: base or bounds violation.
    DDP_TAGGED_BASE_BOUNDS = (1, 1, 0x01, "DDP: tagged buffer error: base or bounds violation");
    /// DDP tagged buffer error: STag not associated with DDP stream.
    DDP_TAGGED_STAG_NOT_ASSOCIATED = (1, 1, 0x02, "DDP: tagged buffer error: STag not associated with DDP Stream");
    /// DDP tagged buffer error: TO wrap.
    DDP_TAGGED_TO_WRAP = (1, 1, 0x03, "DDP: tagged buffer error: TO wrap");
    /// DDP tagged buffer error: invalid DDP version.
    DDP_TAGGED_INVALID_VERSION = (1, 1, 0x04, "DDP: tagged buffer error: invalid DDP version");
    /// DDP untagged buffer error: invalid QN.
    DDP_UNTAGGED_INVALID_QN = (1, 2, 0x01, "DDP: untagged buffer error: invalid QN");
    /// DDP untagged buffer error: invalid MSN, no buffer available.
    DDP_UNTAGGED_NO_BUFFER = (1, 2, 0x02, "DDP: untagged buffer error: invalid MSN - no buffer available");
    /// DDP untagged buffer error: invalid MSN, MSN range is not valid.
    DDP_UNTAGGED_MSN_RANGE = (1, 2, 0x03, "DDP: untagged buffer error: invalid MSN - MSN range is not valid");
    /// DDP untagged buffer error: invalid MO.
    DDP_UNTAGGED_INVALID_MO = (1, 2, 0x04, "DDP: untagged buffer error: invalid MO");
    /// DDP untagged buffer error: message too long for the available buffer.
    DDP_UNTAGGED_TOO_LONG = (1, 2, 0x05, "DDP: untagged buffer error: DDP Message too long for available buffer");
    /// DDP untagged buffer error: invalid DDP version.
    DDP_UNTAGGED_INVALID_VERSION = (1, 2, 0x06, "DDP: untagged buffer error: invalid DDP version");
    // ---- LLP = MPA (layer 2, error type 0), RFC 5044 §8, RFC 6581 §4 ----
    /// MPA: TCP connection closed, terminated or lost.
    MPA_CONNECTION_LOST = (2, 0, 0x01, "MPA: TCP connection closed, terminated or lost");
    /// MPA: CRC error.
    MPA_CRC = (2, 0, 0x02, "MPA: MPA CRC error");
    /// MPA: Marker and ULPDU_Length field mismatch (bad FPDU start).
    MPA_MARKER = (2, 0, 0x03, "MPA: MPA Marker and ULPDU Length field mismatch");
    /// MPA: invalid MPA Request or Reply frame.
    MPA_INVALID_REQ_REP = (2, 0, 0x04, "MPA: invalid MPA Request or Reply frame");
    /// MPA (RFC 6581): local catastrophic error.
    MPA_LOCAL_CATASTROPHIC = (2, 0, 0x05, "MPA: local catastrophic error (RFC 6581)");
    /// MPA (RFC 6581): insufficient IRD resources.
    MPA_INSUFFICIENT_IRD = (2, 0, 0x06, "MPA: insufficient IRD resources (RFC 6581)");
    /// MPA (RFC 6581): no matching RTR model.
    MPA_NO_MATCHING_RTR = (2, 0, 0x07, "MPA: no matching RTR model (RFC 6581)");
}

impl TerminateCode {
    /// The description from [`TerminateCode::TABLE`], if this triple is in it.
    pub fn describe(self) -> Option<&'static str> {
        Self::TABLE
            .iter()
            .find(|(c, _)| *c == self)
            .map(|(_, d)| *d)
    }
}

impl fmt::Display for TerminateCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layer {} etype {} code {:#04x}",
            self.layer, self.etype, self.code
        )?;
        if let Some(d) = self.describe() {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}
