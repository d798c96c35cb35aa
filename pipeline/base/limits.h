/* Bounds on what a reader of outside bytes will allocate for, checked BEFORE allocating: a file or a header that
 * claims more is refused with one line naming the file, the size and the bound. Each bound is far above anything
 * the pipeline writes (the numbers in parentheses), and far below what would exhaust a machine.
 * (Other bounds live beside their format: safetensors' 100 MiB header (pipeline/base/safetensors.c, the format's own),
 * module-name patterns (pipeline/base/module_regex.h), a tokenizer's 65,536 pieces (datasets/tokenizer.c, uint16 ids);
 * shards and checkpoints are read whole, and every count in their headers must match the file's size.) */
#ifndef PIPELINE_LIMITS_H
#define PIPELINE_LIMITS_H

#include <stdint.h>

/* JSON files, by kind: a cap on the file's bytes and on its values (every number, string, literal, array and object
 * counts one), both checked before parsing. Parsed, a value costs about 80 bytes (a cJSON node and its allocation)
 * and strings are copied, so a file admitted by its kind's limits costs at most about
 *     2 * max_bytes + 80 * max_values
 * (tests/unit/test_json_limits.c measures the worst file of each kind against that). The largest file written of
 * each kind is in parentheses; the limits leave room for the paper's scale. */
typedef enum {
    JSON_KIND_CONFIG,    /* run configs, data.json, seeds.json, tolerances.json (5 KiB, 300 values) */
    JSON_KIND_STATE,     /* a checkpoint's state.json (1.4 KiB, 50 values) */
    JSON_KIND_RECORD,    /* result.json, analysis.json, train_summary.json, spread.json (the paper's result with its
                          * routing counts, about 150 KiB and 15,000 values) */
    JSON_KIND_MANIFEST,  /* fetch and tokenize manifests, the dataset manifest (100 KiB, 3,000 values) */
    JSON_KIND_TOKENIZER, /* tokenizer.json (65,536 pieces, the most ids hold: about 6 MiB, 360,000 values) */
    JSON_KIND_BATCH,     /* bin/inspect's batch: inputs, targets and mask of B x T tokens (64 x 1024: 200,000 values) */
    JSON_KIND_N
} JsonKind;
typedef struct {
    const char *name;    /* for messages: "a run config" */
    uint64_t max_bytes, max_values;
} JsonLimit;
extern const JsonLimit JSON_LIMITS[JSON_KIND_N]; /* pipeline/base/config.c */
/* The largest any JSON kind admits (read_file_limited of a JSON file of unknown kind). */
#define LIMIT_JSON_FILE_BYTES (16ull << 20)
/* A JSON-lines file: predictions.jsonl, metrics.jsonl, eval_curve.jsonl (largest written: predictions of the paper's
 * 10,000 evaluation examples, about 5 MiB; metrics of 100,000 steps logged every 10, about 10 MiB). */
#define LIMIT_JSONL_FILE_BYTES (1ull << 30)
/* A module text file of the dataset, read whole by tokenize and the largest archive member fetch extracts (largest in
 * the official archive: about 200 MiB). */
#define LIMIT_MODULE_TEXT_BYTES (4ull << 30)
/* All regular members of one archive together, as their headers state them before extraction (the official
 * archive, 2.2 GB compressed, holds about 8 GB): the most fetch's --max-extract-bytes may allow (its default and the
 * ratio cap that stops a decompression bomb long before: datasets/archive_extract.h). */
#define LIMIT_ARCHIVE_TOTAL_BYTES (64ull << 30)

#endif
