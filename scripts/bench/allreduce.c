/*
 * allreduce.c - the bare MPI_Allreduce that scripts/bench/dist.sh compares
 * dist_sync's communication against: BYTES of float32 summed in place over
 * every rank, REPS times after 5 warm-up calls; rank 0 prints the mean
 * milliseconds per call. Built by dist.sh with mpicc.
 *   mpirun -np 2 allreduce BYTES [REPS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

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
    if (count < 1 || reps < 1) {
        if (rank == 0) fprintf(stderr, "allreduce: BYTES >= 4 and REPS >= 1\n");
        MPI_Finalize();
        return 2;
    }
    float *buf = malloc(sizeof(float) * (size_t)count);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long i = 0; i < count; i++) buf[i] = (float)(i % 7);
    for (int i = 0; i < 5; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < reps; i++) MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double ms = (MPI_Wtime() - t0) * 1e3 / (double)reps;
    if (rank == 0) printf("allreduce_ms %.4f bytes %ld reps %ld\n", ms, count * 4, reps);
    free(buf);
    MPI_Finalize();
    return 0;
}
