/* fetch: obtain the DeepMind Mathematics archive (official URL, any http(s)/file URL, a local path, or the embedded
 * sample), verify it, and extract the selected module files plus the tokenizer corpus into --out, atomically. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/archive_extract.h"
#include "datasets/download_http.h"
#include "datasets/fetch_dataset_manifest.h"
#include "datasets/fetch_output.h"
#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/log.h"
#include "pipeline/progress.h"
#include "pipeline/sha256.h"

#define DEFAULT_MANIFEST "datasets/dm_math_v1.0.json"

static const char *SUMMARY =
    "Fetches the DeepMind Mathematics v1.0 archive and extracts the module files whose name (without .txt) fully\n"
    "matches --filter into OUT/mathematics_dataset-v1.0/<split>/, plus the first --tokenizer-corpus-pairs pairs of\n"
    "EVERY train-easy file into OUT/tokenizer_corpus/, and writes OUT/manifest.json. The tree is built in\n"
    "OUT.tmp.<pid> and renamed into place only on success.\n"
    "SRC: 'official' (URL and size from the manifest), 'embedded' (datasets/dm_math_sample.tar.gz), an http(s)://\n"
    "or file:// URL, or a local archive path. Downloads go to DOWNLOADS/<name>.part and resume on a rerun.";

/* Finds a project file given relative to the project root: first from the working directory, then next to the
 * executable (bin/../<rel>). Returns 0 and the path in out, or -1. */
