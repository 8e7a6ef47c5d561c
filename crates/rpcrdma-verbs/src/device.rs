//! Device enumeration and the one-line diagnosis of a machine that cannot
//! run the verbs provider.

use std::ffi::CStr;
use std::fmt;
use std::io;

use crate::libs::{rdma, LoadError, Rdma};
use crate::sys::*;

/// Why the verbs provider cannot run here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// rdma-core is missing (or too old).
    Load(LoadError),
    /// rdma-core is there, no device is.
    NoDevice,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Load(e) => write!(f, "{e}"),
            Unavailable::NoDevice => {
                f.write_str("no RDMA device found (libibverbs loaded, 0 devices)")
            }
        }
    }
}

impl std::error::Error for Unavailable {}

impl From<Unavailable> for io::Error {
    fn from(e: Unavailable) -> io::Error {
        let kind = match e {
            Unavailable::Load(_) | Unavailable::NoDevice => io::ErrorKind::NotFound,
        };
        io::Error::new(kind, e)
    }
}

/// The transport a device speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand, and RoCE (which libibverbs reports as InfiniBand).
    InfiniBand,
    /// iWARP (RNICs, Linux siw).
    Iwarp,
    /// Anything else libibverbs reports (usNIC, unspecified).
    Other(i32),
}

impl Transport {
    pub(crate) fn from_raw(t: libc::c_int) -> Transport {
        match t {
            0 => Transport::InfiniBand,
            IBV_TRANSPORT_IWARP => Transport::Iwarp,
            o => Transport::Other(o),
        }
    }
}

/// One RDMA device as libibverbs lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Its name (`siw0`, `rxe0`, `mlx5_0`).
    pub name: String,
    /// Its transport.
    pub transport: Transport,
}

/// Loads rdma-core and lists the devices; an empty list is
/// [`Unavailable::NoDevice`].
pub fn devices() -> Result<Vec<Device>, Unavailable> {
    let r = rdma().map_err(Unavailable::Load)?;
    let list = list_devices(r);
    if list.is_empty() {
        return Err(Unavailable::NoDevice);
    }
    Ok(list)
}

fn list_devices(r: &Rdma) -> Vec<Device> {
    let mut n: libc::c_int = 0;
    // SAFETY: ibv_get_device_list writes the count to `n` and returns NULL
    // or a NULL-terminated array of `n` device pointers that we free below.
    let list = unsafe { (r.get_device_list)(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    let n = usize::try_from(n).unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `i < n`, the length libibverbs reported for `list`.
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a live device of the list (freed only below);
        // its name is a NUL-terminated string owned by libibverbs, and
        // `transport_type` sits where `sys::ibv_device` says (pinned by the
        // layout test).
        let (name, transport) = unsafe {
            let name = CStr::from_ptr((r.get_device_name)(dev))
                .to_string_lossy()
                .into_owned();
            (name, Transport::from_raw((*dev).transport_type))
        };
        out.push(Device { name, transport });
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { (r.free_device_list)(list) };
    out
}

/// The device list, or why there is none, as one line for people.
pub fn describe() -> String {
    match devices() {
        Ok(list) => list
            .iter()
            .map(|d| format!("{} ({:?})", d.name, d.transport))
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_lines() {
        assert_eq!(
            Unavailable::NoDevice.to_string(),
            "no RDMA device found (libibverbs loaded, 0 devices)"
        );
        let e: io::Error = Unavailable::NoDevice.into();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(Transport::from_raw(1), Transport::Iwarp);
        assert_eq!(Transport::from_raw(0), Transport::InfiniBand);
        assert_eq!(Transport::from_raw(4), Transport::Other(4));
    }
}
