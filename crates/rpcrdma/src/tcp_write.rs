//! The write side of an ONC RPC over TCP connection: [`RecordWriter`].
//!
//! A record goes straight to the socket from the task that sends it (one
//! `writev`, no hand-off to another task, no copy) when nothing is queued
//! for the connection's writer task and the record is one fragment of a few
//! chunks ([`direct_record`]). Everything else — a record of several
//! fragments or many chunks, a socket that takes only part of the record or
//! none of it, a write error, records already queued — goes to the writer
//! task, which writes in order. Either way the octets on the wire are
//! [`record_pieces`]'s (the general encoding): the proptests below pin the
//! direct path, cut anywhere by a short write, to it.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use smallvec::SmallVec;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::message::{Message, Piece};
use crate::metrics::Metrics;
use crate::record::{fragment_plan, LAST_FRAGMENT, MAX_FRAGMENT_LEN};
use crate::transport::{CallGuard, TransportError};

/// Most chunks (header included) of a record written directly; a record
/// with more goes to the writer task.
const DIRECT_MAX_IOV: usize = 8;

/// Most buffers per `writev` of the writer task.
const WRITEV_MAX: usize = 64;

/// Most records the writer task takes off its queue before writing them.
const BATCH_MAX: usize = 64;

/// The chunks of a message's contiguous XDR stream (pads included), as
/// cheap `Bytes` handles; empty chunks left out (the general path).
fn xdr_chunks(m: &Message) -> SmallVec<[Bytes; 4]> {
    static PAD: [u8; 3] = [0; 3];
    let mut out = SmallVec::new();
    for p in m.pieces() {
        let (b, pad) = match p {
            Piece::Inline(b) => (b.clone(), 0),
            // (A file piece is read here only if the server did not read
            // it first: `Message::materialize_files`.)
            Piece::Ddp(_) | Piece::File(_) => {
                (p.file_octets(), rpcrdma_proto::xdr::pad_len(p.len()))
            }
        };
        if !b.is_empty() {
            out.push(b);
        }
        if pad != 0 {
            out.push(Bytes::from_static(&PAD[..pad]));
        }
    }
    out
}

/// The general encoding of a record of `m`: each fragment's header (RFC 5531
/// §11), then its data, fragments of at most `max_fragment` octets.
pub(crate) fn record_pieces(m: &Message, max_fragment: u32) -> Vec<Bytes> {
    let chunks = xdr_chunks(m);
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let mut out = Vec::with_capacity(chunks.len() + 2);
    let mut rest = chunks.into_iter();
    let mut cur = Bytes::new();
    for (hdr, n) in fragment_plan(total, max_fragment) {
        out.push(Bytes::copy_from_slice(&hdr.to_be_bytes()));
        let mut left = n;
        while left > 0 {
            if cur.is_empty() {
                // `total` is the sum of the chunks: never runs out.
                let Some(c) = rest.next() else { break };
                cur = c;
            }
            let take = cur.len().min(left);
            out.push(cur.split_to(take));
            left -= take;
        }
    }
    out
}

/// The buffers of `m`'s record for one `writev` on the direct path, `hdr`
/// (filled in here: the header of its one fragment) first, put in `v`
/// (empty; filled in place, in one pass over the pieces: the vector is
/// ~140 octets, a copy of it per record cost ~30 instructions), and the
/// record's length, header included; `None` when the record takes the
/// general path: longer than one fragment of `max_fragment` octets, or
/// more than [`DIRECT_MAX_IOV`] buffers (`v` then holds a part). Borrows
/// `m`'s pieces: nothing cloned or copied.
fn direct_iov<'a>(
    m: &'a Message,
    max_fragment: u32,
    hdr: &'a mut [u8; 4],
    v: &mut SmallVec<[IoSlice<'a>; DIRECT_MAX_IOV]>,
) -> Option<usize> {
    static PAD: [u8; 3] = [0; 3];
    // The header's place, filled in once the length is known.
    v.push(IoSlice::new(&[]));
    let mut total = 0usize;
    for p in m.pieces() {
        let b = p.bytes();
        let pad = if p.is_ddp() {
            rpcrdma_proto::xdr::pad_len(b.len())
        } else {
            0
        };
        total = total.saturating_add(b.len() + pad);
        if !b.is_empty() {
            if v.len() == DIRECT_MAX_IOV {
                return None;
            }
            v.push(IoSlice::new(b));
        }
        if pad != 0 {
            if v.len() == DIRECT_MAX_IOV {
                return None;
            }
            v.push(IoSlice::new(&PAD[..pad]));
        }
    }
    if total > max_fragment.clamp(1, MAX_FRAGMENT_LEN) as usize {
        return None;
    }
    // `total` ≤ MAX_FRAGMENT_LEN: fits the 31-bit length.
    *hdr = (LAST_FRAGMENT | total as u32).to_be_bytes();
    let hdr: &'a [u8; 4] = hdr;
    v[0] = IoSlice::new(hdr);
    Some(total + 4)
}

