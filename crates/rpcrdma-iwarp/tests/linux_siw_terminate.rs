//! Linux siw sends the Terminate Control field with its Layer and EType
//! nibbles swapped (docs/interop-linux.md, "the Linux NFS client against
//! our server"): `struct iwarp_terminate` in drivers/infiniband/sw/siw/
//! iwarp.h declares `layer:4, etype:4, ecode:8, flag_m:1, flag_d:1,
//! flag_r:1` under `__LITTLE_ENDIAN_BITFIELD`, which puts Layer in the low
//! nibble of the first octet (RFC 5040 §4.8: the high one) and M/D/R in the
//! low bits of the third. We decode the RFC layout, as Wireshark does; this
//! test pins what that makes of the Terminate the lab's siw (Linux 6.1)
//! sent after a false MPA CRC error.

use rpcrdma_iwarp::rdmap::TerminateMessage;
use rpcrdma_iwarp::TerminateCode;

/// The Terminate header of the lab capture (linux-client-crc-on-4096.pcap,
/// the Terminate after `siw: crc error. in: 36aa6252, own 52aa6278, op 0`).
const SIW_CRC_TERMINATE: [u8; 4] = [0x02, 0x02, 0x00, 0x00];

/// The triple read in siw's (little-endian bitfield) order.
fn as_siw_sends(b: &[u8; 4]) -> TerminateCode {
    TerminateCode {
        layer: b[0] & 0x0f,
        etype: b[0] >> 4,
        code: b[1],
    }
}

//= rfc5040#section-4.8
//# The Terminate Control field MUST have the format defined in
//# Figure 8 below.
#[test]
fn siw_terminate_control_has_layer_and_etype_swapped() {
    let t = TerminateMessage::decode(&SIW_CRC_TERMINATE).expect("decodes");
    // The RFC reading (ours, Wireshark's): RDMAP / Remote Operation Error
    // / 0x02, a triple our table does not name.
    assert_eq!(
        t.code,
        TerminateCode {
            layer: 0,
            etype: 2,
            code: 0x02
        }
    );
    assert_eq!(t.code.describe(), None);
    assert!(t.ddp.is_none() && t.rdmap.is_none());
    // What siw meant: LLP / MPA / CRC error (siw_get_trailer's
    // `siw_init_terminate(qp, TERM_ERROR_LAYER_LLP, LLP_ETYPE_MPA,
    // LLP_ECODE_RECEIVED_CRC, 0)`).
    assert_eq!(as_siw_sends(&SIW_CRC_TERMINATE), TerminateCode::MPA_CRC);
    // Our own Terminate for that error puts Layer in the high nibble.
    let ours = TerminateMessage {
        code: TerminateCode::MPA_CRC,
        segment_length_valid: false,
        reserved: 0,
        ddp: None,
        rdmap: None,
    }
    .to_vec();
    assert_eq!(ours[..2], [0x20, 0x02]);
}
