/* Several seeds of an experiment's runs (stages/README.md, "Seeds"): which seeds (make's SEEDS=N, or the "seeds"
 * list of experiments/EXP/seeds.json, or none: each run's own train.seed) and the run directory of each (run, seed):
 * runs/EXP/RUN for the run config's own train.seed (today's directory), runs/EXP/RUN.seed<S> for any other seed S
 * (trained, evaluated and analyzed with --set train.seed=S). Data and tokenizer are shared by all seeds. */
#ifndef PIPELINE_RUN_SEEDS_H
#define PIPELINE_RUN_SEEDS_H

#include <stddef.h>

#define RUN_SEEDS_FILE "seeds.json"
#define RUN_SEEDS_MAX 1000 /* more is a typo (SEEDS=1000000 would queue a million trainings) */

/* Reads seeds.json strictly: {"comment": "...", "seeds": [S, ...]}; "comment" optional (a string), "seeds" a non-empty
 * array of distinct integers in [0, 2^53), at most RUN_SEEDS_MAX. *seeds (caller frees) in file order. 0, or -1 with
 * one line in err naming the file and the field. */
int run_seeds_read(const char *path, long **seeds, int *n, char *err, size_t errlen);

/* The run directory name of seed for a run whose config has own_seed: "RUN" or "RUN.seed<S>". 0, or -1 if it does not
 * fit. */
int run_seed_dir(char *out, size_t n, const char *run, long own_seed, long seed);

#endif
