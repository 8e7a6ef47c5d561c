//! DDP-eligible items in the codecs, independent of any transport.
//!
//! RFC 8267 §4 makes four NFSv3 items DDP-eligible: WRITE's data and
//! SYMLINK's path (arguments), READ's data and READLINK's path (results).
//! Each is the **last** item of its structure, which keeps the split
//! simple: a value is its *head* (everything before the item's length word)
//! followed by the item as a variable-length opaque.
//!
//! * Decoding: the codec reads the item's length word from the inline XDR
//!   stream and asks a [`DdpSource`] for the data: [`Inline`] reads it from
//!   the same stream (TCP, a message sent inline); the transport binding
//!   (`crate::binding`) takes it from a Read chunk or a Write chunk.
//! * Encoding: [`DdpParts::put_head`] writes the head and
//!   [`DdpParts::ddp_item`] gives the item, which the binding hands to the
//!   transport as a DDP-eligible piece.

use bytes::Bytes;
use rpcrdma_proto::xdr::{Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use crate::codec::Codec;
use crate::Limits;

/// Where the data of a DDP-eligible item comes from.
pub trait DdpSource {
    /// The `len` data octets of the DDP-eligible item whose length word
    /// was just read from `r` (for an item in the inline stream, also its
    /// XDR pad, consumed from `r`).
    fn data(
        &mut self,
        r: &mut Reader<'_>,
        len: usize,
        field: &'static str,
    ) -> Result<Bytes, DecodeError>;
}

/// Every item inline: the data follows its length word in the stream
/// (copied out of it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Inline;

impl DdpSource for Inline {
    fn data(
        &mut self,
        r: &mut Reader<'_>,
        len: usize,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        Ok(Bytes::copy_from_slice(r.fixed_opaque(len, field)?))
    }
}

/// Reads a DDP-eligible `opaque<max>` (`max` named `limit`): the length
/// word from `r`, the data from `ddp`.
pub(crate) fn get_ddp_opaque(
    r: &mut Reader<'_>,
    ddp: &mut dyn DdpSource,
    max: u32,
    limit: &'static str,
    field: &'static str,
) -> Result<Bytes, DecodeError> {
    let at = r.position();
    let len = r.u32(field)?;
    rpcrdma_proto::xdr::check_count(len, max, limit, 0, usize::MAX, at, field)?;
    ddp.data(r, len as usize, field)
}

/// A value whose last item is DDP-eligible, decoded with a [`DdpSource`].
pub trait DdpCodec: Codec + DdpParts {
    /// Decodes the value, taking the DDP-eligible item's data from `ddp`.
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError>;
}

/// A value split for the transport: a head of inline XDR and at most one
/// DDP-eligible item after it (its length word, then its data).
pub trait DdpParts {
    /// The DDP-eligible item, if this value carries one (a failed READ
    /// result does not).
    fn ddp_item(&self) -> Option<Bytes>;

    /// Octets of [`DdpParts::put_head`].
    fn head_len(&self) -> usize;

    /// Writes everything before the DDP-eligible item's length word (the
    /// whole value when [`DdpParts::ddp_item`] is `None`).
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError>;
}
