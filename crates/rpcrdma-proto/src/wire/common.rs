//! What every RPC-over-RDMA version shares below the version dispatch: the
//! four-word prefix (`rpcrdma_common`) and the hex rendering of raw octets
//! the headers' `Display` uses. [`crate::wire::v1`], [`crate::wire::v2`]
//! and [`crate::wire::header`] import from here; none of them imports
//! another's internals, so the module graph has no cycle.

use crate::xdr::{be_u32_at, DecodeErrorKind, Reader};
use crate::DecodeError;

/// Octets of the prefix every version shares (`rpcrdma_common`).
pub const FIXED_PREFIX_LEN: usize = 16;

/// The four words every RPC-over-RDMA version starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub vers: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// `rdma_proc` (v1) / `rdma_htype` (v2).
    pub proc: u32,
}

impl Prefix {
    /// The prefix of `buf`, or `None` if `buf` is shorter than
    /// [`FIXED_PREFIX_LEN`].
    pub fn read(buf: &[u8]) -> Option<Prefix> {
        buf.first_chunk().map(Prefix::from_bytes)
    }

    /// The prefix in these 16 octets.
    #[inline]
    pub fn from_bytes(b: &[u8; FIXED_PREFIX_LEN]) -> Prefix {
        Prefix {
            xid: be_u32_at(b, 0),
            vers: be_u32_at(b, 4),
            credit: be_u32_at(b, 8),
            proc: be_u32_at(b, 12),
        }
    }

    /// The 16 octets of the prefix.
    #[inline]
    pub fn to_bytes(&self) -> [u8; FIXED_PREFIX_LEN] {
        let [x0, x1, x2, x3] = self.xid.to_be_bytes();
        let [v0, v1, v2, v3] = self.vers.to_be_bytes();
        let [c0, c1, c2, c3] = self.credit.to_be_bytes();
        let [p0, p1, p2, p3] = self.proc.to_be_bytes();
        [
            x0, x1, x2, x3, v0, v1, v2, v3, c0, c1, c2, c3, p0, p1, p2, p3,
        ]
    }
}

impl Prefix {
    /// Reads the four common words and checks that `rdma_vers` is `want`
    /// (a version-specific decoder is only called for its own version).
    pub(crate) fn read_expecting(r: &mut Reader<'_>, want: u32) -> Result<Prefix, DecodeError> {
        let xid = r.u32("rdma_xid")?;
        let vers_at = r.position();
        let vers = r.u32("rdma_vers")?;
        if vers != want {
            return Err(DecodeError::new(
                DecodeErrorKind::BadValue {
                    what: "rdma_vers",
                    detail: format!("{vers} is not version {want}"),
                },
                vers_at,
                "rdma_vers",
            ));
        }
        let credit = r.u32("rdma_credit")?;
        let proc = r.u32("rdma_proc")?;
        Ok(Prefix {
            xid,
            vers,
            credit,
            proc,
        })
    }
}

/// Lower-case hex of `b` (for the pretty printers).
pub(crate) fn hex_string(b: &[u8]) -> String {
    use core::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}
