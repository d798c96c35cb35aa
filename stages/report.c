/* report: turns the records of one experiment into report.md and a self-contained report.html.
 *
 *   bin/report --experiment EXP --runs runs/EXP --out reports/EXP [--expected-runs a,b,c]
 *
 * Reads ONLY runs/EXP/<RUN>/result.json, analysis.json, metrics.jsonl, eval_curve.jsonl and predictions.jsonl (and
 * the run configs recorded inside the result records). Seeds of one run config are the directories RUN and
 * RUN.seed<S> (INTERFACES.md §2); the report aggregates over them when their recorded configs agree (the same
 * variant key), and shows runs of other variants (RUN@VARIANT[.seed<S>]: sweep points, earlier configs) beside.
 * Writes report.md, report.html (SVGs inlined) and the figures as .svg files beside report.md (which links them).
 * Expected runs that have no result.json are listed as missing, never silently dropped. The output holds no timestamps: the same records give byte-identical reports.
 * The sections live in pipeline/report_*.c (report_sections.h), the statistics in
 * pipeline/report_stats.c and stats.c, the verdict rules in pipeline/verdict.c. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/log.h"
#include "pipeline/report_doc.h"
#include "pipeline/report_runs.h"
#include "pipeline/report_sections.h"

#define DEFAULT_EXPECTED "dense_qa,dense_answer,moeut_qa,moeut_answer"

static const char *SUMMARY =
    "Writes <out>/report.md and a self-contained <out>/report.html (plus the figures as .svg) from the records of "
    "one experiment: runs/<EXP>/<RUN>/{result.json, analysis.json, metrics.jsonl, eval_curve.jsonl, "
    "predictions.jsonl}, with the seeds of a run config in <RUN>.seed<S>. Expected runs without a result record are "
    "listed as missing.";

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

#ifndef STAGE_NO_MAIN
int main(int argc, char **argv) { return report_main(argc, argv); }
#endif
