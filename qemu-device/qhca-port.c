/*
 * qhca: an emulated RDMA host channel adapter -- the port
 *
 * One port, number 1: a MAC address (the NIC properties' mac), a GID table
 * whose entry 0 is the link-local GID made of the node GUID and whose other
 * entries the driver sets (QHCA_CMD_SET_GID: IPv4 addresses), and the
 * address vectors that name a destination GID and a source entry.  The
 * ABI header's "The port" is the contract; docs/specs/qhca.rst, "The port and
 * its wire", says how packets leave.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qhca.h"
#include "qhca-wire.h"
#include "trace.h"

#define QHCA_GID_V4_MASK_LO     0xffffffff00000000ull

bool qhca_gid_is_v4(const uint8_t *gid)
{
    return ldq_be_p(gid) == QHCA_GID_V4_PREFIX_HI &&
           (ldq_be_p(gid + 8) & QHCA_GID_V4_MASK_LO) == QHCA_GID_V4_PREFIX_LO;
}

/* The IPv4-mapped GID of ip: ::ffff:a.b.c.d. */
void qhca_gid_from_ipv4(uint8_t *gid, uint32_t ip)
{
    stq_be_p(gid, QHCA_GID_V4_PREFIX_HI);
    stq_be_p(gid + 8, QHCA_GID_V4_PREFIX_LO | ip);
}

/* The IPv4 address ip is one of the port's GIDs. */
bool qhca_ipv4_ours(const QhcaState *s, uint32_t ip)
{
    uint8_t gid[16];

    qhca_gid_from_ipv4(gid, ip);
    return qhca_gid_ours(s, gid);
}

/*
 * gid is a link-local address whose interface identifier is a unicast MAC's
 * EUI-64 (fe80::/64, ff:fe in its middle): that MAC into mac, if mac is
 * given.  One that names a group or broadcast MAC is no station's.
 */
bool qhca_gid_eui64_mac(const uint8_t *gid, uint8_t *mac)
{
    const uint8_t *id = gid + 8;

    if (ldq_be_p(gid) != QHCA_GID_PREFIX || id[3] != 0xff || id[4] != 0xfe ||
        ((id[0] ^ 2) & 1)) {
        return false;
    }
    if (mac) {
        mac[0] = id[0] ^ 2;
        mac[1] = id[1];
        mac[2] = id[2];
        mac[3] = id[5];
        mac[4] = id[6];
        mac[5] = id[7];
    }
    return true;
}

/*
 * A unicast IPv4 address a host may have: not 0/8 (this network, 0.0.0.0
 * unspecified), 127/8 (loopback), 224/4 (multicast) or 240/4 (reserved,
 * 255.255.255.255 the limited broadcast).
 */
static bool qhca_ipv4_unicast(uint32_t addr)
{
    uint8_t first = addr >> 24;

    return first != 0 && first != 127 && first < 224;
}

/*
 * addr is the broadcast address of the subnet of one of the port's IPv4
 * entries (its prefix length below 31: /31 and /32 have none).
 */
static bool qhca_ipv4_subnet_bcast(const QhcaState *s, uint32_t addr)
{
    unsigned i;

    for (i = 1; i < QHCA_GID_TABLE_LEN; i++) {
        const struct qhca_gid_entry *e = &s->gid[i];
        uint32_t mask;

        if (!(e->flags & QHCA_GID_VALID) || !qhca_gid_is_v4(e->gid) ||
            e->prefix_len > 30) {
            continue;
        }
        mask = e->prefix_len ? ~0u << (32 - e->prefix_len) : 0;
        if ((addr | mask) == UINT32_MAX &&
            (addr & mask) == (ldl_be_p(e->gid + 12) & mask)) {
            return true;
        }
    }
    return false;
}

/*
 * gid names one host: IPv4-mapped, a unicast IPv4 address that is not the
 * broadcast address of one of the port's subnets; else not :: (unspecified),
 * ::1 (loopback) or ff00::/8 (multicast).
 */
