/* Writing and checking the fetch stage's manifest.json (see fetch_output.h). */
#include "datasets/fetch_output.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

#ifndef CODE_VERSION
#define CODE_VERSION "unknown"
#endif

static cJSON *file_list(const ExtractedFile *files, int n, int with_split) {
    cJSON *arr = cJSON_CreateArray();
    CHECK_ALLOC(arr);
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        CHECK_ALLOC(o);
        if (with_split) cJSON_AddStringToObject(o, "split", files[i].split);
        cJSON_AddStringToObject(o, "file", files[i].file);
        cJSON_AddNumberToObject(o, "pairs", (double)files[i].pairs);
        cJSON_AddNumberToObject(o, "bytes", (double)files[i].bytes);
        cJSON_AddStringToObject(o, "sha256", files[i].sha256);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

int fetch_output_write(const char *path, const FetchRecord *rec, const ExtractResult *r, char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    CHECK_ALLOC(root);
    cJSON_AddStringToObject(root, "schema", "dm-math-raw");
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "source", rec->source);
    cJSON_AddStringToObject(root, "archive_sha256", rec->archive_sha256);
    cJSON_AddNumberToObject(root, "archive_bytes", (double)rec->archive_bytes);
    cJSON_AddStringToObject(root, "filter", rec->filter);
    cJSON_AddNumberToObject(root, "tokenizer_corpus_pairs", (double)rec->tokenizer_corpus_pairs);
    cJSON_AddStringToObject(root, "code_version", CODE_VERSION);
    cJSON_AddItemToObject(root, "files", file_list(r->files, r->n_files, 1));
    cJSON_AddItemToObject(root, "tokenizer_corpus", file_list(r->corpus, r->n_corpus, 0));
    if (rec->corpus_archive_sha256) {
        cJSON *ca = cJSON_AddObjectToObject(root, "tokenizer_corpus_archive");
        CHECK_ALLOC(ca);
        cJSON_AddStringToObject(ca, "source", rec->corpus_source ? rec->corpus_source : "");
        cJSON_AddStringToObject(ca, "sha256", rec->corpus_archive_sha256);
        cJSON_AddNumberToObject(ca, "bytes", (double)rec->corpus_archive_bytes);
    }
    int rc = json_save_file(path, root, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int fetch_output_up_to_date(const char *path, const FetchRecord *rec) {
    char err[512];
    FILE *probe = fopen(path, "rb");
    if (!probe) return 0;
    fclose(probe);
    cJSON *root = json_load_file(path, JSON_KIND_MANIFEST, err, sizeof err);
    if (!root) return 0;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(root, "schema");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "schema_version");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "archive_sha256");
    const cJSON *filter = cJSON_GetObjectItemCaseSensitive(root, "filter");
    const cJSON *pairs = cJSON_GetObjectItemCaseSensitive(root, "tokenizer_corpus_pairs");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    int same = cJSON_IsString(schema) && strcmp(schema->valuestring, "dm-math-raw") == 0 && cJSON_IsNumber(ver) &&
               ver->valuedouble == 1 && cJSON_IsString(sha) && strcmp(sha->valuestring, rec->archive_sha256) == 0 &&
               cJSON_IsString(filter) && strcmp(filter->valuestring, rec->filter) == 0 && cJSON_IsNumber(pairs) &&
               (long)pairs->valuedouble == rec->tokenizer_corpus_pairs && cJSON_IsArray(files) &&
               cJSON_GetArraySize(files) > 0;
    /* The tokenizer corpus's archive: the same bytes as recorded, or none on both sides. */
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(root, "tokenizer_corpus_archive");
    if (rec->corpus_archive_sha256) {
        const cJSON *ca_sha = cJSON_GetObjectItemCaseSensitive(ca, "sha256");
        same = same && cJSON_IsString(ca_sha) && strcmp(ca_sha->valuestring, rec->corpus_archive_sha256) == 0;
    } else {
        same = same && ca == NULL;
    }
    cJSON_Delete(root);
    return same;
}
