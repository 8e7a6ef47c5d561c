//! Forechannel COMPOUND (RFC 8881 §16.2, §18): arguments and results of
//! the operations the backchannel probe sends.

use rpcrdma_proto::xdr::{DecodeErrorKind, Reader};
use rpcrdma_proto::DecodeError;

use super::{
    get_bitmap, get_opaque, put_bitmap, Enc, Fh, SessionId, StateId, MAX_ATTRLIST, MAX_OPAQUE,
    MAX_OPS, MAX_TAG,
};

/// Operation numbers (`nfs_opnum4`).
pub mod op {
    /// CLOSE.
    pub const CLOSE: u32 = 4;
    /// DELEGRETURN.
    pub const DELEGRETURN: u32 = 8;
    /// GETATTR.
    pub const GETATTR: u32 = 9;
    /// GETFH.
    pub const GETFH: u32 = 10;
    /// LOOKUP.
    pub const LOOKUP: u32 = 15;
    /// OPEN.
    pub const OPEN: u32 = 18;
    /// PUTFH.
    pub const PUTFH: u32 = 22;
    /// PUTROOTFH.
    pub const PUTROOTFH: u32 = 24;
    /// EXCHANGE_ID.
    pub const EXCHANGE_ID: u32 = 42;
    /// CREATE_SESSION.
    pub const CREATE_SESSION: u32 = 43;
    /// DESTROY_SESSION.
    pub const DESTROY_SESSION: u32 = 44;
    /// SEQUENCE.
    pub const SEQUENCE: u32 = 53;
    /// DESTROY_CLIENTID.
    pub const DESTROY_CLIENTID: u32 = 57;
    /// RECLAIM_COMPLETE.
    pub const RECLAIM_COMPLETE: u32 = 58;
    /// ILLEGAL.
    pub const ILLEGAL: u32 = 10044;

    /// The operation's name.
    pub fn name(op: u32) -> &'static str {
        match op {
            CLOSE => "CLOSE",
            DELEGRETURN => "DELEGRETURN",
            GETATTR => "GETATTR",
            GETFH => "GETFH",
            LOOKUP => "LOOKUP",
            OPEN => "OPEN",
            PUTFH => "PUTFH",
            PUTROOTFH => "PUTROOTFH",
            EXCHANGE_ID => "EXCHANGE_ID",
            CREATE_SESSION => "CREATE_SESSION",
            DESTROY_SESSION => "DESTROY_SESSION",
            SEQUENCE => "SEQUENCE",
            DESTROY_CLIENTID => "DESTROY_CLIENTID",
            RECLAIM_COMPLETE => "RECLAIM_COMPLETE",
            _ => "an operation",
        }
    }
}

/// `EXCHGID4_FLAG_USE_NON_PNFS`.
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// `EXCHGID4_FLAG_CONFIRMED_R`.
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;
/// `CREATE_SESSION4_FLAG_CONN_BACK_CHAN`: the connection of the call is
/// bound to the session's backchannel too.
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
/// `OPEN4_SHARE_ACCESS_READ`.
pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x1;
/// `OPEN4_SHARE_ACCESS_WANT_READ_DELEG`.
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x0100;
/// `OPEN4_SHARE_DENY_NONE`.
pub const OPEN4_SHARE_DENY_NONE: u32 = 0;
/// `SP4_NONE`.
const SP4_NONE: u32 = 0;
/// `AUTH_NONE` as a `callback_sec_parms4` flavor.
pub const AUTH_NONE: u32 = 0;
/// `CLAIM_NULL`.
const CLAIM_NULL: u32 = 0;
/// `OPEN4_NOCREATE`.
const OPEN4_NOCREATE: u32 = 0;
/// `open_delegation_type4` values.
pub mod deleg {
    /// No delegation.
    pub const NONE: u32 = 0;
    /// A read delegation.
    pub const READ: u32 = 1;
    /// A write delegation.
    pub const WRITE: u32 = 2;
    /// None, with a reason (v4.1).
    pub const NONE_EXT: u32 = 3;
}

