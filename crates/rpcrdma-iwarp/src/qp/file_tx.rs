//! RDMA Writes sent straight from a file
//! ([`rpcrdma_proto::provider::Provider::register_file`]).
//!
//! With the MPA CRC and Markers off an FPDU's payload is not read by the
//! framer: an FPDU is [MPA length + DDP tagged header] payload [pad + CRC
//! field, zero], so the payload of an RDMA Write whose source is a file
//! range can go from the page cache to the socket by `sendfile` while the
//! headers and trailers go from memory. The queue pair registers such a
//! range as a placeholder region (the STag, bounds and holds of any
//! region; its octets, zeros, never sent) and remembers the file; framing
//! queues a file chunk where it would queue a slice of the region, and
//! [`QueuePair::transmit_files`] hands it to [`TxSink::send_file`]. The
//! octets on the wire are the same as for the range read into memory and
//! registered (proptest `file_writes_are_the_memory_writes`).
//!
//! Everything else falls back to that: the CRC on (it must read the
//! payload anyway), Markers on, the owner not able to send files, a range
//! larger than the placeholder. A file found shorter than its range when
//! it is sent ends the stream ([`io::ErrorKind::UnexpectedEof`] from
//! `transmit_files`): the FPDU's length is already on the wire.

use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::Arc;

use rpcrdma_proto::provider::{
    Access, Bytes, FileRange, MemoryRegion, ProviderError, SendOp, SendWr, Stag,
};

use super::send::Chunk;
use super::{QpState, QueuePair};

/// The most octets one file registration sends from the file (the largest
/// NFS READ); larger ranges are read into memory.
const PLACEHOLDER_LEN: usize = 1 << 20;

/// The placeholder regions' octets (never sent).
static PLACEHOLDER: [u8; PLACEHOLDER_LEN] = [0; PLACEHOLDER_LEN];

