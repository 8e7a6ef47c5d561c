//! ONC RPC message header (RFC 5531 §8–9 and Appendix A).
//!
//! ```text
//! struct rpc_msg {
//!    unsigned int xid;
//!    union switch (msg_type mtype) {
//!    case CALL:  call_body cbody;
//!    case REPLY: reply_body rbody;
//!    } body;
//! };
//! struct call_body {
//!    unsigned int rpcvers;       /* must be equal to two (2) */
//!    unsigned int prog; unsigned int vers; unsigned int proc;
//!    opaque_auth cred; opaque_auth verf;
//!    /* procedure-specific parameters start here */
//! };
//! union reply_body switch (reply_stat stat) {
//!    case MSG_ACCEPTED: accepted_reply areply;
//!    case MSG_DENIED:   rejected_reply rreply;
//! } reply;
//! struct accepted_reply {
//!    opaque_auth verf;
//!    union switch (accept_stat stat) {
//!    case SUCCESS:       opaque results[0]; /* procedure-specific results start here */
//!    case PROG_MISMATCH: struct { unsigned int low; unsigned int high; } mismatch_info;
//!    default:            void;
//!    } reply_data;
//! };
//! union rejected_reply switch (reject_stat stat) {
//!    case RPC_MISMATCH: struct { unsigned int low; unsigned int high; } mismatch_info;
//!    case AUTH_ERROR:   auth_stat stat;
//! };
//! struct opaque_auth { auth_flavor flavor; opaque body<400>; };
//! struct authsys_parms {
//!    unsigned int stamp; string machinename<255>;
//!    unsigned int uid; unsigned int gid; unsigned int gids<16>;
//! };
//! ```
//!
//! [`RpcMsg::decode`] decodes the header and reports `header_len`: call
//! arguments or reply results follow it. Every enumeration is an open
//! newtype; an unknown `accept_stat` is the `default: void` arm
//! ([`AcceptedStatus::Other`]), an unknown `auth_stat` is carried as is, and
//! an unknown `msg_type`, `reply_stat` or `reject_stat` is a decode error
//! because those unions have no default arm.
//!
//! AUTH_SYS credentials are parsed ([`AuthSysParms`]); a malformed AUTH_SYS
//! credential body is a decode error. Every other flavor, and every
//! verifier, is carried opaque. [`RpcPeek`] reads only the first words
//! (xid, msg_type and a CALL's program, version and procedure), for a
//! dissector's view of a message that may not decode.

use core::fmt;

use crate::xdr::{var_opaque_len, DecodeErrorKind, EncodeError, Reader, Writer, XdrEncode};
use crate::{DecodeError, Limits};

pub mod names;
mod peek;
pub use peek::RpcPeek;

/// The only RPC protocol version (RFC 5531 §9: `rpcvers` "must be equal to
/// two (2)"). Decoding does not enforce it; the server answers
/// RPC_MISMATCH (see [`RpcMsg::rpc_mismatch`]).
pub const RPC_VERSION: u32 = 2;

/// RFC 5531 `MAX_AUTH_BYTES`, the default of [`Limits::max_auth_len`].
pub const MAX_AUTH_BYTES: usize = 400;
/// RFC 5531 App. A bound of `machinename<255>`.
pub const MAX_MACHINE_NAME: usize = 255;
/// RFC 5531 App. A bound of `gids<16>`.
pub const MAX_AUTH_SYS_GIDS: usize = 16;

open_enum! {
    /// `msg_type`.
    MsgType {
        /// A call.
        CALL = 0,
        /// A reply.
        REPLY = 1,
    }
}

open_enum! {
    /// `reply_stat`.
    ReplyStat {
        /// The call was accepted (which says nothing about its success).
        MSG_ACCEPTED = 0,
        /// The call was rejected.
        MSG_DENIED = 1,
    }
}

open_enum! {
    /// `accept_stat`.
    AcceptStat {
        /// RPC executed successfully; results follow.
        SUCCESS = 0,
        /// The remote hasn't exported the program.
        PROG_UNAVAIL = 1,
        /// The remote can't support the version number.
        PROG_MISMATCH = 2,
        /// The program can't support the procedure.
        PROC_UNAVAIL = 3,
        /// The procedure can't decode the parameters.
        GARBAGE_ARGS = 4,
        /// E.g. a memory allocation failure.
        SYSTEM_ERR = 5,
    }
}

open_enum! {
    /// `reject_stat`.
    RejectStat {
        /// RPC version number != 2.
        RPC_MISMATCH = 0,
        /// The remote can't authenticate the caller.
        AUTH_ERROR = 1,
    }
}

open_enum! {
    /// `auth_stat` (RFC 5531 §9, including the RPCSEC_GSS values).
    AuthStat {
        /// Success.
        AUTH_OK = 0,
        /// Bad credential (seal broken).
        AUTH_BADCRED = 1,
        /// The client must begin a new session.
        AUTH_REJECTEDCRED = 2,
        /// Bad verifier (seal broken).
        AUTH_BADVERF = 3,
        /// Verifier expired or replayed.
        AUTH_REJECTEDVERF = 4,
        /// Rejected for security reasons.
        AUTH_TOOWEAK = 5,
        /// Bogus response verifier.
        AUTH_INVALIDRESP = 6,
        /// Reason unknown.
        AUTH_FAILED = 7,
        /// Kerberos generic error.
        AUTH_KERB_GENERIC = 8,
        /// Time of credential expired.
        AUTH_TIMEEXPIRE = 9,
        /// Problem with ticket file.
        AUTH_TKT_FILE = 10,
        /// Can't decode authenticator.
        AUTH_DECODE = 11,
        /// Wrong net address in ticket.
        AUTH_NET_ADDR = 12,
        /// No credentials for user (RPCSEC_GSS).
        RPCSEC_GSS_CREDPROBLEM = 13,
        /// Problem with context (RPCSEC_GSS).
        RPCSEC_GSS_CTXPROBLEM = 14,
    }
}

open_enum! {
    /// `auth_flavor`.
    AuthFlavor {
        /// No authentication.
        AUTH_NONE = 0,
        /// UNIX-style credentials (`authsys_parms`).
        AUTH_SYS = 1,
        /// Short-hand credential returned by a server.
        AUTH_SHORT = 2,
        /// Diffie-Hellman.
        AUTH_DH = 3,
        /// RPCSEC_GSS (RFC 2203).
        RPCSEC_GSS = 6,
    }
}

/// Which `opaque_auth` of a message is being decoded (for error fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AuthField {
    Cred,
    Verf,
}

impl AuthField {
    fn flavor(self) -> &'static str {
        match self {
            AuthField::Cred => "cred.flavor",
            AuthField::Verf => "verf.flavor",
        }
    }
    fn body(self) -> &'static str {
        match self {
            AuthField::Cred => "cred.body",
            AuthField::Verf => "verf.body",
        }
    }
}

/// AUTH_SYS credentials (RFC 5531 App. A `authsys_parms`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct AuthSysParms {
    /// Arbitrary id the caller's machine may generate.
    pub stamp: u32,
    /// The caller's machine name (`string<255>`: octets, not necessarily
    /// UTF-8).
    pub machinename: Vec<u8>,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary group ids (at most 16 on the wire).
    pub gids: Vec<u32>,
}

/// An AUTH_SYS credential that [`AuthSysParms::new`] refuses to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthSysError {
    /// The machine name is longer than 255 octets.
    MachineNameTooLong(usize),
    /// More than 16 supplementary groups.
    TooManyGids(usize),
}

impl fmt::Display for AuthSysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthSysError::MachineNameTooLong(n) => {
                write!(f, "AUTH_SYS machine name of {n} octets exceeds 255")
            }
            AuthSysError::TooManyGids(n) => write!(f, "{n} AUTH_SYS gids exceed 16"),
        }
    }
}

