//! `rpcrdma::rpcbind` against a fake rpcbind in this process (Unix socket
//! and TCP on 127.0.0.1): the calls' octets checked word by word against
//! RFC 5531 (call header, record marking) and RFC 1833 (`rpcb`, SET = 1,
//! UNSET = 2, program 100000), version fallback, refusals.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rpcrdma::rpcbind::{rdma_netids, uaddr, Endpoint, Registration, Rpcb, RpcbindError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// One call the fake received: its version, procedure and `rpcb`, decoded
/// here from the octets (not by the library's decoder).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    vers: u32,
    proc: u32,
    prog: u32,
    r_vers: u32,
    netid: String,
    addr: String,
    owner: String,
}

#[derive(Default)]
struct Fake {
    seen: Vec<Seen>,
    /// (prog, vers, netid) → addr.
    table: BTreeSet<(u32, u32, String, String)>,
}

#[derive(Clone, Copy)]
struct Behaviour {
    /// Versions of RPCBPROG the fake has.
    low: u32,
    high: u32,
    /// SET answers FALSE.
    refuse_set: bool,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// An XDR string at `at`: (string, next offset); checks the zero pad.
fn xdr_string(b: &[u8], at: usize) -> (String, usize) {
    let n = be32(b, at) as usize;
    let s = String::from_utf8(b[at + 4..at + 4 + n].to_vec()).unwrap();
    let padded = (n + 3) & !3;
    assert!(
        b[at + 4 + n..at + 4 + padded].iter().all(|&x| x == 0),
        "XDR pad octets are zero (RFC 4506 section 4.11)"
    );
    (s, at + 4 + padded)
}

/// Serves one connection: reads records, answers each.
async fn serve_conn(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    fake: Arc<Mutex<Fake>>,
    how: Behaviour,
) {
    loop {
        let mut mark = [0u8; 4];
        if s.read_exact(&mut mark).await.is_err() {
            return;
        }
        let m = u32::from_be_bytes(mark);
        // RFC 5531 section 11: one fragment, the last: the high bit set.
        assert_ne!(m & 0x8000_0000, 0, "a single last fragment");
        let mut b = vec![0u8; (m & 0x7fff_ffff) as usize];
        s.read_exact(&mut b).await.unwrap();
        // RFC 5531 section 9 call header with AUTH_NONE credential and
        // verifier: xid, CALL (0), rpcvers 2, prog, vers, proc, cred
        // {0, 0}, verf {0, 0}.
        let xid = be32(&b, 0);
        assert_eq!(be32(&b, 4), 0, "msg_type CALL");
        assert_eq!(be32(&b, 8), 2, "rpcvers");
        assert_eq!(be32(&b, 12), 100_000, "RPCBPROG");
        let vers = be32(&b, 16);
        let proc = be32(&b, 20);
        assert_eq!(&b[24..40], &[0u8; 16], "AUTH_NONE cred and verf");
        // RFC 1833 rpcb.
        let prog = be32(&b, 40);
        let r_vers = be32(&b, 44);
        let (netid, at) = xdr_string(&b, 48);
        let (addr, at) = xdr_string(&b, at);
        let (owner, at) = xdr_string(&b, at);
        assert_eq!(at, b.len(), "nothing after the rpcb");
        let mut reply = Vec::new();
        reply.extend_from_slice(&xid.to_be_bytes());
        // REPLY, MSG_ACCEPTED, verifier AUTH_NONE {0, 0}.
        reply.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        if !(how.low..=how.high).contains(&vers) {
            // PROG_MISMATCH (2) with low and high.
            reply.extend_from_slice(&2u32.to_be_bytes());
            reply.extend_from_slice(&how.low.to_be_bytes());
            reply.extend_from_slice(&how.high.to_be_bytes());
        } else {
            let mut f = fake.lock().unwrap();
            f.seen.push(Seen {
                vers,
                proc,
                prog,
                r_vers,
                netid: netid.clone(),
                addr: addr.clone(),
                owner,
            });
            let ok = match proc {
                1 => {
                    let taken = f
                        .table
                        .iter()
                        .any(|(p, v, n, _)| (*p, *v, n) == (prog, r_vers, &netid));
                    let ok = !how.refuse_set && !taken;
                    if ok {
                        f.table.insert((prog, r_vers, netid, addr));
                    }
                    ok
                }
                2 => {
                    let before = f.table.len();
                    f.table
                        .retain(|(p, v, n, _)| (*p, *v, n) != (prog, r_vers, &netid));
                    f.table.len() < before
                }
                _ => panic!("unexpected procedure {proc}"),
            };
            reply.extend_from_slice(&0u32.to_be_bytes()); // SUCCESS
            reply.extend_from_slice(&u32::from(ok).to_be_bytes());
        }
        let mut out = (0x8000_0000u32 | reply.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&reply);
        s.write_all(&out).await.unwrap();
    }
}

/// A fake rpcbind on a Unix socket in a fresh directory.
fn fake_unix(how: Behaviour) -> (Endpoint, Arc<Mutex<Fake>>, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("rpcbind.sock");
    let l = tokio::net::UnixListener::bind(&path).unwrap();
    let fake = Arc::new(Mutex::new(Fake::default()));
    let f2 = fake.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve_conn(s, f2.clone(), how));
        }
    });
    (Endpoint::Unix(path), fake, dir)
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rpcrdma-rpcbind-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

