//! `qp_segments`: DDP/RDMAP segment processing at a queue pair with
//! registered memory ([`super::env::Env`]: a remotely writable region, a
//! remotely readable-only region, a local-only region, an invalidated
//! region, a stale STag, four posted receives, two outstanding RDMA Reads
//! of our own).
//!
//! The input chooses CRC and Markers, how the octets are fed (whole FPDUs,
//! pieces, or payload through `direct_target`) and a sequence of segments
//! ([`super::gen`]: valid-looking Send / Write / Read Response / Read
//! Request / Terminate headers naming the queue pair's STags, MSNs and
//! Reads, plus mutations, raw ULPDUs and corrupted CRCs), each framed as an
//! FPDU. A model built from what was fed (never from what the queue pair
//! says) asserts:
//!
//! * no octet of a region changes unless a segment the model permits
//!   placed it: Writes and Read Responses only into a valid STag with
//!   REMOTE_WRITE, in bounds (Read Responses only into the sink of the
//!   front Read); Sends only into the receive of their MSN, in bounds. So
//!   the remotely readable-only, local-only and invalidated regions never
//!   change, nor does a region through a stale or invalidated STag;
//! * a Read Request the queue pair accepts reads the remotely readable
//!   region, valid, in bounds (or is zero-length), and every Read Response
//!   it sends carries exactly those octets to the requested sink, in order;
//! * every rejection is a Terminate whose layer / type / code is in
//!   [`crate::TerminateCode::TABLE`], and it is the last FPDU sent; the
//!   queue pair closes only with a Terminate sent or received;
//! * a successful receive completion reports no more octets than that
//!   message's segments placed: octets `0..byte_len` were all placed by
//!   segments with its MSN, and hold what they carried (the buffers are
//!   poisoned beforehand), completions come in MSN order;
//! * an RDMA Read completes successfully only when its whole sink was
//!   placed by Read Responses (a short Read Response with L=1 must not
//!   complete it), with their octets;
//! * every work request completes exactly once.

use arbitrary::{Result, Unstructured};

use crate::ddp::DdpHeader;
use crate::mpa::fpdu::{FpduReceiver, FpduSender, FramingConfig, Received};
use crate::qp::StreamParams;
use crate::rdmap::{Opcode, ReadRequest, Segment, QN_SEND};
use crate::TerminateCode;
use rpcrdma_proto::provider::{Completion, Opcode as CqOp, Status};

use super::env::{Env, Kind, INV_WR, READ_LENS, READ_WR, RECV_LENS, RECV_WR};
use super::feed::{drain, feed, Mode};
use super::gen::{self, GenState};

/// Segments fed at most.
const MAX_SEGMENTS: usize = 48;

/// What the model knows of one region.
struct RegModel {
    stag: u32,
    kind: Kind,
    remote_write: bool,
    remote_read: bool,
    valid: bool,
    /// The octets a correct queue pair holds there now (as far as the
    /// permitted placements go).
    content: Vec<u8>,
    /// Octets some permitted placement reached.
    allowed: Vec<bool>,
    /// Octets placed for the current message (receive) or Read (sink).
    covered: Vec<bool>,
}

/// An accepted inbound Read Request.
#[derive(Clone, Copy, Debug)]
struct InRead {
    rr: ReadRequest,
}

struct Model {
    regs: Vec<RegModel>,
    /// Receives completed (MSN order).
    recv_done: usize,
    /// Front outstanding Read of ours.
    read_front: usize,
    accepted_reads: Vec<InRead>,
    /// What the last segment will do once the queue pair accepts it.
    pending: Pending,
    /// Completions seen per `wr_id`.
    completed: Vec<(u64, Status)>,
}

#[derive(Default)]
struct Pending {
    advance_read: bool,
    invalidate: Option<u32>,
    read_request: Option<ReadRequest>,
}

fn place(r: &mut RegModel, off: u64, data: &[u8], cover: bool) {
    let off = off as usize;
    for (i, &b) in data.iter().enumerate() {
        r.content[off + i] = b;
        r.allowed[off + i] = true;
        if cover {
            r.covered[off + i] = true;
        }
    }
}

fn fits(off: u64, len: usize, region: usize) -> bool {
    u128::from(off) + len as u128 <= region as u128
}

