//! Work completion statuses (`enum ibv_wc_status`) mapped to the
//! contract's [`Status`] classes, whose [`Status::blame`] says who failed.

use libc::c_int;
use rpcrdma_proto::provider::Status;

use crate::sys::*;

/// The contract's class of a verbs completion status. Statuses an RC
/// queue pair does not produce (EE contexts, tag matching) and unknown
/// future values are `LocalOperation`: a failure of this end's QP, fatal
/// for the connection, never mistaken for the peer's.
pub fn status_class(wc_status: c_int) -> Status {
    match wc_status {
        IBV_WC_SUCCESS => Status::Success,
        IBV_WC_WR_FLUSH_ERR => Status::Flushed,
        IBV_WC_LOC_LEN_ERR => Status::LocalLength,
        IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_ACCESS_ERR | IBV_WC_MW_BIND_ERR => Status::LocalProtection,
        IBV_WC_REM_ACCESS_ERR => Status::RemoteAccess,
        // A malformed or unexpected RDMA Read response, or the responder
        // failing the operation.
        IBV_WC_REM_OP_ERR | IBV_WC_BAD_RESP_ERR | IBV_WC_REM_ABORT_ERR => Status::RemoteOperation,
        IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_INV_RD_REQ_ERR => Status::RemoteInvalidRequest,
        IBV_WC_RNR_RETRY_EXC_ERR => Status::ReceiverNotReady,
        IBV_WC_RETRY_EXC_ERR | IBV_WC_RESP_TIMEOUT_ERR => Status::ConnectionLost,
        _ => Status::LocalOperation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::provider::Blame;

    #[test]
    fn every_rc_status_has_its_class_and_blame() {
        let table = [
            (IBV_WC_SUCCESS, Status::Success, Blame::None),
            (IBV_WC_WR_FLUSH_ERR, Status::Flushed, Blame::None),
            (IBV_WC_LOC_LEN_ERR, Status::LocalLength, Blame::Local),
            (IBV_WC_LOC_QP_OP_ERR, Status::LocalOperation, Blame::Local),
            (IBV_WC_LOC_EEC_OP_ERR, Status::LocalOperation, Blame::Local),
            (IBV_WC_LOC_PROT_ERR, Status::LocalProtection, Blame::Local),
            (IBV_WC_LOC_ACCESS_ERR, Status::LocalProtection, Blame::Local),
            (IBV_WC_MW_BIND_ERR, Status::LocalProtection, Blame::Local),
            (IBV_WC_REM_ACCESS_ERR, Status::RemoteAccess, Blame::Remote),
            (IBV_WC_REM_OP_ERR, Status::RemoteOperation, Blame::Remote),
            (IBV_WC_BAD_RESP_ERR, Status::RemoteOperation, Blame::Remote),
            (IBV_WC_REM_ABORT_ERR, Status::RemoteOperation, Blame::Remote),
            (
                IBV_WC_REM_INV_REQ_ERR,
                Status::RemoteInvalidRequest,
                Blame::Remote,
            ),
            (
                IBV_WC_REM_INV_RD_REQ_ERR,
                Status::RemoteInvalidRequest,
                Blame::Remote,
            ),
            (
                IBV_WC_RNR_RETRY_EXC_ERR,
                Status::ReceiverNotReady,
                Blame::Remote,
            ),
            (
                IBV_WC_RETRY_EXC_ERR,
                Status::ConnectionLost,
                Blame::Transport,
            ),
            (
                IBV_WC_RESP_TIMEOUT_ERR,
                Status::ConnectionLost,
                Blame::Transport,
            ),
            (
                IBV_WC_LOC_RDD_VIOL_ERR,
                Status::LocalOperation,
                Blame::Local,
            ),
            (IBV_WC_INV_EECN_ERR, Status::LocalOperation, Blame::Local),
            (
                IBV_WC_INV_EEC_STATE_ERR,
                Status::LocalOperation,
                Blame::Local,
            ),
            (IBV_WC_FATAL_ERR, Status::LocalOperation, Blame::Local),
            (IBV_WC_GENERAL_ERR, Status::LocalOperation, Blame::Local),
            (1000, Status::LocalOperation, Blame::Local),
            (-1, Status::LocalOperation, Blame::Local),
        ];
        for (wc, class, blame) in table {
            let s = status_class(wc);
            assert_eq!((s, s.blame()), (class, blame), "ibv_wc_status {wc}");
        }
    }
}
