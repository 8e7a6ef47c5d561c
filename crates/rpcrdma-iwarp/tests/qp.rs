//! Sans-IO tests of the queue pair: two `QueuePair`s joined by in-memory
//! byte pipes, and single QPs fed hand-built FPDUs that break one rule
//! each (every malformed case must produce the right Terminate, copy the
//! offending header, and touch no memory).

use rpcrdma_iwarp::ddp::DdpHeader;
use rpcrdma_iwarp::mpa::fpdu::{FpduSender, FramingConfig};
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_iwarp::rdmap::{self, Opcode, ReadRequest, TerminateMessage};
use rpcrdma_iwarp::TerminateCode;
use rpcrdma_proto::provider::{
    Access, Blame, Caps, Completion, DisconnectReason, MemoryRegion, Opcode as CqOp, RecvWr,
    RemoteAddr, SendOp, SendWr, Stag, Status,
};

const CAPS: Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn params(crc: bool, markers: bool) -> StreamParams {
    StreamParams {
        crc,
        send_markers: markers,
        recv_markers: markers,
        ..StreamParams::DEFAULT
    }
}

fn pair(p: StreamParams) -> (QueuePair, QueuePair) {
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.establish(p);
    b.establish(p);
    (a, b)
}

/// Moves bytes both ways until quiet, feeding them in pieces of `chunk`
/// octets (1 = byte at a time); then confirms transmitted WRs.
fn pump_chunked(a: &mut QueuePair, b: &mut QueuePair, chunk: usize) {
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..10_000 {
        let n = a.poll_transmit(&mut buf);
        for c in buf[..n].chunks(chunk) {
            b.handle_input(c);
        }
        let m = b.poll_transmit(&mut buf);
        for c in buf[..m].chunks(chunk) {
            a.handle_input(c);
        }
        if n == 0 && m == 0 {
            break;
        }
    }
    a.confirm_transmitted();
    b.confirm_transmitted();
}

fn pump(a: &mut QueuePair, b: &mut QueuePair) {
    pump_chunked(a, b, usize::MAX);
}

fn cq(q: &mut QueuePair) -> Vec<Completion> {
    let mut v = Vec::new();
    q.poll_completions(&mut v);
    v
}

fn reg(q: &mut QueuePair, data: Vec<u8>, access: Access) -> MemoryRegion {
    q.register(data.into_boxed_slice(), access).unwrap()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn send_write_read_roundtrip_all_framings() {
    for (crc, markers, chunk) in [
        (false, false, usize::MAX),
        (true, false, 7),
        (true, true, 1),
        (false, true, 513),
    ] {
        let mut p = params(crc, markers);
        p.mulpdu = 300; // force multi-segment messages
        let (mut a, mut b) = pair(p);
        let data = pattern(5000, 1);
        let src = reg(&mut a, data.clone(), Access::NONE);
        let rbuf = reg(&mut b, vec![0; 6000], Access::LOCAL_WRITE);
        let target = reg(&mut b, vec![0; 5000], RW);
        b.post_recv(RecvWr {
            wr_id: 7,
            sge: rbuf.sge(0, 6000),
        })
        .unwrap();
        a.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote: target.remote(0),
            },
            sges: vec![src.sge(0, 2500), src.sge(2500, 2500)].into(),
        })
        .unwrap();
        a.post_send(SendWr {
            wr_id: 2,
            op: SendOp::Send { solicited: true },
            sges: vec![src.sge(0, 4999)].into(),
        })
        .unwrap();
        pump_chunked(&mut a, &mut b, chunk);
        let ca = cq(&mut a);
        let cb = cq(&mut b);
        assert_eq!(
            ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            [(1, Status::Success), (2, Status::Success)],
            "crc={crc} markers={markers}"
        );
        assert_eq!(cb.len(), 1);
        assert_eq!((cb[0].wr_id, cb[0].byte_len), (7, 4999));
        assert_eq!(b.region(&target).unwrap(), &data[..]);
        assert_eq!(&b.region(&rbuf).unwrap()[..4999], &data[..4999]);
        // Read back from b into a.
        let sink = reg(&mut a, vec![0; 3000], RW);
        a.post_send(SendWr {
            wr_id: 3,
            op: SendOp::Read {
                remote: RemoteAddr {
                    stag: target.stag(),
                    offset: 1000,
                },
            },
            sges: vec![sink.sge(0, 3000)].into(),
        })
        .unwrap();
        // Target is written remotely only; it must be readable remotely.
        pump_chunked(&mut a, &mut b, chunk);
        let ca = cq(&mut a);
        // target lacks REMOTE_READ: the read fails with a remote access error.
        assert_eq!(ca[0].status, Status::RemoteAccess, "{ca:?}");
        assert_eq!(
            b.terminate_sent().map(|t| t.code),
            Some(TerminateCode::RDMAP_ACCESS_RIGHTS)
        );
        // The Terminate copied the Read Request header (R bit).
        assert!(b.terminate_sent().unwrap().rdmap.is_some());
    }
}

#[test]
fn rdma_read_in_pieces_and_ord_limit() {
    let mut p = params(true, false);
    p.mulpdu = 1000;
    p.ord = 2;
    p.ird = 2;
    let (mut a, mut b) = pair(p);
    let data = pattern(20_000, 9);
    let src = reg(
        &mut b,
        data.clone(),
        Access::REMOTE_READ | Access::LOCAL_WRITE,
    );
    let sink = reg(&mut a, vec![0; 20_000], RW);
    for i in 0..4u64 {
        a.post_send(SendWr {
            wr_id: 10 + i,
            op: SendOp::Read {
                remote: src.remote(i * 5000),
            },
            sges: vec![sink.sge(i * 5000, 5000)].into(),
        })
        .unwrap();
    }
    pump(&mut a, &mut b);
    let ca = cq(&mut a);
    assert_eq!(
        ca.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        (0..4u64)
            .map(|i| (10 + i, CqOp::Read, Status::Success, 5000))
            .collect::<Vec<_>>()
    );
    assert_eq!(a.region(&sink).unwrap(), &data[..]);
    // 5000 octets in segments of 1000 - 14 = 986: 6 Read Response segments each.
    assert_eq!(b.stats().tx_fpdus[2], 4 * 6);
}

#[test]
fn send_with_invalidate_revokes_remote_access() {
    let (mut a, mut b) = pair(params(false, false));
    let chunk = reg(&mut b, vec![0; 64], RW);
    let rbuf = reg(&mut b, vec![0; 64], Access::LOCAL_WRITE);
    let src = reg(&mut a, vec![5; 8], Access::NONE);
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rbuf.sge(0, 64),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::SendWithInvalidate {
            invalidate: chunk.stag(),
            solicited: false,
        },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    let cb = cq(&mut b);
    assert_eq!(
        cb[0].opcode,
        CqOp::RecvWithInvalidate { stag: chunk.stag() }
    );
    a.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote: chunk.remote(0),
        },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    let ca = cq(&mut a);
    assert_eq!(ca.last().map(|c| c.status), Some(Status::RemoteAccess));
    assert_eq!(
        b.terminate_sent().map(|t| t.code),
        Some(TerminateCode::DDP_TAGGED_INVALID_STAG)
    );
    assert!(b.region(&chunk).unwrap().iter().all(|&x| x == 0));
}

#[test]
fn send_with_invalidate_of_foreign_stag_is_refused() {
    let (mut a, mut b) = pair(params(false, false));
    let rbuf = reg(&mut b, vec![0xee; 64], Access::LOCAL_WRITE);
    let src = reg(&mut a, vec![5; 8], Access::NONE);
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rbuf.sge(0, 64),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::SendWithInvalidate {
            invalidate: Stag(0x00ab_cd01),
            solicited: true,
        },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    let cb = cq(&mut b);
    assert_eq!(cb[0].status, Status::LocalProtection);
    assert_eq!(
        b.terminate_sent().map(|t| t.code),
        Some(TerminateCode::RDMAP_OPERATION_CANNOT_INVALIDATE)
    );
    let ca = cq(&mut a);
    assert_eq!(ca[0].status, Status::RemoteOperation);
    assert!(b.region(&rbuf).unwrap().iter().all(|&x| x == 0xee));
}

