/* The loss-mode effect at every training setting the runs hold: for each architecture, every pair of configurations
 * (groups of seeds, report_runs.h) whose recorded configs differ in the loss mode alone (report_comparable.h) is one
 * row, with the settings that distinguish it from the paper's pair (train.steps, train.lr, ...), and the paired
 * effect of the answer-only loss on accuracy and on the answer loss with its verdict interval (report_contrast: the
 * same statistics as the paper's claims). An answer-only configuration without such a partner is listed beside the Q+A
 * configuration that differs from it in the fewest other keys, as "not comparable", naming them: a difference there
 * is not an effect of the loss mode. Two plots show the effect against the budget (train.steps) per architecture,
 * and a second table the interaction at every setting with comparable pairs of both architectures. This is how a loss-mode verdict is read at the budget and learning rate at which it holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/base/svg.h"
#include "pipeline/report/report_comparable.h"
#include "pipeline/report/report_sections.h"

static const cJSON *group_config(const RunGroup *g) { return g->runs[0]->res.config; }

/* A config value as text ("-" when absent), e.g. train.steps. */
static void config_value(const RunGroup *g, const char *section, const char *key, char *out, size_t cap) {
    const cJSON *v = report_group_config_item(g, section, key);
    if (cJSON_IsNumber(v)) snprintf(out, cap, "%g", v->valuedouble);
    else snprintf(out, cap, "-");
}

