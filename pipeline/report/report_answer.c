/* The report's short answer (see report_sections.h): the first screen. What ran and what differs between the runs,
 * the verdicts and why the unresolved ones are unresolved (read from the verdicts themselves, so that the two cannot
 * disagree), loss and accuracy per configuration, and the best point of any sweep. Each fact is stated here once and
 * points to the section that holds its details. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"

/* The most configurations the first screen's table lists (the rest are in the section "Runs"). */
#define ANSWER_MAX_CONFIGS 8

/* ---------------------------------------------------------------- claims and their reasons ----------------- */

typedef struct {
    const char *label;
    Verdict v;
    VerdictWhy why;
} Claim;

/* "not resolved (one seed)", "consistent", "smaller than the paper's effect" */
static void fmt_verdict(char *out, size_t cap, Verdict v, VerdictWhy why) {
    if (why == VERDICT_WHY_RESOLVED) snprintf(out, cap, "%s", verdict_label(v));
    else snprintf(out, cap, "not resolved (%s)", verdict_why_label(why));
}

/* The most claims of one group (the four depth claims, the four accuracy contrasts). */
#define GROUP_MAX_CLAIMS 4

/* The claims of one group as "A, B: not resolved (one seed); C: consistent": claims with the same verdict and reason
 * share one phrase, in the order of their first claim; "all N: ..." when they all agree. */
static void claim_phrase(char *out, size_t cap, const Claim *c, int n) {
    bool done[GROUP_MAX_CLAIMS] = {false};
    if (n > GROUP_MAX_CLAIMS) die("claim_phrase: %d claims, at most %d", n, GROUP_MAX_CLAIMS);
    size_t len = 0;
    out[0] = '\0';
    int groups = 0;
    for (int i = 0; i < n && len < cap; i++) {
        if (done[i]) continue;
        char labels[512] = "", verdict[96];
        size_t ll = 0;
        int members = 0;
        for (int j = i; j < n; j++) {
            if (done[j] || c[j].v != c[i].v || c[j].why != c[i].why) continue;
            done[j] = true;
            members++;
            if (ll < sizeof labels)
                ll += (size_t)snprintf(labels + ll, sizeof labels - ll, "%s%s", ll ? ", " : "", c[j].label);
        }
        fmt_verdict(verdict, sizeof verdict, c[i].v, c[i].why);
        if (members == n && n > 1) snprintf(labels, sizeof labels, "all %d", n);
        len += (size_t)snprintf(out + len, cap - len, "%s%s: %s", groups++ ? "; " : "", labels, verdict);
    }
}

/* ---------------------------------------------------------------- what ran --------------------------------- */

/* "What ran: experiment ci, 4 runs with results: 4 run configs (dense_qa, ...), 1 seed each; ...": the primary group
 * of every run config (the first ANSWER_MAX_CONFIGS named), their seeds, the other configurations (variants, sweep
 * points), the scale, and the notes of configs whose current seeds were not pooled. */
static void what_ran(Doc *d, const ReportInput *in, const char *experiment, const ReportScale *sc) {
    char configs[2048] = "", notes[4096] = "";
    size_t len = 0, nlen = 0;
    int n_configs = 0, min_seeds = 0, max_seeds = 0;
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *g = &in->groups[i];
        if (!g->primary) continue;
        min_seeds = n_configs ? (g->n < min_seeds ? g->n : min_seeds) : g->n;
        max_seeds = g->n > max_seeds ? g->n : max_seeds;
        if (n_configs < ANSWER_MAX_CONFIGS && len < sizeof configs)
            len += (size_t)snprintf(configs + len, sizeof configs - len, "%s%s", n_configs ? ", " : "", g->run_config);
        n_configs++;
        char note[2048], vnote[2048];
        if (nlen < sizeof notes && report_split_note(in, g->run_config, note, sizeof note, vnote, sizeof vnote))
            nlen += (size_t)snprintf(notes + nlen, sizeof notes - nlen, "; %s", note);
    }
    if (len >= sizeof configs) snprintf(configs + sizeof configs - 5, 5, "...");
    else if (n_configs > ANSWER_MAX_CONFIGS)
        snprintf(configs + len, sizeof configs - len, " and %d more", n_configs - ANSWER_MAX_CONFIGS);
    char seeds[64];
    if (min_seeds == max_seeds) snprintf(seeds, sizeof seeds, "%d seed%s each", max_seeds, max_seeds == 1 ? "" : "s");
    else snprintf(seeds, sizeof seeds, "%d to %d seeds each", min_seeds, max_seeds);
    const int kept = in->n_groups - n_configs;
    char others[96] = "";
    if (kept > 0)
        snprintf(others, sizeof others, ", and %d other configuration%s (variants, sweep points)", kept,
                 kept == 1 ? "" : "s");
    if (n_configs == 0) { /* only runs kept aside */
        snprintf(configs, sizeof configs, "none current");
        snprintf(seeds, sizeof seeds, "no seeds");
    }
    doc_list_item(d, "What ran: experiment %s, %d run%s with results: %d run config%s (%s), %s%s; %s parameters, %s "
                     "training token slots (paper: about 228M and 6.55B)%s.",
                  experiment, sc->n_runs, sc->n_runs == 1 ? "" : "s", n_configs, n_configs == 1 ? "" : "s", configs,
                  seeds, others, sc->params, sc->tokens, notes);
}

