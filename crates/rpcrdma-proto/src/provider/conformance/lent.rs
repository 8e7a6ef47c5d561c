//! The conformance check of receive buffers lent by the provider
//! ([`Provider::register_recv`]).

use super::{err, send_wr, CheckResult, Harness};
use super::{register_filled, Failure};
use crate::provider::{Access, MemoryRegion, Provider, ProviderError, RecvWr};

fn register_filled_any<P: Provider>(
    p: &mut P,
    len: usize,
    fill: u8,
) -> Result<MemoryRegion, Failure> {
    register_filled(p, len, fill, Access::NONE).map_err(|e| err("lent_receive_buffers", e))
}

/// A receive buffer from [`Provider::register_recv`] receives like any
/// other, and a receive into it shows the message it got: exactly that
/// message for a lending provider (whose region is as long as what was
/// placed: a second, shorter message never shows the end of the first).
/// A lending provider refuses the region as a Send source.
pub fn lent_receive_buffers<P: Provider>(h: &mut Harness<P>) -> CheckResult {
    const N: &str = "lent_receive_buffers";
    let rb = h.b.register_recv(16).map_err(|e| err(N, e))?;
    ensure!(N, rb.len() == 16, "registered length {}", rb.len());
    ensure!(
        N,
        rb.access() == Access::LOCAL_WRITE,
        "access {:?}",
        rb.access()
    );
    let long = register_filled_any(&mut h.a, 12, 7)?;
    let short = register_filled_any(&mut h.a, 4, 9)?;
    let mut lending = None;
    for (round, (src, len, fill)) in [(&long, 12usize, 7u8), (&short, 4, 9)]
        .into_iter()
        .enumerate()
    {
        let wr_id = 10 + round as u64;
        h.b.post_recv(RecvWr {
            wr_id,
            sge: rb.sge(0, 16),
        })
        .map_err(|e| err(N, e))?;
        h.a.post_send(send_wr(wr_id, src, 0, len as u32))
            .map_err(|e| err(N, e))?;
        ensure!(N, h.wait(round + 1, round + 1), "no completions");
        let c = h.cb[round];
        ensure!(
            N,
            c.wr_id == wr_id && c.status.is_ok() && c.byte_len as usize == len,
            "receive {c:?}"
        );
        let got = h.b.region(&rb).map_err(|e| err(N, e))?;
        ensure!(
            N,
            got.get(..len).is_some_and(|g| g.iter().all(|&b| b == fill)),
            "received {got:?}"
        );
        // A provider that shows the whole buffer lends nothing; one that
        // shows less shows exactly the message, every time.
        let l = *lending.get_or_insert(got.len() != 16);
        ensure!(
            N,
            !l || got.len() == len,
            "a lent buffer shows {} octets after a {len}-octet message: {got:?}",
            got.len()
        );
    }
    if lending == Some(true) {
        let r = h.b.post_send(send_wr(20, &rb, 0, 4));
        ensure!(
            N,
            matches!(r, Err(ProviderError::InvalidArgument(_))),
            "a lent receive buffer as a Send source: {r:?}"
        );
        ensure!(
            N,
            matches!(h.b.region_mut(&rb), Err(ProviderError::InvalidArgument(_))),
            "a lent receive buffer written by its owner"
        );
    }
    let back = h.b.deregister(&rb).map_err(|e| err(N, e))?;
    ensure!(
        N,
        lending != Some(true) || back.is_empty(),
        "a lent buffer's deregistration gave back {} octets",
        back.len()
    );
    Ok(())
}
