/* Replications on seeds the baselines do not hold (compare_seeds.h). */
#include "pipeline/records/compare_seeds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/records/compare_baseline.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/records/run_identity.h"

bool compare_only_selects(const char *only, const char *name) {
    if (!only) return true;
    size_t n = strlen(name), nc = baseline_run_config_len(name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if ((len == n && strncmp(p, name, n) == 0) || (len == nc && strncmp(p, name, nc) == 0)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int compare_recorded_seeds(const char *name, char *const *all, int n_all) {
    int n = 0;
    for (int i = 0; i < n_all; i++) n += baseline_same_run_config(all[i], name);
    return n;
}

bool compare_is_replication(const char *name, char *const *all, int n_all) {
    char variant[RUN_VARIANT_LEN + 1];
    run_name_variant(name, variant);
    if (variant[0] || strchr(name, '@')) return false;
    for (int i = 0; i < n_all; i++)
        if (strcmp(all[i], name) == 0) return false;
    return compare_recorded_seeds(name, all, n_all) >= 2;
}

static bool listed(char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void compare_replications(const char *runs, const char *only, char *const *all, int n_all, char ***out, int *n) {
    char **found = NULL, **rep = NULL, err[1200];
    int n_found = 0, n_rep = 0;
    if (run_dirs_list(runs, &found, &n_found, err, sizeof err) != 0) n_found = 0;
    for (int k = 0; k < n_found; k++) {
        if (compare_is_replication(found[k], all, n_all) && compare_only_selects(only, found[k])) {
            rep = xrealloc(rep, (size_t)(n_rep + 1) * sizeof *rep);
            rep[n_rep++] = found[k];
        } else
            free(found[k]);
    }
    free(found);
    /* a replication named by --only is asked for even without its run directory (compare then says it is missing) */
    if (only) {
        char *copy = xstrdup(only);
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (compare_is_replication(tok, all, n_all) && !listed(rep, n_rep, tok)) {
                rep = xrealloc(rep, (size_t)(n_rep + 1) * sizeof *rep);
                rep[n_rep++] = xstrdup(tok);
            }
        free(copy);
    }
    if (n_rep) qsort(rep, (size_t)n_rep, sizeof *rep, cmp_str);
    *out = rep;
    *n = n_rep;
}

bool compare_recorded_not_run(const char *name, const char *runs, char *const *replications, int n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", runs, name);
    if (run_file_present(dir)) return false;
    for (int i = 0; i < n; i++)
        if (baseline_same_run_config(replications[i], name)) return true;
    return false;
}
