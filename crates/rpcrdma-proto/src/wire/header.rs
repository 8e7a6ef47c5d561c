//! Version dispatch on the `rdma_vers` word, and what to send back when a
//! header cannot be used.
//!
//! Every version keeps the first four words (`rdma_xid`, `rdma_vers`,
//! `rdma_credit`, `rdma_proc` / `rdma_htype`) at the same offsets, so
//! [`decode`] reads them, then decodes version 1 ([`crate::wire::v1`]) or
//! version 2 ([`crate::wire::v2`]); any other version decodes to
//! [`UnknownVersion`] (prefix and raw rest) that re-encodes identically.
//!
//! A failed decode is a [`HeaderError`]; [`HeaderError::answer`] says what
//! goes back on the wire and who is to blame ([`WireAnswer`]), and
//! [`WireAnswer::to_header`] builds that error header.
//!
//! A version error comes back in more than one layout (see
//! [`crate::wire::vers_error`]): [`TransportHeader::version_error`] finds it
//! in a decoded header, [`HeaderError::version_error`] in the one form that
//! does not decode (a v1-layout ERR_VERS echoing `rdma_vers` 2, what Linux
//! svcrdma sends to a v2 message).

use core::fmt;

use crate::wire::common::hex_string;
pub use crate::wire::common::{Prefix, FIXED_PREFIX_LEN};
use crate::wire::v1;
use crate::wire::v2::{self, Flags, HType};
use crate::wire::vers_error::{VersErrorLayout, VersionError};
use crate::xdr::{DecodeErrorKind, EncodeError, Reader, Writer, XdrEncode};
use crate::{DecodeError, Limits};

/// A message whose `rdma_vers` is neither 1 nor 2: the prefix and the raw
/// rest, re-encoded byte-exactly.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UnknownVersion {
    /// The four common words.
    pub prefix: Prefix,
    /// Everything after them.
    pub rest: Vec<u8>,
}

/// A decoded transport header of any version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransportHeader {
    /// `rdma_vers` = 1.
    V1(v1::Header),
    /// `rdma_vers` = 2.
    V2(v2::Header),
    /// Any other `rdma_vers`.
    UnknownVersion(UnknownVersion),
}

impl TransportHeader {
    /// `rdma_xid`.
    pub fn xid(&self) -> u32 {
        match self {
            TransportHeader::V1(h) => h.xid,
            TransportHeader::V2(h) => h.xid,
            TransportHeader::UnknownVersion(u) => u.prefix.xid,
        }
    }

    /// `rdma_vers`.
    pub fn vers(&self) -> u32 {
        match self {
            TransportHeader::V1(_) => v1::RPCRDMA_VERSION,
            TransportHeader::V2(_) => v2::RPCRDMA_VERSION_2,
            TransportHeader::UnknownVersion(u) => u.prefix.vers,
        }
    }

    /// `rdma_credit`.
    pub fn credit(&self) -> u32 {
        match self {
            TransportHeader::V1(h) => h.credit,
            TransportHeader::V2(h) => h.credit,
            TransportHeader::UnknownVersion(u) => u.prefix.credit,
        }
    }

    /// The fourth word: `rdma_proc` / `rdma_htype`.
    pub fn proc_code(&self) -> u32 {
        match self {
            TransportHeader::V1(h) => h.proc().0,
            TransportHeader::V2(h) => h.htype().0,
            TransportHeader::UnknownVersion(u) => u.prefix.proc,
        }
    }

    /// True if an RPC message follows the header (RDMA_MSG, RDMA_MSGP,
    /// RDMA2_MSG).
    pub fn has_payload(&self) -> bool {
        match self {
            TransportHeader::V1(h) => h.has_payload(),
            TransportHeader::V2(h) => h.has_payload(),
            TransportHeader::UnknownVersion(_) => false,
        }
    }

    /// The version error this header reports, if it is an ERR_VERS (v1
    /// layout, any `rdma_vers` the v1 decoder takes, i.e. 1) or an
    /// RDMA2_ERR_VERS (v2 layout). The v1 layout with `rdma_vers` 2 does not
    /// decode: see [`HeaderError::version_error`].
    pub fn version_error(&self) -> Option<VersionError> {
        let (xid, credit, vers, layout, low, high) = match self {
            TransportHeader::V1(v1::Header {
                xid,
                credit,
                body: v1::Body::Error(v1::RdmaError::Vers { low, high }),
            }) => (
                xid,
                credit,
                v1::RPCRDMA_VERSION,
                VersErrorLayout::V1,
                low,
                high,
            ),
            //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
            //# RDMA2_ERR_VERS This is the equivalent of ERR_VERS in
            //# RPC-over-RDMA version 1. The error code value, semantics, and
            //# utilization are the same.
            TransportHeader::V2(v2::Header {
                xid,
                credit,
                body: v2::Body::Error(v2::RdmaError::Vers { low, high }),
                ..
            }) => (
                xid,
                credit,
                v2::RPCRDMA_VERSION_2,
                VersErrorLayout::V2,
                low,
                high,
            ),
            _ => return None,
        };
        Some(VersionError {
            xid: *xid,
            vers,
            credit: *credit,
            low: *low,
            high: *high,
            layout,
        })
    }

