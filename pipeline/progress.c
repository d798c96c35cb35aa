/* Progress reporting: an in-place bar on a terminal, periodic plain lines otherwise (logs, CI). */
#include "pipeline/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(Progress *p, const char *label, int64_t total, const char *unit) {
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total > 0 ? total : 0;
    p->start_s = now_seconds();
    p->last_draw_s = 0.0;
    p->plain_interval_s = 10.0;
    p->is_tty = isatty(STDERR_FILENO);
}

/* Human-readable count: bytes get binary prefixes, other units a plain integer. */
static void fmt_count(char *out, size_t n, int64_t v, const char *unit) {
    if (strcmp(unit, "B") == 0) {
        const char *pre[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double x = (double)v;
        int k = 0;
        while (x >= 1024.0 && k < 4) x /= 1024.0, k++;
        if (k == 0) snprintf(out, n, "%lld B", (long long)v);
        else snprintf(out, n, "%.1f %s", x, pre[k]);
    } else {
        snprintf(out, n, "%lld%s%s", (long long)v, unit[0] ? " " : "", unit);
    }
}

static void draw(Progress *p, double now, int final) {
    double elapsed = now - p->start_s;
    double rate = elapsed > 0 ? (double)p->done / elapsed : 0.0;
    char done_s[48], total_s[48], rate_s[48];
    fmt_count(done_s, sizeof done_s, p->done, p->unit);
    fmt_count(total_s, sizeof total_s, p->total, p->unit);
    fmt_count(rate_s, sizeof rate_s, (int64_t)rate, p->unit);
    char eta[32] = "";
    if (p->total > 0 && rate > 0 && p->done < p->total) snprintf(eta, sizeof eta, " eta %.0fs", (double)(p->total - p->done) / rate);
    if (p->is_tty) {
        char bar[31];
        int width = 30, fill = 0;
        if (p->total > 0) fill = (int)((double)width * (double)p->done / (double)p->total);
        if (fill > width) fill = width;
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : (p->total > 0 ? '.' : ' ');
        bar[width] = '\0';
        if (p->total > 0)
            fprintf(stderr, "\r\033[K%s [%s] %5.1f%% %s/%s %s/s%s %s", p->label, bar, 100.0 * (double)p->done / (double)p->total,
                    done_s, total_s, rate_s, eta, p->extra);
        else
            fprintf(stderr, "\r\033[K%s %s %s/s %s", p->label, done_s, rate_s, p->extra);
        if (final) fputc('\n', stderr);
    } else {
        if (p->total > 0)
            fprintf(stderr, "%s: %s/%s (%.1f%%) %s/s%s%s%s\n", p->label, done_s, total_s,
                    100.0 * (double)p->done / (double)p->total, rate_s, eta, p->extra[0] ? " " : "", p->extra);
        else
            fprintf(stderr, "%s: %s %s/s%s%s\n", p->label, done_s, rate_s, p->extra[0] ? " " : "", p->extra);
    }
    fflush(stderr);
    p->last_draw_s = now;
}

void progress_update(Progress *p, int64_t done, const char *extra) {
    p->done = done;
    if (extra) snprintf(p->extra, sizeof p->extra, "%s", extra);
    double now = now_seconds();
    double interval = p->is_tty ? 0.1 : (p->plain_interval_s > 0 ? p->plain_interval_s : 10.0);
    /* Plain mode waits a full interval before its first line so short tasks print only the final one. */
    double since = now - (p->last_draw_s > 0 ? p->last_draw_s : (p->is_tty ? 0.0 : p->start_s));
    if (since >= interval) draw(p, now, 0);
}

void progress_finish(Progress *p) { draw(p, now_seconds(), 1); }
