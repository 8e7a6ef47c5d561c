//! NFS arguments and results as the runtime's messages: the only module
//! that knows `rpcrdma::Message` (when the message type moves, this file
//! changes and nothing else).
//!
//! Encoding puts the head of a value inline and its DDP-eligible item as a
//! DDP-eligible piece (`MessageBuilder::put_ddp_opaque`, as
//! `rpcrdma::testprog` does for its READ result and WRITE argument): an
//! RDMA transport moves it through a Read chunk (a call) or the Write chunk
//! the requester offered (a reply), TCP sends it inline.
//!
//! Decoding reads the inline XDR with the codecs and takes each
//! DDP-eligible item's data from where the transport left it
//! ([`MessageSource`]): a DDP piece at the item's position (a call's Read
//! chunk), the next out-of-band Write-chunk result (a reply), or inline.

use bytes::{Bytes, BytesMut};
use rpcrdma::{CallOptions, Message, Piece};
use rpcrdma_proto::provider::FileRange;
use rpcrdma_proto::xdr::{pad_len, DecodeErrorKind, Reader};
use rpcrdma_proto::{DecodeError, EncodeError, XdrEncode};

use super::{reply_size, ReplySize};
use crate::nfs3::{DdpParts, DdpSource, Nfs3Args, Nfs3Res};
use crate::{ArgError, Limits};

/// The largest RPC reply header a client accepts before the results: xid,
/// msg_type, reply_stat, a verifier of at most 400 octets (RFC 5531
/// `MAX_AUTH_BYTES`), accept_stat (the value `rpcrdma::testprog` uses).
pub const REPLY_HEADER_MAX: u32 = rpcrdma::testprog::REPLY_HEADER_MAX;

/// A value with a head and at most one DDP-eligible item, as a message.
fn encode_parts(v: &(impl DdpParts + XdrEncode)) -> Result<Message, EncodeError> {
    let mut b = Message::builder();
    match v.ddp_item() {
        Some(data) => {
            b.put_encode(&Head(v))?;
            b.put_ddp_opaque(data)?;
        }
        None => {
            b.put_encode(v)?;
        }
    }
    Ok(b.finish())
}

/// The head of a [`DdpParts`] value, as an `XdrEncode`.
struct Head<'a, T>(&'a T);

impl<T: DdpParts> XdrEncode for Head<'_, T> {
    fn encoded_len(&self) -> usize {
        self.0.head_len()
    }
    fn write(&self, w: &mut rpcrdma_proto::xdr::Writer<'_>) -> Result<(), EncodeError> {
        self.0.put_head(w)
    }
}

/// A client's call arguments as a message (WRITE data, SYMLINK path as
/// DDP-eligible pieces).
pub fn encode_args(args: &Nfs3Args) -> Result<Message, EncodeError> {
    encode_parts(args)
}

/// A server's results as a message (READ data, READLINK path as
/// DDP-eligible pieces).
pub fn encode_res(res: &Nfs3Res) -> Result<Message, EncodeError> {
    encode_parts(res)
}

/// A server's READ results whose data is the file range `range` (sent
/// from the file where the transport can): the results' head as
/// [`encode_res`] encodes it, the data a [`Piece::File`] (its length word
/// is the range's length; the results' own `data` is not used).
pub fn encode_res_file(res: &Nfs3Res, range: FileRange) -> Result<Message, EncodeError> {
    let mut b = Message::builder();
    b.put_encode(&Head(res))?;
    b.put_file_opaque(range);
    Ok(b.finish())
}

/// Any other value (MOUNT arguments and results), inline.
pub fn encode_inline(v: &impl XdrEncode) -> Result<Message, EncodeError> {
    let mut b = Message::builder();
    b.put_encode(v)?;
    Ok(b.finish())
}

/// A server decodes and checks the arguments of NFSv3 procedure `proc`:
/// the [`ArgError`] says what to answer.
pub fn decode_args(proc: u32, msg: &Message, l: &Limits) -> Result<Nfs3Args, ArgError> {
    let mut src = MessageSource::new(msg);
    let inline = src.inline.clone();
    let mut r = Reader::new(&inline);
    let a = Nfs3Args::decode_checked(proc, &mut r, l, &mut src)?;
    src.finish(r.position())?;
    Ok(a)
}

/// A client decodes the results of NFSv3 procedure `proc` (DDP-eligible
/// data from the Write chunk it offered, if the server used it).
pub fn decode_res(proc: u32, msg: &Message, l: &Limits) -> Result<Nfs3Res, DecodeError> {
    let mut src = MessageSource::new(msg);
    let inline = src.inline.clone();
    let mut r = Reader::new(&inline);
    let v = Nfs3Res::decode(proc, &mut r, l, &mut src)?;
    src.finish(r.position())?;
    Ok(v)
}

