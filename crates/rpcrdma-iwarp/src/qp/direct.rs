//! The zero-copy receive path of a TCP owner, [`QueuePair::read_direct`]:
//! one scatter read takes the rest of the current payload straight into
//! its target and what follows it (PAD, CRC, the next header) into a
//! scratch buffer, and — inside an RDMA Read Response — the segments the
//! Read still expects, each straight into its place in the Read's sink.
//!
//! # Read Responses: the sink is placed ahead of its headers
//!
//! A Read Response's segments arrive in order and fill the sink of the
//! oldest outstanding Read from its start to its end (the checks of
//! `OutRead::accepts`); a peer sends them one after the other at its
//! MULPDU. Once one segment's header has passed every check and it is not
//! the last, the octets that follow are predicted: the next segment has
//! the same length (or what the Read still expects, if less) and goes
//! where this one ends. One read then takes many FPDUs (the 1 MiB Read
//! Response of a WRITE 1 MiB, 17 FPDUs, took one `readv` per FPDU).
//!
//! The predicted payloads land in the sink *before* their headers are
//! checked — only inside the part of the Read's own sink (its SGE) that
//! the Read has not received yet, never anywhere else. Then each FPDU goes
//! through the same checks as on the general path, in order: a payload
//! whose header put it exactly where it already is (same region, offset
//! and length, a Read Response) is counted as read there (its CRC computed
//! over it); at the first one that is not, everything the read took from
//! there on is copied out and handed to [`QueuePair::handle_input`], which
//! places it (or refuses it) as it always does. So the outcome is the
//! general path's — completions, Terminates, every octet of memory —
//! except the unreceived part of a Read's sink, whose contents are
//! undefined until the Read completes (as an RDMA Read's sink is in verbs:
//! a Read that fails leaves its buffer undefined), and which a Read
//! completes only once checked segments have overwritten all of it. Pinned
//! to the general path by the `qp_direct` proptests.
//!
//! An RDMA Write's target is not treated so: the peer may write any part
//! of it, and the octets it did not write are the owner's.

use std::io::{self, IoSliceMut};

use smallvec::SmallVec;

use crate::ddp::TAGGED_HEADER_LEN;
use crate::mpa::fpdu::pad_len;

use super::recv::{Dst, RxAction, RxState, DIRECT_TAIL_MAX};
use super::QueuePair;

/// Read Response segments one [`QueuePair::read_direct`] places ahead of
/// their headers at most (32 of the default MULPDU: 2 MiB).
const SPECULATE_MAX: usize = 32;

/// The pieces of one direct read: payloads, consecutive in one region from
/// `start` (the first is the rest of the current payload, the others
/// predicted Read Response segments), each followed by a tail read into
/// scratch (empty when the read stops inside the payload).
struct Plan {
    idx: u32,
    start: usize,
    pieces: SmallVec<[(usize, usize); SPECULATE_MAX + 1]>,
}

impl Plan {
    fn total(&self) -> usize {
        self.pieces.iter().map(|&(p, t)| p + t).sum()
    }

    fn payload(&self) -> usize {
        self.pieces.iter().map(|&(p, _)| p).sum()
    }
}

