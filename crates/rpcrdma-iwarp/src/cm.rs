//! Sans-IO MPA connection setup (RFC 5044 §7, RFC 6581): the initiator's
//! Request, the responder's Reply or Reject, and what they agree on.
//!
//! # Private data
//!
//! [`Established::peer_private_data`] (and so the provider's
//! `ConnectionInfo::peer_private_data`) is the peer's **ULP** private data:
//! on an enhanced revision-2 frame the 4-octet IRD/ORD header is stripped
//! and reported separately ([`Established::peer_ird_ord`]); on revision 1
//! it is the whole MPA private data. The raw frame, header included, stays
//! available as [`Established::peer_frame`] /
//! [`PeerRequest::frame`]. Our own [`IwarpConfig::private_data`] is likewise
//! the ULP part; the IRD/ORD header is added for revision 2.
//!
//! # Defaults (what Linux requires)
//!
//! Revision 2 with the enhanced bit (flags `0x10`), IRD ≥ 1 in the
//! IRD/ORD header, CRC only if asked (used when either side sets `C`),
//! Markers refused (a Request with `M` gets a Reject, as siw does).
//!
//! # Ready to Receive (RFC 6581 peer-to-peer mode)
//!
//! Our initiator asks for the peer-to-peer model with a zero-length RDMA
//! Read as the only RTR ([`IwarpConfig::rtr`]), because Linux siw as
//! responder is not ready to receive when it sends its Reply: `siw_accept`
//! sends the Reply and only then hooks the queue pair's receive path to
//! the socket, and an FPDU that arrives in between stays unread until more
//! data comes (`docs/interop-linux.md`). A Read RTR is the one RTR that is
//! answered: its Read Response proves the responder reads the stream, so
//! the initiator holds every ULP message until it arrives
//! ([`Rtr::Read`]). Linux answers a Read-only offer with Read.
//!
//! Our responder hooks its receive path before it sends the Reply, so it
//! needs no round trip: to a peer-to-peer Request it answers with the
//! peer-to-peer bit and a zero-length RDMA Write as its RTR ([`Rtr::Write`];
//! RFC 6581 §9.2 lets a responder name an option the initiator did not
//! ask for), which the initiator sends and follows at once with its
//! messages.
//!
//! An enhanced frame (revision 2, S set) must begin its private data with
//! the IRD/ORD octets: a Request without them gets a Reject (then the
//! close), a Reply without them closes the connection.
//!
//! # IRD and ORD (RFC 6581 §9.1)
//!
//! Our ORD is at most the peer's IRD, in both roles and whatever revision
//! we answer with (a revision 1 peer sends none: nothing to adjust to); the
//! initiator raises its IRD to the responder's ORD up to `caps.max_ird`,
//! beyond which it sends a Terminate (insufficient IRD) and closes; 0x3FFF
//! (no automatic negotiation) leaves the value unchanged, and a responder
//! echoes it in its Reply.

use rpcrdma_proto::provider::Caps;

use crate::mpa::fpdu::{MULPDU_MAX, MULPDU_MIN};
use crate::mpa::{
    FrameKind, HandshakeProgress, HandshakeReader, IrdOrd, MpaFlags, MpaFrame, MpaFrameError,
    IRD_ORD_LEN, MAX_PRIVATE_DATA,
};
use crate::qp::{StreamParams, DEFAULT_MULPDU};

