/*
 * qhca: an emulated RDMA host channel adapter -- the port on a QEMU netdev
 *
 * With -device qhca,netdev=ID the port is a RoCEv2 port: packets for a GID
 * that is not the port's own leave as frames (qhca-roce.c encodes them),
 * and frames that arrive are decoded and handed to the engine: at once, in
 * the main loop's turn that read them, when none wait ahead of them and the
 * engine is not running, else through a queue its bottom half drains, a
 * budget per run; while the queue is full the netdev holds them
 * (can_receive), as a NIC's ring would.
 *
 * Addresses: an IPv4 GID's MAC is resolved with ARP.  The port answers ARP
 * requests for its own IPv4 GIDs, and learns a neighbour's MAC only from a
 * reply to a request it has out for that neighbour (the first one; a
 * request, or a reply nobody asked for, teaches it nothing: otherwise any
 * host on the segment could redirect the port's traffic to itself).  Frames
 * wait for the answer in a short queue per neighbour, and the request is
 * sent again when a frame finds it unanswered after 100 ms.  A MAC learnt is
 * used for 30 s of virtual time, then the next frame to it asks again while
 * still going to it, so that a neighbour whose MAC changes is found again.
 * The port answers IPv6 neighbour solicitations for its IPv6 GIDs (RFC 4861;
 * the link-local GID 0), so that a host resolves it as it resolves a NIC.
 * An IPv6 GID it sends to is a link-local address whose interface
 * identifier is a unicast MAC's EUI-64, which gives the MAC itself; other
 * IPv6 destinations have no route here.
 *
 * While the port's Ethernet QP is in RTR or RTS (qhca-eth.c), every frame
 * for the port that is not RoCEv2 for one of its GIDs goes to that QP, ARP
 * and neighbour solicitations included: the guest's stack owns the
 * addresses then, and the port answers nothing, learning only from the
 * replies to its own ARP requests.
 *
 * For tests, x-loss-drop, x-loss-dup and x-loss-reorder make the port lose,
 * duplicate or hold back (behind the next frame, or for a millisecond) that
 * many frames per mille of those it sends, chosen by a generator seeded
 * with x-loss-seed.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/cutils.h"
#include "qemu/main-loop.h"
#include "net/checksum.h"
#include "net/eth.h"
#include "qhca-wire.h"
#include "trace.h"

#define QHCA_NEIGH_MAX          16      /* resolved or being resolved */
#define QHCA_NEIGH_PENDING      64      /* frames waiting for one MAC */
#define QHCA_ARP_RETRY_NS       (100 * SCALE_MS)
#define QHCA_NEIGH_REACHABLE_NS (30 * NANOSECONDS_PER_SECOND)
#define QHCA_ROCE_RX_MAX        256     /* decoded packets waiting */
#define QHCA_HOLD_NS            SCALE_MS
#define QHCA_ARP_SIZE           28
#define QHCA_IPPROTO_ICMPV6     58
#define QHCA_ND_NS              135     /* neighbour solicitation */
#define QHCA_ND_NA              136     /* neighbour advertisement */
#define QHCA_ND_SIZE            24      /* type .. target address */
#define QHCA_ND_OPT_TLLA        2       /* target link-layer address */

typedef struct QhcaFrame {
    size_t len;
    uint8_t data[];
} QhcaFrame;

typedef struct QhcaNeigh {
    uint32_t ip;                /* 0: a free entry */
    bool resolved;
    bool asking;                /* a request is out: its first reply is taken */
    uint8_t mac[ETH_ALEN];
    int64_t asked_ns;           /* the last ARP request for it (real time) */
    int64_t confirmed_ns;       /* the reply that gave mac (virtual time) */
    uint64_t used;              /* for eviction: the last use's sequence */
    GQueue pending;             /* of QhcaFrame, their MAC not yet filled */
} QhcaNeigh;