    /// What a responder sends back for a header that decoded but that it
    /// cannot process because the version, proc or htype is unknown; `None`
    /// for every other header (including received errors, which are never
    /// answered).
    pub fn answer(&self) -> Option<WireAnswer> {
        match self {
            //= rfc8166#section-4.5.2
            //# Examples of such errors include an invalid value in the
            //# rdma_proc field;
            TransportHeader::V1(h) => match h.body {
                v1::Body::Unknown { .. } => Some(WireAnswer::ErrChunk { xid: h.xid }),
                _ => None,
            },
            //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
            //# If a responder recognizes the value in the rdma_start.rdma_vers
            //# field, but it does not recognize the value in the
            //# rdma_start.rdma_htype field or does not support that header
            //# type, it MUST set the rdma_err field to RDMA2_ERR_INVAL_HTYPE.
            TransportHeader::V2(h) => match h.body {
                v2::Body::Unknown { .. } if !h.flags.is_response() => {
                    Some(WireAnswer::V2InvalHtype { xid: h.xid })
                }
                _ => None,
            },
            TransportHeader::UnknownVersion(u) => Some(WireAnswer::ErrVers {
                xid: u.prefix.xid,
                vers: u.prefix.vers,
            }),
        }
    }
}

/// What goes back on the wire after a header could not be used. The
/// variant also says who is blamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireAnswer {
    /// Send nothing: the message is shorter than the fixed prefix (its XID
    /// and version cannot be trusted), it is itself an error report, or it
    /// is a v2 response (errors are never sent by a requester).
    Drop,
    /// Version 1 RDMA_ERROR / ERR_VERS (unknown `rdma_vers`).
    ErrVers {
        /// The XID to echo.
        xid: u32,
        /// The version to echo (RFC 8166 section 4.5).
        vers: u32,
    },
    /// Version 1 RDMA_ERROR / ERR_CHUNK (malformed v1 header or unknown
    /// `rdma_proc`).
    ErrChunk {
        /// The XID to echo.
        xid: u32,
    },
    /// Version 2 RDMA2_ERROR / RDMA2_ERR_BAD_XDR (malformed v2 header).
    V2BadXdr {
        /// The XID to echo.
        xid: u32,
    },
    /// Version 2 RDMA2_ERROR / RDMA2_ERR_INVAL_HTYPE (unknown `rdma_htype`).
    V2InvalHtype {
        /// The XID to echo.
        xid: u32,
    },
}

impl WireAnswer {
    /// A short description: `"drop"`, `"RDMA_ERROR/ERR_CHUNK"`, ...
    pub fn name(&self) -> &'static str {
        match self {
            WireAnswer::Drop => "drop",
            WireAnswer::ErrVers { .. } => "RDMA_ERROR/ERR_VERS",
            WireAnswer::ErrChunk { .. } => "RDMA_ERROR/ERR_CHUNK",
            WireAnswer::V2BadXdr { .. } => "RDMA2_ERROR/RDMA2_ERR_BAD_XDR",
            WireAnswer::V2InvalHtype { .. } => "RDMA2_ERROR/RDMA2_ERR_INVAL_HTYPE",
        }
    }

    /// The error header to send: `credit` is this connection's credit
    /// grant, `versions` the inclusive range of versions this endpoint
    /// supports (for ERR_VERS). `None` for [`WireAnswer::Drop`].
    ///
    /// ERR_VERS goes out in the version 1 layout (the only layout a peer
    /// that does not share our version can be expected to know) with the
    /// request's `rdma_vers` echoed, as RFC 8166 section 4.5 requires and as
    /// Linux svcrdma does. Version 2 errors set `RPCRDMA2_F_RESPONSE`: their
    /// XID was generated by their receiver (draft §3.2).
    pub fn to_header(&self, credit: u32, versions: (u32, u32)) -> Option<TransportHeader> {
        let v1err = |xid, e| {
            TransportHeader::V1(v1::Header {
                xid,
                credit,
                body: v1::Body::Error(e),
            })
        };
        //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
        //# In all cases below, the responder copies the values of the
        //# rdma_start.rdma_xid and rdma_start.rdma_vers fields from the
        //# incoming transport header that generated the error to transport
        //# header of the error response.
        let v2err = |xid, e| {
            TransportHeader::V2(v2::Header {
                xid,
                credit,
                flags: Flags::RESPONSE,
                body: v2::Body::Error(e),
            })
        };
        Some(match *self {
            WireAnswer::Drop => return None,
            //= rfc8166#section-4.5.1
            //# When a Responder detects an RPC-over-RDMA header version that
            //# it does not support (currently this document defines only
            //# version 1), it MUST reply with an RDMA_ERROR procedure and set
            //# the rdma_err value to ERR_VERS, also providing the low and high
            //# inclusive version numbers it does, in fact, support.
            //= rfc8166#section-4.5
            //# The rdma_vers field MUST contain the same version that was in the
            //# rdma_vers field in the failing request;
            WireAnswer::ErrVers { xid, vers } if vers == v1::RPCRDMA_VERSION => v1err(
                xid,
                v1::RdmaError::Vers {
                    low: versions.0,
                    high: versions.1,
                },
            ),
            WireAnswer::ErrVers { xid, vers } => {
                let mut rest = Vec::with_capacity(12);
                for w in [v1::ErrorCode::ERR_VERS.0, versions.0, versions.1] {
                    rest.extend_from_slice(&w.to_be_bytes());
                }
                TransportHeader::UnknownVersion(UnknownVersion {
                    prefix: Prefix {
                        xid,
                        vers,
                        credit,
                        proc: v1::Proc::RDMA_ERROR.0,
                    },
                    rest,
                })
            }
            WireAnswer::ErrChunk { xid } => v1err(xid, v1::RdmaError::Chunk),
            WireAnswer::V2BadXdr { xid } => v2err(xid, v2::RdmaError::BadXdr),
            WireAnswer::V2InvalHtype { xid } => v2err(xid, v2::RdmaError::InvalHtype),
        })
    }
}

