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

/* Whether the run's predictions.jsonl lists exactly the examples its result record counts (per set: the number and
 * the correct ones), so that an interval over those examples is about the numbers shown. Returns the sets that have
 * examples, or 0 with *why set. */
static int predictions_match_record(const RunData *r, long per_set[EVAL_N_SETS], const char **why) {
    if (!r->has_predictions || r->pred.n == 0) {
        *why = "no predictions.jsonl";
        return 0;
    }
    long right[EVAL_N_SETS] = {0};
    for (int k = 0; k < EVAL_N_SETS; k++) per_set[k] = 0;
    for (long i = 0; i < r->pred.n; i++) {
        per_set[r->pred.set[i]]++;
        right[r->pred.set[i]] += r->pred.correct[i];
    }
    int sets = 0;
    for (int k = 0; k < EVAL_N_SETS; k++) {
        const SetEval *se = &r->res.evaluation.sets[k];
        if (per_set[k] != se->n || right[k] != se->correct) {
            *why = "predictions.jsonl disagrees with result.json";
            return 0;
        }
        sets += per_set[k] > 0;
    }
    if (!sets) *why = "no examples";
    return sets;
}

/* A group's metric (METRIC_MEAN: the mean of the two sets' accuracies; METRIC_ANSWER_LOSS: the mean answer loss over
 * every example of both sets) and its 95% interval: across seeds with >= 2 seeds; with one, a bootstrap over the
 * run's evaluation examples (predictions.jsonl), each example weighted so that the statistic is the metric (an
 * accuracy example by half the inverse of its set's size). Returns "seeds" or "examples", or why there is no
 * interval. */
static const char *group_interval(const RunGroup *g, Metric m, double *mean, double *lo, double *hi) {
    SeedSummary s;
    report_seed_summary(g, m, &s);
    *mean = s.mean;
    *lo = *hi = NAN;
    if (s.n == 0) return "no result";
    if (s.n >= 2) {
        *lo = s.lo;
        *hi = s.hi;
        return "seeds";
    }
    const RunData *r = g->runs[0];
    long per_set[EVAL_N_SETS];
    const char *why = NULL;
    const int sets = predictions_match_record(r, per_set, &why);
    if (!sets) return why;
    const bool acc = m == METRIC_MEAN;
    double *v = xmalloc((size_t)r->pred.n * sizeof *v), sum = 0;
    for (long i = 0; i < r->pred.n; i++) {
        v[i] = acc ? r->pred.correct[i] * (double)r->pred.n / ((double)sets * (double)per_set[r->pred.set[i]])
                   : r->pred.answer_loss[i];
        sum += v[i];
    }
    /* the losses' mean must be the record's (the counts above cannot tell a stale file by its losses) */
    if (!acc && fabs(sum / (double)r->pred.n - s.mean) > 1e-6 * fmax(1.0, fabs(s.mean))) {
        free(v);
        return "predictions.jsonl disagrees with result.json";
    }
    BootstrapResult b;
    const int rc = hierarchical_bootstrap_mean(v, 1, r->pred.n, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED, &b);
    free(v);
    if (rc) return "no examples";
    *lo = fmax(b.lo, 0.0); /* a fraction, or a loss: never below 0 */
    *hi = acc ? fmin(b.hi, 1.0) : b.hi;
    return "examples";
}

/* The group of g[0..n) with the lowest mean answer loss over its seeds: the best point of a sweep (-1 when none has
 * an answer loss). Ties go to the first in table order. */
static int best_group(const RunGroup *const *g, int n) {
    int best = -1;
    double best_loss = INFINITY;
    for (int i = 0; i < n; i++) {
        SeedSummary s;
        report_seed_summary(g[i], METRIC_ANSWER_LOSS, &s);
        if (s.n > 0 && s.mean < best_loss) {
            best_loss = s.mean;
            best = i;
        }
    }
    return best;
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

/* The file name of a sweep plot: sweep_<config>_<key><suffix>.svg, with only [A-Za-z0-9._-] (a config key may hold
 * any character). */
static void sweep_file(char *out, size_t cap, const char *run_config, const char *key, const char *suffix) {
    snprintf(out, cap, "sweep_%s_%s%s.svg", run_config, key, suffix);
    for (char *c = out; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("._-", *c)))
            *c = '_';
}

