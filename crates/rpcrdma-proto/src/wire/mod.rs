//! Wire formats.
//!
//! | module | what |
//! |---|---|
//! | [`common`] | the prefix every version shares, hex rendering (imported by `v1`, `v2`, `header`) |
//! | [`chunk`] | segments, Read list, Write list, Reply chunk (shared by v1 and v2) |
//! | [`v1`] | RPC-over-RDMA version 1 transport header (RFC 8166 §4–5) |
//! | [`v2`] | version 2 transport header (draft-cel-nfsv4-rpcrdma-version-two-09 §3–6) |
//! | [`header`] | version dispatch on the `rdma_vers` word |
//! | [`vers_error`] | a received ERR_VERS in every form a server sends (v1 layout with `rdma_vers` 2 or 1, v2 layout) |
//! | [`private_data`] | RFC 8797 RDMA-CM private data |
//! | [`rpc`] | ONC RPC message header (RFC 5531) |
//! | [`direction`] | forward/backward call/reply classification (RFC 8167) |

/// Declares an open wire enumeration: a `u32` newtype whose known values
/// are associated constants (rustls `enum_builder!`, h2 `Reason`). An
/// unknown value decodes, re-encodes to the same bytes and prints as
/// unknown; it is never a parse failure by itself.
///
/// With `unknown = "label"`, `Display` prints `NAME (value)` or
/// `label value`; without it, `NAME` or `Type(value)`.
///
/// Exported (as `rpcrdma_proto::open_enum!`) so that upper layers declare
/// their wire enumerations the same way (the NFS crate's `nfsstat3`, …).
#[macro_export]
macro_rules! open_enum {
    (
        $(#[$m:meta])*
        $name:ident $(unknown = $unknown:literal)? { $( $(#[$cm:meta])* $c:ident = $v:literal ),* $(,)? }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl $name {
            $( $(#[$cm])* pub const $c: $name = $name($v); )*

            /// The spec's name of the value, `None` for a value without one.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $v => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                $crate::open_enum!(@display self, f, $name $(, $unknown)?)
            }
        }
    };
    (@display $s:ident, $f:ident, $name:ident, $unknown:literal) => {
        match $s.name() {
            Some(n) => write!($f, "{n} ({})", $s.0),
            None => write!($f, "{} {}", $unknown, $s.0),
        }
    };
    (@display $s:ident, $f:ident, $name:ident) => {
        match $s.name() {
            Some(n) => $f.write_str(n),
            None => write!($f, "{}({})", stringify!($name), $s.0),
        }
    };
}

pub mod chunk;
pub mod common;
pub mod direction;
pub mod header;
pub mod private_data;
pub mod rpc;
pub mod v1;
pub mod v2;
pub mod vers_error;
