//! A Prometheus text endpoint (exposition format 0.0.4, encoded by the
//! `prometheus-client` crate) for the runtime's counters: the
//! per-procedure [`ProcStats`] of clients and servers, the transport
//! [`Metrics`], and gauges read on each scrape (an RPC-over-RDMA server's
//! [`crate::rdma::RdmaServer::gauges`]).
//!
//! Nothing here is on a call's path: a scrape copies the counters.
//!
//! Metric names (every per-procedure one labelled `side` (`client` or
//! `server`), `program`, `version`, `procedure`, `transport`):
//!
//! | name | type | what |
//! |---|---|---|
//! | `rpcrdma_rpc_calls_total` | counter | calls completed |
//! | `rpcrdma_rpc_retransmissions_total` | counter | retransmissions (client) |
//! | `rpcrdma_rpc_errors_total` | counter | failed calls, label `kind` |
//! | `rpcrdma_rpc_bytes_total` | counter | octets, labels `direction` (`sent`, `received`) and `chunk` (`inline`; over RDMA `read` or `write` for DDP-eligible octets) |
//! | `rpcrdma_rpc_rtt_seconds` | histogram | client round-trip time |
//! | `rpcrdma_rpc_execute_seconds` | histogram | server execution time |
//! | `rpcrdma_transport_<counter>_total` | counter | each [`Metrics`] counter, label `transport` |
//! | `rpcrdma_<gauge>` | gauge | each gauge given ([`Exporter::gauges`]) |
//!
//! [`MetricsServer`] serves it over HTTP (`GET /metrics`), bounded: a few
//! connections at once, a small request, a short deadline.

use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::stats::{ErrorKind, HistogramSnapshot, ProcStats, Side, HIST_BUCKETS, OVERFLOW_PROC};

/// `(name, help, value)` of one gauge.
pub type Gauge = (&'static str, &'static str, u64);

type GaugeFn = Arc<dyn Fn() -> Vec<Gauge> + Send + Sync>;

/// What a scrape reports (see the [module documentation](self)).
#[derive(Default, Clone)]
pub struct Exporter {
    procs: Vec<Arc<ProcStats>>,
    transports: Vec<(&'static str, Arc<Metrics>)>,
    gauges: Vec<GaugeFn>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("procs", &self.procs.len())
            .field("transports", &self.transports.len())
            .field("gauges", &self.gauges.len())
            .finish()
    }
}

impl Exporter {
    /// Nothing to report yet.
    pub fn new() -> Self {
        Exporter::default()
    }

    /// Reports a client's or server's per-procedure statistics.
    pub fn procs(mut self, stats: Arc<ProcStats>) -> Self {
        self.procs.push(stats);
        self
    }

    /// Reports a transport's counters, labelled `transport`.
    pub fn transport(mut self, transport: &'static str, metrics: Arc<Metrics>) -> Self {
        self.transports.push((transport, metrics));
        self
    }

    /// Reports the gauges `read` returns on each scrape.
    pub fn gauges(mut self, read: impl Fn() -> Vec<Gauge> + Send + Sync + 'static) -> Self {
        self.gauges.push(Arc::new(read));
        self
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Scrape(self.clone())));
        let mut out = String::new();
        // Writing into a String does not fail; an encoder error would be
        // a bug of ours (an invalid name), reported in the text.
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
            out.push_str(&format!("# encoding error: {e}\n"));
        }
        out
    }
}

/// The collector of one scrape.
#[derive(Clone)]
struct Scrape(Exporter);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

type Labels = Vec<(&'static str, Cow<'static, str>)>;

/// One metric family: its samples, with their labels.
struct Family<T> {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Labels, T)>,
}

impl<T> Family<T> {
    fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }
}

