#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""The host's side of a guest's link switch (scripts/vm.sh --link-control).

    scripts/qmp-link.py QMP_SOCKET PORT_SOCKET

A guest cannot reach its own QEMU's monitor, yet a test of a NIC's link state needs the cable
pulled out and put back. vm.sh gives the guest a virtio-serial port (named qhca.link) whose host
end is the unix socket PORT_SOCKET, and QEMU a QMP socket QMP_SOCKET; this program, started
beside the guest, connects to both and serves the port's requests one line at a time:

    set_link NAME on|off    ->  ok | error: WHY

NAME is a QEMU netdev or NIC id (vm.sh's first HCA port is "qhcaport"). It ends when QEMU
closes either socket.
"""
import json
import socket
import sys
import time


def connect(path, limit=120.0):
    """A connection to unix socket `path`, once QEMU listens on it."""
    t0 = time.time()
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.time() - t0 > limit:
                sys.exit(f"qmp-link: nothing listens on {path}")
            time.sleep(0.2)


class Qmp:
    def __init__(self, path):
        self.f = connect(path).makefile("rw")
        self.f.readline()  # the greeting
        self.run("qmp_capabilities")

    def run(self, cmd, **args):
        """The command's answer: None on success, else its error's description."""
        self.f.write(json.dumps({"execute": cmd, "arguments": args}) + "\n")
        self.f.flush()
        while True:
            line = self.f.readline()
            if not line:
                sys.exit(0)
            r = json.loads(line)
            if "return" in r:
                return None
            if "error" in r:
                return r["error"].get("desc", str(r["error"]))
            # An asynchronous event ("event"): not the answer.


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    qmp = Qmp(sys.argv[1])
    port = connect(sys.argv[2]).makefile("rw")
    for line in port:
        w = line.split()
        if len(w) == 3 and w[0] == "set_link" and w[2] in ("on", "off"):
            err = qmp.run("set_link", name=w[1], up=w[2] == "on")
            reply = "ok" if err is None else f"error: {err}"
        else:
            reply = f"error: not a request: {line.strip()!r}"
        port.write(reply + "\n")
        port.flush()


if __name__ == "__main__":
    main()
