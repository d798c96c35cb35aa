/* report: turns the records of one experiment into report.md and a self-contained report.html.
 *
 *   bin/report --experiment EXP --runs runs/EXP --out reports/EXP [--expected-runs a,b,c]
 *
 * Reads ONLY runs/EXP/<RUN>/result.json, analysis.json, metrics.jsonl, eval_curve.jsonl and predictions.jsonl (and
 * the run configs recorded inside the result records). Seeds of one run config are the directories RUN and
 * RUN.seed<S> (stages/README.md, "Seeds"); the report aggregates over them when their recorded configs agree (the same
 * variant key), and shows runs of other variants (RUN@VARIANT[.seed<S>]: sweep points, earlier configs) beside.
 * Writes report.md, report.html (SVGs inlined) and the figures as .svg files beside report.md (which links them).
 * Expected runs that have no result.json are listed as missing, never silently dropped. The output holds no
 * timestamps: the same records give byte-identical reports. The report is built by pipeline/report/report_build.h. */
#include "pipeline/base/cli.h"
#include "pipeline/base/log.h"
#include "pipeline/report/report_build.h"

static const char *SUMMARY =
    "Writes <out>/report.md and a self-contained <out>/report.html (plus the figures as .svg) from the records of "
    "one experiment: runs/<EXP>/<RUN>/{result.json, analysis.json, metrics.jsonl, eval_curve.jsonl, "
    "predictions.jsonl}, with the seeds of a run config in <RUN>.seed<S>. Expected runs without a result record are "
    "listed as missing.";

int main(int argc, char **argv) {
    log_set_program("report");
    const char *experiment = NULL, *runs_dir = NULL, *out = NULL, *expected = REPORT_DEFAULT_EXPECTED_RUNS;
    CliOption opts[] = {
        {"experiment", OPT_STRING, &experiment, "experiment name (e.g. tiny)", true},
        {"runs", OPT_STRING, &runs_dir, "directory holding the run directories (e.g. runs/tiny)", true},
        {"out", OPT_STRING, &out, "output directory (e.g. reports/tiny)", true},
        {"expected-runs", OPT_STRING, &expected,
         "comma-separated runs that must appear (default " REPORT_DEFAULT_EXPECTED_RUNS ")", false},
    };
    cli_parse(argc, argv, "report", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    return report_build(experiment, runs_dir, out, expected);
}
