/* Report sections on the runs one by one, and the document's order (see report_sections.h). */
#include "pipeline/report/report_sections.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/report/report_stats.h"
#include "pipeline/base/stats.h"
#include "pipeline/report/verdict.h"

const PaperNumber PAPER_HEADLINE[4] = {
    {"dense", "qa", "Transformer, loss on Q+A", 41},
    {"dense", "answer_only", "Transformer, answer-only loss", 48},
    {"moeut", "qa", "MoEUT, loss on Q+A", 36},
    {"moeut", "answer_only", "MoEUT, answer-only loss", 63},
};
#define PAPER_EVAL_PER_EXTRAPOLATE_MODULE 830.0

int report_max_seeds(const ReportInput *in) {
    int m = 0;
    for (int g = 0; g < in->n_groups; g++)
        if (in->groups[g].n > m) m = in->groups[g].n;
    return m;
}

/* ---------------------------------------------------------------- runs ------------------------------------- */

void section_overview(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Runs");
    const char *h[] = {"run", "model", "loss", "params", "steps", "train tokens", "final train loss", "mean accuracy",
                       "analysis", "run config", "seed"};
    doc_table_begin(d, 11, h);
    for (int i = 0; i < in->n; i++) {
        const RunData *r = &in->runs[i];
        char params[32], steps[32], tokens[32], loss[32], acc[32], seed[32];
        if (r->seed >= 0) snprintf(seed, sizeof seed, "%ld", r->seed);
        else snprintf(seed, sizeof seed, "?");
        if (!r->has_result) {
            const char *row[] = {r->name, "MISSING: no result.json", "", "", "", "", "", "",
                                 report_run_analysis_state(r), r->run_config, seed};
            doc_table_row(d, 11, row, false);
            continue;
        }
        fmt_big(params, sizeof params, (double)r->res.n_params);
        snprintf(steps, sizeof steps, "%ld", r->res.training.steps);
        fmt_big(tokens, sizeof tokens, (double)r->res.training.tokens);
        snprintf(loss, sizeof loss, "%.4f", r->res.training.final_train_loss);
        snprintf(acc, sizeof acc, "%.2f%%", 100 * r->res.evaluation.mean_accuracy);
        const char *row[] = {r->name, arch_label(r->res.arch), mode_label(r->res.loss_mode), params, steps, tokens,
                             loss, acc, report_run_analysis_state(r), r->run_config, seed};
        doc_table_row(d, 11, row, false);
    }
    doc_table_end(d);
    int missing = 0;
    for (int i = 0; i < in->n; i++) missing += !in->runs[i].has_result;
    if (missing)
        doc_para(d, "%d of %d expected runs have no result record (listed as MISSING above); their rows below say so.",
                 missing, in->n);
}

/* ---------------------------------------------------------------- headline --------------------------------- */

/* The headline cell of one run config: as a single run (accuracy, Wilson interval, n) with one seed; with several,
 * the mean across seeds with its t-interval and the per-seed values. */
static void headline_cell(char *out, size_t cap, const RunGroup *g) {
    if (!g) {
        snprintf(out, cap, "missing");
        return;
    }
    SeedSummary s;
    report_seed_summary(g, METRIC_HEADLINE, &s);
    if (s.n == 0) {
        snprintf(out, cap, "not evaluated (%s)", g->runs[0]->name);
        return;
    }
    const ModuleEval *me = set_eval_find_module(&g->runs[0]->res.evaluation.sets[REPORT_HEADLINE_SET],
                                                REPORT_HEADLINE_MODULE);
    if (s.n == 1) {
        for (int i = 0; i < g->n; i++) {
            me = set_eval_find_module(&g->runs[i]->res.evaluation.sets[REPORT_HEADLINE_SET], REPORT_HEADLINE_MODULE);
            if (me && me->n > 0) break;
        }
        fmt_acc(out, cap, me->accuracy, me->ci95, me->n);
        return;
    }
    int len = snprintf(out, cap, "%.1f%% [%.1f, %.1f] over %d seeds (", 100 * s.mean, 100 * s.lo, 100 * s.hi, s.n);
    for (int i = 0; i < s.n && len > 0 && (size_t)len < cap; i++)
        len += snprintf(out + len, cap - (size_t)len, "%s%.1f", i ? ", " : "", 100 * s.values[i]);
    if (len > 0 && (size_t)len < cap) snprintf(out + len, cap - (size_t)len, "; n=%ld each)", me ? me->n : 0L);
}

