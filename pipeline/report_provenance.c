/* Report sections on what the runs are: the table of config keys that differ between runs, and provenance once per
 * distinct value (see report_sections.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/config_diff.h"
#include "pipeline/log.h"
#include "pipeline/report_sections.h"

/* ---------------------------------------------------------------- config differences ----------------------- */

void section_config_diff(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "What differs between the runs");
    int n = 0;
    const RunData **runs = xcalloc((size_t)in->n + 1, sizeof *runs);
    for (int i = 0; i < in->n; i++)
        if (in->runs[i].has_result) runs[n++] = &in->runs[i];
    if (n < 2) {
        doc_para(d, "Fewer than two runs with a result record: nothing to compare.");
        free(runs);
        return;
    }
    /* Each run's effective config as recorded, plus the run's own inputs that are not in it. */
    cJSON **cfg = xcalloc((size_t)n, sizeof *cfg);
    for (int i = 0; i < n; i++) {
        cfg[i] = cJSON_Duplicate(runs[i]->res.config, 1);
        CHECK_ALLOC(cfg[i]);
        char seed[32];
        snprintf(seed, sizeof seed, "%ld", runs[i]->seed);
        CHECK_ALLOC(cJSON_AddStringToObject(cfg[i], "(run) seed", runs[i]->seed >= 0 ? seed : "unknown"));
        CHECK_ALLOC(cJSON_AddStringToObject(cfg[i], "(run) overrides",
                                            runs[i]->identity.has_overrides ? runs[i]->identity.overrides
                                                                            : "not recorded"));
        CHECK_ALLOC(cJSON_AddStringToObject(cfg[i], "(run) training backend", runs[i]->res.training.backend));
        CHECK_ALLOC(cJSON_AddStringToObject(cfg[i], "(run) training precision", runs[i]->res.training.precision));
    }
    const char *skip[] = {"description", NULL};
    ConfigDiff diff;
    config_diff((const cJSON *const *)cfg, n, skip, &diff);
    doc_para(d, "Every key of the recorded run configs (result.json \"config\": the effective config, overrides "
                "applied) whose value is not the same in all %d runs, plus the run's seed, --set overrides and "
                "training backend and precision (rows \"(run) ...\"). A comparison between two runs is clean only when "
                "they differ in the factor under study (model.arch, the loss mode) and the seed. The free-text "
                "\"description\" key is left out. %d key%s differ%s.",
             n, diff.n_rows, diff.n_rows == 1 ? "" : "s", diff.n_rows == 1 ? "s" : "");
    if (diff.n_rows) {
        const char **h = xcalloc((size_t)n + 1, sizeof *h);
        const char **row = xcalloc((size_t)n + 1, sizeof *row);
        h[0] = "key";
        for (int i = 0; i < n; i++) h[i + 1] = runs[i]->name;
        doc_table_begin(d, n + 1, h);
        for (int r = 0; r < diff.n_rows; r++) {
            row[0] = diff.rows[r].key;
            for (int i = 0; i < n; i++) row[i + 1] = diff.rows[r].values[i] ? diff.rows[r].values[i] : "(absent)";
            doc_table_row(d, n + 1, row, false);
        }
        doc_table_end(d);
        free(row);
        free(h);
    }
    config_diff_free(&diff);
    for (int i = 0; i < n; i++) cJSON_Delete(cfg[i]);
    free(cfg);
    free(runs);
}

/* ---------------------------------------------------------------- provenance ------------------------------- */

/* "value (runs a, b); other (run c)", or "value (all N runs)". */
typedef const char *(*RunField)(const RunData *r, char *buf, size_t cap);

static void provenance_item(Doc *d, const char *label, const RunData *const *runs, int n, RunField field) {
    char *text = xcalloc(1, 1);
    size_t len = 0;
    bool *done = xcalloc((size_t)n + 1, sizeof *done);
    int n_distinct = 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        char vi[1024], vj[1024];
        const char *v = field(runs[i], vi, sizeof vi);
        char names[4096] = "";
        int count = 0;
        for (int j = i; j < n; j++) {
            if (done[j] || strcmp(field(runs[j], vj, sizeof vj), v) != 0) continue;
            done[j] = true;
            size_t nl = strlen(names);
            snprintf(names + nl, sizeof names - nl, "%s%s", count ? ", " : "", runs[j]->name);
            count++;
        }
        size_t add = strlen(v) + strlen(names) + 32;
        text = xrealloc(text, len + add);
        if (count == n) len += (size_t)snprintf(text + len, add, "%s (all %d runs)", v, n);
        else len += (size_t)snprintf(text + len, add, "%s%s (%s)", n_distinct ? "; " : "", v, names);
        n_distinct++;
    }
    doc_list_item(d, "%s: %s", label, text);
    free(done);
    free(text);
}

