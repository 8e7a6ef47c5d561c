//! Conformance checks every [`Provider`] backend must pass, generic over
//! `P: Provider`, so the iWARP and verbs providers reuse them from their own
//! tests:
//!
//! ```
//! use rpcrdma_proto::provider::{conformance, mem, ConnectParams};
//! let mut new_pair = || {
//!     let p = ConnectParams { ird: 4, ord: 4, ..Default::default() };
//!     mem::connected_pair(mem::MemConfig::DEFAULT, p.clone(), p).unwrap()
//! };
//! let passed = conformance::run_all(&mut new_pair, 100).unwrap();
//! assert_eq!(passed, conformance::CHECK_COUNT);
//! ```
//!
//! The factory returns two *established* ends (connected to each other,
//! connection events consumed) with IRD and ORD of at least 1 each way; each
//! check gets a fresh pair because most of them end the connection. The
//! checks drive both ends by calling `poll_completions` alternately until
//! the expected completions are there, giving up after `max_rounds` rounds;
//! an fd-backed provider passes a larger number (or a factory whose ends
//! block briefly inside `poll_completions`).
//!
//! The checks only assert what the [contract](super) promises of every
//! backend. Where backends may differ they accept every allowed outcome
//! (an iWARP Send or RDMA Write completes when transmitted, so a Send that
//! meets receiver-not-ready, or a Write to a bad STag, may complete
//! `Success` before the Terminate arrives: [`write_outcome_allowed`]);
//! backend tests check their exact behaviour.
//!
//! Nothing here panics: a failed check returns [`Failure`].
//!
//! [`cm`] holds the checks of the connection-manager contract
//! ([`super::cm`]): connect, accept and reject, each with private data.

use super::{
    Access, Bytes, Completion, ConnectionState, MemoryRegion, Opcode, Provider, ProviderError,
    RecvWr, SendOp, SendWr, Status,
};

pub mod cm;

/// A failed check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Name of the check.
    pub check: &'static str,
    /// What went wrong.
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "conformance check {} failed: {}",
            self.check, self.message
        )
    }
}

impl std::error::Error for Failure {}

/// Result of one check.
pub type CheckResult = Result<(), Failure>;

macro_rules! ensure {
    ($name:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(Failure { check: $name, message: format!($($fmt)+) });
        }
    };
}

mod lent;
pub use lent::lent_receive_buffers;

/// Two ends and the completions collected from each.
#[derive(Debug)]
pub struct Harness<P> {
    /// First end (the connecting side).
    pub a: P,
    /// Second end.
    pub b: P,
    /// Completions polled from `a`, in order.
    pub ca: Vec<Completion>,
    /// Completions polled from `b`, in order.
    pub cb: Vec<Completion>,
    /// Rounds to try before giving up.
    pub max_rounds: usize,
}

impl<P: Provider> Harness<P> {
    /// Wraps a connected pair.
    pub fn new((a, b): (P, P), max_rounds: usize) -> Self {
        Harness {
            a,
            b,
            ca: Vec::new(),
            cb: Vec::new(),
            max_rounds,
        }
    }

    /// Polls both ends once each (a first).
    pub fn round(&mut self) -> usize {
        self.a.poll_completions(&mut self.ca) + self.b.poll_completions(&mut self.cb)
    }

    /// Polls until `done(ca, cb)` holds; false if `max_rounds` ran out.
    pub fn until(&mut self, mut done: impl FnMut(&[Completion], &[Completion]) -> bool) -> bool {
        for _ in 0..self.max_rounds {
            if done(&self.ca, &self.cb) {
                return true;
            }
            self.round();
        }
        done(&self.ca, &self.cb)
    }

    /// Polls until `a` has `na` and `b` has `nb` completions.
    pub fn wait(&mut self, na: usize, nb: usize) -> bool {
        self.until(|a, b| a.len() >= na && b.len() >= nb)
    }

    /// Polls until both ends report `Disconnected` (consuming their
    /// connection events), then two more rounds so that flushes are
    /// collected.
    pub fn wait_down(&mut self) -> bool {
        for _ in 0..self.max_rounds {
            self.round();
            while self.a.poll_event().is_some() {}
            while self.b.poll_event().is_some() {}
            if is_down(&self.a) && is_down(&self.b) {
                self.round();
                self.round();
                return true;
            }
        }
        false
    }
}

