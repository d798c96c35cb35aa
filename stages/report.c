/* report: turns the records of one experiment into report.md and a self-contained report.html.
 *
 *   bin/report --experiment EXP --runs runs/EXP --out reports/EXP [--expected-runs a,b,c]
 *
 * Reads ONLY runs/EXP/<RUN>/result.json, analysis.json and metrics.jsonl (and the run configs recorded inside the
 * result records). Writes report.md, report.html (SVGs inlined) and the figures as .svg files beside report.md
 * (which links them). Expected runs that have no result.json are listed as missing, never silently dropped.
 * The output holds no timestamps: the same records give byte-identical reports. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/log.h"
#include "pipeline/result_record.h"
#include "pipeline/stats.h"
#include "pipeline/svg.h"

/* The paper's only quantitative result (dm-math-protocol.md §4): extrapolate accuracy on this module, in %. */
#define HEADLINE_SET EVAL_EXTRAPOLATE
#define HEADLINE_MODULE "arithmetic__mul_div_multiple_longer"
static const struct {
    const char *arch, *loss_mode, *label;
    double paper_percent;
} PAPER[4] = {
    {"dense", "qa", "Transformer, loss on Q+A", 41},
    {"dense", "answer_only", "Transformer, answer-only loss", 48},
    {"moeut", "qa", "MoEUT, loss on Q+A", 36},
    {"moeut", "answer_only", "MoEUT, answer-only loss", 63},
};
/* Paper scale (dm-math-protocol.md §2): parameters of the two models and training tokens (64 x 1024 x 100k slots). */
#define PAPER_PARAMS 228.0e6
#define PAPER_TOKENS (64.0 * 1024.0 * 100000.0)
#define PAPER_EVAL_PER_EXTRAPOLATE_MODULE 830.0
#define DEFAULT_EXPECTED "dense_qa,dense_answer,moeut_qa,moeut_answer"

/* ---------------------------------------------------------------- run data --------------------------------- */

typedef struct {
    char name[128];
    char dir[4096];
    bool has_result, has_analysis, has_metrics;
    ResultRecord res;
    AnalysisRecord ana;
    int n_points;
    double *step, *loss, *ce; /* metrics.jsonl columns (ce = loss when the file has no "ce") */
} RunData;

/* Reads metrics.jsonl: one JSON object per line with at least "step" and "loss". A malformed line is an error that
 * names the file and line (the report must not silently draw a wrong curve). */
static void load_metrics(RunData *r, const char *path) {
    char *text = NULL;
    size_t n = 0;
    char err[1024];
    if (read_file_all(path, &text, &n, err, sizeof err)) die("%s", err);
    int cap = 256, line_no = 0;
    r->step = xmalloc((size_t)cap * sizeof(double));
    r->loss = xmalloc((size_t)cap * sizeof(double));
    r->ce = xmalloc((size_t)cap * sizeof(double));
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (line[strspn(line, " \t\r")] == '\0') continue;
        cJSON *j = cJSON_Parse(line);
        if (!j || !cJSON_IsObject(j)) die("%s:%d: not a JSON object", path, line_no);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "ce");
        if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l)) die("%s:%d: needs numeric \"step\" and \"loss\"", path, line_no);
        if (r->n_points == cap) {
            cap *= 2;
            r->step = xrealloc(r->step, (size_t)cap * sizeof(double));
            r->loss = xrealloc(r->loss, (size_t)cap * sizeof(double));
            r->ce = xrealloc(r->ce, (size_t)cap * sizeof(double));
        }
        r->step[r->n_points] = s->valuedouble;
        r->loss[r->n_points] = l->valuedouble;
        r->ce[r->n_points] = cJSON_IsNumber(c) ? c->valuedouble : l->valuedouble;
        r->n_points++;
        cJSON_Delete(j);
    }
    free(text);
    r->has_metrics = true;
}

/* A record (result or analysis) must be of this run and this experiment: one copied in from another run directory
 * or from runs/OTHER would be reported under the wrong name, title and paper comparison. */
