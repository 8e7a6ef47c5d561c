#!/usr/bin/env python3
"""Counts the RPC-over-RDMA message classes and chunk types in captures.

    count-classes.py RPCRDMA_BINARY CAPTURE...

Each capture is decoded by `rpcrdma decode --pcap FILE --json`. For every
RDMA Send carrying a transport header, by direction (initiator = the
requester that connected, responder = the server): the message type
(RDMA_MSG, RDMA_NOMSG, RDMA_MSGP, RDMA_DONE, RDMA_ERROR) and the chunks in
the header: Read chunks (and whether at position zero: a Long Call),
Write chunks (offered in a call; in a reply, used when a segment length is
not zero), Reply chunks (offered in a call; used in an RDMA_NOMSG reply).
The RDMAP operations (RDMA Write segments, Read Requests, Read Responses)
are counted too. Exit status 1 if the dissector reported any error item
(but `incomplete-fpdu`: a connection cut mid-FPDU, e.g. after a Terminate,
is counted and reported) or a Send whose payload is not a transport
header, or a capture does not decode.
"""
import collections
import json
import subprocess
import sys


def count(binary, path, totals):
    out = subprocess.run([binary, "decode", "--pcap", path, "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{path}: rpcrdma decode --pcap exit {out.returncode}: {out.stderr.strip()}")
        return False
    c = collections.Counter()
    ok = True
    for line in out.stdout.splitlines():
        item = json.loads(line)
        frame = item.get("frame")
        side = "client" if item.get("from") == "initiator" else "server"
        if frame == "error":
            c[("error", item.get("error"))] += 1
            # A connection cut mid-FPDU (after a Terminate) is reported;
            # any other dissector error fails.
            if item.get("error") != "incomplete-fpdu":
                ok = False
            continue
        if frame in ("write", "read-request", "read-response", "terminate"):
            c[(side, "RDMAP " + frame)] += 1
            continue
        if frame != "send":
            c[(side, frame)] += 1
            continue
        h = item.get("header")
        if h is None:
            c[(side, "Send without a transport header")] += 1
            ok = False
            continue
        proc = h.get("proc")
        c[(side, proc)] += 1
        reads = h.get("reads") or []
        writes = h.get("writes") or []
        reply = h.get("reply")
        call = side == "client"
        if reads:
            c[(side, f"{proc} with Read chunk(s)")] += 1
            if any(r.get("position") == 0 for r in reads):
                c[(side, f"{proc} with a Position-Zero Read chunk (Long Call)")] += 1
        if writes:
            if call:
                c[(side, f"{proc} offering Write chunk(s)")] += 1
            else:
                used = any(s.get("length", 0) > 0 for w in writes for s in w)
                c[(side, f"{proc} with Write chunk(s) {'used' if used else 'unused'}")] += 1
        if reply is not None:
            if call:
                c[(side, f"{proc} offering a Reply chunk")] += 1
            else:
                used = any(s.get("length", 0) > 0 for s in reply)
                c[(side, f"{proc} with the Reply chunk {'used' if used else 'unused'}")] += 1
        if proc == "RDMA_ERROR":
            err = h.get("error") or {}
            c[(side, f"RDMA_ERROR {err.get('name')}")] += 1
    print(f"== {path}")
    for (side, what), n in sorted(c.items()):
        print(f"  {side:7} {what}: {n}")
    totals.update(c)
    return ok


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, paths = sys.argv[1], sys.argv[2:]
    totals = collections.Counter()
    ok = all([count(binary, p, totals) for p in paths])
    print("== all captures")
    for (side, what), n in sorted(totals.items()):
        print(f"  {side:7} {what}: {n}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
