/* safetensors reader (validates everything before trusting a byte) and atomic writer (sorted, 8-byte padded header). */
#include "pipeline/base/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

#define ST_MAX_HEADER (100u * 1024u * 1024u) /* the format's own limit on the JSON header */

static const char *dtype_name(StDtype d) {
    switch (d) {
    case ST_F32: return "F32";
    case ST_F64: return "F64";
    case ST_BF16: return "BF16";
    case ST_I32: return "I32";
    case ST_I64: return "I64";
    }
    return "?";
}

static size_t dtype_size(StDtype d) {
    switch (d) {
    case ST_F32: return 4;
    case ST_F64: return 8;
    case ST_BF16: return 2;
    case ST_I32: return 4;
    case ST_I64: return 8;
    }
    return 0;
}

static int dtype_parse(const char *s, StDtype *out) {
    static const StDtype all[] = {ST_F32, ST_F64, ST_BF16, ST_I32, ST_I64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return -1;
}

void st_free(StFile *f) {
    if (!f) return;
    free(f->buf);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

typedef struct {
    uint64_t begin, end;
    int index;
} Range;

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : (x->end > y->end);
}

/* Parses one tensor entry of the header into t (data pointer set later). Returns 0 or -1 with err. */
static int parse_tensor(const char *path, const cJSON *e, StTensor *t, Range *r, uint64_t data_size, char *err,
                        size_t errlen) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) {
        set_err(err, errlen, "%s: tensor '%s': entry is not an object", path, name);
        return -1;
    }
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = e->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0 ? &dtype
                             : strcmp(c->string, "shape") == 0 ? &shape
                             : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot) {
            set_err(err, errlen, "%s: tensor '%s': unknown key '%s'", path, name, c->string);
            return -1;
        }
        if (*slot) {
            set_err(err, errlen, "%s: tensor '%s': duplicate key '%s'", path, name, c->string);
            return -1;
        }
        *slot = c;
    }
    if (!dtype || !shape || !offs) {
        set_err(err, errlen, "%s: tensor '%s': missing %s", path, name, !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
        return -1;
    }
    if (!cJSON_IsString(dtype) || dtype_parse(dtype->valuestring, &t->dtype) != 0) {
        set_err(err, errlen, "%s: tensor '%s': unsupported dtype %s (expected F32, F64, BF16, I32 or I64)", path, name,
                cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)");
        return -1;
    }
    if (!cJSON_IsArray(shape)) {
        set_err(err, errlen, "%s: tensor '%s': shape is not an array", path, name);
        return -1;
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > 8) {
        set_err(err, errlen, "%s: tensor '%s': %d dimensions (at most 8 supported)", path, name, ndim);
        return -1;
    }
    t->ndim = ndim;
    uint64_t numel = 1;
    int k = 0;
    for (const cJSON *d = shape->child; d; d = d->next, k++) {
        uint64_t v;
        if (json_uint(d, &v) != 0) {
            set_err(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, k);
            return -1;
        }
        if (v != 0 && numel > UINT64_MAX / 16 / v) {
            set_err(err, errlen, "%s: tensor '%s': shape overflows", path, name);
            return -1;
        }
        numel *= v;
        t->shape[k] = (int64_t)v;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(offs->child, &r->begin) != 0 ||
        json_uint(offs->child->next, &r->end) != 0) {
        set_err(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end] non-negative integers", path, name);
        return -1;
    }
    if (r->begin > r->end || r->end > data_size) {
        set_err(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] out of range (data section is %llu bytes)", path,
                name, (unsigned long long)r->begin, (unsigned long long)r->end, (unsigned long long)data_size);
        return -1;
    }
    uint64_t want = numel * dtype_size(t->dtype);
    if (r->end - r->begin != want) {
        set_err(err, errlen, "%s: tensor '%s': %llu bytes for %s shape with %llu elements (expected %llu)", path, name,
                (unsigned long long)(r->end - r->begin), dtype_name(t->dtype), (unsigned long long)numel,
                (unsigned long long)want);
        return -1;
    }
    t->numel = (size_t)numel;
    return 0;
}

