/* Report sections across seeds: the across-seed table, paired comparisons on the same examples and the verdicts on
 * the paper's claims (see report_sections.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/report/report_comparable.h"
#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"
#include "pipeline/report/verdict.h"

static const RunGroup *kind(const ReportInput *in, const char *arch, const char *mode) {
    return report_find_group(in->groups, in->n_groups, arch, mode);
}

/* "+1.5" in points from a fraction. */
static void fmt_points(char *out, size_t cap, double frac) { snprintf(out, cap, "%+.1f", 100 * frac); }

/* ---------------------------------------------------------------- seeds ------------------------------------ */

/* "12.3% [10.1, 14.5] (12.0, 12.6)" or, with one seed, "12.3% (1 seed)"; scale 100 for accuracies, 1 for depth. */
static void fmt_summary(char *out, size_t cap, const SeedSummary *s, double scale, const char *unit) {
    if (s->n == 0) {
        snprintf(out, cap, "-");
        return;
    }
    const char *fmt = scale == 1 ? "%.3f" : "%.1f";
    char v[64], lo[64], hi[64];
    snprintf(v, sizeof v, fmt, scale * s->mean);
    if (s->n == 1) {
        snprintf(out, cap, "%s%s (1 seed)", v, unit);
        return;
    }
    snprintf(lo, sizeof lo, fmt, scale * s->lo);
    snprintf(hi, sizeof hi, fmt, scale * s->hi);
    int len = snprintf(out, cap, "%s%s [%s, %s] (", v, unit, lo, hi);
    for (int i = 0; i < s->n && len > 0 && (size_t)len < cap; i++) {
        char x[64];
        snprintf(x, sizeof x, fmt, scale * s->values[i]);
        len += snprintf(out + len, cap - (size_t)len, "%s%s", i ? ", " : "", x);
    }
    if (len > 0 && (size_t)len < cap) snprintf(out + len, cap - (size_t)len, ")");
}

void section_seeds(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Across seeds");
    if (in->n_groups == 0) {
        doc_para(d, "No run has a result record.");
        return;
    }
    const int seeds = report_max_seeds(in);
    doc_para(d, "One row per configuration (runs/EXP/RUN is the config's own seed, runs/EXP/RUN.seed<S> seed S; seeds "
                "whose recorded configs differ, and runs under RUN@VARIANT, get rows of their own, labelled "
                "RUN@<variant key>, as they are not seeds of one configuration). "
                "Each cell: the mean over seeds, the 95%% t-interval for the mean across seeds (Student t with n-1 "
                "degrees of freedom: mean +- t * sd / sqrt(n), sd the sample standard deviation of the per-seed "
                "values; accuracies and depth clipped to [0, 1], their range), then the per-seed values in seed "
                "order. It measures seed-to-seed variance of the per-seed figures, each of which also carries "
                "example noise. %s",
             seeds >= 2 ? "A configuration with one seed shows its value only."
                        : "Intervals need >= 2 seeds: with one seed per configuration only the values are shown.");
    const char *h[] = {"run config", "seeds", "headline accuracy", "interpolate", "extrapolate", "mean accuracy",
                       "depth summary", "mean answer loss (nats)"};
    doc_table_begin(d, 8, h);
    for (int g = 0; g < in->n_groups; g++) {
        const RunGroup *grp = &in->groups[g];
        char seedlist[256] = "", cells[6][512];
        for (int i = 0; i < grp->n; i++) {
            size_t len = strlen(seedlist);
            snprintf(seedlist + len, sizeof seedlist - len, "%s%ld", i ? ", " : "", grp->runs[i]->seed);
        }
        const Metric ms[6] = {METRIC_HEADLINE, METRIC_INTERPOLATE, METRIC_EXTRAPOLATE, METRIC_MEAN, METRIC_DEPTH,
                              METRIC_ANSWER_LOSS};
        for (int m = 0; m < 6; m++) {
            SeedSummary s;
            report_seed_summary(grp, ms[m], &s);
            const bool plain = ms[m] == METRIC_DEPTH || ms[m] == METRIC_ANSWER_LOSS;
            fmt_summary(cells[m], sizeof cells[m], &s, plain ? 1 : 100, plain ? "" : "%");
        }
        const char *row[] = {grp->label, seedlist, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]};
        doc_table_row(d, 8, row, false);
    }
    doc_table_end(d);
}

/* ---------------------------------------------------------------- paired comparisons ----------------------- */

typedef struct {
    const char *label;
    const char *arch[4], *mode[4];
    double weight[4];
    int n;
    double paper_points; /* the paper's value of the same contrast on its headline numbers */
} ContrastSpec;

