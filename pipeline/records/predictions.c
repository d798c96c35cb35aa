/* predictions.jsonl writers: one compact cJSON object per line, and the sidecar object (see pipeline/records/predictions.h
 * for the schema). */
#include "pipeline/records/predictions.h"

#include <errno.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/exact_number.h"
#include "pipeline/base/log.h"

/* cJSON_Add* return NULL only when out of memory. */
static cJSON *must(cJSON *x) {
    CHECK_ALLOC(x);
    return x;
}

/* Writes obj compactly plus a newline and frees it. */
static int write_object_line(FILE *fp, const char *path, cJSON *obj, char *err, size_t errlen) {
    char *text = json_print_exact(obj, false);
    cJSON_Delete(obj);
    CHECK_ALLOC(text);
    int rc = 0;
    if (fputs(text, fp) == EOF || fputc('\n', fp) == EOF) {
        set_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
        rc = -1;
    }
    cJSON_free(text);
    return rc;
}

cJSON *predictions_meta_to_json(const PredictionsHeader *h, long n_examples, const char *predictions_sha256) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "schema", PREDICTIONS_SCHEMA));
    must(cJSON_AddNumberToObject(o, "schema_version", PREDICTIONS_SCHEMA_VERSION));
    must(cJSON_AddStringToObject(o, "experiment", h->experiment));
    must(cJSON_AddStringToObject(o, "run", h->run));
    must(cJSON_AddStringToObject(o, "code_version", h->code_version));
    must(cJSON_AddStringToObject(o, "backend", h->backend));
    must(cJSON_AddStringToObject(o, "hardware", h->hardware));
    must(cJSON_AddStringToObject(o, "config_sha256", h->config_sha256));
    if (h->prov) run_provenance_to_json(o, h->prov);
    must(cJSON_AddNumberToObject(o, "n_examples", (double)n_examples));
    must(cJSON_AddStringToObject(o, "predictions_sha256", predictions_sha256));
    return o;
}

int predictions_write_line(FILE *fp, const char *path, const PredictionLine *p, char *err, size_t errlen) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "set", p->set));
    must(cJSON_AddNumberToObject(o, "index", (double)p->index));
    must(cJSON_AddStringToObject(o, "module", p->module));
    must(cJSON_AddStringToObject(o, "question", p->question));
    must(cJSON_AddStringToObject(o, "answer", p->answer));
    must(cJSON_AddStringToObject(o, "predicted", p->predicted));
    must(cJSON_AddBoolToObject(o, "correct", p->correct));
    must(cJSON_AddNumberToObject(o, "answer_loss", p->answer_loss));
    /* always present (null where not checked): every line has the same keys */
    if (p->greedy_correct >= 0)
        must(cJSON_AddBoolToObject(o, "greedy_correct", p->greedy_correct != 0));
    else
        must(cJSON_AddNullToObject(o, "greedy_correct"));
    return write_object_line(fp, path, o, err, errlen);
}

int predictions_default_path(const char *result_path, char *out, size_t outlen, char *err, size_t errlen) {
    const char *slash = strrchr(result_path, '/');
    int dir_len = slash ? (int)(slash - result_path) + 1 : 0; /* keeps the slash; "/x.json" gives "/" */
    int n = snprintf(out, outlen, "%.*s%s", dir_len, result_path, PREDICTIONS_FILE_NAME);
    if (n < 0 || (size_t)n >= outlen) {
        set_err(err, errlen, "%s: path too long for %s beside it", result_path, PREDICTIONS_FILE_NAME);
        return -1;
    }
    return 0;
}

int predictions_meta_path(const char *predictions_path, char *out, size_t outlen, char *err, size_t errlen) {
    size_t len = strlen(predictions_path);
    const char *ext = ".jsonl";
    size_t ext_len = strlen(ext);
    const char *base = strrchr(predictions_path, '/');
    base = base ? base + 1 : predictions_path;
    /* "x.jsonl" loses its extension; ".jsonl" alone (a hidden file, no stem) and other names keep theirs */
    int keep = (len >= ext_len && strcmp(predictions_path + len - ext_len, ext) == 0 &&
                strlen(base) > ext_len)
                   ? (int)(len - ext_len)
                   : (int)len;
    int n = snprintf(out, outlen, "%.*s%s", keep, predictions_path, PREDICTIONS_META_SUFFIX);
    if (n < 0 || (size_t)n >= outlen) {
        set_err(err, errlen, "%s: path too long for its %s beside it", predictions_path, PREDICTIONS_META_SUFFIX);
        return -1;
    }
    return 0;
}
