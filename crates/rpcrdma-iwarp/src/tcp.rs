//! The TCP adapter: [`IwarpProvider`] implements
//! [`rpcrdma_proto::provider::Provider`] over a non-blocking `std` TCP
//! stream (TCP_NODELAY), with the sans-IO [`crate::cm::Handshake`] and
//! [`crate::qp::QueuePair`] doing all protocol work.
//!
//! # Progress
//!
//! Every call of `poll_completions` (and `poll_event`) makes one progress
//! pass: read what the socket has (payloads straight into their target
//! regions when the queue pair offers a [`QueuePair::direct_target`], with
//! what follows each in the same scatter read: [`QueuePair::read_direct`]),
//! confirm the Sends/Writes handed to TCP by earlier passes, frame and write
//! what can be written with `write_vectored` (gathering payloads from
//! registered memory), and shut the socket down once a Terminate or a close
//! has been sent.
//!
//! # Readiness
//!
//! [`Provider::wait_fd`] is the socket. [`Provider::arm`] wakes at once if
//! completions or events are pending, or if transmitted WRs await
//! confirmation, or if output is pending and the socket was not full, or
//! if the last pass stopped reading at its budget with the read gate open
//! (input left that no new readiness edge will announce); otherwise it
//! stores the waker, which the next post wakes. A driver (e.g. tokio's
//! `AsyncFd`) also waits for the fd to become readable, and
//! writable when [`IwarpProvider::write_blocked`] says so. Blocking callers
//! use [`IwarpProvider::wait`] (`poll(2)` through `rustix`).
//!
//! # Connection setup
//!
//! Active: [`IwarpProvider::connect`] (TCP connect, then the MPA exchange
//! runs inside the progress passes; [`IwarpProvider::connect_blocking`]
//! waits for it with a deadline). After the Reply the initiator sends the
//! RFC 6581 RTR the responder asked for; with a Read RTR (Linux siw) the
//! connection stays `Connecting`, Sends refused, until the Read Response
//! arrives (see [`crate::cm`] and `rtr.rs`). Passive: [`Listener::bind`],
//! [`Listener::accept`] (waits for a TCP connection and its MPA Request,
//! with a deadline) → [`PendingConnection`] (the peer's private data and
//! IRD/ORD; register memory and post receives on
//! [`PendingConnection::provider_mut`]) → [`PendingConnection::accept`] or
//! [`PendingConnection::reject`]. [`crate::manager`] wraps both sides in
//! the provider contract's connection manager.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use rpcrdma_proto::provider::{
    Blame, Buffer, Bytes, Caps, CmError, Completion, ConnectionEvent, ConnectionInfo,
    ConnectionState, DisconnectReason, LinkInfo, MemoryRegion, Notify, Provider, ProviderError,
    RecvWr, RegisterError, SendOp, SendWr, Status,
};
use rustix::event::{PollFd, PollFlags, Timespec};

use crate::cm::{Established, Handshake, HandshakeError, IwarpConfig, PeerRequest, Progress, Rtr};
use crate::mpa::{IrdOrd, MpaFrame};
use crate::qp::{QpEvent, QpStats, QueuePair, StagedSend, StreamParams};
use crate::rtr::{self, ReadRtr, Step};
use crate::TerminateCode;

/// Octets of read-ahead buffer (one per thread, see [`with_rbuf`]).
#[path = "tcp_sendfile.rs"]
mod sendfile;

const RBUF: usize = crate::qp::READ_AHEAD;

thread_local! {
    /// The read-ahead buffer of the providers this thread drives. Every
    /// read into it is handed to the queue pair at once, which keeps what
    /// it must (a partial FPDU header) itself, so nothing lives in it
    /// between reads and a connection needs none of its own: an idle
    /// connection costs no read-ahead memory, and a thousand connections
    /// driven by two threads share two buffers.
    static RBUF_TLS: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; RBUF].into_boxed_slice());
}

/// Runs `f` with this thread's read-ahead buffer ([`RBUF`] octets).
fn with_rbuf<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    RBUF_TLS.with(|b| match b.try_borrow_mut() {
        Ok(mut b) => f(&mut b),
        // Not reachable (nothing reads from inside `f`); a private buffer
        // keeps it correct anyway.
        Err(_) => f(&mut vec![0u8; RBUF]),
    })
}
/// Most octets read in one progress pass by default (so one busy peer
/// cannot starve the caller); see [`IwarpProvider::set_read_budget`].
const READ_BUDGET: usize = 8 << 20;

/// Direction of a captured chunk of TCP payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Written by this end.
    Sent,
    /// Read by this end.
    Received,
}

/// Recorded TCP payload chunks of one provider, in order, each with the
/// time it was written or read; clones share the recording
/// ([`IwarpProvider::capture`]).
#[derive(Clone, Debug, Default)]
pub struct Capture(Arc<Mutex<Vec<TimedChunk>>>);

/// One captured chunk of TCP payload.
pub type Chunk = (Direction, Vec<u8>);

/// A captured chunk and when it went out or came in (microseconds since
/// the Unix epoch, as a capture file stamps packets).
pub type TimedChunk = (u64, Direction, Vec<u8>);

/// Now, in microseconds since the Unix epoch (0 before it).
fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl Capture {
    fn push(&self, (dir, data): Chunk) {
        let t = now_micros();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((t, dir, data));
    }

    /// The chunks recorded since the last call.
    pub fn take(&self) -> Vec<Chunk> {
        self.take_timed()
            .into_iter()
            .map(|(_, d, data)| (d, data))
            .collect()
    }

    /// The chunks recorded since the last call, with their times.
    pub fn take_timed(&self) -> Vec<TimedChunk> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// One end of a software iWARP connection over TCP. See the
/// [module docs](self).
pub struct IwarpProvider {
    sock: TcpStream,
    qp: QueuePair,
    hs: Option<Handshake>,
    state: ConnectionState,
    events: VecDeque<ConnectionEvent>,
    info: Option<ConnectionInfo>,
    est: Option<Established>,
    local_frame: Option<MpaFrame>,
    waker: Option<(Waker, Notify)>,
    shut_wr: bool,
    eof: bool,
    write_blocked: bool,
    capture: Option<Capture>,
    /// Initiator: how long a Read RTR may wait for its response.
    rtr_timeout: Duration,
    /// [`IwarpConfig::align_fpdus`].
    align_fpdus: bool,
    /// Initiator: the Read RTR in flight, with the outcome it announces
    /// (see [`crate::rtr`]); the connection is `Connecting` meanwhile.
    rtr: Option<(ReadRtr, Established)>,
    /// RTR work requests whose completions the ULP must not see.
    rtr_outstanding: u32,
    /// ULP completions taken from the queue pair during the Read RTR.
    stash: Vec<rpcrdma_proto::provider::Completion>,
    /// The Read RTR got no response in time (for the error message).
    rtr_timed_out: bool,
    /// `None`: every progress pass reads the socket. `Some(open)`: the
    /// owner watches the socket edge-triggered and calls
    /// [`IwarpProvider::note_readable`] after each readiness edge; reads
    /// stop (`Some(false)`) once the socket is drained.
    read_gate: Option<bool>,
    /// Blocking reads (see [`IwarpProvider::set_blocking_reads`]): the
    /// socket is in blocking mode, every non-blocking I/O passes
    /// `MSG_DONTWAIT`.
    dontwait: bool,
    /// The last progress pass received more than one message (see
    /// `post_send`).
    multi_input: bool,
    /// The `SO_RCVTIMEO` last set.
    rcv_timeout: Option<Duration>,
    /// A progress pass ran and nothing was posted, read or noted since: a
    /// gated owner's `poll_completions` right after `poll_event` skips a
    /// second, identical pass.
    progressed: bool,
    /// Blocking reads: a read (or a timed-out sleep) happened since the
    /// last confirmation of transmitted Sends.
    confirm_due: bool,
    /// Most octets one progress pass reads.
    read_budget: usize,
    /// The first octets the peer sent during the MPA exchange (at most
    /// [`SETUP_RX_KEPT`]), to say what it was when the setup fails.
    setup_rx: Vec<u8>,
}

impl std::fmt::Debug for IwarpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IwarpProvider")
            .field("state", &self.state)
            .field("qp", &self.qp)
            .finish()
    }
}

