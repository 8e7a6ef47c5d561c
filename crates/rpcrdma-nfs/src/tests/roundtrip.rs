//! Every procedure's arguments and results: encode, exact length, decode
//! back to the same value — plain, and through runtime messages (the
//! DDP-eligible item as a DDP piece of a call, or as a Write-chunk result
//! of an RDMA reply).

use proptest::prelude::*;
use rpcrdma::Message;
use rpcrdma_proto::xdr::Reader;
use rpcrdma_proto::XdrEncode;

use crate::binding::message::{decode_args, decode_res, encode_args, encode_res};
use crate::mount::{self, MountArgs, MountResults};
use crate::nfs3::{self, gen_args, gen_res, DdpParts, Inline, Nfs3Args, Nfs3Res};
use crate::testgen::Rng;
use crate::Limits;

const L: Limits = Limits::DEFAULT;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn nfs3_args_round_trip(seed: u64) {
        let mut g = Rng::new(seed);
        for &p in nfs3::PROCEDURES {
            let a = gen_args(p, &mut g).unwrap();
            let bytes = a.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), a.encoded_len());
            let back = Nfs3Args::decode(p, &mut Reader::new(&bytes), &L, &mut Inline).unwrap();
            prop_assert_eq!(&back, &a);
            // As a call message: head inline, DDP-eligible item a DDP piece.
            let m = encode_args(&a).unwrap();
            prop_assert_eq!(m.xdr_len(), bytes.len());
            prop_assert_eq!(m.ddp_count(), usize::from(a.ddp_item().is_some()));
            prop_assert_eq!(decode_args(p, &m, &L), a.check(&L).map(|()| a.clone()));
        }
    }

    #[test]
    fn nfs3_results_round_trip(seed: u64) {
        let mut g = Rng::new(seed);
        for &p in nfs3::PROCEDURES {
            let v = gen_res(p, &mut g).unwrap();
            let bytes = v.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), v.encoded_len());
            let back = Nfs3Res::decode(p, &mut Reader::new(&bytes), &L, &mut Inline).unwrap();
            prop_assert_eq!(&back, &v);
            let m = encode_res(&v).unwrap();
            prop_assert_eq!(&m.flatten()[..], &bytes[..]);
            prop_assert_eq!(decode_res(p, &m, &L).unwrap(), v.clone());
            // As an RDMA reply whose DDP-eligible item went into the Write
            // chunk: the inline stream keeps the length word only.
            if let Some(data) = v.ddp_item().filter(|d| !d.is_empty()) {
                let inline = bytes[..v.head_len() + 4].to_vec();
                let rdma = Message::with_results(inline, [data]);
                prop_assert_eq!(decode_res(p, &rdma, &L).unwrap(), v.clone());
            }
        }
    }

    #[test]
    fn mount_round_trip(seed: u64) {
        let mut g = Rng::new(seed);
        for &p in mount::PROCEDURES {
            let a = mount::gen::args(p, &mut g).unwrap();
            let bytes = a.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), a.encoded_len());
            prop_assert_eq!(MountArgs::decode(p, &mut Reader::new(&bytes), &L).unwrap(), a);
            let v = mount::gen::results(p, &mut g).unwrap();
            let bytes = v.to_vec().unwrap();
            prop_assert_eq!(bytes.len(), v.encoded_len());
            prop_assert_eq!(MountResults::decode(p, &mut Reader::new(&bytes), &L).unwrap(), v);
        }
    }

    /// Any octets: what decodes re-encodes to them (the fuzz entry point,
    /// on proptest's inputs).
    #[test]
    fn arbitrary_octets_decode_or_refuse(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        crate::fuzzing::fuzz_nfs_args(&data);
    }
}

/// Writes the seed corpus of the `nfs_args` fuzz target (valid arguments
/// of every NFSv3 and MOUNT procedure, and a few results):
/// `cargo test -p rpcrdma-nfs -- --ignored write_seed_corpus`.
#[test]
#[ignore = "writes fuzz/corpus/nfs_args"]
fn write_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nfs_args");
    std::fs::create_dir_all(&dir).unwrap();
    let mut g = Rng::new(0x5eed);
    let write = |name: String, b: Vec<u8>| std::fs::write(dir.join(name), b).unwrap();
    for &p in nfs3::PROCEDURES {
        for i in 0..2 {
            write(
                format!("seed-nfs3-args-{p:02}-{i}"),
                gen_args(p, &mut g).unwrap().to_vec().unwrap(),
            );
        }
        write(
            format!("seed-nfs3-res-{p:02}"),
            gen_res(p, &mut g).unwrap().to_vec().unwrap(),
        );
    }
    for &p in mount::PROCEDURES {
        write(
            format!("seed-mount-args-{p}"),
            mount::gen::args(p, &mut g).unwrap().to_vec().unwrap(),
        );
        write(
            format!("seed-mount-res-{p}"),
            mount::gen::results(p, &mut g).unwrap().to_vec().unwrap(),
        );
    }
}
