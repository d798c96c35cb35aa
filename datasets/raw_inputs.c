/* The tokenize stage's inputs (see raw_inputs.h): fetch's manifests and the files they list. */
#include "datasets/raw_inputs.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/module_regex.h"
#include "pipeline/base/sha256.h"

#define RAW_SCHEMA "dm-math-raw"

/* ---- file lists ---- */

static void list_push(InputList *l, InputFile *f) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = f;
}

static void list_free(InputList *l) {
    for (int i = 0; i < l->n; i++) {
        dm_file_free(&l->v[i]->f);
        free(l->v[i]);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- fetch's manifest ---- */

static void raw_manifest_free(RawManifest *m) {
    for (int i = 0; i < m->n; i++) free(m->rel[i]);
    free(m->rel);
    free(m->sha);
    free(m->used);
    free(m->is_corpus);
    cJSON_Delete(m->root);
    memset(m, 0, sizeof *m);
}

static int raw_manifest_add(RawManifest *m, const char *path, const cJSON *arr, const char *what, int with_split,
                            char *err, size_t errlen) {
    if (!cJSON_IsArray(arr)) {
        set_err(err, errlen, "%s: \"%s\" must be an array", path, what);
        return -1;
    }
    int n = cJSON_GetArraySize(arr), i = 0;
    m->rel = xrealloc(m->rel, (size_t)(m->n + n) * sizeof *m->rel);
    m->sha = xrealloc(m->sha, (size_t)(m->n + n) * sizeof *m->sha);
    m->used = xrealloc(m->used, (size_t)(m->n + n) * sizeof *m->used);
    m->is_corpus = xrealloc(m->is_corpus, (size_t)(m->n + n) * sizeof *m->is_corpus);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(e, "split");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(e, "sha256");
        if ((with_split && !cJSON_IsString(split)) || !cJSON_IsString(file) || !cJSON_IsString(sha) ||
            strlen(sha->valuestring) != 64) {
            set_err(err, errlen, "%s: %s[%d] needs %s\"file\" and \"sha256\" strings", path, what, i,
                    with_split ? "\"split\", " : "");
            return -1;
        }
        size_t len = strlen(file->valuestring) + 64 + (with_split ? strlen(split->valuestring) : 0);
        char *rel = xmalloc(len);
        if (with_split) snprintf(rel, len, "%s/%s/%s", RAW_DATA_ROOT, split->valuestring, file->valuestring);
        else snprintf(rel, len, "%s/%s", RAW_CORPUS_DIR, file->valuestring);
        m->rel[m->n] = rel;
        m->sha[m->n] = sha->valuestring;
        m->used[m->n] = 0;
        m->is_corpus[m->n] = !with_split;
        m->n++;
        i++;
    }
    return 0;
}

static int raw_manifest_load(RawManifest *m, const char *raw_dir, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", raw_dir);
    if (!file_exists(path)) {
        set_err(err, errlen, "%s: missing (the raw directory must come from the fetch stage)", path);
        return -1;
    }
    m->root = json_load_file(path, JSON_KIND_MANIFEST, err, errlen);
    if (!m->root) return -1;
    if (sha256_file_hex(path, m->sha256, err, errlen) != 0) return -1;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(m->root, "schema");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m->root, "schema_version");
    if (!cJSON_IsString(schema) || strcmp(schema->valuestring, RAW_SCHEMA) != 0 || !cJSON_IsNumber(ver) ||
        ver->valuedouble != 1) {
        set_err(err, errlen, "%s: not a \"%s\" version 1 manifest", path, RAW_SCHEMA);
        return -1;
    }
    if (raw_manifest_add(m, path, cJSON_GetObjectItemCaseSensitive(m->root, "files"), "files", 1, err, errlen) ||
        raw_manifest_add(m, path, cJSON_GetObjectItemCaseSensitive(m->root, "tokenizer_corpus"), "tokenizer_corpus",
                         0, err, errlen))
        return -1;
    return 0;
}

int tokenize_check_fetch_manifest(const char *raw_dir, char *err, size_t errlen) {
    RawManifest m;
    int rc = raw_manifest_load(&m, raw_dir, err, errlen);
    raw_manifest_free(&m);
    return rc;
}

/* The file must be listed in fetch's manifest with the same sha256: a file edited after fetch would otherwise be
 * tokenized under the provenance of the original. */
static int raw_manifest_check(RawManifest *m, const char *raw_dir, const InputFile *f, char *err, size_t errlen) {
    for (int i = 0; i < m->n; i++) {
        if (strcmp(m->rel[i], f->rel) != 0) continue;
        if (strcmp(m->sha[i], f->f.sha256) != 0) {
            set_err(err, errlen, "%s: sha256 %s differs from %s/manifest.json (%s): modified after fetch?", f->f.path,
                    f->f.sha256, raw_dir, m->sha[i]);
            return -1;
        }
        m->used[i] = 1;
        return 0;
    }
    set_err(err, errlen, "%s: not listed in %s/manifest.json", f->f.path, raw_dir);
    return -1;
}

/* Which entries of a manifest must exist without having been read. */
typedef enum { LISTED_DATA, LISTED_CORPUS, LISTED_ALL } ListedKind;

/* Every file of the given kind the manifest lists must exist (a deleted file would otherwise silently shrink a
 * pool); the ones read are known to. Corpus files excluded by the pattern are not read, but they must exist too. */