void section_headline(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Headline: extrapolation on arithmetic__mul_div_multiple_longer");
    const int seeds = report_max_seeds(in);
    doc_para(d, "The paper's only quantitative result for these models (Csordás et al. 2025, §3.5): accuracy on the "
                "extrapolate file %s, teacher-forced exact match of the whole answer. The paper gives no error bars "
                "or seeds. %s",
             REPORT_HEADLINE_MODULE,
             seeds >= 2 ? "Ours: the mean over seeds with the 95% t-interval for the mean across seeds, then the "
                          "per-seed accuracies in seed order and the number of evaluated examples n per seed (a "
                          "configuration with one seed shows that run's accuracy with its 95% Wilson interval)."
                        : "Ours: accuracy with the 95% Wilson interval and the number of evaluated examples n "
                          "(one seed: intervals across seeds need >= 2 seeds).");
    const char *h[] = {"model", "paper Q+A", "ours Q+A", "paper answer-only", "ours answer-only"};
    doc_table_begin(d, 5, h);
    for (int a = 0; a < 2; a++) {
        const char *arch = a == 0 ? "dense" : "moeut";
        char cells[4][512];
        for (int m = 0; m < 2; m++) {
            const PaperNumber *p = &PAPER_HEADLINE[a * 2 + m];
            snprintf(cells[2 * m], sizeof cells[0], "%.0f%%", p->paper_percent);
            headline_cell(cells[2 * m + 1], sizeof cells[0],
                          report_find_group(in->groups, in->n_groups, arch, p->loss_mode));
        }
        const char *row[] = {arch_label(arch), cells[0], cells[1], cells[2], cells[3]};
        doc_table_row(d, 5, row, false);
    }
    doc_table_end(d);
}

/* ---------------------------------------------------------------- accuracies ------------------------------- */

void section_pooled(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Pooled accuracies");
    doc_para(d, "Each evaluation set pooled over its modules. mean accuracy = mean of the two sets' accuracies (the "
                "paper's mean_accuracy). Answer loss = summed cross-entropy of the answer tokens, mean over examples "
                "(nats). Greedy check: greedy KV-cache decoding agrees with the teacher-forced verdict on k of n "
                "examples (must be all).");
    const char *h[] = {"run", "interpolate", "extrapolate", "mean accuracy", "answer loss interp / extrap",
                       "greedy check"};
    doc_table_begin(d, 6, h);
    for (int i = 0; i < in->n; i++) {
        const RunData *r = &in->runs[i];
        if (!r->has_result) {
            const char *row[] = {r->name, "missing", "missing", "missing", "", ""};
            doc_table_row(d, 6, row, false);
            continue;
        }
        const SetEval *si = &r->res.evaluation.sets[EVAL_INTERPOLATE], *se = &r->res.evaluation.sets[EVAL_EXTRAPOLATE];
        char a[128], b[128], m[32], l[64], g[96];
        fmt_acc(a, sizeof a, si->accuracy, si->ci95, si->n);
        fmt_acc(b, sizeof b, se->accuracy, se->ci95, se->n);
        snprintf(m, sizeof m, "%.2f%%", 100 * r->res.evaluation.mean_accuracy);
        snprintf(l, sizeof l, "%.3f / %.3f", si->mean_answer_loss, se->mean_answer_loss);
        snprintf(g, sizeof g, "%ld/%ld, %ld/%ld%s", si->greedy_agree, si->greedy_n, se->greedy_agree, se->greedy_n,
                 (si->greedy_agree != si->greedy_n || se->greedy_agree != se->greedy_n) ? " DISAGREEMENT" : "");
        const char *row[] = {r->name, a, b, m, l, g};
        doc_table_row(d, 6, row, false);
    }
    doc_table_end(d);
}