#[test]
fn receiver_not_ready_is_fatal_both_ways() {
    let (mut a, mut b) = pair(params(false, false));
    let src = reg(&mut a, vec![1; 8], Access::NONE);
    let ra = reg(&mut a, vec![0; 8], Access::LOCAL_WRITE);
    a.post_recv(RecvWr {
        wr_id: 9,
        sge: ra.sge(0, 8),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    let t = *b.terminate_sent().expect("b sent a Terminate");
    assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    // The offending untagged header (QN 0, MSN 1) is copied.
    match t.ddp.map(|d| d.header) {
        Some(DdpHeader::Untagged(u)) => assert_eq!((u.qn, u.msn), (0, 1)),
        other => panic!("copied header {other:?}"),
    }
    assert_eq!(
        b.close_reason(),
        Some(&DisconnectReason::Error {
            status: Status::ReceiverNotReady,
            blame: Blame::Local
        })
    );
    assert_eq!(
        a.close_reason(),
        Some(&DisconnectReason::Error {
            status: Status::ReceiverNotReady,
            blame: Blame::Remote
        })
    );
    let ca = cq(&mut a);
    let by_id = |id| ca.iter().find(|c| c.wr_id == id).map(|c| c.status);
    assert_eq!(by_id(1), Some(Status::ReceiverNotReady));
    assert_eq!(by_id(9), Some(Status::Flushed));
    assert!(a.tx_finished() && b.tx_finished());
}

/// A lent receive buffer (`register_recv`, memory only once a Send
/// arrives) receives like an owned one, and a Send beyond the receives
/// posted (a peer exceeding its credits) still gets the Terminate
/// DDP_UNTAGGED_NO_BUFFER, with nothing placed.
#[test]
fn lent_receive_buffers_receive_and_an_extra_send_is_still_refused() {
    let (mut a, mut b) = pair(params(false, false));
    let src = reg(&mut a, vec![7; 8], Access::NONE);
    let rb = b.register_recv(16).unwrap();
    b.post_recv(RecvWr {
        wr_id: 9,
        sge: rb.sge(0, 16),
    })
    .unwrap();
    for wr_id in [1, 2] {
        a.post_send(SendWr {
            wr_id,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, 8)].into(),
        })
        .unwrap();
    }
    pump(&mut a, &mut b);
    let cb = cq(&mut b);
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].byte_len),
        (9, Status::Success, 8)
    );
    assert_eq!(b.region(&rb).unwrap(), &[7; 8]);
    let t = *b.terminate_sent().expect("b sent a Terminate");
    assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    match t.ddp.map(|d| d.header) {
        Some(DdpHeader::Untagged(u)) => assert_eq!((u.qn, u.msn), (0, 2)),
        other => panic!("copied header {other:?}"),
    }
    let ca = cq(&mut a);
    let by_id = |id| ca.iter().find(|c| c.wr_id == id).map(|c| c.status);
    assert_eq!(by_id(2), Some(Status::ReceiverNotReady));
    assert!(b.deregister(&rb).unwrap().is_empty());
}

