//! RFC 8267 §4 on the runtime's messages, and the reply-size estimate.

use bytes::Bytes;
use rpcrdma::{Message, Piece};
use rpcrdma_proto::xdr::DecodeErrorKind;
use rpcrdma_proto::XdrEncode;

use crate::binding::message::{
    call_options, decode_args, decode_res, encode_args, encode_res, REPLY_HEADER_MAX,
};
use crate::binding::{args_ddp_eligible, reply_size, results_ddp_eligible};
use crate::nfs3::*;
use crate::Limits;

const L: Limits = Limits::DEFAULT;

//= rfc8267#section-4
//# All other argument or result data items in NFS versions 2 and 3 are
//# not DDP-eligible.
#[test]
fn exactly_four_items_are_ddp_eligible() {
    let args: Vec<u32> = (0..32).filter(|&p| args_ddp_eligible(p)).collect();
    let res: Vec<u32> = (0..32).filter(|&p| results_ddp_eligible(p)).collect();
    assert_eq!(args, [NFSPROC3_WRITE, NFSPROC3_SYMLINK]);
    assert_eq!(res, [NFSPROC3_READLINK, NFSPROC3_READ]);
    // And the codecs agree: only those carry a DDP item when encoded.
    let mut g = crate::testgen::Rng::new(7);
    for &p in PROCEDURES {
        let a = gen_args(p, &mut g).unwrap();
        assert_eq!(a.ddp_item().is_some(), args_ddp_eligible(p), "args of {p}");
        let ok = loop {
            let v = gen_res(p, &mut g).unwrap();
            if p == NFSPROC3_NULL || v.to_vec().unwrap()[..4] == [0; 4] {
                break v;
            }
        };
        assert_eq!(
            ok.ddp_item().is_some(),
            results_ddp_eligible(p),
            "results of {p}"
        );
    }
}

fn write() -> Nfs3Args {
    Nfs3Args::Write(WriteArgs {
        file: FileHandle(vec![9; 3]),
        offset: 4096,
        count: 5,
        stable: StableHow::UNSTABLE,
        data: Bytes::from_static(b"hello"),
    })
}

#[test]
fn write_data_is_a_ddp_piece_after_its_length_word() {
    let m = encode_args(&write()).unwrap();
    let [Piece::Inline(head), Piece::Ddp(data)] = m.pieces() else {
        panic!("{:?}", m.pieces())
    };
    assert_eq!(&data[..], b"hello");
    // fh (4 + 4), offset 8, count 4, stable 4, then the data's length word.
    assert_eq!(head.len(), 8 + 8 + 4 + 4 + 4);
    assert_eq!(&head[head.len() - 4..], &[0, 0, 0, 5]);
    assert_eq!(m.xdr_len(), write().encoded_len());
    // A server receives it as the engine delivers a call with a Read chunk.
    assert_eq!(decode_args(NFSPROC3_WRITE, &m, &L).unwrap(), write());
    // A Read chunk whose length disagrees with the length word is refused.
    let bad = Message::from_pieces([
        Piece::Inline(head.clone()),
        Piece::Ddp(Bytes::from_static(b"hell")),
    ]);
    let e = decode_args(NFSPROC3_WRITE, &bad, &L).unwrap_err();
    assert!(
        matches!(e, crate::ArgError::Garbage(ref d) if matches!(d.kind, DecodeErrorKind::BadValue { .. }))
    );
}

#[test]
fn non_ddp_items_stay_inline() {
    let m = encode_args(&Nfs3Args::Getattr(GetattrArgs {
        object: FileHandle(vec![1]),
    }))
    .unwrap();
    assert_eq!(m.ddp_count(), 0);
    let fail = Nfs3Res::failure(NFSPROC3_READ, Nfsstat3::NFS3ERR_IO).unwrap();
    assert_eq!(encode_res(&fail).unwrap().ddp_count(), 0);
}

fn read_ok(data: &'static [u8]) -> Nfs3Res {
    Nfs3Res::Read(Res::Ok(ReadResOk {
        file_attributes: None,
        count: data.len() as u32,
        eof: true,
        data: Bytes::from_static(data),
    }))
}

