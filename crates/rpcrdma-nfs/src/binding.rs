//! The NFS upper-layer binding for RPC-over-RDMA (RFC 8267 §4), as Linux
//! applies it.
//!
//! **DDP-eligible items** (RFC 8267 §4; [`args_ddp_eligible`],
//! [`results_ddp_eligible`]): WRITE's data and SYMLINK's path in calls,
//! READ's data and READLINK's path in replies; nothing else. Linux's client
//! marks exactly WRITE and SYMLINK calls `XDRBUF_WRITE` (their page data may
//! go in a Read chunk) and only READ replies `XDRBUF_READ` (a Write chunk):
//! it never offers a Write chunk for READLINK, whose reply it receives
//! inline or in a Reply chunk. Linux's server moves whichever DDP-eligible
//! result a Write chunk was offered for (READ and READLINK). This crate
//! does the same: both results are DDP-eligible when encoded (a server
//! uses a Write chunk if one was offered), and [`reply_size`] offers a
//! Write chunk only for READ (`docs/interop-linux.md`).
//!
//! **Reply size** ([`reply_size`]): the requester must know before the call
//! how large the reply can be, to offer a Write chunk for the DDP-eligible
//! result and a Reply chunk when the rest may not fit inline — RFC 8267
//! §4.1 leaves this to the criteria of its §3. Linux takes it from each
//! procedure's `p_replen` plus, for the procedures that receive into pages
//! (READ, READLINK, READDIR, READDIRPLUS: `rpc_prepare_reply_pages`), the
//! page length (READ's and READDIR's `count`, READDIRPLUS's `maxcount`,
//! READLINK's page). [`reply_size`] computes the exact largest encoding of
//! this crate's result types instead, plus the same page lengths.
//!
//! [`message`] puts these on the runtime's messages (the only module that
//! knows the message API).

pub mod message;
pub mod typed;

use crate::codec::opaque_len;
use crate::limits::NFS3_FHSIZE;
use crate::nfs3::{self, Nfs3Args};
use crate::Limits;

//= rfc8267#section-4
//# The following XDR data items in NFS versions 2 and 3 are
//# DDP-eligible:
//#
//# o  the opaque file data argument in the NFS WRITE procedure
//#
//# o  the pathname argument in the NFS SYMLINK procedure
//#
//# o  the opaque file data result in the NFS READ procedure
//#
//# o  the pathname result in the NFS READLINK procedure
//#
//# All other argument or result data items in NFS versions 2 and 3 are
//# not DDP-eligible.
/// Whether the arguments of NFSv3 procedure `proc` hold a DDP-eligible item.
pub fn args_ddp_eligible(proc: u32) -> bool {
    matches!(proc, nfs3::NFSPROC3_WRITE | nfs3::NFSPROC3_SYMLINK)
}

/// Whether the results of NFSv3 procedure `proc` hold a DDP-eligible item.
pub fn results_ddp_eligible(proc: u32) -> bool {
    matches!(proc, nfs3::NFSPROC3_READ | nfs3::NFSPROC3_READLINK)
}

/// The largest reply to a call, for the requester's chunk choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplySize {
    /// Largest results (after the RPC reply header) in XDR octets, not
    /// counting the data of a DDP-eligible result moved to a Write chunk
    /// (its length word is counted).
    pub results_max: u32,
    /// Largest length of each DDP-eligible result the requester offers a
    /// Write chunk for, in order (READ: one; everything else: none).
    pub ddp_results: Vec<u32>,
}

/// `nfs_fh3` at its largest.
const FH: usize = 4 + NFS3_FHSIZE as usize;
/// `fattr3` (fixed size).
const FATTR: usize = 84;
/// `post_op_attr` at its largest.
const POST_OP_ATTR: usize = 4 + FATTR;
/// `wcc_data` at its largest (`pre_op_attr` 4 + 24, `post_op_attr`).
const WCC: usize = 4 + 24 + POST_OP_ATTR;
/// `post_op_fh3` at its largest.
const POST_OP_FH: usize = 4 + FH;
/// Status word.
const ST: usize = 4;
/// READDIR(PLUS)3resok before the entries: status, `dir_attributes`,
/// `cookieverf` (Linux's `NFS3_readdirres_sz`).
const READDIR_HEAD: usize = ST + POST_OP_ATTR + 8;
/// The end of a directory list: the last `FALSE` link and `eof`.
const DIRLIST_END: usize = 8;