static const ContrastSpec CONTRASTS[5] = {
    {"MoEUT - Transformer, Q+A", {"moeut", "dense"}, {"qa", "qa"}, {1, -1}, 2, 36 - 41},
    {"MoEUT - Transformer, answer-only", {"moeut", "dense"}, {"answer_only", "answer_only"}, {1, -1}, 2, 63 - 48},
    {"answer-only - Q+A, Transformer", {"dense", "dense"}, {"answer_only", "qa"}, {1, -1}, 2, 48 - 41},
    {"answer-only - Q+A, MoEUT", {"moeut", "moeut"}, {"answer_only", "qa"}, {1, -1}, 2, 63 - 36},
    {"interaction (MoEUT answer-only gain - Transformer answer-only gain)",
     {"moeut", "moeut", "dense", "dense"},
     {"answer_only", "qa", "answer_only", "qa"},
     {1, -1, -1, 1},
     4,
     (63 - 36) - (48 - 41)},
};
enum { CONTRAST_INTERACTION = 4 };

static void compute_contrast(const ReportInput *in, const ContrastSpec *c, Scope scope, Quantity q, Contrast *out) {
    const RunGroup *g[4];
    for (int k = 0; k < c->n; k++) g[k] = kind(in, c->arch[k], c->mode[k]);
    report_contrast(g, c->weight, c->n, scope, q, out);
}

/* Whether a contrast's run configs differ only in the factors it contrasts (report_comparable.h); why names the keys
 * that differ besides. */
static bool contrast_comparable(const ReportInput *in, const ContrastSpec *c, char *why, size_t cap) {
    const RunGroup *g[4];
    for (int k = 0; k < c->n; k++) g[k] = kind(in, c->arch[k], c->mode[k]);
    return report_claim_comparable(g, c->n, why, cap);
}

static void fmt_contrast(char *out, size_t cap, const Contrast *c) {
    if (!c->ok) {
        snprintf(out, cap, "not computed: %s", c->why);
        return;
    }
    char e[32], lo[32], hi[32];
    fmt_points(e, sizeof e, c->boot.estimate);
    fmt_points(lo, sizeof lo, c->boot.lo);
    fmt_points(hi, sizeof hi, c->boot.hi);
    int len = snprintf(out, cap, "%s [%s, %s] (%d seed%s x %ld examples)", e, lo, hi, c->n_seeds,
                       c->n_seeds == 1 ? "" : "s", c->n_examples);
    if (c->n_seeds >= 2 && len > 0 && (size_t)len < cap) {
        fmt_points(lo, sizeof lo, c->t_lo);
        fmt_points(hi, sizeof hi, c->t_hi);
        snprintf(out + len, cap - (size_t)len, "; t across seeds [%s, %s]", lo, hi);
    }
}

static void fmt_mcnemar(char *out, size_t cap, const Contrast *c) {
    out[0] = '\0';
    if (!c->ok) return;
    int len = 0;
    for (int s = 0; s < c->n_seeds && len >= 0 && (size_t)len < cap; s++) {
        char v[32];
        fmt_points(v, sizeof v, c->per_seed[s]);
        if (c->has_mcnemar)
            len += snprintf(out + len, cap - (size_t)len, "%sseed %ld: %s (b=%ld, c=%ld, p=%.3g)", s ? "; " : "",
                            c->seeds[s], v, c->b[s], c->c[s], c->p[s]);
        else
            len += snprintf(out + len, cap - (size_t)len, "%sseed %ld: %s", s ? "; " : "", c->seeds[s], v);
    }
}