#[test]
fn receive_too_small_terminates_with_too_long() {
    let (mut a, mut b) = pair(params(true, false));
    let src = reg(&mut a, vec![1; 16], Access::NONE);
    let rb = reg(&mut b, vec![0; 16], Access::LOCAL_WRITE);
    b.post_recv(RecvWr {
        wr_id: 5,
        sge: rb.sge(0, 4),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(0, 16)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    let cb = cq(&mut b);
    assert_eq!((cb[0].wr_id, cb[0].status), (5, Status::LocalLength));
    assert_eq!(
        b.terminate_sent().map(|t| t.code),
        Some(TerminateCode::DDP_UNTAGGED_TOO_LONG)
    );
    assert!(b.region(&rb).unwrap().iter().all(|&x| x == 0));
    assert_eq!(cq(&mut a)[0].status, Status::RemoteOperation);
}

#[test]
fn local_invalidate_then_write_fails() {
    let (mut a, mut b) = pair(params(false, false));
    let target = reg(&mut b, vec![3; 32], RW);
    b.post_send(SendWr {
        wr_id: 1,
        op: SendOp::LocalInvalidate {
            stag: target.stag(),
        },
        sges: vec![].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(cq(&mut b)[0].opcode, CqOp::LocalInvalidate);
    let src = reg(&mut a, vec![9; 32], Access::NONE);
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![src.sge(0, 32)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(cq(&mut a)[0].status, Status::RemoteAccess);
    assert!(b.region(&target).unwrap().iter().all(|&x| x == 3));
}

#[test]
fn stag_key_rotates_on_reregistration() {
    let mut q = QueuePair::new(CAPS, 0);
    let mr = reg(&mut q, vec![0; 8], RW);
    let buf = q.deregister(&mr).unwrap();
    let mr2 = q.register(buf.into_owned(), RW).unwrap();
    assert_eq!(mr.stag().index(), mr2.stag().index());
    assert_ne!(mr.stag().key(), mr2.stag().key());
    assert_eq!(mr2.stag().key(), mr.stag().key().wrapping_add(1));
}

// ---------------------------------------------------------------------
// Hand-built hostile input against one established QP.
// ---------------------------------------------------------------------

struct Victim {
    q: QueuePair,
    rw: MemoryRegion,
    ro: MemoryRegion,
    rbuf: MemoryRegion,
    tx: FpduSender,
}

fn victim(crc: bool, ird: u8) -> Victim {
    let mut q = QueuePair::new(CAPS, 0x40);
    q.establish(StreamParams {
        crc,
        ird,
        ..StreamParams::DEFAULT
    });
    let rw = reg(&mut q, vec![0x11; 64], RW);
    let ro = reg(
        &mut q,
        vec![0x22; 64],
        Access::LOCAL_WRITE | Access::REMOTE_READ,
    );
    let rbuf = reg(&mut q, vec![0x33; 32], Access::LOCAL_WRITE);
    q.post_recv(RecvWr {
        wr_id: 77,
        sge: rbuf.sge(0, 32),
    })
    .unwrap();
    Victim {
        q,
        rw,
        ro,
        rbuf,
        tx: FpduSender::new(FramingConfig {
            crc,
            markers: false,
        }),
    }
}

impl Victim {
    fn feed_ulpdu(&mut self, ulpdu: &[u8]) {
        let f = self.tx.fpdu_to_vec(&[ulpdu]).unwrap();
        self.q.handle_input(&f);
    }
    fn untouched(&self) -> bool {
        self.q.region(&self.rw).unwrap().iter().all(|&x| x == 0x11)
            && self.q.region(&self.ro).unwrap().iter().all(|&x| x == 0x22)
    }
    fn terminate(&mut self) -> TerminateMessage {
        // The Terminate is also on the wire: decode it from there.
        let mut out = vec![0u8; 4096];
        let n = self.q.poll_transmit(&mut out);
        let wire = &out[..n];
        assert!(n > 2 + 18, "no Terminate on the wire");
        let ul = usize::from(u16::from_be_bytes([wire[0], wire[1]]));
        let seg = rdmap::Segment::parse(&wire[2..2 + ul]).unwrap();
        assert_eq!(seg.control.opcode, Opcode::TERMINATE);
        let t = seg.terminate(&wire[2..2 + ul]).unwrap();
        assert_eq!(Some(&t), self.q.terminate_sent());
        assert!(self.q.is_closed());
        t
    }
}

fn ulpdu(hdr: DdpHeader, payload: &[u8]) -> Vec<u8> {
    let mut v = hdr.to_vec();
    v.extend_from_slice(payload);
    v
}

/// A valid 8-octet Read Request (MSN 1) from `src_stag`.
fn read_request_from(src_stag: u32) -> [u8; 46] {
    rdmap::encode_read_request(
        1,
        &ReadRequest {
            sink_stag: 5,
            sink_to: 0,
            size: 8,
            src_stag,
            src_to: 0,
        },
    )
}

/// Every malformed or unauthorised segment → the Terminate of the table in
/// the crate docs, with the offending DDP header copied, and no memory
/// touched.
#[test]
fn malformed_segments_get_the_right_terminate() {
    type Build = Box<dyn Fn(&Victim) -> Vec<u8>>;
    let cases: Vec<(&str, Build, TerminateCode)> = vec![
        (
            "write to unknown STag",
            Box::new(|_| ulpdu(rdmap::write_header(0x00ff_ff01, 0, true), &[1; 8])),
            TerminateCode::DDP_TAGGED_INVALID_STAG,
        ),
        (
            "write with stale key",
            Box::new(|v| ulpdu(rdmap::write_header(v.rw.stag().0 ^ 1, 0, true), &[1; 8])),
            TerminateCode::DDP_TAGGED_INVALID_STAG,
        ),
        (
            "write past the end",
            Box::new(|v| ulpdu(rdmap::write_header(v.rw.stag().0, 60, true), &[1; 8])),
            TerminateCode::DDP_TAGGED_BASE_BOUNDS,
        ),
        (
            "write TO wrap",
            Box::new(|v| {
                ulpdu(
                    rdmap::write_header(v.rw.stag().0, u64::MAX - 3, true),
                    &[1; 8],
                )
            }),
            TerminateCode::DDP_TAGGED_TO_WRAP,
        ),
        (
            "write without REMOTE_WRITE",
            Box::new(|v| ulpdu(rdmap::write_header(v.ro.stag().0, 0, true), &[1; 8])),
            TerminateCode::RDMAP_ACCESS_RIGHTS,
        ),
        (
            "tagged DDP version 0",
            Box::new(|v| {
                let mut u = ulpdu(rdmap::write_header(v.rw.stag().0, 0, true), &[1; 8]);
                u[0] &= !0x03;
                u
            }),
            TerminateCode::DDP_TAGGED_INVALID_VERSION,
        ),
        (
            "untagged DDP version 2",
            Box::new(|_| {
                let mut u = ulpdu(
                    rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
                    &[1; 8],
                );
                u[0] = (u[0] & !0x03) | 0x02;
                u
            }),
            TerminateCode::DDP_UNTAGGED_INVALID_VERSION,
        ),
        (
            "QN 3",
            Box::new(|_| {
                let mut u = ulpdu(
                    rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
                    &[1; 8],
                );
                u[9] = 3;
                u
            }),
            TerminateCode::DDP_UNTAGGED_INVALID_QN,
        ),
        (
            "RDMAP version 0",
            Box::new(|v| {
                let mut u = ulpdu(rdmap::write_header(v.rw.stag().0, 0, true), &[1; 8]);
                u[1] &= 0x3f;
                u
            }),
            TerminateCode::RDMAP_INVALID_VERSION,
        ),
        (
            "Send opcode in a tagged segment",
            Box::new(|v| {
                let mut u = ulpdu(rdmap::write_header(v.rw.stag().0, 0, true), &[1; 8]);
                u[1] = (u[1] & 0xf0) | 3;
                u
            }),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "unassigned opcode 9",
            Box::new(|_| {
                let mut u = ulpdu(
                    rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
                    &[1; 8],
                );
                u[1] = (u[1] & 0xf0) | 9;
                u
            }),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Send MSN behind (0)",
            Box::new(|_| {
                ulpdu(
                    rdmap::send_header(Opcode::SEND, 0, 0, true, 0).unwrap(),
                    &[1; 8],
                )
            }),
            TerminateCode::DDP_UNTAGGED_MSN_RANGE,
        ),
        (
            "Send MSN ahead with no buffer",
            Box::new(|_| {
                ulpdu(
                    rdmap::send_header(Opcode::SEND, 2, 0, true, 0).unwrap(),
                    &[1; 8],
                )
            }),
            TerminateCode::DDP_UNTAGGED_NO_BUFFER,
        ),
        (
            "Send MO past the buffer",
            Box::new(|_| {
                ulpdu(
                    rdmap::send_header(Opcode::SEND, 1, 40, true, 0).unwrap(),
                    &[1; 8],
                )
            }),
            TerminateCode::DDP_UNTAGGED_INVALID_MO,
        ),
        (
            "Send too long",
            Box::new(|_| {
                ulpdu(
                    rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
                    &[1; 33],
                )
            }),
            TerminateCode::DDP_UNTAGGED_TOO_LONG,
        ),
        (
            "Read Response with no Read outstanding",
            Box::new(|v| ulpdu(rdmap::read_response_header(v.rw.stag().0, 0, true), &[1; 8])),
            TerminateCode::RDMAP_UNEXPECTED_OPCODE,
        ),
        (
            "Read Request from unknown source STag",
            Box::new(|_| {
                rdmap::encode_read_request(
                    1,
                    &ReadRequest {
                        sink_stag: 5,
                        sink_to: 0,
                        size: 8,
                        src_stag: 0x00ee_ee01,
                        src_to: 0,
                    },
                )
                .to_vec()
            }),
            TerminateCode::RDMAP_INVALID_STAG,
        ),
        (
            "Read Request past the source end",
            Box::new(|v| {
                rdmap::encode_read_request(
                    1,
                    &ReadRequest {
                        sink_stag: 5,
                        sink_to: 0,
                        size: 8,
                        src_stag: v.ro.stag().0,
                        src_to: 60,
                    },
                )
                .to_vec()
            }),
            TerminateCode::RDMAP_BASE_BOUNDS,
        ),
        (
            "Read Request without REMOTE_READ",
            Box::new(|v| {
                rdmap::encode_read_request(
                    1,
                    &ReadRequest {
                        sink_stag: 5,
                        sink_to: 0,
                        size: 8,
                        src_stag: v.rw.stag().0,
                        src_to: 0,
                    },
                )
                .to_vec()
            }),
            TerminateCode::RDMAP_ACCESS_RIGHTS,
        ),
        (
            "Read Request with a wrong length",
            Box::new(|v| {
                let mut u = rdmap::encode_read_request(
                    1,
                    &ReadRequest {
                        sink_stag: 5,
                        sink_to: 0,
                        size: 8,
                        src_stag: v.ro.stag().0,
                        src_to: 0,
                    },
                )
                .to_vec();
                u.push(0);
                u
            }),
            TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
        ),
        (
            "Read Request not the last segment",
            Box::new(|v| {
                let mut u = read_request_from(v.ro.stag().0).to_vec();
                u[0] &= !0x40;
                u
            }),
            TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
        ),
        (
            "Read Request at MO 28",
            Box::new(|v| {
                let mut u = read_request_from(v.ro.stag().0).to_vec();
                u[17] = 28;
                u
            }),
            TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
        ),
        (
            "Terminate at MO 4",
            Box::new(|_| {
                let t = TerminateMessage::new(TerminateCode::RDMAP_CATASTROPHIC_STREAM);
                let mut u = rdmap::encode_terminate(1, &t);
                u[17] = 4;
                u
            }),
            TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
        ),
        (
            "Terminate not the last segment",
            Box::new(|_| {
                let t = TerminateMessage::new(TerminateCode::RDMAP_CATASTROPHIC_STREAM);
                let mut u = rdmap::encode_terminate(1, &t);
                u[0] &= !0x40;
                u
            }),
            TerminateCode::RDMAP_OPERATION_UNSPECIFIED,
        ),
        (
            "ULPDU shorter than a DDP header",
            Box::new(|_| vec![0x41, 0x43, 0, 0]),
            TerminateCode::MPA_MARKER,
        ),
    ];
    for (name, build, want) in &cases {
        for crc in [false, true] {
            let mut v = victim(crc, 4);
            let u = build(&v);
            v.feed_ulpdu(&u);
            let t = v.terminate();
            assert_eq!(t.code, *want, "{name} (crc {crc})");
            if u.len() >= 14 {
                let d = t
                    .ddp
                    .unwrap_or_else(|| panic!("{name}: no DDP header copied"));
                assert_eq!(usize::from(d.segment_length), u.len(), "{name}");
                assert_eq!(
                    d.header.to_vec(),
                    u[..d.header.encoded_len()],
                    "{name}: copied header"
                );
            }
            assert!(v.untouched(), "{name}: memory touched");
            // The posted receive was flushed (or failed), never filled.
            let mut c = Vec::new();
            v.q.poll_completions(&mut c);
            assert!(c.iter().all(|c| !c.status.is_ok()), "{name}: {c:?}");
            assert!(v.q.region(&v.rbuf).unwrap().iter().all(|&x| x == 0x33));
        }
    }
}

#[test]
fn ird_overflow_terminates() {
    let mut v = victim(false, 1);
    let rr = |msn| {
        rdmap::encode_read_request(
            msn,
            &ReadRequest {
                sink_stag: 5,
                sink_to: 0,
                size: 8,
                src_stag: v.ro.stag().0,
                src_to: 0,
            },
        )
    };
    let (r1, r2) = (rr(1), rr(2));
    // Both arrive before the first Response could be sent.
    v.feed_ulpdu(&r1);
    v.feed_ulpdu(&r2);
    let mut out = vec![0u8; 4096];
    let n = v.q.poll_transmit(&mut out);
    assert!(n > 0);
    let t = *v.q.terminate_sent().expect("IRD overflow must terminate");
    assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_NO_BUFFER);
    match t.ddp.map(|d| d.header) {
        Some(DdpHeader::Untagged(u)) => assert_eq!((u.qn, u.msn), (1, 2)),
        other => panic!("{other:?}"),
    }
    // A DDP-layer error: the DDP header is copied, the RDMA header is not.
    //= rfc5040#section-4.8
    //# DDP      | See DDP Spec| Yes        | No         | Any
    assert!(t.rdmap.is_none(), "no RDMA header for a DDP-layer error");
}

#[test]
fn ird_is_released_after_the_response() {
    let mut v = victim(false, 1);
    for msn in 1..=3 {
        let rr = rdmap::encode_read_request(
            msn,
            &ReadRequest {
                sink_stag: 5,
                sink_to: 0,
                size: 8,
                src_stag: v.ro.stag().0,
                src_to: 0,
            },
        );
        v.feed_ulpdu(&rr);
        let mut out = vec![0u8; 4096];
        let n = v.q.poll_transmit(&mut out);
        // One Read Response: 2 + 14 + 8 + 4 (no pad).
        assert_eq!(n, 28, "msn {msn}");
        assert_eq!(&out[16..24], &[0x22; 8]);
    }
    assert!(v.q.terminate_sent().is_none());
}

/// One segment of a Send on queue 0: MSN, MO, L, payload.
fn send_seg(msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    ulpdu(
        rdmap::send_header(Opcode::SEND, msn, mo, last, 0).unwrap(),
        payload,
    )
}

/// An untagged message is Delivered only once every segment of it has been
/// Placed: with in-order placement over TCP, each segment must start where
/// the message's placed data ends, and none may follow the last one.
/// Otherwise DDP / 2 / 0x04 (invalid MO), on both receive paths (whole
/// FPDU in one slice, and octet by octet), and nothing completes — in
/// particular no message made of what a recycled buffer held before.
//= rfc5041#section-5.4
//# At the Data Sink, DDP MUST Deliver a DDP Message if and only if all
//# of the following are true:
//#
//#    * the last DDP Segment of the DDP Message had its Last flag set,
//#
//#    * all of the DDP Segments of the DDP Message have been Placed,
#[test]
fn untagged_segments_must_continue_their_message() {
    // (what, the segments, which one breaks the rule)
    let cases: [(&str, Vec<Vec<u8>>, usize); 6] = [
        (
            "zero-length last segment alone at MO 8",
            vec![send_seg(1, 8, true, &[])],
            0,
        ),
        (
            "last segment alone at MO 8",
            vec![send_seg(1, 8, true, &[5; 4])],
            0,
        ),
        (
            "first segment not at MO 0",
            vec![
                send_seg(1, 4, false, &[5; 4]),
                send_seg(1, 8, true, &[5; 4]),
            ],
            0,
        ),
        (
            "a gap",
            vec![
                send_seg(1, 0, false, &[5; 8]),
                send_seg(1, 16, true, &[5; 4]),
            ],
            1,
        ),
        (
            "an overlap",
            vec![
                send_seg(1, 0, false, &[5; 8]),
                send_seg(1, 4, true, &[5; 4]),
            ],
            1,
        ),
        (
            // MSN 2 waits (placed, not delivered) behind MSN 1.
            "a segment after the last one",
            vec![send_seg(2, 0, true, &[5; 4]), send_seg(2, 4, true, &[5; 4])],
            1,
        ),
    ];
    for (name, segs, bad) in &cases {
        for crc in [false, true] {
            for octetwise in [false, true] {
                let mut v = victim(crc, 4);
                let rb2 = reg(&mut v.q, vec![0x44; 32], Access::LOCAL_WRITE);
                v.q.post_recv(RecvWr {
                    wr_id: 78,
                    sge: rb2.sge(0, 32),
                })
                .unwrap();
                for s in segs {
                    let f = v.tx.fpdu_to_vec(&[s]).unwrap();
                    if octetwise {
                        for c in f.chunks(1) {
                            v.q.handle_input(c);
                        }
                    } else {
                        v.q.handle_input(&f);
                    }
                }
                let how = format!("{name} (crc {crc}, octetwise {octetwise})");
                let t = v.terminate();
                assert_eq!(t.code, TerminateCode::DDP_UNTAGGED_INVALID_MO, "{how}");
                let bad = &segs[*bad];
                let d = t.ddp.unwrap_or_else(|| panic!("{how}: no DDP header"));
                assert_eq!(d.header.to_vec(), bad[..18], "{how}: copied header");
                assert_eq!(
                    v.q.close_reason(),
                    Some(&DisconnectReason::Error {
                        status: Status::RemoteInvalidRequest,
                        blame: Blame::Remote
                    }),
                    "{how}"
                );
                let mut c = Vec::new();
                v.q.poll_completions(&mut c);
                assert_eq!(c.len(), 2, "{how}: {c:?}");
                assert!(
                    c.iter().all(|c| c.status == Status::Flushed),
                    "{how}: {c:?}"
                );
            }
        }
    }
}

/// A Send for a later receive that arrives whole before the one for the
/// head receive: the receive behind the head completes only with the head,
/// in MSN order, whether the head's Send takes the whole-FPDU fast path
/// (one slice) or the octet-wise path — the fast path completes the head
/// and then every finished receive behind it.
//= rfc5040#section-5.5
//# RDMA Operations MUST be Completed at the Local Peer in the order
//# that they were submitted by the ULP.
#[test]
fn a_receive_finished_behind_the_head_completes_after_it() {
    for crc in [false, true] {
        for octetwise in [false, true] {
            let mut q = QueuePair::new(CAPS, 0x40);
            q.establish(params(crc, false));
            let rb = reg(&mut q, vec![0; 256], Access::LOCAL_WRITE);
            for i in 0..2u64 {
                q.post_recv(RecvWr {
                    wr_id: 10 + i,
                    sge: rb.sge(64 * i, 64),
                })
                .unwrap();
            }
            let mut tx = FpduSender::new(FramingConfig {
                crc,
                markers: false,
            });
            let [first, second] = [(2u32, 7usize), (1, 5)].map(|(msn, len)| {
                let u = send_seg(msn, 0, true, &pattern(len, msn));
                tx.fpdu_to_vec(&[&u]).unwrap()
            });
            q.handle_input(&first);
            assert!(cq(&mut q).is_empty(), "MSN 2 completed before MSN 1");
            if octetwise {
                for c in second.chunks(1) {
                    q.handle_input(c);
                }
            } else {
                q.handle_input(&second);
            }
            let got: Vec<(u64, u32)> = cq(&mut q).iter().map(|c| (c.wr_id, c.byte_len)).collect();
            assert_eq!(got, [(10, 5), (11, 7)], "crc {crc}, octetwise {octetwise}");
            let mem = q.region(&rb).unwrap();
            assert_eq!(&mem[..5], &pattern(5, 1)[..]);
            assert_eq!(&mem[64..71], &pattern(7, 2)[..]);
            assert!(q.terminate_sent().is_none());
        }
    }
}

/// A queue pair with one 1000-octet RDMA Read outstanding (its Read
/// Request already on the wire) into `sink` (1000 octets of 0x55, TO 0).
fn reading(crc: bool) -> (QueuePair, MemoryRegion, FpduSender) {
    let mut q = QueuePair::new(CAPS, 0x40);
    q.establish(StreamParams {
        crc,
        ..StreamParams::DEFAULT
    });
    let sink = reg(&mut q, vec![0x55; 1000], RW);
    q.post_send(SendWr {
        wr_id: 9,
        op: SendOp::Read {
            remote: RemoteAddr {
                stag: Stag(0x0012_3401),
                offset: 0,
            },
        },
        sges: vec![sink.sge(0, 1000)].into(),
    })
    .unwrap();
    let mut out = vec![0u8; 4096];
    assert!(q.poll_transmit(&mut out) > 0, "the Read Request");
    let tx = FpduSender::new(FramingConfig {
        crc,
        markers: false,
    });
    (q, sink, tx)
}

/// The Read Response must be exactly what the Read Request asked for: its
/// segments in order (TO = sink TO + octets received so far), no more than
/// the requested length, and L only on the segment that completes it. A
/// short, long, reordered, gapped or overlapping response is Terminated
/// with DDP / 1 / 0x01 (base or bounds, as Linux siw), and the Read
/// completes with an error — never `Success` over partial data.
//= rfc5040#section-5.2.2
//# The Data Sink MAY validate that the STag, Tagged Offset, and
//# length of the RDMA Read Response Message are the same as the STag,
//# Tagged Offset, and length included in the corresponding RDMA Read
//# Request Message.
#[test]
fn read_response_must_match_the_request() {
    // (what, segments as (TO, L, octets), which one breaks the rule)
    type Segs = Vec<(u64, bool, usize)>;
    let cases: [(&str, Segs, usize); 6] = [
        ("short: 500 of 1000 with L", vec![(0, true, 500)], 0),
        (
            "long: 1000, then 8 more",
            vec![(0, false, 1000), (1000, true, 8)],
            1,
        ),
        (
            "L before the end",
            vec![(0, false, 500), (500, true, 400)],
            1,
        ),
        (
            "second half first",
            vec![(500, false, 500), (0, true, 500)],
            0,
        ),
        ("a gap", vec![(0, false, 500), (600, true, 400)], 1),
        ("an overlap", vec![(0, false, 500), (400, true, 600)], 1),
    ];
    for (name, segs, bad) in &cases {
        for crc in [false, true] {
            for octetwise in [false, true] {
                let how = format!("{name} (crc {crc}, octetwise {octetwise})");
                let (mut q, sink, mut tx) = reading(crc);
                let mut ulpdus = Vec::new();
                for &(to, last, n) in segs {
                    let u = ulpdu(
                        rdmap::read_response_header(sink.stag().0, to, last),
                        &vec![7; n],
                    );
                    let f = tx.fpdu_to_vec(&[&u]).unwrap();
                    if octetwise {
                        for c in f.chunks(1) {
                            q.handle_input(c);
                        }
                    } else {
                        q.handle_input(&f);
                    }
                    ulpdus.push(u);
                }
                let t = *q
                    .terminate_sent()
                    .unwrap_or_else(|| panic!("{how}: no Terminate"));
                assert_eq!(t.code, TerminateCode::DDP_TAGGED_BASE_BOUNDS, "{how}");
                let d = t.ddp.unwrap_or_else(|| panic!("{how}: no DDP header"));
                assert_eq!(d.header.to_vec(), ulpdus[*bad][..14], "{how}");
                let mut c = Vec::new();
                q.poll_completions(&mut c);
                assert_eq!(
                    c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
                    [(9, Status::RemoteOperation)],
                    "{how}"
                );
                assert_eq!(
                    q.close_reason(),
                    Some(&DisconnectReason::Error {
                        status: Status::RemoteOperation,
                        blame: Blame::Remote
                    }),
                    "{how}"
                );
                // The offending segment placed nothing.
                let (to, _, n) = segs[*bad];
                let mem = q.region(&sink).unwrap();
                let placed_before: usize = segs[..*bad].iter().map(|s| s.2).sum();
                if to as usize >= placed_before {
                    let end = (to as usize + n).min(1000);
                    assert!(
                        mem[to as usize..end].iter().all(|&x| x == 0x55),
                        "{how}: placed"
                    );
                }
            }
        }
    }
}

/// The same Read answered right, in pieces: completes with its length.
#[test]
fn read_response_in_order_pieces_completes() {
    let (mut q, sink, mut tx) = reading(true);
    for (to, last, n) in [(0u64, false, 300usize), (300, false, 0), (300, true, 700)] {
        let u = ulpdu(
            rdmap::read_response_header(sink.stag().0, to, last),
            &vec![to as u8 + 1; n],
        );
        q.handle_input(&tx.fpdu_to_vec(&[&u]).unwrap());
    }
    let mut c = Vec::new();
    q.poll_completions(&mut c);
    assert_eq!(
        c.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        [(9, Status::Success, 1000)]
    );
    let mem = q.region(&sink).unwrap();
    assert!(mem[..300].iter().all(|&x| x == 1) && mem[300..].iter().all(|&x| x == 45));
    assert!(q.terminate_sent().is_none());
}

#[test]
fn crc_error_terminates_without_placing() {
    let mut v = victim(true, 4);
    let u = ulpdu(rdmap::write_header(v.rw.stag().0, 0, true), &[1; 8]);
    let mut f = v.tx.fpdu_to_vec(&[&u]).unwrap();
    f[20] ^= 0x01; // a payload bit
    v.q.handle_input(&f);
    let t = v.terminate();
    assert_eq!(t.code, TerminateCode::MPA_CRC);
    assert_eq!(
        v.q.close_reason(),
        Some(&DisconnectReason::Error {
            status: Status::ConnectionLost,
            blame: Blame::Transport
        })
    );
}

#[test]
fn crc_error_on_a_send_completes_nothing() {
    let mut v = victim(true, 4);
    let u = ulpdu(
        rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
        &[9; 8],
    );
    let mut f = v.tx.fpdu_to_vec(&[&u]).unwrap();
    let n = f.len();
    f[n - 1] ^= 0x80; // the CRC itself
    v.q.handle_input(&f);
    assert_eq!(v.terminate().code, TerminateCode::MPA_CRC);
    let mut c = Vec::new();
    v.q.poll_completions(&mut c);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, Status::Flushed);
}

#[test]
fn oversized_ulpdu_length_is_a_framing_error() {
    let mut q = QueuePair::new(CAPS, 0);
    q.establish(StreamParams {
        max_rx_ulpdu: 1024,
        ..StreamParams::DEFAULT
    });
    q.handle_input(&[0x04, 0x01]);
    assert_eq!(
        q.terminate_sent().map(|t| t.code),
        Some(TerminateCode::MPA_MARKER)
    );
}

#[test]
fn bad_marker_is_a_framing_error() {
    let mut a = QueuePair::new(CAPS, 0);
    a.establish(params(false, true));
    let mut tx = FpduSender::new(FramingConfig {
        crc: false,
        markers: true,
    });
    let rbuf = reg(&mut a, vec![0; 2048], Access::LOCAL_WRITE);
    a.post_recv(RecvWr {
        wr_id: 1,
        sge: rbuf.sge(0, 2048),
    })
    .unwrap();
    let u = ulpdu(
        rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
        &[7; 1000],
    );
    let mut f = tx.fpdu_to_vec(&[&u]).unwrap();
    // Markers at stream 0 (leading) and 512: corrupt the second FPDUPTR.
    f[512 + 3] ^= 0x10;
    a.handle_input(&f);
    assert_eq!(
        a.terminate_sent().map(|t| t.code),
        Some(TerminateCode::MPA_MARKER)
    );
}

/// A Marker may point past a leading Marker at the ULPDU_Length field
/// only in an FPDU that starts with a Marker; in one that does not, the
/// same FPDUPTR names no FPDU start (FpduReceiver refuses it too; found by
/// the `mpa_stream` fuzz target's cross-check of the two receivers).
#[test]
fn marker_pointing_past_a_missing_leading_marker_is_a_framing_error() {
    for corrupt in [false, true] {
        let mut a = QueuePair::new(CAPS, 0);
        a.establish(params(false, true));
        let mut tx = FpduSender::new(FramingConfig {
            crc: false,
            markers: true,
        });
        let rbuf = reg(&mut a, vec![0; 4096], Access::LOCAL_WRITE);
        for i in 0..2 {
            a.post_recv(RecvWr {
                wr_id: i + 1,
                sge: rbuf.sge(i * 2048, 2048),
            })
            .unwrap();
        }
        let first = ulpdu(
            rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
            &[1; 100],
        );
        let second = ulpdu(
            rdmap::send_header(Opcode::SEND, 2, 0, true, 0).unwrap(),
            &[2; 1000],
        );
        let f1 = tx.fpdu_to_vec(&[&first]).unwrap();
        let mut f2 = tx.fpdu_to_vec(&[&second]).unwrap();
        // The second FPDU starts at stream position f1.len() (not a Marker
        // position) and holds the Marker at 512, which points back at it.
        let at = 512 - f1.len();
        let ptr = u16::from_be_bytes([f2[at + 2], f2[at + 3]]);
        assert_eq!(usize::from(ptr), 512 - f1.len());
        if corrupt {
            f2[at + 2..at + 4].copy_from_slice(&(ptr - 4).to_be_bytes());
        }
        a.handle_input(&f1);
        a.handle_input(&f2);
        let want = corrupt.then_some(TerminateCode::MPA_MARKER);
        assert_eq!(
            a.terminate_sent().map(|t| t.code),
            want,
            "corrupt={corrupt}"
        );
    }
}

#[test]
fn terminate_received_ends_with_remote_blame() {
    let mut v = victim(false, 4);
    let t = TerminateMessage::new(TerminateCode::RDMAP_CATASTROPHIC_STREAM);
    v.feed_ulpdu(&rdmap::encode_terminate(1, &t));
    assert_eq!(v.q.terminate_received(), Some(&t));
    assert_eq!(
        v.q.close_reason(),
        Some(&DisconnectReason::Error {
            status: Status::RemoteInvalidRequest,
            blame: Blame::Remote
        })
    );
    // We do not answer a Terminate with a Terminate.
    assert!(v.q.terminate_sent().is_none());
    let mut out = vec![0u8; 64];
    assert_eq!(v.q.poll_transmit(&mut out), 0);
}

#[test]
fn receive_completions_follow_placed_writes() {
    // The Send that follows Writes completes only after the Writes are in
    // memory: feed the stream one byte at a time and check at every step.
    let (mut a, mut b) = pair(params(true, false));
    let src = reg(&mut a, pattern(3000, 3), Access::NONE);
    let target = reg(&mut b, vec![0; 3000], RW);
    let rb = reg(&mut b, vec![0; 16], Access::LOCAL_WRITE);
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 16),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![src.sge(0, 3000)].into(),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(0, 16)].into(),
    })
    .unwrap();
    let mut out = vec![0u8; 1 << 16];
    let n = a.poll_transmit(&mut out);
    for i in 0..n {
        b.handle_input(&out[i..i + 1]);
        if b.completions_pending() > 0 {
            assert_eq!(i, n - 1, "receive completed before the end");
        }
    }
    let c = cq(&mut b);
    assert_eq!(c.len(), 1);
    assert_eq!(b.region(&target).unwrap(), &pattern(3000, 3)[..]);
}

