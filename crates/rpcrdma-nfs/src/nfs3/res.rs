//! The shape of every NFSv3 result:
//!
//! ```text
//! union XXX3res switch (nfsstat3 status) {
//! case NFS3_OK:  XXX3resok   resok;
//! default:       XXX3resfail resfail;   /* void for GETATTR */
//! };
//! ```

use bytes::Bytes;
use rpcrdma_proto::xdr::{Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use super::ddp::{DdpCodec, DdpParts, DdpSource};
use super::types::Nfsstat3;
use crate::codec::Codec;
use crate::Limits;

/// A result: `Ok` with NFS3_OK, or a failure status with its `resfail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Res<O, F> {
    /// `NFS3_OK` and the `resok` arm.
    Ok(O),
    /// Any other status (never `NFS3_OK`: that would encode as the `resok`
    /// arm) and the `resfail` arm.
    Fail(Nfsstat3, F),
}

impl<O, F> Res<O, F> {
    /// The status.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            Res::Ok(_) => Nfsstat3::NFS3_OK,
            Res::Fail(s, _) => *s,
        }
    }

    /// The `resok` arm, if the status is NFS3_OK.
    pub fn ok(&self) -> Option<&O> {
        match self {
            Res::Ok(o) => Some(o),
            Res::Fail(..) => None,
        }
    }
}

impl<O: Codec, F: Codec> Codec for Res<O, F> {
    fn xdr_len(&self) -> usize {
        4 + match self {
            Res::Ok(o) => o.xdr_len(),
            Res::Fail(_, f) => f.xdr_len(),
        }
    }
    fn put(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.status().put(w)?;
        match self {
            Res::Ok(o) => o.put(w),
            Res::Fail(_, f) => f.put(w),
        }
    }
    fn get(r: &mut Reader<'_>, l: &Limits) -> Result<Self, DecodeError> {
        match Nfsstat3::get(r, l)? {
            Nfsstat3::NFS3_OK => Ok(Res::Ok(O::get(r, l)?)),
            s => Ok(Res::Fail(s, F::get(r, l)?)),
        }
    }
}

impl<O: Codec, F: Codec> rpcrdma_proto::XdrEncode for Res<O, F> {
    fn encoded_len(&self) -> usize {
        self.xdr_len()
    }
    fn write(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        self.put(w)
    }
}

impl<O: DdpCodec, F: Codec> DdpCodec for Res<O, F> {
    fn get_ddp(
        r: &mut Reader<'_>,
        l: &Limits,
        ddp: &mut dyn DdpSource,
    ) -> Result<Self, DecodeError> {
        match Nfsstat3::get(r, l)? {
            Nfsstat3::NFS3_OK => Ok(Res::Ok(O::get_ddp(r, l, ddp)?)),
            s => Ok(Res::Fail(s, F::get(r, l)?)),
        }
    }
}

impl<O: DdpParts + Codec, F: Codec> DdpParts for Res<O, F> {
    fn ddp_item(&self) -> Option<Bytes> {
        self.ok().and_then(DdpParts::ddp_item)
    }
    fn head_len(&self) -> usize {
        match self {
            Res::Ok(o) => 4 + o.head_len(),
            Res::Fail(..) => self.xdr_len(),
        }
    }
    fn put_head(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        match self {
            Res::Ok(o) => {
                Nfsstat3::NFS3_OK.put(w)?;
                o.put_head(w)
            }
            Res::Fail(..) => self.put(w),
        }
    }
}

/// [`Codec`] for a type whose last item is DDP-eligible, through its
/// [`DdpCodec`] implementation with every item inline.
macro_rules! codec_via_ddp {
    ($($name:ty),* $(,)?) => {
        $(
        impl $crate::codec::Codec for $name {
            fn xdr_len(&self) -> usize {
                $crate::nfs3::ddp::DdpParts::head_len(self)
                    + $crate::codec::opaque_len(
                        $crate::nfs3::ddp::DdpParts::ddp_item(self).map_or(0, |d| d.len()),
                    )
            }
            fn put(
                &self,
                w: &mut rpcrdma_proto::xdr::Writer<'_>,
            ) -> Result<(), rpcrdma_proto::EncodeError> {
                $crate::nfs3::ddp::DdpParts::put_head(self, w)?;
                match $crate::nfs3::ddp::DdpParts::ddp_item(self) {
                    Some(d) => w.var_opaque(&d),
                    None => Ok(()),
                }
            }
            fn get(
                r: &mut rpcrdma_proto::xdr::Reader<'_>,
                l: &$crate::Limits,
            ) -> Result<Self, rpcrdma_proto::DecodeError> {
                <$name as $crate::nfs3::ddp::DdpCodec>::get_ddp(
                    r,
                    l,
                    &mut $crate::nfs3::ddp::Inline,
                )
            }
        }
        $crate::codec::xdr_encode_via_codec!($name);
        )*
    };
}
pub(crate) use codec_via_ddp;

#[cfg(test)]
impl<O: crate::testgen::Gen, F: crate::testgen::Gen> crate::testgen::Gen for Res<O, F> {
    fn gen(g: &mut crate::testgen::Rng) -> Self {
        if g.coin() {
            Res::Ok(O::gen(g))
        } else {
            let mut s = Nfsstat3::gen(g);
            if s == Nfsstat3::NFS3_OK {
                s = Nfsstat3::NFS3ERR_IO;
            }
            Res::Fail(s, F::gen(g))
        }
    }
}