static int parse_metadata(StFile *f, const char *path, const cJSON *m, char *err, size_t errlen) {
    if (!cJSON_IsObject(m)) {
        set_err(err, errlen, "%s: __metadata__ is not an object", path);
        return -1;
    }
    int n = cJSON_GetArraySize(m);
    f->meta_keys = xcalloc((size_t)n + 1, sizeof(char *));
    f->meta_values = xcalloc((size_t)n + 1, sizeof(char *));
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            set_err(err, errlen, "%s: __metadata__.%s is not a string", path, c->string);
            return -1;
        }
        for (int i = 0; i < f->n_meta; i++)
            if (strcmp(f->meta_keys[i], c->string) == 0) {
                set_err(err, errlen, "%s: __metadata__: duplicate key '%s'", path, c->string);
                return -1;
            }
        f->meta_keys[f->n_meta] = xstrdup(c->string);
        f->meta_values[f->n_meta] = xstrdup(c->valuestring);
        f->n_meta++;
    }
    return 0;
}

/* Validates the parsed header against the data section; fills f->tensors. */
static int parse_header(StFile *f, const char *path, const cJSON *h, const uint8_t *data, uint64_t data_size, char *err,
                        size_t errlen) {
    if (!cJSON_IsObject(h)) {
        set_err(err, errlen, "%s: header is not a JSON object", path);
        return -1;
    }
    int n_entries = cJSON_GetArraySize(h);
    f->tensors = xcalloc((size_t)n_entries + 1, sizeof(StTensor));
    Range *ranges = xcalloc((size_t)n_entries + 1, sizeof(Range));
    int rc = -1;
    int seen_meta = 0;
    for (const cJSON *e = h->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) {
                set_err(err, errlen, "%s: duplicate __metadata__", path);
                goto out;
            }
            if (parse_metadata(f, path, e, err, errlen) != 0) goto out;
            continue;
        }
        if (strlen(e->string) == 0 || strlen(e->string) >= sizeof f->tensors[0].name) {
            set_err(err, errlen, "%s: tensor name '%.60s' is empty or longer than %zu bytes", path, e->string,
                    sizeof f->tensors[0].name - 1);
            goto out;
        }
        for (int i = 0; i < f->n_tensors; i++)
            if (strcmp(f->tensors[i].name, e->string) == 0) {
                set_err(err, errlen, "%s: duplicate tensor '%s'", path, e->string);
                goto out;
            }
        StTensor *t = &f->tensors[f->n_tensors];
        snprintf(t->name, sizeof t->name, "%s", e->string);
        if (parse_tensor(path, e, t, &ranges[f->n_tensors], data_size, err, errlen) != 0) goto out;
        ranges[f->n_tensors].index = f->n_tensors;
        t->data = data ? data + ranges[f->n_tensors].begin : NULL; /* NULL: header only (st_read_header) */
        f->n_tensors++;
    }
    /* The format requires the data section to be covered exactly: no overlaps and no holes. */
    qsort(ranges, (size_t)f->n_tensors, sizeof(Range), cmp_range);
    uint64_t pos = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        if (ranges[i].begin < pos) {
            set_err(err, errlen, "%s: tensor '%s' overlaps another tensor's data", path, f->tensors[ranges[i].index].name);
            goto out;
        }
        if (ranges[i].begin > pos) {
            set_err(err, errlen, "%s: hole in the data section at byte %llu (before tensor '%s')", path,
                    (unsigned long long)pos, f->tensors[ranges[i].index].name);
            goto out;
        }
        pos = ranges[i].end;
    }
    if (pos != data_size) {
        set_err(err, errlen, "%s: %llu trailing bytes after the last tensor", path, (unsigned long long)(data_size - pos));
        goto out;
    }
    rc = 0;
out:
    free(ranges);
    return rc;
}

/* Parses and validates the header h_text[hlen] (at byte 8) of a file of file_size bytes. data: the data section in
 * memory, or NULL when only the header was read (the tensors' data pointers are then NULL). */
static int parse_file(StFile *f, const char *path, const char *h_text, uint64_t hlen, uint64_t file_size,
                      const uint8_t *data, char *err, size_t errlen) {
    if (hlen < 2 || h_text[0] != '{') {
        set_err(err, errlen, "%s: header does not start with a JSON object", path);
        return -1;
    }
    /* a NUL in a header string (a NUL byte, or \u0000) would cut a name or a metadata value short: refused first */
    if (json_check_strings(h_text, (size_t)hlen, path, err, errlen) != 0) return -1;
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts(h_text, (size_t)hlen, &end, 0);
    if (!h) {
        set_err(err, errlen, "%s: header is not valid JSON (near byte %ld)", path,
                end ? (long)(end - h_text) + 8 : -1L);
        return -1;
    }
    /* Anything after the JSON value inside the header must be the padding spaces. */
    for (const char *p = end; p < h_text + hlen; p++)
        if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') {
            set_err(err, errlen, "%s: trailing bytes in the header after the JSON object", path);
            cJSON_Delete(h);
            return -1;
        }
    int rc = parse_header(f, path, h, data, file_size - 8 - hlen, err, errlen);
    cJSON_Delete(h);
    return rc;
}

