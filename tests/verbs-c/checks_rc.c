// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: the checks of the RC data path (see main.c for the
 * program), on two RC QPs of the context connected to each other. Every
 * opcode with its completions and data, sq_sig_all, requests the device must
 * refuse, a remote access error and the QP error it leaves, and completion
 * channels.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_check.h"

/* Regions of the RC checks: a's local data, b's target, b's receives. */
#define LOC    0
#define REM    4096
#define RCV    8192
#define RC_LEN 12288

int check_rc_all_opcodes(struct env *e)
{
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_sge sge[3], s5[5];
    struct ibv_send_wr wr, list[5];
    struct ibv_wc wc;
    volatile uint64_t *remote64, *local64; /* device-written */
    uint8_t *loc, *rem, *rcv;
    int i, ret = -1;

    TRY(connected_pair(e, &p, NULL));
    TRY(region_new(e->pd, &r, RC_LEN, REMOTE_ALL));
    loc = r.buf + LOC;
    rem = r.buf + REM;
    rcv = r.buf + RCV;

    /* SEND with immediate into a posted receive. */
    fill(loc, 32, 1);
    TRY(post_recv(p.b, 100, rcv, 256, r.mr->lkey));
    sge[0] = (struct ibv_sge){ addr_of(loc), 32, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .wr_id = 1,
        .sg_list = sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(0x12345678),
    };
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 1, IBV_WC_SEND));
    TRY(wait_wc(p.cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 100, IBV_WC_RECV));
    CHECK(wc.byte_len == 32, "SEND_WITH_IMM: byte_len %u", wc.byte_len);
    CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "SEND_WITH_IMM: no WITH_IMM");
    CHECK(wc.imm_data == htonl(0x12345678),
          "SEND_WITH_IMM: imm_data 0x%x, sent 0x%x", wc.imm_data,
          htonl(0x12345678));
    CHECK(wc.src_qp == p.a->qp_num, "SEND: src_qp 0x%x, sender 0x%x", wc.src_qp,
          p.a->qp_num);
    CHECK(wc.qp_num == p.b->qp_num, "SEND: qp_num 0x%x, receiver 0x%x",
          wc.qp_num, p.b->qp_num);
    CHECK(!memcmp(rcv, loc, 32), "SEND: the data differs");

    /* RDMA WRITE: a completion at the requester only. */
    fill(loc, 64, 2);
    TRY(rdma_write(p.a, p.cq_a, loc, 64, r.mr->lkey, addr_of(rem), r.mr->rkey,
                   2, &wc));
    TRY(wc_ok(&wc, 2, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(rem, loc, 64), "RDMA WRITE: the data differs");
    TRY(expect_quiet(p.cq_b, 50, "RDMA WRITE at the responder"));

    /* RDMA WRITE with immediate: consumes a receive. */
    fill(loc, 48, 3);
    TRY(post_recv(p.b, 101, rcv, 256, r.mr->lkey));
    sge[0] = (struct ibv_sge){ addr_of(loc), 48, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .wr_id = 3,
        .sg_list = sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(0xdeadbeef),
        .wr.rdma = { addr_of(rem + 256), r.mr->rkey },
    };
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 3, IBV_WC_RDMA_WRITE));
    TRY(wait_wc(p.cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 101, IBV_WC_RECV_RDMA_WITH_IMM));
    CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "WRITE_WITH_IMM: no WITH_IMM");
    CHECK(wc.imm_data == htonl(0xdeadbeef),
          "WRITE_WITH_IMM: imm_data 0x%x, sent 0x%x", wc.imm_data,
          htonl(0xdeadbeef));
    CHECK(wc.byte_len == 48, "WRITE_WITH_IMM: byte_len %u", wc.byte_len);
    CHECK(!memcmp(rem + 256, loc, 48), "WRITE_WITH_IMM: data differs");

    /* RDMA READ. */
    fill(rem + 512, 128, 4);
    memset(loc + 512, 0, 128);
    sge[0] = (struct ibv_sge){ addr_of(loc + 512), 128, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .wr_id = 4,
        .sg_list = sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { addr_of(rem + 512), r.mr->rkey },
    };
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 4, IBV_WC_RDMA_READ));
    CHECK(!memcmp(loc + 512, rem + 512, 128), "RDMA READ: data differs");

    /* Atomics on an 8-byte aligned word. */
    remote64 = (volatile uint64_t *)(rem + 1024); /* device-written */
    local64 = (volatile uint64_t *)(loc + 1024); /* device-written */
    *remote64 = 100;
    *local64 = 0;
    sge[0] = (struct ibv_sge){ addr_of(loc + 1024), 8, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .wr_id = 5,
        .sg_list = sge,
        .num_sge = 1,
        .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.atomic = { .remote_addr = addr_of(rem + 1024),
                       .compare_add = 23,
                       .rkey = r.mr->rkey },
    };
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 5, IBV_WC_FETCH_ADD));
    CHECK(*local64 == 100, "FETCH_AND_ADD: old value %" PRIu64, *local64);
    CHECK(*remote64 == 123, "FETCH_AND_ADD: new value %" PRIu64, *remote64);

    wr.wr_id = 6;
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = 123;
    wr.wr.atomic.swap = 0xabcdef0123ull;
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 6, IBV_WC_COMP_SWAP));
    CHECK(*local64 == 123, "CMP_AND_SWP: old value %" PRIu64, *local64);
    CHECK(*remote64 == 0xabcdef0123ull, "CMP_AND_SWP: new value 0x%" PRIx64,
          *remote64);

    wr.wr_id = 7;
    wr.wr.atomic.compare_add = 1; /* does not match: no swap */
    wr.wr.atomic.swap = 2;
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 7, IBV_WC_COMP_SWAP));
    CHECK(*local64 == 0xabcdef0123ull,
          "CMP_AND_SWP (no match): old value 0x%" PRIx64, *local64);
    CHECK(*remote64 == 0xabcdef0123ull,
          "CMP_AND_SWP (no match) changed the word to 0x%" PRIx64, *remote64);

    /* A SEND gathered from 3 SGEs, one of them empty. */
    CHECK(p.cap.max_send_sge >= 3, "max_send_sge %u < 3", p.cap.max_send_sge);
    fill(loc + 1536, 64, 5);
    memset(rcv, 0, 256);
    TRY(post_recv(p.b, 102, rcv, 256, r.mr->lkey));
    sge[0] = (struct ibv_sge){ addr_of(loc + 1536), 10, r.mr->lkey };
    sge[1] = (struct ibv_sge){ addr_of(loc + 1546), 0, r.mr->lkey };
    sge[2] = (struct ibv_sge){ addr_of(loc + 1580), 20, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .wr_id = 8,
        .sg_list = sge,
        .num_sge = 3,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    TRY(post_and_wait(p.a, &wr, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 8, IBV_WC_SEND));
    TRY(wait_wc(p.cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 102, IBV_WC_RECV));
    CHECK(wc.byte_len == 30, "3-SGE SEND: byte_len %u", wc.byte_len);
    CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "plain SEND has WITH_IMM");
    CHECK(!memcmp(rcv, loc + 1536, 10) && !memcmp(rcv + 10, loc + 1580, 20),
          "3-SGE SEND: the data is not the SGEs' in order");

    /* 5 WRITEs in one post, the last signaled only. */
    for (i = 0; i < 5; i++) {
        fill(loc + 2048 + 8 * i, 8, (uint8_t)(10 + i));
        s5[i] = (struct ibv_sge){ addr_of(loc + 2048 + 8 * i), 8, r.mr->lkey };
        list[i] = (struct ibv_send_wr){
            .wr_id = 20 + i,
            .next = i < 4 ? &list[i + 1] : NULL,
            .sg_list = &s5[i],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = i == 4 ? IBV_SEND_SIGNALED : 0,
            .wr.rdma = { addr_of(rem + 2048 + 8 * i), r.mr->rkey },
        };
    }
    TRY(post_and_wait(p.a, list, p.cq_a, &wc, 1));
    TRY(wc_ok(&wc, 24, IBV_WC_RDMA_WRITE));
    TRY(expect_quiet(p.cq_a, QUIET_MS, "unsignaled WRITEs"));
    CHECK(!memcmp(rem + 2048, loc + 2048, 40),
          "the 5 WRITEs of one post did not all land");
    TRY(expect_quiet(p.cq_b, 0, "the responder"));

    CHECK(!pair_destroy(&p), "destroying the pair failed");
    CHECK(!region_free(&r), "ibv_dereg_mr failed");
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_sq_sig_all(struct env *e)
{
    struct pair_opts o = { .sig_all = 1 };
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr qa;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3];
    struct ibv_wc wc[3];
    int i, ret = -1;

    TRY(connected_pair(e, &p, &o));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    CHECK(!ibv_query_qp(p.a, &qa, IBV_QP_STATE, &init), "ibv_query_qp failed");
    CHECK(init.sq_sig_all == 1, "ibv_query_qp: sq_sig_all %d", init.sq_sig_all);
    CHECK(qa.qp_state == IBV_QPS_RTS, "qp_state %d", qa.qp_state);
    for (i = 0; i < 3; i++) {
        fill(r.buf + 16 * i, 16, (uint8_t)(40 + i));
        sge[i] = (struct ibv_sge){ addr_of(r.buf + 16 * i), 16, r.mr->lkey };
        wr[i] = (struct ibv_send_wr){
            .wr_id = 30 + i,
            .next = i < 2 ? &wr[i + 1] : NULL,
            .sg_list = &sge[i],
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = 0,
            .wr.rdma = { addr_of(r.buf + 4096 + 16 * i), r.mr->rkey },
        };
    }
    TRY(post_and_wait(p.a, wr, p.cq_a, wc, 3));
    for (i = 0; i < 3; i++) {
        TRY(wc_ok(&wc[i], 30 + i, IBV_WC_RDMA_WRITE));
    }
    CHECK(!memcmp(r.buf + 4096, r.buf, 48), "the WRITEs did not land");
    CHECK(!pair_destroy(&p), "destroying the pair failed");
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_bad_wr(struct env *e)
{
    struct ibv_send_wr wr[3], *bad;
    struct ibv_sge one[2], *many = NULL;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_wc wc;
    uint32_t i, nmany;
    int ret = -1, rc;

    TRY(connected_pair(e, &p, NULL));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    nmany = p.cap.max_send_sge + 1;
    many = calloc(nmany, sizeof(*many));
    CHECK(many, "calloc");
    for (i = 0; i < nmany; i++) {
        many[i] = (struct ibv_sge){ addr_of(r.buf + 8 * i), 8, r.mr->lkey };
    }
    fill(r.buf, 2048, 50);

    /* One request with more SGEs than the QP has. */
    wr[0] = (struct ibv_send_wr){
        .wr_id = 40,
        .sg_list = many,
        .num_sge = (int)nmany,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { addr_of(r.buf + 4096), r.mr->rkey },
    };
    bad = NULL;
    rc = ibv_post_send(p.a, &wr[0], &bad);
    CHECK(rc == EINVAL,
          "num_sge %u > max_send_sge %u: ibv_post_send "
          "returned %d (%s), expected EINVAL",
          nmany, p.cap.max_send_sge, rc, strerror(rc));
    CHECK(bad == &wr[0], "*bad_wr is %p, not the request %p", (void *)bad,
          (void *)&wr[0]);
    TRY(expect_quiet(p.cq_a, QUIET_MS, "a refused request"));

    /* A list of 3 whose 2nd is bad: the 1st goes, the 3rd does not. */
    one[0] = (struct ibv_sge){ addr_of(r.buf + 2048), 8, r.mr->lkey };
    one[1] = (struct ibv_sge){ addr_of(r.buf + 2056), 8, r.mr->lkey };
    wr[0] = (struct ibv_send_wr){
        .wr_id = 41,
        .next = &wr[1],
        .sg_list = &one[0],
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { addr_of(r.buf + 4096 + 64), r.mr->rkey },
    };
    wr[1] = wr[0];
    wr[1].wr_id = 42;
    wr[1].next = &wr[2];
    wr[1].sg_list = many;
    wr[1].num_sge = (int)nmany;
    wr[2] = wr[0];
    wr[2].wr_id = 43;
    wr[2].next = NULL;
    wr[2].sg_list = &one[1];
    wr[2].wr.rdma.remote_addr = addr_of(r.buf + 4096 + 128);
    fill(r.buf + 2048, 16, 60);
    bad = NULL;
    rc = ibv_post_send(p.a, &wr[0], &bad);
    CHECK(rc == EINVAL,
          "list with a bad 2nd: ibv_post_send returned %d "
          "(%s), expected EINVAL",
          rc, strerror(rc));
    CHECK(bad == &wr[1], "*bad_wr is %p, not the 2nd request %p", (void *)bad,
          (void *)&wr[1]);
    TRY(wait_wc(p.cq_a, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 41, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(r.buf + 4096 + 64, r.buf + 2048, 8),
          "the 1st request's data did not land");
    TRY(expect_quiet(p.cq_a, QUIET_MS, "after the bad request"));
    CHECK(((volatile uint8_t *)r.buf)[4096 + 128] == 0, /* device-written */
          "the 3rd request (after the bad one) was executed");

    /* The QP still works. */
    TRY(rdma_write(p.a, p.cq_a, r.buf, 8, r.mr->lkey,
                   addr_of(r.buf + 4096 + 256), r.mr->rkey, 44, &wc));
    TRY(wc_ok(&wc, 44, IBV_WC_RDMA_WRITE));
    CHECK(!pair_destroy(&p), "destroying the pair failed");
    ret = 0;
out:
    free(many);
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_remote_access_error(struct env *e)
{
    struct ibv_async_event ev;
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr qa;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_wc wc;
    char seen[256] = "";
    int64_t end;
    int got = 0, ret = -1, n;
    size_t len;

    drain_async(e->ctx, 0);
    TRY(connected_pair(e, &p, NULL));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    TRY(rdma_write(p.a, p.cq_a, r.buf, 8, r.mr->lkey, addr_of(r.buf + 4096),
                   r.mr->rkey ^ 0x00ffff00u, 50, &wc));
    TRY(wc_err(&wc, 50, IBV_WC_REM_ACCESS_ERR));

    memset(&qa, 0, sizeof(qa));
    CHECK(!ibv_query_qp(p.a, &qa, IBV_QP_STATE, &init), "ibv_query_qp failed");
    CHECK(qa.qp_state == IBV_QPS_ERR,
          "after REM_ACCESS_ERR the requester is in state %d, not ERR",
          qa.qp_state);

    /* The affiliated asynchronous event, of the requester or responder. */
    end = now_ms() + TIMEOUT_MS;
    while (!got && now_ms() < end) {
        n = next_async(e->ctx, &ev, (int)(end - now_ms()));
        if (n < 0) {
            goto out;
        }
        if (n == 0) {
            break;
        }
        if (ev.event_type == IBV_EVENT_QP_FATAL &&
            (ev.element.qp == p.a || ev.element.qp == p.b)) {
            got = 1;
        }
        len = strlen(seen);
        snprintf(seen + len, sizeof(seen) - len, " %s",
                 ibv_event_type_str(ev.event_type));
        ibv_ack_async_event(&ev);
    }
    CHECK(got,
          "no IBV_EVENT_QP_FATAL for the pair within %d ms "
          "(events:%s)",
          TIMEOUT_MS, seen[0] ? seen : " none");

    /* A request posted to a QP in ERR completes flushed. */
    TRY(rdma_write(p.a, p.cq_a, r.buf, 8, r.mr->lkey, addr_of(r.buf + 4096),
                   r.mr->rkey, 51, &wc));
    TRY(wc_err(&wc, 51, IBV_WC_WR_FLUSH_ERR));

    drain_async(e->ctx, QUIET_MS);
    n = ibv_destroy_qp(p.a);
    CHECK(!n, "ibv_destroy_qp of the QP in ERR: %s", strerror(n));
    p.a = NULL;
    CHECK(!pair_destroy(&p), "destroying the rest of the pair failed");
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_comp_channel(struct env *e)
{
    struct ibv_comp_channel *ch = NULL;
    struct pair_opts o = { 0 };
    struct pollfd pfd;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_cq *ev_cq;
    struct ibv_wc wc;
    void *ev_ctx;
    int marker, fl, ret = -1, rc, i;

    ch = ibv_create_comp_channel(e->ctx);
    CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
    o.channel = ch;
    o.cq_context = &marker;
    TRY(connected_pair(e, &p, &o));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    CHECK(p.cq_a->channel == ch && p.cq_a->cq_context == &marker,
          "the CQ's channel or cq_context is not what was given");

    for (i = 0; i < 2; i++) {
        rc = ibv_req_notify_cq(p.cq_a, 0);
        CHECK(!rc, "ibv_req_notify_cq: %s", strerror(rc));
        fill(r.buf, 8, (uint8_t)(70 + i));
        {
            struct ibv_sge sge = { addr_of(r.buf), 8, r.mr->lkey };
            struct ibv_send_wr wr = {
                .wr_id = 60 + i, .sg_list = &sge, .num_sge = 1,
                .opcode = IBV_WR_RDMA_WRITE,
                .send_flags = IBV_SEND_SIGNALED,
                .wr.rdma = { addr_of(r.buf + 4096),
                         r.mr->rkey },
            }, *bad = NULL;

            rc = ibv_post_send(p.a, &wr, &bad);
            CHECK(!rc, "ibv_post_send: %s", strerror(rc));
        }
        pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
        rc = poll(&pfd, 1, TIMEOUT_MS);
        CHECK(rc >= 0, "poll(channel fd): %s", strerror(errno));
        CHECK(rc == 1 && (pfd.revents & POLLIN),
              "round %d: no POLLIN on the channel's fd within %d ms "
              "(revents 0x%x)",
              i, TIMEOUT_MS, pfd.revents);
        ev_cq = NULL;
        ev_ctx = NULL;
        CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx),
              "ibv_get_cq_event after POLLIN: %s", strerror(errno));
        CHECK(ev_cq == p.cq_a, "ibv_get_cq_event: CQ %p, not %p", (void *)ev_cq,
              (void *)p.cq_a);
        CHECK(ev_ctx == &marker, "ibv_get_cq_event: cq_context %p, not %p",
              ev_ctx, (void *)&marker);
        ibv_ack_cq_events(ev_cq, 1);
        TRY(wait_wc(p.cq_a, &wc, 1, TIMEOUT_MS));
        TRY(wc_ok(&wc, 60 + i, IBV_WC_RDMA_WRITE));
    }

    /* Nothing pending and O_NONBLOCK: EAGAIN. */
    fl = fcntl(ch->fd, F_GETFL);
    CHECK(fl >= 0 && !fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK),
          "fcntl(channel fd, O_NONBLOCK): %s", strerror(errno));
    errno = 0;
    rc = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
    CHECK(rc == -1 && errno == EAGAIN,
          "ibv_get_cq_event with nothing pending on a non-blocking "
          "channel: %d, errno %s (expected -1, EAGAIN)",
          rc, strerror(errno));
    pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
    CHECK(poll(&pfd, 1, 0) == 0, "POLLIN with nothing pending");

    CHECK(!pair_destroy(&p), "destroying the pair failed");
    rc = ibv_destroy_comp_channel(ch);
    CHECK(!rc, "ibv_destroy_comp_channel: %d", rc);
    ch = NULL;
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    if (ch) {
        ibv_destroy_comp_channel(ch);
    }
    return ret;
}
