//! Registration with the local rpcbind (RFC 1833, versions 4 and 3), as
//! Linux's nfsd registers its services: `RPCBPROC_SET` of each (program,
//! version, netid, universal address) when a server starts and
//! `RPCBPROC_UNSET` when it stops, so `rpcinfo` lists it.
//!
//! An RPC-over-RDMA listener is registered under the netids of
//! `/etc/netconfig`: `rdma` for IPv4 and `rdma6` for IPv6 (both for a
//! listener on `[::]`), with the RFC 5665 universal address of the
//! listening address (`127.0.0.1.78.81` for 127.0.0.1:20049).
//!
//! rpcbind accepts SET and UNSET only from the local host: over its Unix
//! socket (`/run/rpcbind.sock`, where it knows the caller's uid and so the
//! owner), or over TCP from 127.0.0.1 from a reserved port. [`Endpoint::local`]
//! lists both, the Unix socket first, as the kernel's rpcb client does.
//!
//! The protocol (RFC 1833 section 2.1, the same for versions 3 and 4):
//!
//! ```text
//! program RPCBPROG { version RPCBVERS4 {
//!     bool RPCBPROC_SET(rpcb) = 1;
//!     bool RPCBPROC_UNSET(rpcb) = 2; ... } = 4; } = 100000;
//! struct rpcb { unsigned long r_prog; unsigned long r_vers;
//!               string r_netid<>; string r_addr<>; string r_owner<>; };
//! ```

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bytes::BytesMut;
use rpcrdma_proto::wire::rpc::{AcceptedStatus, MsgBody, OpaqueAuth, ReplyBody, RpcMsg};
use rpcrdma_proto::{DecodeError, Limits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::record::{encode_record, RecordDecoder, RecordLimits};

/// The rpcbind program (RFC 1833).
pub const RPCBPROG: u32 = 100_000;
/// `RPCBPROC_SET`.
pub const RPCBPROC_SET: u32 = 1;
/// `RPCBPROC_UNSET`.
pub const RPCBPROC_UNSET: u32 = 2;
/// rpcbind's Unix socket on Linux (`/var/run` is a link to `/run`).
pub const RPCBIND_SOCKET: &str = "/run/rpcbind.sock";
/// The longest string of an `rpcb` we decode (a netid, a universal address
/// or an owner is a few dozen octets).
const MAX_RPCB_STRING: usize = 1024;
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The `rpcb` argument of SET and UNSET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rpcb {
    /// `r_prog`.
    pub prog: u32,
    /// `r_vers`.
    pub vers: u32,
    /// `r_netid` (`rdma`, `rdma6`, `tcp`, ...).
    pub netid: String,
    /// `r_addr`: the universal address ([`uaddr`]).
    pub addr: String,
    /// `r_owner`: the registering user (a uid, as rpcbind prints it).
    pub owner: String,
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + (4 - s.len() % 4) % 4, 0);
}

fn decode_err(what: &'static str, detail: &str, at: usize) -> DecodeError {
    DecodeError::new(
        rpcrdma_proto::DecodeErrorKind::BadValue {
            what,
            detail: detail.into(),
        },
        at,
        what,
    )
}

impl Rpcb {
    /// The XDR encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.netid.len() + self.addr.len());
        out.extend_from_slice(&self.prog.to_be_bytes());
        out.extend_from_slice(&self.vers.to_be_bytes());
        put_string(&mut out, &self.netid);
        put_string(&mut out, &self.addr);
        put_string(&mut out, &self.owner);
        out
    }

    /// Decodes an `rpcb` (strings of at most 1024 octets, UTF-8); returns
    /// it and the octets it took.
    pub fn decode(b: &[u8]) -> Result<(Rpcb, usize), DecodeError> {
        let mut at = 0;
        let word = |at: &mut usize, what| {
            let w = b
                .get(*at..*at + 4)
                .ok_or_else(|| decode_err(what, "truncated", *at))?;
            *at += 4;
            Ok::<u32, DecodeError>(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        };
        let prog = word(&mut at, "r_prog")?;
        let vers = word(&mut at, "r_vers")?;
        let string = |at: &mut usize, what| {
            let n = word(at, what)? as usize;
            if n > MAX_RPCB_STRING {
                return Err(decode_err(what, "longer than 1024 octets", *at));
            }
            let s = b
                .get(*at..*at + n)
                .ok_or_else(|| decode_err(what, "truncated", *at))?;
            let s = std::str::from_utf8(s).map_err(|_| decode_err(what, "not UTF-8", *at))?;
            *at += n + (4 - n % 4) % 4;
            if *at > b.len() {
                return Err(decode_err(what, "truncated pad", *at));
            }
            Ok(s.to_string())
        };
        let netid = string(&mut at, "r_netid")?;
        let addr = string(&mut at, "r_addr")?;
        let owner = string(&mut at, "r_owner")?;
        Ok((
            Rpcb {
                prog,
                vers,
                netid,
                addr,
                owner,
            },
            at,
        ))
    }
}

