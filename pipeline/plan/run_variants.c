/* Earlier variants of a run kept aside, and brought back (see run_variants.h). */
#include "pipeline/plan/run_variants.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/records/config_diff.h"
#include "pipeline/records/config_override.h"
#include "pipeline/base/log.h"
#include "pipeline/records/run_identity.h"

/* The checkpoint state train writes in a run directory (model/training/train_checkpoint.h, TRAIN_STATE_FILE; named
 * here, not included, because planning sits below training). */
#define TRAIN_STATE_FILE_NAME "state.json"

#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

/* What a run directory holds, as far as keeping it is concerned: the effective config it was trained with and the
 * run name its files carry. From the finished run's record (result.json; evaluate writes it atomically, so an
 * unreadable one was not written by a finished run), else from the latest checkpoint's state (state.json, written
 * by train at every checkpoint: a run trained, or partly trained, but not evaluated). NULL when the directory holds
 * neither, or only files of a train older than the "config" field of state.json: then train decides. */
typedef struct {
    cJSON *doc;           /* the file read (owned) */
    const cJSON *config;  /* its effective config */
    const char *run;      /* the run name it carries (result.json "run"), or NULL (state.json names only its config) */
    const char *run_config; /* the run config it was made from (state.json "run_config"), or NULL */
} HeldRun;

static bool load_held(const char *dir, HeldRun *h) {
    memset(h, 0, sizeof *h);
    const char *files[] = {"result.json", TRAIN_STATE_FILE_NAME};
    for (int i = 0; i < 2 && !h->doc; i++) {
        char path[4096 + 32], err[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (!file_exists(path)) continue;
        cJSON *doc = json_load_file(path, JSON_KIND_RECORD, err, sizeof err);
        const cJSON *config = doc ? cJSON_GetObjectItemCaseSensitive(doc, "config") : NULL;
        if (!cJSON_IsObject(config)) {
            cJSON_Delete(doc);
            continue;
        }
        h->doc = doc;
        h->config = config;
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(doc, "run");
        const cJSON *run_config = cJSON_GetObjectItemCaseSensitive(doc, "run_config");
        h->run = cJSON_IsString(run) ? run->valuestring : NULL;
        h->run_config = cJSON_IsString(run_config) ? run_config->valuestring : NULL;
    }
    return h->doc != NULL;
}

/* "a=1 -> 2, b=x -> y" for the keys that differ between two configs (the seed and descriptions left out). */
static void describe_change(const cJSON *from, const cJSON *to, char *out, size_t cap) {
    const cJSON *configs[2] = {from, to};
    const char *skip[] = {"description", "train.seed", NULL};
    ConfigDiff d;
    config_diff(configs, 2, skip, &d);
    out[0] = '\0';
    for (int i = 0; i < d.n_rows; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s %s -> %s", i ? ", " : "", d.rows[i].key,
                 d.rows[i].values[0] ? d.rows[i].values[0] : "(absent)",
                 d.rows[i].values[1] ? d.rows[i].values[1] : "(absent)");
    }
    if (!d.n_rows) snprintf(out, cap, "only comments or key order");
    config_diff_free(&d);
}

/* What keeping does for one run: which directories move (run_variants_keep acts on it, run_variants_foresee only
 * reads it). */
typedef struct {
    char cur[4096], aside[4096], back[4096];
    bool move_aside;  /* cur -> aside */
    bool leave_empty; /* start over: an empty cur after the move, so that nothing is brought back into it */
    bool bring_back;  /* back -> cur */
    char change[2048];
} KeepDecision;

