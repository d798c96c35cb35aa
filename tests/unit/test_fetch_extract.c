/* Archive extraction: filter (full match), tokenizer corpus prefix, pair counting, and refusal of unsafe or
 * malformed archives and of decompression bombs. Test archives are written with libarchive's writer so every entry kind can be crafted. */
#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(HAVE_ZLIB)
#include <zlib.h>
#endif

#include "datasets/archive_extract.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256], g_tgz[512], g_out[512];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_fetch_extract.%ld", (long)getpid());
    remove_tree(g_dir);
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(g_tgz, sizeof g_tgz, "%s/a.tar.gz", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
}
static void teardown(void) { remove_tree(g_dir); }

typedef struct {
    const char *path;
    const char *data;   /* regular file contents; NULL for other kinds */
    int kind;           /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR; 1 = hard link */
    const char *target; /* link target */
} Entry;

static void write_archive(const char *path, const Entry *entries, int n, int gzip) {
    struct archive *a = archive_write_new();
    ck_assert_ptr_nonnull(a);
    archive_write_set_format_pax_restricted(a);
    if (gzip) archive_write_add_filter_gzip(a);
    ck_assert_int_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (int i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, entries[i].path);
        archive_entry_set_perm(e, 0644);
        if (entries[i].kind == 1) {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_hardlink(e, entries[i].target);
            archive_entry_set_size(e, 0);
        } else {
            archive_entry_set_filetype(e, (unsigned)entries[i].kind);
            if (entries[i].kind == AE_IFLNK) archive_entry_set_symlink(e, entries[i].target);
            if (entries[i].kind == AE_IFCHR) archive_entry_set_rdev(e, 0x0103);
            archive_entry_set_size(e, entries[i].data ? (la_int64_t)strlen(entries[i].data) : 0);
        }
        ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
        if (entries[i].data) archive_write_data(a, entries[i].data, strlen(entries[i].data));
        archive_entry_free(e);
    }
    ck_assert_int_eq(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

#define R "mathematics_dataset-v1.0/"
static const char *Q3 = "What is 1+1?\n2\nWhat is 2+2?\n4\nWhat is 3+3?\n6\n";

/* Extracts g_tgz into a fresh g_out (the extractor never writes over a file already there) with the options' caps
 * (NULL: the defaults). */
static int run_extract_with(const ExtractOptions *caps, const char *filter, long corpus_pairs, ExtractResult *r,
                            char *err, size_t errlen) {
    remove_tree(g_out);
    ExtractOptions o = {g_tgz, g_out, filter, corpus_pairs, 0, 0, 0, NULL, NULL};
    if (caps) {
        o.max_extract_bytes = caps->max_extract_bytes;
        o.max_extract_ratio = caps->max_extract_ratio;
        o.max_bytes_label = caps->max_bytes_label;
        o.max_ratio_label = caps->max_ratio_label;
    }
    return dm_extract_archive(&o, r, err, errlen);
}

static int run_extract(const char *filter, long corpus_pairs, ExtractResult *r, char *err, size_t errlen) {
    return run_extract_with(NULL, filter, corpus_pairs, r, err, errlen);
}

static char *slurp(const char *path) {
    char *d, err[256];
    size_t n;
    ck_assert_msg(read_file_all(path, &d, &n, err, sizeof err) == 0, "%s", err);
    return d;
}

START_TEST(filter_full_match_and_corpus) {
    Entry es[] = {
        {R, NULL, AE_IFDIR, NULL},
        {R "train-easy/", NULL, AE_IFDIR, NULL},
        {R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
        {R "train-easy/arithmetic__mul_big.txt", "q\na\n", AE_IFREG, NULL},
        {R "train-easy/algebra__linear_1d.txt", Q3, AE_IFREG, NULL},
        {R "train-medium/arithmetic__mul.txt", "q\na", AE_IFREG, NULL}, /* no final newline: still 1 pair */
        {R "extrapolate/arithmetic__mul_big.txt", "q\na\n", AE_IFREG, NULL},
        {R "README.txt", "not a module\n", AE_IFREG, NULL},
        {"other/train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
    };
    write_archive(g_tgz, es, 9, 1);
    ExtractResult r;
    char err[1024] = "";
    ck_assert_msg(run_extract("arithmetic__mul", 2, &r, err, sizeof err) == 0, "%s", err);
    /* "arithmetic__mul" fully matches only arithmetic__mul, not arithmetic__mul_big. */
    ck_assert_int_eq(r.n_files, 2);
    ck_assert_str_eq(r.files[0].split, "train-easy");
    ck_assert_str_eq(r.files[0].file, "arithmetic__mul.txt");
    ck_assert_int_eq(r.files[0].pairs, 3);
    ck_assert_int_eq(r.files[0].bytes, (int64_t)strlen(Q3));
    char hex[65];
    sha256_hex(Q3, strlen(Q3), hex);
    ck_assert_str_eq(r.files[0].sha256, hex);
    ck_assert_str_eq(r.files[1].split, "train-medium");
    ck_assert_int_eq(r.files[1].pairs, 1);
    ck_assert_int_eq(r.files[1].bytes, 4); /* newline added */
    /* Corpus: every train-easy file regardless of the filter, first 2 pairs, sorted by name. */
    ck_assert_int_eq(r.n_corpus, 3);
    ck_assert_str_eq(r.corpus[0].file, "algebra__linear_1d.txt");
    ck_assert_str_eq(r.corpus[1].file, "arithmetic__mul.txt");
    ck_assert_str_eq(r.corpus[2].file, "arithmetic__mul_big.txt");
    ck_assert_int_eq(r.corpus[0].pairs, 2);
    ck_assert_int_eq(r.corpus[2].pairs, 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_corpus/algebra__linear_1d.txt", g_out);
    char *c = slurp(path);
    ck_assert_str_eq(c, "What is 1+1?\n2\nWhat is 2+2?\n4\n");
    sha256_hex(c, strlen(c), hex);
    ck_assert_str_eq(r.corpus[0].sha256, hex);
    free(c);
    snprintf(path, sizeof path, "%s/" R "train-easy/arithmetic__mul.txt", g_out);
    c = slurp(path);
    ck_assert_str_eq(c, Q3);
    free(c);
    snprintf(path, sizeof path, "%s/" R "train-easy/algebra__linear_1d.txt", g_out);
    ck_assert(!file_exists(path));
    snprintf(path, sizeof path, "%s/" R "README.txt", g_out);
    ck_assert(!file_exists(path));
    dm_extract_result_free(&r);
}
END_TEST

/* A NULL filter extracts no module file, only the tokenizer corpus (fetch --tokenizer-corpus-source's second
 * archive). */
START_TEST(null_filter_corpus_only) {
    Entry es[] = {
        {R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
        {R "train-easy/algebra__linear_1d.txt", Q3, AE_IFREG, NULL},
        {R "interpolate/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
    };
    write_archive(g_tgz, es, 3, 1);
    ExtractResult r;
    char err[1024] = "";
    ck_assert_msg(run_extract(NULL, 1, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.n_files, 0);
    ck_assert_int_eq(r.n_corpus, 2);
    ck_assert_str_eq(r.corpus[0].file, "algebra__linear_1d.txt");
    ck_assert_int_eq(r.corpus[0].pairs, 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/" R, g_out);
    ck_assert(!file_exists(path));
    snprintf(path, sizeof path, "%s/tokenizer_corpus/arithmetic__mul.txt", g_out);
    char *c = slurp(path);
    ck_assert_str_eq(c, "What is 1+1?\n2\n");
    free(c);
    dm_extract_result_free(&r);
}
END_TEST

START_TEST(plain_tar_and_regex_alternation) {
    Entry es[] = {
        {R "interpolate/arithmetic__div.txt", Q3, AE_IFREG, NULL},
        {R "interpolate/numbers__gcd.txt", Q3, AE_IFREG, NULL},
        {R "interpolate/numbers__lcm.txt", Q3, AE_IFREG, NULL},
    };
    write_archive(g_tgz, es, 3, 0); /* uncompressed tar under a .gz name: detected by content */
    ExtractResult r;
    char err[1024] = "";
    ck_assert_msg(run_extract("numbers__gcd|arithmetic__.*", 0, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.n_files, 2);
    ck_assert_str_eq(r.files[0].file, "arithmetic__div.txt");
    ck_assert_str_eq(r.files[1].file, "numbers__gcd.txt");
    ck_assert_int_eq(r.n_corpus, 0);
    dm_extract_result_free(&r);
}
END_TEST

static void expect_refused(const Entry *es, int n, const char *needle) {
    write_archive(g_tgz, es, n, 1);
    ExtractResult r;
    char err[1024] = "";
    ck_assert_int_eq(run_extract(".*", 10, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, needle) != NULL, "expected '%s' in: %s", needle, err);
    ck_assert_msg(strstr(err, g_tgz) != NULL, "archive path missing in: %s", err);
}

START_TEST(unsafe_entries_refused) {
    Entry dotdot[] = {{R "train-easy/../../evil.txt", "q\na\n", AE_IFREG, NULL}};
    expect_refused(dotdot, 1, "refusing unsafe entry '" R "train-easy/../../evil.txt': '..' path component");
    Entry abs[] = {{"/tmp/evil.txt", "q\na\n", AE_IFREG, NULL}};
    expect_refused(abs, 1, "absolute path");
    Entry sym[] = {{R "train-easy/arithmetic__mul.txt", NULL, AE_IFLNK, "/etc/passwd"}};
    expect_refused(sym, 1, "symbolic link");
    Entry hard[] = {{R "train-easy/a__b.txt", "q\na\n", AE_IFREG, NULL}, {R "train-easy/a__c.txt", NULL, 1, R "train-easy/a__b.txt"}};
    expect_refused(hard, 2, "hard link");
    Entry dev[] = {{R "train-easy/null", NULL, AE_IFCHR, NULL}};
    expect_refused(dev, 1, "device file");
    /* Unsafe entries are refused even when the filter would not select them. */
    Entry hidden[] = {{R "extrapolate/numbers__x.txt", "q\na\n", AE_IFREG, NULL}, {"../outside", "x\n", AE_IFREG, NULL}};
    expect_refused(hidden, 2, "'..' path component");
    char evil[300];
    snprintf(evil, sizeof evil, "%s/evil.txt", g_dir);
    ck_assert(!file_exists(evil));
}
END_TEST

START_TEST(malformed_content_refused) {
    Entry odd[] = {{R "train-easy/arithmetic__mul.txt", "q\na\nq2\n", AE_IFREG, NULL}};
    expect_refused(odd, 1, "'" R "train-easy/arithmetic__mul.txt' has an odd number of lines (3)");
    Entry dup[] = {{R "train-easy/arithmetic__mul.txt", "q\na\n", AE_IFREG, NULL},
                   {R "train-easy/arithmetic__mul.txt", "q\na\n", AE_IFREG, NULL}};
    expect_refused(dup, 2, "duplicate entry");
}
END_TEST

START_TEST(corrupt_and_truncated_refused) {
    Entry es[] = {{R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
                  {R "train-hard/arithmetic__mul.txt", Q3, AE_IFREG, NULL}};
    write_archive(g_tgz, es, 2, 1);
    char *data, err[1024] = "";
    size_t n;
    ck_assert_int_eq(read_file_all(g_tgz, &data, &n, err, sizeof err), 0);
    /* Truncated: drop the gzip trailer (CRC and length). */
    ck_assert_int_eq(write_file_atomic(g_tgz, data, n - 8, err, sizeof err), 0);
    ExtractResult r;
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "corrupt or truncated archive"), "%s", err);
    /* A damaged CRC: the content inflates fine, only the trailer check can catch it (needs zlib). */
    data[n - 6] ^= 0x55;
    ck_assert_int_eq(write_file_atomic(g_tgz, data, n, err, sizeof err), 0);
#if defined(HAVE_ZLIB)
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "corrupt or truncated archive") && strstr(err, "incorrect data check"), "%s", err);
#endif
    /* Half the file. */
    data[n - 6] ^= 0x55;
    ck_assert_int_eq(write_file_atomic(g_tgz, data, n / 2, err, sizeof err), 0);
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "corrupt or truncated archive"), "%s", err);
    /* Not an archive at all. */
    ck_assert_int_eq(write_file_atomic(g_tgz, "hello world, not a tar\n", 23, err, sizeof err), 0);
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, g_tgz), "%s", err);
    /* The intact archive still extracts. */
    ck_assert_int_eq(write_file_atomic(g_tgz, data, n, err, sizeof err), 0);
    ck_assert_msg(run_extract(".*", 0, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.n_files, 2);
    dm_extract_result_free(&r);
    free(data);
}
END_TEST

/* A truncation inside an entry the filter does not take (its data is skipped, not read) is named by that entry, so
 * that the error says where the damage is also with the default filter. */
START_TEST(truncation_in_skipped_entry_names_it) {
    size_t big_n = 256u << 10;
    char *big = malloc(big_n + 1);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < big_n; i += 4) memcpy(big + i, "q\na\n", 4);
    big[big_n] = '\0';
    Entry es[] = {{R "train-easy/algebra__linear_1d.txt", big, AE_IFREG, NULL},
                  {R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL}};
    char tar_path[600], *tar, err[1024] = "";
    size_t n;
    snprintf(tar_path, sizeof tar_path, "%s/a.tar", g_dir);
    write_archive(tar_path, es, 2, 0);
    free(big);
    ck_assert_int_eq(read_file_all(tar_path, &tar, &n, err, sizeof err), 0);
    ck_assert_int_eq(write_file_atomic(g_tgz, tar, n / 2, err, sizeof err), 0); /* cut inside algebra's data */
    free(tar);
    ExtractResult r;
    ck_assert_int_eq(run_extract("arithmetic__.*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "corrupt or truncated archive") &&
                      strstr(err, "entry '" R "train-easy/algebra__linear_1d.txt'"), "%s", err);
}
END_TEST

/* A member name with a component over 255 bytes (no file system takes it) is refused, naming the entry, whether or
 * not the filter would take it: never skipped silently. */
START_TEST(overlong_name_refused) {
    char name[600], body[300];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    const char *stems[] = {"arithmetic__", "algebra__"}; /* taken and not taken by the default filter */
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, R "train-easy/%s%s.txt", stems[i], body);
        Entry es[] = {{R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL}, {name, Q3, AE_IFREG, NULL}};
        write_archive(g_tgz, es, 2, 1);
        char err[1024] = "";
        ExtractResult r;
        ck_assert_int_eq(run_extract("arithmetic__.*", 0, &r, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "refusing entry '" R "train-easy/") && strstr(err, "over 255 bytes"), "%s", err);
    }
}
END_TEST

/* A plain tar written by hand: one ustar header per member, whose data is a hole (lseek), so members can claim
 * gigabytes in a sparse file that costs no disk. */
static void write_sparse_tar(const char *path, const char *const *names, const long long *sizes, int n) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ck_assert_int_ge(fd, 0);
    off_t at = 0;
    for (int i = 0; i < n; i++) {
        unsigned char h[512];
        memset(h, 0, sizeof h);
        snprintf((char *)h, 100, "%s", names[i]);
        memcpy(h + 100, "0000644", 8);
        memcpy(h + 108, "0000000", 8);
        memcpy(h + 116, "0000000", 8);
        snprintf((char *)h + 124, 12, "%011llo", sizes[i]);
        memcpy(h + 136, "00000000000", 12);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int k = 0; k < 512; k++) sum += h[k];
        snprintf((char *)h + 148, 8, "%06o", sum);
        ck_assert_int_eq(pwrite(fd, h, 512, at), 512);
        at += 512 + (off_t)((sizes[i] + 511) / 512 * 512);
    }
    unsigned char zero[1024] = {0};
    ck_assert_int_eq(pwrite(fd, zero, sizeof zero, at), (ssize_t)sizeof zero);
    close(fd);
}

