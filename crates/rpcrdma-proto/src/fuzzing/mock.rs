//! A scripted [`Provider`] for the `engine_ops` fuzz target: work requests
//! are validated and held as a real provider does ([`MemoryTable`]), but
//! nothing completes until the harness says so, with the status it picks.
//! It asserts the engine's side of the contract: a `wr_id` is never posted
//! while another WR with the same id is outstanding.

use std::collections::VecDeque;
use std::task::Waker;

use crate::provider::memory::{Holds, MemoryTable, SendRules};
use crate::provider::{
    Access, Buffer, Bytes, Caps, Completion, ConnectionEvent, ConnectionInfo, ConnectionState,
    DisconnectReason, MemoryRegion, Notify, Opcode, Provider, ProviderError, RecvWr, RegisterError,
    SendOp, SendWr, Stag, Status,
};

/// Limits of the mock (small queues, so that QueueFull happens).
pub const CAPS: Caps = Caps {
    max_send_wr: 64,
    max_recv_wr: 64,
    max_send_sge: 8,
    max_recv_sge: 1,
    max_read_sge: 1,
    max_msg_size: 1 << 20,
    max_mr_size: 1 << 20,
    max_mr: 4096,
    max_private_data: 196,
    max_ird: 16,
    max_ord: 16,
    max_inline: 1024,
    read_sink_needs_remote_write: true,
    remote_invalidation: true,
};

/// A posted Send-queue WR and the octets it sends (Send / Write).
pub struct PostedSend {
    /// The WR.
    pub wr: SendWr,
    holds: Holds,
    /// Gathered payload of a Send or Write.
    pub data: Vec<u8>,
}

/// The scripted provider.
pub struct Mock {
    /// Registrations.
    pub mem: MemoryTable,
    state: ConnectionState,
    info: Option<ConnectionInfo>,
    events: VecDeque<ConnectionEvent>,
    /// Posted receives, in order.
    pub rq: VecDeque<(RecvWr, u32)>,
    /// Outstanding Send-queue WRs, in post order.
    pub sq: Vec<PostedSend>,
    cq: VecDeque<(Completion, Holds)>,
    /// Send-queue WRs accepted at once (beyond: QueueFull).
    pub send_limit: usize,
    /// Every Send the engine posted (payload), in order, for the harness.
    pub sent: Vec<Vec<u8>>,
    /// `wr_id`s completed so far.
    pub completed: Vec<u64>,
}

impl Mock {
    /// A mock that will report `info` once [`Mock::establish`] is called.
    pub fn new(info: ConnectionInfo, send_limit: usize) -> Mock {
        Mock {
            mem: MemoryTable::without_index_zero(0x10),
            state: ConnectionState::Connecting,
            info: Some(info),
            events: VecDeque::new(),
            rq: VecDeque::new(),
            sq: Vec::new(),
            cq: VecDeque::new(),
            send_limit,
            sent: Vec::new(),
            completed: Vec::new(),
        }
    }

    /// The connection comes up.
    pub fn establish(&mut self) {
        if self.state == ConnectionState::Connecting {
            self.state = ConnectionState::Established;
            if let Some(i) = &self.info {
                self.events
                    .push_back(ConnectionEvent::Established(i.clone()));
            }
        }
    }

    fn outstanding(&self, wr_id: u64) -> bool {
        self.rq.iter().any(|(w, _)| w.wr_id == wr_id) || self.sq.iter().any(|s| s.wr.wr_id == wr_id)
    }

    fn check_new_id(&self, wr_id: u64) {
        assert!(
            !self.outstanding(wr_id),
            "the engine posted wr_id {wr_id:#x} while a WR with that id is outstanding"
        );
    }

    /// Work requests posted and not completed.
    pub fn pending(&self) -> usize {
        self.rq.len() + self.sq.len()
    }

    fn push(&mut self, c: Completion, holds: Holds) {
        self.completed.push(c.wr_id);
        self.cq.push_back((c, holds));
    }

