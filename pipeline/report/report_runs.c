/* Loading and grouping of an experiment's runs for the report (see report_runs.h). */
#include "pipeline/report/report_runs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/records/predictions.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/records/routing_stats.h"

/* Calls each_line(ctx, path, line_no, parsed) for every non-blank line of the JSON-lines file at path, parsed being
 * the line's JSON (NULL when it is not JSON: each_line reports that, with the file and line, and dies). */
typedef void (*JsonlLineFn)(void *ctx, const char *path, int line_no, const cJSON *parsed);
static void read_jsonl_lines(const char *path, JsonlLineFn each_line, void *ctx) {
    char *text = NULL;
    size_t n = 0;
    char err[1024];
    if (read_file_limited(path, LIMIT_JSONL_FILE_BYTES, "JSON-lines file", &text, &n, err, sizeof err) ||
        json_check_strings(text, n, path, err, sizeof err))
        die("%s", err);
    int line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (line[strspn(line, " \t\r")] == '\0') continue;
        cJSON *j = cJSON_Parse(line);
        each_line(ctx, path, line_no, j);
        cJSON_Delete(j);
    }
    free(text);
}

/* A run's arrays being filled from a JSON-lines file, and their capacity. */
typedef struct {
    RunData *r;
    int cap;
} JsonlFill;

static void metrics_line(void *ctx, const char *path, int line_no, const cJSON *j) {
    JsonlFill *fill = ctx;
    RunData *r = fill->r;
    if (!j || !cJSON_IsObject(j)) die("%s:%d: not a JSON object", path, line_no);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "loss");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "ce");
    if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l)) die("%s:%d: needs numeric \"step\" and \"loss\"", path, line_no);
    if (r->n_points == fill->cap) {
        fill->cap *= 2;
        r->step = xrealloc(r->step, (size_t)fill->cap * sizeof(double));
        r->loss = xrealloc(r->loss, (size_t)fill->cap * sizeof(double));
        r->ce = xrealloc(r->ce, (size_t)fill->cap * sizeof(double));
    }
    /* Domains: a step is a count; the cross-entropy is finite and >= 0; the logged loss adds the balancing
     * terms (a negative entropy), so it is only required to be finite. */
    if (!(s->valuedouble >= 0 && s->valuedouble <= 1e15)) die("%s:%d: step: %.17g is not a count", path, line_no,
                                                            s->valuedouble);
    if (!isfinite(l->valuedouble)) die("%s:%d: loss: %.17g is not finite", path, line_no, l->valuedouble);
    if (cJSON_IsNumber(c) && !(isfinite(c->valuedouble) && c->valuedouble >= 0))
        die("%s:%d: ce: %.17g is not a finite number >= 0", path, line_no, c->valuedouble);
    r->step[r->n_points] = s->valuedouble;
    r->loss[r->n_points] = l->valuedouble;
    r->ce[r->n_points] = cJSON_IsNumber(c) ? c->valuedouble : l->valuedouble;
    r->n_points++;
    /* expert capacity: a "routing" object that records dropped assignments is read strictly and summed */
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(j, "routing");
    const cJSON *apps = ro ? cJSON_GetObjectItemCaseSensitive(ro, "applications") : NULL;
    const cJSON *app0 = cJSON_IsArray(apps) ? cJSON_GetArrayItem(apps, 0) : NULL;
    if (cJSON_IsObject(app0) && cJSON_GetObjectItemCaseSensitive(app0, "dropped")) {
        RoutingStats rs;
        char err[768], where[48];
        snprintf(where, sizeof where, "line %d: routing", line_no);
        if (routing_stats_from_json(&rs, ro, path, where, err, sizeof err) != 0) die("%s", err);
        for (int a = 0; a < rs.n_apps; a++) {
            r->cap_kept += rs.apps[a].selections;
            r->cap_dropped += rs.dropped[a];
        }
        r->cap_steps++;
        routing_stats_free(&rs);
    }
}

