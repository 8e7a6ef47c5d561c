//! Where one proxied connection is cut: a [`Plan`] drawn from a seeded
//! stream per (client, connection number), and the [`Trigger`] that looks
//! at every unit passing in either direction and fires once.
//!
//! A plan waits for `after_calls` RPC calls (Send messages from the client)
//! to pass, then cuts at the next point of its kind. Every connection gets
//! a plan, so a client is cut about once per `after_calls` calls, whatever
//! the sizes of its calls (a per-octet or per-FPDU chance would cut a
//! 1 MiB call hundreds of times more often than a NULL). The lower bound
//! of `after_calls` keeps the calls re-sent after a cut (the first ones on
//! the new connection) mostly out of the next cut's reach, so that a call
//! rarely loses all of its transmissions.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use rpcrdma_iwarp::rdmap::Opcode;
use rpcrdma_proto::provider::fault::SplitMix64;

use super::watch::{Unit, C2S, S2C};

/// Where in the traffic a cut falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CutKind {
    /// Inside the MPA Request (a reconnection's handshake).
    MpaRequest,
    /// Inside the MPA Reply (a reconnection's handshake).
    MpaReply,
    /// Right after the client's first FPDU (the RFC 6581 RTR), before the
    /// server's answer (a reconnection's setup).
    Rtr,
    /// Inside an FPDU (either direction), after the first octet and
    /// before the last.
    MidFpdu,
    /// After an RDMA Read Request (server to client), before its Read
    /// Response.
    ReadGap,
    /// Between two RDMA Write segments of one message (after a segment
    /// without L).
    WriteMid,
    /// Right after the last segment of a call's Send (before the reply).
    AfterCall,
    /// After the first octets (1 to 32) of a reply's first FPDU.
    ReplyStart,
}

impl CutKind {
    /// Every kind, in report order.
    pub const ALL: [CutKind; 8] = [
        CutKind::MpaRequest,
        CutKind::MpaReply,
        CutKind::Rtr,
        CutKind::MidFpdu,
        CutKind::ReadGap,
        CutKind::WriteMid,
        CutKind::AfterCall,
        CutKind::ReplyStart,
    ];

    /// Relative weights of the kinds in a draw.
    const WEIGHTS: [u64; 8] = [4, 3, 3, 24, 15, 15, 18, 18];

    /// Cuts in connection setup (see [`Plan::draw`]).
    pub fn in_setup(self) -> bool {
        matches!(self, CutKind::MpaRequest | CutKind::MpaReply | CutKind::Rtr)
    }
}

/// How the proxy closes both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CutMode {
    /// `shutdown(SHUT_RDWR)`: FIN to both ends.
    Fin,
    /// `SO_LINGER` 0 and close: RST to both ends.
    Rst,
}

/// The cut of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Where.
    pub kind: CutKind,
    /// How.
    pub mode: CutMode,
    /// Calls (client Sends) that pass before the plan is armed.
    pub after_calls: u32,
    /// [`CutKind::MidFpdu`]: the direction cut, and FPDUs of it that pass
    /// once armed.
    pub dir: usize,
    /// (MidFpdu) FPDUs let through once armed.
    pub skip: u32,
    /// Picks the octet inside a unit (MidFpdu, ReplyStart, MpaRequest).
    pub offset: u64,
}

impl Plan {
    /// Calls between cuts: uniform in this range (mean 34: about 3 % of
    /// the calls end with a cut).
    pub const AFTER_CALLS: std::ops::RangeInclusive<u32> = 8..=60;

    /// The plan of connection `conn` of client `client` under `seed`.
    /// Setup cuts never fall on a client's first connection (the test
    /// needs it to start); they may follow each other (a connection lost
    /// without the call's timeout does not use up a transmission:
    /// `EngineConfig::max_transmissions`).
    pub fn draw(seed: u64, client: usize, conn: u32) -> Plan {
        Self::drawn(seed, client, conn, conn > 0)
    }

