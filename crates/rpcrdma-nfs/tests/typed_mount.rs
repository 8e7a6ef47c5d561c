//! MOUNT through the runtime's typed layer (`rpcrdma::program`): the
//! procedures declared once in `rpcrdma_nfs::binding::typed::mount`,
//! called with `Client::call_typed` against the project's own MOUNT server
//! over TCP.

use rpcrdma::{Client, ClientConfig, ReplyError, Server, TcpConfig};
use rpcrdma_nfs::binding::typed::{mount, Inline};
use rpcrdma_nfs::mount::{Dirpath, MountRes, Mountstat3};
use rpcrdma_nfs::server::{NfsService, NfsServiceConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_procedures_called_by_type() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-nfs-typed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let service = NfsService::new(&dir, NfsServiceConfig::default()).unwrap();
    let m = Server::default();
    service.register_mount(&m);
    let tcp = m
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

    c.call_typed::<mount::Null>(&()).await.unwrap();
    let Inline(res) = c
        .call_typed::<mount::Mnt>(&Inline(Dirpath::from("/")))
        .await
        .unwrap();
    let MountRes::Ok(ok) = res else {
        panic!("MNT / refused: {res:?}");
    };
    assert!(!ok.fhandle.0.is_empty());
    let Inline(res) = c
        .call_typed::<mount::Mnt>(&Inline(Dirpath::from("/no/such/export")))
        .await
        .unwrap();
    assert!(
        matches!(res, MountRes::Fail(s) if s != Mountstat3::MNT3_OK),
        "{res:?}"
    );
    let Inline(exports) = c.call_typed::<mount::Export>(&()).await.unwrap();
    assert!(!exports.0.is_empty());
    c.call_typed::<mount::Umnt>(&Inline(Dirpath::from("/")))
        .await
        .unwrap();
    // A dirpath over MNTPATHLEN breaks its XDR type: GARBAGE_ARGS.
    let long = "x".repeat(2000);
    let e = c
        .call_typed::<mount::Umnt>(&Inline(Dirpath::from(long.as_str())))
        .await
        .unwrap_err();
    assert_eq!(e.reply_error(), Some(ReplyError::GarbageArgs), "{e}");
    tcp.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
