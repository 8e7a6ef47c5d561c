//! The callback program (RFC 8881 §16.2.1, §20): CB_COMPOUND with
//! CB_SEQUENCE and CB_RECALL.
//!
//! A client decodes a CB_COMPOUND one operation at a time
//! ([`CbHeader::get`], then [`CbOp::get`]) so that it can answer the
//! operations before one it cannot decode; the fake server of the tests
//! encodes whole ones ([`CbCompound::encode`]).

use rpcrdma_proto::xdr::Reader;
use rpcrdma_proto::DecodeError;

use super::{get_opaque, Enc, Fh, SessionId, StateId, MAX_CB_OPS, MAX_REFERRING, MAX_TAG};

/// `OP_CB_GETATTR`: the first callback operation number.
pub const OP_CB_GETATTR: u32 = 3;
/// `OP_CB_RECALL`.
pub const OP_CB_RECALL: u32 = 4;
/// `OP_CB_SEQUENCE`.
pub const OP_CB_SEQUENCE: u32 = 11;
/// `OP_CB_OFFLOAD` (RFC 7862): the last callback operation number we know
/// of.
pub const OP_CB_OFFLOAD: u32 = 15;
/// `OP_CB_ILLEGAL`.
pub const OP_CB_ILLEGAL: u32 = 10044;

/// The header of `CB_COMPOUND4args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbHeader {
    /// `tag` (at most [`MAX_TAG`] octets).
    pub tag: Vec<u8>,
    /// `minorversion`.
    pub minorversion: u32,
    /// `callback_ident`.
    pub callback_ident: u32,
    /// The number of operations (at most [`MAX_CB_OPS`]).
    pub count: u32,
}

impl CbHeader {
    /// Decodes the header (tag and operation count bounded).
    pub fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(CbHeader {
            tag: get_opaque(r, MAX_TAG, "MAX_TAG", "CB_COMPOUND tag")?,
            minorversion: r.u32("CB_COMPOUND minorversion")?,
            callback_ident: r.u32("callback_ident")?,
            count: r.count(MAX_CB_OPS, "MAX_CB_OPS", 4, "CB_COMPOUND argarray")?,
        })
    }
}

/// `referring_call_list4`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferringCallList {
    /// `rcl_sessionid`.
    pub sessionid: SessionId,
    /// `rcl_referring_calls`: (sequenceid, slotid) pairs.
    pub calls: Vec<(u32, u32)>,
}

/// `CB_SEQUENCE4args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbSequenceArgs {
    /// `csa_sessionid`.
    pub sessionid: SessionId,
    /// `csa_sequenceid`.
    pub sequenceid: u32,
    /// `csa_slotid`.
    pub slotid: u32,
    /// `csa_highest_slotid`.
    pub highest_slotid: u32,
    /// `csa_cachethis`.
    pub cachethis: bool,
    /// `csa_referring_call_lists` (at most [`MAX_REFERRING`] lists of at
    /// most [`MAX_REFERRING`] calls).
    pub referring: Vec<ReferringCallList>,
}

/// `CB_SEQUENCE4resok`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbSequenceResOk {
    /// `csr_sessionid`.
    pub sessionid: SessionId,
    /// `csr_sequenceid`.
    pub sequenceid: u32,
    /// `csr_slotid`.
    pub slotid: u32,
    /// `csr_highest_slotid`.
    pub highest_slotid: u32,
    /// `csr_target_highest_slotid`.
    pub target_highest_slotid: u32,
}

/// `CB_RECALL4args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbRecallArgs {
    /// The delegation's stateid.
    pub stateid: StateId,
    /// `truncate`.
    pub truncate: bool,
    /// The file.
    pub fh: Fh,
}

/// One callback operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CbOp {
    /// CB_SEQUENCE.
    Sequence(CbSequenceArgs),
    /// CB_RECALL.
    Recall(CbRecallArgs),
    /// Any other operation number: its arguments are not decoded (the
    /// compound stops at it, so nothing after it is read).
    Other(u32),
}

impl CbOp {
    /// The operation number.
    pub fn op(&self) -> u32 {
        match self {
            CbOp::Sequence(_) => OP_CB_SEQUENCE,
            CbOp::Recall(_) => OP_CB_RECALL,
            CbOp::Other(n) => *n,
        }
    }

