//! Typed programs: each procedure declared once — program, version and
//! number, argument and result types with their XDR — then called with
//! [`Client::call_typed`] and served by a [`Program`] registered with
//! [`Server::register_program`], instead of hand-coding the message of
//! every call.
//!
//! * [`Xdr`]: a type's XDR encoding into a [`MessageBuilder`] and decoding
//!   from a [`MessageReader`]. Implemented for `()` (void), `u32`, `i32`,
//!   `u64`, `bool`, [`Opaque`] (`opaque<MAX>`, always inline), [`DdpOpaque`]
//!   (`opaque<MAX>` that is **DDP-eligible**: over RPC-over-RDMA an argument
//!   may travel in a Read chunk and a result is written into the Write chunk
//!   the client offers, RFC 8166 §3.4.6 / RFC 8267 §2.3), tuples of up to four
//!   and [`Vec`] (`T<>`, bounded by [`MAX_ARRAY`]). A struct implements it in
//!   a few lines, field by field.
//! * [`Procedure`]: `PROG`, `VERS`, `PROC`, `NAME` and the `Arg` / `Res`
//!   types. The Write chunks a call offers come from the result type's
//!   DDP-eligible items ([`Xdr::ddp_bounds`]: their largest lengths); a
//!   procedure whose results are bounded by its arguments (a READ of `count`
//!   octets) says so in [`Procedure::call_options`].
//!
//! ```
//! use rpcrdma::program::{DdpOpaque, Procedure, Program};
//! use rpcrdma::{Client, ClientConfig, Server, TcpConfig};
//!
//! /// `opaque_data STORE_PUT(opaque_data) = 1;` of program 0x20001234 v1.
//! struct Put;
//! impl Procedure for Put {
//!     const PROG: u32 = 0x2000_1234;
//!     const VERS: u32 = 1;
//!     const PROC: u32 = 1;
//!     const NAME: &'static str = "STORE_PUT";
//!     type Arg = DdpOpaque<{ 1 << 20 }>;
//!     type Res = u32;
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let server = Server::default();
//! server.register_program(
//!     Program::new(Put::PROG, Put::VERS).procedure::<Put, _, _>(|_ctx, data| async move {
//!         Ok(data.len() as u32)
//!     }),
//! );
//! let tcp = server.serve_tcp("127.0.0.1:0", TcpConfig::default()).await?;
//! let client =
//!     Client::connect_tcp(tcp.local_addr(), ClientConfig::default(), TcpConfig::default()).await?;
//! assert_eq!(client.call_typed::<Put>(&DdpOpaque::from(vec![7u8; 1000])).await?, 1000);
//! tcp.shutdown().await;
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;

use crate::client::{CallOptions, Client, RpcError};
use crate::message::{Message, MessageBuilder, MessageReader};
use crate::server::{CallContext, Handler, HandlerError, HandlerFuture, Server};
use rpcrdma_proto::{DecodeError, EncodeError};

/// Most elements of a decoded [`Vec`] (`T<>` without a bound of its own).
pub const MAX_ARRAY: u32 = 1 << 16;

/// A value's XDR (RFC 4506) encoding in an RPC message.
pub trait Xdr: Sized + Send + 'static {
    /// Appends the encoding to `b`.
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError>;

    /// Decodes one value from `r` (bounded: every length is checked against
    /// the type's limit before anything is allocated).
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError>;

    /// Appends to `out` the largest data length of each DDP-eligible item a
    /// value of this type holds, in XDR order: for a result type, the Write
    /// chunks a client offers. None by default.
    fn ddp_bounds(out: &mut Vec<u32>) {
        let _ = out;
    }
}

impl Xdr for () {
    fn encode(&self, _: &mut MessageBuilder) -> Result<(), EncodeError> {
        Ok(())
    }
    fn decode(_: &mut MessageReader) -> Result<Self, DecodeError> {
        Ok(())
    }
}

impl Xdr for u32 {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_u32(*self);
        Ok(())
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.u32("unsigned int")
    }
}

impl Xdr for i32 {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_u32(*self as u32);
        Ok(())
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.u32("int").map(|v| v as i32)
    }
}

impl Xdr for u64 {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_u64(*self);
        Ok(())
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.u64("unsigned hyper")
    }
}

impl Xdr for bool {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_bool(*self);
        Ok(())
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.bool("bool")
    }
}

