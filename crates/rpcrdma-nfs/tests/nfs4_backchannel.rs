//! The NFSv4.1 client and its callback service against a scripted v4.1
//! server (`fake4/`) over loopback software iWARP: the session with a
//! backchannel, CB_NULL, a read delegation recalled with CB_RECALL over
//! the client's own connection and returned with DELEGRETURN; hostile
//! callbacks; a callback before CREATE_SESSION.

mod fake4;

use std::sync::Arc;
use std::time::Duration;

use fake4::{Fake4, Knobs, DELEG, SESSION};
use rpcrdma::rdma::RdmaClientConfig;
use rpcrdma::ReplyError;
use rpcrdma_nfs::client::{auth_sys, Blame};
use rpcrdma_nfs::client4::{
    backchannel_attrs, probe_backchannel, Nfs4Client, Nfs4Options, ProbeOptions, ProbeReport,
};
use rpcrdma_nfs::nfs4::cb::*;
use rpcrdma_nfs::nfs4::status::*;
use rpcrdma_nfs::nfs4::{Enc, Fh, StateId, CB_COMPOUND, CB_NULL, CB_PROGRAM, MAX_CB_OPS};

const LIMIT: Duration = Duration::from_secs(60);

fn opts() -> Nfs4Options {
    Nfs4Options {
        auth: auth_sys(0, 0),
        timeout: Duration::from_secs(10),
        grace_wait: Duration::from_secs(5),
        ..Nfs4Options::default()
    }
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test took too long")
}

/// Runs the probe against the fake server; the recall is sent when the
/// probe holds the delegation (as the lab's conflicting write makes knfsd
/// do).
async fn probe_against(knobs: Knobs) -> (ProbeReport, CbCompoundRes, fake4::State) {
    let fake = Fake4::new(knobs);
    let server = fake.serve().await;
    let f2 = fake.clone();
    // The recall's outcome comes from a task of its own: the probe can end
    // (DELEGRETURN, DESTROY_*) before that task has stored it, so wait for
    // it (bounded by the test's limit) rather than look once.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let hook: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let f2 = f2.clone();
        let tx = tx.lock().unwrap().take();
        tokio::spawn(async move {
            let r = f2.recall().await;
            if let Some(tx) = tx {
                let _ = tx.send(r);
            }
        });
    });
    let rep = probe_backchannel(ProbeOptions {
        addr: server.local_addr(),
        path: "/srv/nfs/deleg.txt".into(),
        wait: Duration::from_secs(10),
        cb_null_wait: Duration::from_secs(2),
        rdma: RdmaClientConfig::default(),
        nfs4: opts(),
        on_delegation: Some(hook),
    })
    .await;
    let r = rx.await.expect("the recall was sent").unwrap();
    let s = fake.state.lock().unwrap().clone();
    server.shutdown().await;
    (rep, r, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_gets_cb_null_and_a_recall_and_returns_the_delegation() {
    bounded(async {
        let (rep, r, s) = probe_against(Knobs::default()).await;
        assert!(rep.ok, "{rep:?}");
        assert!(rep.session_created && rep.cb_null_received);
        assert!(rep.cb_recall_received && rep.delegreturn_ok);
        assert_eq!(rep.delegation.as_deref(), Some("read"));
        // The server saw our answer to CB_RECALL: CB_SEQUENCE and CB_RECALL
        // NFS4_OK.
        assert_eq!(r.status, NFS4_OK);
        assert_eq!(
            r.res.iter().map(|o| (o.op, o.status)).collect::<Vec<_>>(),
            vec![(OP_CB_SEQUENCE, NFS4_OK), (OP_CB_RECALL, NFS4_OK)]
        );
        assert_eq!(r.res[0].sequence.as_ref().unwrap().sessionid, SESSION);
        assert_eq!(s.cb_program, Some(CB_PROGRAM));
        // Backchannel sizes within the inline thresholds (RFC 8167: inline
        // only): our default 4 KiB thresholds less the 28-octet header.
        let back = s.back_attrs.clone().unwrap();
        assert_eq!(back, backchannel_attrs(4096, 4096));
        assert_eq!(back.maxrequestsize, 4096 - 28);
        assert_eq!(back.maxoperations, MAX_CB_OPS);
        assert_eq!(s.delegreturned.map(|d| d.other), Some(DELEG.other));
        assert!(s.closed && s.session_destroyed && s.client_destroyed);
    })
    .await
}

/// Linux's knfsd sends no CB_NULL to a minor version 1 client
/// (docs/interop-linux.md): the probe still succeeds, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_succeeds_without_cb_null_as_knfsd_sends_none() {
    bounded(async {
        let (rep, r, s) = probe_against(Knobs {
            no_cb_null: true,
            ..Knobs::default()
        })
        .await;
        assert!(rep.ok, "{rep:?}");
        assert!(!rep.cb_null_received, "{rep:?}");
        assert!(rep.session_created && rep.cb_recall_received && rep.delegreturn_ok);
        assert_eq!(r.status, NFS4_OK);
        assert!(s.delegreturned.is_some() && s.session_destroyed && s.client_destroyed);
    })
    .await
}

