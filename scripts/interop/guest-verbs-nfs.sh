#!/bin/bash
# Runs IN THE LAB GUEST (copied there by scripts/interop-verbs, step j):
# the Linux kernel NFS client against our `rpcrdma nfs serve --provider
# verbs` in the same guest, over the guest's RDMA device (siw0 or rxe0 on
# eth0; the address is eth0's: rdma_cm cannot use 127.0.0.1).
#
#   guest-verbs-nfs.sh DEVICE ADDR "SIZES"
#
# Exports a fresh directory (a 16 MiB random file to copy out, 1,000 empty
# files) over NFSv3 on RPC-over-RDMA at ADDR:20070 and MOUNT on TCP
# ADDR:20072, then for each rsize=wsize in SIZES runs guest-nfs-client.sh
# (mount -o vers=3,proto=rdma; 16 MiB in and out with sha256, ls -l of
# 1,000 entries, create/rename/remove, symlink, O_DIRECT dd) and checks the
# server's side of what the client wrote (its HOSTCHECK lines). The server
# is stopped with SIGTERM and prints its counters. Exit status 1 if any
# check failed.
set -u
DEV=$1
ADDR=$2
SIZES=$3
HERE=$(cd "$(dirname "$0")" && pwd)
EXP=$(mktemp -d /root/verbs-export.XXXXXX)
LOG=/tmp/verbs-nfs-serve.log
F=0
head -c $((16 << 20)) /dev/urandom > "$EXP/out16m"
OUT_SHA=$(sha256sum < "$EXP/out16m" | cut -d' ' -f1)
mkdir "$EXP/dir1000"
(cd "$EXP/dir1000" && for i in $(seq -w 1 1000); do : > "f$i"; done)

timeout 1400 "$HERE/rpcrdma" nfs serve "$EXP" --listen "$ADDR:20070" --mount-listen "$ADDR:20072" \
    --provider verbs --device "$DEV" </dev/null >"$LOG" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q '^mount listening' "$LOG" && break; sleep 0.1; done
cat "$LOG"
grep -q '^mount listening' "$LOG" || { echo "FAIL server did not start"; kill "$SERVER"; exit 1; }
for size in $SIZES; do
    OUT=$(mktemp)
    NFS_SERVER=$ADDR NFS_PORT=20070 NFS_MOUNT_PORT=20072 sh "$HERE/guest-nfs-client.sh" "$size" "$OUT_SHA" 2>&1 | tee "$OUT"
    grep -q '^FAIL' "$OUT" && F=1
    grep -q '^PASS .* umount' "$OUT" || F=1
    # The server's side of what the client wrote.
    while read -r _ what name value; do
        case "$what" in
            sha256) got=$(sha256sum < "$EXP/$name" | cut -d' ' -f1) ;;
            content) got=$(cat "$EXP/$name") ;;
            symlink) got=$(readlink "$EXP/$name") ;;
            absent) got=absent; [ -e "$EXP/$name" ] && got=present; value=absent ;;
        esac
        if [ "$got" = "$value" ]; then echo "PASS $size server $what $name"
        else echo "FAIL $size server $what $name: $got != $value"; F=1; fi
    done < <(grep '^HOSTCHECK' "$OUT")
    rm -f "$OUT"
    dmesg | grep -iE "siw|rxe|rpcrdma|nfs:" | tail -6 | sed 's/^/guest kernel: /'
done
kill -TERM "$SERVER"; wait "$SERVER"
echo "--- server:"; cat "$LOG"
grep -q '^served' "$LOG" || F=1
rm -rf "$EXP"
exit $F