/* A member whose header claims more than any module file (5 GiB), and members that together claim more than the
 * extraction cap (22 x 3 GiB against the default 16 GiB, a bomb's shape; a plain tar, so the ratio allows all of
 * it): refused at the header, naming the entry and the bound, before anything is written. */
START_TEST(huge_members_and_bombs_refused) {
    const char *one[] = {R "train-easy/arithmetic__mul.txt"};
    const long long five_gib[] = {5ll << 30};
    write_sparse_tar(g_tgz, one, five_gib, 1);
    char err[1024] = "";
    ExtractResult r;
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "refusing entry '" R "train-easy/arithmetic__mul.txt': 5368709120 bytes, more than the "
                              "4096 MiB a module file may hold"), "%s", err);
    enum { N = 22 };
    char names[N][64];
    const char *name_ptrs[N];
    long long sizes[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "junk/part%02d", i);
        name_ptrs[i] = names[i];
        sizes[i] = 3ll << 30;
    }
    write_sparse_tar(g_tgz, name_ptrs, sizes, N);
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "refusing entry 'junk/part05': the members so far expand to 19327352832 bytes, more "
                              "than the extraction cap of 17179869184 bytes (--max-extract-bytes)"), "%s", err);
}
END_TEST

#if defined(HAVE_ZLIB)
/* One gzip member holding data[n] (gzip streams may be concatenated: a reader inflates them as one). */
static unsigned char *gzip_member(const void *data, size_t n, size_t *out_n) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&zs, (uLong)n);
    unsigned char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    zs.next_in = (unsigned char *)data;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
    *out_n = cap - zs.avail_out;
    deflateEnd(&zs);
    return out;
}