/* The header length of a file of file_size bytes from its first 8 bytes, checked: 0 or -1 with err. */
static int header_length(const char *path, const uint8_t len8[8], uint64_t file_size, uint64_t *hlen, char *err,
                         size_t errlen) {
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = (*hlen << 8) | len8[i]; /* little-endian on every host */
    if (*hlen > ST_MAX_HEADER || *hlen > file_size - 8) {
        set_err(err, errlen, "%s: header length %llu exceeds the file (%llu bytes)", path, (unsigned long long)*hlen,
                (unsigned long long)file_size);
        return -1;
    }
    return 0;
}

int st_read(StFile *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    if (read_file_all(path, &f->buf, &f->size, err, errlen) != 0) return -1;
    if (f->size < 8) {
        set_err(err, errlen, "%s: too short for a safetensors file (%zu bytes)", path, f->size);
        st_free(f);
        return -1;
    }
    const uint8_t *b = (const uint8_t *)f->buf;
    uint64_t hlen;
    int rc = header_length(path, b, f->size, &hlen, err, errlen);
    if (rc == 0) rc = parse_file(f, path, f->buf + 8, hlen, f->size, b + 8 + hlen, err, errlen);
    if (rc != 0) st_free(f);
    return rc;
}

int st_read_header(StFile *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen_regular_read(path, err, errlen);
    if (!fp) return -1;
    int rc = -1;
    struct stat st;
    uint8_t len8[8];
    uint64_t hlen = 0;
    if (fstat(fileno(fp), &st) != 0) {
        set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    const uint64_t file_size = (uint64_t)st.st_size;
    if (file_size < 8 || fread(len8, 1, 8, fp) != 8) {
        set_err(err, errlen, "%s: too short for a safetensors file (%llu bytes)", path, (unsigned long long)file_size);
        goto done;
    }
    if (header_length(path, len8, file_size, &hlen, err, errlen) != 0) goto done;
    /* Only the header is read (its length is bounded by ST_MAX_HEADER and by the file), never the data. */
    f->size = 8 + (size_t)hlen;
    f->buf = xmalloc(f->size + 1);
    memcpy(f->buf, len8, 8);
    if (fread(f->buf + 8, 1, (size_t)hlen, fp) != (size_t)hlen) {
        set_err(err, errlen, "%s: read failed in the header", path);
        goto done;
    }
    f->buf[f->size] = '\0';
    rc = parse_file(f, path, f->buf + 8, hlen, file_size, NULL, err, errlen);
done:
    fclose(fp);
    if (rc != 0) st_free(f);
    return rc;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

/* Element i as double; memcpy because tensor data inside a file need not be aligned. */
static double elem_f64(const StTensor *t, size_t i) {
    const uint8_t *p = t->data + i * dtype_size(t->dtype);
    switch (t->dtype) {
    case ST_F32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case ST_F64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case ST_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t bits = (uint32_t)h << 16; /* bf16 is the top half of an f32 */
        float v;
        memcpy(&v, &bits, 4);
        return v;
    }
    case ST_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case ST_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    }
    return 0.0;
}

int st_check_finite(const StFile *f, const char *path, char *err, size_t errlen) {
    for (int k = 0; k < f->n_tensors; k++) {
        const StTensor *t = &f->tensors[k];
        if (t->dtype != ST_F32 && t->dtype != ST_F64 && t->dtype != ST_BF16) continue;
        for (size_t i = 0; i < t->numel; i++) {
            const double v = elem_f64(t, i);
            if (!isfinite(v)) {
                set_err(err, errlen, "%s: tensor %s: element %zu is %s", path, t->name, i,
                        isnan(v) ? "NaN" : "infinite");
                return -1;
            }
        }
    }
    return 0;
}

void st_to_f32(const StTensor *t, float *out) {
    if (t->dtype == ST_F32) {
        memcpy(out, t->data, t->numel * 4);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) out[i] = (float)elem_f64(t, i);
}

void st_to_f64(const StTensor *t, double *out) {
    if (t->dtype == ST_F64) {
        memcpy(out, t->data, t->numel * 8);
        return;
    }
    for (size_t i = 0; i < t->numel; i++) out[i] = elem_f64(t, i);
}

/* ---------------- writer ---------------- */

void st_writer_init(StWriter *w) { memset(w, 0, sizeof *w); }

void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape, const void *data) {
    if (strlen(name) == 0 || strlen(name) >= sizeof w->t[0].name) die("safetensors: tensor name '%.60s' empty or too long", name);
    if (ndim < 0 || ndim > 8) die("safetensors: tensor '%s': %d dimensions (at most 8)", name, ndim);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->t = xrealloc(w->t, (size_t)w->cap * sizeof *w->t);
    }
    struct StWTensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) die("safetensors: tensor '%s': negative dimension %lld", name, (long long)shape[i]);
        t->shape[i] = shape[i];
        numel *= (size_t)shape[i];
    }
    t->data = data;
    t->bytes = numel * dtype_size(dtype);
}

