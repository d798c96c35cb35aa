/* tokenize: trains the BPE tokenizer on the tokenizer corpus and encodes the DM-math splits into token shards.
 * The work is in datasets/tokenizer_stage.c (tokenize_run); this is the command line. */
#include <stdbool.h>
#include <stdio.h>

#include "datasets/tokenizer_stage.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/log.h"

int main(int argc, char **argv) {
    log_set_program("tokenize");
    const char *raw = NULL, *config = NULL, *out = NULL, *tokenizer_raw = NULL;
    bool quiet = false;
    const CliOption opts[] = {
        {"raw", OPT_STRING, &raw, "raw directory written by fetch, e.g. data/tiny/raw", true},
        {"config", OPT_STRING, &config, "experiment data config with a \"tokenize\" section, e.g. "
                                        "experiments/tiny/data.json", true},
        {"out", OPT_STRING, &out, "output directory, e.g. data/tiny", true},
        {"tokenizer-raw", OPT_STRING, &tokenizer_raw, "take the tokenizer corpus from this fetch output instead "
                                                      "(default: --raw)", false},
        {"quiet", OPT_FLAG, &quiet, "only errors on stderr (no progress, no info lines)", false},
    };
    cli_parse(argc, argv, "tokenize",
              "Trains the SentencePiece-style BPE tokenizer (512 pieces, digits split, whitespace as U+2581) on\n"
              "RAW/tokenizer_corpus and writes OUT/tokenizer.json, OUT/{train,interpolate,extrapolate}.shard and\n"
              "OUT/tokenize_manifest.json. Inputs are checked against RAW/manifest.json; bad input is one error line\n"
              "naming the file and line, and then no output is written. Same inputs give byte-identical outputs.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    if (quiet) log_set_verbosity(0);
    TokenizeConfig cfg;
    char err[1024];
    if (tokenize_config_load(config, &cfg, err, sizeof err) != 0) die("%s", err);
    TokenizeJob job = {raw, config, out, !quiet, tokenizer_raw};
    if (tokenize_run(&job, &cfg, err, sizeof err) != 0) die("%s", err);
    log_info("wrote %s/{tokenizer.json,train.shard,interpolate.shard,extrapolate.shard,tokenize_manifest.json}", out);
    return 0;
}
