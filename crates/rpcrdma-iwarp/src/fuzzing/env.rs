//! The queue pair both iWARP fuzz targets feed: established, with every
//! kind of region a peer may name, posted receives and two outstanding RDMA
//! Reads of our own (so that Read Responses are meaningful).

use rpcrdma_proto::provider::{
    Access, Completion, MemoryRegion, RecvWr, RemoteAddr, SendOp, SendWr, Stag,
};

use crate::cm::DEFAULT_CAPS;
use crate::qp::{QueuePair, StreamParams};

/// `wr_id` of the receive for MSN `1 + i` is `RECV_WR + i`.
pub const RECV_WR: u64 = 100;
/// `wr_id` of our RDMA Read number `j` is `READ_WR + j`.
pub const READ_WR: u64 = 200;
/// `wr_id` of the Local Invalidate of [`Kind::Invalidated`].
pub const INV_WR: u64 = 300;

/// Lengths of the posted receive buffers (one region each), MSN 1, 2, …
pub const RECV_LENS: [usize; 4] = [64, 64, 200, 32];
/// Lengths of the sinks of our RDMA Reads, in post order.
pub const READ_LENS: [u32; 2] = [64, 100];

/// What a region is to the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// REMOTE_WRITE (RDMA Write target).
    RemoteWrite,
    /// REMOTE_READ only (RDMA Read source, never written).
    RemoteRead,
    /// LOCAL_WRITE only: no remote access at all.
    LocalOnly,
    /// REMOTE_READ | REMOTE_WRITE, invalidated before any input.
    Invalidated,
    /// The buffer of posted receive `i` (LOCAL_WRITE only).
    Recv(usize),
    /// The sink of our RDMA Read `j` (LOCAL_WRITE | REMOTE_WRITE).
    ReadSink(usize),
}

/// One region and what it held before any input.
#[derive(Clone, Debug)]
pub struct Region {
    /// The registration.
    pub mr: MemoryRegion,
    /// Its role.
    pub kind: Kind,
    /// Its octets at the start (a per-region pattern, never what a
    /// generated payload holds at the same offset by accident for long).
    pub initial: Vec<u8>,
}

/// The queue pair and what the harness knows about it.
pub struct Env {
    /// The queue pair under test.
    pub qp: QueuePair,
    /// Every live region.
    pub regions: Vec<Region>,
    /// The STag of a region registered and deregistered again (stale key).
    pub stale: Stag,
    /// Sink STag, sink offset and length of our two RDMA Reads, in order.
    pub reads: Vec<(u32, u64, u32)>,
    /// What the queue pair sent during setup (two Read Requests).
    pub setup_output: Vec<u8>,
    /// Completions seen during setup (the Local Invalidate).
    pub setup_completions: Vec<Completion>,
}

/// The poison pattern of region `n`.
pub fn poison(n: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(29)
                .wrapping_add(0xa5 ^ (n as u8 * 17))
                | 0x01
        })
        .collect()
}

fn reg(qp: &mut QueuePair, regions: &mut Vec<Region>, kind: Kind, len: usize, access: Access) {
    let initial = poison(regions.len(), len);
    let mr = match qp.register(initial.clone().into_boxed_slice(), access) {
        Ok(mr) => mr,
        Err(e) => panic!("setup: register {kind:?}: {e}"),
    };
    regions.push(Region { mr, kind, initial });
}

impl Env {
    /// An established queue pair receiving with `params`.
    pub fn new(params: StreamParams) -> Env {
        let mut qp = QueuePair::new(DEFAULT_CAPS, 0x40);
        qp.establish(params);
        // Registered first and deregistered: its index is reused below
        // with another key, so the stale STag must be refused by key.
        let stale_mr = qp
            .register(
                vec![0u8; 32].into_boxed_slice(),
                Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            )
            .unwrap_or_else(|e| panic!("setup: {e}"));
        let stale = stale_mr.stag();
        qp.deregister(&stale_mr)
            .unwrap_or_else(|e| panic!("setup: {e}"));
        let mut regions = Vec::new();
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        reg(&mut qp, &mut regions, Kind::RemoteWrite, 256, rw);
        reg(
            &mut qp,
            &mut regions,
            Kind::RemoteRead,
            256,
            Access::REMOTE_READ,
        );
        reg(
            &mut qp,
            &mut regions,
            Kind::LocalOnly,
            128,
            Access::LOCAL_WRITE,
        );
        reg(
            &mut qp,
            &mut regions,
            Kind::Invalidated,
            128,
            rw | Access::REMOTE_READ,
        );
        for (i, &l) in RECV_LENS.iter().enumerate() {
            reg(&mut qp, &mut regions, Kind::Recv(i), l, Access::LOCAL_WRITE);
        }
        for (j, &l) in READ_LENS.iter().enumerate() {
            reg(&mut qp, &mut regions, Kind::ReadSink(j), l as usize, rw);
        }
        for r in &regions {
            if let Kind::Recv(i) = r.kind {
                qp.post_recv(RecvWr {
                    wr_id: RECV_WR + i as u64,
                    sge: r.mr.sge(0, r.initial.len() as u32),
                })
                .unwrap_or_else(|e| panic!("setup: post_recv: {e}"));
            }
        }
        let inv = regions
            .iter()
            .find(|r| r.kind == Kind::Invalidated)
            .map(|r| r.mr.stag())
            .unwrap_or(Stag(0));
        qp.post_send(SendWr {
            wr_id: INV_WR,
            op: SendOp::LocalInvalidate { stag: inv },
            sges: Default::default(),
        })
        .unwrap_or_else(|e| panic!("setup: invalidate: {e}"));
        let mut reads = Vec::new();
        for r in &regions {
            if let Kind::ReadSink(j) = r.kind {
                let len = READ_LENS[j];
                qp.post_send(SendWr {
                    wr_id: READ_WR + j as u64,
                    op: SendOp::Read {
                        remote: RemoteAddr {
                            stag: Stag(0x7700_0001 + j as u32),
                            offset: 4096 * j as u64,
                        },
                    },
                    sges: vec![r.mr.sge(0, len)].into(),
                })
                .unwrap_or_else(|e| panic!("setup: read: {e}"));
                reads.push((r.mr.stag().0, 0, len));
            }
        }
        let mut setup_output = vec![0u8; 4096];
        let n = qp.poll_transmit(&mut setup_output);
        setup_output.truncate(n);
        let mut setup_completions = Vec::new();
        qp.poll_completions(&mut setup_completions);
        Env {
            qp,
            regions,
            stale,
            reads,
            setup_output,
            setup_completions,
        }
    }

    /// The region of `kind`.
    pub fn region(&self, kind: Kind) -> Option<&Region> {
        self.regions.iter().find(|r| r.kind == kind)
    }

    /// The region an STag names (live regions only).
    pub fn by_stag(&self, stag: u32) -> Option<&Region> {
        self.regions.iter().find(|r| r.mr.stag().0 == stag)
    }

    /// Every STag a generated header may name: the live regions' and the
    /// stale one.
    pub fn stags(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.regions.iter().map(|r| r.mr.stag().0).collect();
        v.push(self.stale.0);
        v
    }
}
