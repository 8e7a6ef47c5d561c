//! What the tool says when things go wrong around it (issue 15 items 3-5):
//! the wrong kind of server, logging, and interrupted runs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{json_lines, BIN};

fn run(args: &[&str]) -> std::process::Output {
    common::run_within(args, Duration::from_secs(60))
}

/// Item 3: an HTTP server answers our MPA Request with an HTTP error; a
/// plain TCP RPC server closes the connection. Both are said in words,
/// at once, as a failed connection (exit 1), without enum names.
#[test]
fn wrong_kind_of_server() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let http = l.local_addr().unwrap().to_string();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 64];
        let _ = s.read(&mut b);
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    });
    let t0 = Instant::now();
    let o = run(&["call", &http, "--json"]);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let e = &json_lines(&o)[0]["error"];
    assert_eq!(e["kind"], "connect", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("not an MPA Reply") && m.contains("looks like HTTP") && m.contains("400"),
        "{m}"
    );
    t.join().unwrap();

    // Our own ONC RPC over TCP server.
    let mut srv = Command::new(BIN)
        .args([
            "bench",
            "127.0.0.1:0",
            "--serve",
            "--transport",
            "tcp",
            "--serve-seconds",
            "30",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(srv.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let o = run(&["call", &addr]);
    let _ = srv.kill();
    let _ = srv.wait();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("try --transport tcp"), "{err}");
    for raw in ["TransportLost", "Error {", "Rejected {", "Status::"] {
        assert!(!err.contains(raw), "{raw} in {err}");
    }
}
