// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * rxe-mw-bench: qhca-mw-bench's loop on libibverbs, for the verbs devices
 * qhca is compared with (Soft-RoCE, rxe0 on lo, in scripts/guest-bench.sh).
 *
 *   rxe-mw-bench [-d DEV] [-x GIDIDX] [-n ITER] [--type 1|2]
 *
 * One PD, two RC QPs of one context connected to each other over the port's
 * GID GIDIDX (-x 1 for rxe on lo: ::ffff:127.0.0.1, as perftest's -x 1), a
 * target region with LOCAL_WRITE | MW_BIND and no remote right of its own.
 * One operation, --type 2 (default): IBV_WR_BIND_MW of a type 2 window through
 * QP b over one 8-byte word of the region, with the window's next key
 * (ibv_inc_rkey); an 8-byte inline RDMA WRITE through the window from QP a;
 * IBV_WR_LOCAL_INV of the window through b. --type 1: ibv_bind_mw() of a
 * type 1 window through b to the next word (which moves it to its next key),
 * then the WRITE; no invalidation. Every request is signaled and its
 * completion polled before the next is posted; the written word is checked.
 * ITER / 10 operations warm up first. Prints one line:
 *
 *   mw type2 ops 20000 ops_per_sec 12345 usec_per_op 81.00
 *
 * Build: gcc -O2 -Wall -Wextra -o rxe-mw-bench rxe-mw-bench.c -libverbs
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define WORDS		512	/* words of the target the operations go round */
#define TIMEOUT_NS	(10ull * 1000000000ull)	/* per completion */

struct bench {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	uint64_t *buf;
	enum ibv_mw_type type;
};

static const char *prog = "rxe-mw-bench";

static void usage(void)
{
	fprintf(stderr,
		"Usage: %s [-d DEV] [-x GIDIDX] [-n ITER] [--type 1|2]\n"
		"  -d DEV      verbs device (default: the first)\n"
		"  -x GIDIDX   GID index of port 1 (default 0; 1 for rxe on lo)\n"
		"  -n ITER     timed operations (default 20000), after ITER / 10 of warm-up\n"
		"  --type 2    type 2 window: BIND_MW + RDMA WRITE + LOCAL_INV (default)\n"
		"  --type 1    type 1 window: ibv_bind_mw (next key) + RDMA WRITE\n",
		prog);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* Spins until the completion of @wr_id is on @cq; anything else fails. */
static int wait_wc(struct ibv_cq *cq, uint64_t wr_id, const char *what)
{
	struct ibv_wc wc;
	uint64_t deadline = 0;
	unsigned int spins = 0;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if (++spins % 1024)
			continue;
		/* The clock is read only after 1024 empty polls. */
		if (!deadline)
			deadline = now_ns() + TIMEOUT_NS;
		else if (now_ns() > deadline) {
			fprintf(stderr, "%s: %s %llu: no completion in 10 s\n",
				prog, what, (unsigned long long)wr_id);
			return -1;
		}
	}
	if (n < 0) {
		fprintf(stderr, "%s: %s: ibv_poll_cq failed\n", prog, what);
		return -1;
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id) {
		fprintf(stderr,
			"%s: %s %llu: completion of wr_id %llu: %s (vendor_err %#x)\n",
			prog, what, (unsigned long long)wr_id,
			(unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status), wc.vendor_err);
		return -1;
	}
	return 0;
}

static int post(struct ibv_qp *qp, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(qp, wr, &bad);

	if (ret) {
		fprintf(stderr, "%s: post %s: %s\n", prog, what, strerror(ret));
		return -1;
	}
	return 0;
}

/*
 * Operation @i: bind the window through b to word i % WORDS, write i there
 * through it from a, and (type 2) invalidate it through b.
 */
static int op(struct bench *bn, uint64_t i)
{
	uint64_t off = i % WORDS;
	uint64_t addr = (uintptr_t)&bn->buf[off];
	struct ibv_mw_bind_info info = {
		.mr = bn->mr,
		.addr = addr,
		.length = 8,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_sge sge = { .addr = (uintptr_t)&i, .length = 8 };
	struct ibv_send_wr wr;
	int ret;

	if (bn->type == IBV_MW_TYPE_1) {
		struct ibv_mw_bind bind = {
			.wr_id = i,
			.send_flags = IBV_SEND_SIGNALED,
			.bind_info = info,
		};

		/* Posts a BIND_MW with the next key; mw->rkey becomes it. */
		ret = ibv_bind_mw(bn->b, bn->mw, &bind);
		if (ret) {
			fprintf(stderr, "%s: ibv_bind_mw: %s\n", prog,
				strerror(ret));
			return -1;
		}
	} else {
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = i;
		wr.opcode = IBV_WR_BIND_MW;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.bind_mw.mw = bn->mw;
		wr.bind_mw.rkey = ibv_inc_rkey(bn->mw->rkey);
		wr.bind_mw.bind_info = info;
		if (post(bn->b, &wr, "bind_mw"))
			return -1;
		/* The key is the application's to track for a type 2 window. */
		bn->mw->rkey = wr.bind_mw.rkey;
	}
	if (wait_wc(bn->cq_b, i, "bind"))
		return -1;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = i;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = bn->mw->rkey;
	if (post(bn->a, &wr, "rdma_write") || wait_wc(bn->cq_a, i, "write"))
		return -1;

	if (bn->type == IBV_MW_TYPE_2) {
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = i;
		wr.opcode = IBV_WR_LOCAL_INV;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.invalidate_rkey = bn->mw->rkey;
		if (post(bn->b, &wr, "local_inv") ||
		    wait_wc(bn->cq_b, i, "local_inv"))
			return -1;
	}

	if (((volatile uint64_t *)bn->buf)[off] != i) {
		fprintf(stderr, "%s: operation %llu: the word was not written\n",
			prog, (unsigned long long)i);
		return -1;
	}
	return 0;
}

/* RESET -> INIT -> RTR -> RTS, to @dqpn over the port's GID @gidx. */
static int connect_qp(struct ibv_qp *qp, uint32_t dqpn, uint32_t psn,
		      uint32_t dpsn, const union ibv_gid *gid, int gidx,
		      enum ibv_mtu mtu)
{
	struct ibv_qp_attr attr;
	int ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			    IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (ret)
		goto err;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = mtu;
	attr.dest_qp_num = dqpn;
	attr.rq_psn = dpsn;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.grh.dgid = *gid;
	attr.ah_attr.grh.sgid_index = gidx;
	attr.ah_attr.grh.hop_limit = 1;
	attr.ah_attr.port_num = 1;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV |
			    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	if (ret)
		goto err;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = psn;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.max_rd_atomic = 1;
	ret = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN |
			    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret)
		goto err;
	return 0;
err:
	fprintf(stderr, "%s: ibv_modify_qp (QP %u to %u): %s\n", prog,
		qp->qp_num, dqpn, strerror(ret));
	return -1;
}

static struct ibv_qp *create_qp(struct bench *bn, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {
			.max_send_wr = 16,
			.max_recv_wr = 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = 64,
		},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	struct ibv_qp *qp = ibv_create_qp(bn->pd, &init);

	if (!qp)
		fprintf(stderr, "%s: ibv_create_qp: %s\n", prog, strerror(errno));
	return qp;
}

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list, *dev = NULL;
	struct ibv_context *ctx = NULL;
	int i, n;

	list = ibv_get_device_list(&n);
	if (!list) {
		fprintf(stderr, "%s: ibv_get_device_list: %s\n", prog,
			strerror(errno));
		return NULL;
	}
	for (i = 0; i < n; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name)) {
			dev = list[i];
			break;
		}
	if (!dev)
		fprintf(stderr, "%s: no verbs device %s\n", prog,
			name ? name : "at all");
	else if (!(ctx = ibv_open_device(dev)))
		fprintf(stderr, "%s: ibv_open_device %s: %s\n", prog,
			ibv_get_device_name(dev), strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

static int setup(struct bench *bn, const char *name, int gidx)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	int ret;

	bn->ctx = open_dev(name);
	if (!bn->ctx)
		return -1;
	ret = ibv_query_port(bn->ctx, 1, &port);
	if (ret) {
		fprintf(stderr, "%s: ibv_query_port: %s\n", prog, strerror(ret));
		return -1;
	}
	ret = ibv_query_gid(bn->ctx, 1, gidx, &gid);
	if (ret) {
		fprintf(stderr, "%s: ibv_query_gid (port 1, index %d) failed\n",
			prog, gidx);
		return -1;
	}
	bn->pd = ibv_alloc_pd(bn->ctx);
	if (!bn->pd) {
		fprintf(stderr, "%s: ibv_alloc_pd: %s\n", prog, strerror(errno));
		return -1;
	}
	bn->cq_a = ibv_create_cq(bn->ctx, 32, NULL, NULL, 0);
	bn->cq_b = ibv_create_cq(bn->ctx, 32, NULL, NULL, 0);
	if (!bn->cq_a || !bn->cq_b) {
		fprintf(stderr, "%s: ibv_create_cq: %s\n", prog, strerror(errno));
		return -1;
	}
	bn->a = create_qp(bn, bn->cq_a);
	bn->b = bn->a ? create_qp(bn, bn->cq_b) : NULL;
	if (!bn->b)
		return -1;
	if (connect_qp(bn->a, bn->b->qp_num, 1, 2, &gid, gidx,
		       port.active_mtu) ||
	    connect_qp(bn->b, bn->a->qp_num, 2, 1, &gid, gidx,
		       port.active_mtu))
		return -1;

	bn->buf = aligned_alloc(4096, WORDS * 8);
	if (!bn->buf) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return -1;
	}
	memset(bn->buf, 0xff, WORDS * 8);
	/* No remote right of its own: the target is reached through the window. */
	bn->mr = ibv_reg_mr(bn->pd, bn->buf, WORDS * 8,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	if (!bn->mr) {
		fprintf(stderr, "%s: ibv_reg_mr (LOCAL_WRITE | MW_BIND): %s\n",
			prog, strerror(errno));
		return -1;
	}
	bn->mw = ibv_alloc_mw(bn->pd, bn->type);
	if (!bn->mw) {
		fprintf(stderr, "%s: ibv_alloc_mw (type %d): %s\n", prog,
			bn->type == IBV_MW_TYPE_1 ? 1 : 2, strerror(errno));
		return -1;
	}
	return 0;
}

