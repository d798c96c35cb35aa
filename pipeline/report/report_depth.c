/* The depth analysis over the sampled evaluation prompts (depth_prompts.json, see report_sections.h): per run config
 * the mean depth with its interval and the mean erasure map; the paper's four depth claims judged prompt by prompt,
 * paired across runs and seeds, on both measures, for all prompts and for those answered correctly or wrongly; and
 * how the verdicts move with the uninformative vector.
 *
 * A claim "depth(a) > depth(b)" is judged like the accuracy contrasts (report_stats.h): per shared seed s and sampled
 * prompt i the difference value_a(s, i) - value_b(s, i); the hierarchical bootstrap over seeds and prompts
 * (hierarchical_bootstrap_mean: the prompts are shared by the seeds, a crossed design) and the t-interval of the
 * per-seed means, joined by report_union_interval; verdict_direction on that interval. The subsets "answered correctly"
 * and "answered wrongly" are the prompts that every run of the claim answered so at every paired seed, so that the
 * matrix stays crossed (the same prompts for every seed) and each difference compares two runs on a prompt they both
 * got right (or both got wrong). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/report/report_comparable.h"
#include "pipeline/report/report_sections.h"
#include "pipeline/report/report_stats.h"
#include "pipeline/report/verdict.h"

typedef enum { SUBSET_ALL, SUBSET_CORRECT, SUBSET_WRONG, N_SUBSETS } Subset;
static const char *const SUBSET_NAMES[N_SUBSETS] = {"all prompts", "answered correctly", "answered wrongly"};

static const RunGroup *kind(const ReportInput *in, const char *arch, const char *mode) {
    return report_find_group(in->groups, in->n_groups, arch, mode);
}

bool report_has_depth_prompts(const ReportInput *in) {
    for (int i = 0; i < in->n; i++)
        if (in->runs[i].has_depth_prompts) return true;
    return false;
}

static const DepthPromptsRecord *first_record(const ReportInput *in) {
    for (int i = 0; i < in->n; i++)
        if (in->runs[i].has_depth_prompts) return &in->runs[i].depth;
    return NULL;
}

/* ---------------------------------------------------------------- statistics ------------------------------- */

/* A paired difference a - b of one measure under one vector, over one subset of the prompts. */
typedef struct {
    bool ok;
    char why[1100];                /* when !ok */
    int n_seeds;
    long seeds[REPORT_MAX_SEEDS];
    double per_seed[REPORT_MAX_SEEDS];
    long n_prompts;                /* in the subset */
    BootstrapResult boot;
    double t_lo, t_hi, lo, hi;     /* t-interval across seeds; lo, hi: the verdict interval (their union) */
    Verdict verdict;
} DepthPromptsDiff;

/* The seeds at which both groups have a depth record (a's seed order), their records in ra / rb. */
static int paired_records(const RunGroup *a, const RunGroup *b, long *seeds, const DepthPromptsRecord **ra,
                          const DepthPromptsRecord **rb) {
    int n = 0;
    for (int i = 0; i < a->n && n < REPORT_MAX_SEEDS; i++) {
        const RunData *x = a->runs[i], *y = report_group_seed(b, x->seed);
        if (!x->has_depth_prompts || !y || !y->has_depth_prompts) continue;
        seeds[n] = x->seed;
        ra[n] = &x->depth;
        rb[n++] = &y->depth;
    }
    return n;
}

/* Whether prompt i is in the subset: every record answered it so (SUBSET_ALL: always). */
static bool in_subset(Subset sub, const DepthPromptsRecord *const *recs, int n, int i) {
    if (sub == SUBSET_ALL) return true;
    for (int k = 0; k < n; k++)
        if (recs[k]->prompts[i].correct != (sub == SUBSET_CORRECT)) return false;
    return true;
}