/// True once `p` reports `Disconnected`.
pub fn is_down<P: Provider + ?Sized>(p: &P) -> bool {
    matches!(p.connection_state(), ConnectionState::Disconnected(_))
}

/// Registers `len` octets filled with `fill`.
pub fn register_filled<P: Provider + ?Sized>(
    p: &mut P,
    len: usize,
    fill: u8,
    access: Access,
) -> Result<MemoryRegion, ProviderError> {
    p.register(vec![fill; len].into_boxed_slice(), access)
        .map_err(|e| e.error)
}

/// A Send of `mr[offset..offset+len]`.
pub fn send_wr(wr_id: u64, mr: &MemoryRegion, offset: u64, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send { solicited: false },
        sges: vec![mr.sge(offset, len)].into(),
    }
}

fn err(check: &'static str, e: impl std::fmt::Display) -> Failure {
    Failure {
        check,
        message: e.to_string(),
    }
}

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

/// Send → posted receive: data, lengths and opcodes on both ends.
pub fn send_recv<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "send_recv";
    let src =
        h.a.register(b"hello, rdma".to_vec().into_boxed_slice(), Access::NONE)
            .map_err(|e| err(N, e))?;
    let dst = register_filled(&mut h.b, 64, 0xee, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 7,
        sge: dst.sge(0, 64),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(1, &src, 0, 11))
        .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(1, 1), "no completions: a={:?} b={:?}", h.ca, h.cb);
    let (ca, cb) = (h.ca[0], h.cb[0]);
    ensure!(
        N,
        ca.wr_id == 1 && ca.opcode == Opcode::Send && ca.status == Status::Success,
        "send completion {ca:?}"
    );
    ensure!(
        N,
        cb.wr_id == 7 && cb.opcode == Opcode::Recv && cb.status == Status::Success,
        "recv completion {cb:?}"
    );
    ensure!(N, cb.byte_len == 11, "recv byte_len {}", cb.byte_len);
    let bytes = h.b.region(&dst).map_err(|e| err(N, e))?;
    ensure!(
        N,
        &bytes[..11] == b"hello, rdma" && bytes[11] == 0xee,
        "received bytes {:?}",
        &bytes[..12]
    );
    Ok(())
}

/// RDMA Write then Send: when the receive completes, the written data is
/// in place (RDMA ordering); then an RDMA Read brings data back.
pub fn write_then_send_and_read<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "write_then_send_and_read";
    let target = register_filled(&mut h.b, 32, 0, RW).map_err(|e| err(N, e))?;
    let rbuf = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    let src =
        h.a.register(
            (0u8..32).collect::<Vec<_>>().into_boxed_slice(),
            Access::NONE,
        )
        .map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 100,
        sge: rbuf.sge(0, 16),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(8),
        },
        sges: vec![src.sge(0, 16)].into(),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(2, &src, 0, 4))
        .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(0, 1), "no receive completion");
    let t = h.b.region(&target).map_err(|e| err(N, e))?.to_vec();
    ensure!(
        N,
        t[..8] == [0; 8] && t[8..24] == (0u8..16).collect::<Vec<_>>()[..] && t[24..] == [0; 8],
        "write not placed before the send completed: {t:?}"
    );
    ensure!(
        N,
        h.wait(2, 1),
        "send-queue completions missing: {:?}",
        h.ca
    );
    ensure!(
        N,
        h.ca[0].wr_id == 1
            && h.ca[0].opcode == Opcode::Write
            && h.ca[0].status == Status::Success
            && h.ca[1].wr_id == 2
            && h.ca[1].opcode == Opcode::Send,
        "send-queue completions out of order or failed: {:?}",
        h.ca
    );
    // RDMA Read back, from `b` reading `a`'s region into its own sink.
    let readable =
        h.a.register(
            (100u8..132).collect::<Vec<_>>().into_boxed_slice(),
            Access::REMOTE_READ,
        )
        .map_err(|e| err(N, e))?;
    let mut sink_access = Access::LOCAL_WRITE;
    if h.b.caps().read_sink_needs_remote_write {
        sink_access = RW;
    }
    let sink = register_filled(&mut h.b, 8, 0, sink_access).map_err(|e| err(N, e))?;
    h.b.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Read {
            remote: readable.remote(4),
        },
        sges: vec![sink.sge(0, 8)].into(),
    })
    .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(2, 2), "no read completion: {:?}", h.cb);
    let c = h.cb[1];
    ensure!(
        N,
        c.wr_id == 3 && c.opcode == Opcode::Read && c.status == Status::Success && c.byte_len == 8,
        "read completion {c:?}"
    );
    let got = h.b.region(&sink).map_err(|e| err(N, e))?;
    ensure!(
        N,
        got == (104u8..112).collect::<Vec<_>>().as_slice(),
        "read data {got:?}"
    );
    Ok(())
}

