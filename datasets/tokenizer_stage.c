/* The tokenize stage (see tokenizer_stage.h): read and check every input, then train the tokenizer and encode the
 * three pools into a staging directory, and move the finished outputs into place. */
#include "datasets/tokenizer_stage.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "datasets/pool_encode.h"
#include "datasets/raw_inputs.h"
#include "datasets/tokenize_manifest.h"
#include "datasets/tokenizer.h"
#include "datasets/tokenizer_training.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

static const char *const OUTPUT_FILES[] = {"tokenizer.json", "train.shard", "interpolate.shard", "extrapolate.shard"};
#define N_OUTPUT_FILES 4
#define MANIFEST_FILE "tokenize_manifest.json"
#define N_POOLS 3 /* train, interpolate, extrapolate: OUTPUT_FILES[1 ..] */

/* The staging directory of a run is a new OUT/.tokenize.tmp.<pid>.<random> (mkdir_temp of STAGE_BASE). */
#define STAGE_BASE ".tokenize"
#define STAGE_PREFIX STAGE_BASE ".tmp."

/* Moves the finished outputs from the staging directory into out_dir: the old manifest goes first (so a crash in
 * between never leaves a manifest that describes other files), the new manifest last. */
static int commit_outputs(const char *stage_dir, const char *out_dir, char *err, size_t errlen) {
    char from[4300], to[4300];
    snprintf(to, sizeof to, "%s/%s", out_dir, MANIFEST_FILE);
    if (unlink(to) != 0 && errno != ENOENT) {
        set_err(err, errlen, "%s: cannot remove the old manifest: %s", to, strerror(errno));
        return -1;
    }
    for (int i = 0; i <= N_OUTPUT_FILES; i++) {
        const char *name = i < N_OUTPUT_FILES ? OUTPUT_FILES[i] : MANIFEST_FILE;
        snprintf(from, sizeof from, "%s/%s", stage_dir, name);
        snprintf(to, sizeof to, "%s/%s", out_dir, name);
        if (rename(from, to) != 0) {
            set_err(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
            return -1;
        }
    }
    fsync_dir_of(to);
    return 0;
}

int tokenize_run(const TokenizeJob *job, const TokenizeConfig *cfg, char *err, size_t errlen) {
    RawInputs in;
    Tokenizer *tok = NULL;
    PoolStats stats[N_POOLS];
    memset(stats, 0, sizeof stats);
    cJSON *manifest = NULL;
    int rc = -1;
    char stage_dir[4200] = "", path[4400];

    /* 1. Read and validate every input before anything is written. */
    if (raw_inputs_load(&in, job->raw_dir, job->tokenizer_raw_dir, cfg->exclude_tokenizer_pattern, err, errlen) != 0)
        goto done;
    log_info("read %d data files and %d tokenizer-corpus files (%d excluded by \"%s\")", in.data.n, in.corpus.n,
             in.n_excluded, cfg->exclude_tokenizer_pattern);

    /* 2. Staging directory for all outputs. */
    if (mkdir_p(job->out_dir, err, errlen) != 0) goto done;
    /* Staging directories of killed runs (a signal ends tokenize without cleanup; with the full dataset they hold
     * gigabytes of shards) go first. */
    int n_stale = remove_stale_temps(job->out_dir, STAGE_PREFIX);
    if (n_stale > 0) log_info("removed %d stale staging director%s %s/%s<pid>", n_stale, n_stale == 1 ? "y" : "ies",
                              job->out_dir, STAGE_PREFIX);
    char stage_base[4200];
    if (path_join_checked(stage_base, sizeof stage_base, job->out_dir, STAGE_BASE, err, errlen) != 0) goto done;
    if (mkdir_temp(stage_base, stage_dir, sizeof stage_dir, err, errlen) != 0) {
        stage_dir[0] = '\0';
        goto done;
    }

    /* 3. Tokenizer. */
    snprintf(path, sizeof path, "%s/tokenizer.json", stage_dir);
    if (tokenizer_train_on_corpus(&in.corpus, cfg, in.n_excluded, path, err, errlen) != 0) goto done;
    tok = tokenizer_load(path, err, errlen);
    if (!tok) goto done;

    /* 4. Shards: train pools the three training splits; the evaluation splits are cut to eval_examples. */
    const int *s = in.split_start;
    Pool pools[N_POOLS] = {
        {"train", in.data.v + s[RAW_TRAIN_EASY], s[RAW_INTERPOLATE] - s[RAW_TRAIN_EASY],
         (uint64_t)cfg->train_shuffle_seed, 0},
        {"interpolate", in.data.v + s[RAW_INTERPOLATE], s[RAW_EXTRAPOLATE] - s[RAW_INTERPOLATE],
         (uint64_t)cfg->eval_shuffle_seed, (uint64_t)cfg->eval_examples},
        {"extrapolate", in.data.v + s[RAW_EXTRAPOLATE], s[RAW_N_SPLITS] - s[RAW_EXTRAPOLATE],
         (uint64_t)cfg->eval_shuffle_seed, (uint64_t)cfg->eval_examples},
    };
    for (int p = 0; p < N_POOLS; p++) {
        snprintf(path, sizeof path, "%s/%s", stage_dir, OUTPUT_FILES[1 + p]);
        if (pool_encode(&pools[p], tok, path, in.data_manifest.sha256, job->show_progress, &stats[p], err, errlen) !=
            0)
            goto done;
        log_info("%s: %llu examples, %llu tokens, %.2f tokens/example", pools[p].name,
                 (unsigned long long)stats[p].n_examples, (unsigned long long)stats[p].n_tokens,
                 stats[p].n_examples ? (double)stats[p].n_tokens / (double)stats[p].n_examples : 0.0);
    }

    /* 5. Manifest. */
    char config_sha[65];
    if (job->config_path && sha256_file_hex(job->config_path, config_sha, err, errlen) != 0) goto done;
    manifest = tokenize_manifest_build(cfg, job->config_path ? config_sha : NULL, &in, tok, pools, stats,
                                       OUTPUT_FILES + 1, N_POOLS);
    snprintf(path, sizeof path, "%s/%s", stage_dir, MANIFEST_FILE);
    if (json_save_file(path, manifest, err, errlen) != 0) goto done;

    /* 6. Into place. */
    if (commit_outputs(stage_dir, job->out_dir, err, errlen) != 0) goto done;
    rc = 0;
done:
    if (stage_dir[0]) remove_tree(stage_dir);
    cJSON_Delete(manifest);
    for (int p = 0; p < N_POOLS; p++) pool_stats_free(&stats[p]);
    tokenizer_free(tok);
    raw_inputs_free(&in);
    return rc;
}
