/* Resumable, retrying download over libcurl (see download_http.h). */
#include "datasets/download_http.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "datasets/disk_space.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"

/* State of one transfer attempt, shared by the curl callbacks. */
typedef struct {
    CURL *curl;
    FILE *fp;                 /* .part opened for appending */
    int64_t offset;           /* bytes already in the .part when the attempt started */
    int64_t written;          /* bytes appended in this attempt */
    int checked_status;       /* the first body chunk has validated the response kind */
    int64_t range_start;      /* from Content-Range, -1 if none */
    int64_t range_total;      /* total size from Content-Range, -1 if unknown */
    int bad_range;            /* the server resumed at another offset than asked */
    int write_failed;         /* local write error */
    int64_t expected_size;
    int64_t max_bytes;        /* the cap (0 = none) */
    const char *url, *dir;    /* for messages and the free-space check */
    char what[700];           /* "the download of URL", for the free-space message */
    long status;              /* of the response whose headers are arriving */
    int refused;              /* the header or the body broke the cap (1) or the free space (2): msg holds why */
    char msg[768];
    Progress progress;
} Transfer;

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
    Transfer *t = ud;
    size_t len = size * n;
    char line[512];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, buf, k);
    line[k] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* new response (redirects produce several) */
        t->range_start = -1;
        t->range_total = -1;
        const char *sp = strchr(line, ' ');
        t->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    } else if (strncasecmp(line, "Content-Length:", 15) == 0 && t->status >= 200 && t->status < 300) {
        /* The body's size is known before a byte of it: refuse it here if it cannot fit the cap or the disk. */
        char *end = NULL;
        errno = 0;
        long long body = strtoll(line + 15, &end, 10);
        if (errno == 0 && end != line + 15 && body >= 0) {
            const int64_t whole = t->offset + (int64_t)body;
            if (t->max_bytes > 0 && whole > t->max_bytes) {
                snprintf(t->msg, sizeof t->msg, "%s: the server announces %" PRId64 " bytes, more than the download "
                         "cap of %" PRId64 " bytes (--max-download-bytes)", t->url, whole, t->max_bytes);
                t->refused = 1;
                return 0; /* aborts the transfer */
            }
            if (disk_space_require(t->dir, (int64_t)body, t->what, t->msg, sizeof t->msg) != 0) {
                t->refused = 2;
                return 0;
            }
        }
    } else if (strncasecmp(line, "Content-Range:", 14) == 0) {
        long long a = -1, b = -1, total = -1;
        if (sscanf(line + 14, " bytes %lld-%lld/%lld", &a, &b, &total) >= 2) {
            t->range_start = a;
            t->range_total = total;
        }
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
    Transfer *t = ud;
    size_t len = size * n;
    if (!t->checked_status) {
        t->checked_status = 1;
        long code = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
        /* A 206 must continue exactly where the .part ends, or the file would be spliced wrongly. (A 200 answer to
         * a Range request never gets here: libcurl reports it as CURLE_RANGE_ERROR.) */
        if (t->offset > 0 && code == 206 && t->range_start != t->offset) {
            t->bad_range = 1;
            return 0; /* aborts the transfer */
        }
    }
    if (t->max_bytes > 0 && t->offset + t->written + (int64_t)len > t->max_bytes) {
        /* A body without a length (or longer than it said) is cut at the cap, never written past it. */
        snprintf(t->msg, sizeof t->msg, "%s: the body grows past the download cap of %" PRId64 " bytes "
                 "(--max-download-bytes)", t->url, t->max_bytes);
        t->refused = 1;
        return 0;
    }
    if (fwrite(data, 1, len, t->fp) != len) {
        t->write_failed = errno ? errno : EIO;
        return 0;
    }
    t->written += (int64_t)len;
    return len;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)ultotal;
    (void)ulnow;
    Transfer *t = ud;
    if (t->progress.total == 0) {
        if (t->expected_size > 0) t->progress.total = t->expected_size;
        else if (dltotal > 0) t->progress.total = t->offset + (int64_t)dltotal;
    }
    progress_update(&t->progress, t->offset + (int64_t)dlnow, NULL);
    return 0;
}

