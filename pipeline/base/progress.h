/* Progress reporting: on a terminal (stderr is a tty) a bar redrawn in place at most 10 times per second;
 * otherwise one plain line every `plain_interval_s` seconds (default 10) and one at the end.
 * The rate and the time left are measured from the first progress_update, so work done before it (a resumed
 * training run's steps, a resumed download's bytes) does not inflate the rate. */
#ifndef PIPELINE_PROGRESS_H
#define PIPELINE_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char label[64];
    int64_t total;      /* 0 = unknown */
    int64_t done;
    double start_s, last_draw_s;
    double plain_interval_s;
    int is_tty;
    int has_base;       /* set by the first progress_update: the rate counts from base_done at base_s */
    int64_t base_done;
    double base_s;
    char unit[16];      /* e.g. "B", "steps" */
    char extra[128];    /* free text shown after the counts, e.g. "loss 2.31" */
} Progress;

void progress_start(Progress *p, const char *label, int64_t total, const char *unit);
void progress_update(Progress *p, int64_t done, const char *extra /* may be NULL */);
void progress_finish(Progress *p);
double now_seconds(void); /* monotonic clock */

/* A rate as people read it: "1.5 MiB/s" for bytes; "120 steps/s", "3.4 steps/s" from one per second up, below that
 * the time one unit takes: "1.3 s/step", "12 s/step", "2.5 min/step" (the unit singular: a trailing 's' dropped).
 * A rate <= 0 (nothing measured yet) is "-". */
void progress_format_rate(char *out, size_t n, double per_s, const char *unit);
/* A duration: "45 s", "12 min", "1 h 20 min" (the same wording as make reproduce's estimates). */
void progress_format_duration(char *out, size_t n, double seconds);

#endif