/// What is left of `m`'s record (the general encoding) once its first `n`
/// octets are written.
fn rest_after(m: &Message, max_fragment: u32, n: usize) -> Vec<Bytes> {
    let mut q: VecDeque<Bytes> = record_pieces(m, max_fragment).into();
    advance(&mut q, n);
    q.into()
}

/// What the writer task writes: a whole record, or what a short direct
/// write left of one.
pub(crate) enum Job {
    /// A record, encoded by [`record_pieces`].
    Record(Message),
    /// The rest of a record.
    Rest(Vec<Bytes>),
}

/// A job and the in-flight guard of the call it belongs to (released once
/// written).
type Outgoing = (Job, CallGuard);

struct WriterState {
    /// The socket's write half; `None` once closed (the writer task holds
    /// the other reference: the write side is shut down when it ends).
    half: Option<Arc<OwnedWriteHalf>>,
    /// The writer task's queue; `None` once closed.
    tx: Option<mpsc::UnboundedSender<Outgoing>>,
    /// Records handed to the writer task and not yet written: while any
    /// are, nothing is written directly (order).
    queued: usize,
}

/// The write side of one connection (see the module documentation).
pub(crate) struct RecordWriter {
    st: Mutex<WriterState>,
    max_fragment: u32,
    metrics: Arc<Metrics>,
}

/// How a direct write went.
enum Direct {
    /// All of it written.
    Sent,
    /// The writer task does the rest (or all of it).
    Queue(Job),
}

impl RecordWriter {
    /// The writer of `wr` (fragments of at most `max_fragment` octets) and
    /// its writer task, to spawn. The task ends after [`RecordWriter::close`]
    /// once everything queued is written (then the write side is shut
    /// down), or at the first write error (returned).
    pub(crate) fn new(
        wr: OwnedWriteHalf,
        max_fragment: u32,
        metrics: Arc<Metrics>,
    ) -> (
        Arc<Self>,
        impl std::future::Future<Output = io::Result<()>> + Send + 'static,
    ) {
        let half = Arc::new(wr);
        let (tx, rx) = mpsc::unbounded_channel();
        let w = Arc::new(RecordWriter {
            st: Mutex::new(WriterState {
                half: Some(half.clone()),
                tx: Some(tx),
                queued: 0,
            }),
            max_fragment,
            metrics,
        });
        let task = writer_task(half, rx, w.clone());
        (w, task)
    }

    fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `m` as one record: directly when it can, else through the
    /// writer task. `guard` is released once the record is written.
    pub(crate) fn send(&self, m: Message, guard: CallGuard) -> Result<(), TransportError> {
        let mut st = self.lock();
        if st.tx.is_none() {
            return Err(TransportError::Closed);
        }
        let job = match (st.queued, st.half.as_deref()) {
            (0, Some(half)) => match self.try_direct(half, m) {
                Direct::Sent => return Ok(()),
                Direct::Queue(job) => job,
            },
            _ => Job::Record(m),
        };
        let sent = st.tx.as_ref().map(|tx| tx.send((job, guard)).is_ok());
        if sent != Some(true) {
            return Err(TransportError::Lost("writer stopped".into()));
        }
        st.queued += 1;
        Ok(())
    }