static const char *f_code(const RunData *r, char *b, size_t n) { return snprintf(b, n, "%s", r->res.code_version), b; }
static const char *f_train_hw(const RunData *r, char *b, size_t n) {
    return snprintf(b, n, "backend %s (%s), precision %s", r->res.training.backend, r->res.training.hardware,
                    r->res.training.precision),
           b;
}
static const char *f_eval_hw(const RunData *r, char *b, size_t n) {
    return snprintf(b, n, "backend %s (%s), precision %s", r->res.backend, r->res.hardware, r->res.precision), b;
}
static const char *f_analysis(const RunData *r, char *b, size_t n) {
    if (!r->has_analysis) return "no analysis";
    if (!r->ana.enabled) return "disabled";
    return snprintf(b, n, "backend %s (%s), code version %s", r->ana.backend[0] ? r->ana.backend : "not recorded",
                    r->ana.hardware[0] ? r->ana.hardware : "not recorded",
                    r->ana.code_version[0] ? r->ana.code_version : "not recorded"),
           b;
}
static const char *f_data(const RunData *r, char *b, size_t n) {
    return snprintf(b, n, "train %s, interpolate %s, extrapolate %s", r->res.train_sha256, r->res.interpolate_sha256,
                    r->res.extrapolate_sha256),
           b;
}
static const char *f_tok(const RunData *r, char *b, size_t n) {
    return snprintf(b, n, "%s", r->res.tokenizer_sha256), b;
}
static const char *f_source(const RunData *r, char *b, size_t n) {
    if (!r->res.dataset_source) return "not recorded";
    char *src = cJSON_PrintUnformatted(r->res.dataset_source);
    CHECK_ALLOC(src);
    snprintf(b, n, "%s", src);
    cJSON_free(src);
    return b;
}

void section_provenance(Doc *d, const ReportInput *in) {
    doc_heading(d, 2, "Provenance");
    int n = 0;
    const RunData **runs = xcalloc((size_t)in->n + 1, sizeof *runs);
    for (int i = 0; i < in->n; i++) {
        if (in->runs[i].has_result) runs[n++] = &in->runs[i];
        else doc_para(d, "MISSING: %s/result.json does not exist.", in->runs[i].dir);
    }
    if (n == 0) {
        free(runs);
        return;
    }
    doc_para(d, "Each fact once per distinct value, with the runs that share it.");
    doc_list_begin(d);
    provenance_item(d, "code version", runs, n, f_code);
    provenance_item(d, "training", runs, n, f_train_hw);
    provenance_item(d, "evaluation", runs, n, f_eval_hw);
    provenance_item(d, "depth analysis", runs, n, f_analysis);
    provenance_item(d, "dataset sha256", runs, n, f_data);
    provenance_item(d, "tokenizer sha256", runs, n, f_tok);
    provenance_item(d, "data source", runs, n, f_source);
    doc_list_end(d);
    const char *h[] = {"run", "run config sha256", "parameters", "steps", "tokens", "train wall s", "tokens/s",
                       "final train loss", "eval wall s"};
    doc_table_begin(d, 9, h);
    for (int i = 0; i < n; i++) {
        const ResultRecord *x = &runs[i]->res;
        char c[5][64];
        snprintf(c[0], sizeof c[0], "%ld", x->n_params);
        snprintf(c[1], sizeof c[1], "%ld", x->training.steps);
        snprintf(c[2], sizeof c[2], "%ld", x->training.tokens);
        snprintf(c[3], sizeof c[3], "%.1f", x->training.wall_time_s);
        snprintf(c[4], sizeof c[4], "%.0f", x->training.tokens_per_s);
        char loss[32], ew[32];
        snprintf(loss, sizeof loss, "%.4f", x->training.final_train_loss);
        snprintf(ew, sizeof ew, "%.1f", x->evaluation.wall_time_s);
        const char *row[] = {runs[i]->name, x->config_sha256, c[0], c[1], c[2], c[3], c[4], loss, ew};
        doc_table_row(d, 9, row, false);
    }
    doc_table_end(d);
    /* Each distinct recorded config once, with the runs that share it. */
    bool *done = xcalloc((size_t)n + 1, sizeof *done);
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        char names[4096] = "";
        for (int j = i; j < n; j++) {
            if (done[j] || !cJSON_Compare(runs[i]->res.config, runs[j]->res.config, 1)) continue;
            done[j] = true;
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", runs[j]->name);
        }
        char title[4200];
        snprintf(title, sizeof title, "Run config of %s", names);
        doc_heading(d, 3, title);
        char *cfg = cJSON_Print(runs[i]->res.config);
        CHECK_ALLOC(cfg);
        doc_pre(d, cfg);
        cJSON_free(cfg);
    }
    free(done);
    free(runs);
}
