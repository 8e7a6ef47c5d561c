//! What this process learned about servers' RPC-over-RDMA versions: the
//! addresses that showed they speak no version 2 (they refused a probe
//! with ERR_VERS, or a connection ended while its probe was unanswered),
//! so that the next connection to them from an `Auto` client starts in
//! version 1 instead of probing again (draft -09 §7.2). Within one
//! connection's life the engine does this by itself
//! (`Connection::reconnect`); this is the memory across transports.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use rpcrdma_proto::engine::{Config as EngineConfig, RpcRdmaVersion};

fn v1_only() -> &'static Mutex<HashSet<String>> {
    static SET: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SET.get_or_init(Default::default)
}

/// Remembers that `peer` (an address as `SocketAddr` displays it) speaks
/// no version 2. The set is bounded: past 4096 addresses it starts again.
pub fn remember_v1_only(peer: &str) {
    let mut s = v1_only().lock().unwrap_or_else(|p| p.into_inner());
    if s.len() >= 4096 {
        s.clear();
    }
    s.insert(peer.to_string());
}

/// True if `peer` was seen to speak no version 2.
pub fn is_v1_only(peer: &str) -> bool {
    v1_only()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(peer)
}

/// Forgets everything learned (e.g. after a server upgrade).
pub fn forget_all() {
    v1_only().lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// The engine settings for a new connection to `peer`: an `Auto` client
/// starts in version 1 when `peer` is remembered as version 1 only.
pub(crate) fn for_peer(mut engine: EngineConfig, peer: &str) -> EngineConfig {
    if engine.rpcrdma_version == RpcRdmaVersion::Auto && is_v1_only(peer) {
        engine.rpcrdma_version = RpcRdmaVersion::V1;
    }
    engine
}