/// The ways an RDMA Write can name bad remote memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadRemote {
    /// An STag that was never registered.
    UnknownStag,
    /// The STag of an earlier registration of the same index.
    StaleKey,
    /// Past the end of the region.
    OutOfBounds,
    /// A region registered without `REMOTE_WRITE`.
    MissingRight,
    /// A region invalidated with Local Invalidate.
    Invalidated,
}

/// Whether an RDMA Write's completion is an allowed outcome of a Write the
/// peer refused: `RemoteAccess` where the device learns the outcome before
/// completing the Write (InfiniBand / RoCE acknowledge every Write; the
/// in-memory and software iWARP providers place it at once), or `Success`
/// where a Write completes once transmitted (iWARP RNICs and Linux siw: the
/// peer's Terminate then ends the connection, which every such check
/// requires as well).
pub fn write_outcome_allowed(c: &Completion) -> bool {
    //= rfc5040#section-5.5
    //# The Completion of an RDMA Write or Send Operation at the Local
    //# Peer does not guarantee that the ULP Message has yet reached the
    //# Remote Peer ULP Buffer or been examined by the Remote ULP.
    c.opcode == Opcode::Write && matches!(c.status, Status::RemoteAccess | Status::Success)
}

/// An RDMA Write with bad remote memory completes `RemoteAccess` at the
/// poster (or `Success` where a Write completes at transmission, see
/// [`write_outcome_allowed`]), touches no memory at the target, and ends
/// the connection on both sides with every other WR flushed.
pub fn write_remote_access_error<P: Provider>(h: &mut Harness<P>, bad: BadRemote) -> CheckResult {
    const N: &str = "write_remote_access_error";
    let src = register_filled(&mut h.a, 16, 0xab, Access::NONE).map_err(|e| err(N, e))?;
    let access = if bad == BadRemote::MissingRight {
        Access::LOCAL_WRITE | Access::REMOTE_READ
    } else {
        RW
    };
    let mut target = register_filled(&mut h.b, 16, 0x11, access).map_err(|e| err(N, e))?;
    let mut remote = target.remote(0);
    match bad {
        BadRemote::UnknownStag => remote.stag = super::Stag(0x00ff_ff00 | 0x7e),
        BadRemote::StaleKey => {
            let old = target.stag();
            let buf = h.b.deregister(&target).map_err(|e| err(N, e))?;
            target =
                h.b.register(buf.into_owned(), access)
                    .map_err(|e| err(N, e.error))?;
            ensure!(N, target.stag() != old, "re-registration reused STag {old}");
            remote.stag = old;
        }
        BadRemote::OutOfBounds => remote.offset = 8,
        BadRemote::MissingRight => {}
        BadRemote::Invalidated => {
            h.b.invalidate(50, target.stag()).map_err(|e| err(N, e))?;
            ensure!(N, h.wait(0, 1), "no local invalidate completion");
            ensure!(
                N,
                h.cb[0].opcode == Opcode::LocalInvalidate && h.cb[0].status == Status::Success,
                "local invalidate {:?}",
                h.cb[0]
            );
            h.cb.clear();
        }
    }
    // An unrelated receive on each side, to be flushed.
    let ra = register_filled(&mut h.a, 8, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.a.post_recv(RecvWr {
        wr_id: 10,
        sge: ra.sge(0, 8),
    })
    .map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 20,
        sge: rb.sge(0, 8),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write { remote },
        sges: vec![src.sge(0, 16)].into(),
    })
    .map_err(|e| err(N, e))?;
    ensure!(N, h.wait_down(), "connection did not go down ({bad:?})");
    ensure!(
        N,
        h.wait(2, 1),
        "missing completions a={:?} b={:?}",
        h.ca,
        h.cb
    );
    let w = h.ca.iter().find(|c| c.wr_id == 1);
    ensure!(
        N,
        w.is_some_and(write_outcome_allowed),
        "write completion {w:?} ({bad:?})"
    );
    ensure!(
        N,
        h.ca.iter()
            .any(|c| c.wr_id == 10 && c.status == Status::Flushed)
            && h.cb
                .iter()
                .any(|c| c.wr_id == 20 && c.status == Status::Flushed),
        "receives not flushed: a={:?} b={:?}",
        h.ca,
        h.cb
    );
    let t = h.b.region(&target).map_err(|e| err(N, e))?;
    ensure!(
        N,
        t.iter().all(|&x| x == 0x11),
        "target memory touched: {t:?}"
    );
    Ok(())
}

