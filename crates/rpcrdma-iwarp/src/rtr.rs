//! The initiator's RFC 6581 Ready-to-Receive, sent by the TCP adapter
//! right after the MPA Reply (see [`crate::cm::Rtr`]).
//!
//! # Why the Read RTR is waited for
//!
//! Linux siw as responder (`drivers/infiniband/sw/siw/siw_cm.c`,
//! `siw_accept`) sends its MPA Reply and only then switches the socket's
//! `sk_data_ready` from the connection manager's callback
//! (`siw_cm_llp_data_ready`, which ignores data once the endpoint is in
//! RDMA mode) to the queue pair's (`siw_qp_llp_data_ready`, or
//! `siw_rtr_data_ready` while it waits for an RTR). Bytes that arrive in
//! between stay queued in the socket, and nothing reads them until the
//! next segment arrives and calls `sk_data_ready` again. A client whose
//! first message is a call then waits for a reply forever.
//!
//! So the initiator sends a zero-length RDMA Read as its RTR and sends no
//! ULP message until the Read Response arrives: the response is built
//! while `siw_rtr_data_ready` processes the Read, and that handler hooks
//! the queue pair's receive path to the socket before it returns (under
//! the socket lock, so before any later segment is processed). If the
//! Read itself fell into the window, nothing answers it; a zero-length
//! RDMA Write (which RFC 5041 section 5.2 lets any receiver take without
//! checking its STag) then makes the socket call `sk_data_ready` again,
//! and the handler reads both. These nudges go out at growing intervals
//! until the response arrives or [`crate::cm::IwarpConfig::rtr_timeout`]
//! passes; then the connection is given up, with no ULP message lost
//! (none was sent).
//!
//! The RTR work requests are the provider's own: their completions never
//! reach the ULP ([`take_internal`]).

use std::time::{Duration, Instant};

use rpcrdma_proto::provider::{
    Access, Completion, MemoryRegion, Opcode, ProviderError, RemoteAddr, SendOp, SendWr, Stag,
    Status,
};

use crate::qp::QueuePair;

/// `wr_id` of the Read RTR.
const READ_WR: u64 = u64::MAX;
/// `wr_id` of a zero-length Write (the Write RTR, or a nudge).
const WRITE_WR: u64 = u64::MAX - 1;
/// The first nudge goes this long after the Read RTR (a round trip to the
/// lab's emulated Linux guest takes about a millisecond).
const FIRST_NUDGE: Duration = Duration::from_millis(2);
/// Nudges double their spacing up to this.
const MAX_NUDGE_GAP: Duration = Duration::from_millis(250);
/// The STag of our zero-length RDMA Writes and the source STag of the Read
/// RTR: never checked (RFC 5040 section 5.2.1, RFC 5041 section 5.2); not
/// zero, as some hardware treats STag 0 specially (Linux siw uses 1 too).
const ANY_STAG: Stag = Stag(1);

/// True for the completion of one of the provider's RTR work requests.
fn is_internal(c: &Completion) -> bool {
    (c.wr_id == READ_WR && c.opcode == Opcode::Read)
        || (c.wr_id == WRITE_WR && c.opcode == Opcode::Write)
}

/// Removes the completions of RTR work requests from `out[from..]` while
/// `outstanding` of them are still due (counting them down); returns the
/// status of a Read RTR among them.
pub(crate) fn take_internal(
    out: &mut Vec<Completion>,
    from: usize,
    outstanding: &mut u32,
) -> Option<Status> {
    let mut read = None;
    let mut i = from;
    while *outstanding > 0 && i < out.len() {
        if is_internal(&out[i]) {
            let c = out.remove(i);
            *outstanding -= 1;
            if c.wr_id == READ_WR {
                read = Some(c.status);
            }
        } else {
            i += 1;
        }
    }
    read
}

/// Posts a zero-length RDMA Write (the Write RTR, or a nudge).
pub(crate) fn post_write(qp: &mut QueuePair) -> Result<(), ProviderError> {
    qp.post_send(SendWr {
        wr_id: WRITE_WR,
        op: SendOp::Write {
            remote: RemoteAddr {
                stag: ANY_STAG,
                offset: 0,
            },
        },
        sges: Default::default(),
    })
}

/// What [`ReadRtr::step`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Still waiting for the Read Response.
    Waiting,
    /// The Read Response arrived (and every nudge completed): the ULP may
    /// send.
    Ready,
    /// The Read RTR failed (the connection is going down).
    Failed(Status),
    /// No Read Response within the timeout.
    TimedOut,
}

/// A Read RTR in flight.
#[derive(Debug)]
pub(crate) struct ReadRtr {
    sink: MemoryRegion,
    /// Posted RTR work requests not yet completed.
    outstanding: u32,
    read_done: bool,
    deadline: Instant,
    next_nudge: Instant,
    gap: Duration,
    /// Nudges sent so far.
    pub(crate) nudges: u32,
}

impl ReadRtr {
    /// Posts the zero-length Read RTR on an established queue pair.
    pub(crate) fn start(
        qp: &mut QueuePair,
        now: Instant,
        timeout: Duration,
    ) -> Result<Self, ProviderError> {
        let sink = qp
            .register(
                vec![0u8; 1].into_boxed_slice(),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .map_err(|e| e.error)?;
        qp.post_send(SendWr {
            wr_id: READ_WR,
            op: SendOp::Read {
                remote: RemoteAddr {
                    stag: ANY_STAG,
                    offset: 0,
                },
            },
            sges: smallvec::smallvec![sink.sge(0, 0)],
        })?;
        Ok(ReadRtr {
            sink,
            outstanding: 1,
            read_done: false,
            deadline: now + timeout,
            next_nudge: now + FIRST_NUDGE,
            gap: FIRST_NUDGE,
            nudges: 0,
        })
    }

    /// Takes the RTR completions from `qp` (the ULP's go to `stash`) and
    /// sends a nudge when one is due.
    pub(crate) fn step(
        &mut self,
        qp: &mut QueuePair,
        now: Instant,
        stash: &mut Vec<Completion>,
    ) -> Step {
        let from = stash.len();
        qp.poll_completions(stash);
        match take_internal(stash, from, &mut self.outstanding) {
            Some(Status::Success) => self.read_done = true,
            Some(s) => return Step::Failed(s),
            None => {}
        }
        if self.read_done {
            return if self.outstanding == 0 {
                Step::Ready
            } else {
                Step::Waiting
            };
        }
        if now >= self.deadline {
            return Step::TimedOut;
        }
        if now >= self.next_nudge {
            if post_write(qp).is_ok() {
                self.outstanding += 1;
                self.nudges += 1;
            }
            self.gap = (self.gap * 2).min(MAX_NUDGE_GAP);
            self.next_nudge = now + self.gap;
        }
        Step::Waiting
    }

    /// When [`ReadRtr::step`] has something to do without new input.
    pub(crate) fn next_wakeup(&self) -> Instant {
        self.next_nudge.min(self.deadline)
    }

    /// Gives back the Read's sink.
    pub(crate) fn finish(self, qp: &mut QueuePair) {
        let _ = qp.deregister(&self.sink);
    }
}