/* ---------------------------------------------------------------- loss and accuracy ------------------------ */

/* The mean over the group's seeds of the first and last logged training cross-entropy (NaN without metrics.jsonl). */
static void group_loss_span(const RunGroup *g, double *first, double *last) {
    double f = 0, l = 0;
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        double a, as, b, bs;
        if (!report_run_loss_span(g->runs[i], &a, &as, &b, &bs)) continue;
        f += a;
        l += b;
        n++;
    }
    *first = n ? f / n : NAN;
    *last = n ? l / n : NAN;
}

static void loss_and_accuracy(Doc *d, const ReportInput *in) {
    bool any = false;
    for (int i = 0; i < in->n_groups; i++) any |= in->groups[i].primary;
    if (!any) return;
    const char *h[] = {"configuration", "seeds", "training loss, first \u2192 last", "mean answer loss (nats)",
                       "accuracy (interpolate, extrapolate)"};
    doc_table_begin(d, 5, h);
    int shown = 0, primary = 0;
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *g = &in->groups[i];
        if (!g->primary) continue;
        if (primary++ >= ANSWER_MAX_CONFIGS) continue;
        char seeds[16], train[64], loss[32], acc[64];
        snprintf(seeds, sizeof seeds, "%d", g->n);
        double first, last;
        group_loss_span(g, &first, &last);
        double final_loss = 0;
        for (int s = 0; s < g->n; s++) final_loss += g->runs[s]->res.training.final_train_loss / g->n;
        if (isfinite(first)) snprintf(train, sizeof train, "%.3f \u2192 %.3f", first, last);
        else snprintf(train, sizeof train, "%.3f (final; no metrics.jsonl)", final_loss);
        SeedSummary ls, ai, ae;
        report_seed_summary(g, METRIC_ANSWER_LOSS, &ls);
        report_seed_summary(g, METRIC_INTERPOLATE, &ai);
        report_seed_summary(g, METRIC_EXTRAPOLATE, &ae);
        if (ls.n) snprintf(loss, sizeof loss, "%.3f", ls.mean);
        else snprintf(loss, sizeof loss, "-");
        snprintf(acc, sizeof acc, "%.1f%%, %.1f%%", 100 * ai.mean, 100 * ae.mean);
        const char *row[] = {g->run_config, seeds, train, loss, acc};
        doc_table_row(d, 5, row, false);
        shown++;
    }
    doc_table_end(d);
    if (primary > shown)
        doc_para(d, "%d more run configs: see the section \"Runs\".", primary - shown);
}

/* ---------------------------------------------------------------- the section ------------------------------ */

