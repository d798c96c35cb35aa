/* Data-parallel step helpers (see dist_train.h). */
#include "model/training/dist_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_nccl.h"
#endif
#include "pipeline/base/dist.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

bool dist_owns_microbatch(int k) { return k % dist_world() == dist_rank(); }

uint64_t dist_microbatch_dropout_seed(uint64_t run_seed, long step, int n_microbatch, int k) {
    /* rng_seed runs the value through splitmix64, so adjacent indices give unrelated streams. */
    uint64_t index = (uint64_t)step * (uint64_t)n_microbatch + (uint64_t)k;
    return run_seed ^ (index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
}

/* A setup verdict: the maxima over the ranks of v[0] "rank 0 failed" and v[1] "this rank failed", so every rank
 * learns both, and a failing rank leaves only once the others know. */
static void setup_verdict(bool failed, int v[2]) {
    v[0] = dist_is_root() && failed;
    v[1] = failed;
    dist_allreduce_max_int(v, 2, "setup verdict (whether a rank refused the run)");
}

/* Every rank ends MPI before a refused setup exits: MPI_Finalize waits for all of them, so no rank leaves while a
 * peer is still inside the verdict (whose watchdog would then report it as died). */
static _Noreturn void setup_refused_exit(void) {
    dist_finalize();
    exit(1);
}

/* die() during setup: rank 0 prints at once, before any collective (a rank that exits first would make the launcher
 * kill the job, and rank 0's line with it); another rank learns in the verdict whether rank 0 failed too, and prints
 * only where it did not (then its reason is its own). */
static bool setup_die_should_print(void) {
    dist_root_phase_abandon(); /* rank 0 refused inside its phase (loading the run directory): the others stop waiting */
    if (dist_is_root()) return true;
    int v[2];
    setup_verdict(true, v);
    return v[0] == 0;
}

/* After die()'s line: rank 0 now joins the verdict; every rank ends MPI (see setup_refused_exit), then exits 1. */
static void setup_die_after_print(void) {
    if (dist_is_root()) {
        int v[2];
        setup_verdict(true, v);
    }
    dist_finalize();
}

void dist_setup_begin(void) {
    if (dist_world() > 1) log_set_die_hook(setup_die_should_print, setup_die_after_print);
}

/* A rank that set up fine: stop, silently, where another refused (it said why). */
static void setup_passed(void) {
    log_set_die_hook(NULL, NULL); /* an MPI failure inside the verdict prints as any other */
    int v[2];
    setup_verdict(false, v);
    if (v[1]) setup_refused_exit();
}

void dist_setup_check(void) {
    if (dist_world() == 1) return;
    setup_passed();
    log_set_die_hook(setup_die_should_print, setup_die_after_print);
}

void dist_setup_end(void) {
    if (dist_world() > 1) setup_passed();
}

int dist_device_index(int local_rank, const char *cuda_visible_devices) {
    /* One device listed: the launcher gave this rank its own GPU (srun --gpus-per-task=1 lists one per task). */
    if (cuda_visible_devices && *cuda_visible_devices && !strchr(cuda_visible_devices, ',')) return 0;
    return local_rank;
}

void dist_assign_device(void) {
    if (dist_world() == 1) return;
    char idx[16];
    snprintf(idx, sizeof idx, "%d", dist_device_index(dist_local_rank(), getenv("CUDA_VISIBLE_DEVICES")));
    if (setenv("DMMATH_CUDA_DEVICE", idx, 0) != 0) die("setenv DMMATH_CUDA_DEVICE failed");
}

#ifdef HAVE_CUDA
/* The NCCL communicator, made at the first gradient all-reduce (every rank reaches it together): rank 0's id is
 * broadcast over MPI. */
static void nccl_ensure(void) {
    static bool ready = false;
    if (ready) return;
    char err[512];
    unsigned char id[CUDA_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    if (dist_is_root() && cuda_nccl_unique_id(id, err, sizeof err) != 0) die("%s", err);
    dist_bcast(id, sizeof id, 0, "broadcast of the NCCL id");
    dist_watch_begin("NCCL communicator setup");
    if (cuda_nccl_init(id, dist_rank(), dist_world(), err, sizeof err) != 0) die("%s", err);
    dist_watch_end();
    dist_at_finalize(cuda_nccl_finalize);
    log_info("gradient all-reduce: NCCL over %d ranks", dist_world());
    ready = true;
}
#endif

static void allreduce_host(scalar_t *x, size_t n, const char *what) {
#ifdef SCALAR_F64
    dist_allreduce_sum_f64(x, n, what);
#else
    dist_allreduce_sum_f32(x, n, what);
#endif
}

void dist_allreduce_grads(Backend *be, scalar_t *grads, size_t n, long step_number) {
    if (dist_world() == 1) return;
    char what[96];
    snprintf(what, sizeof what, "gradient all-reduce of step %ld", step_number);
    if (strcmp(be->name, "cpu") == 0) {
        allreduce_host(grads, n, what);
        return;
    }
#ifdef HAVE_CUDA
    if (strcmp(be->name, "cuda") == 0) {
        nccl_ensure();
        char err[512];
        dist_watch_begin(what); /* a dead peer never completes the all-reduce: the watchdog ends the wait */
        if (cuda_nccl_allreduce_sum(be, grads, n, sizeof(scalar_t) == 8, err, sizeof err) != 0)
            die("%s: %s (another rank probably died; the last committed checkpoint is intact)", what, err);
        dist_watch_end();
        return;
    }
#endif
    /* Any other backend: device memory through the host. */
    size_t bytes = n * sizeof(scalar_t);
    scalar_t *host = xmalloc(bytes);
    be->to_host(be, host, grads, bytes);
    allreduce_host(host, n, what);
    be->to_device(be, grads, host, bytes);
    free(host);
}

/* Broadcasts a backend buffer from rank 0 through host memory (once per run: its speed does not matter). */
static void bcast_backend_buffer(Backend *be, scalar_t *buf, size_t n, const char *what) {
    size_t bytes = n * sizeof(scalar_t);
    if (strcmp(be->name, "cpu") == 0) {
        dist_bcast(buf, bytes, 0, what);
        return;
    }
    scalar_t *host = xmalloc(bytes);
    be->to_host(be, host, buf, bytes);
    dist_bcast(host, bytes, 0, what);
    be->to_device(be, buf, host, bytes);
    free(host);
}

void dist_broadcast_train_state(Model *m, AdamW *opt, TrainState *st) {
    if (dist_world() == 1) return;
    Backend *be = opt->be;
    bcast_backend_buffer(be, model_params(m), model_n_state(m), "broadcast of rank 0's weights");
    bcast_backend_buffer(be, opt->m, opt->n, "broadcast of rank 0's AdamW state");
    bcast_backend_buffer(be, opt->v, opt->n, "broadcast of rank 0's AdamW state");
    dist_bcast(&opt->t, sizeof opt->t, 0, "broadcast of rank 0's AdamW state");
    /* TrainState is plain data and every rank runs the same binary. */
    dist_bcast(st, sizeof *st, 0, "broadcast of rank 0's training state");
}

static void hash_backend_buffer(Backend *be, Sha256 *h, const scalar_t *buf, size_t n) {
    size_t bytes = n * sizeof(scalar_t);
    if (strcmp(be->name, "cpu") == 0) {
        sha256_update(h, buf, bytes);
        return;
    }
    scalar_t *host = xmalloc(bytes);
    be->to_host(be, host, buf, bytes);
    sha256_update(h, host, bytes);
    free(host);
}

void dist_check_replicas(Model *m, const AdamW *opt, long step) {
    const int W = dist_world();
    if (W == 1) return;
    Sha256 *h = sha256_new();
    CHECK_ALLOC(h);
    hash_backend_buffer(opt->be, h, model_params(m), model_n_state(m)); /* weights and buffers */
    hash_backend_buffer(opt->be, h, opt->m, opt->n);
    hash_backend_buffer(opt->be, h, opt->v, opt->n);
    char mine[65];
    sha256_final_hex(h, mine);
    char *all = xmalloc((size_t)W * 128);
    char what[96];
    snprintf(what, sizeof what, "weight hash check of step %ld", step);
    dist_allgather_str(mine, all, what);
    char differ[256] = "";
    size_t used = 0;
    for (int r = 1; r < W; r++)
        if (strcmp(all + (size_t)r * 128, all) != 0) {
            int k = snprintf(differ + used, sizeof differ - used, "%s%d", used ? ", " : "", r);
            if (k > 0 && (size_t)k < sizeof differ - used) used += (size_t)k;
        }
    char root[65];
    snprintf(root, sizeof root, "%s", all);
    free(all);
    if (used > 0)
        die("step %ld: the weights/AdamW state of rank(s) %s differ from rank 0's (sha256 %.12s...): the replicas "
            "diverged; no checkpoint written", step, differ, root);
}

void dist_update_expert_bias(Model *m, double *counts_scratch, long step_number) {
    const int n = model_bias_count_len(m);
    if (n == 0) return;
    model_take_bias_counts(m, counts_scratch);
    char what[96];
    snprintf(what, sizeof what, "expert-bias count all-reduce of step %ld", step_number);
    dist_allreduce_sum_f64(counts_scratch, (size_t)n, what);
    model_apply_bias_update(m, counts_scratch);
}
