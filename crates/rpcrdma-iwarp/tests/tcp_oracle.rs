//! The wire oracle on real traffic: two providers talk over 127.0.0.1
//! (MPA rev 2, CRC on, 8 KiB MULPDU so messages span several DDP
//! segments), moving every RDMAP opcode: the four Sends, RDMA Write, RDMA
//! Read Request and Response, and a Terminate (provoked by a Write to a bad
//! STag). The active side records every octet it wrote and read; the test
//! writes those exact octets to a pcap (one TCP segment per FPDU, since
//! real segment boundaries are not observable from user space) and has
//! tshark decode it: zero malformed frames, zero bad CRCs, one good CRC
//! per FPDU, every opcode present. Without tshark: a loud SKIPPED and our
//! own decode only.

mod common;
mod tcp_common;

use common::{tshark, tshark_available, PcapWriter, TcpConn, START_MICROS};
use rpcrdma_iwarp::cm::IwarpConfig;
use rpcrdma_iwarp::mpa::fpdu::{FpduReceiver, FramingConfig, Received};
use rpcrdma_iwarp::rdmap;
use rpcrdma_iwarp::tcp::Direction;
use rpcrdma_proto::provider::{
    Access, Completion, ConnectionState, Provider, RecvWr, RemoteAddr, SendOp, SendWr, Stag,
};
use tcp_common::connected_pair;

const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn ascii(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| b'a' + ((i as u8).wrapping_add(seed) % 26))
        .collect()
}

/// Splits one direction's byte stream into whole FPDUs.
struct Framer {
    rx: FpduReceiver,
    buf: Vec<u8>,
}

impl Framer {
    fn push(&mut self, data: &[u8], out: &mut Vec<Vec<u8>>, ops: &mut [usize; 8]) {
        self.buf.extend_from_slice(data);
        while let Received::Fpdu(f) = self.rx.poll(&self.buf).expect("our own stream frames") {
            let mut u = Vec::new();
            f.extend_ulpdu(&self.buf, &mut u);
            let seg = rdmap::Segment::parse(&u).expect("our own segment parses");
            ops[usize::from(seg.control.opcode.0)] += 1;
            out.push(self.buf.drain(..f.consumed).collect());
        }
    }
}