static void teardown(struct bench *bn)
{
	if (bn->mw)
		ibv_dealloc_mw(bn->mw);
	if (bn->mr)
		ibv_dereg_mr(bn->mr);
	free(bn->buf);
	if (bn->b)
		ibv_destroy_qp(bn->b);
	if (bn->a)
		ibv_destroy_qp(bn->a);
	if (bn->cq_b)
		ibv_destroy_cq(bn->cq_b);
	if (bn->cq_a)
		ibv_destroy_cq(bn->cq_a);
	if (bn->pd)
		ibv_dealloc_pd(bn->pd);
	if (bn->ctx)
		ibv_close_device(bn->ctx);
}

int main(int argc, char **argv)
{
	struct bench bn = { .type = IBV_MW_TYPE_2 };
	const char *dev = NULL;
	uint64_t iters = 20000, warm, i, t;
	int gidx = 0, ret = 1, k;
	double secs;
	char *end;

	for (k = 1; k < argc; k++) {
		const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage();
			return 0;
		}
		if (!v) {
			fprintf(stderr, "%s: %s needs a value\n", prog, a);
			usage();
			return 2;
		}
		k++;
		if (!strcmp(a, "-d")) {
			dev = v;
		} else if (!strcmp(a, "-x")) {
			gidx = strtol(v, &end, 10);
			if (*end || gidx < 0)
				goto bad;
		} else if (!strcmp(a, "-n")) {
			iters = strtoull(v, &end, 10);
			if (*end || !iters)
				goto bad;
		} else if (!strcmp(a, "--type")) {
			if (!strcmp(v, "1"))
				bn.type = IBV_MW_TYPE_1;
			else if (!strcmp(v, "2"))
				bn.type = IBV_MW_TYPE_2;
			else
				goto bad;
		} else {
			goto bad;
		}
	}

	if (setup(&bn, dev, gidx))
		goto out;
	warm = iters / 10 ? iters / 10 : 1;
	for (i = 0; i < warm; i++)
		if (op(&bn, i))
			goto out;
	t = now_ns();
	for (i = warm; i < warm + iters; i++)
		if (op(&bn, i))
			goto out;
	secs = (now_ns() - t) / 1e9;
	printf("mw type%d ops %llu ops_per_sec %.0f usec_per_op %.2f\n",
	       bn.type == IBV_MW_TYPE_1 ? 1 : 2, (unsigned long long)iters,
	       iters / secs, secs * 1e6 / iters);
	ret = 0;
out:
	teardown(&bn);
	return ret;
bad:
	fprintf(stderr, "%s: bad argument %s %s\n", prog, argv[k - 1], argv[k]);
	usage();
	return 2;
}
