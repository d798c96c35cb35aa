/* The "tokenize" section of data.json (see tokenize_config.h). */
#include "datasets/tokenize_config.h"

#include <regex.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "datasets/data_config.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/module_regex.h"

void tokenize_config_defaults(TokenizeConfig *c) {
    c->vocab_size = 512;
    c->max_piece_length = 16;
    c->tokenizer_pairs_per_file = 10000;
    c->eval_examples = 5000;
    c->eval_shuffle_seed = 123;
    c->train_shuffle_seed = 1;
    snprintf(c->exclude_tokenizer_pattern, sizeof c->exclude_tokenizer_pattern, "%s", "probability__swr_.*");
    c->character_coverage = 0.9995;
}

int tokenize_config_load(const char *path, TokenizeConfig *c, char *err, size_t errlen) {
    tokenize_config_defaults(c);
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!root) return -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: expected a JSON object at the top level", path);
        goto done;
    }
    if (data_config_check_sections(root, path, err, errlen) != 0) goto done;
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, "tokenize");
    if (!sec) {
        set_err(err, errlen, "%s: missing required key tokenize", path);
        goto done;
    }
    JsonReader r;
    json_reader_init(&r, sec, path, "tokenize");
    const char *pattern = NULL;
    json_get_int(&r, "vocab_size", &c->vocab_size, false);
    json_get_int(&r, "max_piece_length", &c->max_piece_length, false);
    json_get_int(&r, "tokenizer_pairs_per_file", &c->tokenizer_pairs_per_file, false);
    json_get_int(&r, "eval_examples", &c->eval_examples, false);
    json_get_int(&r, "eval_shuffle_seed", &c->eval_shuffle_seed, false);
    json_get_int(&r, "train_shuffle_seed", &c->train_shuffle_seed, false);
    json_get_double(&r, "character_coverage", &c->character_coverage, false);
    if (json_get_string(&r, "exclude_tokenizer_pattern", &pattern, false)) {
        if (strlen(pattern) >= sizeof c->exclude_tokenizer_pattern) {
            set_err(err, errlen, "%s: tokenize.exclude_tokenizer_pattern: longer than %zu characters", path,
                    sizeof c->exclude_tokenizer_pattern - 1);
            goto done;
        }
        snprintf(c->exclude_tokenizer_pattern, sizeof c->exclude_tokenizer_pattern, "%s", pattern);
    }
    if (json_reader_finish(&r, err, errlen) != 0) goto done;
    const char *bad = NULL;
    char range[64] = "";
    if (c->vocab_size < 4 || c->vocab_size > 65536) bad = "vocab_size", snprintf(range, sizeof range, "4..65536");
    else if (c->max_piece_length < 1 || c->max_piece_length > 64)
        bad = "max_piece_length", snprintf(range, sizeof range, "1..64");
    else if (c->tokenizer_pairs_per_file < 1) bad = "tokenizer_pairs_per_file", snprintf(range, sizeof range, ">= 1");
    else if (c->eval_examples < 1) bad = "eval_examples", snprintf(range, sizeof range, ">= 1");
    else if (c->eval_shuffle_seed < 0) bad = "eval_shuffle_seed", snprintf(range, sizeof range, ">= 0");
    else if (c->train_shuffle_seed < 0) bad = "train_shuffle_seed", snprintf(range, sizeof range, ">= 0");
    else if (!(c->character_coverage > 0 && c->character_coverage <= 1))
        bad = "character_coverage", snprintf(range, sizeof range, "(0, 1]");
    if (bad) {
        set_err(err, errlen, "%s: tokenize.%s: must be in %s", path, bad, range);
        goto done;
    }
    /* A bad pattern is reported here, naming the config, rather than after the stage has read gigabytes of input. */
    regex_t re;
    char rerr[400];
    if (module_regex_compile(&re, c->exclude_tokenizer_pattern, "regular expression", rerr, sizeof rerr) != 0) {
        set_err(err, errlen, "%s: tokenize.exclude_tokenizer_pattern: %s", path, rerr);
        goto done;
    }
    regfree(&re);
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