static int find_project_file(const char *rel, char *out, size_t outlen) {
    if (access(rel, R_OK) == 0) {
        snprintf(out, outlen, "%s", rel);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    char *dir = dirname(exe);
    snprintf(out, outlen, "%s/../%s", dir, rel);
    return access(out, R_OK) == 0 ? 0 : -1;
}

/* file://[localhost]/path with %XX escapes -> /path. Returns 0 or -1 with err. */
static int file_url_to_path(const char *url, char *out, size_t outlen, char *err, size_t errlen) {
    const char *p = url + strlen("file://");
    if (strncmp(p, "localhost/", 10) == 0) p += 9;
    if (*p != '/') {
        snprintf(err, errlen, "%s: only local file:// URLs (file:///path) are supported", url);
        return -1;
    }
    size_t k = 0;
    for (; *p && k + 1 < outlen; p++) {
        if (*p == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) {
            char hex[3] = {p[1], p[2], 0};
            out[k++] = (char)strtol(hex, NULL, 16);
            p += 2;
        } else if (*p == '?' || *p == '#') {
            break;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
    return 0;
}

/* Local file name for a downloaded URL: its last path component with anything unusual replaced. */
static void download_name(const char *url, char *out, size_t outlen) {
    const char *start = strstr(url, "://");
    start = start ? start + 3 : url;
    const char *end = start + strcspn(start, "?#");
    const char *slash = NULL;
    for (const char *p = start; p < end; p++)
        if (*p == '/') slash = p;
    const char *base = slash ? slash + 1 : end;
    size_t k = 0;
    for (const char *p = base; p < end && k + 1 < outlen; p++)
        out[k++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
    out[k] = '\0';
    if (k == 0 || out[0] == '.') snprintf(out, outlen, "download.tar.gz");
}

static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* SHA-256 of a file with a progress bar (the official archive takes a while). */
static int hash_archive(const char *path, char hex[65], int64_t *bytes, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    Progress prog;
    progress_start(&prog, "sha256", file_size(path), "B");
    Sha256 *s = sha256_new();
    static unsigned char buf[1 << 20];
    int64_t total = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
        sha256_update(s, buf, got);
        total += (int64_t)got;
        progress_update(&prog, total, NULL);
    }
    int bad = ferror(fp);
    fclose(fp);
    sha256_final_hex(s, hex);
    if (bad) {
        snprintf(err, errlen, "%s: read failed", path);
        return -1;
    }
    progress_finish(&prog);
    *bytes = total;
    return 0;
}

/* Removes OUT.tmp.<pid> trees left by fetch processes that no longer exist (killed mid-extraction). */
static void remove_stale_temps(const char *out_dir) {
    char dir[PATH_MAX], base[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out_dir);
    snprintf(base, sizeof base, "%s", out_dir);
    char *d = dirname(dir), *b = basename(base);
    DIR *dp = opendir(d);
    if (!dp) return;
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s.tmp.", b);
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char *end = NULL;
        long pid = strtol(e->d_name + strlen(prefix), &end, 10);
        if (!end || *end != '\0' || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running (or not ours to judge) */
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", d, e->d_name);
        log_info("removing stale temporary tree %s", path);
        remove_tree(path);
    }
    closedir(dp);
}

static void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

int main(int argc, char **argv) {
    log_set_program("fetch");
    const char *source = "official", *out = NULL, *filter = "arithmetic__.*", *pin = NULL;
    const char *manifest_opt = NULL, *downloads = "data/downloads";
    long corpus_pairs = 10000, retries = 5, connect_timeout = 30, low_speed_time = 60;
    const CliOption opts[] = {
        {"source", OPT_STRING, &source, "official | embedded | http(s):// or file:// URL | archive path (default official)", false},
        {"out", OPT_STRING, &out, "output directory, e.g. data/tiny/raw", true},
        {"filter", OPT_STRING, &filter, "POSIX ERE, full match on the module file name (default arithmetic__.*)", false},
        {"sha256", OPT_STRING, &pin, "expected SHA-256 of the archive (default: the manifest's, if any)", false},
        {"manifest", OPT_STRING, &manifest_opt, "dataset manifest (default " DEFAULT_MANIFEST ")", false},
        {"downloads", OPT_STRING, &downloads, "download directory (default data/downloads)", false},
        {"tokenizer-corpus-pairs", OPT_INT, &corpus_pairs, "pairs per train-easy file for the tokenizer corpus (default 10000)", false},
        {"retries", OPT_INT, &retries, "download retries after the first attempt (default 5)", false},
        {"connect-timeout", OPT_INT, &connect_timeout, "connect timeout in seconds (default 30)", false},
        {"low-speed-time", OPT_INT, &low_speed_time, "abort an attempt below 1 KiB/s for this many seconds (default 60)", false},
    };
    cli_parse(argc, argv, "fetch", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (corpus_pairs < 0) die("--tokenizer-corpus-pairs must be >= 0, got %ld", corpus_pairs);
    if (retries < 0 || retries > 100) die("--retries must be in [0, 100], got %ld", retries);
    if (connect_timeout <= 0 || low_speed_time <= 0) die("--connect-timeout and --low-speed-time must be positive");
    if (!out[0]) die("--out must not be empty");
    char err[8192];
    if (dm_filter_matches(filter, "", err, sizeof err) < 0) die("%s", err);

    char pinned[65] = "";
    if (pin) {
        if (!is_sha256_hex(pin)) die("--sha256: expected 64 hex digits, got '%s'", pin);
        snprintf(pinned, sizeof pinned, "%s", pin);
        lower(pinned);
    }

    /* The dataset manifest is needed for 'official' and 'embedded', or when named explicitly. */
    int is_official = strcmp(source, "official") == 0, is_embedded = strcmp(source, "embedded") == 0;
    DatasetManifest dm;
    int have_dm = 0;
    if (is_official || is_embedded || manifest_opt) {
        char mpath[PATH_MAX];
        if (manifest_opt) snprintf(mpath, sizeof mpath, "%s", manifest_opt);
        else if (find_project_file(DEFAULT_MANIFEST, mpath, sizeof mpath) != 0)
            die("cannot find %s (run from the project root or pass --manifest)", DEFAULT_MANIFEST);
        if (dataset_manifest_load(mpath, &dm, err, sizeof err) != 0) die("%s", err);
        have_dm = 1;
    }

    char archive[PATH_MAX + 512];
    const char *url = NULL;
    int64_t expected_size = -1;
    char url_path[PATH_MAX];
    if (is_official) {
        url = dm.url;
        expected_size = dm.size;
        if (!pinned[0] && dm.sha256) {
            snprintf(pinned, sizeof pinned, "%s", dm.sha256);
            lower(pinned);
        }
    } else if (is_embedded) {
        if (find_project_file(dm.embedded_path, archive, sizeof archive) != 0)
            die("embedded sample %s not found (looked in the working directory and next to the executable)",
                dm.embedded_path);
        expected_size = dm.embedded_size;
        if (!pinned[0]) {
            snprintf(pinned, sizeof pinned, "%s", dm.embedded_sha256);
            lower(pinned);
        }
    } else if (strncmp(source, "http://", 7) == 0 || strncmp(source, "https://", 8) == 0) {
        url = source;
    } else if (strncmp(source, "file://", 7) == 0) {
        if (file_url_to_path(source, url_path, sizeof url_path, err, sizeof err) != 0) die("%s", err);
        snprintf(archive, sizeof archive, "%s", url_path);
    } else if (strstr(source, "://")) {
        die("--source %s: unsupported URL scheme (http, https and file are supported)", source);
    } else {
        snprintf(archive, sizeof archive, "%s", source);
    }

    if (url) {
        char name[256];
        download_name(url, name, sizeof name);
        snprintf(archive, sizeof archive, "%s/%s", downloads, name);
        int64_t have = file_size(archive);
        if (have >= 0 && expected_size > 0 && have != expected_size) {
            log_warn("%s has %" PRId64 " bytes, expected %" PRId64 "; downloading it again", archive, have, expected_size);
            unlink(archive);
            have = -1;
        }
        if (have >= 0) {
            log_info("using the earlier download %s", archive);
        } else {
            DownloadOptions d = {url, archive, expected_size, retries, connect_timeout, low_speed_time, 1.0};
            if (download_file(&d, err, sizeof err) != 0) die("%s", err);
        }
    } else if (file_size(archive) < 0) {
        die("%s: archive not found", archive);
    }

    char sha[65];
    int64_t bytes = 0;
    if (hash_archive(archive, sha, &bytes, err, sizeof err) != 0) die("%s", err);
    if (expected_size > 0 && bytes != expected_size)
        die("%s: size mismatch: %" PRId64 " bytes, expected %" PRId64, archive, bytes, expected_size);
    if (pinned[0] && strcmp(sha, pinned) != 0) {
        if (url) {
            unlink(archive); /* a wrong download must not be reused by the next run */
            die("%s: SHA-256 mismatch: got %s, expected %s (downloaded file removed)", archive, sha, pinned);
        }
        die("%s: SHA-256 mismatch: got %s, expected %s", archive, sha, pinned);
    }
    log_info("archive %s: %" PRId64 " bytes, sha256 %s%s", archive, bytes, sha, pinned[0] ? " (verified)" : "");

    FetchRecord rec = {source, sha, bytes, filter, corpus_pairs};
    char manifest_path[PATH_MAX + 64];
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", out);
    if (fetch_output_up_to_date(manifest_path, &rec)) {
        printf("fetch: %s is up to date (archive %.12s, filter %s)\n", out, sha, filter);
        if (have_dm) dataset_manifest_free(&dm);
        return 0;
    }

    remove_stale_temps(out);
    char tmp[PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    remove_tree(tmp);
    ExtractOptions xo = {archive, tmp, filter, corpus_pairs, bytes};
    ExtractResult xr;
    if (dm_extract_archive(&xo, &xr, err, sizeof err) != 0) {
        remove_tree(tmp);
        die("%s", err);
    }
    if (xr.n_files == 0) {
        remove_tree(tmp);
        die("--filter '%s' matched no module file in %s", filter, archive);
    }
    char tmp_manifest[PATH_MAX + 128];
    snprintf(tmp_manifest, sizeof tmp_manifest, "%s/manifest.json", tmp);
    if (fetch_output_write(tmp_manifest, &rec, &xr, err, sizeof err) != 0 ||
        rename_dir_atomic(tmp, out, err, sizeof err) != 0) {
        remove_tree(tmp);
        die("%s", err);
    }
    int64_t pairs = 0;
    for (int i = 0; i < xr.n_files; i++) pairs += xr.files[i].pairs;
    printf("fetch: wrote %s: %d files (%" PRId64 " pairs) matching '%s', %d tokenizer-corpus files\n", out, xr.n_files,
           pairs, filter, xr.n_corpus);
    dm_extract_result_free(&xr);
    if (have_dm) dataset_manifest_free(&dm);
    return 0;
}
