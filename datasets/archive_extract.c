/* Filtered, safety-checked extraction of a DM math archive (see archive_extract.h). Entries are streamed: each data
 * block is written, hashed and line-counted as it arrives, so a 2.3 GB archive needs no temporary copy. */
#include "datasets/archive_extract.h"
#include "datasets/disk_space.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"
#include "pipeline/base/module_regex.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/sha256.h"

#if defined(HAVE_ZLIB)
#include <zlib.h>
#endif

static const char *const SPLITS[] = {"train-easy", "train-medium", "train-hard", "interpolate", "extrapolate"};

static int compile_filter(const char *filter, regex_t *re, char *err, size_t errlen) {
    return module_regex_compile(re, filter, "--filter", err, errlen);
}

int dm_filter_matches(const char *filter, const char *stem, char *err, size_t errlen) {
    regex_t re;
    if (compile_filter(filter, &re, err, errlen) != 0) return -1;
    int m = regexec(&re, stem, 0, NULL, 0) == 0;
    regfree(&re);
    return m;
}

/* Checks one entry for anything that could write outside the output tree or create a non-file. Returns NULL if
 * safe, else the reason. */
static const char *unsafe_reason(struct archive_entry *e, const char *path) {
    if (path[0] == '/') return "absolute path";
    for (const char *p = path; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return "'..' path component";
        if (!slash) break;
        p = slash + 1;
    }
    if (archive_entry_hardlink(e) != NULL) return "hard link";
    if (archive_entry_symlink(e) != NULL) return "symbolic link";
    switch (archive_entry_filetype(e)) {
    case AE_IFREG:
    case AE_IFDIR:
        return NULL;
    case AE_IFLNK:
        return "symbolic link";
    case AE_IFCHR:
    case AE_IFBLK:
        return "device file";
    case AE_IFIFO:
        return "FIFO";
    case AE_IFSOCK:
        return "socket";
    default:
        return "not a regular file or directory";
    }
}

/* Splits "a/b/c" (after dropping "./" and empty components) into at most 4 components. Returns the count. */
static int split_path(const char *path, char comps[4][256]) {
    int n = 0;
    const char *p = path;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len > 0 && !(len == 1 && p[0] == '.')) {
            if (len >= 256) return -1;          /* longer than a file name can be: the caller refuses it */
            if (n == 4) return 99;              /* deeper than anything we extract */
            memcpy(comps[n], p, len);
            comps[n][len] = '\0';
            n++;
        }
        if (!slash) break;
        p = slash + 1;
    }
    return n;
}

static int known_split(const char *s) {
    for (size_t i = 0; i < sizeof SPLITS / sizeof SPLITS[0]; i++)
        if (strcmp(s, SPLITS[i]) == 0) return 1;
    return 0;
}

/* One output being written while an entry streams: a filtered file or a tokenizer-corpus prefix. */
typedef struct {
    FILE *fp;
    char path[4400];
    Sha256 *sha;
    int64_t bytes, lines;
    int64_t max_lines;        /* stop after this many lines (corpus); -1 = everything */
    int last_was_newline;
} Sink;

static int sink_open(Sink *s, const char *path, int64_t max_lines, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        if (mkdir_p(dir, err, errlen) != 0) return -1;
    }
    /* A new file in a staging tree fetch created itself: anything already at path (a link among them) is refused. */
    s->fp = fopen_new_write(path, err, errlen);
    if (!s->fp) return -1;
    s->sha = sha256_new();
    s->max_lines = max_lines;
    s->last_was_newline = 1;
    return 0;
}