void section_comparisons(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Paired comparisons on the same examples");
    doc_para(d, "Differences in accuracy, in points, between run configurations evaluated on the same examples "
                "(per-example verdicts from each run's predictions.jsonl, checked to list the same examples by set, "
                "index, module, question and answer). Seeds are paired by seed number. The 95%% interval is a "
                "hierarchical bootstrap that accounts for seed AND example variance: %d replicates, RNG seed %llu "
                "(splitmix64); each replicate resamples the seeds with replacement, then the examples with "
                "replacement (one draw shared by the drawn seeds, as every seed saw the same examples), and takes "
                "the mean difference; the interval is the 2.5%% and 97.5%% quantiles. With one seed it reflects "
                "example variance only; with few seeds it understates seed variance, so with >= 2 seeds the "
                "t-interval of the per-seed differences across seeds is given too (\"t across seeds\"), and the "
                "verdicts use the union of the two. Per seed: the difference, and for two-configuration comparisons "
                "the exact McNemar test (b = examples only the first gets right, c = only the second; two-sided p = "
                "min(1, 2 P(X <= min(b, c))), X ~ Binomial(b + c, 1/2)). The paper column applies the same contrast "
                "to the paper's four headline numbers. A comparison whose configurations differ in more than the factor "
                "it contrasts (the architecture, the loss mode) is \"not comparable\", naming the keys that differ.",
             REPORT_BOOT_REPLICATES, (unsigned long long)REPORT_BOOT_RNG_SEED);
    const char *h[] = {"comparison", "paper", "ours, headline module", "per seed (McNemar)", "ours, all examples",
                       "per seed (McNemar), all examples"};
    doc_table_begin(d, 6, h);
    for (int k = 0; k < 5; k++) {
        char paper[32], a[1200], b[2048], c[1200], e[2048], why[1100];
        snprintf(paper, sizeof paper, "%+.0f", CONTRASTS[k].paper_points);
        if (!contrast_comparable(in, &CONTRASTS[k], why, sizeof why)) {
            snprintf(a, sizeof a, "%s: %s", verdict_label(VERDICT_NOT_COMPARABLE), why);
            const char *row[] = {CONTRASTS[k].label, paper, a, "", a, ""};
            doc_table_row(d, 6, row, false);
            continue;
        }
        Contrast head, all;
        compute_contrast(in, &CONTRASTS[k], SCOPE_HEADLINE, QUANTITY_CORRECT, &head);
        compute_contrast(in, &CONTRASTS[k], SCOPE_ALL, QUANTITY_CORRECT, &all);
        fmt_contrast(a, sizeof a, &head);
        fmt_mcnemar(b, sizeof b, &head);
        fmt_contrast(c, sizeof c, &all);
        fmt_mcnemar(e, sizeof e, &all);
        const char *row[] = {CONTRASTS[k].label, paper, a, b, c, e};
        doc_table_row(d, 6, row, false);
    }
    doc_table_end(d);
}

/* ---------------------------------------------------------------- verdicts --------------------------------- */

/* The interval the headline-number rule uses for one run config: with >= 2 seeds the union of the t-interval of the
 * per-seed accuracies and the Wilson interval of all seeds' examples pooled (never narrower than what the examples
 * alone resolve, even when the seeds happen to agree); with one seed that run's Wilson interval. */
static bool headline_interval(const RunGroup *g, double *mean, double *lo, double *hi, long *n_per_seed, int *seeds,
                              double *params, double *tokens) {
    SeedSummary s;
    report_seed_summary(g, METRIC_HEADLINE, &s);
    if (s.n == 0) return false;
    long correct = 0, n = 0;
    *params = *tokens = 0;
    for (int i = 0; i < g->n; i++) {
        const ModuleEval *me =
            set_eval_find_module(&g->runs[i]->res.evaluation.sets[REPORT_HEADLINE_SET], REPORT_HEADLINE_MODULE);
        if (!me || me->n == 0) continue;
        correct += me->correct;
        n += me->n;
        *n_per_seed = me->n;
        *params = fmax(*params, (double)g->runs[i]->res.n_params);
        *tokens = fmax(*tokens, (double)g->runs[i]->res.training.tokens);
    }
    double wl, wh;
    wilson_interval(correct, n, STATS_Z95, &wl, &wh);
    *mean = s.mean;
    *seeds = s.n;
    *lo = s.n >= 2 ? fmin(s.lo, wl) : wl;
    *hi = s.n >= 2 ? fmax(s.hi, wh) : wh;
    return true;
}


/* The loss-mode effects and the interaction on every evaluation example, on accuracy (effect-size rule) and on the
 * per-example answer loss (direction rule; lower is better, so the paper's side is negative). */
enum { CONTRAST_EFFECT_DENSE = 2, CONTRAST_EFFECT_MOEUT = 3 };

static void effect_numbers(char *out, size_t cap, const Contrast *c, Quantity q) {
    if (!c->ok) {
        snprintf(out, cap, "not computed: %s", c->why);
        return;
    }
    const double scale = q == QUANTITY_CORRECT ? 100 : 1;
    const char *fmt = q == QUANTITY_CORRECT ? "%s%+.1f" : "%s%+.3f";
    int len = snprintf(out, cap, q == QUANTITY_CORRECT ? "%+.1f points [%+.1f, %+.1f]" : "%+.3f nats [%+.3f, %+.3f]",
                       scale * c->boot.estimate, scale * c->boot.lo, scale * c->boot.hi);
    len += snprintf(out + len, cap - (size_t)len, " (bootstrap, %d seed%s x %ld examples)", c->n_seeds,
                    c->n_seeds == 1 ? "" : "s", c->n_examples);
    if (c->n_seeds >= 2) {
        len += snprintf(out + len, cap - (size_t)len,
                        q == QUANTITY_CORRECT ? "; t across seeds [%+.1f, %+.1f]; verdict interval [%+.1f, %+.1f]"
                                              : "; t across seeds [%+.3f, %+.3f]; verdict interval [%+.3f, %+.3f]",
                        scale * c->t_lo, scale * c->t_hi, scale * c->verdict_lo, scale * c->verdict_hi);
    }
    len += snprintf(out + len, cap - (size_t)len, "; per seed");
    for (int s = 0; s < c->n_seeds && len > 0 && (size_t)len < cap; s++)
        len += snprintf(out + len, cap - (size_t)len, fmt, s ? ", " : " ", scale * c->per_seed[s]);
}

