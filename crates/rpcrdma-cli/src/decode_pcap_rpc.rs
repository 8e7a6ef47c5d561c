//! The RPC view of `rpcrdma decode --pcap`: what each Send is in its
//! transaction (the `transaction` JSON object and the text line), and the
//! `--summary` tables (service response times per procedure like `tshark
//! -z rpc,srt`, RPC-over-RDMA message classes, chunk types). The matching
//! and counting are `rpcrdma_iwarp::capture::rpc`'s.

use rpcrdma_iwarp::capture::rpc::{ChunkStats, Message, ProcId, ProcStats, Role, Summary};
use rpcrdma_iwarp::capture::Stats;
use serde_json::{json, Map, Value};

fn proc_fields(o: &mut Map<String, Value>, p: Option<ProcId>) {
    o.insert("prog".into(), p.map(|p| p.prog).into());
    o.insert("vers".into(), p.map(|p| p.vers).into());
    o.insert("proc".into(), p.map(|p| p.proc).into());
    o.insert("proc_name".into(), p.and_then(|p| p.name()).into());
}

/// The `transaction` object of a Send line: `role` (`call` / `reply`, or
/// null for RDMA_DONE, CONNPROP, an unmatched RDMA_ERROR), `xid`,
/// `backchannel`, `class` (the message class), `prog`, `vers`, `proc`,
/// `proc_name` (null when unknown: a call whose header is in a Read chunk,
/// an unmatched reply), and for a reply `call_packet` and `srt_seconds`
/// (null when no call matched).
pub(crate) fn transaction_json(m: &Message) -> Value {
    let mut o = Map::new();
    o.insert(
        "role".into(),
        match m.role {
            Some(Role::Call) => "call".into(),
            Some(Role::Reply) => "reply".into(),
            None => Value::Null,
        },
    );
    o.insert("xid".into(), m.xid.into());
    o.insert("backchannel".into(), m.backchannel.into());
    o.insert("class".into(), m.class.into());
    proc_fields(&mut o, m.proc);
    if m.role == Some(Role::Reply) {
        let c = m.call.as_ref();
        o.insert(
            "call_packet".into(),
            c.and_then(|c| c.packet).map(|p| p.number).into(),
        );
        o.insert("srt_seconds".into(), c.and_then(|c| c.srt).into());
    }
    Value::Object(o)
}

/// The procedure as a listing names it.
pub(crate) fn proc_label(p: Option<ProcId>) -> String {
    p.map_or_else(|| "procedure unknown".to_string(), |p| p.label())
}

/// The text line of a Send: `NFSv3 GETATTR call xid 0x…`, `… reply xid
/// 0x… (call in #6, SRT 0.000100 s)`; `reply_in` for a call once matched.
pub(crate) fn transaction_text(m: &Message, reply_in: Option<(u64, Option<f64>)>) -> String {
    let bc = if m.backchannel { " (backchannel)" } else { "" };
    match m.role {
        Some(Role::Call) => {
            let label = match m.proc {
                Some(p) => p.label(),
                None => "procedure in the Read chunk".into(),
            };
            let tail = match reply_in {
                Some((n, _)) => format!(" (reply in #{n})"),
                None => " (no reply in the capture)".into(),
            };
            format!("=> {label} call{bc} xid {:#010x}{tail}", m.xid)
        }
        Some(Role::Reply) => {
            let tail = match m.call {
                Some(c) => format!(
                    " (call in {}{})",
                    c.packet
                        .map_or_else(|| "?".to_string(), |p| format!("#{}", p.number)),
                    c.srt.map_or(String::new(), |t| format!(", SRT {t:.6} s")),
                ),
                None => " (no call in the capture)".into(),
            };
            let what = if m.class.ends_with("ERROR") {
                format!("{} for", m.class)
            } else {
                "reply".into()
            };
            format!(
                "=> {} {what}{bc} xid {:#010x}{tail}",
                proc_label(m.proc),
                m.xid
            )
        }
        None => format!("=> {} xid {:#010x}", m.class, m.xid),
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |t| format!("{t:.6}"))
}

fn chunk_json(c: &ChunkStats) -> Value {
    json!({"chunks": c.chunks, "segments": c.segments, "bytes": c.bytes})
}