/// Send With Invalidate: the receiver's STag is invalidated and reported in
/// the receive completion; a later Write with it fails. A receiver without
/// [`Caps::remote_invalidation`](super::Caps::remote_invalidation) (whose
/// upper layer never asks a peer for it) may act on it or not, but the
/// message is delivered whole or the connection ends with an error.
pub fn send_with_invalidate<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "send_with_invalidate";
    let chunk = register_filled(&mut h.b, 16, 0, RW).map_err(|e| err(N, e))?;
    let rbuf = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    let src = register_filled(&mut h.a, 16, 5, Access::NONE).map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 9,
        sge: rbuf.sge(0, 16),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::SendWithInvalidate {
            invalidate: chunk.stag(),
            solicited: true,
        },
        sges: vec![src.sge(0, 4)].into(),
    })
    .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(1, 1), "no completions a={:?} b={:?}", h.ca, h.cb);
    let c = h.cb[0];
    if !h.b.caps().remote_invalidation {
        let delivered = c.status == Status::Success
            && c.byte_len == 4
            && matches!(c.opcode, Opcode::Recv | Opcode::RecvWithInvalidate { .. });
        if delivered {
            let got = h.b.region(&rbuf).map_err(|e| err(N, e))?;
            ensure!(N, got[..4] == [5; 4], "received {got:?}");
        } else {
            ensure!(
                N,
                h.wait_down(),
                "failed receive {c:?} did not end the connection"
            );
        }
        let t = h.b.region(&chunk).map_err(|e| err(N, e))?;
        ensure!(N, t.iter().all(|&x| x == 0), "chunk memory written");
        return Ok(());
    }
    ensure!(
        N,
        c.status == Status::Success
            && c.opcode == Opcode::RecvWithInvalidate { stag: chunk.stag() }
            && c.byte_len == 4,
        "receive completion {c:?}"
    );
    h.a.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Write {
            remote: chunk.remote(0),
        },
        sges: vec![src.sge(0, 4)].into(),
    })
    .map_err(|e| err(N, e))?;
    ensure!(
        N,
        h.wait_down(),
        "write to an invalidated STag did not fail"
    );
    let w = h.ca.iter().find(|c| c.wr_id == 2);
    ensure!(N, w.is_some_and(write_outcome_allowed), "write {w:?}");
    let t = h.b.region(&chunk).map_err(|e| err(N, e))?;
    ensure!(N, t.iter().all(|&x| x == 0), "invalidated memory written");
    Ok(())
}