/// Attribute numbers asked by GETATTR.
pub mod attr {
    /// `FATTR4_TYPE`.
    pub const TYPE: u32 = 1;
    /// `FATTR4_SIZE`.
    pub const SIZE: u32 = 4;
    /// `FATTR4_FILEID`.
    pub const FILEID: u32 = 20;
}

/// `channel_attrs4`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ChannelAttrs {
    /// `ca_headerpadsize`.
    pub headerpadsize: u32,
    /// `ca_maxrequestsize`.
    pub maxrequestsize: u32,
    /// `ca_maxresponsesize`.
    pub maxresponsesize: u32,
    /// `ca_maxresponsesize_cached`.
    pub maxresponsesize_cached: u32,
    /// `ca_maxoperations`.
    pub maxoperations: u32,
    /// `ca_maxrequests`.
    pub maxrequests: u32,
    /// `ca_rdma_ird<1>`.
    pub rdma_ird: Option<u32>,
}

impl ChannelAttrs {
    fn put(&self, e: &mut Enc) {
        for v in [
            self.headerpadsize,
            self.maxrequestsize,
            self.maxresponsesize,
            self.maxresponsesize_cached,
            self.maxoperations,
            self.maxrequests,
        ] {
            e.u32(v);
        }
        e.u32(self.rdma_ird.is_some() as u32);
        if let Some(i) = self.rdma_ird {
            e.u32(i);
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut a = ChannelAttrs {
            headerpadsize: r.u32("ca_headerpadsize")?,
            maxrequestsize: r.u32("ca_maxrequestsize")?,
            maxresponsesize: r.u32("ca_maxresponsesize")?,
            maxresponsesize_cached: r.u32("ca_maxresponsesize_cached")?,
            maxoperations: r.u32("ca_maxoperations")?,
            maxrequests: r.u32("ca_maxrequests")?,
            rdma_ird: None,
        };
        if r.count(1, "ca_rdma_ird<1>", 4, "ca_rdma_ird")? == 1 {
            a.rdma_ird = Some(r.u32("ca_rdma_ird")?);
        }
        Ok(a)
    }
}

/// EXCHANGE_ID arguments (SP4_NONE, no implementation id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeIdArgs {
    /// `co_verifier`.
    pub verifier: [u8; 8],
    /// `co_ownerid` (at most [`MAX_OPAQUE`] octets).
    pub ownerid: Vec<u8>,
    /// `eia_flags`.
    pub flags: u32,
}

/// EXCHANGE_ID results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeIdResOk {
    /// `eir_clientid`.
    pub clientid: u64,
    /// `eir_sequenceid`.
    pub sequenceid: u32,
    /// `eir_flags`.
    pub flags: u32,
    /// `so_minor_id`.
    pub minor_id: u64,
    /// `so_major_id`.
    pub major_id: Vec<u8>,
    /// `eir_server_scope`.
    pub scope: Vec<u8>,
    /// `nii_name` of `eir_server_impl_id`, if given.
    pub impl_name: Option<Vec<u8>>,
}

/// CREATE_SESSION arguments (callback security AUTH_NONE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSessionArgs {
    /// `csa_clientid`.
    pub clientid: u64,
    /// `csa_sequence`.
    pub sequence: u32,
    /// `csa_flags`.
    pub flags: u32,
    /// `csa_fore_chan_attrs`.
    pub fore: ChannelAttrs,
    /// `csa_back_chan_attrs`.
    pub back: ChannelAttrs,
    /// `csa_cb_program`.
    pub cb_program: u32,
}

/// CREATE_SESSION results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSessionResOk {
    /// `csr_sessionid`.
    pub sessionid: SessionId,
    /// `csr_sequence`.
    pub sequence: u32,
    /// `csr_flags`.
    pub flags: u32,
    /// `csr_fore_chan_attrs`.
    pub fore: ChannelAttrs,
    /// `csr_back_chan_attrs`.
    pub back: ChannelAttrs,
}

/// SEQUENCE arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceArgs {
    /// `sa_sessionid`.
    pub sessionid: SessionId,
    /// `sa_sequenceid`.
    pub sequenceid: u32,
    /// `sa_slotid`.
    pub slotid: u32,
    /// `sa_highest_slotid`.
    pub highest_slotid: u32,
    /// `sa_cachethis`.
    pub cachethis: bool,
}

