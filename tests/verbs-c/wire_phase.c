// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check wire: one phase (see wire.c for the subcommand). The
 * bytes (a stream per seed), the script both sides derive from the round,
 * the phase and the MTU, with the image of the responder's region after it,
 * and the two sides of a phase: the requester posts the script and checks
 * every completion and what READs and atomics bring back; the responder
 * checks every receive and then its whole region against the image.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* ------------------------------------------------------------------------ */
/* The bytes */

uint64_t wire_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* @len bytes of the stream @seed (a different stream for each seed). */
static void pattern(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t s = wire_mix(seed + 1), w = 0;
    size_t i;

    for (i = 0; i < len; i++) {
        if (!(i & 7)) {
            s += 0x9e3779b97f4a7c15ull;
            w = wire_mix(s);
        }
        p[i] = (uint8_t)(w >> ((i & 7) * 8));
    }
}

static uint64_t seed_of(int round, int phase, int k)
{
    return ((uint64_t)round << 32) | ((uint64_t)phase << 24) | (uint64_t)k;
}

/* The region's contents before a phase: its own stream. */
static void fill_region(uint8_t *p, int round, int phase)
{
    pattern(p, MEM_LEN, seed_of(round, phase, 0xffffff));
}

static uint64_t load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static void store64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, sizeof(v));
}

/* The first offset at which @a and @b differ (@len if none). */
static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        if (a[i] != b[i]) {
            break;
        }
    }
    return i;
}

/* ------------------------------------------------------------------------ */
/* The script */

static void add_op(struct wire *w, enum op_kind kind, uint32_t len,
                   uint64_t off, uint64_t *src)
{
    struct op *o = &w->ops[w->n_ops];

    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->len = len;
    o->off = off;
    o->src = *src;
    *src += (len + 71) & ~63u; /* 64-byte steps, a few bytes apart */
    w->n_ops++;
}

/*
 * The ops of one phase, and the image of the responder's region after them
 * (both sides compute both). Sets each READ's and atomic's expected result
 * from the image at its point in the script.
 */
void wire_build_script(struct wire *w, int round, int phase)
{
    const uint32_t m = w->mtu_bytes;
    const uint32_t sizes[N_SIZES] = { 0, 1, 63, m - 1, m, m + 1, 3 * m + 17,
                                      65536 + 5 };
    uint64_t src = 0;
    struct op *o;
    int i, k;

    w->n_ops = 0;
    for (i = 0; i < N_SIZES; i++) {
        add_op(w, OP_SEND, sizes[i], 0, &src);
        add_op(w, OP_SEND_IMM, sizes[i], 0, &src);
        add_op(w, OP_WRITE, sizes[i], (uint64_t)(3 * i) * SLICE + i, &src);
        add_op(w, OP_WRITE_IMM, sizes[i], (uint64_t)(3 * i + 1) * SLICE + 2 * i,
               &src);
        if (sizes[i]) {
            add_op(w, OP_READ, sizes[i], (uint64_t)(3 * i + 2) * SLICE + 3 * i,
                   &src);
        }
    }
    for (i = 0; i < N_BURST; i++) {
        add_op(w, OP_WRITE, BURST_LEN, BURST_OFF + (uint64_t)i * BURST_LEN,
               &src);
    }
    add_op(w, OP_CAS, 8, ATOM_OFF, &src);
    add_op(w, OP_CAS, 8, ATOM_OFF, &src);
    add_op(w, OP_FADD, 8, ATOM_OFF, &src);
    add_op(w, OP_FADD, 8, ATOM_OFF + 64, &src);
    add_op(w, OP_WRITE, 65536 + 5, ORDER_OFF + 7, &src);
    add_op(w, OP_READ, 65536 + 5, ORDER_OFF + 7, &src);

    fill_region(w->image, round, phase);
    for (k = 0; k < w->n_ops; k++) {
        o = &w->ops[k];
        o->seed = seed_of(round, phase, k);
        o->imm = (uint32_t)wire_mix(o->seed);
        switch (o->kind) {
        case OP_WRITE:
        case OP_WRITE_IMM:
            pattern(w->image + o->off, o->len, o->seed);
            break;
        case OP_CAS:
            o->expect = load64(w->image + o->off);
            /* The first compare matches, the second does not. */
            o->cmp_add = k && w->ops[k - 1].kind == OP_CAS ? ~o->expect
                                                            : o->expect;
            o->swap = wire_mix(o->seed ^ 0xa5);
            if (o->cmp_add == o->expect) {
                store64(w->image + o->off, o->swap);
            }
            break;
        case OP_FADD:
            o->expect = load64(w->image + o->off);
            o->cmp_add = wire_mix(o->seed) | 1;
            store64(w->image + o->off, o->expect + o->cmp_add);
            break;
        default:
            break;
        }
    }
}

