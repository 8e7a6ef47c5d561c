//! Raw throughput of the software iWARP provider over 127.0.0.1 against a
//! plain TCP stream, measured in the same run: 1 MiB RDMA Writes, 1 MiB
//! RDMA Reads, and 1 MiB `write_all`/`read` over TCP, two threads in one
//! process, the same amount of data each (default 2 GiB, 3 rounds, median).
//!
//! ```text
//! taskset -c 0 cargo run --release -p rpcrdma-iwarp --example iwarp_bench [-- --gib N --rounds R --crc]
//! ```

// The connected pair the TCP tests use.
#[path = "../tests/tcp_common/mod.rs"]
mod tcp_common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::tcp::IwarpProvider;
use rpcrdma_proto::provider::{Access, Completion, Provider, RecvWr, SendOp, SendWr};

const MIB: usize = 1 << 20;
const DEPTH: usize = 16;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn pair(crc: bool) -> (IwarpProvider, IwarpProvider) {
    let cfg = IwarpConfig {
        crc,
        ird: DEPTH as u8,
        ord: DEPTH as u8,
        ..Default::default()
    };
    tcp_common::connected_pair(&cfg, &cfg)
}

/// Runs `p` (progress only) until `stop` is set.
fn serve(mut p: IwarpProvider, stop: Arc<AtomicBool>) -> IwarpProvider {
    let mut cq = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        p.poll_completions(&mut cq);
        cq.clear();
        let _ = p.wait(Some(Duration::from_millis(5)));
    }
    p
}

/// `count` RDMA Writes of 1 MiB from `a` into `b`, then a Send; the time
/// until `b` has received the Send (so every Write is placed).
fn bench_write(crc: bool, count: usize) -> f64 {
    let (mut a, mut b) = pair(crc);
    let src = a
        .register(vec![7u8; MIB].into_boxed_slice(), Access::NONE)
        .unwrap();
    let target = b.register(vec![0u8; MIB].into_boxed_slice(), RW).unwrap();
    let rb = b
        .register(vec![0u8; 64].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 64),
    })
    .unwrap();
    let start = Instant::now();
    let rx = thread::spawn(move || {
        let mut cq: Vec<Completion> = Vec::new();
        loop {
            b.poll_completions(&mut cq);
            if cq.iter().any(|c| c.wr_id == 1) {
                return start.elapsed().as_secs_f64();
            }
            let _ = b.wait(Some(Duration::from_millis(5)));
        }
    });
    let mut posted = 0;
    let mut done = 0;
    let mut cq = Vec::new();
    while done < count + 1 {
        while posted < count && posted - done < DEPTH {
            a.post_send(SendWr {
                wr_id: posted as u64,
                op: SendOp::Write {
                    remote: target.remote(0),
                },
                sges: vec![src.sge(0, MIB as u32)].into(),
            })
            .unwrap();
            posted += 1;
            if posted == count {
                a.post_send(SendWr {
                    wr_id: u64::MAX,
                    op: SendOp::Send { solicited: true },
                    sges: vec![src.sge(0, 16)].into(),
                })
                .unwrap();
            }
        }
        cq.clear();
        a.poll_completions(&mut cq);
        for c in &cq {
            assert!(c.status.is_ok(), "{c:?}");
        }
        done += cq.len();
        if cq.is_empty() {
            let _ = a.wait(Some(Duration::from_millis(5)));
        }
    }
    rx.join().unwrap()
}

/// `count` RDMA Reads of 1 MiB by `b` from `a`.
fn bench_read(crc: bool, count: usize) -> f64 {
    let (mut a, mut b) = pair(crc);
    let src = a
        .register(
            vec![9u8; MIB].into_boxed_slice(),
            Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .unwrap();
    let sink = b.register(vec![0u8; MIB].into_boxed_slice(), RW).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let server = thread::spawn(move || serve(a, st));
    let start = Instant::now();
    let mut posted = 0;
    let mut done = 0;
    let mut cq = Vec::new();
    while done < count {
        while posted < count && posted - done < DEPTH {
            b.post_send(SendWr {
                wr_id: posted as u64,
                op: SendOp::Read {
                    remote: src.remote(0),
                },
                sges: vec![sink.sge(0, MIB as u32)].into(),
            })
            .unwrap();
            posted += 1;
        }
        cq.clear();
        b.poll_completions(&mut cq);
        for c in &cq {
            assert!(c.status.is_ok(), "{c:?}");
        }
        done += cq.len();
        if cq.is_empty() {
            let _ = b.wait(Some(Duration::from_millis(5)));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    secs
}

/// The same bytes over a plain TCP stream: 1 MiB `write_all`s, reads into
/// a 1 MiB buffer.
fn bench_tcp(count: usize) -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let start = Instant::now();
    let rx = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; MIB];
        let mut got = 0usize;
        while got < count * MIB {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got += n;
        }
        start.elapsed().as_secs_f64()
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let buf = vec![5u8; MIB];
    for _ in 0..count {
        s.write_all(&buf).unwrap();
    }
    rx.join().unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let val = |n: &str| {
        args.iter()
            .position(|a| a == n)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let gib = val("--gib").unwrap_or(2);
    let rounds = val("--rounds").unwrap_or(3);
    let crc = args.iter().any(|a| a == "--crc");
    let count = gib * 1024;
    let gbps = |s: f64| (count * MIB) as f64 / s / 1e9;
    let (mut w, mut r, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        t.push(bench_tcp(count));
        w.push(bench_write(crc, count));
        r.push(bench_read(crc, count));
        println!(
            "round {i}: tcp {:.2} GB/s  write {:.2} GB/s  read {:.2} GB/s",
            gbps(t[i]),
            gbps(w[i]),
            gbps(r[i])
        );
    }
    let (tm, wm, rm) = (median(t), median(w), median(r));
    println!(
        "{gib} GiB per run, 1 MiB operations, depth {DEPTH}, MPA CRC {}, median of {rounds}:",
        if crc { "on" } else { "off" }
    );
    println!("  plain TCP       {:.2} GB/s", gbps(tm));
    println!(
        "  RDMA Write      {:.2} GB/s  iWARP/TCP throughput ratio {:.2}",
        gbps(wm),
        tm / wm
    );
    println!(
        "  RDMA Read       {:.2} GB/s  iWARP/TCP throughput ratio {:.2}",
        gbps(rm),
        tm / rm
    );
}