/* A ustar header block for a regular member of `size` bytes (the format of write_sparse_tar). */
static void ustar_header(unsigned char h[512], const char *name, long long size) {
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011llo", size);
    memcpy(h + 136, "00000000000", 12);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < 512; k++) sum += h[k];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A gzip bomb built without compressing its bulk: the tar (header of `name` claiming `claim` bytes, unless name is
 * NULL: then a small valid archive ending in its end-of-archive blocks) as one gzip member, then `mib` members of
 * 1 MiB each of "What's 1 + 1?\n2\n" lines (the same few kilobytes repeated), then the end-of-archive blocks. */
static void write_bomb(const char *path, const char *name, long long claim, int mib) {
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    unsigned char tar[3 * 512];
    size_t tar_n;
    if (name) {
        ustar_header(tar, name, claim);
        tar_n = 512;
    } else {
        ustar_header(tar, R "train-easy/arithmetic__mul.txt", 16);
        memset(tar + 512, 0, 1024);
        memcpy(tar + 512, "What's 1 + 1?\n2\n", 16);
        tar_n = 3 * 512; /* header, data block, then one of the two end blocks (the other follows below) */
    }
    size_t n;
    unsigned char *m = gzip_member(tar, tar_n, &n);
    ck_assert_uint_eq(fwrite(m, 1, n, fp), n);
    free(m);
    enum { CHUNK = 1 << 20 };
    char *lines = malloc(CHUNK);
    ck_assert_ptr_nonnull(lines);
    for (size_t i = 0; i < CHUNK; i += 16) memcpy(lines + i, "What's 1 + 1?\n2\n", 16);
    if (!name) memset(lines, 0, CHUNK); /* after the end of the tar: zeros (more end blocks, then padding) */
    m = gzip_member(lines, CHUNK, &n);
    for (int i = 0; i < mib; i++) ck_assert_uint_eq(fwrite(m, 1, n, fp), n);
    free(m);
    free(lines);
    unsigned char end[1024] = {0};
    m = gzip_member(end, sizeof end, &n);
    ck_assert_uint_eq(fwrite(m, 1, n, fp), n);
    free(m);
    ck_assert_int_eq(fclose(fp), 0);
}

