//! The cutting TCP proxy: one listener on 127.0.0.1 per client, one
//! upstream connection to the server per accepted connection, and two
//! threads per connection (one a direction) that forward whole units (see
//! [`super::watch`]) and ask the connection's [`Trigger`] about each; when
//! it fires, the thread forwards the part of the unit the plan keeps and
//! closes both sockets (FIN or RST, as planned). Nothing is forwarded in
//! either direction after the decision, so a cut "after X" is before
//! anything the peers sent in answer to X.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::plan::{CutKind, CutMode, Plan, Trigger};
use super::watch::{Frames, Unit, Watch, C2S};

/// One cut, as it happened.
#[derive(Clone, Debug)]
pub struct CutRecord {
    /// The client (proxy) index.
    pub client: usize,
    /// The client's connection number (0 = its first).
    pub conn: u32,
    /// What was planned.
    pub plan: Plan,
    /// The direction that was cut.
    pub dir: usize,
    /// Octets of that direction forwarded before the cut.
    pub at: u64,
    /// The unit the cut fell in (or after).
    pub unit: Unit,
    /// Its length.
    pub len: usize,
    /// Octets of it forwarded (`len`: the cut is right after it).
    pub keep: usize,
    /// When.
    pub when: Instant,
}

/// What the proxies did (shared by all of them).
#[derive(Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Octets forwarded, both directions.
    pub octets: AtomicU64,
    cuts: Mutex<Vec<CutRecord>>,
}

impl ProxyStats {
    /// Every cut so far.
    pub fn cuts(&self) -> Vec<CutRecord> {
        self.cuts.lock().unwrap().clone()
    }

    /// Cuts by kind and mode.
    pub fn count(&self, kind: CutKind, mode: CutMode) -> usize {
        let cuts = self.cuts.lock().unwrap();
        cuts.iter()
            .filter(|c| c.plan.kind == kind && c.plan.mode == mode)
            .count()
    }
}

/// One client's proxy. Dropping it stops accepting (connections already
/// made go on until their ends close).
pub struct Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The plan of each connection of one proxy, by connection number.
pub type Planner = Box<dyn Fn(u32) -> Plan + Send>;

impl Proxy {
    /// Listens on 127.0.0.1 for client `client`, forwarding to `upstream`;
    /// its connection `n` is cut as `planner(n)` says.
    pub fn start(
        upstream: SocketAddr,
        client: usize,
        planner: Planner,
        stats: Arc<ProxyStats>,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{client}"))
            .spawn(move || {
                let mut n = 0u32;
                for s in listener.incoming() {
                    if st.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(down) = s else { continue };
                    // Upstream refused: the client sees its connection close.
                    let Ok(up) = TcpStream::connect(upstream) else {
                        continue;
                    };
                    let _ = (down.set_nodelay(true), up.set_nodelay(true));
                    stats.connections.fetch_add(1, Ordering::Relaxed);
                    let conn = Arc::new(Conn {
                        ends: [down, up],
                        frames: Frames::default(),
                        trigger: Trigger::new(planner(n)),
                        client,
                        index: n,
                        stats: stats.clone(),
                    });
                    n += 1;
                    for d in [C2S, 1 - C2S] {
                        let c = conn.clone();
                        let spawned = std::thread::Builder::new()
                            .name(format!("proxy-{client}-{}-{d}", c.index))
                            .spawn(move || pump(&c, d));
                        if spawned.is_err() {
                            conn.close_both();
                        }
                    }
                }
            })?;
        Ok(Proxy {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One proxied connection: `ends[C2S]` faces the client, `ends[S2C]` the
/// server; direction `d` reads `ends[d]` and writes the other.
struct Conn {
    ends: [TcpStream; 2],
    frames: Frames,
    trigger: Trigger,
    client: usize,
    index: u32,
    stats: Arc<ProxyStats>,
}

impl Conn {
    fn close_both(&self) {
        for s in &self.ends {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// The planned cut of both sockets, at `at` octets of direction `dir`,
    /// `keep` octets into a unit of `len` (recorded first: once the
    /// sockets close, the ends may look at the record).
    fn cut(&self, dir: usize, at: u64, (unit, len, keep): (Unit, usize, usize)) {
        let plan = self.trigger.plan();
        self.stats.cuts.lock().unwrap().push(CutRecord {
            client: self.client,
            conn: self.index,
            plan,
            dir,
            at,
            unit,
            len,
            keep,
            when: Instant::now(),
        });
        match plan.mode {
            CutMode::Fin => self.close_both(),
            CutMode::Rst => {
                for s in &self.ends {
                    // The close (when both threads are done) sends a RST;
                    // SHUT_RD sends nothing and wakes the other thread.
                    let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
                    let _ = s.shutdown(Shutdown::Read);
                }
            }
        }
    }
}

/// Forwards direction `d` of `c` unit by unit until an end closes or the
/// trigger fires.
fn pump(c: &Conn, d: usize) {
    let (mut src, mut dst) = (&c.ends[d], &c.ends[1 - d]);
    let mut watch = Watch::new(d, c.frames.clone());
    let mut rbuf = vec![0u8; 64 << 10];
    let mut offset = 0u64;
    loop {
        let n = match src.read(&mut rbuf) {
            Ok(0) => {
                // An orderly close: pass on what is left, then the FIN.
                if !c.trigger.fired() {
                    let _ = dst.write_all(watch.unforwarded());
                    let _ = dst.shutdown(Shutdown::Write);
                }
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                c.close_both();
                return;
            }
        };
        if c.trigger.fired() {
            return;
        }
        watch.push(&rbuf[..n]);
        let mut ready = 0;
        while let Some((len, unit)) = watch.next_unit() {
            if let Some(keep) = c.trigger.decide(d, len, unit) {
                let upto = ready + keep;
                let _ = dst.write_all(&watch.unforwarded()[..upto]);
                c.cut(d, offset + upto as u64, (unit, len, keep));
                return;
            }
            ready += len;
        }
        if c.trigger.fired() {
            return;
        }
        if dst.write_all(&watch.unforwarded()[..ready]).is_err() {
            c.close_both();
            return;
        }
        watch.forwarded(ready);
        offset += ready as u64;
        c.stats.octets.fetch_add(ready as u64, Ordering::Relaxed);
    }
}
