#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| rpcrdma_proto::fuzzing::fuzz_engine_v2(data));
