//! `rpcrdma bench` results: latency histogram, process CPU time, the report
//! (human text and JSON) and small parsing helpers.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

/// Latencies in nanoseconds, 1 ns .. 100 s, 3 significant digits.
#[derive(Clone, Debug)]
pub struct Latency {
    hist: Histogram<u64>,
}

/// Highest latency the histogram tracks (100 s); longer ones saturate.
const LATENCY_MAX_NS: u64 = 100_000_000_000;

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Self {
        Latency {
            hist: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns.clamp(1, LATENCY_MAX_NS));
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides: addition cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at quantile `q` (0..=1) in microseconds; 0 when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// Mean in microseconds; 0 when empty.
    pub fn mean_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.mean() / 1000.0
    }

    /// Largest sample in microseconds; 0 when empty.
    pub fn max_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.max() as f64 / 1000.0
    }
}

/// CPU time consumed by this process so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    /// User + system, in seconds (`CLOCK_PROCESS_CPUTIME_ID`, ns resolution).
    pub total: f64,
    /// User time in seconds (`/proc/self/stat` utime, clock-tick resolution).
    pub user: f64,
    /// System time in seconds (`/proc/self/stat` stime).
    pub sys: f64,
}

/// Clock ticks per second of `/proc/*/stat` (`sysconf(_SC_CLK_TCK)`, which is
/// 100 on every Linux architecture this tool builds for; reading it needs
/// libc, which this crate does not use).
const CLK_TCK: f64 = 100.0;

impl CpuTimes {
    /// The current process totals.
    pub fn now() -> Self {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let total = ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        let (user, sys) = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_proc_stat_times(&s))
            .map(|(u, s)| (u as f64 / CLK_TCK, s as f64 / CLK_TCK))
            .unwrap_or((0.0, 0.0));
        CpuTimes { total, user, sys }
    }

    /// `self - earlier`, clamped at zero.
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            total: (self.total - earlier.total).max(0.0),
            user: (self.user - earlier.user).max(0.0),
            sys: (self.sys - earlier.sys).max(0.0),
        }
    }
}

/// `(utime, stime)` in clock ticks from the text of `/proc/PID/stat`
/// (fields 14 and 15; the command name in field 2 may contain spaces and
/// parentheses, so fields are counted after the last `)`).
pub fn parse_proc_stat_times(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After ')' come field 3 (state) .. ; utime is field 14 → index 11.
    let utime = f.nth(11)?.parse().ok()?;
    let stime = f.next()?.parse().ok()?;
    Some((utime, stime))
}

/// The CPUs this process may run on (`Cpus_allowed_list` of
/// `/proc/self/status`, e.g. "0" under `taskset -c 0`).
pub fn cpus_allowed() -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// Everything one benchmark point measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// What ran: "null", "echo", "read", "write" (RPC) or "pingpong",
    /// "stream" (raw TCP); `proc_name` in JSON.
    pub proc: String,
    /// Payload octets per call.
    pub size: u64,
    /// Calls in flight per connection.
    pub depth: u32,
    /// Connections.
    pub conns: u32,
    /// "tcp", "rdma" or "raw-tcp".
    pub transport: String,
    /// Calls that completed successfully.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// The first error's text.
    pub first_error: Option<String>,
    /// Wall-clock length of the measured phase.
    pub seconds: f64,
    /// Latency of each successful call.
    pub latency: Latency,
    /// CPU time of this process during the measured phase.
    pub cpu: CpuTimes,
    /// Negotiated or configured transport parameters, where known.
    pub params: Map<String, Value>,
    /// The clients' per-procedure statistics of this point (warm-up
    /// included), `null` where not counted (raw TCP).
    pub proc_stats: Value,
    /// The test program's procedure number (None for raw TCP).
    pub proc_num: Option<u32>,
    /// The measured phase was cut short by SIGINT / SIGTERM.
    pub interrupted: bool,
}

