/* The command-line options of the stages that read a finished run (evaluate, analyze), written once so that both take
 * and explain them alike: --run, --config, --set, --data, --out, --backend, --checkpoint, --threads. A stage puts
 * trained_run_options()'s rows first in its option table, adds its own after them, and after cli_parse opens the
 * run's config with trained_run_options_read_config (which fails the way both always have). */
#ifndef MODEL_TRAINING_TRAINED_RUN_OPTIONS_H
#define MODEL_TRAINING_TRAINED_RUN_OPTIONS_H

#include "model/training/trained_run.h"
#include "pipeline/base/cli.h"

#define TRAINED_RUN_N_OPTIONS 8

typedef struct {
    const char *run_dir, *config_path, *data_dir, *out_path; /* required */
    const char *backend_name;                                /* default "cpu" */
    const char *checkpoint;                                  /* NULL: the run's final weights */
    long threads;                                            /* default 1 (0 = all cores) */
    CliStringList sets;                                      /* --set KEY=VALUE, as train's */
} TrainedRunOptions;

/* Sets o's defaults and writes the option rows into opts. verb names what the stage does with the weights ("evaluate",
 * "analyze"); data_help and out_help are the --data and --out help lines (what the stage reads there and writes,
 * string literals). The rows point into o, which must outlive cli_parse. */
void trained_run_options(TrainedRunOptions *o, const char *verb, const char *data_help, const char *out_help,
                         CliOption opts[TRAINED_RUN_N_OPTIONS]);

/* trained_run_read_config with o's --set values, then --checkpoint when given. Dies with one line: a malformed --set
 * is a usage error (exit 2, like cli_parse's own), anything else exit 1. */
void trained_run_options_read_config(const char *program, const TrainedRunOptions *o, TrainedRun *tr);

#endif
