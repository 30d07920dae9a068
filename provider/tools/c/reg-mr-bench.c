// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * reg-mr-bench: how long ibv_reg_mr and ibv_dereg_mr of a large region take
 * on a verbs device, the same program on qhca (through its libibverbs
 * provider) and on rxe (scripts/guest-bench.sh runs it on both in one boot).
 *
 *   reg-mr-bench [-d DEV] [-s BYTES] [-r ROUNDS]
 *
 * BYTES (default 1 GiB; suffixes k, m, g) of anonymous memory are mapped,
 * then registered with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE and
 * deregistered ROUNDS times (default 3): first "fresh", the memory never
 * touched, so the registration also faults every page in (as a program that
 * registers a buffer it just allocated); then "touched", every page written
 * beforehand, so only the registration is timed. Before the rounds, BYTES
 * are mapped, written and unmapped once, untimed: in a guest, the first use
 * of its memory also makes the host back it, which would tax whichever
 * device is measured first. Prints one line per round:
 *
 *   regmr fresh bytes 1073741824 reg_ms 1234.5 dereg_ms 12.3
 *
 * Build: gcc -O2 -Wall -Wextra -o reg-mr-bench reg-mr-bench.c -libverbs
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static const char *prog = "reg-mr-bench";

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	switch (*end) {
	case 'g': case 'G':
		v <<= 10;
		/* fall through */
	case 'm': case 'M':
		v <<= 10;
		/* fall through */
	case 'k': case 'K':
		v <<= 10;
		end++;
		break;
	}
	if (*end || !v)
		return -1;
	*out = v;
	return 0;
}

/* @len bytes of fresh anonymous memory, each page written if @touch; NULL on failure. */
static char *map_anon(size_t len, int touch)
{
	const long page = sysconf(_SC_PAGESIZE);
	char *buf;
	size_t i;

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		fprintf(stderr, "%s: mmap %zu bytes: %s\n", prog, len,
			strerror(errno));
		return NULL;
	}
	if (touch)
		for (i = 0; i < len; i += page)
			buf[i] = 1;
	return buf;
}

/* Maps, writes and unmaps @len bytes, untimed. */
static int warm_up(size_t len)
{
	char *buf = map_anon(len, 1);

	if (!buf)
		return -1;
	munmap(buf, len);
	return 0;
}

/* One round: map, (touch), register, deregister, unmap. */
static int round_once(struct ibv_pd *pd, size_t len, int touch)
{
	double t0, t1, t2;
	struct ibv_mr *mr;
	char *buf = map_anon(len, touch);

	if (!buf)
		return -1;
	t0 = now_ms();
	mr = ibv_reg_mr(pd, buf, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	t1 = now_ms();
	if (!mr) {
		fprintf(stderr, "%s: ibv_reg_mr %zu bytes: %s\n", prog, len,
			strerror(errno));
		munmap(buf, len);
		return -1;
	}
	if (ibv_dereg_mr(mr)) {
		fprintf(stderr, "%s: ibv_dereg_mr failed\n", prog);
		return -1;
	}
	t2 = now_ms();
	munmap(buf, len);
	printf("regmr %s bytes %zu reg_ms %.1f dereg_ms %.1f\n",
	       touch ? "touched" : "fresh", len, t1 - t0, t2 - t1);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd;
	size_t len = 1ull << 30;
	int rounds = 3, n, i, k, ret = 1;

	for (k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "-d") && k + 1 < argc) {
			dev = argv[++k];
		} else if (!strcmp(argv[k], "-s") && k + 1 < argc) {
			if (parse_size(argv[++k], &len)) {
				fprintf(stderr, "%s: bad size %s\n", prog, argv[k]);
				return 2;
			}
		} else if (!strcmp(argv[k], "-r") && k + 1 < argc) {
			rounds = atoi(argv[++k]);
			if (rounds < 1) {
				fprintf(stderr, "%s: bad rounds\n", prog);
				return 2;
			}
		} else {
			fprintf(stderr,
				"Usage: %s [-d DEV] [-s BYTES] [-r ROUNDS]\n",
				prog);
			return 2;
		}
	}
	list = ibv_get_device_list(&n);
	if (!list || !n) {
		fprintf(stderr, "%s: no verbs device\n", prog);
		return 1;
	}
	for (i = 0; i < n; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev)) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	if (!ctx) {
		fprintf(stderr, "%s: cannot open %s\n", prog, dev ? dev : "a device");
		goto out_list;
	}
	pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "%s: ibv_alloc_pd failed\n", prog);
		goto out_ctx;
	}
	ret = warm_up(len);
	for (k = 0; k < rounds && !ret; k++)
		ret = round_once(pd, len, 0);
	for (k = 0; k < rounds && !ret; k++)
		ret = round_once(pd, len, 1);
	ret = ret ? 1 : 0;
	ibv_dealloc_pd(pd);
out_ctx:
	ibv_close_device(ctx);
out_list:
	ibv_free_device_list(list);
	return ret;
}