static void depth_diff(const RunGroup *a, const RunGroup *b, DepthVector v, DepthMeasure m, Subset sub,
                       DepthPromptsDiff *out) {
    memset(out, 0, sizeof *out);
    out->boot.estimate = out->boot.lo = out->boot.hi = NAN;
    out->t_lo = out->t_hi = out->lo = out->hi = NAN;
    out->verdict = VERDICT_NOT_RESOLVED;
    if (!a || !b) {
        snprintf(out->why, sizeof out->why, "a run config of the claim has no results");
        return;
    }
    const RunGroup *pair[2] = {a, b};
    if (!report_claim_comparable(pair, 2, out->why, sizeof out->why)) { /* why: the keys that differ besides */
        out->verdict = VERDICT_NOT_COMPARABLE;
        return;
    }
    const DepthPromptsRecord *ra[REPORT_MAX_SEEDS], *rb[REPORT_MAX_SEEDS], *all[2 * REPORT_MAX_SEEDS];
    const int n = paired_records(a, b, out->seeds, ra, rb);
    out->n_seeds = n;
    if (n == 0) {
        snprintf(out->why, sizeof out->why, "no paired seed has depth_prompts.json in both %s and %s", a->run_config,
                 b->run_config);
        return;
    }
    for (int s = 0; s < n; s++) {
        all[2 * s] = ra[s];
        all[2 * s + 1] = rb[s];
        if (!depth_prompts_same_sample(ra[0], ra[s]) || !depth_prompts_same_sample(ra[0], rb[s])) {
            snprintf(out->why, sizeof out->why, "the runs analyzed different prompts (analyze.eval_prompts or the "
                                                "evaluated examples differ)");
            return;
        }
    }
    const int np = ra[0]->n_prompts;
    int *idx = xmalloc((size_t)np * sizeof *idx);
    long ne = 0;
    for (int i = 0; i < np; i++)
        if (in_subset(sub, all, 2 * n, i)) idx[ne++] = i;
    out->n_prompts = ne;
    if (ne == 0) {
        snprintf(out->why, sizeof out->why, "no prompt %s by both runs at every paired seed", SUBSET_NAMES[sub]);
        free(idx);
        return;
    }
    double *values = xmalloc((size_t)n * (size_t)ne * sizeof *values); // [n_seeds, ne]
    for (int s = 0; s < n; s++) {
        double sum = 0;
        for (long e = 0; e < ne; e++) {
            const double x = ra[s]->prompts[idx[e]].value[v][m] - rb[s]->prompts[idx[e]].value[v][m];
            values[(size_t)s * ne + e] = x;
            sum += x;
        }
        out->per_seed[s] = sum / (double)ne;
    }
    hierarchical_bootstrap_mean(values, n, ne, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED, &out->boot);
    double mean;
    mean_t_interval(out->per_seed, n, &mean, &out->t_lo, &out->t_hi, NULL);
    report_union_interval(out->boot.lo, out->boot.hi, out->t_lo, out->t_hi, &out->lo, &out->hi);
    out->verdict = verdict_direction(out->lo, out->hi, n, +1);
    out->ok = true;
    free(values);
    free(idx);
}

static void claim_diff(const ReportInput *in, int k, DepthVector v, DepthMeasure m, Subset sub,
                       DepthPromptsDiff *out) {
    const DepthClaim *c = &DEPTH_CLAIMS[k];
    depth_diff(kind(in, c->arch_a, c->mode_a), kind(in, c->arch_b, c->mode_b), v, m, sub, out);
}

/* One run config's level of each measure under each vector, over its seeds and all the prompts. */
typedef struct {
    int n_seeds;
    long n_prompts;
    double correct;                /* share of the prompts answered correctly, mean over the seeds */
    BootstrapResult boot[DEPTH_N_VECTORS][DEPTH_N_MEASURES];
    const char *why;               /* NULL, or why there is no level */
} DepthLevel;