/* A gzip bomb (200 MiB of question/answer lines in a member of a ~200 KB archive): refused at the member's header by
 * the default ratio cap, before a byte of it is written; with a higher ratio the byte cap set by the caller refuses
 * it, naming the setting given; within both caps it extracts. */
START_TEST(gzip_bomb_refused_by_ratio_and_cap) {
    const char *name = R "train-easy/arithmetic__mul.txt";
    write_bomb(g_tgz, name, 200ll << 20, 200);
    struct stat st;
    ck_assert_int_eq(stat(g_tgz, &st), 0);
    ck_assert_int_lt(st.st_size, 1 << 20);
    char err[2048] = "", want[1024];
    ExtractResult r;
    ck_assert_int_eq(run_extract(".*", 10, &r, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: refusing entry '%s': the members so far expand to %lld bytes, more than 20 times "
             "the archive's %lld bytes (--max-extract-ratio", g_tgz, name, 200ll << 20, (long long)st.st_size);
    ck_assert_msg(strstr(err, want) == err && strstr(err, "a decompression bomb"), "%s", err);
    char path[700];
    snprintf(path, sizeof path, "%s/" R "train-easy/arithmetic__mul.txt", g_out);
    ck_assert(!file_exists(path)); /* nothing of it written */
    snprintf(path, sizeof path, "%s/tokenizer_corpus/arithmetic__mul.txt", g_out);
    ck_assert(!file_exists(path));

    ExtractOptions caps = {0};
    caps.max_extract_ratio = 100000;
    caps.max_extract_bytes = 8 << 20;
    caps.max_bytes_label = "x/data.json: fetch.max_extract_bytes";
    ck_assert_int_eq(run_extract_with(&caps, ".*", 10, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "the members so far expand to 209715200 bytes, more than the extraction cap of 8388608 "
                              "bytes (x/data.json: fetch.max_extract_bytes)"), "%s", err);

    write_bomb(g_tgz, name, 4 << 20, 4); /* 4 MiB: under both caps */
    caps.max_extract_bytes = 0;
    ck_assert_msg(run_extract_with(&caps, ".*", 10, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.n_files, 1);
    ck_assert_int_eq(r.files[0].pairs, (4 << 20) / 16);
    dm_extract_result_free(&r);
}
END_TEST

/* What the members' headers do not claim still counts: a small valid tar followed, inside the gzip stream, by 200 MiB
 * of zeros (read only to check the gzip trailer) is refused once the stream passes twice the cap plus 1 MiB. */
START_TEST(inflated_stream_capped) {
    write_bomb(g_tgz, NULL, 0, 200);
    char err[2048] = "";
    ExtractResult r;
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "refusing: the archive inflates past 135266304 bytes of tar stream, twice what its "
                              "members may hold (67108864 bytes"), "%s", err);
    ck_assert_msg(!strstr(err, "corrupt"), "%s", err);
    ExtractOptions caps = {0};
    caps.max_extract_ratio = 100000; /* 200 MiB of stream is within twice a cap of 20 GB */
    ck_assert_msg(run_extract_with(&caps, ".*", 0, &r, err, sizeof err) == 0, "%s", err);
    dm_extract_result_free(&r);
}
END_TEST
#endif

