// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: the checks of the device and its objects themselves
 * (see main.c for the program). The device list and the port's attributes,
 * verbs a device may refuse as unsupported, arguments it must refuse,
 * objects it must not destroy while in use, and, last of the battery, the
 * asynchronous event queue and tearing the whole context down.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_check.h"

int check_device_list(struct env *e)
{
    struct ibv_device **list = NULL;
    struct ibv_device *dev = NULL;
    struct ibv_device_attr attr;
    const char *name;
    __be64 guid;
    int n = -1, i, ret = -1;

    list = ibv_get_device_list(&n);
    CHECK(list, "ibv_get_device_list: %s", strerror(errno));
    CHECK(n >= 1, "ibv_get_device_list: %d devices", n);
    CHECK(!list[n], "the list of %d devices is not NULL-terminated", n);
    for (i = 0; i < n; i++) {
        name = ibv_get_device_name(list[i]);
        CHECK(name, "ibv_get_device_name(list[%d]) is NULL", i);
        if (!strcmp(name, ibv_get_device_name(e->dev))) {
            dev = list[i];
        }
    }
    CHECK(dev, "%s is not in a second ibv_get_device_list",
          ibv_get_device_name(e->dev));
    CHECK(dev == e->dev, "the device's struct changed between two lists");
    CHECK(!strcmp(dev->name, ibv_get_device_name(dev)),
          "ibv_get_device_name %s, struct name %s", ibv_get_device_name(dev),
          dev->name);
    CHECK(dev->node_type == IBV_NODE_CA, "node_type %d", dev->node_type);
    CHECK(ibv_get_device_index(dev) >= 0, "ibv_get_device_index %d",
          ibv_get_device_index(dev));

    guid = ibv_get_device_guid(dev);
    CHECK(guid, "ibv_get_device_guid is 0");
    memset(&attr, 0, sizeof(attr));
    CHECK(!ibv_query_device(e->ctx, &attr), "ibv_query_device failed");
    CHECK(attr.node_guid == guid,
          "node_guid 0x%" PRIx64 " != device GUID 0x%" PRIx64,
          (uint64_t)attr.node_guid, (uint64_t)guid);
    CHECK(attr.phys_port_cnt == 1, "phys_port_cnt %u", attr.phys_port_cnt);
    CHECK(attr.max_qp > 0 && attr.max_cq > 0 && attr.max_mr > 0 &&
              attr.max_pd > 0 && attr.max_qp_wr > 0 && attr.max_sge > 0 &&
              attr.max_cqe > 0,
          "a zero limit: max_qp %d max_cq %d max_mr %d max_pd %d "
          "max_qp_wr %d max_sge %d max_cqe %d",
          attr.max_qp, attr.max_cq, attr.max_mr, attr.max_pd, attr.max_qp_wr,
          attr.max_sge, attr.max_cqe);
    ret = 0;
out:
    if (list) {
        ibv_free_device_list(list);
    }
    return ret;
}

