/* The baseline gate over every run asked for (compare_gate.h). */
#include "pipeline/records/compare_gate.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/compare_baseline.h"
#include "pipeline/records/compare_seeds.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/base/log.h"
#include "pipeline/records/run_identity.h"

int compare_config_change_parse(const char *text, bool *note) {
    if (strcmp(text, "note") == 0) *note = true;
    else if (strcmp(text, "error") == 0) *note = false;
    else return -1;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every baseline name in dir (NAME of NAME.result.json), sorted, into *out (caller frees each and the array).
 * Returns 0, or 2 after logging when dir cannot be opened. */
static int list_baselines(const char *dir, char ***out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d) {
        log_error("%s: cannot open the baselines directory", dir);
        return 2;
    }
    char **all = NULL;
    int n_all = 0;
    const char *suffix = ".result.json";
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        if (n > k && strcmp(e->d_name + n - k, suffix) == 0) {
            all = xrealloc(all, (size_t)(n_all + 1) * sizeof *all);
            all[n_all] = xstrdup(e->d_name);
            all[n_all][n - k] = '\0';
            n_all++;
        }
    }
    closedir(d);
    if (n_all) qsort(all, (size_t)n_all, sizeof *all, cmp_str);
    *out = all;
    *n_out = n_all;
    return 0;
}

/* Whether the selection names[0..n_names) (of all[0..n_all)) and the replications reps[0..n_reps) can be compared:
 * something selected, seed_spread declared where seeds are pooled, a baseline (or recorded seeds to compare a
 * replication with) for every run of --only. Returns 0, or 2 after logging why not. */
static int check_selection(const CompareRequest *req, const char *tol_path, const Tolerances *tol, char *const *all,
                           int n_all, char *const *names, int n_names, char *const *reps, int n_reps) {
    const char *baselines = req->baselines, *only = req->only;
    int worst = 0;
    if (n_names == 0 && n_reps == 0) {
        log_error("%s: no baseline records (<RUN>.result.json)%s%s", baselines, only ? " for --only " : "",
                  only ? only : "");
        worst = 2;
    }
    /* Baselines of several seeds of one run config are pooled with seed_spread.k, which the file must then declare. */
    for (int i = 0; i < n_names && worst == 0 && tol->seed_k <= 0; i++)
        for (int j = 0; j < n_all; j++)
            if (all[j] != names[i] && baseline_same_run_config(all[j], names[i])) {
                log_error("%s: %s holds several seeds of %.*s (%s.result.json, %s.result.json), so the tolerances file "
                          "needs \"seed_spread\": {\"k\": K, \"comment\": \"why\"}",
                          tol_path, baselines, (int)baseline_run_config_len(names[i]), names[i], names[i], all[j]);
                worst = 2;
                break;
            }
    if (n_reps && worst == 0 && tol->seed_k <= 0) {
        log_error("%s: %s is compared with the spread of %s's seeds, so the tolerances file needs \"seed_spread\": "
                  "{\"k\": K, \"comment\": \"why\"}",
                  tol_path, reps[0], baselines);
        worst = 2;
    }
    /* Every run asked for with --only must have a baseline, or be a seed of a run config with recorded seeds. */
    if (only && worst == 0) {
        char *copy = xstrdup(only);
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            bool found = false;
            for (int i = 0; i < n_names && !found; i++) found = strcmp(names[i], tok) == 0;
            for (int i = 0; i < n_reps && !found; i++) found = strcmp(reps[i], tok) == 0;
            if (!found) {
                log_error("%s/%s.result.json: missing baseline record (asked for by --only; a seed the baselines do "
                          "not hold is compared only with 2 or more recorded seeds of its run config)",
                          baselines, tok);
                worst = 2;
            }
        }
        free(copy);
    }
    return worst;
}

/* Prints one "note:" line for every evaluated run under runs (run_dirs.h, the rule report and export share) that
 * was not asked for (no baseline, left out by --only, another variant); returns their number, or -1 after logging
 * a run that cannot be read (never left out silently: the gate cannot say what it did not see). */