/* An output path inside out_dir that already holds something (a symbolic link planted there) is refused, never
 * followed: the link's target keeps its content. */
START_TEST(planted_link_not_followed) {
    Entry es[] = {{R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL}};
    write_archive(g_tgz, es, 1, 1);
    char victim[600], link_path[700], err[1024] = "";
    snprintf(victim, sizeof victim, "%s/victim.txt", g_dir);
    ck_assert_int_eq(write_file_atomic(victim, "keep", 4, err, sizeof err), 0);
    snprintf(link_path, sizeof link_path, "%s/" R "train-easy", g_out);
    ck_assert_int_eq(mkdir_p(link_path, err, sizeof err), 0);
    snprintf(link_path, sizeof link_path, "%s/" R "train-easy/arithmetic__mul.txt", g_out);
    ck_assert_int_eq(symlink(victim, link_path), 0);
    ExtractOptions o = {g_tgz, g_out, ".*", 0, 0, 0, 0, NULL, NULL};
    ExtractResult r;
    ck_assert_int_eq(dm_extract_archive(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "arithmetic__mul.txt: cannot create: File exists"), "%s", err);
    char *c = slurp(victim);
    ck_assert_str_eq(c, "keep");
    free(c);
}
END_TEST

#if defined(HAVE_ZLIB)
/* Damage that still inflates and breaks a file's line structure (here a newline turned into a space inside a
 * stored, i.e. uncompressed, gzip block) is reported as a corrupt archive (the CRC check fails), not as a malformed
 * module file. */