impl fmt::Display for WireAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transport header that could not be decoded: the XDR error, plus the
/// prefix words that could be read (if any) to decide on the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderError {
    /// What went wrong, where.
    pub error: DecodeError,
    /// The four common words, if the message is long enough to hold them.
    pub prefix: Option<Prefix>,
    /// `rdma_flags` of a version 2 message, if it could be read.
    pub flags: Option<Flags>,
    /// The message is a version 1 RDMA_ERROR / ERR_VERS that echoes
    /// `rdma_vers` 2 (seven words, no `rdma_flags`): how a v1-only server
    /// (Linux svcrdma, libntirpc, our v1 engine) refuses a version 2
    /// message. It is not a version 2 header, so it does not decode; a v2
    /// requester acts on this value instead (see [`crate::wire::vers_error`]).
    /// [`HeaderError::answer`] is [`WireAnswer::Drop`] for it, as for any
    /// error report.
    pub version_error: Option<VersionError>,
}

impl HeaderError {
    /// What a responder sends back, with blame.
    ///
    /// A requester that cannot parse a reply drops it instead (it never
    /// sends RDMA_ERROR); for version 2 this function already answers
    /// [`WireAnswer::Drop`] when `RPCRDMA2_F_RESPONSE` is set.
    pub fn answer(&self) -> WireAnswer {
        // Shorter than the four fixed words: rdma_xid and rdma_vers cannot
        // be trusted, so nothing in the message may be used to build a reply.
        let Some(p) = self.prefix else {
            return WireAnswer::Drop;
        };
        match p.vers {
            v1::RPCRDMA_VERSION => {
                if v1::Proc(p.proc) == v1::Proc::RDMA_ERROR {
                    // Errors are not answered with errors.
                    return WireAnswer::Drop;
                }
                //= rfc8166#section-4.5.2
                //# If the rdma_vers field contains a recognized value, but an
                //# XDR parsing error occurs, the Responder MUST reply with an
                //# RDMA_ERROR procedure and set the rdma_err value to
                //# ERR_CHUNK.
                WireAnswer::ErrChunk { xid: p.xid }
            }
            v2::RPCRDMA_VERSION_2 => {
                //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
                //# This header type MUST NOT be transmitted by a requester.
                if HType(p.proc) == HType::RDMA2_ERROR
                    || self.flags.is_some_and(|f| f.is_response())
                {
                    return WireAnswer::Drop;
                }
                if HType(p.proc).name().is_none() {
                    return WireAnswer::V2InvalHtype { xid: p.xid };
                }
                //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
                //# If a responder recognizes the values in the
                //# rdma_start.rdma_vers and rdma_start.rdma_proc fields, but
                //# the incoming RPC-over-RDMA transport header cannot be
                //# parsed, it MUST set the rdma_err field to RDMA2_ERR_BAD_XDR.
                WireAnswer::V2BadXdr { xid: p.xid }
            }
            _ => WireAnswer::ErrVers {
                xid: p.xid,
                vers: p.vers,
            },
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; answer: {}", self.error, self.answer())?;
        if let Some(v) = self.version_error {
            write!(f, "; {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for HeaderError {}

/// Decodes the transport header at the start of `buf` (one whole received
/// message) of any version. Returns the header and its length; the RPC
/// payload, if [`TransportHeader::has_payload`], is `buf[header_len..]`.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<(TransportHeader, usize), HeaderError> {
    // The common words are read once, in place, and the version's decoder
    // goes on from there.
    let mut r = Reader::new(buf);
    let Some(prefix) = Prefix::read(buf) else {
        let error = r.array::<FIXED_PREFIX_LEN>("rpcrdma_common").err();
        return Err(HeaderError {
            error: error.unwrap_or_else(|| {
                DecodeError::new(
                    DecodeErrorKind::Truncated {
                        needed: FIXED_PREFIX_LEN,
                        available: buf.len(),
                    },
                    0,
                    "rpcrdma_common",
                )
            }),
            prefix: None,
            flags: None,
            version_error: None,
        });
    };
    r.skip(FIXED_PREFIX_LEN);
    // The common version 1 headers decode straight into the result.
    if prefix.vers == v1::RPCRDMA_VERSION {
        if let Some((h, n)) = v1::decode_short(r.rest(), prefix, limits) {
            return Ok((TransportHeader::V1(h), FIXED_PREFIX_LEN + n));
        }
    }
    decode_general(r, prefix, limits)
}

/// [`decode`] after the common words, for every header.
#[inline(never)]
fn decode_general(
    mut r: Reader<'_>,
    prefix: Prefix,
    limits: &Limits,
) -> Result<(TransportHeader, usize), HeaderError> {
    let res = match prefix.vers {
        v1::RPCRDMA_VERSION => v1::decode_body_general(&mut r, prefix, limits)
            .map(|(h, n)| (TransportHeader::V1(h), n)),
        v2::RPCRDMA_VERSION_2 => {
            v2::decode_body(&mut r, prefix, limits).map(|(h, n)| (TransportHeader::V2(h), n))
        }
        _ => {
            return Ok((
                TransportHeader::UnknownVersion(UnknownVersion {
                    prefix,
                    rest: r.rest().to_vec(),
                }),
                r.position() + r.remaining(),
            ))
        }
    };
    match res {
        Ok(x) => Ok(x),
        Err(error) => Err(header_error(r.whole(), prefix, error)),
    }
}

/// The [`HeaderError`] of a message whose prefix could be read.
#[cold]
#[inline(never)]
fn header_error(buf: &[u8], prefix: Prefix, error: DecodeError) -> HeaderError {
    let (flags, version_error) = if prefix.vers == v2::RPCRDMA_VERSION_2 {
        (
            buf.get(16..20)
                .map(|b| Flags(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))),
            // Only once the message failed as a version 2 header: a valid
            // v2 header is never reinterpreted.
            VersionError::v1_layout_of_v2(buf),
        )
    } else {
        (None, None)
    };
    HeaderError {
        error,
        prefix: Some(prefix),
        flags,
        version_error,
    }
}

impl XdrEncode for TransportHeader {
    #[inline]
    fn encoded_len(&self) -> usize {
        match self {
            TransportHeader::V1(h) => h.encoded_len(),
            TransportHeader::V2(h) => h.encoded_len(),
            TransportHeader::UnknownVersion(u) => FIXED_PREFIX_LEN + u.rest.len(),
        }
    }

    #[inline]
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            TransportHeader::V1(h) => h.write(w),
            TransportHeader::V2(h) => h.write(w),
            TransportHeader::UnknownVersion(u) => {
                w.u32(u.prefix.xid)?;
                w.u32(u.prefix.vers)?;
                w.u32(u.prefix.credit)?;
                w.u32(u.prefix.proc)?;
                w.raw(&u.rest)
            }
        }
    }
}

impl fmt::Display for UnknownVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "RPC-over-RDMA unknown version {}", self.prefix.vers)?;
        writeln!(f, "  xid 0x{:08x}", self.prefix.xid)?;
        writeln!(f, "  credits {}", self.prefix.credit)?;
        writeln!(f, "  proc/htype {}", self.prefix.proc)?;
        writeln!(
            f,
            "  rest ({} octets): {}",
            self.rest.len(),
            hex_string(&self.rest)
        )
    }
}

