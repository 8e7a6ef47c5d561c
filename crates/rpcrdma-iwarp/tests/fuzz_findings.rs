//! Defects the `qp_segments` fuzz target found in the queue pair, each as
//! a hand-built regression test and as the fuzzer's input
//! (`fuzz/regressions/qp_segments/`, replayed through the entry point with
//! every check on). Both failed until the fixes of DDP message continuity
//! (MO) and of Read Response validation.

use std::path::Path;

use rpcrdma_iwarp::fuzzing::env::{Env, READ_WR, RECV_WR};
use rpcrdma_iwarp::mpa::fpdu::{FpduSender, FramingConfig};
use rpcrdma_iwarp::qp::StreamParams;
use rpcrdma_iwarp::rdmap::{self, Opcode};
use rpcrdma_proto::provider::{Completion, Status};

/// Feeds `ulpdus`, framed (no CRC, no Markers), one FPDU each; returns
/// the completions.
fn feed(env: &mut Env, ulpdus: &[Vec<u8>]) -> Vec<Completion> {
    let mut tx = FpduSender::new(FramingConfig::default());
    for u in ulpdus {
        let f = tx.fpdu_to_vec(&[u]).unwrap();
        env.qp.handle_input(&f);
    }
    let mut cq = Vec::new();
    env.qp.poll_completions(&mut cq);
    cq
}

fn send(msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = rdmap::send_header(Opcode::SEND, msn, mo, last, 0)
        .unwrap()
        .to_vec();
    v.extend_from_slice(payload);
    v
}

fn received_ok(cq: &[Completion]) -> Option<&Completion> {
    cq.iter()
        .find(|c| c.wr_id == RECV_WR && c.status == Status::Success)
}

#[test]
fn a_send_of_only_its_last_segment_delivers_no_stale_octets() {
    let mut env = Env::new(StreamParams::DEFAULT);
    // MSN 1, only its last segment, at MO 8: octets 0..8 were never sent.
    let cq = feed(&mut env, &[send(1, 8, true, b"tail")]);
    assert_eq!(
        received_ok(&cq),
        None,
        "a 12-octet message was delivered of which 8 octets are stale buffer contents"
    );
}

#[test]
fn a_send_with_a_hole_between_segments_delivers_no_stale_octets() {
    let mut env = Env::new(StreamParams::DEFAULT);
    // Octets 0..4 and 8..12 arrive, 4..8 never do.
    let cq = feed(
        &mut env,
        &[send(1, 0, false, b"head"), send(1, 8, true, b"tail")],
    );
    assert_eq!(
        received_ok(&cq),
        None,
        "a message with a hole was delivered"
    );
}

#[test]
fn a_short_read_response_with_last_does_not_complete_the_read() {
    let mut env = Env::new(StreamParams::DEFAULT);
    let (sink, sink_to, len) = env.reads[0];
    assert!(len > 10);
    let mut r = rdmap::read_response_header(sink, sink_to, true).to_vec();
    r.extend_from_slice(&[7; 10]);
    let cq = feed(&mut env, &[r]);
    let ok = cq
        .iter()
        .find(|c| c.wr_id == READ_WR && c.status == Status::Success);
    assert_eq!(
        ok, None,
        "an RDMA Read of {len} octets completed after 10 were placed"
    );
}

#[test]
fn fuzzer_inputs_pass_every_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/qp_segments");
    let n = rpcrdma_proto::fuzzing::replay_dir(
        &dir,
        "qp_segments",
        rpcrdma_iwarp::fuzzing::fuzz_qp_segments,
    );
    assert!(n > 0);
}

/// `mpa_stream` inputs that once made the queue pair and `FpduReceiver`
/// disagree: a Marker pointing 4 octets past the start of an FPDU that
/// does not begin with a Marker was accepted by the queue pair (which then
/// failed the FPDU's CRC instead of its Marker).
#[test]
fn mpa_stream_inputs_give_one_verdict_on_every_path() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/mpa_stream");
    let n = rpcrdma_proto::fuzzing::replay_dir(
        &dir,
        "mpa_stream",
        rpcrdma_iwarp::fuzzing::fuzz_mpa_stream,
    );
    assert!(n > 0);
}