#[test]
fn read_result_from_a_write_chunk() {
    let v = read_ok(b"abcde");
    let m = encode_res(&v).unwrap();
    assert_eq!(m.ddp_count(), 1);
    // status, post_op_attr FALSE, count, eof, then the length word: the
    // inline stream an RDMA reply keeps; the data came in the Write chunk.
    let inline = crate::tests::hex("00000000 00000000 00000005 00000001 00000005");
    let rdma = Message::with_results(inline.clone(), [Bytes::from_static(b"abcde")]);
    assert_eq!(decode_res(NFSPROC3_READ, &rdma, &L).unwrap(), v);
    // A legacy responder that wrote the pad too.
    let rdma = Message::with_results(inline.clone(), [Bytes::from_static(b"abcde\0\0\0")]);
    assert_eq!(decode_res(NFSPROC3_READ, &rdma, &L).unwrap(), v);
    // An empty Write chunk: the responder sent the data inline.
    let mut all = inline.clone();
    all.extend(b"abcde\0\0\0");
    let rdma = Message::with_results(all, [Bytes::new()]);
    assert_eq!(decode_res(NFSPROC3_READ, &rdma, &L).unwrap(), v);
    // A Write chunk of the wrong length.
    let rdma = Message::with_results(inline.clone(), [Bytes::from_static(b"abc")]);
    assert!(decode_res(NFSPROC3_READ, &rdma, &L).is_err());
    // Write-chunk data no item claimed (a failed READ): trailing.
    let fail = crate::tests::hex("00000005 00000000");
    let rdma = Message::with_results(fail, [Bytes::from_static(b"abcd")]);
    let e = decode_res(NFSPROC3_READ, &rdma, &L).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TrailingBytes(4));
}

