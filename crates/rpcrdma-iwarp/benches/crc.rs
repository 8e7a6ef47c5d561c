//! CRC-32C throughput of each candidate implementation over the sizes the
//! MPA CRC sees: a small FPDU (96 octets), a TCP segment's worth (1460),
//! reads of 4 and 16 KiB, a whole FPDU at the default MULPDU (64 772
//! octets) and 1 MiB.
//!
//! Candidates: `crc-fast` and the `crc32c` crate called directly, and
//! every [`Impl`] of `rpcrdma_iwarp::crc` forced explicitly (`auto` is
//! what the MPA CRC uses by default). Two placements: `hot` computes over
//! the same buffer again and again (in L1/L2, as right after a socket read
//! or a framing copy), `cold` walks a 64 MiB buffer (from DRAM).
//!
//! Each figure is the best of many timed batches (GB/s = 10^9 octets per
//! second), a number other load on the CPU disturbs much less than a
//! mean. Plain harness (no criterion): `cargo bench -p rpcrdma-iwarp
//! --bench crc`; pin it (`taskset -c 1 target/release/deps/crc-* --bench`)
//! for steadier figures.
//!
//! `CRC_BENCH_FLOOR=1` measures only what `scripts/bench-compare` needs for
//! the MPA CRC floor: the implementation the MPA CRC uses in this process
//! ([`rpcrdma_iwarp::crc::selected`], so `RPCRDMA_CRC32C_IMPL` applies)
//! over whole FPDUs at the default MULPDU (64,772 octets under the CRC),
//! hot and cold,
//! printed as one line: `floor impl=... size=64772 hot_gbps=X cold_gbps=Y`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rpcrdma_iwarp::crc::Impl;

/// CRC-32C as custom parameters: `crc-fast`'s generic carry-less
/// multiplication folding instead of its CRC-32C "fusion" code.
static GENERIC: std::sync::LazyLock<crc_fast::CrcParams> = std::sync::LazyLock::new(|| {
    crc_fast::CrcParams::new(
        "CRC-32C",
        32,
        0x1edc_6f41,
        0xffff_ffff,
        true,
        0xffff_ffff,
        0xe306_9283,
    )
});

type Candidate = (&'static str, fn(&[u8]) -> u32);

fn candidates() -> Vec<Candidate> {
    vec![
        ("crc-fast", |d| crc_fast::crc32_iscsi(d)),
        ("crc-fast gen", |d| {
            crc_fast::checksum_with_params(*GENERIC, d) as u32
        }),
        ("crc32c crate", |d| crc32c::crc32c(d)),
        ("Impl::Auto", |d| Impl::Auto.append(0, d)),
        ("Auto append", |d| Impl::Auto.append(1, d)),
        ("Impl::Sse42", |d| Impl::Sse42.append(0, d)),
        ("Impl::Table", |d| Impl::Table.append(0, d)),
    ]
}

const SIZES: [usize; 11] = [8, 28, 64, 96, 128, 256, 1460, 4096, 16_384, 64_772, 1 << 20];

/// Best GB/s of batches of about `budget` octets each, for `total` time.
fn best_gbps(f: fn(&[u8]) -> u32, buf: &[u8], size: usize, total: Duration) -> f64 {
    let per_batch = (4 << 20) / size + 1;
    let chunks = buf.len() / size;
    let mut best = f64::MAX;
    let mut at = 0usize;
    let t_end = Instant::now() + total;
    let mut acc = 0u32;
    while Instant::now() < t_end {
        let t = Instant::now();
        for _ in 0..per_batch {
            let off = (at % chunks) * size;
            acc ^= f(black_box(&buf[off..off + size]));
            at += 1;
        }
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt / per_batch as f64);
    }
    black_box(acc);
    size as f64 / best / 1e9
}

fn main() {
    // `cargo bench` passes `--bench`; `--list` and filters are ignored.
    let secs = std::env::var("CRC_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.4);
    let total = Duration::from_secs_f64(secs);
    if std::env::var_os("CRC_BENCH_FLOOR").is_some() {
        floor(total);
        return;
    }
    println!("CRC-32C throughput, GB/s (best batch); {secs} s per point");
    for i in Impl::ALL {
        println!("  {}", i.describe());
    }
    let cold: Vec<u8> = (0..64usize << 20)
        .map(|i| (i * 131 + (i >> 9)) as u8)
        .collect();
    let cands = candidates();
    for (placement, buf_len) in [("hot", 0usize), ("cold", cold.len())] {
        print!("{placement:5} {:>13}", "size");
        for (name, _) in &cands {
            print!(" {name:>13}");
        }
        println!();
        for size in SIZES {
            // hot: one buffer of `size` reused; cold: walk the 64 MiB.
            let buf = if buf_len == 0 {
                &cold[..size]
            } else {
                &cold[..]
            };
            print!("{:5} {size:>13}", "");
            for (_, f) in &cands {
                print!(" {:>13.2}", best_gbps(*f, buf, size, total));
            }
            println!();
        }
    }
}

/// The octets one CRC covers in an FPDU at the default MULPDU:
/// ULPDU_Length (2), the ULPDU (64,768) and PAD (2).
const FPDU: usize = 64_772;

/// The MPA CRC's own implementation over whole FPDUs, hot and cold (see
/// the module docs).
fn floor(total: Duration) {
    let cold: Vec<u8> = (0..64usize << 20)
        .map(|i| (i * 131 + (i >> 9)) as u8)
        .collect();
    let f: fn(&[u8]) -> u32 = rpcrdma_iwarp::crc::crc32c;
    let hot = best_gbps(f, &cold[..FPDU], FPDU, total);
    let walk = best_gbps(f, &cold, FPDU, total);
    println!(
        "floor impl={} size={FPDU} hot_gbps={hot:.2} cold_gbps={walk:.2}",
        rpcrdma_iwarp::crc::selected().name()
    );
}
