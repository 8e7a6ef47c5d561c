//! Round trips and hostile inputs of the NFSv4.1 and callback XDR.

use proptest::prelude::*;
use rpcrdma_proto::xdr::Reader;

use super::cb::*;
use super::ops::*;
use super::*;

fn sid(b: u8) -> SessionId {
    [b; 16]
}

fn st(b: u8) -> StateId {
    StateId {
        seqid: b as u32,
        other: [b; 12],
    }
}

fn every_op() -> Vec<OpArgs> {
    let attrs = ChannelAttrs {
        headerpadsize: 0,
        maxrequestsize: 4068,
        maxresponsesize: 4068,
        maxresponsesize_cached: 0,
        maxoperations: 16,
        maxrequests: 1,
        rdma_ird: Some(16),
    };
    vec![
        OpArgs::Sequence(SequenceArgs {
            sessionid: sid(1),
            sequenceid: 7,
            slotid: 0,
            highest_slotid: 0,
            cachethis: true,
        }),
        OpArgs::PutRootFh,
        OpArgs::PutFh(Fh(vec![1, 2, 3])),
        OpArgs::Lookup(b"deleg.txt".to_vec()),
        OpArgs::GetAttr(vec![0x0010_0012]),
        OpArgs::GetFh,
        OpArgs::ExchangeId(ExchangeIdArgs {
            verifier: *b"verifier",
            ownerid: b"owner".to_vec(),
            flags: EXCHGID4_FLAG_USE_NON_PNFS,
        }),
        OpArgs::CreateSession(CreateSessionArgs {
            clientid: 9,
            sequence: 1,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore: attrs.clone(),
            back: ChannelAttrs {
                rdma_ird: None,
                ..attrs
            },
            cb_program: CB_PROGRAM,
        }),
        OpArgs::DestroySession(sid(2)),
        OpArgs::DestroyClientId(9),
        OpArgs::ReclaimComplete(false),
        OpArgs::Open(OpenArgs {
            share_access: OPEN4_SHARE_ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_READ_DELEG,
            share_deny: 0,
            clientid: 9,
            owner: b"o".to_vec(),
            name: b"f".to_vec(),
        }),
        OpArgs::Close(st(3)),
        OpArgs::DelegReturn(st(4)),
    ]
}

#[test]
fn compound_args_round_trip() {
    let all = every_op();
    for chunk in all.chunks(5) {
        let c = Compound::v41(chunk.to_vec());
        let enc = c.encode();
        assert_eq!(enc.len() % 4, 0);
        assert_eq!(Compound::decode(&enc).unwrap(), c);
    }
}

#[test]
fn compound_results_round_trip() {
    let res = vec![
        OpRes::ok(
            op::SEQUENCE,
            ResOk::Sequence(SequenceResOk {
                sessionid: sid(1),
                sequenceid: 1,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 0,
                status_flags: SEQ4_STATUS_CB_PATH_DOWN,
            }),
        ),
        OpRes::ok(op::PUTROOTFH, ResOk::Void),
        OpRes::ok(op::GETFH, ResOk::GetFh(Fh(vec![7; 128]))),
        OpRes::ok(op::GETATTR, ResOk::GetAttr(Fattr::new(1, 42, 77))),
        OpRes::ok(
            op::EXCHANGE_ID,
            ResOk::ExchangeId(ExchangeIdResOk {
                clientid: 5,
                sequenceid: 1,
                flags: EXCHGID4_FLAG_CONFIRMED_R,
                minor_id: 3,
                major_id: b"major".to_vec(),
                scope: b"scope".to_vec(),
                impl_name: Some(b"fake".to_vec()),
            }),
        ),
        OpRes::ok(
            op::CREATE_SESSION,
            ResOk::CreateSession(CreateSessionResOk {
                sessionid: sid(4),
                sequence: 1,
                flags: 2,
                fore: ChannelAttrs::default(),
                back: ChannelAttrs::default(),
            }),
        ),
        OpRes::ok(
            op::OPEN,
            ResOk::Open(OpenResOk {
                stateid: st(1),
                rflags: 4,
                delegation: Delegation::Granted {
                    kind: deleg::READ,
                    stateid: st(2),
                    recall: false,
                },
            }),
        ),
        OpRes::ok(op::CLOSE, ResOk::Close(st(5))),
    ];
    let c = CompoundRes {
        status: 0,
        tag: b"t".to_vec(),
        res: res.clone(),
    };
    assert_eq!(CompoundRes::decode(&c.encode()).unwrap(), c);
    // The other delegation arms.
    for d in [
        Delegation::None,
        Delegation::NoneExt {
            why: WND4_CONTENTION,
        },
        Delegation::NoneExt { why: 0 },
        Delegation::Granted {
            kind: deleg::WRITE,
            stateid: st(9),
            recall: true,
        },
    ] {
        let c = CompoundRes {
            status: 0,
            tag: vec![],
            res: vec![OpRes::ok(
                op::OPEN,
                ResOk::Open(OpenResOk {
                    stateid: st(1),
                    rflags: 0,
                    delegation: d,
                }),
            )],
        };
        assert_eq!(CompoundRes::decode(&c.encode()).unwrap(), c);
    }
    // A failure carries no resok.
    let f = CompoundRes {
        status: status::NFS4ERR_GRACE,
        tag: vec![],
        res: vec![OpRes::fail(op::OPEN, status::NFS4ERR_GRACE)],
    };
    assert_eq!(CompoundRes::decode(&f.encode()).unwrap(), f);
}

