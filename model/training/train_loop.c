/* The step loop of a training run (see train_loop.h). */
#include "model/training/train_loop.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/training/dist_train.h"
#include "model/training/train_signals.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/dist.h"
#include "pipeline/base/exact_number.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/resume_hint.h"
#include "pipeline/records/routing_stats.h"

typedef struct {
    double loss, ce, reg_ffn, reg_att, grad_norm, expert_entropy;
    long real_tokens;
    double reg_seq;
} StepResult;

/* Forward/backward over the micro-batches of one step; gradients end up in model_grads, summed over the ranks.
 * Every rank draws every micro-batch's windows (one sample stream whatever the number of ranks) and runs those k
 * with k mod W == its rank. The per-micro-batch values are reduced as an array (each slot has one non-zero
 * contribution, so the reduction is exact) and summed in micro-batch order: the metrics are a single process's. */
static StepResult run_microbatches(Trainer *t, long step_number) {
    StepResult r = {0};
    const int nmb = (int)t->tc.n_microbatch, bm = (int)(t->tc.batch_size / nmb), T = (int)t->tc.context;
    const double w = 1.0 / nmb;
    double *mb = t->mb_values; /* allocated at setup: a step allocates nothing */
    memset(mb, 0, (size_t)nmb * MB_VALUES * sizeof *mb); /* other ranks' slots stay 0 for the sum */
    model_reset_routing_counts(t->m); /* the counts a log line reports are its step's (an eval between steps adds) */
    for (int k = 0; k < nmb; k++) {
        r.real_tokens += loader_next_batch(&t->loader, bm, t->inputs, t->targets, t->valid);
        if (!dist_owns_microbatch(k)) continue;
        model_set_dropout_seed(t->m, dist_microbatch_dropout_seed(train_seed_dropout(&t->tc), t->st.step, nmb, k));
        StepStats ss = {0};
        model_train_step(t->m, t->inputs, t->targets, t->valid, bm, T, w, &ss, NULL);
        mb[MB_VALUES * k] = ss.n_counted > 0 ? ss.ce_sum / (double)ss.n_counted : 0.0;
        mb[MB_VALUES * k + 1] = ss.reg_ffn;
        mb[MB_VALUES * k + 2] = ss.reg_att;
        mb[MB_VALUES * k + 3] = ss.reg_seq;
    }
    char what[96];
    snprintf(what, sizeof what, "loss all-reduce of step %ld", step_number);
    dist_allreduce_sum_f64(mb, (size_t)nmb * MB_VALUES, what);
    dist_allreduce_grads(t->be, model_grads(t->m), model_n_params(t->m), step_number);
    for (int k = 0; k < nmb; k++) {
        double ce = mb[MB_VALUES * k], reg_ffn = mb[MB_VALUES * k + 1], reg_att = mb[MB_VALUES * k + 2];
        double reg_seq = mb[MB_VALUES * k + 3];
        r.ce += w * ce;
        r.reg_ffn += w * reg_ffn;
        r.reg_att += w * reg_att;
        r.reg_seq += w * reg_seq;
        r.loss += w * model_config_objective(&t->mc, ce, reg_ffn, reg_att, reg_seq);
    }
    /* With balance "entropy", reg_ffn is the FFN entropy regularizer summed over the distinct MoE modules: minus the
     * entropy of the mean routing distribution as the reference computes it (masked, with its [B,B] broadcast, so it
     * differs from the plain entropy by a small -r*log r term, ~1e-3 on tiny windows). Logged per module with the
     * sign flipped. */
    if (t->mc.arch == ARCH_MOEUT && t->mc.balance == BALANCE_ENTROPY) r.expert_entropy = -r.reg_ffn / t->mc.group_size;
    return r;
}

static void write_checkpoint(void *trainer) { /* rank 0's part of save_checkpoint */
    Trainer *t = trainer;
    char err[1024];
    if (train_checkpoint_save(t->a.out_dir, t->m, &t->opt, &t->st, err, sizeof err) != 0) die("%s", err);
}

static void save_checkpoint(Trainer *t, double session_start, double wall_base) {
    t->st.loader = loader_get_state(&t->loader);
    t->st.wall_time_s = wall_base + (now_seconds() - session_start);
    if (!t->be->all_finite(t->be, model_params(t->m), model_n_params(t->m)))
        die("non-finite weights at step %ld; last good checkpoint step %ld kept", t->st.step, t->last_saved_step);
    dist_check_replicas(t->m, &t->opt, t->st.step);
    char what[96];
    snprintf(what, sizeof what, "wait for rank 0's checkpoint of step %ld", t->st.step);
    dist_root_phase(what, write_checkpoint, t); /* no rank leaves (or stops) before the checkpoint is committed */
    t->last_saved_step = t->st.step;
}

/* The routing statistics of the step just taken (every micro-batch of every rank); NULL for the dense model. Called
 * by every rank: the sum is a collective. Counts up to 2^53 are exact in the double all-reduce. */
