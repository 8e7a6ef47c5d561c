//! The C ABI of the parts of libibverbs and librdmacm this crate uses,
//! written from rdma-core's `libibverbs/verbs.h` and `librdmacm/rdma_cma.h`
//! (ABI `IBVERBS_1.1` / `RDMACM_1.0`, unchanged since rdma-core v17; the
//! lab's Debian bookworm ships v44).
//!
//! Only what we read or build is spelled out. Structures that the
//! libraries allocate and we only read through a pointer (`ibv_context`,
//! `ibv_cq`, `ibv_qp`, `rdma_cm_id`, `rdma_cm_event`) are declared up to
//! the last field we read; structures we allocate and hand over
//! (`ibv_send_wr`, `ibv_wc` arrays, `ibv_device_attr`, `ibv_qp_init_attr`,
//! `rdma_conn_param`) are complete, and their sizes are pinned by tests.
//!
//! `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq`
//! are `static inline` in `verbs.h`: they call through
//! `context->ops`, so [`ibv_context_ops`] keeps those four slots at their
//! ABI positions (11, 12, 25, 26 of 32 pointers).

#![allow(non_camel_case_types, missing_docs)]

use libc::{c_char, c_int, c_uint, c_void, size_t, sockaddr, sockaddr_storage};

/// `struct ibv_device` up to its name (read only).
#[repr(C)]
pub struct ibv_device {
    _ops: [*mut c_void; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
}

/// `IBV_TRANSPORT_IWARP` of `enum ibv_transport_type` (0 is InfiniBand,
/// which RoCE reports too).
pub const IBV_TRANSPORT_IWARP: c_int = 1;

/// Opaque library objects.
#[repr(C)]
pub struct ibv_pd {
    _opaque: [u8; 0],
}

pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_int) -> *mut ibv_mw;
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: 32 function pointers, of which the data path
/// uses four.
#[repr(C)]
pub struct ibv_context_ops {
    _compat0: [*mut c_void; 7],
    /// `ibv_alloc_mw` is `static inline` over this slot (NULL when the
    /// provider library has no memory windows: siw).
    pub alloc_mw: Option<AllocMwFn>,
    _bind_mw: *mut c_void,
    /// `ibv_dealloc_mw`'s slot.
    pub dealloc_mw: Option<DeallocMwFn>,
    _compat_create_cq: *mut c_void,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    _compat1: [*mut c_void; 12],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    _compat2: [*mut c_void; 5],
}

/// `struct ibv_context` up to `num_comp_vectors` (read only).
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
}

/// `struct ibv_cq`, first field (read only).
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
}

/// `struct ibv_qp` up to `qp_num` (read only).
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_mw` (complete; allocated by the library, read here).
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    pub mw_type: c_int,
}

/// `IBV_MW_TYPE_2` of `enum ibv_mw_type`.
pub const IBV_MW_TYPE_2: c_int = 2;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2A` / `_2B` of `ibv_device_cap_flags`.
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: c_uint = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: c_uint = 1 << 24;
/// `IBV_ACCESS_MW_BIND`: an MR memory windows may be bound to.
pub const IBV_ACCESS_MW_BIND: c_int = 1 << 4;

/// `ibv_inc_rkey` (`static inline` in verbs.h): the next key byte.
pub fn ibv_inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: size_t,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `IBV_DEVICE_MEM_WINDOW`.
pub const IBV_DEVICE_MEM_WINDOW: c_uint = 1 << 17;
/// `IBV_DEVICE_MEM_MGT_EXTENSIONS` (fast-register MRs, remote invalidation).
pub const IBV_DEVICE_MEM_MGT_EXTENSIONS: c_uint = 1 << 21;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The `wr` union of `ibv_send_wr`, sized by its largest member (atomic:
/// three u64 and a u32).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_wr_rdma,
    _atomic: [u64; 4],
}

/// The trailing union of `ibv_send_wr` (`bind_mw` is the largest: a
/// pointer, a u32, then `ibv_mw_bind_info` of a pointer, two u64 and an
/// unsigned int).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_tail {
    pub bind_mw: ibv_bind_mw_wr,
    _size: [u64; 6],
}

/// `bind_mw` of `ibv_send_wr` (`IBV_WR_BIND_MW`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_bind_mw_wr {
    pub mw: *mut ibv_mw,
    /// The window's new rkey (`ibv_inc_rkey` of its current one).
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `imm_data` / `invalidate_rkey`.
    pub invalidate_rkey: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    pub tail: ibv_send_wr_tail,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `imm_data` / `invalidated_rkey`.
    pub invalidated_rkey: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

pub const IBV_QPT_RC: c_int = 2;

// enum ibv_wr_opcode
pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_SEND: c_int = 2;
pub const IBV_WR_RDMA_READ: c_int = 4;
pub const IBV_WR_LOCAL_INV: c_int = 7;
pub const IBV_WR_BIND_MW: c_int = 8;
pub const IBV_WR_SEND_WITH_INV: c_int = 9;

// enum ibv_send_flags
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;

// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;

// enum ibv_wc_flags
pub const IBV_WC_WITH_INV: c_uint = 1 << 3;
/// The kernel's `IB_WC_WITH_INVALIDATE` (1 << 2), which Linux rxe writes
/// into user-mapped CQs unconverted (libibverbs' `IBV_WC_IP_CSUM_OK`).
pub const IB_WC_WITH_INVALIDATE_KERNEL: c_uint = 1 << 2;
/// Linux rxe's `vendor_id` (`RXE_VENDOR_ID`).
pub const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

/// `struct ibv_async_event` (filled by `ibv_get_async_event`): the
/// object the event is about (`element`: a CQ, QP, SRQ or WQ pointer, or
/// a port number) and `enum ibv_event_type`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: c_int,
}

impl Default for ibv_async_event {
    fn default() -> Self {
        ibv_async_event {
            element: std::ptr::null_mut(),
            event_type: -1,
        }
    }
}

/// `enum ibv_event_type` values we act on.
pub const IBV_EVENT_CQ_ERR: c_int = 0;
/// See [`IBV_EVENT_CQ_ERR`].
pub const IBV_EVENT_QP_FATAL: c_int = 1;
/// See [`IBV_EVENT_CQ_ERR`].
pub const IBV_EVENT_QP_REQ_ERR: c_int = 2;
/// See [`IBV_EVENT_CQ_ERR`].
pub const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
/// See [`IBV_EVENT_CQ_ERR`].
pub const IBV_EVENT_DEVICE_FATAL: c_int = 8;

// enum ibv_wc_status
pub const IBV_WC_SUCCESS: c_int = 0;
pub const IBV_WC_LOC_LEN_ERR: c_int = 1;
pub const IBV_WC_LOC_QP_OP_ERR: c_int = 2;
pub const IBV_WC_LOC_EEC_OP_ERR: c_int = 3;
pub const IBV_WC_LOC_PROT_ERR: c_int = 4;
pub const IBV_WC_WR_FLUSH_ERR: c_int = 5;
pub const IBV_WC_MW_BIND_ERR: c_int = 6;
pub const IBV_WC_BAD_RESP_ERR: c_int = 7;
pub const IBV_WC_LOC_ACCESS_ERR: c_int = 8;
pub const IBV_WC_REM_INV_REQ_ERR: c_int = 9;
pub const IBV_WC_REM_ACCESS_ERR: c_int = 10;
pub const IBV_WC_REM_OP_ERR: c_int = 11;
pub const IBV_WC_RETRY_EXC_ERR: c_int = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: c_int = 13;
pub const IBV_WC_LOC_RDD_VIOL_ERR: c_int = 14;
pub const IBV_WC_REM_INV_RD_REQ_ERR: c_int = 15;
pub const IBV_WC_REM_ABORT_ERR: c_int = 16;
pub const IBV_WC_INV_EECN_ERR: c_int = 17;
pub const IBV_WC_INV_EEC_STATE_ERR: c_int = 18;
pub const IBV_WC_FATAL_ERR: c_int = 19;
pub const IBV_WC_RESP_TIMEOUT_ERR: c_int = 20;
pub const IBV_WC_GENERAL_ERR: c_int = 21;

// ----- librdmacm -----

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` up to the route's two addresses (read only; the
/// inline `rdma_get_local_addr` / `rdma_get_peer_addr` read them so).
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub src_addr: sockaddr_storage,
    pub dst_addr: sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event` with the connection member of its `param`
/// union (read only).
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_int,
    pub status: c_int,
    pub conn: rdma_conn_param,
}

pub const RDMA_PS_TCP: c_int = 0x0106;

// enum rdma_cm_event_type
pub const RDMA_CM_EVENT_ADDR_RESOLVED: c_int = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: c_int = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: c_int = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: c_int = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: c_int = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: c_int = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: c_int = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: c_int = 7;
pub const RDMA_CM_EVENT_REJECTED: c_int = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: c_int = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: c_int = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: c_int = 11;
pub const RDMA_CM_EVENT_ADDR_CHANGE: c_int = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: c_int = 15;

/// Function pointer types of the exported symbols we resolve.
pub mod fns {
    use super::*;
    pub type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
    pub type FreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
    pub type GetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
    pub type OpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
    pub type CloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
    pub type QueryDevice = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    pub type AllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
    pub type DeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
    pub type RegMrIova =
        unsafe extern "C" fn(*mut ibv_pd, *mut c_void, size_t, u64, c_int) -> *mut ibv_mr;
    pub type DeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
    pub type CreateCompChannel = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel;
    pub type DestroyCompChannel = unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int;
    pub type CreateCq = unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq;
    pub type DestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
    pub type GetCqEvent =
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    pub type AckCqEvents = unsafe extern "C" fn(*mut ibv_cq, c_uint);
    pub type GetAsyncEvent = unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
    pub type AckAsyncEvent = unsafe extern "C" fn(*mut ibv_async_event);

