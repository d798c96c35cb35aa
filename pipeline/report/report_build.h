/* The report of one experiment (bin/report): reads the records of every run directory under runs_dir (the expected
 * runs, their seeds RUN.seed<S> and other variants RUN@VARIANT[.seed<S>], and any other run with a result.json;
 * report_runs.h), groups the seeds of each configuration, and writes OUT/report.md, a self-contained
 * OUT/report.html (SVGs inlined) and the figures as .svg files beside report.md (which links them). Expected runs
 * that have no result.json are listed as missing, never silently dropped. The output holds no timestamps: the same
 * records give byte-identical reports. The sections live in report_*.c (report_sections.h), the statistics in
 * report_stats.c and stats.c, the verdict rules in verdict.c. */
#ifndef PIPELINE_REPORT_BUILD_H
#define PIPELINE_REPORT_BUILD_H

/* The runs a report expects when the caller names none (bin/report --expected-runs). */
#define REPORT_DEFAULT_EXPECTED_RUNS "dense_qa,dense_answer,moeut_qa,moeut_answer"

/* Writes the report of experiment `experiment` from runs_dir into the directory out (created if needed), and logs
 * one line saying what it wrote. expected: comma-separated runs that must appear. Dies with one line naming the file or
 * directory when runs_dir is not a directory or a record is bad or of another experiment; nothing is written then
 * (every record is read before out is created). Returns 0. */
int report_build(const char *experiment, const char *runs_dir, const char *out, const char *expected);

#endif
