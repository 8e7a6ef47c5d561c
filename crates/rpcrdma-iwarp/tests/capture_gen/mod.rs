//! Captures written by hand for the dissector's tests (here, in
//! `tests/capture.rs`) and the CLI's end-to-end tests
//! (`crates/rpcrdma-cli/tests/decode_pcap.rs` includes this file): an
//! independent classic-pcap / pcapng writer (every link type the reader
//! supports, both byte orders, nanosecond time stamps, IPv4 and IPv6) and
//! the MPA / DDP / RDMAP octets of a few iWARP conversations.
#![allow(dead_code)]

/// How the capture file is written.
#[derive(Clone, Copy)]
pub struct Format {
    pub linktype: u32,
    pub big_endian: bool,
    pub nanos: bool,
}

pub const ETH: Format = Format {
    linktype: 1,
    big_endian: false,
    nanos: false,
};

/// One TCP segment: from the client?, flags, sequence number, payload.
#[derive(Clone)]
pub struct Seg {
    pub c2s: bool,
    pub flags: u8,
    pub seq: u32,
    pub data: Vec<u8>,
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const PSHACK: u8 = 0x18;

pub struct Tcp {
    pub cport: u16,
    pub cseq: u32,
    pub sseq: u32,
    pub segs: Vec<Seg>,
}

impl Tcp {
    pub fn new(cport: u16) -> Self {
        Tcp {
            cport,
            cseq: 0xffff_ff00, // wraps during the test streams
            sseq: 7000,
            segs: Vec::new(),
        }
    }

    pub fn handshake(&mut self) {
        self.segs.push(Seg {
            c2s: true,
            flags: SYN,
            seq: self.cseq,
            data: vec![],
        });
        self.segs.push(Seg {
            c2s: false,
            flags: SYN | ACK,
            seq: self.sseq,
            data: vec![],
        });
        self.cseq = self.cseq.wrapping_add(1);
        self.sseq = self.sseq.wrapping_add(1);
        self.segs.push(Seg {
            c2s: true,
            flags: ACK,
            seq: self.cseq,
            data: vec![],
        });
    }

    pub fn send(&mut self, c2s: bool, data: &[u8]) {
        let seq = if c2s { &mut self.cseq } else { &mut self.sseq };
        self.segs.push(Seg {
            c2s,
            flags: PSHACK,
            seq: *seq,
            data: data.to_vec(),
        });
        *seq = seq.wrapping_add(data.len() as u32);
    }
}

pub fn put32(v: &mut Vec<u8>, x: u32, be: bool) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}

pub fn tcp_header(sport: u16, dport: u16, seq: u32, flags: u8) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t
}

pub fn ip_packet(v6: bool, c2s: bool, tcp: &[u8]) -> Vec<u8> {
    let (a, b) = if c2s { (1u8, 2u8) } else { (2, 1) };
    let mut ip = Vec::new();
    if v6 {
        ip.extend_from_slice(&[0x60, 0, 0, 0]);
        ip.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[6, 64]);
        let mut sa = [0u8; 16];
        sa[0] = 0xfd;
        sa[15] = a;
        let mut da = sa;
        da[15] = b;
        ip.extend_from_slice(&sa);
        ip.extend_from_slice(&da);
    } else {
        ip.extend_from_slice(&[0x45, 0]);
        ip.extend_from_slice(&((20 + tcp.len()) as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, a, 10, 0, 0, b]);
    }
    ip.extend_from_slice(tcp);
    ip
}

pub fn link(linktype: u32, v6: bool, ip: &[u8]) -> Vec<u8> {
    let et: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    let mut f = Vec::new();
    match linktype {
        1 => {
            f.extend_from_slice(&[0u8; 12]);
            f.extend_from_slice(&et);
        }
        113 => {
            f.extend_from_slice(&[0u8; 14]);
            f.extend_from_slice(&et);
        }
        276 => {
            f.extend_from_slice(&et);
            f.extend_from_slice(&[0u8; 18]);
        }
        0 => f.extend_from_slice(&if v6 { [10, 0, 0, 0] } else { [2, 0, 0, 0] }),
        _ => {}
    }
    f.extend_from_slice(ip);
    if linktype == 1 && ip.len() < 46 {
        f.resize(14 + 46, 0xee); // Ethernet padding
    }
    f
}

