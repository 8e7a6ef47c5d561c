//! `rpcrdma nfs ls|get|put|stat` end to end against `rpcrdma nfs serve`
//! (loopback software iWARP, MOUNT over TCP, 127.0.0.1 only): the one JSON
//! object, its fields, exit statuses.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

mod common;
use common::BIN;

/// A scratch directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let p = std::env::temp_dir().join(format!(
            "rpcrdma-cli-nfs-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An `nfs serve --duration` child, killed on drop.
struct Serve {
    child: Child,
    port: String,
    mount_port: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Dir) -> Serve {
    serve_with(dir, &[])
}

/// `nfs serve` with `extra` options.
fn serve_with(dir: &Dir, extra: &[&str]) -> Serve {
    let mut child = Command::new(BIN)
        .args(["nfs", "serve"])
        .arg(&dir.0)
        .args(extra)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--mount-listen",
            "127.0.0.1:0",
            "--duration",
            "90",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn nfs serve");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let (mut port, mut mount_port) = (None, None);
    // "exporting DIR", "listening on ADDR", "mount listening on ADDR".
    for _ in 0..5 {
        if port.is_some() && mount_port.is_some() {
            break;
        }
        let mut line = String::new();
        out.read_line(&mut line).expect("read");
        let port_of = |s: &str| s.trim().rsplit(':').next().unwrap().to_string();
        if let Some(a) = line.trim().strip_prefix("mount listening on ") {
            mount_port = Some(port_of(a));
        } else if let Some(a) = line.trim().strip_prefix("listening on ") {
            port = Some(port_of(a));
        } else if line.is_empty() {
            panic!("nfs serve ended before it listened");
        }
    }
    // Keep reading (and dropping) the server's output.
    std::thread::spawn(move || for _ in out.lines() {});
    Serve {
        child,
        port: port.expect("listening on"),
        mount_port: mount_port.expect("mount listening on"),
    }
}

/// Runs the tool with a time bound.
fn run(args: &[&str]) -> Output {
    common::run_within(args, Duration::from_secs(90))
}

/// `rpcrdma nfs OP 127.0.0.1:PATH [LOCAL] --json` against `s`: exit status and
/// the one JSON object.
fn nfs(s: &Serve, op: &str, path: &str, local: Option<&str>) -> (i32, Value) {
    nfs_with(s, op, path, local, &[])
}

/// [`nfs`] with `extra` options.
fn nfs_with(s: &Serve, op: &str, path: &str, local: Option<&str>, extra: &[&str]) -> (i32, Value) {
    let target = format!("127.0.0.1:{path}");
    let mut args = vec!["nfs", op, target.as_str()];
    args.extend(local);
    args.extend(["--port", &s.port, "--mount-port", &s.mount_port, "--json"]);
    args.extend(extra);
    let o = run(&args);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one JSON object: {text:?} (stderr {:?})",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: Value = serde_json::from_str(lines[0]).unwrap();
    for k in [
        "ok",
        "op",
        "path",
        "bytes",
        "sha256",
        "entries",
        "elapsed_us",
        "error",
    ] {
        assert!(j.get(k).is_some(), "{k} missing in {j}");
    }
    assert_eq!(j["op"], op);
    assert_eq!(j["path"], target.as_str());
    (o.status.code().unwrap_or(-1), j)
}