fn traffic() -> (Vec<u8>, usize, [usize; 8]) {
    let cfg = IwarpConfig {
        crc: true,
        ird: 4,
        ord: 4,
        mulpdu: 8192,
        private_data: vec![0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3],
        ..Default::default()
    };
    let (mut a, mut b) = connected_pair(&cfg, &cfg);
    a.set_capture(true);
    let src = a
        .register(ascii(40_000, 1).into_boxed_slice(), Access::NONE)
        .unwrap();
    let sink = a.register(vec![0; 20_000].into_boxed_slice(), RW).unwrap();
    let rbuf = b
        .register(vec![0; 4 * 16_384].into_boxed_slice(), Access::LOCAL_WRITE)
        .unwrap();
    let target = b.register(vec![0; 30_000].into_boxed_slice(), RW).unwrap();
    let inv1 = b.register(vec![0; 64].into_boxed_slice(), RW).unwrap();
    let inv2 = b.register(vec![0; 64].into_boxed_slice(), RW).unwrap();
    let readable = b
        .register(
            ascii(20_000, 7).into_boxed_slice(),
            Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .unwrap();
    for i in 0..4u64 {
        b.post_recv(RecvWr {
            wr_id: i,
            sge: rbuf.sge(i * 16_384, 16_384),
        })
        .unwrap();
    }
    let ops = [
        SendOp::Send { solicited: false },
        SendOp::Send { solicited: true },
        SendOp::SendWithInvalidate {
            invalidate: inv1.stag(),
            solicited: false,
        },
        SendOp::SendWithInvalidate {
            invalidate: inv2.stag(),
            solicited: true,
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        a.post_send(SendWr {
            wr_id: 10 + i as u64,
            op,
            sges: vec![src.sge(i as u64 * 100, 12_000)].into(),
        })
        .unwrap();
    }
    a.post_send(SendWr {
        wr_id: 20,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![src.sge(0, 30_000)].into(),
    })
    .unwrap();
    a.post_send(SendWr {
        wr_id: 21,
        op: SendOp::Read {
            remote: readable.remote(0),
        },
        sges: vec![sink.sge(0, 20_000)].into(),
    })
    .unwrap();
    let (mut ca, mut cb): (Vec<Completion>, Vec<Completion>) = (Vec::new(), Vec::new());
    for _ in 0..100_000 {
        a.poll_completions(&mut ca);
        b.poll_completions(&mut cb);
        if ca.len() == 6 && cb.len() == 4 {
            break;
        }
    }
    assert!(
        ca.iter().chain(&cb).all(|c| c.status.is_ok()),
        "{ca:?} {cb:?}"
    );
    assert_eq!((ca.len(), cb.len()), (6, 4));
    assert_eq!(a.region(&sink).unwrap(), &ascii(20_000, 7)[..]);
    // Provoke a Terminate from b: a Write to an STag b never issued.
    a.post_send(SendWr {
        wr_id: 30,
        op: SendOp::Write {
            remote: RemoteAddr {
                stag: Stag(0x00ee_ee42),
                offset: 0,
            },
        },
        sges: vec![src.sge(0, 100)].into(),
    })
    .unwrap();
    for _ in 0..100_000 {
        a.poll_completions(&mut ca);
        b.poll_completions(&mut cb);
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        let down = |s| matches!(s, ConnectionState::Disconnected(_));
        if down(a.connection_state()) && down(b.connection_state()) {
            break;
        }
    }
    assert!(a.qp().terminate_received().is_some(), "no Terminate from b");
    // Build the pcap: MPA Request / Reply, then each direction's FPDUs.
    let mut p = PcapWriter::new(START_MICROS);
    let mut c = TcpConn::new(&mut p, 41_000, 20_049);
    c.c2s(&mut p, &a.local_frame().unwrap().to_vec().unwrap());
    c.s2c(&mut p, &a.peer_frame().unwrap().to_vec().unwrap());
    let cfgf = FramingConfig {
        crc: true,
        markers: false,
    };
    let mut fa = Framer {
        rx: FpduReceiver::new(cfgf),
        buf: Vec::new(),
    };
    let mut fb = Framer {
        rx: FpduReceiver::new(cfgf),
        buf: Vec::new(),
    };
    let mut count = 0;
    let mut seen = [0usize; 8];
    for (dir, data) in a.take_capture() {
        let mut out = Vec::new();
        match dir {
            Direction::Sent => fa.push(&data, &mut out, &mut seen),
            Direction::Received => fb.push(&data, &mut out, &mut seen),
        }
        for f in out {
            match dir {
                Direction::Sent => c.c2s(&mut p, &f),
                Direction::Received => c.s2c(&mut p, &f),
            }
            count += 1;
        }
    }
    assert!(fa.buf.is_empty() && fb.buf.is_empty(), "partial FPDU left");
    (p.into_bytes(), count, seen)
}

#[test]
fn tshark_accepts_real_provider_traffic() {
    let (pcap, fpdus, seen) = traffic();
    // Our own decode: every opcode 0..7 was on the wire.
    assert!(seen.iter().all(|&n| n > 0), "opcodes seen {seen:?}");
    let path = std::env::temp_dir().join(format!("rpcrdma-iwarp-live-{}.pcap", std::process::id()));
    std::fs::write(&path, &pcap).unwrap();
    if !tshark_available() {
        let msg = format!(
            "\n*** SKIPPED: tshark not installed; the Wireshark oracle did NOT check {} \
             (self-check only). Install tshark (Debian: apt-get install tshark) and rerun. ***\n",
            path.display()
        );
        eprintln!("{msg}");
        println!("{msg}");
        return;
    }
    let ps = path.to_str().unwrap();
    let verbose = tshark(&["-V"], ps);
    let bad = verbose.matches("Bad CRC32").count();
    let good = verbose.matches("Good CRC32").count();
    let malformed = tshark(&["-Y", "_ws.malformed || _ws.expert.severity >= error"], ps);
    let opcodes = tshark(
        &[
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-e",
            "iwarp_rdma.opcode",
        ],
        ps,
    );
    // (With Send reassembly on, Wireshark 4.0's RPC-over-RDMA heuristic
    // reports "Dissector bug" on reassembled non-RPC Sends; with it off, as
    // here, there must be none.)
    let dissector_bugs = tshark(&[], ps).matches("Dissector bug").count();
    println!(
        "tshark ({ps}): fpdus={fpdus} good={good} bad={bad} malformed_lines={} \
         dissector_bug_notes={dissector_bugs} opcodes(our decode)={seen:?}",
        malformed.lines().count()
    );
    assert_eq!(bad, 0, "Bad CRC32 in {ps}");
    assert_eq!(dissector_bugs, 0, "dissector bug notes in {ps}");
    assert_eq!(
        malformed.lines().count(),
        0,
        "malformed in {ps}:\n{malformed}"
    );
    assert_eq!(good, fpdus, "one Good CRC32 per FPDU in {ps}");
    for op in 0..8 {
        assert!(
            opcodes.lines().any(|l| l
                .split(',')
                .any(|v| v.trim() == op.to_string() || v.trim() == format!("0x{op:02x}"))),
            "opcode {op} not decoded by tshark in {ps}"
        );
    }
    if std::env::var_os("RPCRDMA_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
}