/// A Send with no receive posted is fatal: both ends go down, every other
/// outstanding WR is flushed. The Send itself completes `ReceiverNotReady`
/// (or, where a Send completes at transmission, `Success`).
pub fn receiver_not_ready<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "receiver_not_ready";
    let src = register_filled(&mut h.a, 8, 1, Access::NONE).map_err(|e| err(N, e))?;
    let ra = register_filled(&mut h.a, 8, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.a.post_recv(RecvWr {
        wr_id: 10,
        sge: ra.sge(0, 8),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(1, &src, 0, 8))
        .map_err(|e| err(N, e))?;
    ensure!(N, h.wait_down(), "RNR did not end the connection");
    ensure!(N, h.wait(2, 0), "missing completions {:?}", h.ca);
    let s = h.ca.iter().find(|c| c.wr_id == 1);
    ensure!(
        N,
        s.is_some_and(|c| matches!(c.status, Status::ReceiverNotReady | Status::Success)),
        "send {s:?}"
    );
    let r = h.ca.iter().find(|c| c.wr_id == 10);
    ensure!(
        N,
        r.is_some_and(|c| c.status == Status::Flushed),
        "recv {r:?}"
    );
    Ok(())
}

/// A message larger than the receive buffer: the receive completes
/// `LocalLength`, both ends go down.
pub fn receive_too_small<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "receive_too_small";
    let src = register_filled(&mut h.a, 16, 1, Access::NONE).map_err(|e| err(N, e))?;
    let rb = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 5,
        sge: rb.sge(0, 4),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(1, &src, 0, 16))
        .map_err(|e| err(N, e))?;
    ensure!(N, h.wait_down(), "connection stayed up");
    ensure!(
        N,
        h.wait(1, 1),
        "missing completions a={:?} b={:?}",
        h.ca,
        h.cb
    );
    ensure!(
        N,
        h.cb[0].wr_id == 5 && h.cb[0].status == Status::LocalLength,
        "receive {:?}",
        h.cb[0]
    );
    Ok(())
}

/// A region referenced by an outstanding WR cannot be deregistered or
/// written (nor read while it is a receive target); once the WR's
/// completion has been polled it can.
pub fn busy_while_in_flight<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "busy_while_in_flight";
    let rb = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 1,
        sge: rb.sge(0, 8),
    })
    .map_err(|e| err(N, e))?;
    ensure!(
        N,
        h.b.deregister(&rb) == Err(ProviderError::Busy),
        "deregister of a posted receive buffer was not refused"
    );
    ensure!(
        N,
        h.b.region_mut(&rb) == Err(ProviderError::Busy),
        "region_mut allowed"
    );
    ensure!(
        N,
        h.b.region(&rb).err() == Some(ProviderError::Busy),
        "region allowed"
    );
    let src = register_filled(&mut h.a, 8, 3, Access::NONE).map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(2, &src, 0, 8))
        .map_err(|e| err(N, e))?;
    ensure!(
        N,
        h.a.deregister(&src) == Err(ProviderError::Busy),
        "send source deregistered"
    );
    ensure!(N, h.a.region(&src).is_ok(), "reading a send source refused");
    ensure!(N, h.wait(1, 1), "no completions");
    ensure!(N, h.b.region(&rb).map_err(|e| err(N, e))? == [3; 8], "data");
    let back = h.b.deregister(&rb).map_err(|e| err(N, e))?;
    ensure!(N, back.len() == 8, "buffer length {}", back.len());
    ensure!(
        N,
        h.b.deregister(&rb) == Err(ProviderError::InvalidHandle),
        "stale handle accepted"
    );
    h.a.deregister(&src).map_err(|e| err(N, e))?;
    Ok(())
}