/* Rows: the union of the modules of this set over the runs (first-seen order); columns: runs. */
void section_modules(Doc *d, const ReportInput *in, int set) {
    const RunData *runs = in->runs;
    const int n = in->n;
    char title[128];
    snprintf(title, sizeof title, "Per-module accuracy: %s", EVAL_SET_NAMES[set]);
    doc_heading(d, 2, title);
    const char **mods = NULL;
    int n_mods = 0;
    for (int i = 0; i < n; i++) {
        if (!runs[i].has_result) continue;
        const SetEval *s = &runs[i].res.evaluation.sets[set];
        for (int k = 0; k < s->n_modules; k++) {
            bool seen = false;
            for (int j = 0; j < n_mods && !seen; j++) seen = strcmp(mods[j], s->modules[k].name) == 0;
            if (!seen) {
                mods = xrealloc(mods, (size_t)(n_mods + 1) * sizeof *mods);
                mods[n_mods++] = s->modules[k].name;
            }
        }
    }
    if (n_mods == 0) {
        doc_para(d, "No run has results for this set.");
        free(mods);
        return;
    }
    const char **h = xcalloc((size_t)n + 1, sizeof *h);
    h[0] = "module";
    for (int i = 0; i < n; i++) h[i + 1] = runs[i].name;
    doc_table_begin(d, n + 1, h);
    char(*cells)[128] = xcalloc((size_t)n, sizeof *cells);
    const char **row = xcalloc((size_t)n + 1, sizeof *row);
    for (int k = 0; k < n_mods; k++) {
        row[0] = mods[k];
        for (int i = 0; i < n; i++) {
            const ModuleEval *me =
                runs[i].has_result ? set_eval_find_module(&runs[i].res.evaluation.sets[set], mods[k]) : NULL;
            if (!runs[i].has_result) snprintf(cells[i], sizeof cells[i], "missing");
            else if (!me) snprintf(cells[i], sizeof cells[i], "-");
            else fmt_acc(cells[i], sizeof cells[i], me->accuracy, me->ci95, me->n);
            row[i + 1] = cells[i];
        }
        doc_table_row(d, n + 1, row, false);
    }
    doc_table_end(d);
    free(row);
    free(cells);
    free(h);
    free(mods);
}

/* ---------------------------------------------------------------- curves ----------------------------------- */

/* Accuracy during training (eval_curve.jsonl) of the runs of one loss mode: two series (interpolate, extrapolate)
 * per run that has the file. Returns the number of runs drawn (0: nothing written to svg). */
static int accuracy_curve_plot(StrBuf *svg, const ReportInput *in, const char *mode) {
    SvgSeries *series = xcalloc((size_t)(2 * in->n) + 1, sizeof *series);
    char(*names)[160] = xcalloc((size_t)(2 * in->n) + 1, sizeof *names);
    int k = 0, runs = 0;
    for (int i = 0; i < in->n; i++) {
        const RunData *r = &in->runs[i];
        if (!r->has_result || r->n_curve == 0 || strcmp(r->res.loss_mode, mode) != 0) continue;
        runs++;
        for (int s = 0; s < EVAL_N_SETS; s++) {
            snprintf(names[k], sizeof names[k], "%s %s", r->name, EVAL_SET_NAMES[s]);
            series[k] = (SvgSeries){names[k], r->curve_step, r->curve_acc[s], r->n_curve};
            k++;
        }
    }
    if (runs) {
        char title[128];
        snprintf(title, sizeof title, "Accuracy during training, %s loss", mode_label(mode));
        LinePlotStyle st = {title, "step", "accuracy (fraction, eval_curve.jsonl subset)", 0, 0, 0};
        svg_line_plot(svg, series, k, &st);
    }
    free(names);
    free(series);
    return runs;
}

