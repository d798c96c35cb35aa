/* The difference between two runs (run_diff.h). */
#include "pipeline/records/run_diff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/compare_metrics.h"
#include "pipeline/base/log.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/records/run_identity.h"
#include "pipeline/records/run_metrics.h"
#include "pipeline/base/stats.h"

/* Reads DIR/predictions.jsonl and DIR/analysis.json when they exist (neither is required for a diff: one that does
 * not load only leaves its rows out, saying why). Predictions of another run or another evaluation than the record
 * are an error, as in the report: -1 with err. */
static int load_run_extras(DiffSide *s, const char *dir, const char *name, char *err, size_t errlen) {
    char perr[1024];
    snprintf(s->pred_path, sizeof s->pred_path, "%s/predictions.jsonl", dir);
    if (!run_file_present(s->pred_path))
        snprintf(s->no_predictions, sizeof s->no_predictions, "%.1000s has no predictions.jsonl", dir);
    else if (prediction_table_load(&s->pred, s->pred_path, perr, sizeof perr) != 0)
        snprintf(s->no_predictions, sizeof s->no_predictions, "%.1000s", perr);
    else {
        s->has_predictions = true;
        if (prediction_table_check_record(&s->pred, s->pred_path, name, s->rec.code_version, s->record_path, err,
                                          errlen) != 0)
            return -1;
    }
    char apath[4200];
    snprintf(apath, sizeof apath, "%s/analysis.json", dir);
    if (run_file_present(apath) && analysis_record_load(&s->analysis, apath, perr, sizeof perr) == 0) {
        s->has_analysis = true;
        snprintf(apath, sizeof apath, "%s/%s", dir, DEPTH_PROMPTS_FILE_NAME);
        if (s->analysis.enabled && run_file_present(apath) && depth_prompts_load(&s->depth, apath, perr, sizeof perr) == 0)
            s->has_depth_prompts = true;
    }
    return 0;
}

int diff_side_load(DiffSide *s, const char *arg, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    snprintf(s->given, sizeof s->given, "%s", arg);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", arg);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = '\0';
    /* a baseline record named by its file (reports/baselines/EXP/RUN.result.json) is its prefix */
    const char *suffix = ".result.json";
    const size_t n_dir = strlen(dir), n_suffix = strlen(suffix);
    if (n_dir > n_suffix && strcmp(dir + n_dir - n_suffix, suffix) == 0 && !is_dir(dir, FOLLOW_LINKS))
        dir[n_dir - n_suffix] = '\0';
    char prefix_path[1100];
    snprintf(prefix_path, sizeof prefix_path, "%s.result.json", dir);
    if (is_dir(dir, FOLLOW_LINKS)) {
        snprintf(s->record_path, sizeof s->record_path, "%s/result.json", dir);
        if (!run_file_present(s->record_path)) {
            snprintf(err, errlen, "%.1000s: a run directory without result.json (not evaluated yet?)", dir);
            return -1;
        }
    } else if (run_file_present(prefix_path)) {
        snprintf(s->record_path, sizeof s->record_path, "%s", prefix_path);
        s->is_baseline = true;
        snprintf(s->no_predictions, sizeof s->no_predictions, "%.1000s is a baseline record (no predictions)",
                 s->record_path);
    } else {
        snprintf(err, errlen, "%.1000s: no such run directory (DIR/result.json) or baseline record (%.1050s)", arg,
                 prefix_path);
        return -1;
    }
    /* the record must be of the run the path names: DIR's own name (or a baseline's NAME), of the experiment named by
     * the directory holding it, as compare and the report require */
    char parent[4096], name[256];
    if (path_parent_and_name(dir, parent, sizeof parent, name, sizeof name, err, errlen) != 0) return -1;
    if (result_record_load_in(&s->rec, s->record_path, parent, name, s->is_baseline, err, errlen) != 0) return -1;
    if (!s->is_baseline && load_run_extras(s, dir, name, err, errlen) != 0) {
        diff_side_free(s); /* nothing is left for the caller to free after an error */
        return -1;
    }
    return 0;
}