/// Local errors are refused at post time: SGE out of bounds, receive into a
/// region without `LOCAL_WRITE`, unknown local key, too many SGEs.
pub fn local_errors_refused<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "local_errors_refused";
    let ro = register_filled(&mut h.a, 8, 0, Access::NONE).map_err(|e| err(N, e))?;
    ensure!(
        N,
        h.a.post_recv(RecvWr {
            wr_id: 1,
            sge: ro.sge(0, 8)
        }) == Err(ProviderError::AccessDenied {
            needed: Access::LOCAL_WRITE
        }),
        "receive into a read-only region accepted"
    );
    ensure!(
        N,
        h.a.post_send(send_wr(2, &ro, 4, 5)) == Err(ProviderError::OutOfBounds),
        "SGE past the end accepted"
    );
    ensure!(
        N,
        h.a.post_send(send_wr(3, &ro, u64::MAX, 1)) == Err(ProviderError::OutOfBounds),
        "overflowing SGE accepted"
    );
    let mut bogus = ro.sge(0, 1);
    bogus.lkey ^= 0x4400;
    ensure!(
        N,
        h.a.post_send(SendWr {
            wr_id: 4,
            op: SendOp::Send { solicited: false },
            sges: vec![bogus].into()
        }) == Err(ProviderError::InvalidHandle),
        "unknown lkey accepted"
    );
    let many = vec![ro.sge(0, 1); h.a.caps().max_send_sge as usize + 1];
    ensure!(
        N,
        h.a.post_send(SendWr {
            wr_id: 5,
            op: SendOp::Send { solicited: false },
            sges: many.into()
        }) == Err(ProviderError::BadSgeCount),
        "too many SGEs accepted"
    );
    let e =
        h.a.register(vec![0; 4].into_boxed_slice(), Access::REMOTE_WRITE);
    ensure!(
        N,
        e.as_ref().is_err_and(|e| e.buf.len() == 4),
        "REMOTE_WRITE without LOCAL_WRITE accepted"
    );
    // Nothing was queued: no completion may appear.
    for _ in 0..3 {
        h.round();
    }
    ensure!(N, h.ca.is_empty(), "refused WRs completed: {:?}", h.ca);
    Ok(())
}