struct QhcaRoce {
    QhcaState *s;
    GQueue rx;                  /* of QhcaPkt, decoded */
    QhcaNeigh neigh[QHCA_NEIGH_MAX];
    uint64_t use_seq;
    uint64_t rng;               /* x-loss-*: xorshift64 state */
    QhcaFrame *held;            /* x-loss-reorder: the frame held back */
    QEMUTimer *hold_timer;
    bool discard;               /* a reset empties the netdev's queue */
    bool link_down;             /* the link as last announced */
    uint8_t frame[QHCA_FRAME_MAX];
    QhcaPkt now;                /* the packet being taken at once */
};

/* ------------------------------------------------------------------------ */
/* transmit                                                                 */

static uint64_t qhca_roce_rand(QhcaRoce *r)
{
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return r->rng;
}

static void qhca_roce_put(QhcaRoce *r, const uint8_t *buf, size_t len)
{
    r->s->port.tx_frames++;
    r->s->port.tx_bytes += len;
    qemu_send_packet(qemu_get_queue(r->s->nic), buf, len);
}

static void qhca_roce_release_held(QhcaRoce *r)
{
    QhcaFrame *f = r->held;

    if (f) {
        r->held = NULL;
        timer_del(r->hold_timer);
        qhca_roce_put(r, f->data, f->len);
        g_free(f);
    }
}

static void qhca_roce_hold_timer(void *opaque)
{
    qhca_roce_release_held(opaque);
}

/* One frame onto the netdev, through the x-loss-* tests if they are on. */
static void qhca_roce_xmit(QhcaRoce *r, const uint8_t *buf, size_t len)
{
    QhcaState *s = r->s;
    uint32_t roll;

    if (!s->loss_drop && !s->loss_dup && !s->loss_reorder) {
        qhca_roce_put(r, buf, len);
        return;
    }
    roll = qhca_roce_rand(r) % 1000;
    if (roll < s->loss_drop) {
        s->port.test_dropped++;
        return;
    }
    roll -= s->loss_drop;
    if (roll < s->loss_dup) {
        s->port.test_duplicated++;
        qhca_roce_put(r, buf, len);
        qhca_roce_put(r, buf, len);
        qhca_roce_release_held(r);
        return;
    }
    roll -= s->loss_dup;
    if (roll < s->loss_reorder && !r->held) {
        s->port.test_reordered++;
        r->held = g_malloc(sizeof(QhcaFrame) + len);
        r->held->len = len;
        memcpy(r->held->data, buf, len);
        timer_mod(r->hold_timer,
                  qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + QHCA_HOLD_NS);
        return;
    }
    qhca_roce_put(r, buf, len);
    qhca_roce_release_held(r);
}

static QhcaNeigh *qhca_neigh_find(QhcaRoce *r, uint32_t ip)
{
    unsigned i;

    for (i = 0; i < QHCA_NEIGH_MAX; i++) {
        if (r->neigh[i].ip == ip) {
            return &r->neigh[i];
        }
    }
    return NULL;
}

/* The entry for ip, made (evicting the least recently used) if need be. */
static QhcaNeigh *qhca_neigh_get(QhcaRoce *r, uint32_t ip)
{
    QhcaNeigh *n = qhca_neigh_find(r, ip);
    QhcaNeigh *victim = &r->neigh[0];
    unsigned i;

    if (n) {
        return n;
    }
    for (i = 0; i < QHCA_NEIGH_MAX; i++) {
        if (!r->neigh[i].ip) {
            victim = &r->neigh[i];
            break;
        }
        if (r->neigh[i].used < victim->used) {
            victim = &r->neigh[i];
        }
    }
    r->s->port.tx_no_neigh += g_queue_get_length(&victim->pending);
    g_queue_clear_full(&victim->pending, g_free);
    *victim = (QhcaNeigh) { .ip = ip };
    g_queue_init(&victim->pending);
    return victim;
}