fn hex_sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn put_get_ls_stat_and_errors() {
    let export = Dir::new("export");
    let local = Dir::new("local");
    let s = serve(&export);
    std::fs::create_dir(export.0.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(export.0.join(format!("d/f{i:02}")), vec![b'x'; i]).unwrap();
    }
    let data: Vec<u8> = (0..(3 << 20) + 5)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let src = local.0.join("src");
    std::fs::write(&src, &data).unwrap();
    let want = hex_sha(&data);

    // put: into a directory (the local name), then to a new name.
    let (rc, j) = nfs(&s, "put", "/d", Some(src.to_str().unwrap()));
    assert_eq!((rc, &j["ok"]), (0, &Value::Bool(true)), "{j}");
    assert_eq!(j["bytes"], data.len() as u64);
    assert_eq!(j["sha256"], want.as_str());
    assert_eq!(std::fs::read(export.0.join("d/src")).unwrap(), data);
    let (rc, j) = nfs(&s, "put", "/copy", Some(src.to_str().unwrap()));
    assert_eq!(rc, 0, "{j}");
    assert_eq!(std::fs::read(export.0.join("copy")).unwrap(), data);

    // get: back, bit-exact.
    let back = local.0.join("back");
    let (rc, j) = nfs(&s, "get", "/d/src", Some(back.to_str().unwrap()));
    assert_eq!(rc, 0, "{j}");
    assert_eq!(
        (j["bytes"].as_u64(), j["sha256"].as_str()),
        (Some(data.len() as u64), Some(want.as_str()))
    );
    assert_eq!(std::fs::read(&back).unwrap(), data);
    assert!(j["elapsed_us"].as_u64().unwrap() > 0);
    assert!(j["entries"].is_null() && j["error"].is_null());

    // ls: 21 entries (20 files and the one put there), . and .. left out.
    let (rc, j) = nfs(&s, "ls", "/d", None);
    assert_eq!(rc, 0, "{j}");
    let entries = j["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 21, "{j}");
    let f05 = entries.iter().find(|e| e["name"] == "f05").unwrap();
    assert_eq!(
        (f05["type"].as_str(), f05["size"].as_u64()),
        (Some("file"), Some(5))
    );
    assert!(j["bytes"].is_null() && j["sha256"].is_null());

    // stat.
    let (rc, j) = nfs(&s, "stat", "/copy", None);
    assert_eq!(rc, 0, "{j}");
    assert_eq!(j["bytes"], data.len() as u64);
    assert_eq!(j["attributes"]["type"], "file");

    // A missing path: exit 1, the status named, who is to blame.
    let (rc, j) = nfs(&s, "get", "/d/nope", Some(back.to_str().unwrap()));
    assert_eq!((rc, &j["ok"]), (1, &Value::Bool(false)), "{j}");
    let e = j["error"]["message"].as_str().unwrap();
    assert!(e.contains("NFS3ERR_NOENT"), "{e}");
    assert_eq!(
        (&j["error"]["kind"], &j["error"]["blame"], &j["error"]["op"]),
        (&json!("nfs-status"), &json!("status"), &json!("get")),
        "{j}"
    );
    // get of a directory: the caller's mistake.
    let (rc, j) = nfs(&s, "get", "/d", Some(back.to_str().unwrap()));
    assert_eq!(rc, 1, "{j}");
    assert_eq!(j["error"]["blame"], "caller", "{j}");

    // Nobody at the MOUNT port: exit 1, the transport to blame, at once.
    let o = run(&[
        "nfs",
        "stat",
        "127.0.0.1:/copy",
        "--port",
        &s.port,
        "--mount-port",
        "1",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["error"]["kind"], "transport", "{j}");
    // A target without SERVER:/path: exit 2, the failure object.
    let o = run(&["nfs", "ls", "no-colon", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&j["ok"], &j["error"]["kind"]),
        (&json!(false), &json!("bad-target"))
    );
}

/// The benchmark's configuration (scripts/bench-nfs): a current-thread
/// server whose file operations run one at a time on the blocking pool,
/// clients on a current-thread (the default) and a multi-thread runtime,
/// four 64 KiB calls in flight: every octet arrives, in order.
#[test]
fn single_threaded_server_and_both_client_runtimes() {
    let export = Dir::new("export1t");
    let local = Dir::new("local1t");
    let s = serve_with(&export, &["--threads", "1", "--max-blocking", "1"]);
    let data: Vec<u8> = (0..(1u32 << 20) + 4099)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 23) as u8)
        .collect();
    let src = local.0.join("src");
    std::fs::write(&src, &data).unwrap();
    let want = hex_sha(&data);
    for threads in ["1", "2"] {
        let io = [
            "--threads",
            threads,
            "--window",
            "4",
            "--rsize",
            "65536",
            "--wsize",
            "65536",
        ];
        let name = format!("/t{threads}");
        let (rc, j) = nfs_with(&s, "put", &name, Some(src.to_str().unwrap()), &io);
        assert_eq!((rc, j["sha256"].as_str()), (0, Some(want.as_str())), "{j}");
        assert_eq!(std::fs::read(export.0.join(&name[1..])).unwrap(), data);
        let back = local.0.join(format!("back{threads}"));
        let (rc, j) = nfs_with(&s, "get", &name, Some(back.to_str().unwrap()), &io);
        assert_eq!((rc, j["sha256"].as_str()), (0, Some(want.as_str())), "{j}");
        assert_eq!(std::fs::read(&back).unwrap(), data);
    }
}