/// `disconnect` on one end flushes every outstanding WR on both ends, and
/// later posts are refused.
pub fn disconnect_flushes<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "disconnect_flushes";
    let ra = register_filled(&mut h.a, 16, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    let rb = register_filled(&mut h.b, 16, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    for i in 0..2 {
        h.a.post_recv(RecvWr {
            wr_id: 10 + i,
            sge: ra.sge(i * 8, 8),
        })
        .map_err(|e| err(N, e))?;
        h.b.post_recv(RecvWr {
            wr_id: 20 + i,
            sge: rb.sge(i * 8, 8),
        })
        .map_err(|e| err(N, e))?;
    }
    h.a.disconnect();
    ensure!(N, h.wait_down(), "not both down");
    ensure!(N, h.wait(2, 2), "flushes missing a={:?} b={:?}", h.ca, h.cb);
    let all = h.ca.iter().chain(h.cb.iter());
    ensure!(
        N,
        all.clone()
            .all(|c| c.status == Status::Flushed && c.opcode == Opcode::Recv),
        "not all flushed: a={:?} b={:?}",
        h.ca,
        h.cb
    );
    let mut ids: Vec<u64> = all.map(|c| c.wr_id).collect();
    ids.sort_unstable();
    ensure!(N, ids == [10, 11, 20, 21], "flushed ids {ids:?}");
    ensure!(
        N,
        h.a.post_recv(RecvWr {
            wr_id: 1,
            sge: ra.sge(0, 8)
        }) == Err(ProviderError::NotConnected),
        "post after disconnect accepted"
    );
    ensure!(N, h.a.deregister(&ra).is_ok(), "flushed buffer still busy");
    Ok(())
}

/// Shared read-only bytes ([`Provider::register_shared`]): a source for
/// Send and RDMA Write and (with `REMOTE_READ`) the target of the peer's
/// RDMA Read, intact; every write right is refused at registration, and a
/// Receive, an RDMA Read sink and `region_mut` are refused on the region;
/// only the slice's own octets are registered; `deregister` gives the same
/// octets back and leaves the other holders' bytes untouched.
pub fn shared_buffer_is_a_read_only_source<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "shared_buffer_is_a_read_only_source";
    let backing = Bytes::from((0u8..64).collect::<Vec<u8>>());
    // Only the slice [16, 48) is registered.
    let bytes = backing.slice(16..48);
    for bad in [
        Access::LOCAL_WRITE,
        RW,
        Access::LOCAL_WRITE | Access::REMOTE_READ,
    ] {
        ensure!(
            N,
            matches!(
                h.a.register_shared(bytes.clone(), bad),
                Err(ProviderError::InvalidArgument(_))
            ),
            "shared registration with {bad:?} accepted"
        );
    }
    let src =
        h.a.register_shared(bytes.clone(), Access::NONE)
            .map_err(|e| err(N, e))?;
    ensure!(N, src.len() == 32, "registered length {}", src.len());
    ensure!(
        N,
        h.a.region(&src).map_err(|e| err(N, e))? == &bytes[..],
        "region bytes differ"
    );
    ensure!(
        N,
        h.a.region_mut(&src).err()
            == Some(ProviderError::AccessDenied {
                needed: Access::LOCAL_WRITE
            }),
        "region_mut of shared bytes allowed"
    );
    ensure!(
        N,
        h.a.post_recv(RecvWr {
            wr_id: 90,
            sge: src.sge(0, 8)
        }) == Err(ProviderError::AccessDenied {
            needed: Access::LOCAL_WRITE
        }),
        "receive into shared bytes accepted"
    );
    ensure!(
        N,
        h.a.post_send(send_wr(91, &src, 0, 33)) == Err(ProviderError::OutOfBounds),
        "SGE past the registered slice accepted"
    );
    // RDMA Write from the shared bytes, then a Send from them.
    let target = register_filled(&mut h.b, 32, 0, RW).map_err(|e| err(N, e))?;
    let rbuf = register_filled(&mut h.b, 8, 0, Access::LOCAL_WRITE).map_err(|e| err(N, e))?;
    h.b.post_recv(RecvWr {
        wr_id: 100,
        sge: rbuf.sge(0, 8),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![src.sge(0, 16), src.sge(16, 16)].into(),
    })
    .map_err(|e| err(N, e))?;
    h.a.post_send(send_wr(2, &src, 28, 4))
        .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(2, 1), "no completions a={:?} b={:?}", h.ca, h.cb);
    ensure!(
        N,
        h.ca.iter().all(|c| c.status == Status::Success) && h.cb[0].status == Status::Success,
        "completions a={:?} b={:?}",
        h.ca,
        h.cb
    );
    ensure!(
        N,
        h.b.region(&target).map_err(|e| err(N, e))? == &backing[16..48],
        "written data differs"
    );
    ensure!(
        N,
        h.b.region(&rbuf).map_err(|e| err(N, e))?[..4] == backing[44..48],
        "sent data differs"
    );
    // The peer reads shared bytes registered REMOTE_READ.
    let readable =
        h.a.register_shared(backing.slice(..8), Access::REMOTE_READ)
            .map_err(|e| err(N, e))?;
    let mut sink_access = Access::LOCAL_WRITE;
    if h.b.caps().read_sink_needs_remote_write {
        sink_access = RW;
    }
    let sink = register_filled(&mut h.b, 8, 0xee, sink_access).map_err(|e| err(N, e))?;
    h.b.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Read {
            remote: readable.remote(0),
        },
        sges: vec![sink.sge(0, 8)].into(),
    })
    .map_err(|e| err(N, e))?;
    ensure!(N, h.wait(2, 2), "no read completion: {:?}", h.cb);
    ensure!(
        N,
        h.cb[1].status == Status::Success && h.cb[1].byte_len == 8,
        "read completion {:?}",
        h.cb[1]
    );
    ensure!(
        N,
        h.b.region(&sink).map_err(|e| err(N, e))? == &backing[..8],
        "read data differs"
    );
    // Our own RDMA Read may not land in shared bytes.
    let local = register_filled(&mut h.b, 8, 1, Access::REMOTE_READ).map_err(|e| err(N, e))?;
    ensure!(
        N,
        matches!(
            h.a.post_send(SendWr {
                wr_id: 4,
                op: SendOp::Read {
                    remote: local.remote(0),
                },
                sges: vec![src.sge(0, 8)].into(),
            }),
            Err(ProviderError::AccessDenied { .. }) | Err(ProviderError::InvalidArgument(_))
        ),
        "RDMA Read into shared bytes accepted"
    );
    let back = h.a.deregister(&src).map_err(|e| err(N, e))?;
    ensure!(N, back[..] == bytes[..], "deregistered bytes differ");
    ensure!(
        N,
        backing == (0u8..64).collect::<Vec<u8>>(),
        "shared bytes changed"
    );
    Ok(())
}

