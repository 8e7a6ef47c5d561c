//! Which CRC-32C code computes the MPA CRCs of this process: chosen once,
//! by default the fastest the CPU allows, or forced with the environment
//! variable [`ENV`] (benchmarks and tests measure and compare every path on
//! one host this way).

use std::sync::OnceLock;

use super::table;

/// The environment variable that forces an implementation for the whole
/// process: `auto` (the default), `sse42` or `table`; read once, at the
/// first CRC. An unknown value leaves the default (`rpcrdma bench`
/// refuses it, see [`from_env`]).
pub const ENV: &str = "RPCRDMA_CRC32C_IMPL";

/// Below this many octets [`Impl::Auto`] continues a CRC with the `crc32c`
/// crate: `crc-fast` continues only through its `Digest`, whose set-up
/// (a copy of the algorithm's parameters, an indirect call) costs more
/// than the `crc32c` crate's whole work up to about 256 octets. A fresh
/// CRC (a whole FPDU) always takes `crc-fast`'s one-shot function, the
/// fastest at every size. (`benches/crc.rs`, hot, this host: at 64
/// octets one-shot 13.6, `crc32c` 7.5, `Digest` 5.0 GB/s; at 256 26.7,
/// 16.6 and 15.8; at 1460 52.8, 20.2 and 42.2.)
const SMALL: usize = 256;

/// A CRC-32C implementation. All compute the same function (the tests pin
/// each to a bit-at-a-time reference); they differ in speed only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    /// The default: the `crc-fast` crate (for pieces continuing a CRC:
    /// from 256 octets on), which picks at run time the widest code the CPU has — on x86_64 the
    /// `crc32` instruction fused with carry-less multiplication folding,
    /// AVX-512 VPCLMULQDQ where present, SSE PCLMULQDQ otherwise (the
    /// crate offers no way to force its narrower path on a wider CPU); on
    /// aarch64 CRC + PMULL; a table elsewhere. Shorter continuing pieces
    /// (PAD, the rest of a header) go to the `crc32c` crate.
    Auto,
    /// The `crc32c` crate alone: the SSE 4.2 `crc32` instruction in three
    /// interleaved lanes, no carry-less multiplication (a table on CPUs
    /// without SSE 4.2).
    Sse42,
    /// A table, slice-by-8, no special instructions.
    Table,
}

impl Impl {
    /// Every implementation, default first.
    pub const ALL: [Impl; 3] = [Impl::Auto, Impl::Sse42, Impl::Table];

    /// The name [`ENV`] takes.
    pub const fn name(self) -> &'static str {
        match self {
            Impl::Auto => "auto",
            Impl::Sse42 => "sse42",
            Impl::Table => "table",
        }
    }

    /// The implementation named `s` (as [`Impl::name`]).
    pub fn parse(s: &str) -> Option<Impl> {
        Impl::ALL.into_iter().find(|i| i.name() == s)
    }

    /// Extends the standard CRC-32C value `crc` (of the octets before;
    /// 0 for none) over `data`.
    #[inline]
    pub fn append(self, crc: u32, data: &[u8]) -> u32 {
        match self {
            // The register after any prefix whose standard CRC is 0 is the
            // initial register: continuing from 0 is a fresh CRC.
            Impl::Auto if crc == 0 => crc_fast::crc32_iscsi(data),
            Impl::Auto if data.len() >= SMALL => fast_append(crc, data),
            Impl::Auto | Impl::Sse42 => crc32c::crc32c_append(crc, data),
            Impl::Table => table::append(crc, data),
        }
    }

    /// What this implementation runs on this CPU, e.g. `auto (crc-fast
    /// x86_64-sse-pclmulqdq)`: for benchmark headers.
    pub fn describe(self) -> String {
        let sse42 = sse42_detected();
        match self {
            Impl::Auto => format!(
                "auto (crc-fast {}; crc32c {} to continue below {SMALL} octets)",
                crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc32Iscsi),
                if sse42 { "sse4.2" } else { "table" }
            ),
            Impl::Sse42 => format!("sse42 (crc32c {})", if sse42 { "sse4.2" } else { "table" }),
            Impl::Table => "table (slice-by-8)".into(),
        }
    }
}

fn sse42_detected() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sse4.2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `crc-fast` continuing from a standard CRC-32C value.
#[inline]
fn fast_append(crc: u32, data: &[u8]) -> u32 {
    // `crc-fast` continues from the raw (pre-final-XOR) register, which
    // is the complement of the standard value fed so far.
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    // The register is 32 bits wide: the high half is always zero.
    d.finalize() as u32
}

/// The implementation [`ENV`] asks for: `Ok(None)` when it is not set,
/// `Err` (naming the accepted values) when it names none.
pub fn from_env() -> Result<Option<Impl>, String> {
    match std::env::var(ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => Impl::parse(&v).map(Some).ok_or_else(|| {
            let names: Vec<_> = Impl::ALL.iter().map(|i| i.name()).collect();
            format!("{ENV}={v}: not one of {}", names.join(", "))
        }),
        Err(e) => Err(format!("{ENV}: {e}")),
    }
}

/// The implementation of this process ([`ENV`], else [`Impl::Auto`]),
/// decided at the first call.
#[inline]
pub fn selected() -> Impl {
    static SELECTED: OnceLock<Impl> = OnceLock::new();
    *SELECTED.get_or_init(|| from_env().ok().flatten().unwrap_or(Impl::Auto))
}
