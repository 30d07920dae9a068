#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR MIT
"""Per-step latency of qhca send-queue doorbells, from a QEMU trace.

Capture (log backend; the ns argument of each step is the host's monotonic
clock, read by the device only while the event is enabled):

    qemu-system-x86_64 ... -device qhca \\
        -trace 'qhca_db*' -trace 'qhca_engine_run*' -trace 'qhca_qp_turn*' \\
        -trace qhca_req_send -trace qhca_resp_placed -trace qhca_req_recv \\
        -trace qhca_cqe -trace qhca_irq -D /tmp/qhca-trace.log

then:

    scripts/qhca-trace-steps.py /tmp/qhca-trace.log [--qpn 0x400] [--skip 100]

Every SQ doorbell (qhca_db of type 1) starts an iteration of its QP; each
step is the first matching event after it and before that QP's next SQ
doorbell: the doorbell accepted, the engine run and the QP's turn starting,
the first request packet out, that packet's payload in the responder's
memory (matched by PSN), the first response in, the QP's CQE, the MSI-X
message, the turn and run ending, and the doorbell's MMIO store returning.
Steps that an iteration lacks (no CQE for an unsignaled WQE, no MSI-X) are
left out of that iteration.  For each step it prints how many iterations
had it and the min and median time since the doorbell, in microseconds, with
the steps sorted by median; 'delta' is the median of each iteration's time
from the step above to this one.
"""

import argparse
import re
import statistics
import sys

LINE = re.compile(r'^(?:\d+@[\d.]+:)?(qhca_\w+) ns (\d+)(.*)$')
FIELD = re.compile(r'\b(qp|qn|psn|wqe|type|inline|doorbell) (0x[0-9a-f]+|\d+)')

QHCA_DB_SQ = 1


def parse(path):
    events = []
    with open(path, errors='replace') as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                continue
            name, ns, rest = m.group(1), int(m.group(2)), m.group(3)
            fields = {k: int(v, 0) for k, v in FIELD.findall(rest)}
            events.append((ns, name, fields))
    events.sort(key=lambda e: e[0])
    return events


def qp_of(fields):
    if 'qp' in fields:
        return fields['qp']
    return fields.get('qn')


# step name -> (event, how it matches the iteration's QP q and first PSN p)
STEPS = [
    ('doorbell accepted', 'qhca_db_accept', lambda f, q, p: f.get('qn') == q),
    ('engine run begins', 'qhca_engine_run_begin', lambda f, q, p: True),
    ('QP turn begins', 'qhca_qp_turn_begin', lambda f, q, p: f.get('qp') == q),
    ('request packet out', 'qhca_req_send', lambda f, q, p: f.get('qp') == q),
    ('payload in memory', 'qhca_resp_placed', lambda f, q, p: p is not None and f.get('psn') == p),
    ('response in', 'qhca_req_recv', lambda f, q, p: f.get('qp') == q),
    ('CQE written', 'qhca_cqe', lambda f, q, p: f.get('qp') == q),
    ('MSI-X', 'qhca_irq', lambda f, q, p: True),
    ('QP turn ends', 'qhca_qp_turn_end', lambda f, q, p: f.get('qp') == q),
    ('engine run ends', 'qhca_engine_run_end', lambda f, q, p: True),
    ('doorbell store returns', 'qhca_db_done', lambda f, q, p: f.get('qn') == q),
]


def iterations(events, only_qpn):
    starts = []
    for i, (ns, name, f) in enumerate(events):
        if name != 'qhca_db' or 'doorbell' not in f:
            continue
        val = f['doorbell']
        if (val >> 24) & 0xf != QHCA_DB_SQ:
            continue
        q = val & 0xffffff
        if only_qpn is None or q == only_qpn:
            starts.append((i, q))
    for n, (i, q) in enumerate(starts):
        # Up to this QP's next SQ doorbell.
        end = len(events)
        for j, q2 in starts[n + 1:]:
            if q2 == q:
                end = j
                break
        t0 = events[i][0]
        psn = None
        got = {}
        for ns, name, f in events[i + 1:end]:
            for step, ev, match in STEPS:
                if step in got or name != ev or not match(f, q, psn):
                    continue
                got[step] = ns - t0
                if step == 'request packet out':
                    psn = f.get('psn')
        yield q, got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('trace')
    ap.add_argument('--qpn', type=lambda v: int(v, 0), help='only this QP')
    ap.add_argument('--skip', type=int, default=0,
                    help='leave out the first N iterations (warm-up)')
    a = ap.parse_args()
    its = list(iterations(parse(a.trace), a.qpn))[a.skip:]
    if not its:
        sys.exit('no SQ doorbell in %s (enable qhca_db and the steps)' % a.trace)
    rows = []
    for step, _, _ in STEPS:
        v = [g[step] for _, g in its if step in g]
        if v:
            rows.append((statistics.median(v), step, v))
    rows.sort()
    print('%d doorbells, QPs %s' % (len(its), ' '.join(
        sorted({'0x%x' % q for q, _ in its}))))
    print('%-24s %6s %10s %10s %10s' % ('step', 'n', 'min us', 'median us',
                                         'delta us'))
    prev = None
    for med, step, v in rows:
        if prev is None:
            delta = med
        else:
            d = [g[step] - g[prev] for _, g in its if step in g and prev in g]
            delta = statistics.median(d) if d else float('nan')
        print('%-24s %6d %10.2f %10.2f %10.2f' % (step, len(v), min(v) / 1e3,
                                                   med / 1e3, delta / 1e3))
        prev = step


if __name__ == '__main__':
    main()