/// The software iWARP provider's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IwarpConfig {
    /// MPA revision to speak: 2 (RFC 6581 enhanced, default) or 1.
    pub rev: u8,
    /// Ask for (initiator) / require (responder) the MPA CRC.
    pub crc: bool,
    /// Want Markers. Off by default; a peer asking for Markers is rejected
    /// unless this is on.
    pub markers: bool,
    /// Inbound RDMA Reads we accept at once (IRD, ≥ 1 for Linux servers).
    pub ird: u8,
    /// Outbound RDMA Reads we want outstanding at once (ORD).
    pub ord: u8,
    /// ULP private data sent in the Request or Reply (≤ 508 octets with
    /// revision 2, ≤ 512 with revision 1; Linux siw accepts ≤ 256 in all).
    pub private_data: Vec<u8>,
    /// Longest MPA private data accepted from the peer (≤ 512).
    pub mpa_private_data_max: usize,
    /// Largest MULPDU for what we send (default and ceiling 64,768, RFC
    /// 5044 §3; a value outside 128..=64768 is taken as the nearest end).
    pub mulpdu: u16,
    /// Size FPDUs to TCP segments (RFC 5044 §5.1, what Linux siw does): over
    /// TCP to a non-loopback peer, MULPDU becomes the smaller of
    /// [`IwarpConfig::mulpdu`] and the MULPDU of the connection's EMSS
    /// (§4.5: 1,442 octets at MTU 1500), so that each FPDU fits in one
    /// segment. **Off by default**: with our software receiver a 1,442-octet
    /// MULPDU costs 3.7× the user-space instructions of a READ 1 MiB (one
    /// FPDU, and one receive system call, per 1,442 octets instead of per
    /// 64 KiB; BENCHMARKS.md, seventh pass), and a receiver that follows RFC
    /// 5044 Appendix A handles FPDUs across segment boundaries anyway. Turn
    /// it on against Linux siw with the MPA CRC on over a real link: siw
    /// mis-assembles a CRC trailer split across segments
    /// (docs/interop-linux.md). The environment variable
    /// `RPCRDMA_ALIGN_FPDUS=1` turns it on by default.
    pub align_fpdus: bool,
    /// Queue and memory limits.
    pub caps: Caps,
    /// Initiator, revision 2 only: ask for the RFC 6581 peer-to-peer model
    /// with a zero-length RDMA Read as RTR (and an ORD of at least 1 for
    /// it). Against a responder that takes a Read RTR (Linux siw), no ULP
    /// message is sent before its Read Response arrives (see the module
    /// docs). Default on.
    pub rtr: bool,
    /// Initiator: how long to wait for the Read Response of a Read RTR
    /// before the connection is given up (zero-length RDMA Writes nudge a
    /// responder that missed the RTR meanwhile). Default 5 s.
    pub rtr_timeout: std::time::Duration,
    /// TCP congestion control (`TCP_CONGESTION`) for a connection whose
    /// peer is on this host (a loopback address, or our own address):
    /// `Some(name)` sets it on the socket, `None` keeps the system default.
    /// Default `Some("reno")`, which every kernel has and lets any user
    /// choose. A pacing algorithm such as BBR (the default of many
    /// distributions) times every segment by its estimate of the path's
    /// bandwidth; on loopback that estimate measures the sender's own CPU
    /// and settles per connection either above the copy speed (no effect)
    /// or below it, where each 1 MiB burst goes out in pacing-timer steps
    /// at half the speed (BENCHMARKS.md, sixth pass). With no bottleneck
    /// queue to protect, pacing a local connection buys nothing. Peers on
    /// other hosts keep the system's choice. The environment variable
    /// `RPCRDMA_LOCAL_CONGESTION` changes the default: `system` (keep the
    /// system default) or an algorithm's name.
    pub local_congestion: Option<String>,
}

impl Default for IwarpConfig {
    fn default() -> Self {
        IwarpConfig {
            rev: 2,
            crc: false,
            markers: false,
            ird: 16,
            ord: 16,
            private_data: Vec::new(),
            mpa_private_data_max: MAX_PRIVATE_DATA,
            mulpdu: DEFAULT_MULPDU,
            caps: DEFAULT_CAPS,
            rtr: true,
            rtr_timeout: std::time::Duration::from_secs(5),
            local_congestion: local_congestion_default(),
            align_fpdus: std::env::var("RPCRDMA_ALIGN_FPDUS").is_ok_and(|v| v == "1"),
        }
    }
}

/// The default of [`IwarpConfig::local_congestion`]: Reno, which does not
/// pace and which the kernel lets every user set.
pub const LOCAL_CONGESTION: &str = "reno";

/// [`IwarpConfig::local_congestion`]'s default: [`LOCAL_CONGESTION`], or
/// what `RPCRDMA_LOCAL_CONGESTION` says (`system`: `None`).
fn local_congestion_default() -> Option<String> {
    match std::env::var("RPCRDMA_LOCAL_CONGESTION") {
        Ok(v) if v == "system" => None,
        Ok(v) if !v.is_empty() => Some(v),
        _ => Some(LOCAL_CONGESTION.to_owned()),
    }
}