pub fn pcap_of(tcp: &Tcp, fmt: Format, v6: bool) -> Vec<u8> {
    pcap_of_conns(&[tcp], fmt, v6)
}

/// Writes the segments of several connections, interleaved round-robin.
pub fn pcap_of_conns(conns: &[&Tcp], fmt: Format, v6: bool) -> Vec<u8> {
    let be = fmt.big_endian;
    let mut p = Vec::new();
    put32(
        &mut p,
        if fmt.nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 },
        be,
    );
    p.extend_from_slice(&if be { [0, 2, 0, 4] } else { [2, 0, 4, 0] });
    put32(&mut p, 0, be);
    put32(&mut p, 0, be);
    put32(&mut p, 262_144, be);
    put32(&mut p, fmt.linktype, be);
    let longest = conns.iter().map(|c| c.segs.len()).max().unwrap_or(0);
    let mut n = 0u32;
    for i in 0..longest {
        for c in conns {
            let Some(sg) = c.segs.get(i) else { continue };
            let (sp, dp) = if sg.c2s {
                (c.cport, 20049)
            } else {
                (20049, c.cport)
            };
            let mut t = tcp_header(sp, dp, sg.seq, sg.flags);
            t.extend_from_slice(&sg.data);
            let frame = link(fmt.linktype, v6, &ip_packet(v6, sg.c2s, &t));
            n += 1;
            put32(&mut p, 1_700_000_000, be);
            put32(&mut p, if fmt.nanos { n * 1000 } else { n }, be);
            put32(&mut p, frame.len() as u32, be);
            put32(&mut p, frame.len() as u32, be);
            p.extend_from_slice(&frame);
        }
    }
    p
}

// ---------------------------------------------------------------- iWARP

pub fn mpa(req: bool, flags: u8, rev: u8, pd: &[u8]) -> Vec<u8> {
    let mut v = if req {
        b"MPA ID Req Frame".to_vec()
    } else {
        b"MPA ID Rep Frame".to_vec()
    };
    v.extend_from_slice(&[flags, rev]);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

pub const PD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 1, 1, 3, 3];

