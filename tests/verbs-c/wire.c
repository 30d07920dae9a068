// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check wire: every RC opcode, byte for byte, both ways, between
 * two processes that may be on two devices, two hosts, or qhca and another
 * verbs device (rxe):
 *
 *   qhca-verbs-check wire DEV GID_INDEX PORT [HOST] [-r ROUNDS] [-u TIMEOUT]
 *
 * Without HOST it listens on TCP PORT for one peer; with HOST it connects to
 * HOST:PORT (again for up to a minute while nobody listens). Over that
 * connection the two exchange their QP number, PSN, GID (index GID_INDEX of
 * port 1), active MTU, read/atomic depth and a 4 MiB target region, then
 * connect one RC QP each, addressed by GID (a GRH, as RoCE needs), at the
 * smaller of the two MTUs.
 *
 * Each round has two phases; in each, one side is the requester and posts a
 * script both sides derive from the round, the phase and the MTU: SEND, SEND
 * with immediate, RDMA WRITE, WRITE with immediate and RDMA READ at sizes
 * around the MTU (0, 1, 63, MTU-1, MTU, MTU+1, 3 MTU+17, 64 KiB+5), 48
 * back-to-back writes at unaligned offsets, both atomics (a compare that
 * matches, one that does not, two fetch-adds), and a READ of written bytes
 * (RC ordering). The requester checks every completion, the bytes of every
 * READ and the value every atomic returns; the responder checks every receive
 * completion (opcode, length, immediate, the bytes and the byte after them)
 * and then its whole target region against the image both sides computed:
 * every written byte, and every byte nobody should have written.
 *
 * This file holds the connection (TCP, then the QP) and the rounds;
 * wire_phase.c the script and both sides of a phase.
 *
 * Prints one line per phase and "wire: ok ..." at the end; exits 0 only if
 * everything matched, 1 on a mismatch or error (why on stdout), 2 on bad
 * usage. -u sets the QP's local ACK timeout exponent (default 16: 268 ms,
 * for two loaded TCG guests), -r the rounds (default 1).
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

/* ------------------------------------------------------------------------ */
/* The TCP connection to the peer */

int wire_send_line(struct wire *w, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf) - 1) {
        return FAIL("a control line too long");
    }
    buf[n++] = '\n';
    if (send(w->sock, buf, (size_t)n, MSG_NOSIGNAL) != n) {
        return FAIL("send to the peer: %s", strerror(errno));
    }
    return 0;
}

/* Reads one line (without its newline) from the peer within @ms. */
static int recv_line(struct wire *w, char *buf, size_t size, int ms)
{
    struct pollfd pfd = { .fd = w->sock, .events = POLLIN };
    int64_t end = now_ms() + ms;
    size_t n = 0;
    ssize_t r;

    while (n + 1 < size) {
        int left = (int)(end - now_ms());

        if (left <= 0 || poll(&pfd, 1, left) <= 0) {
            return FAIL("no line from the peer within %d ms", ms);
        }
        r = recv(w->sock, buf + n, 1, 0);
        if (r <= 0) {
            return FAIL("the peer closed the connection%s%s",
                        r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
        }
        if (buf[n] == '\n') {
            buf[n] = 0;
            return 0;
        }
        n++;
    }
    return FAIL("a line from the peer is too long");
}

/* Waits for the peer's @want; a "fail ..." line is the peer's failure. */
int wire_expect_line(struct wire *w, const char *want, int ms)
{
    char line[512];

    TRY(recv_line(w, line, sizeof(line), ms));
    if (!strcmp(line, want)) {
        return 0;
    }
    return FAIL("the peer said \"%s\" where \"%s\" was due", line, want);
out:
    return -1;
}

static int tcp_server(struct wire *w, const char *port)
{
    struct sockaddr_in6 a = { .sin6_family = AF_INET6 };
    struct pollfd pfd;
    int one = 1, zero = 0, l;

    l = socket(AF_INET6, SOCK_STREAM, 0);
    if (l < 0) {
        /* No IPv6 in this kernel: IPv4 only. */
        struct sockaddr_in a4 = { .sin_family = AF_INET };

        a4.sin_port = htons((uint16_t)atoi(port));
        l = socket(AF_INET, SOCK_STREAM, 0);
        if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, 4) ||
            bind(l, (struct sockaddr *)&a4, sizeof(a4))) {
            return FAIL("TCP port %s: %s", port, strerror(errno));
        }
    } else {
        a.sin6_port = htons((uint16_t)atoi(port));
        a.sin6_addr = in6addr_any;
        if (setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, 4) ||
            setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, 4) ||
            bind(l, (struct sockaddr *)&a, sizeof(a))) {
            close(l);
            return FAIL("TCP port %s: %s", port, strerror(errno));
        }
    }
    if (listen(l, 1)) {
        close(l);
        return FAIL("listen: %s", strerror(errno));
    }
    pfd = (struct pollfd){ .fd = l, .events = POLLIN };
    if (poll(&pfd, 1, STEP_MS) != 1) {
        close(l);
        return FAIL("no peer connected to port %s within %d ms", port,
                    STEP_MS);
    }
    w->sock = accept(l, NULL, NULL);
    close(l);
    if (w->sock < 0) {
        return FAIL("accept: %s", strerror(errno));
    }
    return 0;
}

