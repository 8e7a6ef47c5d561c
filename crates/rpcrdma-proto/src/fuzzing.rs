//! Entry points for the fuzz targets in `fuzz/` and for the corpus replay in
//! the normal test suite. Each function decodes hostile input, pretty-prints
//! what decoded, re-encodes it and checks the round trip; it must never
//! panic except on a real bug (a failed round-trip assertion).
