//! Record marking (RFC 5531 §11) over a blocking socket: what the blocking
//! TCP client ([`crate::tcp_blocking::TcpBlockingClient`]) and the blocking
//! TCP server's connection threads read and write with, one thread per
//! connection, no runtime.
//!
//! * [`RecordReader`]: a fixed receive buffer that normally takes the
//!   record mark and a whole small record in one `recv(2)`; such a record
//!   (one last fragment within the limits, wholly in the buffer) is copied
//!   out of it at once (the fast path). Anything else — several fragments,
//!   a record larger than the buffer, a mark over the limits — goes through
//!   the general [`RecordDecoder`], which checks every limit before it
//!   allocates; the proptests below pin the reader, cut into reads
//!   anywhere, to the decoder fed the same octets.
//! * [`write_record`]: a record of one fragment in one `writev(2)` (mark,
//!   header, the message's pieces with their XDR pads, borrowed), anything
//!   else in [`record_pieces`]'s general encoding; short writes resumed.
//!   Pinned to the general encoding by a proptest.

use std::io::{self, IoSlice, Read, Write};

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::message::Message;
use crate::metrics::Metrics;
use crate::record::{RecordDecoder, RecordError, RecordLimits, LAST_FRAGMENT, MAX_FRAGMENT_LEN};
use crate::tcp_write::record_pieces;

/// Octets of a [`RecordReader`]'s receive buffer: a small call or reply
/// (NULL, ECHO up to the buffer less its mark) arrives whole in one read.
pub(crate) const READ_BUF: usize = 64 << 10;

/// Why [`RecordReader::next`] returned no record.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer broke the record marking (or the stream ended inside a
    /// record): the connection must be closed.
    Framing(RecordError),
    /// The socket's error. `WouldBlock` / `TimedOut`: the receive timeout
    /// (`SO_RCVTIMEO`) passed; the reader keeps its state, call again.
    Io(io::Error),
}

/// See the module docs.
pub(crate) struct RecordReader {
    /// Received octets not yet consumed are `buf[start..end]` (fast mode).
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    limits: RecordLimits,
    /// The general path: the decoder and the octets handed to it.
    dec: RecordDecoder,
    pending: BytesMut,
    /// The general path holds the stream (a record in progress there, or
    /// octets in `pending`).
    general: bool,
}

impl RecordReader {
    /// A reader with `limits` and a receive buffer of `buf_len` octets
    /// (at least 16).
    pub(crate) fn new(limits: RecordLimits, buf_len: usize) -> Self {
        RecordReader {
            buf: vec![0u8; buf_len.max(16)].into_boxed_slice(),
            start: 0,
            end: 0,
            limits,
            dec: RecordDecoder::new(limits),
            pending: BytesMut::new(),
            general: false,
        }
    }

    /// True when no octet of a record is buffered (a clean point for EOF).
    pub(crate) fn is_idle(&self) -> bool {
        self.start == self.end && self.dec.is_idle(&self.pending)
    }

    /// The next complete record from what is buffered, without reading.
    pub(crate) fn buffered(&mut self) -> Result<Option<Bytes>, RecordError> {
        if !self.general {
            let w = &self.buf[self.start..self.end];
            let Some(mark) = w.get(..4) else {
                return Ok(None);
            };
            let mark = u32::from_be_bytes([mark[0], mark[1], mark[2], mark[3]]);
            let len = (mark & MAX_FRAGMENT_LEN) as usize;
            // The fast path takes exactly what the decoder would accept as
            // a record of one fragment.
            if mark & LAST_FRAGMENT != 0
                && len <= self.limits.max_record_size
                && self.limits.max_fragments >= 1
            {
                if let Some(rec) = w.get(4..4 + len) {
                    let rec = Bytes::copy_from_slice(rec);
                    self.start += 4 + len;
                    if self.start == self.end {
                        (self.start, self.end) = (0, 0);
                    }
                    return Ok(Some(rec));
                }
                if 4 + len <= self.buf.len() {
                    // It fits: read on.
                    return Ok(None);
                }
            }
            // Anything else: the general decoder from here on.
            self.pending.extend_from_slice(w);
            (self.start, self.end) = (0, 0);
            self.general = true;
        }
        let rec = self.dec.decode(&mut self.pending)?;
        if self.dec.at_record_boundary() && self.pending.len() <= self.buf.len() {
            // Back to the fast path with what is left.
            let n = self.pending.len();
            self.buf[..n].copy_from_slice(&self.pending);
            (self.start, self.end) = (0, n);
            self.pending.clear();
            self.general = false;
        }
        Ok(rec)
    }