#[test]
fn direct_placement_path() {
    let mut p = params(true, false);
    p.mulpdu = 8192;
    let (mut a, mut b) = pair(p);
    let data = pattern(100_000, 5);
    let src = reg(&mut a, data.clone(), Access::NONE);
    let target = reg(&mut b, vec![0; 100_000], RW);
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![src.sge(0, 100_000)].into(),
    })
    .unwrap();
    let mut wire = vec![0u8; 200_000];
    let n = a.poll_transmit(&mut wire);
    let mut stream = &wire[..n];
    // Read like the TCP adapter: small reads into a staging buffer, and
    // straight into memory when the QP offers a target.
    while !stream.is_empty() {
        if let Some(t) = b.direct_target() {
            let c = t.len().min(stream.len()).min(3000);
            t[..c].copy_from_slice(&stream[..c]);
            b.direct_filled(c);
            stream = &stream[c..];
        } else {
            let c = b.suggested_read_len().min(stream.len());
            let used = b.handle_input(&stream[..c]);
            assert_eq!(used, c);
            stream = &stream[c..];
        }
    }
    assert!(!b.is_closed());
    assert_eq!(b.region(&target).unwrap(), &data[..]);
    let s = b.stats();
    assert!(
        s.rx_direct_bytes > 90_000,
        "direct {} copied {}",
        s.rx_direct_bytes,
        s.rx_copied_bytes
    );
    assert_eq!(s.rx_direct_bytes + s.rx_copied_bytes, 100_000);
}