/// The `--summary --json` object: `srt` (one object per procedure:
/// `prog, vers, proc, proc_name, calls, replied, rdma_errors, no_reply,
/// min_srt_seconds, max_srt_seconds, avg_srt_seconds, sum_srt_seconds`),
/// `classes` (`rpcrdma_version, class, count`), `chunks`
/// (`position_zero_read, read, write, reply`, each `chunks, segments,
/// bytes`), `undecodable`, `unmatched_replies`, `untracked_calls`,
/// `packets`, `mpa_connections`.
pub(crate) fn summary_json(s: &Summary, stats: &Stats, mpa_conns: usize) -> Value {
    let srt: Vec<Value> = s
        .procs
        .iter()
        .map(|(p, st)| {
            let mut o = Map::new();
            proc_fields(&mut o, *p);
            o.insert("calls".into(), st.calls.into());
            o.insert("replied".into(), st.replied.into());
            o.insert("rdma_errors".into(), st.rdma_errors.into());
            o.insert("no_reply".into(), no_reply(st).into());
            let timed = st.timed > 0;
            o.insert("min_srt_seconds".into(), timed.then_some(st.min_srt).into());
            o.insert("max_srt_seconds".into(), timed.then_some(st.max_srt).into());
            o.insert("avg_srt_seconds".into(), st.avg_srt().into());
            o.insert("sum_srt_seconds".into(), timed.then_some(st.sum_srt).into());
            Value::Object(o)
        })
        .collect();
    let classes: Vec<Value> = s
        .classes
        .iter()
        .map(|((v, c), n)| json!({"rpcrdma_version": v, "class": c, "count": n}))
        .collect();
    let c = &s.chunks;
    json!({
        "srt": srt,
        "classes": classes,
        "chunks": {
            "position_zero_read": chunk_json(&c.position_zero_read),
            "read": chunk_json(&c.read),
            "write": chunk_json(&c.write),
            "reply": chunk_json(&c.reply),
        },
        "undecodable": s.undecodable,
        "unmatched_replies": s.unmatched_replies,
        "untracked_calls": s.untracked_calls,
        "packets": stats.packets,
        "mpa_connections": mpa_conns,
    })
}

fn no_reply(st: &ProcStats) -> u64 {
    st.calls - st.replied - st.rdma_errors
}

const RULE: &str = "===================================================================";

/// The `--summary` text: the SRT table (one row per procedure, grouped by
/// program and version like `tshark -z rpc,srt`; "Calls" counts the calls
/// answered by an RPC reply, as tshark does), then the message classes and
/// the chunk types.
pub(crate) fn summary_text(s: &Summary) -> String {
    let mut t = String::new();
    t.push_str(RULE);
    t.push_str("\nRPC SRT Statistics (service response time, seconds):\n");
    t.push_str(&format!(
        "{:<30} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11}\n",
        "Procedure", "Calls", "Min SRT", "Max SRT", "Avg SRT", "Sum SRT", "No reply", "RDMA_ERROR"
    ));
    for (p, st) in &s.procs {
        let timed = st.timed > 0;
        t.push_str(&format!(
            "{:<30} {:>7} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11}\n",
            proc_label(*p),
            st.replied,
            secs(timed.then_some(st.min_srt)),
            secs(timed.then_some(st.max_srt)),
            secs(st.avg_srt()),
            secs(timed.then_some(st.sum_srt)),
            no_reply(st),
            st.rdma_errors,
        ));
    }
    t.push_str(RULE);
    t.push_str("\nRPC-over-RDMA messages:\n");
    for ((v, c), n) in &s.classes {
        t.push_str(&format!("  v{v} {c:<20} {n:>9}\n"));
    }
    if s.undecodable > 0 {
        t.push_str(&format!("  {:<23} {:>9}\n", "not a header", s.undecodable));
    }
    t.push_str(&format!(
        "{:<25} {:>9} {:>9} {:>14}\n",
        "Chunks:", "chunks", "segments", "octets"
    ));
    let c = &s.chunks;
    for (name, st) in [
        ("read (position zero)", &c.position_zero_read),
        ("read", &c.read),
        ("write", &c.write),
        ("reply", &c.reply),
    ] {
        t.push_str(&format!(
            "  {name:<23} {:>9} {:>9} {:>14}\n",
            st.chunks, st.segments, st.bytes
        ));
    }
    if s.unmatched_replies > 0 || s.untracked_calls > 0 {
        t.push_str(&format!(
            "{} replies without a call in the capture, {} calls not tracked\n",
            s.unmatched_replies, s.untracked_calls
        ));
    }
    t.push_str(RULE);
    t
}
