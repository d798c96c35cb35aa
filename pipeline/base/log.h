/* Logging: one line per message on stderr, prefixed with the program name.
 * die() prints one error line and exits with status 1; it is how stages report bad input. */
#ifndef PIPELINE_LOG_H
#define PIPELINE_LOG_H

#include <errno.h>  /* CHECK_SYS uses errno and strerror */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void log_set_program(const char *name);           /* prefix, e.g. "tokenize" */
void log_set_verbosity(int level);                /* 0 quiet (errors only), 1 info (default), 2 debug */
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* "<program>: error: ..." */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* When set, die() first asks should_print whether to print its line (false: exit 1 without it), prints it or not,
 * then calls after_print (may be NULL) before exiting 1. For a data-parallel job's setup, where every rank meets the
 * same bad input and rank 0 alone says so (model/training/dist_train.h): rank 0 prints before it meets the others in
 * after_print, so no rank has exited (and made the launcher kill the job) before the line is out. die() clears the
 * hook before calling it, so a die() inside it prints. NULL removes it. */
void log_set_die_hook(bool (*should_print)(void), void (*after_print)(void));

/* Checking macros: name the call, file and line on failure, then exit(1). */
#define CHECK_ALLOC(p)                                                                                        \
    do {                                                                                                      \
        if ((p) == NULL) die("out of memory at %s:%d (%s)", __FILE__, __LINE__, #p);                        \
    } while (0)
#define CHECK_SYS(expr, what)                                                                                 \
    do {                                                                                                      \
        if ((expr) != 0) die("%s failed at %s:%d: %s", (what), __FILE__, __LINE__, strerror(errno));        \
    } while (0)

/* Writes a formatted one-line error message into a caller's buffer (the library convention: functions return -1
 * and describe the problem in err; stages print it with die("%s", err)). err may be NULL or errlen 0. Returns -1,
 * so that a failing function can end with `return set_err(err, errlen, ...)`. */
int set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* malloc/calloc/realloc that die on failure. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif
