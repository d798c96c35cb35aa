/* One archive of a fetch run, made a checked local file: resolved from its source ('official' and 'embedded' through
 * the dataset manifest, an http(s):// or file:// URL, or a local path), downloaded when it is a URL (resuming an
 * earlier partial download), then its size and SHA-256 checked. A download that fails a check, or whose extraction
 * fails, is moved aside so the next run fetches it afresh; a local file given as the source is the user's and stays.
 * Every function returns 0, or -1 with one line in err naming the file or setting and the problem. */
#ifndef DATASETS_FETCH_ARCHIVE_H
#define DATASETS_FETCH_ARCHIVE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "datasets/archive_extract.h"
#include "datasets/fetch_dataset_manifest.h"

/* How to download (the same for every archive of one run). */
typedef struct {
    const char *downloads; /* download directory: DOWNLOADS/<name>.part while it arrives */
    long retries, connect_timeout, low_speed_time;
    long max_download_bytes; /* cap on one downloaded file: a server that sends more is refused */
} FetchNetOptions;

/* One archive resolved to a local file whose size and checksum have been checked. */
typedef struct {
    const char *source;          /* as given: official | embedded | URL | path */
    const char *url;             /* what it was downloaded from, or NULL for a local file */
    char path[PATH_MAX + 512];   /* the local file */
    char sha256[65];
    int64_t bytes;
} FetchArchive;

/* A project file given relative to the project root: first from the working directory, then next to the executable
 * (bin/../<rel>), so that the programs run from anywhere. 0 and the path in out, or -1. */
int fetch_find_project_file(const char *rel, char *out, size_t outlen);

/* Resolves source to a checked local file in *a. label names where source came from, for messages ("--source",
 * "experiments/x/data.json: fetch.source"). pin: expected SHA-256 in lowercase, or NULL; for 'official' and 'embedded'
 * the dataset manifest's applies when there is no pin. dm: loaded whenever source is one of those two. */
int fetch_archive_obtain(const char *label, const char *source, const char *pin, const DatasetManifest *dm,
                         const FetchNetOptions *net, FetchArchive *a, char *err, size_t errlen);

/* Extracts a's members as xo says into the temporary tree tmp. On failure tmp is removed and, unless the error is
 * the tree's own (our disk, not the archive), a downloaded archive is moved aside. */
int fetch_archive_extract(const ExtractOptions *xo, const char *tmp, const FetchArchive *a, ExtractResult *xr,
                          char *err, size_t errlen);

#endif
