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
#include <time.h>
#include <unistd.h>

#include "datasets/archive_extract.h"
#include "datasets/download_http.h"
#include "datasets/fetch_config.h"
#include "datasets/fetch_dataset_manifest.h"
#include "datasets/fetch_output.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/sha256.h"

#define DEFAULT_MANIFEST "datasets/dm_math_v1.0.json"

static const char *SUMMARY =
    "Fetches the DeepMind Mathematics v1.0 archive and extracts the module files whose name (without .txt) fully\n"
    "matches --filter into OUT/mathematics_dataset-v1.0/<split>/, plus the first --tokenizer-corpus-pairs pairs of\n"
    "EVERY train-easy file into OUT/tokenizer_corpus/, and writes OUT/manifest.json. The tree is built in\n"
    "OUT.tmp.<pid>.<random> and renamed into place only on success. With --tokenizer-corpus-source SRC2 the\n"
    "tokenizer corpus comes from SRC2's train-easy files instead (e.g. the all-modules sample for an arithmetic-only\n"
    "archive).\n"
    "SRC: 'official' (URL and size from the manifest), 'embedded' (datasets/dm_math_sample.tar.gz), an http(s)://\n"
    "or file:// URL, or a local archive path. Downloads go to DOWNLOADS/<name>.part and resume on a rerun.\n"
    "An archive whose members expand to more than --max-extract-bytes, or (beyond 64 MiB) to more than\n"
    "--max-extract-ratio times its own size, is refused before a byte of the excess is written (a decompression\n"
    "bomb). --config EXP/data.json reads the \"fetch\" section strictly ({\"source\", \"filter\",\n"
    "\"tokenizer_corpus_pairs\", \"tokenizer_corpus_source\", \"max_extract_bytes\", \"max_extract_ratio\"}); an option\n"
    "given on the command line overrides the same setting there.";

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

