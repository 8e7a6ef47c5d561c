//! The `nfs_args` fuzz entry point (`fuzz/fuzz_targets/nfs_args.rs`),
//! also replayed over `fuzz/corpus/nfs_args` by `tests/corpus_replay.rs`.
//!
//! [`fuzz_nfs_args`] decodes the input as the arguments of every NFSv3 and
//! MOUNT procedure, and as the results of every NFSv3 and MOUNT procedure,
//! with default and tight limits. What decodes must re-encode to exactly
//! the input with an exact `encoded_len`, decode the same way from a
//! runtime message (`binding::message`), and survive the trip through a
//! message split into inline head and DDP-eligible piece. It panics only
//! on a real bug.
//!
//! [`fuzz_nfs_dispatch`] (target `nfs_dispatch`) runs decoded arguments
//! through the server's procedures on a scratch export
//! (`server/fuzz.rs`).

use rpcrdma_proto::xdr::Reader;
use rpcrdma_proto::XdrEncode;

use crate::binding::message;
use crate::mount::{self, MountArgs, MountResults};
use crate::nfs3::{self, Inline, Nfs3Args, Nfs3Res};
use crate::{ArgError, Limits};

/// Limits small enough that fuzzing reaches every limit quickly.
pub const TIGHT_LIMITS: Limits = Limits {
    max_name_len: 8,
    max_path_len: 16,
    rtmax: 64,
    wtmax: 64,
    max_dir_reply: 256,
    max_dir_entries: 3,
    max_exports: 2,
    max_export_groups: 2,
    max_auth_flavors: 2,
};

fn roundtrip(data: &[u8], v: &impl XdrEncode, what: &str) {
    let enc = v.to_vec().expect("a decoded value encodes");
    assert_eq!(
        enc.len(),
        v.encoded_len(),
        "{what}: encoded_len is not exact"
    );
    assert_eq!(&enc[..], data, "{what}: re-encoding changed the octets");
}

/// See the module documentation.
pub fn fuzz_nfs_args(data: &[u8]) {
    let msg = rpcrdma::Message::inline(bytes::Bytes::copy_from_slice(data));
    for l in [&Limits::DEFAULT, &TIGHT_LIMITS] {
        for &proc in nfs3::PROCEDURES {
            nfs_args(data, &msg, proc, l);
            nfs_res(data, &msg, proc, l);
        }
        for &proc in mount::PROCEDURES {
            if let Ok(a) = MountArgs::decode(proc, &mut Reader::new(data), l) {
                roundtrip(data, &a, "MOUNT args");
            }
            if let Ok(v) = MountResults::decode(proc, &mut Reader::new(data), l) {
                roundtrip(data, &v, "MOUNT results");
            }
        }
    }
}

fn nfs_args(data: &[u8], msg: &rpcrdma::Message, proc: u32, l: &Limits) {
    let plain = Nfs3Args::decode(proc, &mut Reader::new(data), l, &mut Inline);
    let checked = plain.clone().and_then(|a| a.check(l).map(|()| a));
    let via_msg = message::decode_args(proc, msg, l);
    assert_eq!(checked, via_msg, "message decode differs from plain decode");
    match plain {
        Ok(a) => {
            assert_eq!(a.proc(), proc);
            roundtrip(data, &a, "NFSv3 args");
            // Through a message with the DDP-eligible item as a DDP piece.
            let m = message::encode_args(&a).expect("encodes as a message");
            assert_eq!(m.xdr_len(), data.len());
            assert_eq!(&m.flatten()[..], data);
            let back = message::decode_args(proc, &m, l);
            assert_eq!(back, checked, "DDP-piece message decodes differently");
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(!matches!(e, ArgError::Status { .. }));
        }
    }
}

fn nfs_res(data: &[u8], msg: &rpcrdma::Message, proc: u32, l: &Limits) {
    let plain = Nfs3Res::decode(proc, &mut Reader::new(data), l, &mut Inline);
    assert_eq!(plain, message::decode_res(proc, msg, l));
    match plain {
        Ok(v) => {
            roundtrip(data, &v, "NFSv3 results");
            let m = message::encode_res(&v).expect("encodes as a message");
            assert_eq!(&m.flatten()[..], data);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The `nfs_dispatch` fuzz entry point: `[proc selector, reply-room
/// selector, arguments…]` decoded as the server does and run on a scratch
/// export in the temporary directory; panics only on a real bug (results
/// that do not re-decode, anything changed outside the export).
pub fn fuzz_nfs_dispatch(data: &[u8]) {
    crate::server::fuzz::dispatch(data)
}