/// The exact largest result of each fixed-size procedure equals
/// `reply_size`: built at its largest (every optional attribute present,
/// 64-octet handles), its encoded length is the estimate.
#[test]
fn reply_size_is_the_largest_encoding() {
    let fh = FileHandle(vec![0; 64]);
    let attr = Fattr3 {
        ftype: Ftype3::NF3REG,
        mode: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        size: 0,
        used: 0,
        rdev: Specdata3 {
            specdata1: 0,
            specdata2: 0,
        },
        fsid: 0,
        fileid: 0,
        atime: Nfstime3 {
            seconds: 0,
            nseconds: 0,
        },
        mtime: Nfstime3 {
            seconds: 0,
            nseconds: 0,
        },
        ctime: Nfstime3 {
            seconds: 0,
            nseconds: 0,
        },
    };
    let wcc = WccData {
        before: Some(WccAttr {
            size: 0,
            mtime: attr.mtime.clone(),
            ctime: attr.ctime.clone(),
        }),
        after: Some(attr.clone()),
    };
    let dir = Diropargs3 {
        dir: fh.clone(),
        name: Filename::from("x"),
    };
    let create_ok = CreateResOk {
        obj: Some(fh.clone()),
        obj_attributes: Some(attr.clone()),
        dir_wcc: wcc.clone(),
    };
    let cases: Vec<(Nfs3Args, Nfs3Res)> = vec![
        (Nfs3Args::Null(()), Nfs3Res::Null(())),
        (
            Nfs3Args::Getattr(GetattrArgs { object: fh.clone() }),
            Nfs3Res::Getattr(Res::Ok(attr.clone())),
        ),
        (
            Nfs3Args::Setattr(SetattrArgs {
                object: fh.clone(),
                new_attributes: Sattr3::none(),
                guard: None,
            }),
            Nfs3Res::Setattr(Res::Ok(wcc.clone())),
        ),
        (
            Nfs3Args::Lookup(LookupArgs { what: dir.clone() }),
            Nfs3Res::Lookup(Res::Ok(LookupResOk {
                object: fh.clone(),
                obj_attributes: Some(attr.clone()),
                dir_attributes: Some(attr.clone()),
            })),
        ),
        (
            Nfs3Args::Access(AccessArgs {
                object: fh.clone(),
                access: 0x3f,
            }),
            Nfs3Res::Access(Res::Ok(AccessResOk {
                obj_attributes: Some(attr.clone()),
                access: 0,
            })),
        ),
        (
            Nfs3Args::Readlink(ReadlinkArgs {
                symlink: fh.clone(),
            }),
            Nfs3Res::Readlink(Res::Ok(ReadlinkResOk {
                symlink_attributes: Some(attr.clone()),
                data: NfsPath(vec![b'p'; 1024]),
            })),
        ),
        (
            write(),
            Nfs3Res::Write(Res::Ok(WriteResOk {
                file_wcc: wcc.clone(),
                count: 0,
                committed: StableHow::FILE_SYNC,
                verf: [0; 8],
            })),
        ),
        (
            Nfs3Args::Create(CreateArgs {
                place: dir.clone(),
                how: Createhow3::Exclusive([0; 8]),
            }),
            Nfs3Res::Create(Res::Ok(create_ok.clone())),
        ),
        (
            Nfs3Args::Mkdir(MkdirArgs {
                place: dir.clone(),
                attributes: Sattr3::none(),
            }),
            Nfs3Res::Mkdir(Res::Ok(create_ok.clone())),
        ),
        (
            Nfs3Args::Symlink(SymlinkArgs {
                place: dir.clone(),
                symlink_attributes: Sattr3::none(),
                symlink_data: NfsPath::from("t"),
            }),
            Nfs3Res::Symlink(Res::Ok(create_ok.clone())),
        ),
        (
            Nfs3Args::Remove(RemoveArgs {
                object: dir.clone(),
            }),
            Nfs3Res::Remove(Res::Ok(wcc.clone())),
        ),
        (
            Nfs3Args::Rmdir(RemoveArgs {
                object: dir.clone(),
            }),
            Nfs3Res::Rmdir(Res::Ok(wcc.clone())),
        ),
        (
            Nfs3Args::Rename(RenameArgs {
                from: dir.clone(),
                to: dir.clone(),
            }),
            Nfs3Res::Rename(Res::Ok(RenameWcc {
                fromdir_wcc: wcc.clone(),
                todir_wcc: wcc.clone(),
            })),
        ),
        (
            Nfs3Args::Fsstat(FsArgs { object: fh.clone() }),
            Nfs3Res::Fsstat(Res::Ok(FsstatResOk {
                obj_attributes: Some(attr.clone()),
                tbytes: 0,
                fbytes: 0,
                abytes: 0,
                tfiles: 0,
                ffiles: 0,
                afiles: 0,
                invarsec: 0,
            })),
        ),
        (
            Nfs3Args::Fsinfo(FsArgs { object: fh.clone() }),
            Nfs3Res::Fsinfo(Res::Ok(FsinfoResOk {
                obj_attributes: Some(attr.clone()),
                rtmax: 0,
                rtpref: 0,
                rtmult: 0,
                wtmax: 0,
                wtpref: 0,
                wtmult: 0,
                dtpref: 0,
                maxfilesize: 0,
                time_delta: attr.atime.clone(),
                properties: 0,
            })),
        ),
        (
            Nfs3Args::Pathconf(FsArgs { object: fh.clone() }),
            Nfs3Res::Pathconf(Res::Ok(PathconfResOk {
                obj_attributes: Some(attr.clone()),
                linkmax: 0,
                name_max: 0,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            })),
        ),
        (
            Nfs3Args::Commit(CommitArgs {
                file: fh.clone(),
                offset: 0,
                count: 0,
            }),
            Nfs3Res::Commit(Res::Ok(CommitResOk {
                file_wcc: wcc.clone(),
                verf: [0; 8],
            })),
        ),
    ];
    assert_eq!(
        cases.len(),
        PROCEDURES.len() - 3,
        "all but READ, READDIR, READDIRPLUS"
    );
    for (a, v) in cases {
        let est = reply_size(&a, &L);
        assert_eq!(
            est.results_max as usize,
            v.encoded_len(),
            "procedure {}",
            a.proc()
        );
        assert!(est.ddp_results.is_empty());
    }
    // READ: the head (with the data's length word) inline, the data in the
    // Write chunk.
    let read = Nfs3Args::Read(ReadArgs {
        file: fh.clone(),
        offset: 0,
        count: 1 << 20,
    });
    let v = Nfs3Res::Read(Res::Ok(ReadResOk {
        file_attributes: Some(attr.clone()),
        count: 0,
        eof: false,
        data: Bytes::new(),
    }));
    let est = reply_size(&read, &L);
    assert_eq!(est.results_max as usize, v.encoded_len());
    assert_eq!(est.ddp_results, [1 << 20]);
    // READDIRPLUS: head + maxcount + list end.
    let rdp = Nfs3Args::Readdirplus(ReaddirplusArgs {
        dir: fh,
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 8192,
        maxcount: 65536,
    });
    let empty = Nfs3Res::Readdirplus(Res::Ok(ReaddirplusResOk {
        dir_attributes: Some(attr),
        cookieverf: [0; 8],
        reply: Dirlist {
            entries: Vec::new(),
            eof: true,
        },
    }));
    assert_eq!(
        reply_size(&rdp, &L).results_max as usize,
        empty.encoded_len() + 65536
    );
}

#[test]
fn call_options_offer_a_write_chunk_only_for_read() {
    let read = Nfs3Args::Read(ReadArgs {
        file: FileHandle(vec![1]),
        offset: 0,
        count: 65536,
    });
    let o = call_options(&read, &L);
    assert_eq!(o.ddp_results, [65536]);
    assert_eq!(o.reply_max, Some(REPLY_HEADER_MAX + 104));
    let rl = Nfs3Args::Readlink(ReadlinkArgs {
        symlink: FileHandle(vec![1]),
    });
    let o = call_options(&rl, &L);
    assert!(
        o.ddp_results.is_empty(),
        "Linux offers no Write chunk for READLINK"
    );
    assert_eq!(o.reply_max, Some(REPLY_HEADER_MAX + 4 + 88 + 4 + 1024));
}