    /// Decodes one operation: its number, and the arguments of CB_SEQUENCE
    /// and CB_RECALL (the others' are left unread).
    pub fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let opnum = r.u32("nfs_cb_opnum4")?;
        Self::get_args(opnum, r)
    }

    /// Decodes the arguments of operation `opnum` (nothing for
    /// [`CbOp::Other`]).
    pub fn get_args(opnum: u32, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match opnum {
            OP_CB_SEQUENCE => {
                let sessionid = r.array::<16>("csa_sessionid")?;
                let sequenceid = r.u32("csa_sequenceid")?;
                let slotid = r.u32("csa_slotid")?;
                let highest_slotid = r.u32("csa_highest_slotid")?;
                let cachethis = r.bool("csa_cachethis")?;
                let n = r.count(MAX_REFERRING, "MAX_REFERRING", 20, "referring_call_lists")?;
                let mut referring = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let sessionid = r.array::<16>("rcl_sessionid")?;
                    let m = r.count(MAX_REFERRING, "MAX_REFERRING", 8, "rcl_referring_calls")?;
                    let calls = (0..m)
                        .map(|_| Ok((r.u32("rc_sequenceid")?, r.u32("rc_slotid")?)))
                        .collect::<Result<_, DecodeError>>()?;
                    referring.push(ReferringCallList { sessionid, calls });
                }
                CbOp::Sequence(CbSequenceArgs {
                    sessionid,
                    sequenceid,
                    slotid,
                    highest_slotid,
                    cachethis,
                    referring,
                })
            }
            OP_CB_RECALL => CbOp::Recall(CbRecallArgs {
                stateid: StateId::get(r)?,
                truncate: r.bool("CB_RECALL truncate")?,
                fh: Fh::get(r)?,
            }),
            other => CbOp::Other(other),
        })
    }

    fn put(&self, e: &mut Enc) {
        e.u32(self.op());
        match self {
            CbOp::Sequence(s) => {
                e.fixed(&s.sessionid);
                e.u32(s.sequenceid);
                e.u32(s.slotid);
                e.u32(s.highest_slotid);
                e.bool(s.cachethis);
                e.u32(s.referring.len() as u32);
                for l in &s.referring {
                    e.fixed(&l.sessionid);
                    e.u32(l.calls.len() as u32);
                    for (seq, slot) in &l.calls {
                        e.u32(*seq);
                        e.u32(*slot);
                    }
                }
            }
            CbOp::Recall(a) => {
                a.stateid.put(e);
                e.bool(a.truncate);
                a.fh.put(e);
            }
            CbOp::Other(_) => {}
        }
    }
}

/// A whole `CB_COMPOUND4args` (what a server sends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbCompound {
    /// `tag`.
    pub tag: Vec<u8>,
    /// `minorversion`.
    pub minorversion: u32,
    /// `callback_ident`.
    pub callback_ident: u32,
    /// `argarray`.
    pub ops: Vec<CbOp>,
}

impl CbCompound {
    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.opaque(&self.tag);
        e.u32(self.minorversion);
        e.u32(self.callback_ident);
        e.u32(self.ops.len() as u32);
        for o in &self.ops {
            o.put(&mut e);
        }
        e.into_vec()
    }

    /// Decodes a whole CB_COMPOUND whose operations are all decodable
    /// (CB_SEQUENCE, CB_RECALL; an [`CbOp::Other`] ends the list).
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let h = CbHeader::get(&mut r)?;
        let mut ops = Vec::with_capacity(h.count as usize);
        for _ in 0..h.count {
            let o = CbOp::get(&mut r)?;
            let stop = matches!(o, CbOp::Other(_));
            ops.push(o);
            if stop {
                break;
            }
        }
        Ok(CbCompound {
            tag: h.tag,
            minorversion: h.minorversion,
            callback_ident: h.callback_ident,
            ops,
        })
    }
}

/// One callback operation's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbOpRes {
    /// The operation number (`OP_CB_ILLEGAL` for an illegal one).
    pub op: u32,
    /// `nfsstat4`.
    pub status: u32,
    /// CB_SEQUENCE's `resok`.
    pub sequence: Option<CbSequenceResOk>,
}

impl CbOpRes {
    /// A result without `resok` (any status but CB_SEQUENCE's success).
    pub fn fail(op: u32, status: u32) -> Self {
        CbOpRes {
            op,
            status,
            sequence: None,
        }
    }
}

/// `CB_COMPOUND4res`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbCompoundRes {
    /// The status of the last operation evaluated.
    pub status: u32,
    /// The tag (echoed).
    pub tag: Vec<u8>,
    /// One result per operation evaluated.
    pub res: Vec<CbOpRes>,
}

impl CbCompoundRes {
    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u32(self.status);
        e.opaque(&self.tag);
        e.u32(self.res.len() as u32);
        for r in &self.res {
            e.u32(r.op);
            e.u32(r.status);
            if let (0, Some(s)) = (r.status, &r.sequence) {
                e.fixed(&s.sessionid);
                e.u32(s.sequenceid);
                e.u32(s.slotid);
                e.u32(s.highest_slotid);
                e.u32(s.target_highest_slotid);
            }
        }
        e.into_vec()
    }

    /// Decodes (bounded: tag, result count).
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let status = r.u32("CB_COMPOUND4res status")?;
        let tag = get_opaque(&mut r, MAX_TAG, "MAX_TAG", "tag")?;
        let n = r.count(MAX_CB_OPS, "MAX_CB_OPS", 8, "resarray")?;
        let mut res = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let op = r.u32("nfs_cb_opnum4")?;
            let st = r.u32("nfsstat4")?;
            let sequence = if op == OP_CB_SEQUENCE && st == 0 {
                Some(CbSequenceResOk {
                    sessionid: r.array::<16>("csr_sessionid")?,
                    sequenceid: r.u32("csr_sequenceid")?,
                    slotid: r.u32("csr_slotid")?,
                    highest_slotid: r.u32("csr_highest_slotid")?,
                    target_highest_slotid: r.u32("csr_target_highest_slotid")?,
                })
            } else {
                None
            };
            res.push(CbOpRes {
                op,
                status: st,
                sequence,
            });
        }
        r.finish("CB_COMPOUND4res")?;
        Ok(CbCompoundRes { status, tag, res })
    }
}