/// One read: non-blocking (`MSG_DONTWAIT` when the socket is in blocking
/// mode) unless `wait`.
fn sock_read(sock: &TcpStream, buf: &mut [u8], dontwait: bool, wait: bool) -> io::Result<usize> {
    if dontwait {
        let flags = if wait {
            rustix::net::RecvFlags::empty()
        } else {
            rustix::net::RecvFlags::DONTWAIT
        };
        let (n, _) = rustix::net::recv(sock, buf, flags)?;
        Ok(n)
    } else {
        (&*sock).read(buf)
    }
}

/// Writes `slices` to the socket (with `MSG_DONTWAIT` under blocking
/// reads, see [`IwarpProvider::set_blocking_reads`]), recording what went
/// out when capturing.
fn sock_write(
    sock: &mut TcpStream,
    cap: &mut Option<Capture>,
    dontwait: bool,
    slices: &[IoSlice<'_>],
) -> io::Result<usize> {
    let n = if dontwait {
        let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
        match slices {
            // One slice (a small message framed in place): send(2) spares
            // the kernel the iovec import.
            [one] => rustix::net::send(&*sock, one, flags)?,
            _ => rustix::net::sendmsg(
                &*sock,
                slices,
                &mut rustix::net::SendAncillaryBuffer::default(),
                flags,
            )?,
        }
    } else {
        sock.write_vectored(slices)?
    };
    if let Some(c) = cap.as_mut() {
        let mut left = n;
        let mut v = Vec::with_capacity(n);
        for s in slices {
            let k = s.len().min(left);
            v.extend_from_slice(&s[..k]);
            left -= k;
            if left == 0 {
                break;
            }
        }
        c.push((Direction::Sent, v));
    }
    Ok(n)
}

/// One scatter read into `iov`, in order (as [`sock_read`] for one
/// buffer).
fn sock_readv(
    sock: &TcpStream,
    iov: &mut [io::IoSliceMut<'_>],
    dontwait: bool,
    wait: bool,
) -> io::Result<usize> {
    if let [a] = iov {
        return sock_read(sock, a, dontwait, wait);
    }
    if dontwait {
        let flags = if wait {
            rustix::net::RecvFlags::empty()
        } else {
            rustix::net::RecvFlags::DONTWAIT
        };
        let r = rustix::net::recvmsg(
            sock,
            iov,
            &mut rustix::net::RecvAncillaryBuffer::default(),
            flags,
        )?;
        Ok(r.bytes)
    } else {
        (&*sock).read_vectored(iov)
    }
}

pub(crate) fn wait_fd(
    fd: &impl AsFd,
    flags: PollFlags,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let ts = timeout.map(|d| Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: d.subsec_nanos().into(),
    });
    let mut fds = [PollFd::new(fd, flags)];
    loop {
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Octets of what a connecting peer sent before its MPA Reply was
/// complete that are kept to say what it was when the setup fails.
const SETUP_RX_KEPT: usize = 64;

/// What the first octets of a peer that is not an iWARP peer look like.
fn looks_like(rx: &[u8]) -> String {
    let text: String = rx
        .iter()
        .take_while(|&&b| b != b'\r' && b != b'\n')
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    if rx.starts_with(b"HTTP/") {
        format!("looks like HTTP: {text:?}")
    } else if rx.starts_with(b"SSH-") {
        format!("looks like SSH: {text:?}")
    } else if rx.len() >= 4 && rx[0] & 0x80 != 0 {
        format!(
            "looks like ONC RPC record marking (a plain TCP RPC server? try --transport tcp): {}",
            hex_prefix(rx)
        )
    } else {
        format!("first octets {}", hex_prefix(rx))
    }
}

fn hex_prefix(rx: &[u8]) -> String {
    rx.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod setup_text_tests {
    use super::*;

    #[test]
    fn setup_failures_say_what_the_peer_was() {
        let http = b"HTTP/1.0 400 Bad request\r\nServer: x\r\n";
        let t = setup_failure_text(&DisconnectReason::TransportLost, http);
        assert!(
            t.contains("not an MPA Reply (looks like HTTP: \"HTTP/1.0 400 Bad request\")"),
            "{t}"
        );
        let t = setup_failure_text(&DisconnectReason::TransportLost, b"");
        assert!(t.contains("try --transport tcp"), "{t}");
        let t = setup_timeout_text(http);
        assert!(t.contains("looks like HTTP"), "{t}");
        let t = setup_timeout_text(b"");
        assert!(t.contains("never answered the MPA Request"), "{t}");
        let t = setup_failure_text(
            &DisconnectReason::Rejected {
                private_data: vec![1, 2],
            },
            b"",
        );
        assert!(t.contains("MPA Reject, private data 0102"), "{t}");
        // An RPC record (last fragment, 28 octets) from a TCP RPC server.
        let t = setup_failure_text(&DisconnectReason::TransportLost, b"\x80\0\0\x1c");
        assert!(
            !t.contains("TransportLost") && t.contains("--transport tcp"),
            "{t}"
        );
    }
}

/// Why a connection setup ended, in words (no enum names).
fn setup_failure_text(r: &DisconnectReason, rx: &[u8]) -> String {
    let base = "iWARP connection setup failed";
    match r {
        DisconnectReason::Rejected { private_data } => rejected_text(private_data),
        DisconnectReason::TransportLost | DisconnectReason::PeerClose if rx.is_empty() => {
            format!(
                "{base}: the peer closed the connection during the MPA exchange without \
                 answering the MPA Request — is it a plain TCP RPC server? try --transport tcp"
            )
        }
        DisconnectReason::Error { .. }
        | DisconnectReason::TransportLost
        | DisconnectReason::PeerClose
            if !rx.is_empty() && !rx.starts_with(b"MPA ID Rep Frame") =>
        {
            format!(
                "{base}: the peer answered with bytes that are not an MPA Reply ({})",
                looks_like(rx)
            )
        }
        DisconnectReason::Error { .. } => format!(
            "{base}: the peer's MPA Reply is malformed or refuses our settings \
             (MPA revision, CRC, Markers, IRD/ORD)"
        ),
        DisconnectReason::TransportLost | DisconnectReason::PeerClose => {
            format!("{base}: the peer closed the connection during the MPA exchange")
        }
        DisconnectReason::LocalClose => format!("{base}: closed locally"),
    }
}

/// The setup timed out: what the peer sent meanwhile, if anything.
fn setup_timeout_text(rx: &[u8]) -> String {
    if rx.is_empty() {
        "iWARP connection setup timed out: the peer accepted the TCP connection but never \
         answered the MPA Request (not an iWARP RPC-over-RDMA server?)"
            .into()
    } else if rx.starts_with(b"MPA ID Rep Frame") {
        "iWARP connection setup timed out during the MPA exchange".into()
    } else {
        format!(
            "iWARP connection setup timed out: the peer answered with bytes that are not an \
             MPA Reply ({})",
            looks_like(rx)
        )
    }
}

/// An MPA Reject, in words.
fn rejected_text(private_data: &[u8]) -> String {
    if private_data.is_empty() {
        "the server rejected the connection (MPA Reject, no private data)".into()
    } else {
        format!(
            "the server rejected the connection (MPA Reject, private data {})",
            private_data
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    }
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let now = Instant::now();
    if now >= deadline {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "iWARP connection setup timed out",
        ));
    }
    Ok(deadline - now)
}

/// Writes all of `data` to a non-blocking socket, waiting for writability
/// until `deadline`.
fn write_all_deadline(sock: &mut TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        match sock.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_fd(sock, PollFlags::OUT, Some(remaining(deadline)?))?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// With [`IwarpConfig::align_fpdus`], the MULPDU of a connection: the
/// configured one (at most 64,768), lowered to what the socket's EMSS
/// (`TCP_MAXSEG`: the MSS less TCP options) allows, so that each FPDU fits
/// in one TCP segment as RFC 5044 §5.1 recommends and Linux siw does; small
/// Sends between large messages still move the boundaries (no dynamic
/// MULPDU). A loopback peer keeps the configured one: nothing is cut into
/// segments there (GSO packets of up to 64 KiB pass whole), and Linux
/// reports a `TCP_MAXSEG` of half the peer's first window (~32 KiB).
fn emss_mulpdu(sock: &TcpStream, params: StreamParams) -> u16 {
    let loopback = match sock.peer_addr() {
        Ok(SocketAddr::V4(a)) => a.ip().is_loopback(),
        Ok(SocketAddr::V6(a)) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => true,
    };
    match socket2::SockRef::from(sock).tcp_mss() {
        Ok(emss) if emss > 0 && !loopback => params
            .mulpdu
            .min(crate::mpa::fpdu::mulpdu_for_emss(emss, params.send_markers)),
        _ => params.mulpdu,
    }
}

impl IwarpProvider {
    fn new(sock: TcpStream, cfg: &IwarpConfig, key_base: u8) -> io::Result<Self> {
        let caps = cfg.caps;
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        crate::congestion::on_established(&sock, cfg);
        let mut qp = QueuePair::new(caps, key_base);
        qp.set_file_sends(sendfile::enabled());
        Ok(IwarpProvider {
            sock,
            qp,
            hs: None,
            state: ConnectionState::Idle,
            events: VecDeque::new(),
            info: None,
            est: None,
            local_frame: None,
            waker: None,
            shut_wr: false,
            eof: false,
            write_blocked: false,
            capture: None,
            rtr_timeout: Duration::ZERO,
            align_fpdus: cfg.align_fpdus,
            rtr: None,
            rtr_outstanding: 0,
            stash: Vec::new(),
            rtr_timed_out: false,
            read_gate: None,
            dontwait: false,
            multi_input: false,
            rcv_timeout: None,
            progressed: false,
            confirm_due: false,
            read_budget: READ_BUDGET,
            setup_rx: Vec::new(),
        })
    }

    /// Active side: connects TCP to `addr` (blocking) and queues the MPA
    /// Request; the exchange completes during later progress passes and
    /// ends in [`ConnectionEvent::Established`] or
    /// [`ConnectionEvent::Disconnected`] (`Rejected` for an MPA Reject).
    /// Receives may be posted at once.
    pub fn connect(addr: impl ToSocketAddrs, cfg: IwarpConfig) -> io::Result<Self> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match crate::congestion::connect(&a, None, &cfg) {
                Ok(s) => return Self::connect_stream(s, cfg),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to")
        }))
    }

    /// [`IwarpProvider::connect`] over a TCP stream the caller connected
    /// (e.g. from a chosen source address).
    pub fn connect_stream(sock: TcpStream, cfg: IwarpConfig) -> io::Result<Self> {
        let hs = Handshake::initiator(cfg.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut p = IwarpProvider::new(sock, &cfg, 0)?;
        p.rtr_timeout = cfg.rtr_timeout;
        p.hs = Some(hs);
        p.state = ConnectionState::Connecting;
        p.progress();
        Ok(p)
    }

    /// [`IwarpProvider::connect`], then waits until the connection is
    /// established (or refused) or `timeout` passes. A Reject is returned
    /// as `ConnectionRefused` with the reason in the message.
    pub fn connect_blocking(
        addr: impl ToSocketAddrs,
        cfg: IwarpConfig,
        timeout: Duration,
    ) -> io::Result<Self> {
        let deadline = Instant::now() + timeout;
        Self::connect(addr, cfg)?
            .establish(deadline)
            .map_err(|e| match e {
                CmError::Rejected { private_data } => io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    rejected_text(&private_data),
                ),
                CmError::Io(e) => e,
                e => e.into(),
            })
    }

    /// Drives the MPA exchange of a connecting provider until it is
    /// established (its `Established` event still queued), refused
    /// ([`CmError::Rejected`] with the Reject's ULP private data) or
    /// `deadline` passes.
    pub(crate) fn establish(mut self, deadline: Instant) -> Result<Self, CmError> {
        loop {
            self.progress();
            match &self.state {
                ConnectionState::Established => return Ok(self),
                ConnectionState::Disconnected(_) if self.rtr_timed_out => {
                    return Err(CmError::Io(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "iWARP connection failed: the peer never answered the RDMA Read \
                             sent as RTR (RFC 6581) within {:?}",
                            self.rtr_timeout
                        ),
                    )))
                }
                ConnectionState::Disconnected(DisconnectReason::Rejected { private_data }) => {
                    return Err(CmError::Rejected {
                        private_data: private_data.clone(),
                    })
                }
                ConnectionState::Disconnected(r) => {
                    return Err(CmError::Io(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        setup_failure_text(r, &self.setup_rx),
                    )))
                }
                _ => {}
            }
            let left = remaining(deadline)
                .map_err(|e| io::Error::new(e.kind(), setup_timeout_text(&self.setup_rx)))?;
            self.wait(Some(left))?;
        }
    }

    /// Records every octet sent and received from now on (for captures and
    /// wire oracles); see [`IwarpProvider::take_capture`].
    pub fn set_capture(&mut self, on: bool) {
        self.capture = on.then(Capture::default);
    }

    /// The recorded TCP payload chunks, in order, since the last call.
    pub fn take_capture(&mut self) -> Vec<(Direction, Vec<u8>)> {
        self.capture.as_ref().map(Capture::take).unwrap_or_default()
    }

    /// A handle on the recording (started now if it was off), for an
    /// owner that hands the provider on (e.g. to a runtime's driver) and
    /// takes the capture later.
    pub fn capture(&mut self) -> Capture {
        self.capture.get_or_insert_with(Capture::default).clone()
    }

    /// The MPA outcome: the peer's raw frame, ULP private data, IRD/ORD
    /// header, and the stream parameters, once established.
    pub fn established(&self) -> Option<&Established> {
        self.est.as_ref()
    }

    /// The peer's raw MPA frame (private data with the IRD/ORD header).
    pub fn peer_frame(&self) -> Option<&MpaFrame> {
        self.est.as_ref().map(|e| &e.peer_frame)
    }

    /// The MPA frame we sent (Request or Reply), once established.
    pub fn local_frame(&self) -> Option<&MpaFrame> {
        self.local_frame.as_ref()
    }

    /// The queue pair (for statistics and Terminate inspection).
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// Wire counters of the queue pair.
    pub fn stats(&self) -> QpStats {
        self.qp.stats()
    }

    /// True when output is pending and the last write found the socket
    /// full: wait for writability, not only readability.
    pub fn write_blocked(&self) -> bool {
        self.write_blocked
    }

    /// True when a progress pass now could not move anything by itself:
    /// no connection event, queue-pair event or completion waiting, no
    /// output ready to hand to TCP, no handshake or RTR in progress.
    /// Only new input (or new work requests) can change that, so a
    /// blocking owner that just made a pass may sleep in
    /// [`IwarpProvider::read_blocking`] without another pass first.
    pub fn settled(&self) -> bool {
        self.hs.is_none()
            && self.rtr.is_none()
            && self.stash.is_empty()
            && self.events.is_empty()
            && !self.qp.events_pending()
            && self.qp.completions_pending() == 0
            && !self.qp.has_output()
    }

    /// Edge-triggered reading (for an event-loop owner such as tokio's
    /// `AsyncFd`): with `on`, a progress pass stops reading the socket once
    /// a read came back short or `WouldBlock`, and reads again only after
    /// [`IwarpProvider::note_readable`]. The owner must clear its readiness
    /// *before* calling `note_readable` (so an arrival after the drain
    /// shows up as a new edge). Off (the default): every pass reads.
    pub fn set_read_gate(&mut self, on: bool) {
        self.progressed = false;
        self.read_gate = on.then_some(true);
    }

    /// The socket may be readable (see [`IwarpProvider::set_read_gate`]).
    pub fn note_readable(&mut self) {
        self.progressed = false;
        if self.read_gate.is_some() {
            self.read_gate = Some(true);
        }
    }

    /// The most octets one progress pass reads (default 8 MiB; at least
    /// 1). A pass that stops at this budget leaves the read gate open:
    /// more input may wait in the socket, announced by no new readiness
    /// edge, so [`Provider::arm`] then wakes at once.
    pub fn set_read_budget(&mut self, octets: usize) {
        self.read_budget = octets.max(1);
    }

    /// With the read gate: the last pass stopped reading because of its
    /// budget, not because the socket was drained (short read or
    /// `WouldBlock`); the next pass reads on. No edge-triggered readiness
    /// announces that input: the owner's readiness for it was consumed
    /// before the pass read.
    fn input_left(&self) -> bool {
        self.read_gate == Some(true)
            && !self.eof
            && self.hs.is_none()
            && self.state != ConnectionState::Idle
    }

    /// The next instant a progress pass has work to do without any input
    /// or new work request: a Read RTR's next nudge (or its give-up). An
    /// event-loop owner sleeps no longer than this ([`Provider::arm`] wakes
    /// at once only when it is already due).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.rtr.as_ref().map(|(w, _)| w.next_wakeup())
    }

    /// The local socket address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    fn work_pending(&self) -> bool {
        self.input_left()
            || self.qp.completions_pending() > 0
            || self.qp.events_pending()
            || !self.events.is_empty()
            || self.qp.has_unconfirmed()
            || !self.stash.is_empty()
            || (self.qp.has_output() && !self.write_blocked)
    }

    /// Blocks until the socket is readable (or writable while
    /// [`IwarpProvider::write_blocked`]), work is pending, or `timeout`
    /// passes. Returns whether something may be ready.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        self.confirm_due = true;
        if self.work_pending() {
            return Ok(true);
        }
        if self.eof && (self.shut_wr || !self.qp.has_output()) {
            if let Some(t) = timeout {
                std::thread::sleep(t.min(Duration::from_millis(1)));
            }
            return Ok(false);
        }
        // A Read RTR nudges and gives up on a timer, without input.
        let timeout = match &self.rtr {
            Some((w, _)) => {
                let left = w.next_wakeup().saturating_duration_since(Instant::now());
                Some(timeout.map_or(left, |d| d.min(left)))
            }
            None => timeout,
        };
        let mut flags = PollFlags::empty();
        if !self.eof {
            flags |= PollFlags::IN;
        }
        if self.write_blocked || (self.hs.is_some() && !self.hs_output_empty()) {
            flags |= PollFlags::OUT;
        }
        let r = wait_fd(&self.sock, flags, timeout)?;
        if r {
            self.note_readable();
        }
        Ok(r)
    }

    fn hs_output_empty(&self) -> bool {
        self.hs.as_ref().is_none_or(|h| h.output().is_empty())
    }

    fn set_established(&mut self, mut est: Established) {
        if self.align_fpdus {
            est.params.mulpdu = emss_mulpdu(&self.sock, est.params);
        }
        let caps = self.qp.caps();
        let info = ConnectionInfo {
            peer_private_data: est.peer_private_data.clone(),
            ird: est.params.ird,
            ord: est.params.ord,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline: caps.max_inline,
            max_msg_size: caps.max_msg_size,
        };
        self.qp.establish(est.params);
        self.est = Some(est);
        self.info = Some(info.clone());
        self.state = ConnectionState::Established;
        self.events.push_back(ConnectionEvent::Established(info));
    }

    fn record(&mut self, dir: Direction, data: &[u8]) {
        if let Some(c) = self.capture.as_mut() {
            c.push((dir, data.to_vec()));
        }
    }

    /// Initiator: drive the MPA exchange.
    fn progress_handshake(&mut self) {
        let Some(hs) = self.hs.as_mut() else { return };
        // Send what is left of the Request.
        while !hs.output().is_empty() {
            match self.sock.write(hs.output()) {
                Ok(n) => {
                    if let Some(c) = self.capture.as_mut() {
                        c.push((Direction::Sent, hs.output()[..n].to_vec()));
                    }
                    hs.consume_output(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.hs = None;
                    self.qp.abort(DisconnectReason::TransportLost);
                    return;
                }
            }
        }
        loop {
            // Read only what the Reply can still need, so that FPDU octets
            // after it go through the queue pair's normal path.
            let mut buf = [0u8; 532];
            let n = match self.sock.read(&mut buf) {
                Ok(0) => {
                    self.hs = None;
                    self.eof = true;
                    self.qp.abort(DisconnectReason::TransportLost);
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.hs = None;
                    self.qp.abort(DisconnectReason::TransportLost);
                    return;
                }
            };
            let data = buf[..n].to_vec();
            self.record(Direction::Received, &data);
            let keep = SETUP_RX_KEPT.saturating_sub(self.setup_rx.len()).min(n);
            self.setup_rx.extend_from_slice(&data[..keep]);
            let Some(hs) = self.hs.as_mut() else { return };
            match hs.feed(&data) {
                Ok((Progress::NeedMore, _)) => continue,
                Ok((Progress::Established(est), used)) => {
                    self.local_frame = hs.sent_frame().cloned();
                    self.hs = None;
                    self.start_rtr(est);
                    self.qp.handle_input(&data[used..]);
                    return;
                }
                Ok((Progress::Rejected { private_data, .. }, _)) => {
                    self.hs = None;
                    self.qp.abort(DisconnectReason::Rejected { private_data });
                    return;
                }
                Err(HandshakeError::InsufficientIrd { established, .. }) => {
                    self.hs = None;
                    //= rfc6581#section-9.1
                    //# If the initiator does not have sufficient
                    //# resources for the required IRD, it MUST send a TERM message to the
                    //# responder indicating insufficient resources and terminate the
                    //# connection due to insufficient resources.
                    self.qp.establish(established.params);
                    self.qp.terminate_local(
                        TerminateCode::MPA_INSUFFICIENT_IRD,
                        DisconnectReason::Error {
                            status: Status::RemoteInvalidRequest,
                            blame: Blame::Remote,
                        },
                    );
                    return;
                }
                Ok((Progress::Request(_), _)) | Err(_) => {
                    //= rfc5044#section-7.1.2
                    //# If the MPA Reply Frame is improperly formatted, the
                    //# implementation MUST close the TCP connection and exit MPA.
                    self.hs = None;
                    self.qp.abort(DisconnectReason::Error {
                        status: Status::RemoteInvalidRequest,
                        blame: Blame::Remote,
                    });
                    return;
                }
            }
        }
    }

    /// Initiator, MPA Reply accepted: sends the RTR the Reply asked for.
    /// With a Read RTR the connection stays `Connecting` (and the ULP's
    /// Sends are refused) until its Read Response arrives (see
    /// [`crate::rtr`]); otherwise it is established at once.
    fn start_rtr(&mut self, mut est: Established) {
        if self.align_fpdus {
            est.params.mulpdu = emss_mulpdu(&self.sock, est.params);
        }
        match est.rtr {
            Rtr::None => self.set_established(est),
            Rtr::Write => {
                self.qp.establish(est.params);
                if rtr::post_write(&mut self.qp).is_ok() {
                    self.rtr_outstanding += 1;
                }
                self.set_established(est);
            }
            Rtr::Read => {
                self.qp.establish(est.params);
                match ReadRtr::start(&mut self.qp, Instant::now(), self.rtr_timeout) {
                    Ok(w) => self.rtr = Some((w, est)),
                    Err(_) => self.qp.abort(DisconnectReason::Error {
                        status: Status::LocalOperation,
                        blame: Blame::Local,
                    }),
                }
            }
        }
    }

    /// Initiator: one step of a Read RTR (see [`crate::rtr`]).
    fn progress_rtr(&mut self) {
        let Some((w, _)) = self.rtr.as_mut() else {
            return;
        };
        let step = w.step(&mut self.qp, Instant::now(), &mut self.stash);
        let ready = match step {
            Step::Waiting if self.qp.is_closed() => false,
            Step::Waiting => return,
            Step::Ready => true,
            Step::TimedOut => {
                self.rtr_timed_out = true;
                false
            }
            Step::Failed(_) => false,
        };
        let Some((w, est)) = self.rtr.take() else {
            return;
        };
        w.finish(&mut self.qp);
        if ready {
            self.set_established(est);
            // What the ULP queued meanwhile (receives) may move now.
            self.progress_stream();
        } else if !self.qp.is_closed() {
            self.qp.abort(DisconnectReason::Error {
                status: Status::RemoteOperation,
                blame: Blame::Remote,
            });
        }
    }

    /// One progress pass (see the module docs).
    pub fn progress(&mut self) {
        if self.hs.is_some() {
            self.progress_handshake();
        }
        if self.hs.is_none() && self.state != ConnectionState::Idle {
            self.progress_stream();
            if self.rtr.is_some() {
                self.progress_rtr();
            }
        }
        while let Some(QpEvent::Disconnected(r)) = self.qp.poll_event() {
            self.state = ConnectionState::Disconnected(r.clone());
            self.events.push_back(ConnectionEvent::Disconnected(r));
        }
        self.progressed = true;
    }

    fn progress_stream(&mut self) {
        // 1. Read, placing payloads directly where possible.
        let mut budget = self.read_budget;
        let done_before = self.qp.completions_pending();
        while !self.eof && budget > 0 && self.read_gate != Some(false) {
            if !self.read_step(budget, false, &mut budget) {
                break;
            }
        }
        // More than one message came in this pass: the owner is likely to
        // post as many answers before its next pass (see `post_send`).
        self.multi_input = self.qp.completions_pending() > done_before + 1;
        // 2. What earlier passes handed to TCP met no Terminate: complete.
        //    With blocking reads, only in a pass after a read (or a sleep
        //    that timed out): a pass of its own just to confirm would cost
        //    one per message, and only input could change the outcome.
        if !self.dontwait || std::mem::take(&mut self.confirm_due) {
            self.qp.confirm_transmitted();
        }
        // 3. Write, gathering from registered memory.
        self.write_output(false);
    }

    /// Hands output to TCP (`lone_only`: only when it is one small Send,
    /// see [`QueuePair::transmit_lone`]), then, after a Terminate or a
    /// close, sends the FIN.
    fn write_output(&mut self, lone_only: bool) {
        if self.shut_wr {
            return;
        }
        if !lone_only && !self.qp.has_output() {
            // Nothing to frame or send (a pass after a message came in):
            // what `transmit` returns then, without its passes over the
            // empty output queue.
            self.after_write(Ok(0));
            return;
        }
        let (qp, sock, cap) = (&mut self.qp, &mut self.sock, &mut self.capture);
        let dontwait = self.dontwait;
        if !lone_only && qp.has_files() {
            let r = qp.transmit_files(&mut sendfile::SockSink {
                sock,
                cap,
                dontwait,
            });
            return self.after_write(r);
        }
        let write = |slices: &[IoSlice<'_>]| sock_write(sock, cap, dontwait, slices);
        let r = if lone_only {
            match qp.transmit_lone(write) {
                Some(r) => r,
                None => return,
            }
        } else {
            qp.transmit(write)
        };
        self.after_write(r);
    }

    /// After handing output to TCP: the write-blocked flag, a lost
    /// transport, and after a Terminate or a close the FIN.
    fn after_write(&mut self, r: io::Result<usize>) {
        match r {
            Ok(_) => self.write_blocked = self.qp.has_output(),
            Err(_) => {
                self.write_blocked = false;
                self.qp.transport_lost();
            }
        }
        // 4. After a Terminate or a close: FIN.
        if self.qp.tx_finished() {
            let _ = self.sock.shutdown(Shutdown::Write);
            self.shut_wr = true;
            self.write_blocked = false;
        }
    }

    /// One read of at most `budget` octets (payload straight into the
    /// queue pair's direct target when it offers one), handed to the queue
    /// pair; `wait`: a blocking read (see
    /// [`IwarpProvider::set_blocking_reads`]). Updates the read gate, EOF
    /// and `left`; false when the socket had nothing (or the read timed
    /// out).
    fn read_step(&mut self, budget: usize, wait: bool, left: &mut usize) -> bool {
        let asked;
        let (sock, dontwait, cap) = (&self.sock, self.dontwait, &mut self.capture);
        let mut got = Vec::new();
        let capturing = cap.is_some();
        let direct = self.qp.read_direct(
            budget,
            |iov| sock_readv(sock, iov, dontwait, wait),
            |s| {
                if capturing {
                    got.extend_from_slice(s);
                }
            },
        );
        if let Some(c) = cap.as_mut() {
            if !got.is_empty() {
                c.push((Direction::Received, got));
            }
        }
        let r = if let Some((r, n)) = direct {
            asked = n;
            r
        } else {
            let len = self.qp.suggested_read_len().min(RBUF).min(budget);
            asked = len;
            let (sock, qp, cap) = (&self.sock, &mut self.qp, &mut self.capture);
            let dontwait = self.dontwait;
            with_rbuf(|rbuf| {
                let rbuf = &mut rbuf[..len];
                match sock_read(sock, rbuf, dontwait, wait) {
                    Ok(n) if n > 0 => {
                        let got = rbuf.get(..n).unwrap_or_default();
                        if let Some(c) = cap.as_mut() {
                            c.push((Direction::Received, got.to_vec()));
                        }
                        qp.handle_input(got);
                        Ok(n)
                    }
                    other => other,
                }
            })
        };
        match r {
            Ok(0) => {
                self.confirm_due = true;
                self.eof = true;
                self.qp.peer_closed();
                true
            }
            Ok(n) => {
                self.confirm_due = true;
                *left = left.saturating_sub(n);
                // A short read drained the socket: with the gate, the next
                // arrival is a new readiness edge. A full one may have left
                // more: the next pass reads on.
                if self.read_gate.is_some() {
                    self.read_gate = Some(n == asked);
                }
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if self.read_gate.is_some() {
                    self.read_gate = Some(false);
                }
                false
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(_) => {
                self.eof = true;
                self.qp.transport_lost();
                true
            }
        }
    }

    /// Blocking reads: the socket is put in blocking mode and every other
    /// read and write passes `MSG_DONTWAIT`, so that
    /// [`IwarpProvider::read_blocking`] can sleep in `recv(2)` itself (one
    /// system call where `poll(2)` and a read take two). Only once the MPA
    /// exchange is over.
    pub fn set_blocking_reads(&mut self, on: bool) -> io::Result<()> {
        if on && self.hs.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the MPA exchange is not over",
            ));
        }
        self.sock.set_nonblocking(!on)?;
        self.dontwait = on;
        self.qp.set_file_sends(!on && sendfile::enabled());
        self.confirm_due = true;
        self.rcv_timeout = None;
        Ok(())
    }

    /// With [`IwarpProvider::set_blocking_reads`]: unless work is already
    /// pending, sleeps in one `recv(2)` until data arrives or `timeout`
    /// passes (`SO_RCVTIMEO`, set only when it changes), and hands what
    /// arrived to the queue pair. Returns whether something may be ready
    /// (as [`IwarpProvider::wait`]; Sends handed to TCP but not yet
    /// confirmed do not count as pending work here: the pass after the read
    /// confirms them). Without blocking reads: `wait`.
    pub fn read_blocking(&mut self, timeout: Duration) -> io::Result<bool> {
        self.progressed = false;
        self.confirm_due = true;
        if !self.dontwait || self.write_blocked || self.rtr.is_some() {
            return self.wait(Some(timeout));
        }
        // Sends handed to TCP are confirmed by the pass after this read
        // (nothing but a Terminate from the peer could change their fate),
        // so they do not cut the sleep short: that would cost an extra
        // pass per message.
        if self.qp.completions_pending() > 0
            || self.qp.events_pending()
            || !self.events.is_empty()
            || self.qp.has_output()
        {
            return Ok(true);
        }
        if self.eof {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return Ok(false);
        }
        // SO_RCVTIMEO of zero means "forever": at least a microsecond.
        let t = timeout.max(Duration::from_micros(1));
        if self.rcv_timeout != Some(t) {
            rustix::net::sockopt::set_socket_timeout(
                &self.sock,
                rustix::net::sockopt::Timeout::Recv,
                Some(t),
            )?;
            self.rcv_timeout = Some(t);
        }
        let mut left = self.read_budget;
        // A full buffer may have left more: read_step then leaves the gate
        // open and the next pass reads on.
        Ok(self.read_step(self.read_budget, true, &mut left))
    }

    fn wake_self(&mut self) {
        if let Some((w, _)) = self.waker.take() {
            w.wake();
        }
    }
}

