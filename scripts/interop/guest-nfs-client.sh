#!/bin/sh
# Runs IN THE LAB GUEST (copied there by scripts/interop-linux-nfs-client):
# the Linux kernel NFS client against a host-side `rpcrdma nfs serve`
# reached at 10.0.2.100 (MOUNT 20048 over TCP, NFS 20049 over RDMA).
#
#   guest-nfs-client.sh SIZE OUT16M_SHA256
#
# NFS_SERVER, NFS_PORT and NFS_MOUNT_PORT name another server (e.g. our
# verbs server in the guest itself at 10.0.2.15: scripts/interop-verbs j).
#
# Mounts with rsize=wsize=SIZE, then: copies the guest's 16 MiB file in and
# the host's out16m out (sha256 both ways, page cache dropped so every byte
# crosses the wire), a 100,003-octet file in (unaligned last WRITE/READ),
# create/rename/remove, mkdir/rmdir, `ls -l` of the
# host's dir1000 (1,000 entries), symlink + readlink, dd iflag=direct and
# oflag=direct with 1 MiB blocks; unmounts. One `PASS name` / `FAIL name`
# line per check; exit status 1 if any failed. The host checks its side
# (the files the guest wrote) from the `HOSTCHECK` lines.
set -u
S=$1
OUT_SHA=$2
M=/mnt/rpcrdma
F=0
pass() { echo "PASS $S $*"; }
fail() { echo "FAIL $S $*"; F=1; }
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

mkdir -p $M
SERVER=${NFS_SERVER:-10.0.2.100}
OPTS=vers=3,proto=rdma,port=${NFS_PORT:-20049},mountport=${NFS_MOUNT_PORT:-20048},mountproto=tcp,nolock,rsize=$S,wsize=$S,timeo=600,retrans=2
if ! timeout 60 mount -t nfs -o "$OPTS" "$SERVER":/ $M; then
    fail mount; dmesg | tail -20; exit 1
fi
pass mount
grep " $M " /proc/mounts

IN_SHA=$(cut -d' ' -f1 /srv/nfs/interop/file16m.sha256)
# Copy in (WRITE), read back through the server (READ).
check copy-in cp /srv/nfs/interop/file16m $M/in16m-$S
drop
check sha256-in [ "$(sha256sum < $M/in16m-$S | cut -d' ' -f1)" = "$IN_SHA" ]
echo "HOSTCHECK sha256 in16m-$S $IN_SHA"
# Copy out (READ of the host's file).
drop
check copy-out cp $M/out16m /tmp/out16m
check sha256-out [ "$(sha256sum < /tmp/out16m | cut -d' ' -f1)" = "$OUT_SHA" ]
rm -f /tmp/out16m
# A file whose length is not a multiple of four (the last WRITE's Read
# chunk and the last READ's Write chunk carry no XDR pad).
head -c 100003 /srv/nfs/interop/file16m > /tmp/odd
ODD_SHA=$(sha256sum < /tmp/odd | cut -d' ' -f1)
check copy-in-odd cp /tmp/odd $M/odd-$S
drop
check sha256-odd [ "$(sha256sum < $M/odd-$S | cut -d' ' -f1)" = "$ODD_SHA" ]
echo "HOSTCHECK sha256 odd-$S $ODD_SHA"
# Create, rename, remove; mkdir, rmdir.
check create sh -c "echo hello > $M/c-$S"
check rename mv $M/c-$S $M/r-$S
check renamed sh -c "[ ! -e $M/c-$S ] && [ \"\$(cat $M/r-$S)\" = hello ]"
echo "HOSTCHECK content r-$S hello"
check mkdir mkdir $M/dir-$S
check create-in-dir sh -c "echo bye > $M/dir-$S/y"
check mv-into mv $M/dir-$S/y $M/dir-$S/x
check remove rm $M/dir-$S/x
check rmdir rmdir $M/dir-$S
check gone sh -c "[ ! -e $M/dir-$S ]"
echo "HOSTCHECK absent dir-$S"
# ls -l of 1,000 entries (READDIRPLUS; the attribute cache dropped).
drop
n=$(ls -l $M/dir1000 | grep -c '^-')
check ls-1000 [ "$n" = 1000 ]
# Symlink and readlink.
check symlink ln -s "some/target-$S" $M/ln-$S
drop
check readlink [ "$(readlink $M/ln-$S)" = "some/target-$S" ]
echo "HOSTCHECK symlink ln-$S some/target-$S"
# dd with O_DIRECT, 1 MiB blocks: read the 16 MiB file, write 8 MiB.
check dd-iflag-direct sh -c "[ \"\$(dd if=$M/in16m-$S bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)\" = $IN_SHA ]"
check dd-oflag-direct dd if=/srv/nfs/interop/file16m of=$M/dd-$S bs=1M count=8 oflag=direct status=none
DD_SHA=$(head -c 8388608 /srv/nfs/interop/file16m | sha256sum | cut -d' ' -f1)
check dd-readback sh -c "[ \"\$(dd if=$M/dd-$S bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)\" = $DD_SHA ]"
echo "HOSTCHECK sha256 dd-$S $DD_SHA"
# Throughput (information only: the guest runs under emulation): O_DIRECT
# 1 MiB reads of the 16 MiB file and writes of 16 MiB, dd's own figure.
echo "THROUGHPUT $S read-direct $(dd if=$M/in16m-$S of=/dev/null bs=1M iflag=direct 2>&1 | tail -1)"
echo "THROUGHPUT $S write-direct $(dd if=/srv/nfs/interop/file16m of=$M/tp-$S bs=1M oflag=direct 2>&1 | tail -1)"
rm -f $M/tp-$S
cat /proc/self/mountstats | sed -n "\,$M,,/^device/p" | grep -E "xprt|READ:|WRITE:|READDIRPLUS:" | head -5
check umount umount $M
exit $F