int check_query_port(struct env *e)
{
    struct ibv_gid_entry entry, table[4];
    struct ibv_port_attr pa;
    union ibv_gid gid, zero;
    __be16 pkey = 0;
    ssize_t nt;
    int i, ret = -1, r;

    memset(&pa, 0, sizeof(pa));
    r = ibv_query_port(e->ctx, PORT, &pa);
    CHECK(!r, "ibv_query_port(1): %s", strerror(r));
    CHECK(pa.state == IBV_PORT_ACTIVE, "port state %s",
          ibv_port_state_str(pa.state));
    CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %u",
          pa.link_layer);
    CHECK(pa.active_mtu == IBV_MTU_4096, "active_mtu %d", pa.active_mtu);
    CHECK(pa.max_mtu >= pa.active_mtu, "max_mtu %d < active_mtu %d", pa.max_mtu,
          pa.active_mtu);
    CHECK(pa.gid_tbl_len >= 1, "gid_tbl_len %d", pa.gid_tbl_len);
    CHECK(pa.lid == 0, "lid %u", pa.lid);
    CHECK(pa.pkey_tbl_len >= 1, "pkey_tbl_len %u", pa.pkey_tbl_len);

    memset(&gid, 0, sizeof(gid));
    memset(&zero, 0, sizeof(zero));
    CHECK(!ibv_query_gid(e->ctx, PORT, 0, &gid), "ibv_query_gid(0): %s",
          strerror(errno));
    CHECK(gid.raw[0] == 0xfe && gid.raw[1] == 0x80 &&
              !memcmp(gid.raw + 2, zero.raw, 6),
          "GID 0 does not start fe80::/64 (%02x%02x:%02x%02x:...)", gid.raw[0],
          gid.raw[1], gid.raw[2], gid.raw[3]);
    CHECK(memcmp(gid.raw + 8, zero.raw, 8), "GID 0 is fe80::");
    CHECK(!memcmp(&gid, &e->gid, sizeof(gid)), "GID 0 changed");
    CHECK(ibv_query_gid(e->ctx, PORT, pa.gid_tbl_len, &gid) != 0,
          "ibv_query_gid(index %d = gid_tbl_len) succeeded", pa.gid_tbl_len);
    if (pa.gid_tbl_len == 1) {
        CHECK(ibv_query_gid(e->ctx, PORT, 1, &gid) != 0,
              "ibv_query_gid(index 1) succeeded");
    }

    memset(&entry, 0, sizeof(entry));
    r = ibv_query_gid_ex(e->ctx, PORT, 0, &entry, 0);
    CHECK(!r, "ibv_query_gid_ex(0): %s", strerror(r));
    CHECK(!memcmp(&entry.gid, &e->gid, sizeof(entry.gid)),
          "ibv_query_gid_ex's GID differs from ibv_query_gid's");
    CHECK(entry.gid_index == 0 && entry.port_num == PORT,
          "ibv_query_gid_ex: gid_index %u port_num %u", entry.gid_index,
          entry.port_num);
    CHECK(entry.gid_type != IBV_GID_TYPE_IB,
          "an Ethernet port's GID has type IB");

    memset(table, 0, sizeof(table));
    nt = ibv_query_gid_table(e->ctx, table, 4, 0);
    CHECK(nt >= 1 && nt <= pa.gid_tbl_len, "ibv_query_gid_table returned %zd",
          nt);
    for (i = 0; i < nt; i++) {
        if (table[i].gid_index == 0 && table[i].port_num == PORT) {
            break;
        }
    }
    CHECK(i < nt && !memcmp(&table[i].gid, &e->gid, sizeof(e->gid)),
          "ibv_query_gid_table has no port 1 index 0 entry with GID 0");

    CHECK(!ibv_query_pkey(e->ctx, PORT, 0, &pkey), "ibv_query_pkey(0)");
    CHECK(pkey == htons(0xffff), "P_Key 0 is 0x%x (network order)",
          ntohs(pkey));
    CHECK(ibv_get_pkey_index(e->ctx, PORT, htons(0xffff)) == 0,
          "ibv_get_pkey_index(0xffff) != 0");

    CHECK(ibv_query_port(e->ctx, 2, &pa) != 0, "ibv_query_port(2) succeeded");
    CHECK(ibv_query_gid(e->ctx, 2, 0, &gid) != 0,
          "ibv_query_gid(port 2) succeeded");
    CHECK(ibv_query_gid_ex(e->ctx, 2, 0, &entry, 0) != 0,
          "ibv_query_gid_ex(port 2) succeeded");
    CHECK(ibv_query_pkey(e->ctx, 2, 0, &pkey) != 0,
          "ibv_query_pkey(port 2) succeeded");
    ret = 0;
out:
    return ret;
}