impl std::error::Error for AuthSysError {}

impl AuthSysParms {
    /// Credentials within the RFC 5531 bounds (machine name ≤ 255 octets,
    /// ≤ 16 gids); anything longer is refused because a peer would reject it.
    pub fn new(
        stamp: u32,
        machinename: impl Into<Vec<u8>>,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    ) -> Result<Self, AuthSysError> {
        let machinename = machinename.into();
        if machinename.len() > MAX_MACHINE_NAME {
            return Err(AuthSysError::MachineNameTooLong(machinename.len()));
        }
        if gids.len() > MAX_AUTH_SYS_GIDS {
            return Err(AuthSysError::TooManyGids(gids.len()));
        }
        Ok(AuthSysParms {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }

    /// Decodes `authsys_parms` from the whole of `body` (the credential's
    /// opaque body), which starts at octet `base` of the message (for error
    /// offsets). Trailing octets inside the body are an error.
    fn decode_body(body: &[u8], base: usize, limits: &Limits) -> Result<Self, DecodeError> {
        let rebase = |mut e: DecodeError| {
            e.offset = e.offset.saturating_add(base);
            e
        };
        let mut r = Reader::new(body);
        let stamp = r.u32("authsys.stamp").map_err(rebase)?;
        let machinename = r
            .var_opaque(
                limits.max_machine_name_len,
                "max_machine_name_len",
                "authsys.machinename",
            )
            .map_err(rebase)?
            .to_vec();
        let uid = r.u32("authsys.uid").map_err(rebase)?;
        let gid = r.u32("authsys.gid").map_err(rebase)?;
        let n = r
            .count(
                limits.max_auth_sys_gids,
                "max_auth_sys_gids",
                4,
                "authsys.gids",
            )
            .map_err(rebase)?;
        let mut gids = Vec::with_capacity(n as usize);
        for _ in 0..n {
            gids.push(r.u32("authsys.gids").map_err(rebase)?);
        }
        r.finish("authsys_parms").map_err(rebase)?;
        Ok(AuthSysParms {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }
}

impl XdrEncode for AuthSysParms {
    fn encoded_len(&self) -> usize {
        4 + var_opaque_len(self.machinename.len()) + 4 + 4 + 4 + 4 * self.gids.len()
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(self.stamp)?;
        w.var_opaque(&self.machinename)?;
        w.u32(self.uid)?;
        w.u32(self.gid)?;
        let n = u32::try_from(self.gids.len()).map_err(|_| EncodeError::TooLong("gids"))?;
        w.u32(n)?;
        for g in &self.gids {
            w.u32(*g)?;
        }
        Ok(())
    }
}

impl fmt::Display for AuthSysParms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stamp 0x{:08x} machinename {:?} uid {} gid {} gids {:?}",
            self.stamp,
            String::from_utf8_lossy(&self.machinename),
            self.uid,
            self.gid,
            self.gids
        )
    }
}

/// `opaque_auth`: a credential or verifier.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpaqueAuth {
    /// An AUTH_SYS credential with its body parsed.
    Sys(AuthSysParms),
    /// Any other flavor, or any verifier (verifiers are never parsed, even
    /// with the AUTH_SYS flavor), body carried as is.
    Opaque {
        /// The flavor.
        flavor: AuthFlavor,
        /// The body (at most [`Limits::max_auth_len`] octets on the wire).
        body: Vec<u8>,
    },
}

impl Default for OpaqueAuth {
    fn default() -> Self {
        OpaqueAuth::none()
    }
}

impl OpaqueAuth {
    /// AUTH_NONE with an empty body.
    pub const fn none() -> Self {
        OpaqueAuth::Opaque {
            flavor: AuthFlavor::AUTH_NONE,
            body: Vec::new(),
        }
    }

    /// An AUTH_SYS credential.
    pub fn sys(parms: AuthSysParms) -> Self {
        OpaqueAuth::Sys(parms)
    }

    /// The flavor.
    pub fn flavor(&self) -> AuthFlavor {
        match self {
            OpaqueAuth::Sys(_) => AuthFlavor::AUTH_SYS,
            OpaqueAuth::Opaque { flavor, .. } => *flavor,
        }
    }

    /// Length of the body in octets (without padding).
    pub fn body_len(&self) -> usize {
        match self {
            OpaqueAuth::Sys(p) => p.encoded_len(),
            OpaqueAuth::Opaque { body, .. } => body.len(),
        }
    }

    /// The AUTH_SYS parameters, if this is a parsed AUTH_SYS credential.
    pub fn auth_sys(&self) -> Option<&AuthSysParms> {
        match self {
            OpaqueAuth::Sys(p) => Some(p),
            OpaqueAuth::Opaque { .. } => None,
        }
    }

    fn read(r: &mut Reader<'_>, limits: &Limits, which: AuthField) -> Result<Self, DecodeError> {
        let flavor = AuthFlavor(r.u32(which.flavor())?);
        let body_start = r.position() + 4;
        //= rfc5531#section-8.2
        //# struct opaque_auth {
        //#    auth_flavor flavor;
        //#    opaque body<400>;
        //# };
        let body = r.var_opaque(limits.max_auth_len, "max_auth_len", which.body())?;
        if which == AuthField::Cred && flavor == AuthFlavor::AUTH_SYS {
            Ok(OpaqueAuth::Sys(AuthSysParms::decode_body(
                body, body_start, limits,
            )?))
        } else {
            Ok(OpaqueAuth::Opaque {
                flavor,
                body: body.to_vec(),
            })
        }
    }

    fn fmt_line(&self, f: &mut fmt::Formatter<'_>, label: &str, indent: &str) -> fmt::Result {
        write!(
            f,
            "{indent}{label}: {} ({} octets)",
            self.flavor(),
            self.body_len()
        )?;
        match self {
            OpaqueAuth::Sys(p) => writeln!(f, "\n{indent}  {p}"),
            OpaqueAuth::Opaque { body, .. } if body.is_empty() => writeln!(f),
            OpaqueAuth::Opaque { body, .. } => {
                write!(f, " ")?;
                for b in body.iter().take(32) {
                    write!(f, "{b:02x}")?;
                }
                if body.len() > 32 {
                    write!(f, "...")?;
                }
                writeln!(f)
            }
        }
    }
}

impl XdrEncode for OpaqueAuth {
    fn encoded_len(&self) -> usize {
        4 + var_opaque_len(self.body_len())
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(self.flavor().0)?;
        match self {
            OpaqueAuth::Sys(p) => {
                // The body is an XDR structure, a multiple of 4 octets: no pad.
                let len = u32::try_from(p.encoded_len())
                    .map_err(|_| EncodeError::TooLong("authsys_parms"))?;
                w.u32(len)?;
                p.write(w)
            }
            OpaqueAuth::Opaque { body, .. } => w.var_opaque(body),
        }
    }
}

/// `call_body`: the header of an RPC call. Arguments follow.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallBody {
    /// RPC version; must be [`RPC_VERSION`] but is decoded as sent.
    pub rpcvers: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// Credential.
    pub cred: OpaqueAuth,
    /// Verifier.
    pub verf: OpaqueAuth,
}

/// The `reply_data` of an `accepted_reply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AcceptedStatus {
    /// SUCCESS: procedure results follow the header.
    Success,
    /// PROG_UNAVAIL.
    ProgUnavail,
    /// PROG_MISMATCH with the lowest and highest versions supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL.
    ProcUnavail,
    /// GARBAGE_ARGS.
    GarbageArgs,
    /// SYSTEM_ERR.
    SystemErr,
    /// Any other `accept_stat` (the `default: void` arm). Holding a value of
    /// 0..=5 here is the constructor's error: it encodes as that value and
    /// decodes as the named variant.
    Other(AcceptStat),
}

