//! Whole-file transfers: READ and WRITE with several calls in flight.
//!
//! Both keep at most [`NfsClientOptions::window`](super::NfsClientOptions)
//! calls in flight, plus at most that many completed READs waiting for an
//! earlier one (data is delivered in order): memory stays within
//! `2 × window × rsize`, whatever the server does.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::task::JoinSet;

use super::error::NfsError;
use super::NfsClient;
use crate::nfs3::{FileHandle, ReadResOk, StableHow, WriteResOk, Writeverf3};

/// Where [`NfsClient::write_file`] takes the data from: random access, so
/// that a range can be sent again after the server lost it (a changed
/// write verifier). Reads are expected to be quick (memory, the page
/// cache): they run on the calling task.
pub trait WriteSource: Send + Sync + 'static {
    /// Octets in all.
    fn len(&self) -> u64;
    /// Whether there is nothing to write.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `len` octets at `offset` (within [`WriteSource::len`]), read into
    /// `buf` (a recycled buffer of an earlier WRITE, or empty) if the
    /// source has to copy them.
    fn read_at(&self, offset: u64, len: usize, buf: BytesMut) -> std::io::Result<Bytes>;
}

impl WriteSource for Bytes {
    fn len(&self) -> u64 {
        Bytes::len(self) as u64
    }
    /// A slice of the data itself: no copy, `buf` unused.
    fn read_at(&self, offset: u64, len: usize, _buf: BytesMut) -> std::io::Result<Bytes> {
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        match start.checked_add(len) {
            Some(end) if end <= Bytes::len(self) => Ok(self.slice(start..end)),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "range beyond the data",
            )),
        }
    }
}

/// A local file opened for reading, with its length when opened.
impl WriteSource for (std::fs::File, u64) {
    fn len(&self) -> u64 {
        self.1
    }
    /// Into `buf`, grown (zeroed) only the first time: a recycled buffer
    /// costs no allocation and no page faults.
    fn read_at(&self, offset: u64, len: usize, mut buf: BytesMut) -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        buf.resize(len, 0);
        self.0.read_exact_at(&mut buf, offset)?;
        Ok(buf.freeze())
    }
}

/// What [`NfsClient::write_file`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteSummary {
    /// Octets of the source written.
    pub bytes: u64,
    /// WRITE calls made (short writes and resends included).
    pub writes: u64,
    /// COMMIT calls made.
    pub commits: u32,
    /// Passes over the data sent UNSTABLE: 1, plus one per resend after
    /// the server's write verifier changed.
    pub passes: u32,
    /// The verifier the data was committed under (`None` when every WRITE
    /// came back FILE_SYNC and no COMMIT was needed).
    pub verifier: Option<Writeverf3>,
}

/// Most passes over the data before [`NfsClient::write_file`] gives up on
/// a server whose write verifier keeps changing.
pub const MAX_WRITE_PASSES: u32 = 4;

