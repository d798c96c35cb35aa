/* CPU training-step benchmark of the C models, the C half of `make bench-cpu` (tests/reference/bench_twin.py runs
 * this and the PyTorch twin on the same shapes and prints the ratio).
 *
 * Reads a run config (experiments/EXP/RUN.json: the model and train sections), initialises the model with the
 * reference init, and times full optimizer steps on random token batches of the config's shape
 * [batch_size, context]: zero grads, n_microbatch x model_train_step (grad_scale 1/n_microbatch), global-norm clip,
 * AdamW at the scheduled lr. Every position is valid and targets are the next token (the Q+A loss shape), so the
 * work per step equals a training step on full windows. One warm-up step is run and not timed.
 * Output: one line "bench c: <arch> steps N tokens X seconds S tokens_per_s R cpu_seconds P threads T ..." on stdout
 * (cpu_seconds: process CPU time over all threads, less sensitive than wall time to a machine shared with others).
 * Optional overrides (used by `make bench-gpu`, tests/bench/bench_gpu.py; without them the config decides):
 * --precision fp32|bf16, --batch-size N and --n-microbatch M (windows per step and micro-batches per step),
 * --warmup W (untimed warm-up steps, default 1). --no-init leaves the weights zero instead of drawing them (for
 * make bench-model's dry run on the CUDA emulator, which computes nothing: drawing 228M random weights on the host
 * would take most of its time; a timed or trained run must not use it). The output line ends with "precision P batch B micro_batches M
 * device <backend device name>" after the fields above, so parsers of the older line still match.
 */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "pipeline/base/rng.h"
#include "model/train_config.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) die("clock_gettime failed");
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Random windows: inputs[b,t] in [3, V) (ids 0..2 are <unk>, <s>, </s>), targets[b,t] = inputs[b,t+1], the last
 * target also random. */
static void random_batch(Rng *r, int32_t *inputs, int32_t *targets, int B, int T, int V) {
    for (int b = 0; b < B; b++) {
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) in[t] = 3 + (int32_t)rng_below(r, (uint64_t)(V - 3));
        for (int t = 0; t + 1 < T; t++) tg[t] = in[t + 1];
        tg[T - 1] = 3 + (int32_t)rng_below(r, (uint64_t)(V - 3));
    }
}

