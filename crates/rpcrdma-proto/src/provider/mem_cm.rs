//! The connection-manager contract ([`super::cm`]) in process: a
//! [`MemNetwork`] of listeners keyed by socket address, whose connections
//! are [`MemProvider`] pairs. For tests and for a runtime built without a
//! real provider: the passive side runs on another thread (or task) than
//! the connector, as across a real network.
//!
//! Connecting makes a pair, sends the request from one end, hands the
//! other end to the listener as a [`MemPending`] and waits (a condition
//! variable, bounded by the timeout; no clock is read here) for the
//! answer. A pending connection that is dropped unanswered, or a listener
//! that goes away, refuses the connector with `ConnectionReset`.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Wake, Waker};
use std::time::Duration;

use super::cm::{
    CmError, ConnectRequest, ConnectionManager, ListenEvent, Listener, PendingConnection,
};
use super::mem::{pair, MemConfig, MemProvider};
use super::{ConnectParams, ConnectionEvent, ConnectionState, DisconnectReason, Provider};

/// First port handed out for port 0 and to connectors.
const FIRST_PORT: u16 = 40_000;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An in-process network: listeners by address, connections as
/// [`MemProvider`] pairs with `config`'s caps. Clones share the network.
#[derive(Clone, Debug, Default)]
pub struct MemNetwork {
    net: Arc<Net>,
    /// The caps of every provider made here.
    pub config: MemConfig,
}

#[derive(Debug, Default)]
struct Net {
    listeners: Mutex<HashMap<SocketAddr, Arc<Queue>>>,
    ports: Mutex<u16>,
}

impl Net {
    fn port(&self) -> u16 {
        let mut p = guard(&self.ports);
        let n = p.wrapping_add(1).max(1);
        *p = n;
        FIRST_PORT.wrapping_add(n)
    }
}

/// One listener's requests.
#[derive(Debug, Default)]
struct Queue {
    state: Mutex<QueueState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    pending: VecDeque<MemPending>,
    woken: bool,
    closed: bool,
}

impl Wake for Queue {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        guard(&self.state).woken = true;
        self.cv.notify_all();
    }
}

/// The passive side's answer, as the connector waits for it.
#[derive(Debug, Default)]
struct Answer {
    outcome: Mutex<Option<Outcome>>,
    cv: Condvar,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Accepted,
    Rejected,
    Dropped,
}

impl Answer {
    fn give(&self, o: Outcome) {
        let mut g = guard(&self.outcome);
        if g.is_none() {
            *g = Some(o);
        }
        self.cv.notify_all();
    }
}

impl MemNetwork {
    /// A new, empty network with default caps.
    pub fn new() -> Self {
        MemNetwork::default()
    }

    fn queue(&self, at: SocketAddr) -> Option<Arc<Queue>> {
        guard(&self.net.listeners).get(&at).cloned()
    }
}

fn reset(what: &'static str) -> CmError {
    CmError::Io(io::Error::new(io::ErrorKind::ConnectionReset, what))
}

