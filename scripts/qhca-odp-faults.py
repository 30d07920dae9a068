#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Page-fault service time of qhca, from a QEMU trace: for every PAGE_FAULT event the device
raised (qhca_odp_fault), the time until the driver's RESUME for its token was taken
(qhca_odp_resume), both stamped with the host's monotonic clock in ns.

    QHCA_QEMU_OPTS="-trace qhca_odp_fault -trace qhca_odp_resume -D /tmp/qhca-odp.log" \\
        scripts/vm.sh -- ...
    scripts/qhca-odp-faults.py /tmp/qhca-odp.log

Prints count, min, median, p99 and max in us, requester and responder faults apart and together.
"""
import re
import sys

FAULT = re.compile(r"qhca_odp_fault ns (\d+) qp (0x[0-9a-f]+) responder (\d)\b.* token (0x[0-9a-f]+)")
RESUME = re.compile(r"qhca_odp_resume ns (\d+) qp (0x[0-9a-f]+) token (0x[0-9a-f]+) ok (\d)")


def pct(xs, p):
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def row(name, xs):
    if not xs:
        print(f"{name:<10} {0:>6}")
        return
    xs = sorted(xs)
    print(f"{name:<10} {len(xs):>6} {xs[0]:>9.1f} {pct(xs, 0.5):>9.1f} {pct(xs, 0.99):>9.1f} {xs[-1]:>9.1f}")


def main(path):
    raised = {}
    lat = {"requester": [], "responder": []}
    unanswered = 0
    with open(path, errors="replace") as f:
        for line in f:
            m = FAULT.search(line)
            if m:
                raised[m.group(4)] = (int(m.group(1)), "responder" if m.group(3) == "1" else "requester")
                continue
            m = RESUME.search(line)
            if m and m.group(3) in raised:
                t0, side = raised.pop(m.group(3))
                lat[side].append((int(m.group(1)) - t0) / 1000.0)
    unanswered = len(raised)
    print(f"{'fault side':<10} {'count':>6} {'min us':>9} {'median':>9} {'p99':>9} {'max':>9}")
    row("requester", lat["requester"])
    row("responder", lat["responder"])
    row("all", lat["requester"] + lat["responder"])
    if unanswered:
        print(f"({unanswered} faults without a RESUME in the trace)")
    return 0 if lat["requester"] or lat["responder"] else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