/// Limits of the software iWARP provider.
pub const DEFAULT_CAPS: Caps = Caps {
    max_send_wr: 1024,
    max_recv_wr: 1024,
    max_send_sge: 8,
    max_recv_sge: 1,
    max_read_sge: 1,
    max_msg_size: 1 << 30,
    max_mr_size: 1 << 32,
    max_mr: 1 << 16,
    max_private_data: (MAX_PRIVATE_DATA - IRD_ORD_LEN) as u16,
    max_ird: 64,
    max_ord: 64,
    max_inline: 4096,
    read_sink_needs_remote_write: true,
    remote_invalidation: true,
};

/// Why connection setup failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer's frame is invalid (bad key, private data too long): close
    /// the connection (RFC 5044 §7.1).
    Frame(MpaFrameError),
    /// The peer's revision is not one we can speak.
    BadRevision(u8),
    /// Our own configuration cannot be encoded (private data too long,
    /// revision other than 1 or 2).
    Config(&'static str),
    /// The call does not fit the state (e.g. `accept` before a Request).
    State(&'static str),
    /// The responder chose the peer-to-peer model but no RTR we can send
    /// (only a zero-length Send, or a Read RTR with an IRD of 0).
    NoMatchingRtr,
    /// An enhanced frame (revision 2, S set) whose private data does not
    /// begin with the 4 IRD/ORD octets: the responder has put a Reject in
    /// [`Handshake::output`] (send it, then close); the initiator closes.
    NoIrdOrd {
        /// PD_Length of the frame (0 to 3).
        pd_len: usize,
    },
    /// Initiator: the responder's ORD exceeds the IRD we can offer
    /// (`IwarpConfig::caps.max_ird`). The MPA exchange is over: send a
    /// Terminate (LLP / 0 / 0x06, insufficient IRD) in the FPDU stream
    /// framed as `established.params` say, then close.
    InsufficientIrd {
        /// The responder's ORD.
        responder_ord: u16,
        /// What the exchange agreed otherwise (framing for the Terminate).
        established: Box<Established>,
    },
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Frame(e) => write!(f, "invalid MPA frame: {e}"),
            HandshakeError::BadRevision(r) => write!(f, "unsupported MPA revision {r}"),
            HandshakeError::Config(w) => write!(f, "bad configuration: {w}"),
            HandshakeError::State(w) => write!(f, "handshake state: {w}"),
            HandshakeError::NoMatchingRtr => {
                write!(f, "the responder offers no RTR (RFC 6581) we can send")
            }
            HandshakeError::NoIrdOrd { pd_len } => write!(
                f,
                "enhanced MPA frame without the IRD/ORD octets (PD_Length {pd_len})"
            ),
            HandshakeError::InsufficientIrd { responder_ord, .. } => {
                write!(
                    f,
                    "responder ORD {responder_ord} exceeds the IRD we can offer"
                )
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

/// A peer's Request, seen by the responder before it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRequest {
    /// The raw frame (flags, revision, the whole private data).
    pub frame: MpaFrame,
    /// The ULP private data (after the IRD/ORD header on revision 2).
    pub private_data: Vec<u8>,
    /// The IRD/ORD header (enhanced revision 2 only).
    pub ird_ord: Option<IrdOrd>,
}

/// The outcome of a successful exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    /// What the FPDU phase uses.
    pub params: StreamParams,
    /// The peer's frame as received.
    pub peer_frame: MpaFrame,
    /// The peer's ULP private data.
    pub peer_private_data: Vec<u8>,
    /// The peer's IRD/ORD header (enhanced revision 2 only).
    pub peer_ird_ord: Option<IrdOrd>,
    /// The MPA revision in use.
    pub revision: u8,
    /// The RFC 6581 RTR of this connection (the initiator sends it first).
    pub rtr: Rtr,
}

/// The RFC 6581 Ready-to-Receive message a connection starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rtr {
    /// Client-server model: no RTR (the first ULP message plays its role).
    None,
    /// A zero-length RDMA Write; ULP messages may follow it at once.
    Write,
    /// A zero-length RDMA Read; the initiator sends no ULP message before
    /// its Read Response has arrived.
    Read,
}