void section_curves(Doc *d, const ReportInput *in) {
    const RunData *runs = in->runs;
    const int n = in->n;
    doc_heading(d, 2, "Training loss and accuracy during training");
    doc_para(d, "Cross-entropy of the trained targets per logged step (metrics.jsonl \"ce\"): all non-pad targets for "
                "Q+A runs, answer tokens only for answer-only runs, so the two panels are not comparable with each "
                "other. Where a run has eval_curve.jsonl (train's evaluate_every), its accuracy on the fixed "
                "evaluation subset (the first evaluate_examples examples of each set) is drawn beside the loss.");
    for (int m = 0; m < 2; m++) {
        const char *mode = m == 0 ? "qa" : "answer_only";
        SvgSeries *series = xcalloc((size_t)n + 1, sizeof *series);
        int k = 0;
        for (int i = 0; i < n; i++) {
            const RunData *r = &runs[i];
            if (!r->has_metrics || !r->has_result || strcmp(r->res.loss_mode, mode) != 0) continue;
            series[k++] = (SvgSeries){r->name, r->step, r->ce, r->n_points};
        }
        char title[128], file[64], acc_file[64], caption[512];
        snprintf(title, sizeof title, "Training cross-entropy, %s loss", mode_label(mode));
        snprintf(file, sizeof file, "loss_%s.svg", mode);
        snprintf(acc_file, sizeof acc_file, "accuracy_%s.svg", mode);
        LinePlotStyle st = {title, "step", "cross-entropy (nats/token)", 0, 0, 0};
        StrBuf svg, acc;
        sb_init(&svg);
        sb_init(&acc);
        svg_line_plot(&svg, series, k, &st);
        int n_acc = accuracy_curve_plot(&acc, in, mode);
        if (n_acc == 0) {
            snprintf(caption, sizeof caption, "Training cross-entropy of the %s runs (%d with metrics.jsonl).",
                     mode_label(mode), k);
            doc_figure(d, file, &svg, caption);
        } else {
            snprintf(caption, sizeof caption, "%s runs: training cross-entropy (%d with metrics.jsonl) and accuracy "
                                              "during training (%d with eval_curve.jsonl).",
                     mode_label(mode), k, n_acc);
            const char *files[2] = {file, acc_file}, *heads[2] = {"training loss", "accuracy during training"};
            const StrBuf *svgs[2] = {&svg, &acc};
            doc_figure_row(d, 2, files, svgs, heads, caption);
        }
        sb_free(&svg);
        sb_free(&acc);
        free(series);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].has_result && !runs[i].has_metrics) doc_para(d, "%s: no metrics.jsonl, so no curve.", runs[i].name);
}

/* ---------------------------------------------------------------- depth ------------------------------------ */

/* The run whose maps stand for a run config in the side-by-side rows: its lowest seed with maps. */
static const RunData *maps_of(const ReportInput *in, const char *arch, const char *mode) {
    const RunGroup *g = report_find_group(in->groups, in->n_groups, arch, mode);
    for (int i = 0; g && i < g->n; i++)
        if (report_run_has_maps(g->runs[i])) return g->runs[i];
    return NULL;
}

/* The largest score over the question region (input positions before the answer-predicting ones) of the prompt k
 * maps in the row: the shared colour scale, so that the question region is not washed out by the answer positions,
 * which dominate every map's maximum. 0 when the row has no question-region signal. */
static double question_region_max(const RunData *const *row, int n, int k) {
    double v = 0;
    for (int i = 0; i < n; i++) {
        if (!row[i] || k >= row[i]->ana.n_prompts) continue;
        const AnalysisPrompt *p = &row[i]->ana.prompts[k];
        const int q_cols = p->n_positions - p->n_answer;
        for (int l = 0; l < p->n_layers; l++)
            for (int t = 0; t < q_cols; t++) {
                double x = p->scores[(size_t)l * p->n_positions + t];
                if (isfinite(x) && x > v) v = x;
            }
    }
    return v;
}