/// The TCP socket (for a blocking owner's `poll(2)`; reading or writing it
/// directly would corrupt the MPA stream).
impl AsFd for IwarpProvider {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl IwarpProvider {
    /// After a post: a lone small Send goes to the socket now under the
    /// rule below.
    fn write_lone_now(&mut self) {
        // Blocking reads (a thread that drives its connection itself and
        // sleeps in recv(2)) or an edge-triggered owner (a task driving it
        // on readiness, `set_read_gate`): a lone small Send goes to the
        // socket now, not in the next progress pass — the owner would make
        // a whole round just for it (a client after posting its call, a
        // server after posting the reply it dispatched inline), and the
        // owner's next pass confirms it along with whatever else it does.
        // Anything else (Writes, several WRs, a full socket) waits for the
        // pass as before, gathered into one write; so does a Send posted
        // while an earlier one (staged or not) is unconfirmed (handed to
        // TCP since the last pass), or, for an edge-triggered owner, after
        // a pass that received several messages: more are coming before
        // the next pass (a server answering a batch of calls, callers
        // posting behind one another as their replies come in), and the
        // pass sends them in one write instead of one each.
        if self.lone_write_allowed() {
            self.write_output(true);
        }
    }

    /// The rule of `write_lone_now` (see there).
    #[inline]
    fn lone_write_allowed(&self) -> bool {
        (self.dontwait || (self.read_gate.is_some() && !self.multi_input))
            && !self.write_blocked
            && !self.qp.sent_since_confirm()
    }
}

impl Provider for IwarpProvider {
    fn caps(&self) -> Caps {
        self.qp.caps()
    }