START_TEST(corruption_reported_before_line_structure) {
    /* A large entry after the damaged one keeps the gzip trailer (and its CRC) far beyond what is read ahead. */
    size_t big_n = 4u << 20;
    char *big = malloc(big_n + 1);
    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < big_n; i += 4) memcpy(big + i, "q\na\n", 4);
    big[big_n] = '\0';
    Entry es[] = {{R "train-easy/arithmetic__mul.txt", Q3, AE_IFREG, NULL},
                  {R "train-easy/arithmetic__add.txt", big, AE_IFREG, NULL}};
    char tar_path[600], *tar, err[1024] = "";
    size_t n;
    snprintf(tar_path, sizeof tar_path, "%s/a.tar", g_dir);
    write_archive(tar_path, es, 2, 0);
    free(big);
    ck_assert_int_eq(read_file_all(tar_path, &tar, &n, err, sizeof err), 0);
    gzFile gz = gzopen(g_tgz, "wb0"); /* level 0: the tar bytes appear verbatim in the .gz */
    ck_assert_ptr_nonnull(gz);
    ck_assert_int_eq(gzwrite(gz, tar, (unsigned)n), (int)n);
    ck_assert_int_eq(gzclose(gz), Z_OK);
    free(tar);
    char *gzdata;
    ck_assert_int_eq(read_file_all(g_tgz, &gzdata, &n, err, sizeof err), 0);
    char *hit = memmem(gzdata, n, "What is 2+2?\n", 13);
    ck_assert_ptr_nonnull(hit);
    ExtractResult r;
    ck_assert_msg(run_extract(".*", 0, &r, err, sizeof err) == 0, "%s", err); /* intact: extracts */
    dm_extract_result_free(&r);
    hit[12] = ' '; /* 5 lines instead of 6 */
    ck_assert_int_eq(write_file_atomic(g_tgz, gzdata, n, err, sizeof err), 0);
    free(gzdata);
    ck_assert_int_eq(run_extract(".*", 0, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "corrupt or truncated archive") && strstr(err, "incorrect data check"), "%s", err);
}
END_TEST
#endif