/* Reads metrics.jsonl: one JSON object per line with at least "step" and "loss". A malformed line is an error that
 * names the file and line (the report must not silently draw a wrong curve). */
static void load_metrics(RunData *r, const char *path) {
    JsonlFill fill = {r, 256};
    r->step = xmalloc((size_t)fill.cap * sizeof(double));
    r->loss = xmalloc((size_t)fill.cap * sizeof(double));
    r->ce = xmalloc((size_t)fill.cap * sizeof(double));
    read_jsonl_lines(path, metrics_line, &fill);
    r->has_metrics = true;
}

/* A record (result or analysis) must be of this run and this experiment: one copied in from another run directory
 * or from runs/OTHER would be reported under the wrong name, title and paper comparison. */
static void require_owner(const char *path, const char *rec_run, const char *rec_experiment, const char *run,
                          const char *experiment) {
    char err[1200];
    if (record_owner_check(path, rec_run, rec_experiment, run, "the directory", experiment, "--experiment", err,
                           sizeof err) != 0)
        die("%s", err);
}

static void eval_curve_line(void *ctx, const char *path, int line_no, const cJSON *j) {
    JsonlFill *fill = ctx;
    RunData *r = fill->r;
    const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
    const cJSON *sets = j ? cJSON_GetObjectItemCaseSensitive(j, "sets") : NULL;
    if (!cJSON_IsObject(j) || !cJSON_IsNumber(st) || !cJSON_IsObject(sets))
        die("%s:%d: needs a JSON object with numeric \"step\" and object \"sets\"", path, line_no);
    if (r->n_curve == fill->cap) {
        fill->cap *= 2;
        r->curve_step = xrealloc(r->curve_step, (size_t)fill->cap * sizeof(double));
        for (int s = 0; s < EVAL_N_SETS; s++)
            r->curve_acc[s] = xrealloc(r->curve_acc[s], (size_t)fill->cap * sizeof(double));
    }
    if (!(st->valuedouble >= 0 && st->valuedouble <= 1e15))
        die("%s:%d: step: %.17g is not a count", path, line_no, st->valuedouble);
    r->curve_step[r->n_curve] = st->valuedouble;
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(sets, EVAL_SET_NAMES[s]);
        const cJSON *acc = set ? cJSON_GetObjectItemCaseSensitive(set, "accuracy") : NULL;
        if (set && !cJSON_IsNumber(acc))
            die("%s:%d: sets.%s.accuracy: must be a number", path, line_no, EVAL_SET_NAMES[s]);
        if (set && !(acc->valuedouble >= 0 && acc->valuedouble <= 1))
            die("%s:%d: sets.%s.accuracy: %.17g is not a fraction in [0, 1]", path, line_no, EVAL_SET_NAMES[s],
                acc->valuedouble);
        r->curve_acc[s][r->n_curve] = set ? acc->valuedouble : NAN;
    }
    r->n_curve++;
}

/* eval_curve.jsonl (stages/README.md, "Accuracy during training"): {"step": S, "tokens": N, "sets": {"interpolate":
 * {"accuracy": a, ...}, ...}} per line. A malformed line is an error naming the file and line; a set missing from a
 * line is a gap (NaN). */
static void load_eval_curve(RunData *r, const char *path) {
    JsonlFill fill = {r, 64};
    r->curve_step = xmalloc((size_t)fill.cap * sizeof(double));
    for (int s = 0; s < EVAL_N_SETS; s++) r->curve_acc[s] = xmalloc((size_t)fill.cap * sizeof(double));
    read_jsonl_lines(path, eval_curve_line, &fill);
}

/* The record's optional identity fields ("seed", "run_config", "overrides"), read from its raw JSON because the
 * typed record does not carry them (yet), and the run config and seed resolved from them and the directory name. */
