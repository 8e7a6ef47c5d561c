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

/// [`Codec`] for the XDR primitives `unsigned int`, `unsigned hyper` and
/// `bool` (strictly 0 or 1).
macro_rules! codec_primitive {
    ($($t:ty => $len:literal, $method:ident, $field:literal);* $(;)?) => {
        $(
        impl Codec for $t {
            fn xdr_len(&self) -> usize {
                $len
            }
            fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
                w.$method(*self)
            }
            fn get(r: &mut Reader<'_>, _: &Limits) -> Result<Self, DecodeError> {
                r.$method($field)
            }
        }
        )*
    };
}

codec_primitive! {
    u32 => 4, u32, "uint32";
    u64 => 8, u64, "uint64";
    bool => 4, bool, "bool";
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

        $crate::codec::xdr_encode_via_codec!($name);
    };
}

/// `XdrEncode` for types that implement [`Codec`] (by hand: unions,
/// lists; or by `xdr_struct!`).
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

/// [`Codec`] for an `open_enum!` `u32` newtype. `open`: every value
/// decodes (an XDR union over it has a `default` arm, or the receiver copes
/// with unknown values). `closed`: a value without a name is a decode error
/// (RFC 4506 §4.3), for the switches of unions without a `default` arm and
/// for enums whose unknown value nobody could act on.
macro_rules! codec_enum {
    ($kind:ident: $($name:ty),* $(,)?) => {
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
                let known = $crate::codec::codec_enum!(@known $kind, v);
                $crate::codec::closed(known, v.0, at, stringify!($name))?;
                Ok(v)
            }
        }
        )*
    };
    (@known open, $v:ident) => {
        true
    };
    (@known closed, $v:ident) => {
        $v.name().is_some()
    };
}

/// Declares a newtype over the octets of an XDR `string` or `opaque`:
/// `bounded $max, $limit` for a type the XDR bounds (`dirpath<MNTPATHLEN>`:
/// longer does not decode), `unbounded` for one it leaves unbounded
/// (`filename3<>`: decoded bounded by the input, the server's limit checked
/// after decoding).
macro_rules! xdr_string {
    ($(#[$m:meta])* $name:ident, $field:literal, bounded $max:expr, $limit:literal) => {
        $crate::codec::xdr_string!(@def $(#[$m])* $name, |r| $crate::codec::get_bounded(r, $max, $limit, $field));
    };
    ($(#[$m:meta])* $name:ident, $field:literal, unbounded) => {
        $crate::codec::xdr_string!(@def $(#[$m])* $name, |r| $crate::codec::get_unbounded(r, $field).map(<[u8]>::to_vec));
    };
    (@def $(#[$m:meta])* $name:ident, $get:expr) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub Vec<u8>);

        impl $name {
            /// The octets (not necessarily UTF-8).
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.as_bytes().to_vec())
            }
        }

        impl $crate::codec::Codec for $name {
            fn xdr_len(&self) -> usize {
                $crate::codec::opaque_len(self.0.len())
            }
            fn put(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                w.var_opaque(&self.0)
            }
            fn get(
                r: &mut rpcrdma_proto::xdr::Reader<'_>,
                _: &$crate::Limits,
            ) -> Result<Self, rpcrdma_proto::DecodeError> {
                let get: fn(&mut rpcrdma_proto::xdr::Reader<'_>)
                    -> Result<Vec<u8>, rpcrdma_proto::DecodeError> = $get;
                get(r).map($name)
            }
        }
    };
}

pub(crate) use {codec_enum, xdr_encode_via_codec, xdr_string, xdr_struct};
