/* Report sections on the variants of a run config (see report_sections.h): the line that says which seeds were not
 * pooled because their configs differ, and the "Variants and sweeps" table and plots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/records/config_diff.h"
#include "pipeline/base/log.h"
#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"

/* The groups of one run config, primary first, then the other current ones, then those kept aside (each in report
 * order). Returns the count (caller frees *out). */
static int config_groups(const ReportInput *in, const char *run_config, const RunGroup ***out) {
    const RunGroup **g = xcalloc((size_t)in->n_groups + 1, sizeof *g);
    int k = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < in->n_groups; i++) {
            const RunGroup *x = &in->groups[i];
            if (strcmp(x->run_config, run_config) != 0) continue;
            const int rank = x->primary ? 0 : (x->current ? 1 : 2);
            if (rank == pass) g[k++] = x;
        }
    *out = g;
    return k;
}

/* A "comment" anywhere, which the variant key ignores (run_identity.h), is not a difference either. */
static bool is_comment_key(const char *key) {
    const char *last = strrchr(key, '.');
    return strcmp(last ? last + 1 : key, "comment") == 0;
}

/* The config keys whose values differ among the groups' recorded configs (seed and description left out). */
static void groups_diff(const RunGroup *const *g, int n, ConfigDiff *diff) {
    const cJSON **cfg = xcalloc((size_t)n + 1, sizeof *cfg);
    for (int i = 0; i < n; i++) cfg[i] = g[i]->runs[0]->res.config;
    const char *skip[] = {"description", "train.seed", NULL};
    config_diff((const cJSON *const *)cfg, n, skip, diff);
    int k = 0;
    for (int r = 0; r < diff->n_rows; r++) {
        if (is_comment_key(diff->rows[r].key)) { /* leaves the table: free its strings here */
            free(diff->rows[r].key);
            for (int c = 0; c < diff->n_configs; c++) free(diff->rows[r].values[c]);
            free(diff->rows[r].values);
            continue;
        }
        diff->rows[k++] = diff->rows[r];
    }
    diff->n_rows = k;
    free(cfg);
}

/* "1" or "2, 3" */
static void seed_list(const RunGroup *g, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < g->n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%ld", i ? ", " : "", g->runs[i]->seed);
}

/* "train.lr differs (0.001 / 0.002), train.steps differs (100 / 200)" over the groups in order. */
static void diff_text(const ConfigDiff *diff, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < diff->n_rows && len < cap; r++) {
        len += (size_t)snprintf(out + len, cap - len, "%s%s differs (", r ? ", " : "", diff->rows[r].key);
        for (int c = 0; c < diff->n_configs && len < cap; c++)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", c ? " / " : "",
                                    diff->rows[r].values[c] ? diff->rows[r].values[c] : "absent");
        if (len < cap) len += (size_t)snprintf(out + len, cap - len, ")");
    }
    if (!out[0]) snprintf(out, cap, "the recorded configs differ");
}

bool report_split_note(const ReportInput *in, const char *run_config, char *note, size_t cap, char *verdict_note,
                       size_t vcap) {
    const RunGroup **all;
    const int n_all = config_groups(in, run_config, &all);
    int n = 0;
    while (n < n_all && all[n]->current) n++; /* the current groups come first */
    if (n < 2 || !all[0]->primary) {
        free(all);
        return false;
    }
    ConfigDiff diff;
    groups_diff(all, n, &diff);
    char why[2048], seeds[1024] = "", left_out[1024] = "", own[256];
    diff_text(&diff, why, sizeof why);
    bool several = false;
    for (int i = 0; i < n; i++) several |= all[i]->n > 1;
    size_t len = 0, lo = 0;
    for (int i = 0; i < n; i++) {
        char s[256];
        seed_list(all[i], s, sizeof s);
        const char *sep = i == 0 ? "" : (i == n - 1 ? " and " : ", ");
        len += (size_t)snprintf(seeds + len, sizeof seeds - len, several ? "%s(%s)" : "%s%s", sep, s);
        if (i > 0) lo += (size_t)snprintf(left_out + lo, sizeof left_out - lo, "%s%s", i > 1 ? ", " : "", s);
        if (len >= sizeof seeds || lo >= sizeof left_out) break;
    }
    seed_list(all[0], own, sizeof own);
    snprintf(note, cap, "%s: seeds %s not pooled: %s", run_config, seeds, why);
    snprintf(verdict_note, vcap, "%s: the verdicts use seed%s %s (the variant of runs/EXP/%s); seed%s %s left out: %s",
             run_config, all[0]->n == 1 ? "" : "s", own, run_config, strchr(left_out, ',') ? "s" : "", left_out,
             why);
    config_diff_free(&diff);
    free(all);
    return true;
}

