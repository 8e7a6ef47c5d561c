//! RDMA Writes from a file registration (`QueuePair::register_file`, the
//! payload handed to `TxSink::send_file`) pinned to the general path:
//! over random files, ranges (empty, short, up to several FPDUs, at the
//! end of the file), MULPDUs, Sends in between and partial writes, a
//! sender whose Write sources are file registrations puts the same octets
//! on the wire as one that reads each range into memory and registers
//! that, and the receiver sees the same completions and memory. With the
//! CRC on the range is read into memory at registration (the same octets
//! again). A file that shrank before its octets went out ends the
//! transmit with `UnexpectedEof` after the FPDU header, never with other
//! octets in its place.

use std::fs::File;
use std::io::{self, IoSlice, Write as _};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use proptest::prelude::*;
use rpcrdma_iwarp::qp::{QueuePair, StreamParams, TxSink};
use rpcrdma_proto::provider::{
    Access, Caps, Completion, FileRange, MemoryRegion, RecvWr, SendOp, SendWr,
};

const CAPS: Caps = rpcrdma_iwarp::cm::DEFAULT_CAPS;
const RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
const TARGET: usize = 300_000;

#[derive(Clone, Debug)]
enum Step {
    /// An RDMA Write of the file's `off..off + len` (clamped to the file)
    /// into the receiver's target at `at`.
    Write { off: usize, len: usize, at: usize },
    /// A small Send.
    Send { len: usize },
    /// One transmit whose writer takes at most `n` octets, then blocks.
    Transmit(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..TARGET, prop_oneof![0usize..100, 100usize..5000, 5000usize..TARGET], 0usize..1000)
            .prop_map(|(off, len, at)| Step::Write { off, len, at }),
        1 => (1usize..3000).prop_map(|len| Step::Send { len }),
        2 => prop_oneof![1usize..40, 40usize..70_000, Just(usize::MAX)].prop_map(Step::Transmit),
    ]
}

fn temp_file(data: &[u8], tag: &str) -> Arc<File> {
    let path = std::env::temp_dir().join(format!(
        "rpcrdma-qp-file-{}-{tag}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    File::create(&path).unwrap().write_all(data).unwrap();
    let f = File::options().read(true).write(true).open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    Arc::new(f)
}

/// A writer that takes at most `left` octets (gather writes and file
/// sends alike), then blocks; what it takes goes to `out`.
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    left: usize,
    files: &'a mut usize,
}

impl TxSink for Capped<'_> {
    fn write(&mut self, slices: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        let mut k = 0;
        for s in slices {
            let c = s.len().min(self.left - k);
            self.out.extend_from_slice(&s[..c]);
            k += c;
            if k == self.left {
                break;
            }
        }
        self.left -= k;
        if k == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(k)
    }

    fn send_file(&mut self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        *self.files += 1;
        let mut v = vec![0u8; len.min(self.left)];
        let n = file.read_at(&mut v, offset)?;
        self.out.extend_from_slice(&v[..n]);
        self.left -= n;
        Ok(n)
    }
}

/// One transmit of `a` (writer capped at `n`); what went out goes to `b`
/// and onto `wire`.
fn deliver(
    a: &mut QueuePair,
    b: &mut QueuePair,
    wire: &mut Vec<u8>,
    n: usize,
    files: &mut usize,
) -> io::Result<usize> {
    let mut out = Vec::new();
    let r = a.transmit_files(&mut Capped {
        out: &mut out,
        left: n,
        files,
    });
    b.handle_input(&out);
    wire.extend_from_slice(&out);
    r
}

#[derive(Debug, PartialEq)]
struct Seen {
    wire: Vec<u8>,
    sender: Vec<Completion>,
    receiver: Vec<Completion>,
    target: Vec<u8>,
}