impl Model {
    fn new(env: &Env) -> Model {
        let regs = env
            .regions
            .iter()
            .map(|r| {
                let a = r.mr.access();
                use rpcrdma_proto::provider::Access;
                RegModel {
                    stag: r.mr.stag().0,
                    kind: r.kind,
                    remote_write: a.contains(Access::REMOTE_WRITE),
                    remote_read: a.contains(Access::REMOTE_READ),
                    valid: r.kind != Kind::Invalidated,
                    content: r.initial.clone(),
                    allowed: vec![false; r.initial.len()],
                    covered: vec![false; r.initial.len()],
                }
            })
            .collect();
        Model {
            regs,
            recv_done: 0,
            read_front: 0,
            accepted_reads: Vec::new(),
            pending: Pending::default(),
            completed: Vec::new(),
        }
    }

    fn reg(&mut self, kind: Kind) -> Option<&mut RegModel> {
        self.regs.iter_mut().find(|r| r.kind == kind)
    }

    fn writable(&mut self, stag: u32, off: u64, len: usize) -> Option<&mut RegModel> {
        self.regs
            .iter_mut()
            .find(|r| r.stag == stag)
            .filter(|r| r.valid && r.remote_write && fits(off, len, r.content.len()))
    }

    /// A segment is about to be fed: record what it may place.
    fn before(&mut self, ulpdu: &[u8], env: &Env) {
        self.pending = Pending::default();
        let Ok(seg) = Segment::parse(ulpdu) else {
            return;
        };
        let data = ulpdu.get(seg.payload.clone()).unwrap_or_default();
        match seg.ddp {
            DdpHeader::Tagged(t) if seg.control.opcode == Opcode::WRITE => {
                if let Some(r) = self.writable(t.stag, t.to, data.len()) {
                    place(r, t.to, data, false);
                }
            }
            DdpHeader::Tagged(t) if seg.control.opcode == Opcode::READ_RESPONSE => {
                let Some(&(sink, sink_to, len)) = env.reads.get(self.read_front) else {
                    return;
                };
                let in_range = t.stag == sink
                    && t.to >= sink_to
                    && u128::from(t.to) + data.len() as u128
                        <= u128::from(sink_to) + u128::from(len);
                if !in_range {
                    return;
                }
                let front = self.read_front;
                if let Some(r) = self.writable(t.stag, t.to, data.len()) {
                    if r.kind == Kind::ReadSink(front) {
                        place(r, t.to, data, true);
                    }
                }
                self.pending.advance_read = t.last;
            }
            DdpHeader::Untagged(h) if h.qn == QN_SEND && seg.control.opcode.is_send() => {
                let i = h.msn.wrapping_sub(1) as usize;
                if i < self.recv_done || i >= RECV_LENS.len() {
                    return;
                }
                if let Some(r) = self.reg(Kind::Recv(i)) {
                    if fits(u64::from(h.mo), data.len(), r.content.len()) {
                        place(r, u64::from(h.mo), data, true);
                    }
                }
                if h.last && seg.control.opcode.carries_invalidate_stag() {
                    self.pending.invalidate = Some(h.rsvd_ulp_word);
                }
            }
            DdpHeader::Untagged(_) if seg.control.opcode == Opcode::READ_REQUEST => {
                self.pending.read_request = seg.read_request;
            }
            _ => {}
        }
    }

    /// The queue pair is still up after the segment: it was accepted.
    fn accepted(&mut self) {
        let p = std::mem::take(&mut self.pending);
        if p.advance_read {
            self.read_front += 1;
        }
        if let Some(s) = p.invalidate {
            if let Some(r) = self.regs.iter_mut().find(|r| r.stag == s) {
                r.valid = false;
            }
        }
        if let Some(rr) = p.read_request {
            if rr.size > 0 {
                let ok = self.regs.iter().any(|r| {
                    r.stag == rr.src_stag
                        && r.valid
                        && r.remote_read
                        && fits(rr.src_to, rr.size as usize, r.content.len())
                });
                assert!(
                    ok,
                    "accepted a Read Request of {} octets at {:#x} through STag {:#010x}, \
                     which is not a valid remotely readable range",
                    rr.size, rr.src_to, rr.src_stag
                );
            }
            self.accepted_reads.push(InRead { rr });
        }
    }