/* ---------------------------------------------------------------- variants and sweeps ---------------------- */

/* Mean accuracy (the mean of the two sets) of a group and its 95% interval: across seeds with >= 2 seeds; with one,
 * a bootstrap over the run's evaluation examples (predictions.jsonl), each example weighted by half the inverse of
 * its set's size so that the statistic is the mean of the two sets' accuracies. Returns "seeds" or "examples", or
 * why there is no interval. */
static const char *group_accuracy(const RunGroup *g, double *mean, double *lo, double *hi) {
    SeedSummary s;
    report_seed_summary(g, METRIC_MEAN, &s);
    *mean = s.mean;
    *lo = *hi = NAN;
    if (s.n == 0) return "no result";
    if (s.n >= 2) {
        *lo = s.lo;
        *hi = s.hi;
        return "seeds";
    }
    const RunData *r = g->runs[0];
    if (!r->has_predictions || r->pred.n == 0) return "no predictions.jsonl";
    long per_set[EVAL_N_SETS] = {0}, right[EVAL_N_SETS] = {0};
    for (long i = 0; i < r->pred.n; i++) {
        per_set[r->pred.set[i]]++;
        right[r->pred.set[i]] += r->pred.correct[i];
    }
    /* The interval must be about the accuracy shown: the file has to list exactly the record's examples. */
    int sets = 0;
    for (int k = 0; k < EVAL_N_SETS; k++) {
        const SetEval *se = &r->res.evaluation.sets[k];
        if (per_set[k] != se->n || right[k] != se->correct) return "predictions.jsonl disagrees with result.json";
        sets += per_set[k] > 0;
    }
    double *v = xmalloc((size_t)r->pred.n * sizeof *v);
    for (long i = 0; i < r->pred.n; i++)
        v[i] = r->pred.correct[i] * (double)r->pred.n / ((double)sets * (double)per_set[r->pred.set[i]]);
    BootstrapResult b;
    const int rc = hierarchical_bootstrap_mean(v, 1, r->pred.n, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED, &b);
    free(v);
    if (rc) return "no examples";
    *lo = fmax(b.lo, 0.0);
    *hi = fmin(b.hi, 1.0);
    return "examples";
}

static double mean_final_loss(const RunGroup *g) {
    double s = 0;
    for (int i = 0; i < g->n; i++) s += g->runs[i]->res.training.final_train_loss;
    return g->n ? s / g->n : NAN;
}

static bool is_number_text(const char *v, double *x) {
    if (!v) return false;
    char *end;
    *x = strtod(v, &end);
    return end != v && *end == '\0' && isfinite(*x);
}

typedef struct {
    double x, y, lo, hi;
    char line[512];
} SweepPoint;

static int cmp_point(const void *a, const void *b) {
    const SweepPoint *p = a, *q = b;
    int c = strcmp(p->line, q->line);
    return c ? c : (p->x > q->x) - (p->x < q->x);
}