/// SEQUENCE results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceResOk {
    /// `sr_sessionid`.
    pub sessionid: SessionId,
    /// `sr_sequenceid`.
    pub sequenceid: u32,
    /// `sr_slotid`.
    pub slotid: u32,
    /// `sr_highest_slotid`.
    pub highest_slotid: u32,
    /// `sr_target_highest_slotid`.
    pub target_highest_slotid: u32,
    /// `sr_status_flags` (`SEQ4_STATUS_*`).
    pub status_flags: u32,
}

/// `SEQ4_STATUS_CB_PATH_DOWN`: the server cannot reach our backchannel.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;

/// OPEN arguments: open an existing file by name (CLAIM_NULL) in the
/// current directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenArgs {
    /// `share_access` (with the `WANT_*` bits).
    pub share_access: u32,
    /// `share_deny`.
    pub share_deny: u32,
    /// `open_owner4.clientid`.
    pub clientid: u64,
    /// `open_owner4.owner`.
    pub owner: Vec<u8>,
    /// The file's name.
    pub name: Vec<u8>,
}

/// A delegation granted by OPEN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delegation {
    /// `OPEN_DELEGATE_NONE`.
    None,
    /// `OPEN_DELEGATE_READ` / `OPEN_DELEGATE_WRITE`.
    Granted {
        /// READ or WRITE ([`deleg`]).
        kind: u32,
        /// The delegation stateid.
        stateid: StateId,
        /// `recall`: the server recalls it at once.
        recall: bool,
    },
    /// `OPEN_DELEGATE_NONE_EXT` with its `why_no_delegation4`.
    NoneExt {
        /// `ond_why`.
        why: u32,
    },
}

/// OPEN results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenResOk {
    /// The open stateid.
    pub stateid: StateId,
    /// `rflags`.
    pub rflags: u32,
    /// The delegation.
    pub delegation: Delegation,
}

/// The attributes decoded from GETATTR (those asked; others are kept as
/// the raw `attrlist4`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Fattr {
    /// The returned bitmap.
    pub mask: Vec<u32>,
    /// `FATTR4_TYPE` (1 regular file, 2 directory).
    pub ftype: Option<u32>,
    /// `FATTR4_SIZE`.
    pub size: Option<u64>,
    /// `FATTR4_FILEID`.
    pub fileid: Option<u64>,
}

impl Fattr {
    /// The `attrlist4` of the attributes present.
    fn vals(&self) -> Vec<u8> {
        let mut e = Enc::new();
        if let Some(t) = self.ftype {
            e.u32(t);
        }
        if let Some(s) = self.size {
            e.u64(s);
        }
        if let Some(f) = self.fileid {
            e.u64(f);
        }
        e.into_vec()
    }

    /// A `fattr4` with these attributes.
    pub fn new(ftype: u32, size: u64, fileid: u64) -> Self {
        Fattr {
            mask: vec![(1 << attr::TYPE) | (1 << attr::SIZE) | (1 << attr::FILEID)],
            ftype: Some(ftype),
            size: Some(size),
            fileid: Some(fileid),
        }
    }

    fn put(&self, e: &mut Enc) {
        put_bitmap(e, &self.mask);
        e.opaque(&self.vals());
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mask = get_bitmap(r)?;
        let vals = r.var_opaque(MAX_ATTRLIST, "MAX_ATTRLIST", "attrlist4")?;
        let mut f = Fattr {
            mask,
            ..Fattr::default()
        };
        let w0 = f.mask.first().copied().unwrap_or(0);
        let known = (1 << attr::TYPE) | (1 << attr::SIZE) | (1 << attr::FILEID);
        if w0 & !known != 0 || f.mask.iter().skip(1).any(|&w| w != 0) {
            // Attributes we did not ask for: the values are not ours to
            // parse (their sizes vary); keep the mask only.
            return Ok(f);
        }
        let mut v = Reader::new(vals);
        if w0 & (1 << attr::TYPE) != 0 {
            f.ftype = Some(v.u32("fattr4 type")?);
        }
        if w0 & (1 << attr::SIZE) != 0 {
            f.size = Some(v.u64("fattr4 size")?);
        }
        if w0 & (1 << attr::FILEID) != 0 {
            f.fileid = Some(v.u64("fattr4 fileid")?);
        }
        v.finish("attrlist4")?;
        Ok(f)
    }
}