static void depth_level(const RunGroup *g, DepthLevel *out) {
    memset(out, 0, sizeof *out);
    const DepthPromptsRecord *recs[REPORT_MAX_SEEDS];
    for (int i = 0; i < g->n && out->n_seeds < REPORT_MAX_SEEDS; i++)
        if (g->runs[i]->has_depth_prompts) recs[out->n_seeds++] = &g->runs[i]->depth;
    if (out->n_seeds == 0) {
        out->why = "no depth_prompts.json";
        return;
    }
    for (int s = 1; s < out->n_seeds; s++)
        if (!depth_prompts_same_sample(recs[0], recs[s])) {
            out->why = "its seeds analyzed different prompts";
            return;
        }
    const int n = out->n_seeds, np = recs[0]->n_prompts;
    out->n_prompts = np;
    double *values = xmalloc((size_t)n * np * sizeof *values); // [n_seeds, np]
    for (int s = 0; s < n; s++)
        for (int i = 0; i < np; i++) out->correct += recs[s]->prompts[i].correct / ((double)np * n);
    for (int v = 0; v < DEPTH_N_VECTORS; v++)
        for (int m = 0; m < DEPTH_N_MEASURES; m++) {
            for (int s = 0; s < n; s++)
                for (int i = 0; i < np; i++) values[(size_t)s * np + i] = recs[s]->prompts[i].value[v][m];
            hierarchical_bootstrap_mean(values, n, np, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED,
                                        &out->boot[v][m]);
        }
    free(values);
}

/* ---------------------------------------------------------------- formatting ------------------------------- */

/* "consistent: +0.031 [+0.012, +0.050] (3 seeds x 500)", or "not resolved at this size: n/a (why)". */
static void fmt_diff_cell(char *out, size_t cap, const DepthPromptsDiff *dd) {
    if (!dd->ok && dd->verdict == VERDICT_NOT_COMPARABLE) {
        snprintf(out, cap, "%s: %s", verdict_label(dd->verdict), dd->why);
        return;
    }
    if (!dd->ok) {
        snprintf(out, cap, "%s: n/a (%s)", verdict_label(dd->verdict), dd->why);
        return;
    }
    if (dd->n_seeds < 2) /* no spread across seeds to join: the prompt bootstrap alone, and said so */
        snprintf(out, cap, "%s: %+.3f [%+.3f, %+.3f] (1 seed x %ld; the interval over prompts only)",
                 verdict_label(dd->verdict), dd->boot.estimate, dd->boot.lo, dd->boot.hi, dd->n_prompts);
    else
        snprintf(out, cap, "%s: %+.3f [%+.3f, %+.3f] (%d seeds x %ld)", verdict_label(dd->verdict), dd->boot.estimate,
                 dd->lo, dd->hi, dd->n_seeds, dd->n_prompts);
}

/* Which side of 0 the difference's interval lies on: +1 above, -1 below, 0 across it or undefined. The verdict
 * interval with two seeds or more, the prompt bootstrap with one (where the verdict rule says nothing). */
static int interval_side(const DepthPromptsDiff *dd) {
    if (!dd->ok) return 0;
    const double lo = dd->n_seeds < 2 ? dd->boot.lo : dd->lo, hi = dd->n_seeds < 2 ? dd->boot.hi : dd->hi;
    return lo > 0 ? 1 : hi < 0 ? -1 : 0;
}
static const char *side_label(int side) { return side > 0 ? "above 0" : side < 0 ? "below 0" : "across 0"; }

/* "0.812 [0.801, 0.823]" (a level with its bootstrap interval over seeds and prompts). */
static void fmt_level(char *out, size_t cap, const BootstrapResult *b) {
    snprintf(out, cap, "%.3f [%.3f, %.3f]", b->estimate, b->lo, b->hi);
}

/* ---------------------------------------------------------------- the verdict line ------------------------- */