#[test]
fn send_queue_completes_in_post_order_with_reads_between() {
    let (mut a, mut b) = pair(params(false, false));
    let src = reg(&mut b, vec![4; 8], Access::REMOTE_READ);
    let sink = reg(&mut a, vec![0; 8], RW);
    let s = reg(&mut a, vec![1; 8], Access::NONE);
    let rb = reg(&mut b, vec![0; 8], Access::LOCAL_WRITE);
    b.post_recv(RecvWr {
        wr_id: 50,
        sge: rb.sge(0, 8),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote: src.remote(0),
        },
        sges: vec![sink.sge(0, 8)].into(),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Send { solicited: false },
        sges: vec![s.sge(0, 8)].into(),
    })
    .unwrap();
    // First pass: the Read Request and the Send leave; the Send is
    // confirmed before the Read Response arrived, but must wait.
    let mut buf = vec![0u8; 4096];
    let n = a.poll_transmit(&mut buf);
    a.confirm_transmitted();
    assert_eq!(a.completions_pending(), 0);
    b.handle_input(&buf[..n]);
    pump(&mut a, &mut b);
    let ids: Vec<u64> = cq(&mut a).iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2]);
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    fn victim_pair(crc: bool) -> (QueuePair, Vec<MemoryRegion>) {
        let mut q = QueuePair::new(CAPS, 0x40);
        q.establish(StreamParams {
            crc,
            ird: 2,
            ..StreamParams::DEFAULT
        });
        let rw = reg(&mut q, vec![0x11; 256], RW);
        let ro = reg(
            &mut q,
            vec![0x22; 256],
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        );
        let rb = reg(&mut q, vec![0; 256], Access::LOCAL_WRITE);
        q.post_recv(RecvWr {
            wr_id: 1,
            sge: rb.sge(0, 128),
        })
        .unwrap();
        (q, vec![rw, ro, rb])
    }

    /// A valid stream (Send, Write, Read Request) to mutate.
    fn valid_stream(crc: bool, stags: &[MemoryRegion]) -> Vec<u8> {
        let mut tx = FpduSender::new(FramingConfig {
            crc,
            markers: false,
        });
        let mut v = Vec::new();
        let s = ulpdu(
            rdmap::send_header(Opcode::SEND, 1, 0, true, 0).unwrap(),
            &[3; 40],
        );
        let w = ulpdu(rdmap::write_header(stags[0].stag().0, 8, true), &[4; 64]);
        let r = rdmap::encode_read_request(
            1,
            &ReadRequest {
                sink_stag: 9,
                sink_to: 0,
                size: 32,
                src_stag: stags[1].stag().0,
                src_to: 16,
            },
        );
        for u in [&s[..], &w[..], &r[..]] {
            v.extend_from_slice(&tx.fpdu_to_vec(&[u]).unwrap());
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary bytes, in arbitrary pieces: never a panic, and either
        /// still up or closed with a Terminate or close reason.
        #[test]
        fn random_input_never_panics(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            piece in 1usize..80,
            crc in any::<bool>(),
        ) {
            let (mut q, _) = victim_pair(crc);
            for c in data.chunks(piece) {
                q.handle_input(c);
                let mut out = vec![0u8; 4096];
                q.poll_transmit(&mut out);
            }
            let mut c = Vec::new();
            q.poll_completions(&mut c);
            prop_assert!(!q.is_closed() || q.close_reason().is_some());
        }

        /// The whole-FPDU receive fast path (an FPDU within one input
        /// slice) and the octet-wise state machine (input one octet at a
        /// time) agree on everything visible: completions, memory, output
        /// (Terminates), close reason, counters — for a valid stream with
        /// one octet flipped (or none).
        #[test]
        fn whole_fpdu_fast_path_equals_octet_path(
            at in any::<prop::sample::Index>(),
            bit in 0u8..9,
            crc in any::<bool>(),
        ) {
            let run = |octetwise: bool| {
                let (mut q, regions) = victim_pair(crc);
                let mut s = valid_stream(crc, &regions);
                if bit < 8 {
                    let i = at.index(s.len());
                    s[i] ^= 1 << bit;
                }
                if octetwise {
                    for c in s.chunks(1) {
                        q.handle_input(c);
                    }
                } else {
                    q.handle_input(&s);
                }
                let mut out = vec![0u8; 4096];
                let n = q.poll_transmit(&mut out);
                out.truncate(n);
                let mut c = Vec::new();
                q.poll_completions(&mut c);
                let mem: Vec<Vec<u8>> = regions
                    .iter()
                    .map(|r| q.region(r).map(<[u8]>::to_vec).unwrap_or_default())
                    .collect();
                (
                    c,
                    out,
                    mem,
                    q.close_reason().cloned(),
                    q.terminate_sent().copied(),
                    q.stats().rx_fpdus,
                    q.rx_mid_fpdu(),
                )
            };
            prop_assert_eq!(run(false), run(true));
        }

        /// The small-Send receive fast path (a whole one-segment Send or
        /// Send SE for the receive at the head of the queue) against the
        /// octet-wise state machine, on streams of Send-queue segments
        /// with every parameter the fast path looks at varied — opcode
        /// (Invalidate ones and a Write among them), MSN (expected or
        /// not), MO, L, payload against the receive's length (under, at,
        /// over), receives posted or missing — and one bit flipped (or
        /// none): the same completions, memory, Terminate, close reason,
        /// counters and receive state.
        #[test]
        fn small_send_receive_fast_path_equals_octet_path(
            segs in proptest::collection::vec(
                (0u8..8, 0u32..3, 0u32..2, any::<bool>(), 0usize..70),
                1..6,
            ),
            recv_lens in proptest::collection::vec(0u32..64, 0..5),
            at in any::<prop::sample::Index>(),
            bit in 0u8..12,
            crc in any::<bool>(),
            cut in any::<prop::sample::Index>(),
        ) {
            // 0: the stream in one slice; 1: octet by octet; 2: in two
            // slices cut anywhere (the fast path, then the general path
            // mid-FPDU, then the fast path again).
            let run = |feed: u8| {
                let mut q = QueuePair::new(CAPS, 0x40);
                q.establish(StreamParams {
                    crc,
                    ird: 2,
                    ..StreamParams::DEFAULT
                });
                let rw = reg(&mut q, vec![0x11; 256], RW);
                let rb = reg(&mut q, vec![0x5a; 512], Access::LOCAL_WRITE);
                for (i, &l) in recv_lens.iter().enumerate() {
                    q.post_recv(RecvWr {
                        wr_id: 10 + i as u64,
                        sge: rb.sge(64 * i as u64, l),
                    })
                    .unwrap();
                }
                let mut tx = FpduSender::new(FramingConfig {
                    crc,
                    markers: false,
                });
                let mut stream = Vec::new();
                let mut msn = 1u32;
                for (k, &(op, dmsn, mo, last, len)) in segs.iter().enumerate() {
                    let payload = pattern(len, k as u32);
                    let opcode = [
                        Opcode::SEND,
                        Opcode::SEND_SE,
                        Opcode::SEND,
                        Opcode::SEND_SE,
                        Opcode::SEND,
                        Opcode::SEND_INVALIDATE,
                        Opcode::SEND_SE_INVALIDATE,
                        Opcode::WRITE,
                    ][usize::from(op)];
                    let hdr = if opcode == Opcode::WRITE {
                        rdmap::write_header(rw.stag().0, 0, last)
                    } else {
                        rdmap::send_header(opcode, msn + dmsn, mo * 8, last, rw.stag().0)
                            .unwrap()
                    };
                    if last && dmsn == 0 && opcode != Opcode::WRITE {
                        msn += 1;
                    }
                    stream.extend_from_slice(&tx.fpdu_to_vec(&[&ulpdu(hdr, &payload)]).unwrap());
                }
                if bit < 8 {
                    let i = at.index(stream.len());
                    stream[i] ^= 1 << bit;
                }
                match feed {
                    0 => {
                        q.handle_input(&stream);
                    }
                    1 => {
                        for c in stream.chunks(1) {
                            q.handle_input(c);
                        }
                    }
                    _ => {
                        let (a, b) = stream.split_at(cut.index(stream.len() + 1));
                        q.handle_input(a);
                        q.handle_input(b);
                    }
                }
                let mut out = vec![0u8; 4096];
                let n = q.poll_transmit(&mut out);
                out.truncate(n);
                let mut c = Vec::new();
                q.poll_completions(&mut c);
                let mem: Vec<Vec<u8>> = [rw, rb]
                    .iter()
                    .map(|r| q.region(r).map(<[u8]>::to_vec).unwrap_or_default())
                    .collect();
                (
                    c,
                    out,
                    mem,
                    q.close_reason().cloned(),
                    q.terminate_sent().copied(),
                    q.stats().rx_fpdus,
                    q.stats().rx_copied_bytes,
                    q.rx_mid_fpdu(),
                    q.suggested_read_len(),
                )
            };
            let whole = run(0);
            prop_assert_eq!(&whole, &run(1));
            prop_assert_eq!(&whole, &run(2));
        }

        /// A valid stream with one octet flipped: no panic; with the CRC
        /// on, a flip anywhere in an FPDU is caught before anything is
        /// completed or placed from that FPDU.
        #[test]
        fn mutated_stream_never_panics(
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
            crc in any::<bool>(),
        ) {
            let (mut q, regions) = victim_pair(crc);
            let mut s = valid_stream(crc, &regions);
            let i = at.index(s.len());
            s[i] ^= 1 << bit;
            q.handle_input(&s);
            let mut out = vec![0u8; 4096];
            q.poll_transmit(&mut out);
            let mut c = Vec::new();
            q.poll_completions(&mut c);
            if crc {
                // The first FPDU is the Send (2 + 18 + 40, no pad, 4 CRC).
                if i < 64 {
                    prop_assert!(c.iter().all(|c| !c.status.is_ok()), "{c:?}");
                }
                // Unless the flip lengthened an FPDU, which then waits for
                // octets that never come.
                prop_assert!(q.is_closed() || q.rx_mid_fpdu());
            }
        }
    }
}