/// One operation's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpArgs {
    /// SEQUENCE.
    Sequence(SequenceArgs),
    /// PUTROOTFH.
    PutRootFh,
    /// PUTFH.
    PutFh(Fh),
    /// LOOKUP of one component.
    Lookup(Vec<u8>),
    /// GETATTR of a bitmap.
    GetAttr(Vec<u32>),
    /// GETFH.
    GetFh,
    /// EXCHANGE_ID.
    ExchangeId(ExchangeIdArgs),
    /// CREATE_SESSION.
    CreateSession(CreateSessionArgs),
    /// DESTROY_SESSION.
    DestroySession(SessionId),
    /// DESTROY_CLIENTID.
    DestroyClientId(u64),
    /// RECLAIM_COMPLETE (`rca_one_fs`).
    ReclaimComplete(bool),
    /// OPEN.
    Open(OpenArgs),
    /// CLOSE of an open stateid.
    Close(StateId),
    /// DELEGRETURN.
    DelegReturn(StateId),
}

impl OpArgs {
    /// The operation number.
    pub fn op(&self) -> u32 {
        match self {
            OpArgs::Sequence(_) => op::SEQUENCE,
            OpArgs::PutRootFh => op::PUTROOTFH,
            OpArgs::PutFh(_) => op::PUTFH,
            OpArgs::Lookup(_) => op::LOOKUP,
            OpArgs::GetAttr(_) => op::GETATTR,
            OpArgs::GetFh => op::GETFH,
            OpArgs::ExchangeId(_) => op::EXCHANGE_ID,
            OpArgs::CreateSession(_) => op::CREATE_SESSION,
            OpArgs::DestroySession(_) => op::DESTROY_SESSION,
            OpArgs::DestroyClientId(_) => op::DESTROY_CLIENTID,
            OpArgs::ReclaimComplete(_) => op::RECLAIM_COMPLETE,
            OpArgs::Open(_) => op::OPEN,
            OpArgs::Close(_) => op::CLOSE,
            OpArgs::DelegReturn(_) => op::DELEGRETURN,
        }
    }

    fn put(&self, e: &mut Enc) {
        e.u32(self.op());
        match self {
            OpArgs::Sequence(s) => {
                e.fixed(&s.sessionid);
                e.u32(s.sequenceid);
                e.u32(s.slotid);
                e.u32(s.highest_slotid);
                e.bool(s.cachethis);
            }
            OpArgs::PutRootFh | OpArgs::GetFh => {}
            OpArgs::PutFh(fh) => fh.put(e),
            OpArgs::Lookup(name) => e.opaque(name),
            OpArgs::GetAttr(mask) => put_bitmap(e, mask),
            OpArgs::ExchangeId(a) => {
                e.fixed(&a.verifier);
                e.opaque(&a.ownerid);
                e.u32(a.flags);
                e.u32(SP4_NONE);
                e.u32(0); // eia_client_impl_id<1>: none
            }
            OpArgs::CreateSession(a) => {
                e.u64(a.clientid);
                e.u32(a.sequence);
                e.u32(a.flags);
                a.fore.put(e);
                a.back.put(e);
                e.u32(a.cb_program);
                e.u32(1); // one callback_sec_parms4:
                e.u32(AUTH_NONE);
            }
            OpArgs::DestroySession(id) => e.fixed(id),
            OpArgs::DestroyClientId(id) => e.u64(*id),
            OpArgs::ReclaimComplete(one_fs) => e.bool(*one_fs),
            OpArgs::Open(a) => {
                e.u32(0); // seqid (ignored in v4.1)
                e.u32(a.share_access);
                e.u32(a.share_deny);
                e.u64(a.clientid);
                e.opaque(&a.owner);
                e.u32(OPEN4_NOCREATE);
                e.u32(CLAIM_NULL);
                e.opaque(&a.name);
            }
            OpArgs::Close(s) => {
                e.u32(0); // seqid (ignored in v4.1)
                s.put(e);
            }
            OpArgs::DelegReturn(s) => s.put(e),
        }
    }

