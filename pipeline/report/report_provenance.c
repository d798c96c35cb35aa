/* Report sections on what the runs are: the table of config keys that differ between runs, and provenance once per
 * distinct value (see report_sections.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/records/config_diff.h"
#include "pipeline/base/log.h"
#include "pipeline/report/report_sections.h"

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

/* A JSON value of a config as the line shows it: a string without its quotes. */
static void shown_value(const char *json, char *out, size_t cap) {
    const size_t n = strlen(json);
    if (n >= 2 && json[0] == '"' && json[n - 1] == '"') snprintf(out, cap, "%.*s", (int)(n - 2), json + 1);
    else snprintf(out, cap, "%s", json);
}

/* Keys the line leaves out: the free text, comments (the variant key ignores them too) and the seed (said apart). */
static bool line_skips(const char *key) {
    const char *last = strrchr(key, '.');
    return strcmp(key, "description") == 0 || strcmp(last ? last + 1 : key, "comment") == 0 ||
           strcmp(key, "train.seed") == 0;
}

int report_config_diff_line(const ReportInput *in, char *out, size_t cap) {
    enum { MAX_NAMED = 16, MAX_VALUES = 4 };
    out[0] = '\0';
    int n = 0;
    const cJSON **cfg = xcalloc((size_t)in->n + 1, sizeof *cfg);
    for (int i = 0; i < in->n; i++)
        if (in->runs[i].has_result) cfg[n++] = in->runs[i].res.config;
    ConfigDiff diff;
    config_diff((const cJSON *const *)cfg, n, NULL, &diff);
    free(cfg);
    char everywhere[4096] = "", somewhere[4096] = "";
    size_t le = 0, ls = 0;
    int keys = 0, named = 0;
    for (int r = 0; r < diff.n_rows; r++) {
        const ConfigDiffRow *row = &diff.rows[r];
        if (line_skips(row->key)) continue;
        keys++;
        if (named >= MAX_NAMED) continue;
        named++;
        bool in_all = true;
        for (int i = 0; i < n; i++) in_all &= row->values[i] != NULL;
        if (!in_all) {
            ls += (size_t)snprintf(somewhere + ls, ls < sizeof somewhere ? sizeof somewhere - ls : 0, "%s%s",
                                   ls ? ", " : "", row->key);
            continue;
        }
        /* the distinct values in order of appearance */
        le += (size_t)snprintf(everywhere + le, le < sizeof everywhere ? sizeof everywhere - le : 0, "%s%s (",
                               le ? ", " : "", row->key);
        int shown = 0;
        for (int i = 0; i < n; i++) {
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) seen = strcmp(row->values[j], row->values[i]) == 0;
            if (seen) continue;
            char v[64];
            shown_value(row->values[i], v, sizeof v);
            if (shown++ == MAX_VALUES) {
                le += (size_t)snprintf(everywhere + le, le < sizeof everywhere ? sizeof everywhere - le : 0,
                                       " / ...");
                break;
            }
            le += (size_t)snprintf(everywhere + le, le < sizeof everywhere ? sizeof everywhere - le : 0, "%s%s",
                                   shown > 1 ? " / " : "", v);
        }
        le += (size_t)snprintf(everywhere + le, le < sizeof everywhere ? sizeof everywhere - le : 0, ")");
    }
    config_diff_free(&diff);
    snprintf(out, cap, "%s%s%s%s", everywhere, everywhere[0] && somewhere[0] ? "; " : "",
             somewhere[0] ? "set in some runs only: " : "", somewhere);
    if (keys > named) {
        const size_t len = strlen(out);
        snprintf(out + len, cap - len, "; and %d more", keys - named);
    }
    return keys;
}

/* ---------------------------------------------------------------- provenance ------------------------------- */

typedef const char *(*RunField)(const RunData *r, char *buf, size_t cap);

/* The value with every run of 16 or more hex digits (a hash) cut to its first 12 and an ellipsis, so that the table
 * fits the page; the full value stays in the cell's title (HTML) and in the Markdown. */
