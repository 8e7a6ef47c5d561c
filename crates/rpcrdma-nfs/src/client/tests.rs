//! The client's decoding of hostile replies: bounded by the call, never a
//! panic.

use bytes::Bytes;
use proptest::prelude::*;
use rpcrdma::Message;
use rpcrdma_proto::XdrEncode;

use super::procs::call_limits;
use crate::binding::message::decode_res;
use crate::nfs3::{
    self, gen_args, gen_res, Cookieverf3, Dirlist, Entryplus3, FileHandle, Filename, Nfs3Args,
    Nfs3Res, ReadArgs, ReadResOk, ReaddirplusArgs, ReaddirplusResOk, Res,
};
use crate::testgen::Rng;
use crate::Limits;

const L: Limits = Limits::DEFAULT;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every procedure's results, cut anywhere or with octets flipped,
    /// inline or with random Write-chunk results: decoded or refused, never
    /// a panic.
    #[test]
    fn mangled_results_never_panic(seed: u64, cut: usize, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4), results in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..3)) {
        let mut g = Rng::new(seed);
        for &p in nfs3::PROCEDURES {
            let args = gen_args(p, &mut g).unwrap();
            let res = gen_res(p, &mut g).unwrap();
            let mut bytes = res.to_vec().unwrap();
            for &(at, x) in &flips {
                if !bytes.is_empty() {
                    let n = bytes.len();
                    bytes[at % n] ^= x;
                }
            }
            bytes.truncate(cut % (bytes.len() + 1));
            let m = Message::with_results(Bytes::from(bytes), results.iter().map(|r| Bytes::from(r.clone())));
            let _ = decode_res(p, &m, &call_limits(&args, &L));
        }
    }
}

fn read_args(count: u32) -> Nfs3Args {
    Nfs3Args::Read(ReadArgs {
        file: FileHandle(vec![1; 8]),
        offset: 0,
        count,
    })
}

fn read_reply(n: usize) -> Vec<u8> {
    Nfs3Res::Read(Res::Ok(ReadResOk {
        file_attributes: None,
        count: n as u32,
        eof: true,
        data: Bytes::from(vec![7u8; n]),
    }))
    .to_vec()
    .unwrap()
}

/// READ data beyond the count asked is refused, inline or in a Write
/// chunk, even when it is within rtmax.
#[test]
fn read_data_is_capped_by_the_count_asked() {
    let proc = nfs3::NFSPROC3_READ;
    let ok = Message::inline(read_reply(100));
    assert!(decode_res(proc, &ok, &call_limits(&read_args(100), &L)).is_ok());
    let e = decode_res(proc, &ok, &call_limits(&read_args(99), &L)).unwrap_err();
    assert!(e.to_string().contains("rtmax"), "{e}");
    // The head inline, the data as the Write chunk's result.
    let head = read_reply(0);
    let mut head = head[..head.len() - 4].to_vec();
    head.extend_from_slice(&100u32.to_be_bytes());
    let chunked = Message::with_results(Bytes::from(head), [Bytes::from(vec![7u8; 100])]);
    assert!(decode_res(proc, &chunked, &call_limits(&read_args(100), &L)).is_ok());
    assert!(decode_res(proc, &chunked, &call_limits(&read_args(64), &L)).is_err());
}

/// READDIRPLUS entries beyond what `maxcount` octets can hold are refused
/// before they are all decoded.
#[test]
fn readdirplus_entries_are_capped_by_maxcount() {
    let proc = nfs3::NFSPROC3_READDIRPLUS;
    let entry = |i: u64| Entryplus3 {
        fileid: i,
        name: Filename(Vec::new()),
        cookie: i + 1,
        name_attributes: None,
        name_handle: None,
    };
    let reply = |n: u64| {
        let r = Nfs3Res::Readdirplus(Res::Ok(ReaddirplusResOk {
            dir_attributes: None,
            cookieverf: Cookieverf3::default(),
            reply: Dirlist {
                entries: (0..n).map(entry).collect(),
                eof: true,
            },
        }));
        Message::inline(r.to_vec().unwrap())
    };
    let args = |maxcount: u32| {
        Nfs3Args::Readdirplus(ReaddirplusArgs {
            dir: FileHandle(vec![1; 8]),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: maxcount / 8,
            maxcount,
        })
    };
    // 1024 octets hold at most 32 smallest entries (+1 of slack).
    assert!(decode_res(proc, &reply(33), &call_limits(&args(1024), &L)).is_ok());
    let e = decode_res(proc, &reply(34), &call_limits(&args(1024), &L)).unwrap_err();
    assert!(e.to_string().contains("max_dir_entries"), "{e}");
}

/// A name longer than 255 octets in a directory listing is refused.
#[test]
fn long_names_in_listings_are_refused() {
    let proc = nfs3::NFSPROC3_READDIRPLUS;
    let r = Nfs3Res::Readdirplus(Res::Ok(ReaddirplusResOk {
        dir_attributes: None,
        cookieverf: [0; 8],
        reply: Dirlist {
            entries: vec![Entryplus3 {
                fileid: 1,
                name: Filename(vec![b'a'; 256]),
                cookie: 1,
                name_attributes: None,
                name_handle: None,
            }],
            eof: true,
        },
    }));
    let args = Nfs3Args::Readdirplus(ReaddirplusArgs {
        dir: FileHandle(vec![1; 8]),
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 8192,
        maxcount: 65536,
    });
    let e = decode_res(
        proc,
        &Message::inline(r.to_vec().unwrap()),
        &call_limits(&args, &L),
    )
    .unwrap_err();
    assert!(e.to_string().contains("max_name_len"), "{e}");
}