    /// Decodes one operation (a server's view; our fake server's). An
    /// operation not listed here is an error naming it.
    pub fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let at = r.position();
        let opnum = r.u32("nfs_opnum4")?;
        Ok(match opnum {
            op::SEQUENCE => OpArgs::Sequence(SequenceArgs {
                sessionid: r.array::<16>("sa_sessionid")?,
                sequenceid: r.u32("sa_sequenceid")?,
                slotid: r.u32("sa_slotid")?,
                highest_slotid: r.u32("sa_highest_slotid")?,
                cachethis: r.bool("sa_cachethis")?,
            }),
            op::PUTROOTFH => OpArgs::PutRootFh,
            op::GETFH => OpArgs::GetFh,
            op::PUTFH => OpArgs::PutFh(Fh::get(r)?),
            op::LOOKUP => OpArgs::Lookup(get_opaque(r, MAX_OPAQUE, "MAX_OPAQUE", "component4")?),
            op::GETATTR => OpArgs::GetAttr(get_bitmap(r)?),
            op::EXCHANGE_ID => {
                let verifier = r.array::<8>("co_verifier")?;
                let ownerid = get_opaque(r, MAX_OPAQUE, "NFS4_OPAQUE_LIMIT", "co_ownerid")?;
                let flags = r.u32("eia_flags")?;
                expect(r, SP4_NONE, "eia_state_protect (only SP4_NONE)")?;
                if r.count(1, "eia_client_impl_id<1>", 20, "eia_client_impl_id")? == 1 {
                    skip_impl_id(r)?;
                }
                OpArgs::ExchangeId(ExchangeIdArgs {
                    verifier,
                    ownerid,
                    flags,
                })
            }
            op::CREATE_SESSION => {
                let a = CreateSessionArgs {
                    clientid: r.u64("csa_clientid")?,
                    sequence: r.u32("csa_sequence")?,
                    flags: r.u32("csa_flags")?,
                    fore: ChannelAttrs::get(r)?,
                    back: ChannelAttrs::get(r)?,
                    cb_program: r.u32("csa_cb_program")?,
                };
                let n = r.count(4, "csa_sec_parms<4>", 4, "csa_sec_parms")?;
                for _ in 0..n {
                    expect(r, AUTH_NONE, "cb_secflavor (only AUTH_NONE)")?;
                }
                OpArgs::CreateSession(a)
            }
            op::DESTROY_SESSION => OpArgs::DestroySession(r.array::<16>("dsa_sessionid")?),
            op::DESTROY_CLIENTID => OpArgs::DestroyClientId(r.u64("dca_clientid")?),
            op::RECLAIM_COMPLETE => OpArgs::ReclaimComplete(r.bool("rca_one_fs")?),
            op::OPEN => {
                let _seqid = r.u32("OPEN seqid")?;
                let share_access = r.u32("share_access")?;
                let share_deny = r.u32("share_deny")?;
                let clientid = r.u64("open_owner4 clientid")?;
                let owner = get_opaque(r, MAX_OPAQUE, "NFS4_OPAQUE_LIMIT", "open_owner4 owner")?;
                expect(r, OPEN4_NOCREATE, "opentype4 (only OPEN4_NOCREATE)")?;
                expect(r, CLAIM_NULL, "open_claim_type4 (only CLAIM_NULL)")?;
                let name = get_opaque(r, MAX_OPAQUE, "MAX_OPAQUE", "component4")?;
                OpArgs::Open(OpenArgs {
                    share_access,
                    share_deny,
                    clientid,
                    owner,
                    name,
                })
            }
            op::CLOSE => {
                let _seqid = r.u32("CLOSE seqid")?;
                OpArgs::Close(StateId::get(r)?)
            }
            op::DELEGRETURN => OpArgs::DelegReturn(StateId::get(r)?),
            other => return Err(unknown(at, "nfs_opnum4", other)),
        })
    }
}

fn unknown(at: usize, what: &'static str, v: u32) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::BadValue {
            what,
            detail: format!("{v} is not decoded here"),
        },
        at,
        what,
    )
}