/// The RFC 5665 universal address of `a`: the IP address in its usual text
/// form, then the port's two octets in decimal (`127.0.0.1.78.81`,
/// `::1.78.81`).
pub fn uaddr(a: SocketAddr) -> String {
    let p = a.port();
    format!("{}.{}.{}", a.ip(), p >> 8, p & 0xff)
}

/// The (netid, address) pairs an RPC-over-RDMA listener on `listen` is
/// registered under: `rdma` for IPv4, `rdma6` for IPv6, both for `[::]`
/// (a dual-stack listener).
pub fn rdma_netids(listen: SocketAddr) -> Vec<(&'static str, SocketAddr)> {
    let port = listen.port();
    match listen.ip() {
        IpAddr::V4(_) => vec![("rdma", listen)],
        IpAddr::V6(ip) if ip.is_unspecified() => vec![
            ("rdma", SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)),
            ("rdma6", SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)),
        ],
        IpAddr::V6(_) => vec![("rdma6", listen)],
    }
}

/// This process's effective uid, as rpcbind writes owners.
pub fn owner() -> String {
    rustix::process::geteuid().as_raw().to_string()
}

/// Where rpcbind listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Its Unix socket.
    Unix(PathBuf),
    /// TCP (port 111).
    Tcp(SocketAddr),
}

impl Endpoint {
    /// The local rpcbind: its Unix socket, then 127.0.0.1:111.
    pub fn local() -> Vec<Endpoint> {
        vec![
            Endpoint::Unix(RPCBIND_SOCKET.into()),
            Endpoint::Tcp(SocketAddr::from(([127, 0, 0, 1], 111))),
        ]
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp {a}"),
        }
    }
}

/// Why a registration failed.
#[derive(Debug)]
pub enum RpcbindError {
    /// No rpcbind answered at any endpoint tried (each with its error).
    Unreachable(Vec<(Endpoint, io::Error)>),
    /// rpcbind answered a call with an RPC error (or garbage).
    Rpc(String),
    /// rpcbind refused a SET (another owner holds the mapping) or UNSET.
    Refused(Rpcb),
    /// The connection failed during a call.
    Io(io::Error),
}

impl fmt::Display for RpcbindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcbindError::Unreachable(tried) => {
                write!(f, "no rpcbind is running (tried ")?;
                for (i, (ep, e)) in tried.iter().enumerate() {
                    let sep = if i > 0 { "; " } else { "" };
                    write!(f, "{sep}{ep}: {e}")?;
                }
                write!(f, ")")
            }
            RpcbindError::Rpc(why) => write!(f, "rpcbind answered with an error: {why}"),
            RpcbindError::Refused(r) => write!(
                f,
                "rpcbind refused program {} version {} on {} ({}): registered by another owner?",
                r.prog, r.vers, r.netid, r.addr
            ),
            RpcbindError::Io(e) => write!(f, "rpcbind connection failed: {e}"),
        }
    }
}

impl std::error::Error for RpcbindError {}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection to rpcbind.
struct Conn {
    stream: Box<dyn Stream>,
    xid: u32,
}

/// How one call ended.
enum Answer {
    Bool(bool),
    /// PROG_MISMATCH or PROG_UNAVAIL: try another version.
    Version(String),
}

