//! The cost of the MPA CRC on the software iWARP provider over 127.0.0.1:
//! two connections, one with CRC and one without, driven alternately in
//! batches of 1 MiB RDMA Writes (or Reads), so both see the same machine
//! load; the cost is `1 - rate(CRC on) / rate(CRC off)` of
//! each adjacent pair of batches (median over the pairs).
//!
//! ```text
//! taskset -c 0 cargo run --release -p rpcrdma-iwarp --example crc_cost [-- --pairs N --mib M --read]
//! ```

// The connected pair the TCP tests use.
#[path = "../tests/tcp_common/mod.rs"]
mod tcp_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::provider::{Access, Completion, MemoryRegion, Provider, RecvWr, SendOp, SendWr};

const MIB: usize = 1 << 20;
const DEPTH: usize = 8;

/// One connection: the active end (driven by the main thread) and a
/// thread running the passive end, which reports each received Send.
struct Pair {
    act: IwarpProvider,
    act_buf: MemoryRegion,
    pas_buf: MemoryRegion,
    sends: mpsc::Receiver<()>,
    stop: Arc<AtomicBool>,
}

fn pair(crc: bool) -> Pair {
    let cfg = IwarpConfig {
        crc,
        ird: DEPTH as u8,
        ord: DEPTH as u8,
        ..Default::default()
    };
    let (mut a, mut b) = tcp_common::connected_pair(&cfg, &cfg);
    let all = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 + 1) as u8).collect();
    let act_buf = a.register(data.clone().into_boxed_slice(), all).unwrap();
    let pas_buf = b.register(data.into_boxed_slice(), all).unwrap();
    let rb = b
        .register(vec![0u8; 64].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    let (tx, sends) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    thread::spawn(move || {
        let mut cq: Vec<Completion> = Vec::new();
        for i in 0..4 {
            b.post_recv(RecvWr {
                wr_id: i,
                sge: rb.sge(0, 64),
            })
            .unwrap();
        }
        while !st.load(Ordering::Relaxed) {
            cq.clear();
            b.poll_completions(&mut cq);
            for c in &cq {
                assert!(c.status.is_ok(), "{c:?}");
                b.post_recv(RecvWr {
                    wr_id: c.wr_id,
                    sge: rb.sge(0, 64),
                })
                .unwrap();
                let _ = tx.send(());
            }
            let _ = b.wait(Some(Duration::from_millis(5)));
        }
    });
    Pair {
        act: a,
        act_buf,
        pas_buf,
        sends,
        stop,
    }
}

/// `count` 1 MiB operations (Writes to the passive end, or Reads from it),
/// `DEPTH` in flight; for Writes, then a Send, and the time until the
/// passive end has it (so every Write was placed and CRC-checked).
fn batch(p: &mut Pair, count: usize, read: bool) -> f64 {
    let start = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    let mut cq: Vec<Completion> = Vec::new();
    while done < count {
        while posted < count && posted - done < DEPTH {
            let (op, sge) = if read {
                (
                    SendOp::Read {
                        remote: p.pas_buf.remote(0),
                    },
                    p.act_buf.sge(0, MIB as u32),
                )
            } else {
                (
                    SendOp::Write {
                        remote: p.pas_buf.remote(0),
                    },
                    p.act_buf.sge(0, MIB as u32),
                )
            };
            p.act
                .post_send(SendWr {
                    wr_id: posted as u64,
                    op,
                    sges: vec![sge].into(),
                })
                .unwrap();
            posted += 1;
        }
        cq.clear();
        p.act.poll_completions(&mut cq);
        for c in &cq {
            assert!(c.status.is_ok(), "{c:?}");
        }
        done += cq.len();
        if cq.is_empty() {
            let _ = p.act.wait(Some(Duration::from_millis(5)));
        }
    }
    if !read {
        p.act
            .post_send(SendWr {
                wr_id: u64::MAX,
                op: SendOp::Send { solicited: true },
                sges: vec![p.act_buf.sge(0, 16)].into(),
            })
            .unwrap();
        let (mut placed, mut completed) = (false, false);
        while !(placed && completed) {
            cq.clear();
            p.act.poll_completions(&mut cq);
            completed |= cq.iter().any(|c| c.wr_id == u64::MAX);
            placed |= p.sends.try_recv().is_ok();
            if !(placed && completed) {
                let _ = p.act.wait(Some(Duration::from_millis(1)));
            }
        }
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let val = |n: &str| {
        args.iter()
            .position(|a| a == n)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let pairs = val("--pairs").unwrap_or(40);
    let mib = val("--mib").unwrap_or(32);
    let read = args.iter().any(|a| a == "--read");
    let mut off = pair(false);
    let mut on = pair(true);
    batch(&mut off, mib, read);
    batch(&mut on, mib, read);
    let mut costs = Vec::new();
    let (mut t_off, mut t_on) = (0.0, 0.0);
    for i in 0..pairs {
        // Alternate which goes first, so neither always follows the other.
        let (a, b) = if i % 2 == 0 {
            let a = batch(&mut off, mib, read);
            (a, batch(&mut on, mib, read))
        } else {
            let b = batch(&mut on, mib, read);
            (batch(&mut off, mib, read), b)
        };
        t_off += a;
        t_on += b;
        costs.push(1.0 - a / b);
    }
    costs.sort_by(|x, y| x.total_cmp(y));
    let gb = (pairs * mib * MIB) as f64 / 1e9;
    println!(
        "{} 1 MiB, {pairs} pairs of {mib} MiB batches: CRC off {:.2} GB/s, on {:.2} GB/s; \
         CRC cost median {:.1} % (quartiles {:.1} .. {:.1} %), overall {:.1} %",
        if read { "RDMA Read" } else { "RDMA Write" },
        gb / t_off,
        gb / t_on,
        100.0 * costs[pairs / 2],
        100.0 * costs[pairs / 4],
        100.0 * costs[3 * pairs / 4],
        100.0 * (1.0 - t_off / t_on),
    );
    off.stop.store(true, Ordering::Relaxed);
    on.stop.store(true, Ordering::Relaxed);
}
