/* export: every run of an experiment as one tidy CSV table (pipeline/records/runs_csv.h: the rows, columns and cells).
 *
 *   bin/export --runs runs/EXP --out reports/EXP/runs.csv
 *
 * Reads runs/EXP/<RUN>/result.json (each run directory that has one, a symbolic link to one included:
 * pipeline/records/run_dirs.h, the rule report and compare share), and analysis.json and depth_prompts.json where
 * present (the depth scores), and writes the table atomically. A run that cannot
 * be read or a record that does not load is one error line naming it, exit 1, and the earlier table stays as it was. */
#include <stdio.h>

#include "pipeline/base/cli.h"
#include "pipeline/base/log.h"
#include "pipeline/records/runs_csv.h"

static const char *SUMMARY =
    "Writes every run of an experiment (each directory of --runs holding a result.json) as one CSV table to --out: "
    "one row per run (run, run_config, variant, seed, overrides, arch, loss_mode, backend, code_version, n_params, "
    "every key of the run's config flattened as model.d_model, then its numbers under the names make diff prints: "
    "accuracy and mean answer loss per set and module as interpolate.accuracy, training numbers, and the depth scores "
    "of analysis.json and depth_prompts.json); RFC 4180 quoting, '.' decimals, an empty cell where a run has no "
    "value.";

int main(int argc, char **argv) {
    log_set_program("export");
    const char *runs_dir = NULL, *out_path = NULL;
    CliOption opts[] = {
        {"runs", OPT_STRING, &runs_dir, "the experiment's runs directory, e.g. runs/EXP", true},
        {"out", OPT_STRING, &out_path, "the CSV file to write, e.g. reports/EXP/runs.csv", true},
    };
    cli_parse(argc, argv, "export", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    char err[4096];
    int rows = 0, cols = 0;
    if (runs_csv_export(runs_dir, out_path, &rows, &cols, err, sizeof err) != 0) die("%s", err);
    log_info("wrote %s: %d runs x %d columns", out_path, rows, cols);
    return 0;
}
