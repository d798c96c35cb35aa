/* Progress reporting: on a terminal (stderr is a tty) a bar redrawn in place at most 10 times per second;
 * otherwise one plain line every `plain_interval_s` seconds (default 10) and one at the end. */
#ifndef PIPELINE_PROGRESS_H
#define PIPELINE_PROGRESS_H

#include <stdint.h>

typedef struct {
    char label[64];
    int64_t total;      /* 0 = unknown */
    int64_t done;
    double start_s, last_draw_s;
    double plain_interval_s;
    int is_tty;
    char unit[16];      /* e.g. "B", "steps" */
    char extra[128];    /* free text shown after the counts, e.g. "loss 2.31" */
} Progress;

void progress_start(Progress *p, const char *label, int64_t total, const char *unit);
void progress_update(Progress *p, int64_t done, const char *extra /* may be NULL */);
void progress_finish(Progress *p);
double now_seconds(void); /* monotonic clock */

#endif