/* Removes OUT.tmp.<pid>[.<random>] trees left by fetch processes that no longer exist (killed mid-extraction). */
static void remove_stale_fetch_temps(const char *out_dir) {
    char dir[PATH_MAX], base[PATH_MAX], prefix[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s", out_dir);
    snprintf(base, sizeof base, "%s", out_dir);
    snprintf(prefix, sizeof prefix, "%s.tmp.", basename(base));
    int n = remove_stale_temps(dirname(dir), prefix);
    if (n > 0) log_info("removed %d stale temporary tree(s) %s<pid> of killed fetch runs", n, prefix);
}

static void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

/* How to download (the same for every archive of one run). */
typedef struct {
    const char *downloads;
    long retries, connect_timeout, low_speed_time;
    long max_download_bytes; /* cap on one downloaded file: a server that sends more is refused (default 8 GiB) */
} NetOptions;

/* One archive resolved to a local file whose size and checksum have been checked. */
typedef struct {
    const char *source;          /* as given: official | embedded | URL | path */
    const char *url;             /* what it was downloaded from, or NULL for a local file */
    char path[PATH_MAX + 512];   /* the local file */
    char sha256[65];
    int64_t bytes;
} Archive;

static int source_needs_manifest(const char *s) { return strcmp(s, "official") == 0 || strcmp(s, "embedded") == 0; }

static int is_http_url(const char *s) { return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0; }

/* A downloaded archive that fails to verify or extract must not stay where the next run would take it as "the
 * earlier download" (and fail again, run after run, until someone deletes it by hand): it is moved aside to
 * DOWNLOADS/rejected/NAME.<UTC time> (kept for a look, never read again) and the error names where it went. A local
 * file given as the source is the user's and is left where it is. Writes the suffix for the error line into note. */
static void reject_download(const Archive *a, char *note, size_t cap) {
    note[0] = '\0';
    if (!a->url) return;
    char err[512], dir[PATH_MAX + 512], moved[2 * PATH_MAX + 1300];
    snprintf(dir, sizeof dir, "%s", a->path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : a->path;
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    char stamp[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tmv));
    char rejected_dir[PATH_MAX + 600];
    snprintf(rejected_dir, sizeof rejected_dir, "%s/rejected", dir);
    /* Never over an earlier rejection (several can fall in one second): link() refuses an existing name
     * atomically, so the first free NAME.<time>[.k] is taken and the download then unlinked from its place. */
    int placed = 0;
    if (mkdir_p(rejected_dir, err, sizeof err) == 0)
        for (int k = 1; k <= 1000 && !placed; k++) {
            if (k == 1) snprintf(moved, sizeof moved, "%s/rejected/%s.%s", dir, base, stamp);
            else snprintf(moved, sizeof moved, "%s/rejected/%s.%s.%d", dir, base, stamp, k);
            if (link(a->path, moved) == 0) placed = unlink(a->path) == 0 ? 1 : -1;
            else if (errno != EEXIST) break;
        }
    if (placed == 1) {
        snprintf(note, cap, " (the download was moved aside to %s; the next run downloads it afresh)", moved);
    } else if (unlink(a->path) == 0) {
        snprintf(note, cap, " (the download was removed; the next run downloads it afresh)");
    } else {
        snprintf(note, cap, " (the download %s could not be moved or removed: %s; delete it before rerunning)",
                 a->path, strerror(errno));
    }
}

/* Resolves source to a local file, downloading it if it is a URL (or 'official'), checks the expected size and
 * checksum and hashes it. label names where source came from, for messages ("--source",
 * "experiments/x/data.json: fetch.source"). pin: expected SHA-256 in lowercase, or NULL; for 'official' and
 * 'embedded' the dataset manifest's applies when there is no pin. dm: loaded whenever source is one of those two.
 * Dies with one line on any error (a download that fails the checksum is removed first). */
static void obtain_archive(const char *label, const char *source, const char *pin, const DatasetManifest *dm,
                           const NetOptions *net, Archive *a) {
    char err[8192];
    memset(a, 0, sizeof *a);
    a->source = source;
    char pinned[65] = "";
    if (pin) snprintf(pinned, sizeof pinned, "%s", pin);
    int64_t expected_size = -1;
    if (strcmp(source, "official") == 0) {
        a->url = dm->url;
        expected_size = dm->size;
        if (!pinned[0] && dm->sha256) snprintf(pinned, sizeof pinned, "%s", dm->sha256);
    } else if (strcmp(source, "embedded") == 0) {
        if (find_project_file(dm->embedded_path, a->path, sizeof a->path) != 0)
            die("embedded sample %s not found (looked in the working directory and next to the executable)",
                dm->embedded_path);
        expected_size = dm->embedded_size;
        if (!pinned[0]) snprintf(pinned, sizeof pinned, "%s", dm->embedded_sha256);
    } else if (is_http_url(source)) {
        a->url = source;
    } else if (strncmp(source, "file://", 7) == 0) {
        char url_path[PATH_MAX];
        if (file_url_to_path(source, url_path, sizeof url_path, err, sizeof err) != 0) die("%s", err);
        snprintf(a->path, sizeof a->path, "%s", url_path);
    } else if (strstr(source, "://")) {
        die("%s %s: unsupported URL scheme (http, https and file are supported)", label, source);
    } else {
        snprintf(a->path, sizeof a->path, "%s", source);
    }
    lower(pinned);

    if (a->url) {
        char name[256];
        download_name(a->url, name, sizeof name);
        snprintf(a->path, sizeof a->path, "%s/%s", net->downloads, name);
        int64_t have = file_size(a->path);
        if (have >= 0 && expected_size > 0 && have != expected_size) {
            log_warn("%s has %" PRId64 " bytes, expected %" PRId64 "; downloading it again", a->path, have,
                     expected_size);
            unlink(a->path);
            have = -1;
        }
        if (have >= 0) {
            log_info("using the earlier download %s", a->path);
        } else {
            DownloadOptions d = {a->url, a->path, expected_size, net->retries, net->connect_timeout,
                                 net->low_speed_time, 1.0, net->max_download_bytes};
            if (download_file(&d, err, sizeof err) != 0) die("%s", err);
        }
    } else if (file_size(a->path) < 0) {
        die("%s: archive not found (%s)", a->path, label);
    }

    char note[2 * PATH_MAX + 1500];
    if (hash_archive(a->path, a->sha256, &a->bytes, err, sizeof err) != 0) {
        reject_download(a, note, sizeof note);
        die("%s%s", err, note);
    }
    if (expected_size > 0 && a->bytes != expected_size) {
        reject_download(a, note, sizeof note);
        die("%s: size mismatch: %" PRId64 " bytes, expected %" PRId64 "%s", a->path, a->bytes, expected_size, note);
    }
    if (pinned[0] && strcmp(a->sha256, pinned) != 0) {
        reject_download(a, note, sizeof note);
        die("%s: SHA-256 mismatch: got %s, expected %s%s", a->path, a->sha256, pinned, note);
    }
    log_info("archive %s: %" PRId64 " bytes, sha256 %s%s", a->path, a->bytes, a->sha256,
             pinned[0] ? " (verified)" : "");
}

/* The extraction caps (archive_extract.h) and where each came from, for the refusal. */
typedef struct {
    long max_bytes, max_ratio;              /* LONG_MIN: not set (the default applies) */
    char bytes_label[PATH_MAX + 64], ratio_label[PATH_MAX + 64];
} ExtractLimits;

/* Extracts into tmp, or removes tmp, moves a downloaded archive aside (reject_download) and dies with err. */
static void extract_or_die(const ExtractOptions *xo, const char *tmp, const Archive *a, ExtractResult *xr) {
    char err[8192], note[2 * PATH_MAX + 1500];
    if (dm_extract_archive(xo, xr, err, sizeof err) != 0) {
        remove_tree(tmp);
        /* An error that names the temporary tree is our disk's (cannot create, write failed), not the archive's:
         * then the download is kept. */
        note[0] = '\0';
        if (strncmp(err, tmp, strlen(tmp)) != 0) reject_download(a, note, sizeof note);
        die("%s%s", err, note);
    }
}

int main(int argc, char **argv) {
    log_set_program("fetch");
    /* NULL / LONG_MIN: not given on the command line, so the --config value or the built-in default applies. */
    const char *source = NULL, *out = NULL, *filter = NULL, *pin = NULL, *corpus_source = NULL, *config = NULL;
    const char *manifest_opt = NULL;
    long corpus_pairs = LONG_MIN;
    NetOptions net = {"data/downloads", 5, 30, 60, 8L << 30};
    ExtractLimits lim = {LONG_MIN, LONG_MIN, "--max-extract-bytes", "--max-extract-ratio"};
    const CliOption opts[] = {
        {"config", OPT_STRING, &config, "experiment data.json: settings from its \"fetch\" section (options given here win)", false},
        {"source", OPT_STRING, &source, "official | embedded | http(s):// or file:// URL | archive path (default official)", false},
        {"out", OPT_STRING, &out, "output directory, e.g. data/tiny/raw", true},
        {"filter", OPT_STRING, &filter, "POSIX ERE, full match on the module file name (default arithmetic__.*)", false},
        {"sha256", OPT_STRING, &pin, "expected SHA-256 of the --source archive (default: the manifest's, if any)", false},
        {"manifest", OPT_STRING, &manifest_opt, "dataset manifest (default " DEFAULT_MANIFEST ")", false},
        {"downloads", OPT_STRING, &net.downloads, "download directory (default data/downloads)", false},
        {"tokenizer-corpus-pairs", OPT_INT, &corpus_pairs, "pairs per train-easy file for the tokenizer corpus (default 10000)", false},
        {"tokenizer-corpus-source", OPT_STRING_OR_EMPTY, &corpus_source, "take the tokenizer corpus from this archive (same kinds "
                                                                "as --source; '' = the --source archive, the default)", false},
        {"retries", OPT_INT, &net.retries, "download retries after the first attempt (default 5)", false},
        {"connect-timeout", OPT_INT, &net.connect_timeout, "connect timeout in seconds (default 30)", false},
        {"low-speed-time", OPT_INT, &net.low_speed_time, "abort an attempt below 1 KiB/s for this many seconds (default 60)", false},
        {"max-download-bytes", OPT_INT, &net.max_download_bytes, "refuse a download larger than this many bytes: a "
                                                                 "Content-Length above it before the body, a body "
                                                                 "growing past it at the cap (default 8 GiB)", false},
        {"max-extract-bytes", OPT_INT, &lim.max_bytes, "refuse an archive whose members expand to more than this many "
                                                       "bytes (default 16 GiB, twice the official archive's; at most "
                                                       "64 GiB)", false},
        {"max-extract-ratio", OPT_INT, &lim.max_ratio, "refuse an archive that expands to more than this many times its "
                                                       "own size, beyond 64 MiB (default 20; DM-math text: 3.5)", false},
    };
    cli_parse(argc, argv, "fetch", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (corpus_pairs != LONG_MIN && corpus_pairs < 0) die("--tokenizer-corpus-pairs must be >= 0, got %ld", corpus_pairs);
    if (net.retries < 0 || net.retries > 100) die("--retries must be in [0, 100], got %ld", net.retries);
    if (net.connect_timeout <= 0 || net.low_speed_time <= 0) die("--connect-timeout and --low-speed-time must be positive");
    if (net.max_download_bytes < 1) die("--max-download-bytes must be >= 1, got %ld", net.max_download_bytes);
    if (lim.max_bytes != LONG_MIN && (lim.max_bytes < 1 || (uint64_t)lim.max_bytes > LIMIT_ARCHIVE_TOTAL_BYTES))
        die("--max-extract-bytes must be in [1, %llu], got %ld", (unsigned long long)LIMIT_ARCHIVE_TOTAL_BYTES,
            lim.max_bytes);
    if (lim.max_ratio != LONG_MIN && lim.max_ratio < 1) die("--max-extract-ratio must be >= 1, got %ld", lim.max_ratio);
    if (!out[0]) die("--out must not be empty");
    /* OUT without trailing slashes: its temporary tree is the sibling OUT.tmp.*, never a child of OUT. */
    char out_base[PATH_MAX];
    if (snprintf(out_base, sizeof out_base, "%s", out) >= (int)sizeof out_base) die("--out %s: path too long", out);
    for (size_t n = strlen(out_base); n > 1 && out_base[n - 1] == '/'; n--) out_base[n - 1] = '\0';
    struct stat out_st; /* before any download: the output tree replaces only a directory */
    if (lstat(out, &out_st) == 0) {
        if (S_ISLNK(out_st.st_mode))
            die("--out %s: is a symbolic link (the output tree replaces --out as a whole): pass the directory it points "
                "to", out);
        if (!S_ISDIR(out_st.st_mode)) die("--out %s: exists and is not a directory", out);
    }
    char err[8192];

    /* Precedence: an option given on the command line, then the config file, then the built-in default. */
    FetchConfig fc;
    memset(&fc, 0, sizeof fc);
    char source_label[PATH_MAX + 64] = "--source", corpus_label[PATH_MAX + 64] = "--tokenizer-corpus-source";
    char filter_label[PATH_MAX + 64] = "--filter";
    if (config) {
        if (fetch_config_load(config, &fc, err, sizeof err) != 0) die("%s", err);
        if (!source) {
            source = fc.source;
            snprintf(source_label, sizeof source_label, "%s: fetch.source", config);
        }
        if (!filter && fc.filter) {
            filter = fc.filter;
            snprintf(filter_label, sizeof filter_label, "%s: fetch.filter", config);
        }
        if (corpus_pairs == LONG_MIN && fc.has_tokenizer_corpus_pairs) corpus_pairs = fc.tokenizer_corpus_pairs;
        if (!corpus_source && fc.tokenizer_corpus_source) {
            corpus_source = fc.tokenizer_corpus_source;
            snprintf(corpus_label, sizeof corpus_label, "%s: fetch.tokenizer_corpus_source", config);
        }
        if (lim.max_bytes == LONG_MIN && fc.has_max_extract_bytes) {
            lim.max_bytes = fc.max_extract_bytes;
            snprintf(lim.bytes_label, sizeof lim.bytes_label, "%s: fetch.max_extract_bytes", config);
        }
        if (lim.max_ratio == LONG_MIN && fc.has_max_extract_ratio) {
            lim.max_ratio = fc.max_extract_ratio;
            snprintf(lim.ratio_label, sizeof lim.ratio_label, "%s: fetch.max_extract_ratio", config);
        }
    }
    if (!source) source = "official";
    if (!filter) filter = "arithmetic__.*";
    if (corpus_pairs == LONG_MIN) corpus_pairs = 10000;
    if (corpus_source && !corpus_source[0]) corpus_source = NULL; /* '' on the command line: the main archive */
    if (!source[0]) die("--source must not be empty");
    if (corpus_source && corpus_pairs == 0)
        die("%s %s: needs tokenizer corpus pairs > 0 (0 means no tokenizer corpus)", corpus_label, corpus_source);
    if (dm_filter_matches(filter, "", err, sizeof err) < 0) die("%s", err);

    char pinned[65] = "";
    if (pin) {
        if (!is_sha256_hex(pin)) die("--sha256: expected 64 hex digits, got '%s'", pin);
        snprintf(pinned, sizeof pinned, "%s", pin);
        lower(pinned);
    }

    /* The dataset manifest is needed for 'official' and 'embedded' (either archive), or when named explicitly. */
    int needs_dm = source_needs_manifest(source) || (corpus_source && source_needs_manifest(corpus_source));
    DatasetManifest dm;
    memset(&dm, 0, sizeof dm);
    int have_dm = 0;
    if (needs_dm || manifest_opt) {
        char mpath[PATH_MAX];
        if (manifest_opt) snprintf(mpath, sizeof mpath, "%s", manifest_opt);
        else if (find_project_file(DEFAULT_MANIFEST, mpath, sizeof mpath) != 0)
            die("cannot find %s (run from the project root or pass --manifest)", DEFAULT_MANIFEST);
        if (dataset_manifest_load(mpath, &dm, err, sizeof err) != 0) die("%s", err);
        have_dm = 1;
    }

    Archive main_ar, corpus_ar;
    obtain_archive(source_label, source, pinned[0] ? pinned : NULL, &dm, &net, &main_ar);
    if (corpus_source) {
        obtain_archive(corpus_label, corpus_source, NULL, &dm, &net, &corpus_ar);
        /* Two different URLs with the same file name would share one download: refuse rather than mix them up. */
        if (main_ar.url && corpus_ar.url && strcmp(main_ar.url, corpus_ar.url) != 0 &&
            strcmp(main_ar.path, corpus_ar.path) == 0)
            die("%s and %s both download to %s: use a local copy of one of them", main_ar.url, corpus_ar.url,
                main_ar.path);
    }

    FetchRecord rec = {source, main_ar.sha256, main_ar.bytes, filter, corpus_pairs,
                       corpus_source, corpus_source ? corpus_ar.sha256 : NULL, corpus_source ? corpus_ar.bytes : 0};
    char manifest_path[PATH_MAX + 64];
    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", out);
    /* Before the up-to-date check, which ends the run early: a tree of a killed extraction (gigabytes with the
     * official archive) must not outlive it just because the next run had nothing to do. */
    remove_stale_fetch_temps(out_base);
    if (fetch_output_up_to_date(manifest_path, &rec)) {
        printf("fetch: %s is up to date (archive %.12s, filter %s", out, main_ar.sha256, filter);
        if (corpus_source) printf(", tokenizer corpus from archive %.12s", corpus_ar.sha256);
        printf(")\n");
        if (have_dm) dataset_manifest_free(&dm);
        fetch_config_free(&fc);
        return 0;
    }

    /* Everything goes into a new OUT.tmp.<pid>.<random> (a name nobody can plant a link at beforehand: OUT's parent
     * may be shared), renamed into place once at the end. */
    char tmp[PATH_MAX + 64];
    if (mkdir_temp(out_base, tmp, sizeof tmp, err, sizeof err) != 0) die("%s", err);
    /* The module files; the tokenizer corpus too unless it comes from the other archive. 0: the default cap. */
    const int64_t max_bytes = lim.max_bytes == LONG_MIN ? 0 : lim.max_bytes;
    const long max_ratio = lim.max_ratio == LONG_MIN ? 0 : lim.max_ratio;
    ExtractOptions xo = {main_ar.path, tmp, filter, corpus_source ? 0 : corpus_pairs, main_ar.bytes,
                         max_bytes, max_ratio, lim.bytes_label, lim.ratio_label};
    ExtractResult xr, cr;
    memset(&cr, 0, sizeof cr);
    extract_or_die(&xo, tmp, &main_ar, &xr);
    if (xr.n_files == 0) {
        remove_tree(tmp);
        die("%s '%s' matched no module file in %s", filter_label, filter, main_ar.path);
    }
    ExtractResult all = xr; /* what the manifest lists: module files from xr, the corpus from xr or cr */
    if (corpus_source) {
        ExtractOptions co = {corpus_ar.path, tmp, NULL /* no module files */, corpus_pairs, corpus_ar.bytes,
                             max_bytes, max_ratio, lim.bytes_label, lim.ratio_label};
        extract_or_die(&co, tmp, &corpus_ar, &cr);
        if (cr.n_corpus == 0) {
            remove_tree(tmp);
            die("%s %s: no train-easy module file in %s for the tokenizer corpus", corpus_label, corpus_source,
                corpus_ar.path);
        }
        all.corpus = cr.corpus;
        all.n_corpus = cr.n_corpus;
    }
    char tmp_manifest[PATH_MAX + 128];
    snprintf(tmp_manifest, sizeof tmp_manifest, "%s/manifest.json", tmp);
    if (fetch_output_write(tmp_manifest, &rec, &all, err, sizeof err) != 0 ||
        rename_dir_atomic(tmp, out, err, sizeof err) != 0) {
        remove_tree(tmp);
        die("%s", err);
    }
    int64_t pairs = 0;
    for (int i = 0; i < all.n_files; i++) pairs += all.files[i].pairs;
    printf("fetch: wrote %s: %d files (%" PRId64 " pairs) matching '%s', %d tokenizer-corpus files%s%s\n", out,
           all.n_files, pairs, filter, all.n_corpus, corpus_source ? " from " : "", corpus_source ? corpus_source : "");
    dm_extract_result_free(&xr);
    dm_extract_result_free(&cr);
    if (have_dm) dataset_manifest_free(&dm);
    fetch_config_free(&fc);
    return 0;
}