void diff_side_free(DiffSide *s) {
    result_record_free(&s->rec);
    if (s->has_predictions) prediction_table_free(&s->pred);
    if (s->has_analysis) analysis_record_free(&s->analysis);
    if (s->has_depth_prompts) depth_prompts_free(&s->depth);
    memset(s, 0, sizeof *s);
}

static DiffRow *add_row(RunDiff *d, const char *name) {
    d->rows = xrealloc(d->rows, (size_t)(d->n_rows + 1) * sizeof *d->rows);
    DiffRow *r = &d->rows[d->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static const char *unlike_input(const ResultRecord *a, const ResultRecord *b) {
    if (strcmp(a->train_sha256, b->train_sha256) != 0) return "dataset.train_sha256";
    if (strcmp(a->interpolate_sha256, b->interpolate_sha256) != 0) return "dataset.interpolate_sha256";
    if (strcmp(a->extrapolate_sha256, b->extrapolate_sha256) != 0) return "dataset.extrapolate_sha256";
    if (strcmp(a->tokenizer_sha256, b->tokenizer_sha256) != 0) return "tokenizer_sha256";
    return "";
}

/* Whether the predictions can be paired: both present, the same examples in the same order, and each table the
 * examples its own record counts (a stale predictions.jsonl beside a newer result.json would pair the wrong runs). */
static bool pairable(const DiffSide *a, const DiffSide *b, char *why, size_t whylen) {
    if (!a->has_predictions || !b->has_predictions) {
        snprintf(why, whylen, "%s", !a->has_predictions ? a->no_predictions : b->no_predictions);
        return false;
    }
    const DiffSide *side[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        long n_set[EVAL_N_SETS] = {0};
        for (long i = 0; i < side[k]->pred.n; i++) n_set[side[k]->pred.set[i]]++;
        for (int s = 0; s < EVAL_N_SETS; s++)
            if (n_set[s] != side[k]->rec.evaluation.sets[s].n) {
                snprintf(why, whylen, "%.1000s lists %ld %s examples, its result.json %ld", side[k]->pred_path,
                         n_set[s], EVAL_SET_NAMES[s], side[k]->rec.evaluation.sets[s].n);
                return false;
            }
    }
    char err[1100];
    if (prediction_tables_match(&a->pred, a->pred_path, &b->pred, b->pred_path, err, sizeof err) != 0) {
        snprintf(why, whylen, "%s", err);
        return false;
    }
    return true;
}

/* The per-example change B - A of the metric's quantity over the metric's examples, weighted so that its mean is
 * the metric's change (mean_accuracy: the mean of the two sets' means). Returns the number of examples (0: none). */
static long example_changes(const DiffSide *a, const DiffSide *b, const RecordMetric *m, double *values) {
    const PredictionTable *pa = &a->pred, *pb = &b->pred;
    bool loss = m->klass == MC_LOSS || m->klass == MC_MODULE_LOSS;
    int module = m->scope == EXAMPLES_MODULE ? prediction_table_module(pa, m->module) : -1;
    if (m->scope == EXAMPLES_MODULE && module < 0) return 0;
    long n_set[EVAL_N_SETS] = {0};
    for (long i = 0; i < pa->n; i++) n_set[pa->set[i]]++;
    long n = 0;
    for (long i = 0; i < pa->n; i++) {
        if (m->scope != EXAMPLES_BOTH_SETS && pa->set[i] != m->set) continue;
        if (m->scope == EXAMPLES_MODULE && pa->module[i] != module) continue;
        double d = loss ? pb->answer_loss[i] - pa->answer_loss[i] : (double)pb->correct[i] - (double)pa->correct[i];
        /* Both sets: each set's examples weigh 1 / (2 n_set) in the mean, as in mean_accuracy (an empty set's
         * accuracy counts as 0: its half of the mean never changes). */
        if (m->scope == EXAMPLES_BOTH_SETS) d *= (double)pa->n / (2.0 * (double)n_set[pa->set[i]]);
        values[n++] = d;
    }
    return n;
}

void run_diff_compute(const DiffSide *a, const DiffSide *b, int replicates, unsigned long long rng_seed, RunDiff *out) {
    memset(out, 0, sizeof *out);
    const cJSON *configs[2] = {a->rec.config, b->rec.config};
    config_diff(configs, 2, NULL, &out->config);
    if (run_variant_key(a->rec.config, out->variant_a) != 0) out->variant_a[0] = '\0';
    if (run_variant_key(b->rec.config, out->variant_b) != 0) out->variant_b[0] = '\0';
    snprintf(out->unlike, sizeof out->unlike, "%s", unlike_input(&a->rec, &b->rec));
    out->paired = pairable(a, b, out->not_paired, sizeof out->not_paired);
    if (out->paired) out->n_examples = a->pred.n;

    RecordMetricList ma = {0}, mb = {0};
    record_metrics_collect(&a->rec, &ma);
    record_metrics_collect(&b->rec, &mb);
    double *values = out->paired ? xmalloc((size_t)(a->pred.n + 1) * sizeof *values) : NULL;
    int n_inconsistent = 0;
    char first_inconsistent[400] = "";
    for (int i = 0; i < ma.n; i++) {
        const RecordMetric *x = &ma.m[i], *y = record_metrics_find(&mb, x->name);
        DiffRow *r = add_row(out, x->name);
        r->in_a = true;
        r->a = x->value;
        if (!y) continue;
        r->in_b = true;
        r->b = y->value;
        if (!out->paired || x->scope == EXAMPLES_NONE) continue;
        long n = example_changes(a, b, x, values);
        BootstrapResult br;
        if (n < 1 || hierarchical_bootstrap_mean(values, 1, n, replicates, rng_seed, &br) != 0) continue;
        /* The examples' mean change must be the records' change: otherwise the files do not belong together. */
        if (fabs(br.estimate - (r->b - r->a)) > 1e-6 * fmax(1.0, fmax(fabs(r->a), fabs(r->b)))) {
            if (!n_inconsistent++) snprintf(first_inconsistent, sizeof first_inconsistent, "%s", x->name);
            continue;
        }
        r->has_interval = true;
        r->lo = br.lo;
        r->hi = br.hi;
        r->n_examples = n;
    }
    for (int i = 0; i < mb.n; i++)
        if (!record_metrics_find(&ma, mb.m[i].name)) {
            DiffRow *r = add_row(out, mb.m[i].name);
            r->in_b = true;
            r->b = mb.m[i].value;
        }
    if (n_inconsistent) {
        /* Keep nothing half-paired: either every interval or none. */
        for (int i = 0; i < out->n_rows; i++) out->rows[i].has_interval = false;
        out->paired = false;
        snprintf(out->not_paired, sizeof out->not_paired,
                 "the predictions' per-example values do not add up to the result records (%d metric(s), first %s): "
                 "a predictions.jsonl older or newer than its result.json?",
                 n_inconsistent, first_inconsistent);
    }
    /* The numbers a diff shows but compare does not gate (run_metrics.h: the names runs.csv uses too; wall times and
     * throughput vary run to run, the depth summaries come from analysis.json and depth_prompts.json). */
    RunMetricList xa = {0}, xb = {0};
    run_metrics_described(&a->rec, a->has_analysis ? &a->analysis : NULL, a->has_depth_prompts ? &a->depth : NULL,
                          &xa);
    run_metrics_described(&b->rec, b->has_analysis ? &b->analysis : NULL, b->has_depth_prompts ? &b->depth : NULL,
                          &xb);
    for (int i = 0; i < xa.n; i++) {
        DiffRow *r = add_row(out, xa.m[i].name);
        const RunMetric *y = run_metrics_find(&xb, xa.m[i].name);
        r->in_a = true;
        r->a = xa.m[i].value;
        r->in_b = y != NULL;
        r->b = y ? y->value : 0;
    }
    for (int i = 0; i < xb.n; i++)
        if (!run_metrics_find(&xa, xb.m[i].name)) {
            DiffRow *r = add_row(out, xb.m[i].name);
            r->in_b = true;
            r->b = xb.m[i].value;
        }
    run_metrics_free(&xa);
    run_metrics_free(&xb);
    free(values);
    record_metrics_free(&ma);
    record_metrics_free(&mb);
}

void run_diff_free(RunDiff *d) {
    config_diff_free(&d->config);
    free(d->rows);
    memset(d, 0, sizeof *d);
}

static void print_side(FILE *fp, const char *label, const DiffSide *s, const char *variant) {
    char seed[32] = "-";
    if (s->rec.prov.seed >= 0) snprintf(seed, sizeof seed, "%ld", s->rec.prov.seed);
    fprintf(fp, "%s = %s (%s: run %s, variant %s, seed %s, %s, code %s)\n", label, s->given, s->record_path,
            s->rec.run, variant[0] ? variant : "-", seed, s->rec.backend, s->rec.code_version);
}

void run_diff_print(FILE *fp, const DiffSide *a, const DiffSide *b, const RunDiff *d, int replicates,
                    unsigned long long rng_seed) {
    print_side(fp, "A", a, d->variant_a);
    print_side(fp, "B", b, d->variant_b);
    if (d->unlike[0])
        fprintf(fp, "note: A and B were evaluated on different inputs (%s differs): their metrics are not on the same "
                    "examples\n",
                d->unlike);
    if (d->config.n_rows == 0) fprintf(fp, "config: the same (each result.json's \"config\")\n");
    else {
        fprintf(fp, "config: %d key(s) differ (each result.json's \"config\"):\n", d->config.n_rows);
        /* Long values (a description, a comment) shortened: the key says what differs, the files say how. */
        for (int i = 0; i < d->config.n_rows; i++) {
            const char *v[2] = {d->config.rows[i].values[0], d->config.rows[i].values[1]};
            char text[2][80];
            for (int k = 0; k < 2; k++) {
                if (!v[k]) snprintf(text[k], sizeof text[k], "(absent)");
                else if (strlen(v[k]) > 60) snprintf(text[k], sizeof text[k], "%.57s...", v[k]);
                else snprintf(text[k], sizeof text[k], "%s", v[k]);
            }
            fprintf(fp, "  %-40s A %s  B %s\n", d->config.rows[i].key, text[0], text[1]);
        }
    }
    fprintf(fp, "%-62s %14s %14s %12s  %s\n", "metric", "A", "B", "B-A", "95% interval of B-A (paired, examples)");
    for (int i = 0; i < d->n_rows; i++) {
        const DiffRow *r = &d->rows[i];
        char a_txt[32] = "-", b_txt[32] = "-", delta[32] = "-", ci[96] = "";
        if (r->in_a) snprintf(a_txt, sizeof a_txt, "%.6g", r->a);
        if (r->in_b) snprintf(b_txt, sizeof b_txt, "%.6g", r->b);
        if (r->in_a && r->in_b) snprintf(delta, sizeof delta, "%+.4g", r->b - r->a);
        if (r->has_interval) snprintf(ci, sizeof ci, "[%+.4g, %+.4g] (n=%ld)", r->lo, r->hi, r->n_examples);
        fprintf(fp, "%-62s %14s %14s %12s  %s\n", r->name, a_txt, b_txt, delta, ci);
    }
    if (d->paired)
        fprintf(fp,
                "intervals: paired percentile bootstrap of the mean per-example change B - A (correct 0/1 for "
                "accuracies, summed answer-token loss in nats for losses) over the %ld evaluation examples both runs "
                "share, %d replicates, seed %llu; an interval that excludes 0 is a change larger than these examples' "
                "sampling noise (not a seed-to-seed difference)\n",
                d->n_examples, replicates, rng_seed);
    else fprintf(fp, "intervals: none: %s\n", d->not_paired);
}

int run_diff_command(const char *a_arg, const char *b_arg, int replicates) {
    DiffSide a, b;
    char err[2200];
    if (diff_side_load(&a, a_arg, err, sizeof err) != 0) {
        log_error("A: %s", err);
        return 2;
    }
    if (diff_side_load(&b, b_arg, err, sizeof err) != 0) {
        log_error("B: %s", err);
        diff_side_free(&a);
        return 2;
    }
    RunDiff d;
    run_diff_compute(&a, &b, replicates, RUN_DIFF_BOOT_RNG_SEED, &d);
    run_diff_print(stdout, &a, &b, &d, replicates, RUN_DIFF_BOOT_RNG_SEED);
    run_diff_free(&d);
    diff_side_free(&a);
    diff_side_free(&b);
    return 0;
}
