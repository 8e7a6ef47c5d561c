//! Throughput of the CRC-32C implementations over FPDU-sized buffers
//! (cache-hot, as in the FPDU paths).
//!
//! ```text
//! taskset -c 0 cargo run --release -p rpcrdma-iwarp --example crc_bench
//! ```

use std::hint::black_box;
use std::time::Instant;

fn gbps(f: &dyn Fn(&[u8]) -> u32, buf: &[u8], total: usize) -> f64 {
    let iters = (total / buf.len()).max(1);
    let mut acc = 0u32;
    for _ in 0..iters.min(16) {
        acc ^= f(black_box(buf));
    }
    let t = Instant::now();
    for _ in 0..iters {
        acc ^= f(black_box(buf));
    }
    let dt = t.elapsed().as_secs_f64();
    black_box(acc);
    (iters * buf.len()) as f64 / dt / 1e9
}

/// Throughput over 1 MiB slices walked through `big` (larger than L2):
/// the CRC of a message no longer in L2.
fn gbps_cold(f: &dyn Fn(&[u8]) -> u32, big: &[u8], total: usize) -> f64 {
    let chunk = 1 << 20;
    let n = big.len() / chunk;
    let mut acc = 0u32;
    let t = Instant::now();
    let mut done = 0;
    let mut i = 0;
    while done < total {
        acc ^= f(black_box(&big[(i % n) * chunk..(i % n + 1) * chunk]));
        i += 1;
        done += chunk;
    }
    let dt = t.elapsed().as_secs_f64();
    black_box(acc);
    done as f64 / dt / 1e9
}

/// Nanoseconds of a fixed scalar loop run right after each CRC of a 64 KiB
/// buffer: slower after a CRC if that CRC lowered the core clock (the
/// AVX-512 frequency licence), which would tax everything around the CRC.
fn scalar_after(f: &dyn Fn(&[u8]) -> u32, buf: &[u8]) -> f64 {
    let mut total = 0u128;
    let mut acc = 0u64;
    for _ in 0..2000 {
        acc ^= u64::from(f(black_box(buf)));
        let t = Instant::now();
        let mut x = black_box(acc) | 1;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).rotate_left(7) ^ 0x9e37;
        }
        acc ^= black_box(x);
        total += t.elapsed().as_nanos();
    }
    black_box(acc);
    total as f64 / 2000.0
}

fn main() {
    println!(
        "crc-fast target: {}",
        crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc32Iscsi)
    );
    let buf: Vec<u8> = (0..1usize << 20).map(|i| (i * 31 + 7) as u8).collect();
    let total = 2usize << 30;
    let crc32c_crate = |d: &[u8]| crc32c::crc32c(d);
    let crc_fast = |d: &[u8]| crc_fast::crc32_iscsi(d);
    let ours = |d: &[u8]| rpcrdma_iwarp::crc::crc32c(d);
    // Incremental updates as the FPDU paths do them (small header pieces).
    let inc_crc32c = |d: &[u8]| crc32c::crc32c_append(0x1234_5678, d);
    let inc_ours = |d: &[u8]| {
        rpcrdma_iwarp::crc::Crc32c::new()
            .update(&[0x12, 0x34, 0x56, 0x78])
            .update(d)
            .value()
    };
    let big: Vec<u8> = (0..32usize << 20).map(|i| (i * 13 + 1) as u8).collect();
    for mib in [4usize, 32] {
        let b = &big[..mib << 20];
        for round in 0..2 {
            println!(
                "1 MiB slices of {mib} MiB (not in L2) round {round}: crc32c crate {:6.2} GB/s  crc::crc32c {:6.2} GB/s",
                gbps_cold(&crc32c_crate, b, total / 2),
                gbps_cold(&ours, b, total / 2),
            );
        }
    }
    for round in 0..3 {
        let b = &buf[..65_536];
        println!(
            "scalar loop after a 64 KiB CRC round {round}: crc32c crate {:8.0} ns  crc::crc32c {:8.0} ns  no CRC {:8.0} ns",
            scalar_after(&crc32c_crate, b),
            scalar_after(&ours, b),
            scalar_after(&|_: &[u8]| 0, b),
        );
    }
    for size in [2usize, 16] {
        let b = &buf[..size];
        println!(
            "size {size:>8} incremental: crc32c crate {:6.3} GB/s  Crc32c::update {:6.3} GB/s",
            gbps(&inc_crc32c, b, total / 64),
            gbps(&inc_ours, b, total / 64),
        );
    }
    for size in [64usize, 1024, 8192, 65536, 1 << 20] {
        let b = &buf[..size];
        assert_eq!(crc32c_crate(b), crc_fast(b));
        for round in 0..2 {
            println!(
                "size {size:>8} round {round}: crc32c crate {:6.2} GB/s  crc-fast {:6.2} GB/s  crc::crc32c {:6.2} GB/s",
                gbps(&crc32c_crate, b, total / 4),
                gbps(&crc_fast, b, total / 4),
                gbps(&ours, b, total / 4),
            );
        }
    }
}
