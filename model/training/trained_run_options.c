/* The shared option block of evaluate and analyze (trained_run_options.h). */
#include "model/training/trained_run_options.h"

#include <stdio.h>
#include <string.h>

#include "pipeline/base/log.h"

/* --checkpoint's help line names the stage's verb; built here, it lives as long as the program. */
static char checkpoint_help[160];

void trained_run_options(TrainedRunOptions *o, const char *verb, const char *data_help, const char *out_help,
                         CliOption opts[TRAINED_RUN_N_OPTIONS]) {
    memset(o, 0, sizeof *o);
    o->backend_name = "cpu";
    o->threads = 1;
    snprintf(checkpoint_help, sizeof checkpoint_help,
             "%s the weights kept at an evaluation step, step<S> in --run's checkpoints/ (train.keep_checkpoints)",
             verb);
    const CliOption rows[TRAINED_RUN_N_OPTIONS] = {
        {"run", OPT_STRING, &o->run_dir, "trained run directory runs/EXP/RUN", true},
        {"config", OPT_STRING, &o->config_path, "run config experiments/EXP/RUN.json", true},
        {"set", OPT_STRING_LIST, &o->sets, "KEY=VALUE: override a run config key, repeatable (the same as train's)",
         false},
        {"data", OPT_STRING, &o->data_dir, data_help, true},
        {"out", OPT_STRING, &o->out_path, out_help, true},
        {"backend", OPT_STRING, &o->backend_name, "cpu | cuda (default cpu)", false},
        {"checkpoint", OPT_STRING, &o->checkpoint, checkpoint_help, false},
        {"threads", OPT_INT, &o->threads,
         "CPU threads (default 1: the per-example forwards are too small to gain; 0 = all cores)", false},
    };
    memcpy(opts, rows, sizeof rows);
}

void trained_run_options_read_config(const char *program, const TrainedRunOptions *o, TrainedRun *tr) {
    char err[2048];
    int rc = trained_run_read_config(tr, o->run_dir, o->config_path, o->sets.items, o->sets.n, err, sizeof err);
    if (rc == CONFIG_USAGE_ERROR) cli_usage_die(program, err);
    if (rc) die("%s", err);
    if (o->checkpoint && trained_run_use_checkpoint(tr, o->checkpoint, err, sizeof err)) die("%s", err);
}
