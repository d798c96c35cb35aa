/* The runs of a runs directory (see run_dirs.h). */
#include "pipeline/records/run_dirs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/base/log.h"

bool run_file_present(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The entries of dir except dot-files, sorted (so that the first error named does not depend on readdir's order).
 * NULL with err when dir cannot be opened. */
static char **dir_entries(const char *dir, int *n_out, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        set_err(err, errlen, "%s: cannot open the runs directory: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = xmalloc(sizeof *names);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_names);
    *n_out = n;
    return names;
}

/* 1 when runs_dir/name is an evaluated run, 0 when it is not a run or not evaluated, -1 with err when it cannot be
 * examined. */
static int classify(const char *runs_dir, const char *name, char *err, size_t errlen) {
    char path[4400];
    if (snprintf(path, sizeof path, "%s/%s", runs_dir, name) >= (int)sizeof path) {
        set_err(err, errlen, "%s/%s: path too long", runs_dir, name);
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        set_err(err, errlen, "%s: cannot be examined: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
        set_err(err, errlen, "%s: a symbolic link whose target cannot be read (%s): a run that cannot be read", path,
                strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return 0;
    char result[4500];
    snprintf(result, sizeof result, "%s/result.json", path);
    if (lstat(result, &st) == 0) return 1;
    if (errno == ENOENT) return 0;
    set_err(err, errlen, "%s: cannot be examined: %s: a run that cannot be read", result, strerror(errno));
    return -1;
}

int run_dirs_list(const char *runs_dir, char ***names_out, int *n_out, char *err, size_t errlen) {
    *names_out = NULL;
    *n_out = 0;
    int n_all = 0;
    char **all = dir_entries(runs_dir, &n_all, err, errlen);
    if (!all) return -1;
    int n = 0, rc = 0;
    for (int i = 0; i < n_all; i++) {
        const int kind = rc == 0 ? classify(runs_dir, all[i], err, errlen) : 0;
        if (kind < 0) rc = -1;
        if (kind == 1) all[n++] = all[i]; /* kept in place: n <= i */
        else free(all[i]);
    }
    if (rc != 0) {
        for (int i = 0; i < n; i++) free(all[i]);
        free(all);
        return -1;
    }
    *names_out = all;
    *n_out = n;
    return 0;
}
