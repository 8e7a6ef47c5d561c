//! An XDR encoder into a growing buffer: what it writes is exactly what
//! goes on the wire (its length is the encoded size).

/// XDR encoder (RFC 4506 big-endian words, opaques padded to 4 octets).
#[derive(Clone, Debug, Default)]
pub struct Enc(Vec<u8>);

impl Enc {
    /// An empty encoder.
    pub fn new() -> Self {
        Enc(Vec::with_capacity(256))
    }
    /// `unsigned int`.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    /// `unsigned hyper`.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    /// `bool`.
    pub fn bool(&mut self, v: bool) {
        self.u32(v as u32);
    }
    /// Fixed-length opaque (padded).
    pub fn fixed(&mut self, data: &[u8]) {
        self.0.extend_from_slice(data);
        self.0.resize(self.0.len() + (4 - data.len() % 4) % 4, 0);
    }
    /// Variable-length opaque or string (length word, data, padding).
    pub fn opaque(&mut self, data: &[u8]) {
        self.u32(data.len() as u32);
        self.fixed(data);
    }
    /// Octets written.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Nothing written yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The encoding.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}