/* Accuracy against the numeric key `row` of the diff, one line per combination of the other differing keys. */
static void sweep_plot(Doc *d, const char *run_config, int n, const ConfigDiff *diff, int row, const double *acc,
                       const double *lo, const double *hi) {
    SweepPoint *p = xcalloc((size_t)n, sizeof *p);
    int k = 0;
    double xmin = INFINITY, xmax = -INFINITY;
    for (int i = 0; i < n; i++) {
        double x;
        if (!is_number_text(diff->rows[row].values[i], &x) || !isfinite(acc[i])) continue;
        p[k] = (SweepPoint){x, acc[i], lo[i], hi[i], ""};
        size_t len = 0;
        for (int r = 0; r < diff->n_rows; r++) {
            if (r == row) continue;
            const char *v = diff->rows[r].values[i];
            len += (size_t)snprintf(p[k].line + len, sizeof p[k].line - len, "%s%s=%s", len ? ", " : "",
                                    diff->rows[r].key, v ? v : "absent");
            if (len >= sizeof p[k].line) break;
        }
        xmin = fmin(xmin, x);
        xmax = fmax(xmax, x);
        k++;
    }
    qsort(p, (size_t)k, sizeof *p, cmp_point);
    SvgIntervalSeries *series = xcalloc((size_t)k + 1, sizeof *series);
    double *xs = xcalloc((size_t)k + 1, sizeof *xs), *ys = xcalloc((size_t)k + 1, sizeof *ys);
    double *los = xcalloc((size_t)k + 1, sizeof *los), *his = xcalloc((size_t)k + 1, sizeof *his);
    int ns = 0;
    for (int i = 0; i < k; i++) {
        xs[i] = p[i].x;
        ys[i] = p[i].y;
        los[i] = p[i].lo;
        his[i] = p[i].hi;
        if (i == 0 || strcmp(p[i].line, p[i - 1].line) != 0)
            series[ns++] = (SvgIntervalSeries){p[i].line[0] ? p[i].line : run_config, &xs[i], &ys[i], &los[i],
                                               &his[i], 0};
        series[ns - 1].n++;
    }
    const bool log_x = xmin > 0 && xmax >= 10 * xmin;
    char title[256], file[512], caption[1024];
    snprintf(title, sizeof title, "%s: accuracy against %s", run_config, diff->rows[row].key);
    snprintf(file, sizeof file, "sweep_%s_%s.svg", run_config, diff->rows[row].key);
    for (char *c = file; *c; c++) /* a config key may hold any character; the file name only these */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._-", *c)))
            *c = '_';
    IntervalPlotStyle st = {title, diff->rows[row].key, "mean accuracy (fraction)", log_x};
    StrBuf svg;
    sb_init(&svg);
    svg_interval_plot(&svg, series, ns, &st);
    snprintf(caption, sizeof caption, "%s: mean accuracy of the two sets against %s%s, with the 95%% interval of the "
                                      "table (across seeds, or over the examples with one seed); one line per "
                                      "combination of the other keys that differ.",
             run_config, diff->rows[row].key, log_x ? " (log axis)" : "");
    doc_figure(d, file, &svg, caption);
    sb_free(&svg);
    free(series);
    free(xs);
    free(ys);
    free(los);
    free(his);
    free(p);
}

