/* The tokenize stage's manifest (see tokenize_manifest.h). */
#include "datasets/tokenize_manifest.h"

#include "pipeline/base/log.h"

#ifndef CODE_VERSION
#define CODE_VERSION "unknown"
#endif

#define MANIFEST_SCHEMA "dm-math-tokenized"

/* The raw directory's identity: the sha256 of fetch's manifest and what fetch recorded of its source. */
static void add_raw_identity(cJSON *manifest, const char *key, const RawManifest *m) {
    static const char *const copy_keys[] = {"source", "archive_sha256", "filter"};
    cJSON *raw = cJSON_AddObjectToObject(manifest, key);
    cJSON_AddStringToObject(raw, "manifest_sha256", m->sha256);
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(m->root, copy_keys[i]);
        if (cJSON_IsString(v)) cJSON_AddStringToObject(raw, copy_keys[i], v->valuestring);
    }
}

cJSON *tokenize_manifest_build(const TokenizeConfig *cfg, const char *config_sha256, const RawInputs *in,
                               const Tokenizer *tok, const Pool *pools, const PoolStats *stats,
                               const char *const *shard_files, int n_pools) {
    int separate = raw_inputs_corpus_separate(in);
    cJSON *manifest = cJSON_CreateObject();
    CHECK_ALLOC(manifest);
    cJSON_AddStringToObject(manifest, "schema", MANIFEST_SCHEMA);
    cJSON_AddNumberToObject(manifest, "schema_version", 1);
    cJSON_AddStringToObject(manifest, "code_version", CODE_VERSION);
    cJSON *c = cJSON_AddObjectToObject(manifest, "config");
    cJSON_AddNumberToObject(c, "vocab_size", (double)cfg->vocab_size);
    cJSON_AddNumberToObject(c, "max_piece_length", (double)cfg->max_piece_length);
    cJSON_AddNumberToObject(c, "tokenizer_pairs_per_file", (double)cfg->tokenizer_pairs_per_file);
    cJSON_AddNumberToObject(c, "eval_examples", (double)cfg->eval_examples);
    cJSON_AddNumberToObject(c, "eval_shuffle_seed", (double)cfg->eval_shuffle_seed);
    cJSON_AddNumberToObject(c, "train_shuffle_seed", (double)cfg->train_shuffle_seed);
    cJSON_AddStringToObject(c, "exclude_tokenizer_pattern", cfg->exclude_tokenizer_pattern);
    cJSON_AddNumberToObject(c, "character_coverage", cfg->character_coverage);
    if (config_sha256) cJSON_AddStringToObject(manifest, "config_sha256", config_sha256);
    add_raw_identity(manifest, "raw", &in->data_manifest);
    if (separate) add_raw_identity(manifest, "tokenizer_raw", in->corpus_manifest);
    cJSON *inputs = cJSON_AddArrayToObject(manifest, "inputs");
    const InputList *lists[2] = {&in->data, &in->corpus};
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < lists[l]->n; i++) {
            const InputFile *f = lists[l]->v[i];
            cJSON *o = cJSON_CreateObject();
            CHECK_ALLOC(o);
            cJSON_AddStringToObject(o, "file", f->rel);
            cJSON_AddStringToObject(o, "sha256", f->f.sha256);
            cJSON_AddNumberToObject(o, "pairs", (double)f->f.n_pairs);
            cJSON_AddStringToObject(o, "raw", l == 1 && separate ? "tokenizer_raw" : "raw");
            cJSON_AddItemToArray(inputs, o);
        }
    }
    cJSON *tj = cJSON_AddObjectToObject(manifest, "tokenizer");
    cJSON_AddStringToObject(tj, "file", "tokenizer.json");
    cJSON_AddStringToObject(tj, "sha256", tokenizer_sha256(tok));
    cJSON_AddNumberToObject(tj, "vocab_size", tokenizer_vocab_size(tok));
    cJSON_AddNumberToObject(tj, "corpus_files", in->corpus.n);
    cJSON_AddNumberToObject(tj, "excluded_corpus_files", in->n_excluded);
    cJSON *splits = cJSON_AddObjectToObject(manifest, "splits");
    cJSON *outputs = cJSON_AddObjectToObject(manifest, "outputs");
    cJSON_AddStringToObject(outputs, "tokenizer.json", tokenizer_sha256(tok));
    for (int p = 0; p < n_pools; p++) {
        cJSON_AddItemToObject(splits, pools[p].name, pool_stats_json(&stats[p], shard_files[p], pools[p].seed));
        cJSON_AddStringToObject(outputs, shard_files[p], stats[p].sha256);
    }
    return manifest;
}
