/* The dataset manifest (datasets/dm_math_v1.0.json): where the official archive lives, its size and checksum (null
 * when none is published), the module lists, and the embedded sample's checksum. Loaded strictly (unknown keys and
 * wrong types are errors naming the file and key). */
#ifndef DATASETS_FETCH_DATASET_MANIFEST_H
#define DATASETS_FETCH_DATASET_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct {
    cJSON *root;                   /* owns every string below */
    const char *url;
    int64_t size;                  /* bytes of the official archive */
    const char *sha256;            /* NULL when no checksum is published */
    const char *archive_root;      /* "mathematics_dataset-v1.0" */
    const char *paper_filter;      /* "arithmetic__.*" */
    const cJSON *train_modules;    /* {"area": ["area__module", ...]} */
    const cJSON *extrapolate_modules, *arithmetic_modules, *arithmetic_extrapolate_modules; /* arrays of names */
    int n_train_modules;
    const char *embedded_path;     /* relative to the project root */
    const char *embedded_sha256;
    int64_t embedded_size;
} DatasetManifest;

int dataset_manifest_load(const char *path, DatasetManifest *m, char *err, size_t errlen);
void dataset_manifest_free(DatasetManifest *m);
/* 1 if s is 64 lowercase or uppercase hex digits. */
int is_sha256_hex(const char *s);

#endif
