//! Version 2 error reports that a call can recover from by being sent
//! again, with the same XID, in another form (draft -09 §5.3.3).

use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::RdmaErrorReport;
use crate::provider::Provider;

impl Connection {
    /// An RDMA2_ERROR for our call `xid` that asks for another form of
    /// the call: true if the call was sent again (the error is consumed).
    pub(in crate::engine) fn retry_after_error(
        &mut self,
        _now: Instant,
        _p: &mut dyn Provider,
        _xid: u32,
        _error: &RdmaErrorReport,
    ) -> bool {
        false
    }
}