fn expect(r: &mut Reader<'_>, want: u32, what: &'static str) -> Result<(), DecodeError> {
    let at = r.position();
    let v = r.u32(what)?;
    if v != want {
        return Err(unknown(at, what, v));
    }
    Ok(())
}

/// Skips an `nfs_impl_id4` (domain, name: bounded strings; date), keeping
/// the name.
fn skip_impl_id(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    get_opaque(r, MAX_OPAQUE, "MAX_OPAQUE", "nii_domain")?;
    let name = get_opaque(r, MAX_OPAQUE, "MAX_OPAQUE", "nii_name")?;
    let _secs = r.u64("nii_date seconds")?;
    let _nsecs = r.u32("nii_date nseconds")?;
    Ok(name)
}

/// `COMPOUND4args`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compound {
    /// `tag` (at most [`MAX_TAG`] octets).
    pub tag: Vec<u8>,
    /// `minorversion`.
    pub minorversion: u32,
    /// `argarray`.
    pub ops: Vec<OpArgs>,
}

impl Compound {
    /// A minor version 1 COMPOUND with an empty tag.
    pub fn v41(ops: Vec<OpArgs>) -> Self {
        Compound {
            tag: Vec::new(),
            minorversion: super::MINOR_VERSION,
            ops,
        }
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.opaque(&self.tag);
        e.u32(self.minorversion);
        e.u32(self.ops.len() as u32);
        for o in &self.ops {
            o.put(&mut e);
        }
        e.into_vec()
    }

    /// Decodes a whole COMPOUND (the fake server's view).
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let tag = get_opaque(&mut r, MAX_TAG, "MAX_TAG", "tag")?;
        let minorversion = r.u32("minorversion")?;
        let n = r.count(MAX_OPS, "MAX_OPS", 4, "argarray")?;
        let ops = (0..n)
            .map(|_| OpArgs::get(&mut r))
            .collect::<Result<_, _>>()?;
        r.finish("COMPOUND4args")?;
        Ok(Compound {
            tag,
            minorversion,
            ops,
        })
    }
}

/// The `resok` part of an operation's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResOk {
    /// Operations whose success carries nothing (PUTROOTFH, PUTFH, LOOKUP,
    /// DESTROY_SESSION, DESTROY_CLIENTID, RECLAIM_COMPLETE, DELEGRETURN).
    Void,
    /// SEQUENCE.
    Sequence(SequenceResOk),
    /// GETATTR.
    GetAttr(Fattr),
    /// GETFH.
    GetFh(Fh),
    /// EXCHANGE_ID.
    ExchangeId(ExchangeIdResOk),
    /// CREATE_SESSION.
    CreateSession(CreateSessionResOk),
    /// OPEN.
    Open(OpenResOk),
    /// CLOSE.
    Close(StateId),
}

/// One operation's result: its number, status, and on `NFS4_OK` its
/// `resok`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRes {
    /// The operation number.
    pub op: u32,
    /// `nfsstat4`.
    pub status: u32,
    /// The results of a success (`None` on failure).
    pub ok: Option<ResOk>,
}

impl OpRes {
    /// A failure.
    pub fn fail(op: u32, status: u32) -> Self {
        OpRes {
            op,
            status,
            ok: None,
        }
    }
    /// A success.
    pub fn ok(op: u32, ok: ResOk) -> Self {
        OpRes {
            op,
            status: 0,
            ok: Some(ok),
        }
    }