static int tcp_client(struct wire *w, const char *host, const char *port)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
    int64_t end = now_ms() + 60000;
    int err;

    err = getaddrinfo(host, port, &hints, &res);
    if (err) {
        return FAIL("%s: %s", host, gai_strerror(err));
    }
    for (;;) {
        for (ai = res; ai; ai = ai->ai_next) {
            w->sock = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (w->sock < 0) {
                continue;
            }
            if (!connect(w->sock, ai->ai_addr, ai->ai_addrlen)) {
                freeaddrinfo(res);
                return 0;
            }
            err = errno;
            close(w->sock);
            w->sock = -1;
        }
        if (now_ms() > end) {
            freeaddrinfo(res);
            return FAIL("connect to %s:%s: %s", host, port, strerror(err));
        }
        usleep(200000);
    }
}

/* ------------------------------------------------------------------------ */
/* The QP */

static uint32_t mtu_bytes(enum ibv_mtu m)
{
    return 128u << m; /* IBV_MTU_256 is 1 */
}

static int setup(struct wire *w)
{
    struct ibv_qp_init_attr init = { 0 };
    struct ibv_port_attr pa;
    int access = REMOTE_ALL;

    if (ibv_query_port(w->e.ctx, PORT, &pa)) {
        return FAIL("ibv_query_port failed");
    }
    if (pa.state != IBV_PORT_ACTIVE) {
        return FAIL("port 1 is not active (state %d)", pa.state);
    }
    if (ibv_query_gid(w->e.ctx, PORT, w->gidx, &w->me.gid)) {
        return FAIL("ibv_query_gid(1, %d) failed", w->gidx);
    }
    w->me.mtu = pa.active_mtu;
    w->me.rd_atom = (uint32_t)w->e.attr.max_qp_rd_atom;
    w->cq = ibv_create_cq(w->e.ctx, 2 * QP_DEPTH + N_RECV, NULL, NULL, 0);
    if (!w->cq) {
        return FAIL("ibv_create_cq: %s", strerror(errno));
    }
    init.send_cq = w->cq;
    init.recv_cq = w->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = QP_DEPTH;
    init.cap.max_recv_wr = N_RECV;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    w->qp = ibv_create_qp(w->e.pd, &init);
    if (!w->qp) {
        return FAIL("ibv_create_qp: %s", strerror(errno));
    }
    w->me.qpn = w->qp->qp_num;
    w->me.psn = (uint32_t)wire_mix((uint64_t)getpid() << 24 | w->me.qpn);
    w->me.psn &= 0xffffff;
    TRY(region_new(w->e.pd, &w->mem, MEM_LEN, access));
    TRY(region_new(w->e.pd, &w->src, SRC_LEN, access));
    TRY(region_new(w->e.pd, &w->rcv, (size_t)N_RECV * RECV_SLOT, access));
    w->me.addr = addr_of(w->mem.buf);
    w->me.rkey = w->mem.mr->rkey;
    w->image = malloc(MEM_LEN);
    if (!w->image) {
        return FAIL("malloc");
    }
    return 0;
out:
    return -1;
}

static void gid_hex(const union ibv_gid *g, char *out)
{
    int i;

    for (i = 0; i < 16; i++) {
        sprintf(out + 2 * i, "%02x", g->raw[i]);
    }
}

