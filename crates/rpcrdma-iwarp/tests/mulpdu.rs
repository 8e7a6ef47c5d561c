//! The MULPDU we send with: never above the 64,768 octets RFC 5044 allows
//! (the default was 65,512 until 2026-11-29: these tests failed then), as
//! large as allowed when nothing smaller is asked for, and with
//! `IwarpConfig::align_fpdus` over TCP no larger than one segment of the
//! connection's EMSS.

mod tcp_common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::mpa::fpdu::{fpdu_len_without_markers, MULPDU_MAX, MULPDU_MIN};
use rpcrdma_iwarp::qp::{QueuePair, StreamParams};
use rpcrdma_iwarp::tcp::{IwarpProvider, Listener};
use rpcrdma_proto::provider::{
    Access, Completion, ConnectionEvent, Provider, RecvWr, RemoteAddr, SendOp, SendWr, Status,
};

const CAPS: rpcrdma_proto::provider::Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ);

/// The ULPDU_Length of every FPDU in a marker-free stream.
fn ulpdu_lengths(stream: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut at = 0;
    while at + 2 <= stream.len() {
        let len = usize::from(u16::from_be_bytes([stream[at], stream[at + 1]]));
        v.push(len);
        at += fpdu_len_without_markers(len);
    }
    assert_eq!(at, stream.len(), "the stream ends inside an FPDU");
    v
}

/// Moves octets both ways until quiet; returns what each side sent.
fn pump_recording(a: &mut QueuePair, b: &mut QueuePair) -> (Vec<u8>, Vec<u8>) {
    let mut buf = vec![0u8; 1 << 20];
    let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
    for _ in 0..100_000 {
        let n = a.poll_transmit(&mut buf);
        from_a.extend_from_slice(&buf[..n]);
        b.handle_input(&buf[..n]);
        let m = b.poll_transmit(&mut buf);
        from_b.extend_from_slice(&buf[..m]);
        a.handle_input(&buf[..m]);
        a.confirm_transmitted();
        b.confirm_transmitted();
        if n == 0 && m == 0 {
            break;
        }
    }
    (from_a, from_b)
}

fn cq(q: &mut QueuePair) -> Vec<Completion> {
    let mut v = Vec::new();
    q.poll_completions(&mut v);
    v
}