/* Appends data (up to the line limit). Returns 0 or -1 with err. */
static int sink_write(Sink *s, const char *data, size_t n, char *err, size_t errlen) {
    if (!s->fp) return 0;
    size_t take = n;
    if (s->max_lines >= 0) {
        if (s->lines >= s->max_lines) return 0;
        int64_t lines = s->lines;
        for (size_t i = 0; i < n; i++)
            if (data[i] == '\n' && ++lines == s->max_lines) {
                take = i + 1;
                break;
            }
    }
    for (size_t i = 0; i < take; i++) s->lines += data[i] == '\n';
    if (take > 0) s->last_was_newline = data[take - 1] == '\n';
    if (take > 0 && fwrite(data, 1, take, s->fp) != take) {
        set_err(err, errlen, "%s: write failed: %s", s->path, strerror(errno));
        return -1;
    }
    sha256_update(s->sha, data, take);
    s->bytes += (int64_t)take;
    return 0;
}

/* Closes the sink (durably) and fills rec. A missing final newline is added so every output ends cleanly. */
static int sink_close(Sink *s, ExtractedFile *rec, char *err, size_t errlen) {
    if (!s->fp) return 0;
    if (!s->last_was_newline) {
        if (fputc('\n', s->fp) == EOF) {
            set_err(err, errlen, "%s: write failed: %s", s->path, strerror(errno));
            return -1;
        }
        sha256_update(s->sha, "\n", 1);
        s->bytes++;
        s->lines++;
    }
    /* Durability comes from one syncfs() over the whole tree at the end (one flush instead of one per file). */
    int bad = fflush(s->fp) != 0;
    bad |= fclose(s->fp) != 0;
    s->fp = NULL;
    sha256_final_hex(s->sha, rec->sha256);
    s->sha = NULL;
    if (bad) {
        set_err(err, errlen, "%s: write failed: %s", s->path, strerror(errno));
        return -1;
    }
    rec->bytes = s->bytes;
    rec->pairs = s->lines / 2;
    return 0;
}

static void sink_discard(Sink *s) {
    if (s->fp) fclose(s->fp);
    s->fp = NULL;
    if (s->sha) {
        char hex[65];
        sha256_final_hex(s->sha, hex);
        s->sha = NULL;
    }
}

static void push(ExtractedFile **arr, int *n, const ExtractedFile *rec) {
    *arr = xrealloc(*arr, (size_t)(*n + 1) * sizeof **arr);
    (*arr)[(*n)++] = *rec;
}

static int cmp_file(const void *a, const void *b) {
    const ExtractedFile *x = a, *y = b;
    int c = strcmp(x->split, y->split);
    return c ? c : strcmp(x->file, y->file);
}

void dm_extract_result_free(ExtractResult *r) {
    free(r->files);
    free(r->corpus);
    memset(r, 0, sizeof *r);
}

/* What one archive may expand to (archive_extract.h). */
typedef struct {
    int64_t members;          /* bytes of regular members, by their headers */
    int64_t stream;           /* bytes of the inflated tar stream: 2 * members + 1 MiB */
    int by_ratio;             /* the ratio, not max_extract_bytes, sets members */
    int64_t compressed;       /* the archive's size */
    long ratio;
    const char *bytes_label, *ratio_label;
} ExtractCap;

static void cap_init(ExtractCap *c, const ExtractOptions *o, int64_t compressed) {
    memset(c, 0, sizeof *c);
    const int64_t max_bytes = o->max_extract_bytes > 0 ? o->max_extract_bytes : DM_EXTRACT_DEFAULT_MAX_BYTES;
    c->ratio = o->max_extract_ratio > 0 ? o->max_extract_ratio : DM_EXTRACT_DEFAULT_MAX_RATIO;
    c->compressed = compressed;
    c->bytes_label = o->max_bytes_label ? o->max_bytes_label : "--max-extract-bytes";
    c->ratio_label = o->max_ratio_label ? o->max_ratio_label : "--max-extract-ratio";
    /* ratio * compressed in double: no overflow for any ratio or size */
    const double by_ratio = (double)c->ratio * (double)compressed;
    int64_t ratio_cap = by_ratio >= (double)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)by_ratio;
    if (ratio_cap < DM_EXTRACT_RATIO_FREE_BYTES) ratio_cap = DM_EXTRACT_RATIO_FREE_BYTES;
    c->by_ratio = ratio_cap < max_bytes;
    c->members = c->by_ratio ? ratio_cap : max_bytes;
    if (c->members > INT64_MAX / 4) c->members = INT64_MAX / 4;
    c->stream = 2 * c->members + (1 << 20);
}