static void require_owner(const char *path, const char *rec_run, const char *rec_experiment, const char *run,
                          const char *experiment) {
    if (strcmp(rec_run, run) != 0) die("%s: run is \"%s\", expected \"%s\"", path, rec_run, run);
    if (strcmp(rec_experiment, experiment) != 0)
        die("%s: experiment is \"%s\", but this report is for --experiment %s", path, rec_experiment, experiment);
}

static void load_run(RunData *r, const char *runs_dir, const char *name, const char *experiment) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->dir, sizeof r->dir, "%s/%s", runs_dir, name);
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    if (file_exists(path)) {
        if (result_record_load(&r->res, path, err, sizeof err)) die("%s", err);
        require_owner(path, r->res.run, r->res.experiment, name, experiment);
        r->has_result = true;
    }
    snprintf(path, sizeof path, "%s/analysis.json", r->dir);
    if (file_exists(path)) {
        if (analysis_record_load(&r->ana, path, err, sizeof err)) die("%s", err);
        require_owner(path, r->ana.run, r->ana.experiment, name, experiment);
        r->has_analysis = true;
    }
    /* Curves are drawn for finished runs only; a run still training, or killed in the middle of a line, must not
     * stop the report of the others. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
    if (r->has_result && file_exists(path)) load_metrics(r, path);
}

/* The report sets runs side by side, so their records must come from one tokenizer and one pair of eval sets; a run
 * evaluated before the data was re-tokenized (or copied from another experiment) would be compared on other
 * examples without a word. Dies naming the first two records that differ. */
static void require_same_data(const RunData *runs, int n) {
    const RunData *first = NULL;
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!r->has_result) continue;
        if (!first) {
            first = r;
            continue;
        }
        const char *what = strcmp(r->res.tokenizer_sha256, first->res.tokenizer_sha256) != 0 ? "tokenizer_sha256"
                           : strcmp(r->res.interpolate_sha256, first->res.interpolate_sha256) != 0
                               ? "dataset.interpolate_sha256"
                           : strcmp(r->res.extrapolate_sha256, first->res.extrapolate_sha256) != 0
                               ? "dataset.extrapolate_sha256"
                               : NULL;
        if (what)
            die("%s/result.json: %s differs from %s/result.json's: the runs were evaluated on other data; re-evaluate "
                "or move one away",
                r->dir, what, first->dir);
    }
}

/* An analysis with maps (present and not disabled by the run config). */
static bool has_maps(const RunData *r) { return r->has_analysis && r->ana.enabled; }
static const char *analysis_state(const RunData *r) {
    return !r->has_analysis ? "missing" : (r->ana.enabled ? "yes" : "disabled");
}

static void free_run(RunData *r) {
    if (r->has_result) result_record_free(&r->res);
    if (r->has_analysis) analysis_record_free(&r->ana);
    free(r->step);
    free(r->loss);
    free(r->ce);
}

/* ---------------------------------------------------------------- two-format document ---------------------- */

/* Every element is written to both the Markdown and the HTML buffer, so the two reports always agree. */
typedef struct {
    StrBuf md, html;
    const char *out_dir;
    int n_figures;
} Doc;

static void md_escape(StrBuf *b, const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '|') sb_puts(b, "\\|");
        else if (*p == '\n') sb_puts(b, " ");
        else {
            char one[2] = {*p, 0};
            sb_puts(b, one);
        }
    }
}

static void doc_heading(Doc *d, int level, const char *text) {
    for (int i = 0; i < level; i++) sb_puts(&d->md, "#");
    sb_puts(&d->md, " ");
    md_escape(&d->md, text);
    sb_puts(&d->md, "\n\n");
    sb_printf(&d->html, "<h%d>", level);
    sb_put_escaped(&d->html, text);
    sb_printf(&d->html, "</h%d>\n", level);
}