START_TEST(filter_matching) {
    char err[256];
    ck_assert_int_eq(dm_filter_matches("arithmetic__.*", "arithmetic__mul", err, sizeof err), 1);
    ck_assert_int_eq(dm_filter_matches("arithmetic__.*", "xarithmetic__mul", err, sizeof err), 0);
    ck_assert_int_eq(dm_filter_matches("arithmetic__mul", "arithmetic__mul_big", err, sizeof err), 0);
    ck_assert_int_eq(dm_filter_matches("a|b", "ab", err, sizeof err), 0);
    ck_assert_int_eq(dm_filter_matches("a|b", "b", err, sizeof err), 1);
    ck_assert_int_eq(dm_filter_matches("(", "x", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "invalid --filter '('"), "%s", err);
    /* Stacked repetitions (found by fuzzing: regcomp took over 2 GiB) are refused before regcomp sees them; a few
     * plain ones are fine. */
    char bomb[128] = "ar";
    for (int i = 0; i < 70; i++) strcat(bomb, "+");
    strcat(bomb, "ithmetic__.*");
    char big_err[512];
    ck_assert_int_eq(dm_filter_matches(bomb, "arithmetic__mul", big_err, sizeof big_err), -1);
    ck_assert_msg(strstr(big_err, "a repetition ('*', '+', '?') applied to a repetition at character 4"), "%s",
                  big_err);
    ck_assert_int_eq(dm_filter_matches("(a{99}){99}", "a", big_err, sizeof big_err), -1);
    ck_assert_msg(strstr(big_err, "counted repetition"), "%s", big_err);
    /* 36 stacked '*' (regcomp took minutes) and a repeated group holding a repetition (8 deep: 6 minutes). */
    ck_assert_int_eq(dm_filter_matches("l************************************_.*", "l_x", big_err, sizeof big_err), -1);
    ck_assert_int_eq(dm_filter_matches("((a*)+)*", "a", big_err, sizeof big_err), -1);
    ck_assert_msg(strstr(big_err, "applied to a repetition at character 6"), "%s", big_err);
    ck_assert_int_eq(dm_filter_matches("(x.*)?", "x", big_err, sizeof big_err), -1);
    /* Literal '*' and '+' inside a bracket expression or escaped are not repetitions. */
    ck_assert_int_eq(dm_filter_matches("a[*+]*b\\+", "a*+b+", err, sizeof err), 1);
    ck_assert_int_eq(dm_filter_matches("(add|mul)*_.*", "addmul_x", err, sizeof err), 1);
    ck_assert_int_eq(dm_filter_matches("arithmetic__(add|mul)+(_big)?", "arithmetic__mul_big", err, sizeof err), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fetch_extract");
    TCase *tc = tcase_create("extract");
    tcase_add_checked_fixture(tc, setup, teardown);
    /* The bomb tests write and inflate a few hundred MiB: seconds on an idle core, several times that on a loaded
     * 2-core machine, past Check's default 4 s. The timeout only guards against a hang (CK_TIMEOUT_MULTIPLIER still
     * scales it). */
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, filter_full_match_and_corpus);
    tcase_add_test(tc, null_filter_corpus_only);
    tcase_add_test(tc, plain_tar_and_regex_alternation);
    tcase_add_test(tc, unsafe_entries_refused);
    tcase_add_test(tc, malformed_content_refused);
    tcase_add_test(tc, corrupt_and_truncated_refused);
    tcase_add_test(tc, truncation_in_skipped_entry_names_it);
    tcase_add_test(tc, overlong_name_refused);
    tcase_add_test(tc, huge_members_and_bombs_refused);
    tcase_add_test(tc, planted_link_not_followed);
    tcase_add_test(tc, filter_matching);
#if defined(HAVE_ZLIB)
    tcase_add_test(tc, corruption_reported_before_line_structure);
    tcase_add_test(tc, gzip_bomb_refused_by_ratio_and_cap);
    tcase_add_test(tc, inflated_stream_capped);
#endif
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