Verdict depth_prompts_verdict_line(Doc *d, const ReportInput *in, int k, VerdictWhy *why) {
    const DepthClaim *c = &DEPTH_CLAIMS[k];
    const RunGroup *a = kind(in, c->arch_a, c->mode_a), *b = kind(in, c->arch_b, c->mode_b);
    DepthPromptsDiff dd;
    depth_diff(a, b, DEPTH_VEC_COUNTERFACTUAL, DEPTH_MEASURE_FRACTION, SUBSET_ALL, &dd);
    char nums[1600];
    if (dd.verdict == VERDICT_NOT_COMPARABLE) {
        doc_list_item(d, "Depth (§5) over the sampled evaluation prompts: %s, i.e. depth_fraction of %s > %s: %s: %s. "
                         "%s.",
                      c->claim, a->run_config, b->run_config, verdict_label(dd.verdict), dd.why,
                      REPORT_NO_VERDICT_REASON);
        return dd.verdict;
    }
    if (!dd.ok) snprintf(nums, sizeof nums, "%s", dd.why);
    else {
        int len = snprintf(nums, sizeof nums, "difference %+.3f, bootstrap over seeds and %ld prompts [%+.3f, %+.3f]",
                           dd.boot.estimate, dd.n_prompts, dd.boot.lo, dd.boot.hi);
        if (dd.n_seeds >= 2)
            len += snprintf(nums + len, sizeof nums - (size_t)len, ", t across seeds [%+.3f, %+.3f]", dd.t_lo, dd.t_hi);
        len += snprintf(nums + len, sizeof nums - (size_t)len, "; %d paired seed%s (", dd.n_seeds,
                        dd.n_seeds == 1 ? "" : "s");
        for (int s = 0; s < dd.n_seeds && len > 0 && (size_t)len < sizeof nums; s++)
            len += snprintf(nums + len, sizeof nums - (size_t)len, "%sseed %ld: %+.3f", s ? ", " : "", dd.seeds[s],
                            dd.per_seed[s]);
        if (len > 0 && (size_t)len < sizeof nums) snprintf(nums + len, sizeof nums - (size_t)len, ")");
    }
    doc_list_item(d, "Depth (§5) over the sampled evaluation prompts: %s, i.e. depth_fraction of %s > %s, prompt by "
                     "prompt (the paper's counterfactual vector): %s. Ours: %s.",
                  c->claim, a ? a->run_config : "missing", b ? b->run_config : "missing", verdict_label(dd.verdict),
                  nums);
    *why = dd.ok ? verdict_direction_why(dd.lo, dd.hi, dd.n_seeds, +1) : VERDICT_WHY_NO_DATA;
    return dd.verdict;
}

/* ---------------------------------------------------------------- the section ------------------------------ */

static void levels_table(Doc *d, const ReportInput *in) {
    const char *h[] = {"run config", "seeds", "prompts", "answered correctly", "depth_fraction", "depth_centre"};
    doc_table_begin(d, 6, h);
    for (int i = 0; i < in->n_groups; i++) {
        const RunGroup *g = &in->groups[i];
        DepthLevel lv;
        depth_level(g, &lv);
        if (lv.n_seeds == 0) continue;
        char seeds[16], prompts[32], ok[32], f[64], c[64];
        snprintf(seeds, sizeof seeds, "%d", lv.n_seeds);
        if (lv.why) {
            const char *row[] = {g->label, seeds, lv.why, "", "", ""};
            doc_table_row(d, 6, row, false);
            continue;
        }
        snprintf(prompts, sizeof prompts, "%ld", lv.n_prompts);
        snprintf(ok, sizeof ok, "%.1f%%", 100 * lv.correct);
        fmt_level(f, sizeof f, &lv.boot[DEPTH_VEC_COUNTERFACTUAL][DEPTH_MEASURE_FRACTION]);
        fmt_level(c, sizeof c, &lv.boot[DEPTH_VEC_COUNTERFACTUAL][DEPTH_MEASURE_CENTRE]);
        const char *row[] = {g->label, seeds, prompts, ok, f, c};
        doc_table_row(d, 6, row, false);
    }
    doc_table_end(d);
}

