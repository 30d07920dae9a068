#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Checks a capture of qhca's RoCEv2 port (QEMU's filter-dump, pcap) from outside:

    scripts/check-capture.py PCAP PORT_MAC PEER_MAC

PCAP is what `scripts/vm.sh --dump` recorded while the VM suite's wire section ran (scripts/test.sh,
stage vm-wire): every frame qhca0's port (PORT_MAC) sent or received, among them the frames of
Linux's rxe (PEER_MAC). Wireshark's dissectors (tshark, Debian's) must decode every RoCEv2 frame of
either side as InfiniBand with every extended header the opcode calls for and no malformed or error
expert entry; every frame's ICRC, recomputed here from the raw bytes as the IBA specifies (CRC-32
over 8 bytes of 0xff and the IP, UDP and BTH headers with their variant fields masked, then the rest
of the packet; sent least significant byte first), must match, and so must the IPv4 header
checksum; both sides must have sent every RC opcode (and a UD SEND). The two datagrams the suite
sends on purpose (wire_arp_and_hostile_datagrams: shorter than a BTH, or to QP 0x123456 with a zero
ICRC) are left out. Prints "test NAME ... ok|FAILED" per check and "capture: N passed, M failed";
exits 0 only if none failed.
"""

import struct
import subprocess
import sys
import zlib

ROCE_PORT = 4791
HOSTILE_QPN = 0x123456

# IBA opcodes (BTH byte 0) -> the extended headers after the BTH, as tshark names them.
RC_HEADERS = {
    0x00: (), 0x01: (), 0x02: (), 0x03: ("immdt",), 0x04: (), 0x05: ("immdt",),
    0x06: ("reth",), 0x07: (), 0x08: (), 0x09: ("immdt",), 0x0a: ("reth",),
    0x0b: ("reth", "immdt"), 0x0c: ("reth",), 0x0d: ("aeth",), 0x0e: (), 0x0f: ("aeth",),
    0x10: ("aeth",), 0x11: ("aeth",), 0x12: ("aeth", "atomicacketh"), 0x13: ("atomiceth",),
    0x14: ("atomiceth",), 0x16: ("ieth",), 0x17: ("ieth",),
}
UD_HEADERS = {0x64: ("deth",), 0x65: ("deth", "immdt")}
HEADERS = {**RC_HEADERS, **UD_HEADERS}
# What each side must have sent: every RC opcode of the data path (SEND with invalidate is not
# among them: perftest and the wire check do not use it) and a UD SEND.
MUST_SEND = sorted(set(range(0x00, 0x15)) | {0x64})
# A field of each header, present in tshark's output when it decoded the header.
FIELD = {
    "reth": "infiniband.reth.dmalen", "aeth": "infiniband.aeth.msn",
    "atomiceth": "infiniband.atomiceth.swapdt",
    "atomicacketh": "infiniband.atomicacketh.origremdt", "immdt": "infiniband.immdt",
    "ieth": "infiniband.ieth", "deth": "infiniband.deth.srcqp",
}

passed = failed = 0


def result(name, problems):
    global passed, failed
    if problems:
        failed += 1
        print(f"test {name} ... FAILED: {len(problems)} problem(s)")
        for p in problems[:20]:
            print(f"    {p}")
    else:
        passed += 1
        print(f"test {name} ... ok")


def frames(path):
    """(number, bytes) of every frame in a classic pcap file (either byte order, us or ns)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        raise ValueError(f"{path}: not a pcap file")
    (linktype,) = struct.unpack(end + "I", data[20:24])
    if linktype != 1:
        raise ValueError(f"{path}: link type {linktype}, not Ethernet")
    off, n = 24, 0
    while off + 16 <= len(data):
        incl, orig = struct.unpack(end + "II", data[off + 8:off + 16])
        n += 1
        yield n, data[off + 16:off + 16 + incl], orig
        off += 16 + incl