int check_busy_objects(struct env *e)
{
    struct ibv_pd *pd = NULL;
    struct ibv_cq *cq = NULL;
    struct ibv_qp *qp = NULL;
    struct region r = { 0 };
    int rc, ret = -1;

    pd = ibv_alloc_pd(e->ctx);
    CHECK(pd, "ibv_alloc_pd: %s", strerror(errno));
    TRY(region_new(pd, &r, 4096, IBV_ACCESS_LOCAL_WRITE));
    rc = ibv_dealloc_pd(pd);
    CHECK(rc == EBUSY,
          "ibv_dealloc_pd with a region on it: %d (%s), "
          "expected EBUSY",
          rc, strerror(rc));
    rc = region_free(&r);
    CHECK(!rc, "ibv_dereg_mr: %s", strerror(rc));
    rc = ibv_dealloc_pd(pd);
    CHECK(!rc, "ibv_dealloc_pd once unused: %s", strerror(rc));
    pd = NULL;

    cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
    CHECK(cq, "ibv_create_cq: %s", strerror(errno));
    qp = qp_new(e->pd, cq, IBV_QPT_RC, 0, NULL);
    if (!qp) {
        goto out;
    }
    rc = ibv_destroy_cq(cq);
    CHECK(rc == EBUSY,
          "ibv_destroy_cq with a QP on it: %d (%s), "
          "expected EBUSY",
          rc, strerror(rc));
    rc = ibv_dealloc_pd(e->pd);
    CHECK(rc == EBUSY,
          "ibv_dealloc_pd with a QP on it: %d (%s), "
          "expected EBUSY",
          rc, strerror(rc));
    rc = ibv_destroy_qp(qp);
    CHECK(!rc, "ibv_destroy_qp: %s", strerror(rc));
    qp = NULL;
    rc = ibv_destroy_cq(cq);
    CHECK(!rc, "ibv_destroy_cq once unused: %s", strerror(rc));
    cq = NULL;
    ret = 0;
out:
    if (qp) {
        ibv_destroy_qp(qp);
    }
    if (cq) {
        ibv_destroy_cq(cq);
    }
    region_free(&r);
    if (pd) {
        ibv_dealloc_pd(pd);
    }
    return ret;
}

int check_busy_channel(struct env *e)
{
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq = NULL;
    int rc, ret = -1;

    ch = ibv_create_comp_channel(e->ctx);
    CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
    cq = ibv_create_cq(e->ctx, 16, NULL, ch, 0);
    CHECK(cq, "ibv_create_cq: %s", strerror(errno));
    errno = 0;
    rc = ibv_destroy_comp_channel(ch);
    if (!rc) {
        ch = NULL; /* destroyed under its CQ: do not touch it */
    }
    CHECK(rc == EBUSY,
          "ibv_destroy_comp_channel with a CQ on it "
          "returned %d (errno %s), expected EBUSY (its man page: the "
          "value of errno)",
          rc, strerror(errno));
    rc = ibv_destroy_cq(cq);
    CHECK(!rc, "ibv_destroy_cq: %s", strerror(rc));
    cq = NULL;
    rc = ibv_destroy_comp_channel(ch);
    CHECK(!rc, "ibv_destroy_comp_channel once unused: %d", rc);
    ch = NULL;
    ret = 0;
out:
    if (cq) {
        ibv_destroy_cq(cq);
    }
    if (ch) {
        ibv_destroy_comp_channel(ch);
    }
    return ret;
}

