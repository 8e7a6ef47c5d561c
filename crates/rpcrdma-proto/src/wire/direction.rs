//! Direction detection for bidirectional operation (RFC 8167).
//!
//! On one connection a client receives forward-direction Replies and
//! backward-direction (reverse-direction) Calls; a server receives
//! forward-direction Calls and backward-direction Replies. In a Short Message
//! (RDMA_MSG (v1) / RDMA2_MSG (v2) with three empty chunk lists, the common
//! case in both directions) the transport header has a fixed size and the
//! RPC `msg_type` word sits at a fixed offset:
//!
//! ```text
//! v1 (RFC 8166 §4.3):
//!   0 rdma_xid  4 rdma_vers=1  8 rdma_credit  12 rdma_proc=RDMA_MSG(0)
//!  16 rdma_reads=0  20 rdma_writes=0  24 rdma_reply=0
//!  28 RPC xid  32 RPC msg_type                        (header: 7 words)
//!
//! v2 (draft-cel-nfsv4-rpcrdma-version-two-09 §3.1-3.3, §5.3.1):
//!   rpcrdma2_hdr_prefix  = rpcrdma_common (xid, vers, credit, htype) + rdma_flags
//!   rpcrdma2_chunk_lists = rdma_inv_handle + rdma_reads* + rdma_writes* + rdma_reply*
//!   0 rdma_xid  4 rdma_vers=2  8 rdma_credit  12 rdma_htype=RDMA2_MSG(0)
//!  16 rdma_flags  20 rdma_inv_handle
//!  24 rdma_reads=0  28 rdma_writes=0  32 rdma_reply=0
//!  36 RPC xid (rdma_rpc_first_word)  40 RPC msg_type  (header: 9 words)
//! ```
//!
//! [`classify`] peeks at those words only (no decode, no allocation, no
//! panic on any input) and tells the endpoint, which knows its [`Role`],
//! what it received. Anything else (RDMA_NOMSG, RDMA_ERROR, chunks present,
//! too short, unknown version, a `msg_type` that is neither CALL nor REPLY)
//! is [`Unclassifiable`]: the caller decodes it fully and routes it by XID.
//!
//! Spec text: the quotations below are verbatim from RFC 8167
//! (`specs/rfc8167.txt`, checked by `scripts/check-citations`), which calls
//! the backward direction the "reverse direction".

use core::fmt;

/// RPC-over-RDMA version 1 `rdma_vers`.
pub const RPCRDMA_V1: u32 = 1;
/// RPC-over-RDMA version 2 `rdma_vers`.
pub const RPCRDMA_V2: u32 = 2;
/// `RDMA_MSG` (v1) and `RDMA2_MSG` (v2): the RPC message follows inline.
pub const RDMA_MSG: u32 = 0;
/// `RPCRDMA2_F_RESPONSE` in the v2 `rdma_flags` word.
pub const RPCRDMA2_F_RESPONSE: u32 = 0x0000_0001;

/// Octet offset of the RPC message behind an RDMA_MSG v1 header with three
/// empty chunk lists (7 words).
pub const V1_RPC_OFFSET: usize = 28;
/// Octet offset of the RPC message behind an RDMA2_MSG v2 header with three
/// empty chunk lists (9 words).
pub const V2_RPC_OFFSET: usize = 36;

/// The endpoint's role on the connection: the client actively opened it,
/// the server accepted it. Forward-direction Calls go client to server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Connection client (forward-direction requester).
    Client,
    /// Connection server (forward-direction responder).
    Server,
}

/// Forward or backward direction.
//= rfc8167#section-2.1
//# Traditionally, an ONC RPC client acts as a Requester, while an ONC
//# RPC service acts as a Responder.  This form of message passing is
//# referred to as "forward-direction" operation.
//= rfc8167#section-2.2
//# An ONC RPC service endpoint can act as a Requester, in which case, an ONC
//# RPC client endpoint acts as a Responder.  This form of message passing is
//# referred to as "reverse-direction" operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client is requester, server is responder.
    Forward,
    /// Server is requester, client is responder (NFSv4.1 callbacks).
    Backward,
}