static int keep_decide(const char *exp_dir, const char *runs_dir, const PlannedRun *r, bool start_over,
                       KeepDecision *d, char *err, size_t errlen) {
    char cfg_path[4096], wanted[RUN_VARIANT_LEN + 1], held[RUN_VARIANT_LEN + 1];
    memset(d, 0, sizeof *d);
    snprintf(cfg_path, sizeof cfg_path, "%s/%s.json", exp_dir, r->config);
    LoadedConfig lc;
    if (config_load_with_overrides(&lc, cfg_path, (const char *const *)r->sets, r->n_sets, err, errlen) != 0)
        return -1;
    run_variant_key(lc.json, wanted);
    const char *seed_part = r->dir + strlen(r->config); /* "" or ".seed<S>" */
    snprintf(d->cur, sizeof d->cur, "%s/%s", runs_dir, r->dir);
    snprintf(d->back, sizeof d->back, "%s/%s@%s%s", runs_dir, r->config, wanted, seed_part);
    int rc = 0;
    HeldRun held_run;
    bool cur_exists = is_dir(d->cur, NO_FOLLOW_LINKS);
    if (cur_exists && load_held(d->cur, &held_run)) {
        if (run_variant_key(held_run.config, held) == 0 && (start_over || strcmp(held, wanted) != 0)) {
            d->move_aside = true;
            d->leave_empty = start_over;
            snprintf(d->aside, sizeof d->aside, "%s/%s@%s%s", runs_dir, r->config, held, seed_part);
            if (strcmp(held, wanted) != 0) describe_change(held_run.config, lc.json, d->change, sizeof d->change);
            else snprintf(d->change, sizeof d->change, "RESUME=0 starts it over");
            /* never replaced: an earlier copy of the same config (or a sweep point of it) holds its own training */
            if (is_dir(d->aside, NO_FOLLOW_LINKS))
                rc = FAIL("%s is to be kept aside as %s, which already holds a run of the same config and seed (an "
                          "earlier copy or a sweep point): delete one of the two (rm -r %s, or make prune for every "
                          "kept run), then run make again", d->cur, d->aside, d->aside);
        }
        cJSON_Delete(held_run.doc);
    }
    /* Bring back a run of the wanted config that was moved aside: a finished one whose records carry the current
     * name, or a trained (not evaluated) one of the same run config (its directory name gives the seed). */
    if (rc == 0 && !start_over && (!cur_exists || d->move_aside) && is_dir(d->back, NO_FOLLOW_LINKS) &&
        load_held(d->back, &held_run)) {
        bool ours = held_run.run ? strcmp(held_run.run, r->dir) == 0
                                 : held_run.run_config && strcmp(held_run.run_config, r->config) == 0;
        d->bring_back = ours && run_variant_key(held_run.config, held) == 0 && strcmp(held, wanted) == 0;
        cJSON_Delete(held_run.doc);
    }
    loaded_config_free(&lc);
    return rc;
}

static int keep_one(const char *exp_dir, const char *runs_dir, const PlannedRun *r, bool start_over, char *err,
                    size_t errlen) {
    KeepDecision d;
    if (keep_decide(exp_dir, runs_dir, r, start_over, &d, err, errlen) != 0) return -1;
    if (d.move_aside) {
        if (rename(d.cur, d.aside) != 0) return FAIL("%s: cannot move it aside to %s: %s", d.cur, d.aside, strerror(errno));
        fprintf(stderr, "runs: %s holds %s (%s): kept as %s\n", d.cur,
                d.leave_empty ? "a trained run" : "another config", d.change, d.aside);
        if (d.leave_empty && mkdir(d.cur, 0777) != 0)
            return FAIL("%s: cannot make it again (its run is kept as %s): %s", d.cur, d.aside, strerror(errno));
    }
    if (d.bring_back) {
        if (rename(d.back, d.cur) != 0) return FAIL("%s: cannot move it back to %s: %s", d.back, d.cur, strerror(errno));
        fprintf(stderr, "runs: %s holds the wanted config: back as %s\n", d.back, d.cur);
    }
    return 0;
}

int run_variants_foresee(const char *exp_dir, const char *runs_dir, const PlannedRun *run, bool start_over, char *dir,
                         size_t cap, char *err, size_t errlen) {
    char variant[RUN_VARIANT_LEN + 1];
    run_name_variant(run->dir, variant);
    KeepDecision d;
    if (variant[0] || !is_dir(runs_dir, NO_FOLLOW_LINKS)) { /* a sweep point, or nothing trained yet: left alone */
        snprintf(dir, cap, "%s/%s", runs_dir, run->dir);
        return 0;
    }
    if (keep_decide(exp_dir, runs_dir, run, start_over, &d, err, errlen) != 0) return -1;
    snprintf(dir, cap, "%s", d.bring_back ? d.back : d.move_aside ? "" : d.cur);
    return 0;
}

int run_variants_keep(const char *exp_dir, const char *runs_dir, const PlannedRun *runs, int n, bool start_over,
                      char *err, size_t errlen) {
    if (!is_dir(runs_dir, NO_FOLLOW_LINKS)) return 0; /* nothing trained yet */
    /* every decision first: a refusal (a kept copy in the way) moves nothing at all */
    for (int i = 0; i < n; i++) {
        char variant[RUN_VARIANT_LEN + 1];
        KeepDecision d;
        run_name_variant(runs[i].dir, variant);
        if (!variant[0] && keep_decide(exp_dir, runs_dir, &runs[i], start_over, &d, err, errlen) != 0) return -1;
    }
    for (int i = 0; i < n; i++) {
        char variant[RUN_VARIANT_LEN + 1];
        run_name_variant(runs[i].dir, variant);
        if (variant[0]) continue; /* a sweep point is its own run: nothing to keep */
        if (keep_one(exp_dir, runs_dir, &runs[i], start_over, err, errlen) != 0) return -1;
    }
    return 0;
}
