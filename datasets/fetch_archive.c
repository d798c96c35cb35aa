/* One archive of a fetch run made a checked local file (fetch_archive.h). */
#include "datasets/fetch_archive.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "datasets/download_http.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/sha256.h"

int fetch_find_project_file(const char *rel, char *out, size_t outlen) {
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

static void lower(char *s) {
    for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

static int is_http_url(const char *s) { return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0; }

/* A downloaded archive that fails to verify or extract must not stay where the next run would take it as "the
 * earlier download" (and fail again, run after run, until someone deletes it by hand): it is moved aside to
 * DOWNLOADS/rejected/NAME.<UTC time> (kept for a look, never read again) and the error names where it went. A local
 * file given as the source is the user's and is left where it is. Writes the suffix for the error line into note. */
static void reject_download(const FetchArchive *a, char *note, size_t cap) {
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

int fetch_archive_obtain(const char *label, const char *source, const char *pin, const DatasetManifest *dm,
                         const FetchNetOptions *net, FetchArchive *a, char *err, size_t errlen) {
    char why[8192], note[2 * PATH_MAX + 1500];
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
        if (fetch_find_project_file(dm->embedded_path, a->path, sizeof a->path) != 0)
            return set_err(err, errlen, "embedded sample %s not found (looked in the working directory and next to the "
                           "executable)", dm->embedded_path);
        expected_size = dm->embedded_size;
        if (!pinned[0]) snprintf(pinned, sizeof pinned, "%s", dm->embedded_sha256);
    } else if (is_http_url(source)) {
        a->url = source;
    } else if (strncmp(source, "file://", 7) == 0) {
        char url_path[PATH_MAX];
        if (file_url_to_path(source, url_path, sizeof url_path, err, errlen) != 0) return -1;
        snprintf(a->path, sizeof a->path, "%s", url_path);
    } else if (strstr(source, "://")) {
        return set_err(err, errlen, "%s %s: unsupported URL scheme (http, https and file are supported)", label,
                       source);
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
            if (download_file(&d, err, errlen) != 0) return -1;
        }
    } else if (file_size(a->path) < 0) {
        return set_err(err, errlen, "%s: archive not found (%s)", a->path, label);
    }

    if (hash_archive(a->path, a->sha256, &a->bytes, why, sizeof why) != 0) {
        reject_download(a, note, sizeof note);
        return set_err(err, errlen, "%s%s", why, note);
    }
    if (expected_size > 0 && a->bytes != expected_size) {
        reject_download(a, note, sizeof note);
        return set_err(err, errlen, "%s: size mismatch: %" PRId64 " bytes, expected %" PRId64 "%s", a->path, a->bytes,
                       expected_size, note);
    }
    if (pinned[0] && strcmp(a->sha256, pinned) != 0) {
        reject_download(a, note, sizeof note);
        return set_err(err, errlen, "%s: SHA-256 mismatch: got %s, expected %s%s", a->path, a->sha256, pinned, note);
    }
    log_info("archive %s: %" PRId64 " bytes, sha256 %s%s", a->path, a->bytes, a->sha256,
             pinned[0] ? " (verified)" : "");
    return 0;
}

int fetch_archive_extract(const ExtractOptions *xo, const char *tmp, const FetchArchive *a, ExtractResult *xr,
                          char *err, size_t errlen) {
    char why[8192], note[2 * PATH_MAX + 1500];
    if (dm_extract_archive(xo, xr, why, sizeof why) == 0) return 0;
    remove_tree(tmp);
    /* An error that names the temporary tree is our disk's (cannot create, write failed), not the archive's: then
     * the download is kept. */
    note[0] = '\0';
    if (strncmp(why, tmp, strlen(tmp)) != 0) reject_download(a, note, sizeof note);
    return set_err(err, errlen, "%s%s", why, note);
}
