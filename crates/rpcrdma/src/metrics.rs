//! Counters shared by a transport and the client or server on top of it.
//!
//! Every counter is a relaxed `AtomicU64`; [`Metrics::snapshot`] copies them
//! into a plain [`MetricsSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! metrics {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Live counters (cheap to update from any task).
        #[derive(Debug, Default)]
        pub struct Metrics {
            $( $(#[$m])* pub $name: AtomicU64, )*
        }

        /// A copy of [`Metrics`] at one moment.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct MetricsSnapshot {
            $( $(#[$m])* pub $name: u64, )*
        }

        impl Metrics {
            /// Copies every counter.
            pub fn snapshot(&self) -> MetricsSnapshot {
                MetricsSnapshot {
                    $( $name: self.$name.load(Ordering::Relaxed), )*
                }
            }
        }

        impl MetricsSnapshot {
            /// `(name, value)` for every counter, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}

metrics! {
    /// Calls sent (client side; retransmissions included).
    calls_sent,
    /// Retransmissions (a call sent again with the same XID).
    retransmits,
    /// Replies received and matched to an outstanding call.
    replies_received,
    /// Replies received for no outstanding XID (dropped).
    replies_unmatched,
    /// Calls that ended in a timeout.
    timeouts,
    /// Calls received (server side).
    calls_received,
    /// Replies sent (server side; duplicate-cache replays included).
    replies_sent,
    /// Retransmitted calls answered from the duplicate-reply cache.
    drc_hits,
    /// Retransmitted calls dropped because the original is still executing.
    drc_in_progress,
    /// Received messages dropped because their RPC header did not decode.
    garbage_messages,
    /// Calls received from a peer on a transport without a backchannel.
    backchannel_unsupported,
    /// Replies (sent or received) with PROG_UNAVAIL.
    err_prog_unavail,
    /// Replies with PROG_MISMATCH.
    err_prog_mismatch,
    /// Replies with PROC_UNAVAIL.
    err_proc_unavail,
    /// Replies with GARBAGE_ARGS.
    err_garbage_args,
    /// Replies with SYSTEM_ERR.
    err_system_err,
    /// Replies with RPC_MISMATCH.
    err_rpc_mismatch,
    /// Replies with AUTH_ERROR.
    err_auth_error,
    /// Replies with another accept_stat.
    err_other,
    /// Connections lost or closed because of an error.
    transport_errors,
    /// Connections accepted or established.
    connections,
    /// Connections closed at once because of `max_connections` (RDMA:
    /// with an MPA Reject).
    connections_refused,
    /// RDMA: connections rejected (MPA Reject) because their source
    /// address had `max_connections_per_source` already.
    connections_refused_per_source,
    /// RDMA: new connections closed because no complete MPA Request came
    /// within the deadline.
    handshakes_timed_out,
    /// RDMA: new connections without an MPA Request yet, closed to make
    /// room for a newer one from the same source address (per-source cap).
    handshakes_evicted_per_source,
    /// RDMA: the same, closed for a newer one from anywhere (overall cap).
    handshakes_evicted_overall,
    /// RDMA: new connections closed because their MPA Request was invalid
    /// or asked for what we refuse (e.g. Markers).
    handshakes_invalid,
    /// RDMA: new connections whose peer closed (or whose socket failed)
    /// before a complete MPA Request.
    handshakes_abandoned,
    /// RDMA: connections that settled on RPC-over-RDMA version 1.
    rpcrdma_v1_connections,
    /// RDMA: connections that settled on RPC-over-RDMA version 2.
    rpcrdma_v2_connections,
    /// RDMA: connections whose version 2 probe the server refused
    /// (ERR_VERS), gone on in version 1.
    version_fallbacks,
    /// Octets sent (record marks included).
    bytes_sent,
    /// Octets received (record marks included).
    bytes_received,
}

impl Metrics {
    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds 1 to a counter.
    #[inline]
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_copies_counters() {
        let m = Metrics::default();
        Metrics::inc(&m.calls_sent);
        Metrics::add(&m.bytes_sent, 40);
        let s = m.snapshot();
        assert_eq!(s.calls_sent, 1);
        assert_eq!(s.bytes_sent, 40);
        assert_eq!(s.replies_sent, 0);
        assert!(s.fields().contains(&("bytes_sent", 40)));
    }
}
