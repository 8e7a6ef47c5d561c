#!/usr/bin/env python3
"""Does the lab guest's siw mis-assemble a DDP/RDMAP header split across two
TCP segments? (docs/interop-linux.md, "Linux 6.1 siw mis-assembles a header
split after more than 16 octets".)

    siw-split-probe.py [--crc] [--port 20049] [K ...]

Connects to the guest's svcrdma through the lab's forward (127.0.0.1:PORT,
MPA v2, RFC 8797 private data) and sends RPC NULL calls (NFSv3) as RDMA
Sends, each FPDU written in two pieces: its first K octets, a 0.5 s pause
(the QEMU relay then delivers them as their own TCP segment), the rest.
Default K: 4 12 16 17 18 19 20 (the Send header is 20 octets). Prints, per
call, the XID svcrdma answered (it echoes what it received), a Terminate, or
nothing. Linux 6.1's siw_get_hdr() copies `hdrlen - MIN_DDP_HDR` octets for
the header's second piece instead of `hdrlen - fpdu_part_rcvd`: with K in
17..19 it takes K-16 octets of the payload as header, and the call arrives
without its first K-16 octets (the echoed XID is shifted), or, with CRC,
fails its CRC (Terminate). Exit status 0: every call answered with its own
XID; 1: the guest's siw mis-assembled at least one; 2: setup failed.
Needs the lab's scripts/mpa_probe.py ($LAB, default /work/shared/lab/linux-siw).
"""
import os
import socket
import struct
import sys
import time

LAB = os.environ.get("LAB", "/work/shared/lab/linux-siw")
sys.path.insert(0, os.path.join(LAB, "scripts"))
import mpa_probe as m  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    crc = "--crc" in args
    port = 20049
    if "--port" in args:
        port = int(args[args.index("--port") + 1])
    ks = [int(a) for i, a in enumerate(args)
          if not a.startswith("--") and (i == 0 or args[i - 1] != "--port")]
    ks = ks or [4, 12, 16, 17, 18, 19, 20]
    pd = struct.pack(">HH", 16, 0) + struct.pack(">IBBBB", m.RPCRDMA_MAGIC, 1, 0, 3, 3)
    flags = m.F_ENHANCED | (m.F_CRC if crc else 0)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(m.build_rr(m.KEY_REQ, flags, 2, pd))
        hdr = m.recv_exact(s, 20)
        m.recv_exact(s, struct.unpack(">H", hdr[18:20])[0])
    except (OSError, EOFError) as e:
        print(f"siw-split-probe: no MPA Reply: {e!r}")
        return 2
    use_crc = bool(hdr[16] & m.F_CRC)
    print(f"siw-split-probe: connected, MPA CRC {'on' if use_crc else 'off'}")
    buf = b""
    bad = 0
    for msn, k in enumerate(ks, 1):
        xid = 0x51000000 + msn
        rr = struct.pack(">IIIIIII", xid, 1, 32, 0, 0, 0, 0) + m.rpc_null_call(xid, 100003, 3)
        fr = m.fpdu(m.untagged(3, 0, msn, 0, rr), use_crc)
        time.sleep(0.2)
        s.sendall(fr[:k])
        time.sleep(0.5)
        s.sendall(fr[k:])
        got = None
        t_end = time.time() + 4
        while time.time() < t_end and got is None:
            try:
                c = s.recv(65536)
            except socket.timeout:
                break
            if not c:
                got = "connection closed"
                break
            buf += c
            frames, buf = m.parse_fpdus(buf, use_crc)
            for _f, u, _ok in frames:
                op = u[1] & 0x0F
                if op == 7:
                    got = "Terminate " + m.hexs(u[:28])
                elif op in (3, 4, 5, 6):
                    rx = struct.unpack(">I", u[18:22])[0]
                    got = f"reply xid {rx:08x}" + ("" if rx == xid else " (NOT the call's)")
        ok = got == f"reply xid {xid:08x}"
        bad += not ok
        print(f"split after {k:2} octets: call xid {xid:08x}: {got or 'no reply in 4 s'}"
              f" -> {'ok' if ok else 'MIS-ASSEMBLED'}")
        if got and not got.startswith("reply"):
            break
    s.close()
    print(f"siw-split-probe: {'the guest siw mis-assembles split headers' if bad else 'all calls intact'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
