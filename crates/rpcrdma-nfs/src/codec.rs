//! The XDR building blocks of the NFS types, on `rpcrdma_proto::xdr`'s
//! bounded [`Reader`] and exact-size [`Writer`].
//!
//! [`Codec`] is implemented by every field type (primitives, fixed opaques,
//! optional data, the NFS structures); `xdr_struct!`
//! declares an XDR `struct` as a Rust struct with its [`Codec`] and
//! [`XdrEncode`](rpcrdma_proto::XdrEncode) implementations, fields in wire
//! order. Decoding is bounded
//! by the input: every variable-length item is checked against the octets
//! left (by the reader) before anything is copied, and lists carry a named
//! limit from [`crate::Limits`].

use rpcrdma_proto::xdr::{DecodeErrorKind, Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use crate::Limits;

/// An XDR type: exact encoded length, encode, bounded decode.
pub trait Codec: Sized {
    /// Exact number of octets [`Codec::put`] writes.
    fn xdr_len(&self) -> usize;
    /// Writes the encoding.
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError>;
    /// Decodes one value (bounded by the input left in `r`).
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError>;
}

impl Codec for () {
    fn xdr_len(&self) -> usize {
        0
    }
    fn put(&self, _: &mut Writer<'_>) -> Result<(), EncodeError> {
        Ok(())
    }
    fn get(_: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        Ok(())
    }
}

impl Codec for u32 {
    fn xdr_len(&self) -> usize {
        4
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u32(*self)
    }
    fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        r.u32("uint32")
    }
}

impl Codec for u64 {
    fn xdr_len(&self) -> usize {
        8
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.u64(*self)
    }
    fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        r.u64("uint64")
    }
}

impl Codec for bool {
    fn xdr_len(&self) -> usize {
        4
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.bool(*self)
    }
    fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        r.bool("bool")
    }
}

/// The eight-octet fixed opaques (`cookieverf3`, `createverf3`,
/// `writeverf3`): no length word, no padding.
impl Codec for [u8; 8] {
    fn xdr_len(&self) -> usize {
        8
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.array(*self)
    }
    fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
        r.array::<8>("verifier")
    }
}

/// Optional data and every `union switch (bool) { case TRUE: T; default /
/// case FALSE: void; }` (post_op_attr, pre_op_attr, post_op_fh3, the
/// `set_*` arms of sattr3, sattrguard3): a strict 0/1 discriminant.
impl<T: Codec> Codec for Option<T> {
    fn xdr_len(&self) -> usize {
        4 + self.as_ref().map_or(0, Codec::xdr_len)
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        w.bool(self.is_some())?;
        match self {
            Some(v) => v.put(w),
            None => Ok(()),
        }
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        if r.bool("optional discriminant")? {
            Ok(Some(T::get(r, l)?))
        } else {
            Ok(None)
        }
    }
}

/// A variable-length opaque or string of at most `max` octets (a bound of
/// the XDR type itself, such as `opaque data<NFS3_FHSIZE>`): more is a
/// decode error (the message does not follow the XDR).
pub(crate) fn get_bounded(
    r: &mut Reader<'_>,
    max: u32,
    limit: &'static str,
    field: &'static str,
) -> Result<Vec<u8>, DecodeError> {
    Ok(r.var_opaque(max, limit, field)?.to_vec())
}

/// A variable-length opaque or string that the XDR leaves unbounded
/// (`filename3<>`, `nfspath3<>`, `opaque data<>`): bounded by the input
/// left (the reader refuses a length longer than what is left before
/// copying anything), so by the transport's message limit.
pub(crate) fn get_unbounded<'a>(
    r: &mut Reader<'a>,
    field: &'static str,
) -> Result<&'a [u8], DecodeError> {
    r.var_opaque(u32::MAX, "message length", field)
}

/// Encoded length of a variable-length opaque of `n` octets.
pub(crate) const fn opaque_len(n: usize) -> usize {
    rpcrdma_proto::xdr::var_opaque_len(n)
}

/// A closed enumeration value (RFC 4506 §4.3: any other value is an
/// encoding error): `Ok` if `known`, else a `bad-value` decode error.
pub(crate) fn closed(
    known: bool,
    v: u32,
    at: usize,
    what: &'static str,
) -> Result<(), DecodeError> {
    if known {
        return Ok(());
    }
    Err(DecodeError::new(
        DecodeErrorKind::BadValue {
            what,
            detail: format!("{v} is not a value of the enumeration"),
        },
        at,
        what,
    ))
}