static void qhca_arp_send(QhcaRoce *r, uint16_t op, uint32_t spa,
                          const uint8_t *tha, uint32_t tpa)
{
    static const uint8_t bcast[ETH_ALEN] = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff
    };
    uint8_t f[QHCA_ETH_SIZE + QHCA_ARP_SIZE] = { 0 };
    const uint8_t *mac = r->s->conf.macaddr.a;
    uint8_t *a = f + QHCA_ETH_SIZE;

    memcpy(f, op == 1 ? bcast : tha, ETH_ALEN);
    memcpy(f + ETH_ALEN, mac, ETH_ALEN);
    stw_be_p(f + 12, QHCA_ETH_P_ARP);
    stw_be_p(a, 1);                             /* Ethernet */
    stw_be_p(a + 2, QHCA_ETH_P_IPV4);
    a[4] = ETH_ALEN;
    a[5] = 4;
    stw_be_p(a + 6, op);
    memcpy(a + 8, mac, ETH_ALEN);
    stl_be_p(a + 14, spa);
    if (op == 2) {
        memcpy(a + 18, tha, ETH_ALEN);
    }
    stl_be_p(a + 24, tpa);
    r->s->port.arp_tx++;
    trace_qhca_roce_arp_tx(op, spa, tpa);
    /* ARP is not RoCE: no x-loss-*, and not in tx_frames. */
    qemu_send_packet(qemu_get_queue(r->s->nic), f, sizeof(f));
}

/* Who has n's address?  Unless the question is out and not 100 ms old. */
static void qhca_neigh_ask(QhcaRoce *r, QhcaNeigh *n, uint32_t sip)
{
    int64_t now = qemu_clock_get_ns(QEMU_CLOCK_REALTIME);

    if (n->asking && now - n->asked_ns < QHCA_ARP_RETRY_NS) {
        return;
    }
    n->asking = true;
    n->asked_ns = now;
    qhca_arp_send(r, 1, sip, NULL, n->ip);
}

/* The frame (its destination MAC to fill) to the IPv4 neighbour dip. */
static void qhca_roce_to_ipv4(QhcaRoce *r, uint32_t sip, uint32_t dip,
                              uint8_t *f, size_t len)
{
    QhcaNeigh *n = qhca_neigh_get(r, dip);
    QhcaFrame *w;

    n->used = ++r->use_seq;
    if (n->resolved) {
        memcpy(f, n->mac, ETH_ALEN);
        qhca_roce_xmit(r, f, len);
        if (qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) - n->confirmed_ns >=
            QHCA_NEIGH_REACHABLE_NS) {
            qhca_neigh_ask(r, n, sip);
        }
        return;
    }
    qhca_neigh_ask(r, n, sip);
    if (g_queue_get_length(&n->pending) >= QHCA_NEIGH_PENDING) {
        r->s->port.tx_no_neigh++;
        return;
    }
    w = g_malloc(sizeof(QhcaFrame) + len);
    w->len = len;
    memcpy(w->data, f, len);
    g_queue_push_tail(&n->pending, w);
}

void qhca_roce_send(QhcaRoce *r, const QhcaPkt *pkt)
{
    size_t len = qhca_roce_encode(r->s, pkt, r->frame);

    if (!len) {
        return;
    }
    if (qhca_gid_is_v4(pkt->sgid)) {
        qhca_roce_to_ipv4(r, ldl_be_p(pkt->sgid + 12),
                          ldl_be_p(pkt->dgid + 12), r->frame, len);
    } else {
        qhca_gid_eui64_mac(pkt->dgid, r->frame);
        qhca_roce_xmit(r, r->frame, len);
    }
}

/* ------------------------------------------------------------------------ */
/* receive                                                                  */

/*
 * A frame (or an ARP sender) from MAC mac is forged: the port's own frames
 * never come back from the wire, and a frame comes from one station.
 */
static bool qhca_mac_forged(QhcaState *s, const uint8_t *mac)
{
    return is_multicast_ether_addr(mac) || buffer_is_zero(mac, ETH_ALEN) ||
           !memcmp(mac, s->conf.macaddr.a, ETH_ALEN);
}