impl Conn {
    async fn open(ep: &Endpoint) -> io::Result<Conn> {
        let stream: Box<dyn Stream> = match ep {
            Endpoint::Unix(p) => Box::new(tokio::net::UnixStream::connect(p).await?),
            Endpoint::Tcp(a) => Box::new(connect_tcp(*a).await?),
        };
        let xid = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        Ok(Conn { stream, xid })
    }

    async fn call(&mut self, vers: u32, proc: u32, args: &Rpcb) -> Result<Answer, RpcbindError> {
        tokio::time::timeout(CALL_TIMEOUT, self.call_inner(vers, proc, args))
            .await
            .unwrap_or_else(|_| {
                Err(RpcbindError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no reply within 5 s",
                )))
            })
    }

    async fn call_inner(
        &mut self,
        vers: u32,
        proc: u32,
        args: &Rpcb,
    ) -> Result<Answer, RpcbindError> {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let mut msg = Vec::new();
        RpcMsg::append_call_header(&mut msg, xid, (RPCBPROG, vers, proc), &OpaqueAuth::none())
            .map_err(|e| RpcbindError::Rpc(e.to_string()))?;
        msg.extend_from_slice(&args.encode());
        let mut out = BytesMut::new();
        encode_record(&msg, u32::MAX >> 1, &mut out);
        self.stream
            .write_all(&out)
            .await
            .map_err(RpcbindError::Io)?;
        let reply = self.read_record().await?;
        let (m, at) = RpcMsg::decode_reply(&reply, &Limits::DEFAULT)
            .map_err(|e| RpcbindError::Rpc(format!("reply does not decode: {e}")))?;
        if m.xid != xid {
            return Err(RpcbindError::Rpc(format!(
                "reply xid 0x{:08x} for call 0x{xid:08x}",
                m.xid
            )));
        }
        let a = match m.body {
            MsgBody::Reply(ReplyBody::Accepted(a)) => a,
            MsgBody::Reply(ReplyBody::Denied(d)) => {
                return Err(RpcbindError::Rpc(format!("call denied: {d:?}")))
            }
            MsgBody::Call(_) => return Err(RpcbindError::Rpc("a call, not a reply".into())),
        };
        match a.status {
            AcceptedStatus::Success => match reply.get(at..at + 4) {
                Some([0, 0, 0, b]) if *b <= 1 => Ok(Answer::Bool(*b == 1)),
                _ => Err(RpcbindError::Rpc("result is not an XDR bool".into())),
            },
            AcceptedStatus::ProgMismatch { low, high } => Ok(Answer::Version(format!(
                "PROG_MISMATCH (versions {low} to {high})"
            ))),
            AcceptedStatus::ProgUnavail => Ok(Answer::Version("PROG_UNAVAIL".into())),
            s => Err(RpcbindError::Rpc(format!("{s:?}"))),
        }
    }

    async fn read_record(&mut self) -> Result<Vec<u8>, RpcbindError> {
        let mut dec = RecordDecoder::new(RecordLimits {
            max_record_size: 64 * 1024,
            ..RecordLimits::default()
        });
        let mut buf = BytesMut::new();
        loop {
            if let Some(r) = dec
                .decode(&mut buf)
                .map_err(|e| RpcbindError::Rpc(format!("record marking: {e}")))?
            {
                return Ok(r.to_vec());
            }
            let n = self
                .stream
                .read_buf(&mut buf)
                .await
                .map_err(RpcbindError::Io)?;
            if n == 0 {
                return Err(RpcbindError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// SET or UNSET of `args` in version 4, else (the server does not
    /// have it) version 3; the version that answered and the result.
    async fn set_or_unset(
        &mut self,
        versions: &[u32],
        proc: u32,
        args: &Rpcb,
    ) -> Result<(u32, bool), RpcbindError> {
        let mut why = String::from("no version tried");
        for &v in versions {
            match self.call(v, proc, args).await? {
                Answer::Bool(b) => return Ok((v, b)),
                Answer::Version(w) => why = format!("version {v}: {w}"),
            }
        }
        Err(RpcbindError::Rpc(why))
    }
}

/// TCP to rpcbind from a reserved port when we may bind one (rpcbind
/// takes SET and UNSET over TCP only from 127.0.0.1 and a reserved port),
/// else from any port.
async fn connect_tcp(a: SocketAddr) -> io::Result<tokio::net::TcpStream> {
    if rustix::process::geteuid().is_root() {
        for port in (665..1024).rev().step_by(7).take(40) {
            let s = match a {
                SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
            };
            let local = SocketAddr::new(
                match a {
                    SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
                },
                port,
            );
            if s.bind(local).is_ok() {
                return s.connect(a).await;
            }
        }
    }
    tokio::net::TcpStream::connect(a).await
}

/// Mappings registered with an rpcbind; [`Registration::unregister`]
/// removes them.
#[derive(Debug)]
pub struct Registration {
    endpoint: Endpoint,
    version: u32,
    entries: Vec<Rpcb>,
}

impl Registration {
    /// Registers `entries` with the first of `endpoints` that answers, in
    /// RPCBIND version 4, else 3. A stale mapping of the same program,
    /// version and netid (a previous run that did not unregister) is
    /// removed first, as Linux's `svc_register` callers do.
    pub async fn register(
        endpoints: &[Endpoint],
        entries: Vec<Rpcb>,
    ) -> Result<Registration, RpcbindError> {
        let mut tried = Vec::new();
        for ep in endpoints {
            let mut conn = match Conn::open(ep).await {
                Ok(c) => c,
                Err(e) => {
                    tried.push((ep.clone(), e));
                    continue;
                }
            };
            let mut version = 4;
            for r in &entries {
                conn.set_or_unset(&[version, 3], RPCBPROC_UNSET, r).await?;
                let (v, ok) = conn.set_or_unset(&[version, 3], RPCBPROC_SET, r).await?;
                version = v;
                if !ok {
                    return Err(RpcbindError::Refused(r.clone()));
                }
                tracing::info!(
                    prog = r.prog,
                    vers = r.vers,
                    netid = %r.netid,
                    addr = %r.addr,
                    rpcbind = %ep,
                    "registered with rpcbind"
                );
            }
            return Ok(Registration {
                endpoint: ep.clone(),
                version,
                entries,
            });
        }
        Err(RpcbindError::Unreachable(tried))
    }

    /// Where the mappings were registered.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The RPCBIND version used.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The mappings.
    pub fn entries(&self) -> &[Rpcb] {
        &self.entries
    }

    /// Removes the mappings (UNSET of each).
    pub async fn unregister(self) -> Result<(), RpcbindError> {
        let mut conn = Conn::open(&self.endpoint).await.map_err(RpcbindError::Io)?;
        for r in &self.entries {
            conn.set_or_unset(&[self.version, 3], RPCBPROC_UNSET, r)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses_and_netids() {
        assert_eq!(uaddr("127.0.0.1:20049".parse().unwrap()), "127.0.0.1.78.81");
        assert_eq!(uaddr("[::1]:111".parse().unwrap()), "::1.0.111");
        assert_eq!(
            rdma_netids("[::]:20049".parse().unwrap()),
            [
                ("rdma", "0.0.0.0:20049".parse().unwrap()),
                ("rdma6", "[::]:20049".parse().unwrap())
            ]
        );
        assert_eq!(rdma_netids("[fe80::1]:5".parse().unwrap())[0].0, "rdma6");
    }

    #[test]
    fn rpcb_round_trips_and_bounds_its_strings() {
        let r = Rpcb {
            prog: 0x2000_5244,
            vers: 1,
            netid: "rdma".into(),
            addr: "127.0.0.1.78.81".into(),
            owner: "0".into(),
        };
        let b = r.encode();
        assert_eq!(b.len(), 8 + 8 + 4 + 16 + 8);
        assert_eq!(Rpcb::decode(&b).unwrap(), (r, b.len()));
        for cut in 0..b.len() {
            assert!(Rpcb::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = vec![0u8; 8];
        huge.extend_from_slice(&5000u32.to_be_bytes());
        assert!(Rpcb::decode(&huge).is_err());
    }
}