    /// The connection ends with `reason`: every WR is flushed.
    pub fn go_down(&mut self, reason: DisconnectReason) {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return;
        }
        for s in std::mem::take(&mut self.sq) {
            let op = opcode(&s.wr.op);
            self.push(
                Completion {
                    wr_id: s.wr.wr_id,
                    opcode: op,
                    byte_len: 0,
                    status: Status::Flushed,
                },
                s.holds,
            );
        }
        for (r, idx) in std::mem::take(&mut self.rq) {
            self.push(
                Completion {
                    wr_id: r.wr_id,
                    opcode: Opcode::Recv,
                    byte_len: 0,
                    status: Status::Flushed,
                },
                smallvec::smallvec![crate::provider::memory::Hold { idx, write: true }],
            );
        }
        self.state = ConnectionState::Disconnected(reason.clone());
        self.events.push_back(ConnectionEvent::Disconnected(reason));
    }

    /// The peer's Send arrives in the first posted receive: `Some` when
    /// there was one. A message longer than the buffer completes
    /// `LocalLength`, as on a real QP.
    pub fn deliver(&mut self, msg: &[u8], inv: Option<Stag>) -> bool {
        if self.state != ConnectionState::Established {
            return false;
        }
        let Some((r, idx)) = self.rq.pop_front() else {
            return false;
        };
        let holds: Holds = smallvec::smallvec![crate::provider::memory::Hold { idx, write: true }];
        if msg.len() > r.sge.length as usize {
            self.push(
                Completion {
                    wr_id: r.wr_id,
                    opcode: Opcode::Recv,
                    byte_len: 0,
                    status: Status::LocalLength,
                },
                holds,
            );
            return true;
        }
        let off = r.sge.offset as usize;
        if let Some(dst) = self
            .mem
            .region_at_mut(idx)
            .and_then(|g| g.buf_mut())
            .and_then(|b| b.get_mut(off..off + msg.len()))
        {
            dst.copy_from_slice(msg);
        }
        let opcode = match inv {
            Some(s) => {
                self.mem.invalidate(s);
                Opcode::RecvWithInvalidate { stag: s }
            }
            None => Opcode::Recv,
        };
        self.push(
            Completion {
                wr_id: r.wr_id,
                opcode,
                byte_len: msg.len() as u32,
                status: Status::Success,
            },
            holds,
        );
        true
    }

    /// Completes outstanding Send-queue WR `i` with `status`; a successful
    /// RDMA Read fills its sink with `fill`.
    pub fn complete_send(&mut self, i: usize, status: Status, fill: u8) {
        if self.sq.is_empty() {
            return;
        }
        let s = self.sq.remove(i % self.sq.len());
        let mut len = 0u32;
        if status == Status::Success {
            match s.wr.op {
                SendOp::Read { .. } => {
                    for sge in &s.wr.sges {
                        let off = sge.offset as usize;
                        let n = sge.length as usize;
                        if let Some(b) = self
                            .mem
                            .region_at_mut(Stag(sge.lkey).index())
                            .and_then(|g| g.buf_mut())
                            .and_then(|b| b.get_mut(off..off + n))
                        {
                            for (k, x) in b.iter_mut().enumerate() {
                                *x = fill.wrapping_add(k as u8);
                            }
                        }
                        len += sge.length;
                    }
                }
                SendOp::LocalInvalidate { stag } => {
                    self.mem.invalidate(stag);
                }
                _ => len = s.data.len() as u32,
            }
        }
        let op = opcode(&s.wr.op);
        self.push(
            Completion {
                wr_id: s.wr.wr_id,
                opcode: op,
                byte_len: len,
                status,
            },
            s.holds,
        );
    }

    /// The peer RDMA-Writes `data` at `off` through our `stag`: placed only
    /// where a real RNIC would (valid STag with REMOTE_WRITE, in bounds).
    pub fn remote_write(&mut self, stag: u32, off: usize, data: &[u8]) {
        let Some((idx, r)) = self.mem.lookup(stag) else {
            return;
        };
        if !r.remote_valid() || !r.access().contains(Access::REMOTE_WRITE) {
            return;
        }
        if let Some(dst) = self
            .mem
            .region_at_mut(idx)
            .and_then(|g| g.buf_mut())
            .and_then(|b| b.get_mut(off..off.checked_add(data.len())?))
        {
            dst.copy_from_slice(data);
        }
    }
}

fn opcode(op: &SendOp) -> Opcode {
    match op {
        SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => Opcode::Send,
        SendOp::Write { .. } => Opcode::Write,
        SendOp::Read { .. } => Opcode::Read,
        SendOp::LocalInvalidate { .. } => Opcode::LocalInvalidate,
    }
}

impl Provider for Mock {
    fn caps(&self) -> Caps {
        CAPS
    }
    fn connection_state(&self) -> ConnectionState {
        self.state.clone()
    }
    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.info.clone()
    }
    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        self.events.pop_front()
    }
    fn disconnect(&mut self) {
        self.go_down(DisconnectReason::LocalClose);
    }
    fn register(&mut self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.mem.register(buf, access, &CAPS)
    }
    fn register_shared(
        &mut self,
        buf: Bytes,
        access: Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.mem.register_shared(buf, access, &CAPS)
    }
    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.mem.deregister(mr)
    }
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.mem.region(mr)
    }
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.mem.region_mut(mr)
    }
    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return Err(ProviderError::NotConnected);
        }
        if self.rq.len() >= CAPS.max_recv_wr as usize {
            return Err(ProviderError::QueueFull);
        }
        let hold = self.mem.check_recv(&wr)?;
        self.check_new_id(wr.wr_id);
        self.mem.hold(&[hold]);
        self.rq.push_back((wr, hold.idx));
        Ok(())
    }
    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        if self.state != ConnectionState::Established {
            return Err(ProviderError::NotConnected);
        }
        if self.sq.len() >= self.send_limit {
            return Err(ProviderError::QueueFull);
        }
        let rules = SendRules {
            read_single_sge: true,
            read_sink_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            ord_zero: self.info.as_ref().is_some_and(|i| i.ord == 0),
        };
        let checked = self.mem.check_send(&wr, &CAPS, &rules)?;
        self.check_new_id(wr.wr_id);
        self.mem.hold(&checked.holds);
        let mut data = Vec::new();
        if !matches!(wr.op, SendOp::Read { .. } | SendOp::LocalInvalidate { .. }) {
            for s in &wr.sges {
                data.extend_from_slice(self.mem.slice(
                    Stag(s.lkey).index(),
                    s.offset as usize,
                    s.length as usize,
                ));
            }
        }
        if matches!(
            wr.op,
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. }
        ) {
            self.sent.push(data.clone());
        }
        self.sq.push(PostedSend {
            wr,
            holds: checked.holds,
            data,
        });
        Ok(())
    }
    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        while let Some((c, holds)) = self.cq.pop_front() {
            self.mem.release(&holds);
            out.push(c);
            n += 1;
        }
        n
    }
    fn arm(&mut self, _waker: &Waker, _notify: Notify) {}
}
