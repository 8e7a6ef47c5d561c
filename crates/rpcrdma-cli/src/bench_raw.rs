//! `rpcrdma bench --raw-tcp`: plain TCP baselines on loopback inside the
//! same tool, blocking sockets with `TCP_NODELAY`, a server thread and the
//! client on the calling thread (so `taskset -c 0` puts both on one CPU):
//!
//! * **ping-pong** (`--proc null|echo|write`): messages of `size` octets
//!   (at least 1), `depth` in flight; the server echoes each message; a
//!   "call" is one round trip, its latency from the write of the message to
//!   the end of the read of its echo.
//! * **stream** (`--proc read`): the server writes `size`-octet blocks as
//!   fast as it can; a "call" is one block received, its latency the time
//!   to receive that block.
//!
//! The CPU time reported is the whole process: client *and* server.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::report::{CpuTimes, Latency, Report};

/// Most octets in flight for a ping-pong with `depth` > 1 (the client writes
/// `depth` messages before reading, all of which must fit in the socket
/// buffers).
pub const MAX_PINGPONG_IN_FLIGHT: u64 = 1 << 20;

/// When a raw run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this long (measured phase).
    Duration(Duration),
    /// After this many calls.
    Count(u64),
}

/// Which raw baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawKind {
    /// Echo round trips.
    PingPong,
    /// Server → client bulk stream.
    Stream,
}

/// Runs one raw TCP baseline point.
pub fn run(
    kind: RawKind,
    size: u64,
    depth: u32,
    stop: Stop,
    warmup: Duration,
) -> io::Result<Report> {
    let size = usize::try_from(size.max(1))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "size too large"))?;
    let depth = depth.max(1);
    if kind == RawKind::PingPong && size as u64 * depth as u64 > MAX_PINGPONG_IN_FLIGHT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "raw ping-pong: size × depth = {} exceeds {MAX_PINGPONG_IN_FLIGHT} octets in flight",
                size as u64 * depth as u64
            ),
        ));
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server =
        thread::Builder::new()
            .name("raw-tcp-server".into())
            .spawn(move || -> io::Result<()> {
                let (s, _) = listener.accept()?;
                s.set_nodelay(true)?;
                match kind {
                    RawKind::PingPong => echo_server(s, size),
                    RawKind::Stream => stream_server(s, size),
                }
            })?;
    let client = TcpStream::connect(addr)?;
    client.set_nodelay(true)?;
    let result = match kind {
        RawKind::PingPong => pingpong_client(&client, size, depth, stop, warmup),
        RawKind::Stream => stream_client(&client, size, stop, warmup),
    };
    let _ = client.shutdown(Shutdown::Both);
    drop(client);
    // The server ends with an error (reset / broken pipe) or EOF once the
    // client is gone; either is fine.
    let _ = server.join();
    let (calls, seconds, latency, cpu) = result?;
    let mut params = serde_json::Map::new();
    params.insert("nodelay".into(), json!(true));
    params.insert("server".into(), json!("in-process thread"));
    params.insert("cpu_includes_server".into(), json!(true));
    Ok(Report {
        proc: match kind {
            RawKind::PingPong => "pingpong",
            RawKind::Stream => "stream",
        }
        .into(),
        size: size as u64,
        depth: if kind == RawKind::Stream { 1 } else { depth },
        conns: 1,
        transport: "raw-tcp".into(),
        calls,
        errors: 0,
        first_error: None,
        seconds,
        latency,
        cpu,
        params,
        proc_stats: serde_json::Value::Null,
        proc_num: None,
        interrupted: false,
    })
}

fn echo_server(mut s: TcpStream, size: usize) -> io::Result<()> {
    let mut buf = vec![0u8; size];
    loop {
        match s.read_exact(&mut buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        s.write_all(&buf)?;
    }
}

fn stream_server(mut s: TcpStream, size: usize) -> io::Result<()> {
    let buf = vec![0x42u8; size];
    loop {
        s.write_all(&buf)?;
    }
}

type Measured = (u64, f64, Latency, CpuTimes);

/// One phase of a ping-pong: runs until `stop`, recording when `record`.
fn pingpong_client(
    s: &TcpStream,
    size: usize,
    depth: u32,
    stop: Stop,
    warmup: Duration,
) -> io::Result<Measured> {
    let mut w = s;
    let mut r = s;
    let out = vec![0x5au8; size];
    let mut inb = vec![0u8; size];
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(depth as usize);
    for _ in 0..depth {
        sent.push_back(Instant::now());
        w.write_all(&out)?;
    }
    // Warm-up: round trips not recorded.
    let warm_end = Instant::now() + warmup;
    while Instant::now() < warm_end {
        r.read_exact(&mut inb)?;
        sent.pop_front();
        sent.push_back(Instant::now());
        w.write_all(&out)?;
    }
    let mut lat = Latency::new();
    let cpu0 = CpuTimes::now();
    let t0 = Instant::now();
    let mut calls = 0u64;
    loop {
        match stop {
            Stop::Count(n) if calls >= n => break,
            Stop::Duration(d) if calls.is_multiple_of(64) && t0.elapsed() >= d => break,
            _ => {}
        }
        r.read_exact(&mut inb)?;
        let now = Instant::now();
        if let Some(t) = sent.pop_front() {
            lat.record(now - t);
        }
        calls += 1;
        sent.push_back(Instant::now());
        w.write_all(&out)?;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = CpuTimes::now().since(&cpu0);
    Ok((calls, seconds, lat, cpu))
}

fn stream_client(s: &TcpStream, size: usize, stop: Stop, warmup: Duration) -> io::Result<Measured> {
    let mut r = s;
    let mut inb = vec![0u8; size];
    let warm_end = Instant::now() + warmup;
    while Instant::now() < warm_end {
        r.read_exact(&mut inb)?;
    }
    let mut lat = Latency::new();
    let cpu0 = CpuTimes::now();
    let t0 = Instant::now();
    let mut calls = 0u64;
    let mut last = t0;
    loop {
        match stop {
            Stop::Count(n) if calls >= n => break,
            Stop::Duration(d) if last - t0 >= d => break,
            _ => {}
        }
        r.read_exact(&mut inb)?;
        let now = Instant::now();
        lat.record(now - last);
        last = now;
        calls += 1;
    }
    let seconds = (last - t0).as_secs_f64();
    let cpu = CpuTimes::now().since(&cpu0);
    Ok((calls, seconds, lat, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_counts_round_trips() {
        let r = run(RawKind::PingPong, 64, 4, Stop::Count(300), Duration::ZERO).unwrap();
        assert_eq!(r.calls, 300);
        assert_eq!(r.latency.count(), 300);
        assert_eq!(r.proc, "pingpong");
        assert_eq!(r.depth, 4);
        assert!(r.seconds > 0.0);
        assert!(r.latency.quantile_us(0.5) > 0.0);
    }

    #[test]
    fn stream_counts_blocks() {
        let r = run(RawKind::Stream, 65536, 1, Stop::Count(50), Duration::ZERO).unwrap();
        assert_eq!(r.calls, 50);
        assert_eq!(r.size, 65536);
        assert!(r.mb_per_sec() > 0.0);
    }

    #[test]
    fn pingpong_refuses_too_much_in_flight() {
        let e = run(
            RawKind::PingPong,
            1 << 20,
            2,
            Stop::Count(1),
            Duration::ZERO,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
