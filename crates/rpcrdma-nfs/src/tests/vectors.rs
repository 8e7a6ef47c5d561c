//! Byte vectors built by hand from the RFC 1813 XDR definitions (each word
//! commented with the field it is), so the codecs are checked against
//! something other than themselves: decode gives the value written out
//! here, and the value encodes to exactly these octets.

use bytes::Bytes;
use rpcrdma_proto::xdr::Reader;
use rpcrdma_proto::XdrEncode;

use super::hex;
use crate::mount::{
    Dirpath, Export, Exports, MountArgs, MountRes, MountResOk, MountResults, Mountstat3, Name,
    MOUNTPROC3_EXPORT, MOUNTPROC3_MNT,
};
use crate::nfs3::*;
use crate::Limits;

const L: Limits = Limits::DEFAULT;

fn args_vector(proc: u32, bytes: &str, want: Nfs3Args) {
    let b = hex(bytes);
    let got = Nfs3Args::decode(proc, &mut Reader::new(&b), &L, &mut Inline).unwrap();
    assert_eq!(got, want);
    assert_eq!(want.to_vec().unwrap(), b);
}

fn res_vector(proc: u32, bytes: &str, want: Nfs3Res) {
    let b = hex(bytes);
    let got = Nfs3Res::decode(proc, &mut Reader::new(&b), &L, &mut Inline).unwrap();
    assert_eq!(got, want);
    assert_eq!(want.to_vec().unwrap(), b);
}

fn fh(b: &[u8]) -> FileHandle {
    FileHandle(b.to_vec())
}

const FATTR3_HEX: &str = "
    00000001                # type NF3REG
    000001a4                # mode 0644
    00000001                # nlink
    000003e8 00000064       # uid 1000, gid 100
    0000000000000005        # size
    0000000000001000        # used
    00000000 00000000       # rdev (specdata1, specdata2)
    1122334455667788        # fsid
    000000000000002a        # fileid 42
    5f5e1000 00000001       # atime
    5f5e1000 00000002       # mtime
    5f5e1000 00000003       # ctime
";

fn fattr3() -> Fattr3 {
    let t = |n| Nfstime3 {
        seconds: 0x5f5e_1000,
        nseconds: n,
    };
    Fattr3 {
        ftype: Ftype3::NF3REG,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 5,
        used: 4096,
        rdev: Specdata3 {
            specdata1: 0,
            specdata2: 0,
        },
        fsid: 0x1122_3344_5566_7788,
        fileid: 42,
        atime: t(1),
        mtime: t(2),
        ctime: t(3),
    }
}

#[test]
fn lookup_args() {
    // struct LOOKUP3args { diropargs3 what; };  diropargs3 { nfs_fh3 dir; filename3 name; }
    args_vector(
        NFSPROC3_LOOKUP,
        "00000008 0102030405060708  # dir: nfs_fh3 of 8 octets
         00000003 666f6f00          # name \"foo\" + 1 pad octet",
        Nfs3Args::Lookup(LookupArgs {
            what: Diropargs3 {
                dir: fh(&[1, 2, 3, 4, 5, 6, 7, 8]),
                name: Filename::from("foo"),
            },
        }),
    );
}

#[test]
fn write_args() {
    // struct WRITE3args { nfs_fh3 file; offset3 offset; count3 count;
    //                     stable_how stable; opaque data<>; };
    args_vector(
        NFSPROC3_WRITE,
        "00000004 deadbeef          # file
         0000000100000000           # offset 2^32
         00000005                   # count
         00000002                   # stable FILE_SYNC
         00000005 68656c6c6f000000  # data \"hello\" + 3 pad octets",
        Nfs3Args::Write(WriteArgs {
            file: fh(&[0xde, 0xad, 0xbe, 0xef]),
            offset: 1 << 32,
            count: 5,
            stable: StableHow::FILE_SYNC,
            data: Bytes::from_static(b"hello"),
        }),
    );
}