static void doc_para(Doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void doc_para(Doc *d, const char *fmt, ...) {
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sb_puts(&d->md, text);
    sb_puts(&d->md, "\n\n");
    sb_puts(&d->html, "<p>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</p>\n");
}

static void doc_list_begin(Doc *d) { sb_puts(&d->html, "<ul>\n"); }
static void doc_list_item(Doc *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void doc_list_item(Doc *d, const char *fmt, ...) {
    char text[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    sb_puts(&d->md, "- ");
    sb_puts(&d->md, text);
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "<li>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</li>\n");
}
static void doc_list_end(Doc *d) {
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</ul>\n");
}

static void doc_table_row(Doc *d, int n, const char *const *cells, bool header) {
    sb_puts(&d->md, "|");
    sb_puts(&d->html, "<tr>");
    for (int i = 0; i < n; i++) {
        sb_puts(&d->md, " ");
        md_escape(&d->md, cells[i]);
        sb_puts(&d->md, " |");
        sb_puts(&d->html, header ? "<th>" : "<td>");
        sb_put_escaped(&d->html, cells[i]);
        sb_puts(&d->html, header ? "</th>" : "</td>");
    }
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</tr>\n");
    if (header) {
        sb_puts(&d->md, "|");
        for (int i = 0; i < n; i++) sb_puts(&d->md, i == 0 ? "---|" : "---:|");
        sb_puts(&d->md, "\n");
    }
}
static void doc_table_begin(Doc *d, int n, const char *const *headers) {
    sb_puts(&d->html, "<table>\n");
    doc_table_row(d, n, headers, true);
}
static void doc_table_end(Doc *d) {
    sb_puts(&d->md, "\n");
    sb_puts(&d->html, "</table>\n");
}

static void doc_pre(Doc *d, const char *text) {
    sb_puts(&d->md, "```\n");
    sb_puts(&d->md, text);
    if (text[0] && text[strlen(text) - 1] != '\n') sb_puts(&d->md, "\n");
    sb_puts(&d->md, "```\n\n");
    sb_puts(&d->html, "<pre>");
    sb_put_escaped(&d->html, text);
    sb_puts(&d->html, "</pre>\n");
}

/* Saves the figure as <out>/<file> (linked from the Markdown) and inlines it into the HTML. */
static void doc_figure(Doc *d, const char *file, const StrBuf *svg, const char *caption) {
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/%s", d->out_dir, file);
    if (sb_save(svg, path, err, sizeof err)) die("%s", err);
    sb_puts(&d->md, "![");
    md_escape(&d->md, caption);
    sb_printf(&d->md, "](%s)\n\n*", file);
    md_escape(&d->md, caption);
    sb_puts(&d->md, "*\n\n");
    sb_puts(&d->html, "<figure>");
    sb_puts(&d->html, svg->data);
    sb_puts(&d->html, "<figcaption>");
    sb_put_escaped(&d->html, caption);
    sb_puts(&d->html, "</figcaption></figure>\n");
    d->n_figures++;
}

/* ---------------------------------------------------------------- formatting helpers ----------------------- */

static void fmt_acc(char *out, size_t n, double acc, const double ci[2], long count) {
    snprintf(out, n, "%.1f%% [%.1f, %.1f] (n=%ld)", 100 * acc, 100 * ci[0], 100 * ci[1], count);
}

static void fmt_big(char *out, size_t n, double v) {
    if (v >= 1e9) snprintf(out, n, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(out, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(out, n, "%.1fk", v / 1e3);
    else snprintf(out, n, "%.0f", v);
}

static const char *arch_label(const char *arch) { return strcmp(arch, "dense") == 0 ? "Transformer" : "MoEUT"; }
static const char *mode_label(const char *mode) { return strcmp(mode, "qa") == 0 ? "Q+A" : "answer-only"; }

/* The run with this arch and loss mode (first in report order), or NULL. */
static const RunData *find_by_kind(const RunData *runs, int n, const char *arch, const char *mode) {
    for (int i = 0; i < n; i++)
        if (runs[i].has_result && strcmp(runs[i].res.arch, arch) == 0 && strcmp(runs[i].res.loss_mode, mode) == 0)
            return &runs[i];
    return NULL;
}

/* ---------------------------------------------------------------- sections --------------------------------- */

static void section_overview(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Runs");
    const char *h[] = {"run", "model", "loss", "params", "steps", "train tokens", "final train loss", "mean accuracy",
                       "analysis"};
    doc_table_begin(d, 9, h);
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        char params[32], steps[32], tokens[32], loss[32], acc[32];
        if (!r->has_result) {
            const char *row[] = {r->name, "MISSING: no result.json", "", "", "", "", "", "", analysis_state(r)};
            doc_table_row(d, 9, row, false);
            continue;
        }
        fmt_big(params, sizeof params, (double)r->res.n_params);
        snprintf(steps, sizeof steps, "%ld", r->res.training.steps);
        fmt_big(tokens, sizeof tokens, (double)r->res.training.tokens);
        snprintf(loss, sizeof loss, "%.4f", r->res.training.final_train_loss);
        snprintf(acc, sizeof acc, "%.2f%%", 100 * r->res.evaluation.mean_accuracy);
        const char *row[] = {r->name, arch_label(r->res.arch), mode_label(r->res.loss_mode), params, steps, tokens,
                             loss, acc, analysis_state(r)};
        doc_table_row(d, 9, row, false);
    }
    doc_table_end(d);
    int missing = 0;
    for (int i = 0; i < n; i++) missing += !runs[i].has_result;
    if (missing)
        doc_para(d, "%d of %d expected runs have no result record (listed as MISSING above); their rows below say so.",
                 missing, n);
}

static void section_headline(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Headline: extrapolation on arithmetic__mul_div_multiple_longer");
    doc_para(d, "The paper's only quantitative result for these models (Csordás et al. 2025, §3.5): accuracy on the "
                "extrapolate file %s, teacher-forced exact match of the whole answer. Ours: accuracy with the 95%% "
                "Wilson interval and the number of evaluated examples n. The paper gives no error bars or seeds.",
             HEADLINE_MODULE);
    const char *h[] = {"model", "paper Q+A", "ours Q+A", "paper answer-only", "ours answer-only"};
    doc_table_begin(d, 5, h);
    for (int a = 0; a < 2; a++) {
        const char *arch = a == 0 ? "dense" : "moeut";
        char cells[4][256];
        for (int m = 0; m < 2; m++) {
            int k = a * 2 + m;
            snprintf(cells[2 * m], sizeof cells[0], "%.0f%%", PAPER[k].paper_percent);
            const RunData *r = find_by_kind(runs, n, arch, PAPER[k].loss_mode);
            if (!r) {
                snprintf(cells[2 * m + 1], sizeof cells[0], "missing");
                continue;
            }
            const ModuleEval *me = set_eval_find_module(&r->res.evaluation.sets[HEADLINE_SET], HEADLINE_MODULE);
            if (!me) snprintf(cells[2 * m + 1], sizeof cells[0], "not evaluated (%s)", r->name);
            else fmt_acc(cells[2 * m + 1], sizeof cells[0], me->accuracy, me->ci95, me->n);
        }
        const char *row[] = {arch_label(arch), cells[0], cells[1], cells[2], cells[3]};
        doc_table_row(d, 5, row, false);
    }
    doc_table_end(d);
}

static void section_pooled(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Pooled accuracies");
    doc_para(d, "Each evaluation set pooled over its modules. mean accuracy = mean of the two sets' accuracies (the "
                "paper's mean_accuracy). Answer loss = summed cross-entropy of the answer tokens, mean over examples "
                "(nats). Greedy check: greedy KV-cache decoding agrees with the teacher-forced verdict on k of n "
                "examples (must be all).");
    const char *h[] = {"run", "interpolate", "extrapolate", "mean accuracy", "answer loss interp / extrap",
                       "greedy check"};
    doc_table_begin(d, 6, h);
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
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
static void section_modules(Doc *d, const RunData *runs, int n, int set) {
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
            const ModuleEval *me = runs[i].has_result ? set_eval_find_module(&runs[i].res.evaluation.sets[set], mods[k]) : NULL;
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

static void section_curves(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Training loss");
    doc_para(d, "Cross-entropy of the trained targets per logged step (metrics.jsonl \"ce\"): all non-pad targets for "
                "Q+A runs, answer tokens only for answer-only runs, so the two panels are not comparable with each "
                "other.");
    for (int m = 0; m < 2; m++) {
        const char *mode = m == 0 ? "qa" : "answer_only";
        SvgSeries *series = xcalloc((size_t)n + 1, sizeof *series);
        int k = 0;
        for (int i = 0; i < n; i++) {
            const RunData *r = &runs[i];
            if (!r->has_metrics || !r->has_result || strcmp(r->res.loss_mode, mode) != 0) continue;
            series[k++] = (SvgSeries){r->name, r->step, r->ce, r->n_points};
        }
        char title[128], file[64], caption[256];
        snprintf(title, sizeof title, "Training cross-entropy, %s loss", mode_label(mode));
        snprintf(file, sizeof file, "loss_%s.svg", mode);
        snprintf(caption, sizeof caption, "Training cross-entropy of the %s runs (%d with metrics.jsonl).",
                 mode_label(mode), k);
        LinePlotStyle st = {title, "step", "cross-entropy (nats/token)", 0, 0, 0};
        StrBuf svg;
        sb_init(&svg);
        svg_line_plot(&svg, series, k, &st);
        doc_figure(d, file, &svg, caption);
        sb_free(&svg);
        free(series);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].has_result && !runs[i].has_metrics)
            doc_para(d, "%s: no metrics.jsonl, so no curve.", runs[i].name);
}

static void section_depth(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Depth analysis (residual erasure)");
    const AnalysisRecord *any = NULL;
    for (int i = 0; i < n && !any; i++)
        if (has_maps(&runs[i])) any = &runs[i].ana;
    if (!any) {
        doc_para(d, "No run has an enabled analysis.json (analysis disabled or not run).");
        return;
    }
    doc_para(d, "For each layer input h_l (rows, layer 0 = embedding output at the bottom) and each input position t "
                "(columns, position 0 never erased), h_l[t] is replaced by the mean residual of a counterfactual "
                "prompt and layers l..L-1 are re-run in fp32; the score is the largest L2 distance between the "
                "next-token distributions at the answer-predicting positions (dashed box), in [0, sqrt 2]. Each map "
                "has its own colour scale from 0 to its maximum (as the paper's Figs. 9, 42-43).");
    doc_para(d, "Depth summary \"%s\": %s", any->summary_name, any->summary_definition);
    doc_para(d, "Paper (by inspection, no metric): the Transformer trained on Q+A barely uses its second half; "
                "answer-only loss makes it use more layers; MoEUT uses more depth in both modes, most with "
                "answer-only loss.");
    const char *h[] = {"run", "depth summary", "per prompt", "prompts answered correctly"};
    doc_table_begin(d, 4, h);
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!has_maps(r)) {
            const char *row[] = {r->name, analysis_state(r), "", ""};
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
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!has_maps(r)) continue;
        char title[256];
        snprintf(title, sizeof title, "%s (%s, %s)", r->name, arch_label(r->ana.arch), mode_label(r->ana.loss_mode));
        doc_heading(d, 3, title);
        for (int k = 0; k < r->ana.n_prompts; k++) {
            const AnalysisPrompt *p = &r->ana.prompts[k];
            char ptitle[512], file[256], caption[1024];
            snprintf(ptitle, sizeof ptitle, "%s, prompt %d: %s%s", r->name, k + 1, p->question, p->answer);
            snprintf(file, sizeof file, "depth_%s_%d.svg", r->name, k + 1);
            double vmax = 0;
            for (size_t e = 0; e < (size_t)p->n_layers * p->n_positions; e++)
                if (p->scores[e] > vmax) vmax = p->scores[e];
            snprintf(caption, sizeof caption, "%s prompt %d: \"%s\" -> \"%s\"; model %s; map max %.3g; depth value %.3f.",
                     r->name, k + 1, p->question, p->answer, p->model_correct ? "answers correctly" : "answers WRONGLY",
                     vmax, p->depth_value);
            HeatmapStyle st = {ptitle, "input token", "layer", "L2 distance", p->n_positions - p->n_answer};
            StrBuf svg;
            sb_init(&svg);
            svg_heatmap(&svg, p->scores, p->n_layers, p->n_positions, (const char *const *)p->pieces, &st);
            doc_figure(d, file, &svg, caption);
            sb_free(&svg);
        }
    }
}

static void section_caveats(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "What this run can and cannot show");
    double min_params = INFINITY, max_params = 0, min_tokens = INFINITY, max_tokens = 0;
    long min_head_n = -1;
    int n_have = 0;
    for (int i = 0; i < n; i++) {
        if (!runs[i].has_result) continue;
        const ResultRecord *r = &runs[i].res;
        n_have++;
        min_params = fmin(min_params, (double)r->n_params);
        max_params = fmax(max_params, (double)r->n_params);
        min_tokens = fmin(min_tokens, (double)r->training.tokens);
        max_tokens = fmax(max_tokens, (double)r->training.tokens);
        const ModuleEval *me = set_eval_find_module(&r->evaluation.sets[HEADLINE_SET], HEADLINE_MODULE);
        if (me && (min_head_n < 0 || me->n < min_head_n)) min_head_n = me->n;
    }
    doc_list_begin(d);
    if (n_have == 0) {
        doc_list_item(d, "No run has a result record yet: this report shows nothing about the models.");
        doc_list_end(d);
        return;
    }
    char a[32], b[32], c[32], e[32];
    fmt_big(a, sizeof a, min_params);
    fmt_big(b, sizeof b, max_params);
    fmt_big(c, sizeof c, min_tokens);
    fmt_big(e, sizeof e, max_tokens);
    const bool small_model = max_params < 0.5 * PAPER_PARAMS;
    const bool short_training = max_tokens < 0.5 * PAPER_TOKENS;
    char params[80], tokens[80];
    if (min_params == max_params) snprintf(params, sizeof params, "%s", b);
    else snprintf(params, sizeof params, "%s to %s", a, b);
    if (min_tokens == max_tokens) snprintf(tokens, sizeof tokens, "%s", e);
    else snprintf(tokens, sizeof tokens, "%s to %s", c, e);
    doc_list_item(d, "Scale: %s parameters (paper: about 228M, %.0fx more) trained on %s token slots (paper: 64 x "
                     "1024 x 100k = 6.55B; %.2g%% of it at most).",
                  params, PAPER_PARAMS / fmax(max_params, 1), tokens, 100.0 * max_tokens / PAPER_TOKENS);
    if (small_model || short_training)
        doc_list_item(d, "These runs cannot reproduce the paper's numbers: the models are %s%s%s than the paper's. "
                         "The headline table is a sanity check of the pipeline, not a replication; a difference from "
                         "41/48/36/63%% says nothing about the paper's claim.",
                      small_model ? "far smaller" : "", small_model && short_training ? " and trained far less" : "",
                      !small_model && short_training ? "trained far less" : "");
    else
        doc_list_item(d, "The runs are at roughly the paper's scale: the headline numbers can be compared with the "
                         "paper's, within the intervals shown (one seed each, as in the paper).");
    /* Did learning happen? Compare the first and last logged loss of each run. */
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!r->has_result || !r->has_metrics || r->n_points < 2) continue;
        double first = r->ce[0], last = r->ce[r->n_points - 1];
        doc_list_item(d, "%s: training cross-entropy went from %.3f (step %.0f) to %.3f (step %.0f)%s; pooled "
                         "interpolate accuracy %.1f%%, extrapolate %.1f%%.",
                      r->name, first, r->step[0], last, r->step[r->n_points - 1],
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
                      min_head_n, HEADLINE_MODULE, PAPER_EVAL_PER_EXTRAPOLATE_MODULE, 100 * lo, 100 * hi,
                      50 * (hi - lo), 100 * (hi - lo));
    } else {
        doc_list_item(d, "No run evaluated %s, so the headline comparison is not possible.", HEADLINE_MODULE);
    }
    doc_list_item(d, "One training seed per configuration: run-to-run variance is not measured (the paper reports "
                     "none either).");
    bool any_analysis = false;
    for (int i = 0; i < n; i++) any_analysis |= has_maps(&runs[i]);
    if (any_analysis)
        doc_list_item(d, "The depth maps show where %s model reads the question; %s", small_model ? "this small" : "each",
                      small_model ? "they cannot confirm or refute the paper's finding about its 244M models, and maps "
                                    "for prompts a model answers wrongly show the sensitivity of a wrong prediction."
                                  : "maps for prompts a model answers wrongly show the sensitivity of a wrong prediction.");
    doc_list_end(d);
}