/// What a received inline RPC message is, from the receiver's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageClass {
    /// A Call from the client (received by a server).
    ForwardCall,
    /// A Reply from the server to one of our Calls (received by a client).
    ForwardReply,
    /// A Call from the server (received by a client).
    BackwardCall,
    /// A Reply from the client to one of our backward Calls (received by a
    /// server).
    BackwardReply,
}

impl MessageClass {
    /// The class of a received message given the receiver's role and whether
    /// the RPC `msg_type` is CALL.
    pub const fn for_received(role: Role, is_call: bool) -> MessageClass {
        match (role, is_call) {
            (Role::Server, true) => MessageClass::ForwardCall,
            (Role::Client, false) => MessageClass::ForwardReply,
            (Role::Client, true) => MessageClass::BackwardCall,
            (Role::Server, false) => MessageClass::BackwardReply,
        }
    }

    /// Forward or backward.
    pub const fn direction(self) -> Direction {
        match self {
            MessageClass::ForwardCall | MessageClass::ForwardReply => Direction::Forward,
            MessageClass::BackwardCall | MessageClass::BackwardReply => Direction::Backward,
        }
    }

    /// True for a Call.
    pub const fn is_call(self) -> bool {
        matches!(self, MessageClass::ForwardCall | MessageClass::BackwardCall)
    }

    /// Stable name, e.g. `"backward-call"`.
    pub const fn name(self) -> &'static str {
        match self {
            MessageClass::ForwardCall => "forward-call",
            MessageClass::ForwardReply => "forward-reply",
            MessageClass::BackwardCall => "backward-call",
            MessageClass::BackwardReply => "backward-reply",
        }
    }
}

impl fmt::Display for MessageClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A classified message: an RDMA_MSG / RDMA2_MSG with empty chunk lists and
/// an RPC CALL or REPLY behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Classified {
    /// What it is.
    pub class: MessageClass,
    /// `rdma_vers`: 1 or 2.
    pub version: u32,
    /// `rdma_xid` of the transport header.
    pub rdma_xid: u32,
    /// `rdma_credit` of the transport header (which direction's credits it
    /// speaks for depends on `class`, RFC 8167 §4.1).
    pub credit: u32,
    /// The XID of the RPC message.
    pub rpc_xid: u32,
    /// Octet offset of the RPC message ([`V1_RPC_OFFSET`] or
    /// [`V2_RPC_OFFSET`]).
    pub rpc_offset: usize,
    /// v2 only: whether RPCRDMA2_F_RESPONSE is set.
    pub f_response: Option<bool>,
    /// v2 only: `rdma_inv_handle`.
    pub inv_handle: Option<u32>,
}

impl Classified {
    /// Whether the transport header XID equals the RPC XID, as RFC 8166
    /// §4.2.1 requires. Not checked by [`classify`]; a receiver decides.
    pub fn xids_match(&self) -> bool {
        self.rdma_xid == self.rpc_xid
    }

    /// v2: whether RPCRDMA2_F_RESPONSE agrees with the RPC `msg_type`
    /// (set on Replies, clear on Calls). `None` for v1.
    //= draft-cel-nfsv4-rpcrdma-version-two-09#section-3.2
    //# In general, when a message carries an XID that was generated by the
    //# message's receiver (that is, the receiver is acting as a requester),
    //# the message's sender sets the RPCRDMA2_F_RESPONSE flag. Otherwise
    //# that flag is clear.
    pub fn f_response_consistent(&self) -> Option<bool> {
        self.f_response.map(|f| f != self.class.is_call())
    }
}

