/*
 * allreduce.c - the bare MPI_Allreduce that scripts/bench/dist.sh compares
 * dist_sync's communication against: BYTES of float32 summed in place over
 * every rank, REPS times after 5 warm-up calls; rank 0 prints the mean
 * milliseconds per call. Built by dist.sh with mpicc. With a third
 * argument `nonblocking`, MPI_Iallreduce + MPI_Wait instead (what lib/comm
 * issues, Open MPI's libnbc algorithms rather than the tuned blocking ones).
 *   mpirun -np 2 allreduce BYTES [REPS [nonblocking]]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void sum(float *buf, long count, int nonblocking)
{
    if (!nonblocking) {
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return;
    }
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: allreduce BYTES [REPS]\n");
        MPI_Finalize();
        return 2;
    }
    long count = atol(argv[1]) / 4, reps = argc > 2 ? atol(argv[2]) : 50;
    int nonblocking = argc > 3 && argv[3][0] == 'n';
    if (count < 1 || reps < 1) {
        if (rank == 0) fprintf(stderr, "allreduce: BYTES >= 4 and REPS >= 1\n");
        MPI_Finalize();
        return 2;
    }
    float *buf = malloc(sizeof(float) * (size_t)count);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long i = 0; i < count; i++) buf[i] = (float)(i % 7);
    for (int i = 0; i < 5; i++) sum(buf, count, nonblocking);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < reps; i++) sum(buf, count, nonblocking);
    double ms = (MPI_Wtime() - t0) * 1e3 / (double)reps;
    if (rank == 0)
        printf("%s_ms %.4f bytes %ld reps %ld\n", nonblocking ? "iallreduce" : "allreduce", ms, count * 4, reps);
    free(buf);
    MPI_Finalize();
    return 0;
}