void section_depth(Doc *d, const ReportInput *in) {
    const RunData *runs = in->runs;
    const int n = in->n;
    doc_heading(d, 2, "Depth analysis (residual erasure)");
    const AnalysisRecord *any = NULL;
    for (int i = 0; i < n && !any; i++)
        if (report_run_has_maps(&runs[i])) any = &runs[i].ana;
    if (!any) {
        doc_para(d, "No run has an enabled analysis.json (analysis disabled or not run).");
        return;
    }
    doc_para(d, "For each layer input h_l (rows, layer 0 = embedding output at the bottom) and each input position t "
                "(columns, position 0 never erased), h_l[t] is replaced by the mean residual of a counterfactual "
                "prompt and layers l..L-1 are re-run in fp32; the score is the largest L2 distance between the "
                "next-token distributions at the answer-predicting positions (dashed box), in [0, sqrt 2].");
    doc_para(d, "Depth summary \"%s\": %s", any->summary_name, any->summary_definition);
    doc_para(d, "Paper (by inspection, no metric): the Transformer trained on Q+A barely uses its second half; "
                "answer-only loss makes it use more layers; MoEUT uses more depth in both modes, most with "
                "answer-only loss.");
    const char *h[] = {"run", "depth summary", "per prompt", "prompts answered correctly"};
    doc_table_begin(d, 4, h);
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!report_run_has_maps(r)) {
            const char *row[] = {r->name, report_run_analysis_state(r), "", ""};
            doc_table_row(d, 4, row, false);
            continue;
        }
        char v[32], per[256] = "", ok[32];
        snprintf(v, sizeof v, "%.3f", r->ana.summary_value);
        int n_ok = 0;
        for (int k = 0; k < r->ana.n_prompts; k++) {
            size_t len = strlen(per);
            snprintf(per + len, sizeof per - len, "%s%.3f", k ? ", " : "", r->ana.prompts[k].depth_value);
            n_ok += r->ana.prompts[k].model_correct;
        }
        snprintf(ok, sizeof ok, "%d of %d", n_ok, r->ana.n_prompts);
        const char *row[] = {r->name, v, per, ok};
        doc_table_row(d, 4, row, false);
    }
    doc_table_end(d);

    /* Side by side: one row per prompt, the four runs of the paper in its order, one shared colour scale per row. */
    const RunData *row_runs[4];
    int n_prompts = 0;
    for (int j = 0; j < 4; j++) {
        row_runs[j] = maps_of(in, PAPER_HEADLINE[j].arch, PAPER_HEADLINE[j].loss_mode);
        if (row_runs[j] && row_runs[j]->ana.n_prompts > n_prompts) n_prompts = row_runs[j]->ana.n_prompts;
    }
    doc_para(d, "Maps side by side, one row per prompt: %s, %s, %s, %s (each configuration's lowest seed with an "
                "analysis; other seeds' maps are depth_<k>.svg in their run directories). The four maps of a row "
                "share one colour scale from 0 to the largest score over the QUESTION region (the positions before "
                "the dashed answer box) of the four: the answer-predicting positions, which set every map's own "
                "maximum, would otherwise wash the question region out. Cells above the scale are drawn in its top "
                "colour (the bar reads \u2265max); hover a cell for its value.",
             PAPER_HEADLINE[0].label, PAPER_HEADLINE[1].label, PAPER_HEADLINE[2].label, PAPER_HEADLINE[3].label);
    for (int k = 0; k < n_prompts; k++) {
        const double scale = question_region_max(row_runs, 4, k);
        StrBuf svgs[4];
        const StrBuf *svgp[4] = {NULL, NULL, NULL, NULL};
        char files[4][256], heads[4][200];
        const char *filep[4], *headp[4];
        const AnalysisPrompt *shown = NULL;
        for (int j = 0; j < 4; j++) {
            const RunData *r = row_runs[j];
            filep[j] = files[j];
            headp[j] = heads[j];
            snprintf(files[j], sizeof files[j], "-");
            snprintf(heads[j], sizeof heads[j], "%s", PAPER_HEADLINE[j].label);
            if (!r || k >= r->ana.n_prompts) continue;
            const AnalysisPrompt *p = &r->ana.prompts[k];
            shown = p;
            char ptitle[256];
            snprintf(ptitle, sizeof ptitle, "%s: %s, depth %.3f", r->name,
                     p->model_correct ? "correct" : "WRONG", p->depth_value);
            snprintf(files[j], sizeof files[j], "depth_%s_%d.svg", r->name, k + 1);
            snprintf(heads[j], sizeof heads[j], "%s (%s)", PAPER_HEADLINE[j].label, r->name);
            /* one row of four at 1280 px: each map as wide as a quarter of the page leaves it */
            HeatmapStyle st = {ptitle, "input token", "layer", "L2 distance", p->n_positions - p->n_answer,
                               doc_row_figure_width(4)};
            sb_init(&svgs[j]);
            svg_heatmap_scaled(&svgs[j], p->scores, p->n_layers, p->n_positions, (const char *const *)p->pieces, &st,
                               scale);
            svgp[j] = &svgs[j];
        }
        char caption[1024];
        snprintf(caption, sizeof caption, "Prompt %d: \"%s\" -> \"%s\"; colour scale 0 to %.3g (largest "
                                          "question-region score of the row).",
                 k + 1, shown ? shown->question : "?", shown ? shown->answer : "?", scale);
        doc_figure_row(d, 4, filep, svgp, headp, caption);
        for (int j = 0; j < 4; j++)
            if (svgp[j]) sb_free(&svgs[j]);
    }
}