impl Report {
    /// Successful calls per second.
    pub fn calls_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.calls as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Payload megabytes (10^6 octets) per second: `size` × calls/s.
    pub fn mb_per_sec(&self) -> f64 {
        self.calls_per_sec() * self.size as f64 / 1e6
    }

    /// CPU microseconds per successful call.
    pub fn cpu_us_per_call(&self) -> f64 {
        if self.calls > 0 {
            self.cpu.total * 1e6 / self.calls as f64
        } else {
            0.0
        }
    }

    /// Whether the point succeeded: calls made, none failed.
    pub fn ok(&self) -> bool {
        self.calls > 0 && self.errors == 0
    }

    /// The error object of a failed point (README, "Scripting").
    pub fn error_json(&self) -> Value {
        if self.ok() {
            return Value::Null;
        }
        let message = match &self.first_error {
            Some(e) => format!(
                "{} of {} calls failed; first: {e}",
                self.errors,
                self.calls + self.errors
            ),
            None => "no call completed".to_string(),
        };
        json!({"kind": "calls-failed", "op": "bench", "message": message})
    }

    /// The JSON object (`--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok(),
            "error": self.error_json(),
            "interrupted": self.interrupted,
            "proc": self.proc_num,
            "proc_name": self.proc,
            "size": self.size,
            "depth": self.depth,
            "conns": self.conns,
            "transport": self.transport,
            "calls": self.calls,
            "seconds": round(self.seconds, 6),
            "calls_per_sec": round(self.calls_per_sec(), 1),
            "mb_per_sec": round(self.mb_per_sec(), 3),
            "p50_us": round(self.latency.quantile_us(0.5), 3),
            "p99_us": round(self.latency.quantile_us(0.99), 3),
            "p999_us": round(self.latency.quantile_us(0.999), 3),
            "mean_us": round(self.latency.mean_us(), 3),
            "max_us": round(self.latency.max_us(), 3),
            "latency_samples": self.latency.count(),
            "cpu_seconds": round(self.cpu.total, 6),
            "cpu_user_seconds": round(self.cpu.user, 2),
            "cpu_sys_seconds": round(self.cpu.sys, 2),
            "cpu_us_per_call": round(self.cpu_us_per_call(), 3),
            "errors": self.errors,
            "first_error": self.first_error,
            "params": Value::Object(self.params.clone()),
            "proc_stats": self.proc_stats,
        })
    }

    /// The human-readable summary.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} {} size {} depth {} conns {}: {} calls in {:.3} s",
            self.transport,
            self.proc,
            fmt_size(self.size),
            self.depth,
            self.conns,
            self.calls,
            self.seconds
        );
        let _ = writeln!(
            s,
            "  {:.0} calls/s, {:.1} MB/s",
            self.calls_per_sec(),
            self.mb_per_sec()
        );
        let _ = writeln!(
            s,
            "  latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
            self.latency.quantile_us(0.5),
            self.latency.quantile_us(0.99),
            self.latency.quantile_us(0.999),
            self.latency.max_us()
        );
        let _ = writeln!(
            s,
            "  cpu {:.3} s (user {:.2} s, sys {:.2} s), {:.2} µs/call",
            self.cpu.total,
            self.cpu.user,
            self.cpu.sys,
            self.cpu_us_per_call()
        );
        if self.interrupted {
            let _ = writeln!(s, "  interrupted: the figures cover the time measured");
        }
        let _ = write!(s, "  errors {}", self.errors);
        if let Some(e) = &self.first_error {
            let _ = write!(s, " (first: {e})");
        }
        s.push('\n');
        if !self.params.is_empty() {
            let p: Vec<String> = self
                .params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(s, "  params {}", p.join(" "));
        }
        s
    }
}

fn round(x: f64, digits: i32) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