/// The octets of a message that carries no DDP-eligible item (a MOUNT
/// call or reply), for the codecs' `Reader`.
pub fn inline_bytes(msg: &Message) -> Bytes {
    MessageSource::new(msg).inline
}

/// The per-call options for `args`: the Write chunk to offer (READ) and
/// the largest reply, from which an RDMA transport offers a Reply chunk
/// when the reply may not fit inline.
pub fn call_options(args: &Nfs3Args, l: &Limits) -> CallOptions {
    let ReplySize {
        results_max,
        ddp_results,
    } = reply_size(args, l);
    CallOptions {
        reply_max: Some(REPLY_HEADER_MAX.saturating_add(results_max)),
        ddp_results,
        ..CallOptions::default()
    }
}

/// The DDP-eligible data of a received message, and its inline XDR.
#[derive(Debug)]
pub struct MessageSource {
    /// The inline pieces, concatenated (no copy for one piece).
    inline: Bytes,
    /// DDP pieces (a call's Read chunks) with the inline offset they stand at.
    pieces: Vec<(usize, Bytes)>,
    next_piece: usize,
    /// Out-of-band results (a reply's Write chunks), in Write list order.
    results: Vec<Bytes>,
    next_result: usize,
}

impl MessageSource {
    /// The source of `msg`.
    pub fn new(msg: &Message) -> Self {
        let mut pieces = Vec::new();
        let inline = match msg.pieces() {
            [] => Bytes::new(),
            [Piece::Inline(b)] => b.clone(),
            all => {
                let mut buf = BytesMut::new();
                for p in all {
                    match p {
                        Piece::Inline(b) => buf.extend_from_slice(b),
                        Piece::Ddp(_) | Piece::File(_) => pieces.push((buf.len(), p.file_octets())),
                    }
                }
                buf.freeze()
            }
        };
        MessageSource {
            inline,
            pieces,
            next_piece: 0,
            results: msg.results().to_vec(),
            next_result: 0,
        }
    }

    /// Fails unless the inline XDR (read up to `pos`), every DDP piece and
    /// every non-empty result were consumed: data no DDP-eligible item
    /// claimed is trailing data.
    fn finish(&self, pos: usize) -> Result<(), DecodeError> {
        let left = |v: &[Bytes]| v.iter().map(|b| b.len() + pad_len(b.len())).sum::<usize>();
        let pieces: Vec<Bytes> = self
            .pieces
            .get(self.next_piece..)
            .unwrap_or_default()
            .iter()
            .map(|(_, b)| b.clone())
            .collect();
        let n = self.inline.len().saturating_sub(pos)
            + left(&pieces)
            + left(self.results.get(self.next_result..).unwrap_or_default());
        match n {
            0 => Ok(()),
            n => Err(DecodeError::new(
                DecodeErrorKind::TrailingBytes(n),
                pos,
                "DDP-eligible data no item claimed",
            )),
        }
    }

    fn mismatch(at: usize, field: &'static str, detail: String) -> DecodeError {
        DecodeError::new(
            DecodeErrorKind::BadValue {
                what: "DDP-eligible item length",
                detail,
            },
            at,
            field,
        )
    }
}

impl DdpSource for MessageSource {
    // The placement rules are those of `rpcrdma::MessageReader::ddp_opaque`
    // (RFC 8166 §3.4.6, §4.3.2): a zero-length item takes no Write chunk;
    // a non-empty result is the data (or the data and its pad, from a
    // legacy responder); an empty one means the item came inline.
    fn data(
        &mut self,
        r: &mut Reader<'_>,
        len: usize,
        field: &'static str,
    ) -> Result<Bytes, DecodeError> {
        let at = r.position();
        if let Some((pos, piece)) = self.pieces.get(self.next_piece) {
            if *pos == at {
                if piece.len() != len {
                    let detail = format!("length word {len}, Read chunk data {}", piece.len());
                    return Err(Self::mismatch(at, field, detail));
                }
                self.next_piece += 1;
                return Ok(piece.clone());
            }
        }
        if len > 0 {
            if let Some(slot) = self.results.get(self.next_result).cloned() {
                self.next_result += 1;
                if !slot.is_empty() {
                    if slot.len() != len && slot.len() != len + pad_len(len) {
                        let detail = format!("length word {len}, Write chunk data {}", slot.len());
                        return Err(Self::mismatch(at, field, detail));
                    }
                    return Ok(slot.slice(..len));
                }
            }
        }
        r.fixed_opaque(len, field)?;
        match self.inline.get(at..at + len) {
            Some(_) => Ok(self.inline.slice(at..at + len)),
            None => Err(r.error(
                DecodeErrorKind::Truncated {
                    needed: len,
                    available: 0,
                },
                field,
            )),
        }
    }
}