bool qhca_gid_unicast(const QhcaState *s, const uint8_t *gid)
{
    uint32_t ip = ldl_be_p(gid + 12);

    if (qhca_gid_is_v4(gid)) {
        return qhca_ipv4_unicast(ip) && !qhca_ipv4_subnet_bcast(s, ip);
    }
    return gid[0] != 0xff && (ldq_be_p(gid) || ldl_be_p(gid + 8) || ip > 1);
}

/*
 * A packet from the wire with source gid is forged: the port's own
 * addresses never reach the wire (loopback stays in the device), and a
 * packet comes from one host.
 */
bool qhca_gid_forged(const QhcaState *s, const uint8_t *gid)
{
    return qhca_gid_ours(s, gid) || !qhca_gid_unicast(s, gid);
}

bool qhca_ipv4_forged(const QhcaState *s, uint32_t ip)
{
    uint8_t gid[16];

    qhca_gid_from_ipv4(gid, ip);
    return qhca_gid_forged(s, gid);
}

static void qhca_gid0(QhcaState *s, struct qhca_gid_entry *e)
{
    memset(e, 0, sizeof(*e));
    stq_be_p(e->gid, QHCA_GID_PREFIX);
    stq_be_p(e->gid + 8, s->node_guid);
    e->flags = QHCA_GID_VALID;
    e->prefix_len = 64;
}

void qhca_port_init(QhcaState *s)
{
    qhca_port_reset(s);
}

/* Device reset: the table is the link-local entry alone; counters zero. */
void qhca_port_reset(QhcaState *s)
{
    memset(s->gid, 0, sizeof(s->gid));
    qhca_gid0(s, &s->gid[0]);
    memset(&s->port, 0, sizeof(s->port));
}

bool qhca_gid_ours(const QhcaState *s, const uint8_t *gid)
{
    unsigned i;

    for (i = 0; i < QHCA_GID_TABLE_LEN; i++) {
        if ((s->gid[i].flags & QHCA_GID_VALID) &&
            !memcmp(s->gid[i].gid, gid, sizeof(s->gid[i].gid))) {
            return true;
        }
    }
    return false;
}

/* Where an RC QP's packets go until it is given an address vector. */
void qhca_av_default(const QhcaState *s, QhcaAv *av)
{
    *av = (QhcaAv) { .hop_limit = 64 };
    memcpy(av->dgid, s->gid[0].gid, sizeof(av->dgid));
    memcpy(av->sgid, s->gid[0].gid, sizeof(av->sgid));
}

uint8_t qhca_av_load(const QhcaState *s, const struct qhca_ah_attr *in,
                     QhcaAv *av)
{
    uint32_t flow = le32_to_cpu(in->flow_label);
    const struct qhca_gid_entry *src;
    unsigned i;

    for (i = 0; i < ARRAY_SIZE(in->rsvd); i++) {
        if (in->rsvd[i]) {
            return QHCA_CMD_BAD_PARAM;
        }
    }
    if (flow >= 1u << 20 || in->sl > 15 || in->port_num != 1 ||
        in->sgid_index >= QHCA_GID_TABLE_LEN) {
        return QHCA_CMD_BAD_PARAM;
    }
    src = &s->gid[in->sgid_index];
    if (!(src->flags & QHCA_GID_VALID) ||
        qhca_gid_is_v4(src->gid) != qhca_gid_is_v4(in->dgid) ||
        !qhca_gid_unicast(s, in->dgid)) {
        /* Not to a group, to everyone or to no one: to one port. */
        return QHCA_CMD_BAD_PARAM;
    }
    *av = (QhcaAv) {
        .sgid_index = in->sgid_index,
        .traffic_class = in->traffic_class,
        .hop_limit = in->hop_limit,
        .sl = in->sl,
        .flow_label = flow,
    };
    memcpy(av->dgid, in->dgid, sizeof(av->dgid));
    memcpy(av->sgid, src->gid, sizeof(av->sgid));
    return QHCA_CMD_OK;
}

