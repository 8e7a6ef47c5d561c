//! Bad and out-of-bounds arguments: what decodes, what a server answers.

use bytes::Bytes;
use rpcrdma::Message;
use rpcrdma_proto::xdr::{DecodeErrorKind, Reader};
use rpcrdma_proto::XdrEncode;

use super::hex;
use crate::binding::message::{decode_args, decode_res};
use crate::mount::{MountArgs, MOUNTPROC3_MNT};
use crate::nfs3::*;
use crate::{ArgError, Limits};

const L: Limits = Limits::DEFAULT;

fn server(proc: u32, bytes: &[u8]) -> Result<Nfs3Args, ArgError> {
    decode_args(proc, &Message::inline(Bytes::copy_from_slice(bytes)), &L)
}

fn lookup(name_len: usize) -> Vec<u8> {
    Nfs3Args::Lookup(LookupArgs {
        what: Diropargs3 {
            dir: FileHandle(vec![1; 8]),
            name: Filename(vec![b'a'; name_len]),
        },
    })
    .to_vec()
    .unwrap()
}

fn status(r: Result<Nfs3Args, ArgError>) -> Nfsstat3 {
    match r {
        Err(ArgError::Status { status, .. }) => status,
        other => panic!("expected an nfsstat3 refusal, got {other:?}"),
    }
}

fn garbage(r: Result<Nfs3Args, ArgError>) -> DecodeErrorKind {
    match r {
        Err(ArgError::Garbage(e)) => e.kind,
        other => panic!("expected GARBAGE_ARGS, got {other:?}"),
    }
}

//= rfc1813#section-3.2
//# If no_trunc is TRUE and the filename exceeds the
//# server's file system maximum filename length, the operation will
//# fail with the error, NFS3ERR_NAMETOOLONG.
#[test]
fn name_of_256_octets_is_nametoolong_255_is_fine() {
    assert!(server(NFSPROC3_LOOKUP, &lookup(255)).is_ok());
    // Decodable (filename3 is string<>), so not GARBAGE_ARGS.
    assert!(Nfs3Args::decode(
        NFSPROC3_LOOKUP,
        &mut Reader::new(&lookup(256)),
        &L,
        &mut Inline
    )
    .is_ok());
    assert_eq!(
        status(server(NFSPROC3_LOOKUP, &lookup(256))),
        Nfsstat3::NFS3ERR_NAMETOOLONG
    );
    // Every procedure that takes a name checks it, RENAME both.
    let long = Filename(vec![b'x'; 256]);
    let d = |n: &Filename| Diropargs3 {
        dir: FileHandle(vec![1]),
        name: n.clone(),
    };
    let ok = Filename::from("ok");
    for a in [
        Nfs3Args::Create(CreateArgs {
            place: d(&long),
            how: Createhow3::Unchecked(Sattr3::none()),
        }),
        Nfs3Args::Mkdir(MkdirArgs {
            place: d(&long),
            attributes: Sattr3::none(),
        }),
        Nfs3Args::Remove(RemoveArgs { object: d(&long) }),
        Nfs3Args::Rmdir(RemoveArgs { object: d(&long) }),
        Nfs3Args::Rename(RenameArgs {
            from: d(&ok),
            to: d(&long),
        }),
        Nfs3Args::Symlink(SymlinkArgs {
            place: d(&long),
            symlink_attributes: Sattr3::none(),
            symlink_data: NfsPath::from("t"),
        }),
    ] {
        let b = a.to_vec().unwrap();
        assert_eq!(
            status(server(a.proc(), &b)),
            Nfsstat3::NFS3ERR_NAMETOOLONG,
            "{a:?}"
        );
    }
}

#[test]
fn symlink_target_over_1024_is_nametoolong_empty_is_inval() {
    let sym = |n: usize| {
        Nfs3Args::Symlink(SymlinkArgs {
            place: Diropargs3 {
                dir: FileHandle(vec![1]),
                name: Filename::from("l"),
            },
            symlink_attributes: Sattr3::none(),
            symlink_data: NfsPath(vec![b'/'; n]),
        })
        .to_vec()
        .unwrap()
    };
    assert!(server(NFSPROC3_SYMLINK, &sym(1024)).is_ok());
    assert_eq!(
        status(server(NFSPROC3_SYMLINK, &sym(1025))),
        Nfsstat3::NFS3ERR_NAMETOOLONG
    );
    assert_eq!(
        status(server(NFSPROC3_SYMLINK, &sym(0))),
        Nfsstat3::NFS3ERR_INVAL
    );
}

