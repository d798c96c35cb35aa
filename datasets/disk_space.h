/* Free-space checks before fetch writes a large file: a download, or an archive member about to be extracted. A disk
 * that fills mid-write leaves a truncated file and, on a shared machine, breaks whatever else writes there; asking
 * first turns that into one line naming the directory, what was to be written and how much room there is. */
#ifndef DATASETS_DISK_SPACE_H
#define DATASETS_DISK_SPACE_H

#include <stddef.h>
#include <stdint.h>

/* Room kept free beyond what a write needs (file system metadata, the .part beside its target, other writers). */
#define DISK_SPACE_MARGIN_BYTES (64ll << 20)

/* Bytes available to this process on the file system holding dir, or -1 with err when it cannot be asked. */
int64_t disk_space_available(const char *dir, char *err, size_t errlen);

/* 0 when dir's file system has need + DISK_SPACE_MARGIN_BYTES available; -1 with one line in err naming dir, what
 * (e.g. "the download of https://...") and both sizes. need <= 0 always passes. */
int disk_space_require(const char *dir, int64_t need, const char *what, char *err, size_t errlen);

#endif
