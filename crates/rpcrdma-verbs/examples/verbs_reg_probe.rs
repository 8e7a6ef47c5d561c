//! Lab diagnostic: registers memory on the first RDMA device in several
//! ways and prints what each `ibv_reg_mr_iova` returns (errno on failure),
//! to find what a device refuses. `cargo run --example verbs_reg_probe`.

use std::ffi::CStr;
use std::io;
use std::ptr;

use rpcrdma_verbs::libs::rdma;
use rpcrdma_verbs::sys::{IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE};

fn main() {
    let r = match rdma() {
        Ok(r) => r,
        Err(e) => return eprintln!("{e}"),
    };
    let mut n = 0;
    // SAFETY: see the crate's device enumeration; the list is freed at exit.
    let list = unsafe { (r.get_device_list)(&mut n) };
    if list.is_null() || n == 0 {
        return eprintln!("no RDMA device found");
    }
    // SAFETY: n > 0 entries.
    let dev = unsafe { *list };
    // SAFETY: a device of the list.
    let name = unsafe { CStr::from_ptr((r.get_device_name)(dev)) };
    // SAFETY: a device of the list.
    let ctx = unsafe { (r.open_device)(dev) };
    // SAFETY: an open context.
    let pd = unsafe { (r.alloc_pd)(ctx) };
    println!("device {name:?} ctx {ctx:?} pd {pd:?}");
    let heap = vec![0u8; 4096].into_boxed_slice();
    let big = vec![0u8; 1 << 20].into_boxed_slice();
    // SAFETY: an anonymous private mapping of one page.
    let page = unsafe {
        libc::mmap(
            ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    let rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    let cases: [(&str, *mut u8, usize, i32, bool); 8] = [
        (
            "heap 4 KiB, LOCAL_WRITE, iova=addr",
            heap.as_ptr().cast_mut(),
            4096,
            IBV_ACCESS_LOCAL_WRITE,
            true,
        ),
        (
            "heap 4 KiB, access 0, iova=addr",
            heap.as_ptr().cast_mut(),
            4096,
            0,
            true,
        ),
        (
            "heap 4 KiB, RW, iova=addr",
            heap.as_ptr().cast_mut(),
            4096,
            rw,
            true,
        ),
        (
            "heap 4 KiB, LOCAL_WRITE, iova=0",
            heap.as_ptr().cast_mut(),
            4096,
            IBV_ACCESS_LOCAL_WRITE,
            false,
        ),
        (
            "mmap page, LOCAL_WRITE, iova=addr",
            page.cast(),
            4096,
            IBV_ACCESS_LOCAL_WRITE,
            true,
        ),
        (
            "mmap page, LOCAL_WRITE, iova=0",
            page.cast(),
            4096,
            IBV_ACCESS_LOCAL_WRITE,
            false,
        ),
        (
            "heap 1 MiB, LOCAL_WRITE, iova=addr",
            big.as_ptr().cast_mut(),
            1 << 20,
            IBV_ACCESS_LOCAL_WRITE,
            true,
        ),
        (
            "heap 1 MiB, RW, iova=addr",
            big.as_ptr().cast_mut(),
            1 << 20,
            rw,
            true,
        ),
    ];
    for (what, p, len, access, iova_is_addr) in cases {
        let iova = if iova_is_addr { p as u64 } else { 0 };
        // SAFETY: `p..p+len` is mapped memory of this process, alive until
        // the end of main; the MR is deregistered at once.
        let mr = unsafe { (r.reg_mr_iova)(pd, p.cast(), len, iova, access) };
        if mr.is_null() {
            println!("FAIL {what}: {}", io::Error::last_os_error());
        } else {
            // SAFETY: a live MR.
            let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
            println!("ok   {what}: lkey {lkey:#x} rkey {rkey:#x}");
            // SAFETY: deregistered once.
            unsafe { (r.dereg_mr)(mr) };
        }
    }
}