    fn connection_state(&self) -> ConnectionState {
        self.state.clone()
    }

    fn connection_info(&self) -> Option<ConnectionInfo> {
        self.info.clone()
    }

    fn poll_event(&mut self) -> Option<ConnectionEvent> {
        if self.events.is_empty() {
            self.progress();
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        self.progressed = false;
        if matches!(self.state, ConnectionState::Disconnected(_)) {
            return;
        }
        if self.hs.take().is_some() {
            self.qp.abort(DisconnectReason::LocalClose);
            let _ = self.sock.shutdown(Shutdown::Both);
            self.shut_wr = true;
        } else {
            self.qp.disconnect();
        }
        self.progress();
    }

    fn register(
        &mut self,
        buf: Box<[u8]>,
        access: rpcrdma_proto::provider::Access,
    ) -> Result<MemoryRegion, RegisterError> {
        self.qp.register(buf, access)
    }

    fn register_recv(&mut self, len: usize) -> Result<MemoryRegion, ProviderError> {
        self.qp.register_recv(len)
    }

    fn register_shared(
        &mut self,
        buf: Bytes,
        access: rpcrdma_proto::provider::Access,
    ) -> Result<MemoryRegion, ProviderError> {
        self.qp.register_shared(buf, access)
    }

    fn register_file(
        &mut self,
        range: &rpcrdma_proto::provider::FileRange,
    ) -> Result<MemoryRegion, ProviderError> {
        self.qp.register_file(range)
    }

    fn sends_files(&self) -> bool {
        self.qp.sends_files()
    }

    fn deregister(&mut self, mr: &MemoryRegion) -> Result<Buffer, ProviderError> {
        self.progressed = false;
        self.qp.deregister(mr)
    }

    #[inline]
    fn region(&self, mr: &MemoryRegion) -> Result<&[u8], ProviderError> {
        self.qp.region(mr)
    }

    #[inline]
    fn region_mut(&mut self, mr: &MemoryRegion) -> Result<&mut [u8], ProviderError> {
        self.qp.region_mut(mr)
    }

    fn post_recv(&mut self, wr: RecvWr) -> Result<(), ProviderError> {
        self.progressed = false;
        self.qp.post_recv(wr)?;
        self.wake_self();
        Ok(())
    }

    fn post_send(&mut self, wr: SendWr) -> Result<(), ProviderError> {
        self.progressed = false;
        if self.rtr.is_some() {
            // Not established yet: nothing may follow the RTR before its
            // Read Response.
            return Err(ProviderError::NotConnected);
        }
        self.qp.post_send(wr)?;
        self.write_lone_now();
        self.wake_self();
        Ok(())
    }

    /// A small Send framed straight into the queue pair's staging buffer
    /// ([`QueuePair::post_send_staged`]): no registered buffer, no WR, no
    /// completion. Goes to the socket at once under the same rule as a
    /// lone registered Send (see `post_send`).
    fn post_send_staged(
        &mut self,
        op: SendOp,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, ProviderError> {
        if self.rtr.is_some() {
            return Err(ProviderError::NotConnected);
        }
        if !self.lone_write_allowed() || self.shut_wr {
            if !self.qp.post_send_staged(op, len, fill)? {
                return Ok(false);
            }
            self.progressed = false;
            self.write_lone_now();
            self.wake_self();
            return Ok(true);
        }
        // `post_send_staged` and `write_lone_now` in one step.
        let (qp, sock, cap) = (&mut self.qp, &mut self.sock, &mut self.capture);
        let dontwait = self.dontwait;
        let write = |slices: &[IoSlice<'_>]| sock_write(sock, cap, dontwait, slices);
        let r = match qp.send_staged_now(op, len, fill, write)? {
            StagedSend::NotTaken => return Ok(false),
            StagedSend::Queued => None,
            StagedSend::Written(r) => Some(r),
        };
        self.progressed = false;
        if let Some(r) = r {
            self.after_write(r);
        }
        self.wake_self();
        Ok(true)
    }

    fn staged_outstanding(&self) -> usize {
        self.qp.staged_outstanding()
    }

    fn poll_completions(&mut self, out: &mut Vec<Completion>) -> usize {
        // A gated owner (a driver) calls poll_event, then this: one pass
        // serves both while nothing happened in between.
        if !(self.read_gate.is_some() && self.progressed) {
            self.progress();
        }
        self.progressed = false;
        let from = out.len();
        if !self.stash.is_empty() {
            out.append(&mut self.stash);
        }
        let own = out.len();
        self.qp.poll_completions(out);
        if self.rtr_outstanding > 0 {
            rtr::take_internal(out, own, &mut self.rtr_outstanding);
        }
        out.len() - from
    }

    fn arm(&mut self, waker: &Waker, notify: Notify) {
        // An owner that sleeps on the waker (not in `read_blocking`) gets
        // its unconfirmed Sends confirmed by the next pass.
        self.confirm_due = true;
        // A Read RTR's nudge that is due has no fd event to wake the owner.
        let due = self
            .rtr
            .as_ref()
            .is_some_and(|(w, _)| Instant::now() >= w.next_wakeup());
        let ready = due
            || match notify {
                Notify::Any => self.work_pending(),
                Notify::Solicited => {
                    self.input_left()
                        || self.qp.solicited_pending()
                        || !self.events.is_empty()
                        || self.qp.events_pending()
                        || self.qp.has_unconfirmed()
                        || (self.qp.has_output() && !self.write_blocked)
                }
            };
        if ready {
            self.waker = None;
            waker.wake_by_ref();
        } else {
            self.waker = Some((waker.clone(), notify));
        }
    }

    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }

    fn write_blocked(&self) -> bool {
        IwarpProvider::write_blocked(self)
    }

    fn set_read_gate(&mut self, on: bool) {
        IwarpProvider::set_read_gate(self, on)
    }

    fn note_readable(&mut self) {
        IwarpProvider::note_readable(self)
    }

    fn set_blocking_reads(&mut self, on: bool) -> bool {
        IwarpProvider::set_blocking_reads(self, on).is_ok()
    }

    fn read_blocking(&mut self, timeout: Duration) -> Option<io::Result<bool>> {
        Some(IwarpProvider::read_blocking(self, timeout))
    }

    fn settled(&self) -> bool {
        IwarpProvider::settled(self)
    }

    fn next_deadline(&self) -> Option<Instant> {
        IwarpProvider::next_deadline(self)
    }

    fn registered_regions(&self) -> Option<u32> {
        Some(self.qp.registered_regions())
    }

    /// The negotiated MPA parameters, the whole private data fields
    /// (IRD/ORD header included) and the peer's socket address.
    fn link_info(&self) -> LinkInfo {
        let peer = self
            .sock
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let mut info = LinkInfo {
            peer,
            ..LinkInfo::default()
        };
        if let Some(est) = &self.est {
            info.mpa_rev = Some(est.revision);
            info.crc = Some(est.params.crc);
            info.markers = Some(est.params.send_markers || est.params.recv_markers);
            info.ird = est.params.ird;
            info.ord = est.params.ord;
            info.peer_private_data = est.peer_frame.private_data.clone();
        }
        if let Some(f) = &self.local_frame {
            info.local_private_data = f.private_data.clone();
        }
        info
    }
}

/// Connections the kernel queues for [`Listener`] before they are
/// accepted. `std`'s 128 overflows when a burst of connections arrives
/// while the acceptor is descheduled, and an overflow costs the client a
/// SYN retransmission (1 s); the kernel caps it at `net.core.somaxconn`.
const BACKLOG: i32 = 1024;

/// A TCP listener on `a` (`SO_REUSEADDR`, as `std` sets it) with
/// [`BACKLOG`] (and the congestion control of local connections when `a`
/// is a loopback address, see [`crate::congestion`]).
fn listen(a: SocketAddr, cfg: &IwarpConfig) -> io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if a.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
    crate::congestion::before_listen(&fd, &a, cfg);
    rustix::net::bind(&fd, &a)?;
    rustix::net::listen(&fd, BACKLOG)?;
    Ok(TcpListener::from(fd))
}

/// A passive iWARP endpoint: a TCP listener whose connections start with
/// an MPA Request.
#[derive(Debug)]
pub struct Listener {
    l: TcpListener,
    cfg: IwarpConfig,
}

impl Listener {
    /// Binds a TCP listener. `cfg` gives the limits applied to incoming
    /// Requests (private data length) and the caps of accepted providers.
    pub fn bind(addr: impl ToSocketAddrs, cfg: IwarpConfig) -> io::Result<Self> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match listen(a, &cfg) {
                Ok(l) => {
                    l.set_nonblocking(true)?;
                    return Ok(Listener { l, cfg });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on")
        }))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.l.local_addr()
    }

