//! READ answered from the file (`Piece::File`: with the MPA CRC off the
//! server's software iWARP sends each READ's data by `sendfile` from the
//! page cache; with it on, the range is read into memory as before): a
//! get through our server is bit-exact either way, and a file truncated
//! and rewritten under a stream of READs never yields octets that were
//! not in the file (the promised count cannot be kept: the server closes
//! the connection, the client retransmits on a new one), and nothing
//! hangs.

mod served;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::rdma::RdmaServerConfig;
use rpcrdma_nfs::nfs3::*;
use rpcrdma_nfs::server::NfsServiceConfig;
use served::*;
use sha2::{Digest, Sha256};

fn server_config(crc: bool) -> RdmaServerConfig {
    let mut c = RdmaServerConfig::default();
    if let Some(cm) = c.provider.iwarp_mut() {
        cm.config.crc = crc;
    }
    c
}

async fn get_sha(s: &Served, name: &[u8]) -> (u64, Vec<u8>) {
    let fh = s.lookup(&s.root, name).await.expect("lookup");
    let mut h = Sha256::new();
    let n = s
        .client
        .read_file(&fh, None, |b| {
            h.update(b);
            Ok(())
        })
        .await
        .expect("read_file");
    (n, h.finalize().to_vec())
}

/// A get of a 5 MiB + 1,235-octet file (whole READs, a short last one,
/// an odd length: an XDR pad), and of an empty file, with the MPA CRC off
/// (data by `sendfile`) and on (read into memory): sha256 of what the
/// client got is the file's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_is_bit_exact_with_crc_off_and_on() {
    bounded(async {
        for crc in [false, true] {
            let s = Served::start_with(NfsServiceConfig::default(), server_config(crc)).await;
            let data = pattern(3 + crc as u32, (5 << 20) + 1235);
            std::fs::write(s.dir.path("f"), &data).unwrap();
            std::fs::write(s.dir.path("empty"), b"").unwrap();
            let (n, digest) = get_sha(&s, b"f").await;
            assert_eq!(n, data.len() as u64, "crc {crc}");
            assert_eq!(digest, Sha256::digest(&data).to_vec(), "crc {crc}");
            let (n, digest) = get_sha(&s, b"empty").await;
            assert_eq!((n, digest), (0, Sha256::digest(b"").to_vec()));
            let e = s.engine();
            assert!(e.write_chunks >= 6, "READs in Write chunks: {e:?}");
            assert_eq!(e.write_chunk_bytes, data.len() as u64);
        }
    })
    .await;
}

/// One READ of `count` at `offset`, as the binding calls it.
async fn read(s: &Served, fh: &FileHandle, offset: u64, count: u32) -> Option<ReadResOk> {
    let args = Nfs3Args::Read(ReadArgs {
        file: fh.clone(),
        offset,
        count,
    });
    let opts = rpcrdma_nfs::binding::message::call_options(&args, &rpcrdma_nfs::Limits::DEFAULT);
    match s.call_with(&args, &opts).await {
        Ok(Nfs3Res::Read(Res::Ok(ok))) => Some(ok),
        Ok(other) => panic!("not a READ success: {other:?}"),
        // The connection closed under the call (a lost reply).
        Err(_) => None,
    }
}

/// A file of 0x5a octets truncated to 0 and written again, over and over,
/// while READs of 1 MiB go on: every READ that succeeds has as many
/// octets as its count, every one 0x5a (never stale memory, zeros or
/// another file's octets); READs whose reply was lost fail or are
/// retransmitted; the test ends (no hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_under_reads_never_gives_other_octets() {
    bounded(async {
        let s = Served::start_with(NfsServiceConfig::default(), server_config(false)).await;
        let path = s.dir.path("t");
        let full = vec![0x5au8; 4 << 20];
        std::fs::write(&path, &full).unwrap();
        let fh = s.lookup(&s.root, b"t").await.expect("lookup");
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (stop, path, full) = (stop.clone(), path.clone(), full.clone());
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                let mut rounds = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    f.set_len(0).unwrap();
                    for (i, c) in full.chunks(256 << 10).enumerate() {
                        f.write_all_at(c, (i as u64) * (256 << 10)).unwrap();
                    }
                    rounds += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                rounds
            })
        };
        let (mut ok, mut lost) = (0u32, 0u32);
        for i in 0..200u64 {
            match read(&s, &fh, (i % 4) << 20, 1 << 20).await {
                Some(r) => {
                    assert_eq!(r.data.len(), r.count as usize);
                    assert!(r.data.iter().all(|&b| b == 0x5a), "READ {i}: other octets");
                    ok += 1;
                }
                None => lost += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        let rounds = writer.join().unwrap();
        eprintln!("{ok} READs answered, {lost} lost, {rounds} truncations");
        assert!(ok > 0, "some READs answered");
    })
    .await;
}