void section_answer(Doc *d, const ReportInput *in, const VerdictTally *t, const char *experiment) {
    doc_heading(d, 2, "Short answer");
    ReportScale sc;
    report_scale(in, &sc);
    if (!sc.n_runs) {
        doc_para(d, "No run has a result record yet: nothing to say about the paper's claims.");
        return;
    }
    doc_list_begin(d);
    what_ran(d, in, experiment, &sc);
    char differs[4096];
    if (report_config_diff_line(in, differs, sizeof differs) > 0)
        doc_list_item(d, "What differs between the runs: %s (every value: \"What differs between the runs\").",
                      differs);
    else doc_list_item(d, "What differs between the runs: nothing but the seeds.");
    int total = 0;
    for (int v = 0; v < VERDICT_N; v++) total += t->count[v];
    /* A claim whose runs differ in more than its factor has no verdict, and is counted apart, never as resolved. */
    char not_comparable[256] = "";
    if (t->count[VERDICT_NOT_COMPARABLE])
        snprintf(not_comparable, sizeof not_comparable,
                 "; %d not comparable (no verdict: their runs differ in more than the factor under study)",
                 t->count[VERDICT_NOT_COMPARABLE]);
    doc_list_item(d, "Answer: of the %d claim lines below, %d consistent with the paper, %d contradicted, %d not "
                     "resolved at this size, %d smaller than the paper's effect%s; by claim, with why where not "
                     "resolved, in the next lines.",
                  total, t->count[VERDICT_CONSISTENT], t->count[VERDICT_CONTRADICTED], t->count[VERDICT_NOT_RESOLVED],
                  t->count[VERDICT_SMALLER_THAN_PAPER], not_comparable);
    char text[2048];
    const Claim headline[4] = {{"Transformer Q+A", t->headline[0], t->why_headline[0]},
                               {"Transformer answer-only", t->headline[1], t->why_headline[1]},
                               {"MoEUT Q+A", t->headline[2], t->why_headline[2]},
                               {"MoEUT answer-only", t->headline[3], t->why_headline[3]}};
    claim_phrase(text, sizeof text, headline, 4);
    doc_list_item(d, "The paper's four accuracies (41/48/36/63%% on %s): %s.", REPORT_HEADLINE_MODULE, text);
    const Claim acc[4] = {{"Transformer", t->effect_acc[0], t->why_effect_acc[0]},
                          {"MoEUT", t->effect_acc[1], t->why_effect_acc[1]},
                          {"MoEUT more than the Transformer", t->effect_acc[2], t->why_effect_acc[2]},
                          {"the same on the headline module", t->interaction_headline, t->why_interaction_headline}};
    const Claim loss[3] = {{"Transformer", t->effect_loss[0], t->why_effect_loss[0]},
                           {"MoEUT", t->effect_loss[1], t->why_effect_loss[1]},
                           {"MoEUT more than the Transformer", t->effect_loss[2], t->why_effect_loss[2]}};
    char on_loss[1024];
    claim_phrase(text, sizeof text, acc, 4);
    claim_phrase(on_loss, sizeof on_loss, loss, 3);
    doc_list_item(d, "Answer-only loss (instead of Q+A) helps, on accuracy: %s. On the answer loss: %s.", text, on_loss);
    const Claim depth[4] = {{"Transformer answer-only > Q+A", t->depth[0], t->why_depth[0]},
                            {"MoEUT > Transformer with Q+A", t->depth[1], t->why_depth[1]},
                            {"MoEUT > Transformer with answer-only", t->depth[2], t->why_depth[2]},
                            {"MoEUT answer-only > Q+A", t->depth[3], t->why_depth[3]}};
    claim_phrase(text, sizeof text, depth, 4);
    if (t->has_depth_prompts) {
        Claim prompts[4];
        for (int k = 0; k < 4; k++) prompts[k] = (Claim){depth[k].label, t->depth_prompts[k], t->why_depth_prompts[k]};
        char over[1024];
        claim_phrase(over, sizeof over, prompts, 4);
        doc_list_item(d, "More depth used, as the paper says (residual erasure), on its four prompts: %s. Over the "
                         "sampled evaluation prompts: %s.",
                      text, over);
    } else
        doc_list_item(d, "More depth used, as the paper says (residual erasure on its four prompts): %s.", text);
    char best[2048];
    if (report_best_sweep_points(in, best, sizeof best))
        doc_list_item(d, "Best point of the sweep, by mean answer loss: %s (\"Variants and sweeps\").", best);
    doc_list_end(d);
    loss_and_accuracy(d, in);
}
