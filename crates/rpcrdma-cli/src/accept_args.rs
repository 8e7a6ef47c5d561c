//! `rpcrdma serve`'s limits on new and established connections (see
//! `rpcrdma::rdma::provider::IwarpCm::accept` and
//! `rpcrdma::rdma::RdmaServerConfig::{max_connections,
//! max_connections_per_source}`); the defaults shown are the library's.

use std::time::Duration;

use clap::Args;
use rpcrdma::rdma::provider::AcceptLimits;
use rpcrdma::rdma::RdmaServerConfig;

fn defaults() -> (AcceptLimits, RdmaServerConfig) {
    (AcceptLimits::default(), RdmaServerConfig::default())
}

fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s}: {e}"))?;
    match Duration::try_from_secs_f64(v) {
        Ok(d) if !d.is_zero() => Ok(v),
        _ => Err(format!("{s}: not a positive number of seconds")),
    }
}

/// Connection limits of a server.
#[derive(Args, Debug, Clone)]
pub struct AcceptArgs {
    /// Seconds a new TCP connection has to send its MPA Request before it
    /// is closed.
    #[arg(long, value_name = "SECONDS", value_parser = seconds,
          default_value_t = defaults().0.request_timeout.as_secs_f64())]
    pub mpa_timeout: f64,
    /// Most new connections waiting for their MPA Request, in all (one
    /// more closes the oldest).
    #[arg(long, value_name = "N", default_value_t = defaults().0.max_pending)]
    pub max_pending: usize,
    /// Most new connections waiting for their MPA Request from one source
    /// address (one more closes that address's oldest).
    #[arg(long, value_name = "N", default_value_t = defaults().0.max_pending_per_source)]
    pub max_pending_per_source: usize,
    /// Most connections at once; more get an MPA Reject.
    #[arg(long, value_name = "N", default_value_t = defaults().1.max_connections)]
    pub max_conns: usize,
    /// Most connections at once from one source address; more get an MPA
    /// Reject (raise it for load generators on one host).
    #[arg(long, value_name = "N", default_value_t = defaults().1.max_connections_per_source)]
    pub max_conns_per_source: usize,
}

impl AcceptArgs {
    /// `config` with these limits (the MPA ones apply to an iWARP
    /// provider).
    pub fn apply(&self, mut config: RdmaServerConfig) -> RdmaServerConfig {
        if let Some(cm) = config.provider.iwarp_mut() {
            cm.accept = AcceptLimits {
                // Checked by the parser.
                request_timeout: Duration::try_from_secs_f64(self.mpa_timeout)
                    .unwrap_or(cm.accept.request_timeout),
                max_pending: self.max_pending,
                max_pending_per_source: self.max_pending_per_source,
            };
        }
        RdmaServerConfig {
            max_connections: self.max_conns,
            max_connections_per_source: self.max_conns_per_source,
            ..config
        }
    }
}