/// Where output goes: a gather write, and a file range sent by the kernel.
pub trait TxSink {
    /// Writes (some of) `slices`; `more`: output follows at once (the
    /// owner may hold a partial segment back, `MSG_MORE`).
    fn write(&mut self, slices: &[IoSlice<'_>], more: bool) -> io::Result<usize>;
    /// Sends up to `len` octets of `file` from `offset`; 0 (with `len` >
    /// 0): the file ends before.
    fn send_file(&mut self, file: &File, offset: u64, len: usize) -> io::Result<usize>;
}

/// A [`TxSink`] over a gather writer alone: file octets are read into
/// memory and written.
pub(super) struct ReadSink<W>(pub(super) W);

impl<W> TxSink for ReadSink<W>
where
    W: FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
{
    fn write(&mut self, slices: &[IoSlice<'_>], _more: bool) -> io::Result<usize> {
        (self.0)(slices)
    }
    fn send_file(&mut self, file: &File, offset: u64, len: usize) -> io::Result<usize> {
        let mut v = vec![0u8; len.min(PLACEHOLDER_LEN)];
        let n = std::os::unix::fs::FileExt::read_at(file, &mut v, offset)?;
        if n == 0 {
            return Ok(0);
        }
        (self.0)(&[IoSlice::new(&v[..n])])
    }
}

/// The file registrations of a queue pair.
#[derive(Debug, Default)]
pub(super) struct Files {
    /// The owner can send file ranges ([`QueuePair::set_file_sends`]).
    enabled: bool,
    /// (region index, range) of each file registration.
    regions: Vec<(u32, FileRange)>,
}

impl Files {
    /// The range behind region `idx`, if it is a file registration.
    #[inline]
    pub(super) fn get(&self, idx: u32) -> Option<&FileRange> {
        if self.regions.is_empty() {
            return None;
        }
        self.regions.iter().find(|r| r.0 == idx).map(|r| &r.1)
    }

    /// True if any of `pieces` (region index, offset, length) is in a file
    /// registration.
    #[inline]
    pub(super) fn any(&self, pieces: &[(u32, usize, usize)]) -> bool {
        !self.regions.is_empty() && pieces.iter().any(|p| self.get(p.0).is_some())
    }

    /// Refuses a work request other than an RDMA Write that names a file
    /// registration (only Write sources may be files).
    #[inline]
    pub(super) fn check_send(&self, wr: &SendWr) -> Result<(), ProviderError> {
        if self.regions.is_empty() || matches!(wr.op, SendOp::Write { .. }) {
            return Ok(());
        }
        if wr
            .sges
            .iter()
            .any(|s| self.get(Stag(s.lkey).index()).is_some())
        {
            return Err(ProviderError::InvalidArgument(
                "a file registration is the source of RDMA Writes only",
            ));
        }
        Ok(())
    }
}

impl QueuePair {
    /// Says whether the owner can send file ranges
    /// ([`TxSink::send_file`] through [`QueuePair::transmit_files`]).
    pub fn set_file_sends(&mut self, on: bool) {
        self.files.enabled = on;
    }

    /// True if a file registration now would be sent from the file: the
    /// owner can, the stream is up with the MPA CRC and Markers off.
    pub fn sends_files(&self) -> bool {
        self.files.enabled
            && matches!(self.state, QpState::Established)
            && !self.params.crc
            && !self.framer.config().markers
    }

    /// Registers `range` as an RDMA Write source (see the module docs);
    /// read into memory when it cannot be sent from the file.
    pub fn register_file(&mut self, range: &FileRange) -> Result<MemoryRegion, ProviderError> {
        let len = range.len() as usize;
        if !self.sends_files() || len > PLACEHOLDER_LEN {
            let data = range
                .read()
                .map_err(|_| ProviderError::InvalidArgument("file range unreadable or short"))?;
            return self
                .register(data.into_boxed_slice(), Access::NONE)
                .map_err(|e| e.error);
        }
        let mr = self.register_shared(Bytes::from_static(&PLACEHOLDER[..len]), Access::NONE)?;
        self.files
            .regions
            .push((Stag(mr.lkey()).index(), range.clone()));
        Ok(mr)
    }

    /// Forgets the file registration of `mr` (it was deregistered).
    pub(super) fn forget_file(&mut self, mr: &MemoryRegion) {
        if !self.files.regions.is_empty() {
            let idx = Stag(mr.lkey()).index();
            self.files.regions.retain(|r| r.0 != idx);
        }
    }

    /// The output chunk for `len` octets at `off` of region `idx`: a file
    /// chunk for a file registration, else a slice of registered memory.
    pub(super) fn data_chunk(&self, idx: u32, off: usize, len: usize) -> Chunk {
        match self.files.get(idx) {
            Some(r) => Chunk::File {
                file: r.file().clone(),
                offset: r.offset().saturating_add(off as u64),
                len,
            },
            None => Chunk::Mem { idx, off, len },
        }
    }

    /// True while a file registration exists (file chunks may be queued;
    /// one left after its registration ended, the stream going down, is
    /// read into memory by [`QueuePair::transmit`]).
    #[inline]
    pub fn has_files(&self) -> bool {
        !self.files.regions.is_empty()
    }

    /// [`QueuePair::transmit`] with file chunks: memory chunks gathered
    /// up to the next file chunk and handed to [`TxSink::write`] (`more`
    /// when a file chunk follows), a file chunk at the front to
    /// [`TxSink::send_file`]. A file that ends before its chunk is
    /// [`io::ErrorKind::UnexpectedEof`] (the owner ends the stream).
    pub fn transmit_files(&mut self, sink: &mut dyn TxSink) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.fill_output();
            if self.out.is_empty() {
                return Ok(total);
            }
            let r = match self.front_file() {
                Some((file, offset, len)) => match sink.send_file(&file, offset, len) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    r => r,
                },
                None => {
                    let (slices, more) = self.gather();
                    sink.write(&slices, more)
                }
            };
            match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    total += n;
                    self.consume_output(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The file chunk at the front of the output, less what was sent of it.
    fn front_file(&self) -> Option<(Arc<File>, u64, usize)> {
        match self.out.front() {
            Some(Chunk::File { file, offset, len }) => Some((
                file.clone(),
                offset.saturating_add(self.front_off as u64),
                len.saturating_sub(self.front_off),
            )),
            _ => None,
        }
    }
}
