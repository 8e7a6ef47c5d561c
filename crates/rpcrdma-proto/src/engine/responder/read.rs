//! The RDMA Reads of received calls: admitted in arrival order within the
//! Read-sink budget (this connection's and the shared one), issued within
//! the ORD, and the call reassembled and delivered once they are all done.

use std::time::Instant;

use crate::engine::connection::Connection;
use crate::engine::framing::{message_prefix, ErrorReply};
use crate::engine::marshal;
use crate::engine::resources::{Mrs, Op, READ_SINK_POOL_BYTES};
use crate::engine::{CallHandle, ConnectionError, Event, IncomingCall};
use crate::provider::{
    Access, Blame, Bytes, MemoryRegion, Provider, RemoteAddr, SendOp, SendWr, Stag, Status,
};
use crate::wire::chunk::WriteChunk;
use crate::wire::rpc::MsgType;
use smallvec::{smallvec, SmallVec};

use super::InState;

impl Connection {
    /// An RDMA Read of received call `handle` completed successfully with
    /// `byte_len` octets, `len` asked.
    pub(in crate::engine) fn read_done(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        handle: u64,
        len: u32,
        byte_len: u32,
    ) {
        self.resp.reads_outstanding = self.resp.reads_outstanding.saturating_sub(1);
        if byte_len != len {
            // A successful RDMA Read places every octet asked for (the
            // iWARP provider refuses a short Read Response before anything
            // is placed). A provider that says otherwise would leave part
            // of a (reused) sink unwritten: the call is never delivered.
            self.fatal(
                p,
                ConnectionError::Completion {
                    status: Status::LocalLength,
                    blame: Blame::Local,
                },
            );
            return;
        }
        let done = match self.resp.incoming.get_mut(handle).map(|c| &mut c.state) {
            Some(InState::Reading { reads_left }) => {
                *reads_left = reads_left.saturating_sub(1);
                *reads_left == 0
            }
            _ => false,
        };
        if done {
            self.reads_done(now, p, handle);
        }
        self.issue_reads(p);
    }

    /// Octets of Read sinks this connection may have registered at once
    /// ([`Limits::max_read_sink_bytes`](crate::Limits::max_read_sink_bytes),
    /// several calls' worth: it was once also capped at one message's
    /// length, which serialised the Read chunks of a connection's calls).
    pub(in crate::engine) fn sink_budget(&self) -> u64 {
        self.config.limits.max_read_sink_bytes
    }

    /// Registers the Read sinks of waiting calls, in arrival order, while
    /// they fit this connection's Read-sink budget and the shared one, and
    /// starts their RDMA Reads (whose deadline starts now).
    pub(in crate::engine) fn admit_waiting(&mut self, now: Instant, p: &mut dyn Provider) {
        let budget = self.sink_budget();
        let sink_access = if p.caps().read_sink_needs_remote_write {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        } else {
            Access::LOCAL_WRITE
        };
        while self.error.is_none() {
            let Some(&handle) = self.resp.sink_waiting.front() else {
                break;
            };
            let Some(need) = self.resp.incoming.get(handle).map(|c| c.sink_need) else {
                self.resp.sink_waiting.pop_front();
                continue;
            };
            if self.resp.sink_bytes.saturating_add(need) > budget || !self.resp.lease.take(need) {
                break; // backpressure: later calls wait behind this one
            }
            self.resp.sink_waiting.pop_front();
            let lens: Vec<usize> = self
                .resp
                .incoming
                .get(handle)
                .map(|c| c.chunks.iter().map(|c| c.len).collect())
                .unwrap_or_default();
            let mut sinks: Vec<Option<MemoryRegion>> = Vec::with_capacity(lens.len());
            let mut failed = false;
            for len in lens {
                if len == 0 || failed {
                    sinks.push(None);
                    continue;
                }
                let mut v = Mrs::new();
                // A pooled buffer if there is one of this size (not
                // cleared: see `Res::sink_buffer`; the call is only
                // delivered once Reads have placed all `len` octets).
                let buf = self.res.sink_buffer(len);
                match self.res.register(p, buf, sink_access, &mut v) {
                    Ok(mr) => sinks.push(Some(mr)),
                    Err(_) => {
                        failed = true;
                        sinks.push(None);
                    }
                }
            }
            if failed {
                self.resp.lease.give_back(need);
                self.res.zombies.extend(sinks.into_iter().flatten());
                self.res.reap(p);
                if let Some(call) = self.resp.incoming.remove(handle) {
                    self.send_error(p, call.xid, ErrorReply::Chunk);
                }
                continue;
            }
            self.resp.sink_bytes += need;
            self.metrics.max_read_sink_bytes =
                self.metrics.max_read_sink_bytes.max(self.resp.sink_bytes);
            let Some(call) = self.resp.incoming.get_mut(handle) else {
                continue;
            };
            for (c, mr) in call.chunks.iter_mut().zip(sinks) {
                c.sink = mr;
            }
            let reads = match &mut call.state {
                InState::Waiting { reads } => std::mem::take(reads),
                _ => Vec::new(),
            };
            call.state = InState::Reading {
                reads_left: reads.len(),
            };
            self.resp.reads.extend(reads);
            if let Some(t) = self.config.read_timeout {
                self.resp.read_deadlines.insert(now + t, handle);
            }
        }
        if self.resp.sink_waiting.is_empty() {
            self.resp.lease.cancel();
        }
        self.issue_reads(p);
    }

