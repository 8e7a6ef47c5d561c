//! The XDR of the small part of NFSv4.1 (RFC 8881) that the backchannel
//! probe needs ([`crate::client4`]): COMPOUND with SEQUENCE, PUTROOTFH,
//! PUTFH, LOOKUP, GETATTR, GETFH, EXCHANGE_ID, CREATE_SESSION,
//! DESTROY_SESSION, DESTROY_CLIENTID, RECLAIM_COMPLETE, OPEN, CLOSE and
//! DELEGRETURN ([`ops`]), and the callback program's CB_COMPOUND with
//! CB_SEQUENCE and CB_RECALL ([`cb`]).
//!
//! Both directions of every type are here (a client encodes arguments and
//! decodes results; the tests' fake server does the reverse), so that
//! every type round-trips. Decoding is bounded: every string, handle and
//! list from the peer has a named limit below ([`MAX_TAG`],
//! [`MAX_OPAQUE`], [`NFS4_FHSIZE`], [`MAX_CB_OPS`], …), checked before
//! anything is copied; RFC 8881 leaves `utf8str_cs` tags and component
//! names unbounded, the limits are ours.
//!
//! RFC 8881's text is not among `specs/` (only RFC 8167 is), so the
//! section references here are plain comments, not checked citations.

pub mod cb;
mod enc;
pub mod ops;
#[cfg(test)]
mod tests;

pub use enc::Enc;

use rpcrdma_proto::xdr::Reader;
use rpcrdma_proto::DecodeError;

/// The NFS program (RFC 8881 §16.1: `NFS4_PROGRAM`).
pub const NFS4_PROGRAM: u32 = 100_003;
/// NFS version 4 (minor version 1 travels in the COMPOUND).
pub const NFS_V4: u32 = 4;
/// `NFSPROC4_NULL`.
pub const NFSPROC4_NULL: u32 = 0;
/// `NFSPROC4_COMPOUND`.
pub const NFSPROC4_COMPOUND: u32 = 1;
/// The minor version spoken.
pub const MINOR_VERSION: u32 = 1;
/// The callback program number a client offers in CREATE_SESSION (Linux's
/// client uses the same, `NFS4_CALLBACK`).
pub const CB_PROGRAM: u32 = 0x4000_0000;
/// The callback program's version (`NFS_CB`).
pub const NFS_CB: u32 = 1;
/// `CB_NULL`.
pub const CB_NULL: u32 = 0;
/// `CB_COMPOUND`.
pub const CB_COMPOUND: u32 = 1;

/// `NFS4_FHSIZE`: the XDR bound of `nfs_fh4`.
pub const NFS4_FHSIZE: u32 = 128;
/// `NFS4_OPAQUE_LIMIT`: the XDR bound of owner ids, server scopes,
/// `opaque<NFS4_OPAQUE_LIMIT>`; also our bound on strings the XDR leaves
/// unbounded (names, ACE `who`, implementation ids).
pub const MAX_OPAQUE: u32 = 1024;
/// Longest COMPOUND / CB_COMPOUND tag we decode (ours).
pub const MAX_TAG: u32 = 64;
/// Most operations of a CB_COMPOUND we decode; also our backchannel
/// `ca_maxoperations`.
pub const MAX_CB_OPS: u32 = 16;
/// Most operation results of a COMPOUND reply we decode (we never send
/// more than this many operations).
pub const MAX_OPS: u32 = 16;
/// Most words of a `bitmap4` we decode.
pub const MAX_BITMAP_WORDS: u32 = 8;
/// Longest `attrlist4` we decode (we ask for three attributes).
pub const MAX_ATTRLIST: u32 = 4096;
/// Most referring-call lists (and calls per list) in a CB_SEQUENCE.
pub const MAX_REFERRING: u32 = 16;

/// `nfsstat4` values used here (RFC 8881 §15.1).
pub mod status {
    /// Success.
    pub const NFS4_OK: u32 = 0;
    /// No such file or directory.
    pub const NFS4ERR_NOENT: u32 = 2;
    /// Operation not supported.
    pub const NFS4ERR_NOTSUPP: u32 = 10004;
    /// Try again later.
    pub const NFS4ERR_DELAY: u32 = 10008;
    /// The server is in its grace period.
    pub const NFS4ERR_GRACE: u32 = 10013;
    /// Out of resources.
    pub const NFS4ERR_RESOURCE: u32 = 10018;
    /// Minor version not supported.
    pub const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
    /// Stale client id.
    pub const NFS4ERR_STALE_CLIENTID: u32 = 10022;
    /// Bad stateid.
    pub const NFS4ERR_BAD_STATEID: u32 = 10025;
    /// Arguments do not decode.
    pub const NFS4ERR_BADXDR: u32 = 10036;
    /// Illegal operation number.
    pub const NFS4ERR_OP_ILLEGAL: u32 = 10044;
    /// Unknown session.
    pub const NFS4ERR_BADSESSION: u32 = 10052;
    /// Slot out of range.
    pub const NFS4ERR_BADSLOT: u32 = 10053;
    /// Sequence id out of order.
    pub const NFS4ERR_SEQ_MISORDERED: u32 = 10063;
    /// SEQUENCE / CB_SEQUENCE not first.
    pub const NFS4ERR_SEQUENCE_POS: u32 = 10064;
    /// A retry of a request whose reply was not cached.
    pub const NFS4ERR_RETRY_UNCACHED_REP: u32 = 10068;
    /// More operations than the channel allows.
    pub const NFS4ERR_TOO_MANY_OPS: u32 = 10070;
    /// The first operation was not SEQUENCE / CB_SEQUENCE.
    pub const NFS4ERR_OP_NOT_IN_SESSION: u32 = 10071;