static void tally(VerdictTally *t, Verdict v) { t->count[v]++; }

/* The training setting a loss-mode verdict holds at, " Setting: train.steps 3000, train.lr 0.002." (a loss-mode
 * effect is read at the budget and learning rate at which it was measured; the section on the loss-mode effect by
 * setting shows the others). Only comparable contrasts get a verdict line (contrast_comparable), and neither key may
 * differ within one, so the first configuration's values stand for all. A key it lacks is left out; empty when both
 * are. */
static void setting_phrase(char *out, size_t cap, const ReportInput *in, const ContrastSpec *spec) {
    const RunGroup *g = kind(in, spec->arch[0], spec->mode[0]);
    static const char *const KEYS[2] = {"steps", "lr"};
    size_t len = 0;
    out[0] = '\0';
    for (int k = 0; k < 2 && len < cap; k++) {
        const cJSON *v = report_group_config_item(g, "train", KEYS[k]);
        if (!cJSON_IsNumber(v)) continue;
        int w = snprintf(out + len, cap - len, "%s train.%s %g", len ? "," : " Setting:", KEYS[k], v->valuedouble);
        len = w < 0 ? cap : len + (size_t)w;
    }
    if (len > 0 && len < cap) snprintf(out + len, cap - len, ".");
}

/* out[0], out[1]: the contrast on accuracy and on the answer loss, for the interaction's decomposition (ok false when
 * the contrast is not comparable and so not computed). */
static void effect_verdicts(Doc *d, const ReportInput *in, int contrast, const char *claim, Verdict *on_acc,
                            Verdict *on_loss, VerdictWhy *why_acc, VerdictWhy *why_loss, Contrast out[2]) {
    const ContrastSpec *spec = &CONTRASTS[contrast];
    const double paper = spec->paper_points / 100;
    char why[1100];
    if (!contrast_comparable(in, spec, why, sizeof why)) {
        doc_list_item(d, "%s (paper: %+.0f points on %s), on accuracy over all evaluation examples: %s: %s. %s.", claim,
                      spec->paper_points, REPORT_HEADLINE_MODULE, verdict_label(VERDICT_NOT_COMPARABLE), why,
                      REPORT_NO_VERDICT_REASON);
        doc_list_item(d, "%s, on the mean answer loss over all evaluation examples: %s: %s. %s.", claim,
                      verdict_label(VERDICT_NOT_COMPARABLE), why, REPORT_NO_VERDICT_REASON);
        *on_acc = *on_loss = VERDICT_NOT_COMPARABLE;
        out[0].ok = out[1].ok = false;
        return;
    }
    Contrast *const acc_out = &out[0], *const loss_out = &out[1];
    compute_contrast(in, spec, SCOPE_ALL, QUANTITY_CORRECT, acc_out);
    compute_contrast(in, spec, SCOPE_ALL, QUANTITY_ANSWER_LOSS, loss_out);
    const Contrast acc = *acc_out, loss = *loss_out;
    const bool off_floor = acc.ok && verdict_off_floor(acc.mean_level, spec->n);
    const Verdict va = acc.ok ? verdict_effect(acc.verdict_lo, acc.verdict_hi, acc.n_seeds, paper, off_floor)
                              : VERDICT_NOT_RESOLVED;
    const Verdict vl = loss.ok ? verdict_direction(loss.verdict_lo, loss.verdict_hi, loss.n_seeds, -1)
                               : VERDICT_NOT_RESOLVED;
    char na[1600], nl[1600], levels[256] = "", setting[160];
    setting_phrase(setting, sizeof setting, in, spec);
    effect_numbers(na, sizeof na, &acc, QUANTITY_CORRECT);
    effect_numbers(nl, sizeof nl, &loss, QUANTITY_ANSWER_LOSS);
    if (acc.ok) {
        int len = 0;
        for (int k = 0; k < spec->n && len >= 0 && (size_t)len < sizeof levels; k++)
            len += snprintf(levels + len, sizeof levels - (size_t)len, "%s%s %.1f%%", k ? ", " : "",
                            kind(in, spec->arch[k], spec->mode[k])->run_config, 100 * acc.mean_level[k]);
    }
    char note[320] = "";
    if (va == VERDICT_CONSISTENT && verdict_below_paper_effect(acc.verdict_lo, acc.verdict_hi, paper))
        snprintf(note, sizeof note, " (the whole interval is also below the paper's effect)");
    else if (va == VERDICT_NOT_RESOLVED && acc.ok && acc.n_seeds >= VERDICT_MIN_SEEDS && !off_floor)
        snprintf(note, sizeof note,
                 " (an accuracy of the contrast is under the %.0f%% floor, so the interval cannot be called smaller "
                 "than the paper's effect; the floor governs only that outcome, never the direction rule)",
                 100 * VERDICT_FLOOR_ACCURACY);
    doc_list_item(d, "%s (paper: %+.0f points on %s), on accuracy over all %ld evaluation examples: %s%s. Ours: %s; "
                     "accuracies %s.%s",
                  claim, spec->paper_points, REPORT_HEADLINE_MODULE, acc.n_examples, verdict_label(va), note, na,
                  acc.ok ? levels : "-", setting);
    doc_list_item(d, "%s, on the mean answer loss over all %ld evaluation examples (summed answer-token "
                     "cross-entropy per example, lower is better; the paper reports accuracy only): %s. Ours: %s.%s",
                  claim, loss.n_examples, verdict_label(vl), nl, setting);
    *on_acc = va;
    *on_loss = vl;
    *why_acc = acc.ok ? verdict_effect_why(acc.verdict_lo, acc.verdict_hi, acc.n_seeds, paper, off_floor)
                      : VERDICT_WHY_NO_DATA;
    *why_loss = loss.ok ? verdict_direction_why(loss.verdict_lo, loss.verdict_hi, loss.n_seeds, -1)
                        : VERDICT_WHY_NO_DATA;
}

