/* A whole fetch run (fetch_run.h): settings, archives, extraction, manifest, the rename into place. */
#include "datasets/fetch_run.h"

#include <ctype.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "datasets/fetch_config.h"
#include "datasets/fetch_output.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

/* The settings in force, each with where it came from (for the error lines). */
typedef struct {
    const char *source, *filter, *corpus_source;
    long corpus_pairs;
    long max_bytes, max_ratio; /* FETCH_NOT_GIVEN: the extraction's own default cap */
    char source_label[PATH_MAX + 64], corpus_label[PATH_MAX + 64], filter_label[PATH_MAX + 64];
    char bytes_label[PATH_MAX + 64], ratio_label[PATH_MAX + 64];
} FetchSettings;

/* Precedence: an option given on the command line, then the config file, then the built-in default. fc stays loaded
 * (it owns the strings taken from it). */
static int resolve_settings(const FetchRequest *req, FetchConfig *fc, FetchSettings *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->source = req->source;
    s->filter = req->filter;
    s->corpus_source = req->corpus_source;
    s->corpus_pairs = req->corpus_pairs;
    s->max_bytes = req->max_extract_bytes;
    s->max_ratio = req->max_extract_ratio;
    snprintf(s->source_label, sizeof s->source_label, "--source");
    snprintf(s->corpus_label, sizeof s->corpus_label, "--tokenizer-corpus-source");
    snprintf(s->filter_label, sizeof s->filter_label, "--filter");
    snprintf(s->bytes_label, sizeof s->bytes_label, "--max-extract-bytes");
    snprintf(s->ratio_label, sizeof s->ratio_label, "--max-extract-ratio");
    const char *config = req->config;
    if (config) {
        if (fetch_config_load(config, fc, err, errlen) != 0) return -1;
        if (!s->source) {
            s->source = fc->source;
            snprintf(s->source_label, sizeof s->source_label, "%s: fetch.source", config);
        }
        if (!s->filter && fc->filter) {
            s->filter = fc->filter;
            snprintf(s->filter_label, sizeof s->filter_label, "%s: fetch.filter", config);
        }
        if (s->corpus_pairs == FETCH_NOT_GIVEN && fc->has_tokenizer_corpus_pairs)
            s->corpus_pairs = fc->tokenizer_corpus_pairs;
        if (!s->corpus_source && fc->tokenizer_corpus_source) {
            s->corpus_source = fc->tokenizer_corpus_source;
            snprintf(s->corpus_label, sizeof s->corpus_label, "%s: fetch.tokenizer_corpus_source", config);
        }
        if (s->max_bytes == FETCH_NOT_GIVEN && fc->has_max_extract_bytes) {
            s->max_bytes = fc->max_extract_bytes;
            snprintf(s->bytes_label, sizeof s->bytes_label, "%s: fetch.max_extract_bytes", config);
        }
        if (s->max_ratio == FETCH_NOT_GIVEN && fc->has_max_extract_ratio) {
            s->max_ratio = fc->max_extract_ratio;
            snprintf(s->ratio_label, sizeof s->ratio_label, "%s: fetch.max_extract_ratio", config);
        }
    }
    if (!s->source) s->source = FETCH_DEFAULT_SOURCE;
    if (!s->filter) s->filter = FETCH_DEFAULT_FILTER;
    if (s->corpus_pairs == FETCH_NOT_GIVEN) s->corpus_pairs = FETCH_DEFAULT_CORPUS_PAIRS;
    if (s->corpus_source && !s->corpus_source[0]) s->corpus_source = NULL; /* '' on the command line: the main one */
    if (!s->source[0]) return set_err(err, errlen, "--source must not be empty");
    if (s->corpus_source && s->corpus_pairs == 0)
        return set_err(err, errlen, "%s %s: needs tokenizer corpus pairs > 0 (0 means no tokenizer corpus)",
                       s->corpus_label, s->corpus_source);
    if (dm_filter_matches(s->filter, "", err, errlen) < 0) return -1;
    return 0;
}

/* OUT without trailing slashes into out_base (its temporary tree is the sibling OUT.tmp.*, never a child of OUT);
 * before any download, OUT must be a directory or absent (the output tree replaces only a directory). */