impl AcceptedStatus {
    /// The `accept_stat` value.
    pub fn stat(&self) -> AcceptStat {
        match self {
            AcceptedStatus::Success => AcceptStat::SUCCESS,
            AcceptedStatus::ProgUnavail => AcceptStat::PROG_UNAVAIL,
            AcceptedStatus::ProgMismatch { .. } => AcceptStat::PROG_MISMATCH,
            AcceptedStatus::ProcUnavail => AcceptStat::PROC_UNAVAIL,
            AcceptedStatus::GarbageArgs => AcceptStat::GARBAGE_ARGS,
            AcceptedStatus::SystemErr => AcceptStat::SYSTEM_ERR,
            AcceptedStatus::Other(s) => *s,
        }
    }
}

/// `accepted_reply`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AcceptedReply {
    /// The server's verifier.
    pub verf: OpaqueAuth,
    /// `accept_stat` and its arm.
    pub status: AcceptedStatus,
}

/// `rejected_reply`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectedReply {
    /// RPC_MISMATCH with the lowest and highest RPC versions supported.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// AUTH_ERROR with the reason.
    AuthError(AuthStat),
}

impl RejectedReply {
    /// The `reject_stat` value.
    pub fn stat(&self) -> RejectStat {
        match self {
            RejectedReply::RpcMismatch { .. } => RejectStat::RPC_MISMATCH,
            RejectedReply::AuthError(_) => RejectStat::AUTH_ERROR,
        }
    }
}

/// `reply_body`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReplyBody {
    /// MSG_ACCEPTED.
    Accepted(AcceptedReply),
    /// MSG_DENIED.
    Denied(RejectedReply),
}

impl ReplyBody {
    /// The `reply_stat` value.
    pub fn stat(&self) -> ReplyStat {
        match self {
            ReplyBody::Accepted(_) => ReplyStat::MSG_ACCEPTED,
            ReplyBody::Denied(_) => ReplyStat::MSG_DENIED,
        }
    }
}

/// The body union of `rpc_msg`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MsgBody {
    /// CALL.
    Call(CallBody),
    /// REPLY.
    Reply(ReplyBody),
}

/// An RPC message header (`rpc_msg` up to where arguments or results start).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RpcMsg {
    /// Transaction id.
    pub xid: u32,
    /// Call or reply.
    pub body: MsgBody,
}

impl RpcMsg {
    /// Decodes the header at the start of `buf`; returns it and
    /// `header_len`, the offset at which call arguments or reply results
    /// start. Octets after the header are not looked at.
    pub fn decode(buf: &[u8], limits: &Limits) -> Result<(RpcMsg, usize), DecodeError> {
        let mut r = Reader::new(buf);
        let m = RpcMsg::read(&mut r, limits)?;
        Ok((m, r.position()))
    }

    /// Decodes the header from a reader (positioned at the XID), leaving it
    /// at the first octet of arguments / results.
    pub fn read(r: &mut Reader<'_>, limits: &Limits) -> Result<RpcMsg, DecodeError> {
        let xid = r.u32("xid")?;
        let at = r.position();
        let body = match MsgType(r.u32("msg_type")?) {
            MsgType::CALL => MsgBody::Call(read_call(r, limits)?),
            MsgType::REPLY => MsgBody::Reply(read_reply(r, limits)?),
            //= rfc5531#section-9
            //# enum msg_type {
            //#    CALL  = 0,
            //#    REPLY = 1
            //# };
            MsgType(v) => return Err(bad_value(at, "msg_type", v)),
        };
        Ok(RpcMsg { xid, body })
    }

    /// The `msg_type`.
    pub fn msg_type(&self) -> MsgType {
        match self.body {
            MsgBody::Call(_) => MsgType::CALL,
            MsgBody::Reply(_) => MsgType::REPLY,
        }
    }

    /// The call body, if this is a call.
    pub fn call(&self) -> Option<&CallBody> {
        match &self.body {
            MsgBody::Call(c) => Some(c),
            MsgBody::Reply(_) => None,
        }
    }

    /// The reply body, if this is a reply.
    pub fn reply(&self) -> Option<&ReplyBody> {
        match &self.body {
            MsgBody::Reply(rb) => Some(rb),
            MsgBody::Call(_) => None,
        }
    }

    /// A call with RPC version 2, the given credential and an AUTH_NONE
    /// verifier (what AUTH_NONE and AUTH_SYS callers send).
    pub fn call_with(xid: u32, prog: u32, vers: u32, procedure: u32, cred: OpaqueAuth) -> Self {
        RpcMsg {
            xid,
            body: MsgBody::Call(CallBody {
                rpcvers: RPC_VERSION,
                prog,
                vers,
                procedure,
                cred,
                verf: OpaqueAuth::none(),
            }),
        }
    }

    /// A call with AUTH_NONE credential and verifier.
    pub fn call_auth_none(xid: u32, prog: u32, vers: u32, procedure: u32) -> Self {
        RpcMsg::call_with(xid, prog, vers, procedure, OpaqueAuth::none())
    }

    /// A call with an AUTH_SYS credential and AUTH_NONE verifier.
    pub fn call_auth_sys(
        xid: u32,
        prog: u32,
        vers: u32,
        procedure: u32,
        parms: AuthSysParms,
    ) -> Self {
        RpcMsg::call_with(xid, prog, vers, procedure, OpaqueAuth::Sys(parms))
    }

    /// An accepted reply with an AUTH_NONE verifier.
    pub fn accepted(xid: u32, status: AcceptedStatus) -> Self {
        RpcMsg {
            xid,
            body: MsgBody::Reply(ReplyBody::Accepted(AcceptedReply {
                verf: OpaqueAuth::none(),
                status,
            })),
        }
    }

    /// MSG_ACCEPTED / SUCCESS with an AUTH_NONE verifier; results follow.
    pub fn success(xid: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::Success)
    }

    /// MSG_ACCEPTED / PROG_UNAVAIL.
    pub fn prog_unavail(xid: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::ProgUnavail)
    }

    /// MSG_ACCEPTED / PROG_MISMATCH with the supported version range.
    pub fn prog_mismatch(xid: u32, low: u32, high: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::ProgMismatch { low, high })
    }

    /// MSG_ACCEPTED / PROC_UNAVAIL.
    pub fn proc_unavail(xid: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::ProcUnavail)
    }

    /// MSG_ACCEPTED / GARBAGE_ARGS.
    pub fn garbage_args(xid: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::GarbageArgs)
    }

    /// MSG_ACCEPTED / SYSTEM_ERR.
    pub fn system_err(xid: u32) -> Self {
        RpcMsg::accepted(xid, AcceptedStatus::SystemErr)
    }

    /// MSG_DENIED / RPC_MISMATCH, announcing RPC version 2 only (low = high
    /// = 2), the answer to a call whose `rpcvers` is not 2.
    pub fn rpc_mismatch(xid: u32) -> Self {
        RpcMsg::denied(
            xid,
            RejectedReply::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            },
        )
    }

    /// MSG_DENIED / AUTH_ERROR with the reason.
    pub fn auth_error(xid: u32, stat: AuthStat) -> Self {
        RpcMsg::denied(xid, RejectedReply::AuthError(stat))
    }

    /// A MSG_DENIED reply.
    pub fn denied(xid: u32, rejected: RejectedReply) -> Self {
        RpcMsg {
            xid,
            body: MsgBody::Reply(ReplyBody::Denied(rejected)),
        }
    }
}

fn bad_value(at: usize, what: &'static str, v: u32) -> DecodeError {
    DecodeError::new(
        DecodeErrorKind::BadValue {
            what,
            detail: format!("{v} is not a valid {what}"),
        },
        at,
        what,
    )
}