/* The interaction is the difference of the two loss-mode effects, so a resolved interaction can be carried by either
 * one alone: this line says which (report_interaction_carrier), so that "helps MoEUT more" is never read as "helps
 * MoEUT" when MoEUT's own effect is unresolved. dense, moeut, both: the contrasts effect_verdicts computed, on the same
 * quantity q. */
static bool interval_resolved(const Contrast *c) {
    return c->ok && verdict_direction(c->verdict_lo, c->verdict_hi, c->n_seeds, +1) != VERDICT_NOT_RESOLVED;
}

const char *report_interaction_carrier(const Contrast *dense, const Contrast *moeut, const Contrast *both) {
    const bool m_res = interval_resolved(moeut), d_res = interval_resolved(dense);
    return !interval_resolved(both) ? "the interaction itself is not resolved"
           : m_res && d_res         ? "both effects are resolved, so both contribute"
           : d_res ? "it is carried by the Transformer's effect alone: MoEUT's own effect is not resolved (its "
                     "interval contains 0)"
           : m_res ? "it is carried by MoEUT's own effect: the Transformer's effect is not resolved"
                   : "neither effect is resolved on its own; only their difference is";
}

static void interaction_decomposition(Doc *d, Quantity q, const Contrast *dense, const Contrast *moeut,
                                      const Contrast *both) {
    if (!dense->ok || !moeut->ok || !both->ok) return; /* not comparable or not computed: said by its claims */
    const bool acc = q == QUANTITY_CORRECT;
    const double scale = acc ? 100 : 1;
    const char *unit = acc ? "points" : "nats";
    doc_list_item(d, "Decomposition of the interaction on the %s: %+.*f %s = MoEUT's effect %+.*f [%+.*f, %+.*f] minus "
                     "the Transformer's %+.*f [%+.*f, %+.*f] (verdict intervals, %d paired seed%s); %s.",
                  acc ? "accuracy" : "mean answer loss", acc ? 1 : 3, scale * both->boot.estimate, unit, acc ? 1 : 3,
                  scale * moeut->boot.estimate, acc ? 1 : 3, scale * moeut->verdict_lo, acc ? 1 : 3,
                  scale * moeut->verdict_hi, acc ? 1 : 3, scale * dense->boot.estimate, acc ? 1 : 3,
                  scale * dense->verdict_lo, acc ? 1 : 3, scale * dense->verdict_hi, both->n_seeds,
                  both->n_seeds == 1 ? "" : "s", report_interaction_carrier(dense, moeut, both));
}

