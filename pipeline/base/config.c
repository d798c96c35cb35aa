/* Strict JSON loading: syntax errors name file, line and column; the JsonReader makes unknown keys, missing
 * required keys and wrong types errors that name the file and the dotted key path. */
#include "pipeline/base/config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/exact_number.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"

const JsonLimit JSON_LIMITS[JSON_KIND_N] = {
    [JSON_KIND_CONFIG] = {"a config", 1ull << 20, 50000},
    [JSON_KIND_STATE] = {"a checkpoint state", 1ull << 20, 10000},
    [JSON_KIND_RECORD] = {"a record", 8ull << 20, 500000},
    [JSON_KIND_MANIFEST] = {"a manifest", 8ull << 20, 200000},
    [JSON_KIND_TOKENIZER] = {"a tokenizer", 16ull << 20, 600000},
    [JSON_KIND_BATCH] = {"a batch", 8ull << 20, 1000000},
};

uint64_t json_count_values(const char *text, size_t n) {
    uint64_t values = 1;
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') i++; /* the escaped character cannot end the string */
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == '[' || c == '{') {
            values++;
        }
    }
    return values;
}

/* Line and column (from 1) of offset at in text, for messages. */
static void text_position(const char *text, size_t at, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

/* Whether the 'u' at text[i] ends an escape: the backslashes right before it are odd in number ("\\u0000" is an
 * escaped backslash and the letters u0000). Outside a string a backslash is not JSON at all (the parser refuses it),
 * so in a text that parses, an escape found this way lies inside a string, and no string state is needed: the scan
 * also holds across the lines of a JSON-lines file, whatever an earlier line left open. */
static bool escaped_u(const char *text, size_t i) {
    size_t backslashes = 0;
    while (backslashes < i && text[i - 1 - backslashes] == '\\') backslashes++;
    return backslashes % 2 == 1;
}

int json_check_strings(const char *text, size_t n, const char *source, char *err, size_t errlen) {
    int line, col;
    const char *nul = memchr(text, '\0', n);
    if (nul) {
        text_position(text, (size_t)(nul - text), &line, &col);
        set_err(err, errlen, "%s:%d:%d: contains a NUL byte (not a JSON text file)", source, line, col);
        return -1;
    }
    /* cJSON decodes \u0000 into a NUL that ends the C string early: "dense_qa\u0000evil" would read as "dense_qa". */
    for (const char *p = text; (p = memchr(p, 'u', n - (size_t)(p - text))) != NULL; p++) {
        const size_t i = (size_t)(p - text);
        if (i + 5 <= n && memcmp(p + 1, "0000", 4) == 0 && escaped_u(text, i)) {
            text_position(text, i - 1, &line, &col);
            set_err(err, errlen, "%s:%d:%d: a string holds \\u0000 (a NUL character, which would cut it short): "
                    "refused", source, line, col);
            return -1;
        }
    }
    return 0;
}

int json_check_text(const char *text, size_t n, JsonKind kind, const char *source, char *err, size_t errlen) {
    if ((int)kind < 0 || kind >= JSON_KIND_N) die("json_check_text: bad kind %d", (int)kind);
    const JsonLimit *lim = &JSON_LIMITS[kind];
    if (n > lim->max_bytes) {
        set_err(err, errlen, "%s: %zu bytes, more than the %llu MiB %s may hold", source, n,
                (unsigned long long)(lim->max_bytes >> 20), lim->name);
        return -1;
    }
    if (json_check_strings(text, n, source, err, errlen) != 0) return -1;
    /* Parsed, every value is a node: bound them before the parser allocates (a file of "[0,0,...]" inside the byte
     * limit would otherwise cost 40 times its size). */
    const uint64_t values = json_count_values(text, n);
    if (values > lim->max_values) {
        set_err(err, errlen, "%s: %llu JSON values, more than the %llu %s may hold", source,
                (unsigned long long)values, (unsigned long long)lim->max_values, lim->name);
        return -1;
    }
    return 0;
}

int json_read_text(const char *path, JsonKind kind, char **text_out, size_t *n_out, char *err, size_t errlen) {
    if ((int)kind < 0 || kind >= JSON_KIND_N) die("json_read_text: bad kind %d", (int)kind);
    const JsonLimit *lim = &JSON_LIMITS[kind];
    char *text = NULL;
    size_t n = 0;
    char what[64];
    snprintf(what, sizeof what, "JSON file (%s)", lim->name);
    *text_out = NULL;
    *n_out = 0;
    if (read_file_limited(path, lim->max_bytes, what, &text, &n, err, errlen) != 0) return -1;
    if (json_check_text(text, n, kind, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    *text_out = text;
    *n_out = n;
    return 0;
}

/* The strict parse of a checked text: the whole text one value (trailing garbage is an error), a failure located as
 * "<source>:<line>:<column>: invalid JSON". */
static cJSON *parse_checked(const char *text, size_t n, const char *source, char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithOpts(text, &end, 1 /* trailing garbage is an error */);
    if (!json) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        if (!at || at < text || at > text + n) at = text + n;
        int line, col;
        text_position(text, (size_t)(at - text), &line, &col);
        set_err(err, errlen, "%s:%d:%d: invalid JSON", source, line, col);
    }
    return json;
}

cJSON *json_parse_text(const char *text, size_t n, JsonKind kind, const char *source, char *err, size_t errlen) {
    if (json_check_text(text, n, kind, source, err, errlen) != 0) return NULL;
    return parse_checked(text, n, source, err, errlen);
}

cJSON *json_load_file(const char *path, JsonKind kind, char *err, size_t errlen) {
    char *text = NULL;
    size_t n = 0;
    if (json_read_text(path, kind, &text, &n, err, errlen) != 0) return NULL;
    cJSON *json = parse_checked(text, n, path, err, errlen);
    free(text);
    return json;
}

void json_reader_init(JsonReader *r, const cJSON *obj, const char *source, const char *path) {
    memset(r, 0, sizeof *r);
    r->obj = obj;
    r->source = source ? source : "<json>";
    snprintf(r->path, sizeof r->path, "%s", path ? path : "");
    if (obj && !cJSON_IsObject(obj))
        snprintf(r->error, sizeof r->error, "%s: %s: expected an object", r->source, r->path[0] ? r->path : "(top level)");
}

/* "path.key", or "key" at the top level. */
static void full_key(const JsonReader *r, const char *key, char *out, size_t outlen) {
    if (r->path[0]) snprintf(out, outlen, "%s.%s", r->path, key);
    else snprintf(out, outlen, "%s", key);
}

static void record_error(JsonReader *r, const char *key, const char *problem) {
    if (r->error[0]) return; /* keep the first */
    char k[384];
    full_key(r, key, k, sizeof k);
    snprintf(r->error, sizeof r->error, "%s: %s: %s", r->source, k, problem);
}

const char *json_type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

/* Finds the key (case-sensitively) and marks it as known. Missing required keys record an error. */
static const cJSON *lookup(JsonReader *r, const char *key, bool required) {
    if (r->n_seen < (int)(sizeof r->seen / sizeof r->seen[0])) {
        r->seen[r->n_seen++] = key;
    } else {
        r->overflow = true;
        record_error(r, key, "too many keys for one JsonReader (internal limit)");
    }
    const cJSON *v = (r->obj && cJSON_IsObject(r->obj)) ? cJSON_GetObjectItemCaseSensitive(r->obj, key) : NULL;
    if (!v && required) {
        if (!r->error[0]) {
            char k[384];
            full_key(r, key, k, sizeof k);
            snprintf(r->error, sizeof r->error, "%s: missing required key %s", r->source, k);
        }
    }
    return v;
}

static void wrong_type(JsonReader *r, const char *key, const char *expected, const cJSON *v) {
    char msg[128];
    snprintf(msg, sizeof msg, "expected %s, got %s", expected, json_type_name(v));
    record_error(r, key, msg);
}

bool json_get_int(JsonReader *r, const char *key, long *out, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return false;
    if (!cJSON_IsNumber(v)) {
        wrong_type(r, key, "an integer", v);
        return false;
    }
    double d = v->valuedouble;
    /* Integers beyond 2^53 cannot be represented exactly in a double, so they are refused rather than rounded. */
    if (d != floor(d)) {
        record_error(r, key, "expected an integer, got a fractional number");
        return false;
    }
    if (fabs(d) > 9007199254740992.0) {
        record_error(r, key, "integer out of range");
        return false;
    }
    *out = (long)d;
    return true;
}

bool json_get_double(JsonReader *r, const char *key, double *out, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return false;
    if (!cJSON_IsNumber(v)) {
        wrong_type(r, key, "a number", v);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

bool json_get_bool(JsonReader *r, const char *key, bool *out, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return false;
    if (!cJSON_IsBool(v)) {
        wrong_type(r, key, "a boolean", v);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

bool json_get_string(JsonReader *r, const char *key, const char **out, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return false;
    if (!cJSON_IsString(v) || !v->valuestring) {
        wrong_type(r, key, "a string", v);
        return false;
    }
    *out = v->valuestring;
    return true;
}

bool json_get_string_or_null(JsonReader *r, const char *key, const char **out, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return false;
    if (cJSON_IsNull(v)) {
        *out = NULL;
        return true;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        wrong_type(r, key, "a string or null", v);
        return false;
    }
    *out = v->valuestring;
    return true;
}

const cJSON *json_get_object(JsonReader *r, const char *key, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return NULL;
    if (!cJSON_IsObject(v)) {
        wrong_type(r, key, "an object", v);
        return NULL;
    }
    return v;
}

const cJSON *json_get_array(JsonReader *r, const char *key, bool required) {
    const cJSON *v = lookup(r, key, required);
    if (!v) return NULL;
    if (!cJSON_IsArray(v)) {
        wrong_type(r, key, "an array", v);
        return NULL;
    }
    return v;
}

/* Edit distance with adjacent transpositions (optimal string alignment), case-insensitive; stops early once every
 * entry of a row exceeds limit (returns limit + 1). */
static size_t edit_distance(const char *a, const char *b, size_t limit) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 64 || nb > 64) return limit + 1; /* keys are short; longer names get no suggestion */
    size_t d[65][65];
    for (size_t i = 0; i <= na; i++) d[i][0] = i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t row_min = (size_t)-1;
        for (size_t j = 1; j <= nb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
            if (best < row_min) row_min = best;
        }
        if (row_min > limit) return limit + 1;
    }
    return d[na][nb];
}

/* Whether the initials of long's '_'-separated words (two or more) spell short, case-insensitively. */
static bool is_acronym(const char *shortname, const char *longname) {
    size_t k = 0;
    int words = 0;
    for (const char *p = longname; *p; p++) {
        if (p != longname && p[-1] != '_') continue;
        if (*p == '_') continue;
        if (!shortname[k] || tolower((unsigned char)shortname[k]) != tolower((unsigned char)*p)) return false;
        k++, words++;
    }
    return words >= 2 && shortname[k] == '\0';
}

const char *json_closest_key(const char *name, const char *const *candidates, int n_candidates) {
    const char *best = NULL, *acronym = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < n_candidates; i++) {
        const char *c = candidates[i];
        if (!c || strcmp(c, name) == 0) continue;
        size_t longer = strlen(c) > strlen(name) ? strlen(c) : strlen(name);
        size_t limit = longer / 3; /* at most a third of the characters differ */
        size_t d = edit_distance(name, c, limit);
        if (d <= limit && d < best_d) best = c, best_d = d;
        if (!acronym && (is_acronym(name, c) || is_acronym(c, name))) acronym = c;
    }
    return best ? best : acronym;
}

/* The closest key this reader asked for that the object lacks (a misspelling's intended key is missing), else the
 * closest of all it asked for. */
static const char *suggest_key(const JsonReader *r, const char *name) {
    const char *absent[128];
    int n_absent = 0;
    for (int i = 0; i < r->n_seen; i++)
        if (!cJSON_GetObjectItemCaseSensitive(r->obj, r->seen[i])) absent[n_absent++] = r->seen[i];
    const char *s = json_closest_key(name, absent, n_absent);
    return s ? s : json_closest_key(name, r->seen, r->n_seen);
}

/* An unknown or duplicate key of the object, in object order, into r->error (replacing any recorded error).
 * Returns true if one was found. */
static bool find_structural_error(JsonReader *r) {
    for (const cJSON *c = r->obj->child; c; c = c->next) {
        const char *name = c->string ? c->string : "";
        bool known = false;
        for (int i = 0; i < r->n_seen && !known; i++) known = strcmp(r->seen[i], name) == 0;
        char k[384];
        full_key(r, name, k, sizeof k);
        if (!known) {
            const char *hint = suggest_key(r, name);
            if (hint) {
                char h[384];
                full_key(r, hint, h, sizeof h);
                set_err(r->error, sizeof r->error, "%s: %s: unknown key (did you mean %s?)", r->source, k, h);
            } else {
                snprintf(r->error, sizeof r->error, "%s: %s: unknown key", r->source, k);
            }
            return true;
        }
        /* cJSON keeps duplicate keys and returns the first: refuse them rather than ignore one silently. */
        for (const cJSON *d = c->next; d; d = d->next)
            if (d->string && strcmp(d->string, name) == 0) {
                snprintf(r->error, sizeof r->error, "%s: %s: duplicate key", r->source, k);
                return true;
            }
    }
    return false;
}

int json_reader_finish(JsonReader *r, char *err, size_t errlen) {
    /* Unknown and duplicate keys first: "missing required key train.lr" is only the consequence of
     * "train.learning_rate: unknown key (did you mean train.lr?)". Not after the internal limit (seen[] is
     * incomplete) nor when the value is not an object (init recorded that). */
    if (!r->overflow && r->obj && cJSON_IsObject(r->obj)) find_structural_error(r);
    if (r->error[0]) {
        set_err(err, errlen, "%s", r->error);
        return -1;
    }
    return 0;
}

int json_check_sections(const cJSON *root, const char *source, const char *const *sections, int n_sections, char *err,
                        size_t errlen) {
    JsonReader r;
    json_reader_init(&r, root, source, "");
    for (int i = 0; i < n_sections; i++) json_get_object(&r, sections[i], false);
    return json_reader_finish(&r, err, errlen);
}

/* The text json_save_file writes: pretty-printed with a trailing newline (malloc'd; NULL when out of memory). */
static char *json_file_text(const cJSON *json) {
    char *text = json_print_exact(json, true);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *buf = malloc(n + 2);
    if (buf) {
        memcpy(buf, text, n);
        buf[n] = '\n';
        buf[n + 1] = '\0';
    }
    cJSON_free(text);
    return buf;
}

int json_save_file(const char *path, const cJSON *json, char *err, size_t errlen) {
    char *buf = json_file_text(json);
    if (!buf) {
        set_err(err, errlen, "%s: cannot serialize JSON (out of memory)", path);
        return -1;
    }
    int rc = write_file_atomic(path, buf, strlen(buf), err, errlen);
    free(buf);
    return rc;
}

int json_prepare_file(AtomicFile *af, const char *path, const cJSON *json, char *err, size_t errlen) {
    char *buf = json_file_text(json);
    if (!buf) {
        set_err(err, errlen, "%s: cannot serialize JSON (out of memory)", path);
        return -1;
    }
    int rc = atomic_open(af, path, err, errlen);
    if (rc == 0 && fputs(buf, af->fp) == EOF) {
        set_err(err, errlen, "%s: write failed: %s", af->tmp_path, strerror(errno));
        atomic_abort(af);
        rc = -1;
    }
    free(buf);
    return rc;
}