static int note_other_runs(const char *runs, const char *baselines, char *const *all, int n_all, char *const *names,
                           int n_names) {
    /* Runs without a baseline are reported, not compared: a new run is not a regression. */
    char **found = NULL, err[1200];
    int n_found = 0;
    if (run_dirs_list(runs, &found, &n_found, err, sizeof err) != 0) {
        log_error("%s", err);
        return -1;
    }
    char **others = xmalloc((size_t)(n_found + 1) * sizeof *others);
    int n_other = 0;
    for (int k = 0; k < n_found; k++) {
        bool known = false;
        for (int i = 0; i < n_names && !known; i++) known = strcmp(names[i], found[k]) == 0;
        if (known) free(found[k]);
        else others[n_other++] = found[k];
    }
    free(found);
    for (int k = 0; k < n_other; k++) {
        /* Left out by --only is not the same as having no baseline (make reproduce RUNS=... passes --only). */
        bool has_baseline = false;
        for (int i = 0; i < n_all && !has_baseline; i++) has_baseline = strcmp(all[i], others[k]) == 0;
        char variant[RUN_VARIANT_LEN + 1], stable[256];
        run_name_variant(others[k], variant);
        if (has_baseline) printf("note: %s/%s/result.json not compared (not in --only)\n", runs, others[k]);
        else if (variant[0] && run_name_stable(others[k], stable, sizeof stable) == 0)
            printf("note: %s/%s/result.json not compared: another variant of %s (baselines are compared with "
                   "the current variant, %s/%s)\n",
                   runs, others[k], stable, runs, stable);
        else if (compare_recorded_seeds(others[k], all, n_all) == 1)
            printf("note: %s/%s/result.json has no baseline in %s (not compared: a seed the baselines do not hold is "
                   "compared with the spread of 2 or more recorded seeds, and %s holds one of %.*s)\n",
                   runs, others[k], baselines, baselines, (int)baseline_run_config_len(others[k]), others[k]);
        else printf("note: %s/%s/result.json has no baseline in %s (not compared)\n", runs, others[k], baselines);
        free(others[k]);
    }
    free(others);
    return n_other;
}

/* One "note:" line per run config whose recorded seeds (of names[0..n_names)) were not run here because seeds of it
 * the baselines do not hold were (compare_seeds.h); returns how many recorded seeds were not run. */
static int note_not_run(const char *runs, char *const *names, int n_names, char *const *reps, int n_reps) {
    int total = 0;
    for (int i = 0; i < n_names; i++) {
        if (!compare_recorded_not_run(names[i], runs, reps, n_reps)) continue;
        bool first = true; /* the first not-run name of its run config prints the line */
        for (int j = 0; j < i && first; j++)
            first = !(baseline_same_run_config(names[j], names[i]) &&
                      compare_recorded_not_run(names[j], runs, reps, n_reps));
        total++;
        if (!first) continue;
        char list[1024] = "", ran[1024] = "";
        for (int j = i; j < n_names; j++)
            if (baseline_same_run_config(names[j], names[i]) && compare_recorded_not_run(names[j], runs, reps, n_reps)) {
                size_t len = strlen(list);
                snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", names[j]);
            }
        for (int j = 0; j < n_reps; j++)
            if (baseline_same_run_config(reps[j], names[i])) {
                size_t len = strlen(ran);
                snprintf(ran + len, sizeof ran - len, "%s%s", len ? ", " : "", reps[j]);
            }
        printf("note: %.*s: the recorded seeds %s were not run here (not compared); %s, seed(s) the baselines do not "
               "hold, are compared with the recorded seeds' mean\n",
               (int)baseline_run_config_len(names[i]), names[i], list, ran);
    }
    return total;
}

/* What the gate counted. */
typedef struct {
    int compared, noted, asked_not, other;
    int not_run;               /* recorded seeds not run here: their run configs were replicated with other seeds */
    char asked_not_text[4096]; /* "name: why; ..." of the runs asked for but not compared */
} GateTally;

/* Prints the not-gated classes and the last line "compare: N compared, M not compared (...): verdict"; returns the
 * final status from worst (the runs' worst) and the tally. */