/* ---------------------------------------------------------------- caveats ---------------------------------- */

void report_scale(const ReportInput *in, ReportScale *s) {
    memset(s, 0, sizeof *s);
    s->min_params = s->min_tokens = INFINITY;
    for (int i = 0; i < in->n; i++) {
        if (!in->runs[i].has_result) continue;
        const ResultRecord *r = &in->runs[i].res;
        s->n_runs++;
        s->min_params = fmin(s->min_params, (double)r->n_params);
        s->max_params = fmax(s->max_params, (double)r->n_params);
        s->min_tokens = fmin(s->min_tokens, (double)r->training.tokens);
        s->max_tokens = fmax(s->max_tokens, (double)r->training.tokens);
    }
    char a[32], b[32];
    fmt_big(a, sizeof a, s->min_params);
    fmt_big(b, sizeof b, s->max_params);
    if (s->min_params == s->max_params) snprintf(s->params, sizeof s->params, "%s", b);
    else snprintf(s->params, sizeof s->params, "%s to %s", a, b);
    fmt_big(a, sizeof a, s->min_tokens);
    fmt_big(b, sizeof b, s->max_tokens);
    if (s->min_tokens == s->max_tokens) snprintf(s->tokens, sizeof s->tokens, "%s", b);
    else snprintf(s->tokens, sizeof s->tokens, "%s to %s", a, b);
}

bool report_run_loss_span(const RunData *r, double *first, double *first_step, double *last, double *last_step) {
    if (!r->has_result || !r->has_metrics || r->n_points < 2) return false;
    *first = r->ce[0];
    *first_step = r->step[0];
    *last = r->ce[r->n_points - 1];
    *last_step = r->step[r->n_points - 1];
    return true;
}