    fn put(&self, e: &mut Enc) {
        e.u32(self.op);
        e.u32(self.status);
        match &self.ok {
            None | Some(ResOk::Void) => {}
            Some(ResOk::Sequence(s)) => {
                e.fixed(&s.sessionid);
                for v in [
                    s.sequenceid,
                    s.slotid,
                    s.highest_slotid,
                    s.target_highest_slotid,
                    s.status_flags,
                ] {
                    e.u32(v);
                }
            }
            Some(ResOk::GetAttr(f)) => f.put(e),
            Some(ResOk::GetFh(fh)) => fh.put(e),
            Some(ResOk::ExchangeId(x)) => {
                e.u64(x.clientid);
                e.u32(x.sequenceid);
                e.u32(x.flags);
                e.u32(SP4_NONE);
                e.u64(x.minor_id);
                e.opaque(&x.major_id);
                e.opaque(&x.scope);
                match &x.impl_name {
                    None => e.u32(0),
                    Some(n) => {
                        e.u32(1);
                        e.opaque(b"");
                        e.opaque(n);
                        e.u64(0);
                        e.u32(0);
                    }
                }
            }
            Some(ResOk::CreateSession(c)) => {
                e.fixed(&c.sessionid);
                e.u32(c.sequence);
                e.u32(c.flags);
                c.fore.put(e);
                c.back.put(e);
            }
            Some(ResOk::Open(o)) => {
                o.stateid.put(e);
                e.bool(false); // cinfo.atomic
                e.u64(0); // cinfo.before
                e.u64(0); // cinfo.after
                e.u32(o.rflags);
                put_bitmap(e, &[]); // attrset
                match &o.delegation {
                    Delegation::None => e.u32(deleg::NONE),
                    Delegation::NoneExt { why } => {
                        e.u32(deleg::NONE_EXT);
                        e.u32(*why);
                        if matches!(*why, WND4_CONTENTION | WND4_RESOURCE) {
                            e.bool(false);
                        }
                    }
                    Delegation::Granted {
                        kind,
                        stateid,
                        recall,
                    } => {
                        e.u32(*kind);
                        stateid.put(e);
                        e.bool(*recall);
                        if *kind == deleg::WRITE {
                            e.u32(NFS_LIMIT_SIZE);
                            e.u64(0);
                        }
                        // permissions: an empty ACE.
                        e.u32(0);
                        e.u32(0);
                        e.u32(0);
                        e.opaque(b"");
                    }
                }
            }
            Some(ResOk::Close(s)) => s.put(e),
        }
    }

    /// Decodes one result; `Err` for an operation not decoded here.
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let at = r.position();
        let opnum = r.u32("nfs_opnum4")?;
        let status = r.u32("nfsstat4")?;
        if status != 0 {
            return Ok(OpRes::fail(opnum, status));
        }
        let ok = match opnum {
            op::PUTROOTFH
            | op::PUTFH
            | op::LOOKUP
            | op::DESTROY_SESSION
            | op::DESTROY_CLIENTID
            | op::RECLAIM_COMPLETE
            | op::DELEGRETURN => ResOk::Void,
            op::SEQUENCE => ResOk::Sequence(SequenceResOk {
                sessionid: r.array::<16>("sr_sessionid")?,
                sequenceid: r.u32("sr_sequenceid")?,
                slotid: r.u32("sr_slotid")?,
                highest_slotid: r.u32("sr_highest_slotid")?,
                target_highest_slotid: r.u32("sr_target_highest_slotid")?,
                status_flags: r.u32("sr_status_flags")?,
            }),
            op::GETATTR => ResOk::GetAttr(Fattr::get(r)?),
            op::GETFH => ResOk::GetFh(Fh::get(r)?),
            op::EXCHANGE_ID => ResOk::ExchangeId(get_exchange_id_res(r)?),
            op::CREATE_SESSION => ResOk::CreateSession(CreateSessionResOk {
                sessionid: r.array::<16>("csr_sessionid")?,
                sequence: r.u32("csr_sequence")?,
                flags: r.u32("csr_flags")?,
                fore: ChannelAttrs::get(r)?,
                back: ChannelAttrs::get(r)?,
            }),
            op::OPEN => ResOk::Open(get_open_res(r)?),
            op::CLOSE => ResOk::Close(StateId::get(r)?),
            other => return Err(unknown(at, "nfs_opnum4 of a result", other)),
        };
        Ok(OpRes::ok(opnum, ok))
    }
}

/// `WND4_CONTENTION`.
pub const WND4_CONTENTION: u32 = 7;
/// `WND4_RESOURCE`.
pub const WND4_RESOURCE: u32 = 8;
/// `NFS_LIMIT_SIZE`.
const NFS_LIMIT_SIZE: u32 = 1;
/// `NFS_LIMIT_BLOCKS`.
const NFS_LIMIT_BLOCKS: u32 = 2;