/// Byte-holding newtypes: construction, access, conversion.
macro_rules! bytes_newtype {
    ($t:ident) => {
        impl<const MAX: u32> $t<MAX> {
            /// The octets.
            pub fn into_bytes(self) -> Bytes {
                self.0
            }
        }

        impl<const MAX: u32> Deref for $t<MAX> {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                &self.0
            }
        }

        impl<const MAX: u32> From<Bytes> for $t<MAX> {
            fn from(b: Bytes) -> Self {
                $t(b)
            }
        }

        impl<const MAX: u32> From<Vec<u8>> for $t<MAX> {
            fn from(v: Vec<u8>) -> Self {
                $t(Bytes::from(v))
            }
        }

        impl<const MAX: u32> From<&'static [u8]> for $t<MAX> {
            fn from(s: &'static [u8]) -> Self {
                $t(Bytes::from_static(s))
            }
        }
    };
}

/// `opaque<MAX>` carried inline (never moved to a chunk).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opaque<const MAX: u32>(pub Bytes);

bytes_newtype!(Opaque);

impl<const MAX: u32> Xdr for Opaque<MAX> {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_opaque(&self.0).map(drop)
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.opaque(MAX, "Opaque MAX", "opaque").map(Opaque)
    }
}

/// `opaque<MAX>` that is DDP-eligible (RFC 8166 §3.4.6, as RFC 8267 marks
/// NFS READ and WRITE data): over RPC-over-RDMA, as an argument its octets
/// may be sent by RDMA Read from the caller's memory (a Read chunk), as a
/// result they are written by RDMA Write into the Write chunk the caller
/// offered (of `MAX` octets unless [`Procedure::call_options`] says less).
/// Over TCP it is an ordinary opaque. Decoded without a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DdpOpaque<const MAX: u32>(pub Bytes);

bytes_newtype!(DdpOpaque);

impl<const MAX: u32> Xdr for DdpOpaque<MAX> {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        b.put_ddp_opaque(self.0.clone()).map(drop)
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        r.ddp_opaque(MAX, "DdpOpaque MAX", "ddp opaque")
            .map(DdpOpaque)
    }
    fn ddp_bounds(out: &mut Vec<u32>) {
        out.push(MAX);
    }
}

impl<T: Xdr> Xdr for Vec<T> {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        let n = u32::try_from(self.len()).map_err(|_| EncodeError::TooLong("array"))?;
        b.put_u32(n);
        self.iter().try_for_each(|v| v.encode(b))
    }
    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        let at = r.position();
        let n = r.u32("array length")?;
        if n > MAX_ARRAY {
            return Err(DecodeError::new(
                rpcrdma_proto::xdr::DecodeErrorKind::LimitExceeded {
                    limit: "MAX_ARRAY",
                    max: u64::from(MAX_ARRAY),
                    value: u64::from(n),
                },
                at,
                "array length",
            ));
        }
        (0..n).map(|_| T::decode(r)).collect()
    }
}

macro_rules! tuple_xdr {
    ($($t:ident $v:ident),+) => {
        impl<$($t: Xdr),+> Xdr for ($($t,)+) {
            fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
                let ($($v,)+) = self;
                $($v.encode(b)?;)+
                Ok(())
            }
            fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
                Ok(($($t::decode(r)?,)+))
            }
            fn ddp_bounds(out: &mut Vec<u32>) {
                $($t::ddp_bounds(out);)+
            }
        }
    };
}

tuple_xdr!(A a, B b);
tuple_xdr!(A a, B b, C c);
tuple_xdr!(A a, B b, C c, D d);

/// One procedure of a program version: numbers, name, argument and result
/// types. Declared once; called with [`Client::call_typed`] (or
/// [`crate::rdma::RdmaBlockingClient::call_typed`]) and served through a
/// [`Program`].
pub trait Procedure: 'static {
    /// Program number.
    const PROG: u32;
    /// Program version.
    const VERS: u32;
    /// Procedure number.
    const PROC: u32;
    /// Name, for errors (`"READ"`).
    const NAME: &'static str;
    /// The arguments.
    type Arg: Xdr + Sync;
    /// The results.
    type Res: Xdr + Sync;

    /// The options of a call with `arg`: by default the Write chunks of the
    /// result type's DDP-eligible items at their largest
    /// ([`Xdr::ddp_bounds`]). Override when the arguments bound the result
    /// (a READ of `count` octets needs a Write chunk of `count`).
    fn call_options(arg: &Self::Arg) -> CallOptions {
        let _ = arg;
        let mut ddp_results = Vec::new();
        Self::Res::ddp_bounds(&mut ddp_results);
        CallOptions {
            ddp_results,
            ..CallOptions::default()
        }
    }
}

/// The call message of `P` with `arg`.
pub fn encode_args<P: Procedure>(arg: &P::Arg) -> Result<Message, EncodeError> {
    let mut b = Message::builder();
    arg.encode(&mut b)?;
    Ok(b.finish())
}

