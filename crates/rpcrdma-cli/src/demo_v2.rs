//! The version 2 parts of `rpcrdma demo` (draft-cel-nfsv4-rpcrdma-
//! version-two-09): the CONNPROP exchange a version 2 connection starts
//! with, a backchannel call with chunks (Reverse Request Support GENL), and
//! a version 2 -> version 1 fallback against a version 1 only server — each
//! listed as it went on the wire and checked.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rpcrdma::rdma::{RdmaClientTransport, RdmaServer, RdmaServerConfig, RdmaStatus};
use rpcrdma::testprog::{self, TEST_PROG, TEST_VERS};
use rpcrdma::{CallOptions, Client, ClientConfig, Message, Reply, RpcError, Server};
use rpcrdma_proto::engine::{Config as EngineConfig, RpcRdmaVersion};

use crate::demo::{connect_recorded, Session, Tap};

/// One NULL call on `t`, then a moment for the tap to record what it
/// caused on the wire.
async fn null_and_settle(t: &Arc<RdmaClientTransport>) -> Result<Reply, RpcError> {
    let c = Client::new(t.clone(), ClientConfig::default());
    let r = c
        .call_with(
            TEST_PROG,
            TEST_VERS,
            testprog::PROC_NULL,
            Message::new(),
            &CallOptions::default(),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    r
}

/// Prints what the connection's setup sent (version 2: our CONNPROP and
/// the server's) and checks that both went.
pub(crate) async fn connprop_step(t: &Arc<RdmaClientTransport>, sess: &mut Session) -> bool {
    // The exchange is over once the client may call: one NULL settles it.
    let _ = null_and_settle(t).await;
    let lines = sess.print_new();
    println!("\n[v2.0] CONNPROP both ways: each end's transport properties (RBSIZ, BRS), the client's first message");
    for l in &lines {
        println!("    {l}");
    }
    let sent = lines
        .iter()
        .filter(|l| l.contains("RDMA2_CONNPROP"))
        .map(|l| l.starts_with("client"))
        .collect::<Vec<_>>();
    let st = t.status();
    let ok = sent == [true, false] && check_version(&st, 2, false);
    println!(
        "    result: {} (client properties {}; server properties {})",
        if ok { "ok" } else { "FAILED" },
        props(&st.version.local_properties),
        props(&st.version.peer_properties)
    );
    ok
}

fn props(p: &rpcrdma_proto::wire::v2::PropSet) -> String {
    p.props
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The connection speaks `version`, fell back or not.
pub(crate) fn check_version(st: &RdmaStatus, version: u32, fallback: bool) -> bool {
    let ok = st.version.version == version && st.version.fallback == fallback;
    if !ok {
        println!(
            "    version check FAILED: version {} fallback {} (wanted {version} {fallback})",
            st.version.version, st.version.fallback
        );
    }
    ok
}

/// The server calls the test program's READ (1 MiB into a Write chunk the
/// server offers) and WRITE (1 MiB the client pulls from the server's Read
/// chunk) on the client, over the backchannel.
pub(crate) async fn genl_backchannel(tap: &Arc<Tap>) -> Result<String, String> {
    const MIB: u32 = 1 << 20;
    let conn = tap.conn.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let conn = conn.ok_or("no server connection seen")?;
    let bt = conn.backchannel().map_err(|e| e.to_string())?;
    let bc = Client::new(
        bt,
        ClientConfig {
            timeout: Duration::from_secs(20),
            ..ClientConfig::default()
        },
    );
    let mut a = Message::builder();
    a.put_u32(MIB).put_u32(7);
    let o = CallOptions {
        reply_max: Some(4096),
        ddp_results: vec![MIB],
        ..CallOptions::default()
    };
    let r = bc
        .call_with(TEST_PROG, TEST_VERS, testprog::PROC_READ, a.finish(), &o)
        .await
        .map_err(|e| format!("READ over the backchannel: {e}"))?;
    let got = r
        .reader()
        .ddp_opaque(MIB, "count", "data")
        .map_err(|e| e.to_string())?;
    if got[..] != testprog::pattern(7, MIB as usize)[..] {
        return Err("backchannel READ data is not the pattern".into());
    }
    let data = testprog::pattern(8, MIB as usize);
    let mut a = Message::builder();
    a.put_ddp_opaque(Bytes::from(data.clone()))
        .map_err(|e| e.to_string())?;
    let o = CallOptions {
        reply_max: Some(1024),
        ..CallOptions::default()
    };
    let r = bc
        .call_with(TEST_PROG, TEST_VERS, testprog::PROC_WRITE, a.finish(), &o)
        .await
        .map_err(|e| format!("WRITE over the backchannel: {e}"))?;
    let mut rd = r.reader();
    let n = rd.u32("count").map_err(|e| e.to_string())?;
    let crc = rd.u32("crc").map_err(|e| e.to_string())?;
    if n != MIB || crc != crc32c::crc32c(&data) {
        return Err(format!(
            "backchannel WRITE: the client saw {n} octets crc 0x{crc:08x}"
        ));
    }
    Ok(format!(
        "1 MiB each way, server to client, pattern and crc32c 0x{crc:08x} ok"
    ))
}

/// A version 2 -> version 1 fallback: an `auto` client against a version 1
/// only server (which refuses the CONNPROP probe with ERR_VERS in the
/// version 1 layout, as Linux does) goes on in version 1 on the same
/// connection.
pub(crate) async fn fallback() -> Result<(bool, Session), String> {
    let server = Server::default();
    testprog::register(&server);
    let mut scfg = RdmaServerConfig::default();
    scfg.engine.rpcrdma_version = RpcRdmaVersion::V1;
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", scfg)
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let addr = rdma.local_addr();
    println!("\n=== version 2 -> version 1 fallback: an auto client, a version 1 only server on {addr} ===");
    let mut e = EngineConfig::client();
    e.rpcrdma_version = RpcRdmaVersion::Auto;
    let (t, mut sess) = connect_recorded(addr, e).await?;
    let r = null_and_settle(&t).await;
    println!(
        "\n[v2->v1] CONNPROP probe refused with ERR_VERS; NULL in version 1 on the same connection"
    );
    let lines = sess.print_new();
    for l in &lines {
        println!("    {l}");
    }
    let st = t.status();
    let wire = lines.iter().any(|l| l.contains("RDMA2_CONNPROP"))
        && lines.iter().any(|l| l.contains("ERR_VERS"))
        && lines.iter().any(|l| l.contains("RDMA_MSG"));
    let ok = r.is_ok() && wire && check_version(&st, 1, true);
    println!(
        "    result: {} (rpcrdma_version {} version_fallback {})",
        if ok { "ok" } else { "FAILED" },
        st.version.version,
        st.version.fallback
    );
    t.shutdown().await;
    rdma.shutdown().await;
    Ok((ok, sess))
}
