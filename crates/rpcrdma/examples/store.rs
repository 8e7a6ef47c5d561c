//! A user-defined program served and called over RPC-over-RDMA (software
//! iWARP on 127.0.0.1): a block store whose PUT argument and GET result are
//! DDP-eligible, so their octets move by RDMA Read and RDMA Write instead of
//! inline in the Send.
//!
//! ```text
//! program STORE_PROG {
//!     version STORE_V1 {
//!         void            STORE_NULL(void)      = 0;
//!         unsigned int    STORE_PUT(put_args)   = 1;  /* data DDP-eligible; returns its length */
//!         opaque<1048576> STORE_GET(get_args)   = 2;  /* result DDP-eligible */
//!     } = 1;
//! } = 0x20001234;
//! struct put_args { unsigned int key; opaque data<1048576>; };
//! struct get_args { unsigned int key; unsigned int count; };
//! ```
//!
//! `cargo run -p rpcrdma --example store`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rpcrdma::program::{DdpOpaque, Procedure, Program};
use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{CallOptions, ClientConfig, HandlerError, Server};

const PROG: u32 = 0x2000_1234;
const MAX: u32 = 1 << 20;
type Data = DdpOpaque<MAX>;

struct Null;
impl Procedure for Null {
    const PROG: u32 = PROG;
    const VERS: u32 = 1;
    const PROC: u32 = 0;
    const NAME: &'static str = "STORE_NULL";
    type Arg = ();
    type Res = ();
}

/// PUT (key, data): data is DDP-eligible (a Read chunk over RDMA).
struct Put;
impl Procedure for Put {
    const PROG: u32 = PROG;
    const VERS: u32 = 1;
    const PROC: u32 = 1;
    const NAME: &'static str = "STORE_PUT";
    type Arg = (u32, Data);
    type Res = u32;
}

/// GET (key, count): the data comes back by RDMA Write into a Write chunk
/// of `count` octets.
struct Get;
impl Procedure for Get {
    const PROG: u32 = PROG;
    const VERS: u32 = 1;
    const PROC: u32 = 2;
    const NAME: &'static str = "STORE_GET";
    type Arg = (u32, u32);
    type Res = Data;
    fn call_options(&(_, count): &(u32, u32)) -> CallOptions {
        CallOptions::with_ddp_results(&[count])
    }
}

/// Serves the store, puts and gets 256 KiB; returns what the client's
/// transport counted (RDMA Reads and Writes).
pub async fn run() -> Result<(u64, u64), Box<dyn std::error::Error>> {
    // The server: one typed handler per procedure.
    let blocks: Arc<Mutex<HashMap<u32, Data>>> = Arc::default();
    let (b1, b2) = (blocks.clone(), blocks.clone());
    let server = Server::default();
    server.register_program(
        Program::new(PROG, 1)
            .procedure::<Null, _, _>(|_, ()| async { Ok(()) })
            .procedure::<Put, _, _>(move |_, (key, data): (u32, Data)| {
                let n = data.len() as u32;
                b1.lock().unwrap().insert(key, data);
                async move { Ok(n) }
            })
            .procedure::<Get, _, _>(move |_, (key, count)| {
                let got = b2.lock().unwrap().get(&key).cloned();
                async move {
                    let d =
                        got.ok_or_else(|| HandlerError::SystemErr(format!("no block {key}")))?;
                    let d = d.into_bytes();
                    Ok(Data::from(d.slice(..d.len().min(count as usize))))
                }
            }),
    );
    let rdma = RdmaServer::serve(&server, "127.0.0.1:0", RdmaServerConfig::default()).await?;

    // The client: typed calls.
    let (client, transport) = connect_client(
        rdma.local_addr(),
        ClientConfig::default(),
        RdmaClientConfig::default(),
    )
    .await?;
    client.call_typed::<Null>(&()).await?;
    let block: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 251) as u8).collect();
    let n = client
        .call_typed::<Put>(&(7, Data::from(block.clone())))
        .await?;
    assert_eq!(n as usize, block.len());
    let back = client.call_typed::<Get>(&(7, n)).await?;
    assert_eq!(&back[..], &block[..]);
    println!("put and got {n} octets over RPC-over-RDMA");

    let st = transport.status();
    transport.shutdown().await;
    rdma.shutdown().await;
    Ok((st.engine.read_chunks, st.engine.write_chunks))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (reads, writes) = rt.block_on(run())?;
    println!("read chunks {reads}, write chunks {writes}");
    Ok(())
}