static int64_t file_size_or_zero(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* The .part has a predictable name (a rerun resumes it), so whatever is there is checked: only a regular file is
 * appended to; a symbolic link planted there is refused, never followed (O_NOFOLLOW closes the gap between the
 * check and the open; O_NONBLOCK keeps a FIFO swapped in meanwhile from hanging it). Truncates it first when
 * truncate_first is set. NULL with err on failure. */
static FILE *open_part(const char *part, int truncate_first, char *err, size_t errlen) {
    struct stat st;
    if (lstat(part, &st) == 0 && !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file (%s): refused", part, file_kind_name(st.st_mode));
        return NULL;
    }
    int fd = open(part, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0666);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open for writing: %s", part, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file: refused", part);
        close(fd);
        return NULL;
    }
    if (truncate_first && ftruncate(fd, 0) != 0) {
        set_err(err, errlen, "%s: cannot truncate: %s", part, strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *fp = fdopen(fd, "ab");
    if (!fp) {
        set_err(err, errlen, "%s: cannot open for writing: %s", part, strerror(errno));
        close(fd);
    }
    return fp;
}

/* Failures worth another attempt: the network or the server may do better next time. */
static int is_transient(CURLcode rc, long http_code) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    case CURLE_HTTP_RETURNED_ERROR:
        return http_code >= 500 || http_code == 408 || http_code == 429;
    default:
        return 0;
    }
}

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* One attempt: appends to the .part from its current size. Returns 1 complete, 0 retryable failure (msg in err),
 * -1 permanent failure. */