/// Declares an XDR `struct`: the Rust struct (public fields, in wire
/// order) with its [`Codec`](crate::codec::Codec) and
/// [`XdrEncode`](rpcrdma_proto::XdrEncode) implementations.
macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        $name:ident { $( $(#[$fm:meta])* $f:ident : $t:ty ),* $(,)? }
    ) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name { $( $(#[$fm])* pub $f: $t, )* }

        impl $crate::codec::Codec for $name {
            fn xdr_len(&self) -> usize {
                0 $( + $crate::codec::Codec::xdr_len(&self.$f) )*
            }
            fn put(
                &self,
                _w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                $( $crate::codec::Codec::put(&self.$f, _w)?; )*
                Ok(())
            }
            fn get(
                _r: &mut rpcrdma_proto::xdr::Reader<'_>,
                _l: &$crate::Limits,
            ) -> Result<Self, rpcrdma_proto::DecodeError> {
                // Struct expression fields are evaluated in the order
                // written: wire order.
                Ok($name { $( $f: <$t as $crate::codec::Codec>::get(_r, _l)?, )* })
            }
        }

        #[cfg(test)]
        impl $crate::testgen::Gen for $name {
            fn gen(_g: &mut $crate::testgen::Rng) -> Self {
                $name { $( $f: <$t as $crate::testgen::Gen>::gen(_g), )* }
            }
        }

        impl rpcrdma_proto::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                $crate::codec::Codec::xdr_len(self)
            }
            fn write(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                $crate::codec::Codec::put(self, w)
            }
        }
    };
}

/// `XdrEncode` for types that implement [`Codec`] by hand (unions, lists).
macro_rules! xdr_encode_via_codec {
    ($($name:ty),* $(,)?) => {
        $(
        impl rpcrdma_proto::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                $crate::codec::Codec::xdr_len(self)
            }
            fn write(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                $crate::codec::Codec::put(self, w)
            }
        }
        )*
    };
}

/// Decodes a whole value from `buf`: trailing octets are an error.
pub fn decode_all<T: Codec>(buf: &[u8], l: &Limits) -> Result<T, DecodeError> {
    let mut r = Reader::new(buf);
    let v = T::get(&mut r, l)?;
    r.finish("end of arguments")?;
    Ok(v)
}

/// Encodes a value into a vector of exactly [`Codec::xdr_len`] octets.
pub fn encode_to_vec<T: Codec>(v: &T) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; v.xdr_len()];
    let mut w = Writer::new(&mut out);
    v.put(&mut w)?;
    debug_assert_eq!(w.position(), out.len(), "xdr_len is not exact");
    Ok(out)
}

/// [`Codec`] for an open enumeration (an `open_enum!` `u32` newtype):
/// every value decodes (an XDR union over it has a `default` arm, or the
/// receiver copes with unknown values).
macro_rules! codec_open_enum {
    ($($name:ty),* $(,)?) => {
        $(
        impl $crate::codec::Codec for $name {
            fn xdr_len(&self) -> usize {
                4
            }
            fn put(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                w.u32(self.0)
            }
            fn get(
                r: &mut rpcrdma_proto::xdr::Reader<'_>,
                _: &$crate::Limits,
            ) -> Result<Self, rpcrdma_proto::DecodeError> {
                Ok(Self(r.u32(stringify!($name))?))
            }
        }
        )*
    };
}

/// [`Codec`] for an enumeration decoded closed: a value without a name is
/// a decode error (RFC 4506 §4.3), for the switches of unions without a
/// `default` arm and for enums whose unknown value nobody could act on.
macro_rules! codec_closed_enum {
    ($($name:ty),* $(,)?) => {
        $(
        impl $crate::codec::Codec for $name {
            fn xdr_len(&self) -> usize {
                4
            }
            fn put(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                w.u32(self.0)
            }
            fn get(
                r: &mut rpcrdma_proto::xdr::Reader<'_>,
                _: &$crate::Limits,
            ) -> Result<Self, rpcrdma_proto::DecodeError> {
                let at = r.position();
                let v = Self(r.u32(stringify!($name))?);
                $crate::codec::closed(v.name().is_some(), v.0, at, stringify!($name))?;
                Ok(v)
            }
        }
        )*
    };
}

pub(crate) use {codec_closed_enum, codec_open_enum, xdr_encode_via_codec, xdr_struct};