//= rfc1813#section-2.6
//# struct nfs_fh3 {
//#    opaque       data<NFS3_FHSIZE>;
//# };
#[test]
fn handle_of_65_octets_is_garbage_64_is_fine() {
    let getattr = |n: usize| {
        let mut b = (n as u32).to_be_bytes().to_vec();
        b.extend(std::iter::repeat_n(7u8, n.div_ceil(4) * 4));
        b
    };
    assert!(server(NFSPROC3_GETATTR, &getattr(64)).is_ok());
    assert!(matches!(
        garbage(server(NFSPROC3_GETATTR, &getattr(65))),
        DecodeErrorKind::LimitExceeded {
            limit: "NFS3_FHSIZE",
            max: 64,
            value: 65
        }
    ));
    // An empty handle decodes; the handle table answers NFS3ERR_BADHANDLE.
    assert!(server(NFSPROC3_GETATTR, &getattr(0)).is_ok());
}

#[test]
fn read_count_over_rtmax_is_a_short_read_not_an_error() {
    let a = ReadArgs {
        file: FileHandle(vec![1]),
        offset: 0,
        count: 4 << 20,
    };
    let got = server(NFSPROC3_READ, &Nfs3Args::Read(a.clone()).to_vec().unwrap()).unwrap();
    assert_eq!(got, Nfs3Args::Read(a.clone()));
    assert_eq!(a.effective_count(&L), 1 << 20);
}

#[test]
fn write_over_wtmax_is_written_short_count_mismatch_is_garbage() {
    let l = Limits { wtmax: 8, ..L };
    let w = |count: u32, data: &'static [u8]| {
        Nfs3Args::Write(WriteArgs {
            file: FileHandle(vec![1]),
            offset: 0,
            count,
            stable: StableHow::UNSTABLE,
            data: Bytes::from_static(data),
        })
    };
    let a = w(12, b"0123456789ab");
    let got = decode_args(
        NFSPROC3_WRITE,
        &crate::binding::message::encode_args(&a).unwrap(),
        &l,
    )
    .unwrap();
    let Nfs3Args::Write(got) = got else { panic!() };
    assert_eq!(&got.effective_data(&l)[..], b"01234567");
    let b = w(11, b"0123456789ab").to_vec().unwrap();
    assert!(matches!(
        garbage(server(NFSPROC3_WRITE, &b)),
        DecodeErrorKind::BadValue {
            what: "WRITE3args",
            ..
        }
    ));
}

#[test]
fn undecodable_arguments_are_garbage() {
    // stable_how 3, createmode3 3, time_how 3: not values of the enums.
    let write = hex("00000001 01000000 0000000000000000 00000000 00000003 00000000");
    assert!(matches!(
        garbage(server(NFSPROC3_WRITE, &write)),
        DecodeErrorKind::BadValue { .. }
    ));
    let create = hex("00000001 01000000 00000001 61000000 00000003");
    assert!(matches!(
        garbage(server(NFSPROC3_CREATE, &create)),
        DecodeErrorKind::BadValue { .. }
    ));
    let setattr =
        hex("00000001 01000000 00000000 00000000 00000000 00000000 00000003 00000000 00000000");
    assert!(matches!(
        garbage(server(NFSPROC3_SETATTR, &setattr)),
        DecodeErrorKind::BadValue { .. }
    ));
    // A bool of 2 (set_mode3).
    let setattr = hex("00000001 01000000 00000002");
    assert_eq!(
        garbage(server(NFSPROC3_SETATTR, &setattr)),
        DecodeErrorKind::BadBool(2)
    );
    // A name length of 2^32-1 in 16 octets: refused before any copy.
    let lookup = hex("00000001 01000000 ffffffff 00000000");
    assert!(matches!(
        garbage(server(NFSPROC3_LOOKUP, &lookup)),
        DecodeErrorKind::Truncated { .. }
    ));
    // Trailing octets.
    let mut b = hex("00000001 01000000");
    b.extend([0, 0, 0, 0]);
    assert_eq!(
        garbage(server(NFSPROC3_GETATTR, &b)),
        DecodeErrorKind::TrailingBytes(4)
    );
    // NULL takes nothing.
    assert_eq!(
        garbage(server(NFSPROC3_NULL, &[0, 0, 0, 0])),
        DecodeErrorKind::TrailingBytes(4)
    );
}

