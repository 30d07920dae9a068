// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: what its files share (see main.c for the program). The
 * constants of the checks, the record of why the current check fails with
 * the FAIL, CHECK and TRY macros around it, the context and objects the
 * checks make, the helpers of common.c, and the checks themselves, which
 * main.c's table runs in order.
 */

#ifndef VERBS_CHECK_H
#define VERBS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define PORT       1
#define TIMEOUT_MS 5000 /* for any one completion or event */
#define QUIET_MS   200  /* to see that nothing (more) arrives */

#define REMOTE_ALL                                                             \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                        \
     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ------------------------------------------------------------------------ */
/* Reporting */

/* Why the current check fails ("" while it has not). */
extern char why[640];

/* Records why the current check fails; returns -1. */
__attribute__((format(printf, 2, 3))) int failf(int line, const char *fmt, ...);

#define FAIL(...) failf(__LINE__, __VA_ARGS__)

/* Fails the check (goto out, where it cleans up) unless @cond holds. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            FAIL(__VA_ARGS__);                                                 \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* A helper that already recorded why it failed. */
#define TRY(call)                                                              \
    do {                                                                       \
        if ((call) < 0)                                                        \
            goto out;                                                          \
    } while (0)

int64_t now_ms(void);
const char *wc_str(enum ibv_wc_status s);

/* ------------------------------------------------------------------------ */
/* The context every check shares, and the objects they make */

struct env {
    struct ibv_device **list;
    struct ibv_device *dev;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_device_attr attr;
    union ibv_gid gid;
    /*
     * 1 if the port's link layer is Ethernet (RoCE): every address vector
     * needs a GRH, and the RDMA core bans alternate paths.
     */
    int roce;
};

/* A page-aligned, zeroed buffer registered with @access. */
struct region {
    uint8_t *buf;
    size_t len;
    struct ibv_mr *mr;
};

int region_new(struct ibv_pd *pd, struct region *r, size_t len, int access);
int region_free(struct region *r);

static inline uint64_t addr_of(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

/* Two QPs of one context, each with its own CQ. */
struct pair {
    struct ibv_cq *cq_a, *cq_b;
    struct ibv_qp *a, *b;
    struct ibv_qp_cap cap; /* what a got */
};

struct pair_opts {
    int sig_all;
    struct ibv_comp_channel *channel; /* cq_a's */
    void *cq_context;                 /* cq_a's */
};

struct ibv_qp *qp_new(struct ibv_pd *pd, struct ibv_cq *cq,
                      enum ibv_qp_type type, int sig_all,
                      struct ibv_qp_cap *cap);
/* The same, receiving from @srq if not NULL (then no receive queue). */
struct ibv_qp *qp_new_on(struct ibv_pd *pd, struct ibv_cq *cq,
                         struct ibv_srq *srq, enum ibv_qp_type type,
                         int sig_all, struct ibv_qp_cap *cap);
int rc_connect(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t sq_psn,
               uint32_t rq_psn);

/* What rc_connect_path sets beyond the QPNs and PSNs. */
struct rc_path {
    enum ibv_mtu mtu;
    const union ibv_gid *dgid; /* NULL: no GRH */
    uint8_t sgid_index;
    uint8_t timeout; /* local ACK timeout exponent */
    uint8_t rd_atomic, dest_rd_atomic;
};

int rc_connect_path(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t sq_psn,
                    uint32_t rq_psn, const struct rc_path *path);
int pair_destroy(struct pair *p);
int connected_pair(struct env *e, struct pair *p, const struct pair_opts *o);

/* Opens device @name into @e: context, attributes, GID 0, a PD (main.c). */
int open_env(struct env *e, const char *name);

/* ------------------------------------------------------------------------ */
/* Posting and completions */

int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms);
int expect_quiet(struct ibv_cq *cq, int ms, const char *what);
int post_and_wait(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_cq *cq,
                  struct ibv_wc *wc, int n);
int post_recv(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
              uint32_t lkey);
int wc_ok(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_opcode opcode);
int wc_err(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status status);
int rdma_write(struct ibv_qp *qp, struct ibv_cq *cq, const void *src,
               uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
               uint64_t wr_id, struct ibv_wc *wc);
void fill(uint8_t *p, size_t len, uint8_t seed);

/* ------------------------------------------------------------------------ */
/* Asynchronous events */

int next_async(struct ibv_context *ctx, struct ibv_async_event *ev, int ms);
int drain_async(struct ibv_context *ctx, int ms);

/* ------------------------------------------------------------------------ */
/* The checks: each returns 0 if it passes, else non-zero (why[] says why) */

/* checks_device.c */
int check_device_list(struct env *e);
int check_query_port(struct env *e);
int check_busy_objects(struct env *e);
int check_busy_channel(struct env *e);
int check_unsupported(struct env *e);
int check_bad_args(struct env *e);
int check_events_and_teardown(struct env *e);

/* checks_rc.c */
int check_rc_all_opcodes(struct env *e);
int check_sq_sig_all(struct env *e);
int check_bad_wr(struct env *e);
int check_remote_access_error(struct env *e);
int check_comp_channel(struct env *e);

/* checks_ext.c: @note gets a suffix of the "ok" line (a skip) */
int check_ud(struct env *e);
int check_odp(struct env *e, const char **note);
int check_memory_windows(struct env *e, const char **note);

/* checks_cq.c */
int check_resize_cq(struct env *e);

/* checks_mr.c: @note as checks_ext.c's */
int check_rereg(struct env *e, const char **note);

/* checks_srq.c */
int check_srq(struct env *e);

/* checks_qpex.c */
int check_qp_ex(struct env *e);
int check_qp_ex_ud(struct env *e);

/* wire.c: the "wire" subcommand; @argv after "wire"; returns the exit code */
int run_wire(int argc, char **argv);

/* unplug DEV: traffic while the device is removed (unplug.c). */
int run_unplug(const char *name);

#endif /* VERBS_CHECK_H */
