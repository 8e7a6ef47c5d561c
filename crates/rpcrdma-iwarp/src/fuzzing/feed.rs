//! The ways a stream reaches a queue pair: all at once (the whole-FPDU
//! fast path), in pieces (the octet-wise state machine), or with payload
//! read straight into the target region (`direct_target`).

use crate::qp::QueuePair;

/// How input octets are handed to the queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One `handle_input` call.
    Whole,
    /// `handle_input` with the pieces given by the cut sizes.
    Pieces,
    /// Pieces, and payload through `direct_target` / `direct_filled`
    /// whenever the queue pair offers a target.
    Direct,
}

/// Feeds `data` to `qp`; `cuts` (sizes ≥ 1, cycled) split it in the
/// piecewise modes.
pub fn feed(qp: &mut QueuePair, data: &[u8], mode: Mode, cuts: &[usize]) {
    if mode == Mode::Whole || cuts.is_empty() {
        qp.handle_input(data);
        return;
    }
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let cut = cuts[i % cuts.len()].max(1);
        i += 1;
        if mode == Mode::Direct {
            if let Some(t) = qp.direct_target() {
                let n = t.len().min(rest.len()).min(cut);
                if n > 0 {
                    t[..n].copy_from_slice(&rest[..n]);
                    qp.direct_filled(n);
                    rest = &rest[n..];
                    continue;
                }
            }
        }
        let n = cut.min(rest.len());
        qp.handle_input(&rest[..n]);
        rest = &rest[n..];
    }
}

/// Appends everything `qp` has to send to `out`.
pub fn drain(qp: &mut QueuePair, out: &mut Vec<u8>) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = qp.poll_transmit(&mut buf);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
}
