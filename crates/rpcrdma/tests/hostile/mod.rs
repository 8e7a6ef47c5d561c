//! A forged-frame iWARP peer for end-to-end tests against a real server
//! (`RdmaServer`, `rpcrdma serve`) over a real loopback socket.
//!
//! It speaks the wire through the crate's own codecs
//! ([`rpcrdma_iwarp::mpa`], [`rpcrdma_iwarp::ddp`], [`rpcrdma_iwarp::rdmap`],
//! [`rpcrdma_iwarp::mpa::fpdu`]) but enforces nothing: the test decides
//! every field.
//!
//! * [`Peer::connect`] sends an MPA Request shaped by [`MpaRequest`]
//!   (revision, enhanced bit, IRD/ORD, CRC, Markers, RFC 8797 private data)
//!   or, with [`Peer::connect_raw`], any octets; the server's Reply or
//!   Reject is in [`Peer::answer`].
//! * [`Peer::send_untagged`] / [`Peer::send_tagged`] frame one DDP segment
//!   built field by field ([`Untagged`], [`Tagged`]); [`Peer::send_ulpdu`]
//!   frames any ULPDU; [`Peer::send_raw`] writes any octets.
//! * [`Peer::recv`] returns what the server sent, parsed ([`Event`]): Send
//!   messages reassembled by MSN, RDMA Read Requests, RDMA Writes, Read
//!   Responses, Terminates (layer / etype / code), the end of the stream.
//!
//! Blocking std socket; every read has a deadline ([`Peer::limit`]), so a
//! test never hangs on a silent server: it gets `TimedOut`. Run it from
//! `tokio::task::spawn_blocking` (or a thread) when the server shares the
//! test's runtime.

#![allow(dead_code)]

pub mod rpc;

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rpcrdma_iwarp::ddp::{DdpHeader, TaggedHeader, UntaggedHeader};
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FpduSender, FramingConfig, Received};
use rpcrdma_iwarp::mpa::{
    FrameDecode, FrameKind, HandshakeProgress, HandshakeReader, IrdOrd, MpaFlags, MpaFrame,
    Negotiated, MAX_PRIVATE_DATA,
};
use rpcrdma_iwarp::rdmap::{Opcode, RdmapControl, ReadRequest, Segment, TerminateMessage};
use rpcrdma_proto::wire::private_data::{InlineSize, PrivateData};

/// How long one [`Peer::recv`] (or the MPA answer) may take by default.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(10);

/// The MPA Request the peer sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpaRequest {
    /// Revision field.
    pub rev: u8,
    /// The enhanced (S) bit: the IRD/ORD octets are put first in the
    /// private data.
    pub enhanced: bool,
    /// The C bit.
    pub crc: bool,
    /// The M bit.
    pub markers: bool,
    /// IRD of the IRD/ORD octets (enhanced only).
    pub ird: u16,
    /// ORD of the IRD/ORD octets (enhanced only).
    pub ord: u16,
    /// Private data after the IRD/ORD octets (all of it when not enhanced).
    pub private_data: Vec<u8>,
}

impl Default for MpaRequest {
    /// What Linux sends: revision 2, enhanced, IRD = ORD = 16, no CRC, and
    /// RFC 8797 private data offering 4 KiB inline both ways.
    fn default() -> Self {
        let size = InlineSize::from_code(3); // 4096
        MpaRequest {
            rev: 2,
            enhanced: true,
            crc: false,
            markers: false,
            ird: 16,
            ord: 16,
            private_data: PrivateData::new(size, size, false).to_bytes().to_vec(),
        }
    }
}

impl MpaRequest {
    /// The frame (the S bit is set exactly when `enhanced`, whatever the
    /// revision).
    pub fn frame(&self) -> MpaFrame {
        let mut pd = Vec::new();
        if self.enhanced {
            let io = IrdOrd::new(self.ird, self.ord)
                .to_bytes()
                .expect("14-bit IRD/ORD");
            pd.extend_from_slice(&io);
        }
        pd.extend_from_slice(&self.private_data);
        let flags = MpaFlags(0)
            .with(MpaFlags::ENHANCED, self.enhanced)
            .with(MpaFlags::CRC, self.crc)
            .with(MpaFlags::MARKERS, self.markers);
        MpaFrame {
            kind: FrameKind::Request,
            flags,
            revision: self.rev,
            private_data: pd,
        }
    }
}

