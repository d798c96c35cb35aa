/* upcycle: the initial checkpoint of an upcycled MoE run, converted from a trained dense run (model/upcycle.h).
 *
 *   bin/upcycle --config experiments/EXP/RUN.json --dense runs/EXP/DENSE/model.safetensors
 *               --out runs/EXP/RUN.init.safetensors [--set KEY=VALUE ...]
 *
 * RUN.json is the target run config: arch "moe" and an "upcycle" section (from, method, seed, noise). The output is
 * written atomically; bin/train --init-from starts the run from it. A target or source that cannot be converted is
 * one error line saying why, exit 1. */
#include <stdio.h>

#include <cjson/cJSON.h>

#include "model/train_config.h"
#include "model/upcycle.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/log.h"
#include "pipeline/records/config_override.h"

static const char *SUMMARY =
    "Converts the dense checkpoint --dense into the initial weights of the MoE run --config (arch \"moe\", with an "
    "\"upcycle\" section: from, method \"copy\" | \"split\", seed, noise) and writes them to --out: attention, "
    "LayerNorms, embedding and head copied, every expert a copy of the dense FFN (copy) or a piece of its permuted "
    "hidden units (split), the router freshly initialised. __metadata__.upcycle records the method, seed, noise, "
    "source path and its SHA-256; bin/train --init-from reads them into the run's records.";

int main(int argc, char **argv) {
    log_set_program("upcycle");
    const char *config_path = NULL, *dense_path = NULL, *out_path = NULL;
    CliStringList sets = {.n = 0};
    CliOption opts[] = {
        {"config", OPT_STRING, &config_path, "the upcycled run's config experiments/EXP/RUN.json", true},
        {"dense", OPT_STRING, &dense_path, "the dense checkpoint, e.g. runs/EXP/dense_qa/model.safetensors", true},
        {"out", OPT_STRING, &out_path, "the initial checkpoint to write, e.g. runs/EXP/RUN.init.safetensors", true},
        {"set", OPT_STRING_LIST, &sets, "KEY=VALUE: override a run config key, repeatable (as bin/train)", false},
    };
    cli_parse(argc, argv, "upcycle", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    char err[4096];
    if (atomic_check_target(out_path, err, sizeof err) != 0) die("%s", err);
    LoadedConfig lc;
    int rc = config_load_with_overrides(&lc, config_path, sets.items, sets.n, err, sizeof err);
    if (rc == CONFIG_USAGE_ERROR) cli_usage_die("upcycle", err);
    if (rc) die("%s", err);
    ModelConfig mc;
    TrainConfig tc;
    if (run_config_parse(lc.json, config_path, &mc, &tc, err, sizeof err) != 0) die("%s", err);
    const cJSON *section = cJSON_GetObjectItemCaseSensitive(lc.json, "upcycle");
    if (!section) die("%s: upcycle: missing (the section that says which dense run to convert, and how)", config_path);
    UpcycleOptions o;
    if (upcycle_options_from_json(&o, section, config_path, err, sizeof err) != 0) die("%s", err);
    if (upcycle_run(dense_path, &mc, &o, config_path, out_path, err, sizeof err) != 0) die("%s", err);
    log_info("wrote %s: %s of %s (seed %ld, noise %g)", out_path, upcycle_method_name(o.method), dense_path, o.seed,
             o.noise);
    loaded_config_free(&lc);
    return 0;
}