    /// One non-blocking `writev` of `m`'s record; what it left for the
    /// writer task. Anything unusual (several fragments, many chunks, a
    /// full socket, an error) leaves the whole record to it: the task meets
    /// the error again and reports it.
    fn try_direct(&self, half: &OwnedWriteHalf, m: Message) -> Direct {
        let mut hdr = [0u8; 4];
        let tried = {
            let mut iov = SmallVec::new();
            direct_iov(&m, self.max_fragment, &mut hdr, &mut iov)
                .map(|len| (half.try_write_vectored(&iov), len))
        };
        let Some((r, len)) = tried else {
            return Direct::Queue(Job::Record(m));
        };
        match r {
            Ok(n) if n >= len => {
                Metrics::add(&self.metrics.bytes_sent, n as u64);
                Direct::Sent
            }
            Ok(n) if n > 0 => {
                Metrics::add(&self.metrics.bytes_sent, n as u64);
                Direct::Queue(Job::Rest(rest_after(&m, self.max_fragment, n)))
            }
            _ => Direct::Queue(Job::Record(m)),
        }
    }

    /// Stops sending: later sends fail with `Closed`; what is queued is
    /// still written, then the write side is shut down.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.tx = None;
        st.half = None;
    }

    /// False once closed.
    pub(crate) fn is_open(&self) -> bool {
        self.lock().tx.is_some()
    }
}

/// The writer task: writes queued jobs in order, a batch per round.
async fn writer_task(
    half: Arc<OwnedWriteHalf>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    w: Arc<RecordWriter>,
) -> io::Result<()> {
    let mut out: VecDeque<Bytes> = VecDeque::new();
    let mut guards = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some((job, g)) = next.take() {
            match job {
                Job::Record(m) => out.extend(record_pieces(&m, w.max_fragment)),
                Job::Rest(r) => out.extend(r),
            }
            guards.push(g);
            if guards.len() < BATCH_MAX {
                next = rx.try_recv().ok();
            }
        }
        let n = write_all(&half, &mut out).await?;
        Metrics::add(&w.metrics.bytes_sent, n);
        let mut st = w.lock();
        st.queued = st.queued.saturating_sub(guards.len());
        drop(st);
        guards.clear();
    }
    // `half` dropped here: once closed it is the last reference, and the
    // write half shuts the write side down.
    Ok(())
}