void qhca_av_store(const QhcaAv *av, struct qhca_ah_attr *out)
{
    *out = (struct qhca_ah_attr) {
        .flow_label = cpu_to_le32(av->flow_label),
        .traffic_class = av->traffic_class,
        .hop_limit = av->hop_limit,
        .sl = av->sl,
        .port_num = 1,
        .sgid_index = av->sgid_index,
    };
    memcpy(out->dgid, av->dgid, sizeof(out->dgid));
}

/* An entry SET_GID may write at index (of the table s would then have). */
static bool qhca_gid_entry_valid(const QhcaState *s, uint32_t index,
                                 const struct qhca_gid_entry *e)
{
    static const uint8_t zero[16];
    unsigned i;

    for (i = 0; i < ARRAY_SIZE(e->rsvd); i++) {
        if (e->rsvd[i]) {
            return false;
        }
    }
    if (!e->flags) {
        return !e->prefix_len && !memcmp(e->gid, zero, sizeof(zero));
    }
    if (e->flags != QHCA_GID_VALID || !qhca_gid_is_v4(e->gid) ||
        e->prefix_len > 32 || !qhca_ipv4_unicast(ldl_be_p(e->gid + 12))) {
        return false;
    }
    /* One address, one entry. */
    for (i = 0; i < QHCA_GID_TABLE_LEN; i++) {
        if (i != index && (s->gid[i].flags & QHCA_GID_VALID) &&
            !memcmp(s->gid[i].gid, e->gid, sizeof(e->gid))) {
            return false;
        }
    }
    return true;
}

static uint8_t qhca_cmd_set_gid(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_cmd_set_gid in;
    uint32_t index;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    index = le32_to_cpu(in.index);
    if (in.rsvd0 || in.rsvd1 || index < 1 || index >= QHCA_GID_TABLE_LEN ||
        !qhca_gid_entry_valid(s, index, &in.entry)) {
        return QHCA_CMD_BAD_PARAM;
    }
    s->gid[index] = in.entry;
    trace_qhca_port_set_gid(index, in.entry.flags, ldl_be_p(in.entry.gid + 12),
                            in.entry.prefix_len);
    return QHCA_CMD_OK;
}

static uint8_t qhca_cmd_query_port(QhcaState *s, const struct qhca_cmd *cmd)
{
    struct qhca_port_attr a = {
        .wire = s->nic ? QHCA_WIRE_ROCEV2 : QHCA_WIRE_NONE,
        .state = s->nic && qemu_get_queue(s->nic)->link_down ?
                 QHCA_PORT_DOWN : QHCA_PORT_ACTIVE,
        .max_mtu = 12,
        .gid_tbl_len = QHCA_GID_TABLE_LEN,
    };
    const uint64_t *src = (const uint64_t *)&s->port;
    uint64_t *dst = (uint64_t *)&a.counters;
    unsigned i;

    if (!qhca_cmd_unused_zero(cmd, true, 0)) {
        return QHCA_CMD_BAD_PARAM;
    }
    memcpy(a.mac, s->conf.macaddr.a, sizeof(a.mac));
    for (i = 0; i < sizeof(a.counters) / sizeof(uint64_t); i++) {
        dst[i] = cpu_to_le64(src[i]);
    }
    memcpy(a.gids, s->gid, sizeof(a.gids));
    return qhca_cmd_out(s, cmd, &a, sizeof(a));
}

uint8_t qhca_cmd_port(QhcaState *s, const struct qhca_cmd *cmd)
{
    switch (cmd->opcode) {
    case QHCA_CMD_QUERY_PORT:
        return qhca_cmd_query_port(s, cmd);
    case QHCA_CMD_SET_GID:
        return qhca_cmd_set_gid(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

/* Migration: the table that arrived is checked as SET_GID checks it. */
bool qhca_port_post_load(QhcaState *s)
{
    struct qhca_gid_entry gid0;
    unsigned i;

    qhca_gid0(s, &gid0);
    if (memcmp(&gid0, &s->gid[0], sizeof(gid0))) {
        return false;
    }
    for (i = 1; i < QHCA_GID_TABLE_LEN; i++) {
        if (!qhca_gid_entry_valid(s, i, &s->gid[i])) {
            return false;
        }
    }
    return true;
}