int check_unsupported(struct env *e)
{
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr qa;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_qp *uc;
    struct ibv_wc wc;
    int rc, ret = -1;

    TRY(connected_pair(e, &p, NULL));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));

    memset(&qa, 0, sizeof(qa));
    qa.alt_port_num = PORT;
    qa.alt_timeout = 14;
    qa.alt_ah_attr.port_num = PORT;
    rc = ibv_modify_qp(p.a, &qa, IBV_QP_ALT_PATH);
    /* The RDMA core bans alternate paths on RoCE ports itself. */
    CHECK(rc == (e->roce ? EINVAL : EOPNOTSUPP),
          "ibv_modify_qp(IBV_QP_ALT_PATH): %d (%s), expected %s", rc,
          strerror(rc), e->roce ? "EINVAL" : "EOPNOTSUPP");

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = p.cq_a;
    ia.recv_cq = p.cq_a;
    ia.qp_type = IBV_QPT_UC;
    ia.cap.max_send_wr = 16;
    ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    errno = 0;
    uc = ibv_create_qp(e->pd, &ia);
    if (uc) {
        ibv_destroy_qp(uc);
    }
    CHECK(!uc, "ibv_create_qp(IBV_QPT_UC) succeeded");
    CHECK(errno == EOPNOTSUPP,
          "ibv_create_qp(IBV_QPT_UC): errno %s, "
          "expected EOPNOTSUPP",
          strerror(errno));

    /* None of it hurt the pair. */
    fill(r.buf, 16, 80);
    TRY(rdma_write(p.a, p.cq_a, r.buf, 16, r.mr->lkey, addr_of(r.buf + 4096),
                   r.mr->rkey, 70, &wc));
    TRY(wc_ok(&wc, 70, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(r.buf + 4096, r.buf, 16), "the WRITE did not land");
    CHECK(!pair_destroy(&p), "destroying the pair failed");
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_bad_args(struct env *e)
{
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr qa;
    struct ibv_ah_attr aa;
    struct ibv_cq *cq = NULL, *cq0 = NULL;
    struct ibv_qp *qp = NULL;
    struct ibv_mr *mr = NULL;
    struct ibv_ah *ah = NULL;
    void *buf = NULL;
    int rc, ret = -1;

    CHECK(!posix_memalign(&buf, 4096, 4096), "posix_memalign");
    memset(buf, 0, 4096);
    cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0);
    CHECK(cq, "ibv_create_cq: %s", strerror(errno));
    qp = qp_new(e->pd, cq, IBV_QPT_RC, 0, NULL);
    if (!qp) {
        goto out;
    }

    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.port_num = 2;
    qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ibv_modify_qp(qp, &qa,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
    CHECK(rc == EINVAL,
          "ibv_modify_qp(INIT, port 2): %d (%s), expected "
          "EINVAL",
          rc, strerror(rc));
    memset(&qa, 0, sizeof(qa));
    CHECK(!ibv_query_qp(qp, &qa, IBV_QP_STATE, &init), "ibv_query_qp");
    CHECK(qa.qp_state == IBV_QPS_RESET,
          "a refused modify left the QP in state %d", qa.qp_state);
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    qa.port_num = PORT;
    rc = ibv_modify_qp(qp, &qa,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_ACCESS_FLAGS);
    CHECK(!rc, "ibv_modify_qp(INIT, port 1) after the refusal: %s",
          strerror(rc));

    errno = 0;
    mr = ibv_reg_mr(e->pd, buf, 0, IBV_ACCESS_LOCAL_WRITE);
    CHECK(!mr, "ibv_reg_mr of 0 bytes succeeded");
    mr = ibv_reg_mr(e->pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE);
    CHECK(!mr, "ibv_reg_mr with REMOTE_WRITE but no LOCAL_WRITE "
               "succeeded (IBA 10.6.3.1 requires LOCAL_WRITE)");
    mr = ibv_reg_mr(e->pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC);
    CHECK(!mr, "ibv_reg_mr with REMOTE_ATOMIC but no LOCAL_WRITE "
               "succeeded (IBA 10.6.3.1 requires LOCAL_WRITE)");

    cq0 = ibv_create_cq(e->ctx, 0, NULL, NULL, 0);
    CHECK(!cq0, "ibv_create_cq with cqe 0 succeeded");
    cq0 = ibv_create_cq(e->ctx, e->attr.max_cqe + 1, NULL, NULL, 0);
    CHECK(!cq0 || e->attr.max_cqe == INT32_MAX,
          "ibv_create_cq with cqe max_cqe + 1 succeeded");

    memset(&aa, 0, sizeof(aa));
    aa.port_num = 2;
    ah = ibv_create_ah(e->pd, &aa);
    CHECK(!ah, "ibv_create_ah on port 2 succeeded");
    ret = 0;
out:
    if (ah) {
        ibv_destroy_ah(ah);
    }
    if (mr) {
        ibv_dereg_mr(mr);
    }
    if (qp) {
        ibv_destroy_qp(qp);
    }
    if (cq0) {
        ibv_destroy_cq(cq0);
    }
    if (cq) {
        ibv_destroy_cq(cq);
    }
    free(buf);
    return ret;
}

int check_events_and_teardown(struct env *e)
{
    struct ibv_async_event ev;
    struct ibv_comp_channel *ch = NULL;
    struct ibv_context *ctx2;
    struct ibv_pd *pd2;
    struct ibv_ah_attr aa;
    struct ibv_ah *ah = NULL;
    struct ibv_mw *mw = NULL;
    struct pair_opts o = { 0 };
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_wc wc;
    int fl, rc, ret = -1;

    /* Whatever events earlier checks left, read and acknowledged. */
    drain_async(e->ctx, 100);
    fl = fcntl(e->ctx->async_fd, F_GETFL);
    CHECK(fl >= 0 && !fcntl(e->ctx->async_fd, F_SETFL, fl | O_NONBLOCK),
          "fcntl(async_fd, O_NONBLOCK): %s", strerror(errno));
    errno = 0;
    rc = ibv_get_async_event(e->ctx, &ev);
    fcntl(e->ctx->async_fd, F_SETFL, fl);
    if (!rc) {
        ibv_ack_async_event(&ev);
    }
    CHECK(rc == -1 && errno == EAGAIN,
          "ibv_get_async_event with none "
          "pending on a non-blocking async_fd: %d, errno %s (expected "
          "-1, EAGAIN)",
          rc, strerror(errno));

    /* One of everything, in use, then destroyed users first. */
    ch = ibv_create_comp_channel(e->ctx);
    CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
    o.channel = ch;
    TRY(connected_pair(e, &p, &o));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL | IBV_ACCESS_MW_BIND));
    memset(&aa, 0, sizeof(aa));
    aa.port_num = PORT;
    aa.is_global = 1;
    aa.grh.dgid = e->gid;
    aa.grh.hop_limit = 64;
    ah = ibv_create_ah(e->pd, &aa);
    CHECK(ah, "ibv_create_ah: %s", strerror(errno));
    if (e->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) {
        mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_1);
        CHECK(mw, "ibv_alloc_mw: %s", strerror(errno));
    }
    TRY(rdma_write(p.a, p.cq_a, r.buf, 64, r.mr->lkey, addr_of(r.buf + 4096),
                   r.mr->rkey, 130, &wc));
    TRY(wc_ok(&wc, 130, IBV_WC_RDMA_WRITE));

    if (mw) {
        rc = ibv_dealloc_mw(mw);
        mw = NULL;
        CHECK(!rc, "ibv_dealloc_mw: %s", strerror(rc));
    }
    rc = ibv_destroy_ah(ah);
    ah = NULL;
    CHECK(!rc, "ibv_destroy_ah: %s", strerror(rc));
    rc = region_free(&r);
    CHECK(!rc, "ibv_dereg_mr: %s", strerror(rc));
    rc = ibv_destroy_qp(p.a);
    CHECK(!rc, "ibv_destroy_qp: %s", strerror(rc));
    p.a = NULL;
    rc = ibv_destroy_qp(p.b);
    CHECK(!rc, "ibv_destroy_qp: %s", strerror(rc));
    p.b = NULL;
    rc = ibv_destroy_cq(p.cq_a);
    CHECK(!rc, "ibv_destroy_cq: %s", strerror(rc));
    p.cq_a = NULL;
    rc = ibv_destroy_cq(p.cq_b);
    CHECK(!rc, "ibv_destroy_cq: %s", strerror(rc));
    p.cq_b = NULL;
    rc = ibv_destroy_comp_channel(ch);
    CHECK(!rc, "ibv_destroy_comp_channel: %d", rc);
    ch = NULL;
    rc = ibv_dealloc_pd(e->pd);
    CHECK(!rc,
          "ibv_dealloc_pd of the checks' PD: %s (an earlier check "
          "left objects on it?)",
          strerror(rc));
    e->pd = NULL;
    rc = ibv_close_device(e->ctx);
    CHECK(!rc, "ibv_close_device: %s", strerror(errno));
    e->ctx = NULL;

    /* The device opens again, as new. */
    ctx2 = ibv_open_device(e->dev);
    CHECK(ctx2, "ibv_open_device after close: %s", strerror(errno));
    pd2 = ibv_alloc_pd(ctx2);
    rc = pd2 ? ibv_dealloc_pd(pd2) : -1;
    if (ibv_close_device(ctx2) && !rc) {
        rc = -2;
    }
    CHECK(pd2 && !rc, "PD on the reopened context: %d", rc);
    ret = 0;
out:
    if (mw) {
        ibv_dealloc_mw(mw);
    }
    if (ah) {
        ibv_destroy_ah(ah);
    }
    pair_destroy(&p);
    region_free(&r);
    if (ch) {
        ibv_destroy_comp_channel(ch);
    }
    return ret;
}
