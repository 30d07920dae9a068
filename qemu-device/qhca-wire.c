/*
 * qhca: an emulated RDMA host channel adapter -- the loopback wire
 *
 * Every packet the engine sends for one of the port's own GIDs is
 * delivered, unchanged, to the same device's receive path: both ends of the
 * connection are QPs of this device.  Nothing is lost or reordered, so the
 * engine's retransmission paths run only on NAKs and on packets the
 * responder drops (a destination QP that does not exist or is not ready),
 * as on a real fabric.  A packet for any other GID leaves on the port's
 * netdev (qhca-roce.c), or, without one, is dropped: no route.
 *
 * By default a packet is delivered at once, from inside send(), so that a
 * small message completes within the doorbell that started it.  With the
 * x-wire-queued property the wire behaves like a fabric with latency
 * instead: packets wait in a FIFO that the engine's bottom half drains (a
 * budget per run), so that a requester sends a whole burst before the first
 * answer comes back, as it does over a real network.
 *
 * For tests, x-wire-drop loses packets on purpose: bit n set drops the
 * (n + 1)-th packet the wire carries since realize (requests and responses
 * alike), so that a test can aim at one packet of a burst.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qhca-wire.h"
#include "trace.h"

typedef struct QhcaLoopback {
    QhcaWire w;
    GQueue queue;               /* of QhcaPkt, when queued */
} QhcaLoopback;

static void qhca_loopback_send(QhcaWire *w, const QhcaPkt *pkt)
{
    QhcaLoopback *lb = container_of(w, QhcaLoopback, w);

    trace_qhca_wire_tx(pkt->opcode, pkt->dest_qpn, pkt->psn, pkt->len);
    if (w->tx_packets <= 64 && (w->s->wire_drop >> (w->tx_packets - 1)) & 1) {
        trace_qhca_wire_drop(w->tx_packets, pkt->opcode, pkt->dest_qpn,
                             pkt->psn);
        return;
    }
    if (!qhca_gid_ours(w->s, pkt->dgid)) {
        if (w->s->roce) {
            qhca_roce_send(w->s->roce, pkt);
        } else {
            w->s->port.tx_no_route++;
            trace_qhca_wire_no_route(pkt->opcode, pkt->dest_qpn, pkt->psn);
        }
        return;
    }
    if (w->s->wire_queued) {
        QhcaPkt *copy = g_new(QhcaPkt, 1);

        memcpy(copy, pkt, offsetof(QhcaPkt, payload) + pkt->len);
        g_queue_push_tail(&lb->queue, copy);
        return;
    }
    qhca_rc_recv(w->s, pkt);
}

static bool qhca_loopback_poll(QhcaWire *w, unsigned *budget)
{
    QhcaLoopback *lb = container_of(w, QhcaLoopback, w);
    QhcaPkt *pkt;

    while (*budget && (pkt = g_queue_pop_head(&lb->queue))) {
        (*budget)--;
        qhca_rc_recv(w->s, pkt);
        g_free(pkt);
    }
    if (w->s->roce && qhca_roce_poll(w->s->roce, budget)) {
        return true;
    }
    return !g_queue_is_empty(&lb->queue);
}

static bool qhca_loopback_pending(QhcaWire *w)
{
    return !g_queue_is_empty(&container_of(w, QhcaLoopback, w)->queue) ||
           (w->s->roce && qhca_roce_pending(w->s->roce));
}

static void qhca_loopback_reset(QhcaWire *w)
{
    QhcaLoopback *lb = container_of(w, QhcaLoopback, w);

    g_queue_clear_full(&lb->queue, g_free);
    if (w->s->roce) {
        qhca_roce_reset(w->s->roce);
    }
}

static void qhca_loopback_free(QhcaWire *w)
{
    qhca_loopback_reset(w);
    g_free(container_of(w, QhcaLoopback, w));
}

static const QhcaWireOps qhca_loopback_ops = {
    .name = "loopback",
    .send = qhca_loopback_send,
    .poll = qhca_loopback_poll,
    .pending = qhca_loopback_pending,
    .reset = qhca_loopback_reset,
    .free = qhca_loopback_free,
};

QhcaWire *qhca_wire_loopback_new(QhcaState *s)
{
    QhcaLoopback *lb = g_new0(QhcaLoopback, 1);

    g_queue_init(&lb->queue);
    lb->w.ops = &qhca_loopback_ops;
    lb->w.s = s;
    return &lb->w;
}