    fn completion(&mut self, env: &Env, c: &Completion) {
        assert!(
            !self.completed.iter().any(|(w, _)| *w == c.wr_id),
            "work request {} completed twice: {c:?}",
            c.wr_id
        );
        self.completed.push((c.wr_id, c.status));
        if c.status != Status::Success {
            assert_eq!(c.byte_len, 0, "failed completion with octets: {c:?}");
            return;
        }
        let n = c.byte_len as usize;
        let (kind, what, defect) = match c.wr_id {
            w if (RECV_WR..RECV_WR + RECV_LENS.len() as u64).contains(&w) => {
                let i = (w - RECV_WR) as usize;
                assert!(
                    matches!(c.opcode, CqOp::Recv | CqOp::RecvWithInvalidate { .. }),
                    "{c:?}"
                );
                assert_eq!(i, self.recv_done, "receives completed out of MSN order");
                self.recv_done += 1;
                (
                    Kind::Recv(i),
                    format!("receive for MSN {}", i + 1),
                    "recv-stale-octets",
                )
            }
            w if (READ_WR..READ_WR + READ_LENS.len() as u64).contains(&w) => {
                let j = (w - READ_WR) as usize;
                assert_eq!(c.opcode, CqOp::Read, "{c:?}");
                assert_eq!(
                    c.byte_len, READ_LENS[j],
                    "RDMA Read {j} completed with another length"
                );
                (
                    Kind::ReadSink(j),
                    format!("RDMA Read {j}"),
                    "read-short-response",
                )
            }
            INV_WR => return,
            w => panic!("completion for a work request never posted: {w} {c:?}"),
        };
        let Some(r) = self.regs.iter().find(|r| r.kind == kind) else {
            return;
        };
        assert!(
            n <= r.content.len(),
            "{what}: {n} octets in a smaller buffer"
        );
        if super::skipped(defect) {
            return;
        }
        if let Some(hole) = r.covered[..n].iter().position(|&c| !c) {
            panic!(
                "{what} completed successfully with {n} octets, but octet {hole} was \
                 never placed by one of its segments (stale buffer contents delivered)"
            );
        }
        let Some(reg) = env.region(kind) else { return };
        let mem = env
            .qp
            .region(&reg.mr)
            .unwrap_or_else(|e| panic!("{what}: region unreadable after completion: {e}"));
        assert_eq!(
            &mem[..n],
            &r.content[..n],
            "{what}: delivered octets differ from what its segments carried"
        );
    }
}

/// Our own output: well-formed FPDUs; Read Responses that match accepted
/// Read Requests and carry the remotely readable region's octets; a
/// Terminate only at the end, with the code the queue pair reports.
fn check_output(env: &Env, model: &Model, crc: bool, out: &[u8]) {
    let ro = env
        .region(Kind::RemoteRead)
        .map(|r| (r.mr.stag().0, r.initial.clone()))
        .unwrap_or_default();
    let mut rx = FpduReceiver::new(FramingConfig {
        crc,
        markers: false,
    });
    let mut at = 0;
    let mut resp = 0usize; // index into accepted_reads
    let mut resp_off = 0u64;
    let mut terminated = false;
    while at < out.len() {
        let buf = &out[at..];
        let f = match rx.poll(buf) {
            Ok(Received::Fpdu(f)) => f,
            other => panic!("our output at {at} is not a whole FPDU: {other:?}"),
        };
        let mut u = Vec::new();
        f.extend_ulpdu(buf, &mut u);
        at += f.consumed;
        assert!(!terminated, "FPDU sent after our Terminate");
        let seg = Segment::parse(&u).unwrap_or_else(|c| panic!("we sent a bad segment: {c}"));
        let payload = u.get(seg.payload.clone()).unwrap_or_default();
        match (seg.ddp, seg.control.opcode) {
            (DdpHeader::Untagged(_), Opcode::READ_REQUEST) => {}
            (DdpHeader::Untagged(_), Opcode::TERMINATE) => {
                let t = seg.terminate(&u).expect("our Terminate decodes");
                assert_eq!(
                    Some(t.code),
                    env.qp.terminate_sent().map(|t| t.code),
                    "the Terminate sent is not the one reported"
                );
                terminated = true;
            }
            (DdpHeader::Tagged(t), Opcode::READ_RESPONSE) => {
                let Some(r) = model.accepted_reads.get(resp) else {
                    panic!("Read Response {resp} without an accepted Read Request");
                };
                let rr = r.rr;
                assert_eq!(t.stag, rr.sink_stag, "Read Response to another sink STag");
                assert_eq!(
                    t.to,
                    rr.sink_to.wrapping_add(resp_off),
                    "Read Response at the wrong sink offset"
                );
                if !payload.is_empty() {
                    assert_eq!(rr.src_stag, ro.0, "Read Response data from another region");
                    let start = (rr.src_to + resp_off) as usize;
                    assert_eq!(
                        payload,
                        ro.1.get(start..start + payload.len()).unwrap_or_default(),
                        "Read Response octets are not the source's"
                    );
                }
                resp_off += payload.len() as u64;
                if t.last {
                    assert_eq!(resp_off, u64::from(rr.size), "Read Response length");
                    resp += 1;
                    resp_off = 0;
                }
            }
            (h, op) => panic!("we sent {op} in {h:?} that nobody asked for"),
        }
    }
}