/// A CB_COMPOUND header with `tag`, minor version 1 and `count` operations
/// whose octets follow in `body`.
fn raw_cb(tag: &[u8], minor: u32, count: u32, body: &[u8]) -> Vec<u8> {
    let mut e = Enc::new();
    e.opaque(tag);
    e.u32(minor);
    e.u32(0);
    e.u32(count);
    let mut v = e.into_vec();
    v.extend_from_slice(body);
    v
}

fn statuses(r: &CbCompoundRes) -> Vec<(u32, u32)> {
    r.res.iter().map(|o| (o.op, o.status)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_callbacks_get_the_prescribed_answers() {
    bounded(async {
        let fake = Fake4::new(Knobs::default());
        let server = fake.serve().await;
        let (client, _recalls) =
            Nfs4Client::connect(server.local_addr(), RdmaClientConfig::default(), opts())
                .await
                .unwrap();
        // CB_NULL.
        assert_eq!(
            fake.callback(CB_NULL, vec![]).await.unwrap(),
            Vec::<u8>::new()
        );
        // A procedure that does not exist: PROC_UNAVAIL.
        let e = fake.callback(7, vec![]).await.unwrap_err();
        assert_eq!(e.reply_error(), Some(ReplyError::ProcUnavail), "{e}");
        // Tag of 65 octets, 17 operations, truncation: GARBAGE_ARGS.
        for args in [
            raw_cb(&[b't'; 65], 1, 0, &[]),
            raw_cb(b"", 1, MAX_CB_OPS + 1, &[0; 4 * 17]),
            raw_cb(b"", 1, 2, &[0, 0, 0, 11]),
            vec![0, 0, 0, 8, 0, 0, 0, 0],
        ] {
            let e = fake.callback(CB_COMPOUND, args).await.unwrap_err();
            assert_eq!(e.reply_error(), Some(ReplyError::GarbageArgs), "{e}");
        }
        // A tag of 64 octets is fine (echoed), minor version 0 is not ours.
        let out = fake
            .callback(CB_COMPOUND, raw_cb(&[b't'; 64], 0, 0, &[]))
            .await
            .unwrap();
        let r = CbCompoundRes::decode(&out).unwrap();
        assert_eq!((r.status, r.tag.len()), (NFS4ERR_MINOR_VERS_MISMATCH, 64));
        // CB_RECALL without CB_SEQUENCE.
        let recall = CbOp::Recall(CbRecallArgs {
            stateid: DELEG,
            truncate: false,
            fh: Fh(b"/x".to_vec()),
        });
        let mut c = fake.sequenced(vec![]);
        c.ops = vec![recall.clone()];
        let r = fake.cb_compound(&c).await.unwrap();
        assert_eq!(
            statuses(&r),
            vec![(OP_CB_RECALL, NFS4ERR_OP_NOT_IN_SESSION)]
        );
        // A session we do not have.
        let mut c = fake.sequenced(vec![]);
        if let CbOp::Sequence(s) = &mut c.ops[0] {
            s.sessionid = [0; 16];
        }
        let r = fake.cb_compound(&c).await.unwrap();
        assert_eq!(statuses(&r), vec![(OP_CB_SEQUENCE, NFS4ERR_BADSESSION)]);
        // fake.sequenced advanced its counter without the client seeing
        // it: resynchronise (the client expects last + 1).
        fake.state.lock().unwrap().cb_seq = 0;
        // CB_SEQUENCE then an operation we do not implement (CB_GETATTR),
        // then an illegal one.
        let r = fake
            .cb_compound(&fake.sequenced(vec![CbOp::Other(OP_CB_GETATTR)]))
            .await
            .unwrap();
        assert_eq!(
            statuses(&r),
            vec![(OP_CB_SEQUENCE, NFS4_OK), (OP_CB_GETATTR, NFS4ERR_NOTSUPP)]
        );
        let r = fake
            .cb_compound(&fake.sequenced(vec![CbOp::Other(99)]))
            .await
            .unwrap();
        assert_eq!(
            statuses(&r),
            vec![
                (OP_CB_SEQUENCE, NFS4_OK),
                (OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL)
            ]
        );
        // The same sequence id again: not cached. One ahead: misordered.
        let mut c = fake.sequenced(vec![]);
        if let CbOp::Sequence(s) = &mut c.ops[0] {
            s.sequenceid -= 1;
        }
        let r = fake.cb_compound(&c).await.unwrap();
        assert_eq!(
            statuses(&r),
            vec![(OP_CB_SEQUENCE, NFS4ERR_RETRY_UNCACHED_REP)]
        );
        let mut c = fake.sequenced(vec![]);
        if let CbOp::Sequence(s) = &mut c.ops[0] {
            s.sequenceid += 5;
        }
        let r = fake.cb_compound(&c).await.unwrap();
        assert_eq!(statuses(&r), vec![(OP_CB_SEQUENCE, NFS4ERR_SEQ_MISORDERED)]);
        fake.state.lock().unwrap().cb_seq -= 2;
        // CB_RECALL whose handle is over NFS4_FHSIZE: NFS4ERR_BADXDR for
        // it, CB_SEQUENCE before it keeps its result.
        let seq = fake.sequenced(vec![]);
        let mut body = seq.encode()[4 + 4 + 4 + 4 + 4..].to_vec(); // CB_SEQUENCE op
        let mut e = Enc::new();
        e.u32(OP_CB_RECALL);
        StateId::default().put(&mut e);
        e.bool(false);
        e.opaque(&[1; 129]);
        body.extend(e.into_vec());
        let out = fake
            .callback(CB_COMPOUND, raw_cb(b"fake", 1, 2, &body))
            .await
            .unwrap();
        let r = CbCompoundRes::decode(&out).unwrap();
        assert_eq!(
            statuses(&r),
            vec![(OP_CB_SEQUENCE, NFS4_OK), (OP_CB_RECALL, NFS4ERR_BADXDR)]
        );
        let counts = client.callbacks().counts();
        assert_eq!(counts.cb_recall, 0, "{counts:?}");
        assert!(counts.bad_xdr >= 5, "{counts:?}");
        // The forechannel still works after all that.
        let (fh, attrs) = client.lookup("/srv/nfs").await.unwrap();
        assert_eq!(fh.0, b"/srv/nfs/".to_vec());
        assert_eq!(attrs.ftype, Some(2));
        client.destroy().await.unwrap();
        server.shutdown().await;
    })
    .await
}

//= rfc8167#section-6
//# If an endpoint is not prepared to receive an incoming reverse-
//# direction message, loss of the RDMA connection might result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_before_create_session_ends_the_connection() {
    bounded(async {
        let fake = Fake4::new(Knobs {
            cb_before_session: true,
            ..Knobs::default()
        });
        let server = fake.serve().await;
        let e = Nfs4Client::connect(server.local_addr(), RdmaClientConfig::default(), opts())
            .await
            .unwrap_err();
        // EXCHANGE_ID's reply never comes: the connection ended under it.
        assert_eq!(e.blame(), Blame::Transport, "{e}");
        // The server's call fails once it learns the connection ended
        // (after the client did).
        let early = loop {
            if let Some(e) = fake.state.lock().unwrap().early_cb.clone() {
                break e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            !early.contains("Ok"),
            "the early callback was answered: {early}"
        );
        let s = fake.state.lock().unwrap().clone();
        assert!(!s.ops.contains(&rpcrdma_nfs::nfs4::ops::op::CREATE_SESSION));
        // The server is still fine for the next client.
        server.shutdown().await;
    })
    .await
}