/* The mean over g's seeds of their mean maps under vector v, [n_layers, bins + 1]; NULL without a record or when the
 * seeds' maps differ in shape. */
static double *group_mean_map(const RunGroup *g, DepthVector v, int *rows, int *cols) {
    const DepthPromptsRecord *ref = NULL;
    double *map = NULL;
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        if (!g->runs[i]->has_depth_prompts) continue;
        const DepthPromptsRecord *r = &g->runs[i]->depth;
        if (!ref) {
            ref = r;
            *rows = r->n_layers;
            *cols = r->map_bins + 1;
            map = xcalloc((size_t)*rows * *cols, sizeof *map);
        } else if (r->n_layers != ref->n_layers || r->map_bins != ref->map_bins) {
            free(map);
            return NULL;
        }
        for (int c = 0; c < *rows * *cols; c++) map[c] += r->mean_map[v][c];
        n++;
    }
    for (int c = 0; map && c < *rows * *cols; c++) map[c] /= n;
    return map;
}

/* The mean maps of the paper's four configurations side by side, on one colour scale: the largest question-region
 * cell of the four (the answer column, like the answer box of the prompt maps, would wash the question out). */
static void mean_maps_row(Doc *d, const ReportInput *in) {
    double *maps[4] = {NULL, NULL, NULL, NULL}, scale = 0;
    int rows[4] = {0}, cols[4] = {0};
    for (int j = 0; j < 4; j++) {
        const RunGroup *g = kind(in, PAPER_HEADLINE[j].arch, PAPER_HEADLINE[j].loss_mode);
        if (g) maps[j] = group_mean_map(g, DEPTH_VEC_COUNTERFACTUAL, &rows[j], &cols[j]);
        for (int c = 0; maps[j] && c < rows[j] * cols[j]; c++)
            if (c % cols[j] < cols[j] - 1) scale = fmax(scale, maps[j][c]);
    }
    StrBuf svgs[4];
    const StrBuf *svgp[4] = {NULL, NULL, NULL, NULL};
    char files[4][256], heads[4][200];
    const char *filep[4], *headp[4];
    for (int j = 0; j < 4; j++) {
        const RunGroup *g = kind(in, PAPER_HEADLINE[j].arch, PAPER_HEADLINE[j].loss_mode);
        filep[j] = files[j];
        headp[j] = heads[j];
        snprintf(files[j], sizeof files[j], "-");
        snprintf(heads[j], sizeof heads[j], "%s", PAPER_HEADLINE[j].label);
        if (!maps[j]) continue;
        char *labels[64], title[256];
        const int K = cols[j] - 1;
        for (int b = 0; b < cols[j] && b < 64; b++) {
            labels[b] = xmalloc(32);
            if (b < K) snprintf(labels[b], 32, "%d-%d%%", 100 * b / K, 100 * (b + 1) / K);
            else snprintf(labels[b], 32, "answer");
        }
        snprintf(title, sizeof title, "%s: mean erasure map", g->label);
        snprintf(files[j], sizeof files[j], "depth_mean_%s.svg", g->label);
        snprintf(heads[j], sizeof heads[j], "%s (%s)", PAPER_HEADLINE[j].label, g->label);
        /* one row of four at 1280 px */
        HeatmapStyle st = {title, "question position (share of the question), then the answer-predicting positions",
                           "layer", "mean L2 distance", K, doc_row_figure_width(4)};
        sb_init(&svgs[j]);
        svg_heatmap_scaled(&svgs[j], maps[j], rows[j], cols[j], (const char *const *)labels, &st, scale);
        svgp[j] = &svgs[j];
        for (int b = 0; b < cols[j] && b < 64; b++) free(labels[b]);
    }
    char caption[512];
    snprintf(caption, sizeof caption, "Mean erasure maps over the sampled prompts, mean over seeds (the paper's "
                                      "counterfactual vector); colour scale 0 to %.3g (largest question-region cell).",
             scale);
    doc_figure_row(d, 4, filep, svgp, headp, caption);
    for (int j = 0; j < 4; j++) {
        if (svgp[j]) sb_free(&svgs[j]);
        free(maps[j]);
    }
}

