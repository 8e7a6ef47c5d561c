//! Every DDP/RDMAP header split across two TCP segments, at every offset,
//! in both directions — the arrival that Linux 6.1's siw mis-assembles
//! (docs/interop-linux.md, "siw mis-assembles a DDP/RDMAP header split
//! after more than 16 octets"): a relay between our client and our server
//! follows the MPA framing (CRC off and on) and writes each FPDU in two
//! pieces, the first ending inside its header (1 to 47 octets, cycling
//! over every offset of the 20-octet Send and 48-octet Read Request
//! headers), with a pause between them so that the receiver reads them
//! separately. The calls are the ones that stalled the Linux client at
//! rsize 4096: READ replies of 4 KiB placed by RDMA Write then a Send,
//! plus WRITEs whose data the server pulls by RDMA Read (Read Request
//! headers split too). Every octet is checked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{testprog, ClientConfig, Server};

const LIMIT: Duration = Duration::from_secs(120);
/// The longest DDP/RDMAP header (RDMA Read Request: 2 + 46 octets).
const MAX_HDR: usize = 48;

/// Copies one direction: the MPA frame whole, then every FPDU in two
/// writes, the first `k` octets of it (k = 1, 2, ..., 47, 1, ...; never
/// more than the FPDU less one octet), a pause, then the rest. Counts the
/// FPDUs split inside their header.
fn relay(mut from: TcpStream, mut to: TcpStream, splits: Arc<AtomicU64>) {
    to.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut frame_done = false;
    let mut k = 0usize;
    loop {
        // Forward every whole unit in `buf`.
        loop {
            if !frame_done {
                // MPA Request / Reply: 16-octet key, flags, rev, PD_Length.
                if buf.len() < 20 {
                    break;
                }
                let n = 20 + usize::from(u16::from_be_bytes([buf[18], buf[19]]));
                if buf.len() < n {
                    break;
                }
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
                buf.drain(..n);
                frame_done = true;
                continue;
            }
            if buf.len() < 2 {
                break;
            }
            // ULPDU_Length, pad to 4, CRC field (zero without CRC).
            let ulpdu = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
            let n = (2 + ulpdu).next_multiple_of(4) + 4;
            if buf.len() < n {
                break;
            }
            k = k % (MAX_HDR - 1) + 1;
            let first = k.min(n - 1);
            if to.write_all(&buf[..first]).is_err() {
                return;
            }
            thread::sleep(Duration::from_micros(300));
            if to.write_all(&buf[first..n]).is_err() {
                return;
            }
            splits.fetch_add(1, Ordering::Relaxed);
            buf.drain(..n);
        }
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A relay on 127.0.0.1 in front of `upstream` (one connection).
fn start_relay(upstream: SocketAddr, splits: Arc<AtomicU64>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        let s = TcpStream::connect(upstream).unwrap();
        c.set_nodelay(true).unwrap();
        let (c2, s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
        let sp = splits.clone();
        thread::spawn(move || relay(c2, s, sp));
        relay(s2, c, splits);
    });
    addr
}

async fn every_header_split(crc: bool) {
    let server = Server::default();
    testprog::register(&server);
    let mut config = RdmaServerConfig::default();
    config.provider.iwarp_mut().expect("iWARP").config.crc = crc;
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", config)
        .await
        .unwrap();
    let splits = Arc::new(AtomicU64::new(0));
    let addr = start_relay(rdma.local_addr(), splits.clone());
    let mut ccfg = RdmaClientConfig {
        reconnect: None,
        ..RdmaClientConfig::default()
    };
    ccfg.provider.iwarp_mut().expect("iWARP").config.crc = crc;
    let (c, t) = connect_client(addr, ClientConfig::default(), ccfg)
        .await
        .unwrap();
    let c = Arc::new(c);
    // 4 KiB READs (RDMA Write + Send per reply), several in flight.
    for round in 0..12u32 {
        let reads: Vec<_> = (0..8u32)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { testprog::read(&c, 4096, round * 8 + i).await })
            })
            .collect();
        for (i, r) in reads.into_iter().enumerate() {
            let want = testprog::pattern(round * 8 + i as u32, 4096);
            let got = r.await.unwrap().unwrap();
            assert_eq!(got[..], want[..], "crc {crc}: READ {round}/{i}");
        }
    }
    // WRITEs pulled by RDMA Read (Read Request headers split too).
    for seed in 0..24u32 {
        let data = testprog::pattern(1000 + seed, 6000 + seed as usize * 7);
        let want = (data.len() as u32, crc32c::crc32c(&data));
        assert_eq!(
            testprog::write(&c, &data).await.unwrap(),
            want,
            "crc {crc}: WRITE {seed}"
        );
    }
    let st = t.status();
    assert_eq!(st.connects, 1, "crc {crc}: the connection was lost");
    // Every offset of the longest header was used, in both directions.
    assert!(
        splits.load(Ordering::Relaxed) >= 4 * MAX_HDR as u64,
        "crc {crc}: only {} FPDUs split",
        splits.load(Ordering::Relaxed)
    );
    t.shutdown().await;
    rdma.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_split_point_crc_off() {
    tokio::time::timeout(LIMIT, every_header_split(false))
        .await
        .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_split_point_crc_on() {
    tokio::time::timeout(LIMIT, every_header_split(true))
        .await
        .expect("test timed out");
}