static cJSON *step_routing_json(Trainer *t, long step_number) {
    int first_app = 0;
    const int E = model_routed_experts(t->m), A = model_routed_applications(t->m, &first_app);
    if (E == 0) return NULL;
    const size_t n = (size_t)A * (size_t)E;
    int64_t tokens = 0;
    int64_t *dropped = t->routing_counts + n; /* [A] expert capacity's dropped assignments, read before the take */
    const int has_dropped = model_routing_dropped(t->m, dropped);
    model_take_routing_counts(t->m, t->routing_counts, &tokens);
    for (size_t i = 0; i < n; i++) t->routing_sum[i] = (double)t->routing_counts[i];
    t->routing_sum[n] = (double)tokens;
    for (int a = 0; has_dropped && a < A; a++) t->routing_sum[n + 1 + a] = (double)dropped[a];
    char what[96];
    snprintf(what, sizeof what, "routing-count all-reduce of step %ld", step_number);
    dist_allreduce_sum_f64(t->routing_sum, n + 1 + (has_dropped ? (size_t)A : 0), what);
    for (size_t i = 0; i < n; i++) t->routing_counts[i] = (int64_t)t->routing_sum[i];
    RoutingStats rs;
    int *app_e = xmalloc((size_t)A * sizeof *app_e); /* E_a per application (ff_n_experts_per_layer) */
    for (int a = 0; a < A; a++) app_e[a] = model_routed_experts_of(t->m, a);
    routing_stats_from_counts_per_app(&rs, t->routing_counts, first_app, A, E, app_e,
                                      model_config_train_routing_k(&t->mc),
                                      (int64_t)t->routing_sum[n]);
    free(app_e);
    if (has_dropped) {
        for (int a = 0; a < A; a++) dropped[a] = (int64_t)t->routing_sum[n + 1 + a];
        routing_stats_set_dropped(&rs, dropped);
    }
    cJSON *j = routing_stats_to_json(&rs);
    routing_stats_free(&rs);
    return j;
}

static void log_metrics(Trainer *t, double lr, double interval_s) {
    const MetricsAcc *a = &t->st.acc;
    double n = (double)a->n;
    long tokens_interval = (long)a->n * t->tc.batch_size * t->tc.context;
    cJSON *j = cJSON_CreateObject();
    CHECK_ALLOC(j);
    cJSON_AddNumberToObject(j, "step", (double)t->st.step);
    cJSON_AddNumberToObject(j, "loss", a->loss / n);
    cJSON_AddNumberToObject(j, "ce", a->ce / n);
    cJSON_AddNumberToObject(j, "reg_ffn", a->reg_ffn / n);
    cJSON_AddNumberToObject(j, "reg_att", a->reg_att / n);
    if (t->mc.seq_balance_alpha > 0.0) cJSON_AddNumberToObject(j, "reg_seq", a->reg_seq / n); /* only when it is on */
    cJSON_AddNumberToObject(j, "lr", lr);
    cJSON_AddNumberToObject(j, "grad_norm", a->grad_norm / n);
    cJSON_AddNumberToObject(j, "tokens", (double)t->st.tokens);
    cJSON_AddNumberToObject(j, "tokens_per_s", interval_s > 0 ? (double)tokens_interval / interval_s : 0.0);
    cJSON_AddNumberToObject(j, "expert_entropy", a->expert_entropy / n);
    cJSON *routing = step_routing_json(t, t->st.step);
    if (routing) cJSON_AddItemToObject(j, "routing", routing);
    char *line = json_print_exact(j, false);
    CHECK_ALLOC(line);
    if (t->metrics && (fprintf(t->metrics, "%s\n", line) < 0 || fflush(t->metrics) != 0)) /* rank 0 only */
        die("%s: write failed: %s", t->metrics_path, strerror(errno));
    cJSON_free(line);
    cJSON_Delete(j);
    t->st.last_ce = a->ce / n;
    memset(&t->st.acc, 0, sizeof t->st.acc);
}

static void fail_non_finite(Trainer *t, long step_number, const char *what) {
    char kept[64];
    if (t->last_saved_step >= 0) snprintf(kept, sizeof kept, "%ld", t->last_saved_step);
    else snprintf(kept, sizeof kept, "none (no checkpoint written yet)");
    die("non-finite %s at step %ld; last good checkpoint step %s kept", what, step_number, kept);
}

typedef struct {
    Trainer *t;
    double session_start, wall_base;
} EvalPhase;

/* train.evaluate_every: evaluate (and keep the weights of) this step; before a checkpoint of the same step is saved,
 * so that a checkpoint never precedes its step's curve line (a resume truncates the curve to the checkpoint). Rank 0
 * only (the others' weights are the same, checked at checkpoints), while the others wait in dist_root_phase. */
