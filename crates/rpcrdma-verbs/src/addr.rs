//! `SocketAddr` to and from `struct sockaddr_storage` (IPv4 and IPv6).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use libc::{sockaddr_in, sockaddr_in6, sockaddr_storage};

/// `a` as a C socket address.
pub fn to_storage(a: SocketAddr) -> sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    let mut s: sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in (that is its purpose).
            let sin = unsafe { &mut *(&mut s as *mut sockaddr_storage).cast::<sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut s as *mut sockaddr_storage).cast::<sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
        }
    }
    s
}

/// A C socket address as a `SocketAddr`; `None` for other families.
pub fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(s as *const sockaddr_storage).cast::<sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(s as *const sockaddr_storage).cast::<sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_v4_and_v6() {
        for a in ["10.0.2.15:20049", "[fe80::1%2]:20049", "[::1]:0"] {
            let a: SocketAddr = a.parse().expect("addr");
            assert_eq!(from_storage(&to_storage(a)), Some(a));
        }
        // SAFETY: all-zero sockaddr_storage is valid (family AF_UNSPEC).
        let z: sockaddr_storage = unsafe { std::mem::zeroed() };
        assert_eq!(from_storage(&z), None);
    }
}