#[test]
fn cb_compound_round_trips() {
    let c = CbCompound {
        tag: b"cb".to_vec(),
        minorversion: 1,
        callback_ident: 0,
        ops: vec![
            CbOp::Sequence(CbSequenceArgs {
                sessionid: sid(3),
                sequenceid: 1,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
                referring: vec![ReferringCallList {
                    sessionid: sid(3),
                    calls: vec![(4, 0), (5, 0)],
                }],
            }),
            CbOp::Recall(CbRecallArgs {
                stateid: st(7),
                truncate: false,
                fh: Fh(vec![9; 20]),
            }),
        ],
    };
    assert_eq!(CbCompound::decode(&c.encode()).unwrap(), c);
    let r = CbCompoundRes {
        status: 0,
        tag: b"cb".to_vec(),
        res: vec![
            CbOpRes {
                op: OP_CB_SEQUENCE,
                status: 0,
                sequence: Some(CbSequenceResOk {
                    sessionid: sid(3),
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                }),
            },
            CbOpRes::fail(OP_CB_RECALL, 0),
        ],
    };
    assert_eq!(CbCompoundRes::decode(&r.encode()).unwrap(), r);
}

#[test]
fn cb_header_bounds_are_enforced() {
    let mut e = Enc::new();
    e.opaque(&[b'x'; 65]);
    e.u32(1);
    e.u32(0);
    e.u32(0);
    let v = e.into_vec();
    let err = CbHeader::get(&mut Reader::new(&v)).unwrap_err();
    assert!(err.to_string().contains("MAX_TAG"), "{err}");
    // A tag of exactly 64 octets decodes.
    let mut e = Enc::new();
    e.opaque(&[b'x'; 64]);
    e.u32(1);
    e.u32(0);
    e.u32(16);
    let mut v = e.into_vec();
    v.extend(vec![0u8; 16 * 4]);
    assert_eq!(CbHeader::get(&mut Reader::new(&v)).unwrap().count, 16);
    // 17 operations do not.
    let mut e = Enc::new();
    e.opaque(b"");
    e.u32(1);
    e.u32(0);
    e.u32(17);
    let mut v = e.into_vec();
    v.extend(vec![0u8; 17 * 4]);
    let err = CbHeader::get(&mut Reader::new(&v)).unwrap_err();
    assert!(err.to_string().contains("MAX_CB_OPS"), "{err}");
    // An owner id or a handle over its XDR bound.
    let mut e = Enc::new();
    e.u32(op::PUTFH);
    e.opaque(&[0; 129]);
    assert!(OpArgs::get(&mut Reader::new(&e.into_vec())).is_err());
    let mut e = Enc::new();
    e.u32(op::LOOKUP);
    e.opaque(&[b'a'; 1025]);
    assert!(OpArgs::get(&mut Reader::new(&e.into_vec())).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any octets: every decoder returns (never panics, never allocates
    /// beyond its bounds).
    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = CompoundRes::decode(&bytes);
        let _ = Compound::decode(&bytes);
        let _ = CbCompound::decode(&bytes);
        let _ = CbCompoundRes::decode(&bytes);
    }

    /// Every truncation of a valid encoding fails to decode (and a whole
    /// one decodes).
    #[test]
    fn truncations_fail(cut in 0usize..400) {
        let c = Compound::v41(every_op());
        let enc = c.encode();
        let cut = cut.min(enc.len());
        prop_assert_eq!(Compound::decode(&enc[..cut]).is_ok(), cut == enc.len());
    }
}
