/* compare: checks each run's result.json against a recorded baseline record, metric by metric, with declared
 * per-metric tolerances; and, as --diff, shows what differs between two runs.
 *
 *   bin/compare --baselines reports/baselines/EXP --runs runs/EXP [--tolerances FILE] [--only RUN,RUN] [--allow-better]
 *               [--config-change=error|note] [--only-failures]
 *   bin/compare --diff A B [--replicates N]
 *
 * The gate, its rules and exit statuses: pipeline/records/compare_gate.h; the tolerances file (default
 * <baselines>/tolerances.json) and the verdict on one metric: pipeline/records/compare_tolerances.h; baselines pooled over
 * seeds: pipeline/records/compare_baseline.h; one run's table: pipeline/records/compare_run.h.
 *
 * --diff A B (pipeline/records/run_diff.h): A and B are run directories (runs/EXP/RUN, runs/EXP/RUN@VARIANT, any path) or
 * baseline records (reports/baselines/EXP/RUN.result.json, or its prefix reports/baselines/EXP/RUN). Prints the config keys that differ, then
 * every metric (and training throughput, and the analysis' depth summary when both have analysis.json) with A, B and
 * B-A, and, where both have predictions.jsonl listing the same examples that add up to their records, a paired 95%
 * percentile bootstrap interval of B-A over those examples. A diff judges nothing: exit 0, or 2 when A or B cannot be
 * read. */
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/cli.h"
#include "pipeline/records/compare_gate.h"
#include "pipeline/base/log.h"
#include "pipeline/records/run_diff.h"

static const char *SUMMARY =
    "Compares each run's result.json with the baseline record <baselines>/<RUN>.result.json metric by metric, with "
    "the per-metric tolerances of the tolerances file (default <baselines>/tolerances.json); with baselines of "
    "several seeds (RUN.result.json, RUN.seed<S>.result.json), against the seeds' mean with a tolerance of at least "
    "seed_spread.k standard deviations; a run of a seed the baselines do not hold (RUN.seed4) is compared with that mean "
    "too when they hold 2 or more seeds of RUN, and recorded seeds not run beside it are noted, not failures. Prints a table (metric, baseline, new, delta, tolerance, status: ok, WORSE, "
    "BETTER, CHANGED, or 'not gated' for a class the tolerances file declares \"gated\": false), then one line "
    "'compare: N compared, M not compared (...): verdict'. The gate is two-sided: a tolerance is a measured spread, and "
    "a metric beyond it in the good direction (BETTER) means the results moved as much as WORSE does. Exit 0: something "
    "was compared and every metric within its tolerance; 1: a metric WORSE or BETTER (BETTER allowed with "
    "--allow-better) or a count CHANGED; 2: nothing compared, "
    "or a missing record or records of different config / dataset / tokenizer (not comparable; the changed config keys "
    "are named with both values, and keys that change neither training nor evaluation (description, analyze) do not "
    "count; with --config-change=note a different config is one counted note, not a failure while another run is "
    "compared); 3: "
    "nothing compared because every run asked for was such a note. "
    "bin/compare --diff A B shows what differs between two runs instead (--diff --help).";

static const char *DIFF_SUMMARY =
    "bin/compare --diff A B: what differs between two runs. A and B are run directories (runs/EXP/RUN, with "
    "result.json, and predictions.jsonl and analysis.json when present) or baseline records "
    "(reports/baselines/EXP/RUN.result.json, or its prefix reports/baselines/EXP/RUN). Prints the config keys whose values differ (each result.json's "
    "\"config\"), then every metric with A, B, B-A and, where both runs have predictions.jsonl on the same examples, "
    "a paired 95% bootstrap interval of B-A over the examples. Judges nothing: exit 0 (2 when A or B cannot be read).";

/* bin/compare --diff A B [--replicates N]. */
static int diff_main(int argc, char **argv, int at) {
    /* A and B follow --diff; the other arguments go through the ordinary parser (which takes no positional
     * arguments), so --help and --replicates work anywhere. */
    int n_pos = 0;
    while (n_pos < 2 && at + 1 + n_pos < argc && strncmp(argv[at + 1 + n_pos], "--", 2) != 0) n_pos++;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    for (int i = 0; i < argc; i++)
        if (i < at || i > at + n_pos) rest[n_rest++] = argv[i];
    long replicates = RUN_DIFF_BOOT_REPLICATES;
    CliOption opts[] = {
        {"replicates", OPT_INT, &replicates, "bootstrap replicates of the paired intervals (default 2000)", false},
    };
    cli_parse(n_rest, rest, "compare --diff A B", DIFF_SUMMARY, opts, 1);
    free(rest);
    if (n_pos < 2)
        cli_usage_die("compare", "--diff needs two runs: --diff A B (run directories or baseline records)");
    if (replicates < 1 || replicates > 1000000) {
        log_error("--replicates: expected 1 to 1000000 (got %ld)", replicates);
        return 2;
    }
    return run_diff_command(argv[at + 1], argv[at + 2], (int)replicates);
}

int main(int argc, char **argv) {
    log_set_program("compare");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--diff") == 0) return diff_main(argc, argv, i);
    CompareRequest req = {0};
    const char *config_change = "error";
    CliOption opts[] = {
        {"baselines", OPT_STRING, &req.baselines, "directory of <RUN>.result.json baseline records", true},
        {"runs", OPT_STRING, &req.runs, "directory of run directories <RUN>/result.json", true},
        {"tolerances", OPT_STRING, &req.tolerances, "tolerances file (default <baselines>/tolerances.json)", false},
        {"only", OPT_STRING, &req.only,
         "comma-separated runs to compare; RUN also selects its seeds RUN.seed<S> (default: every baseline record)",
         false},
        {"only-failures", OPT_FLAG, &req.options.only_failures,
         "print only metrics outside their tolerance (WORSE, BETTER, CHANGED; default: all)", false},
        {"allow-better", OPT_FLAG, &req.options.allow_better,
         "a metric BETTER than its baseline beyond the tolerance is reported, not a failure (a one-sided gate; "
         "default: it fails)",
         false},
        {"config-change", OPT_STRING, &config_change,
         "error (default): a run whose config_sha256 differs from its baseline's is not comparable (exit 2); note: "
         "print one note line naming the run and the changed config keys, and pass it",
         false},
    };
    cli_parse(argc, argv, "compare", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (compare_config_change_parse(config_change, &req.options.config_change_note) != 0) {
        log_error("--config-change: expected error or note (got '%s')", config_change);
        return 2;
    }
    return compare_gate(&req);
}