static void section_provenance(Doc *d, const RunData *runs, int n) {
    doc_heading(d, 2, "Provenance");
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        doc_heading(d, 3, r->name);
        if (!r->has_result) {
            doc_para(d, "MISSING: %s/result.json does not exist.", r->dir);
            continue;
        }
        const ResultRecord *x = &r->res;
        doc_list_begin(d);
        doc_list_item(d, "code version: %s", x->code_version);
        doc_list_item(d, "run config sha256: %s", x->config_sha256);
        doc_list_item(d, "dataset sha256: train %s, interpolate %s, extrapolate %s", x->train_sha256,
                      x->interpolate_sha256, x->extrapolate_sha256);
        doc_list_item(d, "tokenizer sha256: %s", x->tokenizer_sha256);
        doc_list_item(d, "training: %ld steps, %ld tokens, %.1f s wall time (%.0f tokens/s), backend %s (%s), "
                         "precision %s, final train loss %.4f",
                      x->training.steps, x->training.tokens, x->training.wall_time_s, x->training.tokens_per_s,
                      x->training.backend, x->training.hardware, x->training.precision, x->training.final_train_loss);
        doc_list_item(d, "evaluation: backend %s (%s), precision %s, %.1f s wall time", x->backend, x->hardware,
                      x->precision, x->evaluation.wall_time_s);
        if (r->has_analysis && r->ana.enabled && r->ana.backend[0])
            doc_list_item(d, "depth analysis: backend %s (%s), code version %s", r->ana.backend, r->ana.hardware,
                          r->ana.code_version[0] ? r->ana.code_version : "not recorded");
        doc_list_item(d, "parameters: %ld", x->n_params);
        if (x->dataset_source) {
            char *src = cJSON_PrintUnformatted(x->dataset_source);
            CHECK_ALLOC(src);
            doc_list_item(d, "data source: %s", src);
            cJSON_free(src);
        }
        doc_list_end(d);
        char *cfg = cJSON_Print(x->config);
        CHECK_ALLOC(cfg);
        doc_pre(d, cfg);
        cJSON_free(cfg);
    }
}