static int raw_manifest_check_listed_exist(const RawManifest *m, const char *dir, ListedKind kind, char *err,
                                           size_t errlen) {
    char path[4400];
    for (int i = 0; i < m->n; i++) {
        if (m->used[i] || (kind == LISTED_DATA && m->is_corpus[i]) || (kind == LISTED_CORPUS && !m->is_corpus[i]))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, m->rel[i]);
        if (!file_exists(path)) {
            set_err(err, errlen, "%s: listed in %s/manifest.json but missing", path, dir);
            return -1;
        }
    }
    return 0;
}

/* ---- reading the files ---- */

/* Reads and validates every *.txt of raw/<sub>; a missing directory is an error only when required. */
static int read_dir(const char *raw_dir, const char *sub, const char *split, int required, const regex_t *exclude,
                    RawManifest *m, InputList *out, int *n_excluded, char *err, size_t errlen) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", raw_dir, sub);
    if (!is_dir(dir, FOLLOW_LINKS)) {
        if (!required) {
            log_warn("%s: no such split directory; skipped", dir);
            return 0;
        }
        set_err(err, errlen, "%s: missing split directory", dir);
        return -1;
    }
    char **names = NULL;
    int n = dm_list_txt(dir, &names, err, errlen);
    if (n < 0) return -1;
    int kept = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (exclude) {
            char stem[512];
            snprintf(stem, sizeof stem, "%.*s", (int)(strlen(names[i]) - 4), names[i]);
            if (regexec(exclude, stem, 0, NULL, 0) == 0) {
                (*n_excluded)++;
                continue;
            }
        }
        InputFile *f = xcalloc(1, sizeof *f);
        char path[4800];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(f->rel, sizeof f->rel, "%s/%s", sub, names[i]);
        snprintf(f->split, sizeof f->split, "%s", split);
        if (dm_file_read(&f->f, path, err, errlen) != 0 || raw_manifest_check(m, raw_dir, f, err, errlen) != 0) {
            dm_file_free(&f->f);
            free(f);
            rc = -1;
            break;
        }
        list_push(out, f);
        kept++;
    }
    dm_free_names(names, n);
    if (rc == 0 && kept == 0 && required) {
        set_err(err, errlen, "%s: no usable .txt files", dir);
        rc = -1;
    }
    return rc;
}

int raw_inputs_load(RawInputs *in, const char *raw_dir, const char *corpus_raw_dir, const char *exclude_pattern,
                    char *err, size_t errlen) {
    static const char *const DATA_SPLITS[RAW_N_SPLITS] = {"train-easy", "train-medium", "train-hard", "interpolate",
                                                          "extrapolate"};
    /* train-medium and train-hard may be missing: a raw directory of train-easy alone still makes a training pool. */
    static const int REQUIRED[RAW_N_SPLITS] = {1, 0, 0, 1, 1};
    memset(in, 0, sizeof *in);
    in->corpus_manifest = &in->data_manifest;
    if (!corpus_raw_dir) corpus_raw_dir = raw_dir;
    if (raw_manifest_load(&in->data_manifest, raw_dir, err, errlen) != 0) return -1;
    RawManifest *corpus_manifest = &in->data_manifest;
    if (strcmp(corpus_raw_dir, raw_dir) != 0) {
        corpus_manifest = &in->corpus_manifest_own;
        in->corpus_manifest = corpus_manifest;
        if (raw_manifest_load(corpus_manifest, corpus_raw_dir, err, errlen) != 0) return -1;
    }
    regex_t exclude;
    char rerr[400];
    if (module_regex_compile(&exclude, exclude_pattern, "regular expression", rerr, sizeof rerr) != 0) {
        set_err(err, errlen, "exclude_tokenizer_pattern: %s", rerr);
        return -1;
    }
    int rc = -1;
    for (int s = 0; s < RAW_N_SPLITS; s++) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s/%s", RAW_DATA_ROOT, DATA_SPLITS[s]);
        in->split_start[s] = in->data.n;
        if (read_dir(raw_dir, sub, DATA_SPLITS[s], REQUIRED[s], NULL, &in->data_manifest, &in->data, &in->n_excluded,
                     err, errlen))
            goto done;
    }
    in->split_start[RAW_N_SPLITS] = in->data.n;
    if (read_dir(corpus_raw_dir, RAW_CORPUS_DIR, RAW_CORPUS_DIR, 1, &exclude, corpus_manifest, &in->corpus,
                 &in->n_excluded, err, errlen))
        goto done;
    if (raw_inputs_corpus_separate(in)) {
        /* The data directory's own corpus is not drawn from, so its absence is no error. */
        if (raw_manifest_check_listed_exist(&in->data_manifest, raw_dir, LISTED_DATA, err, errlen) != 0 ||
            raw_manifest_check_listed_exist(corpus_manifest, corpus_raw_dir, LISTED_CORPUS, err, errlen) != 0)
            goto done;
    } else if (raw_manifest_check_listed_exist(&in->data_manifest, raw_dir, LISTED_ALL, err, errlen) != 0) {
        goto done;
    }
    rc = 0;
done:
    regfree(&exclude);
    return rc;
}

void raw_inputs_free(RawInputs *in) {
    list_free(&in->data);
    list_free(&in->corpus);
    raw_manifest_free(&in->data_manifest);
    raw_manifest_free(&in->corpus_manifest_own);
    in->corpus_manifest = &in->data_manifest;
}
