//! Run-time loading of `libibverbs.so.1` and `librdmacm.so.1` with
//! `dlopen(3)`: the workspace builds and links without rdma-core, and a
//! machine without it gets one clear line instead of a loader error.

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::sync::OnceLock;

use crate::sys::fns::*;

/// The library sonames we open (the ABI we bind, see [`crate::sys`]).
pub const LIBIBVERBS: &str = "libibverbs.so.1";
/// See [`LIBIBVERBS`].
pub const LIBRDMACM: &str = "librdmacm.so.1";

/// Why rdma-core could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// A library is not installed (or not loadable).
    Missing {
        /// Its soname.
        library: &'static str,
        /// What the dynamic loader said.
        detail: String,
    },
    /// A library lacks a symbol we need (too old an rdma-core).
    Symbol {
        /// Its soname.
        library: &'static str,
        /// The symbol.
        symbol: &'static str,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Missing { library, .. } => {
                write!(f, "{library} not found: install rdma-core")
            }
            LoadError::Symbol { library, symbol } => write!(
                f,
                "{library} has no {symbol}: rdma-core 22 or later is needed"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// One `dlopen` handle, never closed (the function pointers taken from it
/// live as long as the process).
struct Library {
    name: &'static str,
    handle: *mut c_void,
}

impl Library {
    fn open(name: &'static str) -> Result<Library, LoadError> {
        let cname = CString::new(name).map_err(|_| LoadError::Missing {
            library: name,
            detail: "bad name".into(),
        })?;
        // SAFETY: `cname` is a valid NUL-terminated string; dlopen has no
        // other precondition. rdma-core's constructors only read the
        // environment and sysfs.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(LoadError::Missing {
                library: name,
                detail: dlerror(),
            });
        }
        Ok(Library { name, handle })
    }

    /// The address of `symbol`, as a function pointer of type `F`.
    ///
    /// # Safety
    ///
    /// `F` must be an `extern "C" fn` type whose signature is the C
    /// declaration of `symbol` in rdma-core's headers.
    unsafe fn sym<F: Copy>(&self, symbol: &'static str) -> Result<F, LoadError> {
        let missing = LoadError::Symbol {
            library: self.name,
            symbol,
        };
        let c = CString::new(symbol).map_err(|_| missing.clone())?;
        // SAFETY: the handle is a live dlopen handle (never closed) and
        // `c` a NUL-terminated string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(missing);
        }
        debug_assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
        // SAFETY: `p` is the non-null address of the function `symbol`,
        // and the caller guarantees `F` is its pointer type (same size as
        // a data pointer on every platform rdma-core supports).
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
    // the next dl* call on this thread; we copy it at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            String::new()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// The entry points of libibverbs and librdmacm we call.
#[allow(missing_docs)]
pub struct Rdma {
    pub get_device_list: GetDeviceList,
    pub free_device_list: FreeDeviceList,
    pub get_device_name: GetDeviceName,
    pub open_device: OpenDevice,
    pub close_device: CloseDevice,
    pub query_device: QueryDevice,
    pub alloc_pd: AllocPd,
    pub dealloc_pd: DeallocPd,
    pub reg_mr_iova: RegMrIova,
    pub dereg_mr: DeregMr,
    pub create_comp_channel: CreateCompChannel,
    pub destroy_comp_channel: DestroyCompChannel,
    pub create_cq: CreateCq,
    pub destroy_cq: DestroyCq,
    pub get_cq_event: GetCqEvent,
    pub ack_cq_events: AckCqEvents,
    pub get_async_event: GetAsyncEvent,
    pub ack_async_event: AckAsyncEvent,
    pub create_event_channel: CreateEventChannel,
    pub destroy_event_channel: DestroyEventChannel,
    pub create_id: CreateId,
    pub destroy_id: DestroyId,
    pub bind_addr: BindAddr,
    pub resolve_addr: ResolveAddr,
    pub resolve_route: ResolveRoute,
    pub create_qp: CreateQp,
    pub destroy_qp: DestroyQp,
    pub connect: Connect,
    pub listen: Listen,
    pub accept: Connect,
    pub reject: Reject,
    pub disconnect: Disconnect,
    pub get_cm_event: GetCmEvent,
    pub ack_cm_event: AckCmEvent,
    pub migrate_id: MigrateId,
    pub event_str: EventStr,
    pub get_cm_devices: GetCmDevices,
    pub free_cm_devices: FreeCmDevices,
}