#[test]
fn procedures_without_codecs() {
    for p in [NFSPROC3_MKNOD, NFSPROC3_LINK, 22, u32::MAX] {
        assert_eq!(server(p, &[]), Err(ArgError::ProcUnavail(p)));
    }
    // NFS3ERR_NOTSUPP (10004 = 0x2714) with every attribute absent.
    assert_eq!(
        not_supported(NFSPROC3_MKNOD).unwrap(),
        hex("00002714 00000000 00000000")
    );
    assert_eq!(
        not_supported(NFSPROC3_LINK).unwrap(),
        hex("00002714 00000000 00000000 00000000")
    );
    assert_eq!(not_supported(NFSPROC3_READ), None);
}

#[test]
fn mount_dirpath_over_1024_is_garbage() {
    let mnt = |n: usize| {
        crate::mount::MountArgs::Mnt(crate::mount::Dirpath(vec![b'/'; n]))
            .to_vec()
            .unwrap()
    };
    assert!(MountArgs::decode(MOUNTPROC3_MNT, &mut Reader::new(&mnt(1024)), &L).is_ok());
    let e = MountArgs::decode(MOUNTPROC3_MNT, &mut Reader::new(&mnt(1025)), &L).unwrap_err();
    assert!(matches!(
        e,
        ArgError::Garbage(ref d) if matches!(d.kind, DecodeErrorKind::LimitExceeded { limit: "MNTPATHLEN", .. })
    ));
}

#[test]
fn client_refuses_reply_lists_over_their_limits() {
    let entry = |name: &str| Entry3 {
        fileid: 1,
        name: Filename::from(name),
        cookie: 1,
    };
    let res = |entries: Vec<Entry3>| {
        Nfs3Res::Readdir(Res::Ok(ReaddirResOk {
            dir_attributes: None,
            cookieverf: [0; 8],
            reply: Dirlist { entries, eof: true },
        }))
        .to_vec()
        .unwrap()
    };
    let l = Limits {
        max_dir_entries: 2,
        ..L
    };
    let dec = |b: &[u8], l: &Limits| decode_res(NFSPROC3_READDIR, &Message::inline(b.to_vec()), l);
    assert!(dec(&res(vec![entry("a"), entry("b")]), &l).is_ok());
    let e = dec(&res(vec![entry("a"), entry("b"), entry("c")]), &l).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::LimitExceeded {
            limit: "max_dir_entries",
            ..
        }
    ));
    let e = dec(&res(vec![entry(&"n".repeat(256))]), &L).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::LimitExceeded {
            limit: "max_name_len",
            ..
        }
    ));
    // READ data over rtmax, READLINK path over max_path_len.
    let read = Nfs3Res::Read(Res::Ok(ReadResOk {
        file_attributes: None,
        count: 9,
        eof: false,
        data: Bytes::from_static(b"012345678"),
    }))
    .to_vec()
    .unwrap();
    let l = Limits {
        rtmax: 8,
        max_path_len: 8,
        ..L
    };
    let e = decode_res(NFSPROC3_READ, &Message::inline(read), &l).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::LimitExceeded { limit: "rtmax", .. }
    ));
    let rl = Nfs3Res::Readlink(Res::Ok(ReadlinkResOk {
        symlink_attributes: None,
        data: NfsPath::from("/123456789"),
    }))
    .to_vec()
    .unwrap();
    let e = decode_res(NFSPROC3_READLINK, &Message::inline(rl), &l).unwrap_err();
    assert!(matches!(
        e.kind,
        DecodeErrorKind::LimitExceeded {
            limit: "max_path_len",
            ..
        }
    ));
}