/* "more than ..." for a refusal: which cap, how it came about, and the option or key that sets it. */
static void cap_describe(const ExtractCap *c, char *out, size_t n) {
    if (c->by_ratio)
        snprintf(out, n, "more than %ld times the archive's %" PRId64 " bytes (%s; DM-math text expands about 3.5 "
                 "times): a decompression bomb", c->ratio, c->compressed, c->ratio_label);
    else
        snprintf(out, n, "more than the extraction cap of %" PRId64 " bytes (%s)", c->members, c->bytes_label);
}

/* The compressed input. With zlib we inflate gzip ourselves and hand libarchive the plain tar stream, because
 * libarchive's gzip reader does not verify the CRC-32 and length trailer: zlib does, so a corrupted archive whose
 * damage still inflates (or sits in the trailer) is refused too. Without zlib, libarchive reads the file directly. */
typedef struct {
    FILE *fp;
    int is_gzip;
    int64_t compressed_read;        /* bytes consumed from the file, for progress */
    int64_t compressed_size;        /* the file's size (the ratio cap's base) */
    int64_t produced;               /* bytes of the tar stream handed out (or skipped) so far */
    int64_t stream_cap;             /* the most produced may reach (ExtractCap.stream) */
    int over_cap;                   /* produced passed stream_cap: error holds the refusal */
    int finished;                   /* every gzip member ended and the file is exhausted */
    const ExtractCap *cap;          /* for the refusal's wording */
    char error[1024];
    unsigned char in[1 << 16];
    unsigned char out[1 << 18];
#if defined(HAVE_ZLIB)
    z_stream zs;
    int zs_ready;
#endif
} Source;