fn read_call(r: &mut Reader<'_>, limits: &Limits) -> Result<CallBody, DecodeError> {
    let rpcvers = r.u32("rpcvers")?;
    let prog = r.u32("prog")?;
    let vers = r.u32("vers")?;
    let procedure = r.u32("proc")?;
    let cred = OpaqueAuth::read(r, limits, AuthField::Cred)?;
    let verf = OpaqueAuth::read(r, limits, AuthField::Verf)?;
    Ok(CallBody {
        rpcvers,
        prog,
        vers,
        procedure,
        cred,
        verf,
    })
}

fn read_reply(r: &mut Reader<'_>, limits: &Limits) -> Result<ReplyBody, DecodeError> {
    let at = r.position();
    match ReplyStat(r.u32("reply_stat")?) {
        ReplyStat::MSG_ACCEPTED => {
            let verf = OpaqueAuth::read(r, limits, AuthField::Verf)?;
            let status = match AcceptStat(r.u32("accept_stat")?) {
                AcceptStat::SUCCESS => AcceptedStatus::Success,
                AcceptStat::PROG_UNAVAIL => AcceptedStatus::ProgUnavail,
                AcceptStat::PROG_MISMATCH => AcceptedStatus::ProgMismatch {
                    low: r.u32("mismatch_info.low")?,
                    high: r.u32("mismatch_info.high")?,
                },
                AcceptStat::PROC_UNAVAIL => AcceptedStatus::ProcUnavail,
                AcceptStat::GARBAGE_ARGS => AcceptedStatus::GarbageArgs,
                AcceptStat::SYSTEM_ERR => AcceptedStatus::SystemErr,
                //= rfc5531#section-9
                //# default:
                //#    /*
                //#     * Void.  Cases include PROG_UNAVAIL, PROC_UNAVAIL,
                //#     * GARBAGE_ARGS, and SYSTEM_ERR.
                //#     */
                //#    void;
                // An accept_stat this crate does not name takes the void
                // default arm: it decodes, and re-encodes, as `Other`.
                other => AcceptedStatus::Other(other),
            };
            Ok(ReplyBody::Accepted(AcceptedReply { verf, status }))
        }
        ReplyStat::MSG_DENIED => {
            let at = r.position();
            let rejected = match RejectStat(r.u32("reject_stat")?) {
                RejectStat::RPC_MISMATCH => RejectedReply::RpcMismatch {
                    low: r.u32("mismatch_info.low")?,
                    high: r.u32("mismatch_info.high")?,
                },
                RejectStat::AUTH_ERROR => RejectedReply::AuthError(AuthStat(r.u32("auth_stat")?)),
                RejectStat(v) => return Err(bad_value(at, "reject_stat", v)),
            };
            Ok(ReplyBody::Denied(rejected))
        }
        ReplyStat(v) => Err(bad_value(at, "reply_stat", v)),
    }
}

impl XdrEncode for RpcMsg {
    fn encoded_len(&self) -> usize {
        8 + match &self.body {
            MsgBody::Call(c) => 16 + c.cred.encoded_len() + c.verf.encoded_len(),
            MsgBody::Reply(ReplyBody::Accepted(a)) => {
                4 + a.verf.encoded_len()
                    + 4
                    + match a.status {
                        AcceptedStatus::ProgMismatch { .. } => 8,
                        _ => 0,
                    }
            }
            MsgBody::Reply(ReplyBody::Denied(RejectedReply::RpcMismatch { .. })) => 4 + 4 + 8,
            MsgBody::Reply(ReplyBody::Denied(RejectedReply::AuthError(_))) => 4 + 4 + 4,
        }
    }

    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(self.xid)?;
        w.u32(self.msg_type().0)?;
        match &self.body {
            MsgBody::Call(c) => {
                w.u32(c.rpcvers)?;
                w.u32(c.prog)?;
                w.u32(c.vers)?;
                w.u32(c.procedure)?;
                c.cred.write(w)?;
                c.verf.write(w)
            }
            MsgBody::Reply(rb) => {
                w.u32(rb.stat().0)?;
                match rb {
                    ReplyBody::Accepted(a) => {
                        a.verf.write(w)?;
                        w.u32(a.status.stat().0)?;
                        if let AcceptedStatus::ProgMismatch { low, high } = a.status {
                            w.u32(low)?;
                            w.u32(high)?;
                        }
                        Ok(())
                    }
                    ReplyBody::Denied(d) => {
                        w.u32(d.stat().0)?;
                        match d {
                            RejectedReply::RpcMismatch { low, high } => {
                                w.u32(*low)?;
                                w.u32(*high)
                            }
                            RejectedReply::AuthError(s) => w.u32(s.0),
                        }
                    }
                }
            }
        }
    }
}

impl RpcMsg {
    /// Writes the pretty-printed tree, each line prefixed with `indent`.
    pub fn fmt_tree(&self, f: &mut fmt::Formatter<'_>, indent: &str) -> fmt::Result {
        writeln!(f, "{indent}RPC {} xid 0x{:08x}", self.msg_type(), self.xid)?;
        let i2 = format!("{indent}  ");
        match &self.body {
            MsgBody::Call(c) => {
                write!(f, "{i2}rpcvers {}", c.rpcvers)?;
                if c.rpcvers != RPC_VERSION {
                    write!(f, " (not 2: answer RPC_MISMATCH)")?;
                }
                writeln!(
                    f,
                    "\n{i2}prog {} vers {} proc {}",
                    c.prog, c.vers, c.procedure
                )?;
                c.cred.fmt_line(f, "cred", &i2)?;
                c.verf.fmt_line(f, "verf", &i2)
            }
            MsgBody::Reply(rb) => {
                writeln!(f, "{i2}reply_stat {}", rb.stat())?;
                match rb {
                    ReplyBody::Accepted(a) => {
                        a.verf.fmt_line(f, "verf", &i2)?;
                        write!(f, "{i2}accept_stat {}", a.status.stat())?;
                        if let AcceptedStatus::ProgMismatch { low, high } = a.status {
                            write!(f, " low {low} high {high}")?;
                        }
                        writeln!(f)
                    }
                    ReplyBody::Denied(d) => {
                        write!(f, "{i2}reject_stat {}", d.stat())?;
                        match d {
                            RejectedReply::RpcMismatch { low, high } => {
                                writeln!(f, " low {low} high {high}")
                            }
                            RejectedReply::AuthError(s) => writeln!(f, " auth_stat {s}"),
                        }
                    }
                }
            }
        }
    }
}

impl fmt::Display for RpcMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_tree(f, "")
    }
}

// Server-side fast paths

/// Octets of a call header whose credential and verifier are both
/// AUTH_NONE with empty bodies: XID, msg_type, rpcvers, prog, vers, proc,
/// then two `opaque_auth` of (flavor 0, length 0).
const AUTH_NONE_CALL_LEN: usize = 40;

/// Octets of the header of an accepted SUCCESS reply with an AUTH_NONE
/// verifier (see [`RpcMsg::success_header`]).
pub const SUCCESS_HEADER_LEN: usize = 24;