static int exchange(struct wire *w)
{
    struct peer_info *p = &w->peer;
    char line[512], gid[33], pgid[33];
    int i;

    gid_hex(&w->me.gid, gid);
    TRY(wire_send_line(w, "qhca-wire 1 %u %u %s %u %u %" PRIx64 " %x",
                       w->me.qpn, w->me.psn, gid, w->me.mtu, w->me.rd_atom,
                       w->me.addr, w->me.rkey));
    TRY(recv_line(w, line, sizeof(line), STEP_MS));
    if (sscanf(line, "qhca-wire 1 %u %u %32s %u %u %" SCNx64 " %x", &p->qpn,
               &p->psn, pgid, &p->mtu, &p->rd_atom, &p->addr,
               &p->rkey) != 7 ||
        strlen(pgid) != 32 || p->mtu < IBV_MTU_256 || p->mtu > IBV_MTU_4096) {
        return FAIL("the peer's record is \"%s\"", line);
    }
    for (i = 0; i < 16; i++) {
        unsigned int b;

        sscanf(pgid + 2 * i, "%2x", &b);
        p->gid.raw[i] = (uint8_t)b;
    }
    w->mtu = (enum ibv_mtu)(w->me.mtu < p->mtu ? w->me.mtu : p->mtu);
    w->mtu_bytes = mtu_bytes(w->mtu);
    printf("wire: %s qpn 0x%06x gid %s <-> qpn 0x%06x gid %s, mtu %u\n",
           ibv_get_device_name(w->e.dev), w->me.qpn, gid, p->qpn, pgid,
           w->mtu_bytes);
    return 0;
out:
    return -1;
}

static int connect_qp(struct wire *w, int timeout)
{
    uint32_t rd = w->peer.rd_atom < w->me.rd_atom ? w->peer.rd_atom
                                                   : w->me.rd_atom;
    struct rc_path path = {
        .mtu = w->mtu,
        .dgid = &w->peer.gid,
        .sgid_index = (uint8_t)w->gidx,
        .timeout = (uint8_t)timeout,
        .rd_atomic = (uint8_t)(rd > 16 ? 16 : rd),
        .dest_rd_atomic = (uint8_t)(w->me.rd_atom > 16 ? 16 : w->me.rd_atom),
    };

    return rc_connect_path(w->qp, w->peer.qpn, w->me.psn, w->peer.psn, &path);
}

/* ------------------------------------------------------------------------ */

static void wire_close(struct wire *w)
{
    if (w->qp) {
        ibv_destroy_qp(w->qp);
    }
    if (w->cq) {
        ibv_destroy_cq(w->cq);
    }
    region_free(&w->mem);
    region_free(&w->src);
    region_free(&w->rcv);
    free(w->image);
    if (w->e.pd) {
        ibv_dealloc_pd(w->e.pd);
    }
    if (w->e.ctx) {
        ibv_close_device(w->e.ctx);
    }
    if (w->e.list) {
        ibv_free_device_list(w->e.list);
    }
    if (w->sock >= 0) {
        close(w->sock);
    }
}

int run_wire(int argc, char **argv)
{
    static struct wire w; /* large: the script */
    const char *dev, *port, *host = NULL;
    int rounds = 1, timeout = 16, round, phase, i, ret = 1;
    int64_t t0 = now_ms();

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        return 2;
    }
    dev = argv[0];
    w.gidx = atoi(argv[1]);
    port = argv[2];
    w.sock = -1;
    for (i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-u") && i + 1 < argc) {
            timeout = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && !host) {
            host = argv[i];
        } else {
            return 2;
        }
    }
    if (rounds < 1 || timeout < 1 || timeout > 31 || w.gidx < 0) {
        return 2;
    }
    if (open_env(&w.e, dev) || setup(&w) ||
        (host ? tcp_client(&w, host, port) : tcp_server(&w, port)) ||
        exchange(&w) || connect_qp(&w, timeout) ||
        wire_send_line(&w, "connected") ||
        wire_expect_line(&w, "connected", STEP_MS)) {
        goto out;
    }
    for (round = 0; round < rounds; round++) {
        for (phase = 0; phase < 2; phase++) {
            /* Phase 0: the client asks; phase 1: the server. */
            int asks = (phase == 0) == (host != NULL);

            wire_build_script(&w, round, phase);
            if (asks ? wire_requester(&w, round, phase)
                     : wire_responder(&w, round, phase)) {
                goto out;
            }
        }
    }
    printf("wire: ok: %d rounds, every RC opcode both ways, %" PRId64
           " ms\n", rounds, now_ms() - t0);
    ret = 0;
out:
    if (ret) {
        printf("wire: FAIL: %s\n", why[0] ? why : "(no reason recorded)");
    }
    wire_close(&w);
    return ret;
}