/// Small FPDUs are copied into a staging buffer and merged into one gather
/// element: a Send still completes only once all of its octets were handed
/// over, partial writes resume mid-run, staged and zero-copy FPDUs keep
/// their order, and the staging buffer never leaks an earlier message.
#[test]
fn staged_small_sends_partial_writes_and_order() {
    let (mut a, mut b) = pair(params(false, false));
    let src = reg(&mut a, vec![0; 8192], Access::NONE);
    let rbuf = reg(&mut b, vec![0; 64 * 8192], Access::LOCAL_WRITE);
    let lens = [16usize, 40, 3000, 8, 4096, 4097, 6000, 100, 4];
    for (i, _) in lens.iter().enumerate() {
        b.post_recv(RecvWr {
            wr_id: 100 + i as u64,
            sge: rbuf.sge(i as u64 * 8192, 8192),
        })
        .unwrap();
    }
    let mut want = Vec::new();
    let mut wire = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        // The source is rewritten between Sends (once the previous one is
        // framed and completed): what goes out is what was there at post.
        let data = pattern(len, i as u32 + 9);
        a.region_mut(&src).unwrap()[..len].copy_from_slice(&data);
        a.post_send(SendWr {
            wr_id: i as u64,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, len as u32)].into(),
        })
        .unwrap();
        want.push(data);
        // Three octets per write: every chunk is handed over in pieces.
        a.transmit(|s| {
            let mut n = 0;
            for x in s {
                let take = (3 - n).min(x.len());
                wire.extend_from_slice(&x[..take]);
                n += take;
                if n == 3 {
                    break;
                }
            }
            Ok(n)
        })
        .unwrap();
        a.confirm_transmitted();
        let c = cq(&mut a);
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            [(i as u64, Status::Success)]
        );
    }
    b.handle_input(&wire);
    let cb = cq(&mut b);
    assert_eq!(cb.len(), lens.len());
    for (i, c) in cb.iter().enumerate() {
        assert_eq!((c.wr_id, c.byte_len as usize), (100 + i as u64, lens[i]));
        let off = i * 8192;
        assert_eq!(&b.region(&rbuf).unwrap()[off..off + lens[i]], &want[i][..]);
    }
}