    /// The next complete record, reading from `r` as needed. `Ok(None)` at
    /// a clean end of stream (between records). (The client and the server
    /// read with [`RecordReader::fill`] themselves, to bound each wait.)
    #[cfg(test)]
    pub(crate) fn next<R: Read>(
        &mut self,
        r: &mut R,
        metrics: &Metrics,
    ) -> Result<Option<Bytes>, ReadError> {
        loop {
            if let Some(rec) = self.buffered().map_err(ReadError::Framing)? {
                return Ok(Some(rec));
            }
            if !self.fill(r, metrics)? {
                return Ok(None);
            }
        }
    }

    /// One read from `r` into the buffer (after [`RecordReader::buffered`]
    /// found no record): true if octets arrived, false at a clean end of
    /// stream; a stream that ends inside a record is a framing error.
    pub(crate) fn fill<R: Read>(
        &mut self,
        r: &mut R,
        metrics: &Metrics,
    ) -> Result<bool, ReadError> {
        loop {
            let room = if self.general {
                &mut self.buf[..]
            } else {
                if self.start > 0 {
                    // Compact: the partial record to the front.
                    self.buf.copy_within(self.start..self.end, 0);
                    (self.start, self.end) = (0, self.end - self.start);
                }
                &mut self.buf[self.end..]
            };
            let n = match r.read(room) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ReadError::Io(e)),
            };
            if n == 0 {
                if self.is_idle() {
                    return Ok(false);
                }
                // The general decoder says what was cut (as it counts).
                self.pending
                    .extend_from_slice(&self.buf[self.start..self.end]);
                (self.start, self.end) = (0, 0);
                self.general = true;
                return match self.dec.decode(&mut self.pending) {
                    Err(e) => Err(ReadError::Framing(e)),
                    Ok(_) => Err(ReadError::Framing(
                        self.dec
                            .finish(&self.pending)
                            .err()
                            .unwrap_or(RecordError::TruncatedRecord { buffered: 0 }),
                    )),
                };
            }
            Metrics::add(&metrics.bytes_received, n as u64);
            if self.general {
                self.pending.extend_from_slice(&self.buf[..n]);
            } else {
                self.end += n;
            }
            return Ok(true);
        }
    }
}

/// Most buffers of a record written in one `writev` on the direct path.
const DIRECT_MAX_IOV: usize = 10;