fn get_exchange_id_res(r: &mut Reader<'_>) -> Result<ExchangeIdResOk, DecodeError> {
    let clientid = r.u64("eir_clientid")?;
    let sequenceid = r.u32("eir_sequenceid")?;
    let flags = r.u32("eir_flags")?;
    // We asked for SP4_NONE; a server must answer it (RFC 8881 §18.35.3).
    expect(r, SP4_NONE, "eir_state_protect (asked SP4_NONE)")?;
    let minor_id = r.u64("so_minor_id")?;
    let major_id = get_opaque(r, MAX_OPAQUE, "NFS4_OPAQUE_LIMIT", "so_major_id")?;
    let scope = get_opaque(r, MAX_OPAQUE, "NFS4_OPAQUE_LIMIT", "eir_server_scope")?;
    let impl_name = match r.count(1, "eir_server_impl_id<1>", 20, "eir_server_impl_id")? {
        1 => Some(skip_impl_id(r)?),
        _ => None,
    };
    Ok(ExchangeIdResOk {
        clientid,
        sequenceid,
        flags,
        minor_id,
        major_id,
        scope,
        impl_name,
    })
}

fn get_open_res(r: &mut Reader<'_>) -> Result<OpenResOk, DecodeError> {
    let stateid = StateId::get(r)?;
    let _atomic = r.bool("cinfo atomic")?;
    let _before = r.u64("cinfo before")?;
    let _after = r.u64("cinfo after")?;
    let rflags = r.u32("rflags")?;
    let _attrset = get_bitmap(r)?;
    let at = r.position();
    let delegation = match r.u32("open_delegation_type4")? {
        deleg::NONE => Delegation::None,
        kind @ (deleg::READ | deleg::WRITE) => {
            let stateid = StateId::get(r)?;
            let recall = r.bool("recall")?;
            if kind == deleg::WRITE {
                let at = r.position();
                match r.u32("limitby")? {
                    NFS_LIMIT_SIZE => {
                        r.u64("filesize")?;
                    }
                    NFS_LIMIT_BLOCKS => {
                        r.u32("num_blocks")?;
                        r.u32("bytes_per_block")?;
                    }
                    v => return Err(unknown(at, "limit_by4", v)),
                }
            }
            // nfsace4 permissions: type, flag, access_mask, who.
            r.u32("acetype4")?;
            r.u32("aceflag4")?;
            r.u32("acemask4")?;
            get_opaque(r, MAX_OPAQUE, "MAX_OPAQUE", "nfsace4 who")?;
            Delegation::Granted {
                kind,
                stateid,
                recall,
            }
        }
        deleg::NONE_EXT => {
            let why = r.u32("ond_why")?;
            if matches!(why, WND4_CONTENTION | WND4_RESOURCE) {
                r.bool("ond_server_will_push_deleg / signal_avail")?;
            }
            Delegation::NoneExt { why }
        }
        v => return Err(unknown(at, "open_delegation_type4", v)),
    };
    Ok(OpenResOk {
        stateid,
        rflags,
        delegation,
    })
}

/// `COMPOUND4res`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompoundRes {
    /// The status of the last operation evaluated.
    pub status: u32,
    /// The tag (echoed).
    pub tag: Vec<u8>,
    /// The results, one per operation evaluated.
    pub res: Vec<OpRes>,
}

impl CompoundRes {
    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u32(self.status);
        e.opaque(&self.tag);
        e.u32(self.res.len() as u32);
        for r in &self.res {
            r.put(&mut e);
        }
        e.into_vec()
    }

    /// Decodes a whole reply (bounded: tag, result count, every string).
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let status = r.u32("COMPOUND4res status")?;
        let tag = get_opaque(&mut r, MAX_TAG, "MAX_TAG", "tag")?;
        let n = r.count(MAX_OPS, "MAX_OPS", 8, "resarray")?;
        let res = (0..n)
            .map(|_| OpRes::get(&mut r))
            .collect::<Result<_, _>>()?;
        r.finish("COMPOUND4res")?;
        Ok(CompoundRes { status, tag, res })
    }
}
