/* All-reduce time against message size, for tests/e2e/bench_allreduce_hosts.sh (the "Scaling estimate" of
 * pipeline/base/dist.md): MPI_Allreduce(MPI_SUM) of n floats, the operation data-parallel training runs on the
 * gradients once per step. Prints "bytes seconds" per size: the median of REPS timed calls after one untimed call,
 * each timed call between two barriers, its time the slowest rank's. Usage: mpirun -np W allreduce_bench MAX_BYTES REPS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long max_bytes = argc > 1 ? atol(argv[1]) : 1L << 24;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (max_bytes < 4 || reps < 1 || reps > 1000) {
        if (rank == 0) fprintf(stderr, "usage: allreduce_bench MAX_BYTES(>=4) REPS(1..1000)\n");
        MPI_Finalize();
        return 2;
    }
    float *x = calloc((size_t)max_bytes / 4, sizeof *x);
    double *t = calloc((size_t)reps, sizeof *t);
    if (!x || !t) {
        fprintf(stderr, "allreduce_bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
        int n = (int)(bytes / 4);
        if (MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
        for (int r = 0; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 1);
            double mine = MPI_Wtime() - t0;
            MPI_Allreduce(&mine, &t[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }
        qsort(t, (size_t)reps, sizeof *t, by_value);
        if (rank == 0) printf("%ld %.6f\n", bytes, t[reps / 2]);
    }
    free(x);
    free(t);
    MPI_Finalize();
    return 0;
}
