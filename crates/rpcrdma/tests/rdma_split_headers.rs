//! Every DDP/RDMAP header split across two TCP segments, at every offset,
//! in both directions — the arrival that Linux 6.1's siw mis-assembles
//! (docs/interop-linux.md, "siw mis-assembles a DDP/RDMAP header split
//! after more than 16 octets"): a relay between our client and our server
//! follows the MPA framing (CRC off and on) and writes each FPDU in two
//! pieces, the first ending inside its DDP/RDMAP header — after 1 to 19
//! octets of a Send's 20, 1 to 47 of a Read Request's 48, 1 to 15 of a
//! tagged header's 16, cycling so that every offset is used — with a pause
//! between them so that the receiver reads them separately. The calls are the ones that stalled the Linux client at
//! rsize 4096: READ replies of 4 KiB placed by RDMA Write then a Send,
//! plus WRITEs whose data the server pulls by RDMA Read (Read Request
//! headers split too). Every octet is checked.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{testprog, ClientConfig, Server};

const LIMIT: Duration = Duration::from_secs(120);
/// The (RDMAP opcode, octets of its header in the first piece) pairs
/// forwarded, both directions.
type Splits = Arc<Mutex<BTreeSet<(u8, usize)>>>;

/// Octets of DDP/RDMAP header (with the MPA length) per RDMAP opcode:
/// tagged (RDMA Write, Read Response) 16, Read Request 48, the Sends and
/// Terminate 20 or more (RFC 5040 §4, RFC 5041 §5).
fn header_len(opcode: u8) -> usize {
    match opcode {
        0 | 2 => 16,
        1 => 48,
        _ => 20,
    }
}

/// Copies one direction: the MPA frame whole, then every FPDU in two
/// writes, the first ending `k` octets into its header (k cycling over 1 to
/// the header's length less one, per opcode; never the whole FPDU), a
/// pause, then the rest. Records each (opcode, k) used.
fn relay(mut from: TcpStream, mut to: TcpStream, splits: Splits) {
    to.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut frame_done = false;
    let mut next_k = [0usize; 16];
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
            let opcode = buf[3] & 0x0f;
            let hdr = header_len(opcode);
            let k = &mut next_k[usize::from(opcode)];
            *k = *k % (hdr - 1) + 1;
            let first = (*k).min(n - 1);
            if to.write_all(&buf[..first]).is_err() {
                return;
            }
            thread::sleep(Duration::from_micros(300));
            if to.write_all(&buf[first..n]).is_err() {
                return;
            }
            splits.lock().unwrap().insert((opcode, first));
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
fn start_relay(upstream: SocketAddr, splits: Splits) -> SocketAddr {
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
    let splits = Splits::default();
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
    for seed in 0..48u32 {
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
    // Every split point of the Send and Read Request headers was used.
    let used = splits.lock().unwrap().clone();
    for (opcode, hdr) in [(3u8, 20usize), (1, 48)] {
        for k in 1..hdr {
            assert!(
                used.contains(&(opcode, k)),
                "crc {crc}: opcode {opcode} never split after {k} octets: {used:?}"
            );
        }
    }
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