void section_caveats(Doc *d, const ReportInput *in) {
    const RunData *runs = in->runs;
    const int n = in->n;
    doc_heading(d, 2, "What this run can and cannot show");
    long min_head_n = -1;
    for (int i = 0; i < n; i++) {
        if (!runs[i].has_result) continue;
        const ResultRecord *r = &runs[i].res;
        const ModuleEval *me = set_eval_find_module(&r->evaluation.sets[REPORT_HEADLINE_SET], REPORT_HEADLINE_MODULE);
        if (me && (min_head_n < 0 || me->n < min_head_n)) min_head_n = me->n;
    }
    ReportScale sc;
    report_scale(in, &sc);
    doc_list_begin(d);
    if (sc.n_runs == 0) {
        doc_list_item(d, "No run has a result record yet: this report shows nothing about the models.");
        doc_list_end(d);
        return;
    }
    const double max_params = sc.max_params, max_tokens = sc.max_tokens;
    const bool small_model = max_params < VERDICT_SCALE_FRACTION * PAPER_PARAMS;
    const bool short_training = max_tokens < VERDICT_SCALE_FRACTION * PAPER_TOKENS;
    doc_list_item(d, "Scale: %s parameters (paper: about 228M, %.0fx more) trained on %s token slots (paper: 64 x "
                     "1024 x 100k = 6.55B; %.2g%% of it at most).",
                  sc.params, PAPER_PARAMS / fmax(max_params, 1), sc.tokens, 100.0 * max_tokens / PAPER_TOKENS);
    const int seeds = report_max_seeds(in);
    if (small_model || short_training)
        doc_list_item(d, "These runs cannot reproduce the paper's numbers: the models are %s%s%s than the paper's. "
                         "The headline table is a sanity check of the pipeline, not a replication; a difference from "
                         "41/48/36/63%% says nothing about the paper's claim.",
                      small_model ? "far smaller" : "", small_model && short_training ? " and trained far less" : "",
                      !small_model && short_training ? "trained far less" : "");
    else
        doc_list_item(d, "The runs are at roughly the paper's scale: the headline numbers can be compared with the "
                         "paper's, within the intervals shown (%s).",
                      seeds >= 2 ? "across seeds" : "one seed each, as in the paper");
    /* Did learning happen? Compare the first and last logged loss of each run. */
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        double first, first_step, last, last_step;
        if (!report_run_loss_span(r, &first, &first_step, &last, &last_step)) continue;
        doc_list_item(d, "%s: training cross-entropy went from %.3f (step %.0f) to %.3f (step %.0f)%s; pooled "
                         "interpolate accuracy %.1f%%, extrapolate %.1f%%.",
                      r->name, first, first_step, last, last_step,
                      last < 0.9 * first ? ", so the model learned" : ", so this run shows little or no learning",
                      100 * r->res.evaluation.sets[EVAL_INTERPOLATE].accuracy,
                      100 * r->res.evaluation.sets[EVAL_EXTRAPOLATE].accuracy);
    }
    if (min_head_n >= 0) {
        double lo, hi;
        wilson_interval(min_head_n / 2, min_head_n, STATS_Z95, &lo, &hi);
        doc_list_item(d, "Statistical resolution: %ld examples of %s per run (paper: about %.0f). At 50%% accuracy the "
                         "95%% interval is %.1f to %.1f%% (half-width %.1f points), so differences between runs "
                         "smaller than about %.0f points are not evidence of anything. The paper's largest gap "
                         "(MoEUT answer-only vs Q+A) is 27 points.",
                      min_head_n, REPORT_HEADLINE_MODULE, PAPER_EVAL_PER_EXTRAPOLATE_MODULE, 100 * lo, 100 * hi,
                      50 * (hi - lo), 100 * (hi - lo));
    } else {
        doc_list_item(d, "No run evaluated %s, so the headline comparison is not possible.", REPORT_HEADLINE_MODULE);
    }
    if (seeds <= 1)
        doc_list_item(d, "One training seed per configuration: run-to-run variance is not measured (the paper reports "
                         "none either). Intervals across seeds need >= 2 seeds per configuration (make reproduce "
                         "SEEDS=N); until then the verdicts below on differences are \"not resolved\".");
    else {
        char list[1024] = "";
        for (int g = 0; g < in->n_groups; g++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s %d", g ? ", " : "", in->groups[g].label, in->groups[g].n);
        }
        doc_list_item(d, "Seeds per configuration: %s. Intervals across seeds are Student-t intervals with n-1 degrees "
                         "of freedom: with 2 seeds t = 12.7, with 3 seeds t = 4.3, so they are wide by design.",
                      list);
    }
    for (int g = 0; g < in->n_groups; g++) {
        char note[4096], vnote[4096];
        if (in->groups[g].primary &&
            report_split_note(in, in->groups[g].run_config, note, sizeof note, vnote, sizeof vnote))
            doc_list_item(d, "%s: each variant has its own row; the verdicts use the variant of runs/EXP/%s.", note,
                          in->groups[g].run_config);
    }
    bool any_analysis = false;
    for (int i = 0; i < n; i++) any_analysis |= report_run_has_maps(&runs[i]);
    if (any_analysis)
        doc_list_item(d, "The depth maps show where %s model reads the question; %s", small_model ? "this small" : "each",
                      small_model ? "they cannot confirm or refute the paper's finding about its 228M-parameter "
                                    "models, and maps for prompts a model answers wrongly show the sensitivity of a "
                                    "wrong prediction."
                                  : "maps for prompts a model answers wrongly show the sensitivity of a wrong prediction.");
    doc_list_end(d);
}