static int check_out(const char *out, char *out_base, size_t cap, char *err, size_t errlen) {
    if (!out[0]) return set_err(err, errlen, "--out must not be empty");
    if (snprintf(out_base, cap, "%s", out) >= (int)cap) return set_err(err, errlen, "--out %s: path too long", out);
    for (size_t n = strlen(out_base); n > 1 && out_base[n - 1] == '/'; n--) out_base[n - 1] = '\0';
    struct stat st;
    if (lstat(out, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return set_err(err, errlen, "--out %s: is a symbolic link (the output tree replaces --out as a whole): "
                           "pass the directory it points to", out);
        if (!S_ISDIR(st.st_mode)) return set_err(err, errlen, "--out %s: exists and is not a directory", out);
    }
    return 0;
}

/* Removes OUT.tmp.<pid>[.<random>] trees left by fetch processes that no longer exist (killed mid-extraction). */
static void remove_stale_fetch_temps(const char *out_base) {
    char dir[PATH_MAX], base[PATH_MAX], prefix[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s", out_base);
    snprintf(base, sizeof base, "%s", out_base);
    snprintf(prefix, sizeof prefix, "%s.tmp.", basename(base));
    int n = remove_stale_temps(dirname(dir), prefix);
    if (n > 0) log_info("removed %d stale temporary tree(s) %s<pid> of killed fetch runs", n, prefix);
}

/* The dataset manifest is needed for 'official' and 'embedded' (either archive), or when named explicitly. */
static int source_needs_manifest(const char *s) { return strcmp(s, "official") == 0 || strcmp(s, "embedded") == 0; }

static int load_dataset_manifest(const FetchRequest *req, const FetchSettings *s, DatasetManifest *dm, int *have_dm,
                                 char *err, size_t errlen) {
    memset(dm, 0, sizeof *dm);
    *have_dm = 0;
    if (!(source_needs_manifest(s->source) || (s->corpus_source && source_needs_manifest(s->corpus_source)) ||
          req->manifest))
        return 0;
    char mpath[PATH_MAX];
    if (req->manifest) snprintf(mpath, sizeof mpath, "%s", req->manifest);
    else if (fetch_find_project_file(FETCH_DEFAULT_MANIFEST, mpath, sizeof mpath) != 0)
        return set_err(err, errlen, "cannot find %s (run from the project root or pass --manifest)",
                       FETCH_DEFAULT_MANIFEST);
    if (dataset_manifest_load(mpath, dm, err, errlen) != 0) return -1;
    *have_dm = 1;
    return 0;
}

/* Extracts the module files (and the corpus, unless it comes from the other archive) into a new temporary tree,
 * writes the manifest there and renames the tree to OUT. */
static int extract_into_place(const FetchRequest *req, const FetchSettings *s, const char *out_base,
                              const FetchRecord *rec, const FetchArchive *main_ar, const FetchArchive *corpus_ar,
                              char *err, size_t errlen) {
    /* A new OUT.tmp.<pid>.<random> (a name nobody can plant a link at beforehand: OUT's parent may be shared),
     * renamed into place once at the end. */
    char tmp[PATH_MAX + 64];
    if (mkdir_temp(out_base, tmp, sizeof tmp, err, errlen) != 0) return -1;
    const int64_t max_bytes = s->max_bytes == FETCH_NOT_GIVEN ? 0 : s->max_bytes; /* 0: the default cap */
    const long max_ratio = s->max_ratio == FETCH_NOT_GIVEN ? 0 : s->max_ratio;
    ExtractOptions xo = {main_ar->path, tmp, s->filter, s->corpus_source ? 0 : s->corpus_pairs, main_ar->bytes,
                         max_bytes, max_ratio, s->bytes_label, s->ratio_label};
    ExtractResult xr, cr;
    memset(&xr, 0, sizeof xr);
    memset(&cr, 0, sizeof cr);
    int rc = -1;
    if (fetch_archive_extract(&xo, tmp, main_ar, &xr, err, errlen) != 0) goto done;
    if (xr.n_files == 0) {
        remove_tree(tmp);
        set_err(err, errlen, "%s '%s' matched no module file in %s", s->filter_label, s->filter, main_ar->path);
        goto done;
    }
    ExtractResult all = xr; /* what the manifest lists: module files from xr, the corpus from xr or cr */
    if (s->corpus_source) {
        ExtractOptions co = {corpus_ar->path, tmp, NULL /* no module files */, s->corpus_pairs, corpus_ar->bytes,
                             max_bytes, max_ratio, s->bytes_label, s->ratio_label};
        if (fetch_archive_extract(&co, tmp, corpus_ar, &cr, err, errlen) != 0) goto done;
        if (cr.n_corpus == 0) {
            remove_tree(tmp);
            set_err(err, errlen, "%s %s: no train-easy module file in %s for the tokenizer corpus", s->corpus_label,
                 s->corpus_source, corpus_ar->path);
            goto done;
        }
        all.corpus = cr.corpus;
        all.n_corpus = cr.n_corpus;
    }
    char tmp_manifest[PATH_MAX + 128];
    snprintf(tmp_manifest, sizeof tmp_manifest, "%s/manifest.json", tmp);
    if (fetch_output_write(tmp_manifest, rec, &all, err, errlen) != 0 ||
        rename_dir_atomic(tmp, req->out, err, errlen) != 0) {
        remove_tree(tmp);
        goto done;
    }
    int64_t pairs = 0;
    for (int i = 0; i < all.n_files; i++) pairs += all.files[i].pairs;
    printf("fetch: wrote %s: %d files (%" PRId64 " pairs) matching '%s', %d tokenizer-corpus files%s%s\n", req->out,
           all.n_files, pairs, s->filter, all.n_corpus, s->corpus_source ? " from " : "",
           s->corpus_source ? s->corpus_source : "");
    rc = 0;
done:
    dm_extract_result_free(&xr);
    dm_extract_result_free(&cr);
    return rc;
}

int fetch_run(const FetchRequest *req, char *err, size_t errlen) {
    char out_base[PATH_MAX];
    if (check_out(req->out, out_base, sizeof out_base, err, errlen) != 0) return -1;
    FetchConfig fc;
    memset(&fc, 0, sizeof fc);
    FetchSettings s;
    DatasetManifest dm;
    int have_dm = 0, rc = -1;
    char pinned[65] = "";
    if (resolve_settings(req, &fc, &s, err, errlen) != 0) goto done;
    if (req->pin) {
        if (!is_sha256_hex(req->pin)) {
            set_err(err, errlen, "--sha256: expected 64 hex digits, got '%s'", req->pin);
            goto done;
        }
        for (int i = 0; i < 64; i++) pinned[i] = (char)tolower((unsigned char)req->pin[i]);
    }
    if (load_dataset_manifest(req, &s, &dm, &have_dm, err, errlen) != 0) goto done;

    FetchArchive main_ar, corpus_ar;
    memset(&corpus_ar, 0, sizeof corpus_ar);
    if (fetch_archive_obtain(s.source_label, s.source, pinned[0] ? pinned : NULL, &dm, &req->net, &main_ar, err,
                             errlen) != 0)
        goto done;
    if (s.corpus_source) {
        if (fetch_archive_obtain(s.corpus_label, s.corpus_source, NULL, &dm, &req->net, &corpus_ar, err, errlen) != 0)
            goto done;
        /* Two different URLs with the same file name would share one download: refuse rather than mix them up. */
        if (main_ar.url && corpus_ar.url && strcmp(main_ar.url, corpus_ar.url) != 0 &&
            strcmp(main_ar.path, corpus_ar.path) == 0) {
            set_err(err, errlen, "%s and %s both download to %s: use a local copy of one of them", main_ar.url,
                 corpus_ar.url, main_ar.path);
            goto done;
        }
    }

    FetchRecord rec = {s.source, main_ar.sha256, main_ar.bytes, s.filter, s.corpus_pairs, s.corpus_source,
                       s.corpus_source ? corpus_ar.sha256 : NULL, s.corpus_source ? corpus_ar.bytes : 0};
    char manifest_path[PATH_MAX + 64];
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", req->out);
    /* Before the up-to-date check, which ends the run early: a tree of a killed extraction (gigabytes with the
     * official archive) must not outlive it just because the next run had nothing to do. */
    remove_stale_fetch_temps(out_base);
    if (fetch_output_up_to_date(manifest_path, &rec)) {
        printf("fetch: %s is up to date (archive %.12s, filter %s", req->out, main_ar.sha256, s.filter);
        if (s.corpus_source) printf(", tokenizer corpus from archive %.12s", corpus_ar.sha256);
        printf(")\n");
        rc = 0;
        goto done;
    }
    rc = extract_into_place(req, &s, out_base, &rec, &main_ar, &corpus_ar, err, errlen);
done:
    if (have_dm) dataset_manifest_free(&dm);
    fetch_config_free(&fc);
    return rc;
}