/// What [`Handshake::feed`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// More octets are needed.
    NeedMore,
    /// Responder: the Request arrived; answer with [`Handshake::accept`] or
    /// [`Handshake::reject`].
    Request(PeerRequest),
    /// Initiator: the Reply accepted the connection.
    Established(Established),
    /// Initiator: the responder rejected, with its ULP private data.
    Rejected {
        /// ULP private data of the Reject.
        private_data: Vec<u8>,
        /// The raw Reject frame.
        frame: MpaFrame,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Initiator,
    Responder,
}

/// One side of the MPA exchange. Send [`Handshake::output`] on the TCP
/// connection, feed what arrives to [`Handshake::feed`].
#[derive(Clone, Debug)]
pub struct Handshake {
    role: Role,
    cfg: IwarpConfig,
    reader: HandshakeReader,
    sent: Option<MpaFrame>,
    request: Option<MpaFrame>,
    out: Vec<u8>,
    done: bool,
}

fn ird_ord(ird: u8, ord: u8) -> IrdOrd {
    IrdOrd::new(u16::from(ird), u16::from(ord))
}

/// Initiator: the RTR to send, from our Request and the responder's Reply
/// (`ord`: our ORD after negotiation, which a Read RTR needs).
fn initiator_rtr(sent: &MpaFrame, reply: &MpaFrame, ord: u8) -> Result<Rtr, HandshakeError> {
    let (Some(ours), Some(theirs)) = (sent.ird_ord(), reply.ird_ord()) else {
        return Ok(Rtr::None);
    };
    if !ours.peer_to_peer || !theirs.peer_to_peer {
        // A client-server Reply (RFC 6581 wants the bit echoed): nothing
        // is expected before our first ULP message.
        return Ok(Rtr::None);
    }
    //= rfc6581#section-9.2
    //# Upon receiving the MPA Accept Frame with Control Flag A set to 1, the
    //# initiator MUST generate one of the negotiated RTR indications.
    if theirs.rtr_write {
        Ok(Rtr::Write)
    } else if theirs.rtr_read && ord > 0 {
        Ok(Rtr::Read)
    } else {
        Err(HandshakeError::NoMatchingRtr)
    }
}

/// `Some(PD_Length)` for an enhanced frame (revision 2, S set) whose
/// private data is shorter than the IRD/ORD octets it must begin with.
//= rfc6581#section-6
//# However, if the 'S' flag is
//# set, Private Data MUST begin with enhanced RDMA connection
//# establishment data (see Section 9).
fn missing_ird_ord(frame: &MpaFrame) -> Option<usize> {
    let n = frame.private_data.len();
    (frame.is_enhanced() && n < IRD_ORD_LEN).then_some(n)
}

fn build_frame(
    kind: FrameKind,
    rev: u8,
    enhanced: bool,
    flags: u8,
    io: IrdOrd,
    ulp: &[u8],
) -> Result<MpaFrame, HandshakeError> {
    let mut f = if enhanced {
        MpaFrame::enhanced(kind, false, io, ulp)
            .map_err(|_| HandshakeError::Config("private data too long"))?
    } else {
        if ulp.len() > MAX_PRIVATE_DATA {
            return Err(HandshakeError::Config("private data too long"));
        }
        let mut f = MpaFrame::new(kind, MpaFlags(0), rev);
        f.private_data = ulp.to_vec();
        f
    };
    f.flags = MpaFlags(f.flags.0 | flags);
    f.revision = rev;
    Ok(f)
}