/// A peer's RDMA Write (or, without `REMOTE_READ`, RDMA Read) naming shared
/// read-only bytes completes `RemoteAccess` at the peer (a Write may
/// complete `Success`, see [`write_outcome_allowed`]), ends the
/// connection, and leaves the bytes untouched.
pub fn shared_buffer_remote_access_refused<P: Provider>(
    h: &mut Harness<P>,
    write: bool,
) -> CheckResult {
    const N: &str = "shared_buffer_remote_access_refused";
    let bytes = Bytes::from(vec![0x5a; 16]);
    // REMOTE_READ for the write attempt: a readable STag still cannot be
    // written.
    let access = if write {
        Access::REMOTE_READ
    } else {
        Access::NONE
    };
    let shared =
        h.b.register_shared(bytes.clone(), access)
            .map_err(|e| err(N, e))?;
    let wr = if write {
        let src = register_filled(&mut h.a, 16, 0xab, Access::NONE).map_err(|e| err(N, e))?;
        SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote: shared.remote(0),
            },
            sges: vec![src.sge(0, 16)].into(),
        }
    } else {
        let mut sink_access = Access::LOCAL_WRITE;
        if h.a.caps().read_sink_needs_remote_write {
            sink_access = RW;
        }
        let sink = register_filled(&mut h.a, 16, 0, sink_access).map_err(|e| err(N, e))?;
        SendWr {
            wr_id: 1,
            op: SendOp::Read {
                remote: shared.remote(0),
            },
            sges: vec![sink.sge(0, 16)].into(),
        }
    };
    h.a.post_send(wr).map_err(|e| err(N, e))?;
    ensure!(
        N,
        h.wait_down(),
        "connection did not go down (write {write}): a {:?} {:?}, b {:?} {:?}",
        h.a.connection_state(),
        h.ca,
        h.b.connection_state(),
        h.cb
    );
    ensure!(N, h.wait(1, 0), "no completion a={:?}", h.ca);
    let c = h.ca.iter().find(|c| c.wr_id == 1);
    let allowed = |c: &Completion| {
        if write {
            write_outcome_allowed(c)
        } else {
            c.status == Status::RemoteAccess && c.opcode == Opcode::Read
        }
    };
    ensure!(
        N,
        c.is_some_and(allowed),
        "completion {c:?} (write {write})"
    );
    ensure!(
        N,
        h.b.region(&shared)
            .map_err(|e| err(N, e))?
            .iter()
            .all(|&x| x == 0x5a)
            && bytes.iter().all(|&x| x == 0x5a),
        "shared bytes touched"
    );
    Ok(())
}

/// Number of checks [`run_all`] runs.
pub const CHECK_COUNT: usize = 17;

/// Runs every check, each on a fresh pair from `new_pair`; returns the
/// number of checks passed ([`CHECK_COUNT`]) or the first failure.
pub fn run_all<P: Provider>(
    new_pair: &mut dyn FnMut() -> (P, P),
    max_rounds: usize,
) -> Result<usize, Failure> {
    let mut n = 0;
    let mut run = |f: &dyn Fn(&mut Harness<P>) -> CheckResult| -> CheckResult {
        let mut h = Harness::new(new_pair(), max_rounds);
        f(&mut h)?;
        n += 1;
        Ok(())
    };
    run(&send_recv)?;
    run(&write_then_send_and_read)?;
    for bad in [
        BadRemote::UnknownStag,
        BadRemote::StaleKey,
        BadRemote::OutOfBounds,
        BadRemote::MissingRight,
        BadRemote::Invalidated,
    ] {
        run(&|h| write_remote_access_error(h, bad))?;
    }
    run(&send_with_invalidate)?;
    run(&receiver_not_ready)?;
    run(&receive_too_small)?;
    run(&busy_while_in_flight)?;
    run(&local_errors_refused)?;
    run(&disconnect_flushes)?;
    run(&shared_buffer_is_a_read_only_source)?;
    run(&|h| shared_buffer_remote_access_refused(h, true))?;
    run(&|h| shared_buffer_remote_access_refused(h, false))?;
    run(&lent_receive_buffers)?;
    Ok(n)
}