static int consumes_recv(enum op_kind k)
{
    return k == OP_SEND || k == OP_SEND_IMM || k == OP_WRITE_IMM;
}

static const char *op_name(enum op_kind k)
{
    static const char *const names[] = { "SEND", "SEND_IMM", "WRITE",
                                         "WRITE_IMM", "READ", "CMP_SWAP",
                                         "FETCH_ADD" };

    return names[k];
}

/* ------------------------------------------------------------------------ */
/* A phase as the requester */

static int post_op(struct wire *w, int k)
{
    const struct op *o = &w->ops[k];
    struct ibv_sge sge = {
        .addr = addr_of(w->src.buf + o->src),
        .length = o->len,
        .lkey = w->src.mr->lkey,
    };
    struct ibv_send_wr wr = {
        .wr_id = (uint64_t)k,
        .sg_list = &sge,
        .num_sge = o->len ? 1 : 0,
        .send_flags = IBV_SEND_SIGNALED,
    }, *bad = NULL;
    int ret;

    switch (o->kind) {
    case OP_SEND:
        wr.opcode = IBV_WR_SEND;
        break;
    case OP_SEND_IMM:
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(o->imm);
        break;
    case OP_WRITE:
    case OP_WRITE_IMM:
        wr.opcode = o->kind == OP_WRITE ? IBV_WR_RDMA_WRITE
                                        : IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(o->imm);
        wr.wr.rdma.remote_addr = w->peer.addr + o->off;
        wr.wr.rdma.rkey = w->peer.rkey;
        break;
    case OP_READ:
        wr.opcode = IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = w->peer.addr + o->off;
        wr.wr.rdma.rkey = w->peer.rkey;
        break;
    case OP_CAS:
    case OP_FADD:
        wr.opcode = o->kind == OP_CAS ? IBV_WR_ATOMIC_CMP_AND_SWP
                                      : IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = w->peer.addr + o->off;
        wr.wr.atomic.rkey = w->peer.rkey;
        wr.wr.atomic.compare_add = o->cmp_add;
        wr.wr.atomic.swap = o->swap;
        break;
    }
    ret = ibv_post_send(w->qp, &wr, &bad);
    if (ret) {
        return FAIL("op %d (%s %u B): ibv_post_send: %s", k, op_name(o->kind),
                    o->len, strerror(ret));
    }
    return 0;
}

