/* The report of one experiment from its records (report_build.h). */
#include "pipeline/report/report_build.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"
#include "pipeline/report/report_doc.h"
#include "pipeline/report/report_runs.h"
#include "pipeline/report/report_sections.h"

int report_build(const char *experiment, const char *runs_dir, const char *out, const char *expected) {
    /* A missing runs directory is a wrong path, not an experiment without results: refuse it before writing. */
    struct stat st;
    if (stat(runs_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        die("%s: not a directory (the runs of the experiment, e.g. runs/tiny)", runs_dir);
    int n = 0;
    char **names = report_list_runs(runs_dir, expected, &n);
    RunData *runs = xcalloc((size_t)n + 1, sizeof *runs);
    for (int i = 0; i < n; i++) report_run_load(&runs[i], runs_dir, names[i], experiment);
    report_require_same_data(runs, n);
    report_require_same_examples(runs, n);
    int n_groups = 0;
    RunGroup *groups = report_group_runs(runs, n, &n_groups);
    char err[1024];
    if (mkdir_p(out, err, sizeof err)) die("%s", err); /* after every record was read: a bad one leaves no output */

    Doc d = {.out_dir = out};
    sb_init(&d.md);
    sb_init(&d.html);
    ReportInput in = {runs, n, groups, n_groups};
    report_write_document(&d, &in, experiment, runs_dir);

    char path[4200];
    snprintf(path, sizeof path, "%s/report.md", out);
    if (sb_save(&d.md, path, err, sizeof err)) die("%s", err);
    snprintf(path, sizeof path, "%s/report.html", out);
    if (sb_save(&d.html, path, err, sizeof err)) die("%s", err);
    int have = 0, configs = 0;
    for (int i = 0; i < n; i++) have += runs[i].has_result;
    for (int g = 0; g < n_groups; g++) { /* distinct run configs; a group is one configuration (variant) of one */
        bool seen = false;
        for (int h = 0; h < g && !seen; h++) seen = strcmp(groups[h].run_config, groups[g].run_config) == 0;
        configs += !seen;
    }
    log_info("wrote %s/report.md and report.html: %d of %d runs (%d run configs, %d configurations) have results, "
             "%d figures", out, have, n, configs, n_groups, d.n_figures);

    sb_free(&d.md);
    sb_free(&d.html);
    report_groups_free(groups, n_groups);
    for (int i = 0; i < n; i++) {
        report_run_free(&runs[i]);
        free(names[i]);
    }
    free(runs);
    free(names);
    return 0;
}