/// The server's answer to the MPA Request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A Reply without the R bit: the FPDU phase has begun.
    Accepted(MpaFrame),
    /// A Reply with the R bit.
    Rejected(MpaFrame),
    /// The server closed the connection before a whole frame.
    Closed,
}

/// One untagged DDP segment, field by field (RDMAP control version 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Untagged {
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// Queue Number.
    pub qn: u32,
    /// Message Sequence Number.
    pub msn: u32,
    /// Message Offset.
    pub mo: u32,
    /// L bit.
    pub last: bool,
    /// The Invalidate STag word (RsvdULP).
    pub inval_stag: u32,
    /// Everything after the DDP header.
    pub payload: Vec<u8>,
}

impl Untagged {
    /// A whole Send: QN 0, MO 0, L set.
    pub fn send(msn: u32, payload: &[u8]) -> Self {
        Untagged {
            opcode: Opcode::SEND,
            qn: 0,
            msn,
            mo: 0,
            last: true,
            inval_stag: 0,
            payload: payload.to_vec(),
        }
    }

    /// The ULPDU (DDP header, then the payload).
    pub fn ulpdu(&self) -> Vec<u8> {
        let h = UntaggedHeader::new(
            RdmapControl::new(self.opcode).to_byte(),
            self.inval_stag,
            self.qn,
            self.msn,
            self.mo,
            self.last,
        );
        let mut v = DdpHeader::Untagged(h).to_vec();
        v.extend_from_slice(&self.payload);
        v
    }
}

/// One tagged DDP segment, field by field (RDMAP control version 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged {
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// Steering Tag.
    pub stag: u32,
    /// Tagged Offset.
    pub to: u64,
    /// L bit.
    pub last: bool,
    /// Everything after the DDP header.
    pub payload: Vec<u8>,
}

impl Tagged {
    /// An RDMA Read Response segment.
    pub fn read_response(stag: u32, to: u64, last: bool, payload: &[u8]) -> Self {
        Tagged {
            opcode: Opcode::READ_RESPONSE,
            stag,
            to,
            last,
            payload: payload.to_vec(),
        }
    }

    /// The ULPDU (DDP header, then the payload).
    pub fn ulpdu(&self) -> Vec<u8> {
        let h = TaggedHeader::new(
            RdmapControl::new(self.opcode).to_byte(),
            self.stag,
            self.to,
            self.last,
        );
        let mut v = DdpHeader::Tagged(h).to_vec();
        v.extend_from_slice(&self.payload);
        v
    }
}

/// What the server sent, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole Send message (its segments placed by MO; delivered at L).
    Send {
        /// MSN on queue 0.
        msn: u32,
        /// Which of the four Send opcodes (of the last segment).
        opcode: Opcode,
        /// Invalidate STag word (of the last segment).
        inval_stag: u32,
        /// The message.
        data: Vec<u8>,
    },
    /// An RDMA Read Request (QN 1).
    ReadRequest {
        /// MSN on queue 1.
        msn: u32,
        /// The request.
        req: ReadRequest,
    },
    /// One RDMA Write segment.
    Write {
        /// STag.
        stag: u32,
        /// Tagged Offset.
        to: u64,
        /// L bit.
        last: bool,
        /// Payload.
        data: Vec<u8>,
    },
    /// One RDMA Read Response segment.
    ReadResponse {
        /// STag.
        stag: u32,
        /// Tagged Offset.
        to: u64,
        /// L bit.
        last: bool,
        /// Payload.
        data: Vec<u8>,
    },
    /// A Terminate.
    Terminate(TerminateMessage),
    /// The server closed (or reset) the TCP connection.
    Closed,
}

/// A partly received Send.
struct Partial {
    data: Vec<u8>,
}

/// The forged-frame peer. See the [module docs](self).
pub struct Peer {
    sock: TcpStream,
    answer: Answer,
    /// Longest wait of one receive.
    pub limit: Duration,
    tx: FpduSender,
    rx: FpduReceiver,
    inbuf: Vec<u8>,
    sends: BTreeMap<u32, Partial>,
    /// MSN of the next Send [`Peer::send_message`] sends.
    pub next_msn: u32,
    closed: bool,
}