    /// Waits (up to `timeout` in all) for a TCP connection and its MPA
    /// Request. A connection whose Request is invalid is closed and
    /// reported as `InvalidData`. One peer at a time: a server serving
    /// untrusted peers uses [`crate::acceptor::Acceptor`] instead.
    pub fn accept(&self, timeout: Duration) -> io::Result<PendingConnection> {
        let deadline = Instant::now() + timeout;
        let (sock, peer) = loop {
            match self.l.accept() {
                Ok(x) => break x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_fd(&self.l, PollFlags::IN, Some(remaining(deadline)?))?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let provider = IwarpProvider::new(sock, &self.cfg, 0x80)?;
        let mut hs = Handshake::responder(self.cfg.clone());
        loop {
            match read_request(&provider.sock, &mut hs) {
                RequestRead::Request(request, leftover) => {
                    return Ok(PendingConnection {
                        provider,
                        hs,
                        request,
                        leftover,
                        peer,
                    })
                }
                RequestRead::WouldBlock => {
                    wait_fd(&provider.sock, PollFlags::IN, Some(remaining(deadline)?))?;
                }
                RequestRead::Eof => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed before its MPA Request",
                    ))
                }
                RequestRead::Invalid(e) => {
                    // read_request sent the Reject the handshake prepared
                    // (if any); FIN after it.
                    let _ = provider.sock.shutdown(Shutdown::Write);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                RequestRead::Failed(e) => return Err(e),
            }
        }
    }

