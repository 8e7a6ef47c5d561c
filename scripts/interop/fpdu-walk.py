#!/usr/bin/env python3
"""Walks the MPA FPDUs one side of an iWARP capture sent, independently of
both our dissector and Wireshark.

    fpdu-walk.py CAPTURE PORT

For every TCP connection in CAPTURE, the stream sent FROM port PORT (the
server side: `tcp.srcport == PORT`) is reassembled from tshark's
`tcp.payload` fields, the MPA Request/Reply frame skipped (its private data
length read), and the FPDUs walked by their ULPDU_Length (no Markers: the
project never negotiates them). With the CRC negotiated (C flag of the MPA
frame) every FPDU's CRC32C is recomputed here (a table implementation,
checked on "123456789"); without it the CRC field must be zero.

Also counted: FPDUs that straddle a TCP segment boundary, and FPDUs whose
4-octet CRC trailer is itself split across two segments — the arrival that
Linux siw's siw_get_trailer() reassembles at the wrong offset (see
docs/interop-linux.md). Exit status 1 on a CRC mismatch, a non-zero CRC
field without CRC, or a stream that does not end on an FPDU boundary
(a connection cut mid-FPDU by a Terminate is reported, not failed).
"""
import bisect
import collections
import subprocess
import sys

T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def main():
    pcap, port = sys.argv[1], int(sys.argv[2])
    out = subprocess.run(
        ["tshark", "-r", pcap, "-Y", f"tcp.srcport=={port} && tcp.len>0", "-T", "fields",
         "-e", "tcp.stream", "-e", "tcp.seq", "-e", "tcp.payload"],
        capture_output=True, text=True, check=True).stdout
    streams = collections.defaultdict(dict)
    for line in out.splitlines():
        s, seq, payload = line.split("\t")
        streams[int(s)].setdefault(int(seq), bytes.fromhex(payload))
    c = collections.Counter()
    ok = True
    for s, segs in sorted(streams.items()):
        data, starts, nxt = bytearray(), [], 1
        for seq in sorted(segs):
            b = segs[seq]
            if seq + len(b) <= nxt:
                continue  # retransmission
            if seq > nxt:
                print(f"stream {s}: capture gap at {nxt}")
                c["gaps"] += 1
                break
            starts.append(len(data))  # increasing: segments in order
            data += b[nxt - seq:]
            nxt = seq + len(b)
        if len(data) < 20 or data[:16] not in (b"MPA ID Rep Frame", b"MPA ID Req Frame"):
            continue
        crc_on = bool(data[16] & 0x40)
        off = 20 + int.from_bytes(data[18:20], "big")
        while off + 2 <= len(data):
            ulen = int.from_bytes(data[off:off + 2], "big")
            end = off + 2 + ulen + (-(2 + ulen)) % 4
            if end + 4 > len(data):
                print(f"stream {s}: ends {len(data) - off} octets into an FPDU (connection cut)")
                c["cut"] += 1
                break
            c["fpdus"] += 1
            # The first segment start after `off` (and after `end`): a
            # bisection, not a scan of every start (an FPDU per 4 KiB
            # reply made that quadratic: hours for a 16 MiB copy).
            i = bisect.bisect_right(starts, off)
            if i < len(starts) and starts[i] < end + 4:
                c["straddling a segment boundary"] += 1
            i = bisect.bisect_right(starts, end)
            if i < len(starts) and starts[i] < end + 4:
                c["CRC trailer split across segments"] += 1
            stored = int.from_bytes(data[end:end + 4], "little")
            if crc_on:
                c["crc checked"] += 1
                if crc32c(bytes(data[off:end])) != stored:
                    print(f"stream {s}: CRC mismatch at {off}")
                    c["crc mismatch"] += 1
                    ok = False
            elif stored != 0:
                c["non-zero CRC field without CRC"] += 1
                ok = False
            off = end + 4
    print(f"{pcap} (sent from port {port}): " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 0 if ok and c["fpdus"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