void st_writer_meta(StWriter *w, const char *key, const char *value) {
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta_keys[i], key) == 0) { /* last value wins */
            free(w->meta_values[i]);
            w->meta_values[i] = xstrdup(value);
            return;
        }
    w->meta_keys = xrealloc(w->meta_keys, (size_t)(w->n_meta + 1) * sizeof(char *));
    w->meta_values = xrealloc(w->meta_values, (size_t)(w->n_meta + 1) * sizeof(char *));
    w->meta_keys[w->n_meta] = xstrdup(key);
    w->meta_values[w->n_meta] = xstrdup(value);
    w->n_meta++;
}

void st_writer_free(StWriter *w) {
    free(w->t);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->meta_keys);
    free(w->meta_values);
    memset(w, 0, sizeof *w);
}

/* Growable string for the header. */
typedef struct {
    char *s;
    size_t n, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1024;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) die("safetensors: header fragment too long");
    buf_put(b, tmp, (size_t)n);
}

/* JSON string literal with the escapes JSON requires. */
static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            buf_put(b, e, 2);
        } else if (*p < 0x20) {
            buf_printf(b, "\\u%04x", *p);
        } else {
            buf_put(b, (const char *)p, 1);
        }
    }
    buf_put(b, "\"", 1);
}

static const StWriter *g_sort_writer;
static int cmp_tensor_index(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    return strcmp(g_sort_writer->t[i].name, g_sort_writer->t[j].name);
}

int st_writer_save(StWriter *w, const char *path, char *err, size_t errlen) {
    int *order = xmalloc((size_t)(w->n + 1) * sizeof(int));
    for (int i = 0; i < w->n; i++) order[i] = i;
    g_sort_writer = w;
    qsort(order, (size_t)w->n, sizeof(int), cmp_tensor_index);
    for (int i = 1; i < w->n; i++)
        if (strcmp(w->t[order[i]].name, w->t[order[i - 1]].name) == 0) {
            set_err(err, errlen, "%s: duplicate tensor name '%s'", path, w->t[order[i]].name);
            free(order);
            return -1;
        }
    Buf h = {0};
    buf_put(&h, "{", 1);
    int first = 1;
    if (w->n_meta > 0) {
        buf_put(&h, "\"__metadata__\":{", 16);
        for (int i = 0; i < w->n_meta; i++) {
            if (i) buf_put(&h, ",", 1);
            buf_json_string(&h, w->meta_keys[i]);
            buf_put(&h, ":", 1);
            buf_json_string(&h, w->meta_values[i]);
        }
        buf_put(&h, "}", 1);
        first = 0;
    }
    uint64_t off = 0;
    for (int k = 0; k < w->n; k++) {
        const struct StWTensor *t = &w->t[order[k]];
        if (strcmp(t->name, "__metadata__") == 0) {
            set_err(err, errlen, "%s: '__metadata__' is not a valid tensor name", path);
            free(order);
            free(h.s);
            return -1;
        }
        if (!first) buf_put(&h, ",", 1);
        first = 0;
        buf_json_string(&h, t->name);
        buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + t->bytes));
        off += t->bytes;
    }
    buf_put(&h, "}", 1);
    while (h.n % 8 != 0) buf_put(&h, " ", 1); /* pad so the data section starts 8-byte aligned */

    AtomicFile af;
    if (atomic_open(&af, path, err, errlen) != 0) {
        free(order);
        free(h.s);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    errno = 0;
    int ok = fwrite(len8, 1, 8, af.fp) == 8 && fwrite(h.s, 1, h.n, af.fp) == h.n;
    for (int k = 0; ok && k < w->n; k++) {
        const struct StWTensor *t = &w->t[order[k]];
        if (t->bytes > 0) ok = fwrite(t->data, 1, t->bytes, af.fp) == t->bytes;
    }
    int write_errno = errno ? errno : EIO; /* e.g. ENOSPC: the one thing the user needs to know */
    free(order);
    free(h.s);
    if (!ok) {
        set_err(err, errlen, "%s: write failed: %s", path, strerror(write_errno));
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, err, errlen);
}