/*
 * An ARP frame for the port.  answer: the port answers requests for its
 * IPv4 GIDs; otherwise (the Ethernet QP is active, and the frame goes on to
 * it whatever the port makes of it) it only learns from the replies to its
 * own requests, and counts nothing it does not look at.
 */
static void qhca_arp_recv(QhcaRoce *r, const uint8_t *buf, size_t size,
                          bool answer)
{
    QhcaState *s = r->s;
    const uint8_t *a = buf + QHCA_ETH_SIZE;
    uint32_t spa, tpa;
    QhcaFrame *f;
    QhcaNeigh *n;
    uint16_t op;
    bool for_us;

    if (size < QHCA_ETH_SIZE + QHCA_ARP_SIZE || lduw_be_p(a) != 1 ||
        lduw_be_p(a + 2) != QHCA_ETH_P_IPV4 || a[4] != ETH_ALEN ||
        a[5] != 4) {
        if (answer) {
            QHCA_RX_DROP(s, rx_malformed, "ARP: not Ethernet/IPv4");
        }
        return;
    }
    op = lduw_be_p(a + 6);
    spa = ldl_be_p(a + 14);
    tpa = ldl_be_p(a + 24);
    for_us = qhca_ipv4_ours(s, tpa);
    trace_qhca_roce_arp_rx(op, spa, tpa);
    /* The sender 0.0.0.0 is a probe (RFC 5227): not answered, not forged. */
    if (qhca_mac_forged(s, a + 8) || (spa && qhca_ipv4_forged(s, spa))) {
        if (answer) {
            QHCA_RX_DROP(s, rx_forged, "ARP: the sender is the port's own"
                         " address or MAC, or no one host");
        }
        return;
    }
    s->port.arp_rx++;
    if (!spa || !for_us) {
        return;
    }
    if (op == 1) {
        /* Answered; the asker is not learnt (see the top of this file). */
        if (answer) {
            qhca_arp_send(r, 2, tpa, a + 8, spa);
        }
        return;
    }
    n = qhca_neigh_find(r, spa);
    if (op != 2 || memcmp(a + 18, s->conf.macaddr.a, ETH_ALEN) || !n ||
        !n->asking) {
        trace_qhca_roce_arp_unasked(op, spa);
        return;
    }
    /* The answer to the port's question: the first one is believed. */
    n->asking = false;
    n->resolved = true;
    n->confirmed_ns = qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
    memcpy(n->mac, a + 8, ETH_ALEN);
    /*
     * A busy section, as the engine's sends are: what these frames bring
     * back at once (an ACK from another device on the same hub) queues
     * behind them instead of being taken now, when it could make the engine
     * send new frames ahead of the older ones still waiting here.
     */
    qhca_busy_enter(s);
    while ((f = g_queue_pop_head(&n->pending))) {
        memcpy(f->data, n->mac, ETH_ALEN);
        qhca_roce_xmit(r, f->data, f->len);
        g_free(f);
    }
    qhca_busy_exit(s);
}

/* The ICMPv6 checksum of @len bytes at @icmp between @ip6's addresses. */
static uint16_t qhca_icmpv6_sum(const uint8_t *ip6, const uint8_t *icmp,
                                size_t len)
{
    uint32_t sum = net_checksum_add(32, (uint8_t *)ip6 + 8);

    sum += len + QHCA_IPPROTO_ICMPV6;
    sum += net_checksum_add(len, (uint8_t *)icmp);
    return net_checksum_finish(sum);
}

/*
 * An IPv6 neighbour solicitation for one of the port's IPv6 GIDs, answered
 * with an advertisement (RFC 4861 7.1.1 and 7.2.4); anything else IPv6 but
 * RoCE is not the port's business and goes unanswered, uncounted.
 */
