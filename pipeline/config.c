/* Strict JSON loading: syntax errors name file, line and column; the JsonReader makes unknown keys, missing
 * required keys and wrong types errors that name the file and the dotted key path. */
#include "pipeline/config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/atomic_file.h"
#include "pipeline/log.h"

cJSON *json_load_file(const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t n = 0;
    if (read_file_all(path, &text, &n, err, errlen) != 0) return NULL;
    if (strlen(text) != n) {
        set_err(err, errlen, "%s: contains a NUL byte (not a JSON text file)", path);
        free(text);
        return NULL;
    }
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithOpts(text, &end, 1 /* trailing garbage is an error */);
    if (!json) {
        /* Locate the failure as line:column for the message. */
        const char *at = end ? end : cJSON_GetErrorPtr();
        if (!at || at < text || at > text + n) at = text + n;
        int line = 1, col = 1;
        for (const char *p = text; p < at; p++) {
            if (*p == '\n') line++, col = 1;
            else col++;
        }
        set_err(err, errlen, "%s:%d:%d: invalid JSON", path, line, col);
        free(text);
        return NULL;
    }
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
    if (r->n_seen < (int)(sizeof r->seen / sizeof r->seen[0])) r->seen[r->n_seen++] = key;
    else record_error(r, key, "too many keys for one JsonReader (internal limit)");
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

int json_reader_finish(JsonReader *r, char *err, size_t errlen) {
    if (!r->error[0] && r->obj && cJSON_IsObject(r->obj)) {
        for (const cJSON *c = r->obj->child; c && !r->error[0]; c = c->next) {
            const char *name = c->string ? c->string : "";
            bool known = false;
            for (int i = 0; i < r->n_seen && !known; i++) known = strcmp(r->seen[i], name) == 0;
            char k[384];
            full_key(r, name, k, sizeof k);
            if (!known) {
                snprintf(r->error, sizeof r->error, "%s: unknown key %s", r->source, k);
                break;
            }
            /* cJSON keeps duplicate keys and returns the first: refuse them rather than ignore one silently. */
            for (const cJSON *d = c->next; d; d = d->next)
                if (d->string && strcmp(d->string, name) == 0) {
                    snprintf(r->error, sizeof r->error, "%s: duplicate key %s", r->source, k);
                    break;
                }
        }
    }
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
    char *text = cJSON_Print(json);
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