/// A Send whose octets were only partly handed over does not complete.
#[test]
fn a_partly_written_small_send_does_not_complete() {
    let (mut a, _b) = pair(params(true, false));
    let src = reg(&mut a, pattern(64, 3), Access::NONE);
    for id in 0..3 {
        a.post_send(SendWr {
            wr_id: id,
            op: SendOp::Send { solicited: false },
            sges: vec![src.sge(0, 64)].into(),
        })
        .unwrap();
    }
    // All three FPDUs are one staged run; hand over all but its last octet.
    let mut total = 0;
    let mut out = vec![0u8; 1 << 12];
    let whole = {
        let mut probe = Vec::new();
        // Refuses everything: only looks at what would go out.
        let _ = a.transmit(|s| {
            for x in s {
                probe.extend_from_slice(x);
            }
            Err(std::io::ErrorKind::WouldBlock.into())
        });
        probe.len()
    };
    assert!(whole > 3 * 64);
    let _ = a.transmit(|s| {
        let mut n = 0;
        for x in s {
            let take = x.len().min(whole - 1 - total - n);
            out[n..n + take].copy_from_slice(&x[..take]);
            n += take;
        }
        total += n;
        if n == 0 {
            Err(std::io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    assert_eq!(total, whole - 1);
    a.confirm_transmitted();
    // The first two are wholly out; the third is not.
    let done: Vec<u64> = cq(&mut a).iter().map(|c| c.wr_id).collect();
    assert!(!done.contains(&2), "{done:?}");
    let n = a.poll_transmit(&mut out);
    assert_eq!(n, 1);
    a.confirm_transmitted();
    let rest: Vec<u64> = cq(&mut a).iter().map(|c| c.wr_id).collect();
    assert!(rest.contains(&2));
}

/// Small Sends take a fast path (framed straight into the staging buffer);
/// larger ones, or ones longer than MULPDU allows in one segment, the
/// general path. Both give exactly the FPDUs built independently from
/// `rdmap::send_header` + `FpduSender`, for every Send variant, SGE list
/// and framing, in one stream (MSNs and stream positions continue).
#[test]
fn small_send_fast_path_matches_reference_fpdus() {
    let variants = [
        (SendOp::Send { solicited: false }, Opcode::SEND),
        (SendOp::Send { solicited: true }, Opcode::SEND_SE),
        (
            SendOp::SendWithInvalidate {
                solicited: false,
                invalidate: Stag(0x1234_5678),
            },
            Opcode::SEND_INVALIDATE,
        ),
        (
            SendOp::SendWithInvalidate {
                solicited: true,
                invalidate: Stag(0x0abc_def0),
            },
            Opcode::SEND_SE_INVALIDATE,
        ),
    ];
    let sge_lists: [&[(u64, u32)]; 11] = [
        &[],
        &[(0, 0)],
        &[(3, 5)],
        &[(0, 72)],
        &[(10, 3), (100, 40)],
        &[(0, 1024)],
        &[(0, 1000), (2000, 25)],
        &[(7, 73)],
        &[(0, 4096)],
        &[(0, 4000), (5000, 97)],
        &[(1, 3000), (4000, 1500)],
    ];
    for crc in [false, true] {
        for mulpdu in [StreamParams::DEFAULT.mulpdu, 90] {
            let mut p = params(crc, false);
            p.mulpdu = mulpdu;
            let mut a = QueuePair::new(CAPS, 0);
            a.establish(p);
            let data = pattern(8192, 9);
            let src = reg(&mut a, data.clone(), Access::NONE);
            let mut reference = FpduSender::new(FramingConfig {
                crc,
                markers: false,
            });
            let mut want = Vec::new();
            let mut msn = 1u32;
            let mut wire = vec![0u8; 1 << 16];
            let mut got = Vec::new();
            for (op, opcode) in variants {
                for sges in sge_lists {
                    a.post_send(SendWr {
                        wr_id: 1,
                        op,
                        sges: sges.iter().map(|&(o, l)| src.sge(o, l)).collect(),
                    })
                    .unwrap();
                    let payload: Vec<u8> = sges
                        .iter()
                        .flat_map(|&(o, l)| data[o as usize..o as usize + l as usize].to_vec())
                        .collect();
                    let inval = match op {
                        SendOp::SendWithInvalidate { invalidate, .. } => invalidate.0,
                        _ => 0,
                    };
                    let max = usize::from(mulpdu) - 18;
                    let mut mo = 0;
                    loop {
                        let n = (payload.len() - mo).min(max);
                        let last = mo + n == payload.len();
                        let h = rdmap::send_header(opcode, msn, mo as u32, last, inval).unwrap();
                        let u = ulpdu(h, &payload[mo..mo + n]);
                        want.extend_from_slice(&reference.fpdu_to_vec(&[&u]).unwrap());
                        mo += n;
                        if last {
                            break;
                        }
                    }
                    msn += 1;
                    // Alternate: transmit after each WR, or let them queue.
                    if sges.len() != 1 {
                        let n = a.poll_transmit(&mut wire);
                        got.extend_from_slice(&wire[..n]);
                    }
                }
            }
            let n = a.poll_transmit(&mut wire);
            got.extend_from_slice(&wire[..n]);
            assert_eq!(got, want, "crc {crc} mulpdu {mulpdu}");
            a.confirm_transmitted();
            let c = cq(&mut a);
            assert_eq!(c.len(), variants.len() * sge_lists.len());
            assert!(c.iter().all(|c| c.status == Status::Success));
        }
    }
}

/// The transmit fast path for a lone small Send (framed and handed to the
/// writer without the output queue) against the general path (several
/// Sends queued, framed into the output queue, gathered): the same octets
/// on the wire, the same completions in the same order, the same counters,
/// whatever the writer does (takes everything, takes a few octets per
/// call, refuses, is interrupted, writes zero).
mod lone_small_send {
    use super::*;
    use proptest::prelude::*;

    const VARIANTS: [SendOp; 4] = [
        SendOp::Send { solicited: false },
        SendOp::Send { solicited: true },
        SendOp::SendWithInvalidate {
            solicited: false,
            invalidate: Stag(0x1234_5678),
        },
        SendOp::SendWithInvalidate {
            solicited: true,
            invalidate: Stag(0x0abc_def0),
        },
    ];

    /// What the writer does on its calls within one `transmit`.
    #[derive(Clone, Copy, Debug)]
    enum Writer {
        All,
        Piece(usize),
        WouldBlock,
        InterruptedFirst,
        Zero,
    }

    fn transmit(q: &mut QueuePair, how: Writer, wire: &mut Vec<u8>) {
        let mut calls = 0usize;
        let _ = q.transmit(writer_fn(how, &mut calls, wire));
    }

    /// `QueuePair::transmit_lone`, as the TCP adapter calls it right after
    /// a post under blocking reads (nothing when it does not apply).
    fn transmit_lone(q: &mut QueuePair, how: Writer, wire: &mut Vec<u8>) {
        let mut calls = 0usize;
        let _ = q.transmit_lone(writer_fn(how, &mut calls, wire));
    }

    fn writer_fn<'a>(
        how: Writer,
        calls: &'a mut usize,
        wire: &'a mut Vec<u8>,
    ) -> impl FnMut(&[std::io::IoSlice<'_>]) -> std::io::Result<usize> + 'a {
        move |slices| {
            *calls += 1;
            let calls = *calls;
            let cap = match how {
                Writer::All => usize::MAX,
                Writer::Piece(k) if calls <= 3 => k,
                Writer::Piece(_) | Writer::WouldBlock => {
                    return Err(std::io::ErrorKind::WouldBlock.into())
                }
                Writer::InterruptedFirst if calls == 1 => {
                    return Err(std::io::ErrorKind::Interrupted.into())
                }
                Writer::InterruptedFirst => usize::MAX,
                Writer::Zero => return Ok(0),
            };
            let mut n = 0;
            for s in slices {
                let take = s.len().min(cap - n);
                wire.extend_from_slice(&s[..take]);
                n += take;
                if n == cap {
                    break;
                }
            }
            Ok(n)
        }
    }

    fn writer() -> impl Strategy<Value = Writer> {
        prop_oneof![
            4 => Just(Writer::All),
            2 => (1usize..80).prop_map(Writer::Piece),
            1 => Just(Writer::WouldBlock),
            1 => Just(Writer::InterruptedFirst),
            1 => Just(Writer::Zero),
        ]
    }

    type Seen = (Vec<u8>, Vec<Completion>, [u64; 8]);

    /// How `run` transmits.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        /// Everything posted first, then the general path.
        General,
        /// `transmit` after each post (the lone-Send fast path), each
        /// completion polled at once.
        OneByOne,
        /// `transmit_lone` after each post (the TCP adapter under blocking
        /// reads), completions only at the end.
        AtPost,
    }

    fn run(crc: bool, msgs: &[(usize, usize, Writer)], mode: Mode) -> Seen {
        let mut q = QueuePair::new(CAPS, 0);
        q.establish(params(crc, false));
        let data = pattern(8192, 5);
        let src = reg(&mut q, data, Access::NONE);
        let mut wire = Vec::new();
        let mut done = Vec::new();
        for (i, &(len, v, how)) in msgs.iter().enumerate() {
            q.post_send(SendWr {
                wr_id: i as u64,
                op: VARIANTS[v],
                sges: vec![src.sge(i as u64, len as u32)].into(),
            })
            .unwrap();
            match mode {
                Mode::General => {}
                Mode::OneByOne => {
                    transmit(&mut q, how, &mut wire);
                    q.confirm_transmitted();
                    q.poll_completions(&mut done);
                }
                Mode::AtPost => transmit_lone(&mut q, how, &mut wire),
            }
        }
        for _ in 0..10_000 {
            if !q.has_output() {
                break;
            }
            transmit(&mut q, Writer::All, &mut wire);
        }
        q.confirm_transmitted();
        q.poll_completions(&mut done);
        (wire, done, q.stats().tx_fpdus)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn lone_small_send_equals_general_path(
            msgs in proptest::collection::vec((0usize..4200, 0usize..4, writer()), 2..8),
            crc in any::<bool>(),
        ) {
            let general = run(crc, &msgs, Mode::General);
            prop_assert_eq!(general.1.len(), msgs.len());
            prop_assert_eq!(run(crc, &msgs, Mode::OneByOne), general.clone());
            prop_assert_eq!(run(crc, &msgs, Mode::AtPost), general);
        }
    }
}

/// RFC 5041 section 5.2: the STag and TO of a zero-length tagged message
/// are not checked. A zero-length RDMA Write naming an STag the receiver
/// never registered (Linux siw's Write RTR uses STag 1) is accepted
/// silently, and so is a zero-length RDMA Read: its Read Response comes
/// back, and the stream goes on.
#[test]
fn zero_length_write_and_read_ignore_the_stag() {
    let (mut a, mut b) = pair(params(true, false));
    let sink = reg(&mut a, vec![0; 1], RW);
    for (wr_id, op, sges) in [
        (
            1,
            SendOp::Write {
                remote: RemoteAddr {
                    stag: Stag(1),
                    offset: 0x1234,
                },
            },
            vec![],
        ),
        (
            2,
            SendOp::Read {
                remote: RemoteAddr {
                    stag: Stag(0xdead_be01),
                    offset: 7,
                },
            },
            vec![sink.sge(0, 0)],
        ),
    ] {
        a.post_send(SendWr {
            wr_id,
            op,
            sges: sges.into(),
        })
        .unwrap();
    }
    pump(&mut a, &mut b);
    let c = cq(&mut a);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|c| c.status == Status::Success), "{c:?}");
    assert_eq!(b.terminate_sent(), None);
    assert!(b.is_established() && a.is_established());
    // The stream still works: a Send after them arrives.
    let rbuf = reg(&mut b, vec![0; 8], RW);
    b.post_recv(RecvWr {
        wr_id: 9,
        sge: rbuf.sge(0, 8),
    })
    .unwrap();
    let src = reg(&mut a, vec![5; 8], Access::NONE);
    a.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Send { solicited: false },
        sges: vec![src.sge(0, 8)].into(),
    })
    .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(cq(&mut b)[0].status, Status::Success);
}
