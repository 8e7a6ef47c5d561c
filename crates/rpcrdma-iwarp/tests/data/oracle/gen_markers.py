#!/usr/bin/env python3
"""MPA Markers + CRC captures for `rpcrdma decode --pcap` tests, built with the
lab oracle's generator (/work/shared/lab/baseline/oracle/gen_rpcrdma_pcap.py).

M and C set in both MPA frames: Markers in both directions, counted from the
first octet after the MPA frame (a Marker with FPDUPTR 0 leads the first
FPDU), inside the CRC. 4 Sends each way (RDMA_MSG GETATTR call + 300 octets
of padding / reply).

usage: gen_markers.py OUT.pcap [--one-fpdu-per-segment]

markers_crc.pcap (one FPDU per TCP segment) is decoded by tshark 4.0.17 with
8 x "Good CRC32", FPDUPTR 0 / 104 / 208 / 312 (initiator) and xids
0x4d000001..4 both ways; tshark's Marker code assumes one FPDU per segment,
so markers_crc_segmented.pcap (700-octet segments) is checked against ours only.
"""
import sys, struct
sys.path.insert(0, "/work/shared/lab/baseline/oracle")  # gen_rpcrdma_pcap
from gen_rpcrdma_pcap import *

def markers_crc(fpdus_ulpdus, crc):
    # FPDUs with markers; the CRC covers the markers inside the FPDU.
    w = bytearray()
    out = []
    for u in fpdus_ulpdus:
        body = struct.pack(">H", len(u)) + u
        body += b"\0" * ((-len(body)) % 4)
        s = len(w)
        for b in body:
            if len(w) % 512 == 0:
                w += struct.pack(">HH", 0, len(w) - s)
            w.append(b)
        if len(w) % 512 == 0:
            w += struct.pack(">HH", 0, len(w) - s)
        c = crc32c(bytes(w[s:])) if crc else 0
        w += struct.pack("<I", c)
        out.append(bytes(w[s:]))
    return out

p = Pcap(sys.argv[1])
conn = TcpConn(p, 40601)
conn.handshake()
# M and C set in both frames: markers both ways, CRC on.
conn.c2s(mpa_rr(False, m=1, c=1, rev=1, pd=rfc8797_pd()))
conn.s2c(mpa_rr(True, m=1, c=1, rev=1, pd=rfc8797_pd()))
big = bytes(300)
ul_c = [ddp_untagged(OP_SEND, 0, i + 1, 0, rr1(0x4D000001 + i, RDMA_MSG) + NO_CHUNKS + getattr_call(0x4D000001 + i) + big) for i in range(4)]
ul_s = [ddp_untagged(OP_SEND, 0, i + 1, 0, rr1(0x4D000001 + i, RDMA_MSG) + NO_CHUNKS + getattr_reply(0x4D000001 + i)) for i in range(4)]
cs = markers_crc(ul_c, True)
ss = markers_crc(ul_s, True)
if "--one-fpdu-per-segment" in sys.argv:
    for f in cs:
        conn.c2s(f)
    for f in ss:
        conn.s2c(f)
else:
    cs, ss = b"".join(cs), b"".join(ss)
    for i in range(0, len(cs), 700):
        conn.c2s(cs[i:i + 700])
    for i in range(0, len(ss), 700):
        conn.s2c(ss[i:i + 700])
p.close()