impl RpcMsg {
    /// [`RpcMsg::decode`] for a server reading a call header: the same
    /// result and the same errors for every input, but the common call
    /// (CALL with AUTH_NONE credential and verifier, both empty) is read
    /// straight from its 40 octets without the general decoder. Anything
    /// else, including every malformed input, goes to [`RpcMsg::decode`].
    pub fn decode_call(buf: &[u8], limits: &Limits) -> Result<(RpcMsg, usize), DecodeError> {
        let Some(h) = buf.first_chunk::<AUTH_NONE_CALL_LEN>() else {
            return RpcMsg::decode(buf, limits);
        };
        let word =
            |i: usize| u32::from_be_bytes([h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]]);
        // msg_type CALL; cred and verf: flavor AUTH_NONE, body length 0 (an
        // empty body is within every `max_auth_len`).
        if word(1) != MsgType::CALL.0 || h[24..].iter().any(|&b| b != 0) {
            return RpcMsg::decode(buf, limits);
        }
        let msg = RpcMsg {
            xid: word(0),
            body: MsgBody::Call(CallBody {
                rpcvers: word(2),
                prog: word(3),
                vers: word(4),
                procedure: word(5),
                cred: OpaqueAuth::none(),
                verf: OpaqueAuth::none(),
            }),
        };
        Ok((msg, AUTH_NONE_CALL_LEN))
    }

    /// The header of an accepted SUCCESS reply with an AUTH_NONE verifier,
    /// octet for octet `RpcMsg::success(xid).to_vec()`, without the general
    /// encoder: XID, REPLY, MSG_ACCEPTED, verifier (AUTH_NONE, length 0),
    /// SUCCESS. The procedure's results follow it.
    pub fn success_header(xid: u32) -> [u8; SUCCESS_HEADER_LEN] {
        let mut h = [0u8; SUCCESS_HEADER_LEN];
        h[..4].copy_from_slice(&xid.to_be_bytes());
        h[4..8].copy_from_slice(&MsgType::REPLY.0.to_be_bytes());
        h[8..12].copy_from_slice(&ReplyStat::MSG_ACCEPTED.0.to_be_bytes());
        h[12..16].copy_from_slice(&AuthFlavor::AUTH_NONE.0.to_be_bytes());
        // verifier body length 0
        h[20..24].copy_from_slice(&AcceptStat::SUCCESS.0.to_be_bytes());
        h
    }
}

// Client-side fast paths: encoding a call header and decoding a reply
// header without the generic XDR encoder and decoder for the common shapes
// (AUTH_NONE / AUTH_SYS calls, accepted SUCCESS replies with an AUTH_NONE
// verifier). Each gives exactly what the general path gives (tests below).
impl RpcMsg {
    /// Appends the header of a call with RPC version 2, credential `cred`
    /// and an AUTH_NONE verifier to `out`: the octets of
    /// `RpcMsg::call_with(xid, prog, vers, procedure, cred.clone()).to_vec()`,
    /// written straight into `out` (one exact reservation, no zero fill, no
    /// copy of the credential). Credentials other than AUTH_SYS and empty
    /// opaque ones go through the generic encoder. On an error `out` is left
    /// as it was.
    pub fn append_call_header(
        out: &mut Vec<u8>,
        xid: u32,
        (prog, vers, procedure): (u32, u32, u32),
        cred: &OpaqueAuth,
    ) -> Result<(), EncodeError> {
        let start = out.len();
        out.reserve_exact(RpcMsg::call_header_len(cred));
        // xid, msg_type, rpcvers, prog, vers, proc, and an empty
        // credential's flavor and length: one copy.
        let mut words = [0u8; 32];
        let fixed = [xid, MsgType::CALL.0, RPC_VERSION, prog, vers, procedure];
        for (dst, w) in words.chunks_exact_mut(4).zip(fixed) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
        let r = match cred {
            OpaqueAuth::Opaque { flavor, body } if body.is_empty() => {
                words[24..28].copy_from_slice(&flavor.0.to_be_bytes());
                out.extend_from_slice(&words);
                Ok(())
            }
            OpaqueAuth::Sys(p) => {
                out.extend_from_slice(&words[..24]);
                append_auth_sys(out, p)
            }
            other => {
                out.extend_from_slice(&words[..24]);
                let at = out.len();
                out.resize(at + other.encoded_len(), 0);
                other.encode(&mut out[at..]).map(|_| ())
            }
        };
        if let Err(e) = r {
            out.truncate(start);
            return Err(e);
        }
        // The verifier: AUTH_NONE, empty body.
        out.extend_from_slice(&[0; 8]);
        Ok(())
    }

    /// The length of the call header [`RpcMsg::append_call_header`] writes
    /// for `cred`.
    #[inline]
    pub fn call_header_len(cred: &OpaqueAuth) -> usize {
        // xid, msg_type, rpcvers, prog, vers, proc; cred; AUTH_NONE verf.
        24 + cred.encoded_len() + 8
    }

    /// [`RpcMsg::decode`] for a reply, with a fast path for the common one:
    /// MSG_ACCEPTED, an AUTH_NONE verifier with an empty body, SUCCESS
    /// (24 octets, results follow). Anything else, including every error,
    /// is left to [`RpcMsg::decode`], so the result is always the same.
    #[inline]
    pub fn decode_reply(buf: &[u8], limits: &Limits) -> Result<(RpcMsg, usize), DecodeError> {
        const SUCCESS_NONE: [u8; 20] = {
            let mut w = [0u8; 20];
            // msg_type REPLY; then reply_stat MSG_ACCEPTED, verifier flavor
            // AUTH_NONE, verifier length 0, accept_stat SUCCESS: all zero.
            w[3] = 1;
            w
        };
        if let Some((xid, rest)) = buf.split_first_chunk::<4>() {
            if rest.starts_with(&SUCCESS_NONE) {
                return Ok((RpcMsg::success(u32::from_be_bytes(*xid)), 24));
            }
        }
        RpcMsg::decode(buf, limits)
    }
}