/* Claims x measures under the paper's vector: all prompts, those answered correctly, those answered wrongly. */
static void claims_table(Doc *d, const ReportInput *in) {
    const char *h[] = {"claim (a > b)", "measure", "all prompts", "answered correctly", "answered wrongly"};
    doc_table_begin(d, 5, h);
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < DEPTH_N_MEASURES; m++) {
            char cells[N_SUBSETS][1300];
            for (int s = 0; s < N_SUBSETS; s++) {
                DepthPromptsDiff dd;
                claim_diff(in, k, DEPTH_VEC_COUNTERFACTUAL, (DepthMeasure)m, (Subset)s, &dd);
                fmt_diff_cell(cells[s], sizeof cells[s], &dd);
            }
            const char *row[] = {DEPTH_CLAIMS[k].claim, DEPTH_MEASURE_NAMES[m], cells[0], cells[1], cells[2]};
            doc_table_row(d, 5, row, false);
        }
    doc_table_end(d);
}

/* The sensitivity to the uninformative vector: each claim and measure over all prompts under every vector, and
 * whether the verdict depends on the choice (said in the table and, for each claim that flips, in a line below). */
static void sensitivity(Doc *d, const ReportInput *in) {
    doc_heading(d, 3, "Sensitivity to the uninformative vector");
    doc_para(d, "The same claims over all the sampled prompts with each choice of the vector that replaces an erased "
                "residual (the paper's is the counterfactual mean; the others are the usual alternatives of "
                "ablation studies). A claim whose verdict differs between the vectors depends on that choice, and "
                "says so; where the verdicts agree but the interval lies on another side of 0 under another vector "
                "(with one seed, where no verdict is given, the interval over the prompts), that is said too.");
    const char *h[] = {"claim (a > b)", "measure", "counterfactual", "eval_mean", "zero", "depends on the vector"};
    doc_table_begin(d, 6, h);
    char flips[8][600];
    int n_flips = 0;
    for (int k = 0; k < 4; k++)
        for (int m = 0; m < DEPTH_N_MEASURES; m++) {
            char cells[DEPTH_N_VECTORS][1300], dep[256];
            Verdict v[DEPTH_N_VECTORS];
            int side[DEPTH_N_VECTORS];
            bool flip = false, moves = false;
            for (int b = 0; b < DEPTH_N_VECTORS; b++) {
                DepthPromptsDiff dd;
                claim_diff(in, k, (DepthVector)b, (DepthMeasure)m, SUBSET_ALL, &dd);
                fmt_diff_cell(cells[b], sizeof cells[b], &dd);
                v[b] = dd.verdict;
                side[b] = interval_side(&dd);
                flip |= v[b] != v[0];
                moves |= side[b] != side[0];
            }
            if (!flip && moves) { /* e.g. one seed: no verdict, but the prompts' interval moves across 0 */
                snprintf(dep, sizeof dep, "no verdict changes, but the interval moves: %s / %s / %s",
                         side_label(side[0]), side_label(side[1]), side_label(side[2]));
            } else if (flip) {
                snprintf(dep, sizeof dep, "yes: %s / %s / %s", verdict_label(v[0]), verdict_label(v[1]),
                         verdict_label(v[2]));
                snprintf(flips[n_flips++], sizeof flips[0], "%s (%s): %s with the counterfactual mean, %s with the "
                                                            "evaluation mean, %s with zero.",
                         DEPTH_CLAIMS[k].claim, DEPTH_MEASURE_NAMES[m], verdict_label(v[0]), verdict_label(v[1]),
                         verdict_label(v[2]));
            } else {
                snprintf(dep, sizeof dep, "no");
            }
            const char *row[] = {DEPTH_CLAIMS[k].claim, DEPTH_MEASURE_NAMES[m], cells[0], cells[1], cells[2], dep};
            doc_table_row(d, 6, row, false);
        }
    doc_table_end(d);
    if (n_flips == 0) doc_para(d, "No verdict flips with the choice of the vector.");
    else {
        doc_para(d, "%d verdict%s depend%s on the choice of the vector:", n_flips, n_flips == 1 ? "" : "s",
                 n_flips == 1 ? "s" : "");
        doc_list_begin(d);
        for (int i = 0; i < n_flips; i++) doc_list_item(d, "%s", flips[i]);
        doc_list_end(d);
    }
    /* the levels behind them */
    const char *hl[] = {"run config", "depth_fraction: counterfactual", "eval_mean", "zero",
                        "depth_centre: counterfactual", "eval_mean", "zero"};
    doc_table_begin(d, 7, hl);
    for (int i = 0; i < in->n_groups; i++) {
        DepthLevel lv;
        depth_level(&in->groups[i], &lv);
        if (lv.n_seeds == 0 || lv.why) continue;
        char c[6][32];
        for (int m = 0; m < DEPTH_N_MEASURES; m++)
            for (int b = 0; b < DEPTH_N_VECTORS; b++)
                snprintf(c[m * DEPTH_N_VECTORS + b], sizeof c[0], "%.3f", lv.boot[b][m].estimate);
        const char *row[] = {in->groups[i].label, c[0], c[1], c[2], c[3], c[4], c[5]};
        doc_table_row(d, 7, row, false);
    }
    doc_table_end(d);
}