/// Writes every buffer of `out` (emptying it); returns the octets written.
async fn write_all(half: &OwnedWriteHalf, out: &mut VecDeque<Bytes>) -> io::Result<u64> {
    let mut total = 0u64;
    while !out.is_empty() {
        let r = {
            let iov: SmallVec<[IoSlice<'_>; WRITEV_MAX]> = out
                .iter()
                .take(WRITEV_MAX)
                .map(|b| IoSlice::new(b))
                .collect();
            half.try_write_vectored(&iov)
        };
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                total += n as u64;
                advance(out, n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => half.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// Drops the first `n` octets of `out`.
fn advance(out: &mut VecDeque<Bytes>, mut n: usize) {
    while let Some(front) = out.front_mut() {
        if front.len() > n {
            let _ = front.split_to(n);
            return;
        }
        n -= front.len();
        out.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::encode_record;
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn concat(v: &[Bytes]) -> Vec<u8> {
        v.iter().flat_map(|b| b.iter().copied()).collect()
    }

    fn message(pieces: &[(bool, Vec<u8>)]) -> Message {
        let mut m = Message::new();
        for (ddp, data) in pieces {
            let b = Bytes::from(data.clone());
            m.push(if *ddp {
                Piece::Ddp(b)
            } else {
                Piece::Inline(b)
            });
        }
        m
    }

    fn pieces() -> impl Strategy<Value = Vec<(bool, Vec<u8>)>> {
        prop::collection::vec(
            (any::<bool>(), prop::collection::vec(any::<u8>(), 0..40)),
            0..10,
        )
    }

    /// Records sent faster than the peer reads: direct writes cut short,
    /// records queued behind them while the socket drains, a closed writer;
    /// the peer reads the
    /// general encoding of every record, in order, then the end of stream.
    #[tokio::test]
    async fn full_socket_falls_back_to_the_writer_task_in_order() {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (mut peer, _) = l.accept().await.unwrap();
        let (_rd, wr) = c.into_split();
        let (w, task) = RecordWriter::new(wr, 1 << 20, Arc::new(Metrics::default()));
        let task = tokio::spawn(task);
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let reader = tokio::spawn(async move {
            let _ = wait.await;
            let mut got = Vec::new();
            peer.read_to_end(&mut got).await.map(|_| got)
        });
        let data = Bytes::from(vec![7u8; 512 << 10]);
        let mut want = Vec::new();
        let mut queued_seen = false;
        let mut go = Some(go);
        for i in 0u32..64 {
            if i == 24 {
                // 12 MiB is more than loopback socket buffers hold: some of
                // it went to the writer task. Now the peer reads.
                assert!(queued_seen);
                let _ = go.take().map(|g| g.send(()));
            }
            let mut m = Message::inline(Bytes::copy_from_slice(&i.to_be_bytes()));
            m.push(Piece::Ddp(data.slice(..data.len() - (i as usize % 4))));
            want.extend(concat(&record_pieces(&m, 1 << 20)));
            w.send(m, CallGuard::none()).unwrap();
            queued_seen |= w.lock().queued > 0;
            // Let the peer read and the writer task write meanwhile.
            tokio::task::yield_now().await;
        }
        w.close();
        assert!(matches!(
            w.send(Message::new(), CallGuard::none()),
            Err(TransportError::Closed)
        ));
        let got = reader.await.unwrap().unwrap();
        assert!(got == want, "wire differs from the general encoding");
        task.await.unwrap().unwrap();
    }

    proptest! {
        /// The general encoding is the record codec's.
        #[test]
        fn record_pieces_is_record_marking(p in pieces(), maxf in 0u32..64) {
            let m = message(&p);
            let flat = concat(&xdr_chunks(&m));
            let mut want = BytesMut::new();
            encode_record(&flat, maxf, &mut want);
            prop_assert_eq!(concat(&record_pieces(&m, maxf)), want.to_vec());
        }

        /// The direct path, cut anywhere by a short write, puts the general
        /// path's octets on the wire; it refuses exactly the records of
        /// several fragments or too many buffers.
        #[test]
        fn direct_path_is_the_general_path(p in pieces(), maxf in 0u32..400, cut in any::<prop::sample::Index>()) {
            let m = message(&p);
            let general = concat(&record_pieces(&m, maxf));
            let chunks = xdr_chunks(&m);
            let total: usize = chunks.iter().map(Bytes::len).sum();
            let fits = total <= maxf.max(1) as usize && chunks.len() < DIRECT_MAX_IOV;
            let mut hdr = [0u8; 4];
            let mut iov = SmallVec::new();
            match direct_iov(&m, maxf, &mut hdr, &mut iov) {
                None => prop_assert!(!fits),
                Some(len) => {
                    prop_assert!(fits);
                    let direct: Vec<u8> = iov.iter().flat_map(|s| s.iter().copied()).collect();
                    prop_assert_eq!(&direct, &general);
                    prop_assert_eq!(len, general.len());
                }
            }
            // A short write anywhere: the rest is the general encoding's.
            let n = cut.index(general.len() + 1);
            let mut wire = general[..n].to_vec();
            wire.extend(concat(&rest_after(&m, maxf, n)));
            prop_assert_eq!(wire, general);
        }

        /// `advance` drops exactly `n` octets.
        #[test]
        fn advance_drops_a_prefix(p in pieces(), cut in any::<prop::sample::Index>()) {
            let bufs: Vec<Bytes> = p.into_iter().map(|(_, d)| Bytes::from(d)).collect();
            let all = concat(&bufs);
            let n = cut.index(all.len() + 1);
            let mut q: VecDeque<Bytes> = bufs.into_iter().collect();
            advance(&mut q, n);
            let left: Vec<Bytes> = q.into_iter().collect();
            prop_assert_eq!(concat(&left), all[n..].to_vec());
        }
    }
}