/// Writes the record of `prefix` followed by `m` (its pieces' XDR stream,
/// pads included) in fragments of at most `max_fragment` octets; returns
/// the octets written (marks included). One fragment of a few pieces goes
/// in one `writev` with the pieces borrowed; anything else is written as
/// [`record_pieces`] encodes it. Short writes are resumed; an error leaves
/// the stream cut inside the record (the caller closes the connection).
pub(crate) fn write_record<W: Write>(
    w: &mut W,
    prefix: &[u8],
    m: &Message,
    max_fragment: u32,
) -> io::Result<usize> {
    static PAD: [u8; 3] = [0; 3];
    let mut hdr = [0u8; 4];
    let mut v: SmallVec<[IoSlice<'_>; DIRECT_MAX_IOV]> = SmallVec::new();
    v.push(IoSlice::new(&[]));
    if !prefix.is_empty() {
        v.push(IoSlice::new(prefix));
    }
    let mut total = prefix.len();
    let mut direct = true;
    for p in m.pieces() {
        let b = p.bytes();
        let pad = if p.is_ddp() {
            rpcrdma_proto::xdr::pad_len(b.len())
        } else {
            0
        };
        total = total.saturating_add(b.len() + pad);
        let need = usize::from(!b.is_empty()) + usize::from(pad != 0);
        if v.len() + need > DIRECT_MAX_IOV {
            direct = false;
            break;
        }
        if !b.is_empty() {
            v.push(IoSlice::new(b));
        }
        if pad != 0 {
            v.push(IoSlice::new(&PAD[..pad]));
        }
    }
    if direct && total <= max_fragment.clamp(1, MAX_FRAGMENT_LEN) as usize {
        // `total` ≤ MAX_FRAGMENT_LEN: fits the 31-bit length.
        hdr = (LAST_FRAGMENT | total as u32).to_be_bytes();
        v[0] = IoSlice::new(&hdr);
        write_all_vectored(w, &mut v)?;
        return Ok(total + 4);
    }
    drop(v);
    let _ = hdr;
    let whole = if prefix.is_empty() {
        m.clone()
    } else {
        Message::with_header(prefix.to_vec(), m.clone())
    };
    let pieces = record_pieces(&whole, max_fragment);
    let n = pieces.iter().map(Bytes::len).sum();
    let mut v: Vec<IoSlice<'_>> = pieces.iter().map(|b| IoSlice::new(b)).collect();
    write_all_vectored(w, &mut v)?;
    Ok(n)
}

/// `writev` until every buffer is written (`Write::write_all_vectored` is
/// not stable).
fn write_all_vectored<W: Write>(w: &mut W, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::encode_record;
    use proptest::prelude::*;

    /// Hands out `data` in reads of the sizes in `cuts` (cycled; each at
    /// least 1), then end of stream.
    struct Chunked<'a> {
        data: &'a [u8],
        cuts: Vec<usize>,
        i: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let cut = self.cuts[self.i % self.cuts.len()].max(1);
            self.i += 1;
            let n = cut.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The general decoder over the whole stream: its records, then its
    /// error or clean end.
    fn general(wire: &[u8], limits: RecordLimits) -> (Vec<Bytes>, Option<RecordError>) {
        let mut dec = RecordDecoder::new(limits);
        let mut input = BytesMut::from(wire);
        let mut out = Vec::new();
        loop {
            match dec.decode(&mut input) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, dec.finish(&input).err()),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    fn blocking(
        wire: &[u8],
        limits: RecordLimits,
        buf: usize,
        cuts: Vec<usize>,
    ) -> (Vec<Bytes>, Option<RecordError>) {
        let mut rd = RecordReader::new(limits, buf);
        let mut src = Chunked {
            data: wire,
            cuts,
            i: 0,
        };
        let m = Metrics::default();
        let mut out = Vec::new();
        loop {
            match rd.next(&mut src, &m) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => return (out, None),
                Err(ReadError::Framing(e)) => return (out, Some(e)),
                Err(ReadError::Io(e)) => panic!("{e}"),
            }
        }
    }

    /// A stream of records: each of random data in random fragment sizes,
    /// or a raw word (a hostile mark: huge, not last, zero).
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let item = prop_oneof![
            4 => (proptest::collection::vec(any::<u8>(), 0..80), prop_oneof![Just(1u32 << 20), 1u32..100]).prop_map(|(d, f)| {
                let mut w = BytesMut::new();
                encode_record(&d, f, &mut w);
                w.to_vec()
            }),
            1 => any::<u32>().prop_map(|x| x.to_be_bytes().to_vec()),
            1 => proptest::collection::vec(any::<u8>(), 0..8),
        ];
        proptest::collection::vec(item, 0..8).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// The blocking reader (fast path and general path, any read
        /// sizes, any buffer size) gives exactly the general decoder's
        /// records and error.
        #[test]
        fn reader_matches_the_general_decoder(
            wire in stream(),
            max_record in prop_oneof![Just(1usize << 20), 0usize..80],
            max_fragments in prop_oneof![Just(65_536u32), 0u32..4],
            buf in prop_oneof![Just(READ_BUF), 16usize..120],
            cuts in proptest::collection::vec(1usize..200, 1..6),
        ) {
            let limits = RecordLimits { max_record_size: max_record, max_fragments };
            let want = general(&wire, limits);
            let got = blocking(&wire, limits, buf, cuts);
            prop_assert_eq!(got, want);
        }

        /// `write_record` writes the general encoding of the record, cut
        /// into short writes anywhere.
        #[test]
        fn write_matches_the_general_encoding(
            prefix in proptest::collection::vec(any::<u8>(), 0..40),
            pieces in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..60), any::<bool>()), 0..12),
            max_fragment in prop_oneof![Just(1u32 << 20), 1u32..100],
            cuts in proptest::collection::vec(1usize..50, 1..5),
        ) {
            let mut b = Message::builder();
            for (d, ddp) in &pieces {
                if *ddp {
                    b.put_ddp_opaque(Bytes::copy_from_slice(d)).unwrap();
                } else {
                    b.put_opaque(d).unwrap();
                }
            }
            let m = b.finish();
            let whole = Message::with_header(prefix.clone(), m.clone());
            let want: Vec<u8> = record_pieces(&whole, max_fragment).concat();
            let mut w = ShortWrites { out: Vec::new(), cuts, i: 0 };
            let n = write_record(&mut w, &prefix, &m, max_fragment).unwrap();
            prop_assert_eq!(n, want.len());
            prop_assert_eq!(w.out, want);
        }
    }

    /// Takes at most the next cut's octets per write.
    struct ShortWrites {
        out: Vec<u8>,
        cuts: Vec<usize>,
        i: usize,
    }

    impl Write for ShortWrites {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(b)])
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut left = self.cuts[self.i % self.cuts.len()];
            self.i += 1;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(left);
                self.out.extend_from_slice(&b[..k]);
                n += k;
                left -= k;
                if left == 0 {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A small reply arrives with its mark in one read: one record, no
    /// further read; a second record already buffered is served without a
    /// read too.
    #[test]
    fn one_read_serves_whole_records() {
        let mut wire = BytesMut::new();
        encode_record(b"first reply", 1 << 20, &mut wire);
        encode_record(b"second", 1 << 20, &mut wire);
        let mut src = Chunked {
            data: &wire,
            cuts: vec![1 << 20],
            i: 0,
        };
        let m = Metrics::default();
        let mut rd = RecordReader::new(RecordLimits::default(), READ_BUF);
        assert_eq!(&rd.next(&mut src, &m).unwrap().unwrap()[..], b"first reply");
        assert_eq!(src.i, 1);
        assert_eq!(&rd.next(&mut src, &m).unwrap().unwrap()[..], b"second");
        assert_eq!(src.i, 1);
        assert!(rd.next(&mut src, &m).unwrap().is_none());
        assert_eq!(m.snapshot().bytes_received, wire.len() as u64);
    }

    /// A one-fragment record of exactly the limit comes through the fast
    /// path; one octet more is the decoder's error, whole or in pieces.
    #[test]
    fn the_limit_holds_on_the_fast_path() {
        let limits = RecordLimits {
            max_record_size: 10,
            ..RecordLimits::default()
        };
        for cuts in [vec![100], vec![3], vec![1]] {
            let mut wire = BytesMut::new();
            encode_record(&[7u8; 10], 1 << 20, &mut wire);
            let (recs, err) = blocking(&wire, limits, READ_BUF, cuts.clone());
            assert_eq!((recs.len(), err), (1, None));
            let mut wire = BytesMut::new();
            encode_record(&[7u8; 11], 1 << 20, &mut wire);
            let (recs, err) = blocking(&wire, limits, READ_BUF, cuts);
            assert!(recs.is_empty());
            assert_eq!(
                err,
                Some(RecordError::RecordTooLarge {
                    size: 11,
                    max_record_size: 10
                })
            );
        }
    }

    /// A mark announcing more than the limit fails at once, before any
    /// data arrives, without allocating it.
    #[test]
    fn oversized_mark_fails_before_data() {
        let wire = [0xff, 0xff, 0xff, 0xff, 1, 2];
        let limits = RecordLimits {
            max_record_size: 1000,
            ..RecordLimits::default()
        };
        let (recs, err) = blocking(&wire, limits, READ_BUF, vec![6]);
        assert!(recs.is_empty());
        assert_eq!(
            err,
            Some(RecordError::RecordTooLarge {
                size: 0x7fff_ffff,
                max_record_size: 1000
            })
        );
    }
}
