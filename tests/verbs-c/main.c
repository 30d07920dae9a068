// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: an unmodified libibverbs program that checks what a verbs
 * device does against what libibverbs promises. It knows nothing of the
 * device but its name; libibverbs loads qhca's installed provider for it:
 *
 *   qhca-verbs-check checks rocep0s10
 *
 * Three subcommands:
 *
 *   qhca-verbs-check checks DEV
 *    A battery of checks on one context of DEV, each printing "ok NAME" or
 *    "FAIL NAME: reason", then "verbs-check: N passed, M failed"; exits 0
 *    only if none failed. Two RC QPs of the context are connected to each
 *    other (port 1, GID index 0, no GRH), which a device whose QPs all reach
 *    each other (a loopback wire, or RoCE on one port) carries.
 *
 *   qhca-verbs-check nosys DEV OPS [--no-seccomp]
 *    The data path without system calls: sets everything up, prints
 *    "loop OPS ops", installs a seccomp filter that kills the process on any
 *    system call but exit and exit_group (unless --no-seccomp: then count
 *    them with strace -f), and does OPS times one inline RDMA WRITE of the
 *    loop counter plus a spin on the CQ for its completion, checking the
 *    written value. Exit codes are those of qhca-vmtest's __verbs_nosys:
 *    0 ok, 10 setup failed, 11 post failed, 12 bad completion, 13 no
 *    completion within 2e9 polls, 14 wrong data, 15 no seccomp filter.
 *
 *   qhca-verbs-check wire DEV GID_INDEX PORT [HOST] [-r ROUNDS] [-u TIMEOUT]
 *    Every RC opcode byte for byte, both ways, with a peer process on
 *    another device or host reached over TCP (see wire.c).
 *
 * This file holds the table of checks and the loop that runs them, the
 * nosys subcommand, and main; the checks are in checks_device.c,
 * checks_rc.c, checks_ext.c, checks_mr.c, checks_srq.c and checks_qpex.c, the
 * helpers they share in common.c, and verbs_check.h declares what the files
 * share.
 * Build, in this directory (what scripts/build-all.sh does):
 *   gcc -O2 -Wall -Wextra -Werror -o qhca-verbs-check *.c -libverbs
 */

#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "verbs_check.h"

#define CHECK_ALARM_S 60 /* a check that hangs is reported and ends it */

#if defined(__x86_64__)
#define AUDIT_ARCH_NATIVE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_NATIVE AUDIT_ARCH_AARCH64
#else
#error "no seccomp architecture for this target"
#endif

/* Exit codes of "nosys" (qhca-vmtest's nosys_exit). */
enum {
    NOSYS_OK = 0,
    NOSYS_SETUP = 10,
    NOSYS_POST = 11,
    NOSYS_WC_STATUS = 12,
    NOSYS_STALL = 13,
    NOSYS_DATA = 14,
    NOSYS_SECCOMP = 15,
};

/* ------------------------------------------------------------------------ */
/* The battery */

static const char *current;

static void on_alarm(int sig)
{
    static const char pre[] = "FAIL ", post[] = ": timed out (hung)\n";
    ssize_t w;

    (void)sig;
    w = write(1, pre, sizeof(pre) - 1);
    w = write(1, current, strlen(current));
    w = write(1, post, sizeof(post) - 1);
    (void)w;
    _exit(2);
}