int main(int argc, char **argv) {
    log_set_program("bench_train_step");
    const char *config_path = NULL, *backend_name = "cpu", *precision_name = NULL;
    long steps = 5, threads = 2, batch_override = 0, nmb_override = 0, warmup = 1;
    bool no_init = false;
    const CliOption opts[] = {
        {"config", OPT_STRING, &config_path, "run config experiments/EXP/RUN.json", true},
        {"steps", OPT_INT, &steps, "timed optimizer steps (default 5; one extra untimed warm-up step)", false},
        {"threads", OPT_INT, &threads, "OpenMP and OpenBLAS threads (default 2)", false},
        {"backend", OPT_STRING, &backend_name, "cpu | cuda (default cpu)", false},
        {"precision", OPT_STRING, &precision_name, "fp32 | bf16 (default: the config's train.precision)", false},
        {"batch-size", OPT_INT, &batch_override, "windows per step (default: the config's batch_size)", false},
        {"n-microbatch", OPT_INT, &nmb_override, "micro-batches per step (default: the config's n_microbatch)", false},
        {"warmup", OPT_INT, &warmup, "untimed warm-up steps before the timed ones (default 1)", false},
        {"no-init", OPT_FLAG, &no_init, "leave the weights zero (make bench-model's dry run only)", false},
    };
    cli_parse(argc, argv, "bench_train_step",
              "Times full training steps (forward, backward, clip, AdamW) of the C model of a run config on random "
              "batches of the config's shape and prints tokens/s.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    if (steps < 1) die("--steps: must be >= 1 (got %ld)", steps);
    if (threads < 1) die("--threads: must be >= 1 (got %ld)", threads);
    if (warmup < 1) die("--warmup: must be >= 1 (got %ld)", warmup);
    omp_set_num_threads((int)threads);
    openblas_set_num_threads((int)threads);

    char err[1024];
    cJSON *root = json_load_file(config_path, JSON_KIND_CONFIG, err, sizeof err);
    if (!root) die("%s", err);
    ModelConfig mc;
    TrainConfig tc;
    if (run_config_parse(root, config_path, &mc, &tc, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(root);
    if (precision_name) {
        if (strcmp(precision_name, "fp32") == 0) tc.precision = PRECISION_FP32;
        else if (strcmp(precision_name, "bf16") == 0) tc.precision = PRECISION_BF16;
        else die("--precision: expected fp32 or bf16 (got '%s')", precision_name);
    }
    if (batch_override != 0) {
        if (batch_override < 1) die("--batch-size: must be >= 1 (got %ld)", batch_override);
        tc.batch_size = batch_override;
    }
    if (nmb_override != 0) {
        if (nmb_override < 1) die("--n-microbatch: must be >= 1 (got %ld)", nmb_override);
        tc.n_microbatch = nmb_override;
    }
    if (tc.batch_size % tc.n_microbatch != 0)
        die("batch size %ld is not a multiple of n_microbatch %ld", tc.batch_size, tc.n_microbatch);

    Backend *be = backend_create(backend_name, err, sizeof err);
    if (!be) die("--backend %s: %s", backend_name, err);
    be->precision = tc.precision;
    Model *m = model_create(&mc, be);
    if (!m) die("%s: model_create failed", config_path);
    if (!no_init) model_init_weights(m, train_seed_init(&tc));
    size_t np = model_n_params(m);
    AdamW opt;
    adamw_init(&opt, be, np, tc.adam_beta1, tc.adam_beta2, tc.adam_eps, tc.weight_decay);
    LrSchedule sched = {tc.lr, tc.min_lr_multiplier, tc.warmup, tc.steps};

    int Bm = (int)(tc.batch_size / tc.n_microbatch), T = (int)tc.context, V = mc.n_tokens;
    int32_t *inputs = xmalloc((size_t)Bm * T * sizeof *inputs);
    int32_t *targets = xmalloc((size_t)Bm * T * sizeof *targets);
    Rng rng;
    rng_seed(&rng, 12345);

    double t0 = 0, c0 = 0, last_ce = 0;
    for (long s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            be->synchronize(be);
            t0 = clock_s(CLOCK_MONOTONIC); /* steps before `warmup` are untimed (allocations, caches) */
            c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        }
        be->zero(be, model_grads(m), np * sizeof(scalar_t));
        for (long mb = 0; mb < tc.n_microbatch; mb++) {
            random_batch(&rng, inputs, targets, Bm, T, V);
            StepStats st;
            memset(&st, 0, sizeof st);
            model_train_step(m, inputs, targets, NULL, Bm, T, 1.0 / (double)tc.n_microbatch, &st, NULL);
            last_ce = st.ce_sum / (double)st.n_counted;
        }
        const double norm = grad_global_norm(be, model_grads(m), np); /* as the training loop: clipped in AdamW */
        adamw_update(&opt, model_params(m), model_grads(m), lr_at(&sched, s), grad_clip_coef(norm, tc.grad_clip));
    }
    be->synchronize(be);
    double secs = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double tokens = (double)steps * (double)tc.batch_size * (double)tc.context;
    printf("bench c: %s steps %ld tokens %.0f seconds %.3f tokens_per_s %.1f cpu_seconds %.3f threads %ld params %zu "
           "last_ce %.4f precision %s batch %ld micro_batches %ld device %s\n",
           model_arch_name(mc.arch), steps, tokens, secs, tokens / secs, cpu, threads, np, last_ce,
           tc.precision == PRECISION_BF16 && strcmp(be->name, "cpu") != 0 ? "bf16" : "fp32", tc.batch_size,
           tc.n_microbatch, be->device_name);

    free(inputs);
    free(targets);
    adamw_free(&opt);
    model_free(m);
    backend_destroy(be);
    return 0;
}