static void qhca_nd_recv(QhcaRoce *r, const uint8_t *buf, size_t size)
{
    enum { IP = QHCA_ETH_SIZE, ND = IP + QHCA_IPV6_SIZE };
    static const uint8_t all_nodes[16] = { 0xff, 2, [15] = 1 };
    QhcaState *s = r->s;
    const uint8_t *ip = buf + IP, *ns = buf + ND, *o;
    uint8_t f[ND + QHCA_ND_SIZE + 8] = { 0 };
    const uint8_t *mac = s->conf.macaddr.a;
    size_t plen;
    bool dad;

    if (size < ND + QHCA_ND_SIZE || ip[6] != QHCA_IPPROTO_ICMPV6 ||
        ns[0] != QHCA_ND_NS) {
        return;
    }
    plen = lduw_be_p(ip + 4);
    if (ND + plen > size || plen < QHCA_ND_SIZE || ip[7] != 255 ||
        ns[1] != 0 || qhca_icmpv6_sum(ip, ns, plen) != 0 ||
        ns[8] == 0xff || !qhca_gid_ours(s, ns + 8) ||
        qhca_gid_is_v4(ns + 8)) {
        return;
    }
    /* Options, each a multiple of 8 bytes, none of length 0. */
    for (o = ns + QHCA_ND_SIZE; o < ns + plen; o += o[1] * 8) {
        if (o + 2 > ns + plen || !o[1] || o + o[1] * 8 > ns + plen) {
            QHCA_RX_DROP(s, rx_malformed, "ND: a bad option");
            return;
        }
    }
    /* From the unspecified address: duplicate address detection. */
    dad = buffer_is_zero(ip + 8, 16);
    if (!dad && (qhca_gid_is_v4(ip + 8) || qhca_gid_forged(s, ip + 8))) {
        QHCA_RX_DROP(s, rx_forged, "ND: from the port's own address,"
                     " IPv4-mapped, or from no one host");
        return;
    }
    s->port.arp_rx++;

    /* Ethernet: to the asker, or to all nodes for duplicate detection. */
    if (dad) {
        static const uint8_t mc[ETH_ALEN] = { 0x33, 0x33, 0, 0, 0, 1 };

        memcpy(f, mc, ETH_ALEN);
    } else {
        memcpy(f, buf + ETH_ALEN, ETH_ALEN);
    }
    memcpy(f + ETH_ALEN, mac, ETH_ALEN);
    stw_be_p(f + 12, QHCA_ETH_P_IPV6);
    stl_be_p(f + IP, 0x60000000);
    stw_be_p(f + IP + 4, QHCA_ND_SIZE + 8);
    f[IP + 6] = QHCA_IPPROTO_ICMPV6;
    f[IP + 7] = 255;
    memcpy(f + IP + 8, ns + 8, 16);                 /* from the target */
    memcpy(f + IP + 24, dad ? all_nodes : ip + 8, 16);
    f[ND] = QHCA_ND_NA;
    /* Override; solicited unless it answers duplicate detection. */
    f[ND + 4] = dad ? 0x20 : 0x60;
    memcpy(f + ND + 8, ns + 8, 16);
    f[ND + QHCA_ND_SIZE] = QHCA_ND_OPT_TLLA;
    f[ND + QHCA_ND_SIZE + 1] = 1;
    memcpy(f + ND + QHCA_ND_SIZE + 2, mac, ETH_ALEN);
    stw_be_p(f + ND + 2, qhca_icmpv6_sum(f + IP, f + ND, QHCA_ND_SIZE + 8));
    s->port.arp_tx++;
    trace_qhca_roce_nd(dad);
    qemu_send_packet(qemu_get_queue(s->nic), f, sizeof(f));
}

static bool qhca_roce_can_receive(NetClientState *nc)
{
    QhcaState *s = qemu_get_nic_opaque(nc);

    return !s->roce || g_queue_get_length(&s->roce->rx) < QHCA_ROCE_RX_MAX;
}