// SAFETY: `Rdma` holds plain function pointers into libraries that stay
// loaded for the life of the process; libibverbs and librdmacm are
// thread-safe (rdma-core documents every verb as callable from any thread).
unsafe impl Send for Rdma {}
// SAFETY: as for `Send`: immutable function pointers.
unsafe impl Sync for Rdma {}

impl Rdma {
    fn load() -> Result<Rdma, LoadError> {
        // librdmacm first: it needs libibverbs, so its absence is the more
        // telling message when neither is installed.
        let cm = Library::open(LIBRDMACM)?;
        let v = Library::open(LIBIBVERBS)?;
        // SAFETY: each type alias in `sys::fns` is the C prototype of the
        // symbol named with it (rdma-core's verbs.h / rdma_cma.h).
        unsafe {
            Ok(Rdma {
                get_device_list: v.sym("ibv_get_device_list")?,
                free_device_list: v.sym("ibv_free_device_list")?,
                get_device_name: v.sym("ibv_get_device_name")?,
                open_device: v.sym("ibv_open_device")?,
                close_device: v.sym("ibv_close_device")?,
                query_device: v.sym("ibv_query_device")?,
                alloc_pd: v.sym("ibv_alloc_pd")?,
                dealloc_pd: v.sym("ibv_dealloc_pd")?,
                reg_mr_iova: v.sym("ibv_reg_mr_iova")?,
                dereg_mr: v.sym("ibv_dereg_mr")?,
                create_comp_channel: v.sym("ibv_create_comp_channel")?,
                destroy_comp_channel: v.sym("ibv_destroy_comp_channel")?,
                create_cq: v.sym("ibv_create_cq")?,
                destroy_cq: v.sym("ibv_destroy_cq")?,
                get_cq_event: v.sym("ibv_get_cq_event")?,
                ack_cq_events: v.sym("ibv_ack_cq_events")?,
                get_async_event: v.sym("ibv_get_async_event")?,
                ack_async_event: v.sym("ibv_ack_async_event")?,
                create_event_channel: cm.sym("rdma_create_event_channel")?,
                destroy_event_channel: cm.sym("rdma_destroy_event_channel")?,
                create_id: cm.sym("rdma_create_id")?,
                destroy_id: cm.sym("rdma_destroy_id")?,
                bind_addr: cm.sym("rdma_bind_addr")?,
                resolve_addr: cm.sym("rdma_resolve_addr")?,
                resolve_route: cm.sym("rdma_resolve_route")?,
                create_qp: cm.sym("rdma_create_qp")?,
                destroy_qp: cm.sym("rdma_destroy_qp")?,
                connect: cm.sym("rdma_connect")?,
                listen: cm.sym("rdma_listen")?,
                accept: cm.sym("rdma_accept")?,
                reject: cm.sym("rdma_reject")?,
                disconnect: cm.sym("rdma_disconnect")?,
                get_cm_event: cm.sym("rdma_get_cm_event")?,
                ack_cm_event: cm.sym("rdma_ack_cm_event")?,
                migrate_id: cm.sym("rdma_migrate_id")?,
                event_str: cm.sym("rdma_event_str")?,
                get_cm_devices: cm.sym("rdma_get_devices")?,
                free_cm_devices: cm.sym("rdma_free_devices")?,
            })
        }
    }
}

/// The loaded libraries (loaded on first use, once per process).
pub fn rdma() -> Result<&'static Rdma, LoadError> {
    static LIBS: OnceLock<Result<Rdma, LoadError>> = OnceLock::new();
    LIBS.get_or_init(Rdma::load).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_says_what_to_install() {
        let e = Library::open("librdmacm-does-not-exist.so.1")
            .err()
            .expect("no such library");
        assert!(matches!(e, LoadError::Missing { .. }));
        let e = LoadError::Missing {
            library: LIBRDMACM,
            detail: "cannot open shared object file".into(),
        };
        assert_eq!(e.to_string(), "librdmacm.so.1 not found: install rdma-core");
    }
}
