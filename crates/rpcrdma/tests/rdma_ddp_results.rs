//! DDP-eligible reply results placed by the decoder, end to end over
//! loopback software iWARP (127.0.0.1 only) and, for comparison, TCP.
//!
//! A custom program whose replies put more words after a DDP-eligible
//! item, one of them equal to the item's length: the data arrives in a
//! Write chunk, the inline reply keeps the length word and the words after
//! it, and [`MessageReader::ddp_opaque`](rpcrdma::MessageReader::ddp_opaque)
//! takes the data from the Write chunk where the decoder meets the item.

use std::time::Duration;

use rpcrdma::rdma::{connect_client, RdmaClientConfig, RdmaServer, RdmaServerConfig};
use rpcrdma::testprog::pattern;
use rpcrdma::{
    CallContext, CallOptions, Client, ClientConfig, HandlerError, Message, Reply, RpcError, Server,
    TcpConfig,
};

const LIMIT: Duration = Duration::from_secs(60);

/// ```text
/// program DDP_TRAILER_PROG {
///     version DDP_TRAILER_V1 {
///         /* data = pattern(seed, count) (DDP-eligible), trailer = count,
///            another = 0xfeedf00d */
///         trailer_res TRAILER(trailer_args) = 1;
///         /* a = pattern(seed, count_a) (DDP-eligible), name = "name",
///            count_a, b = pattern(seed + 1, count_b) (DDP-eligible) */
///         two_res     TWO(two_args)         = 2;
///     } = 1;
/// } = 0x20006100;
/// struct trailer_args { unsigned count; unsigned seed; };
/// struct trailer_res  { opaque data<>; unsigned trailer; unsigned another; };
/// struct two_args { unsigned count_a; unsigned count_b; unsigned seed; };
/// struct two_res  { opaque a<>; opaque name<>; unsigned count_a; opaque b<>; };
/// ```
const PROG: u32 = 0x2000_6100;
const VERS: u32 = 1;
const P_TRAILER: u32 = 1;
const P_TWO: u32 = 2;
const ANOTHER: u32 = 0xfeed_f00d;
const MAX: u32 = 1 << 20;

async fn handler(ctx: CallContext) -> Result<Message, HandlerError> {
    let mut r = ctx.reader();
    let enc = |e: rpcrdma_proto::EncodeError| HandlerError::SystemErr(e.to_string());
    let mut b = Message::builder();
    match ctx.proc {
        P_TRAILER => {
            let count = r.u32("count")?;
            let seed = r.u32("seed")?;
            r.finish("args")?;
            if count > MAX {
                return Err(HandlerError::GarbageArgs("count".into()));
            }
            b.put_ddp_opaque(pattern(seed, count as usize))
                .map_err(enc)?;
            b.put_u32(count).put_u32(ANOTHER);
        }
        P_TWO => {
            let count_a = r.u32("count_a")?;
            let count_b = r.u32("count_b")?;
            let seed = r.u32("seed")?;
            r.finish("args")?;
            if count_a > MAX || count_b > MAX {
                return Err(HandlerError::GarbageArgs("count".into()));
            }
            b.put_ddp_opaque(pattern(seed, count_a as usize))
                .map_err(enc)?;
            b.put_opaque(b"name").map_err(enc)?;
            b.put_u32(count_a);
            b.put_ddp_opaque(pattern(seed.wrapping_add(1), count_b as usize))
                .map_err(enc)?;
        }
        _ => return Err(HandlerError::ProcUnavail),
    }
    Ok(b.finish())
}

fn server() -> Server {
    let s = Server::default();
    s.register(PROG, VERS, handler);
    s
}

/// TRAILER offering a Write chunk for `data` (the RDMA transport offers it
/// when `reply_max` plus `count` may not fit inline); returns the reply and the
/// decoded `(data, trailer, another)`.
async fn call_trailer(
    c: &Client,
    count: u32,
    seed: u32,
    reply_max: u32,
) -> Result<(Reply, (bytes::Bytes, u32, u32)), RpcError> {
    let mut a = Message::builder();
    a.put_u32(count).put_u32(seed);
    let opts = CallOptions {
        ddp_results: vec![count],
        reply_max: Some(reply_max),
        ..CallOptions::default()
    };
    let r = c
        .call_with(PROG, VERS, P_TRAILER, a.finish(), &opts)
        .await?;
    let mut rd = r.reader();
    let data = rd.ddp_opaque(count, "count", "data")?;
    let trailer = rd.u32("trailer")?;
    let another = rd.u32("another")?;
    rd.finish("trailer_res")?;
    Ok((r, (data, trailer, another)))
}

/// TWO offering Write chunks `chunks` (the RDMA transport offers them when
/// the reply may not fit inline: `count_a` over 3000 or so); returns the reply and the decoded
/// `(a, name, count_a, b)`.
async fn call_two(
    c: &Client,
    count_a: u32,
    count_b: u32,
    seed: u32,
    chunks: Vec<u32>,
) -> Result<(Reply, (bytes::Bytes, bytes::Bytes, u32, bytes::Bytes)), RpcError> {
    let mut a = Message::builder();
    a.put_u32(count_a).put_u32(count_b).put_u32(seed);
    let opts = CallOptions {
        ddp_results: chunks,
        reply_max: Some(count_a.saturating_add(1024)),
        ..CallOptions::default()
    };
    let r = c.call_with(PROG, VERS, P_TWO, a.finish(), &opts).await?;
    let mut rd = r.reader();
    let da = rd.ddp_opaque(count_a, "count_a", "a")?;
    let name = rd.opaque(16, "name max", "name")?;
    let n = rd.u32("count_a")?;
    let db = rd.ddp_opaque(count_b, "count_b", "b")?;
    rd.finish("two_res")?;
    Ok((r, (da, name, n, db)))
}

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