impl NfsClient {
    /// Reads the whole file `fh` from offset 0 until the server reports
    /// end of file, `rsize` octets per READ, `window` READs in flight;
    /// `sink` gets the data in order. Returns the octets read.
    ///
    /// `size_hint` (the size from the attributes, when known) keeps the
    /// window from asking past it: beyond the hint one READ at a time
    /// looks for more (a file that grew), so a file read with its right
    /// size takes exactly one READ per `rsize` octets (one for an empty
    /// file).
    ///
    /// A short READ without end of file is continued where it stopped; a
    /// READ of 0 octets without end of file is the server's fault (as
    /// Linux's client, which fails it with EIO).
    pub async fn read_file(
        &self,
        fh: &FileHandle,
        size_hint: Option<u64>,
        mut sink: impl FnMut(&Bytes) -> Result<(), NfsError>,
    ) -> Result<u64, NfsError> {
        let rsize = self.rsize();
        let window = self.options().window.max(1);
        let mut set: JoinSet<(u64, u32, Result<ReadResOk, NfsError>)> = JoinSet::new();
        // Completed READs waiting for an earlier one, by offset.
        let mut done: BTreeMap<u64, Bytes> = BTreeMap::new();
        let mut next = 0u64; // next offset to ask for
        let mut delivered = 0u64; // everything before this went to `sink`
        let mut eof_at: Option<u64> = None;
        let spawn = |set: &mut JoinSet<_>, off: u64, count: u32| {
            let c = self.clone();
            let fh = fh.clone();
            set.spawn(async move { (off, count, c.read(&fh, off, count).await) });
        };
        loop {
            let idle = |set: &JoinSet<_>, done: &BTreeMap<_, _>| set.is_empty() && done.is_empty();
            while set.len() + done.len() < window
                && eof_at.is_none_or(|e| next < e)
                && (size_hint.is_none_or(|h| next < h) || idle(&set, &done))
            {
                spawn(&mut set, next, rsize);
                next = next.saturating_add(u64::from(rsize));
            }
            let Some(joined) = set.join_next().await else {
                break;
            };
            let (off, asked, res) = joined.map_err(join_error)?;
            let r = res?;
            let got = u64::from(r.count);
            if r.eof {
                //= rfc1813#section-3.3.6
                //# eof
                //#    If the read ended at the end-of-file (formally, in a
                //#    correctly formed READ request, if READ3args.offset
                //#    plus READ3resok.count is equal to the size of the
                //#    file), eof is returned as TRUE; otherwise it is
                //#    FALSE.
                let end = off.saturating_add(got);
                eof_at = Some(eof_at.map_or(end, |e| e.min(end)));
            } else if r.count < asked {
                if r.count == 0 {
                    return Err(NfsError::bad_reply(
                        "NFS READ",
                        format!("0 octets without end of file at offset {off}"),
                    ));
                }
                // A short read: ask for the rest.
                spawn(&mut set, off + got, asked - r.count);
            }
            if !r.data.is_empty() {
                done.insert(off, r.data);
            }
            // Deliver what is contiguous, nothing past end of file.
            while let Some(data) = done.remove(&delivered) {
                let keep = eof_at.map_or(data.len() as u64, |e| {
                    e.saturating_sub(delivered).min(data.len() as u64)
                });
                let data = data.slice(..keep as usize);
                if !data.is_empty() {
                    sink(&data)?;
                }
                delivered += keep;
            }
            if eof_at.is_some_and(|e| delivered >= e) {
                set.abort_all();
                break;
            }
        }
        match eof_at {
            Some(e) if delivered == e => Ok(delivered),
            _ => Err(NfsError::bad_reply(
                "NFS READ",
                format!("the replies leave a gap: {delivered} octets contiguous, end of file at {eof_at:?}"),
            )),
        }
    }

    /// Writes all of `src` to `fh` from offset 0: `wsize` octets per WRITE,
    /// `window` WRITEs in flight, UNSTABLE (or `stable`), then COMMIT of
    /// the whole file when any WRITE came back UNSTABLE. `observe` sees
    /// each range of the first pass in order (for a digest of the data
    /// sent).
    ///
    /// The server's write verifier must stay the same from the first
    /// WRITE to the COMMIT; when it changes the server may have lost
    /// uncommitted data, and every range written UNSTABLE is sent again
    /// (at most [`MAX_WRITE_PASSES`] passes).
    pub async fn write_file(
        &self,
        fh: &FileHandle,
        src: Arc<dyn WriteSource>,
        stable: StableHow,
        mut observe: impl FnMut(&Bytes),
    ) -> Result<WriteSummary, NfsError> {
        let len = src.len();
        let mut sum = WriteSummary::default();
        let mut todo = vec![(0u64, len)];
        loop {
            sum.passes += 1;
            let first = sum.passes == 1;
            let pass = self
                .write_pass(fh, &src, &todo, stable, &mut sum, |b| {
                    if first {
                        observe(b)
                    }
                })
                .await?;
            if pass.unstable.is_empty() {
                sum.bytes = len;
                return Ok(sum);
            }
            //= rfc1813#section-3.3.21
            //# When a response comes back from either a WRITE or a COMMIT
            //# operation that contains an unexpected verf, the client
            //# will need to retransmit all of the buffers containing
            //# uncommitted cached data to the server.
            let verf = if pass.verifier_changed {
                None
            } else {
                let c = self.commit(fh, 0, 0).await?;
                sum.commits += 1;
                (Some(c.verf) == pass.verifier).then_some(c.verf)
            };
            if let Some(v) = verf {
                sum.verifier = Some(v);
                sum.bytes = len;
                return Ok(sum);
            }
            if sum.passes >= MAX_WRITE_PASSES {
                return Err(NfsError::bad_reply(
                    "NFS WRITE",
                    format!(
                        "the write verifier changed in each of {} passes: data not committed",
                        sum.passes
                    ),
                ));
            }
            todo = pass.unstable;
        }
    }

