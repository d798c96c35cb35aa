/* Bounds on what a reader of outside bytes will allocate for, checked BEFORE allocating: a file or a header that
 * claims more is refused with one line naming the file, the size and the bound. Each bound is far above anything
 * the pipeline writes (the numbers in parentheses), and far below what would exhaust a machine.
 * (Other bounds live beside their format: safetensors' 100 MiB header (pipeline/safetensors.c, the format's own),
 * module-name patterns (pipeline/module_regex.h), a tokenizer's 65,536 pieces (datasets/tokenizer.c, uint16 ids);
 * shards and checkpoints are read whole, and every count in their headers must match the file's size.) */
#ifndef PIPELINE_LIMITS_H
#define PIPELINE_LIMITS_H

#include <stdint.h>

/* A JSON file: configs, records, manifests, tokenizer.json, state.json (largest written: a fetch manifest of every
 * module, about 100 KiB; tokenizer.json of 512 pieces, 50 KiB). */
#define LIMIT_JSON_FILE_BYTES (64ull << 20)
/* A JSON-lines file: predictions.jsonl, metrics.jsonl, eval_curve.jsonl (largest written: predictions of the paper's
 * 10,000 evaluation examples, about 5 MiB; metrics of 100,000 steps logged every 10, about 10 MiB). */
#define LIMIT_JSONL_FILE_BYTES (1ull << 30)
/* A module text file of the dataset, read whole by tokenize and the largest archive member fetch extracts (largest in
 * the official archive: about 200 MiB). */
#define LIMIT_MODULE_TEXT_BYTES (4ull << 30)
/* All regular members of one archive together, as their headers state them before extraction (the official
 * archive, 2.2 GB compressed, holds about 8 GB). A decompression bomb stops here, before filling the disk. */
#define LIMIT_ARCHIVE_TOTAL_BYTES (64ull << 30)

#endif
