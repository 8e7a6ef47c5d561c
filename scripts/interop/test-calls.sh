#!/bin/bash
# Every procedure of the test program against one server, each result's
# data checked by `rpcrdma call` itself (ECHO compares the echo, READ the
# seeded pattern, WRITE the server's count and CRC-32C of what it read):
#
#   test-calls.sh RPCRDMA ADDR [CALL OPTIONS...]
#
# First `probe --json` (must succeed; its negotiation is printed), then
# NULL x3, ECHO 4 KiB (inline or a Long Call, by the inline threshold),
# ECHO 64 KiB (a Long Call the server RDMA Reads and a Reply chunk it RDMA
# Writes), READ 1 MiB x3 (a Write chunk), WRITE 1 MiB x3 (a Read chunk),
# each in RPC-over-RDMA version 2 (`--rpcrdma-version auto`: what the peer
# grants) and in version 1.
# Runs on the host (software iWARP) and in the lab guest (verbs) alike:
# scripts/interop-verbs steps h and i. One `PASS what` / `FAIL what` line
# per procedure; exit status 1 if any failed.
set -u
R=$1
A=$2
shift 2
F=0
ERR=$(mktemp)
t0=$(date +%s%N)
O=$(timeout 60 "$R" probe "$A" "$@" --json 2>"$ERR")
echo "$O" | cut -c1-400
tail -3 "$ERR"
if echo "$O" | python3 -c '
import json, sys
v = json.loads([l for l in sys.stdin.read().splitlines() if l.startswith("{")][-1])
assert v["ok"], v
print("probe: provider %s device %s, RPC-over-RDMA v%s, MPA rev %s crc %s, ird %s ord %s, inline %s/%s, R %s/%s, credits %s" % (
    v["provider"], v["device"], v["rpcrdma_version"], v["mpa_rev"], v["crc"], v["ird"], v["ord"],
    v["inline_send"], v["inline_recv"], v["local_private_data"].get("remote_invalidate"),
    v["peer_private_data"].get("remote_invalidate"), v["credits_granted"]))
'; then echo "PASS probe ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"; else echo "FAIL probe ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"; F=1; fi
for v in auto 1; do
  for c in 'null --count 3' 'echo --size 4096' 'echo --size 65536' \
    'read --size 1048576 --count 3' 'write --size 1048576 --count 3'; do
    # shellcheck disable=SC2086 # $c is the procedure and its options
    O=$(timeout 180 "$R" call "$A" --proc $c --rpcrdma-version $v "$@" --json 2>"$ERR")
    echo "$O" | cut -c1-240
    tail -3 "$ERR"
    if echo "$O" | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
bad = [x for x in r if not x["ok"]]
assert r and not bad, bad
print("%d call(s) ok: %s in RPC-over-RDMA v%s, %d octets each, data checked, crc32c 0x%08x" % (
    len(r), r[0]["proc_name"], r[0]["rpcrdma_version"], r[0]["bytes"], r[0]["crc32c"]))
'; then echo "PASS $c (--rpcrdma-version $v)"; else echo "FAIL $c (--rpcrdma-version $v)"; F=1; fi
  done
done
rm -f "$ERR"
exit $F