#[test]
fn setattr_args() {
    // SETATTR3args { nfs_fh3 object; sattr3 new_attributes; sattrguard3 guard; }
    args_vector(
        NFSPROC3_SETATTR,
        "00000001 aa000000          # object (1 octet + pad)
         00000001 000001ed          # set_mode3 TRUE 0755
         00000000                   # set_uid3 FALSE
         00000000                   # set_gid3 FALSE
         00000001 0000000000010000  # set_size3 TRUE 65536
         00000001                   # set_atime SET_TO_SERVER_TIME
         00000002 00000007 00000008 # set_mtime SET_TO_CLIENT_TIME 7.8
         00000001 00000009 0000000a # guard TRUE ctime 9.10",
        Nfs3Args::Setattr(SetattrArgs {
            object: fh(&[0xaa]),
            new_attributes: Sattr3 {
                mode: Some(0o755),
                uid: None,
                gid: None,
                size: Some(65536),
                atime: SetTime::ServerTime,
                mtime: SetTime::ClientTime(Nfstime3 {
                    seconds: 7,
                    nseconds: 8,
                }),
            },
            guard: Some(Nfstime3 {
                seconds: 9,
                nseconds: 10,
            }),
        }),
    );
}

#[test]
fn create_exclusive_args() {
    // CREATE3args { diropargs3 where; createhow3 how; }
    // createhow3 switch (createmode3) { case EXCLUSIVE: createverf3 verf; }
    args_vector(
        NFSPROC3_CREATE,
        "00000002 01020000          # dir
         00000005 612e747874000000  # name \"a.txt\"
         00000002                   # mode EXCLUSIVE
         0001020304050607           # createverf3 (8 octets, no length word)",
        Nfs3Args::Create(CreateArgs {
            place: Diropargs3 {
                dir: fh(&[1, 2]),
                name: Filename::from("a.txt"),
            },
            how: Createhow3::Exclusive([0, 1, 2, 3, 4, 5, 6, 7]),
        }),
    );
}

#[test]
fn readdirplus_args() {
    args_vector(
        NFSPROC3_READDIRPLUS,
        "00000001 07000000          # dir
         0000000000000000           # cookie
         0000000000000000           # cookieverf
         00001000                   # dircount 4096
         00008000                   # maxcount 32768",
        Nfs3Args::Readdirplus(ReaddirplusArgs {
            dir: fh(&[7]),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 32768,
        }),
    );
}

#[test]
fn getattr_result() {
    res_vector(
        NFSPROC3_GETATTR,
        &format!("00000000 # NFS3_OK\n{FATTR3_HEX}"),
        Nfs3Res::Getattr(Res::Ok(fattr3())),
    );
}

#[test]
fn lookup_failure_result() {
    // LOOKUP3resfail { post_op_attr dir_attributes; }
    res_vector(
        NFSPROC3_LOOKUP,
        "00000002  # NFS3ERR_NOENT
         00000000  # dir_attributes: attributes_follow FALSE",
        Nfs3Res::Lookup(Res::Fail(Nfsstat3::NFS3ERR_NOENT, None)),
    );
    assert_eq!(
        Nfs3Res::failure(NFSPROC3_LOOKUP, Nfsstat3::NFS3ERR_NOENT).unwrap(),
        Nfs3Res::Lookup(Res::Fail(Nfsstat3::NFS3ERR_NOENT, None))
    );
}

#[test]
fn read_result() {
    // READ3resok { post_op_attr file_attributes; count3 count; bool eof; opaque data<>; }
    res_vector(
        NFSPROC3_READ,
        &format!(
            "00000000  # NFS3_OK
             00000001  # file_attributes follow
             {FATTR3_HEX}
             00000003  # count
             00000001  # eof TRUE
             00000003 61626300  # data \"abc\" + pad"
        ),
        Nfs3Res::Read(Res::Ok(ReadResOk {
            file_attributes: Some(fattr3()),
            count: 3,
            eof: true,
            data: Bytes::from_static(b"abc"),
        })),
    );
}