def ip_checksum(hdr):
    s = sum(struct.unpack("!%dH" % (len(hdr) // 2), hdr))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return s == 0xffff


def icrc(ip, udp_and_rest):
    """The ICRC of an IPv4 RoCEv2 packet: ip is its IPv4 header, udp_and_rest the UDP datagram
    without the ICRC."""
    ip = bytearray(ip)
    ip[1] = 0xff  # TOS
    ip[8] = 0xff  # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    udp = bytearray(udp_and_rest[:8])
    udp[6:8] = b"\xff\xff"  # UDP checksum
    bth = bytearray(udp_and_rest[8:20])
    bth[4] = 0xff  # the reserved byte before the destination QP (FECN/BECN live here)
    crc = zlib.crc32(b"\xff" * 8)
    crc = zlib.crc32(bytes(ip) + bytes(udp) + bytes(bth), crc)
    crc = zlib.crc32(udp_and_rest[20:], crc)
    return crc


def raw_packets(path, macs):
    """The RoCEv2 packets of the capture sent by one of macs: number -> facts."""
    out = {}
    for n, fr, orig in frames(path):
        if len(fr) < orig or len(fr) < 14 + 20 + 8:
            continue
        src = ":".join(f"{b:02x}" for b in fr[6:12])
        if src not in macs or fr[12:14] != b"\x08\x00":
            continue
        ihl = (fr[14] & 0xf) * 4
        ip = fr[14:14 + ihl]
        if ip[9] != 17:
            continue
        udp = fr[14 + ihl:]
        dport, ulen = struct.unpack("!2xH H", udp[:6])
        if dport != ROCE_PORT:
            continue
        udp = udp[:ulen]
        facts = {"src": src, "ulen": ulen, "ip_ok": ip_checksum(ip), "df": ip[6] & 0x40 != 0}
        if ulen < 8 + 12 + 4:
            facts["short"] = True
        else:
            facts["opcode"] = udp[8]
            facts["qpn"] = int.from_bytes(udp[13:16], "big")
            (sent,) = struct.unpack("<I", udp[-4:])
            facts["icrc_ok"] = sent == icrc(ip, udp[:-4])
        out[n] = facts
    return out


def tshark(path):
    """tshark's decoding: number -> (opcode, {header field: value}, malformed/error?)."""
    fields = ["frame.number", "infiniband.bth.opcode", "_ws.malformed", "_ws.expert.severity"]
    hdrs = sorted(FIELD.items())
    fields += [f for _, f in hdrs]
    cmd = ["tshark", "-r", path, "-n", "-Y", f"udp.dstport == {ROCE_PORT}",
           # Wireshark's RPC-over-RDMA heuristic takes a SEND's first bytes for its own header
           # and calls short ones malformed: it is not what these frames carry.
           "--disable-protocol", "rpcordma", "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"tshark failed ({res.returncode}): {res.stderr.strip()[:400]}")
    out = {}
    for line in res.stdout.splitlines():
        w = line.split("\t")
        w += [""] * (len(fields) - len(w))
        n = int(w[0])
        op = int(w[1], 0) if w[1] else None
        # Expert severities: 0x00800000 is error.
        sev = [int(x, 0) for x in w[3].split(",") if x]
        bad = bool(w[2]) or any(s >= 0x00800000 for s in sev)
        present = {h: bool(w[4 + i]) for i, (h, _) in enumerate(hdrs)}
        out[n] = (op, present, bad)
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, port_mac, peer_mac = sys.argv[1], sys.argv[2].lower(), sys.argv[3].lower()
    names = {port_mac: "qhca", peer_mac: "rxe"}
    try:
        raw = raw_packets(path, names)
        dec = tshark(path)
    except (OSError, ValueError, RuntimeError) as e:
        result("capture_read", [str(e)])
        print(f"capture: {passed} passed, {failed} failed")
        return 1
    hostile = {n for n, f in raw.items() if f.get("short") or f.get("qpn") == HOSTILE_QPN}
    pkts = {n: f for n, f in raw.items() if n not in hostile}
    count = {name: sum(1 for f in pkts.values() if f["src"] == mac) for mac, name in names.items()}
    print(f"capture: {path}: {len(pkts)} RoCEv2 frames ({count['qhca']} from qhca {port_mac}, "
          f"{count['rxe']} from rxe {peer_mac}), {len(hostile)} hostile ones left out")
    result("capture_has_both_sides",
           [f"only {c} frames from {who}" for who, c in count.items() if c < 1000])

    problems = []
    for n, f in sorted(pkts.items()):
        d = dec.get(n)
        if d is None:
            problems.append(f"frame {n} ({names[f['src']]}): tshark did not show it")
            continue
        op, present, bad = d
        if bad:
            problems.append(f"frame {n} ({names[f['src']]}): malformed or an error in tshark")
        if op != f["opcode"]:
            problems.append(f"frame {n}: tshark's opcode {op}, the BTH's {f['opcode']}")
        want = HEADERS.get(f["opcode"])
        if want is None:
            problems.append(f"frame {n} ({names[f['src']]}): opcode 0x{f['opcode']:02x}")
            continue
        for h in FIELD:
            if present[h] != (h in want):
                problems.append(f"frame {n} ({names[f['src']]}, opcode 0x{f['opcode']:02x}): "
                                f"{h} {'missing' if h in want else 'not expected'}")
    result("capture_tshark_decodes_every_frame", problems)

    problems = [f"frame {n} ({names[f['src']]}, opcode 0x{f['opcode']:02x}): bad ICRC"
                for n, f in sorted(pkts.items()) if not f["icrc_ok"]]
    result("capture_icrc_valid", problems)

    problems = [f"frame {n} ({names[f['src']]}): {what}"
                for n, f in sorted(pkts.items())
                for what, ok in (("bad IPv4 header checksum", f["ip_ok"]), ("no DF", f["df"]))
                if not ok]
    result("capture_ipv4_headers", problems)

    problems = []
    for mac, who in names.items():
        seen = {f["opcode"] for f in pkts.values() if f["src"] == mac}
        missing = [f"0x{o:02x}" for o in MUST_SEND if o not in seen]
        if missing:
            problems.append(f"{who} sent no {', '.join(missing)}")
    result("capture_every_opcode_both_ways", problems)

    print(f"capture: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