static void load_identity(RunData *r, const char *path) {
    char err[1024];
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, sizeof err);
    if (!j) die("%s", err);
    if (record_identity_read(j, path, &r->identity, err, sizeof err)) die("%s", err);
    cJSON_Delete(j);
    if (run_identity_resolve(r->name, &r->identity, r->res.config, path, r->run_config, sizeof r->run_config,
                             &r->seed, err, sizeof err))
        die("%s", err);
    if (run_variant_key(r->res.config, r->variant)) die("%s: config: not a JSON object", path);
}

void report_run_load(RunData *r, const char *runs_dir, const char *name, const char *experiment) {
    memset(r, 0, sizeof *r);
    r->seed = -1;
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->dir, sizeof r->dir, "%s/%s", runs_dir, name);
    r->aside = strchr(name, '@') != NULL;
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/result.json", r->dir);
    if (run_file_present(path)) {
        if (result_record_load(&r->res, path, err, sizeof err)) die("%s", err);
        require_owner(path, r->res.run, r->res.experiment, name, experiment);
        r->has_result = true;
        load_identity(r, path);
    } else {
        long seed = -1;
        bool suffix = false;
        run_name_split(name, r->run_config, sizeof r->run_config, &seed, &suffix);
        if (suffix) r->seed = seed;
    }
    snprintf(path, sizeof path, "%s/analysis.json", r->dir);
    if (run_file_present(path)) {
        if (analysis_record_load(&r->ana, path, err, sizeof err)) die("%s", err);
        require_owner(path, r->ana.run, r->ana.experiment, name, experiment);
        r->has_analysis = true;
    }
    snprintf(path, sizeof path, "%s/%s", r->dir, DEPTH_PROMPTS_FILE_NAME);
    if (report_run_has_maps(r) && run_file_present(path)) {
        if (depth_prompts_load(&r->depth, path, err, sizeof err)) die("%s", err);
        require_owner(path, r->depth.run, r->depth.experiment, name, experiment);
        r->has_depth_prompts = true;
    }
    /* Curves are drawn for finished runs only; a run still training, or killed in the middle of a line, must not
     * stop the report of the others. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
    if (r->has_result && run_file_present(path)) load_metrics(r, path);
    snprintf(path, sizeof path, "%s/eval_curve.jsonl", r->dir);
    if (r->has_result && run_file_present(path)) load_eval_curve(r, path);
    snprintf(path, sizeof path, "%s/%s", r->dir, PREDICTIONS_FILE_NAME);
    if (r->has_result && run_file_present(path)) {
        if (prediction_table_load(&r->pred, path, err, sizeof err)) die("%s", err);
        char record_path[4300];
        snprintf(record_path, sizeof record_path, "%s/result.json", r->dir);
        if (prediction_table_check_record(&r->pred, path, name, r->res.code_version, record_path, err, sizeof err))
            die("%s", err);
        r->has_predictions = true;
    }
}

bool report_run_has_maps(const RunData *r) { return r->has_analysis && r->ana.enabled; }
const char *report_run_analysis_state(const RunData *r) {
    return !r->has_analysis ? "missing" : (r->ana.enabled ? "yes" : "disabled");
}

void report_run_free(RunData *r) {
    if (r->has_result) result_record_free(&r->res);
    if (r->has_analysis) analysis_record_free(&r->ana);
    if (r->has_predictions) prediction_table_free(&r->pred);
    if (r->has_depth_prompts) depth_prompts_free(&r->depth);
    free(r->step);
    free(r->loss);
    free(r->ce);
    free(r->curve_step);
    for (int s = 0; s < EVAL_N_SETS; s++) free(r->curve_acc[s]);
}

/* The report sets runs side by side, so their records must come from one tokenizer and one pair of eval sets; a run
 * evaluated before the data was re-tokenized (or copied from another experiment) would be compared on other
 * examples without a word. Dies naming the first two records that differ. */