/// Why a buffer could not be classified without a full decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unclassifiable {
    /// The buffer ends before the word that was needed.
    TooShort {
        /// Octets in the buffer.
        len: usize,
        /// Octets the next check needed.
        needed: usize,
    },
    /// `rdma_vers` is neither 1 nor 2.
    UnknownVersion(u32),
    /// Not RDMA_MSG / RDMA2_MSG (RDMA_NOMSG, RDMA_ERROR, RDMA2_CONNPROP,
    /// RDMA_MSGP, RDMA_DONE, or unknown): no inline RPC message at a fixed
    /// offset.
    NotInline {
        /// `rdma_vers`.
        version: u32,
        /// `rdma_proc` / `rdma_htype`.
        proc: u32,
    },
    /// A chunk list is present (its discriminant is 1); the RPC message
    /// does not start at a fixed offset.
    ChunksPresent {
        /// Octet offset of the list discriminant.
        offset: usize,
    },
    /// A chunk-list discriminant other than 0 or 1: malformed.
    BadDiscriminant {
        /// Octet offset of the discriminant.
        offset: usize,
        /// Its value.
        value: u32,
    },
    /// The RPC `msg_type` is neither CALL (0) nor REPLY (1).
    BadMsgType(u32),
}

impl fmt::Display for Unclassifiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unclassifiable::TooShort { len, needed } => {
                write!(f, "too short: {len} octets, needed {needed}")
            }
            Unclassifiable::UnknownVersion(v) => write!(f, "unknown rdma_vers {v}"),
            Unclassifiable::NotInline { version, proc } => {
                write!(
                    f,
                    "v{version} header type {proc} carries no inline RPC message"
                )
            }
            Unclassifiable::ChunksPresent { offset } => {
                write!(f, "chunk list present (discriminant at offset {offset})")
            }
            Unclassifiable::BadDiscriminant { offset, value } => {
                write!(f, "chunk-list discriminant {value} at offset {offset}")
            }
            Unclassifiable::BadMsgType(v) => write!(f, "RPC msg_type {v} is not CALL or REPLY"),
        }
    }
}

fn word(buf: &[u8], off: usize) -> Result<u32, Unclassifiable> {
    let end = off.saturating_add(4);
    match buf.get(off..end) {
        Some([a, b, c, d]) => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err(Unclassifiable::TooShort {
            len: buf.len(),
            needed: end,
        }),
    }
}

/// Classifies a received message for an endpoint in `role`, reading only the
/// fixed words listed in the module documentation. Never panics.
//= rfc8167#section-5
//# Certain fields in the RPC-over-RDMA header have a fixed position in
//# all versions of RPC-over-RDMA.
//= rfc8167#section-5.1
//# Whether presented inline or as a separate chunk, the ONC RPC Call header
//# MUST start with the same XID value that is present in the RPC-over-RDMA
//# header, and the RPC header's msg_type field MUST contain the value CALL.
//= rfc8167#section-5.2
//# Whether presented inline or as a separate chunk, the ONC RPC Reply header
//# MUST start with the same XID value that is present in the RPC-over-RDMA
//# header, and the RPC header's msg_type field MUST contain the value REPLY.
// The fast path covers Short Messages only (RDMA_MSG / RDMA2_MSG with three
// empty chunk lists, RFC 8166 §3.5.1): there the RPC header, and so
// msg_type, sits at a fixed offset. Chunks MAY be used in the reverse
// direction too (RFC 8167 §5.3); such messages are `Unclassifiable` here and
// are routed after a full decode.
pub fn classify(buf: &[u8], role: Role) -> Result<Classified, Unclassifiable> {
    let rdma_xid = word(buf, 0)?;
    let version = word(buf, 4)?;
    let credit = word(buf, 8)?;
    let (lists_at, rpc_offset) = match version {
        RPCRDMA_V1 => (16, V1_RPC_OFFSET),
        RPCRDMA_V2 => (24, V2_RPC_OFFSET),
        v => return Err(Unclassifiable::UnknownVersion(v)),
    };
    let proc = word(buf, 12)?;
    if proc != RDMA_MSG {
        return Err(Unclassifiable::NotInline { version, proc });
    }
    let (f_response, inv_handle) = if version == RPCRDMA_V2 {
        let flags = word(buf, 16)?;
        let inv = word(buf, 20)?;
        (Some(flags & RPCRDMA2_F_RESPONSE != 0), Some(inv))
    } else {
        (None, None)
    };
    for i in 0..3 {
        let offset = lists_at + 4 * i;
        match word(buf, offset)? {
            0 => {}
            1 => return Err(Unclassifiable::ChunksPresent { offset }),
            value => return Err(Unclassifiable::BadDiscriminant { offset, value }),
        }
    }
    let rpc_xid = word(buf, rpc_offset)?;
    //= rfc5531#section-9
    //# enum msg_type {
    //#    CALL  = 0,
    //#    REPLY = 1
    //# };
    let is_call = match word(buf, rpc_offset + 4)? {
        0 => true,
        1 => false,
        v => return Err(Unclassifiable::BadMsgType(v)),
    };
    Ok(Classified {
        class: MessageClass::for_received(role, is_call),
        version,
        rdma_xid,
        credit,
        rpc_xid,
        rpc_offset,
        f_response,
        inv_handle,
    })
}