#[test]
fn write_result() {
    // WRITE3resok { wcc_data file_wcc; count3 count; stable_how committed; writeverf3 verf; }
    res_vector(
        NFSPROC3_WRITE,
        "00000000                   # NFS3_OK
         00000001                   # pre_op_attr follows: wcc_attr
         0000000000000000 00000001 00000002 00000003 00000004  # size, mtime, ctime
         00000000                   # post_op_attr FALSE
         00000005                   # count
         00000001                   # committed DATA_SYNC
         8877665544332211           # verf",
        Nfs3Res::Write(Res::Ok(WriteResOk {
            file_wcc: WccData {
                before: Some(WccAttr {
                    size: 0,
                    mtime: Nfstime3 {
                        seconds: 1,
                        nseconds: 2,
                    },
                    ctime: Nfstime3 {
                        seconds: 3,
                        nseconds: 4,
                    },
                }),
                after: None,
            },
            count: 5,
            committed: StableHow::DATA_SYNC,
            verf: [0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
        })),
    );
}

#[test]
fn readdir_result() {
    // READDIR3resok { post_op_attr dir_attributes; cookieverf3 cookieverf; dirlist3 reply; }
    // dirlist3 { entry3 *entries; bool eof; }  entry3 { fileid3; filename3; cookie3; entry3 *next; }
    res_vector(
        NFSPROC3_READDIR,
        "00000000                   # NFS3_OK
         00000000                   # dir_attributes FALSE
         0102030405060708           # cookieverf
         00000001                   # entries: value follows
         0000000000000002 00000001 2e000000 0000000000000001   # fileid 2, \".\", cookie 1
         00000001                   # nextentry follows
         0000000000000003 00000002 2e2e0000 0000000000000002   # fileid 3, \"..\", cookie 2
         00000000                   # nextentry: none
         00000001                   # eof TRUE",
        Nfs3Res::Readdir(Res::Ok(ReaddirResOk {
            dir_attributes: None,
            cookieverf: [1, 2, 3, 4, 5, 6, 7, 8],
            reply: Dirlist {
                entries: vec![
                    Entry3 {
                        fileid: 2,
                        name: Filename::from("."),
                        cookie: 1,
                    },
                    Entry3 {
                        fileid: 3,
                        name: Filename::from(".."),
                        cookie: 2,
                    },
                ],
                eof: true,
            },
        })),
    );
}

#[test]
fn fsinfo_result() {
    res_vector(
        NFSPROC3_FSINFO,
        "00000000                   # NFS3_OK
         00000000                   # obj_attributes FALSE
         00100000 00100000 00001000 # rtmax 1 MiB, rtpref 1 MiB, rtmult 4096
         00100000 00100000 00001000 # wtmax, wtpref, wtmult
         00001000                   # dtpref
         7fffffffffffffff           # maxfilesize
         00000000 00000001          # time_delta 1 ns
         0000001b                   # properties LINK|SYMLINK|HOMOGENEOUS|CANSETTIME",
        Nfs3Res::Fsinfo(Res::Ok(FsinfoResOk {
            obj_attributes: None,
            rtmax: 1 << 20,
            rtpref: 1 << 20,
            rtmult: 4096,
            wtmax: 1 << 20,
            wtpref: 1 << 20,
            wtmult: 4096,
            dtpref: 4096,
            maxfilesize: i64::MAX as u64,
            time_delta: Nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: 0x1b,
        })),
    );
}

#[test]
fn mount_mnt_and_export() {
    // MNT args: dirpath "/srv/nfs"
    let b = hex("00000008 2f7372762f6e6673");
    assert_eq!(
        MountArgs::decode(MOUNTPROC3_MNT, &mut Reader::new(&b), &L).unwrap(),
        MountArgs::Mnt(Dirpath::from("/srv/nfs"))
    );
    // mountres3: MNT3_OK, fhandle3 of 4 octets, auth_flavors <1> = AUTH_SYS
    let b = hex("00000000 00000004 01020304 00000001 00000001");
    let want = MountResults::Mnt(MountRes::Ok(MountResOk {
        fhandle: FileHandle(vec![1, 2, 3, 4]),
        auth_flavors: vec![1],
    }));
    assert_eq!(
        MountResults::decode(MOUNTPROC3_MNT, &mut Reader::new(&b), &L).unwrap(),
        want
    );
    assert_eq!(want.to_vec().unwrap(), b);
    // MNT3ERR_ACCES: void
    let b = hex("0000000d");
    assert_eq!(
        MountResults::decode(MOUNTPROC3_MNT, &mut Reader::new(&b), &L).unwrap(),
        MountResults::Mnt(MountRes::Fail(Mountstat3::MNT3ERR_ACCES))
    );
    // exports: one node "/srv" with one group "*"
    let b = hex(
        "00000001 00000004 2f737276   # export follows, ex_dir \"/srv\"
         00000001 00000001 2a000000   # group follows, gr_name \"*\"
         00000000                     # gr_next: none
         00000000                     # ex_next: none",
    );
    let want = MountResults::Export(Exports(vec![Export {
        dir: Dirpath::from("/srv"),
        groups: vec![Name::from("*")],
    }]));
    assert_eq!(
        MountResults::decode(MOUNTPROC3_EXPORT, &mut Reader::new(&b), &L).unwrap(),
        want
    );
    assert_eq!(want.to_vec().unwrap(), b);
}