/* One quantity (y with its interval) against the numeric key `row` of the diff, one line per combination of the other
 * differing keys, as an SVG in svg. */
static void sweep_svg(StrBuf *svg, const char *run_config, int n, const ConfigDiff *diff, int row, const double *y,
                      const double *lo, const double *hi, const char *quantity, const char *y_label, bool *log_x) {
    SweepPoint *p = xcalloc((size_t)n + 1, sizeof *p);
    int k = 0;
    double xmin = INFINITY, xmax = -INFINITY;
    for (int i = 0; i < n; i++) {
        double x;
        if (!is_number_text(diff->rows[row].values[i], &x) || !isfinite(y[i])) continue;
        p[k] = (SweepPoint){x, y[i], lo[i], hi[i], ""};
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
    *log_x = xmin > 0 && xmax >= 10 * xmin;
    char title[256];
    snprintf(title, sizeof title, "%s: %s against %s", run_config, quantity, diff->rows[row].key);
    IntervalPlotStyle st = {title, diff->rows[row].key, y_label, *log_x};
    svg_interval_plot(svg, series, ns, &st);
    free(series);
    free(xs);
    free(ys);
    free(los);
    free(his);
    free(p);
}

/* The mean accuracy and the mean answer loss against the numeric key `row`, side by side: accuracy alone is noise
 * when a few examples are right, while the answer loss moves long before whole answers become exact. */
static void sweep_plot(Doc *d, const char *run_config, int n, const ConfigDiff *diff, int row, const double *acc,
                       const double *acc_lo, const double *acc_hi, const double *loss, const double *loss_lo,
                       const double *loss_hi) {
    StrBuf svg[2];
    bool log_x = false;
    char files[2][512], caption[1024];
    sb_init(&svg[0]);
    sb_init(&svg[1]);
    sweep_svg(&svg[0], run_config, n, diff, row, acc, acc_lo, acc_hi, "accuracy", "mean accuracy (fraction)", &log_x);
    sweep_svg(&svg[1], run_config, n, diff, row, loss, loss_lo, loss_hi, "answer loss", "mean answer loss (nats)",
              &log_x);
    sweep_file(files[0], sizeof files[0], run_config, diff->rows[row].key, "");
    sweep_file(files[1], sizeof files[1], run_config, diff->rows[row].key, "_answer_loss");
    snprintf(caption, sizeof caption, "%s against %s%s: the mean accuracy of the two sets (left) and the mean answer "
                                      "loss over every evaluation example (right, lower is better), each with the 95%% "
                                      "interval of the table (across seeds, or over the examples with one seed); one "
                                      "line per combination of the other keys that differ.",
             run_config, diff->rows[row].key, log_x ? " (log axis)" : "");
    const char *filep[2] = {files[0], files[1]}, *heads[2] = {"accuracy", "answer loss"};
    const StrBuf *svgp[2] = {&svg[0], &svg[1]};
    doc_figure_row(d, 2, filep, svgp, heads, caption);
    sb_free(&svg[0]);
    sb_free(&svg[1]);
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
    h[3 + diff.n_rows] = "mean answer loss (nats) [95% interval]";
    h[4 + diff.n_rows] = "final train loss";
    h[5 + diff.n_rows] = "run directories";
    doc_table_begin(d, cols, h);
    double *acc = xcalloc((size_t)n, sizeof *acc), *lo = xcalloc((size_t)n, sizeof *lo);
    double *hi = xcalloc((size_t)n, sizeof *hi), *ls = xcalloc((size_t)n, sizeof *ls);
    double *ls_lo = xcalloc((size_t)n, sizeof *ls_lo), *ls_hi = xcalloc((size_t)n, sizeof *ls_hi);
    const int best = best_group(g, n);
    for (int i = 0; i < n; i++) {
        char variant[160], seeds[300], a[128], loss[128], fl[32], dirs[2048] = "";
        snprintf(variant, sizeof variant, "%s%s%s", g[i]->variant,
                 g[i]->primary ? " (current)" : (g[i]->current ? " (current, not pooled)" : " (@VARIANT directory)"),
                 i == best ? " (lowest answer loss)" : "");
        char sl[256];
        seed_list(g[i], sl, sizeof sl);
        snprintf(seeds, sizeof seeds, "%d (%s)", g[i]->n, sl);
        const char *kind = group_interval(g[i], METRIC_MEAN, &acc[i], &lo[i], &hi[i]);
        if (strcmp(kind, "seeds") != 0 && strcmp(kind, "examples") != 0)
            snprintf(a, sizeof a, "%.1f%% (no interval: %s)", 100 * acc[i], kind);
        else
            snprintf(a, sizeof a, "%.1f%% [%.1f, %.1f] (%s)", 100 * acc[i], 100 * lo[i], 100 * hi[i],
                     strcmp(kind, "seeds") == 0 ? "across seeds" : "over examples, 1 seed");
        kind = group_interval(g[i], METRIC_ANSWER_LOSS, &ls[i], &ls_lo[i], &ls_hi[i]);
        if (!isfinite(ls[i])) snprintf(loss, sizeof loss, "-");
        else if (strcmp(kind, "seeds") != 0 && strcmp(kind, "examples") != 0)
            snprintf(loss, sizeof loss, "%.3f", ls[i]);
        else snprintf(loss, sizeof loss, "%.3f [%.3f, %.3f]", ls[i], ls_lo[i], ls_hi[i]);
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
        if (numeric == n && distinct) sweep_plot(d, run_config, n, &diff, r, acc, lo, hi, ls, ls_lo, ls_hi);
    }
    free(acc);
    free(lo);
    free(hi);
    free(ls);
    free(ls_lo);
    free(ls_hi);
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
                        "the mean of the two sets' accuracies, and the mean answer loss over every evaluation example "
                        "(summed answer-token cross-entropy, nats), each with its 95%% interval: the t-interval "
                        "across seeds with >= 2 seeds, else a bootstrap over the run's evaluation examples (%d "
                        "replicates, RNG seed %llu; from predictions.jsonl). Only the current variant enters the verdicts. A plot per "
                        "numeric key that differs: accuracy and the mean answer loss against its value (log axis when the "
                        "values are positive and span 10x or more), one line per combination of the other differing "
                        "keys. The configuration with the lowest mean answer loss is marked: the best point of the "
                        "sweep.",
                     REPORT_BOOT_REPLICATES, (unsigned long long)REPORT_BOOT_RNG_SEED);
        }
        const RunGroup **g;
        const int n = config_groups(in, cfg, &g);
        variants_of(d, cfg, g, n);
        free(g);
    }
}