impl Handshake {
    /// The initiator: its Request is ready in [`Handshake::output`].
    pub fn initiator(mut cfg: IwarpConfig) -> Result<Self, HandshakeError> {
        if cfg.rev != 1 && cfg.rev != 2 {
            return Err(HandshakeError::Config("MPA revision must be 1 or 2"));
        }
        let p2p = cfg.rtr && cfg.rev == 2;
        if p2p {
            // A Read RTR needs an outbound Read (Linux siw_connect raises
            // its ORD to 1 in peer-to-peer mode too).
            cfg.ord = cfg.ord.max(1);
        }
        let mut flags = 0;
        if cfg.crc {
            flags |= MpaFlags::CRC;
        }
        if cfg.markers {
            flags |= MpaFlags::MARKERS;
        }
        // an initiator using enhanced connection establishment sends
        // revision 2 and puts its IRD and ORD first in the private data.
        //= rfc6581#section-9.2
        //# The initiator MUST set Control Flag A to 1 for the peer-to-peer model.
        //# The initiator MUST set each Control Flag B, C, and D to 1 for each of
        //# the options it supports, if Control Flag A is set to 1.
        // We offer the Read RTR only: it is the one that is answered (the
        // Write RTR we can also send is taken when a responder names it).
        let io = IrdOrd {
            peer_to_peer: p2p,
            rtr_read: p2p,
            ..ird_ord(cfg.ird, cfg.ord)
        };
        let req = build_frame(
            FrameKind::Request,
            cfg.rev,
            cfg.rev == 2,
            flags,
            io,
            &cfg.private_data,
        )?;
        let out = req
            .to_vec()
            .map_err(|_| HandshakeError::Config("request encoding"))?;
        Ok(Handshake {
            role: Role::Initiator,
            reader: HandshakeReader::new(FrameKind::Reply, cfg.mpa_private_data_max),
            cfg,
            sent: Some(req),
            request: None,
            out,
            done: false,
        })
    }

    /// The responder, waiting for a Request (private data up to
    /// `cfg.mpa_private_data_max`).
    pub fn responder(cfg: IwarpConfig) -> Self {
        Handshake {
            role: Role::Responder,
            reader: HandshakeReader::new(FrameKind::Request, cfg.mpa_private_data_max),
            cfg,
            sent: None,
            request: None,
            out: Vec::new(),
            done: false,
        }
    }

    /// Octets to send now (the caller drains them with
    /// [`Handshake::consume_output`]).
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// `n` octets of [`Handshake::output`] were sent.
    pub fn consume_output(&mut self, n: usize) {
        let n = n.min(self.out.len());
        self.out.drain(..n);
    }

    /// Feeds received octets; returns the progress and how many octets the
    /// handshake used (the rest is FPDU stream).
    pub fn feed(&mut self, input: &[u8]) -> Result<(Progress, usize), HandshakeError> {
        if self.done {
            return Ok((Progress::NeedMore, 0));
        }
        let (frame, used) = match self.reader.feed(input).map_err(HandshakeError::Frame)? {
            HandshakeProgress::NeedMore => return Ok((Progress::NeedMore, input.len())),
            HandshakeProgress::Frame { frame, consumed } => (frame, consumed),
        };
        self.done = true;
        match self.role {
            Role::Responder => {
                //= rfc5044#section-7.1.1
                //# If the MPA receiver cannot interoperate with
                //# the received version, then it MUST close the connection and
                //# report an error locally.
                if frame.revision != 1 && frame.revision != 2 {
                    // a responder that cannot speak the initiator's revision
                    // closes the connection (Linux does the same for rev 3).
                    return Err(HandshakeError::BadRevision(frame.revision));
                }
                if let Some(pd_len) = missing_ird_ord(&frame) {
                    // Answered like the Markers refusal: a Reject, then
                    // the caller closes (Linux siw rejects this Request
                    // too, `siw_proc_mpareq`).
                    self.reject_frame(&frame, &[])?;
                    return Err(HandshakeError::NoIrdOrd { pd_len });
                }
                let req = PeerRequest {
                    private_data: frame.ulp_private_data().to_vec(),
                    ird_ord: frame.ird_ord(),
                    frame: frame.clone(),
                };
                self.request = Some(frame);
                Ok((Progress::Request(req), used))
            }
            Role::Initiator => {
                let Some(sent) = self.sent.clone() else {
                    return Err(HandshakeError::State("no request sent"));
                };
                if frame.revision == 0 || frame.revision > sent.revision {
                    return Err(HandshakeError::BadRevision(frame.revision));
                }
                if frame.flags.reject() {
                    return Ok((
                        Progress::Rejected {
                            private_data: frame.ulp_private_data().to_vec(),
                            frame,
                        },
                        used,
                    ));
                }
                if let Some(pd_len) = missing_ird_ord(&frame) {
                    return Err(HandshakeError::NoIrdOrd { pd_len });
                }
                let mut est = self.agree(&sent, &frame);
                if let Some(p) = frame.ird_ord() {
                    if u32::from(p.ord) > u32::from(est.params.ird) && p.ord != IrdOrd::MAX {
                        return Err(HandshakeError::InsufficientIrd {
                            responder_ord: p.ord,
                            established: Box::new(est),
                        });
                    }
                }
                est.rtr = initiator_rtr(&sent, &frame, est.params.ord)?;
                Ok((Progress::Established(est), used))
            }
        }
    }