/// The body of an AUTH_SYS credential with its flavor and length words, as
/// [`OpaqueAuth::write`] writes it (same errors, in the same order).
fn append_auth_sys(out: &mut Vec<u8>, p: &AuthSysParms) -> Result<(), EncodeError> {
    let body_len =
        u32::try_from(p.encoded_len()).map_err(|_| EncodeError::TooLong("authsys_parms"))?;
    let name_len =
        u32::try_from(p.machinename.len()).map_err(|_| EncodeError::TooLong("opaque"))?;
    let gids = u32::try_from(p.gids.len()).map_err(|_| EncodeError::TooLong("gids"))?;
    for w in [AuthFlavor::AUTH_SYS.0, body_len, p.stamp, name_len] {
        out.extend_from_slice(&w.to_be_bytes());
    }
    out.extend_from_slice(&p.machinename);
    out.extend_from_slice(&[0; 3][..crate::xdr::pad_len(p.machinename.len())]);
    for w in [p.uid, p.gid, gids] {
        out.extend_from_slice(&w.to_be_bytes());
    }
    for g in &p.gids {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod client_fast_path_tests {
    use super::tests::arb_rpc_msg;
    use super::*;
    use proptest::prelude::*;

    fn general_call(xid: u32, p: (u32, u32, u32), cred: &OpaqueAuth) -> Vec<u8> {
        RpcMsg::call_with(xid, p.0, p.1, p.2, cred.clone())
            .to_vec()
            .unwrap()
    }

    fn fast_call(xid: u32, p: (u32, u32, u32), cred: &OpaqueAuth) -> Vec<u8> {
        let mut v = vec![0xee; 3];
        RpcMsg::append_call_header(&mut v, xid, p, cred).unwrap();
        assert_eq!(v.len(), 3 + RpcMsg::call_header_len(cred));
        assert_eq!(&v[..3], &[0xee; 3], "appends");
        assert_eq!(v.len(), v.capacity(), "reserves exactly");
        v.split_off(3)
    }

    #[test]
    fn call_header_hand_checked() {
        let sys = AuthSysParms::new(0x5f5e_1000, "client", 1000, 100, vec![100, 10]).unwrap();
        for cred in [
            OpaqueAuth::none(),
            OpaqueAuth::Sys(sys),
            OpaqueAuth::Opaque {
                flavor: AuthFlavor::AUTH_DH,
                body: vec![1, 2, 3, 4, 5],
            },
        ] {
            let p = (100_003, 3, 1);
            assert_eq!(fast_call(7, p, &cred), general_call(7, p, &cred));
        }
    }

    #[test]
    fn success_reply_hand_checked() {
        let l = Limits::default();
        let mut b = RpcMsg::success(0xdead_beef).to_vec().unwrap();
        b.extend_from_slice(&[0, 0, 0, 9]);
        assert_eq!(
            RpcMsg::decode_reply(&b, &l).unwrap(),
            (RpcMsg::success(0xdead_beef), 24)
        );
        // Not the fast path's shape: the general decoder's answer.
        for m in [
            RpcMsg::proc_unavail(1),
            RpcMsg::call_auth_none(1, 2, 3, 4),
            RpcMsg::auth_error(1, AuthStat(1)),
        ] {
            let b = m.to_vec().unwrap();
            assert_eq!(RpcMsg::decode_reply(&b, &l), RpcMsg::decode(&b, &l));
        }
        // Truncated: the general decoder's error.
        assert_eq!(
            RpcMsg::decode_reply(&b[..23], &l),
            RpcMsg::decode(&b[..23], &l)
        );
    }

    proptest! {
        #[test]
        fn call_header_is_the_generic_encoding(
            m in arb_rpc_msg(),
        ) {
            if let MsgBody::Call(c) = &m.body {
                let p = (c.prog, c.vers, c.procedure);
                prop_assert_eq!(fast_call(m.xid, p, &c.cred), general_call(m.xid, p, &c.cred));
            }
        }

        #[test]
        fn decode_reply_is_decode(
            m in arb_rpc_msg(),
            cut in 0usize..48,
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let l = Limits::default();
            let mut b = m.to_vec().unwrap();
            b.extend_from_slice(&tail);
            for b in [&b[..], &b[..cut.min(b.len())]] {
                prop_assert_eq!(RpcMsg::decode_reply(b, &l), RpcMsg::decode(b, &l));
            }
        }

        #[test]
        fn decode_reply_is_decode_on_noise(
            xid in any::<u32>(),
            words in proptest::collection::vec(0u32..3, 0..8),
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            // Mostly zeros and ones: near the fast path's shape.
            let mut b = xid.to_be_bytes().to_vec();
            for w in words {
                b.extend_from_slice(&w.to_be_bytes());
            }
            b.extend_from_slice(&tail);
            let l = Limits::default();
            prop_assert_eq!(RpcMsg::decode_reply(&b, &l), RpcMsg::decode(&b, &l));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    fn dec(b: &[u8]) -> Result<(RpcMsg, usize), DecodeError> {
        RpcMsg::decode(b, &Limits::default())
    }

    // NFSv3 NULL call, AUTH_NONE / AUTH_NONE.
    const CALL_NONE: &str = "00000001 00000000 00000002 000186a3 00000003 00000000 \
                             00000000 00000000 00000000 00000000";
    // NFSv3 GETATTR call, AUTH_SYS stamp 0x5f5e1000 "client" uid 1000 gid 100
    // gids [100, 10]; body = 4 + (4+8) + 4 + 4 + (4+8) = 36 = 0x24.
    const CALL_SYS: &str = "deadbeef 00000000 00000002 000186a3 00000003 00000001 \
                            00000001 00000024 5f5e1000 00000006 636c6965 6e740000 \
                            000003e8 00000064 00000002 00000064 0000000a \
                            00000000 00000000";

    #[test]
    fn call_auth_none_hand_checked() {
        let b = h(CALL_NONE);
        let (m, len) = dec(&b).unwrap();
        assert_eq!(len, 40);
        assert_eq!(m, RpcMsg::call_auth_none(1, 100003, 3, 0));
        assert_eq!(m.to_vec().unwrap(), b);
        assert_eq!(m.encoded_len(), 40);
    }

    #[test]
    fn call_auth_sys_hand_checked() {
        let b = h(CALL_SYS);
        let (m, len) = dec(&b).unwrap();
        assert_eq!(len, 76);
        let parms = AuthSysParms::new(0x5f5e1000, "client", 1000, 100, vec![100, 10]).unwrap();
        assert_eq!(m, RpcMsg::call_auth_sys(0xdeadbeef, 100003, 3, 1, parms));
        let c = m.call().unwrap();
        assert_eq!(c.cred.flavor(), AuthFlavor::AUTH_SYS);
        assert_eq!(c.cred.body_len(), 36);
        assert_eq!(m.to_vec().unwrap(), b);
        // Arguments after the header are not part of it.
        let mut with_args = b.clone();
        with_args.extend_from_slice(&h("00000008 01020304 05060708"));
        assert_eq!(dec(&with_args).unwrap().1, 76);
    }

    #[test]
    fn replies_hand_checked() {
        let cases: Vec<(&str, RpcMsg)> = vec![
            (
                "00000001 00000001 00000000 00000000 00000000 00000000",
                RpcMsg::success(1),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000001",
                RpcMsg::prog_unavail(1),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000002 00000002 00000003",
                RpcMsg::prog_mismatch(1, 2, 3),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000003",
                RpcMsg::proc_unavail(1),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000004",
                RpcMsg::garbage_args(1),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000005",
                RpcMsg::system_err(1),
            ),
            (
                "00000001 00000001 00000000 00000000 00000000 00000063",
                RpcMsg::accepted(1, AcceptedStatus::Other(AcceptStat(99))),
            ),
            (
                "00000001 00000001 00000001 00000000 00000002 00000002",
                RpcMsg::rpc_mismatch(1),
            ),
        ];
        for (hex, want) in cases {
            let b = h(hex);
            let (m, len) = dec(&b).unwrap();
            assert_eq!(m, want, "{hex}");
            assert_eq!(len, b.len(), "{hex}");
            assert_eq!(want.to_vec().unwrap(), b, "{hex}");
            assert_eq!(want.encoded_len(), b.len());
        }
        // Every auth_stat, including the RPCSEC_GSS ones and an unknown one.
        for v in 0..=15u32 {
            let b = h(&format!("00000001 00000001 00000001 00000001 {v:08x}"));
            let (m, len) = dec(&b).unwrap();
            assert_eq!(len, 20);
            assert_eq!(m, RpcMsg::auth_error(1, AuthStat(v)));
            assert_eq!(m.to_vec().unwrap(), b);
            assert_eq!(AuthStat(v).name().is_some(), v <= 14);
        }
        assert_eq!(AuthStat(13).name(), Some("RPCSEC_GSS_CREDPROBLEM"));
        assert_eq!(AuthStat(14).name(), Some("RPCSEC_GSS_CTXPROBLEM"));
    }

    #[test]
    fn verifiers_and_other_flavors_are_opaque() {
        // Reply with an RPCSEC_GSS verifier of 5 octets (padded to 8).
        let b = h("00000007 00000001 00000000 00000006 00000005 0102030405000000 00000000");
        let (m, len) = dec(&b).unwrap();
        assert_eq!(len, b.len());
        let ReplyBody::Accepted(a) = m.reply().unwrap() else {
            panic!()
        };
        assert_eq!(
            a.verf,
            OpaqueAuth::Opaque {
                flavor: AuthFlavor::RPCSEC_GSS,
                body: vec![1, 2, 3, 4, 5]
            }
        );
        assert_eq!(m.to_vec().unwrap(), b);
        // A verifier with the AUTH_SYS flavor is not parsed.
        let b = h("00000001 00000000 00000002 00000001 00000001 00000001 \
                   00000000 00000000 00000001 00000004 aabbccdd");
        let (m, _) = dec(&b).unwrap();
        assert_eq!(
            m.call().unwrap().verf,
            OpaqueAuth::Opaque {
                flavor: AuthFlavor::AUTH_SYS,
                body: vec![0xaa, 0xbb, 0xcc, 0xdd]
            }
        );
        assert_eq!(m.to_vec().unwrap(), b);
    }

    #[test]
    fn rpcvers_is_decoded_as_sent() {
        let mut b = h(CALL_NONE);
        b[11] = 3;
        let (m, _) = dec(&b).unwrap();
        assert_eq!(m.call().unwrap().rpcvers, 3);
        assert!(m.to_string().contains("not 2"));
    }

    #[test]
    fn truncation_at_every_offset() {
        for s in [
            CALL_NONE,
            CALL_SYS,
            "00000001 00000001 00000000 00000000 00000000 00000002 00000002 00000003",
            "00000001 00000001 00000001 00000000 00000002 00000002",
            "00000001 00000001 00000001 00000001 0000000d",
        ] {
            let b = h(s);
            for n in 0..b.len() {
                let e = dec(&b[..n]).unwrap_err();
                assert_eq!(e.kind.name(), "truncated", "{s} at {n}: {e}");
                assert!(e.offset <= n, "{s} at {n}: {e}");
            }
        }
    }

    //= rfc5531#section-8.2
    //# opaque body<400>;
    #[test]
    fn auth_body_over_400_refused() {
        // cred flavor 7, length 401, no body: refused before reading it.
        let b = h("00000001 00000000 00000002 00000001 00000001 00000001 00000007 00000191");
        let e = dec(&b).unwrap_err();
        assert!(
            matches!(
                e.kind,
                DecodeErrorKind::LimitExceeded {
                    limit: "max_auth_len",
                    max: 400,
                    value: 401
                }
            ),
            "{e}"
        );
        assert_eq!(e.offset, 28);
        // 400 is fine.
        let mut ok = h("00000001 00000000 00000002 00000001 00000001 00000001 00000007 00000190");
        ok.extend_from_slice(&[0u8; 400]);
        ok.extend_from_slice(&h("00000000 00000000"));
        let (m, len) = dec(&ok).unwrap();
        assert_eq!(len, ok.len());
        assert_eq!(m.to_vec().unwrap(), ok);
        // Verifier too.
        let b = h("00000001 00000001 00000000 00000000 ffffffff");
        let e = dec(&b).unwrap_err();
        assert_eq!(e.kind.name(), "limit-exceeded");
        assert_eq!(e.field, "verf.body");
    }

    fn sys_call_bytes(body: &str) -> Vec<u8> {
        let body = h(body);
        let mut b = h("00000001 00000000 00000002 00000001 00000001 00000001 00000001");
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(&body);
        b.extend_from_slice(&h("00000000 00000000"));
        b
    }

    //= rfc5531#appendix-A
    //# unsigned int gids<16>;
    #[test]
    fn auth_sys_gids_over_16_refused() {
        let mut body = String::from("00000000 00000000 00000000 00000000 00000011");
        for _ in 0..17 {
            body.push_str(" 00000001");
        }
        let e = dec(&sys_call_bytes(&body)).unwrap_err();
        assert!(
            matches!(
                e.kind,
                DecodeErrorKind::LimitExceeded {
                    limit: "max_auth_sys_gids",
                    value: 17,
                    ..
                }
            ),
            "{e}"
        );
        // offset of the gids count: 32 (body start) + 16.
        assert_eq!(e.offset, 48);
        // 16 is fine.
        let mut body = String::from("00000000 00000000 00000000 00000000 00000010");
        for _ in 0..16 {
            body.push_str(" 00000001");
        }
        let b = sys_call_bytes(&body);
        let (m, _) = dec(&b).unwrap();
        assert_eq!(m.call().unwrap().cred.auth_sys().unwrap().gids.len(), 16);
        assert_eq!(m.to_vec().unwrap(), b);
    }

    //= rfc5531#appendix-A
    //# string machinename<255>;
    #[test]
    fn auth_sys_machinename_over_255_refused() {
        let e = dec(&sys_call_bytes("00000000 00000100")).unwrap_err();
        assert!(
            matches!(
                e.kind,
                DecodeErrorKind::LimitExceeded {
                    limit: "max_machine_name_len",
                    value: 256,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.offset, 36);
    }

    #[test]
    fn malformed_auth_sys_body_is_an_error() {
        // Trailing octets inside the credential body.
        let e = dec(&sys_call_bytes(
            "00000000 00000000 00000000 00000000 00000000 00000000",
        ))
        .unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TrailingBytes(4));
        assert_eq!(e.offset, 32 + 20);
        // Body shorter than authsys_parms.
        let e = dec(&sys_call_bytes("00000000 00000000 00000000")).unwrap_err();
        assert_eq!(e.kind.name(), "truncated");
        assert_eq!(e.field, "authsys.gid");
        // gids count larger than the body.
        let e = dec(&sys_call_bytes(
            "00000000 00000000 00000000 00000000 00000002 00000001",
        ))
        .unwrap_err();
        assert_eq!(e.kind.name(), "truncated");
        // Non-zero padding in the machine name.
        let e = dec(&sys_call_bytes(
            "00000000 00000001 41000100 00000000 00000000 00000000",
        ))
        .unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::NonZeroPadding);
        assert_eq!(e.offset, 32 + 8 + 1);
    }

    //= rfc4506#section-4.10
    //# If n is not a multiple of four, then the n bytes are followed by
    //# enough (0 to 3) residual zero bytes, r, to make the total byte count
    //# a multiple of four.
    #[test]
    fn bad_padding_in_opaque_auth() {
        let b = h("00000001 00000001 00000000 00000006 00000001 ff000001 00000000");
        let e = dec(&b).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::NonZeroPadding);
        assert_eq!(e.offset, 21);
    }

    #[test]
    fn unknown_discriminants() {
        // msg_type 2
        let e = dec(&h("00000001 00000002 00000000")).unwrap_err();
        assert_eq!(e.kind.name(), "bad-value");
        assert_eq!((e.field, e.offset), ("msg_type", 4));
        // reply_stat 2
        let e = dec(&h("00000001 00000001 00000002 00000000")).unwrap_err();
        assert_eq!((e.field, e.offset), ("reply_stat", 8));
        // reject_stat 2
        let e = dec(&h("00000001 00000001 00000001 00000002 00000000")).unwrap_err();
        assert_eq!((e.field, e.offset), ("reject_stat", 12));
        assert_eq!(MsgType(2).to_string(), "MsgType(2)");
        assert_eq!(AuthFlavor(6).to_string(), "RPCSEC_GSS");
        assert_eq!(AcceptStat(9).name(), None);
    }

    #[test]
    fn builders_refuse_over_limit_auth_sys() {
        assert_eq!(
            AuthSysParms::new(0, vec![b'a'; 256], 0, 0, vec![]),
            Err(AuthSysError::MachineNameTooLong(256))
        );
        assert_eq!(
            AuthSysParms::new(0, "a", 0, 0, vec![0; 17]),
            Err(AuthSysError::TooManyGids(17))
        );
        let p = AuthSysParms::new(0, vec![b'a'; 255], 0, 0, vec![0; 16]).unwrap();
        // The largest AUTH_SYS body fits MAX_AUTH_BYTES.
        assert!(p.encoded_len() <= MAX_AUTH_BYTES);
    }

    #[test]
    fn display_tree() {
        let (m, _) = dec(&h(CALL_SYS)).unwrap();
        let s = m.to_string();
        assert!(s.contains("RPC CALL xid 0xdeadbeef"), "{s}");
        assert!(s.contains("prog 100003 vers 3 proc 1"), "{s}");
        assert!(s.contains("cred: AUTH_SYS (36 octets)"), "{s}");
        assert!(
            s.contains("machinename \"client\" uid 1000 gid 100 gids [100, 10]"),
            "{s}"
        );
        let s = RpcMsg::prog_mismatch(5, 2, 4).to_string();
        assert!(s.contains("accept_stat PROG_MISMATCH low 2 high 4"), "{s}");
        let s = RpcMsg::auth_error(5, AuthStat::AUTH_TOOWEAK).to_string();
        assert!(
            s.contains("reject_stat AUTH_ERROR auth_stat AUTH_TOOWEAK"),
            "{s}"
        );
    }

    /// Reads a `test_samples/*.hex` file: `#` comment lines, then hex.
    pub(crate) fn read_sample(path: &std::path::Path) -> Vec<u8> {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with('#'), "{path:?} lacks its # comment line");
        let hex: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(|l| l.split_whitespace())
            .collect();
        hex::decode(hex).unwrap()
    }

    /// Every `rpc_*.hex` sample: `rpc_bad_*` must fail to decode, the others
    /// must decode and re-encode their header to the same octets.
    #[test]
    fn samples_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("test_samples");
        let mut seen = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !(name.starts_with("rpc_") && name.ends_with(".hex")) {
                continue;
            }
            seen += 1;
            let b = read_sample(&path);
            match dec(&b) {
                Ok((m, len)) => {
                    assert!(!name.starts_with("rpc_bad_"), "{name} decoded: {m}");
                    assert_eq!(m.to_vec().unwrap(), &b[..len], "{name}");
                }
                Err(e) => assert!(name.starts_with("rpc_bad_"), "{name}: {e}"),
            }
        }
        assert!(seen >= 9, "only {seen} rpc samples");
    }

    fn arb_auth_sys() -> impl Strategy<Value = AuthSysParms> {
        (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..=255),
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u32>(), 0..=16),
        )
            .prop_map(|(stamp, machinename, uid, gid, gids)| AuthSysParms {
                stamp,
                machinename,
                uid,
                gid,
                gids,
            })
    }

    fn arb_opaque(cred: bool) -> BoxedStrategy<OpaqueAuth> {
        let opaque = (
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..=400),
        )
            .prop_map(|(f, body)| OpaqueAuth::Opaque {
                flavor: AuthFlavor(f % 8),
                body,
            })
            .prop_filter("AUTH_SYS credentials are parsed", move |a| {
                !(cred && a.flavor() == AuthFlavor::AUTH_SYS)
            });
        if cred {
            prop_oneof![opaque, arb_auth_sys().prop_map(OpaqueAuth::Sys)].boxed()
        } else {
            opaque.boxed()
        }
    }

    pub(crate) fn arb_rpc_msg() -> impl Strategy<Value = RpcMsg> {
        let call = (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            arb_opaque(true),
            arb_opaque(false),
        )
            .prop_map(|(rpcvers, prog, vers, procedure, cred, verf)| {
                MsgBody::Call(CallBody {
                    rpcvers,
                    prog,
                    vers,
                    procedure,
                    cred,
                    verf,
                })
            });
        let status = prop_oneof![
            Just(AcceptedStatus::Success),
            Just(AcceptedStatus::ProgUnavail),
            (any::<u32>(), any::<u32>())
                .prop_map(|(low, high)| AcceptedStatus::ProgMismatch { low, high }),
            Just(AcceptedStatus::ProcUnavail),
            Just(AcceptedStatus::GarbageArgs),
            Just(AcceptedStatus::SystemErr),
            (6u32..).prop_map(|v| AcceptedStatus::Other(AcceptStat(v))),
        ];
        let accepted = (arb_opaque(false), status).prop_map(|(verf, status)| {
            MsgBody::Reply(ReplyBody::Accepted(AcceptedReply { verf, status }))
        });
        let denied = prop_oneof![
            (any::<u32>(), any::<u32>())
                .prop_map(|(low, high)| RejectedReply::RpcMismatch { low, high }),
            any::<u32>().prop_map(|s| RejectedReply::AuthError(AuthStat(s))),
        ]
        .prop_map(|d| MsgBody::Reply(ReplyBody::Denied(d)));
        (any::<u32>(), prop_oneof![call, accepted, denied])
            .prop_map(|(xid, body)| RpcMsg { xid, body })
    }

    proptest! {
        #[test]
        fn roundtrip(m in arb_rpc_msg(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut bytes = m.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), m.encoded_len());
            let n = bytes.len();
            bytes.extend_from_slice(&tail);
            let (d, len) = dec(&bytes).unwrap();
            prop_assert_eq!(len, n);
            prop_assert_eq!(d, m);
        }

        #[test]
        fn decode_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok((m, len)) = dec(&buf) {
                prop_assert!(len <= buf.len());
                let _ = m.to_string();
                prop_assert_eq!(&m.to_vec().unwrap()[..], &buf[..len]);
            }
        }
    }
}