/// A 1 MiB RDMA Write, a 200 KB Send and a 1 MiB RDMA Read (whose Read
/// Response the peer frames) at `mulpdu`: the ULPDU lengths each side put
/// on the wire.
fn traffic(mulpdu: u16, crc: bool) -> (Vec<usize>, Vec<usize>) {
    let p = StreamParams {
        crc,
        mulpdu,
        ..StreamParams::DEFAULT
    };
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.establish(p);
    b.establish(p);
    const MIB: usize = 1 << 20;
    let data: Vec<u8> = (0..MIB).map(|i| (i * 7 + i / 251) as u8).collect();
    let src = a.register(data.clone().into_boxed_slice(), RW).unwrap();
    let sink = a.register(vec![0; MIB].into_boxed_slice(), RW).unwrap();
    let target = b.register(vec![0; MIB].into_boxed_slice(), RW).unwrap();
    let rbuf = b
        .register(vec![0; 200_000].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    b.post_recv(RecvWr {
        wr_id: 9,
        sge: rbuf.sge(0, 200_000),
    })
    .unwrap();
    let wrs = [
        (
            SendOp::Write {
                remote: target.remote(0),
            },
            src.sge(0, MIB as u32),
        ),
        (SendOp::Send { solicited: false }, src.sge(0, 200_000)),
        (
            SendOp::Read {
                remote: RemoteAddr {
                    stag: target.stag(),
                    offset: 0,
                },
            },
            sink.sge(0, MIB as u32),
        ),
    ];
    for (i, (op, sge)) in wrs.into_iter().enumerate() {
        a.post_send(SendWr {
            wr_id: i as u64,
            op,
            sges: vec![sge].into(),
        })
        .unwrap();
    }
    let (from_a, from_b) = pump_recording(&mut a, &mut b);
    let ca = cq(&mut a);
    assert_eq!(ca.len(), 3, "{ca:?}");
    assert!(ca.iter().all(|c| c.status == Status::Success), "{ca:?}");
    assert_eq!(a.region(&sink).unwrap(), &data[..]);
    (ulpdu_lengths(&from_a), ulpdu_lengths(&from_b))
}

//= rfc5044#section-3
//# The sending DDP MUST NOT post a ULPDU larger than 64768 octets to
//# MPA.
#[test]
fn default_ulpdus_stay_within_64768_and_fill_it() {
    for crc in [false, true] {
        let (a, b) = traffic(StreamParams::DEFAULT.mulpdu, crc);
        for (side, lens) in [("requester", &a), ("responder", &b)] {
            let max = lens.iter().copied().max().unwrap();
            assert_eq!(max, usize::from(MULPDU_MAX), "{side}, crc {crc}");
        }
    }
    assert_eq!(IwarpConfig::default().mulpdu, MULPDU_MAX);
}

//= rfc5044#section-3
//# The range of MULPDU values MUST be
//# between 128 octets and 64768 octets, inclusive.
#[test]
fn a_larger_mulpdu_asked_of_the_queue_pair_is_capped() {
    let (a, b) = traffic(u16::MAX, false);
    assert!(a.iter().chain(&b).all(|&l| l <= usize::from(MULPDU_MAX)));
    let mut q = QueuePair::new(CAPS, 0);
    q.establish(StreamParams {
        mulpdu: u16::MAX,
        ..StreamParams::DEFAULT
    });
    assert_eq!(q.params().mulpdu, MULPDU_MAX);
}

/// A configured MULPDU outside 128..=64768 is taken as the nearest end;
/// on loopback the EMSS does not lower 64,768, aligned or not.
#[test]
fn configured_mulpdu_is_kept_in_range_over_tcp() {
    for (asked, want, align_fpdus) in [
        (u16::MAX, MULPDU_MAX, false),
        (16, MULPDU_MIN, false),
        (5000, 5000, false),
        (u16::MAX, MULPDU_MAX, true),
    ] {
        let ini = IwarpConfig {
            mulpdu: asked,
            align_fpdus,
            ..IwarpConfig::default()
        };
        let (a, b) = tcp_common::connected_pair(&ini, &IwarpConfig::default());
        assert_eq!(a.qp().params().mulpdu, want, "asked {asked}");
        assert_eq!(b.qp().params().mulpdu, MULPDU_MAX);
    }
}

/// A non-loopback address of this host (the route to a public address),
/// or `None`.
fn own_address() -> Option<std::net::IpAddr> {
    let u = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    u.connect("192.0.2.1:9").ok()?;
    let ip = u.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Connects with the MSS clamped to `mss` (`TCP_MAXSEG` before connect,
/// as a 1500-octet MTU gives); both ends then see that EMSS.
fn connect_with_mss(addr: SocketAddr, mss: u32, cfg: IwarpConfig) -> IwarpProvider {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_tcp_mss(mss).unwrap();
    s.connect(&addr.into()).unwrap();
    IwarpProvider::connect_stream(TcpStream::from(s), cfg).unwrap()
}

//= rfc5044#section-5.1
//# MPA transmitters SHOULD calculate a MULPDU as described in Section
//# 4.5.  If the TCP implementation allows EMSS to be determined by MPA,
//# that value should be used.
#[test]
fn mulpdu_follows_the_emss_and_every_fpdu_fits_one_segment() {
    // A loopback peer is exempt (no segments there): this needs a
    // connection to our own non-loopback address.
    let Some(ip) = own_address() else {
        eprintln!("SKIPPED: no non-loopback IPv4 address on this host");
        return;
    };
    // Off (the default): 64,768 whatever the EMSS.
    let off = IwarpConfig {
        crc: true,
        align_fpdus: false,
        ..IwarpConfig::default()
    };
    let l = Listener::bind(SocketAddr::new(ip, 0), off.clone()).unwrap();
    let a = connect_with_mss(l.local_addr().unwrap(), 1448, off.clone());
    let b = l
        .accept(Duration::from_secs(10))
        .unwrap()
        .accept(off, Duration::from_secs(10))
        .unwrap();
    assert_eq!(b.qp().params().mulpdu, MULPDU_MAX);
    drop((a, b));
    let cfg = IwarpConfig {
        crc: true,
        align_fpdus: true,
        ..IwarpConfig::default()
    };
    let l = Listener::bind(SocketAddr::new(ip, 0), cfg.clone()).unwrap();
    let mut a = connect_with_mss(l.local_addr().unwrap(), 1448, cfg.clone());
    a.set_capture(true);
    let pending = l.accept(Duration::from_secs(10)).unwrap();
    let mut b = pending.accept(cfg, Duration::from_secs(10)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut up = false;
    while !up {
        assert!(Instant::now() < deadline, "never established");
        match a.poll_event() {
            Some(ConnectionEvent::Established(_)) => up = true,
            Some(e) => panic!("{e:?}"),
            None => {
                a.wait(Some(Duration::from_millis(10))).unwrap();
                b.wait(Some(Duration::from_millis(1))).unwrap();
            }
        }
    }
    // EMSS 1448 (1436 if the clamp is taken before timestamps): ULPDUs of
    // 1442 (1430) octets, an FPDU of exactly one segment.
    let m = a.qp().params().mulpdu;
    assert!(m == 1442 || m == 1430, "mulpdu {m}");
    assert_eq!(
        b.qp().params().mulpdu,
        m,
        "the passive side sees the same MSS"
    );
    // A 64 KiB RDMA Write, then a Send that says it is there.
    let data = vec![0x5au8; 65_536];
    let src = a
        .register(data.into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    let target = b.register(vec![0; 65_536].into_boxed_slice(), RW).unwrap();
    let rbuf = b
        .register(vec![0; 64].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    b.post_recv(RecvWr {
        wr_id: 7,
        sge: rbuf.sge(0, 64),
    })
    .unwrap();
    for (wr_id, op, sge) in [
        (
            1,
            SendOp::Write {
                remote: target.remote(0),
            },
            src.sge(0, 65_536),
        ),
        (2, SendOp::Send { solicited: true }, src.sge(0, 16)),
    ] {
        a.post_send(SendWr {
            wr_id,
            op,
            sges: vec![sge].into(),
        })
        .unwrap();
    }
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while ca.len() < 2 || cb.is_empty() {
        assert!(Instant::now() < deadline, "stuck: {ca:?} {cb:?}");
        a.poll_completions(&mut ca);
        b.poll_completions(&mut cb);
    }
    assert!(ca.iter().chain(&cb).all(|c| c.status == Status::Success));
    assert!(b.region(&target).unwrap().iter().all(|&x| x == 0x5a));
    let sent: Vec<u8> = a
        .take_capture()
        .into_iter()
        .filter(|(d, _)| *d == rpcrdma_iwarp::tcp::Direction::Sent)
        .flat_map(|(_, v)| v)
        .collect();
    let lens = ulpdu_lengths(&fpdu_stream_after_mpa(&sent));
    assert!(lens.len() >= 45, "{} FPDUs", lens.len());
    for l in lens {
        assert!(
            fpdu_len_without_markers(l) <= usize::from(m) + 6,
            "ULPDU {l}"
        );
    }
}

/// What follows our MPA Request (its 20-octet header and private data), if
/// the capture holds it, in the octets we sent.
fn fpdu_stream_after_mpa(sent: &[u8]) -> Vec<u8> {
    if !sent.starts_with(b"MPA ID Req Frame") {
        return sent.to_vec();
    }
    let pd = usize::from(u16::from_be_bytes([sent[18], sent[19]]));
    sent[20 + pd..].to_vec()
}
