/*
 * qhca: an emulated RDMA host channel adapter -- the loopback wire
 *
 * Every packet the engine sends is delivered, unchanged and at once, to the
 * same device's receive path: both ends of every connection are QPs of this
 * device.  Nothing is lost or reordered, so the engine's retransmission
 * paths run only on NAKs and on packets the responder drops (a destination
 * QP that does not exist or is not ready), as on a real fabric.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qhca-wire.h"
#include "trace.h"

static void qhca_loopback_send(QhcaWire *w, const QhcaPkt *pkt)
{
    trace_qhca_wire_tx(pkt->opcode, pkt->dest_qpn, pkt->psn, pkt->len);
    qhca_rc_recv(w->s, pkt);
}

static void qhca_loopback_reset(QhcaWire *w)
{
}

static void qhca_loopback_free(QhcaWire *w)
{
    g_free(w);
}

static const QhcaWireOps qhca_loopback_ops = {
    .name = "loopback",
    .send = qhca_loopback_send,
    .reset = qhca_loopback_reset,
    .free = qhca_loopback_free,
};

QhcaWire *qhca_wire_loopback_new(QhcaState *s)
{
    QhcaWire *w = g_new0(QhcaWire, 1);

    w->ops = &qhca_loopback_ops;
    w->s = s;
    return w;
}