impl fmt::Display for TransportHeader {
    /// The readable tree of the header's version.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportHeader::V1(h) => h.fmt(f),
            TransportHeader::V2(h) => h.fmt(f),
            TransportHeader::UnknownVersion(u) => u.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::v1::tests::{h, sample};
    use proptest::prelude::*;

    fn dec(b: &[u8]) -> Result<(TransportHeader, usize), HeaderError> {
        decode(b, &Limits::default())
    }

    const ALL_SAMPLES: [&str; 25] = [
        "v1_msg_write_chunk",
        "v1_nomsg_pzrc_reply",
        "v1_msgp",
        "v1_done",
        "v1_error_vers",
        "v1_error_chunk",
        "v1_error_unknown",
        "v1_unknown_proc",
        "v2_msg_call",
        "v2_nomsg_call_pzrc",
        "v2_nomsg_reply",
        "v2_error_vers",
        "v2_error_bad_xdr",
        "v2_error_inval_htype",
        "v2_error_read_chunks",
        "v2_error_write_chunks",
        "v2_error_segments",
        "v2_error_write_resource",
        "v2_error_reply_resource",
        "v2_error_system",
        "v2_error_unknown",
        "v2_connprop",
        "v2_connprop_defaults",
        "v2_unknown_htype",
        "unknown_version",
    ];

