/* Logging to stderr with a program-name prefix, and the allocation helpers that die on failure. */
#include "pipeline/base/log.h"

#include <stdio.h>
#include <string.h>

static const char *g_program = "dm-math";
static int g_verbosity = 1;

void log_set_program(const char *name) { g_program = name ? name : "dm-math"; }
void log_set_verbosity(int level) { g_verbosity = level; }

/* Control characters in a message (a key or value quoted from a hostile file may hold newlines or escape sequences)
 * are written escaped, so that every message stays ONE line and cannot drive the terminal. */
static void escape_controls(const char *in, char *out, size_t cap) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < cap; p++) {
        if (*p == '\n') o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (*p == '\r') o += (size_t)snprintf(out + o, cap - o, "\\r");
        else if (*p == '\t') o += (size_t)snprintf(out + o, cap - o, "\\t");
        else if (*p < 0x20 || *p == 0x7f) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
        else out[o++] = (char)*p;
    }
    out[o] = '\0';
}

/* One complete line per call: format into a buffer first so concurrent writers do not interleave mid-line. */
static void vlog(const char *tag, const char *fmt, va_list ap) {
    char raw[4096], msg[4096];
    vsnprintf(raw, sizeof raw, fmt, ap);
    escape_controls(raw, msg, sizeof msg);
    if (tag)
        fprintf(stderr, "%s: %s: %s\n", g_program, tag, msg);
    else
        fprintf(stderr, "%s: %s\n", g_program, msg);
    fflush(stderr);
}

void log_info(const char *fmt, ...) {
    if (g_verbosity < 1) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(NULL, fmt, ap);
    va_end(ap);
}

void log_warn(const char *fmt, ...) {
    if (g_verbosity < 1) return;
    va_list ap;
    va_start(ap, fmt);
    vlog("warning", fmt, ap);
    va_end(ap);
}

void log_debug(const char *fmt, ...) {
    if (g_verbosity < 2) return;
    va_list ap;
    va_start(ap, fmt);
    vlog("debug", fmt, ap);
    va_end(ap);
}

void log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("error", fmt, ap);
    va_end(ap);
}

static bool (*g_die_hook)(void);
static void (*g_die_after)(void);

void log_set_die_hook(bool (*should_print)(void), void (*after_print)(void)) {
    g_die_hook = should_print;
    g_die_after = should_print ? after_print : NULL;
}

_Noreturn void die(const char *fmt, ...) {
    bool (*hook)(void) = g_die_hook;
    void (*after)(void) = g_die_after;
    g_die_hook = NULL;
    g_die_after = NULL;
    if (!hook || hook()) {
        va_list ap;
        va_start(ap, fmt);
        vlog("error", fmt, ap);
        va_end(ap);
    }
    if (after) after();
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    CHECK_ALLOC(p);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    CHECK_ALLOC(p);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    CHECK_ALLOC(q);
    return q;
}

char *xstrdup(const char *s) {
    char *p = strdup(s);
    CHECK_ALLOC(p);
    return p;
}

int set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
