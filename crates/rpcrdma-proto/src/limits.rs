//! Named limits on every count and length a peer controls.
//!
//! Each decoder takes a `&Limits`; a count from the wire is compared with the
//! matching field (and with the input that is left) before anything is
//! allocated. The defaults accept everything the Linux kernel client and
//! server emit, with margin, and refuse what no sane peer sends.

/// Limits on peer-controlled counts and lengths. See each field for its
/// default and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Read segments in one Read list. Default 32: Linux emits at most
    /// `RPCRDMA_MAX_HDR_SEGS` = 16 per chunk (one data chunk, or a
    /// Position-Zero Read chunk).
    pub max_read_segments: u32,
    /// Write chunks in one Write list. Default 8: Linux clients send one,
    /// NFSv4 COMPOUNDs with several READs may send a few.
    pub max_write_chunks: u32,
    /// Segments in one Write chunk or Reply chunk. Default 32: Linux sends at
    /// most 16 plus its 4-octet XDR pad segment.
    pub max_segments_per_chunk: u32,
    /// Segments in one transport header, all lists together. Default 64: a
    /// 1024-octet header (the RFC 8166 default inline threshold) cannot carry
    /// more than 62 segments.
    pub max_header_segments: u32,
    /// Properties in one RDMA2_CONNPROP `rpcrdma2_propset`. Default 64.
    pub max_properties: u32,
    /// Octets of one property value (`rdma_data<>`). Default 1024, the
    /// initial receive buffer size a CONNPROP has to fit in.
    pub max_property_len: u32,
    /// Words of an `rpcrdma2_propsubset` bitmap. Default 8 (256 properties).
    pub max_propsubset_words: u32,
    /// Octets of an `opaque_auth` body. RFC 5531 fixes this at 400
    /// (`MAX_AUTH_BYTES`).
    pub max_auth_len: u32,
    /// Octets of the AUTH_SYS machine name. RFC 5531 App. A: 255.
    pub max_machine_name_len: u32,
    /// Supplementary group ids in AUTH_SYS credentials. RFC 5531 App. A: 16.
    pub max_auth_sys_gids: u32,
    /// Octets of one reassembled RPC message a responder accepts: inline
    /// part plus every Read chunk (and, at a requester, the largest Reply or
    /// Write chunk it offers). Default 4 MiB: Linux moves at most about
    /// 1 MiB of payload per RPC (`RPCRDMA_MAX_DATA_SEGS`), and a responder
    /// allocates RDMA Read sinks of this size before any data arrives.
    pub max_message_len: u32,
    /// Octets of RDMA Read sinks a responder keeps registered at once, for
    /// all the calls of one connection together. Default 16 MiB. Without
    /// it a requester could make a server allocate twice its grant times
    /// [`Limits::max_message_len`] (512 MiB with the defaults) by sending
    /// many calls with large Read chunks. Calls whose Read chunks do not fit
    /// the budget wait, in arrival order, until earlier calls have been
    /// reassembled (backpressure, not failure); a single call whose Read
    /// chunks exceed this budget (or [`Limits::max_message_len`]) is
    /// answered with ERR_CHUNK.
    pub max_read_sink_bytes: u64,
}

impl Limits {
    /// The documented defaults.
    pub const DEFAULT: Limits = Limits {
        max_read_segments: 32,
        max_write_chunks: 8,
        max_segments_per_chunk: 32,
        max_header_segments: 64,
        max_properties: 64,
        max_property_len: 1024,
        max_propsubset_words: 8,
        max_auth_len: 400,
        max_machine_name_len: 255,
        max_auth_sys_gids: 16,
        max_message_len: 4 << 20,
        max_read_sink_bytes: 16 << 20,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}
