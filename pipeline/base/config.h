/* Strict JSON config loading with cJSON: unknown keys and wrong types are errors naming the file and the key path. */
#ifndef PIPELINE_CONFIG_H
#define PIPELINE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"

#include "pipeline/base/limits.h"

/* Reads and parses a JSON file of the given kind, bounded by JSON_LIMITS[kind] (bytes, then values counted by a scan
 * of the text before parsing). On error returns NULL and writes "<path>: <problem>" (with line:column for syntax
 * errors; the limit and the count for a file over its kind's bounds). */
cJSON *json_load_file(const char *path, JsonKind kind, char *err, size_t errlen);

/* The text of a JSON file of the given kind, checked as json_load_file checks it before parsing (json_check_text);
 * for a reader with its own parser. 0, or -1 with err (and *text NULL). The caller frees *text. */
int json_read_text(const char *path, JsonKind kind, char **text, size_t *n, char *err, size_t errlen);

/* What every JSON reader refuses before parsing, because C strings cannot hold it: a NUL byte in the text, and a
 * \u0000 escape in a string (cJSON decodes it into a NUL that silently ends the string: "dense_qa\u0000evil" would
 * read as "dense_qa"). An escaped backslash followed by the letters u0000 ("\\u0000") is not one. The text may be a
 * JSON-lines file (the check holds across lines). 0, or -1 with "<source>:<line>:<column>: ..." in err. */
int json_check_strings(const char *text, size_t n, const char *source, char *err, size_t errlen);

/* json_check_strings plus the bounds of the kind (bytes, then values): the checks json_load_file makes on a file's
 * text, for JSON that arrives another way (a string inside a record or a header). 0, or -1 with err. */
int json_check_text(const char *text, size_t n, JsonKind kind, const char *source, char *err, size_t errlen);

/* json_load_file of a text in memory (text[n] must be its terminating NUL): json_check_text, then a strict parse (the
 * whole text one value; a failure located as "<source>:<line>:<column>: invalid JSON"). NULL with err on error. */
cJSON *json_parse_text(const char *text, size_t n, JsonKind kind, const char *source, char *err, size_t errlen);

/* Values of a JSON text (numbers, strings, literals, arrays, objects; object keys are not values): an upper bound
 * that the parser cannot exceed, counted without allocating (commas and opening brackets outside strings, plus one). */
uint64_t json_count_values(const char *text, size_t n);

/* Strict object reader. Usage:
 *   JsonReader r; json_reader_init(&r, obj, "experiments/tiny.json", "train");
 *   json_get_int(&r, "steps", &steps, true); ...; if (json_reader_finish(&r, err, sizeof err)) -> error
 * Each getter marks the key as known; a missing required key, a wrong type or an out-of-range integer records the
 * first error. json_reader_finish reports a key that no getter asked for ("<source>: train.lerning_rate: unknown key
 * (did you mean train.lr?)", the suggestion being the closest key the reader asked for) or given twice
 * ("<source>: train.steps: duplicate key") IN PREFERENCE to the recorded error: a misspelt key is the cause of the
 * "missing required key" its correct spelling then gets, so it is the error worth reporting. */
typedef struct {
    const cJSON *obj;
    const char *source;   /* file name, for messages */
    char path[256];       /* key path prefix, e.g. "train" */
    const char *seen[128];
    int n_seen;
    char error[512];      /* first error, empty if none */
    bool overflow;        /* more keys asked for than seen[] holds: unknown-key checks would be wrong */
} JsonReader;

void json_reader_init(JsonReader *r, const cJSON *obj, const char *source, const char *path);
bool json_get_int(JsonReader *r, const char *key, long *out, bool required);
bool json_get_double(JsonReader *r, const char *key, double *out, bool required);
bool json_get_bool(JsonReader *r, const char *key, bool *out, bool required);
bool json_get_string(JsonReader *r, const char *key, const char **out, bool required); /* points into obj */
/* Like json_get_string, but a JSON null is accepted and gives *out = NULL (e.g. an unknown checksum). */
bool json_get_string_or_null(JsonReader *r, const char *key, const char **out, bool required);
const cJSON *json_get_object(JsonReader *r, const char *key, bool required);
const cJSON *json_get_array(JsonReader *r, const char *key, bool required);
int json_reader_finish(JsonReader *r, char *err, size_t errlen); /* 0 ok, -1 error (message in err) */

/* The candidate closest to name, for "did you mean" hints: the smallest edit distance (insertions, deletions,
 * substitutions, adjacent transpositions; case-insensitive) when at most a third of the longer name's characters
 * differ, else one whose underscore-separated words' initials spell the other ("learning_rate" -> "lr"); NULL when
 * none is close. Candidates equal to name are ignored. */
const char *json_closest_key(const char *name, const char *const *candidates, int n_candidates);

/* The top level of a file shared by several readers (data.json: fetch and tokenize each read their own section):
 * an object holding only the named sections, each an object, none twice; any of them may be absent (its reader
 * requires it). Returns 0, or -1 with "<source>: unknown key X" / "duplicate key X" / "X: expected an object". */
int json_check_sections(const cJSON *root, const char *source, const char *const *sections, int n_sections, char *err,
                        size_t errlen);

/* "a string", "a number", ...: the JSON type of v, for "expected X, got Y" messages. */
const char *json_type_name(const cJSON *v);

/* Writes JSON atomically (pretty-printed, trailing newline). Returns 0 or -1 with err. */
int json_save_file(const char *path, const cJSON *json, char *err, size_t errlen);
/* The same text written into an uncommitted atomic file, for outputs committed together (atomic_commit_all).
 * Returns 0 (af open: commit or abort it) or -1 with err (nothing left behind). */
int json_prepare_file(AtomicFile *af, const char *path, const cJSON *json, char *err, size_t errlen);

#endif