    pub type CreateEventChannel = unsafe extern "C" fn() -> *mut rdma_event_channel;
    pub type DestroyEventChannel = unsafe extern "C" fn(*mut rdma_event_channel);
    pub type CreateId = unsafe extern "C" fn(
        *mut rdma_event_channel,
        *mut *mut rdma_cm_id,
        *mut c_void,
        c_int,
    ) -> c_int;
    pub type DestroyId = unsafe extern "C" fn(*mut rdma_cm_id) -> c_int;
    pub type BindAddr = unsafe extern "C" fn(*mut rdma_cm_id, *mut sockaddr) -> c_int;
    pub type ResolveAddr =
        unsafe extern "C" fn(*mut rdma_cm_id, *mut sockaddr, *mut sockaddr, c_int) -> c_int;
    pub type ResolveRoute = unsafe extern "C" fn(*mut rdma_cm_id, c_int) -> c_int;
    pub type CreateQp =
        unsafe extern "C" fn(*mut rdma_cm_id, *mut ibv_pd, *mut ibv_qp_init_attr) -> c_int;
    pub type DestroyQp = unsafe extern "C" fn(*mut rdma_cm_id);
    pub type Connect = unsafe extern "C" fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
    pub type Listen = unsafe extern "C" fn(*mut rdma_cm_id, c_int) -> c_int;
    pub type Reject = unsafe extern "C" fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
    pub type Disconnect = unsafe extern "C" fn(*mut rdma_cm_id) -> c_int;
    pub type GetCmEvent =
        unsafe extern "C" fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
    pub type AckCmEvent = unsafe extern "C" fn(*mut rdma_cm_event) -> c_int;
    pub type MigrateId = unsafe extern "C" fn(*mut rdma_cm_id, *mut rdma_event_channel) -> c_int;
    pub type EventStr = unsafe extern "C" fn(c_int) -> *const c_char;
    /// `rdma_get_devices`: the RDMA CM's open device contexts (each one
    /// referenced until `rdma_free_devices`), NULL-terminated.
    pub type GetCmDevices = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_context;
    pub type FreeCmDevices = unsafe extern "C" fn(*mut *mut ibv_context);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Sizes and offsets of what we allocate or index, from the C headers
    /// (x86-64 / aarch64 LP64).
    #[test]
    fn abi_layout_matches_the_headers() {
        assert_eq!(offset_of!(ibv_device, transport_type), 20);
        assert_eq!(size_of::<ibv_async_event>(), 16);
        assert_eq!(offset_of!(ibv_async_event, event_type), 8);
        assert_eq!(offset_of!(ibv_device, name), 24);
        assert_eq!(size_of::<ibv_context_ops>(), 32 * 8);
        assert_eq!(offset_of!(ibv_context_ops, alloc_mw), 7 * 8);
        assert_eq!(offset_of!(ibv_context_ops, dealloc_mw), 9 * 8);
        assert_eq!(offset_of!(ibv_context_ops, poll_cq), 11 * 8);
        assert_eq!(offset_of!(ibv_mw, rkey), 16);
        assert_eq!(size_of::<ibv_mw>(), 32);
        assert_eq!(offset_of!(ibv_send_wr, tail), 80);
        assert_eq!(offset_of!(ibv_bind_mw_wr, rkey), 8);
        assert_eq!(offset_of!(ibv_bind_mw_wr, bind_info), 16);
        assert_eq!(offset_of!(ibv_mw_bind_info, addr), 8);
        assert_eq!(offset_of!(ibv_mw_bind_info, length), 16);
        assert_eq!(offset_of!(ibv_mw_bind_info, mw_access_flags), 24);
        assert_eq!(size_of::<ibv_send_wr_tail>(), 48);
        assert_eq!(ibv_inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(ibv_inc_rkey(0x1234_5607), 0x1234_5608);
        assert_eq!(offset_of!(ibv_context_ops, req_notify_cq), 12 * 8);
        assert_eq!(offset_of!(ibv_context_ops, post_send), 25 * 8);
        assert_eq!(offset_of!(ibv_context_ops, post_recv), 26 * 8);
        assert_eq!(offset_of!(ibv_context, async_fd), 8 + 256 + 4);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(size_of::<ibv_recv_wr>(), 32);
        assert_eq!(offset_of!(ibv_send_wr, wr), 40);
        assert_eq!(offset_of!(ibv_send_wr, remote_srqn), 72);
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(size_of::<ibv_device_attr>(), 232);
        assert_eq!(offset_of!(ibv_device_attr, device_cap_flags), 116);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_init_rd_atom), 156);
        assert_eq!(offset_of!(ibv_device_attr, max_mw), 176);
        assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
        assert_eq!(offset_of!(ibv_mr, lkey), 36);
        assert_eq!(size_of::<rdma_conn_param>(), 24);
        assert_eq!(offset_of!(rdma_cm_event, conn), 24);
        assert_eq!(offset_of!(rdma_cm_id, src_addr), 32);
        assert_eq!(offset_of!(rdma_cm_id, dst_addr), 160);
    }
}