static double config_number(const RunGroup *g, const char *section, const char *key) {
    const cJSON *v = report_group_config_item(g, section, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* "-2.1 [-4.0, -0.3]" in points (accuracy) or nats: the estimate and the verdict interval (the union of the
 * bootstrap and the t-interval; with one seed only the bootstrap, marked). */
static void fmt_effect(char *out, size_t cap, const Contrast *c, double scale, const char *unit) {
    if (!c->ok) {
        snprintf(out, cap, "not computed: %s", c->why);
        return;
    }
    bool verdict = isfinite(c->verdict_lo) && isfinite(c->verdict_hi);
    double lo = verdict ? c->verdict_lo : c->boot.lo, hi = verdict ? c->verdict_hi : c->boot.hi;
    snprintf(out, cap, "%+.*f%s [%+.*f, %+.*f]%s", scale == 100 ? 1 : 2, scale * c->boot.estimate, unit,
             scale == 100 ? 1 : 2, scale * lo, scale == 100 ? 1 : 2, scale * hi,
             verdict ? (lo > 0 || hi < 0 ? " (excludes 0)" : " (contains 0)") : " (one seed: examples only)");
}

static void contrast_pair(const RunGroup *answer, const RunGroup *qa, Quantity q, Contrast *out) {
    const RunGroup *groups[2] = {answer, qa};
    const double weights[2] = {+1, -1};
    report_contrast(groups, weights, 2, SCOPE_ALL, q, out);
}

typedef struct {
    const RunGroup *answer, *qa;
    int n_other;          /* keys besides the loss mode in which they differ (0: a comparable pair) */
    char other[1024];
    double steps, lr;
    Contrast acc, loss;
} SettingRow;

static int cmp_rows(const void *pa, const void *pb) {
    const SettingRow *a = pa, *b = pb;
    int c = strcmp(a->answer->arch, b->answer->arch);
    if (c) return c;
    if (a->steps != b->steps) return a->steps < b->steps ? -1 : 1;
    if (a->lr != b->lr) return a->lr < b->lr ? -1 : 1;
    return a->n_other - b->n_other;
}

/* One row per answer-only group of in: its partner is the Q+A group of its architecture with the fewest other
 * differing keys (ties: the first in report order, the primary group first). */
static SettingRow *setting_rows(const ReportInput *in, int *n_out) {
    SettingRow *rows = xcalloc((size_t)in->n_groups + 1, sizeof *rows);
    int n = 0;
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *a = &in->groups[i];
        if (strcmp(a->loss_mode, "answer_only") != 0 || !group_config(a)) continue;
        SettingRow best = {.n_other = -1};
        for (int j = 0; j < in->n_groups; j++) {
            const RunGroup *q = &in->groups[j];
            if (strcmp(q->loss_mode, "qa") != 0 || strcmp(q->arch, a->arch) != 0 || !group_config(q)) continue;
            char other[1024];
            int k = report_pair_confounds(a, q, other, sizeof other);
            if (best.n_other < 0 || k < best.n_other) {
                best.qa = q;
                best.n_other = k;
                snprintf(best.other, sizeof best.other, "%s", other);
            }
        }
        if (!best.qa) continue;
        best.answer = a;
        best.steps = config_number(a, "train", "steps");
        best.lr = config_number(a, "train", "lr");
        if (best.n_other == 0) {
            contrast_pair(a, best.qa, QUANTITY_CORRECT, &best.acc);
            contrast_pair(a, best.qa, QUANTITY_ANSWER_LOSS, &best.loss);
        }
        rows[n++] = best;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    *n_out = n;
    return rows;
}

static const char *arch_name(const char *arch) { return strcmp(arch, "moeut") == 0 ? "MoEUT" : "Transformer"; }

/* The effect on one quantity (accuracy in points, or the answer loss in nats) against the budget, one line per
 * architecture, for the comparable rows; into svg. Returns the number of points. */
static int settings_svg(StrBuf *svg, const SettingRow *rows, int n, Quantity q) {
    SvgIntervalSeries series[2];
    double *x = xcalloc((size_t)n * 4 + 1, sizeof *x), *y = x + n, *lo = y + n, *hi = lo + n;
    const bool acc = q == QUANTITY_CORRECT;
    const double scale = acc ? 100 : 1;
    int ns = 0, at = 0;
    const char *archs[2] = {"dense", "moeut"};
    for (int k = 0; k < 2; k++) {
        int start = at;
        for (int i = 0; i < n; i++) {
            const SettingRow *r = &rows[i];
            const Contrast *c = acc ? &r->acc : &r->loss;
            if (r->n_other || !c->ok || strcmp(r->answer->arch, archs[k]) != 0) continue;
            bool verdict = isfinite(c->verdict_lo);
            x[at] = r->steps;
            y[at] = scale * c->boot.estimate;
            lo[at] = scale * (verdict ? c->verdict_lo : c->boot.lo);
            hi[at] = scale * (verdict ? c->verdict_hi : c->boot.hi);
            at++;
        }
        if (at > start) series[ns++] = (SvgIntervalSeries){arch_name(archs[k]), x + start, y + start, lo + start,
                                                           hi + start, at - start};
    }
    if (at >= 2) {
        IntervalPlotStyle st = {acc ? "Answer-only minus Q+A accuracy against the training budget"
                                    : "Answer-only minus Q+A answer loss against the training budget",
                                "train.steps", acc ? "accuracy effect (points)" : "answer-loss effect (nats)", 1};
        svg_interval_plot(svg, series, ns, &st);
    }
    free(x);
    return at;
}

static void settings_plot(Doc *d, const SettingRow *rows, int n) {
    StrBuf svg[2];
    sb_init(&svg[0]);
    sb_init(&svg[1]);
    if (settings_svg(&svg[0], rows, n, QUANTITY_CORRECT) >= 2 &&
        settings_svg(&svg[1], rows, n, QUANTITY_ANSWER_LOSS) >= 2) {
        const char *files[2] = {"loss_mode_by_budget.svg", "loss_mode_by_budget_answer_loss.svg"};
        const char *heads[2] = {"accuracy", "answer loss"};
        const StrBuf *svgp[2] = {&svg[0], &svg[1]};
        doc_figure_row(d, 2, files, svgp, heads,
                       "The answer-only loss's effect at each training budget, per architecture, for the comparable "
                       "pairs of the table (95% verdict interval; log axis): on pooled accuracy in points (left) and "
                       "on the mean answer loss in nats (right; below 0: answer-only has the lower loss).");
    }
    sb_free(&svg[0]);
    sb_free(&svg[1]);
}

/* The interaction at every setting that has a comparable pair of both architectures (the same train.steps and
 * train.lr, and the four configurations comparable as the paper's four are: report_claim_comparable), with its
 * decomposition into the two rows' effects. The paper's setting is one of them, judged in the verdicts; the others
 * say whether "answer-only helps MoEUT more" holds at other budgets and learning rates, and for which reason. */
static void interaction_table(Doc *d, const SettingRow *rows, int n) {
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const SettingRow *dn = &rows[i];
        if (dn->n_other || strcmp(dn->answer->arch, "dense") != 0 || !dn->acc.ok || !dn->loss.ok) continue;
        for (int j = 0; j < n; j++) {
            const SettingRow *me = &rows[j];
            if (me->n_other || strcmp(me->answer->arch, "moeut") != 0 || !me->acc.ok || !me->loss.ok) continue;
            if (!(me->steps == dn->steps || (isnan(me->steps) && isnan(dn->steps)))) continue;
            if (!(me->lr == dn->lr || (isnan(me->lr) && isnan(dn->lr)))) continue;
            const RunGroup *g[4] = {me->answer, me->qa, dn->answer, dn->qa};
            char why[1024];
            if (!report_claim_comparable(g, 4, why, sizeof why)) continue;
            static const double WEIGHTS[4] = {1, -1, -1, 1};
            Contrast both[2];
            report_contrast(g, WEIGHTS, 4, SCOPE_ALL, QUANTITY_CORRECT, &both[0]);
            report_contrast(g, WEIGHTS, 4, SCOPE_ALL, QUANTITY_ANSWER_LOSS, &both[1]);
            if (!shown++) {
                doc_para(d, "The interaction, (moeut_answer - moeut_qa) - (dense_answer - dense_qa), at every setting "
                            "with a comparable pair of each architecture, paired by seed on every evaluation example "
                            "(the paper's claim: answer-only helps MoEUT more, i.e. above 0 on accuracy and below 0 "
                            "on the answer loss). Its two parts are the rows of the table above; the last columns say "
                            "which of them carries it, by the direction rule on each verdict interval.");
                /* The configurations column tells apart two rows of one budget and learning rate (two model
                 * variants of an architecture, say). */
                const char *h[8] = {"train.steps", "train.lr", "answer-only configurations (dense / MoEUT)", "seeds",
                                    "interaction on accuracy (points)", "interaction on the answer loss (nats)",
                                    "carried by (accuracy)", "carried by (answer loss)"};
                doc_table_begin(d, 8, h);
            }
            char steps[32], lr[32], names[400], seeds[16], acc[1200], loss[1200];
            config_value(dn->answer, "train", "steps", steps, sizeof steps);
            config_value(dn->answer, "train", "lr", lr, sizeof lr);
            snprintf(names, sizeof names, "%s / %s", dn->answer->label, me->answer->label);
            snprintf(seeds, sizeof seeds, "%d", both[1].ok ? both[1].n_seeds : 0);
            fmt_effect(acc, sizeof acc, &both[0], 100, "");
            fmt_effect(loss, sizeof loss, &both[1], 1, "");
            const char *cells[8] = {steps, lr, names, seeds, acc, loss,
                                    both[0].ok ? report_interaction_carrier(&dn->acc, &me->acc, &both[0]) : "-",
                                    both[1].ok ? report_interaction_carrier(&dn->loss, &me->loss, &both[1]) : "-"};
            doc_table_row(d, 8, cells, false);
        }
    }
    if (shown) doc_table_end(d);
}

void section_loss_mode_settings(Doc *d, const ReportInput *in) {
    int n;
    SettingRow *rows = setting_rows(in, &n);
    int comparable = 0;
    for (int i = 0; i < n; i++) comparable += rows[i].n_other == 0;
    /* Only worth a section when there is more than the paper's one setting per architecture. */
    if (n <= 2 && comparable == n) {
        free(rows);
        return;
    }
    doc_heading(d, 2, "Loss-mode effect by training budget and learning rate");
    doc_para(d, "Every answer-only configuration among the runs against the Q+A configuration of its architecture "
                "that differs from it in the fewest other keys. Where the loss mode is the only difference, the "
                "effect (answer-only minus Q+A, paired by seed on every evaluation example) is computed as for the "
                "paper's claims; a loss-mode verdict holds at the budget and learning rate of its row. Where other "
                "keys differ too, the row says \"not comparable\" and names them: the two configurations' own numbers "
                "are shown, but their difference is not an effect of the loss mode.");
    const char *h[8] = {"architecture", "train.steps", "train.lr", "answer-only / Q+A configuration", "seeds",
                        "accuracy effect (points)", "answer-loss effect (nats)", "comparable"};
    doc_table_begin(d, 8, h);
    for (int i = 0; i < n; i++) {
        SettingRow *r = &rows[i];
        char steps[32], lr[32], names[400], seeds[64], acc[1200], loss[1200], comp[1100];
        config_value(r->answer, "train", "steps", steps, sizeof steps);
        config_value(r->answer, "train", "lr", lr, sizeof lr);
        snprintf(names, sizeof names, "%s / %s", r->answer->label, r->qa->label);
        if (r->n_other == 0) {
            snprintf(seeds, sizeof seeds, "%d", r->acc.ok ? r->acc.n_seeds : 0);
            fmt_effect(acc, sizeof acc, &r->acc, 100, "");
            fmt_effect(loss, sizeof loss, &r->loss, 1, "");
            snprintf(comp, sizeof comp, "yes");
        } else {
            SeedSummary sa, sq, la, lq;
            report_seed_summary(r->answer, METRIC_MEAN, &sa);
            report_seed_summary(r->qa, METRIC_MEAN, &sq);
            report_seed_summary(r->answer, METRIC_ANSWER_LOSS, &la);
            report_seed_summary(r->qa, METRIC_ANSWER_LOSS, &lq);
            snprintf(seeds, sizeof seeds, "%d / %d", sa.n, sq.n);
            snprintf(acc, sizeof acc, "%.1f%% / %.1f%% (levels, no effect)", 100 * sa.mean, 100 * sq.mean);
            snprintf(loss, sizeof loss, "%.2f / %.2f (levels, no effect)", la.mean, lq.mean);
            snprintf(comp, sizeof comp, "not comparable: %s", r->other);
        }
        const char *cells[8] = {arch_name(r->answer->arch), steps, lr, names, seeds, acc, loss, comp};
        doc_table_row(d, 8, cells, false);
    }
    doc_table_end(d);
    settings_plot(d, rows, n);
    interaction_table(d, rows, n);
    free(rows);
}