void report_require_same_data(const RunData *runs, int n) {
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

void report_require_same_examples(const RunData *runs, int n) {
    const RunData *first = NULL;
    for (int i = 0; i < n; i++) {
        if (!runs[i].has_predictions) continue;
        if (!first) {
            first = &runs[i];
            continue;
        }
        char err[2048], pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/%s", first->dir, PREDICTIONS_FILE_NAME);
        snprintf(pb, sizeof pb, "%s/%s", runs[i].dir, PREDICTIONS_FILE_NAME);
        if (prediction_tables_match(&first->pred, pa, &runs[i].pred, pb, err, sizeof err)) die("%s", err);
    }
}

static bool listed(char **names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

/* By run config, then variant (the current one, without "@", first), then seed by number (seed10 after seed9), then
 * name: a total order, so the listing does not depend on the directory's order. */
static int cmp_run_name(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    char cx[128], cy[128], vx[RUN_VARIANT_LEN + 1], vy[RUN_VARIANT_LEN + 1];
    long sx = -1, sy = -1;
    bool hx = false, hy = false;
    run_name_split(x, cx, sizeof cx, &sx, &hx);
    run_name_split(y, cy, sizeof cy, &sy, &hy);
    run_name_variant(x, vx);
    run_name_variant(y, vy);
    int c = strcmp(cx, cy);
    if (c) return c;
    if ((c = strcmp(vx, vy))) return c;
    if (hx != hy) return hx ? 1 : -1;
    if (sx != sy) return (sx > sy) - (sx < sy);
    return strcmp(x, y);
}

char **report_list_runs(const char *runs_dir, const char *expected, int *n_out) {
    char **names = NULL;
    int n = 0;
    char *copy = xstrdup(expected);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!tok[0] || listed(names, n, tok)) continue;
        names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = xstrdup(tok);
    }
    free(copy);
    const int n_expected = n;
    /* every evaluated run by the rule export and compare share (run_dirs.h): one that cannot be read stops the
     * report, naming it, rather than leaving it out */
    char **found = NULL, **extra = NULL, err[1200];
    int n_found = 0, n_extra = 0;
    if (run_dirs_list(runs_dir, &found, &n_found, err, sizeof err) != 0) die("%s", err);
    extra = xmalloc((size_t)(n_found + 1) * sizeof *extra);
    for (int i = 0; i < n_found; i++) {
        if (listed(names, n, found[i])) free(found[i]);
        else extra[n_extra++] = found[i];
    }
    free(found);
    if (n_extra) qsort(extra, (size_t)n_extra, sizeof *extra, cmp_run_name);
    /* Each expected run followed by its other seeds and its other variants (extra is sorted: current seeds first),
     * then the rest. */
    bool *used = xcalloc((size_t)n_extra + 1, sizeof *used);
    char **out = xmalloc((size_t)(n + n_extra + 1) * sizeof *out);
    int k = 0;
    for (int i = 0; i < n_expected; i++) {
        out[k++] = names[i];
        for (int j = 0; j < n_extra; j++) {
            char cfg[128];
            long s;
            bool suffix = false;
            run_name_split(extra[j], cfg, sizeof cfg, &s, &suffix);
            const bool aside = strchr(extra[j], '@') != NULL;
            if (!used[j] && (suffix || aside) && strcmp(cfg, names[i]) == 0) {
                out[k++] = extra[j];
                used[j] = true;
            }
        }
    }
    for (int j = 0; j < n_extra; j++)
        if (!used[j]) out[k++] = extra[j];
    free(used);
    free(extra);
    free(names);
    *n_out = k;
    return out;
}

static int cmp_seed(const void *a, const void *b) {
    const RunData *x = *(const RunData *const *)a, *y = *(const RunData *const *)b;
    return (x->seed > y->seed) - (x->seed < y->seed);
}