impl Peer {
    /// Connects to `addr`, sends `req` and reads the answer.
    pub fn connect(addr: SocketAddr, req: &MpaRequest) -> io::Result<Peer> {
        let frame = req.frame();
        let bytes = frame.to_vec().map_err(io::Error::other)?;
        Self::handshake(addr, &bytes, Some(frame))
    }

    /// Connects to `addr`, sends `request` as it is (any octets) and reads
    /// the answer. FPDU framing follows the request's C and M bits when the
    /// octets decode as a Request frame.
    pub fn connect_raw(addr: SocketAddr, request: &[u8]) -> io::Result<Peer> {
        let frame = match MpaFrame::decode_prefix(request, FrameKind::Request, MAX_PRIVATE_DATA) {
            Ok(FrameDecode::Frame { frame, .. }) => Some(frame),
            _ => None,
        };
        Self::handshake(addr, request, frame)
    }

    fn handshake(addr: SocketAddr, request: &[u8], sent: Option<MpaFrame>) -> io::Result<Peer> {
        let mut sock = TcpStream::connect_timeout(&addr, DEFAULT_LIMIT)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(DEFAULT_LIMIT))?;
        sock.write_all(request)?;
        let mut reader = HandshakeReader::new(FrameKind::Reply, MAX_PRIVATE_DATA);
        let deadline = Instant::now() + DEFAULT_LIMIT;
        let mut leftover = Vec::new();
        let mut one = [0u8; 1];
        let answer = loop {
            // One octet at a time: nothing after the frame is consumed here.
            let n = read_deadline(&mut sock, &mut one, deadline)?;
            if n == 0 {
                break Answer::Closed;
            }
            match reader.feed(&one).map_err(io::Error::other)? {
                HandshakeProgress::NeedMore => {}
                HandshakeProgress::Frame { frame, consumed } => {
                    leftover.extend_from_slice(&one[consumed..]);
                    break if frame.flags.reject() {
                        Answer::Rejected(frame)
                    } else {
                        Answer::Accepted(frame)
                    };
                }
            }
        };
        let framing = match (&sent, &answer) {
            (Some(s), Answer::Accepted(r)) => {
                let n = Negotiated::from_frames(s, r);
                (
                    FramingConfig {
                        crc: n.crc,
                        markers: n.send_markers,
                    },
                    FramingConfig {
                        crc: n.crc,
                        markers: n.recv_markers,
                    },
                )
            }
            _ => Default::default(),
        };
        Ok(Peer {
            sock,
            closed: answer == Answer::Closed,
            answer,
            limit: DEFAULT_LIMIT,
            tx: FpduSender::new(framing.0),
            rx: FpduReceiver::new(framing.1),
            inbuf: leftover,
            sends: BTreeMap::new(),
            next_msn: 1,
        })
    }

    /// The server's answer to the MPA Request.
    pub fn answer(&self) -> &Answer {
        &self.answer
    }

    /// Frames `ulpdu` as one FPDU (CRC and Markers as negotiated) and
    /// sends it.
    pub fn send_ulpdu(&mut self, ulpdu: &[u8]) -> io::Result<()> {
        let f = self.tx.fpdu_to_vec(&[ulpdu]).map_err(io::Error::other)?;
        self.sock.write_all(&f)
    }

    /// Sends one untagged segment.
    pub fn send_untagged(&mut self, u: &Untagged) -> io::Result<()> {
        self.send_ulpdu(&u.ulpdu())
    }

    /// Sends one tagged segment.
    pub fn send_tagged(&mut self, t: &Tagged) -> io::Result<()> {
        self.send_ulpdu(&t.ulpdu())
    }

    /// Sends `payload` as one whole Send with the next MSN; returns it.
    pub fn send_message(&mut self, payload: &[u8]) -> io::Result<u32> {
        let msn = self.next_msn;
        self.next_msn = msn.wrapping_add(1);
        self.send_untagged(&Untagged::send(msn, payload))?;
        Ok(msn)
    }

    /// Writes `bytes` to the socket as they are (with Markers on, the
    /// framer's stream position no longer matches the wire after this).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.sock.write_all(bytes)
    }

    /// Closes our sending direction.
    pub fn shutdown_write(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Write);
    }

    /// The next thing the server sent, waiting at most [`Peer::limit`]
    /// (`TimedOut` after that; `InvalidData` for octets that do not frame
    /// or parse). After [`Event::Closed`], returns `Closed` again.
    pub fn recv(&mut self) -> io::Result<Event> {
        let deadline = Instant::now() + self.limit;
        loop {
            if let Some(ulpdu) = self.next_ulpdu()? {
                if let Some(e) = self.parse(&ulpdu)? {
                    return Ok(e);
                }
                continue;
            }
            if self.closed {
                return Ok(Event::Closed);
            }
            let mut buf = [0u8; 64 * 1024];
            match read_deadline(&mut self.sock, &mut buf, deadline) {
                Ok(0) => self.closed = true,
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => self.closed = true,
                Err(e) => return Err(e),
            }
        }
    }

    /// Every event until the server closes the connection (each wait
    /// bounded by [`Peer::limit`]), `Closed` excluded.
    pub fn recv_until_closed(&mut self) -> io::Result<Vec<Event>> {
        let mut v = Vec::new();
        loop {
            match self.recv()? {
                Event::Closed => return Ok(v),
                e => v.push(e),
            }
        }
    }

    /// The next Send message, skipping nothing: any other event is an
    /// `InvalidData` error naming it.
    pub fn recv_send(&mut self) -> io::Result<Vec<u8>> {
        match self.recv()? {
            Event::Send { data, .. } => Ok(data),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected a Send, got {other:?}"),
            )),
        }
    }

    /// The next whole, CRC-checked ULPDU in the input buffer, if any.
    fn next_ulpdu(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self.rx.poll(&self.inbuf) {
            Ok(Received::Fpdu(f)) => {
                let mut ulpdu = Vec::with_capacity(usize::from(f.ulpdu_len));
                f.extend_ulpdu(&self.inbuf, &mut ulpdu);
                self.inbuf.drain(..f.consumed);
                Ok(Some(ulpdu))
            }
            Ok(Received::NeedMore(_)) => Ok(None),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Classifies one ULPDU; `None` for a Send segment that does not end
    /// its message.
    fn parse(&mut self, ulpdu: &[u8]) -> io::Result<Option<Event>> {
        let seg = Segment::parse(ulpdu).map_err(|code| {
            io::Error::new(io::ErrorKind::InvalidData, format!("bad segment: {code}"))
        })?;
        let payload = ulpdu.get(seg.payload.clone()).unwrap_or_default();
        Ok(match (seg.ddp, seg.control.opcode) {
            (DdpHeader::Untagged(_), Opcode::TERMINATE) => {
                seg.terminate(ulpdu).map(Event::Terminate)
            }
            (DdpHeader::Untagged(u), Opcode::READ_REQUEST) => seg
                .read_request
                .map(|req| Event::ReadRequest { msn: u.msn, req }),
            (DdpHeader::Untagged(u), opcode) => {
                let p = self
                    .sends
                    .entry(u.msn)
                    .or_insert(Partial { data: Vec::new() });
                let at = u.mo as usize;
                if p.data.len() < at + payload.len() {
                    p.data.resize(at + payload.len(), 0);
                }
                p.data[at..at + payload.len()].copy_from_slice(payload);
                if !u.last {
                    return Ok(None);
                }
                let data = self
                    .sends
                    .remove(&u.msn)
                    .map(|p| p.data)
                    .unwrap_or_default();
                Some(Event::Send {
                    msn: u.msn,
                    opcode,
                    inval_stag: u.rsvd_ulp_word,
                    data,
                })
            }
            (DdpHeader::Tagged(t), Opcode::READ_RESPONSE) => Some(Event::ReadResponse {
                stag: t.stag,
                to: t.to,
                last: t.last,
                data: payload.to_vec(),
            }),
            (DdpHeader::Tagged(t), _) => Some(Event::Write {
                stag: t.stag,
                to: t.to,
                last: t.last,
                data: payload.to_vec(),
            }),
        })
    }
}

/// One `read` that gives up at `deadline` with `TimedOut`.
fn read_deadline(sock: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "hostile peer: nothing from the server in time",
            ));
        }
        sock.set_read_timeout(Some(left))?;
        match sock.read(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            r => return r,
        }
    }
}