const PROG: u32 = 0x2000_5244;

fn entries(listen: &str) -> Vec<Rpcb> {
    rdma_netids(listen.parse().unwrap())
        .into_iter()
        .map(|(netid, a)| Rpcb {
            prog: PROG,
            vers: 1,
            netid: netid.into(),
            addr: uaddr(a),
            owner: "0".into(),
        })
        .collect()
}

const NORMAL: Behaviour = Behaviour {
    low: 3,
    high: 4,
    refuse_set: false,
};

#[tokio::test]
async fn register_and_unregister_rdma_and_rdma6_in_version_4() {
    let (ep, fake, _dir) = fake_unix(NORMAL);
    let reg = Registration::register(std::slice::from_ref(&ep), entries("[::]:20049"))
        .await
        .unwrap();
    assert_eq!(reg.version(), 4);
    assert_eq!(reg.endpoint(), &ep);
    {
        let f = fake.lock().unwrap();
        let calls: Vec<_> = f
            .seen
            .iter()
            .map(|s| (s.vers, s.proc, s.netid.as_str(), s.addr.as_str()))
            .collect();
        // A stale mapping removed first, then SET; for each netid.
        assert_eq!(
            calls,
            [
                (4, 2, "rdma", "0.0.0.0.78.81"),
                (4, 1, "rdma", "0.0.0.0.78.81"),
                (4, 2, "rdma6", "::.78.81"),
                (4, 1, "rdma6", "::.78.81"),
            ]
        );
        assert!(f
            .seen
            .iter()
            .all(|s| s.prog == PROG && s.r_vers == 1 && s.owner == "0"));
        assert_eq!(f.table.len(), 2);
    }
    reg.unregister().await.unwrap();
    let f = fake.lock().unwrap();
    assert!(f.table.is_empty(), "{:?}", f.table);
    assert_eq!(f.seen.len(), 6);
    assert!(f.seen[4..].iter().all(|s| s.proc == 2 && s.vers == 4));
}

#[tokio::test]
async fn falls_back_to_version_3() {
    let (ep, fake, _dir) = fake_unix(Behaviour {
        low: 2,
        high: 3,
        refuse_set: false,
    });
    let reg = Registration::register(&[ep], entries("127.0.0.1:20049"))
        .await
        .unwrap();
    assert_eq!(reg.version(), 3);
    let f = fake.lock().unwrap();
    // The fake records only the calls it could answer (version 3).
    assert_eq!(
        f.seen
            .iter()
            .map(|s| (s.vers, s.proc, s.addr.as_str()))
            .collect::<Vec<_>>(),
        [(3, 2, "127.0.0.1.78.81"), (3, 1, "127.0.0.1.78.81")]
    );
}

#[tokio::test]
async fn a_refused_set_and_no_rpcbind_are_errors() {
    let (ep, _fake, _dir) = fake_unix(Behaviour {
        refuse_set: true,
        ..NORMAL
    });
    let e = Registration::register(&[ep], entries("127.0.0.1:20049"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcbindError::Refused(ref r) if r.netid == "rdma"),
        "{e}"
    );

    let dir = tempdir::Dir::new();
    let none = Endpoint::Unix(dir.0.join("no.sock"));
    let e = Registration::register(&[none], entries("127.0.0.1:1"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcbindError::Unreachable(ref t) if t.len() == 1),
        "{e}"
    );
    assert!(e.to_string().starts_with("no rpcbind is running"), "{e}");
}

#[tokio::test]
async fn over_tcp_too() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let fake = Arc::new(Mutex::new(Fake::default()));
    let f2 = fake.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve_conn(s, f2.clone(), NORMAL));
        }
    });
    let dir = tempdir::Dir::new();
    // The Unix socket does not exist: the next endpoint is used.
    let eps = [Endpoint::Unix(dir.0.join("none.sock")), Endpoint::Tcp(addr)];
    let reg = Registration::register(&eps, entries("127.0.0.1:20049"))
        .await
        .unwrap();
    assert_eq!(reg.endpoint(), &Endpoint::Tcp(addr));
    assert_eq!(fake.lock().unwrap().table.len(), 1);
    reg.unregister().await.unwrap();
    assert!(fake.lock().unwrap().table.is_empty());
}
