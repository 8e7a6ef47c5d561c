//! `--provider verbs` on the command line. On a machine without an RDMA
//! device (the development machines and CI) every RDMA command says why in
//! one line and fails; with a device the lab (`scripts/interop-verbs`)
//! exercises it, and these checks print SKIPPED.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rpcrdma");

const LINES: [&str; 3] = [
    "no RDMA device found (libibverbs loaded, 0 devices)",
    "librdmacm.so.1 not found: install rdma-core",
    "libibverbs.so.1 not found: install rdma-core",
];

fn has_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

fn fails_with_one_line(args: &[&str]) {
    let o = Command::new(BIN).args(args).output().expect("run rpcrdma");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded: {o:?}");
    assert!(
        LINES.iter().any(|l| err.trim_end().ends_with(l)) && err.trim_end().lines().count() == 1,
        "{args:?}: stderr {err:?}"
    );
}

#[test]
fn verbs_without_a_device_says_why() {
    if has_device() {
        eprintln!("SKIPPED: this machine has an RDMA device; see scripts/interop-verbs");
        return;
    }
    fails_with_one_line(&["probe", "127.0.0.1:9", "--provider", "verbs"]);
    fails_with_one_line(&["call", "127.0.0.1:9", "--provider", "verbs"]);
    fails_with_one_line(&[
        "probe",
        "127.0.0.1:9",
        "--provider",
        "verbs",
        "--device",
        "siw0",
    ]);
    fails_with_one_line(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--duration",
        "1",
        "--provider",
        "verbs",
    ]);
}