const DepthClaim DEPTH_CLAIMS[4] = {
    {"answer-only loss makes the Transformer use more depth than Q+A loss", "dense", "answer_only", "dense", "qa"},
    {"MoEUT uses more depth than the Transformer with Q+A loss", "moeut", "qa", "dense", "qa"},
    {"MoEUT uses more depth than the Transformer with answer-only loss", "moeut", "answer_only", "dense",
     "answer_only"},
    {"MoEUT uses most depth with answer-only loss (more than MoEUT Q+A)", "moeut", "answer_only", "moeut", "qa"},
};

void section_verdict_rules(Doc *d) {
    doc_details_begin(d, 2, "How the verdicts are decided");
    doc_para(d, "The rules behind the verdict lines at the top (pipeline/report/verdict.h):");
    doc_list_begin(d);
    doc_list_item(d, "Claims about a difference (the interaction, the depth ordering): consistent when the 95%% "
                     "interval of the difference excludes 0 on the paper's side, contradicted when it excludes 0 on "
                     "the other side, not resolved otherwise; and not resolved whenever fewer than %d paired seeds "
                     "went into it (seed-to-seed variance, as large as the effects here, would be unmeasured). "
                     "The interval: the union of a hierarchical bootstrap interval (accuracy: seeds and examples of "
                     "the headline module, as in the comparisons section; depth: seeds and the prompts, the paper's four or the "
                     "sampled evaluation prompts of depth_prompts.json) and "
                     "the t-interval of the per-seed differences across paired seeds; the bootstrap alone understates "
                     "seed variance with 2 or 3 seeds, the t-interval alone ignores example (prompt) variance.",
                  VERDICT_MIN_SEEDS);
    doc_list_item(d, "The loss-mode effects and the interaction, which the paper states as sizes (+7, +27 and +20 "
                     "points on its headline module), on accuracy over every evaluation example (interpolate and "
                     "extrapolate, all modules: at small sizes the headline module sits at 0%%): the direction rule "
                     "above, and when it leaves the claim unresolved, \"smaller than the paper's effect\" if at least "
                     "%d paired seeds went into the interval, every configuration of the contrast answers between "
                     "%.0f%% and %.0f%% of the examples (off the floor, so that an effect of the paper's size had room "
                     "to show), and the whole interval lies below the paper's effect. That compares sizes in points on "
                     "another scope and at another scale: it bounds the effect here, it does not say the paper's "
                     "effect is absent at its size. The same contrasts on the per-example answer loss (summed "
                     "answer-token cross-entropy, which moves long before whole answers become exact) use the "
                     "direction rule with lower loss on the paper's side.",
                  VERDICT_MIN_SEEDS, 100 * VERDICT_FLOOR_ACCURACY, 100 * (1 - VERDICT_FLOOR_ACCURACY));
    doc_list_item(d, "The four headline numbers: an absolute accuracy depends on model size and training length, so "
                     "unless the runs have at least %.0f%% of the paper's parameters (about 228M) AND of its training "
                     "token slots (6.55B) the verdict is not resolved at this size, whatever the interval. At that "
                     "scale: consistent when our 95%% interval contains the paper's number, contradicted when it "
                     "excludes it. Our interval: one seed, the run's Wilson interval; several seeds, the union of the "
                     "t-interval across seeds and the Wilson interval of all seeds' examples pooled.",
                  100 * VERDICT_SCALE_FRACTION);
    doc_list_item(d, "Comparable runs: a claim about the architecture or the loss mode is read only on runs whose "
                     "recorded configs differ in that factor alone. The architecture owns the whole model section and "
                     "train.n_microbatch (the paper trains MoEUT in 2 micro-batches), the loss mode "
                     "train.loss_on_target_only; the description, train.seed and the analyze keys may differ too. "
                     "Runs that differ in any other key (train.lr, train.steps, ...) give the claim no verdict: its "
                     "line says \"not comparable\" with the keys and both values, and the short answer counts it "
                     "apart (pipeline/report/report_comparable.h).");
    doc_list_end(d);
    doc_details_end(d);
}

