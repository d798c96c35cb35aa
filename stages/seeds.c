/* seeds: the run directories of an experiment's runs over several seeds, for make (mk/reproduce.mk).
 *
 *   bin/seeds --experiment experiments/EXP --runs dense_qa,moeut_qa [--count N]
 *
 * Prints the run directory names on one line, separated by spaces, run by run, each run's seeds in order:
 * seeds 1..N with --count N (make's SEEDS=N), else the "seeds" list of experiments/EXP/seeds.json, else each run's
 * own train.seed alone (the directories are then the run names, as without seeds). A seed equal to the run config's
 * own train.seed is the directory RUN, any other seed S is RUN.seed<S> (model/run_seeds.h). A bad seeds.json or run
 * config is one error line naming the file and field, exit 1. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/run_seeds.h"
#include "model/train_config.h"
#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/log.h"

/* The run config's own train.seed (the whole config validated, as train will). */
static long own_seed(const char *exp_dir, const char *run) {
    char path[4096], err[1024];
    if (snprintf(path, sizeof path, "%s/%s.json", exp_dir, run) >= (int)sizeof path) die("%s/%s.json: path too long",
                                                                                          exp_dir, run);
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
    if (!root) die("%s", err);
    ModelConfig mc;
    TrainConfig tc;
    if (run_config_parse(root, path, &mc, &tc, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(root);
    return tc.seed;
}

int main(int argc, char **argv) {
    log_set_program("seeds");
    const char *exp_dir = NULL, *runs = NULL;
    long count = LONG_MIN; /* not given */
    const CliOption opts[] = {
        {"experiment", OPT_STRING, &exp_dir, "experiment directory experiments/EXP (run configs, seeds.json)", true},
        {"runs", OPT_STRING, &runs, "comma-separated run names (their configs are EXP/RUN.json)", true},
        {"count", OPT_INT, &count, "seeds 1..N (make's SEEDS=N; default: seeds.json's list, else each run's own)",
         false},
    };
    cli_parse(argc, argv, "seeds",
              "Prints the run directories of --runs over the experiment's seeds (runs/EXP/RUN for a run config's own "
              "train.seed, RUN.seed<S> for another seed S), separated by spaces.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    if (count != LONG_MIN && (count < 1 || count > RUN_SEEDS_MAX))
        die("SEEDS=%ld (--count): must be in [1, %d]", count, RUN_SEEDS_MAX);
    char err[1024], path[4096];
    long *seeds = NULL;
    int n_seeds = 0;
    if (count != LONG_MIN) {
        n_seeds = (int)count;
        seeds = xmalloc((size_t)n_seeds * sizeof *seeds);
        for (int i = 0; i < n_seeds; i++) seeds[i] = i + 1;
    } else {
        if (snprintf(path, sizeof path, "%s/%s", exp_dir, RUN_SEEDS_FILE) >= (int)sizeof path)
            die("%s: path too long", exp_dir);
        if (file_exists(path) && run_seeds_read(path, &seeds, &n_seeds, err, sizeof err) != 0) die("%s", err);
    }
    char *list = xstrdup(runs), *save = NULL;
    const char *sep = "";
    for (char *run = strtok_r(list, ",", &save); run; run = strtok_r(NULL, ",", &save)) {
        long own = own_seed(exp_dir, run);
        for (int i = 0; i < (n_seeds ? n_seeds : 1); i++) {
            char dir[512];
            if (run_seed_dir(dir, sizeof dir, run, own, n_seeds ? seeds[i] : own) != 0) die("%s: name too long", run);
            printf("%s%s", sep, dir);
            sep = " ";
        }
    }
    printf("\n");
    free(list);
    free(seeds);
    if (fflush(stdout) != 0 || ferror(stdout)) die("stdout: write failed");
    return 0;
}
