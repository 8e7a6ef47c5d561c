//! What the verbs provider says on a machine that cannot run it, and what
//! it finds on one that can. These run everywhere: they check the exact
//! one-line diagnosis (rdma-core missing, or no device), never pass
//! silently.

use std::net::SocketAddr;
use std::time::Duration;

use rpcrdma_proto::provider::cm::{CmError, ConnectionManager};
use rpcrdma_proto::provider::ConnectParams;
use rpcrdma_verbs::{devices, Unavailable, VerbsCm};

const NO_DEVICE: &str = "no RDMA device found (libibverbs loaded, 0 devices)";
const NO_RDMACM: &str = "librdmacm.so.1 not found: install rdma-core";
const NO_IBVERBS: &str = "libibverbs.so.1 not found: install rdma-core";

/// The one line every entry point gives when the provider cannot run.
fn expected_line() -> Option<String> {
    match devices() {
        Ok(list) => {
            assert!(!list.is_empty(), "Ok with no device");
            eprintln!("verbs devices here: {list:?}");
            None
        }
        Err(e) => {
            let line = e.to_string();
            match &e {
                Unavailable::NoDevice => assert_eq!(line, NO_DEVICE),
                Unavailable::Load(_) => assert!(
                    line == NO_RDMACM || line == NO_IBVERBS,
                    "unexpected load error line: {line}"
                ),
            }
            eprintln!(
                "verbs provider unavailable here (as expected on a machine without RDMA): {line}"
            );
            Some(line)
        }
    }
}

#[test]
fn connect_and_listen_say_why_in_one_line() {
    let Some(line) = expected_line() else {
        eprintln!(
            "SKIPPED: this machine has an RDMA device; the no-device diagnosis is not exercised"
        );
        return;
    };
    let cm = VerbsCm::default();
    let to: SocketAddr = "127.0.0.1:20049".parse().expect("addr");
    let params = ConnectParams {
        private_data: vec![1, 2, 3],
        ird: 1,
        ord: 1,
    };
    match cm.connect(to, &params, Duration::from_secs(1)) {
        Err(CmError::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
            assert_eq!(e.to_string(), line);
        }
        Err(e) => panic!("connect: {e:?}"),
        Ok(_) => panic!("connect succeeded without a device"),
    }
    match cm.listen("127.0.0.1:0".parse().expect("addr")) {
        Err(CmError::Io(e)) => assert_eq!(e.to_string(), line),
        Err(e) => panic!("listen: {e:?}"),
        Ok(_) => panic!("listen succeeded without a device"),
    }
}

#[test]
fn describe_is_one_line() {
    let d = rpcrdma_verbs::describe();
    assert!(!d.is_empty() && !d.contains('\n'), "{d:?}");
    if let Some(line) = expected_line() {
        assert_eq!(d, line);
    }
}