void section_depth_prompts(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Depth over the evaluation prompts");
    const DepthPromptsRecord *any = first_record(in);
    if (!any) {
        doc_para(d, "No run has depth_prompts.json (analyze.eval_prompts is 0 or absent in the run configs): the "
                    "depth claims rest on the paper's four prompts alone.");
        return;
    }
    doc_para(d, "The residual erasure of the section above, run by bin/analyze on %d evaluation examples of each run "
                "(analyze.eval_prompts = %ld; depth_prompts.json): %s (sample seed %llu). Every run and seed analyzes "
                "the same prompts, so runs are compared prompt by prompt; \"answered correctly\" is the evaluation's "
                "teacher-forced exact match of the prompt.",
             any->n_prompts, any->requested, DEPTH_SAMPLE_DEFINITION, any->sample_seed);
    doc_list_begin(d);
    for (int m = 0; m < DEPTH_N_MEASURES; m++)
        doc_list_item(d, "%s: %s.", DEPTH_MEASURE_NAMES[m], DEPTH_PROMPTS_DEFINITIONS[m]);
    for (int b = 0; b < DEPTH_N_VECTORS; b++)
        doc_list_item(d, "Vector %s: %s.", DEPTH_VECTOR_NAMES[b], DEPTH_VECTOR_DEFINITIONS[b]);
    doc_list_end(d);
    doc_para(d, "Per run config, the mean over its seeds and the prompts with a 95%% hierarchical bootstrap interval "
                "(seeds, then prompts), under the paper's counterfactual vector:");
    levels_table(d, in);
    doc_para(d, "Mean erasure maps (%s).", DEPTH_MAP_DEFINITION);
    mean_maps_row(d, in);
    doc_para(d, "The paper's depth claims, prompt by prompt under the paper's counterfactual vector: each cell the "
                "verdict, the mean paired difference a - b and the verdict interval (the union of the hierarchical "
                "bootstrap over seeds and prompts and the t-interval of the per-seed means; with one seed the "
                "bootstrap over prompts alone, and no verdict), with seeds x prompts. \"Answered correctly\" "
                "(\"wrongly\"): the prompts that both runs answered correctly (wrongly) at every paired seed.");
    claims_table(d, in);
    sensitivity(d, in);
}
