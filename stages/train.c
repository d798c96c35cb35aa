/* train: trains one run (dense or MoEUT, Q+A or answer-only loss) on data/EXP/train.shard and writes
 * runs/EXP/RUN/{model.safetensors, optim.safetensors, state.json, metrics.jsonl, train_summary.json}.
 * The command line only: the Trainer (setup, resume policy, step loop, checkpoints, stop signals) is
 * model/training/trainer.h; SIGINT/SIGTERM save a checkpoint at the step boundary and exit 130/143. */
#include <stdlib.h>
#include <string.h>

#include "model/training/dist_train.h"
#include "model/training/trainer.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/dist.h"
#include "pipeline/base/log.h"
#include "pipeline/base/threads.h"

int main(int argc, char **argv) {
    log_set_program("train"); /* dist_init adds the rank under mpirun */
    TrainOptions o;
    memset(&o, 0, sizeof o);
    o.backend = "cpu";
    /* The command line as started (MPI may take arguments out of argv), for the continue command of an interrupt. */
    o.start_argc = argc;
    o.start_argv = calloc((size_t)argc + 1, sizeof *o.start_argv);
    if (!o.start_argv) die("out of memory");
    memcpy(o.start_argv, argv, (size_t)argc * sizeof *argv);
    long threads = 0, dist_timeout = 0;
    const CliOption opts[] = {
        {"config", OPT_STRING, &o.config_path, "run config experiments/EXP/RUN.json", true},
        {"data", OPT_STRING, &o.data_dir, "data directory data/EXP (tokenizer.json, train.shard)", true},
        {"out", OPT_STRING, &o.out_dir, "run directory runs/EXP/RUN", true},
        {"backend", OPT_STRING, &o.backend, "cpu | cuda (default cpu)", false},
        {"resume", OPT_FLAG, &o.resume,
         "continue from the checkpoint in --out (from scratch if there is none); refuse one of another config, "
         "length or training data",
         false},
        {"auto-resume", OPT_FLAG, &o.auto_resume,
         "continue the checkpoint in --out if it has this config, length, training data and backend, else start "
         "over saying why (make's default)",
         false},
        {"set", OPT_STRING_LIST, &o.sets,
         "KEY=VALUE: override a run config key (train.lr=1e-3, train.seed=2, model.d_model=64), repeatable; VALUE is "
         "JSON or else a string; recorded in the run and in its config_sha256",
         false},
        {"steps", OPT_INT, &o.steps_override, "override train.steps (also the cosine length)", false},
        {"threads", OPT_INT, &threads, "CPU threads (default: all cores)", false},
        {"stop-after", OPT_INT, &o.stop_after, "testing: checkpoint and exit 0 after this many completed steps",
         false},
        {"debug-nan", OPT_INT, &o.debug_nan_step, "testing: inject a NaN gradient at this (1-based) step", false},
        {"debug-diverge", OPT_INT, &o.debug_diverge_step,
         "testing: nudge one weight of the last rank after this (1-based) step", false},
        {"init-from", OPT_STRING, &o.init_from,
         "the initial weights of an upcycled run (the checkpoint bin/upcycle wrote for this config); required by, "
         "and only allowed for, a config with an \"upcycle\" section",
         false},
        {"dist-timeout", OPT_INT, &dist_timeout,
         "under mpirun: seconds a rank waits in one collective before it gives up on the others (default 600)", false},
    };
    cli_parse(argc, argv, "train",
              "Trains one run on data/EXP/train.shard and writes model.safetensors, optim.safetensors, state.json, "
              "metrics.jsonl and, when training finished, train_summary.json into --out. SIGINT/SIGTERM save a "
              "checkpoint at the step boundary and exit 130/143; --resume continues it bit-identically.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    if (o.resume && o.auto_resume) die("--resume and --auto-resume exclude each other (give one)");
    if (dist_timeout < 0) die("--dist-timeout: must be >= 1 (got %ld)", dist_timeout);
    dist_init("train", &argc, &argv, (double)dist_timeout); /* one rank of W under mpirun/srun, else nothing */
    dist_setup_begin(); /* until the run directory is settled, a refusal is rank 0's one line */
    log_info("threads: %d", threads_set(threads ? threads : dist_default_threads()));
    if (dist_active()) log_info("data-parallel: %d rank(s) (MPI)", dist_world());

    Trainer *t = trainer_create(&o);
    int rc = trainer_run(t);
    trainer_free(t);
    dist_finalize();
    free(o.start_argv);
    return rc;
}
