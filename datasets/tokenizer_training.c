/* Training the tokenize stage's tokenizer (see tokenizer_training.h). */
#include "datasets/tokenizer_training.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "datasets/bpe_train.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

int tokenizer_train_on_corpus(const InputList *corpus, const TokenizeConfig *cfg, int n_excluded, const char *path,
                              char *err, size_t errlen) {
    BpeTrainConfig tc = {(int)cfg->vocab_size, (int)cfg->max_piece_length, cfg->character_coverage, true};
    BpeTrainer *tr = bpe_trainer_new(&tc);
    /* What the tokenizer was trained on, kept in tokenizer.json itself so the file documents its own provenance. */
    cJSON *info = cJSON_CreateObject();
    CHECK_ALLOC(info);
    cJSON_AddStringToObject(info, "sentence_format",
                            "\"Q: {q'} A: {a'} \", q'/a' with spaces around every non-[A-Za-z0-9] character and "
                            "whitespace runs collapsed");
    cJSON_AddNumberToObject(info, "pairs_per_file", (double)cfg->tokenizer_pairs_per_file);
    cJSON_AddStringToObject(info, "exclude_pattern", cfg->exclude_tokenizer_pattern);
    cJSON_AddNumberToObject(info, "n_excluded_files", n_excluded);
    cJSON *files = cJSON_AddArrayToObject(info, "corpus");
    for (int i = 0; i < corpus->n; i++) {
        const InputFile *f = corpus->v[i];
        int64_t use = f->f.n_pairs < cfg->tokenizer_pairs_per_file ? f->f.n_pairs : cfg->tokenizer_pairs_per_file;
        for (int64_t p = 0; p < use; p++) {
            char *s = dm_corpus_sentence(f->f.lines[2 * p], f->f.lines[2 * p + 1]);
            bpe_trainer_add(tr, s);
            free(s);
        }
        cJSON *o = cJSON_CreateObject();
        CHECK_ALLOC(o);
        cJSON_AddStringToObject(o, "file", f->rel);
        cJSON_AddStringToObject(o, "sha256", f->f.sha256);
        cJSON_AddNumberToObject(o, "pairs_used", (double)use);
        cJSON_AddItemToArray(files, o);
    }
    BpeVocab v;
    int rc = bpe_trainer_train(tr, &v, err, errlen);
    bpe_trainer_free(tr);
    if (rc != 0) {
        cJSON_Delete(info);
        return -1;
    }
    if (v.n_dropped > 0)
        log_info("tokenizer: %d rare character(s) left out by character_coverage %g (they encode as <unk>)",
                 v.n_dropped, cfg->character_coverage);
    cJSON *json = bpe_vocab_to_json(&v, info);
    log_info("tokenizer: %d pieces = 3 reserved + %d merges + %d characters, from %lld sentences", v.n_pieces,
             v.n_merges, v.n_chars, (long long)v.n_sentences);
    bpe_vocab_free(&v);
    rc = json_save_file(path, json, err, errlen);
    cJSON_Delete(json);
    return rc;
}