/// The RPCRDMA2_F_RESPONSE flag of any v2 header (`None` for another
/// version or a buffer shorter than the 5-word prefix). Unlike
/// [`classify`], this works for every v2 header type, e.g. an RDMA2_NOMSG
/// with chunks: a set flag means the XID was generated by the receiver, so
/// the message answers one of the receiver's requests.
pub fn v2_f_response(buf: &[u8]) -> Option<bool> {
    if word(buf, 4).ok()? != RPCRDMA_V2 {
        return None;
    }
    Some(word(buf, 16).ok()? & RPCRDMA2_F_RESPONSE != 0)
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (v{}, rdma_xid 0x{:08x}, rpc xid 0x{:08x}, RPC at offset {}",
            self.class, self.version, self.rdma_xid, self.rpc_xid, self.rpc_offset
        )?;
        if let Some(r) = self.f_response {
            write!(f, ", F_RESPONSE {}", if r { "set" } else { "clear" })?;
            if self.f_response_consistent() == Some(false) {
                write!(f, " (inconsistent with msg_type)")?;
            }
        }
        if !self.xids_match() {
            write!(f, ", XID mismatch")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::XdrEncode;
    use proptest::prelude::*;

    fn h(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    // v1 RDMA_MSG, xid 0x11, credit 32, empty lists, RPC xid 0x11, CALL.
    const V1_CALL: &str = "00000011 00000001 00000020 00000000 00000000 00000000 00000000 \
                           00000011 00000000 00000002";
    // Same with REPLY.
    const V1_REPLY: &str = "00000011 00000001 00000020 00000000 00000000 00000000 00000000 \
                            00000011 00000001 00000000";
    // v2 RDMA2_MSG, flags 0, inv_handle 0, empty lists, CALL.
    const V2_CALL: &str = "00000022 00000002 00000010 00000000 00000000 00000000 \
                           00000000 00000000 00000000 00000022 00000000";
    // v2 REPLY with F_RESPONSE.
    const V2_REPLY: &str = "00000022 00000002 00000010 00000000 00000001 00000000 \
                            00000000 00000000 00000000 00000022 00000001";

    #[test]
    fn v1_each_way() {
        let c = classify(&h(V1_CALL), Role::Server).unwrap();
        assert_eq!(c.class, MessageClass::ForwardCall);
        assert_eq!(
            (c.version, c.rpc_offset, c.rpc_xid, c.credit),
            (1, 28, 0x11, 32)
        );
        assert_eq!(c.f_response, None);
        assert!(c.xids_match());
        let c = classify(&h(V1_CALL), Role::Client).unwrap();
        assert_eq!(c.class, MessageClass::BackwardCall);
        assert_eq!(c.class.direction(), Direction::Backward);
        let c = classify(&h(V1_REPLY), Role::Client).unwrap();
        assert_eq!(c.class, MessageClass::ForwardReply);
        let c = classify(&h(V1_REPLY), Role::Server).unwrap();
        assert_eq!(c.class, MessageClass::BackwardReply);
        assert!(!c.class.is_call());
    }

    #[test]
    fn v2_each_way_and_f_response() {
        let c = classify(&h(V2_CALL), Role::Server).unwrap();
        assert_eq!(c.class, MessageClass::ForwardCall);
        assert_eq!((c.version, c.rpc_offset, c.rpc_xid), (2, 36, 0x22));
        assert_eq!(c.f_response, Some(false));
        assert_eq!(c.inv_handle, Some(0));
        assert_eq!(c.f_response_consistent(), Some(true));
        let c = classify(&h(V2_CALL), Role::Client).unwrap();
        assert_eq!(c.class, MessageClass::BackwardCall);
        let c = classify(&h(V2_REPLY), Role::Client).unwrap();
        assert_eq!(c.class, MessageClass::ForwardReply);
        assert_eq!(c.f_response, Some(true));
        assert_eq!(c.f_response_consistent(), Some(true));
        let c = classify(&h(V2_REPLY), Role::Server).unwrap();
        assert_eq!(c.class, MessageClass::BackwardReply);
        // A Call with F_RESPONSE set is still classified by msg_type, but
        // flagged.
        let mut b = h(V2_CALL);
        b[19] = 1;
        let c = classify(&b, Role::Server).unwrap();
        assert_eq!(c.f_response_consistent(), Some(false));
        assert!(c.to_string().contains("inconsistent"));
        assert_eq!(v2_f_response(&b), Some(true));
        assert_eq!(v2_f_response(&h(V2_CALL)), Some(false));
        assert_eq!(v2_f_response(&h(V1_REPLY)), None);
        assert_eq!(
            v2_f_response(&h("00000022 00000002 00000010 00000001")),
            None
        );
    }

    #[test]
    fn xid_mismatch_reported_not_rejected() {
        let mut b = h(V1_CALL);
        b[31] = 0x12;
        let c = classify(&b, Role::Server).unwrap();
        assert!(!c.xids_match());
        assert!(c.to_string().contains("XID mismatch"));
    }

    #[test]
    fn not_classifiable() {
        // NOMSG
        let mut b = h(V1_CALL);
        b[15] = 1;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::NotInline {
                version: 1,
                proc: 1
            })
        );
        // RDMA_ERROR (ERR_VERS 1..1)
        let b = h("00000011 00000001 00000020 00000004 00000001 00000001 00000001");
        assert_eq!(
            classify(&b, Role::Client),
            Err(Unclassifiable::NotInline {
                version: 1,
                proc: 4
            })
        );
        // v2 CONNPROP
        let mut b = h(V2_CALL);
        b[15] = 5;
        assert_eq!(
            classify(&b, Role::Client),
            Err(Unclassifiable::NotInline {
                version: 2,
                proc: 5
            })
        );
        // Chunks: v1 read list present at 16, v1 reply chunk at 24, v2 write list at 28.
        let mut b = h(V1_CALL);
        b[19] = 1;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::ChunksPresent { offset: 16 })
        );
        let mut b = h(V1_CALL);
        b[27] = 1;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::ChunksPresent { offset: 24 })
        );
        let mut b = h(V2_CALL);
        b[31] = 1;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::ChunksPresent { offset: 28 })
        );
        let mut b = h(V1_CALL);
        b[23] = 2;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::BadDiscriminant {
                offset: 20,
                value: 2
            })
        );
        // Unknown version.
        let mut b = h(V1_CALL);
        b[7] = 3;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::UnknownVersion(3))
        );
        // Bad msg_type.
        let mut b = h(V1_CALL);
        b[35] = 2;
        assert_eq!(
            classify(&b, Role::Server),
            Err(Unclassifiable::BadMsgType(2))
        );
    }

    #[test]
    fn too_short_at_every_length() {
        for s in [V1_CALL, V1_REPLY, V2_CALL, V2_REPLY] {
            let b = h(s);
            // Header plus RPC xid and msg_type: 28 + 8 (v1), 36 + 8 (v2).
            let full = if b[7] == 1 { 36 } else { 44 };
            for n in 0..full {
                match classify(&b[..n], Role::Client) {
                    Err(Unclassifiable::TooShort { len, needed }) => {
                        assert_eq!(len, n);
                        assert!(needed > n);
                    }
                    other => panic!("{s} at {n}: {other:?}"),
                }
            }
        }
        // Exactly header + xid + msg_type is enough.
        assert!(classify(&h(V1_CALL)[..36], Role::Server).is_ok());
        assert!(classify(&h(V2_CALL)[..44], Role::Server).is_ok());
    }

    proptest! {
        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64), server in any::<bool>()) {
            let role = if server { Role::Server } else { Role::Client };
            match classify(&buf, role) {
                Ok(c) => {
                    prop_assert!(c.rpc_offset + 8 <= buf.len());
                    let _ = c.to_string();
                }
                Err(e) => { let _ = e.to_string(); }
            }
            let _ = v2_f_response(&buf);
        }

        /// The peek agrees with a full RFC 5531 decode of the message behind
        /// the header.
        #[test]
        fn agrees_with_full_rpc_decode(m in crate::wire::rpc::tests::arb_rpc_msg(), v2 in any::<bool>(), flags in any::<u32>()) {
            let mut b = Vec::new();
            b.extend_from_slice(&m.xid.to_be_bytes());
            b.extend_from_slice(&(if v2 { 2u32 } else { 1 }).to_be_bytes());
            b.extend_from_slice(&[0, 0, 0, 16, 0, 0, 0, 0]);
            if v2 {
                b.extend_from_slice(&flags.to_be_bytes());
                b.extend_from_slice(&[0; 4]);
            }
            b.extend_from_slice(&[0; 12]);
            let off = b.len();
            b.extend_from_slice(&m.to_vec().unwrap());
            let c = classify(&b, Role::Client).unwrap();
            prop_assert_eq!(c.rpc_offset, off);
            let (d, _) = crate::wire::rpc::RpcMsg::decode(&b[off..], &crate::Limits::default()).unwrap();
            prop_assert_eq!(c.class.is_call(), d.call().is_some());
            prop_assert_eq!(c.rpc_xid, d.xid);
            prop_assert!(c.xids_match());
            prop_assert_eq!(c.f_response, v2.then_some(flags & 1 == 1));
        }

        #[test]
        fn classification_matches_msg_type(xid in any::<u32>(), credit in any::<u32>(), v2 in any::<bool>(), call in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut b = Vec::new();
            b.extend_from_slice(&xid.to_be_bytes());
            b.extend_from_slice(&(if v2 { 2u32 } else { 1 }).to_be_bytes());
            b.extend_from_slice(&credit.to_be_bytes());
            b.extend_from_slice(&[0; 4]);
            let words = if v2 { 5 } else { 3 };
            b.extend_from_slice(&vec![0u8; 4 * words]);
            b.extend_from_slice(&xid.to_be_bytes());
            b.extend_from_slice(&(if call { 0u32 } else { 1 }).to_be_bytes());
            b.extend_from_slice(&tail);
            let c = classify(&b, Role::Server).unwrap();
            prop_assert_eq!(c.class.is_call(), call);
            prop_assert_eq!(c.rpc_offset, if v2 { 36 } else { 28 });
            prop_assert_eq!(c.credit, credit);
            let d = classify(&b, Role::Client).unwrap();
            prop_assert_ne!(c.class.direction(), d.class.direction());
        }
    }
}