fn encode_counters(e: &mut DescriptorEncoder, f: &Family<u64>) -> Result<(), std::fmt::Error> {
    if f.samples.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(f.name, f.help, None, MetricType::Counter)?;
    for (labels, v) in &f.samples {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn encode_histograms(
    e: &mut DescriptorEncoder,
    f: &Family<HistogramSnapshot>,
) -> Result<(), std::fmt::Error> {
    if f.samples.is_empty() {
        return Ok(());
    }
    let mut m = e.encode_descriptor(f.name, f.help, None, MetricType::Histogram)?;
    for (labels, h) in &f.samples {
        // Per-bucket counts: the encoder makes them cumulative.
        let buckets: Vec<(f64, u64)> = (0..HIST_BUCKETS)
            .map(|i| {
                let le = HistogramSnapshot::upper_ns(i).map_or(f64::INFINITY, |ns| ns as f64 / 1e9);
                (le, h.buckets[i])
            })
            .collect();
        m.encode_family(labels)?.encode_histogram::<Labels>(
            h.sum_ns as f64 / 1e9,
            h.count(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut calls = Family::new("rpcrdma_rpc_calls", "RPC calls completed");
        let mut retrans = Family::new(
            "rpcrdma_rpc_retransmissions",
            "RPC call retransmissions (same XID)",
        );
        let mut errors = Family::new("rpcrdma_rpc_errors", "RPC calls failed, by kind");
        let mut bytes = Family::new(
            "rpcrdma_rpc_bytes",
            "RPC message octets, inline or DDP-eligible by chunk type",
        );
        let mut rtt = Family::new(
            "rpcrdma_rpc_rtt_seconds",
            "Client round-trip time (first transmission to reply)",
        );
        let mut exec = Family::new(
            "rpcrdma_rpc_execute_seconds",
            "Server execution time (decoded call to reply handed to the transport)",
        );
        for table in &self.0.procs {
            let side = table.side();
            for (k, s) in table.snapshot() {
                let proc: Cow<'static, str> = if k.proc == OVERFLOW_PROC && k.prog == 0 {
                    "other".into()
                } else {
                    k.proc.to_string().into()
                };
                let labels: Labels = vec![
                    ("side", side.name().into()),
                    ("program", k.prog.to_string().into()),
                    ("version", k.vers.to_string().into()),
                    ("procedure", proc),
                    ("transport", k.transport.into()),
                ];
                calls.samples.push((labels.clone(), s.calls));
                if side == Side::Client {
                    retrans.samples.push((labels.clone(), s.retransmits));
                }
                for (kind, n) in ErrorKind::ALL.iter().zip(s.errors) {
                    if n > 0 {
                        let mut l = labels.clone();
                        l.push(("kind", kind.name().into()));
                        errors.samples.push((l, n));
                    }
                }
                let rdma = k.transport.starts_with("rdma");
                // The chunk type DDP-eligible octets travel in: a call's in
                // a Read chunk, a reply's in a Write chunk.
                let (sent_chunk, recv_chunk) = match (rdma, side) {
                    (false, _) => ("inline", "inline"),
                    (true, Side::Client) => ("read", "write"),
                    (true, Side::Server) => ("write", "read"),
                };
                for (dir, chunk, n) in [
                    ("sent", "inline", s.sent.inline),
                    ("sent", sent_chunk, s.sent.ddp),
                    ("received", "inline", s.received.inline),
                    ("received", recv_chunk, s.received.ddp),
                ] {
                    let mut l = labels.clone();
                    l.push(("direction", dir.into()));
                    l.push(("chunk", chunk.into()));
                    match bytes.samples.iter_mut().find(|(x, _)| *x == l) {
                        Some((_, v)) => *v += n,
                        None => bytes.samples.push((l, n)),
                    }
                }
                match side {
                    Side::Client => rtt.samples.push((labels, s.time)),
                    Side::Server => exec.samples.push((labels, s.time)),
                }
            }
        }
        for f in [&calls, &retrans, &errors, &bytes] {
            encode_counters(&mut e, f)?;
        }
        encode_histograms(&mut e, &rtt)?;
        encode_histograms(&mut e, &exec)?;
        self.encode_transports(&mut e)?;
        for read in &self.0.gauges {
            for (name, help, v) in read() {
                let full = format!("rpcrdma_{name}");
                let m = e.encode_descriptor(&full, help, None, MetricType::Gauge)?;
                ConstGauge::new(v as i64).encode(m)?;
            }
        }
        Ok(())
    }
}

impl Scrape {
    fn encode_transports(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((_, first)) = self.0.transports.first() else {
            return Ok(());
        };
        let names: Vec<&'static str> = first.snapshot().fields().iter().map(|f| f.0).collect();
        let snaps: Vec<_> = self
            .0
            .transports
            .iter()
            .map(|(t, m)| (*t, m.snapshot().fields()))
            .collect();
        for (i, name) in names.iter().enumerate() {
            let full = format!("rpcrdma_transport_{name}");
            let mut m = e.encode_descriptor(
                &full,
                "Transport counter (see rpcrdma::metrics::Metrics)",
                None,
                MetricType::Counter,
            )?;
            for (t, fields) in &snaps {
                let labels: Labels = vec![("transport", (*t).into())];
                ConstCounter::new(fields[i].1).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// The largest request a scrape may send (request line and headers).
const MAX_REQUEST: usize = 8192;
/// Scrapes served at once; more wait in the listener's backlog.
const MAX_SCRAPES: usize = 4;
/// How long a scrape may take to send its request and read the answer.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(5);

/// An HTTP endpoint serving [`Exporter::render`] at `GET /metrics` (and
/// `/`). Stops when dropped or shut down.
#[derive(Debug)]
pub struct MetricsServer {
    local: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// Listens on `addr` (in a tokio runtime).
    pub async fn bind(addr: impl ToSocketAddrs, exporter: Exporter) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let exporter = Arc::new(exporter);
        let task = tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let exporter = exporter.clone();
                tokio::spawn(async move {
                    let r = tokio::time::timeout(SCRAPE_DEADLINE, scrape(stream, &exporter)).await;
                    if !matches!(r, Ok(Ok(()))) {
                        tracing::debug!(%peer, "metrics scrape failed or timed out");
                    }
                    drop(permit);
                });
            }
        });
        Ok(MetricsServer { local, task })
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops listening.
    pub fn shutdown(&self) {
        self.task.abort();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one HTTP/1.x request and closes the connection.
async fn scrape(mut s: TcpStream, exporter: &Exporter) -> io::Result<()> {
    let mut req = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        if req.len() >= MAX_REQUEST {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
        }
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = req.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics" | b"/") => {
            let body = exporter.render();
            respond(
                &mut s,
                "200 OK",
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                &body,
            )
            .await
        }
        (b"GET", _) => respond(&mut s, "404 Not Found", "text/plain", "try /metrics\n").await,
        _ => respond(&mut s, "405 Method Not Allowed", "text/plain", "").await,
    }
}

async fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    s.shutdown().await
}
