//! The smallest proper NFSv4.1 (RFC 8881) client for what RFC 8167 exists
//! for: a session whose callbacks the server sends over the
//! RPC-over-RDMA connection the client opened.
//!
//! [`Nfs4Client::connect`]: EXCHANGE_ID; the callback service
//! ([`CallbackService`]) is put on the connection — which posts the
//! backchannel receives — *before* CREATE_SESSION is sent, with
//! `CREATE_SESSION4_FLAG_CONN_BACK_CHAN`, our callback program and
//! backchannel sizes within the inline thresholds; then SEQUENCE-based
//! COMPOUNDs (one forechannel slot) for RECLAIM_COMPLETE, PUTROOTFH /
//! LOOKUP / GETATTR / GETFH, OPEN with a read delegation, DELEGRETURN and
//! CLOSE; [`Nfs4Client::destroy`]: DESTROY_SESSION, DESTROY_CLIENTID.
//! [`probe`]: the whole backchannel probe of `rpcrdma nfs4
//! probe-backchannel`.

mod callback;
pub mod probe;
mod session;

pub use callback::{CallbackCounts, CallbackService, SESSION_WAIT};
pub use probe::{probe_backchannel, ProbeOptions, ProbeReport};
pub use session::{backchannel_attrs, Nfs4Client, Nfs4Options, Opened, RPCRDMA_HDRLEN_MIN};