    /// The name of a status (for messages).
    pub fn name(s: u32) -> &'static str {
        match s {
            NFS4_OK => "NFS4_OK",
            NFS4ERR_NOENT => "NFS4ERR_NOENT",
            13 => "NFS4ERR_ACCESS",
            10001 => "NFS4ERR_BADHANDLE",
            NFS4ERR_NOTSUPP => "NFS4ERR_NOTSUPP",
            NFS4ERR_DELAY => "NFS4ERR_DELAY",
            NFS4ERR_GRACE => "NFS4ERR_GRACE",
            NFS4ERR_RESOURCE => "NFS4ERR_RESOURCE",
            NFS4ERR_MINOR_VERS_MISMATCH => "NFS4ERR_MINOR_VERS_MISMATCH",
            NFS4ERR_STALE_CLIENTID => "NFS4ERR_STALE_CLIENTID",
            NFS4ERR_BAD_STATEID => "NFS4ERR_BAD_STATEID",
            NFS4ERR_BADXDR => "NFS4ERR_BADXDR",
            NFS4ERR_OP_ILLEGAL => "NFS4ERR_OP_ILLEGAL",
            NFS4ERR_BADSESSION => "NFS4ERR_BADSESSION",
            NFS4ERR_BADSLOT => "NFS4ERR_BADSLOT",
            NFS4ERR_SEQ_MISORDERED => "NFS4ERR_SEQ_MISORDERED",
            NFS4ERR_SEQUENCE_POS => "NFS4ERR_SEQUENCE_POS",
            NFS4ERR_RETRY_UNCACHED_REP => "NFS4ERR_RETRY_UNCACHED_REP",
            NFS4ERR_TOO_MANY_OPS => "NFS4ERR_TOO_MANY_OPS",
            NFS4ERR_OP_NOT_IN_SESSION => "NFS4ERR_OP_NOT_IN_SESSION",
            _ => "an NFS error",
        }
    }
}

/// `sessionid4`: 16 opaque octets.
pub type SessionId = [u8; 16];

/// `stateid4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct StateId {
    /// `seqid`.
    pub seqid: u32,
    /// `other`.
    pub other: [u8; 12],
}

impl StateId {
    /// Encodes.
    pub fn put(&self, e: &mut Enc) {
        e.u32(self.seqid);
        e.fixed(&self.other);
    }
    /// Decodes.
    pub fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(StateId {
            seqid: r.u32("stateid4 seqid")?,
            other: r.array::<12>("stateid4 other")?,
        })
    }
}

/// `nfs_fh4`: at most [`NFS4_FHSIZE`] octets.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Fh(pub Vec<u8>);

impl Fh {
    /// Encodes.
    pub fn put(&self, e: &mut Enc) {
        e.opaque(&self.0);
    }
    /// Decodes (bounded by `NFS4_FHSIZE`).
    pub fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Fh(r
            .var_opaque(NFS4_FHSIZE, "NFS4_FHSIZE", "nfs_fh4")?
            .to_vec()))
    }
}

/// An opaque or string of at most `max` octets (named `limit`).
pub(crate) fn get_opaque(
    r: &mut Reader<'_>,
    max: u32,
    limit: &'static str,
    field: &'static str,
) -> Result<Vec<u8>, DecodeError> {
    Ok(r.var_opaque(max, limit, field)?.to_vec())
}

/// A `bitmap4` (at most [`MAX_BITMAP_WORDS`] words).
pub(crate) fn get_bitmap(r: &mut Reader<'_>) -> Result<Vec<u32>, DecodeError> {
    let n = r.count(MAX_BITMAP_WORDS, "MAX_BITMAP_WORDS", 4, "bitmap4")?;
    (0..n).map(|_| r.u32("bitmap4 word")).collect()
}

/// Encodes a `bitmap4`.
pub(crate) fn put_bitmap(e: &mut Enc, words: &[u32]) {
    e.u32(words.len() as u32);
    for w in words {
        e.u32(*w);
    }
}
