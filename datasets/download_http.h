/* Resumable HTTP(S) download with libcurl: data goes to "<dest>.part" and is renamed to <dest> only when complete.
 * A rerun (or a retry inside one run) continues a .part with an HTTP Range request; transient failures (connection
 * errors, timeouts, a dropped body, HTTP 5xx/408/429) are retried with exponential backoff; a stall below 1 KiB/s for
 * low_speed_time_s aborts the attempt. Size and space are checked before the body is written: a Content-Length past
 * max_bytes, or past the free space of dest's file system (with disk_space.h's margin), refuses the download at the
 * header; a body without a length that grows past max_bytes is cut there and refused. */
#ifndef DATASETS_DOWNLOAD_HTTP_H
#define DATASETS_DOWNLOAD_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *url;           /* http:// or https:// */
    const char *dest;          /* final path; the partial download lives at dest + ".part" */
    int64_t expected_size;     /* bytes, or -1 when unknown (then the server's length is checked) */
    long retries;              /* extra attempts after the first */
    long connect_timeout_s;
    long low_speed_time_s;
    double backoff_initial_s;  /* first retry delay; doubles each retry, capped at 60 s */
    int64_t max_bytes;         /* cap on the whole file (bytes); 0 = none */
} DownloadOptions;

/* Returns 0 when <dest> holds the complete file, -1 with one message line in err otherwise (the .part is kept
 * when a later rerun could resume it). */
int download_file(const DownloadOptions *o, char *err, size_t errlen);

#endif
