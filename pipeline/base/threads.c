/* --threads for the stages (see threads.h). */
#include "pipeline/base/threads.h"

#include <omp.h>

#include <cblas.h>

#include "pipeline/base/log.h"

int threads_set(long threads) {
    if (threads < 0) die("--threads: must be >= 1 (got %ld)", threads);
    /* Far beyond any machine: libgomp fails to create that many threads (EAGAIN) or crashes (SIGSEGV at 100000). */
    if (threads > THREADS_MAX) die("--threads: must be at most %d (got %ld)", THREADS_MAX, threads);
    int n = threads > 0 ? (int)threads : omp_get_num_procs();
    /* OpenBLAS (the pthread build) has its own pool, sized to every core unless told: set both. */
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}