/* ---------------------------------------------------------------- main ------------------------------------- */

static const char *HTML_HEAD =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n<style>\n"
    "body{font-family:sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222;line-height:1.4}\n"
    "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\n"
    "th,td{border:1px solid #bbb;padding:0.25em 0.6em;text-align:right}\n"
    "th:first-child,td:first-child{text-align:left}\nth{background:#eee}\n"
    "pre{background:#f6f6f6;padding:0.6em;overflow-x:auto;font-size:0.85em}\n"
    "figure{margin:1em 0;overflow-x:auto}figcaption{font-size:0.9em;color:#444}\n"
    "</style>\n</head>\n<body>\n";

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The expected runs, then any other run directory that has a result.json (sorted), without duplicates. */
static char **list_runs(const char *runs_dir, const char *expected, int *n_out) {
    char **names = NULL;
    int n = 0;
    char *copy = xstrdup(expected);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!tok[0]) continue;
        names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = xstrdup(tok);
    }
    free(copy);
    int n_expected = n;
    DIR *d = opendir(runs_dir);
    if (!d) die("%s: cannot open the runs directory: %s", runs_dir, strerror(errno));
    {
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char p[4400];
            snprintf(p, sizeof p, "%s/%s/result.json", runs_dir, e->d_name);
            if (!file_exists(p)) continue;
            bool known = false;
            for (int i = 0; i < n && !known; i++) known = strcmp(names[i], e->d_name) == 0;
            if (known) continue;
            names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
            names[n++] = xstrdup(e->d_name);
        }
        closedir(d);
    }
    qsort(names + n_expected, (size_t)(n - n_expected), sizeof *names, cmp_str);
    *n_out = n;
    return names;
}

