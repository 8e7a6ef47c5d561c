//! The TCP adapter's side of RDMA Writes sent from a file (the queue
//! pair's `file_tx`): headers and trailers by `sendmsg` with `MSG_MORE`
//! when file octets follow (so a header and the payload after it leave as
//! full segments, not a 16-octet segment each), the payload by
//! `sendfile(2)` from the page cache (no copy into user memory).
//!
//! Off with `RPCRDMA_IWARP_SENDFILE=0` in the environment (for A/B counts),
//! and under blocking reads (the socket is then blocking and `sendfile`
//! has no `MSG_DONTWAIT`).

use std::fs::File;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::sync::OnceLock;

use super::{sock_write, Capture, Direction};
use crate::qp::TxSink;

/// Whether providers send file registrations from the file (read once).
pub(super) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RPCRDMA_IWARP_SENDFILE").map_or(true, |v| v != "0"))
}

/// The socket as a [`TxSink`].
pub(super) struct SockSink<'a> {
    pub(super) sock: &'a mut TcpStream,
    pub(super) cap: &'a mut Option<Capture>,
    pub(super) dontwait: bool,
}

impl TxSink for SockSink<'_> {
    fn write(&mut self, slices: &[IoSlice<'_>], more: bool) -> io::Result<usize> {
        if !more {
            return sock_write(self.sock, self.cap, self.dontwait, slices);
        }
        let mut flags = rustix::net::SendFlags::MORE | rustix::net::SendFlags::NOSIGNAL;
        if self.dontwait {
            flags |= rustix::net::SendFlags::DONTWAIT;
        }
        let n = rustix::net::sendmsg(
            &*self.sock,
            slices,
            &mut rustix::net::SendAncillaryBuffer::default(),
            flags,
        )?;
        if let Some(c) = self.cap.as_mut() {
            let mut v = Vec::with_capacity(n);
            for s in slices {
                let k = s.len().min(n - v.len());
                v.extend_from_slice(&s[..k]);
            }
            c.push((Direction::Sent, v));
        }
        Ok(n)
    }

    fn send_file(&mut self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        let mut at = offset;
        let n = rustix::fs::sendfile(&*self.sock, file, Some(&mut at), len)?;
        if let Some(c) = self.cap.as_mut() {
            // What went out, read back for the recording (capture only).
            let mut v = vec![0u8; n];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut v, offset)?;
            c.push((Direction::Sent, v));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    #[test]
    fn send_file_sends_the_range_and_stops_at_the_end_of_the_file() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 + 7) as u8).collect();
        let path = std::env::temp_dir().join(format!("rpcrdma-sendfile-{}", std::process::id()));
        File::create(&path).unwrap().write_all(&data).unwrap();
        let file = File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        let mut cap = Some(Capture::default());
        let mut sink = SockSink {
            sock: &mut tx,
            cap: &mut cap,
            dontwait: false,
        };
        let head = sink.write(&[IoSlice::new(b"head")], true).unwrap();
        let mut sent = 0;
        while sent < 30_000 {
            sent += sink
                .send_file(&file, 1_000 + sent as u64, 30_000 - sent)
                .unwrap();
        }
        assert_eq!(sink.send_file(&file, 100_000, 10).unwrap(), 0, "EOF");
        drop(tx);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        assert_eq!(head, 4);
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &data[1_000..31_000]);
        let recorded: Vec<u8> = cap.unwrap().take().into_iter().flat_map(|c| c.1).collect();
        assert_eq!(recorded, got);
    }
}
