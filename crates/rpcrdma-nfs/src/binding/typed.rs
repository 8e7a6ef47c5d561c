//! The NFS codecs in the runtime's typed programs
//! ([`rpcrdma::program`]): a [`Codec`] value as the whole argument or
//! result of a [`Procedure`] ([`Inline`]), and the MOUNT version 3
//! procedures declared once ([`mount`]), so a caller writes
//! `client.call_typed::<mount::Mnt>(&Inline(dir))` instead of building the
//! message by hand.

use rpcrdma::program::Xdr;
use rpcrdma::{MessageBuilder, MessageReader};
use rpcrdma_proto::xdr::{Reader, Writer};
use rpcrdma_proto::{DecodeError, EncodeError};

use crate::codec::Codec;
use crate::Limits;

/// A [`Codec`] value carried inline as the whole argument or result of a
/// procedure: it takes the rest of the message (decoded with
/// [`Limits::DEFAULT`]), so it stands last. DDP-eligible data (NFS READ /
/// WRITE) is not for this wrapper: those procedures keep their own codecs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inline<T>(pub T);

impl<T: Codec + Send + Sync + 'static> Xdr for Inline<T> {
    fn encode(&self, b: &mut MessageBuilder) -> Result<(), EncodeError> {
        let mut v = vec![0u8; self.0.xdr_len()];
        self.0.put(&mut Writer::new(&mut v))?;
        b.put_raw(&v);
        Ok(())
    }

    fn decode(r: &mut MessageReader) -> Result<Self, DecodeError> {
        let rest = r.fixed_opaque(r.remaining(), "inline value")?;
        let mut rd = Reader::new(&rest);
        let v = T::get(&mut rd, &Limits::DEFAULT)?;
        rd.finish("end of inline value")?;
        Ok(Inline(v))
    }
}

/// MOUNT version 3 (RFC 1813 Appendix I) as typed procedures.
pub mod mount {
    use rpcrdma::program::Procedure;

    use super::Inline;
    use crate::mount::{
        Dirpath, Exports, MountRes, MOUNTPROC3_EXPORT, MOUNTPROC3_MNT, MOUNTPROC3_NULL,
        MOUNTPROC3_UMNT, MOUNT_PROGRAM, MOUNT_V3,
    };

    macro_rules! mount_proc {
        ($(#[$m:meta])* $t:ident = $proc:ident, $name:literal, $arg:ty => $res:ty) => {
            $(#[$m])*
            pub struct $t;
            impl Procedure for $t {
                const PROG: u32 = MOUNT_PROGRAM;
                const VERS: u32 = MOUNT_V3;
                const PROC: u32 = $proc;
                const NAME: &'static str = $name;
                type Arg = $arg;
                type Res = $res;
            }
        };
    }

    mount_proc!(
        /// MOUNTPROC3_NULL.
        Null = MOUNTPROC3_NULL, "MOUNT NULL", () => ()
    );
    mount_proc!(
        /// MOUNTPROC3_MNT: `dirpath` → `mountres3`.
        Mnt = MOUNTPROC3_MNT, "MOUNT MNT", Inline<Dirpath> => Inline<MountRes>
    );
    mount_proc!(
        /// MOUNTPROC3_UMNT: `dirpath` → void.
        Umnt = MOUNTPROC3_UMNT, "MOUNT UMNT", Inline<Dirpath> => ()
    );
    mount_proc!(
        /// MOUNTPROC3_EXPORT: void → `exports`.
        Export = MOUNTPROC3_EXPORT, "MOUNT EXPORT", () => Inline<Exports>
    );
}
