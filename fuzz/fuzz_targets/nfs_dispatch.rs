#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rpcrdma_nfs::fuzzing::fuzz_nfs_dispatch(data));