impl QueuePair {
    /// One read straight into the current payload's target
    /// ([`QueuePair::direct_target`]) and, when that takes the payload's
    /// rest, of what follows it ([`QueuePair::direct_tail_len`]) into a
    /// scratch buffer handed to [`QueuePair::handle_input`]; inside a Read
    /// Response, also the segments the Read still expects, each into its
    /// place in the sink (see `qp/direct.rs`) — the zero-copy
    /// receive path of a TCP owner. At most `max` octets. `read` fills its
    /// buffers in order and returns the octets read (a scatter read such
    /// as `readv(2)`; an error or 0 is returned as it is, nothing
    /// consumed); `seen` gets the octets read, in order, in one or more
    /// pieces (for captures). `None` (nothing done) when no payload is
    /// being read to memory. Otherwise the read's outcome and the octets
    /// asked.
    pub fn read_direct<R, S>(
        &mut self,
        max: usize,
        read: R,
        mut seen: S,
    ) -> Option<(io::Result<usize>, usize)>
    where
        R: FnOnce(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
        S: FnMut(&[u8]),
    {
        let plan = self.direct_plan(max)?;
        let asked = plan.total();
        let mut scratch = [[0u8; DIRECT_TAIL_MAX]; SPECULATE_MAX + 1];
        let r = {
            let end = plan.start.checked_add(plan.payload())?;
            let mut rest = self
                .mem
                .region_at_mut(plan.idx)?
                .buf_mut()?
                .get_mut(plan.start..end)?;
            let mut iov: SmallVec<[IoSliceMut<'_>; 2 * (SPECULATE_MAX + 1)]> = SmallVec::new();
            for (&(p, t), s) in plan.pieces.iter().zip(scratch.iter_mut()) {
                let (a, b) = std::mem::take(&mut rest).split_at_mut(p);
                rest = b;
                iov.push(IoSliceMut::new(a));
                if t > 0 {
                    iov.push(IoSliceMut::new(&mut s[..t]));
                }
            }
            read(&mut iov)
        };
        let n = match r {
            Ok(n) if n > 0 => n.min(asked),
            other => return Some((other, asked)),
        };
        self.direct_settle(&plan, &scratch, n, &mut seen);
        Some((Ok(n), asked))
    }

    /// What the next direct read takes (see [`Plan`]), or `None`.
    fn direct_plan(&self, max: usize) -> Option<Plan> {
        if self.rx.state != RxState::Payload || self.params.recv_markers || self.rx.remaining == 0 {
            return None;
        }
        let Dst::Mem { idx, off } = self.rx.dst else {
            return None;
        };
        let rem = self.rx.remaining;
        let mut plan = Plan {
            idx,
            start: off,
            pieces: SmallVec::new(),
        };
        if rem > max {
            plan.pieces.push((max, 0));
            return Some(plan);
        }
        let tail = self.direct_tail_len().min(DIRECT_TAIL_MAX);
        plan.pieces.push((rem, tail));
        let mut left = max.saturating_sub(rem + tail);
        let Some((seg, mut expected)) = self.next_read_response(off + rem) else {
            return Some(plan);
        };
        while expected > 0 && plan.pieces.len() <= SPECULATE_MAX {
            let p = seg.min(expected);
            let t = pad_len(TAGGED_HEADER_LEN + p) + 4 + 2 + TAGGED_HEADER_LEN;
            if p + t > left {
                break;
            }
            plan.pieces.push((p, t));
            left -= p + t;
            expected -= p;
        }
        // (Inside the Read's SGE, which `post_send` checked against the
        // region: always there.)
        let end = off.checked_add(plan.payload())?;
        if self.mem.slice(idx, off, end - off).len() != end - off {
            plan.pieces.truncate(1);
        }
        Some(plan)
    }

    /// When the payload being read is a Read Response segment that is not
    /// the Read's last, ending at region offset `end`: the length of the
    /// segments predicted to follow (this one's) and the octets the Read
    /// still expects after it.
    fn next_read_response(&self, end: usize) -> Option<(usize, usize)> {
        if !matches!(self.rx.action, RxAction::ReadResponse { last: false })
            || self.rx.fault.is_some()
        {
            return None;
        }
        let seg = self.rx.ulpdu_len.checked_sub(self.rx.hdr_len)?;
        let (to, rest) = self.ord_q.front()?.rest_after(seg as u64)?;
        // A sink's TO is its region offset (base 0, `region_info`).
        if seg == 0 || to != end as u64 {
            return None;
        }
        Some((seg, usize::try_from(rest).ok()?))
    }

    /// True if the general path would place the next `len` payload
    /// octets exactly at `off` of region `idx`: the payload of a Read
    /// Response segment of that length, header checked, not yet placed.
    fn placed_as_predicted(&self, idx: u32, off: usize, len: usize) -> bool {
        self.rx.state == RxState::Payload
            && self.rx.dst == (Dst::Mem { idx, off })
            && self.rx.remaining == len
            && matches!(self.rx.action, RxAction::ReadResponse { .. })
            && self.rx.fault.is_none()
    }

    /// Runs the `n` octets a direct read took through the checks, in
    /// order (see the [module docs](self)).
    fn direct_settle<S: FnMut(&[u8])>(
        &mut self,
        plan: &Plan,
        scratch: &[[u8; DIRECT_TAIL_MAX]],
        n: usize,
        seen: &mut S,
    ) {
        let mut left = n;
        let mut off = plan.start;
        for (i, &(p, t)) in plan.pieces.iter().enumerate() {
            let k = p.min(left);
            if i > 0 && !self.placed_as_predicted(plan.idx, off, p) {
                // Not where the header put it: the general path takes
                // everything from here on.
                let mut v = Vec::with_capacity(left);
                let mut o = off;
                let mut l = left;
                for (&(p, t), s) in plan.pieces[i..].iter().zip(&scratch[i..]) {
                    let k = p.min(l);
                    v.extend_from_slice(self.mem.slice(plan.idx, o, k));
                    let tk = t.min(l - k);
                    v.extend_from_slice(&s[..tk]);
                    l -= k + tk;
                    o += p;
                }
                seen(&v);
                self.handle_input(&v);
                return;
            }
            seen(self.mem.slice(plan.idx, off, k));
            self.direct_filled(k);
            left -= k;
            off += p;
            let tk = t.min(left);
            if tk > 0 {
                let s = scratch.get(i).map(|s| &s[..tk]).unwrap_or_default();
                seen(s);
                self.handle_input(s);
                left -= tk;
            }
            if left == 0 {
                return;
            }
        }
    }
}
