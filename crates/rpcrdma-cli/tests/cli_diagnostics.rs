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

/// Sends `sig` (`INT`, `TERM`) to `pid`.
fn kill(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .expect("kill(1)");
    assert!(st.success());
}

/// Waits (bounded) for the child to end; its stdout.
fn finish(mut c: std::process::Child, limit: Duration) -> (Option<i32>, String) {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let mut out = String::new();
            c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            return (st.code(), out);
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("did not end within {limit:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of the child's standard error, as they come (a reader thread).
fn stderr_lines(c: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let err = c.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Item 5: `serve` without `--duration` ends on SIGINT and on SIGTERM
/// with its summary.
#[test]
fn serve_prints_its_summary_on_sigint_and_sigterm() {
    for sig in ["INT", "TERM"] {
        let mut c = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string();
        let o = run(&["call", &addr, "--proc", "echo", "--size", "100"]);
        assert!(o.status.success(), "{o:?}");
        kill(c.id(), sig);
        c.stdout = Some(out.into_inner());
        let (code, text) = finish(c, Duration::from_secs(10));
        assert_eq!(code, Some(0), "{sig}: {text}");
        assert!(text.contains("served 1 calls"), "{sig}: {text}");
    }
}

/// Item 5: an interrupted `bench` reports what it measured; `--progress`
/// prints one line per second on a piped standard error.
#[test]
fn interrupted_bench_reports_what_was_measured() {
    let mut c = Command::new(BIN)
        .args(["bench", "--duration", "60", "--progress", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut c);
    let mut progress = 0;
    while progress < 2 {
        let l = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a progress line within 20 s");
        if l.contains("calls/s") {
            assert!(!l.contains('\r'), "one line per tick when piped: {l:?}");
            progress += 1;
        }
    }
    kill(c.id(), "INT");
    let (code, text) = finish(c, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{text}");
    let j: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(j["interrupted"], true, "{j}");
    assert_eq!(j["ok"], true, "{j}");
    assert!(j["calls"].as_u64().unwrap() > 0, "{j}");
    let secs = j["seconds"].as_f64().unwrap();
    assert!((1.5..30.0).contains(&secs), "{j}");
}

/// Item 5: an interrupted `--sweep --chart` writes the chart of the points
/// measured (the interrupted one included) and prints them.
#[test]
fn interrupted_sweep_writes_its_chart() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let chart = dir.join("sweep.svg");
    let _ = std::fs::remove_file(&chart);
    let mut c = Command::new(BIN)
        .args([
            "bench",
            "--proc",
            "read",
            "--sweep",
            "1K,4K,64K",
            "--duration",
            "60",
        ])
        .args(["--progress", "--json", "--chart"])
        .arg(&chart)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut c);
    loop {
        let l = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a progress line within 20 s");
        if l.contains("calls/s") {
            break;
        }
    }
    kill(c.id(), "TERM");
    let (code, text) = finish(c, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{text}");
    let j: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let points = j["sweep"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{j}");
    assert_eq!(points[0]["interrupted"], true);
    assert_eq!(points[0]["size"], 1024);
    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{svg:.80}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `serve --duration 2 EXTRA` with `env`, lets `client` talk to it;
/// its standard output and standard error.
fn serve_log(extra: &[&str], env: &[(&str, &str)], client: impl FnOnce(&str)) -> (String, String) {
    let mut c = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--duration", "2"])
        .args(extra)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    client(line.trim().strip_prefix("listening on ").unwrap());
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(c.wait().unwrap().success());
    (line + &rest, err)
}

/// Item 4: `serve` logs each connection at info (peer, version, MPA
/// revision, CRC, thresholds, credits) and its end (reason, calls served),
/// a peer error as a warning with the answer it got; `-q` silences info,
/// `RUST_LOG` decides when set; client spans carry the XID; logs never
/// reach standard output.
#[test]
fn logging_of_connections_peer_errors_and_calls() {
    let (out, err) = serve_log(&["--crc"], &[], |addr| {
        let o = run(&[
            "call", addr, "--crc", "--proc", "echo", "--size", "10", "--json",
        ]);
        assert!(o.status.success(), "{o:?}");
        // Not an MPA Request: a peer error.
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let _ = s.read(&mut [0u8; 64]);
    });
    assert!(
        out.starts_with("listening on") && !out.contains("INFO"),
        "{out}"
    );
    let est = err
        .lines()
        .find(|l| l.contains("connection established"))
        .unwrap_or_else(|| panic!("{err}"));
    for f in [
        "INFO",
        "peer=127.0.0.1:",
        "version=2",
        "mpa_rev=2",
        "crc=true",
        "inline_send=4096",
        "inline_recv=4096",
        "credits_granted=64",
    ] {
        assert!(est.contains(f), "{f} missing: {est}");
    }
    let end = err
        .lines()
        .find(|l| l.contains("connection ended"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        end.contains("calls_served=1")
            && end.contains("reason=")
            && end.contains("peer=127.0.0.1:"),
        "{end}"
    );
    let bad = err
        .lines()
        .find(|l| l.contains("not a valid connection request"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(bad.contains("WARN") && bad.contains("answer="), "{bad}");

    // -q: warnings and errors only.
    let (_, err) = serve_log(&["-q"], &[], |addr| {
        assert!(run(&["call", addr]).status.success());
    });
    assert!(!err.contains("INFO"), "{err}");
    // RUST_LOG decides over the default.
    let (_, err) = serve_log(&[], &[("RUST_LOG", "error")], |addr| {
        assert!(run(&["call", addr]).status.success());
    });
    assert!(!err.contains("connection established"), "{err}");
    // A client at -vv: debug events inside the call's span, with its XID;
    // the JSON on standard output is untouched.
    let (_, _) = serve_log(&[], &[], |addr| {
        let o = run(&["call", addr, "-vv", "--json"]);
        assert!(o.status.success(), "{o:?}");
        let v = &json_lines(&o)[0];
        let xid = v["xid"].as_u64().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("DEBUG"), "{err}");
        assert!(
            err.contains(&format!("xid={xid}")),
            "xid {xid} not in a span: {err}"
        );
    });
}
