#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rpcrdma_iwarp::fuzzing::fuzz_dissect(data));
