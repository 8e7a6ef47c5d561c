//! A version error as a version 2 requester receives it, in every form a
//! server sends: what a v2 probe gets back from a server that does not
//! speak version 2.
//!
//! A v1-only server answers a version 2 message with a **version 1**
//! RDMA_ERROR / ERR_VERS: seven words, no `rdma_flags`. Linux svcrdma
//! (`svc_rdma_send_error_msg()` in net/sunrpc/xprtrdma/svc_rdma_sendto.c,
//! reached from `svc_rdma_recvfrom()` when `svc_rdma_xdr_decode_req()`
//! returns `-EPROTONOSUPPORT` for `*p != rpcrdma_version`) writes:
//!
//! ```text
//! *p++ = *rdma_argp;           // rdma_xid: echoed
//! *p++ = *(rdma_argp + 1);     // rdma_vers: echoed, so 2 for a v2 message
//! *p++ = rdma->sc_fc_credits;  // rdma_credit: the server's credit grant
//! *p = rdma_error;             // rdma_proc: RDMA_ERROR (4)
//! ...
//! case -EPROTONOSUPPORT:
//!         *p++ = err_vers;         // rdma_err: ERR_VERS (1)
//!         *p++ = rpcrdma_version;  // rdma_vers_low: 1
//!         *p = rpcrdma_version;    // rdma_vers_high: 1
//! ```
//!
//! Older kernels (`svc_rdma_xdr_encode_error()`, `*va++ = rmsgp->rm_vers`)
//! and libntirpc (`xdr_rdma_encode_error()` rewrites the received header in
//! place: xid, vers and even credit stay) also echo the received version,
//! and so does our own v1 engine ([`crate::wire::header::WireAnswer::ErrVers`],
//! as RFC 8166 §4.5 requires). A server may instead put its own version, 1,
//! in `rdma_vers`; that form is a well-formed version 1 header.
//!
//! So the forms are: the v1 layout with `rdma_vers` 2 (which does not parse
//! as a v2 header: its fifth word would be `rdma_flags`), the v1 layout with
//! `rdma_vers` 1 (a v1 [`crate::wire::v1::RdmaError::Vers`]), and the v2
//! layout (an [`crate::wire::v2::RdmaError::Vers`] from a v2 peer).
//! [`crate::wire::header::decode`] recognises all three; this module holds
//! the value it surfaces and the recogniser of the first form.

use core::fmt;

use crate::wire::common::Prefix;
use crate::xdr::be_u32_at;

/// Octets of a version 1 RDMA_ERROR / ERR_VERS: four common words,
/// `rdma_err`, `rdma_vers_low`, `rdma_vers_high`.
pub const V1_ERR_VERS_LEN: usize = 28;

/// `rdma_proc` RDMA_ERROR (v1) / `rdma_htype` RDMA2_ERROR (v2): both 4.
const ERROR_PROC: u32 = 4;
/// `ERR_VERS` (v1) / `RDMA2_ERR_VERS` (v2): both 1.
const ERR_VERS: u32 = 1;

/// The wire layout a version error arrived in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VersErrorLayout {
    /// The version 1 RDMA_ERROR layout (seven words, no `rdma_flags`), with
    /// whatever `rdma_vers` the server put ([`VersionError::vers`]): what a
    /// v1-only server sends.
    V1,
    /// The version 2 RDMA2_ERROR layout (with `rdma_flags`).
    V2,
}

/// A received ERR_VERS / RDMA2_ERR_VERS: the peer does not support the
/// version of the message `xid`; it supports `low..=high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionError {
    /// `rdma_xid`: the XID of the message that was refused.
    pub xid: u32,
    /// `rdma_vers` as received: the refused version echoed (Linux, RFC 8166
    /// §4.5) or the server's own version.
    pub vers: u32,
    /// `rdma_credit` as received. Not a grant a v2 requester may use: the
    /// receiver of RDMA2_ERROR ignores it (draft §5.3.3), and a v1 server's
    /// value is its v1 grant, which applies only once the connection
    /// continues in version 1.
    pub credit: u32,
    /// `rdma_vers_low`.
    pub low: u32,
    /// `rdma_vers_high`.
    pub high: u32,
    /// The layout it arrived in.
    pub layout: VersErrorLayout,
}

impl VersionError {
    /// True if the peer says it supports version `v`.
    pub fn supports(&self, v: u32) -> bool {
        (self.low..=self.high).contains(&v)
    }

    /// The version 1 layout with `rdma_vers` 2: `buf` is exactly seven
    /// words, `rdma_proc` RDMA_ERROR, `rdma_err` ERR_VERS. Anything else
    /// (shorter, longer, another code) is `None`: a truncated or padded
    /// error report is not guessed at. Called only for a message whose
    /// `rdma_vers` is 2 and that does not decode as a version 2 header.
    pub(crate) fn v1_layout_of_v2(buf: &[u8]) -> Option<VersionError> {
        let b: &[u8; V1_ERR_VERS_LEN] = buf.try_into().ok()?;
        let p = Prefix::read(b)?;
        if p.proc != ERROR_PROC || be_u32_at(b, 16) != ERR_VERS {
            return None;
        }
        Some(VersionError {
            xid: p.xid,
            vers: p.vers,
            credit: p.credit,
            low: be_u32_at(b, 20),
            high: be_u32_at(b, 24),
            layout: VersErrorLayout::V1,
        })
    }
}

impl fmt::Display for VersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "version {} refused for xid 0x{:08x}: peer supports {}..={} ({} layout)",
            self.vers,
            self.xid,
            self.low,
            self.high,
            match self.layout {
                VersErrorLayout::V1 => "version 1",
                VersErrorLayout::V2 => "version 2",
            }
        )
    }
}
