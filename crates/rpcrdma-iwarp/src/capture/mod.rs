//! Captures: reading classic pcap and pcapng files ([`pcap`]), the TCP
//! connections they hold, reassembled per direction ([`tcp_reassembly`])
//! and dissected as iWARP ([`Connections`], over [`crate::dissect`]), the
//! streams one end of a live connection recorded ([`Recorded`]: dissected
//! as they come, completed with the MPA frames recording missed), and
//! writing a capture of one connection ([`write`](mod@write)), and the RPC
//! transactions of the Sends: calls matched to replies, service response
//! times, message-class and chunk counts ([`rpc`]). Behind the
//! `capture` feature (std only, no dependency): the runtime does not need
//! it, `rpcrdma decode --pcap` and `rpcrdma demo` do.
//!
//! ```
//! use rpcrdma_iwarp::capture::{pcap::PcapReader, Connections};
//!
//! # fn main() -> Result<(), rpcrdma_iwarp::capture::pcap::PcapError> {
//! # let file: &[u8] = &rpcrdma_iwarp::capture::write::tcp_session(
//! #     "127.0.0.1:40000".parse().unwrap(), "127.0.0.1:20049".parse().unwrap(), &[], 0);
//! let mut reader = PcapReader::new(file)?;
//! let mut conns = Connections::new();
//! let mut events = Vec::new();
//! while let Some(rec) = reader.next_record()? {
//!     conns.record(&rec, &mut events);
//! }
//! conns.finish(&mut events);
//! for e in &events {
//!     let c = conns.get(e.conn).unwrap();
//!     println!("{:?} {:?}: {}", c.ends(), e.side, e.item.name());
//! }
//! # Ok(()) }
//! ```
//!
//! Every connection is tracked by its 4-tuple (a new SYN with another ISN
//! starts a new one; at most [`connections::MAX_CONNS`]); its streams are
//! fed to a [`crate::dissect::Dissector`] as they become contiguous. The
//! items come out in capture order of the packet that completes each (so
//! in stream order per direction), with two errors of the capture's own:
//! `tcp-gap` (octets missing from the capture) and `capture-truncated` (a
//! segment cut by the snaplen); either ends the dissection of that
//! direction.

pub mod connections;
pub mod pcap;
pub mod recorded;
pub mod rpc;
pub mod tcp_reassembly;
pub mod write;

pub use connections::{Connection, Connections, Event, PacketRef, Stats};
pub use recorded::Recorded;