    pub(in crate::engine) fn issue_reads(&mut self, p: &mut dyn Provider) {
        // Never more RDMA Reads outstanding than the ORD the connection
        // negotiated (the peer's IRD): an excess Read Request is fatal at
        // the peer's RNIC.
        let ord = usize::from(self.params().ord);
        while self.error.is_none() && self.resp.reads_outstanding < ord {
            let Some(r) = self.resp.reads.pop_front() else {
                break;
            };
            let Some(sink) = self
                .resp
                .incoming
                .get(r.handle)
                .and_then(|c| c.chunks.get(r.chunk))
                .and_then(|c| c.sink)
            else {
                continue;
            };
            let wr_id = self.res.wr(Op::Read {
                handle: r.handle,
                len: r.seg.length,
            });
            self.metrics.rdma_reads += 1;
            self.metrics.rdma_read_bytes += u64::from(r.seg.length);
            let res = self.post(
                p,
                SendWr {
                    wr_id,
                    op: SendOp::Read {
                        remote: RemoteAddr {
                            stag: Stag(r.seg.handle),
                            offset: r.seg.offset,
                        },
                    },
                    sges: smallvec![sink.sge(r.sink_offset, r.seg.length)],
                },
            );
            if let Err(e) = res {
                self.res.ops.remove(wr_id);
                self.fatal(p, ConnectionError::Provider(e));
                return;
            }
            self.resp.reads_outstanding += 1;
            self.metrics.max_reads_in_flight = self
                .metrics
                .max_reads_in_flight
                .max(self.resp.reads_outstanding as u64);
        }
    }

    pub(in crate::engine) fn reads_done(
        &mut self,
        now: Instant,
        p: &mut dyn Provider,
        handle: u64,
    ) {
        let backchannel = self.resp.backchannel();
        let mut sinks = Mrs::new();
        let Some(call) = self.resp.incoming.get_mut(handle) else {
            return;
        };
        let call_admitted = matches!(call.state, InState::Reading { .. });
        let sink_need = call.sink_need;
        for c in &mut call.chunks {
            if let Some(mr) = c.sink.take() {
                // Every Read into the sink has completed: its registration
                // ends and the buffer itself is the chunk's data (no copy;
                // back to the sink pool once the upper layer drops it).
                // Should it still be held, the data is copied out and the
                // region released as usual.
                sinks.push(mr);
                c.data = self
                    .res
                    .take_result(p, &mr, c.len, &mut sinks, READ_SINK_POOL_BYTES);
            }
        }
        let base = match call.pz {
            Some(i) => call
                .chunks
                .get_mut(i)
                .map(|c| std::mem::take(&mut c.data))
                .unwrap_or_default(),
            None => std::mem::take(&mut call.base),
        };
        let data: SmallVec<[(u32, Bytes); 2]> = call
            .chunks
            .iter_mut()
            .filter(|c| c.position != 0)
            .map(|c| (c.position, std::mem::take(&mut c.data)))
            .collect();
        //= rfc8166#section-3.4.5.2
        //# If the Requester chooses to include roundup padding in a Read
        //# chunk, the chunk's total length MUST be the sum of the encoded
        //# length of the data item and the length of the roundup padding.
        // Both forms are accepted: a chunk of unaligned length is followed
        // in the reassembled stream by zero octets of XDR pad.
        let message = marshal::assemble(base, &data);
        //= rfc8166#section-4.2.1
        //# This XID MUST be the same as the XID in the RPC message.
        //= rfc8167#section-5.1
        //# Whether presented inline or as a separate chunk, the ONC RPC Call
        //# header MUST start with the same XID value that is present in the
        //# RPC-over-RDMA header, and the RPC header's msg_type field MUST
        //# contain the value CALL.
        //= rfc8166#section-4.5
        //# If other errors are detected in the RPC-over-RDMA header of an RPC
        //# Call message, a Responder MUST send an RDMA_ERROR message back to
        //# the Requester.
        // RFC 8166 lets a receiver ignore the RPC XID; we do not: a call
        // whose RPC header disagrees with its transport header (forward or
        // reverse, inline or in a Position-Zero Read chunk) is malformed and
        // answered with ERR_CHUNK, never delivered.
        let header_ok = message_prefix(&message) == Some((call.xid, MsgType::CALL));
        let xid = call.xid;
        if header_ok {
            call.state = InState::Delivered;
        }
        let ev = IncomingCall {
            handle: CallHandle(handle),
            xid: call.xid,
            backchannel,
            message,
            long: call.long,
            write_chunks: call.writes.iter().map(WriteChunk::total_len).collect(),
            reply_chunk: call.reply.as_ref().map(WriteChunk::total_len),
        };
        for mr in sinks {
            self.res.release(p, mr);
        }
        if header_ok {
            self.metrics.calls_received += 1;
            self.events.push_back(Event::CallReceived(ev));
        } else {
            self.resp.incoming.remove(handle);
            self.metrics.rpc_header_mismatches += 1;
            self.send_error(p, xid, ErrorReply::Chunk);
        }
        if call_admitted {
            // The Reads are over: no deadline any more.
            self.resp.read_deadlines.remove(handle);
            self.resp.sink_bytes = self.resp.sink_bytes.saturating_sub(sink_need);
            self.resp.lease.give_back(sink_need);
            self.admit_waiting(now, p);
        }
    }
}
