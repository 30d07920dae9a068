// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-mpi-check: a two-rank MPI program whose every transfer is checked,
 * for Open MPI with its UCX PML forced onto one device (the VM suite and
 * scripts/guest-pair.sh run it):
 *
 *   mpirun -np 2 --mca pml ucx -x UCX_NET_DEVICES=DEV:1 -x UCX_TLS=rc_v,self \
 *       qhca-mpi-check
 *
 * Rank 0 sends rank 1 messages of 1, 1000 and 1 Mi 32-bit words (UCX's
 * eager, bcopy and rendezvous protocols: the last goes by RDMA from the
 * sender's registered buffer), rank 1 sends them back changed, both sides
 * check every word; then a non-blocking exchange both ways at once, an
 * allreduce and a barrier. Each rank prints "mpi-check: rank R of N: ok
 * (HOST)" (HOST: MPI's processor name, where the rank ran) or the first bad
 * word, and exits nonzero on any error.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS (1u << 20)

static uint32_t word(uint32_t i, uint32_t salt)
{
    return i * 2654435761u ^ salt;
}

static void fill(uint32_t *buf, uint32_t n, uint32_t salt)
{
    for (uint32_t i = 0; i < n; i++) {
        buf[i] = word(i, salt);
    }
}

/* 0 if @buf holds @n words of @salt; else prints the first bad one, 1. */
static int check(int rank, const char *what, const uint32_t *buf, uint32_t n,
                 uint32_t salt)
{
    for (uint32_t i = 0; i < n; i++) {
        if (buf[i] != word(i, salt)) {
            printf("mpi-check: rank %d: %s: word %u of %u is 0x%x, not 0x%x\n",
                   rank, what, i, n, buf[i], word(i, salt));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const uint32_t sizes[] = { 1, 1000, MAX_WORDS };
    int rank, size, bad = 0;
    long mine, sum = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) {
            printf("mpi-check: needs 2 ranks, has %d\n", size);
        }
        MPI_Finalize();
        return 2;
    }
    uint32_t *out = malloc(MAX_WORDS * sizeof(*out));
    uint32_t *in = malloc(MAX_WORDS * sizeof(*in));
    if (!out || !in) {
        printf("mpi-check: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int peer = 1 - rank;

    /* Blocking, there and back: rank 1 answers with the salt changed. */
    for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint32_t n = sizes[s], salt = 0x51ab0000u + s;
        char what[64];

        memset(in, 0, n * sizeof(*in));
        if (rank == 0) {
            fill(out, n, salt);
            MPI_Send(out, n, MPI_UINT32_T, peer, s, MPI_COMM_WORLD);
            MPI_Recv(in, n, MPI_UINT32_T, peer, s, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            snprintf(what, sizeof(what), "reply of %u words", n);
            bad |= check(rank, what, in, n, ~salt);
        } else {
            MPI_Recv(in, n, MPI_UINT32_T, peer, s, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            snprintf(what, sizeof(what), "message of %u words", n);
            bad |= check(rank, what, in, n, salt);
            fill(out, n, ~salt);
            MPI_Send(out, n, MPI_UINT32_T, peer, s, MPI_COMM_WORLD);
        }
    }

    /* Both ways at once, non-blocking. */
    MPI_Request req[2];
    memset(in, 0, MAX_WORDS * sizeof(*in));
    fill(out, MAX_WORDS, 0x7e570000u + rank);
    MPI_Irecv(in, MAX_WORDS, MPI_UINT32_T, peer, 99, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(out, MAX_WORDS, MPI_UINT32_T, peer, 99, MPI_COMM_WORLD, &req[1]);
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    bad |= check(rank, "exchange", in, MAX_WORDS, 0x7e570000u + peer);

    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != 3) {
        printf("mpi-check: rank %d: allreduce gave %ld, not 3\n", rank, sum);
        bad = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!bad) {
        char host[MPI_MAX_PROCESSOR_NAME];
        int len;

        MPI_Get_processor_name(host, &len);
        printf("mpi-check: rank %d of %d: ok (%s)\n", rank, size, host);
    }
    free(in);
    free(out);
    MPI_Finalize();
    return bad;
}