RunGroup *report_group_runs(const RunData *runs, int n, int *n_groups) {
    RunGroup *g = xcalloc((size_t)n + 1, sizeof *g);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const RunData *r = &runs[i];
        if (!r->has_result) continue;
        int j = 0;
        while (j < k && !(strcmp(g[j].run_config, r->run_config) == 0 && strcmp(g[j].variant, r->variant) == 0 &&
                          g[j].current == !r->aside))
            j++;
        if (j == k) {
            snprintf(g[k].run_config, sizeof g[k].run_config, "%s", r->run_config);
            snprintf(g[k].variant, sizeof g[k].variant, "%s", r->variant);
            g[k].current = !r->aside;
            snprintf(g[k].arch, sizeof g[k].arch, "%s", r->res.arch);
            snprintf(g[k].loss_mode, sizeof g[k].loss_mode, "%s", r->res.loss_mode);
            g[k].runs = xcalloc((size_t)n, sizeof *g[k].runs);
            k++;
        }
        RunGroup *grp = &g[j];
        for (int s = 0; s < grp->n; s++)
            if (grp->runs[s]->seed == r->seed)
                die("%s/result.json: seed %ld of run config %s (variant %s) is also in %s; remove one of the two",
                    r->dir, r->seed, grp->run_config, grp->variant, grp->runs[s]->dir);
        if (grp->n == REPORT_MAX_SEEDS)
            die("%s/result.json: run config %s has more than %d seeds, the most the report aggregates", r->dir,
                grp->run_config, REPORT_MAX_SEEDS);
        grp->runs[grp->n++] = r;
    }
    /* The primary group of each run config: the one holding runs/EXP/CONFIG, else its first current group. */
    for (int j = 0; j < k; j++) {
        if (!g[j].current) continue;
        bool taken = false, own = false;
        for (int i = 0; i < k; i++) {
            if (i == j || !g[i].current || strcmp(g[i].run_config, g[j].run_config) != 0) continue;
            for (int s = 0; s < g[i].n; s++) taken |= strcmp(g[i].runs[s]->name, g[i].run_config) == 0;
        }
        for (int s = 0; s < g[j].n; s++) own |= strcmp(g[j].runs[s]->name, g[j].run_config) == 0;
        if (own) g[j].primary = true;
        else if (!taken) { /* no own-seed run anywhere: the first current group of the config */
            bool earlier = false;
            for (int i = 0; i < j; i++) earlier |= g[i].current && strcmp(g[i].run_config, g[j].run_config) == 0;
            g[j].primary = !earlier;
        }
    }
    for (int j = 0; j < k; j++) {
        qsort(g[j].runs, (size_t)g[j].n, sizeof *g[j].runs, cmp_seed);
        if (g[j].primary) snprintf(g[j].label, sizeof g[j].label, "%s", g[j].run_config);
        else snprintf(g[j].label, sizeof g[j].label, "%s@%s", g[j].run_config, g[j].variant);
    }
    *n_groups = k;
    return g;
}

void report_groups_free(RunGroup *g, int n) {
    for (int i = 0; i < n; i++) free(g[i].runs);
    free(g);
}

const RunGroup *report_find_group(const RunGroup *g, int n, const char *arch, const char *mode) {
    for (int i = 0; i < n; i++)
        if (g[i].primary && strcmp(g[i].arch, arch) == 0 && strcmp(g[i].loss_mode, mode) == 0) return &g[i];
    return NULL;
}

int report_config_variants(const RunGroup *g, int n, const char *run_config) {
    int k = 0;
    for (int i = 0; i < n; i++) k += strcmp(g[i].run_config, run_config) == 0;
    return k;
}

const RunData *report_group_seed(const RunGroup *g, long seed) {
    for (int i = 0; i < g->n; i++)
        if (g->runs[i]->seed == seed) return g->runs[i];
    return NULL;
}

const cJSON *report_group_config_item(const RunGroup *g, const char *section, const char *key) {
    const cJSON *cfg = g && g->n > 0 ? g->runs[0]->res.config : NULL;
    const cJSON *s = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, section) : NULL;
    return s ? cJSON_GetObjectItemCaseSensitive(s, key) : NULL;
}
