/* The tokenize stage's inputs: the raw directories fetch wrote (RAW/manifest.json, schema "dm-math-raw";
 * RAW/mathematics_dataset-v1.0/<split>/<module>.txt; RAW/tokenizer_corpus/<module>.txt), every file read, validated
 * and checked against the sha256 fetch's manifest lists for it, before the stage writes anything. */
#ifndef DATASETS_RAW_INPUTS_H
#define DATASETS_RAW_INPUTS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "datasets/dm_math_text.h"

#define RAW_DATA_ROOT "mathematics_dataset-v1.0"
#define RAW_CORPUS_DIR "tokenizer_corpus"

typedef struct {
    DmFile f;
    char rel[600];  /* path relative to the raw directory */
    char split[32]; /* "train-easy", ..., or "tokenizer_corpus" */
} InputFile;

typedef struct {
    InputFile **v;
    int n, cap;
} InputList;

/* fetch's manifest: the sha256 of every file it wrote, keyed by the path relative to the raw directory. */
typedef struct {
    cJSON *root;
    char sha256[65]; /* of manifest.json itself */
    int n;
    char **rel;
    const char **sha;
    int *used;       /* the file was read and matched */
    int *is_corpus;  /* entry from "tokenizer_corpus" (else from "files") */
} RawManifest;

/* Reads and validates RAW_DIR/manifest.json (fetch's) as the tokenize stage does, then frees it: 0, or -1 with err.
 * (The fuzz harness tests/fuzz/fuzz_manifests.c reads it through this.) */
int tokenize_check_fetch_manifest(const char *raw_dir, char *err, size_t errlen);

/* The data splits of a raw directory, in the order their files are listed in RawInputs.data (which is the order of
 * the training pool: train-easy, train-medium, train-hard). */
enum { RAW_TRAIN_EASY, RAW_TRAIN_MEDIUM, RAW_TRAIN_HARD, RAW_INTERPOLATE, RAW_EXTRAPOLATE, RAW_N_SPLITS };

/* Everything the stage reads. The tokenizer corpus may come from another raw directory than the data (see
 * TokenizeJob.tokenizer_raw_dir); then that directory's manifest is checked as well. */
typedef struct {
    RawManifest data_manifest;
    RawManifest corpus_manifest_own;     /* only when the corpus comes from another raw directory */
    const RawManifest *corpus_manifest;  /* &data_manifest or &corpus_manifest_own; so a RawInputs is never copied */
    InputList data;                      /* every split's files, split after split, each sorted by file name */
    int split_start[RAW_N_SPLITS + 1];   /* split s is data.v[split_start[s] .. split_start[s + 1]) */
    InputList corpus;                    /* tokenizer corpus files not excluded, sorted by file name */
    int n_excluded;                      /* corpus files excluded by the pattern */
} RawInputs;

/* Loads both manifests, then reads every data split (train-medium and train-hard may be absent) and the tokenizer
 * corpus of corpus_raw_dir (NULL = raw_dir) without the files whose module fully matches exclude_pattern; every file
 * read must be listed in its manifest with the same sha256, and every file the manifests list for this run must
 * exist. 0, or -1 with one line in err naming the file (and line) at fault; in must be freed either way. */
int raw_inputs_load(RawInputs *in, const char *raw_dir, const char *corpus_raw_dir, const char *exclude_pattern,
                    char *err, size_t errlen);
void raw_inputs_free(RawInputs *in);

/* Is the tokenizer corpus from another raw directory than the data? */
static inline int raw_inputs_corpus_separate(const RawInputs *in) {
    return in->corpus_manifest != &in->data_manifest;
}

#endif