bool report_best_sweep_points(const ReportInput *in, char *out, size_t cap) {
    out[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < in->n_groups && len < cap; i++) {
        const char *cfg = in->groups[i].run_config;
        bool first = true;
        for (int j = 0; j < i; j++) first &= strcmp(in->groups[j].run_config, cfg) != 0;
        if (!first || report_config_variants(in->groups, in->n_groups, cfg) < 2) continue;
        const RunGroup **g;
        const int n = config_groups(in, cfg, &g);
        const int b = best_group(g, n);
        if (b < 0) {
            free(g);
            continue;
        }
        ConfigDiff diff;
        groups_diff(g, n, &diff);
        char settings[1024] = "";
        size_t sl = 0;
        for (int r = 0; r < diff.n_rows && sl < sizeof settings; r++)
            sl += (size_t)snprintf(settings + sl, sizeof settings - sl, "%s%s=%s", r ? ", " : "", diff.rows[r].key,
                                   diff.rows[r].values[b] ? diff.rows[r].values[b] : "absent");
        if (!settings[0]) snprintf(settings, sizeof settings, "variant %s", g[b]->variant);
        SeedSummary loss, acc;
        report_seed_summary(g[b], METRIC_ANSWER_LOSS, &loss);
        report_seed_summary(g[b], METRIC_MEAN, &acc);
        len += (size_t)snprintf(out + len, cap - len,
                                "%s%s at %s: mean answer loss %.3f nats, accuracy %.1f%% (%d seed%s; the lowest of its "
                                "%d configurations)",
                                len ? "; " : "", cfg, settings, loss.mean, 100 * acc.mean, loss.n, loss.n == 1 ? "" : "s",
                                n);
        config_diff_free(&diff);
        free(g);
    }
    return out[0] != '\0';
}
