/* The CPU thread count of a stage (its --threads option), applied to both OpenMP and OpenBLAS. */
#ifndef PIPELINE_THREADS_H
#define PIPELINE_THREADS_H

#define THREADS_MAX 4096

/* threads > 0: that many; 0: every core (omp_get_num_procs). Dies with "--threads: must be >= 1 (got N)" when
 * threads < 0 and "--threads: must be at most 4096 (got N)" above THREADS_MAX. Returns the count set. */
int threads_set(long threads);

#endif