static void variants_of(Doc *d, const char *run_config, const RunGroup *const *g, int n) {
    ConfigDiff diff;
    groups_diff(g, n, &diff);
    doc_heading(d, 3, run_config);
    const int cols = 6 + diff.n_rows;
    const char **h = xcalloc((size_t)cols, sizeof *h);
    const char **row = xcalloc((size_t)cols, sizeof *row);
    h[0] = "variant";
    for (int r = 0; r < diff.n_rows; r++) h[1 + r] = diff.rows[r].key;
    h[1 + diff.n_rows] = "seeds";
    h[2 + diff.n_rows] = "mean accuracy [95% interval]";
    h[3 + diff.n_rows] = "mean answer loss (nats)";
    h[4 + diff.n_rows] = "final train loss";
    h[5 + diff.n_rows] = "run directories";
    doc_table_begin(d, cols, h);
    double *acc = xcalloc((size_t)n, sizeof *acc), *lo = xcalloc((size_t)n, sizeof *lo);
    double *hi = xcalloc((size_t)n, sizeof *hi);
    for (int i = 0; i < n; i++) {
        char variant[128], seeds[300], a[128], loss[32], fl[32], dirs[2048] = "";
        snprintf(variant, sizeof variant, "%s%s", g[i]->variant,
                 g[i]->primary ? " (current)" : (g[i]->current ? " (current, not pooled)" : " (@VARIANT directory)"));
        char sl[256];
        seed_list(g[i], sl, sizeof sl);
        snprintf(seeds, sizeof seeds, "%d (%s)", g[i]->n, sl);
        const char *kind = group_accuracy(g[i], &acc[i], &lo[i], &hi[i]);
        if (strcmp(kind, "seeds") != 0 && strcmp(kind, "examples") != 0)
            snprintf(a, sizeof a, "%.1f%% (no interval: %s)", 100 * acc[i], kind);
        else
            snprintf(a, sizeof a, "%.1f%% [%.1f, %.1f] (%s)", 100 * acc[i], 100 * lo[i], 100 * hi[i],
                     strcmp(kind, "seeds") == 0 ? "across seeds" : "over examples, 1 seed");
        SeedSummary ls;
        report_seed_summary(g[i], METRIC_ANSWER_LOSS, &ls);
        if (ls.n) snprintf(loss, sizeof loss, "%.3f", ls.mean);
        else snprintf(loss, sizeof loss, "-");
        snprintf(fl, sizeof fl, "%.4f", mean_final_loss(g[i]));
        size_t len = 0;
        for (int s = 0; s < g[i]->n && len < sizeof dirs; s++)
            len += (size_t)snprintf(dirs + len, sizeof dirs - len, "%s%s", s ? ", " : "", g[i]->runs[s]->name);
        row[0] = variant;
        for (int r = 0; r < diff.n_rows; r++) row[1 + r] = diff.rows[r].values[i] ? diff.rows[r].values[i] : "";
        row[1 + diff.n_rows] = seeds;
        row[2 + diff.n_rows] = a;
        row[3 + diff.n_rows] = loss;
        row[4 + diff.n_rows] = fl;
        row[5 + diff.n_rows] = dirs;
        doc_table_row(d, cols, row, false);
    }
    doc_table_end(d);
    for (int r = 0; r < diff.n_rows; r++) {
        int numeric = 0;
        double x, first = NAN;
        bool distinct = false;
        for (int i = 0; i < n; i++)
            if (is_number_text(diff.rows[r].values[i], &x)) {
                numeric++;
                if (isnan(first)) first = x;
                else distinct |= x != first;
            }
        if (numeric == n && distinct) sweep_plot(d, run_config, n, &diff, r, acc, lo, hi);
    }
    free(acc);
    free(lo);
    free(hi);
    free(h);
    free(row);
    config_diff_free(&diff);
}

void section_variants(Doc *d, const ReportInput *in) {
    int shown = 0;
    for (int i = 0; i < in->n_groups; i++) {
        const char *cfg = in->groups[i].run_config;
        bool first = true;
        for (int j = 0; j < i; j++) first &= strcmp(in->groups[j].run_config, cfg) != 0;
        if (!first || report_config_variants(in->groups, in->n_groups, cfg) < 2) continue;
        if (!shown++) {
            doc_heading(d, 2, "Variants and sweeps");
            doc_para(d, "Run configs trained in more than one configuration: the current one (runs/EXP/CONFIG and its "
                        "seeds), seeds of the current config name whose recorded config differs (not pooled), and "
                        "runs kept under CONFIG@VARIANT (a sweep point, or an earlier variant moved aside when the "
                        "config changed). One row per variant (the 8-hex-digit key of its effective config), a "
                        "column per config key whose value differs among them (empty where absent). Mean accuracy = "
                        "the mean of the two sets' accuracies, with its 95%% interval: the t-interval across seeds "
                        "with >= 2 seeds, else a bootstrap over the run's evaluation examples (%d replicates, RNG "
                        "seed %llu; from predictions.jsonl). Only the current variant enters the verdicts. A plot per "
                        "numeric key that differs: accuracy against its value (log axis when the values are positive "
                        "and span 10x or more), one line per combination of the other differing keys.",
                     REPORT_BOOT_REPLICATES, (unsigned long long)REPORT_BOOT_RNG_SEED);
        }
        const RunGroup **g;
        const int n = config_groups(in, cfg, &g);
        variants_of(d, cfg, g, n);
        free(g);
    }
}