static void shorten_hashes(const char *v, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; v[i] && o + 4 < cap;) {
        size_t h = strspn(v + i, "0123456789abcdef");
        if (h >= 16) {
            memcpy(out + o, v + i, 12);
            o += 12;
            memcpy(out + o, "\u2026", 3);
            o += 3;
            i += h;
        } else {
            size_t k = h ? h : 1;
            if (o + k + 4 >= cap) break;
            memcpy(out + o, v + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
}

/* One table row per distinct value of the fact, with the runs that share it ("all N runs" when every run does). */
static void provenance_rows(Doc *d, const char *label, const RunData *const *runs, int n, RunField field) {
    bool *done = xcalloc((size_t)n + 1, sizeof *done);
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        char vi[1024], vj[1024], shown[1024], names[4096] = "";
        const char *v = field(runs[i], vi, sizeof vi);
        int count = 0;
        for (int j = i; j < n; j++) {
            if (done[j] || strcmp(field(runs[j], vj, sizeof vj), v) != 0) continue;
            done[j] = true;
            size_t nl = strlen(names);
            snprintf(names + nl, sizeof names - nl, "%s%s", count ? ", " : "", runs[j]->name);
            count++;
        }
        char all[32];
        snprintf(all, sizeof all, "all %d runs", n);
        shorten_hashes(v, shown, sizeof shown);
        if (strlen(shown) > 240) memcpy(shown + 237, "\u2026", 4); /* a long JSON source: the start, the rest on hover */
        const char *cells[3] = {label, shown, count == n ? all : names}, *full[3] = {NULL, v, NULL};
        doc_table_row_titled(d, 3, cells, full);
    }
    free(done);
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

/* An upcycled run's initial weights (result.json init_from), or the run's own initialisation. */
static const char *f_init(const RunData *r, char *b, size_t n) {
    const RunProvenance *p = &r->res.prov;
    if (!p->init_path[0]) return "own initialisation (train.seed)";
    return snprintf(b, n, "%s (sha256 %s): %s of %s (sha256 %s), seed %ld, noise %g", p->init_path, p->init_sha256,
                    p->upcycle_method, p->upcycle_source, p->upcycle_source_sha256, p->upcycle_seed, p->upcycle_noise),
           b;
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
    doc_para(d, "Each fact once per distinct value, with the runs that share it. Hashes are shown by their first 12 "
                "hex digits (hover for the whole value in report.html; report.md has it in full).");
    const char *ph[] = {"fact", "value", "runs"};
    doc_table_begin(d, 3, ph);
    provenance_rows(d, "code version", runs, n, f_code);
    provenance_rows(d, "training", runs, n, f_train_hw);
    provenance_rows(d, "evaluation", runs, n, f_eval_hw);
    provenance_rows(d, "depth analysis", runs, n, f_analysis);
    provenance_rows(d, "dataset sha256", runs, n, f_data);
    provenance_rows(d, "tokenizer sha256", runs, n, f_tok);
    provenance_rows(d, "data source", runs, n, f_source);
    bool any_init = false; /* the row only where a run started from converted weights (bin/upcycle) */
    for (int i = 0; i < n; i++) any_init = any_init || runs[i]->res.prov.init_path[0];
    if (any_init) provenance_rows(d, "initial weights", runs, n, f_init);
    doc_table_end(d);
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
        char loss[32], ew[32], sha[128];
        snprintf(loss, sizeof loss, "%.4f", x->training.final_train_loss);
        snprintf(ew, sizeof ew, "%.1f", x->evaluation.wall_time_s);
        shorten_hashes(x->config_sha256, sha, sizeof sha);
        const char *row[] = {runs[i]->name, sha, c[0], c[1], c[2], c[3], c[4], loss, ew};
        const char *full[] = {NULL, x->config_sha256, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        doc_table_row_titled(d, 9, row, full);
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