static ssize_t qhca_roce_receive(NetClientState *nc, const uint8_t *buf,
                                 size_t size)
{
    QhcaState *s = qemu_get_nic_opaque(nc);
    QhcaRoce *r = s->roce;
    const uint8_t *mac = s->conf.macaddr.a;
    QhcaPkt *pkt;
    uint16_t type;
    bool to_us, eth, wanted, now;

    if (!r || r->discard || !qhca_ready(s)) {
        return size;
    }
    if (size < QHCA_ETH_SIZE) {
        QHCA_RX_DROP(s, rx_malformed, "short frame");
        return size;
    }
    type = lduw_be_p(buf + 12);
    to_us = !memcmp(buf, mac, ETH_ALEN);
    eth = qhca_eth_active(s);
    if (eth) {
        /* An Ethernet port's filter: its MAC, broadcast, every group. */
        wanted = to_us || is_multicast_ether_addr(buf);
    } else {
        wanted = (type == QHCA_ETH_P_ARP &&
                  (to_us || is_broadcast_ether_addr(buf))) ||
                 (type == QHCA_ETH_P_IPV6 && is_multicast_ether_addr(buf)) ||
                 (to_us &&
                  (type == QHCA_ETH_P_IPV4 || type == QHCA_ETH_P_IPV6));
    }
    if (!wanted) {
        /* The segment's other traffic: not counted, as a NIC's filter. */
        return size;
    }
    if (qhca_mac_forged(s, buf + ETH_ALEN)) {
        QHCA_RX_DROP(s, rx_forged, "Ethernet source: the port's own MAC,"
                     " a group's or none");
        return size;
    }
    if (eth && (!to_us || !qhca_eth_is_roce(s, buf, size))) {
        /* Not RoCEv2 for the port: the Ethernet QP's. */
        if (type == QHCA_ETH_P_ARP) {
            qhca_arp_recv(r, buf, size, false);
        }
        qhca_eth_rx(s, buf, size);
        return size;
    }
    if (type == QHCA_ETH_P_ARP) {
        qhca_arp_recv(r, buf, size, true);
        return size;
    }
    if (type == QHCA_ETH_P_IPV6 && (!to_us ||
        (size >= QHCA_ETH_SIZE + QHCA_IPV6_SIZE &&
         buf[QHCA_ETH_SIZE + 6] == QHCA_IPPROTO_ICMPV6))) {
        /*
         * A solicitation goes to a solicited-node group (33:33:ff:..), or
         * to the port's MAC (a neighbour checking reachability).
         */
        qhca_nd_recv(r, buf, size);
        return size;
    }
    if (size > QHCA_FRAME_MAX) {
        QHCA_RX_DROP(s, rx_oversize, "frame too long");
        return size;
    }
    /*
     * With none queued ahead of it and no run of the device's under way (a
     * frame sent from inside one, by another device on the same hub), the
     * packet goes to the engine at once (qhca_engine_recv), decoded into
     * r->now; otherwise it queues for the bottom half, in order.
     */
    now = g_queue_is_empty(&r->rx) && !s->busy;
    pkt = now ? &r->now : g_new(QhcaPkt, 1);
    memset(pkt, 0, offsetof(QhcaPkt, payload));
    if (!qhca_roce_decode(s, buf, size, pkt)) {
        if (!now) {
            g_free(pkt);
        }
        return size;
    }
    s->port.rx_frames++;
    s->port.rx_bytes += size;
    trace_qhca_roce_rx(pkt->opcode, pkt->dest_qpn, pkt->psn, size);
    if (now) {
        qhca_engine_recv(s, pkt);
        return size;
    }
    g_queue_push_tail(&r->rx, pkt);
    qemu_bh_schedule(s->engine_bh);
    return size;
}

bool qhca_roce_poll(QhcaRoce *r, unsigned *budget)
{
    bool was_full = g_queue_get_length(&r->rx) >= QHCA_ROCE_RX_MAX;
    QhcaPkt *pkt;

    while (*budget && (pkt = g_queue_pop_head(&r->rx))) {
        (*budget)--;
        qhca_rc_recv(r->s, pkt);
        g_free(pkt);
    }
    if (was_full && g_queue_get_length(&r->rx) < QHCA_ROCE_RX_MAX) {
        qemu_flush_queued_packets(qemu_get_queue(r->s->nic));
    }
    return qhca_eth_poll(r->s, budget) || !g_queue_is_empty(&r->rx);
}