void section_verdicts(Doc *d, const ReportInput *in, VerdictTally *t) {
    memset(t, 0, sizeof *t);
    t->has_depth_prompts = report_has_depth_prompts(in);
    doc_heading(d, 2, "Do the paper's claims hold here?");
    doc_para(d, "One line per claim of the paper (dm-math-protocol.md §4 and §5), each with exactly one verdict: "
                "consistent, contradicted, not resolved at this size, or (effect sizes) smaller than the paper's "
                "effect; or none, \"not comparable\", when the claim's runs differ in more than the factor it is "
                "about (the keys and values are named). The rules are in the appendix \"How the verdicts are decided\" at the end (pipeline/report/verdict.h).");
    for (int k = 0; k < 4; k++) { /* the run configs the verdicts read */
        const RunGroup *g = kind(in, PAPER_HEADLINE[k].arch, PAPER_HEADLINE[k].loss_mode);
        char note[4096], vnote[4096];
        if (g && report_split_note(in, g->run_config, note, sizeof note, vnote, sizeof vnote)) doc_para(d, "%s.", vnote);
    }

    doc_list_begin(d);
    for (int k = 0; k < 4; k++) {
        const PaperNumber *p = &PAPER_HEADLINE[k];
        const RunGroup *g = kind(in, p->arch, p->loss_mode);
        double mean, lo, hi, params, tokens;
        long n_per = 0;
        int seeds = 0;
        if (!g || !headline_interval(g, &mean, &lo, &hi, &n_per, &seeds, &params, &tokens)) {
            doc_list_item(d, "%s, %.0f%% on %s: %s. No result for it (run missing or module not evaluated).", p->label,
                          p->paper_percent, REPORT_HEADLINE_MODULE, verdict_label(VERDICT_NOT_RESOLVED));
            t->headline[k] = VERDICT_NOT_RESOLVED;
            t->why_headline[k] = VERDICT_WHY_NO_DATA;
            tally(t, VERDICT_NOT_RESOLVED);
            continue;
        }
        const bool scale = verdict_at_paper_scale(params, tokens);
        const Verdict v = verdict_paper_number(lo, hi, p->paper_percent / 100, scale);
        t->headline[k] = v;
        t->why_headline[k] = verdict_paper_number_why(lo, hi, p->paper_percent / 100, scale);
        t->at_paper_scale |= scale;
        tally(t, v);
        char pp[32], tt[32];
        fmt_big(pp, sizeof pp, params);
        fmt_big(tt, sizeof tt, tokens);
        doc_list_item(d, "%s, %.0f%% on %s: %s. Ours %.1f%% [%.1f, %.1f] (%d seed%s, %ld examples each); %s "
                         "parameters, %s training token slots%s.",
                      p->label, p->paper_percent, REPORT_HEADLINE_MODULE, verdict_label(v), 100 * mean, 100 * lo,
                      100 * hi, seeds, seeds == 1 ? "" : "s", n_per, pp, tt,
                      scale ? " (the paper's scale)"
                            : ": below the paper's scale, where an absolute accuracy is not comparable to its "
                              "228M-parameter models");
    }
    Contrast dense[2], moeut[2], both[2]; /* [accuracy, answer loss] */
    effect_verdicts(d, in, CONTRAST_EFFECT_DENSE, "Answer-only loss helps the Transformer (dense_answer - dense_qa > 0)",
                    &t->effect_acc[0], &t->effect_loss[0], &t->why_effect_acc[0], &t->why_effect_loss[0], dense);
    effect_verdicts(d, in, CONTRAST_EFFECT_MOEUT, "Answer-only loss helps MoEUT (moeut_answer - moeut_qa > 0)",
                    &t->effect_acc[1], &t->effect_loss[1], &t->why_effect_acc[1], &t->why_effect_loss[1], moeut);
    effect_verdicts(d, in, CONTRAST_INTERACTION,
                    "Answer-only loss helps MoEUT more than the Transformer ((moeut_answer - moeut_qa) - "
                    "(dense_answer - dense_qa) > 0)",
                    &t->effect_acc[2], &t->effect_loss[2], &t->why_effect_acc[2], &t->why_effect_loss[2], both);
    interaction_decomposition(d, QUANTITY_CORRECT, &dense[0], &moeut[0], &both[0]);
    interaction_decomposition(d, QUANTITY_ANSWER_LOSS, &dense[1], &moeut[1], &both[1]);
    for (int k = 0; k < 3; k++) {
        tally(t, t->effect_acc[k]);
        tally(t, t->effect_loss[k]);
    }
    /* The interaction, on the headline module. */
    char why[1100];
    if (!contrast_comparable(in, &CONTRASTS[CONTRAST_INTERACTION], why, sizeof why)) {
        t->interaction_headline = VERDICT_NOT_COMPARABLE;
        tally(t, VERDICT_NOT_COMPARABLE);
        doc_list_item(d, "Answer-only loss helps MoEUT more than the Transformer, i.e. (moeut_answer - moeut_qa) - "
                         "(dense_answer - dense_qa) > 0 (paper: (63 - 36) - (48 - 41) = +20 points), on %s: %s: %s. "
                         "%s.",
                      REPORT_HEADLINE_MODULE, verdict_label(VERDICT_NOT_COMPARABLE), why, REPORT_NO_VERDICT_REASON);
    } else {
        Contrast c;
        compute_contrast(in, &CONTRASTS[CONTRAST_INTERACTION], SCOPE_HEADLINE, QUANTITY_CORRECT, &c);
        const Verdict v = c.ok ? verdict_direction(c.verdict_lo, c.verdict_hi, c.n_seeds, +1) : VERDICT_NOT_RESOLVED;
        t->interaction_headline = v;
        t->why_interaction_headline =
            c.ok ? verdict_direction_why(c.verdict_lo, c.verdict_hi, c.n_seeds, +1) : VERDICT_WHY_NO_DATA;
        tally(t, v);
        char ours[1600];
        fmt_contrast(ours, sizeof ours, &c);
        if (c.ok && c.n_seeds >= 2) {
            size_t len = strlen(ours);
            snprintf(ours + len, sizeof ours - len, "; verdict interval (union) [%+.1f, %+.1f]", 100 * c.verdict_lo,
                     100 * c.verdict_hi);
        }
        doc_list_item(d, "Answer-only loss helps MoEUT more than the Transformer, i.e. (moeut_answer - moeut_qa) - "
                         "(dense_answer - dense_qa) > 0 (paper: (63 - 36) - (48 - 41) = +20 points): %s. Ours, in "
                         "points on %s: %s%s.",
                      verdict_label(v), REPORT_HEADLINE_MODULE, ours,
                      c.ok && c.n_seeds < VERDICT_MIN_SEEDS ? "; one seed: not resolved by rule" : "");
    }
    for (int k = 0; k < 4; k++) {
        const DepthClaim *dc = &DEPTH_CLAIMS[k];
        const RunGroup *a = kind(in, dc->arch_a, dc->mode_a), *b = kind(in, dc->arch_b, dc->mode_b);
        const RunGroup *pair[2] = {a, b};
        if (!report_claim_comparable(pair, 2, why, sizeof why)) {
            t->depth[k] = VERDICT_NOT_COMPARABLE;
            tally(t, VERDICT_NOT_COMPARABLE);
            doc_list_item(d, "Depth (§5): %s, i.e. depth summary of %s > %s: %s: %s. %s.", dc->claim, a->run_config,
                          b->run_config, verdict_label(VERDICT_NOT_COMPARABLE), why, REPORT_NO_VERDICT_REASON);
            if (t->has_depth_prompts)
                tally(t, t->depth_prompts[k] = depth_prompts_verdict_line(d, in, k, &t->why_depth_prompts[k]));
            continue;
        }
        DepthDiff dd;
        report_depth_diff(a, b, &dd);
        const PairedSeedDiff pd = dd.diff;
        const Verdict v = verdict_direction(dd.verdict_lo, dd.verdict_hi, pd.n, +1);
        t->depth[k] = v;
        t->why_depth[k] = pd.n == 0 ? VERDICT_WHY_NO_DATA : verdict_direction_why(dd.verdict_lo, dd.verdict_hi, pd.n, +1);
        tally(t, v);
        char nums[1400];
        if (pd.n == 0)
            snprintf(nums, sizeof nums, "no paired seed has both depth summaries (analysis missing or disabled)");
        else {
            int len = snprintf(nums, sizeof nums, "difference %+.3f", pd.mean);
            if (pd.n >= 2) len += snprintf(nums + len, sizeof nums - (size_t)len, ", t across seeds [%+.3f, %+.3f]",
                                           pd.lo, pd.hi);
            if (dd.n_prompts)
                len += snprintf(nums + len, sizeof nums - (size_t)len, ", bootstrap over seeds and %d prompts "
                                "[%+.3f, %+.3f]", dd.n_prompts, dd.boot.lo, dd.boot.hi);
            else
                len += snprintf(nums + len, sizeof nums - (size_t)len, ", no bootstrap (the runs' prompts differ)");
            len += snprintf(nums + len, sizeof nums - (size_t)len, "; %d paired seed%s (", pd.n, pd.n == 1 ? "" : "s");
            for (int s = 0; s < pd.n && len > 0 && (size_t)len < sizeof nums; s++)
                len += snprintf(nums + len, sizeof nums - (size_t)len, "%sseed %ld: %+.3f", s ? ", " : "", pd.seeds[s],
                                pd.diffs[s]);
            if (len > 0 && (size_t)len < sizeof nums) snprintf(nums + len, sizeof nums - (size_t)len, ")");
        }
        const char *name_a = a ? a->run_config : "missing", *name_b = b ? b->run_config : "missing";
        doc_list_item(d, "Depth (§5): %s, i.e. depth summary of %s > %s: %s. Ours: %s.", dc->claim, name_a, name_b,
                      verdict_label(v), nums);
        if (t->has_depth_prompts)
            tally(t, t->depth_prompts[k] = depth_prompts_verdict_line(d, in, k, &t->why_depth_prompts[k]));
    }
    doc_list_end(d);
}