    #[test]
    fn every_sample_roundtrips_and_prints() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/test_samples");
        let on_disk = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let p = e.as_ref().unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                // pd_* and rpc_* samples belong to private_data.rs / rpc.rs.
                p.extension().is_some_and(|x| x == "hex")
                    && !name.starts_with("pd_")
                    && !name.starts_with("rpc_")
            })
            .count();
        assert_eq!(
            on_disk,
            ALL_SAMPLES.len(),
            "a header sample is not listed here"
        );
        for name in ALL_SAMPLES {
            let text = std::fs::read_to_string(format!("{dir}/{name}.hex")).unwrap();
            assert!(text.starts_with("# "), "{name}: first line is a comment");
            let b = sample(name);
            let (hdr, n) = dec(&b).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(hdr.to_vec().unwrap(), b[..n], "{name}");
            assert_eq!(hdr.encoded_len(), n, "{name}");
            assert_eq!(n < b.len(), hdr.has_payload(), "{name}");
            let tree = hdr.to_string();
            assert!(tree.contains(&format!("xid 0x{:08x}", hdr.xid())), "{name}");
            // Truncation anywhere in the header: an error, never a panic.
            if !matches!(hdr, TransportHeader::UnknownVersion(_)) {
                let header_end = if hdr.vers() == 2 && hdr.has_payload() {
                    n + 4
                } else {
                    n
                };
                // Where a raw (undecodable) body starts, any length decodes.
                let raw_from = match &hdr {
                    TransportHeader::V1(v1::Header {
                        body: v1::Body::Unknown { .. },
                        ..
                    }) => 16,
                    TransportHeader::V1(v1::Header {
                        body: v1::Body::Error(v1::RdmaError::Unknown { .. }),
                        ..
                    })
                    | TransportHeader::V2(v2::Header {
                        body: v2::Body::Unknown { .. },
                        ..
                    }) => 20,
                    _ => usize::MAX,
                };
                for cut in 0..header_end.min(raw_from) {
                    assert!(dec(&b[..cut]).is_err(), "{name}: {cut} octets decoded");
                }
            }
        }
    }

    #[test]
    fn dispatch() {
        let (hdr, _) = dec(&sample("v1_done")).unwrap();
        assert!(matches!(hdr, TransportHeader::V1(_)));
        let (hdr, _) = dec(&sample("v2_connprop")).unwrap();
        assert!(matches!(hdr, TransportHeader::V2(_)));
        let b = sample("unknown_version");
        let (hdr, n) = dec(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(
            hdr,
            TransportHeader::UnknownVersion(UnknownVersion {
                prefix: Prefix {
                    xid: 0x400,
                    vers: 3,
                    credit: 1,
                    proc: 0
                },
                rest: vec![0; 12]
            })
        );
        assert_eq!(hdr.to_vec().unwrap(), b);
        assert_eq!(
            hdr.answer(),
            Some(WireAnswer::ErrVers {
                xid: 0x400,
                vers: hdr.vers()
            })
        );
    }

    #[test]
    fn short_message_is_dropped() {
        let b = sample("v1_msg_write_chunk");
        for cut in 0..FIXED_PREFIX_LEN {
            let e = dec(&b[..cut]).unwrap_err();
            assert_eq!(e.prefix, None);
            assert_eq!(e.error.kind.name(), "truncated");
            assert_eq!(e.answer(), WireAnswer::Drop);
            assert_eq!(e.answer().to_header(1, (1, 2)), None);
        }
    }

    //= rfc8166#section-4.5.2
    //# If the rdma_vers field contains a recognized value, but an XDR
    //# parsing error occurs, the Responder MUST reply with an RDMA_ERROR
    //# procedure and set the rdma_err value to ERR_CHUNK.
    #[test]
    fn v1_malformed_answers_err_chunk() {
        let b = sample("v1_msg_write_chunk");
        let e = dec(&b[..30]).unwrap_err();
        assert_eq!(e.answer(), WireAnswer::ErrChunk { xid: 0x1a2b3c4d });
        let reply = e.answer().to_header(64, (1, 2)).unwrap().to_vec().unwrap();
        assert_eq!(
            reply,
            h("1a2b3c4d 00000001 00000040 00000004 00000002"),
            "xid echoed, vers 1, credit, RDMA_ERROR, ERR_CHUNK"
        );
        // A malformed RDMA_ERROR is not answered.
        let mut t = sample("v1_error_chunk");
        t.push(0);
        assert_eq!(dec(&t).unwrap_err().answer(), WireAnswer::Drop);
        // Unknown proc decodes, and is answered with ERR_CHUNK.
        let (hdr, _) = dec(&sample("v1_unknown_proc")).unwrap();
        assert_eq!(hdr.answer(), Some(WireAnswer::ErrChunk { xid: 8 }));
        let (hdr, _) = dec(&sample("v1_error_unknown")).unwrap();
        assert_eq!(hdr.answer(), None);
    }

    #[test]
    fn unknown_version_answers_err_vers() {
        let (hdr, _) = dec(&sample("unknown_version")).unwrap();
        let reply = hdr
            .answer()
            .unwrap()
            .to_header(32, (1, 2))
            .unwrap()
            .to_vec()
            .unwrap();
        //= rfc8166#section-4.5
        //# The rdma_vers field MUST contain the same version that was in the
        //# rdma_vers field in the failing request;
        // The sample has vers 3: echoed, in the version 1 layout.
        assert_eq!(
            reply,
            h("00000400 00000003 00000020 00000004 00000001 00000001 00000002")
        );
        // The same answer to a version 1 request decodes as a v1 ERR_VERS,
        // low before high.
        let v1_reply = WireAnswer::ErrVers {
            xid: 0x400,
            vers: 1,
        }
        .to_header(32, (1, 2))
        .unwrap()
        .to_vec()
        .unwrap();
        assert_eq!(
            v1_reply,
            h("00000400 00000001 00000020 00000004 00000001 00000001 00000002")
        );
        let (back, _) = dec(&v1_reply).unwrap();
        assert_eq!(
            back,
            TransportHeader::V1(v1::Header {
                xid: 0x400,
                credit: 32,
                body: v1::Body::Error(v1::RdmaError::Vers { low: 1, high: 2 })
            })
        );
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# As a
    //# result, when rpcrdma2_propval does not conform to that typedef,
    //# the receiver is REQUIRED to return the error RDMA2_ERR_BAD_XDR
    #[test]
    fn v2_malformed_answers_bad_xdr() {
        // BRS = 7 is not a value of rpcrdma2_rvreqsup.
        let b = h("00000009 00000002 00000001 00000005 00000000 00000001
                   00000002 00000004 00000007");
        let e = dec(&b).unwrap_err();
        assert_eq!(e.answer(), WireAnswer::V2BadXdr { xid: 9 });
        let reply = e.answer().to_header(5, (1, 2)).unwrap().to_vec().unwrap();
        assert_eq!(
            reply,
            h("00000009 00000002 00000005 00000004 00000001 00000002"),
            "xid, vers 2, credit, RDMA2_ERROR, F_RESPONSE, RDMA2_ERR_BAD_XDR"
        );
        // RBSIZ of 3 octets.
        let b = h("00000009 00000002 00000001 00000005 00000000 00000001
                   00000001 00000003 00100000");
        assert_eq!(
            dec(&b).unwrap_err().answer(),
            WireAnswer::V2BadXdr { xid: 9 }
        );
        // 16..19 octets of a v2 message: the prefix is trusted.
        let b = sample("v2_msg_call");
        assert_eq!(
            dec(&b[..18]).unwrap_err().answer(),
            WireAnswer::V2BadXdr { xid: 0xabcd }
        );
        // A malformed v2 response (F_RESPONSE) is dropped by the requester.
        let b = sample("v2_nomsg_reply");
        assert_eq!(dec(&b[..30]).unwrap_err().answer(), WireAnswer::Drop);
        // A malformed RDMA2_ERROR is dropped.
        let mut t = sample("v2_error_system");
        t.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(dec(&t).unwrap_err().answer(), WireAnswer::Drop);
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.2
    //# RPC-over-RDMA version 2 implementations that receive an OPTIONAL
    //# operation that is not supported MUST respond with an RDMA2_ERROR
    //# message with an error code of RDMA2_ERR_INVAL_HTYPE.
    #[test]
    fn v2_unknown_htype_answers_inval_htype() {
        let b = sample("v2_unknown_htype");
        let (hdr, _) = dec(&b).unwrap();
        assert_eq!(hdr.answer(), Some(WireAnswer::V2InvalHtype { xid: 0x300 }));
        let reply = hdr
            .answer()
            .unwrap()
            .to_header(1, (1, 2))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(
            reply,
            h("00000300 00000002 00000001 00000004 00000001 00000003")
        );
        // Too short for rdma_flags, unknown htype: still INVAL_HTYPE.
        assert_eq!(
            dec(&b[..17]).unwrap_err().answer(),
            WireAnswer::V2InvalHtype { xid: 0x300 }
        );
    }

    /// What Linux svcrdma sends to a message whose `rdma_vers` is not 1
    /// (net/sunrpc/xprtrdma/svc_rdma_sendto.c, `svc_rdma_send_error_msg()`
    /// with status `-EPROTONOSUPPORT`), word by word, for a v2 probe with
    /// XID 0x5a5a0001 and a server credit grant of 128.
    fn linux_err_vers_to_v2() -> Vec<u8> {
        h("5a5a0001   # *p++ = *rdma_argp;           rdma_xid echoed
           00000002   # *p++ = *(rdma_argp + 1);     rdma_vers echoed: 2
           00000080   # *p++ = rdma->sc_fc_credits;  credit grant
           00000004   # *p = rdma_error;             RDMA_ERROR
           00000001   # *p++ = err_vers;             ERR_VERS
           00000001   # *p++ = rpcrdma_version;      low 1
           00000001   # *p = rpcrdma_version;        high 1"
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ")
            .as_str())
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-7.2
    //# If the server does not support RPC-over-RDMA version 2, it MUST send
    //# an RPC-over-RDMA message to the client with the same XID, with
    //# RDMA2_ERROR in the rdma_start.rdma_htype field, and with the error
    //# code RDMA2_ERR_VERS.
    // A v1-only server cannot know the v2 layout: it sends the v1 one, whose
    // fourth and fifth words have the same values (4, 1) but which has no
    // rdma_flags word. Both are accepted.
    #[test]
    fn v1_layout_err_vers_echoing_2_is_a_version_error() {
        let b = linux_err_vers_to_v2();
        assert_eq!(b.len(), crate::wire::vers_error::V1_ERR_VERS_LEN);
        let e = dec(&b).unwrap_err();
        let want = VersionError {
            xid: 0x5a5a_0001,
            vers: 2,
            credit: 128,
            low: 1,
            high: 1,
            layout: VersErrorLayout::V1,
        };
        assert_eq!(e.version_error, Some(want));
        assert!(!want.supports(2) && want.supports(1));
        // An error report is never answered (RFC 8166 §4.5: "A receiver
        // MUST silently discard an RDMA_ERROR procedure that it cannot
        // decode"; draft §5.3.3: errors never flow from requester).
        assert_eq!(e.answer(), WireAnswer::Drop);
        assert!(e.to_string().contains("peer supports 1..=1"), "{e}");
        // libntirpc rewrites the received header in place: the credit word
        // is the requester's own; same form otherwise.
        let mut n = b.clone();
        n[8..12].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(
            dec(&n).unwrap_err().version_error.map(|v| v.credit),
            Some(1)
        );
    }

    #[test]
    fn our_v1_engine_err_vers_to_v2_is_a_version_error() {
        // The v1 engine answers a vers-2 message with exactly this
        // (engine/framing/v1.rs encode_error -> WireAnswer::ErrVers with
        // its VERSIONS (1, 1)).
        let ours = WireAnswer::ErrVers { xid: 7, vers: 2 }
            .to_header(32, (1, 1))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(
            ours,
            h("00000007 00000002 00000020 00000004 00000001 00000001 00000001")
        );
        let e = dec(&ours).unwrap_err();
        assert_eq!(
            e.version_error,
            Some(VersionError {
                xid: 7,
                vers: 2,
                credit: 32,
                low: 1,
                high: 1,
                layout: VersErrorLayout::V1
            })
        );
    }

    #[test]
    fn v1_layout_err_vers_with_vers_1_is_a_version_error() {
        // A server that puts its own version in rdma_vers: a plain v1
        // ERR_VERS (the sample is that form).
        let (hdr, _) = dec(&sample("v1_error_vers")).unwrap();
        assert_eq!(
            hdr.version_error(),
            Some(VersionError {
                xid: 5,
                vers: 1,
                credit: 64,
                low: 1,
                high: 1,
                layout: VersErrorLayout::V1
            })
        );
        assert_eq!(hdr.answer(), None);
        // The v2 layout (a v2 peer's RDMA2_ERR_VERS).
        let (hdr, _) = dec(&sample("v2_error_vers")).unwrap();
        let v = hdr.version_error().unwrap();
        assert_eq!(
            (v.vers, v.low, v.high, v.layout),
            (2, 1, 2, VersErrorLayout::V2)
        );
        // Other headers report none.
        for name in [
            "v1_error_chunk",
            "v2_error_bad_xdr",
            "v2_msg_call",
            "unknown_version",
        ] {
            assert_eq!(
                dec(&sample(name)).unwrap().0.version_error(),
                None,
                "{name}"
            );
        }
    }

    #[test]
    fn truncated_or_padded_err_vers_forms_are_rejected() {
        for b in [linux_err_vers_to_v2(), sample("v1_error_vers")] {
            for cut in 0..b.len() {
                let e = dec(&b[..cut]).unwrap_err();
                assert_eq!(e.version_error, None, "{cut} octets");
                assert_eq!(e.answer(), WireAnswer::Drop, "{cut} octets");
            }
            let mut long = b.clone();
            long.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
            let e = dec(&long).unwrap_err();
            assert_eq!(e.version_error, None);
            assert_eq!(e.answer(), WireAnswer::Drop);
        }
        // One zero word more and the Linux form is a valid v2 RDMA2_ERR_VERS
        // (flags F_RESPONSE, low 1, high 0): still "no version 2".
        let mut b = linux_err_vers_to_v2();
        b.extend_from_slice(&[0, 0, 0, 0]);
        let v = dec(&b).unwrap().0.version_error().unwrap();
        assert_eq!((v.low, v.high, v.layout), (1, 0, VersErrorLayout::V2));
        assert!(!v.supports(2));
        // Seven words, vers 2, RDMA_ERROR, but ERR_CHUNK (2): not ERR_VERS.
        let mut b = linux_err_vers_to_v2();
        b[19] = 2;
        assert_eq!(dec(&b).map(|_| ()).map_err(|e| e.version_error), Err(None));
        // Seven words, vers 2, ERR_VERS, but rdma_proc RDMA_MSG (0).
        let mut b = linux_err_vers_to_v2();
        b[15] = 0;
        assert!(dec(&b).map_or_else(|e| e.version_error.is_none(), |_| true));
    }

    /// Documented limit of the recogniser (docs/compliance-v2.md, decision
    /// on ERR_VERS forms): a seven-word message that *is* a valid version 2
    /// header stays one. With `rdma_vers_low` 4, 5, 6 or 8 the v1 layout
    /// reads as an RDMA2_ERROR with flags F_RESPONSE and a one-word code;
    /// no v1-only server sends such a range (they send 1..1).
    #[test]
    fn valid_v2_header_is_not_reinterpreted() {
        let b = h("00000009 00000002 00000001 00000004 00000001 00000004 00000003");
        let (hdr, _) = dec(&b).unwrap();
        assert_eq!(
            hdr,
            TransportHeader::V2(v2::Header {
                xid: 9,
                credit: 1,
                flags: Flags::RESPONSE,
                body: v2::Body::Error(v2::RdmaError::ReadChunks { max_chunks: 3 })
            })
        );
        assert_eq!(hdr.version_error(), None);
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-9
    //# New OPTIONAL transport header types may be introduced by later
    //# Standards Track documents.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.3
    //# RDMA2_ERR_INVAL_HTYPE If a responder recognizes the value in the
    //# rdma_start.rdma_vers field, but it does not recognize the value in
    //# the rdma_start.rdma_htype field or does not support that header type,
    //# it MUST set the rdma_err field to RDMA2_ERR_INVAL_HTYPE.
    #[test]
    fn every_unknown_htype_decodes_to_an_inval_htype_answer() {
        for htype in [2u32, 3, 6, 7, 0x8000_0000, u32::MAX] {
            for body in ["", "deadbeef", "00000001 00000002 00000003"] {
                let b = h(&format!(
                    "00000042 00000002 00000010 {htype:08x} 00000000 {body}"
                ));
                let (hdr, n) = dec(&b).unwrap();
                assert_eq!(n, b.len(), "the unknown body is kept whole");
                assert_eq!(hdr.proc_code(), htype);
                assert!(!hdr.has_payload());
                assert_eq!(
                    hdr.answer(),
                    Some(WireAnswer::V2InvalHtype { xid: 0x42 }),
                    "htype {htype}"
                );
                let reply = hdr.answer().unwrap().to_header(8, (1, 2)).unwrap();
                // xid and vers copied, RDMA2_ERROR, F_RESPONSE, INVAL_HTYPE.
                assert_eq!(
                    reply.to_vec().unwrap(),
                    h("00000042 00000002 00000008 00000004 00000001 00000003")
                );
                // The same unknown type sent as a response (F_RESPONSE):
                // the receiver is its requester, which never sends
                // RDMA2_ERROR, so it is not answered.
                let mut r = b.clone();
                r[19] = 1;
                assert_eq!(dec(&r).unwrap().0.answer(), None, "htype {htype}");
            }
        }
    }

    fn connprop(props_hex: &str) -> Vec<u8> {
        h(&format!(
            "00000011 00000002 00000001 00000005 00000000 {props_hex}"
        ))
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# In cases in which the rpcrdma2_propid specified by rdma_which is
    //# understood by the receiver, the receiver also MUST report the error
    //# RDMA2_ERR_BAD_XDR if either of the following occur:
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# The nominally opaque data within rdma_data is not valid when
    //# interpreted using the property-associated typedef.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-4.1
    //# The length of rdma_data is insufficient to contain the data
    //# represented by the property-associated typedef.
    #[test]
    fn malformed_known_property_answers_bad_xdr() {
        let cases = [
            // not valid: BRS values outside enum rpcrdma2_rvreqsup
            ("00000001 00000002 00000004 00000003", "BRS 3"),
            ("00000001 00000002 00000004 ffffffff", "BRS 0xffffffff"),
            // insufficient: RBSIZ / BRS with 1..3 octets of rdma_data
            ("00000001 00000001 00000001 10000000", "RBSIZ 1 octet"),
            ("00000001 00000001 00000003 00100000", "RBSIZ 3 octets"),
            ("00000001 00000002 00000002 00010000", "BRS 2 octets"),
            // more than the typedef: a uint32 is 4 octets, not 8
            (
                "00000001 00000001 00000008 00001000 00000000",
                "RBSIZ 8 octets",
            ),
            // a valid property first, then a bad one
            (
                "00000002 00000001 00000004 00001000 00000002 00000004 00000009",
                "2nd bad",
            ),
            // rdma_data beyond the message (section 4.1's own example)
            ("00000001 00000001 00000010 00001000", "beyond the message"),
        ];
        for (props, what) in cases {
            let e = dec(&connprop(props)).unwrap_err();
            assert_eq!(
                e.answer(),
                WireAnswer::V2BadXdr { xid: 0x11 },
                "{what}: {e}"
            );
            assert_eq!(
                e.answer().to_header(1, (1, 2)).unwrap().to_vec().unwrap(),
                h("00000011 00000002 00000001 00000004 00000001 00000002"),
                "{what}"
            );
        }
    }

    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-5.3.4
    //# Those receiving an RDMA2_CONNPROP may encounter properties that they
    //# do not support or are unaware of.  In such cases, these properties
    //# are simply ignored without any error response being generated.
    #[test]
    fn unknown_properties_are_skipped_not_answered() {
        // Unknown (odd length, padded, and empty) around the known ones;
        // the known ones are still found, nothing is answered.
        let b = connprop(
            "00000004
             00000063 00000003 0a0b0c00
             00000001 00000004 00004000
             00007fff 00000000
             00000002 00000004 00000000",
        );
        let (hdr, n) = dec(&b).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(hdr.answer(), None);
        let TransportHeader::V2(v2::Header {
            body: v2::Body::Connprop(p),
            ..
        }) = &hdr
        else {
            panic!("not CONNPROP: {hdr}")
        };
        assert_eq!(p.rbsiz(), 0x4000);
        assert_eq!(p.brs(), v2::RvReqSup::None);
        assert_eq!(
            p.props[0],
            v2::PropVal::Unknown {
                id: v2::PropId(0x63),
                data: vec![0x0a, 0x0b, 0x0c]
            }
        );
        assert_eq!(hdr.to_vec().unwrap(), b);
    }

    proptest! {
        #[test]
        fn v1_v2_roundtrip_through_dispatch(
            hdr in prop_oneof![
                crate::wire::v1::tests::arb_header().prop_map(TransportHeader::V1),
                crate::wire::v2::tests::arb_header().prop_map(TransportHeader::V2),
            ],
        ) {
            let mut b = hdr.to_vec().unwrap();
            prop_assert_eq!(b.len(), hdr.encoded_len());
            let n = b.len();
            if hdr.has_payload() {
                b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
            }
            let (d, dn) = dec(&b).unwrap();
            prop_assert_eq!(dn, n);
            // A v2 header's reserved flag bits are never sent.
            let hdr = match hdr {
                TransportHeader::V2(h) => TransportHeader::V2(v2::Header { flags: h.flags.sent(), ..h }),
                other => other,
            };
            prop_assert_eq!(d, hdr);
        }

        /// Any seven words with vers 2 and RDMA_ERROR: decodes, or fails
        /// with a version error exactly when the v1 ERR_VERS layout is
        /// there; never a panic.
        #[test]
        fn seven_word_v2_errors(mut w in proptest::array::uniform7(any::<u32>()), err_vers in any::<bool>()) {
            w[1] = 2;
            w[3] = 4;
            if err_vers {
                w[4] = 1;
            }
            let b: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
            match dec(&b) {
                Ok((hdr, _)) => prop_assert!(matches!(hdr, TransportHeader::V2(_))),
                Err(e) => {
                    prop_assert_eq!(e.answer(), WireAnswer::Drop);
                    prop_assert_eq!(e.version_error.is_some(), w[4] == 1);
                    if let Some(v) = e.version_error {
                        prop_assert_eq!((v.xid, v.vers, v.credit, v.low, v.high), (w[0], 2, w[2], w[5], w[6]));
                    }
                }
            }
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..80), v in 0u32..4) {
            let mut b = b;
            if b.len() >= 8 {
                b[4..8].copy_from_slice(&v.to_be_bytes());
            }
            match dec(&b) {
                Ok((hdr, n)) => {
                    let sent = if hdr.vers() == 2 { v2::as_sent(&b[..n]) } else { b[..n].to_vec() };
                    prop_assert_eq!(hdr.to_vec().unwrap(), sent);
                    let _ = hdr.to_string();
                }
                Err(e) => {
                    let _ = e.to_string();
                    if let Some(reply) = e.answer().to_header(1, (1, 2)) {
                        let rb = reply.to_vec().unwrap();
                        prop_assert_eq!(rb.get(..4), b.get(..4));
                    }
                }
            }
        }
    }
}