/// The fuzz target; see the module docs.
pub fn fuzz_qp_segments(data: &[u8]) {
    let _ = run(data);
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let crc: bool = u.arbitrary()?;
    let markers = u.ratio(1, 8)?;
    let mode = *u.choose(&[Mode::Whole, Mode::Pieces, Mode::Direct])?;
    let mut cuts = Vec::new();
    for _ in 0..u.int_in_range(1u8..=4)? {
        cuts.push(usize::from(u.int_in_range(1u8..=40)?));
    }
    let params = StreamParams {
        crc,
        send_markers: false,
        recv_markers: markers,
        ird: u.int_in_range(1u8..=4)?,
        ..StreamParams::DEFAULT
    };
    let mut env = Env::new(params);
    assert_eq!(
        env.setup_completions.len(),
        1,
        "setup: {:?}",
        env.setup_completions
    );
    let mut model = Model::new(&env);
    for c in env.setup_completions.clone() {
        model.completion(&env, &c);
    }
    let mut g = GenState::new(&env);
    let mut tx = FpduSender::new(FramingConfig { crc, markers });
    let mut out = Vec::new();
    let mut comps = Vec::new();
    let mut step = |env: &mut Env, model: &mut Model, out: &mut Vec<u8>| {
        drain(&mut env.qp, out);
        comps.clear();
        env.qp.poll_completions(&mut comps);
        for c in &comps {
            model.completion(env, c);
        }
    };
    for _ in 0..MAX_SEGMENTS {
        if u.is_empty() {
            break;
        }
        let ul = gen::ulpdu(&mut u, &mut g)?;
        let Ok(mut fpdu) = tx.fpdu_to_vec(&[&ul]) else {
            continue;
        };
        if u.ratio(1, 32)? {
            if let Some(b) = fpdu.last_mut() {
                *b ^= 0x01;
            }
        }
        model.before(&ul, &env);
        feed(&mut env.qp, &fpdu, mode, &cuts);
        step(&mut env, &mut model, &mut out);
        if env.qp.is_closed() {
            break;
        }
        model.accepted();
    }
    if env.qp.is_closed() {
        if let Some(t) = env.qp.terminate_sent() {
            assert!(
                TerminateCode::TABLE.iter().any(|(c, _)| *c == t.code),
                "Terminate code {:?} is not in the table",
                t.code
            );
        } else {
            assert!(
                env.qp.terminate_received().is_some(),
                "closed without a Terminate: {:?}",
                env.qp.close_reason()
            );
        }
    } else {
        env.qp.disconnect();
    }
    step(&mut env, &mut model, &mut out);
    // Every WR completed exactly once.
    let posted = (0..RECV_LENS.len() as u64)
        .map(|i| RECV_WR + i)
        .chain((0..READ_LENS.len() as u64).map(|j| READ_WR + j))
        .chain([INV_WR]);
    for w in posted {
        assert!(
            model.completed.iter().any(|(x, _)| *x == w),
            "work request {w} never completed"
        );
    }
    check_output(&env, &model, crc, &out);
    // No octet changed without a permitted placement.
    for (r, m) in env.regions.iter().zip(&model.regs) {
        let mem = env
            .qp
            .region(&r.mr)
            .unwrap_or_else(|e| panic!("{:?}: region unreadable at the end: {e}", r.kind));
        for (i, (&now, &was)) in mem.iter().zip(&r.initial).enumerate() {
            assert!(
                now == was || m.allowed[i],
                "octet {i} of the {:?} region changed without a permitted placement",
                r.kind
            );
        }
    }
    Ok(())
}
