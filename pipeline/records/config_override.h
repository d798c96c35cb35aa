/* Run-config overrides from the command line: `--set KEY=VALUE`, repeatable (bin/train, bin/evaluate, bin/analyze).
 *
 *   KEY    a dotted path "section.key" (train.lr, model.d_model, evaluate.max_examples_per_set); deeper paths
 *          ("a.b.c") reach nested objects. The section must exist in the file; the key itself need not (the
 *          strict reader of the section then reports it as unknown, with the closest valid key).
 *   VALUE  parsed as JSON when it is JSON (1e-3, 2, true, "x", [1]), else taken as a string (train.precision=bf16).
 *          null removes the key, so that its default applies (model.entropy_reg=null beside model.balance=switch,
 *          whose config refuses a coefficient that has no effect).
 *
 * Canonical form of one override: KEY=<cJSON_PrintUnformatted(value)> ("train.lr=0.001"); the list is sorted by
 * KEY, so the order of the arguments does not matter. The same KEY twice is an error.
 *
 * config_sha256 of a run: with no override, the sha256 of the file's bytes (what it always was, so recorded
 * baselines stay comparable); with overrides, the sha256 of the file's bytes followed by "\n--set " + canonical
 * override for each override in sorted order. */
#ifndef PIPELINE_CONFIG_OVERRIDE_H
#define PIPELINE_CONFIG_OVERRIDE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "pipeline/records/run_provenance.h"

/* Returned for a malformed --set argument (no '=', a KEY without section or with an empty part, a section the file
 * does not have, the same KEY twice): a usage error, exit status 2. */
#define CONFIG_USAGE_ERROR (-2)

typedef struct {
    char *key;    /* "train.lr" */
    cJSON *value; /* parsed VALUE */
} ConfigOverride;

typedef struct {
    int n;
    ConfigOverride *items; /* sorted by key */
} ConfigOverrides;

/* Parses the "KEY=VALUE" arguments (as given to --set). 0, or CONFIG_USAGE_ERROR with err naming the argument
 * ("--set 'lr=1': KEY must be section.key"). Free with config_overrides_free (also after an error). */
int config_overrides_parse(ConfigOverrides *o, const char *const *args, int n_args, char *err, size_t errlen);
void config_overrides_free(ConfigOverrides *o);

/* Sets each KEY of root (the parsed file; source names it in messages) to its value. 0, or CONFIG_USAGE_ERROR when
 * a section is missing from the file or a path crosses a value that is not an object. */
int config_overrides_apply(const ConfigOverrides *o, cJSON *root, const char *source, char *err, size_t errlen);

/* The canonical list into p->overrides (n_overrides). 0, or CONFIG_USAGE_ERROR when there are more than
 * RUN_MAX_OVERRIDES or one is longer than RUN_OVERRIDE_MAX - 1 bytes. */
int config_overrides_canonical(const ConfigOverrides *o, RunProvenance *p, char *err, size_t errlen);

/* config_sha256 of file bytes with the canonical overrides of p (see above), as 64 hex digits. */
void config_overrides_sha256(const void *bytes, size_t n, const RunProvenance *p, char hex[65]);

/* The effective config of a run config file's text with the canonical overrides of p (p->overrides): the text's
 * JSON with each override applied, and its config_sha256 (above). The one definition of both: the stages compute them
 * from the file (config_load_with_overrides), and the record readers recompute them from the text a result record
 * carries, so that a record's "config" and "config_sha256" cannot be edited apart from each other. source names the
 * text in messages. 0 with *json (the caller frees it) and hex; -1 or CONFIG_USAGE_ERROR with err (*json NULL). */
int config_from_text(const char *text, size_t n, const RunProvenance *p, const char *source, cJSON **json,
                     char hex[65], char *err, size_t errlen);

/* A run config file with overrides applied: the one place that turns (path, --set arguments) into the JSON every
 * stage validates, the config_sha256 train records and evaluate/analyze check, and the provenance fields. */
typedef struct {
    cJSON *json;        /* the file's JSON, overrides applied (owned) */
    char *text;         /* the file's bytes as read, NUL-terminated (owned): hashed, parsed and recorded once */
    size_t text_len;
    char sha256[65];    /* config_sha256 */
    RunProvenance prov; /* overrides and run_config; seed is left -1 (the caller validates train.seed) */
} LoadedConfig;

/* 0; -1 with err (the file cannot be read or is not JSON); CONFIG_USAGE_ERROR with err (a bad --set argument). */
int config_load_with_overrides(LoadedConfig *c, const char *path, const char *const *sets, int n_sets, char *err,
                               size_t errlen);
void loaded_config_free(LoadedConfig *c); /* frees json and text */

#endif