static int print_summary(const Tolerances *tol, const char *tol_path, const char *baselines, int worst,
                         const GateTally *t, bool allow_better) {
    const char *or_better = allow_better ? " (or better)" : "";
    /* The classes this file does not gate, once, with the file's reason: the gate says what it would not catch. */
    for (int c = 0; c < MC_N_CLASSES && t->compared; c++)
        if (!tol->cls[c].gated) {
            /* The comment's first sentence (the file has the measurements behind it). */
            const char *why = tol->cls[c].why, *end = strstr(why, ". ");
            int len = end ? (int)(end - why) + 1 : (int)strlen(why);
            printf("compare: %s is not gated by %s: %.*s%s\n", METRIC_CLASS_NAMES[c], tol_path, len, why,
                   end ? " (more in the file's comment)" : "");
        }
    char not_gated[160] = "";
    for (int c = 0; c < MC_N_CLASSES; c++)
        if (!tol->cls[c].gated) {
            size_t len = strlen(not_gated);
            snprintf(not_gated + len, sizeof not_gated - len, "%s%s", len ? ", " : "; not gated at this size: ",
                     METRIC_CLASS_NAMES[c]);
        }
    char not_compared[4600] = "", not_run[160] = "";
    if (t->not_run)
        snprintf(not_run, sizeof not_run, "%d recorded seed(s) not run here, replicated with other seeds",
                 t->not_run);
    if (t->asked_not)
        snprintf(not_compared, sizeof not_compared, " (%s%s%s", t->asked_not_text, not_run[0] ? "; " : "", not_run);
    else if (not_run[0]) snprintf(not_compared, sizeof not_compared, " (%s", not_run);
    if (not_compared[0] && t->other) {
        size_t len = strlen(not_compared);
        snprintf(not_compared + len, sizeof not_compared - len, "; %d other run(s) listed above)", t->other);
    } else if (not_compared[0]) strcat(not_compared, ")");
    else if (t->other) snprintf(not_compared, sizeof not_compared, " (listed above)");
    printf("compare: %d compared, %d not compared%s: ", t->compared, t->asked_not + t->other + t->not_run,
           not_compared);
    if (t->compared == 0) {
        /* Success on nothing would be a false pass: whatever the reasons, nothing was checked. */
        printf("FAILED: nothing was checked against %s\n", baselines);
        /* Every run asked for only noted (its config changed, --config-change=note): a status of its own, so that a
         * caller whose user changed every config on purpose (make reproduce SET=...) can tell it from a broken
         * comparison; still not 0. */
        return worst == 0 && t->noted == t->asked_not ? 3 : 2;
    }
    if (worst == 0 && t->asked_not == 0) printf("all metrics within tolerances%s%s\n", or_better, not_gated);
    else if (worst == 0)
        printf("the %d compared are within tolerances%s; %d asked for %s only noted, not checked%s\n",
               t->compared, or_better, t->noted, t->noted == 1 ? "was" : "were", not_gated);
    else printf("%s\n", worst == 1 ? "some metric outside its tolerance" : "some records missing or not comparable");
    return worst;
}

int compare_gate(const CompareRequest *req) {
    char tol_path[4096];
    if (req->tolerances) snprintf(tol_path, sizeof tol_path, "%s", req->tolerances);
    else snprintf(tol_path, sizeof tol_path, "%s/tolerances.json", req->baselines);
    Tolerances tol;
    char err[1024];
    if (tolerances_load(tol_path, &tol, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }
    /* Every baseline name (seeds of runs left out by --only included: none is pooled, but all are listed). */
    char **all;
    int n_all;
    if (list_baselines(req->baselines, &all, &n_all) != 0) {
        tolerances_free(&tol);
        return 2;
    }
    char **names = xcalloc((size_t)n_all + 1, sizeof *names); /* the selected ones (pointers into all) */
    int n_names = 0;
    for (int i = 0; i < n_all; i++)
        if (compare_only_selects(req->only, all[i])) names[n_names++] = all[i];
    /* Seeds the baselines do not hold, of run configs with recorded seeds: compared with those seeds' spread. */
    char **reps = NULL;
    int n_reps = 0;
    compare_replications(req->runs, req->only, all, n_all, &reps, &n_reps);
    int worst = check_selection(req, tol_path, &tol, all, n_all, names, n_names, reps, n_reps);
    if (worst == 0) {
        /* Everything asked for: the selected baselines, then the replications. */
        char **asked = xcalloc((size_t)(n_names + n_reps) + 1, sizeof *asked);
        int n_asked = 0;
        for (int i = 0; i < n_names; i++) asked[n_asked++] = names[i];
        for (int i = 0; i < n_reps; i++) asked[n_asked++] = reps[i];
        /* A run that cannot be compared stops nothing: the others are still reported. */
        GateTally t = {0};
        t.not_run = note_not_run(req->runs, names, n_names, reps, n_reps);
        for (int i = 0; i < n_asked; i++) {
            if (i < n_names && compare_recorded_not_run(asked[i], req->runs, reps, n_reps)) continue;
            RunOutcome out;
            int s = compare_one_run(asked[i], req->baselines, all, n_all, req->runs, &tol, &req->options, &out);
            if (s > worst) worst = s;
            t.compared += out.compared;
            if (out.compared) continue;
            t.asked_not++;
            t.noted += out.noted;
            size_t len = strlen(t.asked_not_text);
            snprintf(t.asked_not_text + len, sizeof t.asked_not_text - len, "%s%s: %s%s", len ? "; " : "", asked[i],
                     out.why, out.noted ? " (a note: --config-change=note)" : "");
        }
        t.other = note_other_runs(req->runs, req->baselines, all, n_all, asked, n_asked);
        if (t.other < 0) {
            t.other = 0;
            if (worst < 2) worst = 2;
        }
        worst = print_summary(&tol, tol_path, req->baselines, worst, &t, req->options.allow_better);
        free(asked);
    }
    for (int i = 0; i < n_reps; i++) free(reps[i]);
    free(reps);
    for (int i = 0; i < n_all; i++) free(all[i]);
    free(all);
    free(names);
    tolerances_free(&tol);
    return worst;
}