static int attempt(const DownloadOptions *o, const char *part, const char *dir, char *err, size_t errlen) {
    Transfer t;
    memset(&t, 0, sizeof t);
    t.range_start = t.range_total = -1;
    t.expected_size = o->expected_size;
    t.max_bytes = o->max_bytes;
    t.url = o->url;
    t.dir = dir;
    snprintf(t.what, sizeof t.what, "the download of %s", o->url);
    t.offset = file_size_or_zero(part);
    if (o->expected_size > 0 && t.offset == o->expected_size) return 1; /* finished earlier, rename was interrupted */
    int start_over = o->expected_size > 0 && t.offset > o->expected_size;
    if (start_over) {
        log_warn("%s is larger than the expected %" PRId64 " bytes; starting over", part, o->expected_size);
        t.offset = 0;
    }
    if (o->max_bytes > 0 && o->expected_size > o->max_bytes) {
        set_err(err, errlen, "%s: the manifest's %" PRId64 " bytes are more than the download cap of %" PRId64
                " bytes (--max-download-bytes)", o->url, o->expected_size, o->max_bytes);
        return -1;
    }
    if (o->expected_size > 0) {
        if (disk_space_require(dir, o->expected_size - t.offset, t.what, err, errlen) != 0) return -1;
    }
    t.fp = open_part(part, start_over, err, errlen);
    if (!t.fp) return -1;
    t.curl = curl_easy_init();
    CHECK_ALLOC(t.curl);
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(t.curl, CURLOPT_URL, o->url);
    curl_easy_setopt(t.curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t.curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(t.curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(t.curl, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(t.curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(t.curl, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s);
    curl_easy_setopt(t.curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(t.curl, CURLOPT_LOW_SPEED_TIME, o->low_speed_time_s);
    curl_easy_setopt(t.curl, CURLOPT_USERAGENT, "dm-math-fetch/1");
    curl_easy_setopt(t.curl, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(t.curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(t.curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(t.curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(t.curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(t.curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(t.curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(t.curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(t.curl, CURLOPT_XFERINFODATA, &t);
    if (t.offset > 0) {
        log_info("resuming %s at byte %" PRId64, o->url, t.offset);
        curl_easy_setopt(t.curl, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)t.offset);
    } else {
        log_info("downloading %s", o->url);
    }
    progress_start(&t.progress, "download", o->expected_size > 0 ? o->expected_size : 0, "B");
    progress_update(&t.progress, t.offset, NULL);

    CURLcode rc = curl_easy_perform(t.curl);
    long code = 0;
    curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(t.curl);
    int close_failed = fflush(t.fp) != 0;
    close_failed |= fsync(fileno(t.fp)) != 0; /* both run, whatever the first gave */
    close_failed |= fclose(t.fp) != 0;
    progress_update(&t.progress, file_size_or_zero(part), NULL);
    progress_finish(&t.progress);

    if (t.refused) {
        /* Permanent: another attempt gets the same answer. A body past the cap is nobody's file; a .part stopped for
         * want of space is kept, so that a rerun after freeing space resumes it. */
        set_err(err, errlen, "%s", t.msg);
        if (t.refused == 1) unlink(part);
        return -1;
    }
    if (t.write_failed || close_failed) {
        set_err(err, errlen, "%s: write failed: %s", part, strerror(t.write_failed ? t.write_failed : EIO));
        return -1;
    }
    if (t.bad_range) {
        set_err(err, errlen, "%s: server resumed at byte %" PRId64 " instead of %" PRId64 "; discarding the partial file",
                o->url, t.range_start, t.offset);
        unlink(part);
        return 0;
    }
    if (rc == CURLE_RANGE_ERROR && t.offset > 0) {
        set_err(err, errlen, "%s: server cannot resume at byte %" PRId64 "; discarding the partial file", o->url, t.offset);
        unlink(part);
        return 0;
    }
    if (rc == CURLE_HTTP_RETURNED_ERROR && code == 416 && t.offset > 0) {
        /* Range not satisfiable: the .part is not a prefix of what the server has now. */
        set_err(err, errlen, "%s: server refused to resume at byte %" PRId64 "; discarding the partial file", o->url, t.offset);
        unlink(part);
        return 0;
    }
    if (rc != CURLE_OK) {
        const char *why = curl_err[0] ? curl_err : curl_easy_strerror(rc);
        if (rc == CURLE_HTTP_RETURNED_ERROR) set_err(err, errlen, "%s: HTTP %ld", o->url, code);
        else set_err(err, errlen, "%s: %s", o->url, why);
        return is_transient(rc, code) ? 0 : -1;
    }
    int64_t have = file_size_or_zero(part);
    int64_t server_total = t.range_total > 0 ? t.range_total : -1;
    if (o->expected_size > 0 && have != o->expected_size) {
        set_err(err, errlen, "%s: size mismatch: got %" PRId64 " bytes, the manifest says %" PRId64, o->url, have,
                o->expected_size);
        if (have > o->expected_size) {
            unlink(part);
            return -1;
        }
        return 0;
    }
    if (server_total > 0 && have != server_total) {
        set_err(err, errlen, "%s: got %" PRId64 " bytes of %" PRId64, o->url, have, server_total);
        return 0;
    }
    return 1;
}

int download_file(const DownloadOptions *o, char *err, size_t errlen) {
    static int curl_ready = 0;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
            set_err(err, errlen, "libcurl initialisation failed");
            return -1;
        }
        curl_ready = 1;
    }
    char part[4200];
    snprintf(part, sizeof part, "%s.part", o->dest);
    char dir_err[512];
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", o->dest);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        if (mkdir_p(dir, dir_err, sizeof dir_err) != 0) {
            set_err(err, errlen, "%s", dir_err);
            return -1;
        }
    } else {
        snprintf(dir, sizeof dir, "."); /* the free-space checks ask the current directory's file system */
    }
    double delay = o->backoff_initial_s > 0 ? o->backoff_initial_s : 1.0;
    for (long k = 0;; k++) {
        int r = attempt(o, part, dir, err, errlen);
        if (r == 1) break;
        if (r < 0) return -1;
        if (k >= o->retries) {
            size_t used = strlen(err);
            if (used < errlen)
                snprintf(err + used, errlen - used, " (gave up after %ld attempts; rerun to resume from %s)", k + 1, part);
            return -1;
        }
        log_warn("attempt %ld of %ld failed: %s; retrying in %.0f s", k + 1, o->retries + 1, err, delay);
        sleep_seconds(delay);
        delay = delay * 2 > 60 ? 60 : delay * 2;
    }
    if (rename(part, o->dest) != 0) {
        set_err(err, errlen, "%s: cannot rename into place: %s", o->dest, strerror(errno));
        return -1;
    }
    fsync_dir_of(o->dest);
    return 0;
}