static void evaluate_during_training(void *phase) {
    const EvalPhase *p = phase;
    Trainer *t = p->t;
    const double session_start = p->session_start, wall_base = p->wall_base;
    char err[1024];
    if (train_eval_run(&t->eval, t->m, t->st.step, t->st.tokens, err, sizeof err) != 0) die("%s", err);
    if (!t->eval.keep_checkpoints) return;
    t->st.wall_time_s = wall_base + (now_seconds() - session_start);
    cJSON *s = trainer_summary_json(t);
    if (train_eval_keep_checkpoint(&t->eval, t->m, t->st.step, s, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(s);
}

int train_loop(Trainer *t) {
    const long total = t->tc.steps;
    const double session_start = now_seconds(), wall_base = t->st.wall_time_s;
    double interval_start = session_start;
    Progress prog;
    const bool root = dist_is_root(); /* the other ranks show no progress */
    if (root) progress_start(&prog, "train", total, "steps");
    if (root) progress_update(&prog, t->st.step, NULL);
    scalar_t *params = model_params(t->m), *grads = model_grads(t->m);
    const size_t n_params = model_n_params(t->m);
    const long tokens_per_step = t->tc.batch_size * t->tc.context;
    const long session_first_step = t->st.step;

    while (t->st.step < total) {
        const long step_number = t->st.step + 1; /* 1-based: the metrics "step" after this update */
        double lr = lr_at(&t->sched, t->st.step);
        t->be->zero(t->be, grads, n_params * sizeof(scalar_t));
        StepResult r = run_microbatches(t, step_number);
        if (t->a.debug_nan_step == step_number) { /* testing hook: poison one gradient */
            scalar_t nan_value = (scalar_t)NAN;
            t->be->to_device(t->be, grads, &nan_value, sizeof nan_value);
        }
        if (!isfinite(r.loss)) fail_non_finite(t, step_number, "loss");
        double norm = grad_global_norm(t->be, grads, n_params);
        if (!isfinite(norm)) fail_non_finite(t, step_number, "gradient norm");
        adamw_update(&t->opt, params, grads, lr, grad_clip_coef(norm, t->tc.grad_clip)); /* clipped as it is read */
        dist_update_expert_bias(t->m, t->bias_counts, step_number); /* balance "bias" only */
        if (t->a.debug_diverge_step == step_number && dist_rank() == dist_world() - 1) { /* testing hook */
            scalar_t w0;
            t->be->to_host(t->be, &w0, params, sizeof w0);
            w0 += (scalar_t)1e-3;
            t->be->to_device(t->be, params, &w0, sizeof w0);
        }
        t->st.step = step_number;
        t->st.tokens += (uint64_t)tokens_per_step;
        t->st.real_tokens += (uint64_t)r.real_tokens;

        MetricsAcc *a = &t->st.acc;
        a->loss += r.loss, a->ce += r.ce, a->reg_ffn += r.reg_ffn, a->reg_att += r.reg_att;
        a->grad_norm += norm, a->expert_entropy += r.expert_entropy, a->n++;
        a->reg_seq += r.reg_seq;
        if (t->st.step % t->tc.log_every == 0 || t->st.step == total) {
            double now = now_seconds();
            log_metrics(t, lr, now - interval_start);
            interval_start = now;
        }
        double elapsed = now_seconds() - session_start;
        double tok_s = elapsed > 0 ? (double)(t->st.step - session_first_step) * (double)tokens_per_step / elapsed : 0.0;
        char extra[128];
        snprintf(extra, sizeof extra, "loss %.4f | %.0f tok/s", r.ce, tok_s);
        if (root) progress_update(&prog, t->st.step, extra);

        if (train_eval_due(&t->eval, t->st.step)) {
            EvalPhase phase = {t, session_start, wall_base};
            char what[96];
            snprintf(what, sizeof what, "wait for rank 0's evaluation of step %ld", t->st.step);
            dist_root_phase(what, evaluate_during_training, &phase);
        }
        bool last = t->st.step == total;
        bool periodic = t->tc.checkpoint_every > 0 && t->st.step % t->tc.checkpoint_every == 0;
        bool stop_after = t->a.stop_after > 0 && t->st.step == t->a.stop_after && !last;
        const int sig = train_signals_agree(step_number); /* a signal to any rank stops every rank after this step */
        if (last || periodic || stop_after || sig) save_checkpoint(t, session_start, wall_base);
        if (sig && !last) {
            if (root) progress_finish(&prog);
            const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
            /* The exact command that continues: under make the make command the user typed (REPRO_COMMAND), else
             * this one with --auto-resume. */
            char how[8192];
            const ResumeHintInput hint = {t->a.start_argc, t->a.start_argv, getenv("REPRO_COMMAND"),
                                          t->a.auto_resume || t->a.resume, getenv("MAKELEVEL") != NULL, dist_world()};
            resume_hint(how, sizeof how, &hint);
            if (root) log_info("interrupted by %s: checkpoint saved at step %ld of %ld; %s", name, t->st.step, total, how);
            return 128 + sig;
        }
        if (stop_after) {
            if (root) progress_finish(&prog);
            log_info("stopped after step %ld of %ld (--stop-after): checkpoint saved; continue with --resume",
                     t->st.step, total);
            return 0;
        }
    }
    if (root) progress_finish(&prog);
    return -1; /* finished */
}
