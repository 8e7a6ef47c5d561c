//! The typed layer (`rpcrdma::program`): procedures declared once, called
//! with `Client::call_typed` and served by a `Program`, over TCP and over
//! RPC-over-RDMA (software iWARP), where DDP-eligible arguments and results
//! travel in Read and Write chunks; the wire answers to bad input
//! (GARBAGE_ARGS for undecodable or trailing arguments, PROC_UNAVAIL for an
//! undeclared procedure) and the `store` example run as a test.

#[allow(dead_code)]
#[path = "../examples/store.rs"]
mod store;

use rpcrdma::program::{DdpOpaque, Opaque, Procedure, Program, MAX_ARRAY};
use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::{Client, ClientConfig, Message, ReplyError, Server, TcpConfig};

const PROG: u32 = 0x2000_7777;

/// `(string name<16>, unsigned hyper n<>)` -> `(bool, unsigned int)`.
struct Sum;
impl Procedure for Sum {
    const PROG: u32 = PROG;
    const VERS: u32 = 2;
    const PROC: u32 = 1;
    const NAME: &'static str = "SUM";
    type Arg = (Opaque<16>, Vec<u64>);
    type Res = (bool, u64);
}

/// DDP-eligible both ways: returns its argument reversed.
struct Reverse;
impl Procedure for Reverse {
    const PROG: u32 = PROG;
    const VERS: u32 = 2;
    const PROC: u32 = 2;
    const NAME: &'static str = "REVERSE";
    type Arg = DdpOpaque<{ 1 << 20 }>;
    type Res = (u32, DdpOpaque<{ 1 << 20 }>);
}

/// Declared on the client only: the server answers PROC_UNAVAIL.
struct Missing;
impl Procedure for Missing {
    const PROG: u32 = PROG;
    const VERS: u32 = 2;
    const PROC: u32 = 9;
    const NAME: &'static str = "MISSING";
    type Arg = ();
    type Res = ();
}

fn server() -> Server {
    let s = Server::default();
    s.register_program(
        Program::new(PROG, 2)
            .procedure::<Sum, _, _>(|_, (name, ns): (Opaque<16>, Vec<u64>)| async move {
                Ok((&name[..] == b"sum", ns.iter().sum()))
            })
            .procedure::<Reverse, _, _>(|_, data: DdpOpaque<{ 1 << 20 }>| async move {
                let mut v = data.to_vec();
                v.reverse();
                Ok((v.len() as u32, DdpOpaque::from(v)))
            }),
    );
    s
}

async fn checks(c: &Client) {
    let r = c
        .call_typed::<Sum>(&(Opaque::from(&b"sum"[..]), vec![1, 2, 3 << 40]))
        .await
        .unwrap();
    assert_eq!(r, (true, 3 + (3 << 40)));
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let (n, back) = c
        .call_typed::<Reverse>(&DdpOpaque::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(n, 100_000);
    assert!(back.iter().eq(data.iter().rev()));
    // Undeclared procedure, arguments too long or left over: the RPC answers.
    let e = c.call_typed::<Missing>(&()).await.unwrap_err();
    assert_eq!(e.reply_error(), Some(ReplyError::ProcUnavail), "{e}");
    let garbage = |args: Message| async move {
        let e = c.call(PROG, 2, 1, args, &[]).await.unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::GarbageArgs), "{e}");
    };
    let mut b = Message::builder();
    b.put_opaque(&[b'x'; 17]).unwrap().put_u32(0);
    garbage(b.finish()).await; // name<16> exceeded
    let mut b = Message::builder();
    b.put_opaque(b"sum").unwrap().put_u32(0).put_u32(7);
    garbage(b.finish()).await; // a word left over
    let mut b = Message::builder();
    b.put_opaque(b"sum").unwrap().put_u32(MAX_ARRAY + 1);
    garbage(b.finish()).await; // an array over MAX_ARRAY, refused before allocating
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_over_tcp() {
    let tcp = server()
        .serve_tcp("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let c = Client::connect_tcp(
        tcp.local_addr(),
        ClientConfig::default(),
        TcpConfig::default(),
    )
    .await
    .unwrap();
    checks(&c).await;
    tcp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_over_rdma_move_ddp_items_in_chunks() {
    let rdma = RdmaServer::serve(&server(), "127.0.0.1:0", RdmaServerConfig::default())
        .await
        .unwrap();
    let (c, t) = connect_client(
        rdma.local_addr(),
        ClientConfig::default(),
        RdmaClientConfig::default(),
    )
    .await
    .unwrap();
    checks(&c).await;
    let st = t.status().engine;
    // REVERSE: its argument by a Read chunk, its result by a Write chunk.
    assert_eq!((st.read_chunks, st.write_chunks), (1, 1), "{st:?}");
    t.shutdown().await;
    rdma.shutdown().await;
}

#[test]
fn the_store_example_runs() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (reads, writes) = rt.block_on(store::run()).unwrap();
    assert_eq!((reads, writes), (1, 1));
}

#[test]
fn a_procedure_of_another_program_is_refused_at_registration() {
    let r = std::panic::catch_unwind(|| {
        Program::new(PROG, 3).procedure::<Missing, _, _>(|_, ()| async { Ok(()) })
    });
    assert!(r.is_err());
}