/// Decodes the results of `P` from a reply's results; all of them must be
/// consumed.
pub fn decode_results<P: Procedure>(results: &Message) -> Result<P::Res, DecodeError> {
    let mut r = results.reader();
    let v = P::Res::decode(&mut r)?;
    r.finish(P::NAME)?;
    Ok(v)
}

impl Client {
    /// Calls procedure `P` with `arg` and decodes its results: the typed
    /// form of [`Client::call_with`] (options from
    /// [`Procedure::call_options`]).
    pub async fn call_typed<P: Procedure>(&self, arg: &P::Arg) -> Result<P::Res, RpcError> {
        let args = encode_args::<P>(arg)?;
        let opts = P::call_options(arg);
        let reply = self
            .call_with(P::PROG, P::VERS, P::PROC, args, &opts)
            .await?;
        Ok(decode_results::<P>(reply.results())?)
    }
}

type ProcFn = Arc<dyn Fn(CallContext) -> HandlerFuture + Send + Sync>;

/// The typed procedures of one program version: a [`Handler`] that decodes
/// each call's arguments as its [`Procedure::Arg`] (GARBAGE_ARGS when they
/// do not decode or leave octets over), runs the procedure's function and
/// encodes its [`Procedure::Res`]; PROC_UNAVAIL for a procedure not
/// declared. Register it with [`Server::register_program`].
pub struct Program {
    prog: u32,
    vers: u32,
    procs: BTreeMap<u32, ProcFn>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("prog", &self.prog)
            .field("vers", &self.vers)
            .field("procs", &self.procs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Program {
    /// A program version with no procedures yet.
    pub fn new(prog: u32, vers: u32) -> Self {
        Program {
            prog,
            vers,
            procs: BTreeMap::new(),
        }
    }

    /// Program number.
    pub fn prog(&self) -> u32 {
        self.prog
    }

    /// Version.
    pub fn vers(&self) -> u32 {
        self.vers
    }

    /// Serves procedure `P` with `f(ctx, arg)` (replacing an earlier one
    /// of the same number).
    ///
    /// # Panics
    ///
    /// When `P` belongs to another program or version (a programming
    /// error, caught at registration rather than per call).
    pub fn procedure<P, F, Fut>(mut self, f: F) -> Self
    where
        P: Procedure,
        F: Fn(CallContext, P::Arg) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<P::Res, HandlerError>> + Send + 'static,
    {
        assert_eq!(
            (P::PROG, P::VERS),
            (self.prog, self.vers),
            "procedure {} is not of this program version",
            P::NAME
        );
        let f = Arc::new(f);
        let run: ProcFn = Arc::new(move |ctx: CallContext| {
            let f = f.clone();
            Box::pin(async move {
                let mut r = ctx.reader();
                let arg = P::Arg::decode(&mut r)?;
                r.finish(P::NAME)?;
                let res = f(ctx, arg).await?;
                let mut b = Message::builder();
                res.encode(&mut b)
                    .map_err(|e| HandlerError::SystemErr(format!("{}: {e}", P::NAME)))?;
                Ok(b.finish())
            })
        });
        self.procs.insert(P::PROC, run);
        self
    }
}

impl Handler for Program {
    fn call(&self, ctx: CallContext) -> HandlerFuture {
        match self.procs.get(&ctx.proc) {
            Some(run) => run(ctx),
            None => Box::pin(async { Err(HandlerError::ProcUnavail) }),
        }
    }
}

impl Server {
    /// Registers (or replaces) a typed program version.
    pub fn register_program(&self, program: Program) {
        let (prog, vers) = (program.prog, program.vers);
        self.register(prog, vers, program);
    }
}

impl crate::rdma::RdmaBlockingClient {
    /// [`Client::call_typed`] on the calling thread.
    pub fn call_typed<P: Procedure>(&mut self, arg: &P::Arg) -> Result<P::Res, RpcError> {
        let args = encode_args::<P>(arg)?;
        let opts = P::call_options(arg);
        let reply = self.call_with(P::PROG, P::VERS, P::PROC, args, &opts)?;
        Ok(decode_results::<P>(reply.results())?)
    }
}

impl crate::TcpBlockingClient {
    /// [`Client::call_typed`] on the calling thread.
    pub fn call_typed<P: Procedure>(&mut self, arg: &P::Arg) -> Result<P::Res, RpcError> {
        let args = encode_args::<P>(arg)?;
        let opts = P::call_options(arg);
        let reply = self.call_with(P::PROG, P::VERS, P::PROC, args, &opts)?;
        Ok(decode_results::<P>(reply.results())?)
    }
}
