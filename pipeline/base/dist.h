/* Data-parallel process group over MPI: `mpirun -np W bin/train ...` runs W ranks of one training run.
 *
 * Without a launcher (no OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK in the environment) nothing here calls MPI:
 * the program is one process of world size 1 and every collective is the identity, so the single-process path
 * needs neither mpirun nor a working MPI installation at run time.
 *
 * Failure handling: MPI_ERRORS_RETURN on the world communicator (an MPI error is one line naming the call, not
 * OpenMPI's abort banner), and a watchdog thread that watches every collective: if a peer process on this host
 * disappears (kill -9, out-of-memory killer) or a collective lasts longer than the timeout (a peer on another host
 * died, or hangs, or the network to it is down; a stopped peer on this host is named by pid), the rank prints one line
 * naming the rank(s), host and what it was doing, and exits with status 1 without waiting for MPI. A collective is
 * never waited on forever; work of rank 0 alone (dist_root_phase) is waited on as long as rank 0 shows signs of life. */
#ifndef PIPELINE_DIST_H
#define PIPELINE_DIST_H

#include <stdbool.h>
#include <stddef.h>

/* Starts MPI if a launcher started this process (else does nothing). program: the log prefix, which becomes
 * "program[rank R]" in a job of more than one rank, whose ranks other than 0 then log errors only (their info and
 * warnings would repeat rank 0's). timeout_s: the watchdog's limit on one collective (<= 0: the default, 600 s).
 * Call once, early in main. */
void dist_init(const char *program, int *argc, char ***argv, double timeout_s);
void dist_finalize(void); /* runs the dist_at_finalize functions, then MPI_Finalize when dist_init started MPI */
/* Registers fn to run at dist_finalize before MPI ends (last registered first; e.g. destroying an NCCL
 * communicator, whose emulation frees an MPI communicator). At most 8. */
void dist_at_finalize(void (*fn)(void));

bool dist_active(void); /* launched as one rank of an MPI job (even of size 1) */
int dist_rank(void);    /* 0 when not active */
int dist_world(void);   /* 1 when not active */
int dist_local_rank(void); /* index among the ranks on this host (0 when not active): which GPU a rank takes */
static inline bool dist_is_root(void) { return dist_rank() == 0; }
/* OpenMP threads for this rank when --threads is not given: the host's cores shared among the ranks on this host,
 * at most the cores this rank is bound to (0 = not distributed: threads_set's default, every core). */
long dist_default_threads(void);

/* Collectives. `what` names the operation for the failure line ("gradient all-reduce at step 12"). Any failure
 * ends the process with one error line (there is no way to continue a data-parallel step without a peer). */
void dist_allreduce_sum_f64(double *x, size_t n, const char *what);
void dist_allreduce_sum_f32(float *x, size_t n, const char *what);
void dist_allreduce_max_int(int *x, size_t n, const char *what);
void dist_bcast(void *buf, size_t bytes, int root, const char *what);
void dist_barrier(const char *what);
/* Gathers each rank's NUL-terminated string (< 128 chars) at every rank: out[r*128 ...]. */
void dist_allgather_str(const char *mine, char *out /* [world*128] */, const char *what);

/* Work that rank 0 does alone while the others wait (evaluation, writing or loading a checkpoint), called by every
 * rank at the same point: rank 0 runs fn(ctx), the others wait until it is done. However long fn takes, the wait is
 * not a timeout: a thread of rank 0 sends each other rank a sign of life every --dist-timeout / 4 seconds (at most
 * every 10 s) while fn runs, and a waiting rank gives up only when none has come for --dist-timeout seconds (rank 0
 * stopped or hung as a whole, or its host unreachable). fn must not call MPI (another thread of rank 0 does). Not
 * distributed: fn(ctx). */
void dist_root_phase(const char *what, void (*fn)(void *ctx), void *ctx);

/* Rank 0, leaving fn of a dist_root_phase without returning (fn refused the run and dies): stops the signs of life
 * and ends the phase for the others, who then return from dist_root_phase as if fn had finished, so that they can
 * take part in whatever collective rank 0 does next (the setup verdict). Nothing outside a phase or off rank 0. */
void dist_root_phase_abandon(void);

/* For code outside this file that waits on a peer by other means (NCCL): the watchdog watches the region between
 * dist_watch_begin and dist_watch_end like an MPI collective. */
void dist_watch_begin(const char *what);
void dist_watch_end(void);

#endif
