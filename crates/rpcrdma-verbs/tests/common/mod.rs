//! What the device tests of this crate share: the address of the RDMA
//! device to run on, or a loud SKIPPED.

use std::net::IpAddr;

use rpcrdma_verbs::devices;

/// The environment variable naming an address of an RDMA device.
pub const ENV: &str = "RPCRDMA_VERBS_ADDR";

/// The device address from [`ENV`], or `None` after printing why `what`
/// is SKIPPED (no device, or no address given).
pub fn device_addr(what: &str) -> Option<IpAddr> {
    if let Err(e) = devices() {
        eprintln!("SKIPPED: {what} not run: {e}");
        return None;
    }
    match std::env::var(ENV).ok().and_then(|a| a.parse().ok()) {
        Some(a) => Some(a),
        None => {
            eprintln!("SKIPPED: {what} not run: set {ENV} to an address of an RDMA device");
            None
        }
    }
}