    /// The TCP listener and the configuration (for the acceptor).
    pub(crate) fn parts(&self) -> (&TcpListener, &IwarpConfig) {
        (&self.l, &self.cfg)
    }
}

/// What reading a peer's MPA Request from a non-blocking socket found.
#[derive(Debug)]
pub(crate) enum RequestRead {
    /// The whole Request, and the octets read after it.
    Request(PeerRequest, Vec<u8>),
    /// The socket has nothing more for now.
    WouldBlock,
    /// The peer closed before its Request.
    Eof,
    /// The Request is invalid (close the connection).
    Invalid(HandshakeError),
    /// The socket failed.
    Failed(io::Error),
}

/// Reads until the Request is complete or the socket has nothing more.
pub(crate) fn read_request(mut sock: &TcpStream, hs: &mut Handshake) -> RequestRead {
    let mut buf = [0u8; 532];
    loop {
        // Read only up to the end of the Request: the initiator sends
        // nothing else before our Reply.
        match sock.read(&mut buf) {
            Ok(0) => return RequestRead::Eof,
            Ok(n) => match hs.feed(&buf[..n]) {
                Ok((Progress::Request(request), used)) => {
                    return RequestRead::Request(request, buf[used..n].to_vec())
                }
                Ok(_) => {}
                Err(e) => {
                    // A Reject the handshake prepared (an enhanced Request
                    // without its IRD/ORD octets) goes out before the
                    // close: one write of a few dozen octets into a new
                    // connection's empty send buffer.
                    if !hs.output().is_empty() {
                        let _ = sock.write(hs.output());
                    }
                    return RequestRead::Invalid(e);
                }
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return RequestRead::WouldBlock,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return RequestRead::Failed(e),
        }
    }
}

/// A TCP connection whose MPA Request has arrived and awaits an answer.
#[derive(Debug)]
pub struct PendingConnection {
    provider: IwarpProvider,
    hs: Handshake,
    request: PeerRequest,
    leftover: Vec<u8>,
    peer: SocketAddr,
}

impl PendingConnection {
    /// A connection whose Request `hs` has read (`leftover`: the octets
    /// read after it).
    pub(crate) fn from_request(
        sock: TcpStream,
        peer: SocketAddr,
        cfg: &IwarpConfig,
        hs: Handshake,
        request: PeerRequest,
        leftover: Vec<u8>,
    ) -> io::Result<Self> {
        Ok(PendingConnection {
            provider: IwarpProvider::new(sock, cfg, 0x80)?,
            hs,
            request,
            leftover,
            peer,
        })
    }

    /// The peer's Request: raw frame, ULP private data, IRD/ORD.
    pub fn request(&self) -> &PeerRequest {
        &self.request
    }

    /// The peer's ULP private data (after the IRD/ORD header on rev 2).
    pub fn private_data(&self) -> &[u8] {
        &self.request.private_data
    }

    /// The peer's IRD/ORD header (enhanced revision 2 only).
    pub fn ird_ord(&self) -> Option<IrdOrd> {
        self.request.ird_ord
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The provider-to-be: register memory and post receives here before
    /// accepting (the peer may send as soon as it has our Reply).
    pub fn provider_mut(&mut self) -> &mut IwarpProvider {
        &mut self.provider
    }

    /// Sends our MPA Reply (waiting up to `timeout` for the socket) and
    /// returns the established provider; its first event is
    /// [`ConnectionEvent::Established`].
    pub fn accept(mut self, cfg: IwarpConfig, timeout: Duration) -> io::Result<IwarpProvider> {
        let deadline = Instant::now() + timeout;
        let align_fpdus = cfg.align_fpdus;
        let r = self.hs.accept(cfg);
        let out = self.hs.output().to_vec();
        let mut p = self.provider;
        p.align_fpdus = align_fpdus;
        p.record(Direction::Sent, &out);
        match r {
            Ok(est) => {
                write_all_deadline(&mut p.sock, &out, deadline)?;
                p.local_frame = self.hs.sent_frame().cloned();
                p.set_established(est);
                let left = std::mem::take(&mut self.leftover);
                p.qp.handle_input(&left);
                p.progress();
                Ok(p)
            }
            Err(e) => {
                if !out.is_empty() {
                    let _ = write_all_deadline(&mut p.sock, &out, deadline);
                }
                let _ = p.sock.shutdown(Shutdown::Write);
                Err(io::Error::new(io::ErrorKind::ConnectionRefused, e))
            }
        }
    }

    /// Answers with an MPA Reject carrying `private_data`, then closes.
    pub fn reject(mut self, private_data: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        self.hs
            .reject(private_data)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let out = self.hs.output().to_vec();
        write_all_deadline(&mut self.provider.sock, &out, deadline)?;
        self.provider.sock.shutdown(Shutdown::Write)
    }
}