/* Checks the completion of op @k and what it brought back. */
static int check_send_wc(struct wire *w, const struct ibv_wc *wc, int k)
{
    static const enum ibv_wc_opcode want[] = {
        [OP_SEND] = IBV_WC_SEND,         [OP_SEND_IMM] = IBV_WC_SEND,
        [OP_WRITE] = IBV_WC_RDMA_WRITE,  [OP_WRITE_IMM] = IBV_WC_RDMA_WRITE,
        [OP_READ] = IBV_WC_RDMA_READ,    [OP_CAS] = IBV_WC_COMP_SWAP,
        [OP_FADD] = IBV_WC_FETCH_ADD,
    };
    const struct op *o = &w->ops[k];
    const uint8_t *got = w->src.buf + o->src;
    size_t d;

    if (wc->status != IBV_WC_SUCCESS) {
        return FAIL("op %d (%s %u B): status %s (vendor_err 0x%x)", k,
                    op_name(o->kind), o->len, wc_str(wc->status),
                    wc->vendor_err);
    }
    if (wc->wr_id != (uint64_t)k) {
        return FAIL("completion of op %" PRIu64 " where op %d's was due",
                    wc->wr_id, k);
    }
    if (wc->opcode != want[o->kind]) {
        return FAIL("op %d (%s): completion opcode %d", k, op_name(o->kind),
                    wc->opcode);
    }
    if (o->kind == OP_CAS || o->kind == OP_FADD) {
        if (load64(got) != o->expect) {
            return FAIL("op %d (%s): returned 0x%" PRIx64 ", the word held "
                        "0x%" PRIx64, k, op_name(o->kind), load64(got),
                        o->expect);
        }
        return 0;
    }
    if (o->kind != OP_READ) {
        return 0;
    }
    /* Nothing writes a READ's bytes after it: the final image has them. */
    d = first_diff(got, w->image + o->off, o->len);
    if (d < o->len) {
        return FAIL("op %d (READ %u B at +0x%" PRIx64 "): byte %zu differs", k,
                    o->len, o->off, d);
    }
    if (o->src + o->len < SRC_LEN && got[o->len] != FILL_BYTE) {
        return FAIL("op %d (READ %u B): the byte after it was written", k,
                    o->len);
    }
    return 0;
}