#[cfg(test)]
mod server_fast_path_tests {
    use super::tests::arb_rpc_msg;
    use super::*;
    use proptest::prelude::*;

    /// A call header with AUTH_NONE credential and verifier, each word
    /// possibly replaced (so that near misses of the fast path, and
    /// truncations, are tried too), plus a tail.
    fn near_auth_none_call() -> impl Strategy<Value = Vec<u8>> {
        let word = prop_oneof![4 => Just(None), 1 => (0u32..3).prop_map(Some), 1 => any::<u32>().prop_map(Some)];
        (
            any::<u32>(),
            any::<[u32; 3]>(),
            proptest::collection::vec(word, 10),
            proptest::collection::vec(any::<u8>(), 0..48),
            0usize..=100,
        )
            .prop_map(|(xid, [prog, vers, procedure], changes, tail, cut)| {
                let mut v = RpcMsg::call_auth_none(xid, prog, vers, procedure)
                    .to_vec()
                    .unwrap();
                for (i, c) in changes.into_iter().enumerate() {
                    if let Some(w) = c {
                        v[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
                    }
                }
                v.extend_from_slice(&tail);
                // Sometimes truncated.
                if cut < v.len() && cut % 3 == 0 {
                    v.truncate(cut);
                }
                v
            })
    }

    fn same(buf: &[u8]) -> Result<(), TestCaseError> {
        for limits in [
            Limits::default(),
            Limits {
                max_auth_len: 0,
                ..Limits::default()
            },
        ] {
            prop_assert_eq!(
                RpcMsg::decode_call(buf, &limits),
                RpcMsg::decode(buf, &limits)
            );
        }
        Ok(())
    }

    #[test]
    fn success_header_is_the_general_encoding() {
        for xid in [0, 1, 0x1234_5678, u32::MAX] {
            assert_eq!(
                RpcMsg::success_header(xid)[..],
                RpcMsg::success(xid).to_vec().unwrap()[..]
            );
        }
    }

    #[test]
    fn decode_call_takes_the_fast_path() {
        let v = RpcMsg::call_auth_none(7, 100_003, 3, 1).to_vec().unwrap();
        let (m, n) = RpcMsg::decode_call(&v, &Limits::default()).unwrap();
        assert_eq!(n, 40);
        assert_eq!(m, RpcMsg::call_auth_none(7, 100_003, 3, 1));
    }

    proptest! {
        #[test]
        fn success_header_matches(xid in any::<u32>()) {
            prop_assert_eq!(&RpcMsg::success_header(xid)[..], &RpcMsg::success(xid).to_vec().unwrap()[..]);
        }

        #[test]
        fn decode_call_matches_decode_near_auth_none(buf in near_auth_none_call()) {
            same(&buf)?;
        }

        #[test]
        fn decode_call_matches_decode_any_message(m in arb_rpc_msg(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = m.to_vec().unwrap();
            buf.extend_from_slice(&tail);
            same(&buf)?;
        }

        #[test]
        fn decode_call_matches_decode_any_bytes(buf in proptest::collection::vec(any::<u8>(), 0..96)) {
            same(&buf)?;
        }
    }
}