    /// What the two frames give (`sent` is ours, `received` the peer's).
    fn agree(&self, sent: &MpaFrame, received: &MpaFrame) -> Established {
        let n = crate::mpa::Negotiated::from_frames(sent, received);
        let (ird, ord) = self.depths(received.ird_ord());
        Established {
            params: StreamParams {
                crc: n.crc,
                send_markers: n.send_markers,
                recv_markers: n.recv_markers,
                ird,
                ord,
                // Within the RFC 5044 range (see `mpa::fpdu::MULPDU_MAX`);
                // the TCP adapter lowers it to the EMSS's.
                mulpdu: self.cfg.mulpdu.clamp(MULPDU_MIN, MULPDU_MAX),
                max_rx_ulpdu: u16::MAX,
            },
            peer_private_data: received.ulp_private_data().to_vec(),
            peer_ird_ord: received.ird_ord(),
            peer_frame: received.clone(),
            revision: sent.revision.min(received.revision),
            rtr: Rtr::None,
        }
    }

    /// Our IRD and ORD given the peer's IRD/ORD octets (`None`: the peer
    /// sent none, revision 1 or not enhanced; nothing to adjust to).
    ///
    /// ORD: at most the peer's IRD, in both roles (the responder's ORD at
    /// most the initiator IRD; the initiator's ORD at most the responder
    /// IRD), whatever revision we answer with; 0x3FFF (no automatic
    /// negotiation) leaves it unchanged. IRD: the responder keeps its own
    /// (it MAY raise it; it does not); the initiator raises its IRD to the
    /// responder's ORD when its caps allow (when not,
    /// [`HandshakeError::InsufficientIrd`]), as Linux siw does with
    /// `relaxed_ird_negotiation`.
    //= rfc6581#section-9.1
    //# The
    //# responder MUST set its ORD at most to the initiator IRD.
    //= rfc6581#section-9.1
    //# Upon receiving the MPA Accept Frame from the responder, the initiator
    //# MUST set its IRD at least to the responder ORD and its ORD at most to
    //# the responder IRD.
    //= rfc6581#section-9.1
    //# The initiator MUST leave its local endpoint ORD value unchanged upon receiving a responder IRD
    //# value of 0x3FFF.
    //= rfc6581#section-9.1
    //# The initiator MUST
    //# leave its local endpoint IRD value unchanged upon receiving a
    //# responder ORD value of 0x3FFF.
    //= rfc6581#section-9.1
    //# The responder MUST respond to an initiator IRD
    //# value of 0x3FFF by leaving its local endpoint ORD value unchanged,
    fn depths(&self, peer: Option<IrdOrd>) -> (u8, u8) {
        let (ird, ord) = (self.cfg.ird, self.cfg.ord);
        let Some(p) = peer else { return (ird, ord) };
        let ord = if p.ird == IrdOrd::MAX {
            ord
        } else {
            ord.min(u8::try_from(p.ird).unwrap_or(u8::MAX))
        };
        let ird = match self.role {
            Role::Initiator
                if p.ord != IrdOrd::MAX && p.ord <= u16::from(self.cfg.caps.max_ird) =>
            {
                ird.max(u8::try_from(p.ord).unwrap_or(u8::MAX))
            }
            _ => ird,
        };
        (ird, ord)
    }