int wire_requester(struct wire *w, int round, int phase)
{
    int64_t t0 = now_ms(), end;
    struct ibv_wc wc[16];
    int posted = 0, done = 0, n, i;
    uint64_t bytes = 0;

    /* Sources carry their streams; READ destinations the fill byte. */
    for (i = 0; i < w->n_ops; i++) {
        const struct op *o = &w->ops[i];
        uint8_t *p = w->src.buf + o->src;

        if (o->kind == OP_READ || o->kind == OP_CAS || o->kind == OP_FADD) {
            memset(p, FILL_BYTE, (size_t)o->len + 1);
        } else {
            pattern(p, o->len, o->seed);
        }
        bytes += o->len;
    }
    TRY(wire_expect_line(w, "ready", STEP_MS));
    end = now_ms() + STEP_MS;
    while (done < w->n_ops) {
        while (posted < w->n_ops && posted - done < QP_DEPTH) {
            TRY(post_op(w, posted));
            posted++;
        }
        n = ibv_poll_cq(w->cq, 16, wc);
        if (n < 0) {
            FAIL("ibv_poll_cq returned %d", n);
            goto out;
        }
        for (i = 0; i < n; i++) {
            TRY(check_send_wc(w, &wc[i], done));
            done++;
        }
        if (!n && now_ms() > end) {
            FAIL("%d of %d completions within %d ms (%d posted)", done,
                 w->n_ops, STEP_MS, posted);
            goto out;
        }
    }
    TRY(wire_send_line(w, "done"));
    TRY(wire_expect_line(w, "verified", STEP_MS));
    printf("wire: round %d phase %d: requester: %d ops, %" PRIu64
           " bytes, %" PRId64 " ms\n", round, phase, w->n_ops, bytes,
           now_ms() - t0);
    return 0;
out:
    wire_send_line(w, "fail requester: %s", why);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* A phase as the responder */

static int check_recv(struct wire *w, const struct ibv_wc *wc, int k,
                      uint64_t slot)
{
    const struct op *o = &w->ops[k];
    const uint8_t *buf = w->rcv.buf + (slot % N_RECV) * RECV_SLOT;
    int imm = o->kind != OP_SEND;
    uint8_t *exp;
    size_t d;

    if (wc->status != IBV_WC_SUCCESS) {
        return FAIL("receive for op %d (%s %u B): status %s", k,
                    op_name(o->kind), o->len, wc_str(wc->status));
    }
    if (wc->wr_id != slot) {
        return FAIL("op %d: receive %" PRIu64 " completed, %" PRIu64
                    " was due", k, wc->wr_id, slot);
    }
    if (wc->opcode != (o->kind == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM
                                              : IBV_WC_RECV)) {
        return FAIL("op %d (%s): receive opcode %d", k, op_name(o->kind),
                    wc->opcode);
    }
    if (wc->byte_len != o->len) {
        return FAIL("op %d (%s %u B): byte_len %u", k, op_name(o->kind),
                    o->len, wc->byte_len);
    }
    if (!!(wc->wc_flags & IBV_WC_WITH_IMM) != imm ||
        (imm && wc->imm_data != htonl(o->imm))) {
        return FAIL("op %d (%s): wc_flags 0x%x imm_data 0x%x, sent 0x%x", k,
                    op_name(o->kind), wc->wc_flags, ntohl(wc->imm_data),
                    o->imm);
    }
    if (wc->qp_num != w->qp->qp_num) {
        return FAIL("op %d: qp_num 0x%x", k, wc->qp_num);
    }
    if (o->kind == OP_WRITE_IMM) {
        return 0; /* its bytes are in the image */
    }
    exp = malloc(o->len + 1);
    if (!exp) {
        return FAIL("malloc");
    }
    pattern(exp, o->len, o->seed);
    d = first_diff(buf, exp, o->len);
    free(exp);
    if (d < o->len) {
        return FAIL("op %d (%s %u B): byte %zu differs", k, op_name(o->kind),
                    o->len, d);
    }
    if (buf[o->len] != SLOT_BYTE) {
        return FAIL("op %d (%s %u B): the byte after it was written", k,
                    op_name(o->kind), o->len);
    }
    return 0;
}

int wire_responder(struct wire *w, int round, int phase)
{
    uint64_t first = w->recv_done;
    struct ibv_wc wc;
    int64_t end;
    size_t d;
    int k, n;

    fill_region(w->mem.buf, round, phase);
    /* Receives left from an earlier phase stay posted, untouched. */
    while (w->recv_posted - w->recv_done < N_RECV) {
        uint8_t *p = w->rcv.buf + (w->recv_posted % N_RECV) * RECV_SLOT;

        memset(p, SLOT_BYTE, RECV_SLOT);
        TRY(post_recv(w->qp, w->recv_posted, p, RECV_SLOT, w->rcv.mr->lkey));
        w->recv_posted++;
    }
    TRY(wire_send_line(w, "ready"));
    TRY(wire_expect_line(w, "done", STEP_MS));
    /* The requester saw every ACK: every receive completes. */
    end = now_ms() + 10000;
    for (k = 0; k < w->n_ops; k++) {
        if (!consumes_recv(w->ops[k].kind)) {
            continue;
        }
        do {
            n = ibv_poll_cq(w->cq, 1, &wc);
        } while (!n && now_ms() < end);
        if (n != 1) {
            FAIL("op %d (%s): no receive completion", k,
                 op_name(w->ops[k].kind));
            goto out;
        }
        TRY(check_recv(w, &wc, k, w->recv_done));
        w->recv_done++;
    }
    TRY(expect_quiet(w->cq, 50, "after the last receive"));
    d = first_diff(w->mem.buf, w->image, MEM_LEN);
    if (d < MEM_LEN) {
        FAIL("the target region differs from its image at +0x%zx (0x%02x, "
             "image 0x%02x)", d, w->mem.buf[d], w->image[d]);
        goto out;
    }
    TRY(wire_send_line(w, "verified"));
    printf("wire: round %d phase %d: responder: %" PRIu64
           " receives and %u bytes of region checked\n", round, phase,
           w->recv_done - first, MEM_LEN);
    return 0;
out:
    wire_send_line(w, "fail responder: %s", why);
    return -1;
}

