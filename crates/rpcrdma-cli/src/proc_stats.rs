//! The per-procedure statistics of a client or server
//! (`rpcrdma::stats::ProcStats`) as JSON (`call --json`, `bench --json`)
//! and as text in the spirit of `mountstats` (`serve`'s summary).

use std::fmt::Write;

use rpcrdma::stats::{HistogramSnapshot, ProcCountersSnapshot, ProcKey, ProcStats, Side};
use rpcrdma::testprog;
use serde_json::{json, Map, Value};

/// The name of a procedure this tool knows (the test program's), or
/// `None`.
pub fn proc_name(prog: u32, proc: u32) -> Option<&'static str> {
    match (prog, proc) {
        (testprog::TEST_PROG, testprog::PROC_NULL) => Some("null"),
        (testprog::TEST_PROG, testprog::PROC_ECHO) => Some("echo"),
        (testprog::TEST_PROG, testprog::PROC_READ) => Some("read"),
        (testprog::TEST_PROG, testprog::PROC_WRITE) => Some("write"),
        _ => None,
    }
}

/// The latency field's name: `rtt_us` (client) or `execute_us` (server).
fn time_field(side: Side) -> &'static str {
    match side {
        Side::Client => "rtt_us",
        Side::Server => "execute_us",
    }
}

fn us(ns: Option<u64>) -> Value {
    ns.map_or(Value::Null, |ns| {
        json!((ns as f64 / 1e3 * 1e3).round() / 1e3)
    })
}

/// A histogram as `{count, mean, p50, p90, p99, p999}` in microseconds
/// (quantiles interpolated in power-of-two buckets: within a factor of 2).
pub fn histogram_json(h: &HistogramSnapshot) -> Value {
    let n = h.count();
    json!({
        "count": n,
        "mean": us((n > 0).then(|| h.mean_ns())),
        "p50": us(h.quantile_ns(0.5)),
        "p90": us(h.quantile_ns(0.9)),
        "p99": us(h.quantile_ns(0.99)),
        "p999": us(h.quantile_ns(0.999)),
    })
}

/// One entry as JSON.
pub fn entry_json(side: Side, k: &ProcKey, s: &ProcCountersSnapshot) -> Value {
    let errors: Map<String, Value> = s
        .errors_by_kind()
        .map(|(kind, n)| (kind.name().to_string(), json!(n)))
        .collect();
    let mut o = json!({
        "prog": k.prog,
        "vers": k.vers,
        "proc": k.proc,
        "proc_name": proc_name(k.prog, k.proc),
        "transport": k.transport,
        "calls": s.calls,
        "retransmits": s.retransmits,
        "errors_total": s.errors_total(),
        "errors": errors,
        "bytes_sent": {"inline": s.sent.inline, "ddp": s.sent.ddp},
        "bytes_received": {"inline": s.received.inline, "ddp": s.received.ddp},
    });
    o[time_field(side)] = histogram_json(&s.time);
    o
}

/// Every entry of `stats` as a JSON array, in key order.
pub fn to_json(stats: &ProcStats) -> Value {
    let side = stats.side();
    Value::Array(
        stats
            .snapshot()
            .iter()
            .map(|(k, s)| entry_json(side, k, s))
            .collect(),
    )
}

/// The entries of `stats` counted since `before` (an earlier
/// [`ProcStats::snapshot`] of the same table) as a JSON array; entries
/// without a call since are left out.
pub fn since_json(stats: &ProcStats, before: &[(ProcKey, ProcCountersSnapshot)]) -> Value {
    let side = stats.side();
    Value::Array(
        stats
            .snapshot()
            .iter()
            .filter_map(|(k, s)| {
                let d = match before.iter().find(|(b, _)| b == k) {
                    Some((_, b)) => s.since(b),
                    None => *s,
                };
                (d.calls > 0 || d.retransmits > 0).then(|| entry_json(side, k, &d))
            })
            .collect(),
    )
}

fn fmt_us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |ns| format!("{:.1}", ns as f64 / 1e3))
}

/// The `mountstats`-like text: a header line, then two lines per entry.
pub fn to_text(stats: &ProcStats) -> String {
    let side = stats.side();
    let mut out = String::new();
    let snap = stats.snapshot();
    let _ = writeln!(out, "per-op statistics ({}):", side.name());
    if snap.is_empty() {
        let _ = writeln!(out, "  (no calls)");
    }
    let what = match side {
        Side::Client => "rtt",
        Side::Server => "execute",
    };
    for (k, s) in &snap {
        let name = proc_name(k.prog, k.proc).map_or(String::new(), |n| format!(" {n}"));
        let errors: Vec<String> = s
            .errors_by_kind()
            .map(|(kind, n)| format!("{}={n}", kind.name()))
            .collect();
        let _ = writeln!(
            out,
            "  prog 0x{:x} vers {} proc {}{name} over {}: {} calls, {} retransmits, {} errors{}",
            k.prog,
            k.vers,
            k.proc,
            k.transport,
            s.calls,
            s.retransmits,
            s.errors_total(),
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({})", errors.join(" "))
            }
        );
        let h = &s.time;
        let _ = writeln!(
            out,
            "    sent {} inline + {} ddp octets, received {} inline + {} ddp; {what} us: \
             mean {} p50 {} p90 {} p99 {}",
            s.sent.inline,
            s.sent.ddp,
            s.received.inline,
            s.received.ddp,
            fmt_us((h.count() > 0).then(|| h.mean_ns())),
            fmt_us(h.quantile_ns(0.5)),
            fmt_us(h.quantile_ns(0.9)),
            fmt_us(h.quantile_ns(0.99)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma::stats::{ErrorKind, Octets};
    use std::time::Duration;

    #[test]
    fn json_and_text_of_a_table() {
        let t = ProcStats::new(Side::Client);
        let key = ProcKey {
            prog: testprog::TEST_PROG,
            vers: 1,
            proc: testprog::PROC_READ,
            transport: "rdma",
        };
        let e = t.entry(key);
        e.record(
            None,
            Duration::from_micros(3),
            Octets { inline: 48, ddp: 0 },
            Octets {
                inline: 28,
                ddp: 4096,
            },
        );
        e.record(
            Some(ErrorKind::Timeout),
            Duration::from_micros(3),
            Octets { inline: 48, ddp: 0 },
            Octets::default(),
        );
        e.retransmit();
        let v = to_json(&t);
        let o = &v[0];
        assert_eq!(o["proc"], 2);
        assert_eq!(o["proc_name"], "read");
        assert_eq!(o["calls"], 2);
        assert_eq!(o["retransmits"], 1);
        assert_eq!(o["errors"]["timeout"], 1);
        assert_eq!(o["errors_total"], 1);
        assert_eq!(o["bytes_received"]["ddp"], 4096);
        assert_eq!(o["bytes_sent"]["inline"], 96);
        assert_eq!(o["rtt_us"]["count"], 2);
        // Both 3 µs durations are in the bucket [2.048, 4.096) µs, taken
        // at the middles of their halves: the first at 2.56 µs.
        assert_eq!(o["rtt_us"]["p50"], 2.56);
        assert_eq!(o["rtt_us"]["mean"], 3.0);
        let text = to_text(&t);
        assert!(
            text.contains("proc 2 read over rdma: 2 calls, 1 retransmits, 1 errors (timeout=1)"),
            "{text}"
        );
        assert!(text.contains("received 28 inline + 4096 ddp"), "{text}");
    }
}