    /// The plan of connection `conn`, setup cuts allowed or not.
    fn drawn(seed: u64, client: usize, conn: u32, setup: bool) -> Plan {
        let mut rng = SplitMix64(seed ^ ((client as u64) << 40) ^ (u64::from(conn) << 8));
        // Two draws to spread neighbouring seeds.
        rng.next_u64();
        let mut weights = CutKind::WEIGHTS;
        for (k, w) in CutKind::ALL.iter().zip(weights.iter_mut()) {
            if !setup && k.in_setup() {
                *w = 0;
            }
        }
        let mut pick = rng.below(weights.iter().sum());
        let mut kind = CutKind::ALL[0];
        for (k, w) in CutKind::ALL.iter().zip(weights) {
            if pick < w {
                kind = *k;
                break;
            }
            pick -= w;
        }
        let (lo, hi) = (*Self::AFTER_CALLS.start(), *Self::AFTER_CALLS.end());
        Plan {
            kind,
            mode: if rng.chance(0.5) {
                CutMode::Fin
            } else {
                CutMode::Rst
            },
            after_calls: lo + rng.below(u64::from(hi - lo + 1)) as u32,
            dir: if rng.chance(0.5) { C2S } else { S2C },
            skip: rng.below(32) as u32,
            offset: rng.next_u64(),
        }
    }
}

/// A plan in action on one connection (shared by its two directions).
pub struct Trigger {
    plan: Plan,
    /// FPDUs seen from the client.
    fpdus_c2s: AtomicU32,
    calls: AtomicU32,
    skipped: AtomicU32,
    fired: AtomicBool,
}

impl Trigger {
    /// Arms `plan`.
    pub fn new(plan: Plan) -> Trigger {
        Trigger {
            plan,
            fpdus_c2s: AtomicU32::new(0),
            calls: AtomicU32::new(0),
            skipped: AtomicU32::new(0),
            fired: AtomicBool::new(false),
        }
    }

    /// The plan.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// True once the cut is decided: nothing more may be forwarded in
    /// either direction.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Looks at the next unit of direction `dir` (`len` octets), in
    /// stream order. `Some(keep)`: the cut is decided (and [`fired`]
    /// set): forward the first `keep` octets of this unit, then cut.
    ///
    /// [`fired`]: Trigger::fired
    pub fn decide(&self, dir: usize, len: usize, unit: Unit) -> Option<usize> {
        let seg = match unit {
            Unit::Fpdu(s) => Some(s),
            _ => None,
        };
        let first_c2s =
            dir == C2S && seg.is_some() && self.fpdus_c2s.fetch_add(1, Ordering::SeqCst) == 0;
        let call_end = dir == C2S && seg.is_some_and(|s| s.ends_message());
        let calls = if call_end {
            self.calls.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.calls.load(Ordering::SeqCst)
        };
        let armed = calls >= self.plan.after_calls;
        let inside = |cap: usize| 1 + (self.plan.offset % (len.min(cap) as u64 - 1)) as usize;
        let keep = match (self.plan.kind, seg) {
            (CutKind::MpaRequest, _) if dir == C2S && unit == Unit::Frame && len > 1 => {
                Some(inside(len))
            }
            (CutKind::MpaReply, _) if dir == S2C && unit == Unit::Frame && len > 1 => {
                Some(inside(len))
            }
            (CutKind::Rtr, Some(_)) if first_c2s => Some(len),
            (CutKind::MidFpdu, Some(_)) if armed && dir == self.plan.dir && len > 1 => {
                if self.skipped.fetch_add(1, Ordering::SeqCst) < self.plan.skip {
                    None
                } else {
                    Some(inside(len))
                }
            }
            (CutKind::ReadGap, Some(s)) if armed && dir == S2C => {
                (s.opcode == Opcode::READ_REQUEST).then_some(len)
            }
            (CutKind::WriteMid, Some(s)) if armed && dir == S2C => {
                (s.opcode == Opcode::WRITE && !s.last).then_some(len)
            }
            (CutKind::AfterCall, Some(_)) if armed && call_end => Some(len),
            (CutKind::ReplyStart, Some(s)) if armed && dir == S2C && len > 1 => {
                s.starts_message().then(|| inside(33))
            }
            _ => None,
        }?;
        // One cut per connection, by whichever direction gets there first.
        self.fired
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| keep)
    }
}
