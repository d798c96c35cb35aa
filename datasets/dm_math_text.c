/* DM-math text files: read, validate line by line, list a split directory, build tokenizer-training sentences. */
#include "datasets/dm_math_text.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

void dm_file_free(DmFile *f) {
    free(f->path);
    free(f->name);
    free(f->module);
    free(f->buf);
    free(f->lines);
    memset(f, 0, sizeof *f);
}

/* Checks one line (without its newline) and returns 0 or -1 with the message. */
static int check_line(const char *path, int64_t lineno, const char *s, size_t n, char *err, size_t errlen) {
    if (n > DM_MAX_LINE_BYTES) {
        set_err(err, errlen, "%s:%lld: line is %zu bytes, over the limit of %d", path, (long long)lineno, n,
                DM_MAX_LINE_BYTES);
        return -1;
    }
    int blank = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            set_err(err, errlen, "%s:%lld: non-ASCII byte 0x%02X at column %zu", path, (long long)lineno, c, i + 1);
            return -1;
        }
        if ((c < 0x20 && c != '\t') || c == 0x7F) {
            set_err(err, errlen, "%s:%lld: control character 0x%02X at column %zu", path, (long long)lineno, c, i + 1);
            return -1;
        }
        if (c != ' ' && c != '\t') blank = 0;
    }
    if (blank) {
        set_err(err, errlen, "%s:%lld: empty %s line", path, (long long)lineno, lineno % 2 ? "question" : "answer");
        return -1;
    }
    return 0;
}

int dm_file_read(DmFile *f, const char *path, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    char *buf = NULL;
    size_t size = 0;
    if (read_file_limited(path, LIMIT_MODULE_TEXT_BYTES, "module text file", &buf, &size, err, errlen) != 0) return -1;
    if (size == 0) {
        set_err(err, errlen, "%s:1: empty file", path);
        free(buf);
        return -1;
    }
    char sha[65];
    sha256_hex(buf, size, sha); /* before the newlines are overwritten with NULs */
    int64_t n_lines = 0;
    for (size_t i = 0; i < size; i++) n_lines += buf[i] == '\n';
    if (buf[size - 1] != '\n') n_lines++; /* last line without a newline */
    char **lines = malloc((size_t)n_lines * sizeof *lines);
    if (!lines) {
        set_err(err, errlen, "%s: out of memory", path);
        free(buf);
        return -1;
    }
    int64_t k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && buf[i] != '\n') continue;
        if (i == size && start == size) break; /* the file ended with a newline */
        if (check_line(path, k + 1, buf + start, i - start, err, errlen) != 0) {
            free(lines);
            free(buf);
            return -1;
        }
        buf[i] = '\0';
        lines[k++] = buf + start;
        start = i + 1;
    }
    if (k % 2 != 0) {
        set_err(err, errlen, "%s:%lld: odd number of lines (%lld): the last question has no answer", path,
                (long long)k, (long long)k);
        free(lines);
        free(buf);
        return -1;
    }
    memcpy(f->sha256, sha, sizeof sha);
    f->buf = buf;
    f->size = size;
    f->lines = lines;
    f->n_pairs = k / 2;
    f->path = xstrdup(path);
    const char *slash = strrchr(path, '/');
    f->name = xstrdup(slash ? slash + 1 : path);
    size_t nl = strlen(f->name);
    f->module = xstrdup(f->name);
    if (nl > 4 && strcmp(f->name + nl - 4, ".txt") == 0) f->module[nl - 4] = '\0';
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int dm_list_txt(const char *dir, char ***names, char *err, size_t errlen) {
    *names = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        set_err(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len <= 4 || strcmp(e->d_name + len - 4, ".txt") != 0) continue;
        char full[4096];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            v = xrealloc(v, (size_t)cap * sizeof *v);
        }
        v[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    return n;
}

void dm_free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int is_alnum_ascii(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
static int is_space_ascii(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

char *dm_space_separate(const char *s) {
    size_t n = strlen(s);
    char *out = xmalloc(3 * n + 1);
    size_t o = 0;
    int pending_space = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_space_ascii(c)) {
            pending_space = 1;
            continue;
        }
        int punct = !is_alnum_ascii(c);
        if ((pending_space || punct) && o > 0) out[o++] = ' ';
        out[o++] = (char)c;
        pending_space = punct;
    }
    out[o] = '\0';
    return out;
}

char *dm_corpus_sentence(const char *q, const char *a) {
    char *qs = dm_space_separate(q), *as = dm_space_separate(a);
    size_t n = strlen(qs) + strlen(as) + 16;
    char *out = xmalloc(n);
    snprintf(out, n, "Q: %s A: %s ", qs, as);
    free(qs);
    free(as);
    return out;
}