static const char *SUMMARY =
    "Writes <out>/report.md and a self-contained <out>/report.html (plus the figures as .svg) from the records of "
    "one experiment: runs/<EXP>/<RUN>/{result.json, analysis.json, metrics.jsonl}. Expected runs without a result "
    "record are listed as missing.";

int report_main(int argc, char **argv) {
    log_set_program("report");
    const char *experiment = NULL, *runs_dir = NULL, *out = NULL, *expected = DEFAULT_EXPECTED;
    CliOption opts[] = {
        {"experiment", OPT_STRING, &experiment, "experiment name (e.g. tiny)", true},
        {"runs", OPT_STRING, &runs_dir, "directory holding the run directories (e.g. runs/tiny)", true},
        {"out", OPT_STRING, &out, "output directory (e.g. reports/tiny)", true},
        {"expected-runs", OPT_STRING, &expected, "comma-separated runs that must appear (default " DEFAULT_EXPECTED ")",
         false},
    };
    cli_parse(argc, argv, "report", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));

    /* A missing runs directory is a wrong path, not an experiment without results: refuse it before writing. */
    struct stat st;
    if (stat(runs_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        die("%s: not a directory (the runs of the experiment, e.g. runs/tiny)", runs_dir);
    int n = 0;
    char **names = list_runs(runs_dir, expected, &n);
    RunData *runs = xcalloc((size_t)n + 1, sizeof *runs);
    for (int i = 0; i < n; i++) load_run(&runs[i], runs_dir, names[i], experiment);
    require_same_data(runs, n);
    char err[1024];
    if (mkdir_p(out, err, sizeof err)) die("%s", err); /* after every record was read: a bad one leaves no output */

    Doc d = {.out_dir = out};
    sb_init(&d.md);
    sb_init(&d.html);
    char title[256];
    snprintf(title, sizeof title, "DM-math depth reproduction: experiment %s", experiment);
    sb_printf(&d.html, HTML_HEAD, "DM-math depth reproduction report");
    doc_heading(&d, 1, title);
    doc_para(&d, "Reproduction of the DeepMind Mathematics experiment of \"Do Language Models Use Their Depth "
                 "Efficiently?\" (Csordás, Manning, Potts, 2025): a dense Transformer and MoEUT, each trained with the "
                 "loss on question+answer and on the answer only. Generated by bin/report (code version %s) from %s.",
             CODE_VERSION, runs_dir);
    section_caveats(&d, runs, n);
    section_overview(&d, runs, n);
    section_headline(&d, runs, n);
    section_pooled(&d, runs, n);
    section_modules(&d, runs, n, EVAL_INTERPOLATE);
    section_modules(&d, runs, n, EVAL_EXTRAPOLATE);
    section_curves(&d, runs, n);
    section_depth(&d, runs, n);
    section_provenance(&d, runs, n);
    sb_puts(&d.html, "</body>\n</html>\n");

    char path[4200];
    snprintf(path, sizeof path, "%s/report.md", out);
    if (sb_save(&d.md, path, err, sizeof err)) die("%s", err);
    snprintf(path, sizeof path, "%s/report.html", out);
    if (sb_save(&d.html, path, err, sizeof err)) die("%s", err);
    int have = 0;
    for (int i = 0; i < n; i++) have += runs[i].has_result;
    log_info("wrote %s/report.md and report.html: %d of %d runs have results, %d figures", out, have, n, d.n_figures);

    sb_free(&d.md);
    sb_free(&d.html);
    for (int i = 0; i < n; i++) {
        free_run(&runs[i]);
        free(names[i]);
    }
    free(runs);
    free(names);
    return 0;
}

#ifndef STAGE_NO_MAIN
int main(int argc, char **argv) { return report_main(argc, argv); }
#endif
