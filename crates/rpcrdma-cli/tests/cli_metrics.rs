//! Per-procedure statistics in the tool's output (`call --json`,
//! `bench --json`, `serve`'s summary) and `serve --metrics`, the
//! Prometheus endpoint, scraped over HTTP (loopback only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;
use common::BIN;

fn run_json_lines(args: &[&str]) -> Vec<Value> {
    let o = common::run_within(args, Duration::from_secs(60));
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// `GET /metrics` over HTTP/1.1: the body.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// The value of the first sample whose name and labels start with
/// `prefix` (labels in the order the endpoint prints them).
fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn serve_metrics_scraped_over_http_after_rdma_calls() {
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--duration",
            "120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn serve");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    line.clear();
    out.read_line(&mut line).unwrap();
    let metrics = line
        .trim()
        .strip_prefix("metrics on http://")
        .and_then(|l| l.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_string();

    // A WRITE (Read chunk) and two READs (Write chunks).
    let w = run_json_lines(&[
        "call", &addr, "--proc", "write", "--size", "100000", "--json",
    ]);
    let r = run_json_lines(&[
        "call", &addr, "--proc", "read", "--size", "4096", "--count", "2", "--json",
    ]);
    let ws = &w[0]["proc_stats"][0];
    assert_eq!(ws["proc"], 3, "{ws}");
    assert_eq!(ws["proc_name"], "write", "{ws}");
    assert_eq!(ws["transport"], "rdma", "{ws}");
    assert_eq!(ws["calls"], 1, "{ws}");
    assert_eq!(ws["bytes_sent"]["ddp"], 100000, "{ws}");
    assert_eq!(ws["errors_total"], 0, "{ws}");
    // The last line has every call so far.
    let rs = &r[1]["proc_stats"][0];
    assert_eq!(rs["proc"], 2, "{rs}");
    assert_eq!(rs["calls"], 2, "{rs}");
    assert_eq!(rs["bytes_received"]["ddp"], 8192, "{rs}");
    assert_eq!(rs["rtt_us"]["count"], 2, "{rs}");
    assert!(rs["rtt_us"]["p50"].as_f64().unwrap() > 0.0, "{rs}");
    assert_eq!(r[0]["proc_stats"][0]["calls"], 1, "{}", r[0]);

    let text = scrape(&metrics);
    let l = |proc: u32| {
        format!(
            "{{side=\"server\",program=\"{}\",version=\"1\",procedure=\"{proc}\",transport=\"rdma\"",
            0x2000_5244u32
        )
    };
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_calls_total{}", l(3))),
        1.0
    );
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_calls_total{}", l(2))),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "rpcrdma_rpc_bytes_total{},direction=\"received\",chunk=\"read\"}}",
                l(3)
            )
        ),
        100000.0
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "rpcrdma_rpc_bytes_total{},direction=\"sent\",chunk=\"write\"}}",
                l(2)
            )
        ),
        8192.0
    );
    assert_eq!(
        sample(&text, &format!("rpcrdma_rpc_execute_seconds_count{}", l(2))),
        2.0
    );
    assert!(
        sample(
            &text,
            "rpcrdma_transport_connections_total{transport=\"rdma\"}"
        ) >= 2.0
    );
    for gauge in [
        "rpcrdma_connections ",
        "rpcrdma_credits_in_use ",
        "rpcrdma_read_sink_bytes ",
        "rpcrdma_registrations ",
    ] {
        assert!(sample(&text, gauge) >= 0.0);
    }

    // SIGTERM: the summary, with the per-procedure statistics.
    let k = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let _ = child.wait();
    assert!(rest.contains("per-op statistics (server):"), "{rest}");
    assert!(
        rest.contains(
            "prog 0x20005244 vers 1 proc 2 read over rdma: 2 calls, 0 retransmits, 0 errors"
        ),
        "{rest}"
    );
}

#[test]
fn bench_json_has_the_clients_per_procedure_statistics() {
    let j = &run_json_lines(&[
        "bench",
        "127.0.0.1:0",
        "--transport",
        "rdma",
        "--proc",
        "echo",
        "--size",
        "1000",
        "--count",
        "50",
        "--json",
    ])[0];
    let p = &j["proc_stats"];
    assert_eq!(p.as_array().map(Vec::len), Some(1), "{j}");
    assert_eq!(p[0]["proc"], 1, "{j}");
    assert_eq!(p[0]["proc_name"], "echo", "{j}");
    let calls = p[0]["calls"].as_u64().unwrap();
    // Warm-up calls, if any, are counted too.
    assert!(calls >= 50, "{j}");
    assert_eq!(p[0]["rtt_us"]["count"].as_u64(), Some(calls), "{j}");
    // Each ECHO sends its header (40) and opaque<1000> (1004) inline.
    assert_eq!(
        p[0]["bytes_sent"]["inline"].as_u64(),
        Some(calls * 1044),
        "{j}"
    );
    assert_eq!(p[0]["errors_total"], 0, "{j}");
}
