/*
 * comm_allreduce.c - lib/comm's allreduce alone (its MPI thread, no
 * training beside it), the same bytes and repetitions as allreduce.c's bare
 * MPI_Allreduce: tells whether dist_sync's communication cost in training
 * (dist.sh, part a) comes from lib/comm itself or from sharing the cores
 * with the backward pass. Rank 0 prints the mean milliseconds per call.
 *   mpirun -np 2 comm_allreduce BYTES [REPS]
 * Built by hand against the library (see docs/benchmarks.md).
 */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) / 4 : 0, reps = argc > 2 ? atol(argv[2]) : 50;
    if (count < 1 || reps < 1) {
        fprintf(stderr, "usage: comm_allreduce BYTES [REPS]\n");
        return 2;
    }
    mx_comm *comm;
    setenv(MX_COMM_IALLREDUCE_ENV, MX_COMM_IALLREDUCE_RABENSEIFNER, 0); /* as mxtrain does */
    if (mx_comm_create(NULL, &comm) != MX_OK) {
        fprintf(stderr, "comm_allreduce: %s\n", mx_last_error());
        return 1;
    }
    float *buf = malloc(sizeof(float) * (size_t)count);
    if (!buf) mx_comm_abort(comm, 1);
    for (long i = 0; i < count; i++) buf[i] = (float)(i % 7);
    mx_status s = MX_OK;
    for (int i = 0; i < 5 && s == MX_OK; i++)
        s = mx_comm_allreduce(comm, MX_COMM_WORLD, MX_COMM_FLOAT32, buf, (size_t)count, "warm-up");
    if (s == MX_OK) s = mx_comm_barrier(comm, MX_COMM_WORLD, "start");
    double t0 = now();
    for (long i = 0; i < reps && s == MX_OK; i++)
        s = mx_comm_allreduce(comm, MX_COMM_WORLD, MX_COMM_FLOAT32, buf, (size_t)count, "timed");
    double ms = (now() - t0) * 1e3 / (double)reps;
    if (s != MX_OK) {
        fprintf(stderr, "comm_allreduce: %s\n", mx_last_error());
        mx_comm_abort(comm, 1);
    }
    if (mx_comm_rank(comm) == 0) printf("comm_allreduce_ms %.4f bytes %ld reps %ld\n", ms, count * 4, reps);
    free(buf);
    return mx_comm_free(comm) == MX_OK ? 0 : 1;
}