static int source_open(Source *src, const char *path, char *err, size_t errlen) {
    src->fp = fopen(path, "rb");
    if (!src->fp) {
        set_err(err, errlen, "%s: cannot open archive: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    src->compressed_size = fstat(fileno(src->fp), &st) == 0 ? (int64_t)st.st_size : 0;
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, src->fp);
    src->is_gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    rewind(src->fp);
#if defined(HAVE_ZLIB)
    if (src->is_gzip) {
        if (inflateInit2(&src->zs, 16 + MAX_WBITS) != Z_OK) { /* 16+: expect a gzip wrapper and check its trailer */
            set_err(err, errlen, "%s: zlib initialisation failed", path);
            return -1;
        }
        src->zs_ready = 1;
    }
#endif
    return 0;
}

static void source_close(Source *src) {
#if defined(HAVE_ZLIB)
    if (src->zs_ready) inflateEnd(&src->zs);
    src->zs_ready = 0;
#endif
    if (src->fp) fclose(src->fp);
    src->fp = NULL;
}

/* Produces the next chunk of the tar stream into *out. Returns its length, 0 at the end, -1 on error (src->error). */
static ssize_t source_read(Source *src, const void **out) {
    if (!src->is_gzip) {
        size_t n = fread(src->in, 1, sizeof src->in, src->fp);
        if (n == 0 && ferror(src->fp)) {
            snprintf(src->error, sizeof src->error, "read error: %s", strerror(errno));
            return -1;
        }
        src->compressed_read += (int64_t)n;
        *out = src->in;
        return (ssize_t)n;
    }
#if defined(HAVE_ZLIB)
    z_stream *zs = &src->zs;
    for (;;) {
        if (src->finished) return 0;
        if (zs->avail_in == 0) {
            size_t n = fread(src->in, 1, sizeof src->in, src->fp);
            if (n == 0 && ferror(src->fp)) {
                snprintf(src->error, sizeof src->error, "read error: %s", strerror(errno));
                return -1;
            }
            src->compressed_read += (int64_t)n;
            zs->next_in = src->in;
            zs->avail_in = (uInt)n;
        }
        int at_eof = zs->avail_in == 0 && feof(src->fp);
        zs->next_out = src->out;
        zs->avail_out = sizeof src->out;
        int rc = inflate(zs, Z_NO_FLUSH);
        size_t produced = sizeof src->out - zs->avail_out;
        if (rc == Z_STREAM_END) {
            /* One gzip member verified (CRC and length). Another may follow (concatenated gzip). */
            if (zs->avail_in == 0) {
                int c = fgetc(src->fp);
                if (c == EOF) src->finished = 1;
                else ungetc(c, src->fp);
            }
            if (!src->finished) inflateReset(zs);
        } else if (rc == Z_BUF_ERROR && at_eof) {
            snprintf(src->error, sizeof src->error, "gzip stream ends early (truncated file)");
            return -1;
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(src->error, sizeof src->error, "gzip: %s", zs->msg ? zs->msg : "data error");
            return -1;
        }
        if (produced > 0) {
            *out = src->out;
            return (ssize_t)produced;
        }
    }
#else
    return -1; /* not reached: without zlib libarchive reads gzip itself */
#endif
}

/* The refusal of a stream that inflates past its cap (ExtractCap.stream), into src->error. */
static void source_refuse(Source *src) {
    char why[600];
    cap_describe(src->cap, why, sizeof why);
    snprintf(src->error, sizeof src->error, "refusing: the archive inflates past %" PRId64 " bytes of tar stream, "
             "twice what its members may hold (%" PRId64 " bytes, %s) plus 1 MiB", src->stream_cap, src->cap->members,
             why);
    src->over_cap = 1;
}

/* source_read, counting what it produces against the stream cap: past it, -1 with the refusal in src->error. */
static ssize_t source_next(Source *src, const void **out) {
    ssize_t n = source_read(src, out);
    if (n <= 0) return n;
    src->produced += n;
    if (src->stream_cap > 0 && src->produced > src->stream_cap) {
        source_refuse(src);
        return -1;
    }
    return n;
}

/* Consumes what libarchive did not need (tar padding, the gzip trailer) so the trailer's checks run. */
static int source_drain(Source *src) {
    if (!src->is_gzip) return 0;
    const void *chunk;
    ssize_t n;
    while ((n = source_next(src, &chunk)) > 0) {
    }
    return n < 0 ? -1 : 0;
}

/* The most specific description of a read failure: our own decompression error if there was one (libarchive
 * replaces it with a generic "truncated input"), else libarchive's. */
static const char *read_problem(struct archive *a, const Source *src, const char *fallback) {
    if (src->error[0]) return src->error;
    return archive_error_string(a) ? archive_error_string(a) : fallback;
}

/* The one line for a failed read at `where` ("in entry 'x'", ...): the refusal when the stream passed its cap (a bomb,
 * not damage), else "corrupt or truncated archive (where): problem". */
static void set_read_error(char *err, size_t errlen, const char *archive_path, struct archive *a, const Source *src,
                           const char *where, const char *fallback) {
    if (src->over_cap) set_err(err, errlen, "%s: %s", archive_path, src->error);
    else set_err(err, errlen, "%s: corrupt or truncated archive (%s): %s", archive_path, where,
                 read_problem(a, src, fallback));
}

/* Compressed bytes consumed so far, for the progress bar. */
static int64_t bytes_consumed(struct archive *a, const Source *src) {
    return src->compressed_read > 0 ? src->compressed_read : (int64_t)archive_filter_bytes(a, -1);
}

static la_ssize_t on_archive_read(struct archive *a, void *ud, const void **buf) {
    Source *src = ud;
    ssize_t n = source_next(src, buf);
    if (n < 0) archive_set_error(a, EIO, "%s", src->error);
    return n;
}

/* Skips request bytes of a plain (uncompressed) tar with a seek, so that members the filter does not take cost no
 * reading; a gzip stream cannot seek (0: libarchive then reads and discards). */
static la_int64_t on_archive_skip(struct archive *a, void *ud, la_int64_t request) {
    Source *src = ud;
    if (src->is_gzip || request <= 0) return 0;
    /* Past the stream cap: no seek, so that the reads libarchive falls back to meet the cap (source_next). */
    if (src->stream_cap > 0 && src->produced + request > src->stream_cap) return 0;
    /* Never past the end: a member cut short must still read as a truncated archive, not end it cleanly. */
    struct stat st;
    off_t at = ftello(src->fp);
    if (at < 0 || fstat(fileno(src->fp), &st) != 0 || (int64_t)at + request > (int64_t)st.st_size) return 0;
    if (fseeko(src->fp, (off_t)request, SEEK_CUR) != 0) return 0;
    src->compressed_read += request;
    src->produced += request;
    return request;
}

/* Streams the current entry into the sinks, counting all lines of the entry (for the odd-count check). */
static int stream_entry(struct archive *a, const Source *src, const char *archive_path, const char *entry, Sink *file, Sink *corpus,
                        int64_t *total_lines, int64_t *last_byte_newline, Progress *prog, char *err, size_t errlen) {
    const void *buf;
    size_t size;
    la_int64_t off;
    int64_t lines = 0;
    int ends_nl = 1;
    for (;;) {
        int rc = archive_read_data_block(a, &buf, &size, &off);
        if (rc == ARCHIVE_EOF) break;
        if (rc != ARCHIVE_OK) {
            char where[1100];
            snprintf(where, sizeof where, "in entry '%s'", entry);
            set_read_error(err, errlen, archive_path, a, src, where, "read error");
            return -1;
        }
        const char *d = buf;
        for (size_t i = 0; i < size; i++) lines += d[i] == '\n';
        if (size > 0) ends_nl = d[size - 1] == '\n';
        if (sink_write(file, d, size, err, errlen) != 0 || sink_write(corpus, d, size, err, errlen) != 0) return -1;
        progress_update(prog, bytes_consumed(a, src), NULL);
    }
    *total_lines = lines + (ends_nl ? 0 : 1);
    *last_byte_newline = ends_nl;
    return 0;
}

int dm_extract_archive(const ExtractOptions *o, ExtractResult *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    regex_t re;
    int have_filter = o->filter != NULL; /* NULL: no module files, only the tokenizer corpus */
    if (have_filter && compile_filter(o->filter, &re, err, errlen) != 0) return -1;
    if (mkdir_p(o->out_dir, err, errlen) != 0) {
        if (have_filter) regfree(&re);
        return -1;
    }
    Source *src = xcalloc(1, sizeof *src);
    struct archive *a = archive_read_new();
    CHECK_ALLOC(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    int status = -1;
    /* Names already extracted, to refuse duplicates (a later entry silently replacing an earlier one). */
    char (*seen)[520] = NULL;
    int n_seen = 0;
    Progress prog;
    progress_start(&prog, "extract", o->archive_bytes, "B");
    if (source_open(src, o->archive_path, err, errlen) != 0) goto out;
    ExtractCap cap;
    cap_init(&cap, o, src->compressed_size);
    src->cap = &cap;
    src->stream_cap = cap.stream;
#if defined(HAVE_ZLIB)
    int use_source = 1;
    archive_read_support_filter_none(a);
#else
    int use_source = !src->is_gzip;
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    if (src->is_gzip) log_warn("built without zlib: the gzip CRC of %s is not verified", o->archive_path);
#endif
    int orc = use_source ? archive_read_open2(a, src, NULL, on_archive_read, on_archive_skip, NULL)
                         : archive_read_open_filename(a, o->archive_path, 1 << 16);
    if (orc != ARCHIVE_OK) {
        set_read_error(err, errlen, o->archive_path, a, src, "before the first entry", "cannot open");
        goto out;
    }
    /* The last entry whose header was read: a corruption found while skipping an entry the filter does not take
     * (libarchive skips its data when asked for the next header) or in the gzip trailer is named "in or after" it. */
    char last_entry[1024] = "";
    int64_t total_claimed = 0; /* sum of the regular members' sizes so far */
    for (;;) {
        struct archive_entry *e;
        int rc = archive_read_next_header(a, &e);
        if (rc == ARCHIVE_EOF) break;
        if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
            char where[1100] = "at the first entry";
            if (last_entry[0]) snprintf(where, sizeof where, "in or after entry '%s'", last_entry);
            set_read_error(err, errlen, o->archive_path, a, src, where, "cannot read the next entry");
            goto out;
        }
        /* Without our own inflater (a build without zlib) libarchive's count of the stream stands in for it. */
        if (!use_source && archive_filter_bytes(a, 0) > cap.stream) {
            source_refuse(src);
            set_err(err, errlen, "%s: %s", o->archive_path, src->error);
            goto out;
        }
        const char *path = archive_entry_pathname(e);
        if (path) snprintf(last_entry, sizeof last_entry, "%s", path);
        if (!path || !path[0]) {
            set_err(err, errlen, "%s: refusing an entry with an empty or unreadable name", o->archive_path);
            goto out;
        }
        const char *why = unsafe_reason(e, path);
        if (why) {
            set_err(err, errlen, "%s: refusing unsafe entry '%s': %s", o->archive_path, path, why);
            goto out;
        }
        if (archive_entry_filetype(e) != AE_IFREG) continue; /* directories: we create our own */
        /* Bounds before writing a byte (pipeline/base/limits.h): a member whose header claims more than any module file,
         * or members adding up past what any archive of the dataset holds (a decompression bomb expands a small
         * download into all of the disk). */
        int64_t claimed = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        if (claimed < 0 || (uint64_t)claimed > LIMIT_MODULE_TEXT_BYTES) {
            set_err(err, errlen, "%s: refusing entry '%s': %" PRId64 " bytes, more than the %llu MiB a module file "
                                 "may hold", o->archive_path, path, claimed,
                    (unsigned long long)(LIMIT_MODULE_TEXT_BYTES >> 20));
            goto out;
        }
        total_claimed += claimed;
        if (total_claimed > cap.members) {
            char why[600];
            cap_describe(&cap, why, sizeof why);
            set_err(err, errlen, "%s: refusing entry '%s': the members so far expand to %" PRId64 " bytes, %s",
                    o->archive_path, path, total_claimed, why);
            goto out;
        }
        char comps[4][256];
        int nc = split_path(path, comps);
        if (nc < 0) {
            /* No file system takes a name over 255 bytes: refused (never skipped silently, whatever the filter). */
            set_err(err, errlen, "%s: refusing entry '%.300s...': a path component is over 255 bytes", o->archive_path,
                    path);
            goto out;
        }
        if (nc != 3 || strcmp(comps[0], DM_ARCHIVE_ROOT) != 0 || !known_split(comps[1])) {
            log_debug("skipping %s (not a dataset file)", path);
            continue;
        }
        const char *split = comps[1], *file = comps[2];
        size_t fl = strlen(file);
        if (fl <= 4 || strcmp(file + fl - 4, ".txt") != 0 || file[0] == '.') {
            log_debug("skipping %s (not <module>.txt)", path);
            continue;
        }
        char stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(fl - 4), file);
        int selected = have_filter && regexec(&re, stem, 0, NULL, 0) == 0;
        int for_corpus = o->corpus_pairs > 0 && strcmp(split, "train-easy") == 0;
        if (!selected && !for_corpus) continue;

        char key[520];
        snprintf(key, sizeof key, "%s/%s", split, file);
        for (int i = 0; i < n_seen; i++)
            if (strcmp(seen[i], key) == 0) {
                set_err(err, errlen, "%s: duplicate entry '%s'", o->archive_path, path);
                goto out;
            }
        seen = xrealloc(seen, (size_t)(n_seen + 1) * sizeof *seen);
        snprintf(seen[n_seen++], sizeof seen[0], "%s", key);

        Sink fsink, csink;
        memset(&fsink, 0, sizeof fsink);
        memset(&csink, 0, sizeof csink);
        /* Room for what the member's header states, once per copy written (the module file, the corpus prefix),
         * asked before a byte is written (disk_space.h). */
        char what[1200];
        snprintf(what, sizeof what, "extracting '%s' from %s", path, o->archive_path);
        if (disk_space_require(o->out_dir, claimed * (selected + for_corpus), what, err, errlen) != 0) goto out;
        char out_path[4400];
        if (selected) {
            snprintf(out_path, sizeof out_path, "%s/%s/%s/%s", o->out_dir, DM_ARCHIVE_ROOT, split, file);
            if (sink_open(&fsink, out_path, -1, err, errlen) != 0) goto out;
        }
        if (for_corpus) {
            snprintf(out_path, sizeof out_path, "%s/tokenizer_corpus/%s", o->out_dir, file);
            if (sink_open(&csink, out_path, 2 * (int64_t)o->corpus_pairs, err, errlen) != 0) {
                sink_discard(&fsink);
                goto out;
            }
        }
        int64_t lines = 0, ends_nl = 1;
        if (stream_entry(a, src, o->archive_path, path, &fsink, &csink, &lines, &ends_nl, &prog, err, errlen) != 0) {
            sink_discard(&fsink);
            sink_discard(&csink);
            goto out;
        }
        if (lines % 2 != 0) {
            /* Damage inside a gzip stream can inflate to plausible bytes that break the line structure before the
             * CRC at its end is reached: when the rest of the stream fails its checks, report that (the cause, e.g.
             * a corrupt download) rather than the symptom. */
            if (use_source && source_drain(src) != 0) {
                char where[1100];
                snprintf(where, sizeof where, "in entry '%s'", path);
                set_read_error(err, errlen, o->archive_path, a, src, where, src->error);
            } else {
                set_err(err, errlen,
                        "%s: '%s' has an odd number of lines (%" PRId64 "): questions and answers must alternate",
                        o->archive_path, path, lines);
            }
            sink_discard(&fsink);
            sink_discard(&csink);
            goto out;
        }
        ExtractedFile rec;
        memset(&rec, 0, sizeof rec);
        snprintf(rec.split, sizeof rec.split, "%.31s", split);
        snprintf(rec.file, sizeof rec.file, "%s", file);
        if (selected) {
            if (sink_close(&fsink, &rec, err, errlen) != 0) {
                sink_discard(&csink);
                goto out;
            }
            push(&r->files, &r->n_files, &rec);
        }
        if (for_corpus) {
            if (sink_close(&csink, &rec, err, errlen) != 0) goto out;
            push(&r->corpus, &r->n_corpus, &rec);
        }
    }
    if (use_source && source_drain(src) != 0) {
        char where[1100];
        snprintf(where, sizeof where, "after the last entry '%s'", last_entry);
        set_read_error(err, errlen, o->archive_path, a, src, where, src->error);
        goto out;
    }
    progress_update(&prog, bytes_consumed(a, src), NULL);
    progress_finish(&prog);
    /* Make the extracted files durable before the caller renames the tree into place. */
    int dfd = open(o->out_dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || syncfs(dfd) != 0) {
        set_err(err, errlen, "%s: cannot flush the extracted files: %s", o->out_dir, strerror(errno));
        if (dfd >= 0) close(dfd);
        goto out;
    }
    close(dfd);
    if (r->n_files > 1) qsort(r->files, (size_t)r->n_files, sizeof *r->files, cmp_file);
    if (r->n_corpus > 1) qsort(r->corpus, (size_t)r->n_corpus, sizeof *r->corpus, cmp_file);
    status = 0;
out:
    if (archive_read_free(a) != ARCHIVE_OK && status == 0) {
        set_err(err, errlen, "%s: error closing the archive", o->archive_path);
        status = -1;
    }
    source_close(src);
    free(src);
    free(seen);
    if (have_filter) regfree(&re);
    if (status != 0) dm_extract_result_free(r);
    return status;
}