bool qhca_roce_pending(QhcaRoce *r)
{
    return !g_queue_is_empty(&r->rx) || qhca_eth_pending(r->s);
}

/*
 * Device reset: what arrived, what waits for a MAC, what was held back is
 * dropped, none of it delivered.  So are the frames the netdev holds for the
 * port (queued while the queue was full or the VM stopped): the device is
 * still READY when the reset reaches the wire, and they belong to the state
 * the reset ends, so they are taken and discarded rather than received.
 * Taking them restarts a netdev that stopped reading when they queued.
 */
void qhca_roce_reset(QhcaRoce *r)
{
    unsigned i;

    g_queue_clear_full(&r->rx, g_free);
    for (i = 0; i < QHCA_NEIGH_MAX; i++) {
        g_queue_clear_full(&r->neigh[i].pending, g_free);
        r->neigh[i] = (QhcaNeigh) { 0 };
        g_queue_init(&r->neigh[i].pending);
    }
    timer_del(r->hold_timer);
    g_free(r->held);
    r->held = NULL;
    r->rng = r->s->loss_seed | 1;
    qhca_eth_reset(r->s);
    if (r->s->nic) {
        r->discard = true;
        qemu_flush_queued_packets(qemu_get_queue(r->s->nic));
        r->discard = false;
    }
}

/*
 * The netdev's link went up or down (set_link; QEMU drops the frames either
 * way while it is down): the driver hears of it, as of a cable.
 */
static void qhca_roce_link_changed(NetClientState *nc)
{
    QhcaState *s = qemu_get_nic_opaque(nc);

    /* set_link calls this whether or not the link changed. */
    if (!s->roce || s->roce->link_down == nc->link_down) {
        return;
    }
    s->roce->link_down = nc->link_down;
    trace_qhca_port_link(!nc->link_down);
    qhca_eq_event(s, QHCA_EQE_PORT_CHANGE, 1,
                  nc->link_down ? QHCA_PORT_DOWN : QHCA_PORT_ACTIVE);
}

static NetClientInfo qhca_net_info = {
    .type = NET_CLIENT_DRIVER_NIC,
    .size = sizeof(NICState),
    .can_receive = qhca_roce_can_receive,
    .receive = qhca_roce_receive,
    .link_status_changed = qhca_roce_link_changed,
};

/* realize: with a netdev, the port becomes a RoCEv2 port on it. */
bool qhca_roce_realize(QhcaState *s, Error **errp)
{
    DeviceState *dev = DEVICE(s);
    QhcaRoce *r;
    unsigned i;

    if (!s->conf.peers.ncs[0]) {
        return true;
    }
    r = g_new0(QhcaRoce, 1);
    r->s = s;
    g_queue_init(&r->rx);
    for (i = 0; i < QHCA_NEIGH_MAX; i++) {
        g_queue_init(&r->neigh[i].pending);
    }
    r->rng = s->loss_seed | 1;
    r->hold_timer = timer_new_ns(QEMU_CLOCK_VIRTUAL, qhca_roce_hold_timer, r);
    s->roce = r;
    s->nic = qemu_new_nic(&qhca_net_info, &s->conf,
                          object_get_typename(OBJECT(s)), dev->id,
                          &dev->mem_reentrancy_guard, s);
    qemu_format_nic_info_str(qemu_get_queue(s->nic), s->conf.macaddr.a);
    r->link_down = qemu_get_queue(s->nic)->link_down;
    qhca_eth_realize(s);
    return true;
}

void qhca_roce_unrealize(QhcaState *s)
{
    QhcaRoce *r = s->roce;

    if (!r) {
        return;
    }
    qemu_del_nic(s->nic);
    s->nic = NULL;
    qhca_roce_reset(r);
    qhca_eth_unrealize(s);
    timer_free(r->hold_timer);
    s->roce = NULL;
    g_free(r);
}