int open_env(struct env *e, const char *name)
{
    int n = 0, i;

    memset(e, 0, sizeof(*e));
    e->list = ibv_get_device_list(&n);
    if (!e->list) {
        return FAIL("ibv_get_device_list: %s", strerror(errno));
    }
    for (i = 0; i < n; i++) {
        if (!strcmp(ibv_get_device_name(e->list[i]), name)) {
            e->dev = e->list[i];
        }
    }
    if (!e->dev) {
        return FAIL("no device %s among %d", name, n);
    }
    e->ctx = ibv_open_device(e->dev);
    if (!e->ctx) {
        return FAIL("ibv_open_device(%s): %s", name, strerror(errno));
    }
    if (ibv_query_device(e->ctx, &e->attr)) {
        return FAIL("ibv_query_device failed");
    }
    {
        struct ibv_port_attr pa;

        if (ibv_query_port(e->ctx, PORT, &pa)) {
            return FAIL("ibv_query_port(%d) failed", PORT);
        }
        e->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    }
    if (ibv_query_gid(e->ctx, PORT, 0, &e->gid)) {
        return FAIL("ibv_query_gid(1, 0) failed");
    }
    e->pd = ibv_alloc_pd(e->ctx);
    if (!e->pd) {
        return FAIL("ibv_alloc_pd: %s", strerror(errno));
    }
    return 0;
}

struct check {
    const char *name;
    int (*fn)(struct env *e);
    int (*fn_note)(struct env *e, const char **note);
};

static const struct check checks[] = {
    { "device_list", check_device_list, NULL },
    { "query_port", check_query_port, NULL },
    { "rc_all_opcodes", check_rc_all_opcodes, NULL },
    { "sq_sig_all", check_sq_sig_all, NULL },
    { "bad_wr", check_bad_wr, NULL },
    { "remote_access_error", check_remote_access_error, NULL },
    { "comp_channel", check_comp_channel, NULL },
    { "resize_cq", check_resize_cq, NULL },
    { "busy_objects", check_busy_objects, NULL },
    { "busy_channel", check_busy_channel, NULL },
    { "unsupported", check_unsupported, NULL },
    { "bad_args", check_bad_args, NULL },
    { "ud", check_ud, NULL },
    { "srq", check_srq, NULL },
    { "qp_ex", check_qp_ex, NULL },
    { "qp_ex_ud", check_qp_ex_ud, NULL },
    { "odp", NULL, check_odp },
    { "memory_windows", NULL, check_memory_windows },
    { "rereg", NULL, check_rereg },
    { "events_and_teardown", check_events_and_teardown, NULL },
};

