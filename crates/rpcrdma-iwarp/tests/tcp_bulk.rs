//! Moves ≥ 1 GiB through Sends, RDMA Writes and RDMA Reads between two
//! providers over 127.0.0.1, checking every byte by CRC-32C against what
//! was sent: 1 GiB (a third each way of use) for every combination of
//! MPA revision 1 / 2 and CRC on / off (about 2 s each at the test
//! profile's opt-level 1; `RPCRDMA_BULK_MIB=N` changes the amount).

mod tcp_common;

use std::time::Instant;

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::provider::{
    Access, Completion, MemoryRegion, Opcode, Provider, RecvWr, SendOp, SendWr, Status,
};
use tcp_common::connected_pair;

const CHUNK: usize = 4 << 20;
const SEND: usize = 1 << 20;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for w in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

struct Pair {
    a: IwarpProvider,
    b: IwarpProvider,
    ca: Vec<Completion>,
    cb: Vec<Completion>,
}

impl Pair {
    /// Polls both ends until `a` has `na` and `b` has `nb` completions.
    fn wait(&mut self, na: usize, nb: usize) {
        let start = Instant::now();
        while self.ca.len() < na || self.cb.len() < nb {
            self.a.poll_completions(&mut self.ca);
            self.b.poll_completions(&mut self.cb);
            assert!(
                start.elapsed().as_secs() < 60,
                "stuck: a={:?} b={:?}",
                self.ca,
                self.cb
            );
        }
        for c in self.ca.iter().chain(self.cb.iter()) {
            assert_eq!(c.status, Status::Success, "{c:?}");
        }
    }
    fn take(&mut self) -> (Vec<Completion>, Vec<Completion>) {
        (std::mem::take(&mut self.ca), std::mem::take(&mut self.cb))
    }
}

fn crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

fn run(rev: u8, crc_on: bool, mib: usize) {
    let cfg = IwarpConfig {
        rev,
        crc: crc_on,
        ird: 4,
        ord: 4,
        ..Default::default()
    };
    let (a, b) = connected_pair(&cfg, &cfg);
    let mut p = Pair {
        a,
        b,
        ca: Vec::new(),
        cb: Vec::new(),
    };
    let src =
        p.a.register(
            vec![0u8; CHUNK].into_boxed_slice(),
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let note =
        p.a.register(vec![0u8; 16].into_boxed_slice(), Access::NONE)
            .unwrap();
    let target =
        p.b.register(vec![0u8; CHUNK].into_boxed_slice(), RW)
            .unwrap();
    let sink =
        p.b.register(vec![0u8; CHUNK].into_boxed_slice(), RW)
            .unwrap();
    let rbufs: MemoryRegion =
        p.b.register(vec![0u8; CHUNK].into_boxed_slice(), Access::LOCAL_WRITE)
            .unwrap();
    let total = (mib << 20) as u64;
    let mut moved = 0u64;
    let mut iter = 0u64;
    let t0 = Instant::now();
    while moved < total {
        iter += 1;
        let want = {
            let s = p.a.region_mut(&src).unwrap();
            fill(s, iter ^ (u64::from(rev) << 40) ^ (u64::from(crc_on) << 41));
            crc(s)
        };
        // 1. RDMA Write of the chunk, then a Send: when the receive
        //    completes, the Write is placed.
        p.b.post_recv(RecvWr {
            wr_id: 1,
            sge: rbufs.sge(0, 16),
        })
        .unwrap();
        p.a.post_send(SendWr {
            wr_id: 10,
            op: SendOp::Write {
                remote: target.remote(0),
            },
            sges: vec![
                src.sge(0, (CHUNK / 2) as u32),
                src.sge((CHUNK / 2) as u64, (CHUNK / 2) as u32),
            ]
            .into(),
        })
        .unwrap();
        p.a.post_send(SendWr {
            wr_id: 11,
            op: SendOp::Send { solicited: true },
            sges: vec![note.sge(0, 16)].into(),
        })
        .unwrap();
        p.wait(0, 1);
        assert_eq!(
            crc(p.b.region(&target).unwrap()),
            want,
            "write, iteration {iter}"
        );
        p.wait(2, 1);
        let (ca, _) = p.take();
        assert_eq!(
            ca.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
            [(10, Opcode::Write), (11, Opcode::Send)]
        );
        // 2. Sends of 1 MiB into four posted receives.
        for i in 0..(CHUNK / SEND) as u64 {
            p.b.post_recv(RecvWr {
                wr_id: 100 + i,
                sge: rbufs.sge(i * SEND as u64, SEND as u32),
            })
            .unwrap();
        }
        for i in 0..(CHUNK / SEND) as u64 {
            p.a.post_send(SendWr {
                wr_id: 200 + i,
                op: SendOp::Send { solicited: false },
                sges: vec![src.sge(i * SEND as u64, SEND as u32)].into(),
            })
            .unwrap();
        }
        p.wait(CHUNK / SEND, CHUNK / SEND);
        let (_, cb) = p.take();
        assert!(cb.iter().all(|c| c.byte_len == SEND as u32));
        assert_eq!(
            crc(p.b.region(&rbufs).unwrap()),
            want,
            "sends, iteration {iter}"
        );
        // 3. RDMA Read of the chunk back, in two Reads.
        for i in 0..2u64 {
            p.b.post_send(SendWr {
                wr_id: 300 + i,
                op: SendOp::Read {
                    remote: src.remote(i * (CHUNK / 2) as u64),
                },
                sges: vec![sink.sge(i * (CHUNK / 2) as u64, (CHUNK / 2) as u32)].into(),
            })
            .unwrap();
        }
        p.wait(0, 2);
        let _ = p.take();
        assert_eq!(
            crc(p.b.region(&sink).unwrap()),
            want,
            "reads, iteration {iter}"
        );
        moved += 3 * CHUNK as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "rev {rev} crc {crc_on}: {} MiB checked in {secs:.2} s ({:.0} MiB/s); a {:?}; b {:?}",
        moved >> 20,
        (moved >> 20) as f64 / secs,
        p.a.stats(),
        p.b.stats()
    );
    assert!(p.b.stats().rx_direct_bytes > p.b.stats().rx_copied_bytes);
}

fn mib(default: usize) -> usize {
    std::env::var("RPCRDMA_BULK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn bulk_1gib_rev2_no_crc() {
    run(2, false, mib(1024));
}

#[test]
fn bulk_1gib_rev2_crc() {
    run(2, true, mib(1024));
}

#[test]
fn bulk_1gib_rev1_no_crc() {
    run(1, false, mib(1024));
}

#[test]
fn bulk_1gib_rev1_crc() {
    run(1, true, mib(1024));
}