    /// One pass over `ranges`: every octet written (short writes continued).
    async fn write_pass(
        &self,
        fh: &FileHandle,
        src: &Arc<dyn WriteSource>,
        ranges: &[(u64, u64)],
        stable: StableHow,
        sum: &mut WriteSummary,
        mut observe: impl FnMut(&Bytes),
    ) -> Result<Pass, NfsError> {
        let wsize = u64::from(self.wsize());
        let window = self.options().window.max(1);
        type Done = (u64, usize, Result<WriteResOk, NfsError>, Bytes);
        let mut set: JoinSet<Done> = JoinSet::new();
        let mut pass = Pass::default();
        // Buffers of finished WRITEs nothing else holds any more.
        let mut free: Vec<BytesMut> = Vec::new();
        // Pieces still to send: (offset, len) in order; short writes push
        // their rest to the front.
        let mut queue: std::collections::VecDeque<(u64, u64)> = ranges
            .iter()
            .flat_map(|&(off, len)| {
                (0..len.div_ceil(wsize)).map(move |i| {
                    let o = off + i * wsize;
                    (o, wsize.min(off + len - o))
                })
            })
            .collect();
        let mut seen_until = 0u64;
        loop {
            while set.len() < window {
                let Some((off, n)) = queue.pop_front() else {
                    break;
                };
                let buf = free.pop().unwrap_or_default();
                let data = src
                    .read_at(off, n as usize, buf)
                    .map_err(|e| NfsError::local(format_args!("reading the source at {off}"), e))?;
                if off + n > seen_until {
                    observe(&data);
                    seen_until = off + n;
                }
                let c = self.clone();
                let fh = fh.clone();
                sum.writes += 1;
                set.spawn(async move {
                    let n = data.len();
                    let (res, data) = c.write_returning(&fh, off, data, stable).await;
                    (off, n, res, data)
                });
            }
            let Some(joined) = set.join_next().await else {
                return Ok(pass);
            };
            let (off, sent, res, data) = joined.map_err(join_error)?;
            if let Ok(b) = data.try_into_mut() {
                if free.len() < window {
                    free.push(b);
                }
            }
            let r = res?;
            match pass.verifier {
                None => pass.verifier = Some(r.verf),
                Some(v) if v != r.verf => pass.verifier_changed = true,
                Some(_) => {}
            }
            let written = u64::from(r.count);
            if r.committed != StableHow::FILE_SYNC && written > 0 {
                //= rfc1813#section-3.3.7
                //# If stable is FILE_SYNC, the server must commit the
                //# data written plus all file system metadata to stable
                //# storage before returning results.
                // DATA_SYNC and UNSTABLE replies both leave the range for
                // COMMIT, as Linux's client does (nfs_write_need_commit:
                // DATA_SYNC needs a COMMIT outside pNFS); RFC 1813 §3.3.21
                // would let a DATA_SYNC range count as flushed.
                pass.unstable.push((off, written));
            }
            if written < sent as u64 {
                if written == 0 {
                    return Err(NfsError::bad_reply(
                        "NFS WRITE",
                        format!("0 of {sent} octets written at offset {off}"),
                    ));
                }
                queue.push_front((off + written, sent as u64 - written));
            }
        }
    }
}

/// What one write pass saw.
#[derive(Default)]
struct Pass {
    /// The verifier of the first reply.
    verifier: Option<Writeverf3>,
    /// A later reply carried another verifier.
    verifier_changed: bool,
    /// Ranges written but not committed.
    unstable: Vec<(u64, u64)>,
}

fn join_error(e: tokio::task::JoinError) -> NfsError {
    NfsError::Caller(format!("a transfer task failed: {e}"))
}