pub use rpcrdma::units::{fmt_size, parse_size, parse_size_list};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles() {
        let mut l = Latency::new();
        assert_eq!(l.quantile_us(0.5), 0.0);
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.count(), 1000);
        // 3 significant digits: within 0.1 %.
        let p50 = l.quantile_us(0.5);
        assert!((p50 - 500.0).abs() <= 0.5 + 500.0 * 1e-3, "p50 {p50}");
        let p99 = l.quantile_us(0.99);
        assert!((p99 - 990.0).abs() <= 1.0 + 990.0 * 1e-3, "p99 {p99}");
        let p999 = l.quantile_us(0.999);
        assert!((p999 - 999.0).abs() <= 1.0 + 999.0 * 1e-3, "p999 {p999}");
        assert!((l.max_us() - 1000.0).abs() <= 1.0, "max {}", l.max_us());
        assert!((l.mean_us() - 500.5).abs() <= 1.0, "mean {}", l.mean_us());
    }

    #[test]
    fn histogram_merge_and_saturation() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        a.record(Duration::from_micros(10));
        b.record(Duration::from_micros(20));
        b.record(Duration::from_secs(1000)); // saturates at 100 s
        b.record(Duration::ZERO); // clamps to 1 ns
        a.merge(&b);
        assert_eq!(a.count(), 4);
        assert!((a.max_us() - 100e6).abs() < 100e6 * 1e-3);
    }

    #[test]
    fn proc_stat_parsing() {
        // A command name with spaces and a ')' in it.
        let stat = "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 500 0 0 0 \
                    77 33 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_proc_stat_times(stat), Some((77, 33)));
        assert_eq!(parse_proc_stat_times("1 (x) S 1 2"), None);
        assert_eq!(parse_proc_stat_times("no paren"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_proc_stat_times(&own).is_some());
    }

    #[test]
    fn cpu_times_advance() {
        let a = CpuTimes::now();
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let d = CpuTimes::now().since(&a);
        assert!(d.total > 0.0, "cpu time did not advance ({x})");
        assert!(d.user >= 0.0 && d.sys >= 0.0);
    }

    fn sample() -> Report {
        let mut r = Report {
            proc: "echo".into(),
            size: 1000,
            depth: 4,
            conns: 2,
            transport: "tcp".into(),
            calls: 2000,
            errors: 1,
            first_error: Some("boom".into()),
            seconds: 2.0,
            cpu: CpuTimes {
                total: 0.5,
                user: 0.3,
                sys: 0.2,
            },
            ..Report::default()
        };
        for _ in 0..2000 {
            r.latency.record(Duration::from_micros(40));
        }
        r.params.insert("max_fragment".into(), json!(1048576));
        r
    }

    #[test]
    fn report_json_fields() {
        let j = sample().to_json();
        assert_eq!(j["calls"], 2000);
        assert_eq!(j["seconds"], 2.0);
        assert_eq!(j["calls_per_sec"], 1000.0);
        assert_eq!(j["mb_per_sec"], 1.0); // 1000 calls/s × 1000 octets
        let p50 = j["p50_us"].as_f64().unwrap();
        assert!((p50 - 40.0).abs() < 0.1, "{p50}");
        assert!(j["p99_us"].as_f64().unwrap() >= p50);
        assert!(j["p999_us"].as_f64().unwrap() >= j["p99_us"].as_f64().unwrap());
        assert_eq!(j["cpu_seconds"], 0.5);
        assert_eq!(j["cpu_us_per_call"], 250.0);
        assert_eq!(j["errors"], 1);
        assert_eq!(j["first_error"], "boom");
        assert_eq!(j["proc_name"], "echo");
        assert_eq!(j["size"], 1000);
        assert_eq!(j["depth"], 4);
        assert_eq!(j["conns"], 2);
        assert_eq!(j["transport"], "tcp");
        assert_eq!(j["params"]["max_fragment"], 1048576);
        // The text names the same figures.
        let t = sample().to_text();
        assert!(t.contains("1000 calls/s"), "{t}");
        assert!(t.contains("errors 1 (first: boom)"), "{t}");
    }

    #[test]
    fn empty_report_has_no_nan() {
        let j = Report::default().to_json();
        for k in ["calls_per_sec", "mb_per_sec", "p50_us", "cpu_us_per_call"] {
            assert_eq!(j[k], 0.0, "{k}");
        }
    }
}