/// Runs `steps` over `file`; `from_file`: Write sources are file
/// registrations (else the range read and registered). Returns what was
/// seen and how many file sends there were.
fn run(p: StreamParams, file: &Arc<File>, steps: &[Step], from_file: bool) -> (Seen, usize) {
    let size = file.metadata().unwrap().len() as usize;
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.set_file_sends(true);
    a.establish(p);
    b.establish(p);
    let target = b
        .register(vec![0u8; TARGET + 1000].into_boxed_slice(), RW)
        .unwrap();
    let sends = steps
        .iter()
        .filter(|s| matches!(s, Step::Send { .. }))
        .count();
    for i in 0..sends {
        let mr = b
            .register(vec![0u8; 4000].into_boxed_slice(), Access::LOCAL_WRITE)
            .unwrap();
        b.post_recv(RecvWr {
            wr_id: 1000 + i as u64,
            sge: mr.sge(0, 4000),
        })
        .unwrap();
    }
    let (mut wire, mut files) = (Vec::new(), 0);
    let mut held: Vec<MemoryRegion> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let wr_id = i as u64 + 1;
        match *s {
            Step::Write { off, len, at } => {
                let off = off.min(size);
                let len = len.min(size - off);
                let range = FileRange::new(file.clone(), off as u64, len as u32);
                let mr = if from_file {
                    a.register_file(&range).unwrap()
                } else {
                    let data = range.read().unwrap().into_boxed_slice();
                    a.register(data, Access::NONE).unwrap()
                };
                held.push(mr);
                a.post_send(SendWr {
                    wr_id,
                    op: SendOp::Write {
                        remote: target.remote(at as u64),
                    },
                    sges: vec![mr.sge(0, len as u32)].into(),
                })
                .unwrap();
            }
            Step::Send { len } => {
                let data = vec![len as u8; len].into_boxed_slice();
                let mr = a.register(data, Access::NONE).unwrap();
                a.post_send(SendWr {
                    wr_id,
                    op: SendOp::Send { solicited: false },
                    sges: vec![mr.sge(0, len as u32)].into(),
                })
                .unwrap();
            }
            Step::Transmit(n) => {
                deliver(&mut a, &mut b, &mut wire, n, &mut files).unwrap();
            }
        }
    }
    for _ in 0..10_000 {
        let before = wire.len();
        deliver(&mut a, &mut b, &mut wire, usize::MAX, &mut files).unwrap();
        if wire.len() == before {
            break;
        }
    }
    a.confirm_transmitted();
    let mut sender = Vec::new();
    a.poll_completions(&mut sender);
    let mut receiver = Vec::new();
    b.poll_completions(&mut receiver);
    for mr in held {
        a.deregister(&mr).unwrap();
    }
    let target = b.region(&target).unwrap().to_vec();
    (
        Seen {
            wire,
            sender,
            receiver,
            target,
        },
        files,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn file_writes_are_the_memory_writes(
        size in prop_oneof![0usize..10, 10usize..5000, 5000usize..TARGET],
        seed in any::<u8>(),
        steps in proptest::collection::vec(step(), 1..12),
        crc in any::<bool>(),
        mulpdu in prop_oneof![Just(None), (100u16..9000).prop_map(Some)],
    ) {
        let data: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(17) ^ seed).collect();
        let file = temp_file(&data, "p");
        let mut p = StreamParams { crc, ..StreamParams::DEFAULT };
        if let Some(m) = mulpdu {
            p.mulpdu = m;
        }
        let (mem, none) = run(p, &file, &steps, false);
        prop_assert_eq!(none, 0);
        let (fil, sends) = run(p, &file, &steps, true);
        prop_assert_eq!(&fil.wire, &mem.wire);
        prop_assert_eq!(&fil.receiver, &mem.receiver);
        prop_assert_eq!(&fil.sender, &mem.sender);
        prop_assert_eq!(&fil.target, &mem.target);
        let big = steps.iter().any(|s| matches!(*s, Step::Write { off, len, .. }
            if off < size && len.min(size - off) > 4096));
        if crc {
            prop_assert_eq!(sends, 0, "with the CRC on the range is read at registration");
        } else if big {
            prop_assert!(sends > 0, "a large Write goes from the file");
        }
    }
}

#[test]
fn a_file_that_shrank_ends_the_transmit_after_the_header() {
    let data = vec![0x5au8; 200_000];
    let file = temp_file(&data, "t");
    let mut a = QueuePair::new(CAPS, 0);
    let mut b = QueuePair::new(CAPS, 0x80);
    a.set_file_sends(true);
    a.establish(StreamParams::DEFAULT);
    b.establish(StreamParams::DEFAULT);
    assert!(a.sends_files());
    let target = b
        .register(vec![0u8; 200_000].into_boxed_slice(), RW)
        .unwrap();
    let mr = a
        .register_file(&FileRange::new(file.clone(), 0, 200_000))
        .unwrap();
    a.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: target.remote(0),
        },
        sges: vec![mr.sge(0, 200_000)].into(),
    })
    .unwrap();
    file.set_len(1000).unwrap();
    let (mut wire, mut files) = (Vec::new(), 0);
    let r = deliver(&mut a, &mut b, &mut wire, usize::MAX, &mut files);
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    // The first FPDU's header (2 + 14 octets) and the 1,000 octets the file
    // still had: nothing else.
    assert_eq!(wire.len(), 16 + 1000);
    assert!(wire[16..].iter().all(|&x| x == 0x5a));
}

#[test]
fn a_send_from_a_file_registration_is_refused() {
    let file = temp_file(&[1u8; 100], "s");
    let mut a = QueuePair::new(CAPS, 0);
    a.set_file_sends(true);
    a.establish(StreamParams::DEFAULT);
    let mr = a.register_file(&FileRange::new(file, 0, 100)).unwrap();
    let e = a
        .post_send(SendWr {
            wr_id: 1,
            op: SendOp::Send { solicited: false },
            sges: vec![mr.sge(0, 100)].into(),
        })
        .unwrap_err();
    assert!(matches!(
        e,
        rpcrdma_proto::provider::ProviderError::InvalidArgument(_)
    ));
}