fn invalid(e: super::ProviderError) -> CmError {
    CmError::Io(io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl ConnectionManager for MemNetwork {
    type Provider = MemProvider;
    type Listener = MemListener;

    fn connect(
        &self,
        to: SocketAddr,
        params: &ConnectParams,
        timeout: Duration,
    ) -> Result<MemProvider, CmError> {
        let Some(queue) = self.queue(to) else {
            return Err(CmError::Io(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                "no in-memory listener at this address",
            )));
        };
        let (mut a, mut b) = pair(self.config);
        a.connect(params.clone()).map_err(invalid)?;
        let Some(ConnectionEvent::ConnectRequest {
            private_data,
            ird,
            ord,
        }) = b.poll_event()
        else {
            return Err(reset("in-memory connect request lost"));
        };
        let answer = Arc::new(Answer::default());
        let pending = MemPending {
            provider: b,
            request: ConnectRequest {
                peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.net.port()),
                private_data,
                ird,
                ord,
            },
            answer: AnswerSlot(Some(answer.clone())),
        };
        {
            let mut q = guard(&queue.state);
            if q.closed {
                return Err(reset("in-memory listener closed"));
            }
            q.pending.push_back(pending);
        }
        queue.cv.notify_all();
        let g = guard(&answer.outcome);
        let (g, _) = answer
            .cv
            .wait_timeout_while(g, timeout, |o| o.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        let outcome = *g;
        drop(g);
        // The answer is on the link: take it in (the events stay queued
        // for the owner).
        a.progress();
        match (outcome, a.connection_state()) {
            (Some(Outcome::Accepted), ConnectionState::Established) => Ok(a),
            (
                Some(Outcome::Rejected),
                ConnectionState::Disconnected(DisconnectReason::Rejected { private_data }),
            ) => Err(CmError::Rejected { private_data }),
            (None, _) => {
                a.disconnect();
                Err(CmError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "in-memory connection setup timed out",
                )))
            }
            _ => Err(reset("in-memory connection dropped unanswered")),
        }
    }

    fn listen(&self, at: SocketAddr) -> Result<MemListener, CmError> {
        let mut l = guard(&self.net.listeners);
        let at = if at.port() == 0 {
            let mut a = at;
            loop {
                a.set_port(self.net.port());
                if !l.contains_key(&a) {
                    break a;
                }
            }
        } else {
            at
        };
        if l.contains_key(&at) {
            return Err(CmError::Io(io::ErrorKind::AddrInUse.into()));
        }
        let queue = Arc::new(Queue::default());
        l.insert(at, queue.clone());
        Ok(MemListener {
            net: self.net.clone(),
            at,
            queue,
        })
    }
}

/// A listening address of a [`MemNetwork`]; dropping it stops listening
/// (pending connections are refused).
#[derive(Debug)]
pub struct MemListener {
    net: Arc<Net>,
    at: SocketAddr,
    queue: Arc<Queue>,
}

impl Listener for MemListener {
    type Provider = MemProvider;
    type Pending = MemPending;

    fn local_addr(&self) -> SocketAddr {
        self.at
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<ListenEvent<MemPending>>,
    ) -> io::Result<()> {
        let g = guard(&self.queue.state);
        let idle = |s: &mut QueueState| s.pending.is_empty() && !s.woken;
        let mut g = match timeout {
            Some(t) => {
                self.queue
                    .cv
                    .wait_timeout_while(g, t, idle)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => self
                .queue
                .cv
                .wait_while(g, idle)
                .unwrap_or_else(PoisonError::into_inner),
        };
        g.woken = false;
        events.extend(g.pending.drain(..).map(ListenEvent::Request));
        Ok(())
    }

    fn waker(&self) -> Waker {
        Waker::from(self.queue.clone())
    }
}

impl Drop for MemListener {
    fn drop(&mut self) {
        guard(&self.net.listeners).remove(&self.at);
        let pending = {
            let mut q = guard(&self.queue.state);
            q.closed = true;
            std::mem::take(&mut q.pending)
        };
        drop(pending);
    }
}

/// A connection request of a [`MemNetwork`] awaiting its answer; dropped
/// unanswered, it refuses the connector.
#[derive(Debug)]
pub struct MemPending {
    provider: MemProvider,
    request: ConnectRequest,
    answer: AnswerSlot,
}

/// Where the answer goes; dropped unused, it tells the connector that
/// nobody will answer.
#[derive(Debug)]
struct AnswerSlot(Option<Arc<Answer>>);

impl AnswerSlot {
    fn give(mut self, o: Outcome) {
        if let Some(a) = self.0.take() {
            a.give(o);
        }
    }
}

impl Drop for AnswerSlot {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            a.give(Outcome::Dropped);
        }
    }
}

impl PendingConnection for MemPending {
    type Provider = MemProvider;

    fn request(&self) -> &ConnectRequest {
        &self.request
    }

    fn provider_mut(&mut self) -> &mut MemProvider {
        &mut self.provider
    }

    fn accept(self, params: &ConnectParams) -> Result<MemProvider, CmError> {
        let mut p = self.provider;
        p.accept(params.clone()).map_err(invalid)?;
        self.answer.give(Outcome::Accepted);
        Ok(p)
    }

    fn reject(self, private_data: &[u8]) -> Result<(), CmError> {
        let mut p = self.provider;
        p.reject(private_data.to_vec()).map_err(invalid)?;
        self.answer.give(Outcome::Rejected);
        Ok(())
    }
}