//= rfc8166#section-4.3.2
//# When a Requester provides a Write list, the Responder MUST push data
//# corresponding to DDP-eligible result data items to Requester memory
//# referenced in the Write list.  The Responder removes these data items
//# from the reply's Payload stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_chunk_result_followed_by_a_word_equal_to_its_length() {
    bounded(async {
        let s = server();
        let rdma = RdmaServer::serve(&s, "127.0.0.1:0", RdmaServerConfig::default())
            .await
            .expect("bind");
        let (c, t) = connect_client(
            rdma.local_addr(),
            ClientConfig::default(),
            RdmaClientConfig::default(),
        )
        .await
        .expect("connect");

        // 5001 octets (not a multiple of four: no pad in the Write chunk,
        // none inline either), then trailer = 5001 and another.
        let (r, (data, trailer, another)) = call_trailer(&c, 5001, 7, 1024).await.unwrap();
        assert_eq!(data.len(), 5001);
        assert_eq!(&data[..], &pattern(7, 5001)[..]);
        assert_eq!(trailer, 5001);
        assert_eq!(another, ANOTHER);
        // The data came by direct placement, not inline: the results hold
        // exactly it, and the inline results are the three words.
        let ddp: Vec<_> = r.ddp_data().cloned().collect();
        assert_eq!(ddp.len(), 1);
        assert_eq!(&ddp[0][..], &pattern(7, 5001)[..]);
        assert_eq!(r.results().inline_len(), 12);
        assert_eq!(r.results().xdr_len(), 12 + 5004);
        assert_eq!(t.status().engine.write_chunks, 1);
        // Reading the DDP-eligible item as a plain opaque takes the inline
        // words after the length word for data: here too few of them.
        assert!(r.reader().opaque(MAX, "max", "data").is_err());

        // Small and empty items, and multiples of four, through a Write
        // chunk (a reply_max of 4096 makes the transport offer one, and a
        // Reply chunk).
        for count in [0u32, 1, 4, 8, 13, 4096] {
            let (r, (data, trailer, another)) = call_trailer(&c, count, count, 4096).await.unwrap();
            assert_eq!(&data[..], &pattern(count, count as usize)[..]);
            assert_eq!((trailer, another), (count, ANOTHER));
            assert_eq!(r.results().results().len(), 1);
            // A zero-length item leaves its chunk unused.
            assert_eq!(r.ddp_data().count(), usize::from(count > 0));
        }
        // No Write chunk offered (the reply fits inline): all inline.
        let (r, (data, trailer, _)) = call_trailer(&c, 13, 5, 100).await.unwrap();
        assert_eq!((&data[..], trailer), (&pattern(5, 13)[..], 13));
        assert!(r.results().results().is_empty());

        // Two DDP-eligible items around inline items, one Write chunk each:
        // both placed in order.
        let (r, (a, name, n, b)) = call_two(&c, 3000, 777, 9, vec![3000, 777]).await.unwrap();
        assert_eq!(&a[..], &pattern(9, 3000)[..]);
        assert_eq!(&name[..], b"name");
        assert_eq!(n, 3000);
        assert_eq!(&b[..], &pattern(10, 777)[..]);
        assert_eq!(r.results().results().len(), 2);
        assert_eq!(r.ddp_data().count(), 2);

        // Only one Write chunk for two DDP-eligible items: the first takes
        // it, the second comes inline.
        let (r, (a, _, n, b)) = call_two(&c, 3000, 40, 3, vec![3000]).await.unwrap();
        assert_eq!(&a[..], &pattern(3, 3000)[..]);
        assert_eq!(n, 3000);
        assert_eq!(&b[..], &pattern(4, 40)[..]);
        assert_eq!(r.ddp_data().count(), 1);

        //= rfc8166#section-4.3.2.2
        //# If there is a subsequent DDP-eligible result data item in the RPC
        //# Reply message, it MUST be placed in that unconsumed Write chunk.
        // A zero-length first item leaves the first chunk to the second item
        // (the second chunk comes back unused).
        let (r, (a, _, n, b)) = call_two(&c, 0, 3001, 5, vec![3001, 3001]).await.unwrap();
        assert!(a.is_empty());
        assert_eq!(n, 0);
        assert_eq!(&b[..], &pattern(6, 3001)[..]);
        assert_eq!(r.results().results()[0].len(), 3001);
        assert!(r.results().results()[1].is_empty());

        t.shutdown().await;
        rdma.shutdown().await;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_decoder_over_tcp() {
    bounded(async {
        let s = server();
        let tcp = s
            .serve_tcp("127.0.0.1:0", TcpConfig::default())
            .await
            .expect("bind");
        let c = Client::connect_tcp(
            tcp.local_addr(),
            ClientConfig::default(),
            TcpConfig::default(),
        )
        .await
        .expect("connect");
        let (r, (data, trailer, another)) = call_trailer(&c, 5001, 7, 1024).await.unwrap();
        assert_eq!(&data[..], &pattern(7, 5001)[..]);
        assert_eq!((trailer, another), (5001, ANOTHER));
        assert_eq!(r.ddp_data().count(), 0);
        assert!(r.results().results().is_empty());
        let (_, (a, name, n, b)) = call_two(&c, 3000, 777, 9, vec![3000, 777]).await.unwrap();
        assert_eq!(&a[..], &pattern(9, 3000)[..]);
        assert_eq!((&name[..], n), (&b"name"[..], 3000));
        assert_eq!(&b[..], &pattern(10, 777)[..]);
    })
    .await
}
