/* Safe, filtered extraction of a DeepMind Mathematics archive with libarchive (gzip or plain tar).
 *
 * Only regular files at mathematics_dataset-v1.0/<split>/<name>.txt (split one of train-easy, train-medium,
 * train-hard, interpolate, extrapolate) whose <name> FULLY matches the filter (POSIX ERE) are written, under
 * out_dir/mathematics_dataset-v1.0/<split>/. Independently of the filter, the first corpus_pairs pairs of every
 * train-easy file are written to out_dir/tokenizer_corpus/<name>.txt (the tokenizer is trained on all modules).
 * Any unsafe entry anywhere in the archive (absolute path, a ".." component, symbolic or hard link, device, FIFO,
 * socket) is refused with one error naming it; so is a corrupt or truncated archive, a duplicate entry, or a file
 * with an odd number of lines. On error out_dir may hold partial output: the caller removes it.
 *
 * Decompression bombs: an archive may expand to at most
 *     min(max_extract_bytes, max(max_extract_ratio x its compressed size, DM_EXTRACT_RATIO_FREE_BYTES))
 * bytes of members, checked against each member's header before a byte of it is written (a bomb of a few MB that
 * would inflate to gigabytes is refused at once, nothing of it written), and the inflated stream as a whole (headers,
 * padding, data after the end of the tar) may be at most twice that plus 1 MiB, checked as it is read, so that
 * neither the disk nor the time spent inflating what is skipped grows without bound. Room on the disk is asked for
 * each member before it is written (disk_space.h). */
#ifndef DATASETS_ARCHIVE_EXTRACT_H
#define DATASETS_ARCHIVE_EXTRACT_H

#include <stddef.h>
#include <stdint.h>

#define DM_ARCHIVE_ROOT "mathematics_dataset-v1.0"

/* The official archive, 2.33 GB compressed, expands to about 8.4 GB (the embedded sample's 7.5 MB for its 98,200
 * pairs, scaled to the release's 112.7 million): twice that, so the whole release always fits. */
#define DM_EXTRACT_DEFAULT_MAX_BYTES (16ll << 30)
/* DM-math text compresses 3.4 to 3.6 times with gzip (the official archive, the embedded sample, the arithmetic
 * archive); a gzip bomb of repeated lines or zeros, hundreds to a thousand times. */
#define DM_EXTRACT_DEFAULT_MAX_RATIO 20
/* Below this many bytes the ratio is not applied: a tiny archive (a tar of a few short files is mostly zero padding)
 * compresses far better than real text and costs nothing to extract. */
#define DM_EXTRACT_RATIO_FREE_BYTES (64ll << 20)

typedef struct {
    const char *archive_path;
    const char *out_dir;      /* created if missing; normally a temporary directory */
    const char *filter;       /* POSIX ERE, anchored at both ends; NULL = no module files (tokenizer corpus only) */
    long corpus_pairs;        /* pairs per train-easy file for the tokenizer corpus; 0 = no corpus */
    int64_t archive_bytes;    /* for the progress bar; 0 = unknown */
    int64_t max_extract_bytes; /* cap on what the archive expands to (see above); 0 = DM_EXTRACT_DEFAULT_MAX_BYTES */
    long max_extract_ratio;    /* cap on expanded / compressed bytes; 0 = DM_EXTRACT_DEFAULT_MAX_RATIO */
    /* Where each cap came from, named in the refusal: NULL = "--max-extract-bytes" / "--max-extract-ratio". */
    const char *max_bytes_label, *max_ratio_label;
} ExtractOptions;

typedef struct {
    char split[32];           /* "train-easy", ...; "train-easy" for corpus files too */
    char file[256];           /* "<area>__<module>.txt" */
    int64_t pairs;            /* lines / 2 of what was written */
    int64_t bytes;            /* bytes written */
    char sha256[65];          /* of the bytes written */
} ExtractedFile;

typedef struct {
    ExtractedFile *files;     /* sorted by (split, file) */
    int n_files;
    ExtractedFile *corpus;    /* sorted by file */
    int n_corpus;
} ExtractResult;

/* Returns 0, or -1 with one message line in err. */
int dm_extract_archive(const ExtractOptions *o, ExtractResult *r, char *err, size_t errlen);
void dm_extract_result_free(ExtractResult *r);

/* Full-match test of a module file stem against a POSIX ERE. Returns 1 match, 0 no match, -1 invalid regex (err). */
int dm_filter_matches(const char *filter, const char *stem, char *err, size_t errlen);

#endif