static int run_checks(const char *name)
{
    struct sigaction sa = { .sa_handler = on_alarm };
    struct env e;
    size_t i;
    int passed = 0, failed = 0, r;

    setvbuf(stdout, NULL, _IOLBF, 0);
    sigaction(SIGALRM, &sa, NULL);
    current = "setup";
    if (open_env(&e, name)) {
        printf("FAIL setup: %s\n", why);
        printf("verbs-check: 0 passed, 1 failed\n");
        return 1;
    }
    for (i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
        const char *note = "";

        current = checks[i].name;
        why[0] = 0;
        alarm(CHECK_ALARM_S);
        if (checks[i].fn) {
            r = checks[i].fn(&e);
        } else {
            r = checks[i].fn_note(&e, &note);
        }
        alarm(0);
        if (r) {
            printf("FAIL %s: %s\n", checks[i].name,
                   why[0] ? why : "(no reason recorded)");
            failed++;
        } else {
            printf("ok %s%s\n", checks[i].name, note);
            passed++;
        }
        fflush(stdout);
    }
    if (e.pd) {
        ibv_dealloc_pd(e.pd);
    }
    if (e.ctx) {
        ibv_close_device(e.ctx);
    }
    ibv_free_device_list(e.list);
    printf("verbs-check: %d passed, %d failed\n", passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* nosys: the data path without system calls */

/* exit_group(@code) at once: no atexit handlers, no stdio flush. */
static __attribute__((noreturn)) void exit_now(int code)
{
    syscall(SYS_exit_group, code);
    for (;;) {
        /* exit_group does not return */
    }
}

/*
 * From here on any system call but exit and exit_group kills the process
 * (qhca-vmtest's forbid_syscalls).
 */
static int forbid_syscalls(void)
{
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_NATIVE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {
        .len = sizeof(filter) / sizeof(filter[0]),
        .filter = filter,
    };

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
        return -1;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) {
        return -1;
    }
    return 0;
}

/* Spins on @cq for one completion, which must be @id's and successful. */
static void nosys_wait(struct ibv_cq *cq, struct ibv_wc *wc, uint64_t id)
{
    uint64_t spins = 0;
    int n;

    for (;;) {
        n = ibv_poll_cq(cq, 1, wc);
        if (n == 1) {
            if (wc->status != IBV_WC_SUCCESS || wc->wr_id != id) {
                exit_now(NOSYS_WC_STATUS);
            }
            return;
        }
        if (n < 0) {
            exit_now(NOSYS_WC_STATUS);
        }
        if (++spins > 2000000000ull) {
            exit_now(NOSYS_STALL);
        }
    }
}

static int run_nosys(const char *name, uint64_t ops, int seccomp)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    struct ibv_wc wc;
    struct region r;
    struct pair p;
    struct env e;
    volatile uint64_t *target; /* device-written */
    uint64_t i, v;
    char line[64];
    int len;

    if (open_env(&e, name) || connected_pair(&e, &p, NULL) ||
        region_new(e.pd, &r, 4096,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                       IBV_ACCESS_REMOTE_READ)) {
        fprintf(stderr, "qhca-verbs-check nosys: setup: %s\n", why);
        return NOSYS_SETUP;
    }
    if (p.cap.max_inline_data < sizeof(v)) {
        fprintf(stderr, "qhca-verbs-check nosys: max_inline_data %u\n",
                p.cap.max_inline_data);
        return NOSYS_SETUP;
    }
    /* Everything the loop uses exists now: requests, buffers, maps. */
    target = (volatile uint64_t *)(r.buf + 64); /* device-written */
    v = 0;
    sge = (struct ibv_sge){ addr_of(&v), sizeof(v), r.mr->lkey };
    wr = (struct ibv_send_wr){
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
        .wr.rdma = { addr_of(r.buf + 64), r.mr->rkey },
    };
    /* Resolve syscall() and the loop marker's write now. */
    syscall(SYS_getpid);
    len = snprintf(line, sizeof(line), "loop %" PRIu64 " ops\n", ops);
    if (write(1, line, (size_t)len) != len) {
        return NOSYS_SETUP;
    }
    if (seccomp && forbid_syscalls()) {
        return NOSYS_SECCOMP;
    }
    for (i = 0; i < ops; i++) {
        v = i;
        wr.wr_id = i;
        bad = NULL;
        if (ibv_post_send(p.a, &wr, &bad)) {
            exit_now(NOSYS_POST);
        }
        nosys_wait(p.cq_a, &wc, i);
        if (*target != i) {
            exit_now(NOSYS_DATA);
        }
    }
    exit_now(NOSYS_OK);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: qhca-verbs-check checks DEV\n"
            "       qhca-verbs-check nosys DEV OPS [--no-seccomp]\n"
            "       qhca-verbs-check unplug DEV\n"
            "       qhca-verbs-check wire DEV GID_INDEX PORT [HOST] [-r ROUNDS] "
            "[-u TIMEOUT]\n");
}

int main(int argc, char **argv)
{
    char *end;
    unsigned long long ops;
    int ret;

    if (argc == 3 && !strcmp(argv[1], "checks")) {
        return run_checks(argv[2]);
    }
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "nosys")) {
        if (argc == 5 && strcmp(argv[4], "--no-seccomp")) {
            usage();
            return 2;
        }
        errno = 0;
        ops = strtoull(argv[3], &end, 10);
        if (errno || *end || end == argv[3]) {
            usage();
            return 2;
        }
        return run_nosys(argv[2], ops, argc == 4);
    }
    if (argc == 3 && !strcmp(argv[1], "unplug")) {
        return run_unplug(argv[2]);
    }
    if (argc >= 5 && !strcmp(argv[1], "wire")) {
        ret = run_wire(argc - 2, argv + 2);
        if (ret == 2) {
            usage();
        }
        return ret;
    }
    usage();
    return 2;
}