    /// Responder: accepts the Request with `cfg` (our private data, IRD,
    /// ORD, CRC wish). The Reply is put in [`Handshake::output`]. A Request
    /// asking for Markers when `cfg.markers` is off is answered with a
    /// Reject instead, and an error is returned.
    pub fn accept(&mut self, cfg: IwarpConfig) -> Result<Established, HandshakeError> {
        let Some(req) = self.request.clone() else {
            return Err(HandshakeError::State("accept before a request"));
        };
        if self.sent.is_some() {
            return Err(HandshakeError::State("already answered"));
        }
        if req.flags.markers() && !cfg.markers {
            self.reject_frame(&req, &[])?;
            return Err(HandshakeError::Config("peer asked for markers"));
        }
        self.cfg = cfg;
        // a responder answers a revision-1 request with revision 1; an
        // enhanced revision-2 request gets an enhanced reply carrying the
        // responder's IRD and ORD.
        let rev = self.cfg.rev.min(req.revision);
        let enhanced = rev == 2 && req.is_enhanced();
        let mut flags = 0;
        if self.cfg.crc || req.flags.crc() {
            flags |= MpaFlags::CRC;
        }
        if self.cfg.markers && req.flags.markers() {
            flags |= MpaFlags::MARKERS;
        }
        //= rfc6581#section-9.2
        //# If Control Flag A
        //# is 1 in the MPA Request message, then the responder MUST set Control
        //# Flag A to 1 in the MPA reply message.
        // Our receive path is hooked before the Reply goes out, so we need
        // no answered RTR: we name the zero-length Write (see the module
        // docs), which RFC 6581 section 9.2 lets a responder name even when
        // it was not asked for.
        let p2p = enhanced && req.ird_ord().is_some_and(|p| p.peer_to_peer);
        let io = IrdOrd {
            peer_to_peer: p2p,
            rtr_write: p2p,
            ..self.reply_ird_ord(req.ird_ord())
        };
        let reply = build_frame(
            FrameKind::Reply,
            rev,
            enhanced,
            flags,
            io,
            &self.cfg.private_data,
        )?;
        self.out = reply
            .to_vec()
            .map_err(|_| HandshakeError::Config("reply encoding"))?;
        self.sent = Some(reply.clone());
        let mut est = self.agree(&reply, &req);
        if p2p {
            est.rtr = Rtr::Write;
        }
        Ok(est)
    }

    /// The IRD/ORD octets of our Reply to a Request carrying `peer`: our
    /// IRD and ORD as [`Handshake::depths`] sets them, except that an
    /// initiator's 0x3FFF (no automatic negotiation) is answered with
    /// 0x3FFF.
    //= rfc6581#section-9.1
    //# The responder MUST respond to an initiator ORD value of
    //# 0x3FFF by leaving its local endpoint IRD value unchanged and setting
    //# the IRD to 0x3FFF in its reply message.
    //= rfc6581#section-9.1
    //# The responder MUST respond to an initiator IRD
    //# value of 0x3FFF by leaving its local endpoint ORD value unchanged,
    //# and setting ORD to 0x3FFF in its reply message.
    fn reply_ird_ord(&self, peer: Option<IrdOrd>) -> IrdOrd {
        let (ird, ord) = self.depths(peer);
        let mut io = ird_ord(ird, ord);
        if let Some(p) = peer {
            if p.ord == IrdOrd::MAX {
                io.ird = IrdOrd::MAX;
            }
            if p.ird == IrdOrd::MAX {
                io.ord = IrdOrd::MAX;
            }
        }
        io
    }

    fn reject_frame(&mut self, req: &MpaFrame, pd: &[u8]) -> Result<(), HandshakeError> {
        // a Reply with the R bit set rejects the connection; Linux sends
        // an enhanced Reject with IRD = ORD = 0 to an enhanced request.
        let rev = self.cfg.rev.min(req.revision).max(1);
        let enhanced = rev == 2 && req.is_enhanced();
        let f = build_frame(
            FrameKind::Reply,
            rev,
            enhanced,
            MpaFlags::REJECT,
            IrdOrd::new(0, 0),
            pd,
        )?;
        self.out = f
            .to_vec()
            .map_err(|_| HandshakeError::Config("reject encoding"))?;
        self.sent = Some(f);
        Ok(())
    }

    /// Responder: rejects the Request with ULP private data `pd`; send
    /// [`Handshake::output`], then close.
    pub fn reject(&mut self, pd: &[u8]) -> Result<(), HandshakeError> {
        let Some(req) = self.request.clone() else {
            return Err(HandshakeError::State("reject before a request"));
        };
        self.reject_frame(&req, pd)
    }

    /// The frame we sent (Request or Reply).
    pub fn sent_frame(&self) -> Option<&MpaFrame> {
        self.sent.as_ref()
    }
}