/// FPDU: length, ULPDU, pad, CRC-32C stored little-endian (or zero).
pub fn fpdu(ulpdu: &[u8], crc: bool) -> Vec<u8> {
    let mut v = (ulpdu.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(ulpdu);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    let c = if crc {
        rpcrdma_iwarp::crc::crc32c(&v).to_le_bytes()
    } else {
        [0; 4]
    };
    v.extend_from_slice(&c);
    v
}

pub fn untagged(
    op: u8,
    qn: u32,
    msn: u32,
    mo: u32,
    last: bool,
    inv: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = vec![if last { 0x41 } else { 0x01 }, 0x40 | op];
    for x in [inv, qn, msn, mo] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(payload);
    v
}

pub fn tagged(op: u8, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0xc1, 0x40 | op];
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// RDMA_MSG v1, no chunks, followed by an NFSv3 NULL call (or `extra`).
pub fn rdma_msg(xid: u32, extra: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [xid, 1, 32, 0, 0, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for x in [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.resize(v.len() + extra, 0x5a);
    v
}

/// A connection with SYN, MPA (CRC as given) and:
/// Send(call 1), Send(reply 1) as 2 segments, RDMA Write, Send(call 2).
pub fn scenario(crc: bool) -> Tcp {
    let mut t = Tcp::new(40100);
    t.handshake();
    let c = if crc { 0x40 } else { 0 };
    t.send(true, &mpa(true, c, 1, &PD));
    t.send(false, &mpa(false, c, 1, &PD));
    t.send(
        true,
        &fpdu(&untagged(3, 0, 1, 0, true, 0, &rdma_msg(0xa1, 0)), crc),
    );
    let reply = rdma_msg(0xa1, 100);
    t.send(
        false,
        &fpdu(&untagged(3, 0, 1, 0, false, 0, &reply[..64]), crc),
    );
    t.send(
        false,
        &fpdu(&untagged(3, 0, 1, 64, true, 0, &reply[64..]), crc),
    );
    t.send(false, &fpdu(&tagged(0, 0x77, 0x1000, &[9u8; 33]), crc));
    t.send(
        true,
        &fpdu(&untagged(3, 0, 2, 0, true, 0, &rdma_msg(0xa2, 0)), crc),
    );
    t
}

/// Rewrites a classic little-endian microsecond capture as pcapng: one
/// section in the given byte order, one interface, Enhanced Packet Blocks.
pub fn to_pcapng(classic: &[u8], be: bool) -> Vec<u8> {
    let e32 = |x: u32| if be { x.to_be_bytes() } else { x.to_le_bytes() };
    let block = |out: &mut Vec<u8>, btype: u32, body: &[u8]| {
        let mut b = body.to_vec();
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        let total = (12 + b.len()) as u32;
        out.extend_from_slice(&e32(btype));
        out.extend_from_slice(&e32(total));
        out.extend_from_slice(&b);
        out.extend_from_slice(&e32(total));
    };
    let mut out = Vec::new();
    let mut shb = e32(0x1a2b_3c4d).to_vec();
    shb.extend_from_slice(if be { &[0, 1, 0, 0] } else { &[1, 0, 0, 0] });
    shb.extend_from_slice(&[0xff; 8]);
    block(&mut out, 0x0a0d_0d0a, &shb);
    let linktype = u32::from_le_bytes(classic[20..24].try_into().unwrap()) as u16;
    let mut idb = if be {
        linktype.to_be_bytes()
    } else {
        linktype.to_le_bytes()
    }
    .to_vec();
    idb.extend_from_slice(&[0, 0]);
    idb.extend_from_slice(&e32(262_144));
    block(&mut out, 1, &idb);
    // A Name Resolution Block, to be skipped.
    block(&mut out, 4, &[0; 4]);
    let mut off = 24;
    while off < classic.len() {
        let w = |i: usize| u32::from_le_bytes(classic[off + i..off + i + 4].try_into().unwrap());
        let (sec, usec, incl) = (w(0), w(4), w(8) as usize);
        let ts = u64::from(sec) * 1_000_000 + u64::from(usec);
        let mut epb = e32(0).to_vec();
        epb.extend_from_slice(&e32((ts >> 32) as u32));
        epb.extend_from_slice(&e32(ts as u32));
        epb.extend_from_slice(&e32(incl as u32));
        epb.extend_from_slice(&e32(incl as u32));
        epb.extend_from_slice(&classic[off + 16..off + 16 + incl]);
        block(&mut out, 6, &epb);
        off += 16 + incl;
    }
    out
}

/// Splits every data segment into pieces of `n` octets.
pub fn split(t: &Tcp, n: usize) -> Tcp {
    let mut out = Tcp::new(t.cport);
    for sg in &t.segs {
        if sg.data.is_empty() {
            out.segs.push(sg.clone());
            continue;
        }
        for (i, ch) in sg.data.chunks(n).enumerate() {
            out.segs.push(Seg {
                data: ch.to_vec(),
                seq: sg.seq.wrapping_add((i * n) as u32),
                ..sg.clone()
            });
        }
    }
    out
}

/// Inserts MPA Markers into an FPDU stream (CRC off): at every multiple of
/// 512 octets from the start of the FPDU stream, `0000` then FPDUPTR, the
/// distance back to the start of the FPDU the Marker is in.
pub fn with_markers(fpdus: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Vec::new();
    for f in fpdus {
        let start = w.len();
        for &b in f {
            if w.len() % 512 == 0 {
                let ptr = (w.len() - start) as u16;
                w.extend_from_slice(&[0, 0]);
                w.extend_from_slice(&ptr.to_be_bytes());
            }
            w.push(b);
        }
    }
    w
}

pub fn markers_conn(corrupt: bool) -> Tcp {
    let mut t = Tcp::new(40200);
    t.handshake();
    // M in both frames: Markers in both directions.
    t.send(true, &mpa(true, 0x80, 1, &PD));
    t.send(false, &mpa(false, 0x80, 1, &PD));
    let f: Vec<Vec<u8>> = (0..4u32)
        .map(|i| {
            fpdu(
                &untagged(3, 0, i + 1, 0, true, 0, &rdma_msg(0xb0 + i, 300)),
                false,
            )
        })
        .collect();
    let mut stream = with_markers(&f);
    // Markers at 0 (FPDUPTR 0), 512, 1024.
    assert_eq!(&stream[..4], &[0, 0, 0, 0]);
    if corrupt {
        stream[512 + 3] ^= 0x04;
    }
    for ch in stream.chunks(200) {
        t.send(true, ch);
    }
    t
}