/// The largest reply to `args` (an NFSv3 call), with `l` the client's
/// limits: what the client offers chunks from.
///
/// * READ: a Write chunk for `count` octets (the client keeps `count`
///   within the server's rtmax);
///   the rest (status, attributes, count, eof, the data's length word) is
///   `results_max`;
/// * READLINK: no Write chunk (as Linux); the path, up to
///   [`Limits::max_path_len`], counts in `results_max`;
/// * READDIR / READDIRPLUS: the fixed head plus the client's `count` /
///   `maxcount` (the entries) — typically larger than the inline threshold,
///   so a Reply chunk;
/// * everything else: the largest result encoding.
pub fn reply_size(args: &Nfs3Args, l: &Limits) -> ReplySize {
    let fixed = |n: usize| ReplySize {
        results_max: u32::try_from(n).unwrap_or(u32::MAX),
        ddp_results: Vec::new(),
    };
    match args {
        Nfs3Args::Null(_) => fixed(0),
        Nfs3Args::Getattr(_) => fixed(ST + FATTR),
        Nfs3Args::Setattr(_) | Nfs3Args::Remove(_) | Nfs3Args::Rmdir(_) => fixed(ST + WCC),
        Nfs3Args::Lookup(_) => fixed(ST + FH + 2 * POST_OP_ATTR),
        Nfs3Args::Access(_) => fixed(ST + POST_OP_ATTR + 4),
        Nfs3Args::Readlink(_) => fixed(ST + POST_OP_ATTR + opaque_len(l.max_path_len as usize)),
        Nfs3Args::Read(a) => ReplySize {
            // status, file_attributes, count, eof, the data's length word.
            results_max: (ST + POST_OP_ATTR + 4 + 4 + 4) as u32,
            ddp_results: vec![a.count],
        },
        Nfs3Args::Write(_) => fixed(ST + WCC + 4 + 4 + 8),
        Nfs3Args::Create(_) | Nfs3Args::Mkdir(_) | Nfs3Args::Symlink(_) => {
            fixed(ST + POST_OP_FH + POST_OP_ATTR + WCC)
        }
        Nfs3Args::Rename(_) => fixed(ST + 2 * WCC),
        // RFC 1813 bounds the whole resok by count / maxcount; as Linux, we
        // add the head on top, so a server that counts only the entries
        // still fits.
        //= rfc1813#section-3.3.16
        //# The maximum size of the READDIR3resok structure, in
        //# bytes.  The size must include all XDR overhead. The
        //# server is free to return less than count bytes of
        //# data.
        //= rfc1813#section-3.3.17
        //# The maximum size of the READDIRPLUS3resok structure, in
        //# bytes. The size must include all XDR overhead. The
        //# server is free to return fewer than maxcount bytes of
        //# data.
        Nfs3Args::Readdir(a) => fixed(READDIR_HEAD + a.count as usize + DIRLIST_END),
        Nfs3Args::Readdirplus(a) => fixed(READDIR_HEAD + a.maxcount as usize + DIRLIST_END),
        Nfs3Args::Fsstat(_) => fixed(ST + POST_OP_ATTR + 6 * 8 + 4),
        Nfs3Args::Fsinfo(_) => fixed(ST + POST_OP_ATTR + 7 * 4 + 8 + 8 + 4),
        Nfs3Args::Pathconf(_) => fixed(ST + POST_OP_ATTR + 6 * 4),
        Nfs3Args::Commit(_) => fixed(ST + WCC + 8),
    }
}
